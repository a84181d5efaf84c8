//! `gateway` in the config: the client profiles of `mcp-harness serve` over HTTP — how each
//! client proves who it is, what it may see, and its own permission rules.
//!
//! Invariants: a parsed [`GatewayConfig`] names every problem by its key
//! (`gateway.clients.NAME.auth.issuer`, ...); no token value is ever held here (a bearer
//! profile names the environment variable that holds it, read by the gateway when it starts),
//! so printing a config prints no secret.

use std::collections::BTreeMap;

use mcp_harness_policy::{NameFilter, PatternKind, PermissionRules};
use serde::Deserialize;

/// The `gateway` section.
#[derive(Debug, Clone, Default)]
pub struct GatewayConfig {
    /// `publicUrl`: the gateway's own URL as clients reach it (the `/mcp` endpoint): the
    /// audience an access token must name and the `resource` of the protected-resource
    /// metadata. Default: the URL it serves (`http://ADDR/mcp`).
    pub public_url: Option<String>,
    /// `clients`: the client profiles by name, in name order. Empty (the default): no client
    /// authentication, every client sees the whole catalog.
    pub clients: BTreeMap<String, ClientProfile>,
    /// `sessionKeys`: the keys that seal the HTTP gateway's session ids (comma-separated
    /// base64 32-byte keys; the first seals, all open), `${VAR}` expanded — write `"${VAR}"`
    /// so the keys stay out of the file. Empty after expansion (`"${VAR:-}"` with `VAR`
    /// unset): none. The environment variable `MCP_HARNESS_SESSION_KEYS`, when set, wins.
    pub session_keys: Option<SecretText>,
}

/// A secret read from the config (after `${VAR}` expansion): never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(String);

impl SecretText {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself (to use it, never to print it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(<redacted>)")
    }
}

/// One client profile (`gateway.clients.NAME`).
#[derive(Debug, Clone)]
pub struct ClientProfile {
    /// The profile's name (its key); metrics and the audit log name the client by it.
    pub name: String,
    /// `auth`: how the client proves who it is.
    pub auth: ProfileAuth,
    /// `servers`: `{"allow": [...], "deny": [...]}` globs over server names; default all.
    pub servers: NameFilter,
    /// `tools`: globs over qualified tool names (`mcp__SERVER__tool`); default all.
    pub tools: NameFilter,
    /// `prompts`: globs over qualified prompt names; default all.
    pub prompts: NameFilter,
    /// `resources`: globs over resource URIs and URI templates (`*` within a `/` segment);
    /// default all.
    pub resources: NameFilter,
    /// `permissions`: this client's own rules, the shape of the top-level `permissions`. A
    /// matching `deny` refuses, `ask` asks this client; `allow` answers the top-level rules'
    /// *ask* for this client. A top-level `deny` holds for every client. Default: none.
    pub permissions: PermissionRules,
    /// `maxSessions`: at most this many sessions of this profile open on a replica at once (a
    /// new one beyond gets 429), so one client cannot take every session of `--max-sessions`.
    /// Default: no limit of its own.
    pub max_sessions: Option<usize>,
}

/// How a client proves who it is (`gateway.clients.NAME.auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileAuth {
    /// `{"type": "bearer", "tokenEnv": "VAR"}`: a static bearer token, the value of the
    /// environment variable `VAR` of the gateway's process.
    Bearer {
        /// The environment variable's name.
        token_env: String,
    },
    /// `{"type": "oauth", "issuer": ..., "jwksUri": ..., "scopes": [...], "clientIds": [...]}`:
    /// an OAuth 2.1 access token, a JWT signed by a key of `jwksUri`, with `iss` = `issuer`,
    /// `aud` = the gateway's public URL, not expired, and every scope of `scopes`.
    OAuth {
        /// `issuer`: the authorization server's issuer identifier (the `iss` claim).
        issuer: String,
        /// `jwksUri`: where the authorization server publishes its signing keys.
        jwks_uri: String,
        /// `scopes`: scopes the token must carry (`scope` or `scp` claim); default none.
        scopes: Vec<String>,
        /// `clientIds`: when set, the token's `client_id` (or `azp`) must be one of these; it
        /// tells apart profiles of the same issuer. Default: any client.
        client_ids: Option<Vec<String>>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawGateway {
    public_url: Option<String>,
    #[serde(default)]
    clients: BTreeMap<String, serde_json::Value>,
    session_keys: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProfile {
    auth: serde_json::Value,
    servers: Option<RawFilter>,
    tools: Option<RawFilter>,
    prompts: Option<RawFilter>,
    resources: Option<RawFilter>,
    permissions: Option<serde_json::Value>,
    max_sessions: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAuth {
    #[serde(rename = "type")]
    kind: String,
    token_env: Option<String>,
    issuer: Option<String>,
    jwks_uri: Option<String>,
    scopes: Option<Vec<String>>,
    client_ids: Option<Vec<String>>,
}

/// Parses the `gateway` section: `Err((key, message))`, the key under `gateway` that is wrong.
pub(crate) fn parse(
    value: serde_json::Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<GatewayConfig, (String, String)> {
    let raw: RawGateway =
        super::decode(value, "").map_err(|message| ("gateway".to_string(), message))?;
    let session_keys = match &raw.session_keys {
        None => None,
        Some(text) => {
            // The value is never quoted by an expansion error: keys may sit next to the typo.
            let expanded = super::expand(text, lookup)
                .map_err(|e| ("gateway.sessionKeys".to_string(), e.to_string()))?;
            (!expanded.trim().is_empty()).then_some(SecretText(expanded))
        }
    };
    if let Some(problem) = raw.public_url.as_deref().and_then(public_url_problem) {
        return Err(("gateway.publicUrl".into(), problem.into()));
    }
    let mut clients = BTreeMap::new();
    for (name, value) in raw.clients {
        let key = format!("gateway.clients.{name}");
        if name.trim().is_empty() {
            return Err((key, "a client profile needs a non-empty name".into()));
        }
        let raw: RawProfile = super::decode(value, "").map_err(|message| (key.clone(), message))?;
        let auth =
            auth(raw.auth).map_err(|(sub, message)| (format!("{key}.auth{sub}"), message))?;
        let filter = |what: &str, raw: Option<RawFilter>, kind| match raw {
            None => Ok(NameFilter::default()),
            Some(raw) => NameFilter::new(raw.allow, raw.deny, kind)
                .map_err(|message| (format!("{key}.{what}"), message)),
        };
        if raw.max_sessions == Some(0) {
            return Err((
                format!("{key}.maxSessions"),
                "must be 1 or more (leave it out for no limit of the profile's own)".into(),
            ));
        }
        let permissions = match raw.permissions {
            None => PermissionRules::default(),
            Some(v) => {
                super::decode(v, "").map_err(|message| (format!("{key}.permissions"), message))?
            }
        };
        clients.insert(
            name.clone(),
            ClientProfile {
                auth,
                servers: filter("servers", raw.servers, PatternKind::Server)?,
                tools: filter("tools", raw.tools, PatternKind::Name)?,
                prompts: filter("prompts", raw.prompts, PatternKind::Name)?,
                resources: filter("resources", raw.resources, PatternKind::Uri)?,
                permissions,
                max_sessions: raw.max_sessions,
                name,
            },
        );
    }
    Ok(GatewayConfig {
        public_url: raw.public_url,
        clients,
        session_keys,
    })
}

fn auth(value: serde_json::Value) -> Result<ProfileAuth, (String, String)> {
    let raw: RawAuth = super::decode(value, "").map_err(|e| {
        (
            String::new(),
            format!("{e} (expected {{\"type\": \"bearer\", \"tokenEnv\": \"VAR\"}} or {{\"type\": \"oauth\", \"issuer\": ..., \"jwksUri\": ...}})"),
        )
    })?;
    let missing = |key: &str| (format!(".{key}"), "is required for this `type`".to_string());
    let not_here = |key: &str, kind: &str| {
        (
            format!(".{key}"),
            format!("does not apply to `type: \"{kind}\"`"),
        )
    };
    match raw.kind.as_str() {
        "bearer" => {
            for (key, set) in [
                ("issuer", raw.issuer.is_some()),
                ("jwksUri", raw.jwks_uri.is_some()),
                ("scopes", raw.scopes.is_some()),
                ("clientIds", raw.client_ids.is_some()),
            ] {
                if set {
                    return Err(not_here(key, "bearer"));
                }
            }
            let token_env = raw.token_env.ok_or_else(|| missing("tokenEnv"))?;
            if token_env.is_empty() || token_env.contains('=') || token_env.contains('\0') {
                return Err((
                    ".tokenEnv".into(),
                    "must be the name of an environment variable (the token itself never goes in the config)".into(),
                ));
            }
            Ok(ProfileAuth::Bearer { token_env })
        }
        "oauth" => {
            if raw.token_env.is_some() {
                return Err(not_here("tokenEnv", "oauth"));
            }
            let issuer = raw.issuer.ok_or_else(|| missing("issuer"))?;
            let jwks_uri = raw.jwks_uri.ok_or_else(|| missing("jwksUri"))?;
            if !(jwks_uri.starts_with("https://") || loopback_http(&jwks_uri)) {
                return Err((
                    ".jwksUri".into(),
                    "must be an https:// URL (http:// only on loopback)".into(),
                ));
            }
            Ok(ProfileAuth::OAuth {
                issuer,
                jwks_uri,
                scopes: raw.scopes.unwrap_or_default(),
                client_ids: raw.client_ids,
            })
        }
        other => Err((
            ".type".into(),
            format!("unknown type `{other}`: use \"bearer\" or \"oauth\""),
        )),
    }
}

/// Whether `url` is an `http://` URL whose host is a loopback address or `localhost` (the
/// host itself: `http://127.0.0.1.example/` and `http://127.0.0.1@example/` are not), with no
/// user info.
fn loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What is wrong with `url` as the gateway's public URL (`gateway.publicUrl`, `serve
/// --public-url`), if anything: it is the audience of client tokens and the metadata's
/// `resource`, so an absolute http(s) URL with a host, no query and no fragment (RFC 9728
/// §1.2; the metadata's address is built from it).
pub fn public_url_problem(url: &str) -> Option<&'static str> {
    match super::http_url_fault(url) {
        Some(super::UrlFault::Scheme) => {
            Some("must be an http:// or https:// URL (the `/mcp` endpoint as clients reach it)")
        }
        Some(super::UrlFault::Host) => Some(
            "must name a host (the `/mcp` endpoint as clients reach it, e.g. https://gw.example/mcp)",
        ),
        Some(super::UrlFault::Characters) => Some("must not contain spaces or control characters"),
        None if url.contains('#') => {
            Some("must not have a fragment (`#...`): it names the resource, RFC 9728")
        }
        // The metadata's address is built from it (the well-known path before its own), and
        // RFC 9728 §2 advises against a query in a resource identifier.
        None if url.contains('?') => {
            Some("must not have a query (`?...`): it names the resource, RFC 9728")
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `super::parse` with no environment.
    fn parse(value: &serde_json::Value) -> Result<GatewayConfig, (String, String)> {
        super::parse(value.clone(), &|_| None)
    }

    #[test]
    fn a_plain_http_jwks_is_taken_only_from_a_loopback_host() {
        for good in [
            "http://127.0.0.1/jwks",
            "http://127.0.0.1:8080/jwks",
            "http://localhost:9/jwks",
            "http://[::1]:9/jwks",
            "https://as.example/jwks",
        ] {
            let profile = json!({"auth": {"type": "oauth", "issuer": "i", "jwksUri": good}});
            assert!(parse(&json!({"clients": {"a": profile}})).is_ok(), "{good}");
        }
        for bad in [
            "http://127.0.0.1.nip.io/jwks",
            "http://localhost.attacker.example/jwks",
            "http://127.0.0.1@attacker.example/jwks",
            "http://[::1]@attacker.example/jwks",
            "http://example.com/jwks",
        ] {
            let profile = json!({"auth": {"type": "oauth", "issuer": "i", "jwksUri": bad}});
            let (key, message) = parse(&json!({"clients": {"a": profile}})).expect_err("refused");
            assert!(
                key.ends_with(".jwksUri") && message.contains("loopback"),
                "{bad}: {key} {message}"
            );
        }
        assert!(public_url_problem("https://gw.example/mcp?x=1").is_some());
        assert!(public_url_problem("https://gw.example/mcp").is_none());
    }

    #[test]
    fn session_keys_are_expanded_and_never_shown() {
        let env = |name: &str| (name == "GW_KEYS").then(|| "a2V5LW9uZQ==,a2V5LXR3bw==".to_string());
        let config = super::parse(json!({"sessionKeys": "${GW_KEYS}"}), &env).expect("valid");
        let keys = config.session_keys.as_ref().expect("keys");
        assert_eq!(keys.expose(), "a2V5LW9uZQ==,a2V5LXR3bw==");
        assert!(!format!("{config:?}").contains("a2V5"), "{config:?}");
        let none = super::parse(json!({"sessionKeys": "${UNSET_KEYS:-}"}), &env).expect("valid");
        assert!(none.session_keys.is_none());
        let (key, message) =
            super::parse(json!({"sessionKeys": "${UNSET_KEYS}"}), &env).expect_err("unset");
        assert_eq!(key, "gateway.sessionKeys");
        assert!(message.contains("UNSET_KEYS"), "{message}");
        let (key, message) = super::parse(json!({"sessionKeys": "c2VjcmV0${BAD KEY}"}), &env)
            .expect_err("malformed");
        assert_eq!(key, "gateway.sessionKeys");
        assert!(!message.contains("c2VjcmV0"), "{message}");
    }

    #[test]
    fn profiles_parse_and_errors_name_the_key() {
        let config = parse(&json!({
            "publicUrl": "https://gw.example/mcp",
            "clients": {
                "ci": {"auth": {"type": "bearer", "tokenEnv": "CI_TOKEN"},
                       "tools": {"deny": ["mcp__fx__add"]}},
                "alice": {"auth": {"type": "oauth", "issuer": "https://as.example",
                                   "jwksUri": "https://as.example/jwks", "scopes": ["mcp"]},
                          "servers": {"allow": ["fx"]},
                          "permissions": {"deny": ["mcp__fx__echo"]}}
            }
        }))
        .expect("valid");
        assert_eq!(config.clients.len(), 2);
        assert!(!config.clients["ci"].tools.admits("mcp__fx__add"));
        assert!(!config.clients["alice"].servers.admits("ev"));
        let err = |v: serde_json::Value| parse(&v).expect_err("invalid");
        let (key, _) = err(json!({"clients": {"ci": {"auth": {"type": "bearer"}}}}));
        assert_eq!(key, "gateway.clients.ci.auth.tokenEnv");
        let (key, _) = err(json!({"clients": {"ci": {"auth": {"type": "oauth", "issuer": "x"}}}}));
        assert_eq!(key, "gateway.clients.ci.auth.jwksUri");
        let (key, message) = err(
            json!({"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "X"}, "tool": {}}}}),
        );
        assert_eq!(key, "gateway.clients.ci");
        assert!(message.contains("tool"), "{message}");
        let (key, _) = err(
            json!({"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "X"}, "tools": {"allow": ["a b"]}}}}),
        );
        assert_eq!(key, "gateway.clients.ci.tools");
        let (key, _) = err(json!({"client": {}}));
        assert_eq!(key, "gateway");
        let bearer = json!({"type": "bearer", "tokenEnv": "X"});
        let (key, _) = err(json!({"clients": {"ci": {"auth": bearer, "maxSessions": 0}}}));
        assert_eq!(key, "gateway.clients.ci.maxSessions");
        let limited = parse(&json!({"clients": {"ci": {"auth": bearer, "maxSessions": 3}}}));
        assert_eq!(limited.expect("valid").clients["ci"].max_sessions, Some(3));
        assert_eq!(config.clients["alice"].max_sessions, None);
    }
}

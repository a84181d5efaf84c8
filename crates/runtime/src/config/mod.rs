//! Configuration in the `mcpServers` JSON format users already write for Claude Code, plus the
//! harness's own keys.
//!
//! Invariants: a [`Config`] is fully validated — every server has exactly one usable transport,
//! every `${VAR}` is expanded, no unknown key survives (the error names the file, the server and
//! the key), no server name contains `__` or ends with `_` (so `mcp__<server>__<tool>` names stay distinct
//! across servers) — and secrets (env and header values) appear in no error message or log.

mod gateway;
pub mod sources;
mod transport;

pub use gateway::{ClientProfile, GatewayConfig, ProfileAuth, SecretText, public_url_problem};
pub(crate) use transport::DedupKey;
pub use transport::TransportConfig;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_harness_catalog::sanitize::MetadataLimits;
use mcp_harness_policy::{ExposurePolicy, PermissionRules};
use mcp_harness_transport::StdioSpec;
use mcp_harness_transport::auth::{
    ClientAuth, ClientCredentials, Grant, IdentityProvider, JwtAlgorithm, JwtSource, OAuthConfig,
    PrivateKey,
};
use serde::Deserialize;

/// Default deadline for spawn + initialize (`startupTimeoutSec`).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default deadline for one tool call (`toolTimeoutSec`).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(300);
/// Default cap on one message from a server (`maxMessageBytes`): 64 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = mcp_harness_transport::DEFAULT_MAX_MESSAGE_BYTES;

/// The validated configuration of every server.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Servers by name, in name order.
    pub servers: BTreeMap<String, ServerConfig>,
    /// The file this came from, for messages.
    pub source: Option<PathBuf>,
    /// `metadataLimits`: caps on what servers list (each key documented in
    /// [`MetadataLimits`]; missing keys keep their defaults).
    pub metadata_limits: MetadataLimits,
    /// `exposure`: budgets, tool cap and tool search (see [`ExposurePolicy`]).
    pub exposure: ExposurePolicy,
    /// `permissions`: allow / ask / deny rules on qualified names and arguments (see
    /// [`PermissionRules`]). Default: no rules, so every call asks.
    pub permissions: PermissionRules,
    /// `output`: the output budget and where large results are stored.
    pub output: OutputConfig,
    /// `gateway`: the client profiles of `mcp-harness serve` over HTTP (read only from the
    /// user config or a `--config` file). Default: none.
    pub gateway: GatewayConfig,
}

/// `output` in the config: how large a tool result may be before it is stored and the model
/// gets a bounded summary with a handle to read the rest (R31).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OutputConfig {
    /// `budgetTokens`: estimated tokens of a result shown whole. Default 25,000 (Claude Code's
    /// cap on MCP output).
    pub budget_tokens: usize,
    /// `maxBudgetTokens`: the most a tool may raise its own budget to through
    /// `_meta["mcp-harness/maxOutputTokens"]`. Default 100,000.
    pub max_budget_tokens: usize,
    /// `pageChars`: characters per page of a stored result. Default 8,000.
    pub page_chars: usize,
    /// `dir`: where results are stored; default a fresh private (0700) directory under the
    /// system temp dir, removed when the runtime ends.
    pub dir: Option<PathBuf>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            budget_tokens: 25_000,
            max_budget_tokens: 100_000,
            page_chars: 8_000,
            dir: None,
        }
    }
}

/// One server's validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The server's name (the key under `mcpServers`).
    pub name: String,
    /// How to reach it.
    pub transport: TransportConfig,
    /// `enabled`; default true. A disabled server is never connected.
    pub enabled: bool,
    /// `startupTimeoutSec`; default 30 s.
    pub startup_timeout: Duration,
    /// `toolTimeoutSec`; default 300 s.
    pub tool_timeout: Duration,
    /// `maxMessageBytes`: the largest message accepted from the server; default 64 MiB. A
    /// larger one fails the request it answers at once, saying so.
    pub max_message_bytes: usize,
    /// `includeTools`: when set, only these raw tool names are shown to the model.
    pub include_tools: Option<Vec<String>>,
    /// `excludeTools`: raw tool names never shown to the model.
    pub exclude_tools: Vec<String>,
    /// Set by the source merge (not a config key) for a server of a project file the user has
    /// not trusted: why it is not started. Such a server also has `enabled: false`, so nothing
    /// starts it; it is shown as `untrusted` with this reason.
    pub untrusted: Option<String>,
    /// Set when the server's definition names an environment variable that is not set (a
    /// `${VAR}` without a default): why it cannot start. Such a server also has `enabled:
    /// false` and is shown as failed with this reason, while the other servers run.
    pub unusable: Option<String>,
    /// `names`: `"qualified"` (default, `mcp__<server>__<name>`) or `"as-listed"` (the names
    /// the server lists, kept as they are: for an `mcp-harness serve` gateway, whose names are
    /// already qualified).
    pub names: mcp_harness_catalog::Naming,
    /// `protocolVersion`: the MCP version asked of this server instead of the runtime's own
    /// default (2025-11-25 through `initialize`). From `2026-07-28` on the session opens with
    /// `server/discover` (no `initialize`): what a gateway needs to pass SEP-2322
    /// `input_required` rounds through to its clients.
    pub protocol_version: Option<rmcp::model::ProtocolVersion>,
}

/// A configuration problem, naming where it is and what to change.
#[derive(Debug, thiserror::Error)]
#[error("{location}: {message}")]
pub struct ConfigError {
    /// Where: the file, and the server and key when there is one.
    pub location: String,
    /// What is wrong and what to change.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(rename = "mcpServers", default)]
    mcp_servers: BTreeMap<String, serde_json::Value>,
    #[serde(rename = "metadataLimits", default)]
    metadata_limits: Option<serde_json::Value>,
    #[serde(default)]
    exposure: Option<serde_json::Value>,
    #[serde(default)]
    permissions: Option<serde_json::Value>,
    #[serde(default)]
    output: Option<serde_json::Value>,
    #[serde(default)]
    gateway: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    inherit_env: Option<bool>,
    #[serde(rename = "type")]
    kind: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    enabled: Option<bool>,
    startup_timeout_sec: Option<f64>,
    tool_timeout_sec: Option<f64>,
    max_message_bytes: Option<u64>,
    include_tools: Option<Vec<String>>,
    #[serde(default)]
    exclude_tools: Vec<String>,
    oauth: Option<serde_json::Value>,
    names: Option<String>,
    protocol_version: Option<String>,
}

/// The `oauth` keys that name a local file the harness reads for a grant (a key to sign with,
/// a token to send): never taken from a remote source.
pub(crate) const OAUTH_FILE_KEYS: [&str; 3] = ["privateKeyFile", "assertionFile", "idTokenFile"];

/// The `oauth` keys that name an environment variable holding a grant's JWT: read from the
/// environment as a `${VAR}` is.
pub(crate) const OAUTH_ENV_KEYS: [&str; 2] = ["assertionEnv", "idTokenEnv"];

/// A server's `oauth` object as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOAuth {
    grant: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    client_metadata_url: Option<String>,
    private_key_file: Option<String>,
    private_key: Option<String>,
    signing_algorithm: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    assertion_file: Option<String>,
    assertion_env: Option<String>,
    idp_token_endpoint: Option<String>,
    idp_client_id: Option<String>,
    idp_client_secret: Option<String>,
    id_token_file: Option<String>,
    id_token_env: Option<String>,
}

impl Config {
    /// The environment variables this configuration names as holding the harness's own
    /// secrets: the gateway's client tokens (`gateway.clients.*.auth.tokenEnv`) and the JWTs
    /// an upstream's OAuth grant reads (`oauth.assertionEnv`, `oauth.idTokenEnv`). No stdio
    /// server inherits them ([`mcp_harness_transport::withhold_env`]).
    pub(crate) fn secret_env_names(&self) -> Vec<String> {
        let tokens = self.gateway.clients.values().filter_map(|c| match &c.auth {
            gateway::ProfileAuth::Bearer { token_env } => Some(token_env.clone()),
            gateway::ProfileAuth::OAuth { .. } => None,
        });
        let grants = self.servers.values().filter_map(|s| match &s.transport {
            TransportConfig::StreamableHttp {
                oauth: Some(oauth), ..
            } => match &oauth.client_credentials()?.grant {
                Grant::JwtBearer(JwtSource::Env(var)) => Some(var.clone()),
                Grant::EnterpriseManaged(idp) => match &idp.id_token {
                    JwtSource::Env(var) => Some(var.clone()),
                    JwtSource::File(_) => None,
                },
                _ => None,
            },
            _ => None,
        });
        tokens.chain(grants).collect()
    }

    /// Reads and validates a config file, expanding `${VAR}` from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = sources::read(path)?;
        Self::parse(&text, path, &|name| std::env::var(name).ok())
    }

    /// Parses config text; `lookup` resolves `${VAR}` references.
    pub fn parse(
        text: &str,
        path: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let raw: RawFile = serde_json::from_str(text).map_err(|e| {
            let message = plain(&e.to_string());
            // serde names only this struct's fields; the user config's own are read before.
            let message = match message
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split_once('`'))
            {
                Some((key, _)) => format!(
                    "unknown key `{key}`: a config file's keys are `mcpServers`, \
                     `metadataLimits`, `exposure`, `permissions`, `output` and `gateway`, and \
                     the user config's also `allowedServers`, `deniedServers`, \
                     `remoteSources` and `trustProjectPermissions`"
                ),
                None => format!("{message} (expected {{\"mcpServers\": {{\"NAME\": {{...}}}}}})"),
            };
            ConfigError {
                location: file.clone(),
                message,
            }
        })?;
        let mut servers = BTreeMap::new();
        for (name, value) in raw.mcp_servers {
            let location = format!("{file}: server \"{}\"", name.escape_debug());
            if name.chars().any(char::is_control) {
                // Shown in tables, warnings and logs: a line break or an escape sequence there
                // could hide or fake what the user reads (an untrusted project file's trust
                // prompt among it).
                return Err(ConfigError {
                    location,
                    message: "server names must not contain control characters (line breaks, \
                              tabs, escape sequences); rename the server key"
                        .into(),
                });
            }
            if name.trim().is_empty() {
                return Err(ConfigError {
                    location,
                    message: "server names must not be empty".into(),
                });
            }
            if !mcp_harness_catalog::naming::is_unambiguous_server_name(&name) {
                return Err(ConfigError {
                    location,
                    message: format!(
                        "server names must not contain `__` (two underscores) nor end with `_`: \
                         the model sees tools as `mcp__<server>__<tool>`, so this server's tools \
                         could take the names of another server's tools; rename the server key, \
                         e.g. to \"{}\"",
                        mcp_harness_catalog::naming::suggest_server_name(&name)
                    ),
                });
            }
            let server: RawServer = decode(value.clone(), "").map_err(|message| ConfigError {
                location: location.clone(),
                message,
            })?;
            let base = path.parent().unwrap_or(Path::new("."));
            let config = match server_config(&name, server, lookup, base) {
                Ok(config) => config,
                // A variable this server needs is not set: the server cannot start, the others
                // can. Read again with unset variables empty, kept as failed with why.
                Err(message) if message.contains(UNSET_VARIABLE) => {
                    // A placeholder that keeps a URL or a command well formed (an empty host
                    // would make the server unreadable, and the whole file with it); the
                    // server never starts.
                    let empty = |var: &str| lookup(var).or_else(|| Some("unset-variable".into()));
                    let again = decode::<RawServer>(value, "")
                        .and_then(|raw| server_config(&name, raw, &empty, base));
                    let Ok(mut config) = again else {
                        return Err(ConfigError { location, message });
                    };
                    config.enabled = false;
                    config.unusable = Some(format!("{location}: {message}"));
                    config
                }
                Err(message) => return Err(ConfigError { location, message }),
            };
            servers.insert(name, config);
        }
        let metadata_limits = match raw.metadata_limits {
            None => MetadataLimits::default(),
            Some(v) => decode(v, "").map_err(|message| ConfigError {
                location: format!("{file}: metadataLimits"),
                message,
            })?,
        };
        let exposure = section(&file, "exposure", raw.exposure)?;
        let permissions = section(&file, "permissions", raw.permissions)?;
        let output = section(&file, "output", raw.output)?;
        let gateway = match raw.gateway {
            None => GatewayConfig::default(),
            Some(v) => gateway::parse(v, lookup).map_err(|(key, message)| ConfigError {
                location: format!("{file}: {key}"),
                message,
            })?,
        };
        Ok(Config {
            gateway,
            servers,
            source: Some(path.to_path_buf()),
            metadata_limits,
            exposure,
            permissions,
            output,
        })
    }
}

/// Parses an optional top-level section, naming it in errors.
fn section<T: serde::de::DeserializeOwned + Default>(
    file: &str,
    key: &str,
    value: Option<serde_json::Value>,
) -> Result<T, ConfigError> {
    match value {
        None => Ok(T::default()),
        Some(v) => decode(v, "").map_err(|message| ConfigError {
            location: format!("{file}: {key}"),
            message,
        }),
    }
}

/// What makes a string no usable http(s) URL (a server's `url`, the gateway's `publicUrl`).
pub(crate) enum UrlFault {
    /// Not `http://` or `https://`.
    Scheme,
    /// No host after the scheme.
    Host,
    /// A space or a control character in it.
    Characters,
}

/// The first [`UrlFault`] of `url`, if it has one.
pub(crate) fn http_url_fault(url: &str) -> Option<UrlFault> {
    let rest = (url.strip_prefix("https://")).or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Some(UrlFault::Scheme);
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') || host.ends_with('@') {
        return Some(UrlFault::Host);
    }
    url.chars()
        .any(|c| c.is_whitespace() || c.is_control())
        .then_some(UrlFault::Characters)
}

/// The expanded `url` and `headers` of a remote (HTTP or SSE) server, refusing stdio keys.
fn remote(
    raw: &RawServer,
    url: &str,
    ex: &dyn Fn(&str, &str) -> Result<String, String>,
) -> Result<(String, BTreeMap<String, String>), String> {
    if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() || raw.inherit_env.is_some()
    {
        return Err(
            "`args`, `env`, `cwd` and `inheritEnv` apply to stdio servers only; this one has a `url`"
                .into(),
        );
    }
    let mut headers = BTreeMap::new();
    for (k, v) in &raw.headers {
        // RFC 9110 token characters: anything else would be refused on every request, or
        // (a line break) forge another header.
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if k.is_empty() || !k.chars().all(token) {
            return Err(format!(
                "`headers` has a name that is no HTTP header name (\"{}\"): letters, digits and \
                 !#$%&'*+-.^_`|~ only",
                k.escape_debug()
            ));
        }
        let value = ex(&format!("headers.{k}"), v)?;
        // The value is not quoted: it may be a secret.
        if value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(format!(
                "`headers.{k}` holds a line break or another control character (as written or \
                 from a `${{VAR}}` it reads), which no HTTP header value may"
            ));
        }
        headers.insert(k.clone(), value);
    }
    let url = ex("url", url)?;
    // The value itself is not quoted: its query may hold a key.
    match http_url_fault(&url) {
        Some(UrlFault::Scheme) => {
            return Err(
                "`url` must be an http:// or https:// URL (the server's MCP endpoint, e.g. \
                 https://mcp.example.com/mcp)"
                    .into(),
            );
        }
        Some(UrlFault::Host) => {
            return Err("`url` names no host (e.g. https://mcp.example.com/mcp)".into());
        }
        Some(UrlFault::Characters) => {
            return Err("`url` must not contain spaces or control characters".into());
        }
        None => {}
    }
    Ok((url, headers))
}

/// The `oauth` object of an http server. Secrets (`clientSecret`, `privateKey`) are expanded
/// but never quoted in an error.
fn oauth_config(
    value: serde_json::Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    base: &Path,
) -> Result<OAuthConfig, String> {
    let raw: RawOAuth = decode(value, "oauth")?;
    let ex = |key: &str, v: &str| expand(v, lookup).map_err(|e| format!("`oauth.{key}`: {e}"));
    let opt = |key: &str, v: &Option<String>, f: &dyn Fn(&str, &str) -> Result<String, String>| {
        v.as_deref()
            .map(|v| f(key, v))
            .transpose()
            .map(|v| v.filter(|v| !v.is_empty()))
    };
    let client_id = opt("clientId", &raw.client_id, &ex)?;
    let client_secret = opt("clientSecret", &raw.client_secret, &ex)?;
    let client_metadata_url = opt("clientMetadataUrl", &raw.client_metadata_url, &ex)?;
    let private_key_file = opt("privateKeyFile", &raw.private_key_file, &ex)?;
    let private_key = opt("privateKey", &raw.private_key, &ex)?;
    let scopes = raw
        .scopes
        .iter()
        .enumerate()
        .map(|(i, s)| ex(&format!("scopes[{i}]"), s))
        .collect::<Result<Vec<_>, _>>()?;
    let algorithm = match raw.signing_algorithm.as_deref() {
        None => None,
        Some(a) => Some(JwtAlgorithm::parse(a).ok_or_else(|| {
            format!("`oauth.signingAlgorithm` \"{a}\" is not supported; use \"ES256\" or \"RS256\"")
        })?),
    };
    let assertion_file = opt("assertionFile", &raw.assertion_file, &ex)?;
    let assertion_env = opt("assertionEnv", &raw.assertion_env, &ex)?;
    let idp_token_endpoint = opt("idpTokenEndpoint", &raw.idp_token_endpoint, &ex)?;
    let idp_client_id = opt("idpClientId", &raw.idp_client_id, &ex)?;
    let idp_client_secret = opt("idpClientSecret", &raw.idp_client_secret, &ex)?;
    let id_token_file = opt("idTokenFile", &raw.id_token_file, &ex)?;
    let id_token_env = opt("idTokenEnv", &raw.id_token_env, &ex)?;
    let grant = raw.grant.as_deref().unwrap_or("authorization_code");
    // Keys that belong to one grant only.
    let owned: [(&str, bool, &[&str]); 11] = [
        (
            "privateKeyFile",
            private_key_file.is_some(),
            &["client_credentials", "jwt_bearer", "enterprise_managed"],
        ),
        (
            "privateKey",
            private_key.is_some(),
            &["client_credentials", "jwt_bearer", "enterprise_managed"],
        ),
        (
            "signingAlgorithm",
            algorithm.is_some(),
            &["client_credentials", "jwt_bearer", "enterprise_managed"],
        ),
        (
            "clientMetadataUrl",
            client_metadata_url.is_some(),
            &["authorization_code"],
        ),
        ("assertionFile", assertion_file.is_some(), &["jwt_bearer"]),
        ("assertionEnv", assertion_env.is_some(), &["jwt_bearer"]),
        (
            "idpTokenEndpoint",
            idp_token_endpoint.is_some(),
            &["enterprise_managed"],
        ),
        (
            "idpClientId",
            idp_client_id.is_some(),
            &["enterprise_managed"],
        ),
        (
            "idpClientSecret",
            idp_client_secret.is_some(),
            &["enterprise_managed"],
        ),
        (
            "idTokenFile",
            id_token_file.is_some(),
            &["enterprise_managed"],
        ),
        (
            "idTokenEnv",
            id_token_env.is_some(),
            &["enterprise_managed"],
        ),
    ];
    let known = [
        "authorization_code",
        "client_credentials",
        "jwt_bearer",
        "enterprise_managed",
    ];
    if !known.contains(&grant) {
        return Err(format!(
            "`oauth.grant` \"{grant}\" is unknown; use \"authorization_code\" (a user logs in), \
             \"client_credentials\" (machine to machine), \"jwt_bearer\" (a workload's JWT, \
             workload identity federation) or \"enterprise_managed\" (an ID token exchanged at \
             the enterprise identity provider, SEP-990)"
        ));
    }
    for (key, set, grants) in owned {
        if set && !grants.contains(&grant) {
            let with: Vec<String> = grants.iter().map(|g| format!("\"{g}\"")).collect();
            return Err(format!(
                "`oauth.{key}` is for `\"grant\"`: {} only, not \"{grant}\"",
                with.join(", ")
            ));
        }
    }
    /// One of a file and an environment variable, for a JWT read at each use.
    fn jwt_source(
        base: &Path,
        keys: &str,
        file: Option<String>,
        env: Option<String>,
        grant: &str,
    ) -> Result<JwtSource, String> {
        match (file, env) {
            (Some(file), None) => Ok(JwtSource::File(base.join(file))),
            (None, Some(var)) => Ok(JwtSource::Env(var)),
            (None, None) => Err(format!(
                "`\"grant\": \"{grant}\"` needs `oauth.{keys}File` (a file holding the JWT, read \
                 at each token request) or `oauth.{keys}Env` (the name of an environment \
                 variable holding it)"
            )),
            (Some(_), Some(_)) => Err(format!(
                "set only one of `oauth.{keys}File` and `oauth.{keys}Env`"
            )),
        }
    }
    if grant == "authorization_code" {
        return Ok(OAuthConfig::AuthorizationCode {
            client_id,
            client_secret,
            client_metadata_url,
            scopes,
        });
    }
    let grant = match grant {
        "client_credentials" => Grant::ClientCredentials,
        "jwt_bearer" => Grant::JwtBearer(jwt_source(
            base,
            "assertion",
            assertion_file,
            assertion_env,
            grant,
        )?),
        _ => {
            let token_endpoint = idp_token_endpoint.ok_or(
                "`oauth.idpTokenEndpoint` (the enterprise identity provider's token endpoint) is \
                 required with `\"grant\": \"enterprise_managed\"`",
            )?;
            if !(token_endpoint.starts_with("https://") || token_endpoint.starts_with("http://")) {
                return Err("`oauth.idpTokenEndpoint` is not an https URL".into());
            }
            if idp_client_secret.is_some() && idp_client_id.is_none() {
                return Err("`oauth.idpClientSecret` needs `oauth.idpClientId`".into());
            }
            Grant::EnterpriseManaged(Box::new(IdentityProvider {
                token_endpoint,
                client_id: idp_client_id,
                client_secret: idp_client_secret,
                id_token: jwt_source(base, "idToken", id_token_file, id_token_env, grant)?,
            }))
        }
    };
    let name = grant.name();
    let client_id = match client_id {
        Some(id) => id,
        // A workload's JWT may be all the authorization server needs to know who asks.
        None if matches!(grant, Grant::JwtBearer(_)) => String::new(),
        None => {
            return Err(format!(
                "`oauth.clientId` is required with `\"grant\": \"{name}\"`"
            ));
        }
    };
    let auth = match (client_secret, private_key_file, private_key) {
        (Some(secret), None, None) => {
            if algorithm.is_some() {
                return Err("`oauth.signingAlgorithm` goes with a private key \
                            (`oauth.privateKeyFile` or `oauth.privateKey`), not a secret"
                    .into());
            }
            ClientAuth::Secret(secret)
        }
        (None, Some(file), None) => ClientAuth::PrivateKey {
            key: PrivateKey::File(base.join(file)),
            algorithm,
        },
        (None, None, Some(pem)) => ClientAuth::PrivateKey {
            key: PrivateKey::Pem(pem),
            algorithm,
        },
        (None, None, None) if !matches!(grant, Grant::ClientCredentials) => {
            if algorithm.is_some() {
                return Err("`oauth.signingAlgorithm` goes with a private key \
                            (`oauth.privateKeyFile` or `oauth.privateKey`)"
                    .into());
            }
            ClientAuth::None
        }
        (None, None, None) => {
            return Err(
                "`\"grant\": \"client_credentials\"` needs `oauth.clientSecret` \
                        (HTTP Basic) or a private key (`oauth.privateKeyFile` or \
                        `oauth.privateKey`, signed JWT assertions)"
                    .into(),
            );
        }
        _ => {
            return Err(
                "set only one of `oauth.clientSecret`, `oauth.privateKeyFile` and \
                        `oauth.privateKey`"
                    .into(),
            );
        }
    };
    if client_id.is_empty() && !matches!(auth, ClientAuth::None) {
        return Err(format!(
            "`oauth.clientId` is required to authenticate the client with `\"grant\": \"{name}\"`"
        ));
    }
    Ok(OAuthConfig::ClientCredentials(ClientCredentials {
        client_id,
        auth,
        scopes,
        grant,
    }))
}

fn server_config(
    name: &str,
    raw: RawServer,
    lookup: &dyn Fn(&str) -> Option<String>,
    base: &Path,
) -> Result<ServerConfig, String> {
    // A variable whose name says it holds a secret (`${GITHUB_TOKEN}`) is a secret wherever it
    // is used — in a URL's path or a command line too, not only in env and header values —
    // so its value is registered with the redaction as it is read.
    let lookup = &|var: &str| {
        let value = lookup(var);
        if let Some(value) = &value
            && mcp_harness_transport::redact::secret_name(var)
        {
            mcp_harness_transport::redact::register([value]);
        }
        value
    };
    let ex = |key: &str, v: &str| expand(v, lookup).map_err(|e| format!("`{key}`: {e}"));
    let transport = match (raw.kind.as_deref(), &raw.command, &raw.url) {
        (Some("sse"), command, url) => {
            let (None, Some(url)) = (command, url) else {
                return Err("`type: \"sse\"` (legacy HTTP+SSE) takes a `url` (and `headers`), not a `command`".into());
            };
            let (url, headers) = remote(&raw, url, &ex)?;
            TransportConfig::LegacySse { url, headers }
        }
        (Some(kind), _, _)
            if !matches!(
                kind,
                "stdio" | "http" | "streamable-http" | "streamableHttp"
            ) =>
        {
            return Err(format!(
                "`type` \"{kind}\" is unknown; use \"stdio\", \"http\" or \"sse\""
            ));
        }
        (_, Some(_), Some(_)) => {
            return Err("set either `command` (stdio) or `url` (http), not both".into());
        }
        (Some("stdio") | None, Some(command), None) => {
            let mut env = BTreeMap::new();
            for (k, v) in &raw.env {
                // What `execve` cannot carry as a variable's name.
                if k.is_empty() || k.contains(['=', '\0']) {
                    return Err(format!(
                        "`env` has a name no environment variable can have (\"{}\"): it must be \
                         non-empty, without `=`",
                        k.escape_debug()
                    ));
                }
                env.insert(k.clone(), ex(&format!("env.{k}"), v)?);
            }
            let command = ex("command", command)?;
            if command.trim().is_empty() {
                return Err("`command` is empty: name the program to run".into());
            }
            TransportConfig::Stdio(StdioSpec {
                command,
                args: raw
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| ex(&format!("args[{i}]"), a))
                    .collect::<Result<_, _>>()?,
                env,
                cwd: raw
                    .cwd
                    .as_deref()
                    .map(|c| ex("cwd", c))
                    .transpose()?
                    .map(PathBuf::from),
                inherit_env: raw.inherit_env.unwrap_or(true),
            })
        }
        (Some("stdio"), None, _) => return Err("`type: \"stdio\"` needs a `command`".into()),
        (_, None, Some(url)) => {
            if raw.kind.as_deref() == Some("stdio") {
                return Err("`type: \"stdio\"` takes a `command`, not a `url`".into());
            }
            let (url, headers) = remote(&raw, url, &ex)?;
            let oauth = raw
                .oauth
                .clone()
                .map(|v| oauth_config(v, lookup, base))
                .transpose()?;
            TransportConfig::StreamableHttp {
                url,
                headers,
                oauth,
            }
        }
        (_, Some(_), None) => {
            return Err(
                "a server with a `command` is a stdio server; remove `type` or set it to \"stdio\""
                    .into(),
            );
        }
        (_, None, None) => {
            return Err(
                "set `command` (a stdio server) or `url` (a Streamable HTTP server)".into(),
            );
        }
    };
    if raw.oauth.is_some() && !matches!(transport, TransportConfig::StreamableHttp { .. }) {
        return Err("`oauth` applies to Streamable HTTP servers only (`type: \"http\"`)".into());
    }
    if matches!(transport, TransportConfig::Stdio(_)) && !raw.headers.is_empty() {
        return Err("`headers` apply to http servers only; this one has a `command`".into());
    }
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        enabled: raw.enabled.unwrap_or(true),
        startup_timeout: seconds(
            "startupTimeoutSec",
            raw.startup_timeout_sec,
            DEFAULT_STARTUP_TIMEOUT,
        )?,
        tool_timeout: seconds("toolTimeoutSec", raw.tool_timeout_sec, DEFAULT_TOOL_TIMEOUT)?,
        max_message_bytes: message_bytes(raw.max_message_bytes)?,
        include_tools: raw.include_tools,
        exclude_tools: raw.exclude_tools,
        untrusted: None,
        unusable: None,
        names: match raw.names.as_deref() {
            None | Some("qualified") => mcp_harness_catalog::Naming::Qualified,
            Some("as-listed") => mcp_harness_catalog::Naming::AsListed,
            Some(other) => {
                return Err(format!(
                    "`names` is \"qualified\" or \"as-listed\", not {other:?}"
                ));
            }
        },
        protocol_version: raw
            .protocol_version
            .as_deref()
            .map(protocol_version)
            .transpose()?,
    })
}

/// `protocolVersion`: one of the versions rmcp knows (a typo would otherwise be sent as asked
/// and refused by every server).
fn protocol_version(value: &str) -> Result<rmcp::model::ProtocolVersion, String> {
    let known = rmcp::model::ProtocolVersion::known_up_to(&rmcp::model::ProtocolVersion::LATEST);
    known
        .iter()
        .find(|v| v.as_str() == value)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<&str> = known.iter().map(|v| v.as_str()).collect();
            format!(
                "`protocolVersion` is one of {}, not {value:?}",
                names.join(", ")
            )
        })
}

/// `maxMessageBytes`: from 1 KiB to 1 GiB; the memory one message may take while read.
fn message_bytes(value: Option<u64>) -> Result<usize, String> {
    const RANGE: std::ops::RangeInclusive<u64> = 1024..=(1 << 30);
    match value {
        None => Ok(mcp_harness_transport::DEFAULT_MAX_MESSAGE_BYTES),
        Some(v) if RANGE.contains(&v) => Ok(v as usize),
        Some(v) => Err(format!(
            "`maxMessageBytes` must be a number of bytes between 1024 and 1073741824, not {v}"
        )),
    }
}

/// Deserializes `value` (the object at `at`, empty for the object an error's location already
/// names), an error saying which key is wrong (`startupTimeoutSec`, `oauth.scopes[0]`) and how in
/// plain words — and never quoting a string the file holds there: a string in the wrong place
/// may be a secret (`"env": "TOKEN=..."` for `"env": {"TOKEN": "..."}`).
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    at: &str,
) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (at, inner.as_str()) {
            (at, ".") => at.to_string(),
            ("", inner) => inner.to_string(),
            (at, inner) if inner.starts_with('[') => format!("{at}{inner}"),
            (at, inner) => format!("{at}.{inner}"),
        };
        let message = plain(&e.into_inner().to_string());
        // An unknown key's path ends with the key, which the message names already.
        let path = match message.starts_with("unknown field `") {
            true => path
                .rsplit_once('.')
                .map_or("", |(parent, _)| parent)
                .to_string(),
            false => path,
        };
        if path.is_empty() {
            message
        } else {
            format!("`{path}`: {message}")
        }
    })
}

/// serde's message with every value it quotes left out (strings, and numbers: a PIN is one)
/// and its type names in the config's words.
fn plain(message: &str) -> String {
    let mut out = strings_left_out(message);
    for (quoted, plain) in [
        ("integer `", "an integer"),
        ("floating point `", "a number"),
    ] {
        while let Some(at) = out.find(quoted) {
            let value = at + quoted.len();
            let Some(end) = out[value..].find('`').map(|end| value + end + 1) else {
                break;
            };
            out.replace_range(at..end, plain);
        }
    }
    let Some((what, expected)) = out.rsplit_once(", expected ") else {
        return out;
    };
    let expected = match expected {
        "f64" | "f32" => "a number",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "a boolean" => "true or false",
        "a map" => "an object",
        "a sequence" => "a list",
        other if other.starts_with("struct ") => "an object",
        other => other,
    };
    format!("{what}, expected {expected}")
}

/// `message` with each `string "..."` serde wrote in it said as `a string`.
fn strings_left_out(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("string \"") {
        out.push_str(&rest[..at]);
        out.push_str("a string");
        // The string is written as Rust debug-formats it: `\"` and `\\` inside.
        let quoted = &rest[at + "string \"".len()..];
        let mut end = quoted.len();
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &quoted[end..];
    }
    out.push_str(rest);
    out
}

fn seconds(key: &str, value: Option<f64>, default: Duration) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        Some(v) => Err(format!(
            "`{key}` must be a number of seconds above 0 and at most 86400, not {v}"
        )),
    }
}

/// Why a `${VAR}` reference could not be expanded. No message shows a variable's value or
/// other text of the value (a header's `Bearer ${sk_live_…}` is a secret typed in the wrong
/// place): a malformed reference is named by its position, and so is an unset one whose name
/// looks like a secret; only a name that looks like a variable's is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExpandError {
    /// A `${` without its `}`; `at` is the 1-based character position of the `$`.
    #[error("unterminated `${{` at character {at} of the value (close it with `}}`)")]
    Unterminated { at: usize },
    /// The `${` at character `at` (1-based) does not start a variable name (with an optional
    /// `:-default`).
    #[error(
        "the `${{` at character {at} of the value does not start a variable reference (write \
         `${{NAME}}` or `${{NAME:-default}}`, NAME of letters, digits and `_`; `$${{` for a \
         literal `${{`)"
    )]
    Invalid { at: usize },
    /// The variable is not set and the reference has no default; `at` is the 1-based
    /// character position of its `$`. A name that looks like a secret rather than a variable
    /// (a key typed into the braces) is not shown.
    #[error("{}", unset_message(var, *at))]
    Unset { var: String, at: usize },
}

/// The message of [`ExpandError::Unset`].
fn unset_message(var: &str, at: usize) -> String {
    if looks_like_a_secret(var) {
        format!(
            "the environment variable named at character {at} of the value {UNSET_VARIABLE}NAME:-default}}; \
             its name is not shown: it looks like a secret value, not a variable's name)"
        )
    } else {
        format!("environment variable {var} {UNSET_VARIABLE}{var}:-default}})")
    }
}

/// Whether a `${…}` name looks like a secret typed into the braces rather than a variable's
/// name: variables are named in one case (`GITHUB_TOKEN`, `http_proxy`); a key mixes cases
/// and digits (`sk_live_51Hx…`), or is long. Such a name is never shown.
pub fn looks_like_a_secret(name: &str) -> bool {
    let upper = name.chars().any(|c| c.is_ascii_uppercase());
    let lower = name.chars().any(|c| c.is_ascii_lowercase());
    let digits = name.chars().filter(char::is_ascii_digit).count();
    name.len() > 48 || (upper && lower && digits > 0) || digits > 8
}

/// What the message of [`ExpandError::Unset`] says (a server needing a variable not set is
/// kept, as failed, rather than failing the whole configuration).
const UNSET_VARIABLE: &str = "is not set (set it, or write ${";

/// Whether `name` can be an environment variable in a `${VAR}` reference (ASCII letters,
/// digits, `_`; not empty).
pub fn is_var_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expands `${VAR}` and `${VAR:-default}`; `$${` is a literal `${` (a value that holds one,
/// such as a password, can be written), any other `$` is itself. An unset variable without a
/// default is an error naming the variable (never its value).
pub(crate) fn expand(
    input: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        if rest[..start].ends_with('$') {
            // `$${`: the first `$` escapes the reference.
            out.push_str(&rest[..start - 1]);
            out.push_str("${");
            rest = &rest[start + 2..];
            continue;
        }
        out.push_str(&rest[..start]);
        // Where the `$` is (1-based, in characters): errors name a reference by it, never by
        // quoting the value, which may hold a secret next to the typo.
        let at = input[..input.len() - rest.len() + start].chars().count() + 1;
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ExpandError::Unterminated { at });
        };
        let body = &after[..end];
        let (var, default) = match body.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (body, None),
        };
        // A default holding a reference (`${A:-${B}}`) is not expanded: its first `}` would
        // end the outer reference and leave the rest as text.
        if !is_var_name(var) || default.is_some_and(|d| d.contains("${")) {
            return Err(ExpandError::Invalid { at });
        }
        match (
            lookup(var).filter(|v| !v.is_empty() || default.is_none()),
            default,
        ) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ExpandError::Unset {
                    var: var.to_string(),
                    at,
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// A config in a log (`{:?}`) holds none of its secrets: env and header values, a URL's
    /// password and query values, arguments' URLs.
    #[test]
    fn debug_output_holds_no_secret() {
        let text = r#"{"mcpServers": {
            "s": {"command": "x", "args": ["--url", "http://u:CANARY1@h/x"],
                  "env": {"TOKEN": "CANARY2"}},
            "h": {"url": "http://u:CANARY3@h/mcp?key=CANARY4",
                  "headers": {"Authorization": "Bearer CANARY5"},
                  "oauth": {"clientId": "c", "clientSecret": "CANARY6"}},
            "e": {"type": "sse", "url": "http://h/sse?k=CANARY7", "headers": {"K": "CANARY8"}}
        }}"#;
        let config = Config::parse(text, Path::new("c.json"), &|_| None).expect("valid");
        let shown = format!("{config:?}");
        assert!(!shown.contains("CANARY"), "{shown}");
        assert!(
            shown.contains("TOKEN") && shown.contains("Authorization"),
            "{shown}"
        );
    }

    /// A wrong value's error names its key and says what is expected in plain words, and never
    /// quotes a string of the file: one in the wrong place may be a secret.
    #[test]
    fn wrong_values_name_their_key_and_quote_no_string() {
        let error = |server: &str| {
            let text = format!(r#"{{"mcpServers": {{"s": {server}}}}}"#);
            Config::parse(&text, Path::new("c.json"), &|_| None)
                .expect_err(server)
                .to_string()
        };
        for (server, says) in [
            (
                r#"{"command": "x", "startupTimeoutSec": "sixty"}"#,
                "`startupTimeoutSec`: invalid type: a string, expected a number",
            ),
            (
                r#"{"command": "x", "env": "TOKEN=CANARY\"q\\"}"#,
                "`env`: invalid type: a string, expected an object",
            ),
            (
                r#"{"command": "x", "args": "--key=CANARY"}"#,
                "`args`: invalid type: a string, expected a list",
            ),
            (
                r#"{"command": "x", "maxMessageBytes": -5}"#,
                "`maxMessageBytes`: invalid value: an integer, expected a whole number, 0 or more",
            ),
            (
                r#"{"url": "https://x", "headers": {"A": 1}}"#,
                "`headers.A`: invalid type: an integer, expected a string",
            ),
            (
                r#"{"url": "https://x", "oauth": {"scopes": ["a", 2]}}"#,
                "`oauth.scopes[1]`: invalid type: an integer, expected a string",
            ),
            (
                r#"{"url": "https://x", "oauth": {"grant": "x", "scope": "CANARY"}}"#,
                "server \"s\": `oauth`: unknown field `scope`, expected one of `grant`",
            ),
            (
                r#"{"command": "x", "comand": "CANARY"}"#,
                "server \"s\": unknown field `comand`, expected one of `command`",
            ),
            (
                r#"{"command": "x", "env": {"PIN": 12345678909}}"#,
                "`env.PIN`: invalid type: an integer, expected a string",
            ),
            (
                r#"{"url": "https://x", "oauth": {"clientSecret": ["CANARY"]}}"#,
                "`oauth.clientSecret`: invalid type: sequence, expected a string",
            ),
            (
                r#"{"url": "https://x", "headers": {"Authorization": "Bearer CANARY\r\nX-Evil: 1"}}"#,
                "`headers.Authorization` holds a line break",
            ),
            (
                r#"{"url": "https://x", "headers": {"Bad Header": "CANARY"}}"#,
                "a name that is no HTTP header name (\"Bad Header\")",
            ),
            (
                r#"{"command": "x", "env": {"A=B": "CANARY"}}"#,
                "`env` has a name no environment variable can have (\"A=B\")",
            ),
        ] {
            let message = error(server);
            assert!(message.contains(says), "{server}: {message}");
            assert!(!message.contains("CANARY"), "{message}");
        }
        // The file itself: an unknown key gets every key there is; a wrong type no quote.
        let file = |text: &str| {
            Config::parse(text, Path::new("c.json"), &|_| None)
                .expect_err(text)
                .to_string()
        };
        let message = file(r#"{"mcpServers": {}, "remoteSource": []}"#);
        assert!(
            message.contains("unknown key `remoteSource`") && message.contains("`remoteSources`"),
            "{message}"
        );
        let message = file(r#"{"mcpServers": "CANARY"}"#);
        assert!(
            message.contains("invalid type: a string") && !message.contains("CANARY"),
            "{message}"
        );
    }

    use super::*;

    #[test]
    fn max_message_bytes_defaults_to_64_mib_is_bounded_and_the_undecodable_marker_is_shared() {
        assert_eq!(message_bytes(None), Ok(64 << 20));
        assert_eq!(message_bytes(Some(2048)), Ok(2048));
        let e = message_bytes(Some(10)).unwrap_err();
        assert!(e.contains("`maxMessageBytes`"), "{e}");
        // The transport marks undecodable listing entries with the key the catalog hides.
        assert_eq!(
            mcp_harness_transport::inbound::UNDECODABLE_META_KEY,
            mcp_harness_catalog::sanitize::UNDECODABLE_META_KEY
        );
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/p/.mcp.json"), &env)
    }

    #[test]
    fn names_are_qualified_unless_kept_as_listed() {
        let naming = |names: &str| {
            parse(&format!(
                r#"{{"mcpServers": {{"g": {{"url": "http://127.0.0.1:1/mcp"{names}}}}}}}"#
            ))
            .map(|c| c.servers["g"].names)
        };
        use mcp_harness_catalog::Naming;
        assert_eq!(naming("").unwrap(), Naming::Qualified);
        assert_eq!(
            naming(r#", "names": "as-listed""#).unwrap(),
            Naming::AsListed
        );
        let e = naming(r#", "names": "raw""#).unwrap_err().to_string();
        assert!(e.contains("`names`") && e.contains("as-listed"), "{e}");
    }

    /// Issue 13 point 5: server `x` tool `y__z` and server `x__y` tool `z` were both
    /// `mcp__x__y__z`, and one of them vanished.
    #[test]
    fn server_names_with_double_underscores_are_refused_with_the_fix() {
        let err = parse(r#"{"mcpServers": {"x__y": {"command": "srv"}}}"#).unwrap_err();
        assert_eq!(err.location, "/p/.mcp.json: server \"x__y\"");
        assert!(
            err.message.contains("must not contain `__`")
                && err
                    .message
                    .contains("rename the server key, e.g. to \"x-y\""),
            "{}",
            err.message
        );
        let err = parse(r#"{"mcpServers": {"a___b": {"command": "srv"}}}"#).unwrap_err();
        assert!(err.message.contains("\"a-_b\""), "{}", err.message);
        let err = parse(r#"{"mcpServers": {"x_": {"command": "srv"}}}"#).unwrap_err();
        assert!(err.message.contains("nor end with `_`"), "{}", err.message);
        // One underscore, or underscores apart, are fine.
        assert!(
            parse(r#"{"mcpServers": {"x_y_z": {"command": "srv"}, "_x": {"command": "srv"}}}"#)
                .is_ok()
        );
        // A control character would reach tables and warnings: refused, the key shown escaped.
        let err = parse(r#"{"mcpServers": {"x\r\u001b[2K": {"command": "srv"}}}"#).unwrap_err();
        assert_eq!(err.location, "/p/.mcp.json: server \"x\\r\\u{1b}[2K\"");
        assert!(
            err.message.contains("control characters"),
            "{}",
            err.message
        );
    }

    #[test]
    fn expands_variables_and_defaults() {
        assert_eq!(expand("${HOME}/x", &env).as_deref(), Ok("/home/u/x"));
        assert_eq!(expand("${NOPE:-dflt}", &env).as_deref(), Ok("dflt"));
        assert_eq!(expand("${EMPTY:-dflt}", &env).as_deref(), Ok("dflt"));
        assert_eq!(
            expand("a${TOKEN}b${HOME}", &env).as_deref(),
            Ok("as3cretb/home/u")
        );
        let err = expand("${NOPE}", &env).unwrap_err().to_string();
        assert!(err.contains("NOPE") && err.contains(":-default"), "{err}");
        assert!(expand("${oops", &env).is_err());
        // `$${` writes a literal `${`; a lone `$` is itself.
        assert_eq!(
            expand("pa$${x}word ${HOME} $5 $$", &env).as_deref(),
            Ok("pa${x}word /home/u $5 $$")
        );
        assert_eq!(expand("SECRET$${oops", &env).as_deref(), Ok("SECRET${oops"));
    }

    #[test]
    fn reads_the_claude_code_format() {
        let c = parse(r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "srv", "${HOME}"], "env": {"T": "${TOKEN}"}},
            "web": {"type": "http", "url": "https://example.test/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "toolTimeoutSec": 5},
            "off": {"command": "x", "enabled": false, "startupTimeoutSec": 2.5}
        }}"#).expect("valid");
        let TransportConfig::Stdio(fs) = &c.servers["fs"].transport else {
            panic!("stdio")
        };
        assert_eq!(fs.args, vec!["-y", "srv", "/home/u"]);
        assert_eq!(fs.env["T"], "s3cret");
        let TransportConfig::StreamableHttp { headers, .. } = &c.servers["web"].transport else {
            panic!("http")
        };
        assert_eq!(headers["Authorization"], "Bearer s3cret");
        assert_eq!(c.servers["web"].tool_timeout, Duration::from_secs(5));
        assert!(!c.servers["off"].enabled);
        assert_eq!(
            c.servers["off"].startup_timeout,
            Duration::from_millis(2500)
        );
    }

    /// A default holding a reference is refused (it would be cut at its first `}` and
    /// leave text behind), and so is a command that is empty once expanded.
    #[test]
    fn a_nested_default_and_an_empty_command_are_refused() {
        assert_eq!(
            expand("x${A:-${B}}", &|_| None),
            Err(ExpandError::Invalid { at: 2 })
        );
        assert_eq!(expand("${A:-b}", &|_| None).as_deref(), Ok("b"));
        for command in ["", "${EMPTY_NOT_SET:-}"] {
            let text = format!(r#"{{"mcpServers": {{"s": {{"command": "{command}"}}}}}}"#);
            let why = match parse(&text) {
                Err(e) => e.message,
                Ok(_) => unusable(&text),
            };
            assert!(why.contains("`command` is empty"), "{command:?}: {why}");
        }
    }

    #[test]
    fn a_malformed_reference_is_never_quoted() {
        let config = |secret: &str| {
            format!(
                r#"{{"mcpServers": {{"web": {{"type": "http", "url": "https://example.test/mcp",
                "oauth": {{"clientId": "c", "clientSecret": "{secret}"}}}}}}}}"#
            )
        };
        let err = parse(&config("${not a var}")).expect_err("malformed");
        assert!(
            err.message.contains(
                "`oauth.clientSecret`: the `${` at character 1 of the value does not start"
            ),
            "{}",
            err.message
        );
        assert!(!err.message.contains("not a var"), "{}", err.message);
        // A secret typed into the braces in a header is not quoted either: malformed, or a
        // valid name that looks like a key.
        let key = r#"{"mcpServers": {"web": {"type": "http", "url": "https://example.test/mcp",
            "headers": {"Authorization": "Bearer ${sk_live_51HxQ2eLkdJ8a9ZZ}"}}}}"#;
        let why = unusable(key);
        assert!(
            why.contains("named at character 8") && why.contains("is not set"),
            "{why}"
        );
        assert!(!why.contains("51HxQ2e"), "{why}");
        let header = r#"{"mcpServers": {"web": {"type": "http", "url": "https://example.test/mcp",
            "headers": {"Authorization": "Bearer ${sk_live_SUPERSECRET-123456}"}}}}"#;
        let why = match parse(header) {
            Err(e) => e.message,
            Ok(_) => unusable(header),
        };
        assert!(why.contains("character 8"), "{why}");
        assert!(!why.contains("SUPERSECRET"), "{why}");
        // An unset variable is named, with no value around it.
        let why = unusable(&config("${NOT_SET_ANYWHERE}"));
        assert!(
            why.contains("environment variable NOT_SET_ANYWHERE is not set"),
            "{why}"
        );
    }

    #[test]
    fn reads_legacy_sse_servers() {
        let c = parse(
            r#"{"mcpServers": {"old": {"type": "sse", "url": "${SSE_URL:-http://127.0.0.1:3001/sse}", "headers": {"Authorization": "Bearer ${TOKEN}"}}}}"#,
        )
        .expect("valid");
        let old = &c.servers["old"].transport;
        assert_eq!(
            old,
            &TransportConfig::LegacySse {
                url: "http://127.0.0.1:3001/sse".into(),
                headers: BTreeMap::from([("Authorization".into(), "Bearer s3cret".into())]),
            }
        );
        assert_eq!(old.kind(), "sse");
        let why = unusable(
            r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h", "headers": {"X": "${NOPE}"}}}}"#,
        );
        assert!(why.contains("headers.X") && why.contains("NOPE"), "{why}");
    }

    /// A `url` that is no http(s) URL with a host is refused at load (not at connect), without
    /// quoting it (its query may hold a key).
    #[test]
    fn a_url_that_is_not_http_is_refused_unquoted() {
        for (url, says) in [
            ("notaurl?key=s3cret-value", "http:// or https://"),
            (
                "ftp://127.0.0.1/mcp?key=s3cret-value",
                "http:// or https://",
            ),
            ("http:///mcp?key=s3cret-value", "no host"),
            ("https://:8080/mcp?key=s3cret-value", "no host"),
            ("http://h/a b?key=s3cret-value", "spaces"),
        ] {
            for kind in ["http", "sse"] {
                let text = serde_json::json!({"mcpServers": {"r": {"type": kind, "url": url}}});
                let err = parse(&text.to_string()).unwrap_err().to_string();
                assert!(err.contains(says) && err.contains("`url`"), "{url}: {err}");
                assert!(!err.contains("s3cret"), "{err}");
            }
        }
    }

    #[test]
    fn unknown_keys_name_file_server_and_key() {
        let err = parse(r#"{"mcpServers": {"fs": {"comand": "npx"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/p/.mcp.json") && err.contains("\"fs\"") && err.contains("comand"),
            "{err}"
        );
        let err = parse(r#"{"mcpServer": {}}"#).unwrap_err().to_string();
        assert!(err.contains("mcpServer"), "{err}");
    }

    #[test]
    fn transport_mistakes_are_explained() {
        for (text, needle) in [
            (r#"{"mcpServers": {"a": {}}}"#, "set `command`"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}"#,
                "not both",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "command": "x"}}}"#,
                "legacy",
            ),
            (r#"{"mcpServers": {"a": {"type": "sse"}}}"#, "takes a `url`"),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h", "args": ["x"]}}}"#,
                "stdio servers only",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "carrier-pigeon", "url": "http://h"}}}"#,
                "unknown",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "http://h", "env": {"A": "1"}}}}"#,
                "stdio servers only",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "toolTimeoutSec": -1}}}"#,
                "toolTimeoutSec",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        // A variable not set: that server kept as failed, naming it (the others run).
        assert!(
            unusable(r#"{"mcpServers": {"a": {"command": "${MISSING}"}}}"#).contains("MISSING")
        );
    }

    /// The reason the only server of `text` cannot start.
    fn unusable(text: &str) -> String {
        let c = parse(text).expect("kept");
        let server = c.servers.values().next().expect("a server");
        assert!(!server.enabled, "{server:?}");
        server.unusable.clone().expect("unusable")
    }

    #[test]
    fn metadata_limits_are_configurable_and_checked() {
        let c = parse(r#"{"mcpServers": {}, "metadataLimits": {"maxDescriptionChars": 100}}"#)
            .expect("valid");
        assert_eq!(c.metadata_limits.max_description_chars, 100);
        assert_eq!(
            c.metadata_limits.max_name_chars,
            MetadataLimits::default().max_name_chars
        );
        let err = parse(r#"{"metadataLimits": {"maxDescriptionChar": 1}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("metadataLimits") && err.contains("maxDescriptionChar"),
            "{err}"
        );
    }

    #[test]
    fn exposure_and_permissions_sections() {
        let c = parse(
            r#"{"mcpServers": {}, "exposure": {"maxTools": 5, "toolSearch": "on"},
            "permissions": {"allow": ["mcp__a__*"], "deny": ["mcp__a__rm"]}}"#,
        )
        .expect("valid");
        assert_eq!(c.exposure.max_tools, 5);
        assert_eq!(c.permissions.rules().len(), 2);
        let err = parse(r#"{"permissions": {"alow": []}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("permissions") && err.contains("alow"), "{err}");
    }

    #[test]
    fn inherit_env_is_a_stdio_key_defaulting_to_true() {
        let c = parse(r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "x", "inheritEnv": false}}}"#)
            .expect("valid");
        let inherit = |n: &str| match &c.servers[n].transport {
            TransportConfig::Stdio(spec) => spec.inherit_env,
            _ => panic!("stdio"),
        };
        assert!(inherit("a") && !inherit("b"));
        let err = parse(r#"{"mcpServers": {"a": {"url": "http://h", "inheritEnv": false}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("inheritEnv"), "{err}");
    }

    #[test]
    fn secrets_do_not_leak_into_errors() {
        let err = parse(r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"X": "${TOKEN}"}, "bogus": 1}}}"#)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
    }
}

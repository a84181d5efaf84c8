//! Who a client is: the `gateway.clients` profiles, each proven by a static bearer token (from
//! the gateway's environment) or an OAuth 2.1 access token (a JWT checked against the
//! authorization server's JWKS, issuer, audience = the gateway's own URL, expiry and scopes).
//!
//! Invariants:
//! - a token value is never logged, stored in a message or sent anywhere: bearer tokens are
//!   kept only as SHA-256 digests and compared in constant time; a refusal's description names
//!   what failed (expired, audience, issuer, signature, scope), never the token;
//! - every bearer profile is compared on every request (no early exit), so timing does not
//!   tell which profile, if any, was close;
//! - a JWT is accepted only with an asymmetric signature (RS*, PS*, ES256/384) by a key of its
//!   issuer's JWKS; an unknown `kid` refetches that JWKS at most once per
//!   [`REFETCH_INTERVAL`], so a flood of made-up key ids costs the authorization server
//!   nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::{constant_time, digest};
use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_harness_runtime::{ClientProfile, GatewayConfig, ProfileAuth};
use serde::Deserialize;

/// Clock skew tolerated on `exp` and `nbf`.
pub(crate) const LEEWAY_SECS: u64 = 30;
/// An unknown `kid` refetches a JWKS at most this often.
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// An authenticated client: the profile it proved.
#[derive(Clone)]
pub(crate) struct Identity(pub(crate) Arc<ClientProfile>);

/// Why a request was refused, as the HTTP answer says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// 401 or 403.
    pub(crate) status: u16,
    /// `invalid_token` or `insufficient_scope`; `None` when no token was given.
    pub(crate) error: Option<&'static str>,
    /// What failed (never the token).
    pub(crate) description: String,
    /// The scopes a 403 asks for.
    pub(crate) scope: Option<String>,
}

impl Refusal {
    fn invalid(description: impl Into<String>) -> Self {
        Self {
            status: 401,
            error: Some("invalid_token"),
            description: description.into(),
            scope: None,
        }
    }

    /// The `WWW-Authenticate` value (RFC 6750 §3, RFC 9728 §5.1).
    pub(crate) fn challenge(&self, metadata_url: &str) -> String {
        let mut out = format!("Bearer resource_metadata=\"{metadata_url}\"");
        if let Some(error) = self.error {
            out.push_str(&format!(", error=\"{error}\""));
            let description: String = self
                .description
                .chars()
                .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
                .collect();
            out.push_str(&format!(", error_description=\"{description}\""));
        }
        if let Some(scope) = &self.scope {
            out.push_str(&format!(", scope=\"{scope}\""));
        }
        out
    }
}

/// Why the profiles could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// A bearer profile's environment variable is unset or empty.
    #[error(
        "gateway.clients.{profile}.auth.tokenEnv: the environment variable {var} is not set (or empty); set it in the environment of `mcp-harness serve`"
    )]
    TokenUnset {
        /// The profile.
        profile: String,
        /// The variable's name.
        var: String,
    },
    /// Two bearer profiles have the same token.
    #[error(
        "gateway.clients.{first}.auth and gateway.clients.{second}.auth: both profiles have the same bearer token, so a client could not be told apart; give each its own"
    )]
    SameToken {
        /// One profile.
        first: String,
        /// The other.
        second: String,
    },
}

/// One OAuth profile's expectations.
struct OAuthProfile {
    issuer: String,
    jwks_uri: String,
    scopes: Vec<String>,
    client_ids: Option<Vec<String>>,
    profile: Arc<ClientProfile>,
}

/// The client profiles and what checks them.
pub(crate) struct Clients {
    /// Every profile by name.
    pub(crate) profiles: Vec<Arc<ClientProfile>>,
    /// (SHA-256 of the token, profile).
    bearer: Vec<([u8; 32], Arc<ClientProfile>)>,
    oauth: Vec<OAuthProfile>,
    jwks: tokio::sync::Mutex<HashMap<String, Fetched>>,
    http: reqwest::Client,
}

struct Fetched {
    keys: JwkSet,
    at: Instant,
}

/// The claims the gateway reads (the rest are checked by `jsonwebtoken`'s validation).
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<serde_json::Value>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

impl Clients {
    /// The profiles of `config`, reading each bearer token from `env`. `None` without
    /// profiles (no authentication).
    pub(crate) fn new(
        config: &GatewayConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ClientsError> {
        if config.clients.is_empty() {
            return Ok(None);
        }
        let mut profiles = Vec::new();
        let mut bearer: Vec<([u8; 32], Arc<ClientProfile>)> = Vec::new();
        let mut oauth = Vec::new();
        for profile in config.clients.values() {
            let profile = Arc::new(profile.clone());
            profiles.push(profile.clone());
            match &profile.auth {
                ProfileAuth::Bearer { token_env } => {
                    let token = env(token_env).filter(|t| !t.is_empty()).ok_or_else(|| {
                        ClientsError::TokenUnset {
                            profile: profile.name.clone(),
                            var: token_env.clone(),
                        }
                    })?;
                    let hash = sha256(token.as_bytes());
                    if let Some((_, other)) = bearer.iter().find(|(h, _)| *h == hash) {
                        return Err(ClientsError::SameToken {
                            first: other.name.clone(),
                            second: profile.name.clone(),
                        });
                    }
                    bearer.push((hash, profile.clone()));
                }
                ProfileAuth::OAuth {
                    issuer,
                    jwks_uri,
                    scopes,
                    client_ids,
                } => oauth.push(OAuthProfile {
                    issuer: issuer.clone(),
                    jwks_uri: jwks_uri.clone(),
                    scopes: scopes.clone(),
                    client_ids: client_ids.clone(),
                    profile: profile.clone(),
                }),
            }
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Ok(Some(Self {
            profiles,
            bearer,
            oauth,
            jwks: tokio::sync::Mutex::new(HashMap::new()),
            http,
        }))
    }

    /// The issuers of the OAuth profiles (the metadata's `authorization_servers`).
    pub(crate) fn authorization_servers(&self) -> Vec<String> {
        let mut out: Vec<String> = self.oauth.iter().map(|o| o.issuer.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every scope some profile requires (the metadata's `scopes_supported`).
    pub(crate) fn scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = self.oauth.iter().flat_map(|o| o.scopes.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The profile the request's `Authorization` header proves, for the gateway at
    /// `resource` (the audience a JWT must name).
    pub(crate) async fn authenticate(
        &self,
        authorization: Option<&str>,
        resource: &str,
    ) -> Result<Arc<ClientProfile>, Refusal> {
        let token = authorization.and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(Refusal {
                status: 401,
                error: None,
                description: "this gateway needs a bearer token (Authorization: Bearer ...)".into(),
                scope: None,
            });
        };
        let hash = sha256(token.as_bytes());
        let mut found = None;
        for (expected, profile) in &self.bearer {
            if constant_time::verify_slices_are_equal(expected, &hash).is_ok() {
                found = Some(profile.clone());
            }
        }
        if let Some(profile) = found {
            return Ok(profile);
        }
        if self.oauth.is_empty() {
            return Err(Refusal::invalid(
                "the bearer token is not one of a configured client profile",
            ));
        }
        self.check_jwt(token, resource).await
    }

    async fn check_jwt(&self, token: &str, resource: &str) -> Result<Arc<ClientProfile>, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Refusal::invalid("the token is neither a configured bearer token nor a JWT")
        })?;
        let issuer = unverified_issuer(token)
            .ok_or_else(|| Refusal::invalid("the token has no `iss` claim"))?;
        let candidates: Vec<&OAuthProfile> =
            self.oauth.iter().filter(|o| o.issuer == issuer).collect();
        let Some(first) = candidates.first() else {
            return Err(Refusal::invalid(
                "the token's issuer is not the issuer of any client profile",
            ));
        };
        let key = self
            .key(&first.jwks_uri, header.kid.as_deref(), header.alg)
            .await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = allowed_algorithms(&key.1);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&first.issuer]);
        let trimmed = resource.trim_end_matches('/');
        validation.set_audience(&[trimmed.to_string(), format!("{trimmed}/")]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.0, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Refusal::invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_string(),
                ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_string(),
                ErrorKind::InvalidAudience => {
                    format!("the token's audience is not this gateway ({trimmed})")
                }
                ErrorKind::InvalidIssuer => "the token's issuer is not expected".to_string(),
                ErrorKind::InvalidSignature => "the token's signature does not verify".to_string(),
                ErrorKind::InvalidAlgorithm => {
                    "the token's algorithm does not fit its key".to_string()
                }
                ErrorKind::MissingRequiredClaim(claim) => {
                    format!("the token has no `{claim}` claim")
                }
                _ => "the token could not be verified".to_string(),
            })
        })?;
        let claims = data.claims;
        let client = claims.client_id.as_deref().or(claims.azp.as_deref());
        let profile = candidates
            .iter()
            .find(|o| {
                o.client_ids
                    .as_ref()
                    .is_none_or(|ids| client.is_some_and(|c| ids.iter().any(|id| id == c)))
            })
            .ok_or_else(|| {
                Refusal::invalid("the token's client is not in `clientIds` of any client profile")
            })?;
        let granted = granted_scopes(&claims);
        let missing: Vec<&String> = profile
            .scopes
            .iter()
            .filter(|s| !granted.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(Refusal {
                status: 403,
                error: Some("insufficient_scope"),
                description: "the token lacks a scope this client needs".into(),
                scope: Some(profile.scopes.join(" ")),
            });
        }
        Ok(profile.profile.clone())
    }

    /// The verification key `kid` (or the only key usable with `alg`) of the JWKS at `uri`,
    /// refetching the set when the key is not known (at most once per [`REFETCH_INTERVAL`]).
    async fn key(
        &self,
        uri: &str,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<(DecodingKey, AlgorithmParameters), Refusal> {
        let mut cache = self.jwks.lock().await;
        if let Some(found) = cache.get(uri).and_then(|f| pick(&f.keys, kid, alg)) {
            return Ok(found);
        }
        let recent = cache
            .get(uri)
            .is_some_and(|f| f.at.elapsed() < REFETCH_INTERVAL);
        if !recent {
            match self.fetch(uri).await {
                Ok(keys) => {
                    cache.insert(
                        uri.to_string(),
                        Fetched {
                            keys,
                            at: Instant::now(),
                        },
                    );
                }
                Err(error) => {
                    tracing::warn!(jwks = %uri, %error, "the authorization server's JWKS could not be fetched");
                }
            }
        }
        cache
            .get(uri)
            .and_then(|f| pick(&f.keys, kid, alg))
            .ok_or_else(|| Refusal::invalid("the token's signing key is not in its issuer's JWKS"))
    }

    async fn fetch(&self, uri: &str) -> Result<JwkSet, String> {
        let response = self
            .http
            .get(uri)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if body.len() > MAX_JWKS_BYTES {
            return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))
    }
}

/// The key of `set` named `kid`, or without a `kid` the only asymmetric key; symmetric keys
/// never verify (an HMAC "key" would be public).
fn pick(
    set: &JwkSet,
    kid: Option<&str>,
    alg: Algorithm,
) -> Option<(DecodingKey, AlgorithmParameters)> {
    let asymmetric = |params: &AlgorithmParameters| {
        matches!(
            params,
            AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_)
        )
    };
    let jwk = match kid {
        Some(kid) => set.find(kid)?,
        None => {
            let mut usable = set.keys.iter().filter(|k| {
                asymmetric(&k.algorithm) && allowed_algorithms(&k.algorithm).contains(&alg)
            });
            let only = usable.next()?;
            if usable.next().is_some() {
                return None;
            }
            only
        }
    };
    if !asymmetric(&jwk.algorithm) {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some((key, jwk.algorithm.clone()))
}

/// The algorithms a key of this type may verify.
fn allowed_algorithms(params: &AlgorithmParameters) -> Vec<Algorithm> {
    match params {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(_) => vec![Algorithm::ES256, Algorithm::ES384],
        _ => Vec::new(),
    }
}

/// The `iss` of a JWT's payload, read before verification only to choose the profiles (and so
/// the JWKS) to verify it with.
fn unverified_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("iss")?.as_str().map(str::to_string)
}

/// The scopes a token grants: `scope` (space-separated) and `scp` (a list or a string).
fn granted_scopes(claims: &Claims) -> Vec<String> {
    let mut out: Vec<String> = claims
        .scope
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    match &claims.scp {
        Some(serde_json::Value::String(s)) => {
            out.extend(s.split_whitespace().map(str::to_string));
        }
        Some(serde_json::Value::Array(items)) => {
            out.extend(items.iter().filter_map(|v| v.as_str().map(str::to_string)));
        }
        _ => {}
    }
    out
}

/// The origin (`scheme://host[:port]`) of `url`.
pub(crate) fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_quote_no_token_and_name_the_metadata() {
        let refusal = Refusal::invalid("the token has \"expired\"");
        assert_eq!(
            refusal.challenge("http://127.0.0.1:1/.well-known/oauth-protected-resource"),
            "Bearer resource_metadata=\"http://127.0.0.1:1/.well-known/oauth-protected-resource\", error=\"invalid_token\", error_description=\"the token has expired\""
        );
        assert_eq!(
            origin("https://gw.example:8443/a/mcp"),
            "https://gw.example:8443"
        );
        assert_eq!(origin("http://127.0.0.1:9"), "http://127.0.0.1:9");
    }
}

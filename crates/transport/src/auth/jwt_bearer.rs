//! The grants that trade a JWT for an access token (RFC 7523 §2.1,
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`), run by the same
//! [`TokenSource`](super::TokenSource) as client credentials:
//!
//! - workload identity federation (SEP-1933, `oauth.grant: "jwt_bearer"`): the assertion is the
//!   workload's own JWT, read from `oauth.assertionFile` or the environment variable named by
//!   `oauth.assertionEnv` at each token request (workload tokens rotate);
//! - enterprise-managed authorization (SEP-990, `oauth.grant: "enterprise_managed"`): the user's
//!   ID token (`oauth.idTokenFile` / `oauth.idTokenEnv`) is exchanged at the enterprise identity
//!   provider (RFC 8693 token exchange at `oauth.idpTokenEndpoint`) for an ID-JAG (identity
//!   assertion JWT authorization grant) for the authorization server and this server, and the
//!   ID-JAG is the assertion.
//!
//! Invariants: the JWTs, ID-JAGs and the IdP client secret are never logged, stored or shown —
//! errors name the server and the config key, `Debug` shows paths and variable names only; a
//! JWT is read again for every token request, never cached.

use std::path::PathBuf;
use std::time::Duration;

use super::token_endpoint::{basic_credentials, form_body, oauth_error, secure_endpoint};

/// `grant_type` of the JWT bearer grant (RFC 7523 §2.1).
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// `grant_type` of token exchange (RFC 8693 §2.1).
pub(crate) const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The subject token type of an OpenID Connect ID token (RFC 8693 §3).
pub(crate) const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
/// The token type of an identity assertion JWT authorization grant (SEP-990).
pub(crate) const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";
/// How long the token exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// How the harness gets a server's access token without a user at hand.
#[derive(Clone, PartialEq, Eq)]
pub enum Grant {
    /// `grant: "client_credentials"` (SEP-1046).
    ClientCredentials,
    /// `grant: "jwt_bearer"`: the workload's JWT is the assertion.
    JwtBearer(JwtSource),
    /// `grant: "enterprise_managed"`: an ID-JAG from the identity provider is the assertion.
    EnterpriseManaged(Box<IdentityProvider>),
}

impl Grant {
    /// The grant's name in the config (and in messages).
    pub fn name(&self) -> &'static str {
        match self {
            Grant::ClientCredentials => "client_credentials",
            Grant::JwtBearer(_) => "jwt_bearer",
            Grant::EnterpriseManaged(_) => "enterprise_managed",
        }
    }
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grant::ClientCredentials => f.write_str("ClientCredentials"),
            Grant::JwtBearer(source) => f.debug_tuple("JwtBearer").field(source).finish(),
            Grant::EnterpriseManaged(idp) => f.debug_tuple("EnterpriseManaged").field(idp).finish(),
        }
    }
}

/// Where a JWT is, read at each use. `Debug` shows the path or the variable's name, which are
/// not secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwtSource {
    /// A file (a projected service-account token, say).
    File(PathBuf),
    /// An environment variable of the harness process, by name.
    Env(String),
}

impl JwtSource {
    /// The JWT now, trimmed. `keys` names the config keys of this source (`assertion` for
    /// `oauth.assertionFile`/`oauth.assertionEnv`); errors never quote the content.
    pub async fn read(&self, keys: &str) -> Result<String, String> {
        let text = match self {
            JwtSource::File(path) => {
                let path = path.clone();
                let shown = path.display().to_string();
                tokio::task::spawn_blocking(move || std::fs::read_to_string(&path))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("`oauth.{keys}File` ({shown}): cannot read it: {e}"))?
            }
            JwtSource::Env(name) => std::env::var(name).map_err(|_| {
                format!("`oauth.{keys}Env`: the environment variable `{name}` is not set")
            })?,
        };
        let jwt = text.trim();
        let what = match self {
            JwtSource::File(_) => format!("`oauth.{keys}File`"),
            JwtSource::Env(_) => format!("`oauth.{keys}Env`"),
        };
        if jwt.is_empty() {
            return Err(format!("{what}: it is empty"));
        }
        if jwt.split('.').count() != 3 || jwt.chars().any(char::is_whitespace) {
            return Err(format!(
                "{what}: it is not a JWT (three base64url parts separated by dots)"
            ));
        }
        Ok(jwt.to_string())
    }
}

/// The enterprise identity provider of `grant: "enterprise_managed"`.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    /// `oauth.idpTokenEndpoint`: where the ID token is exchanged (https or loopback).
    pub token_endpoint: String,
    /// `oauth.idpClientId`: the harness's client at the identity provider.
    pub client_id: Option<String>,
    /// `oauth.idpClientSecret`: its secret (HTTP Basic), if it is confidential.
    pub client_secret: Option<String>,
    /// `oauth.idTokenFile` / `oauth.idTokenEnv`: the user's ID token.
    pub id_token: JwtSource,
}

impl std::fmt::Debug for IdentityProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityProvider")
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("id_token", &self.id_token)
            .finish()
    }
}

/// Why the exchange gave no ID-JAG: `refused` when the identity provider said no (a 4xx other
/// than 429: fix the config or the ID token), else it may pass.
#[derive(Debug)]
pub struct ExchangeError {
    /// The identity provider said no (fix the config or the ID token).
    pub refused: bool,
    /// What failed, in words (never a secret).
    pub message: String,
    /// The identity provider's HTTP status, when it answered.
    pub status: Option<u16>,
}

impl IdentityProvider {
    /// RFC 8693 token exchange of `id_token` for an ID-JAG for the authorization server
    /// `audience` (its issuer) and the server `resource`.
    pub async fn exchange(
        &self,
        http: &reqwest::Client,
        id_token: &str,
        audience: &str,
        resource: &str,
        scopes: &[String],
    ) -> Result<String, ExchangeError> {
        let config = |message: String| ExchangeError {
            refused: true,
            message,
            status: None,
        };
        let unavailable = |message: String| ExchangeError {
            refused: false,
            message,
            status: None,
        };
        let endpoint = reqwest::Url::parse(&self.token_endpoint)
            .map_err(|e| config(format!("`oauth.idpTokenEndpoint` is not a URL: {e}")))?;
        if !secure_endpoint(&endpoint) {
            return Err(config(format!(
                "`oauth.idpTokenEndpoint` {} is not https: the ID token is sent only over https \
                 (or to a loopback address)",
                crate::endpoint::shown(&endpoint)
            )));
        }
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("requested_token_type", ID_JAG_TYPE),
            ("subject_token", id_token),
            ("subject_token_type", ID_TOKEN_TYPE),
            ("audience", audience),
            ("resource", resource),
        ];
        let scope = scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let mut request = http
            .post(endpoint.clone())
            .timeout(EXCHANGE_TIMEOUT)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        match (&self.client_id, &self.client_secret) {
            (Some(id), Some(secret)) => {
                let value = basic_credentials(id, secret).ok_or_else(|| {
                    config(
                        "`oauth.idpClientId`/`oauth.idpClientSecret` cannot be sent in an HTTP \
                         header"
                            .into(),
                    )
                })?;
                request = request.header(reqwest::header::AUTHORIZATION, value);
            }
            (Some(id), None) => form.push(("client_id", id)),
            (None, _) => {}
        }
        let response = request.body(form_body(&form)).send().await.map_err(|e| {
            unavailable(format!(
                "the identity provider's token endpoint {} could not be reached: {}",
                crate::endpoint::shown(&endpoint),
                crate::net::describe_request(&e)
            ))
        })?;
        let status = response.status();
        let body = crate::net::read_capped(response, super::dpop::MAX_TOKEN_BODY)
            .await
            .map_err(|e| {
                unavailable(format!(
                    "reading the identity provider's answer failed: {}",
                    crate::net::describe_request(&e)
                ))
            })?
            .ok_or_else(|| {
                unavailable("the identity provider's answer is larger than 1 MiB".into())
            })?;
        let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !status.is_success() {
            let what = oauth_error(status, &parsed);
            let message = format!(
                "the identity provider refused the token exchange ({what}); check the ID token \
                 (`oauth.idTokenFile`/`oauth.idTokenEnv`: expired, or for another client?), \
                 `oauth.idpClientId` and `oauth.idpClientSecret`"
            );
            return Err(
                if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
                    config(message)
                } else {
                    ExchangeError {
                        status: Some(status.as_u16()),
                        ..unavailable(message)
                    }
                },
            );
        }
        let issued = parsed.get("issued_token_type").and_then(|v| v.as_str());
        if issued.is_some_and(|t| t != ID_JAG_TYPE) {
            return Err(unavailable(format!(
                "the identity provider issued a `{}` instead of an ID-JAG",
                issued.unwrap_or_default()
            )));
        }
        parsed
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                unavailable("the identity provider's answer has no `access_token` (ID-JAG)".into())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(text: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mcp-harness-jwt-{}-{n}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[tokio::test]
    async fn a_jwt_file_is_read_at_each_use_and_trimmed() {
        let path = temp_file("aaa.bbb.ccc\n");
        let source = JwtSource::File(path.clone());
        assert_eq!(source.read("assertion").await.unwrap(), "aaa.bbb.ccc");
        std::fs::write(&path, "ddd.eee.fff").unwrap();
        assert_eq!(source.read("assertion").await.unwrap(), "ddd.eee.fff");
        std::fs::remove_file(&path).unwrap();
        let err = source.read("assertion").await.unwrap_err();
        assert!(err.contains("`oauth.assertionFile`"), "{err}");
    }

    #[tokio::test]
    async fn a_bad_jwt_is_named_by_its_key_never_quoted() {
        let path = temp_file("s3cret-not-a-jwt");
        let err = JwtSource::File(path.clone())
            .read("idToken")
            .await
            .unwrap_err();
        assert!(err.contains("`oauth.idTokenFile`"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        std::fs::write(&path, "  \n").unwrap();
        let err = JwtSource::File(path.clone())
            .read("assertion")
            .await
            .unwrap_err();
        assert!(err.contains("empty"), "{err}");
        let _ = std::fs::remove_file(&path);
        let err = JwtSource::Env("MCP_HARNESS_SURELY_UNSET_VAR_1234".into())
            .read("assertion")
            .await
            .unwrap_err();
        assert!(err.contains("`oauth.assertionEnv`"), "{err}");
        assert!(err.contains("MCP_HARNESS_SURELY_UNSET_VAR_1234"), "{err}");
    }

    #[test]
    fn debug_redacts_the_idp_secret() {
        let idp = IdentityProvider {
            token_endpoint: "https://idp.example/token".into(),
            client_id: Some("c".into()),
            client_secret: Some("hunter2".into()),
            id_token: JwtSource::Env("ID_TOKEN".into()),
        };
        let shown = format!("{:?}", Grant::EnterpriseManaged(Box::new(idp)));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("ID_TOKEN"), "{shown}");
    }
}

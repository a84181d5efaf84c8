//! The client credentials grant (machine to machine, SEP-1046; OAuth 2.1 §4.2): a server
//! configured with `oauth.grant: "client_credentials"` gets its access token from the token
//! endpoint without a browser, authenticating the client with HTTP Basic (`client_secret_basic`)
//! or a signed JWT assertion (RFC 7523 `private_key_jwt`, ES256 or RS256). The JWT bearer grants
//! (`"jwt_bearer"`, `"enterprise_managed"`, see [`super::jwt_bearer`]) run through the same
//! source: only the grant's own form fields differ.
//!
//! Invariants:
//! - the token lives in the server's [`FileCredentialStore`] like any other (0600, shared by the
//!   harness processes: one process's token serves the others until it expires, and a fetch
//!   holds the store's file lock, so two processes never fetch at once);
//! - a token is replaced before it expires (`RENEW_BEFORE`) and once when the server rejects
//!   it (401); client credentials have no refresh token, the grant is simply run again;
//! - a 403 `insufficient_scope` gets one new token for the union of the granted and the
//!   challenged scopes, and the refused request is sent once more (it was refused, so it never
//!   ran);
//! - the secret and the private key are read from the settings (the key file at each fetch, so
//!   a rotated key is used at once) and are never logged, stored or shown: errors name the server
//!   and the config key; `Debug` redacts them.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rmcp::transport::auth::{
    AuthorizationMetadata, CredentialStore, StoredCredentials, WWWAuthenticateParams,
};
use rmcp::transport::streamable_http_client::StreamableHttpError;

use super::assertion::{JwtAlgorithm, sign_assertion};
pub use super::discovery::{
    authorization_server_grants, discover, machine_to_machine, machine_to_machine_server,
};
use super::jwt_bearer::{Grant, JWT_BEARER};
use super::store::{ClientRecord, FileCredentialStore, StoreError};
use super::token_endpoint::{basic_credentials, form_body, oauth_error, secure_endpoint};
use crate::layer::{HttpLayer, PostResult, StreamResult};

/// A token is replaced when less than this is left of its lifetime (or half its lifetime, for
/// shorter ones).
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// How long one token request may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(20);

/// How the client proves who it is at the token endpoint.
#[derive(Clone, PartialEq, Eq)]
pub enum ClientAuth {
    /// `oauth.clientSecret`: HTTP Basic (`client_secret_basic`).
    Secret(String),
    /// `oauth.privateKeyFile` / `oauth.privateKey`: a JWT assertion signed with this key
    /// (`private_key_jwt`); the algorithm is `oauth.signingAlgorithm`, else the key's own.
    PrivateKey {
        /// The private key.
        key: PrivateKey,
        /// `oauth.signingAlgorithm`; `None`: the key's own.
        algorithm: Option<JwtAlgorithm>,
    },
    /// None (a public client, `none`): `client_id` goes in the form when there is one (the JWT
    /// bearer grant, whose assertion says who is asking).
    None,
}

/// Where the private key (PEM: PKCS#8 `PRIVATE KEY`, SEC1 `EC PRIVATE KEY` or PKCS#1
/// `RSA PRIVATE KEY`) is.
#[derive(Clone, PartialEq, Eq)]
pub enum PrivateKey {
    /// `oauth.privateKeyFile`, read at each token request.
    File(PathBuf),
    /// `oauth.privateKey`: the PEM text itself (typically `${VAR}`).
    Pem(String),
}

/// The settings of a server whose tokens the harness gets without a user: the grant and the
/// client.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// `oauth.clientId` (empty: none, for a `jwt_bearer` grant without one).
    pub client_id: String,
    /// How the client authenticates at the token endpoint.
    pub auth: ClientAuth,
    /// `oauth.scopes`; when empty, the scopes the server's challenge or metadata name.
    pub scopes: Vec<String>,
    /// `oauth.grant`.
    pub grant: Grant,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            ClientAuth::Secret(_) => "client_secret_basic ([REDACTED])".to_string(),
            ClientAuth::None => "none".to_string(),
            ClientAuth::PrivateKey { key, algorithm } => format!(
                "private_key_jwt ({}, {})",
                match key {
                    PrivateKey::File(path) => format!("key file {}", path.display()),
                    PrivateKey::Pem(_) => "key [REDACTED]".into(),
                },
                algorithm.map_or("algorithm of the key", JwtAlgorithm::as_str)
            ),
        };
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("auth", &auth)
            .field("scopes", &self.scopes)
            .field("grant", &self.grant)
            .finish()
    }
}

/// Why no token could be had. Names the server and the config key; never a secret.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientCredentialsError {
    /// The settings cannot work (unreadable or unusable key, insecure token endpoint): fix the
    /// config.
    #[error("server `{server}`: {message}")]
    /// The settings cannot work: fix the config.
    Config {
        /// The server's name.
        server: String,
        /// What failed, in words (never a secret).
        message: String,
    },
    /// The authorization server refused the client (wrong id, secret or key; scope not allowed).
    #[error("server `{server}`: {message}")]
    /// The authorization server refused the client.
    Refused {
        /// The server's name.
        server: String,
        /// What failed, in words (never a secret).
        message: String,
    },
    /// Discovery or the token request failed for a reason that may pass (network, 5xx).
    #[error("server `{server}`: {message}")]
    Unavailable {
        /// The server's name.
        server: String,
        /// What failed, in words (never a secret).
        message: String,
        /// The token endpoint's (or identity provider's) HTTP status, when it answered 5xx or
        /// 429.
        status: Option<u16>,
    },
}

impl ClientCredentialsError {
    /// The HTTP status of an authorization server that is unavailable for now (5xx or 429).
    pub fn unavailable_status(&self) -> Option<u16> {
        match self {
            ClientCredentialsError::Unavailable { status, .. } => *status,
            _ => None,
        }
    }
}

impl From<StoreError> for ClientCredentialsError {
    fn from(e: StoreError) -> Self {
        ClientCredentialsError::Config {
            server: e.server.clone(),
            message: e.to_string(),
        }
    }
}

/// A token as the source keeps it in memory.
#[derive(Clone)]
struct Token {
    access: String,
    /// Seconds since the epoch; `None`: the server gave no lifetime (used until rejected).
    expires_at: Option<u64>,
    /// When it was received (for the renewal margin).
    received_at: u64,
    scopes: Vec<String>,
}

impl Token {
    fn fresh(&self, now: u64) -> bool {
        match self.expires_at {
            None => true,
            Some(expires_at) => {
                let lifetime = expires_at.saturating_sub(self.received_at);
                let margin = RENEW_BEFORE.as_secs().min(lifetime / 2);
                now + margin < expires_at
            }
        }
    }

    /// The token in `stored`, when it was issued to `client_id`.
    fn from_stored(stored: &StoredCredentials, client_id: &str) -> Option<Token> {
        if stored.client_id != client_id {
            return None;
        }
        let response = serde_json::to_value(stored.token_response.as_ref()?).ok()?;
        let access = response.get("access_token")?.as_str()?.to_string();
        let received_at = stored.token_received_at.unwrap_or(0);
        let expires_at = response
            .get("expires_in")
            .and_then(|v| v.as_u64())
            .map(|s| received_at + s);
        Some(Token {
            access,
            expires_at,
            received_at,
            scopes: stored.granted_scopes.clone(),
        })
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// What a source keeps between requests.
#[derive(Default)]
struct Cached {
    token: Option<Token>,
    metadata: Option<AuthorizationMetadata>,
    /// The scopes discovery chose (when `oauth.scopes` names none).
    discovered_scopes: Option<Vec<String>>,
}

/// The access tokens of one server: cached, shared through the store, fetched when needed.
#[derive(Clone)]
pub struct TokenSource {
    inner: Arc<SourceInner>,
}

struct SourceInner {
    server: String,
    url: String,
    settings: ClientCredentials,
    store: FileCredentialStore,
    http: reqwest::Client,
    cached: tokio::sync::Mutex<Cached>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("server", &self.inner.server)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// The source of `server` at `url`; `http` makes the discovery and token requests.
    pub fn new(
        server: &str,
        url: &str,
        settings: ClientCredentials,
        store: FileCredentialStore,
        http: reqwest::Client,
    ) -> Self {
        Self {
            inner: Arc::new(SourceInner {
                server: server.to_string(),
                url: url.to_string(),
                settings,
                store,
                http,
                cached: Default::default(),
            }),
        }
    }

    /// A source with an HTTP client of its own (for a token outside a connection, `login`).
    pub fn standalone(
        server: &str,
        url: &str,
        settings: ClientCredentials,
        store: FileCredentialStore,
    ) -> Result<Self, String> {
        // A redirect may not take the form (a client secret, an assertion) to another origin.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(crate::endpoint::same_origin_redirects(10, true))
            .build()
            .map_err(|e| format!("could not build the HTTP client: {e}"))?;
        Ok(Self::new(server, url, settings, store, http))
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// A token that is not about to expire: the cached one, else the stored one (another
    /// process may have fetched it), else a new one.
    pub async fn token(&self) -> Result<String, ClientCredentialsError> {
        self.token_with(None, None).await
    }

    /// Like [`token`](Self::token), but never `rejected` (a token the server refused), and
    /// covering `more_scopes` (space separated) besides the current ones when given.
    async fn token_with(
        &self,
        rejected: Option<&str>,
        more_scopes: Option<&str>,
    ) -> Result<String, ClientCredentialsError> {
        let inner = &self.inner;
        let mut cached = inner.cached.lock().await;
        let usable = |t: &Token| {
            t.fresh(now())
                && Some(t.access.as_str()) != rejected
                && more_scopes.is_none_or(|more| {
                    more.split_whitespace()
                        .all(|s| t.scopes.iter().any(|g| g == s))
                })
        };
        if let Some(token) = cached.token.as_ref().filter(|t| usable(t)) {
            return Ok(token.access.clone());
        }
        // One fetch at a time across processes; the winner's token serves the others.
        let guard = inner
            .store
            .acquire_refresh_guard()
            .await
            .map_err(|e| self.config_error(e.to_string()))?;
        let file = self.read_store().await?;
        if let Some(token) = file
            .as_ref()
            .and_then(|f| f.credentials.as_ref())
            .and_then(|c| Token::from_stored(c, &inner.settings.client_id))
            .filter(|t| usable(t))
        {
            cached.token = Some(token.clone());
            return Ok(token.access);
        }
        if cached.metadata.is_none() {
            cached.metadata = file.as_ref().and_then(|f| f.metadata.clone());
        }
        let metadata = match cached.metadata.clone() {
            Some(m) => m,
            None => {
                let (metadata, scopes) = self.discover().await?;
                cached.metadata = Some(metadata.clone());
                cached.discovered_scopes = Some(scopes);
                metadata
            }
        };
        let mut scopes = if inner.settings.scopes.is_empty() {
            cached.discovered_scopes.clone().unwrap_or_else(|| {
                // Discovery ran in an earlier process: ask for what was granted then.
                cached
                    .token
                    .as_ref()
                    .map(|t| t.scopes.clone())
                    .unwrap_or_default()
            })
        } else {
            inner.settings.scopes.clone()
        };
        if let Some(more) = more_scopes {
            scopes = super::step_up::scope_union(&scopes, more);
        }
        let token = self.fetch(&metadata, &scopes).await?;
        let record = ClientRecord {
            client_id: inner.settings.client_id.clone(),
            client_secret: None,
            redirect_uri: String::new(),
        };
        let credentials = StoredCredentials::new(
            inner.settings.client_id.clone(),
            Some(token.response),
            token.token.scopes.clone(),
            Some(token.token.received_at),
        )
        .with_issuer(metadata.issuer.clone());
        let store = inner.store.clone();
        let stored_metadata = metadata.clone();
        tokio::task::spawn_blocking(move || {
            store.update(|f| {
                f.client = Some(record);
                f.metadata = Some(stored_metadata);
                f.credentials = Some(credentials);
                f.challenge = None;
            })
        })
        .await
        .map_err(|e| self.config_error(e.to_string()))??;
        drop(guard);
        tracing::info!(
            server = %inner.server,
            scopes = %token.token.scopes.join(" "),
            grant = inner.settings.grant.name(),
            "got an access token without a user"
        );
        let access = token.token.access.clone();
        cached.token = Some(token.token);
        Ok(access)
    }

    async fn read_store(&self) -> Result<Option<super::store::TokenFile>, ClientCredentialsError> {
        let store = self.inner.store.clone();
        Ok(tokio::task::spawn_blocking(move || store.read())
            .await
            .map_err(|e| self.config_error(e.to_string()))??)
    }

    fn config_error(&self, message: String) -> ClientCredentialsError {
        ClientCredentialsError::Config {
            server: self.inner.server.clone(),
            message,
        }
    }

    fn unavailable(&self, message: String) -> ClientCredentialsError {
        self.unavailable_at(message, None)
    }

    /// Unavailable with the HTTP `status` that said so (kept only when it is 5xx or 429).
    fn unavailable_at(&self, message: String, status: Option<u16>) -> ClientCredentialsError {
        ClientCredentialsError::Unavailable {
            server: self.inner.server.clone(),
            message,
            status: status.filter(|s| crate::error::unavailable_status(*s)),
        }
    }

    /// The authorization server's metadata (from the server's challenge and protected-resource
    /// metadata, as for a login) and the scopes they name.
    async fn discover(
        &self,
    ) -> Result<(AuthorizationMetadata, Vec<String>), ClientCredentialsError> {
        discover(&self.inner.http, &self.inner.url)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// One token request of the configured grant.
    async fn fetch(
        &self,
        metadata: &AuthorizationMetadata,
        scopes: &[String],
    ) -> Result<Fetched, ClientCredentialsError> {
        let inner = &self.inner;
        let endpoint = reqwest::Url::parse(&metadata.token_endpoint).map_err(|e| {
            self.unavailable(format!(
                "the authorization server's token endpoint is not a URL: {e}"
            ))
        })?;
        if !secure_endpoint(&endpoint) {
            return Err(self.config_error(format!(
                "the token endpoint {} is not https: client credentials are sent only over https \
                 (or to a loopback address)",
                crate::endpoint::shown(&endpoint)
            )));
        }
        super::token_endpoint::metadata_endpoint_allowed(&inner.url, &endpoint)
            .await
            .map_err(|why| self.config_error(format!("the token endpoint {why}")))?;
        let mut form: Vec<(&str, String)> = match &inner.settings.grant {
            Grant::ClientCredentials => vec![("grant_type", "client_credentials".into())],
            Grant::JwtBearer(source) => {
                // Read at each request: workload tokens rotate.
                let assertion = source
                    .read("assertion")
                    .await
                    .map_err(|e| self.config_error(e))?;
                vec![("grant_type", JWT_BEARER.into()), ("assertion", assertion)]
            }
            Grant::EnterpriseManaged(idp) => {
                let id_token = idp
                    .id_token
                    .read("idToken")
                    .await
                    .map_err(|e| self.config_error(e))?;
                let audience = metadata
                    .issuer
                    .clone()
                    .unwrap_or_else(|| metadata.token_endpoint.clone());
                let id_jag = idp
                    .exchange(&inner.http, &id_token, &audience, &inner.url, scopes)
                    .await
                    .map_err(|e| {
                        if e.refused {
                            ClientCredentialsError::Refused {
                                server: inner.server.clone(),
                                message: e.message,
                            }
                        } else {
                            self.unavailable_at(e.message, e.status)
                        }
                    })?;
                vec![("grant_type", JWT_BEARER.into()), ("assertion", id_jag)]
            }
        };
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        // RFC 8707: the token is for this server.
        form.push(("resource", inner.url.clone()));
        let mut request = inner
            .http
            .post(endpoint.clone())
            .timeout(TOKEN_TIMEOUT)
            .header(reqwest::header::ACCEPT, "application/json");
        match &inner.settings.auth {
            ClientAuth::Secret(secret) => {
                let value =
                    basic_credentials(&inner.settings.client_id, secret).ok_or_else(|| {
                        self.config_error(
                        "`oauth.clientId`/`oauth.clientSecret` cannot be sent in an HTTP header"
                            .into(),
                    )
                    })?;
                request = request.header(reqwest::header::AUTHORIZATION, value);
            }
            ClientAuth::PrivateKey { key, algorithm } => {
                let pem = match key {
                    PrivateKey::Pem(pem) => pem.clone(),
                    PrivateKey::File(path) => {
                        let path = path.clone();
                        tokio::task::spawn_blocking(move || std::fs::read_to_string(&path))
                            .await
                            .map_err(|e| self.config_error(e.to_string()))?
                            .map_err(|e| {
                                self.config_error(format!(
                                    "`oauth.privateKeyFile`: cannot read it: {e}"
                                ))
                            })?
                    }
                };
                let audience = metadata
                    .issuer
                    .clone()
                    .unwrap_or_else(|| metadata.token_endpoint.clone());
                let assertion = sign_assertion(
                    &pem,
                    *algorithm,
                    &inner.settings.client_id,
                    &audience,
                    now(),
                )
                .map_err(|e| self.config_error(e))?;
                form.push((
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
                ));
                form.push(("client_assertion", assertion));
            }
            ClientAuth::None => {
                if !inner.settings.client_id.is_empty() {
                    form.push(("client_id", inner.settings.client_id.clone()));
                }
            }
        }
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let response = request
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form_body(&pairs))
            .send()
            .await
            .map_err(|e| {
                self.unavailable(format!(
                    "the token endpoint {} could not be reached: {}",
                    crate::endpoint::shown(&endpoint),
                    crate::net::describe_request(&e)
                ))
            })?;
        let status = response.status();
        let received_at = now();
        let body = crate::net::read_capped(response, super::dpop::MAX_TOKEN_BODY)
            .await
            .map_err(|e| {
                self.unavailable(format!(
                    "reading the token response failed: {}",
                    crate::net::describe_request(&e)
                ))
            })?
            .ok_or_else(|| {
                self.unavailable("the token endpoint's answer is larger than 1 MiB".into())
            })?;
        if !status.is_success() {
            let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let what = oauth_error(status, &parsed);
            let client = match &inner.settings.auth {
                ClientAuth::Secret(_) => "`oauth.clientId` and `oauth.clientSecret`",
                ClientAuth::PrivateKey { .. } => {
                    "`oauth.clientId` and the private key (`oauth.privateKeyFile`/`oauth.privateKey`)"
                }
                ClientAuth::None => "`oauth.clientId`",
            };
            let keys = match &inner.settings.grant {
                Grant::ClientCredentials => client.to_string(),
                Grant::JwtBearer(_) => format!(
                    "the workload's JWT (`oauth.assertionFile`/`oauth.assertionEnv`: its \
                     audience must be the authorization server, and it must not have expired), \
                     {client}"
                ),
                Grant::EnterpriseManaged(_) => {
                    format!("{client} (the ID-JAG from the identity provider was refused)")
                }
            };
            let message = format!(
                "the authorization server refused the {} grant ({what}); check {keys}{}",
                inner.settings.grant.name().replace('_', " "),
                if scopes.is_empty() {
                    String::new()
                } else {
                    format!(" and `oauth.scopes` (asked for `{}`)", scopes.join(" "))
                }
            );
            return Err(
                if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
                    ClientCredentialsError::Refused {
                        server: inner.server.clone(),
                        message,
                    }
                } else {
                    self.unavailable_at(message, Some(status.as_u16()))
                },
            );
        }
        let raw: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| self.unavailable(format!("the token response is not JSON: {e}")))?;
        let access = raw
            .get("access_token")
            .and_then(|v| v.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.unavailable("the token response has no access_token".into()))?
            .to_string();
        let token_type = raw.get("token_type").and_then(|v| v.as_str()).unwrap_or("");
        if !token_type.eq_ignore_ascii_case("bearer") {
            return Err(self.unavailable(format!(
                "the token response has token_type `{token_type}`; only Bearer tokens are supported"
            )));
        }
        let granted = raw
            .get("scope")
            .and_then(|v| v.as_str())
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_else(|| scopes.to_vec());
        let expires_at = raw
            .get("expires_in")
            .and_then(|v| v.as_u64())
            .map(|s| received_at + s);
        let response = serde_json::from_value(raw).map_err(|e| {
            self.unavailable(format!(
                "the token response is not an OAuth token response: {e}"
            ))
        })?;
        Ok(Fetched {
            token: Token {
                access,
                expires_at,
                received_at,
                scopes: granted,
            },
            response,
        })
    }
}

struct Fetched {
    token: Token,
    response: rmcp::transport::auth::OAuthTokenResponse,
}

/// The Streamable HTTP client layer that sends the source's token with every request (in
/// place of any authorization header it came with), replaces it once when the server rejects
/// it (401) and widens it once on 403 `insufficient_scope`.
#[derive(Clone)]
pub struct ClientCredentialsAuth {
    source: TokenSource,
}

impl ClientCredentialsAuth {
    /// Made from its parts.
    pub fn new(source: TokenSource) -> Self {
        Self { source }
    }
}

/// A token failure as the transport error rmcp passes on (a refused client goes to
/// needs-auth through the `AuthRequired` classification).
fn token_error<E: std::error::Error + Send + Sync + 'static>(
    e: ClientCredentialsError,
) -> StreamableHttpError<E> {
    StreamableHttpError::Io(std::io::Error::other(e))
}

impl ClientCredentialsAuth {
    async fn authorized<T, E, F, Fut>(&self, call: F) -> Result<T, StreamableHttpError<E>>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<E>>>,
    {
        let token = self.source.token().await.map_err(token_error)?;
        match call(token.clone()).await {
            Err(StreamableHttpError::AuthRequired(challenge)) => {
                // Revoked or expired early: one new token, one retry.
                tracing::info!(server = %self.source.server(), "the server rejected the token: fetching a new one");
                let fresh = self
                    .source
                    .token_with(Some(&token), None)
                    .await
                    .map_err(token_error)?;
                if fresh == token {
                    return Err(StreamableHttpError::AuthRequired(challenge));
                }
                call(fresh).await
            }
            Err(StreamableHttpError::InsufficientScope(refused)) => {
                let base = reqwest::Url::parse(&self.source.inner.url);
                let scope = base
                    .ok()
                    .map(|b| WWWAuthenticateParams::parse(&refused.www_authenticate_header, &b))
                    .filter(|p| p.is_insufficient_scope())
                    .and_then(|p| p.scope);
                let Some(scope) = scope.filter(|s| !s.trim().is_empty()) else {
                    return Err(StreamableHttpError::InsufficientScope(refused));
                };
                tracing::info!(server = %self.source.server(), scopes = %scope, "the server asks for more scope: new client credentials token");
                let wider = self
                    .source
                    .token_with(None, Some(&scope))
                    .await
                    .map_err(token_error)?;
                if wider == token {
                    return Err(StreamableHttpError::InsufficientScope(refused));
                }
                call(wider).await
            }
            other => other,
        }
    }
}

impl HttpLayer for ClientCredentialsAuth {
    async fn post<E, F, Fut>(
        &self,
        _attached: bool,
        _auth: Option<String>,
        send: F,
    ) -> PostResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        self.authorized(|token| send(Some(token))).await
    }

    async fn get<E, F, Fut>(&self, _auth: Option<String>, send: F) -> StreamResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = StreamResult<E>> + Send,
    {
        self.authorized(|token| send(Some(token))).await
    }

    /// Closing never fetches a token: the cached one, or none.
    async fn delete_auth(&self, _auth: Option<String>) -> Option<String> {
        self.source
            .inner
            .cached
            .lock()
            .await
            .token
            .as_ref()
            .map(|t| t.access.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_secret_and_an_inline_key() {
        let settings = ClientCredentials {
            client_id: "c".into(),
            auth: ClientAuth::Secret("hunter2".into()),
            scopes: vec![],
            grant: Grant::ClientCredentials,
        };
        assert!(!format!("{settings:?}").contains("hunter2"));
        let settings = ClientCredentials {
            auth: ClientAuth::PrivateKey {
                key: PrivateKey::Pem("-----BEGIN PRIVATE KEY-----SECRET".into()),
                algorithm: None,
            },
            ..settings
        };
        assert!(!format!("{settings:?}").contains("SECRET"));
    }

    #[test]
    fn a_token_is_renewed_before_it_expires() {
        let token = |received_at, expires_at| Token {
            access: "t".into(),
            expires_at,
            received_at,
            scopes: vec![],
        };
        assert!(token(0, Some(3600)).fresh(3000));
        assert!(!token(0, Some(3600)).fresh(3541));
        // A 10-second token is renewed with 5 seconds left.
        assert!(token(0, Some(10)).fresh(4));
        assert!(!token(0, Some(10)).fresh(5));
        assert!(token(0, None).fresh(u64::MAX / 2));
    }
}

//! The authorization-code flow for one server, on rmcp's `auth` support: the server's 401
//! challenge → protected-resource and authorization-server metadata → client (pre-registered
//! from config, else a client ID metadata document when the server supports it and one is
//! configured, else dynamic registration asking for `refresh_token`) → PKCE S256 authorization
//! URL with `resource` and the selected scopes → the user's browser → code exchange → tokens in
//! the [`FileCredentialStore`].
//!
//! Invariants: the only piece that differs between a user and a test is the [`Browser`] (it
//! turns an authorization URL into the redirect URL the authorization server sent back); every
//! result lands in the store before `login` returns, with what a later refresh needs (client id,
//! secret, metadata), in one write once the whole flow succeeded (a failed or abandoned login
//! leaves the store as it was); the code, the verifier, the client secret and the tokens go
//! only to https (or loopback) endpoints; errors name the server and the config key to change,
//! never a token or the code, and show an authorization server's words without control
//! characters, at most 300 characters of them.

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    OAuthClientConfig,
};

use super::browser::Browser;
use super::context::AuthContext;
use super::store::{ClientRecord, FileCredentialStore};

/// The `oauth` settings of one server.
#[derive(Clone, Default)]
pub struct OAuthSettings {
    /// `oauth.clientId`: a client registered ahead of time.
    pub client_id: Option<String>,
    /// `oauth.clientSecret`: its secret, if it is confidential.
    pub client_secret: Option<String>,
    /// `oauth.clientMetadataUrl`: an https URL of this client's metadata document (SEP-991),
    /// used as the client id where the authorization server supports it.
    pub client_metadata_url: Option<String>,
    /// `oauth.scopes`: used only when neither the challenge nor the metadata name any.
    pub scopes: Vec<String>,
    /// Where the authorization server sends the browser back (a loopback URL).
    pub redirect_uri: String,
    /// `client_name` in a dynamic registration.
    pub client_name: Option<String>,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .finish()
    }
}

/// Why authorizing a server failed: each names the server and what to change.
#[derive(Debug, thiserror::Error)]
pub enum AuthFlowError {
    #[error(transparent)]
    /// The token store failed.
    Store(#[from] super::store::StoreError),
    #[error("server `{server}`: `url` {url}: {message}")]
    /// OAuth discovery failed.
    Discovery {
        /// The server's name.
        server: String,
        /// The server's URL, its password and query values hidden.
        url: String,
        /// What failed, in words (never a secret).
        message: String,
    },
    #[error("server `{server}`: client registration failed ({hint}): {message}")]
    /// No client: registration failed or is not possible.
    Registration {
        /// The server's name.
        server: String,
        /// The config key that would fix it.
        hint: &'static str,
        /// What failed, in words (never a secret).
        message: String,
    },
    #[error("server `{server}`: authorization was not completed: {message}")]
    /// The user did not authorize, or the redirect was unusable.
    Authorization {
        /// The server's name.
        server: String,
        /// What failed, in words (never a secret).
        message: String,
    },
    #[error(
        "server `{server}`: the code exchange at the token endpoint failed: {message}; the code \
         is spent, run `mcp-harness login {server}` again"
    )]
    /// The code exchange failed.
    Token {
        /// The server's name.
        server: String,
        /// What failed, in words (never a secret).
        message: String,
    },
}

/// The `WWW-Authenticate` challenge the server sends an unauthenticated `initialize`; `None` when
/// it did not answer 401 with one.
pub async fn challenge(http: &reqwest::Client, url: &str) -> Result<Option<String>, String> {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "mcp-harness", "version": env!("CARGO_PKG_VERSION")}}
    });
    let response = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| {
            let v = v.trim_start().to_ascii_lowercase();
            v.starts_with("bearer") || v.starts_with("dpop")
        })
        .map(str::to_string))
}

/// Runs the whole flow for `server` at `url` and stores the result in `context`'s store (whose
/// step-up history of the server starts again).
pub async fn login(
    context: &AuthContext,
    server: &str,
    url: &str,
    settings: &OAuthSettings,
    browser: &dyn Browser,
) -> Result<(), AuthFlowError> {
    let store = context.store(server, url);
    let discovery = |message: String| AuthFlowError::Discovery {
        server: server.to_string(),
        url: crate::redact::url(url),
        message,
    };
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        // A server that takes the request and never answers fails the login, not hangs it.
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| discovery(e.to_string()))?;
    let probed = challenge(&http, url)
        .await
        .map_err(|e| discovery(format!("the server could not be reached: {e}")))?;
    // A server that lets `initialize` through challenges later requests: the challenge the
    // harness got from it then (kept in the store) says which scopes and metadata to use. A
    // refused step-up left the scopes the server needs there too.
    // A file that is no token file is what this login replaces: it keeps nothing of it.
    let kept = match store.read() {
        Ok(file) => file.unwrap_or_default(),
        Err(e) if e.is_unparsable() => {
            tracing::warn!(server = %server, "{e}; the login replaces it");
            Default::default()
        }
        Err(e) => return Err(e.into()),
    };
    let challenge = probed.or(kept.challenge);
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| discovery(e.to_string()))?;
    // What the code exchange saves is held here until the whole flow succeeded, then written
    // with the client it belongs to.
    let staged = Staged::default();
    manager.set_credential_store(staged.clone());
    let metadata = match manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
    {
        Ok(resolution) => resolution.metadata,
        Err(e @ AuthError::AuthorizationServerMismatch { .. }) => {
            match legacy_root_metadata(&http, url, challenge.as_deref()).await {
                Some(metadata) => metadata,
                None => return Err(discovery(format!("OAuth discovery failed: {e}"))),
            }
        }
        Err(e) => return Err(discovery(format!("OAuth discovery failed: {e}"))),
    };
    manager.set_metadata(metadata.clone());
    // The code, the PKCE verifier, the client secret and the tokens go to the token and
    // registration endpoints: never in the clear across a network. The authorization endpoint
    // is opened in the user's browser: never another scheme (`file:`, `smb:`, a desktop
    // handler's), which the opener would hand to whatever handles it.
    let endpoints = [
        (
            "authorization_endpoint",
            Some(metadata.authorization_endpoint.as_str()),
        ),
        ("token_endpoint", Some(metadata.token_endpoint.as_str())),
        (
            "registration_endpoint",
            metadata.registration_endpoint.as_deref(),
        ),
    ];
    for (key, endpoint) in endpoints {
        let Some(endpoint) = endpoint else { continue };
        let secure =
            reqwest::Url::parse(endpoint).is_ok_and(|u| super::token_endpoint::secure_endpoint(&u));
        if !secure {
            return Err(discovery(format!(
                "the authorization server's `{key}` {} is not https (nor http to a loopback \
                 address): the login is opened and the code, the client secret and the tokens \
                 are sent only over https, so nothing was opened or sent; the authorization \
                 server must publish https endpoints",
                crate::redact::url(endpoint)
            )));
        }
    }

    let cimd_supported = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let mut scopes = manager
        .select_initial_scopes(
            &settings
                .scopes
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .await;
    for scope in &kept.step_up_scopes {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    scopes.dedup();
    let registration = |hint: &'static str, message: String| AuthFlowError::Registration {
        server: server.to_string(),
        hint,
        message,
    };
    // Registration order of the spec: pre-registered, client metadata document, dynamic.
    let client = if let Some(client_id) = &settings.client_id {
        ClientRecord {
            client_id: client_id.clone(),
            client_secret: settings.client_secret.clone(),
            redirect_uri: settings.redirect_uri.clone(),
        }
    } else if let (Some(doc), true) = (&settings.client_metadata_url, cimd_supported) {
        ClientRecord {
            client_id: doc.clone(),
            client_secret: None,
            redirect_uri: settings.redirect_uri.clone(),
        }
    } else if metadata.registration_endpoint.is_some() {
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let config = manager
            .register_client(
                settings.client_name.as_deref().unwrap_or("mcp-harness"),
                &settings.redirect_uri,
                &refs,
            )
            .await
            .map_err(|e| registration("dynamic registration", shown_error(&e.to_string(), &[])))?;
        ClientRecord {
            client_id: config.client_id,
            client_secret: config.client_secret,
            redirect_uri: settings.redirect_uri.clone(),
        }
    } else {
        return Err(registration(
            "set `oauth.clientId` (and `oauth.clientSecret`) for this server",
            "the authorization server offers neither dynamic registration nor client metadata \
             documents"
                .into(),
        ));
    };

    // An authorization server that binds tokens to a key (DPoP): a new key for this login, and
    // the code exchange (and every later refresh) through a client that proves possession of
    // it. Discovery and registration above ran through rmcp's address-filtering client; this
    // one talks only to the token endpoint that discovery found.
    let dpop_key = if super::dpop::advertised(&metadata) {
        let key = std::sync::Arc::new(
            super::dpop::DpopKey::generate().map_err(|e| registration("DPoP", e.to_string()))?,
        );
        manager = dpop_manager(url, &metadata, key.clone(), staged.clone())
            .await
            .map_err(&discovery)?;
        Some(key)
    } else {
        None
    };

    let mut request = AuthorizationRequest::new(settings.redirect_uri.clone())
        .with_preregistered_client(&client.client_id);
    if let Some(secret) = &client.client_secret {
        request = request.with_client_secret(secret);
    }
    request = request.with_scopes(scopes);
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| registration("`oauth.clientId`", e.to_string()))?;
    let redirect = browser
        .authorize(session.get_authorization_url())
        .await
        .map_err(|message| AuthFlowError::Authorization {
            server: server.to_string(),
            message,
        })?;
    let code = super::loopback::query_param(&redirect, "code");
    // The code is a secret until it is spent (rmcp logs it at debug): never in a log line.
    crate::redact::register(code.iter());
    if code.is_none()
        && let Some(error) = super::loopback::query_param(&redirect, "error")
    {
        let description =
            super::loopback::query_param(&redirect, "error_description").unwrap_or_default();
        return Err(AuthFlowError::Authorization {
            server: server.to_string(),
            message: shown_error(
                &format!("the authorization server refused: {error}: {description}"),
                &[],
            ),
        });
    }
    session
        .handle_callback_url(&redirect)
        .await
        .map_err(|e| AuthFlowError::Token {
            server: server.to_string(),
            message: callback_error_message(
                &e,
                &[
                    code.as_deref().unwrap_or_default(),
                    client.client_secret.as_deref().unwrap_or_default(),
                ],
            ),
        })?;
    let credentials = staged.take().ok_or_else(|| AuthFlowError::Token {
        server: server.to_string(),
        message: "the code exchange saved no tokens".into(),
    })?;
    // One write: the client, its metadata and key, its tokens; and, a fresh grant, what the
    // server asked for before is settled, its step-up budget renewed (here, and through the new
    // login id in every process sharing the store).
    let stored_key = dpop_key.as_ref().map(|k| k.to_stored());
    // Under the refresh lock: a refresh another process is making ends first, and its save
    // cannot land after this write with tokens of the client this login replaced.
    let writer = store.clone();
    tokio::task::spawn_blocking(move || {
        writer.update_locked(|f| {
            f.client = Some(client);
            f.metadata = Some(metadata);
            f.dpop_key = stored_key;
            f.credentials = Some(credentials);
            f.challenge = None;
            f.step_up_scopes.clear();
            f.login = Some(login_id());
        })
    })
    .await
    .map_err(|e| AuthFlowError::Token {
        server: server.to_string(),
        message: format!("storing the tokens failed: {e}"),
    })??;
    context.step_ups().reset(&store);
    Ok(())
}

/// The credentials a login's code exchange saves, held in memory until the whole flow
/// succeeded: a login that fails, is abandoned or loses a race with another never leaves its
/// client's record beside another client's tokens (the next refresh would find them apart and
/// need a new login).
#[derive(Clone, Default)]
struct Staged(std::sync::Arc<std::sync::Mutex<Option<rmcp::transport::auth::StoredCredentials>>>);

impl Staged {
    fn take(&self) -> Option<rmcp::transport::auth::StoredCredentials> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[async_trait::async_trait]
impl rmcp::transport::auth::CredentialStore for Staged {
    async fn load(&self) -> Result<Option<rmcp::transport::auth::StoredCredentials>, AuthError> {
        Ok(self.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    async fn save(
        &self,
        credentials: rmcp::transport::auth::StoredCredentials,
    ) -> Result<(), AuthError> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(credentials);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }
}

/// Why the redirect could not be turned into tokens, in words (the code never in them).
fn callback_error_message(e: &AuthError, secrets: &[&str]) -> String {
    let text = auth_error_message(e);
    if text.contains("state not found") || text.contains("CSRF") {
        return "the redirect's `state` is not this login's (a stale or forged redirect); run \
                the login again"
            .into();
    }
    // The PKCE verifier is rmcp's own, unknown here: a token endpoint that echoes the request
    // gets every run as long as one (43 characters or more of its alphabet) replaced.
    let shown = without_long_tokens(&shown_error(&text, secrets));
    // rmcp's words for a token endpoint that did not answer say only that the request failed.
    if shown.contains("Request failed") || shown.contains("error sending request") {
        return format!(
            "{shown} (the token endpoint could not be reached or did not answer within 30 s)"
        );
    }
    shown
}

/// `text` with each run of 43 or more characters of a PKCE verifier's alphabet (RFC 7636:
/// letters, digits, `-._~`) replaced: no word of an error message is that long.
fn without_long_tokens(text: &str) -> String {
    let verifier = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~');
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 43 {
            out.push_str("[redacted]");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if verifier(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The longest error text of an authorization server shown.
const MAX_SHOWN_ERROR: usize = 300;

/// `text` (what an authorization server said, in an error) fit for a terminal and a log line:
/// its first line, control characters dropped, at most [`MAX_SHOWN_ERROR`] characters, and each
/// of `secrets` and every credential shape ([`crate::redact::credentials`]) replaced.
fn shown_error(text: &str, secrets: &[&str]) -> String {
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    // Credential shapes too: a secret echoed Basic- or form-encoded is not its literal spelling.
    let mut line = crate::redact::credentials(&line);
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        line = line.replace(secret, "[redacted]");
    }
    if line.chars().count() > MAX_SHOWN_ERROR {
        line = line.chars().take(MAX_SHOWN_ERROR).collect::<String>() + "…";
    }
    line
}

/// An authorization manager for `url` whose token requests carry DPoP proofs made with `key`.
async fn dpop_manager(
    url: &str,
    metadata: &rmcp::transport::auth::AuthorizationMetadata,
    key: std::sync::Arc<super::dpop::DpopKey>,
    store: impl rmcp::transport::auth::CredentialStore + 'static,
) -> Result<AuthorizationManager, String> {
    let client = super::dpop::DpopTokenClient::new(key, &metadata.token_endpoint, url)?;
    let mut manager =
        AuthorizationManager::new_with_oauth_http_client(url, std::sync::Arc::new(client))
            .await
            .map_err(|e| e.to_string())?;
    manager.set_metadata(metadata.clone());
    manager.set_credential_store(store);
    Ok(manager)
}

/// A new random id for one login.
fn login_id() -> String {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; 12];
    if aws_lc_rs::rand::SystemRandom::new()
        .fill(&mut bytes)
        .is_err()
    {
        // The time and process still tell two logins apart.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return format!("{}-{nanos}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 2025-03-26 back-compat: a server without protected-resource metadata is its own
/// authorization server, with its metadata at the root of its origin. Such metadata is accepted
/// even when its `issuer` names a path on that origin (2025-03-26 required no issuer match),
/// but only when there is no protected-resource metadata at all and the issuer and both
/// endpoints are on the server's own origin, so it can never point the client at another party.
async fn legacy_root_metadata(
    http: &reqwest::Client,
    url: &str,
    challenge: Option<&str>,
) -> Option<rmcp::transport::auth::AuthorizationMetadata> {
    if challenge.is_some_and(|c| c.contains("resource_metadata")) {
        return None;
    }
    let server = reqwest::Url::parse(url).ok()?;
    let origin = server.origin();
    let at = |path: &str| {
        let mut u = server.clone();
        u.set_path(path);
        u.set_query(None);
        u
    };
    let prm_paths = [
        format!(
            "/.well-known/oauth-protected-resource{}",
            server.path().trim_end_matches('/')
        ),
        "/.well-known/oauth-protected-resource".to_string(),
    ];
    for path in prm_paths {
        let response = http.get(at(&path)).send().await.ok()?;
        if response.status().is_success() {
            return None;
        }
    }
    let response = http
        .get(at("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let metadata: rmcp::transport::auth::AuthorizationMetadata = response.json().await.ok()?;
    let same_origin = |u: &str| reqwest::Url::parse(u).is_ok_and(|u| u.origin() == origin);
    let issuer_ok = metadata.issuer.as_deref().is_none_or(same_origin);
    if !(issuer_ok
        && same_origin(&metadata.authorization_endpoint)
        && same_origin(&metadata.token_endpoint)
        && metadata
            .registration_endpoint
            .as_deref()
            .is_none_or(same_origin))
    {
        return None;
    }
    tracing::warn!(
        url,
        "no protected-resource metadata: using the 2025-03-26 authorization server metadata at the \
         server's root, whose issuer is on the same origin but does not match its location"
    );
    Some(metadata)
}

/// An error's message without anything that could be a credential: rmcp's messages carry none,
/// but a provider's error body could echo a code, so only the first line is kept.
fn auth_error_message(e: &AuthError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// An authorizing HTTP client for `server` when its store holds tokens from a login; `None`
/// when it holds none (the caller connects without authorization, exactly as before).
pub async fn stored_client(
    store: &FileCredentialStore,
    http: reqwest::Client,
    url: &str,
) -> Result<Option<AuthClient<super::dpop::DpopHttpClient>>, AuthFlowError> {
    let Some(file) = store.read()? else {
        return Ok(None);
    };
    let (Some(client), Some(metadata), Some(credentials)) =
        (file.client, file.metadata, file.credentials)
    else {
        return Ok(None);
    };
    let discovery = |message: String| AuthFlowError::Discovery {
        server: store.server().to_string(),
        url: crate::redact::url(url),
        message,
    };
    // A token bound to the stored DPoP key is refreshed and sent with proofs of that key.
    let dpop_bound = credentials
        .token_response
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .is_some_and(|t| t["token_type"].as_str().is_some_and(super::dpop::bound));
    let key = match (&file.dpop_key, dpop_bound) {
        (Some(stored), true) => Some(std::sync::Arc::new(
            super::dpop::DpopKey::from_stored(stored).map_err(|e| AuthFlowError::Registration {
                server: store.server().to_string(),
                hint: "run `mcp-harness login` again",
                message: e.to_string(),
            })?,
        )),
        _ => None,
    };
    let mut manager = match &key {
        Some(key) => dpop_manager(url, &metadata, key.clone(), store.clone())
            .await
            .map_err(discovery)?,
        None => {
            let mut manager = AuthorizationManager::new(url)
                .await
                .map_err(|e| discovery(e.to_string()))?;
            manager.set_metadata(metadata);
            manager.set_credential_store(store.clone());
            manager
        }
    };
    let mut config = OAuthClientConfig::new(client.client_id, client.redirect_uri);
    if let Some(secret) = client.client_secret {
        config = config.with_client_secret(secret);
    }
    manager
        .configure_client(config)
        .map_err(|e| AuthFlowError::Registration {
            server: store.server().to_string(),
            hint: "run `mcp-harness login` again",
            message: e.to_string(),
        })?;
    Ok(Some(AuthClient::new(
        super::dpop::DpopHttpClient::new(http, key),
        manager,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echoed_verifier_or_secret_is_not_shown() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk0123";
        let text = format!(
            "invalid_grant: bad request code_verifier={verifier}&client_secret=SECRET-d0ef at https://as.example.com/token"
        );
        let shown = without_long_tokens(&shown_error(&text, &["SECRET-d0ef"]));
        assert!(
            !shown.contains(verifier) && !shown.contains("SECRET-d0ef"),
            "{shown}"
        );
        assert!(shown.contains("invalid_grant") && shown.contains("https://as.example.com/token"));
    }
}

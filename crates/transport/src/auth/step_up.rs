//! Step-up authorization (R33): a server that refuses a request with `403` and
//! `WWW-Authenticate: Bearer error="insufficient_scope", scope="..."` gets a new authorization
//! for the union of the scopes granted so far and the challenged ones, and the refused request is
//! sent once more with the new token. The layer ([`StepUp`]) sits under rmcp's authorizing
//! client, so it covers every request of a session (initialize, listings, tool calls, the GET
//! stream) the same way.
//!
//! Invariants:
//! - only a 403 response leads to a retry: the server refused the request, so sending it again
//!   after the new token cannot run it twice; no other failure is retried here;
//! - at most [`MAX_STEP_UPS`] step-up authorizations per server for the life of its
//!   [`StepUps`] (one per auth context; reconnections included), one per request, never two for the same scope set in a row (the
//!   server refused a token authorized for exactly those scopes); concurrent refusals share one
//!   authorization;
//! - someone must authorize: the browser of the [`StepUps`] (the user's stand-in);
//!   without one, and whenever step-up is refused, the request fails with a [`StepUpRefused`]
//!   naming the server, the scopes and what to do, and the scopes are kept in the token store so
//!   the next `mcp-harness login` asks for them;
//! - a 401 challenge passing through is kept in the token store (the scopes it names are what
//!   `login` asks for when the server lets the login's own probe through);
//! - no token, code or secret appears in an error or a log line (only scopes and the server).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{AuthorizationCallback, AuthorizationManager, WWWAuthenticateParams};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpError,
};

use super::browser::Browser;
use super::store::FileCredentialStore;
use super::token_endpoint::first_line;
use crate::layer::{HttpLayer, PostResult, StreamResult};

/// Step-up authorizations one server gets per [`StepUps`] (per auth context), reconnections
/// included.
pub const MAX_STEP_UPS: u32 = 3;

/// One server's step-up state: the budget under its lock, and the generation readable without
/// it (a request waits for no one's authorization before it is sent).
#[derive(Default)]
struct Shared {
    state: tokio::sync::Mutex<StepUpState>,
    generation: AtomicU64,
    /// The last refusal, for [`StepUps::last_refusal`].
    last: Mutex<Option<Refusal>>,
}

/// Step-up for the servers of one auth context: who authorizes (the browser) and each server's
/// step-up state (budget, lock, last refusal). A clone shares both; two `StepUps` made with
/// [`StepUps::new`] share nothing, so two runtimes with their own never use each other's
/// browser or budget.
#[derive(Clone, Default)]
pub struct StepUps {
    /// Who authorizes; `None`: nobody (the request fails, asking for a `login`).
    browser: Option<Arc<dyn Browser>>,
    /// Per server (token file path): its state.
    states: Arc<Mutex<HashMap<String, Arc<Shared>>>>,
}

impl std::fmt::Debug for StepUps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepUps")
            .field("browser", &self.browser.is_some())
            .finish_non_exhaustive()
    }
}

impl StepUps {
    /// Step-ups authorized by `browser` (an interactive browser for a user, or a stand-in that
    /// follows redirects itself for test servers); `None` turns step-up off.
    pub fn new(browser: Option<Arc<dyn Browser>>) -> Self {
        Self {
            browser,
            states: Arc::default(),
        }
    }

    /// Whether someone authorizes step-ups here.
    pub fn has_browser(&self) -> bool {
        self.browser.is_some()
    }

    fn state_for(&self, store: &FileCredentialStore) -> Arc<Shared> {
        let key = store.path().to_string_lossy().into_owned();
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default()
            .clone()
    }

    /// Why the last step-up of the server behind `store` was refused here, if one was since its
    /// last login: whether logging in again can help ([`Refusal::needs_login`]).
    pub fn last_refusal(&self, store: &FileCredentialStore) -> Option<Refusal> {
        self.state_for(store)
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the step-up history of the server behind `store` (a login gave it a fresh
    /// grant).
    pub fn reset(&self, store: &FileCredentialStore) {
        let key = store.path().to_string_lossy().into_owned();
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }
}

/// `current` followed by the scopes of `challenged` (space separated) it lacks, each once, in
/// first-seen order.
pub(crate) fn scope_union(current: &[String], challenged: &str) -> Vec<String> {
    let mut union: Vec<String> = Vec::new();
    for scope in current
        .iter()
        .map(String::as_str)
        .chain(challenged.split_whitespace())
    {
        if !scope.is_empty() && !union.iter().any(|s| s == scope) {
            union.push(scope.to_string());
        }
    }
    union
}

/// One server's step-up history.
#[derive(Debug, Default)]
pub(crate) struct StepUpState {
    /// Step-up authorizations started (successful or not).
    attempts: u32,
    /// Completed step-ups; a request that saw an older value was refused for a token that has
    /// been replaced since, so it is retried without a new authorization.
    generation: u64,
    /// The scope set the last step-up asked for.
    last_requested: Option<Vec<String>>,
    /// The login the budget counts for (the token file's `login` id).
    login: Option<String>,
}

/// What to do about one 403 `insufficient_scope`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The token was replaced after the request was sent: send it again with the new one.
    Retry,
    /// Authorize these scopes, then send the request again.
    Authorize(Vec<String>),
}

/// Why no step-up is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Nobody can authorize (the auth context has no step-up browser).
    NoAuthorizer {
        /// The scopes the server asked for.
        scopes: Vec<String>,
    },
    /// The server already had its [`MAX_STEP_UPS`] step-ups.
    Exhausted {
        /// The scopes the server asked for.
        scopes: Vec<String>,
    },
    /// The last step-up asked for exactly these scopes, and the server still refused the token.
    NoProgress {
        /// The scopes the server asked for.
        scopes: Vec<String>,
    },
    /// The request was refused again right after its step-up.
    StillRefused {
        /// The scopes the server asked for.
        scopes: Vec<String>,
    },
    /// The step-up authorization itself failed.
    Failed {
        /// The scopes the server asked for.
        scopes: Vec<String>,
        /// What failed, in words (never a secret).
        message: String,
    },
}

impl Refusal {
    /// The scopes the server needs (the union), which a later login should ask for.
    pub fn scopes(&self) -> &[String] {
        match self {
            Refusal::NoAuthorizer { scopes }
            | Refusal::Exhausted { scopes }
            | Refusal::NoProgress { scopes }
            | Refusal::StillRefused { scopes }
            | Refusal::Failed { scopes, .. } => scopes,
        }
    }

    /// Whether a new login is what the user needs (the server goes to needs-auth); the others
    /// mean the authorization server does not grant what the server requires.
    pub fn needs_login(&self) -> bool {
        matches!(self, Refusal::NoAuthorizer { .. } | Refusal::Failed { .. })
    }
}

impl StepUpState {
    /// The decision for a 403 whose request was sent when the state was at `seen_generation`,
    /// with `granted` the scopes of the current grant and `challenged` the challenge's `scope`.
    /// An authorization decided here counts against the budget whether or not it succeeds.
    pub(crate) fn decide(
        &mut self,
        seen_generation: u64,
        granted: &[String],
        challenged: &str,
        offline_access: bool,
    ) -> Result<Decision, Refusal> {
        if self.generation != seen_generation {
            return Ok(Decision::Retry);
        }
        let mut scopes = scope_union(granted, challenged);
        // SEP-2207, as rmcp's own scope upgrade does: keep refresh tokens coming.
        if offline_access && !scopes.is_empty() && !scopes.iter().any(|s| s == "offline_access") {
            scopes.push("offline_access".into());
        }
        if self.attempts >= MAX_STEP_UPS {
            return Err(Refusal::Exhausted { scopes });
        }
        if self
            .last_requested
            .as_ref()
            .is_some_and(|last| same_set(last, &scopes))
        {
            return Err(Refusal::NoProgress { scopes });
        }
        self.attempts += 1;
        self.last_requested = Some(scopes.clone());
        Ok(Decision::Authorize(scopes))
    }

    /// The token file says which login its grant came from: a login other than the one the
    /// budget counted for (another process's `mcp-harness login`) renews the budget.
    /// `true` when the budget was renewed.
    pub(crate) fn observe_login(&mut self, login: Option<&str>) -> bool {
        if self.login.as_deref() == login {
            return false;
        }
        self.attempts = 0;
        self.last_requested = None;
        self.login = login.map(str::to_string);
        true
    }

    /// A step-up authorization completed: requests refused before it are retried as they are.
    pub(crate) fn completed(&mut self) {
        self.generation += 1;
    }

    /// The login generation this refusal belongs to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Step-ups made in this login.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|s| b.contains(s))
}

/// A request the server refused for lack of scope, with no (further) step-up: names the server,
/// the scopes and what to do. Its source is an [`AuthRequiredError`] with the server's
/// challenge, so a refusal while connecting (initialize, the first listing) sends the server to
/// needs-auth — a login asks for the scopes, and renews the budget — instead of reconnecting
/// with backoff; a refused call is a permission error (the runtime looks for the refusal first,
/// [`refusal_in`]).
#[derive(Debug)]
pub struct StepUpRefused {
    /// The server's name.
    pub server: String,
    /// Why the step-up stopped.
    pub refusal: Refusal,
    challenge: AuthRequiredError,
}

impl std::fmt::Display for StepUpRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let server = &self.server;
        let scopes = self.refusal.scopes().join(" ");
        let login = format!("`mcp-harness login {server}` (it asks for these scopes)");
        match &self.refusal {
            Refusal::NoAuthorizer { .. } => write!(
                f,
                "server `{server}` needs more scope for this request (403 insufficient_scope; \
                 scopes `{scopes}`): run {login}, then restart the server"
            ),
            Refusal::Exhausted { .. } => write!(
                f,
                "server `{server}` still refuses for lack of scope (`{scopes}`) after \
                 {MAX_STEP_UPS} step-up authorizations, the most made per server: the account may \
                 not be allowed these scopes; ask the server's administrator, then run {login}"
            ),
            Refusal::NoProgress { .. } | Refusal::StillRefused { .. } => write!(
                f,
                "server `{server}` refused a token authorized for scopes `{scopes}` \
                 (403 insufficient_scope): the authorization server does not grant what the \
                 server requires; ask the server's administrator, then run {login}"
            ),
            Refusal::Failed { message, .. } => write!(
                f,
                "server `{server}` needs more scope (`{scopes}`) and the step-up authorization \
                 failed: {message}; run {login}"
            ),
        }
    }
}

impl std::error::Error for StepUpRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.challenge)
    }
}

/// The [`StepUpRefused`] somewhere in `error`'s source chain (it travels inside an
/// [`std::io::Error`], whose own `source` skips it).
pub fn refusal_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a StepUpRefused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<StepUpRefused>() {
            return Some(refused);
        }
        if let Some(refused) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<StepUpRefused>())
        {
            return Some(refused);
        }
        current = e.source();
    }
    None
}

/// Whether a failed request's `error` says the server no longer accepts this client's
/// authorization: a 401 challenge, or an OAuth failure of the token source (a rejected refresh,
/// a revoked grant). A refusal for lack of scope is not this (step-up handles it).
pub fn authorization_lost(error: &rmcp::service::ServiceError) -> bool {
    if refusal_in(error).is_some() {
        return false;
    }
    let rmcp::service::ServiceError::TransportSend(error) = error else {
        return false;
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.error.as_ref());
    while let Some(current) = source {
        if current
            .downcast_ref::<rmcp::transport::streamable_http_client::AuthRequiredError>()
            .is_some()
            || current
                .downcast_ref::<rmcp::transport::auth::AuthError>()
                .is_some()
        {
            return true;
        }
        source = current.source();
    }
    false
}

/// The Streamable HTTP client layer that performs step-ups (with the authorizing client's
/// manager) and keeps 401 challenges in the token store.
#[derive(Clone)]
pub struct StepUp {
    server: String,
    url: String,
    store: FileCredentialStore,
    /// The manager of rmcp's authorizing client under this layer; `None` without tokens (then a
    /// 403 is passed on as it is).
    manager: Option<Arc<tokio::sync::Mutex<AuthorizationManager>>>,
    shared: Arc<Shared>,
    /// Who authorizes (the [`StepUps`]' browser).
    browser: Option<Arc<dyn Browser>>,
}

impl StepUp {
    /// The layer for a client without tokens: it only keeps challenges.
    pub fn unauthorized(
        step_ups: &StepUps,
        server: &str,
        url: &str,
        store: FileCredentialStore,
    ) -> Self {
        let shared = step_ups.state_for(&store);
        Self {
            server: server.to_string(),
            url: url.to_string(),
            store,
            manager: None,
            shared,
            browser: step_ups.browser.clone(),
        }
    }

    /// The layer for rmcp's authorizing client `client`: it steps up with that client's
    /// manager.
    pub fn authorized<C>(
        step_ups: &StepUps,
        client: &rmcp::transport::auth::AuthClient<C>,
        server: &str,
        url: &str,
        store: FileCredentialStore,
    ) -> Self {
        let manager = Some(client.auth_manager.clone());
        let shared = step_ups.state_for(&store);
        Self {
            server: server.to_string(),
            url: url.to_string(),
            store,
            manager,
            shared,
            browser: step_ups.browser.clone(),
        }
    }
}

impl StepUp {
    /// Runs `call`; on a 403 `insufficient_scope`, steps up (or shares another request's step-up)
    /// and runs it once more.
    async fn guarded<T, E, F, Fut>(&self, call: F) -> Result<T, StreamableHttpError<E>>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<E>>>,
    {
        if let Some(manager) = &self.manager {
            // A due token is refreshed once for every process sharing the store.
            self.store.refresh_if_due(manager).await;
        }
        let mut seen = self.shared.generation.load(Ordering::Acquire);
        let mut stepped_up = false;
        let mut retries = 0;
        loop {
            let error = match call().await {
                Err(StreamableHttpError::InsufficientScope(e)) => e,
                Err(StreamableHttpError::AuthRequired(e)) => {
                    self.keep_challenge(&e.www_authenticate_header).await;
                    return Err(StreamableHttpError::AuthRequired(e));
                }
                other => return other,
            };
            let params = reqwest::Url::parse(&self.url)
                .map(|base| WWWAuthenticateParams::parse(&error.www_authenticate_header, &base))
                .unwrap_or_default();
            let (Some(manager), true) = (&self.manager, params.is_insufficient_scope()) else {
                return Err(StreamableHttpError::InsufficientScope(error));
            };
            let challenged = params.scope.unwrap_or_default();
            // One step-up at a time per server; a request waiting here may find it done.
            let mut state = self.shared.state.lock().await;
            let (granted, login) = self.granted_scopes().await;
            if state.observe_login(login.as_deref()) {
                *self.shared.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            if stepped_up || retries >= 2 {
                let scopes = scope_union(&granted, &challenged);
                return Err(self.refused(Refusal::StillRefused { scopes }, error).await);
            }
            let Some(browser) = self.browser.clone() else {
                let scopes = scope_union(&granted, &challenged);
                return Err(self.refused(Refusal::NoAuthorizer { scopes }, error).await);
            };
            let offline_access = self.offline_access().await;
            match state.decide(seen, &granted, &challenged, offline_access) {
                Ok(Decision::Retry) => {}
                Ok(Decision::Authorize(scopes)) => {
                    tracing::info!(
                        server = %self.server,
                        scopes = %scopes.join(" "),
                        attempt = state.attempts(),
                        "the server asks for more scope: step-up authorization"
                    );
                    if let Err(message) = self.authorize(manager, browser.as_ref(), &scopes).await {
                        return Err(self
                            .refused(Refusal::Failed { scopes, message }, error)
                            .await);
                    }
                    state.completed();
                    self.shared
                        .generation
                        .store(state.generation(), Ordering::Release);
                    stepped_up = true;
                }
                Err(refusal) => return Err(self.refused(refusal, error).await),
            }
            seen = state.generation();
            retries += 1;
        }
    }

    /// Authorizes `scopes` with the same client as the current grant; the tokens land in the
    /// store, where the authorizing client reads them for the retry.
    async fn authorize(
        &self,
        manager: &tokio::sync::Mutex<AuthorizationManager>,
        browser: &dyn Browser,
        scopes: &[String],
    ) -> Result<(), String> {
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let url = manager
            .lock()
            .await
            .get_authorization_url(&refs)
            .await
            .map_err(|e| first_line(&e.to_string()))?;
        // The manager is not held while the user decides: other requests keep their tokens.
        let redirect = browser.authorize(&url).await?;
        let callback = AuthorizationCallback::from_redirect_url(&redirect)
            .map_err(|e| first_line(&e.to_string()))?;
        manager
            .lock()
            .await
            .exchange_code_for_token_with_issuer(
                &callback.code,
                &callback.csrf_token,
                callback.issuer.as_deref(),
            )
            .await
            .map_err(|e| {
                format!(
                    "the authorization server refused the code: {}",
                    first_line(&e.to_string())
                )
            })?;
        Ok(())
    }

    /// The refusal as the transport error rmcp passes on; its scopes are kept for `login`.
    async fn refused<E: std::error::Error + Send + Sync + 'static>(
        &self,
        refusal: Refusal,
        challenge: InsufficientScopeError,
    ) -> StreamableHttpError<E> {
        *self.shared.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
        let scopes = refusal.scopes().to_vec();
        let kept = self
            .store
            .update_outside_refresh(|f| f.step_up_scopes = scopes)
            .await;
        if kept.is_err() {
            tracing::warn!(server = %self.server, "could not keep the needed scopes in the token store");
        }
        let refused = StepUpRefused {
            server: self.server.clone(),
            refusal,
            challenge: AuthRequiredError::new(challenge.www_authenticate_header),
        };
        tracing::debug!(server = %self.server, "{refused}");
        StreamableHttpError::Io(std::io::Error::other(refused))
    }

    /// Keeps a 401 challenge (a public header: scopes and the metadata URL) for `login`.
    async fn keep_challenge(&self, challenge: &str) {
        let store = self.store.clone();
        let kept = challenge.to_string();
        let unchanged = tokio::task::spawn_blocking(move || {
            store
                .read()
                .ok()
                .flatten()
                .is_some_and(|f| f.challenge.as_deref() == Some(kept.as_str()))
        })
        .await
        .unwrap_or(false);
        if !unchanged {
            let challenge = challenge.to_string();
            let _ = self
                .store
                .update_outside_refresh(|f| f.challenge = Some(challenge))
                .await;
        }
    }

    /// The scopes of the stored grant, and the login it came from.
    async fn granted_scopes(&self) -> (Vec<String>, Option<String>) {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let file = store.read().ok().flatten().unwrap_or_default();
            let scopes = file
                .credentials
                .map(|c| c.granted_scopes)
                .unwrap_or_default();
            (scopes, file.login)
        })
        .await
        .unwrap_or_default()
    }

    /// Whether the authorization server lists `offline_access` (SEP-2207).
    async fn offline_access(&self) -> bool {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            store
                .read()
                .ok()
                .flatten()
                .and_then(|f| f.metadata)
                .and_then(|m| m.scopes_supported)
                .is_some_and(|s| s.iter().any(|s| s == "offline_access"))
        })
        .await
        .unwrap_or(false)
    }
}

impl HttpLayer for StepUp {
    /// Only with tokens: without them a refusal goes back as it came.
    fn sends_again(&self) -> bool {
        self.manager.is_some()
    }

    /// On a 403 `insufficient_scope`: a step-up, then the request once more. A DELETE (closing
    /// a session) never starts an authorization: it goes as it came.
    async fn post<E, F, Fut>(&self, _attached: bool, auth: Option<String>, send: F) -> PostResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        self.guarded(|| send(auth.clone())).await
    }

    async fn get<E, F, Fut>(&self, auth: Option<String>, send: F) -> StreamResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = StreamResult<E>> + Send,
    {
        self.guarded(|| send(auth.clone())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_union_keeps_granted_scopes_first_and_adds_each_challenged_scope_once() {
        assert_eq!(
            scope_union(&s(&["mcp:basic"]), "mcp:basic  mcp:write"),
            s(&["mcp:basic", "mcp:write"])
        );
        assert_eq!(scope_union(&[], "a b a"), s(&["a", "b"]));
        assert_eq!(scope_union(&s(&["a"]), ""), s(&["a"]));
    }

    #[test]
    fn a_step_up_asks_for_the_union_and_adds_offline_access_when_offered() {
        let mut state = StepUpState::default();
        assert_eq!(
            state.decide(0, &s(&["mcp:basic"]), "mcp:write", true),
            Ok(Decision::Authorize(s(&[
                "mcp:basic",
                "mcp:write",
                "offline_access"
            ])))
        );
        assert_eq!(state.attempts(), 1);
    }

    #[test]
    fn the_same_scope_set_twice_in_a_row_is_refused() {
        let mut state = StepUpState::default();
        let first = state.decide(0, &s(&["mcp:admin"]), "mcp:admin", false);
        assert_eq!(first, Ok(Decision::Authorize(s(&["mcp:admin"]))));
        state.completed();
        // The server refuses the new token for the same scope: asking again cannot help.
        assert_eq!(
            state.decide(1, &s(&["mcp:admin"]), "mcp:admin", false),
            Err(Refusal::NoProgress {
                scopes: s(&["mcp:admin"])
            })
        );
        assert_eq!(state.attempts(), 1, "a refusal costs no attempt");
    }

    #[test]
    fn at_most_three_step_ups_per_server() {
        let mut state = StepUpState::default();
        let mut granted = s(&["a"]);
        for (i, scope) in ["b", "c", "d"].iter().enumerate() {
            let decision = state.decide(i as u64, &granted, scope, false);
            let Ok(Decision::Authorize(scopes)) = decision else {
                panic!("step-up {} refused: {decision:?}", i + 1);
            };
            granted = scopes;
            state.completed();
        }
        assert_eq!(state.attempts(), MAX_STEP_UPS);
        assert_eq!(
            state.decide(3, &granted, "e", false),
            Err(Refusal::Exhausted {
                scopes: s(&["a", "b", "c", "d", "e"])
            })
        );
    }

    #[test]
    fn a_request_refused_before_another_step_up_completed_is_just_retried() {
        let mut state = StepUpState::default();
        assert!(matches!(
            state.decide(0, &[], "x", false),
            Ok(Decision::Authorize(_))
        ));
        state.completed();
        assert_eq!(state.decide(0, &s(&["x"]), "x", false), Ok(Decision::Retry));
        assert_eq!(state.attempts(), 1);
    }

    #[test]
    fn a_refusal_names_the_server_and_what_to_do_and_is_found_in_a_source_chain() {
        let refused = StepUpRefused {
            server: "files".into(),
            refusal: Refusal::Exhausted {
                scopes: s(&["a", "b"]),
            },
            challenge: AuthRequiredError::new("Bearer error=\"insufficient_scope\"".into()),
        };
        let text = refused.to_string();
        assert!(text.contains("server `files`"), "{text}");
        assert!(text.contains("`a b`"), "{text}");
        assert!(text.contains("mcp-harness login files"), "{text}");
        let wrapped: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::Io(std::io::Error::other(refused));
        let found = refusal_in(&wrapped).expect("found through the io::Error");
        assert_eq!(found.server, "files");
        assert!(!found.refusal.needs_login());
        // While connecting it reads as "authorization required" (the server goes to
        // needs-auth): the io::Error's source chain reaches the AuthRequiredError.
        let mut source = std::error::Error::source(&wrapped);
        let mut auth_required = false;
        while let Some(e) = source {
            auth_required |= e.is::<AuthRequiredError>();
            source = e.source();
        }
        assert!(auth_required, "an AuthRequiredError in the source chain");
    }

    #[test]
    fn another_login_renews_the_budget_a_refresh_does_not() {
        let mut state = StepUpState::default();
        let _ = state.observe_login(Some("login-1"));
        let mut granted = s(&["a"]);
        for (i, scope) in ["b", "c", "d"].iter().enumerate() {
            let Ok(Decision::Authorize(scopes)) = state.decide(i as u64, &granted, scope, false)
            else {
                panic!("step-up {} refused", i + 1);
            };
            granted = scopes;
            state.completed();
            // The step-up's own tokens keep the login id.
            let _ = state.observe_login(Some("login-1"));
        }
        assert!(matches!(
            state.decide(3, &granted, "e", false),
            Err(Refusal::Exhausted { .. })
        ));
        // A login in another process wrote a new grant: the budget starts again.
        assert!(state.observe_login(Some("login-2")));
        assert_eq!(state.attempts(), 0);
        assert!(matches!(
            state.decide(3, &granted, "e", false),
            Ok(Decision::Authorize(_))
        ));
    }
}

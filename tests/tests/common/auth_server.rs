//! The one local OAuth authorization server of the OAuth tests, in front of the fixture's MCP
//! server (Streamable HTTP at `{base}/mcp`, behind a bearer check), configured per test with
//! [`AuthOptions`]: which grants it runs (authorization code with PKCE and dynamic
//! registration, refresh with rotation, client credentials, JWT bearer, and the identity
//! provider's token exchange for enterprise-managed authorization), how long access tokens
//! live, which scopes each MCP request needs (step-up), and a hook that holds the first
//! refresh's answer (two processes).
//!
//! Invariants: a refresh token is good once (rotation: a spent one gets `invalid_grant`); an
//! access token is accepted until its lifetime ends or the test revokes it; every request the
//! tests assert on is recorded in [`AuthState`] before it is answered; only grants listed in
//! [`AuthOptions::grants`] are advertised and accepted.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::future::BoxFuture;
use mcp_harness_fixture::FixtureOptions;
use serde_json::json;

use super::http_form::{Json, form};

pub const AUTHORIZATION_CODE: &str = "authorization_code";
pub const REFRESH_TOKEN: &str = "refresh_token";
pub const CLIENT_CREDENTIALS: &str = "client_credentials";
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// An auth context with a token store of its own in a new temporary directory (`label` in its
/// name, `tokens/` inside it not made yet): a test's tokens never touch the user's store or
/// another test's.
pub fn temp_auth(label: &str) -> mcp_harness_runtime::transport::auth::AuthContext {
    let dir = mcp_harness_fixture::scratch::dir(&format!("{label}-test")).join("tokens");
    mcp_harness_runtime::transport::auth::AuthContext::in_dir(dir)
}

/// A runtime for `servers` (as [`super::start`]) whose OAuth uses `auth`.
pub fn start_with_auth(
    servers: Vec<mcp_harness_runtime::ServerConfig>,
    auth: &mcp_harness_runtime::transport::auth::AuthContext,
) -> mcp_harness_runtime::Runtime {
    mcp_harness_runtime::RuntimeBuilder::new(super::config(servers))
        .auth_context(auth.clone())
        .start()
        .expect("runtime starts")
}

/// What the protected MCP server requires of each request's token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scopes {
    /// Any valid token; a 401 challenge names no scope.
    Any,
    /// `tools/call` needs `mcp:tools` and `mcp:write` (the 403 challenge names only
    /// `mcp:write`); everything else `mcp:tools`.
    NeedsWrite,
    /// `tools/call` needs a new scope after every refusal (`mcp:level1`, `mcp:level2`, ...):
    /// no grant ever suffices.
    RaisingBar,
    /// Every request (`initialize` too) needs `mcp:tools` and `mcp:admin`; the challenge names
    /// only `mcp:admin`.
    AdminEverywhere,
}

/// Called with the server before the first successful refresh is answered; the answer waits
/// for the returned future.
pub type RefreshHold = Arc<dyn Fn(AuthServer) -> BoxFuture<'static, ()> + Send + Sync>;

/// How the authorization server behaves.
#[derive(Clone)]
pub struct AuthOptions {
    /// Grants advertised and accepted (`authorization_code`, `refresh_token`, ...).
    pub grants: Vec<&'static str>,
    /// `token_endpoint_auth_methods_supported`.
    pub auth_methods: Vec<&'static str>,
    /// `token_endpoint_auth_signing_alg_values_supported`, when set.
    pub signing_algs: Option<Vec<&'static str>>,
    /// A dynamic registration endpoint (`/register`).
    pub registration: bool,
    /// Lifetime of issued access tokens.
    pub token_secs: u64,
    /// What the MCP server requires of a token.
    pub scopes: Scopes,
    /// The confidential client (id, secret) for HTTP Basic and JWT assertions.
    pub client: Option<(&'static str, &'static str)>,
    /// The identity provider's token exchange at `/idp/token`, issuing ID-JAGs for this ID
    /// token.
    pub idp_id_token: Option<&'static str>,
    /// Holds the first successful refresh's answer.
    pub hold_first_refresh: Option<RefreshHold>,
    /// Members that replace the authorization server metadata's own (a hostile server).
    pub metadata: Option<serde_json::Value>,
}

impl AuthOptions {
    /// Authorization code with PKCE, dynamic registration, public client; refresh with
    /// rotation when `refresh` is set.
    pub fn authorization_code(refresh: bool, token_secs: u64) -> Self {
        let mut grants = vec![AUTHORIZATION_CODE];
        if refresh {
            grants.push(REFRESH_TOKEN);
        }
        Self {
            grants,
            auth_methods: vec!["none"],
            signing_algs: None,
            registration: true,
            token_secs,
            scopes: Scopes::Any,
            client: None,
            idp_id_token: None,
            hold_first_refresh: None,
            metadata: None,
        }
    }

    /// The client credentials grant for `client`, authenticated by HTTP Basic or an ES256 JWT
    /// assertion.
    pub fn client_credentials(client: (&'static str, &'static str), token_secs: u64) -> Self {
        Self {
            grants: vec![CLIENT_CREDENTIALS],
            auth_methods: vec!["client_secret_basic", "private_key_jwt"],
            signing_algs: Some(vec!["ES256"]),
            registration: false,
            token_secs,
            scopes: Scopes::Any,
            client: Some(client),
            idp_id_token: None,
            hold_first_refresh: None,
            metadata: None,
        }
    }

    /// The JWT bearer grant (assertions in [`AuthState::accepted`]), for a public client or
    /// `client` with HTTP Basic, and the identity provider's exchange of `id_token`.
    pub fn jwt_bearer(
        client: (&'static str, &'static str),
        id_token: &'static str,
        token_secs: u64,
    ) -> Self {
        Self {
            grants: vec![JWT_BEARER],
            auth_methods: vec!["none", "client_secret_basic"],
            signing_algs: None,
            registration: false,
            token_secs,
            scopes: Scopes::Any,
            client: Some(client),
            idp_id_token: Some(id_token),
            hold_first_refresh: None,
            metadata: None,
        }
    }
}

/// An issued access token.
pub struct Access {
    pub expires: Instant,
    pub scopes: Vec<String>,
}

/// Everything the server issued and saw.
#[derive(Default)]
pub struct AuthState {
    pub base: String,
    /// code → (code_challenge, scope)
    codes: HashMap<String, (String, String)>,
    pub access: HashMap<String, Access>,
    /// Refresh tokens not spent yet → their scope.
    pub refresh: HashMap<String, String>,
    /// Every refresh token issued, newest last.
    pub issued_refresh: Vec<String>,
    counter: u64,
    /// Refresh requests that arrived (good or not).
    pub refresh_requests: u64,
    /// Successful refreshes.
    pub refreshes: u64,
    /// Refresh requests refused with `invalid_grant` (a spent or unknown refresh token).
    pub invalid_grants: u64,
    held_first: bool,
    /// Dynamic registration requests.
    pub registrations: Vec<serde_json::Value>,
    /// Every authorization request's query, in order.
    pub authorize_queries: Vec<HashMap<String, String>>,
    /// Every token request to the authorization server: form and `Authorization` header.
    pub requests: Vec<(HashMap<String, String>, Option<String>)>,
    /// Every token exchange request to the identity provider.
    pub exchanges: Vec<(HashMap<String, String>, Option<String>)>,
    /// Assertions the JWT bearer grant accepts (workload JWTs and issued ID-JAGs).
    pub accepted: HashSet<String>,
    /// MCP requests refused with 401.
    pub unauthorized: u64,
    /// MCP requests refused with 403 `insufficient_scope`.
    pub refusals: u64,
    /// `tools/call` requests the bearer check let through.
    pub calls_run: u64,
}

impl AuthState {
    /// The `scope` of every authorization request, in order.
    pub fn authorized(&self) -> Vec<String> {
        self.authorize_queries
            .iter()
            .map(|q| q.get("scope").cloned().unwrap_or_default())
            .collect()
    }

    /// Revokes the whole grant: every access and refresh token.
    pub fn revoke_all(&mut self) {
        self.access.clear();
        self.refresh.clear();
    }

    fn issue_access(&mut self, access: String, scopes: &str, secs: u64) {
        self.access.insert(
            access,
            Access {
                expires: Instant::now() + Duration::from_secs(secs),
                scopes: scopes.split_whitespace().map(str::to_string).collect(),
            },
        );
    }
}

/// A running authorization server + protected MCP server; clones share it.
#[derive(Clone)]
pub struct AuthServer {
    pub base: String,
    options: Arc<AuthOptions>,
    state: Arc<Mutex<AuthState>>,
    /// Bumped on every token request.
    pub changed: Arc<tokio::sync::watch::Sender<u64>>,
}

impl AuthServer {
    /// Starts the server on a free loopback port with `options`; `extra` routes (with their
    /// own state) are served beside it.
    pub async fn start_with(options: AuthOptions, extra: axum::Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let server = Self {
            base: base.clone(),
            options: Arc::new(options),
            state: Arc::new(Mutex::new(AuthState {
                base: base.clone(),
                ..Default::default()
            })),
            changed: Arc::new(tokio::sync::watch::channel(0).0),
        };
        let router = server.router().merge(extra);
        tokio::spawn(async move {
            axum::serve(listener, router).await.expect("serve");
        });
        server
    }

    /// Starts the server with `options`.
    pub async fn start(options: AuthOptions) -> Self {
        Self::start_with(options, axum::Router::new()).await
    }

    /// The protected MCP server's URL.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The recorded state (never held across an await).
    pub fn state(&self) -> MutexGuard<'_, AuthState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn router(&self) -> axum::Router {
        let b = &self.base;
        let o = &self.options;
        let mut metadata = json!({
            "response_types_supported": ["code"],
            "grant_types_supported": o.grants,
            "token_endpoint_auth_methods_supported": o.auth_methods,
        });
        if o.registration {
            metadata["registration_endpoint"] = json!(format!("{b}/register"));
        }
        if o.grants.contains(&AUTHORIZATION_CODE) {
            metadata["code_challenge_methods_supported"] = json!(["S256"]);
        }
        if let Some(algs) = &o.signing_algs {
            metadata["token_endpoint_auth_signing_alg_values_supported"] = json!(algs);
        }
        if let (Some(own), Some(replaced)) = (
            metadata.as_object_mut(),
            o.metadata.as_ref().and_then(|m| m.as_object()),
        ) {
            own.extend(replaced.clone());
        }
        let mcp = super::fixture_mcp_service(FixtureOptions::default());
        let mut router = axum::Router::new()
            .nest_service("/mcp", mcp)
            .layer(axum::middleware::from_fn_with_state(self.clone(), guard))
            .merge(super::http_form::discovery_routes(b, metadata))
            .route("/authorize", get(authorize))
            .route("/token", post(token));
        if o.registration {
            router = router.route("/register", post(register));
        }
        if o.idp_id_token.is_some() {
            router = router.route("/idp/token", post(idp_token));
        }
        router.with_state(self.clone())
    }

    fn issue(&self, st: &mut AuthState, scope: &str) -> serde_json::Value {
        st.counter += 1;
        let access = format!("at-{}-secret", st.counter);
        st.issue_access(access.clone(), scope, self.options.token_secs);
        let mut answer = json!({"access_token": access, "token_type": "Bearer",
            "expires_in": self.options.token_secs, "scope": scope});
        if self.options.grants.contains(&REFRESH_TOKEN) {
            let refresh = format!("rt-{}-secret", st.counter);
            st.refresh.insert(refresh.clone(), scope.to_string());
            st.issued_refresh.push(refresh.clone());
            answer["refresh_token"] = json!(refresh);
        }
        answer
    }

    /// Whether `authorization` is HTTP Basic with the configured client's credentials.
    fn basic_is_client(&self, authorization: &str) -> bool {
        let Some((id, secret)) = self.options.client else {
            return false;
        };
        authorization
            .strip_prefix("Basic ")
            .map(|b| String::from_utf8_lossy(&b64_decode(b)).into_owned())
            .is_some_and(|pair| pair == format!("{id}:{secret}"))
    }

    /// Whether `params` carry a JWT client assertion naming the configured client and this
    /// server, signed with ES256 (a 64-byte signature).
    fn assertion_is_client(&self, params: &HashMap<String, String>, jwt: &str) -> bool {
        let Some((id, _)) = self.options.client else {
            return false;
        };
        let parts: Vec<&str> = jwt.split('.').collect();
        let claims: serde_json::Value = parts
            .get(1)
            .and_then(|p| serde_json::from_slice(&b64_decode(p)).ok())
            .unwrap_or_default();
        parts.len() == 3
            && params.get("client_assertion_type").map(String::as_str)
                == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
            && claims["iss"] == id
            && claims["sub"] == id
            && claims["aud"] == self.base.as_str()
            && claims["exp"].as_u64().is_some()
            && b64_decode(parts[2]).len() == 64
    }
}

fn refuse(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({"error": error}))).into_response()
}

/// The bearer check in front of the MCP server, with the scopes of [`AuthOptions::scopes`].
async fn guard(State(server): State<AuthServer>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let method = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("method")?.as_str().map(str::to_string));
    let is_call = method.as_deref() == Some("tools/call");
    let mode = server.options.scopes;
    let refusal = {
        let mut st = server.state();
        let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", st.base);
        let scopes = token
            .as_ref()
            .and_then(|t| st.access.get(t))
            .filter(|a| a.expires > Instant::now())
            .map(|a| a.scopes.clone());
        let Some(scopes) = scopes else {
            st.unauthorized += 1;
            let scope = if mode == Scopes::Any {
                String::new()
            } else {
                "scope=\"mcp:tools\", ".to_string()
            };
            return (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    format!("Bearer {scope}resource_metadata=\"{metadata}\""),
                )],
            )
                .into_response();
        };
        let required: Option<(Vec<String>, String)> = match (is_call, mode) {
            (_, Scopes::Any) => None,
            (_, Scopes::AdminEverywhere) => Some((
                vec!["mcp:tools".into(), "mcp:admin".into()],
                "mcp:admin".into(),
            )),
            (false, _) => Some((vec!["mcp:tools".into()], "mcp:tools".into())),
            (true, Scopes::NeedsWrite) => Some((
                vec!["mcp:tools".into(), "mcp:write".into()],
                "mcp:write".into(),
            )),
            (true, Scopes::RaisingBar) => {
                let level = format!("mcp:level{}", st.refusals + 1);
                Some((vec![level.clone()], level))
            }
        };
        match required {
            Some((required, challenged)) if !required.iter().all(|r| scopes.contains(r)) => {
                st.refusals += 1;
                Some(format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{challenged}\", \
                     resource_metadata=\"{metadata}\""
                ))
            }
            _ => {
                if is_call {
                    st.calls_run += 1;
                }
                None
            }
        }
    };
    if let Some(challenge) = refusal {
        return (
            StatusCode::FORBIDDEN,
            [(header::WWW_AUTHENTICATE, challenge)],
            Json(json!({"error": "insufficient_scope"})),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

async fn register(State(server): State<AuthServer>, body: String) -> impl IntoResponse {
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    server.state().registrations.push(v.clone());
    (
        StatusCode::CREATED,
        Json(json!({"client_id": "client-1",
            "redirect_uris": v["redirect_uris"], "token_endpoint_auth_method": "none"})),
    )
}

/// Approves at once: redirects with a code bound to the PKCE challenge and the scope asked.
async fn authorize(State(server): State<AuthServer>, RawQuery(q): RawQuery) -> Response {
    let q = form(&q.unwrap_or_default());
    let mut st = server.state();
    st.authorize_queries.push(q.clone());
    let code = format!("code-{}", st.authorize_queries.len());
    let challenge = q.get("code_challenge").cloned().unwrap_or_default();
    let scope = q.get("scope").cloned().unwrap_or_default();
    st.codes.insert(code.clone(), (challenge, scope));
    let mut headers = HeaderMap::new();
    let location = format!(
        "{}?code={code}&state={}",
        q.get("redirect_uri").cloned().unwrap_or_default(),
        q.get("state").cloned().unwrap_or_default()
    );
    match location.parse() {
        Ok(location) => {
            headers.insert(header::LOCATION, location);
            (StatusCode::FOUND, headers).into_response()
        }
        Err(_) => refuse(StatusCode::BAD_REQUEST, "invalid_request"),
    }
}

/// The token endpoint: the grants of [`AuthOptions::grants`].
async fn token(State(server): State<AuthServer>, headers: HeaderMap, body: String) -> Response {
    let params = form(&body);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let grant = params.get("grant_type").cloned().unwrap_or_default();
    let options = server.options.clone();
    let (answer, hold) = {
        let mut st = server.state();
        st.requests.push((params.clone(), authorization.clone()));
        server.changed.send_modify(|n| *n += 1);
        if !options.grants.contains(&grant.as_str()) {
            return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
        }
        match grant.as_str() {
            AUTHORIZATION_CODE => {
                let Some((challenge, scope)) = params.get("code").and_then(|c| st.codes.remove(c))
                else {
                    return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
                };
                // The suite checks S256 itself; here: a verifier of RFC 7636 length that is
                // not the challenge (a `plain` client would send the same value).
                let verifier = params.get("code_verifier").cloned().unwrap_or_default();
                if verifier.len() < 43 || verifier == challenge {
                    return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
                }
                (server.issue(&mut st, &scope), false)
            }
            REFRESH_TOKEN => {
                st.refresh_requests += 1;
                let presented = params.get("refresh_token").cloned().unwrap_or_default();
                // Rotation: a refresh token is good once.
                let Some(scope) = st.refresh.remove(&presented) else {
                    st.invalid_grants += 1;
                    return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
                };
                st.refreshes += 1;
                let hold = options.hold_first_refresh.is_some() && !st.held_first;
                st.held_first = true;
                (server.issue(&mut st, &scope), hold)
            }
            CLIENT_CREDENTIALS => {
                let authenticated = match (&authorization, params.get("client_assertion")) {
                    (Some(basic), None) => server.basic_is_client(basic),
                    (None, Some(jwt)) => server.assertion_is_client(&params, jwt),
                    _ => false,
                };
                if !authenticated {
                    return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
                }
                st.counter += 1;
                let access = format!("cc-{}-token", st.counter);
                let scope = params.get("scope").cloned().unwrap_or_default();
                st.issue_access(access.clone(), &scope, options.token_secs);
                let answer = json!({"access_token": access, "token_type": "Bearer",
                    "expires_in": options.token_secs, "scope": scope});
                (answer, false)
            }
            JWT_BEARER => {
                // A client that sends Basic credentials must send the right ones.
                if authorization
                    .as_ref()
                    .is_some_and(|a| !server.basic_is_client(a))
                {
                    return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
                }
                if !params
                    .get("assertion")
                    .is_some_and(|a| st.accepted.contains(a))
                {
                    return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
                }
                st.counter += 1;
                let access = format!("jb-{}-token", st.counter);
                let scope = params.get("scope").cloned().unwrap_or_default();
                st.issue_access(access.clone(), &scope, options.token_secs);
                let answer = json!({"access_token": access, "token_type": "Bearer",
                    "expires_in": options.token_secs});
                (answer, false)
            }
            _ => return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type"),
        }
    };
    if let (true, Some(hold)) = (hold, &options.hold_first_refresh) {
        (hold.as_ref())(server.clone()).await;
    }
    Json(answer).into_response()
}

/// The identity provider's token endpoint: RFC 8693 token exchange of the configured ID token
/// for an ID-JAG, which the JWT bearer grant then accepts.
async fn idp_token(State(server): State<AuthServer>, headers: HeaderMap, body: String) -> Response {
    let params = form(&body);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut st = server.state();
    st.exchanges.push((params.clone(), authorization));
    let get = |k: &str| params.get(k).map(String::as_str);
    if get("grant_type") != Some(TOKEN_EXCHANGE) {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    if get("subject_token") != server.options.idp_id_token {
        return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
    }
    st.counter += 1;
    let jag = format!("eyJ0eXAiOiJvYXV0aC1pZC1qYWcrand0In0.amFnLQ.{}", st.counter);
    st.accepted.insert(jag.clone());
    Json(json!({"access_token": jag, "token_type": "N_A",
                "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"}))
    .into_response()
}

/// Base64 decoding (standard or URL-safe, padding optional).
pub fn b64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Standard base64 of `s` (for expected Basic credentials).
pub fn b64_encode(s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

//! Step-up authorization end to end (R33) against a local authorization server + protected MCP
//! server (the fixture behind a bearer check that requires scopes per method): a 403
//! `insufficient_scope` on a tool call re-authorizes with the union of the granted and the
//! challenged scopes and runs the call once; a server that keeps raising the bar gets at most
//! three step-ups, then a permission error naming the server and what to do; without anyone to
//! authorize, the call fails asking for a login, and that login asks for the union.

mod common;

use common::http_form::{Json, form};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::transport::auth;
use mcp_harness_runtime::{CallError, ErrorClass, Runtime};
use serde_json::json;

/// What the protected server requires of `tools/call` (everything else needs `mcp:tools`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `mcp:tools` and `mcp:write`; the challenge names only `mcp:write`.
    NeedsWrite,
    /// A new scope after every refusal (`mcp:level1`, `mcp:level2`, ...): no grant ever suffices.
    RaisingBar,
    /// Every request (`initialize` too) needs `mcp:tools` and `mcp:admin`; the challenge names
    /// only `mcp:admin`.
    AdminEverywhere,
}

struct AuthServer {
    base: String,
    mode: Mode,
    /// code → the scopes asked for
    codes: HashMap<String, String>,
    /// access token → its scopes
    access: HashMap<String, Vec<String>>,
    counter: u64,
    /// The `scope` of every authorization request, in order.
    authorized: Vec<String>,
    /// 403s sent for lack of scope.
    refusals: u64,
    /// `tools/call` requests the guard let through to the MCP server.
    calls_run: u64,
}

type Shared = Arc<Mutex<AuthServer>>;

async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
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
    let refusal = {
        let mut st = st.lock().unwrap();
        let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", st.base);
        let Some(scopes) = token.as_ref().and_then(|t| st.access.get(t)).cloned() else {
            return (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    format!("Bearer scope=\"mcp:tools\", resource_metadata=\"{metadata}\""),
                )],
            )
                .into_response();
        };
        let (required, challenged): (Vec<String>, String) = match (is_call, st.mode) {
            (_, Mode::AdminEverywhere) => (
                vec!["mcp:tools".into(), "mcp:admin".into()],
                "mcp:admin".into(),
            ),
            (false, _) => (vec!["mcp:tools".into()], "mcp:tools".into()),
            (true, Mode::NeedsWrite) => (
                vec!["mcp:tools".into(), "mcp:write".into()],
                "mcp:write".into(),
            ),
            (true, Mode::RaisingBar) => {
                let level = format!("mcp:level{}", st.refusals + 1);
                (vec![level.clone()], level)
            }
        };
        if required.iter().all(|r| scopes.contains(r)) {
            if is_call {
                st.calls_run += 1;
            }
            None
        } else {
            st.refusals += 1;
            Some(format!(
                "Bearer error=\"insufficient_scope\", scope=\"{challenged}\", \
                 resource_metadata=\"{metadata}\""
            ))
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

async fn token(State(st): State<Shared>, body: String) -> Response {
    let params = form(&body);
    let mut st = st.lock().unwrap();
    if params.get("grant_type").map(String::as_str) != Some("authorization_code") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "unsupported_grant_type"})),
        )
            .into_response();
    }
    let Some(scope) = params.get("code").and_then(|c| st.codes.remove(c)) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    };
    st.counter += 1;
    let access = format!("at-{}-secret", st.counter);
    st.access.insert(
        access.clone(),
        scope.split_whitespace().map(str::to_string).collect(),
    );
    Json(
        json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600,
                "scope": scope}),
    )
    .into_response()
}

async fn start_server(mode: Mode) -> (String, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let st: Shared = Arc::new(Mutex::new(AuthServer {
        base: base.clone(),
        mode,
        codes: HashMap::new(),
        access: HashMap::new(),
        counter: 0,
        authorized: Vec::new(),
        refusals: 0,
        calls_run: 0,
    }));
    let mcp = common::fixture_mcp_service(FixtureOptions::default());
    let b = base.clone();
    let router = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(st.clone(), guard))
        .merge(common::http_form::discovery_routes(
            &b,
            json!({"registration_endpoint": format!("{b}/register"), "response_types_supported": ["code"], "grant_types_supported": ["authorization_code"], "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"]}),
        ))
        .route(
            "/register",
            post(|body: String| async move {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                (
                    StatusCode::CREATED,
                    Json(json!({"client_id": "client-1",
                        "redirect_uris": v["redirect_uris"], "token_endpoint_auth_method": "none"})),
                )
            }),
        )
        .route(
            "/authorize",
            get(|State(st): State<Shared>, RawQuery(q): RawQuery| async move {
                let q = form(&q.unwrap_or_default());
                let mut st = st.lock().unwrap();
                let scope = q.get("scope").cloned().unwrap_or_default();
                st.authorized.push(scope.clone());
                let code = format!("code-{}", st.authorized.len());
                st.codes.insert(code.clone(), scope);
                let mut headers = HeaderMap::new();
                let location = format!(
                    "{}?code={code}&state={}",
                    q["redirect_uri"],
                    q.get("state").cloned().unwrap_or_default()
                );
                headers.insert(header::LOCATION, location.parse().unwrap());
                (StatusCode::FOUND, headers)
            }),
        )
        .route("/token", post(token))
        .with_state(st.clone());
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (base, st)
}

fn temp_store() {
    let dir =
        std::env::temp_dir().join(format!("mcp-harness-step-up-test-{}", uuid::Uuid::new_v4()));
    assert!(
        auth::set_store_dir(dir),
        "store dir set once per process (nextest runs each test in its own)"
    );
}

async fn login(server: &str, url: &str) {
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    let store = auth::FileCredentialStore::for_server(server, url);
    auth::login(server, url, &settings, &auth::NoFollowBrowser, store)
        .await
        .expect("login succeeds");
}

/// Starts a runtime with `server` at `url`, logs in at needs-auth, and waits for its tools.
async fn connected(server: &str, url: &str) -> Runtime {
    let runtime = common::start(vec![common::server(server, common::http(url))]);
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers[server].state.label(), "needs-auth");
    login(server, url).await;
    runtime.restart(server).unwrap();
    wait_for_tools(&runtime, server, snap.revision).await;
    runtime
}

/// Waits until `server` is connected with its tools in a revision after `after`.
async fn wait_for_tools(runtime: &Runtime, server: &str, after: u64) {
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    loop {
        let s = runtime.snapshot();
        if s.revision > after
            && s.servers[server].state.label() == "connected"
            && s.catalogs.get(server).is_some_and(|c| !c.tools.is_empty())
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected: {:?}",
            s.servers[server].last_error
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn echo(runtime: &Runtime, server: &str, message: &str) -> Result<String, CallError> {
    let name = mcp_harness_catalog::qualify(server, "echo");
    let result = runtime
        .call_tool(&name, json!({"message": message}).as_object().cloned())
        .await?;
    assert!(!result.is_error());
    Ok(common::text(&result))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_403_insufficient_scope_authorizes_the_union_and_runs_the_call_once() {
    temp_store();
    auth::set_step_up_browser(Some(Arc::new(auth::NoFollowBrowser)));
    let (base, st) = start_server(Mode::NeedsWrite).await;
    let url = format!("{base}/mcp");
    let runtime = connected("files", &url).await;
    assert_eq!(st.lock().unwrap().authorized, ["mcp:tools"]);

    let text = echo(&runtime, "files", "hello")
        .await
        .expect("call succeeds");
    assert!(text.contains("hello"), "{text}");
    {
        let st = st.lock().unwrap();
        assert_eq!(
            st.authorized,
            ["mcp:tools", "mcp:tools mcp:write"],
            "the step-up asks for the granted scope plus the challenged one"
        );
        assert_eq!(st.refusals, 1);
        assert_eq!(
            st.calls_run, 1,
            "the refused call ran once, after the step-up"
        );
    }

    // The new grant holds: the next call needs no authorization.
    echo(&runtime, "files", "again")
        .await
        .expect("call succeeds");
    {
        let st = st.lock().unwrap();
        assert_eq!(st.authorized.len(), 2);
        assert_eq!(st.refusals, 1);
        assert_eq!(st.calls_run, 2);
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_three_step_ups_per_server_then_a_permission_error_saying_what_to_do() {
    temp_store();
    auth::set_step_up_browser(Some(Arc::new(auth::NoFollowBrowser)));
    let (base, st) = start_server(Mode::RaisingBar).await;
    let url = format!("{base}/mcp");
    let runtime = connected("raising", &url).await;

    // Each call: refused, one step-up, the retry refused again (the bar went up).
    for i in 1..=3 {
        let e = echo(&runtime, "raising", "x").await.expect_err("refused");
        let text = e.to_string();
        assert_eq!(e.class(), ErrorClass::Permission, "{text}");
        assert!(!e.retryable(), "{text}");
        assert!(text.contains("server `raising`"), "{text}");
        assert!(text.contains("mcp-harness login raising"), "{text}");
        assert!(!text.contains("secret"), "no token in errors: {text}");
        let st = st.lock().unwrap();
        assert_eq!(st.authorized.len(), 1 + i, "one step-up per call");
        assert_eq!(st.refusals, 2 * i as u64, "each call sent twice, no more");
    }
    // The budget is spent: refused at once, with no authorization and no retry.
    let e = echo(&runtime, "raising", "x").await.expect_err("refused");
    let text = e.to_string();
    assert_eq!(e.class(), ErrorClass::Permission, "{text}");
    assert!(text.contains("after 3 step-up authorizations"), "{text}");
    {
        let st = st.lock().unwrap();
        assert_eq!(st.authorized.len(), 4, "login + 3 step-ups");
        assert_eq!(st.refusals, 7);
        assert_eq!(st.calls_run, 0);
        // Each step-up asked for everything granted so far plus the new scope.
        assert_eq!(
            st.authorized[3],
            "mcp:tools mcp:level1 mcp:level3 mcp:level5"
        );
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_anyone_to_authorize_the_call_asks_for_a_login_which_asks_for_the_union() {
    temp_store();
    auth::set_step_up_browser(None);
    let (base, st) = start_server(Mode::NeedsWrite).await;
    let url = format!("{base}/mcp");
    let runtime = connected("files", &url).await;

    let e = echo(&runtime, "files", "x").await.expect_err("refused");
    let text = e.to_string();
    assert_eq!(e.class(), ErrorClass::Permission, "{text}");
    assert!(
        text.contains("run `mcp-harness login files`"),
        "says what to do: {text}"
    );
    assert!(
        text.contains("mcp:tools mcp:write"),
        "names the scopes: {text}"
    );
    assert_eq!(st.lock().unwrap().authorized.len(), 1);

    // The login asks for the scopes the refused call needed; then the call runs.
    login("files", &url).await;
    assert_eq!(
        st.lock().unwrap().authorized,
        ["mcp:tools", "mcp:tools mcp:write"]
    );
    let before = runtime.snapshot().revision;
    runtime.restart("files").unwrap();
    wait_for_tools(&runtime, "files", before).await;
    echo(&runtime, "files", "after login")
        .await
        .expect("call succeeds");
    assert_eq!(st.lock().unwrap().calls_run, 1);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_up_refused_while_connecting_is_needs_auth_not_a_reconnect_loop() {
    temp_store();
    auth::set_step_up_browser(None);
    let (base, st) = start_server(Mode::AdminEverywhere).await;
    let url = format!("{base}/mcp");
    let runtime = common::start(vec![common::server("admin", common::http(&url))]);
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers["admin"].state.label(), "needs-auth");
    login("admin", &url).await;
    // The login's grant lacks `mcp:admin`: initialize is refused for lack of scope, nobody can
    // step up, so the server needs a login (not a reconnection with backoff).
    runtime.restart("admin").unwrap();
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    let status = loop {
        let s = runtime.snapshot().servers["admin"].clone();
        if st.lock().unwrap().refusals > 0 && s.state.label() != "pending" {
            break s;
        }
        assert!(tokio::time::Instant::now() < deadline, "{s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.state.label(), "needs-auth", "{status:?}");
    let reason = status.last_error.clone().unwrap_or_default();
    assert!(reason.contains("mcp:tools mcp:admin"), "{reason}");
    assert!(reason.contains("mcp-harness login admin"), "{reason}");
    // Not probed while it waits.
    let refused = st.lock().unwrap().refusals;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        st.lock().unwrap().refusals,
        refused,
        "retried while needs-auth"
    );

    // The next login asks for the union, and the server connects by itself.
    let before = runtime.snapshot().revision;
    login("admin", &url).await;
    assert_eq!(
        st.lock().unwrap().authorized.last().map(String::as_str),
        Some("mcp:tools mcp:admin")
    );
    wait_for_tools(&runtime, "admin", before).await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_login_in_another_process_renews_the_step_up_budget() {
    temp_store();
    auth::set_step_up_browser(Some(Arc::new(auth::NoFollowBrowser)));
    let (base, st) = start_server(Mode::RaisingBar).await;
    let url = format!("{base}/mcp");
    let runtime = connected("raising", &url).await;
    for _ in 0..4 {
        let _ = echo(&runtime, "raising", "x").await.expect_err("refused");
    }
    assert_eq!(st.lock().unwrap().authorized.len(), 4, "login + 3 step-ups");
    let e = echo(&runtime, "raising", "x").await.expect_err("refused");
    assert!(
        e.to_string().contains("after 3 step-up authorizations"),
        "{e}"
    );
    assert_eq!(
        st.lock().unwrap().authorized.len(),
        4,
        "the budget is spent"
    );

    // Another process logs in: it writes a new grant, with a new login id, to the shared file
    // (written here the way that process's `login` writes it; this process's own `login` would
    // renew the budget directly).
    let store = auth::FileCredentialStore::for_server("raising", &url);
    store
        .update(|f| f.login = Some("another-process-login".into()))
        .unwrap();
    let _ = echo(&runtime, "raising", "x").await.expect_err("refused");
    assert_eq!(
        st.lock().unwrap().authorized.len(),
        5,
        "a step-up again after the other login"
    );
    runtime.shutdown().await;
}

//! OAuth end to end against a local authorization server + protected MCP server (the fixture
//! behind a bearer check): needs-auth at 401 → login (discovery, dynamic registration, PKCE,
//! `resource`) → the real catalog in a new revision → refresh before expiry with the rotated
//! refresh token kept, single-flight under concurrent calls; tokens in a 0600 file.

mod common;

use common::http_form::{Json, form};

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::transport::auth;
use serde_json::json;

/// Lifetime of issued access tokens: short, so the harness must refresh during the test.
const TOKEN_SECS: u64 = 4;

#[derive(Default)]
struct AuthServer {
    base: String,
    /// code → (code_challenge, resource)
    codes: HashMap<String, (String, Option<String>)>,
    access: HashMap<String, std::time::Instant>,
    refresh: Vec<String>,
    counter: u64,
    refreshes: u64,
    registrations: Vec<serde_json::Value>,
    authorize_queries: Vec<HashMap<String, String>>,
    token_resources: Vec<Option<String>>,
    /// MCP requests refused with 401.
    unauthorized: u64,
}

type Shared = Arc<Mutex<AuthServer>>;

async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let (ok, base) = {
        let mut st = st.lock().unwrap();
        let ok = token
            .as_ref()
            .and_then(|t| st.access.get(t))
            .is_some_and(|expires| *expires > std::time::Instant::now());
        if !ok {
            st.unauthorized += 1;
        }
        (ok, st.base.clone())
    };
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                ),
            )],
        )
            .into_response();
    }
    next.run(req).await
}

fn issue(st: &mut AuthServer) -> serde_json::Value {
    st.counter += 1;
    let access = format!("at-{}-secret", st.counter);
    let refresh = format!("rt-{}-secret", st.counter);
    st.access.insert(
        access.clone(),
        std::time::Instant::now() + Duration::from_secs(TOKEN_SECS),
    );
    st.refresh.push(refresh.clone());
    json!({"access_token": access, "token_type": "Bearer", "expires_in": TOKEN_SECS,
           "refresh_token": refresh, "scope": "mcp:tools"})
}

async fn token(State(st): State<Shared>, body: String) -> Response {
    let params = form(&body);
    let mut st = st.lock().unwrap();
    st.token_resources.push(params.get("resource").cloned());
    let bad = |e: &str| (StatusCode::BAD_REQUEST, Json(json!({"error": e}))).into_response();
    match params.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            let Some((challenge, _)) = params.get("code").and_then(|c| st.codes.remove(c)) else {
                return bad("invalid_grant");
            };
            // The suite checks S256 itself; here: a verifier of RFC 7636 length that is not the
            // challenge (a `plain` client would send the same value).
            let verifier = params.get("code_verifier").cloned().unwrap_or_default();
            if verifier.len() < 43 || verifier == challenge {
                return bad("invalid_grant");
            }
            Json(issue(&mut st)).into_response()
        }
        Some("refresh_token") => {
            let presented = params.get("refresh_token").cloned().unwrap_or_default();
            // Rotation: a refresh token is good once.
            let Some(pos) = st.refresh.iter().position(|r| *r == presented) else {
                return bad("invalid_grant");
            };
            st.refresh.remove(pos);
            st.refreshes += 1;
            Json(issue(&mut st)).into_response()
        }
        _ => bad("unsupported_grant_type"),
    }
}

async fn start_server() -> (String, Shared, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let st: Shared = Arc::new(Mutex::new(AuthServer {
        base: base.clone(),
        ..Default::default()
    }));
    let mcp = common::fixture_mcp_service(FixtureOptions::default());
    let b = base.clone();
    let router = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(st.clone(), guard))
        .merge(common::http_form::discovery_routes(
            &b,
            json!({"registration_endpoint": format!("{b}/register"), "response_types_supported": ["code"], "grant_types_supported": ["authorization_code", "refresh_token"], "code_challenge_methods_supported": ["S256"], "token_endpoint_auth_methods_supported": ["none"]}),
        ))
        .route(
            "/register",
            post(|State(st): State<Shared>, body: String| async move {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                st.lock().unwrap().registrations.push(v.clone());
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
                st.authorize_queries.push(q.clone());
                let code = format!("code-{}", st.codes.len() + 1);
                st.codes.insert(
                    code.clone(),
                    (q["code_challenge"].clone(), q.get("resource").cloned()),
                );
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
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (base, st, task)
}

fn temp_store() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-harness-oauth-test-{}", uuid::Uuid::new_v4()));
    assert!(
        auth::set_store_dir(dir.clone()),
        "store dir set once per process"
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn needs_auth_then_login_then_refresh_with_rotation() {
    let dir = temp_store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    // Health pings far apart: only the failed call itself can notice a lost authorization.
    let runtime = mcp_harness_runtime::RuntimeBuilder::new(common::config(vec![common::server(
        "secure",
        common::http(&url),
    )]))
    .reconnect(mcp_harness_runtime::ReconnectPolicy {
        health_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .start()
    .expect("runtime starts");

    // 401 at initialize without a token: needs-auth, no catalog.
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers["secure"].state.label(), "needs-auth");
    let before = snap.revision;

    // R4: the model sees only an authenticate tool for it, which says what the user must do.
    let authenticate = mcp_harness_catalog::qualify("secure", "authenticate");
    let step = runtime.bind_step(&[]).await.expect("step");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(names.contains(&authenticate), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("mcp__secure__") && *n != authenticate),
        "{names:?}"
    );
    let told = step
        .prepare_call(&authenticate)
        .expect("shown")
        .call(None)
        .await
        .expect("answered by the harness");
    assert!(!told.is_error());
    let text = common::text(&told);
    assert!(text.contains("mcp-harness login secure"), "{text}");
    assert!(text.contains("--no-browser"), "{text}");
    // Not probed while it waits (R4): no request reaches the server for a while.
    let refused = st.lock().unwrap().unauthorized;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        st.lock().unwrap().unauthorized,
        refused,
        "probed while needs-auth"
    );

    // Login: discovery from the challenge, dynamic registration, PKCE S256, `resource`.
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    let store = auth::FileCredentialStore::for_server("secure", &url);
    auth::login(
        "secure",
        &url,
        &settings,
        &auth::NoFollowBrowser,
        store.clone(),
    )
    .await
    .expect("login succeeds");
    {
        let st = st.lock().unwrap();
        let reg = &st.registrations[0];
        assert!(
            reg["grant_types"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == "refresh_token"),
            "dynamic registration asks for refresh_token: {reg}"
        );
        let q = &st.authorize_queries[0];
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["resource"], url);
        assert_eq!(q["scope"], "mcp:tools");
        assert_eq!(st.token_resources[0].as_deref(), Some(url.as_str()));
    }

    // The token file: 0600 in a 0700 directory, no token in its Debug output.
    let path = store.path();
    assert_eq!(path.parent().unwrap(), dir);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dmode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode, 0o700);
    assert!(!format!("{store:?}").contains("secret"));

    // After login the server connects by itself (its stored credentials changed) and its real
    // catalog comes in a new revision, replacing the authenticate tool.
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    let snap = loop {
        let s = runtime.snapshot();
        if s.servers["secure"].state.label() == "connected"
            && s.catalogs
                .get("secure")
                .is_some_and(|c| !c.tools.is_empty())
        {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(snap.revision > before);
    let step = runtime.bind_step(&[]).await.expect("step");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(!names.contains(&authenticate), "{names:?}");
    assert!(
        names.contains(&mcp_harness_catalog::qualify("secure", "echo")),
        "{names:?}"
    );

    // Let the access token come close to expiry; 20 concurrent calls refresh exactly once.
    tokio::time::sleep(Duration::from_secs(TOKEN_SECS - 1)).await;
    let name = mcp_harness_catalog::qualify("secure", "echo");
    let calls = (0..20).map(|i| {
        let runtime = &runtime;
        let name = name.clone();
        async move {
            runtime
                .call_tool(
                    &name,
                    json!({"message": format!("m{i}")}).as_object().cloned(),
                )
                .await
        }
    });
    for result in futures::future::join_all(calls).await {
        let result = result.expect("call succeeds after refresh");
        assert!(!result.is_error());
    }
    let (refreshes, newest_refresh) = {
        let st = st.lock().unwrap();
        (st.refreshes, st.refresh.last().cloned().unwrap())
    };
    assert_eq!(refreshes, 1, "single-flight refresh");
    // The rotated refresh token is what the store keeps now.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&newest_refresh), "rotated refresh token kept");
    assert!(!text.contains("rt-1-secret"), "spent refresh token dropped");

    // The authorization server revokes the grant (all tokens): once the access token is due,
    // the refresh is rejected and the server goes to needs-auth (its authenticate tool again),
    // not to retries.
    {
        let mut st = st.lock().unwrap();
        st.refresh.clear();
        st.access.clear();
    }
    let refused = runtime
        .call_tool(&name, json!({"message": "revoked"}).as_object().cloned())
        .await;
    assert!(
        refused.is_err(),
        "a call with a revoked grant fails: {refused:?}"
    );
    let snap = runtime
        .wait_for(common::SETTLE, |s| {
            s.servers["secure"].state.label() == "needs-auth"
        })
        .await;
    assert_eq!(
        snap.servers["secure"].state.label(),
        "needs-auth",
        "{:?}",
        snap.servers["secure"]
    );
    let step = runtime.bind_step(&[]).await.expect("step");
    assert!(
        step.tools().iter().any(|t| t.name == authenticate),
        "the authenticate tool is back"
    );

    runtime.shutdown().await;
}

//! A Streamable HTTP server that forgot the session (ANCHORS complaint 8): besides the 404 the
//! spec asks for (which rmcp handles), servers answer 400 or even 200 with a JSON-RPC error
//! "session not found", often with a null id that matches no request. The harness treats those
//! like the 404: it initialises a new session and sends the call once more — exactly once.
//!
//! The server is the fixture behind a gate that, once told to, refuses every request of the
//! current session in one of those ways (the new session then works).

mod common;

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use common::*;
use mcp_harness_catalog::{ServerState, qualify};
use mcp_harness_fixture::FixtureOptions;
use serde_json::json;

#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// 400, JSON-RPC error with a null id (what the TypeScript SDK sends).
    BadRequestJson,
    /// 200, JSON-RPC error with a null id.
    OkJson,
    /// 400, plain text.
    BadRequestText,
}

#[derive(Default)]
struct Gate {
    /// The session id last seen on a request.
    current: Option<String>,
    /// Requests in this session are refused this way.
    forgotten: Option<(String, Refusal)>,
    initializes: u32,
    /// `tools/call` requests seen (refused or passed on).
    calls: u32,
}

type Shared = Arc<Mutex<Gate>>;

async fn gate(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let (message, req) = match read_message(req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let refusal = {
        let mut st = st.lock().unwrap();
        match message.get("method").and_then(|m| m.as_str()) {
            Some("initialize") => st.initializes += 1,
            Some("tools/call") => st.calls += 1,
            _ => {}
        }
        if session.is_some() {
            st.current = session.clone();
        }
        match (&st.forgotten, &session) {
            (Some((lost, how)), Some(s)) if lost == s => Some(*how),
            _ => None,
        }
    };
    if let Some(how) = refusal {
        let error = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32000, "message": "Bad Request: Session not found"}})
        .to_string();
        let json = HeaderValue::from_static("application/json");
        return match how {
            Refusal::BadRequestJson => (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, json)],
                error,
            )
                .into_response(),
            Refusal::OkJson => {
                (StatusCode::OK, [(header::CONTENT_TYPE, json)], error).into_response()
            }
            Refusal::BadRequestText => {
                (StatusCode::BAD_REQUEST, "Session not found").into_response()
            }
        };
    }
    next.run(req).await
}

async fn serve() -> (String, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let st: Shared = Arc::default();
    let mcp = fixture_mcp_service(FixtureOptions::default());
    let router = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(st.clone(), gate));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (url, st)
}

async fn recovers_from(how: Refusal) {
    let (url, st) = serve().await;
    let runtime = start(vec![server("web", http(&url))]);
    let echo = qualify("web", "echo");
    let s = runtime.wait_for(SETTLE, |s| s.tool(&echo).is_some()).await;
    assert_eq!(s.servers["web"].state, ServerState::Connected);
    let first = runtime
        .call_tool(&echo, args(json!({"message": "before"})))
        .await
        .expect("a call in the first session");
    assert!(!first.is_error());
    let (initializes, calls) = {
        let mut st = st.lock().unwrap();
        let current = st.current.clone().expect("a session");
        st.forgotten = Some((current, how));
        (st.initializes, st.calls)
    };

    let answer = runtime
        .call_tool(&echo, args(json!({"message": "after"})))
        .await
        .unwrap_or_else(|e| panic!("{how:?}: the call did not recover: {e}"));
    assert!(!answer.is_error(), "{how:?}");
    assert_eq!(text(&answer), "after", "{how:?}");
    {
        let st = st.lock().unwrap();
        assert_eq!(st.initializes, initializes + 1, "{how:?}: one new session");
        assert_eq!(st.calls, calls + 2, "{how:?}: refused once, sent once more");
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_json_session_not_found_reinitialises_and_retries_once() {
    recovers_from(Refusal::BadRequestJson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_json_session_not_found_reinitialises_and_retries_once() {
    recovers_from(Refusal::OkJson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_text_session_not_found_reinitialises_and_retries_once() {
    recovers_from(Refusal::BadRequestText).await;
}

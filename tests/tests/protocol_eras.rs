//! Version negotiation across eras (R8): the harness opens with `initialize` (2025-11-25); a
//! remote server of the 2026-07-28 era that refuses that handshake is reached with
//! `server/discover` on the next attempt, without a config change, and then works like any
//! other (listing, calls).
//!
//! The server is the fixture (an rmcp server, which speaks both eras) behind a gate that
//! refuses `initialize` the way a discover-only server does: HTTP 400 with a JSON-RPC error.
//! A raw stdio script of the 2025-06-18 era that answers with an SEP-2322 `input_required`
//! result (a 2026-07-28 feature) gets a protocol error, not a further round.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use common::*;
use mcp_harness_catalog::{ServerState, qualify};
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::ReconnectPolicy;
use mcp_harness_runtime::RuntimeBuilder;
use serde_json::json;

type Seen = Arc<Mutex<Vec<String>>>;

/// Records every JSON-RPC method posted; refuses `initialize` when `refuse` is on.
async fn gate(State((seen, refuse)): State<(Seen, bool)>, req: Request, next: Next) -> Response {
    let (message, req) = match read_message(req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    if let Some(method) = message.get("method").and_then(|m| m.as_str()) {
        seen.lock().unwrap().push(method.to_string());
        if refuse && method == "initialize" {
            let error = json!({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "initialize is not supported by this server; use server/discover"}});
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn serve(refuse_initialize: bool) -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let mcp = fixture_mcp_service(FixtureOptions {
        tools: 2,
        ..Default::default()
    });
    let router =
        axum::Router::new()
            .nest_service("/mcp", mcp)
            .layer(axum::middleware::from_fn_with_state(
                (seen.clone(), refuse_initialize),
                gate,
            ));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_initialize_is_reached_with_discover() {
    let (url, seen) = serve(true).await;
    let runtime = start(vec![server("modern", http(&url))]);
    let tool = qualify("modern", "tool_1");
    let s = runtime.wait_for(SETTLE, |s| s.tool(&tool).is_some()).await;
    let status = &s.servers["modern"];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2026-07-28"));
    let methods = seen.lock().unwrap().clone();
    assert_eq!(
        methods.first().map(String::as_str),
        Some("initialize"),
        "{methods:?}"
    );
    assert!(
        methods.iter().any(|m| m == "server/discover"),
        "{methods:?}"
    );
    assert_eq!(
        methods.iter().filter(|m| *m == "initialize").count(),
        1,
        "one refused handshake, then discover: {methods:?}"
    );
    let answer = runtime
        .call_tool(&tool, args(json!({"value": "era"})))
        .await
        .expect("a call in the 2026-07-28 era");
    assert!(!answer.is_error(), "{}", text(&answer));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_the_previous_era_keeps_initialize() {
    let (url, seen) = serve(false).await;
    let runtime = start(vec![server("classic", http(&url))]);
    let tool = qualify("classic", "tool_1");
    let s = runtime.wait_for(SETTLE, |s| s.tool(&tool).is_some()).await;
    assert_eq!(
        s.servers["classic"].protocol_version.as_deref(),
        Some("2025-11-25")
    );
    let methods = seen.lock().unwrap().clone();
    assert!(
        !methods.iter().any(|m| m == "server/discover"),
        "no probe when initialize works: {methods:?}"
    );
    runtime.shutdown().await;
}

/// A server of the 2025-06-18 era that answers a call with an SEP-2322 `input_required` result
/// (which only the 2026-07-28 era has) gets a protocol error naming its version; no further
/// round is sent (the script would answer a second call with a plain result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_rounds_from_a_server_of_an_older_era_are_a_protocol_error() {
    let python = peers_dir().join("py/bin/python");
    assert!(
        python.is_file(),
        "no Python at {}: run `bash .ci/install-peers.sh target/peers`",
        python.display()
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/python/input_required_old_era.py"
    );
    let runtime = start(vec![server(
        "old",
        stdio(&python.to_string_lossy(), &[script]),
    )]);
    let tool = qualify("old", "ask");
    let s = runtime.wait_for(SETTLE, |s| s.tool(&tool).is_some()).await;
    assert_eq!(
        s.servers["old"].protocol_version.as_deref(),
        Some("2025-06-18")
    );
    let err = runtime
        .call_tool(&tool, None)
        .await
        .expect_err("input_required is not of this era");
    let message = err.to_string();
    assert!(
        matches!(err, mcp_harness_runtime::CallError::Protocol { .. })
            && message.contains("input_required")
            && message.contains("2025-06-18"),
        "{message}"
    );
    runtime.shutdown().await;
}

/// A server of the 2025-11-25 era only: `server/discover` is an unknown method to it. Its first
/// `failing.0` `initialize` and first `failing.1` `tools/list` requests are refused with HTTP 400
/// (a proxy's hiccup, say).
async fn classic_gate(
    State((seen, failing)): State<(Seen, Arc<(AtomicUsize, AtomicUsize)>)>,
    req: Request,
    next: Next,
) -> Response {
    let (message, req) = match read_message(req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    if let Some(method) = message.get("method").and_then(|m| m.as_str()) {
        seen.lock().unwrap().push(method.to_string());
        if method == "server/discover" {
            let error = json!({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "Method not found"}});
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response();
        }
        let counter = match method {
            "initialize" => Some(&failing.0),
            "tools/list" => Some(&failing.1),
            _ => None,
        };
        if counter.is_some_and(|c| {
            c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        }) {
            return (StatusCode::BAD_REQUEST, "bad request").into_response();
        }
    }
    next.run(req).await
}

async fn serve_classic(failing_initializes: usize, failing_listings: usize) -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let mcp = fixture_mcp_service(FixtureOptions {
        tools: 2,
        ..Default::default()
    });
    let failing = Arc::new((
        AtomicUsize::new(failing_initializes),
        AtomicUsize::new(failing_listings),
    ));
    let router =
        axum::Router::new()
            .nest_service("/mcp", mcp)
            .layer(axum::middleware::from_fn_with_state(
                (seen.clone(), failing),
                classic_gate,
            ));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (url, seen)
}

/// A failed first listing is not a refused handshake: the server is retried with
/// `initialize`, never switched to `server/discover` (which it does not know), and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_listing_is_retried_with_initialize() {
    let (url, seen) = serve_classic(0, 1).await;
    let runtime = RuntimeBuilder::new(config(vec![server("classic", http(&url))]))
        .reconnect(ReconnectPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
            ..ReconnectPolicy::default()
        })
        .start()
        .expect("start");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers
                .get("classic")
                .is_some_and(|st| st.state == ServerState::Connected)
        })
        .await;
    let status = &s.servers["classic"];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2025-11-25"));
    assert!(s.tool(&qualify("classic", "tool_1")).is_some());
    let methods = seen.lock().unwrap().clone();
    assert!(
        !methods.iter().any(|m| m == "server/discover"),
        "initialize was never refused: {methods:?}"
    );
    runtime.shutdown().await;
}

/// `restart` after a failed first listing opens with `initialize` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_a_failed_first_listing_opens_with_initialize() {
    let (url, seen) = serve_classic(0, 1).await;
    // No fast attempts, and the background probe far away: only `restart` can bring it back.
    let runtime = RuntimeBuilder::new(config(vec![server("classic", http(&url))]))
        .reconnect(ReconnectPolicy {
            max_attempts: 0,
            initial_delay: Duration::from_secs(3600),
            max_delay: Duration::from_secs(3600),
            ..ReconnectPolicy::default()
        })
        .start()
        .expect("start");
    wait_state(&runtime, "classic", "failed").await;
    runtime.restart("classic").expect("restart");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers
                .get("classic")
                .is_some_and(|st| st.state == ServerState::Connected)
        })
        .await;
    let status = &s.servers["classic"];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2025-11-25"));
    let methods = seen.lock().unwrap().clone();
    assert!(
        !methods.iter().any(|m| m == "server/discover"),
        "{methods:?}"
    );
    runtime.shutdown().await;
}

/// A refused `initialize` makes the harness try `server/discover`; when that is refused too,
/// the next attempt opens with `initialize` again (and connects), not with `server/discover`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_discover_is_undone_for_the_next_attempt() {
    let (url, seen) = serve_classic(1, 0).await;
    let runtime = RuntimeBuilder::new(config(vec![server("classic", http(&url))]))
        .reconnect(ReconnectPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
            ..ReconnectPolicy::default()
        })
        .start()
        .expect("start");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers
                .get("classic")
                .is_some_and(|st| st.state == ServerState::Connected)
        })
        .await;
    let status = &s.servers["classic"];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2025-11-25"));
    let methods = seen.lock().unwrap().clone();
    assert_eq!(
        methods.iter().filter(|m| *m == "server/discover").count(),
        1,
        "{methods:?}"
    );
    runtime.shutdown().await;
}

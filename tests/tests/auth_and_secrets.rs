//! A server that demands authorization goes to needs-auth (not failed, not retried); secrets
//! from the config (env values, header values) never reach the logs.

mod common;

use common::*;
use mcp_harness_catalog::ServerState;

/// An HTTP endpoint that answers every request with 401 and an OAuth challenge.
async fn unauthorized_server() -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let app = axum::Router::new().fallback(|| async {
        let mut response = (StatusCode::UNAUTHORIZED, "authorization required").into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(r#"Bearer resource_metadata="http://127.0.0.1:1/.well-known/oauth-protected-resource""#),
        );
        response
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/mcp"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_at_initialize_means_needs_auth() {
    let (url, task) = unauthorized_server().await;
    let runtime = start(vec![
        server("locked", http(&url)),
        server("open", fixture_stdio(&[])),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    match &s.servers["locked"].state {
        ServerState::NeedsAuth { reason } => assert!(!reason.is_empty()),
        other => panic!("expected needs-auth, got {other:?}"),
    }
    assert_eq!(s.servers["open"].state, ServerState::Connected);
    assert!(!s.catalogs.contains_key("locked"));
    runtime.shutdown().await;
    task.abort();
}

/// A server that lets initialize through but answers 401 when its tools are listed (a token
/// that is missing or expired for everything past the handshake).
async fn unauthorized_after_initialize() -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let app = axum::Router::new().fallback(|body: String| async move {
        let request: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        match request.get("method").and_then(|m| m.as_str()) {
            Some("initialize") => {
                let answer = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "half-open", "version": "1"}
                    }
                });
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    answer.to_string(),
                )
                    .into_response()
            }
            Some(m) if m.starts_with("notifications/") => StatusCode::ACCEPTED.into_response(),
            _ => {
                let mut response = (StatusCode::UNAUTHORIZED, "token expired").into_response();
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                );
                response
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/mcp"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_while_listing_means_needs_auth() {
    let (url, task) = unauthorized_after_initialize().await;
    let runtime = start(vec![server("half", http(&url))]);
    let s = runtime.wait_settled(SETTLE).await;
    match &s.servers["half"].state {
        ServerState::NeedsAuth { reason } => {
            assert!(reason.contains("listing tools failed"), "{reason}")
        }
        other => panic!("expected needs-auth, got {other:?}"),
    }
    runtime.shutdown().await;
    task.abort();
}

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

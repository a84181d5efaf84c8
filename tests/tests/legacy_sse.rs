//! The legacy HTTP+SSE transport (`type: "sse"`, protocol 2024-11-05) against the reference
//! server `@modelcontextprotocol/server-everything` in `sse` mode (GET `/sse`, POST
//! `/message?sessionId=…`), and its failures: nothing listening, an endpoint on another origin,
//! a 401 on the stream.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use mcp_harness_catalog::{ServerState, ServerStatus};
use mcp_harness_runtime::TransportConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The error a server reports, whether it failed for good or waits for a reconnect.
fn error_of(status: &ServerStatus) -> Option<String> {
    match &status.state {
        ServerState::Failed { error } => Some(error.clone()),
        ServerState::NeedsAuth { reason } => Some(reason.clone()),
        _ => status.last_error.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_legacy_sse() {
    let (mut child, port) = spawn_server_everything("sse").await;
    let name = "everything";
    let runtime = start(vec![server(
        name,
        sse(&format!("http://127.0.0.1:{port}/sse")),
    )]);
    let s = runtime.wait_settled(SETTLE).await;
    let status = &s.servers[name];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert_eq!(status.transport, "sse");
    let q = |tool: &str| mcp_harness_catalog::qualify(name, tool);
    for tool in ["echo", "get-sum", "gzip-file-as-resource"] {
        assert!(s.tool(&q(tool)).is_some(), "{tool} not listed");
    }

    let echo = runtime
        .call_tool(&q("echo"), args(json!({"message": "hello over sse"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("hello over sse"), "{}", text(&echo));
    let sum = runtime
        .call_tool(&q("get-sum"), args(json!({"a": 2, "b": 40})))
        .await
        .expect("get-sum");
    assert!(text(&sum).contains("42"), "{}", text(&sum));

    // A resource created at run time arrives through resources/list_changed in a new revision.
    resource_made_at_run_time_appears(&runtime, name, "sse-test.txt.gz").await;

    // The server goes away: the stream cannot be re-opened, the session ends and the server
    // actor sees it (the server's tools leave the snapshot).
    let _ = child.kill().await;
    let gone = runtime
        .wait_for(SETTLE, |s| s.servers[name].state != ServerState::Connected)
        .await;
    assert_ne!(gone.servers[name].state, ServerState::Connected);
    assert!(gone.tools().all(|t| t.server != name));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_server_that_is_not_listening_fails_clearly() {
    let url = format!("http://127.0.0.1:{}/sse", free_port());
    let mut cfg = server("offline", sse(&url));
    cfg.startup_timeout = Duration::from_secs(10);
    let runtime = start(vec![cfg]);
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers.get("offline").and_then(error_of).is_some()
        })
        .await;
    let status = &s.servers["offline"];
    assert_ne!(status.state, ServerState::Connected);
    let error = error_of(status).expect("an error");
    // Said as for Streamable HTTP: the URL, what failed, what to check.
    assert!(
        error.contains(&format!("cannot reach {url}"))
            && error.contains("connection refused")
            && error.contains("Check `url`"),
        "{error}"
    );
    runtime.shutdown().await;
}

/// A one-request-per-connection HTTP server whose GET answers `status` with `body` (an event
/// stream when `status` is 200) and keeps the connection open; records request lines.
async fn fake_sse_server(status: &'static str, body: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/sse", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (log, body) = (log.clone(), body.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                log.lock()
                    .unwrap()
                    .push(head.lines().next().unwrap_or("").to_string());
                let reply = if status.starts_with("200") {
                    format!("HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n\r\n{body}")
                } else {
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n")
                };
                let _ = socket.write_all(reply.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(120)).await;
            });
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_on_another_origin_is_refused() {
    let (url, seen) = fake_sse_server(
        "200 OK",
        "event: endpoint\ndata: http://elsewhere.invalid:9/message?sessionId=x\n\n".into(),
    )
    .await;
    // Refused, and retried as any failed handshake (the server's doing, not the config's)
    // until the startup budget is spent.
    let mut cfg = server("foreign", sse(&url));
    cfg.startup_timeout = Duration::from_secs(3);
    let runtime = start(vec![cfg]);
    let s = runtime.wait_settled(SETTLE).await;
    let error = match &s.servers["foreign"].state {
        ServerState::Failed { error } => error.clone(),
        other => panic!("expected failed, got {other:?}"),
    };
    assert!(
        error.contains("another origin") && error.contains("http://elsewhere.invalid:9"),
        "{error}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|line| line.starts_with("GET /sse")),
        "nothing but the stream was requested: {seen:?}"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_on_the_stream_needs_auth() {
    let (url, _) = fake_sse_server("401 Unauthorized", String::new()).await;
    let mut cfg = server("locked", sse(&url));
    if let TransportConfig::LegacySse { headers, .. } = &mut cfg.transport {
        headers.insert("Authorization".into(), "Bearer wr0ng-t0ken".into());
    }
    let runtime = start(vec![cfg]);
    let s = runtime.wait_settled(SETTLE).await;
    match &s.servers["locked"].state {
        ServerState::NeedsAuth { reason } => {
            assert!(reason.contains("401"), "{reason}");
            assert!(!reason.contains("wr0ng-t0ken"), "{reason}");
        }
        other => panic!("expected needs-auth, got {other:?}"),
    }
    // The model is told what the user does: credentials in `headers` (a legacy SSE server
    // has no login, and `mcp-harness login` refuses it).
    let text = authenticate_text(&runtime, "locked").await;
    assert!(text.contains("`headers`"), "{text}");
    assert!(!text.contains("mcp-harness login"), "{text}");
    runtime.shutdown().await;
}

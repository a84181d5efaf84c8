//! Calls to a Streamable HTTP server reuse one keep-alive connection, even when the end of each
//! answer's stream comes a little after the answer.
//!
//! rmcp's client stops reading a request's event stream once its worker has the answer; a body
//! dropped before its last chunk makes hyper close the connection, and the next call opens a new
//! one. The transport reads such a stream to its end in the background
//! (`net::ReadToEnd`), so the connection goes back to the pool. The gate here holds back the
//! end of every `tools/call` answer by 30 ms, so that every call would lose that race: without
//! the drain, each of the calls below (spaced out, as an agent's calls are) comes on a
//! connection of its own — over a real network, a TCP and TLS handshake per call.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use common::*;
use futures::StreamExt as _;
use mcp_harness_catalog::qualify;
use mcp_harness_fixture::FixtureOptions;
use serde_json::json;

/// How late the end of each `tools/call` answer comes.
const LATE_END: Duration = Duration::from_millis(30);

/// The connections the server accepted, and `tools/call` POSTs it answered.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    calls: AtomicUsize,
}

/// A listener that counts what it accepts and sets `TCP_NODELAY` as the fixture's own server
/// does (without it each answer waits for a delayed ACK).
struct Counting {
    inner: tokio::net::TcpListener,
    seen: Arc<Seen>,
}

impl axum::serve::Listener for Counting {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, peer) = axum::serve::Listener::accept(&mut self.inner).await;
        stream.set_nodelay(true).expect("TCP_NODELAY");
        self.seen.accepted.fetch_add(1, Ordering::SeqCst);
        (stream, peer)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

async fn gate(State(seen): State<Arc<Seen>>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (message, req) = match read_message(req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let call = message["method"] == "tools/call";
    let response = next.run(req).await;
    if !call {
        return response;
    }
    seen.calls.fetch_add(1, Ordering::SeqCst);
    // Every frame as it comes, then the end of the body LATE_END later.
    let (parts, body) = response.into_parts();
    let late_end = futures::stream::once(tokio::time::sleep(LATE_END))
        .filter_map(|()| std::future::ready(None::<Result<axum::body::Bytes, axum::Error>>));
    let frames = body.into_data_stream().chain(late_end);
    Response::from_parts(parts, Body::from_stream(frames))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_calls_reuse_their_connection_when_the_stream_ends_late() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let seen: Arc<Seen> = Arc::default();
    let router = axum::Router::new()
        .nest_service("/mcp", fixture_mcp_service(FixtureOptions::default()))
        .layer(axum::middleware::from_fn_with_state(seen.clone(), gate));
    let listener = Counting {
        inner: listener,
        seen: seen.clone(),
    };
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    let runtime = start(vec![server("web", http(&url))]);
    let echo = qualify("web", "echo");
    runtime.wait_for(SETTLE, |s| s.tool(&echo).is_some()).await;
    const CALLS: usize = 20;
    let accepted_before = seen.accepted.load(Ordering::SeqCst);
    for i in 0..CALLS {
        let message = format!("call {i}");
        let answer = runtime
            .call_tool(&echo, args(json!({"message": message})))
            .await
            .expect("the call");
        assert_eq!(text(&answer), message);
        // As an agent's calls come: with time to think between them.
        tokio::time::sleep(LATE_END * 3).await;
    }
    assert_eq!(seen.calls.load(Ordering::SeqCst), CALLS);
    let opened = seen.accepted.load(Ordering::SeqCst) - accepted_before;
    // Each answer's end came while the caller was thinking: one connection serves every call.
    // Without the drain: one per call.
    assert!(
        opened <= 1,
        "{CALLS} sequential calls opened {opened} connections: the answers' streams were \
         dropped unread and their connections closed"
    );
    runtime.shutdown().await;
}

//! A Streamable HTTP call whose response stream breaks mid-call (the connection cut after the
//! first progress event, as a proxy or a network drop does): the harness resumes it with a GET
//! carrying `Last-Event-ID` (SEP-1699) and gets the result, without sending the call again —
//! the upstream runs it once, and the caller sees each progress value once, in order (rmcp's
//! server replays the event the resume names; the harness skips it).
//!
//! The server is the fixture behind a gate that cuts the first `slow` call's response stream
//! right after its first progress event. A server that answers every GET with `retry: 0` and
//! nothing else is asked again only a handful of times, paced.

mod common;

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use common::*;
use futures::StreamExt as _;
use mcp_harness_catalog::qualify;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::CallOptions;
use serde_json::json;

#[derive(Default)]
struct Gate {
    /// `tools/call` POSTs of `slow` seen.
    slow_posts: u32,
    /// GETs that resumed a stream (carried `Last-Event-ID`).
    resumes: u32,
    /// Whether a stream was cut.
    cut: bool,
    /// Answer each GET with `retry: 0` and an empty stream (a server that never delivers).
    stall: bool,
    /// GETs seen.
    gets: u32,
}

type Shared = Arc<Mutex<Gate>>;

async fn gate(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if req.method() == Method::GET {
        let stall = {
            let mut st = st.lock().unwrap();
            st.gets += 1;
            st.resumes += u32::from(req.headers().contains_key("last-event-id"));
            st.stall
        };
        if stall {
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from("retry: 0\n\n"))
                .expect("a response");
        }
        return next.run(req).await;
    }
    let (message, req) = match read_message(req).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let slow = message["method"] == "tools/call" && message["params"]["name"] == "slow";
    let cut = slow && {
        let mut st = st.lock().unwrap();
        st.slow_posts += 1;
        !std::mem::replace(&mut st.cut, true)
    };
    let response = next.run(req).await;
    if !cut {
        return response;
    }
    // Pass the stream on up to and including its first progress event, then break the
    // connection (a body error: no final chunk).
    let (parts, body) = response.into_parts();
    let mut seen_progress = false;
    let frames = body.into_data_stream().map(move |frame| {
        if seen_progress {
            return Err(std::io::Error::other("cut by the test's gate"));
        }
        let frame = frame.map_err(std::io::Error::other)?;
        seen_progress = String::from_utf8_lossy(&frame).contains("notifications/progress");
        Ok(frame)
    });
    Response::from_parts(parts, Body::from_stream(frames))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_stream_breaks_is_resumed_not_resent() {
    let (st, url) = gated(Gate::default()).await;

    let runtime = start(vec![server("web", http(&url))]);
    let slow = qualify("web", "slow");
    runtime.wait_for(SETTLE, |s| s.tool(&slow).is_some()).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        progress: Some(tx),
        ..Default::default()
    };
    let answer = runtime
        .call_tool_with(&slow, args(json!({"ms": 600})), options)
        .await
        .expect("the call survives its stream breaking");
    assert!(!answer.is_error(), "{}", text(&answer));
    let mut progress = Vec::new();
    while let Ok(p) = rx.try_recv() {
        progress.push(p.progress);
    }
    assert!(
        progress.len() >= 3 && progress.windows(2).all(|w| w[0] < w[1]),
        "progress came twice or out of order across the break: {progress:?}"
    );
    {
        let st = st.lock().unwrap();
        assert!(st.cut, "the gate cut the call's stream");
        assert!(st.resumes >= 1, "the stream was resumed with Last-Event-ID");
        assert_eq!(st.slow_posts, 1, "the call was sent again, not resumed");
    }
    runtime.shutdown().await;
}

/// The fixture behind `gate` starting as `state`, on a loopback port: the gate's state and the
/// server's URL (logs go to the test's output as `RUST_LOG` says).
async fn gated(state: Gate) -> (Shared, String) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let st: Shared = Arc::new(Mutex::new(state));
    let router = axum::Router::new()
        .nest_service("/mcp", fixture_mcp_service(FixtureOptions::default()))
        .layer(axum::middleware::from_fn_with_state(st.clone(), gate));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (st, url)
}

/// A server that answers every GET — the session's own event stream, and a resume — with
/// `retry: 0` and an empty stream: the harness asks again a handful of times, paced, not
/// thousands of times a second for as long as the session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_answered_with_nothing_is_paced() {
    let (st, url) = gated(Gate {
        stall: true,
        ..Gate::default()
    })
    .await;

    let runtime = start(vec![server("web", http(&url))]);
    let slow = qualify("web", "slow");
    runtime.wait_for(SETTLE, |s| s.tool(&slow).is_some()).await;
    // A call whose stream is cut (after its first progress event) is resumed into the same
    // nothing; it ends at its timeout.
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        timeout: Some(std::time::Duration::from_secs(4)),
        progress: Some(tx),
        ..Default::default()
    };
    let answer = runtime
        .call_tool_with(&slow, args(json!({"ms": 20_000})), options)
        .await;
    assert!(answer.is_err(), "the call had no way to its result");
    let (gets, resumes) = {
        let st = st.lock().unwrap();
        (st.gets, st.resumes)
    };
    // Unpaced, these 4 s held thousands; paced (3 at once, then 100 ms doubling to 5 s): a
    // dozen or so.
    assert!(resumes >= 1, "the cut call was never resumed ({gets} GETs)");
    assert!(gets <= 40, "{gets} GETs ({resumes} resumes) in 4 s");
    runtime.shutdown().await;
}

//! Every progress notification a server sent before its result reaches the caller before the
//! call returns, over each transport: server-everything's `trigger-long-running-operation`
//! sends its last progress just before the result, and rmcp handles each notification on a task
//! of its own, so the result can overtake it. Many runs per transport, each asserting that the
//! final progress value was delivered.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::qualify;
use mcp_harness_runtime::CallOptions;
use mcp_harness_runtime::TransportConfig;
use serde_json::json;

/// Runs per transport.
const RUNS: usize = 20;
/// Progress steps per run (the last one is sent just before the result).
const STEPS: u64 = 3;

async fn every_run_delivers_the_last_progress(transport: TransportConfig) {
    let runtime = start(vec![server("everything", transport)]);
    settled_connected(&runtime, "everything").await;
    let tool = qualify("everything", "trigger-long-running-operation");
    let mut missed = Vec::new();
    for run in 0..RUNS {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let options = CallOptions {
            progress: Some(tx),
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        let result = runtime
            .call_tool_with(
                &tool,
                args(json!({"duration": 0.03, "steps": STEPS})),
                options,
            )
            .await
            .expect("the call");
        assert!(!result.is_error(), "{:?}", result.result.content);
        // What the caller has when the call returns, without waiting for anything more.
        let mut values = Vec::new();
        while let Ok(p) = rx.try_recv() {
            values.push(p.progress);
        }
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "run {run}: in order: {values:?}"
        );
        if values.last() != Some(&(STEPS as f64)) {
            missed.push((run, values));
        }
    }
    runtime.shutdown().await;
    assert!(
        missed.is_empty(),
        "runs whose last progress was not delivered before the call returned: {missed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_delivers_the_last_progress_before_the_result() {
    every_run_delivers_the_last_progress(stdio(&node(), &[&server_everything(), "stdio"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse_delivers_the_last_progress_before_the_result() {
    let (mut child, port) = spawn_server_everything("sse").await;
    every_run_delivers_the_last_progress(sse(&format!("http://127.0.0.1:{port}/sse"))).await;
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_delivers_the_last_progress_before_the_result() {
    let (mut child, port) = spawn_server_everything("streamableHttp").await;
    every_run_delivers_the_last_progress(http(&format!("http://127.0.0.1:{port}/mcp"))).await;
    let _ = child.kill().await;
}

/// Progress keeps a call alive past its timeout, up to ten times it: the fixture's `slow`
/// reports progress every 100 ms. With a 300 ms timeout, a 900 ms call that the caller follows
/// with progress returns its result; the same call without progress times out; and one that
/// reports progress for longer than 10 × 300 ms times out at that cap (not before; a 6 s call
/// that was never cut would have returned its result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_extends_the_timeout_up_to_ten_times_it() {
    progress_extends_the_timeout(fixture_stdio(&[])).await;
}

/// The same over Streamable HTTP, where such a call is an express call (sent from the caller's
/// task, its progress passing through its wait, `mcp_harness_transport::Express`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_progress_extends_the_timeout_up_to_ten_times_it() {
    let (url, task) = fixture_http(mcp_harness_fixture::FixtureOptions::default()).await;
    progress_extends_the_timeout(http(&url)).await;
    task.abort();
}

async fn progress_extends_the_timeout(transport: TransportConfig) {
    use mcp_harness_runtime::CallError;
    let runtime = start(vec![server("fx", transport)]);
    settled_connected(&runtime, "fx").await;
    let slow = qualify("fx", "slow");
    let timeout = Duration::from_millis(300);
    let call = |ms: u64, progress: bool| {
        let runtime = &runtime;
        let slow = &slow;
        async move {
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let options = CallOptions {
                progress: progress.then_some(tx),
                timeout: Some(timeout),
                ..Default::default()
            };
            let started = std::time::Instant::now();
            let outcome = runtime
                .call_tool_with(slow, args(json!({"ms": ms})), options)
                .await;
            (outcome, started.elapsed())
        }
    };

    let (followed, _) = call(900, true).await;
    let followed = followed.expect("a call that reports progress outlives its timeout");
    assert!(!followed.is_error(), "{:?}", followed.result.content);

    let (silent, _) = call(900, false).await;
    assert!(
        matches!(silent, Err(CallError::Timeout { timeout: t, .. }) if t == timeout),
        "without progress the timeout holds: {silent:?}"
    );

    let (endless, took) = call(6_000, true).await;
    // The error names the limit that passed: the total, not the 300 ms it began with.
    assert!(
        matches!(endless, Err(CallError::Timeout { timeout: t, .. }) if t == timeout * 10),
        "progress past 10 × the timeout: {endless:?}"
    );
    assert!(
        took >= Duration::from_millis(2_900),
        "progress kept it alive up to the cap of 10 × 300 ms: took {took:?}"
    );
    runtime.shutdown().await;
}

//! Servers that fail: at start, by hanging, by not existing, by crashing mid-session, by being
//! unreachable. Each gets a clear, classified state with the reason (and stderr tail for
//! stdio); the other servers are unaffected; a failed server's tools leave the next snapshot.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_runtime::CallError;
use serde_json::json;

fn failed_error(state: &ServerState) -> &str {
    match state {
        ServerState::Failed { error } => error,
        other => panic!("expected failed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_start_is_failed_with_its_stderr() {
    let runtime = start(vec![
        server("good", fixture_stdio(&[])),
        server(
            "dies",
            fixture_stdio(&[
                "--stderr-banner",
                "loading plugin xyz",
                "--exit-at-start",
                "3",
            ]),
        ),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["good"].state, ServerState::Connected);
    let error = failed_error(&s.servers["dies"].state);
    assert!(error.contains("server stderr"), "{error}");
    assert!(error.contains("loading plugin xyz"), "{error}");
    assert!(error.contains("exiting at start with code 3"), "{error}");
    assert!(
        error.contains("the server process ended (exit status: 3)"),
        "how it ended: {error}"
    );
    assert!(s.tools().all(|t| t.server == "good"));
    let err = runtime
        .call_tool("mcp__dies__echo", None)
        .await
        .expect_err("no such tool");
    assert!(matches!(err, CallError::UnknownTool { .. }));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_in_startup_times_out_and_names_the_key() {
    let marker = format!("hang-{}", uuid::Uuid::new_v4());
    let mut hung = server(
        "hung",
        fixture_stdio(&["--name", &marker, "--hang-at-start"]),
    );
    hung.startup_timeout = Duration::from_millis(800);
    let runtime = start(vec![hung, server("good", fixture_stdio(&[]))]);
    let s = runtime.wait_settled(SETTLE).await;
    let error = failed_error(&s.servers["hung"].state);
    assert!(
        error.contains("no answer to initialize within 0.8s"),
        "{error}"
    );
    assert!(error.contains("startupTimeoutSec"), "{error}");
    assert_eq!(s.servers["good"].state, ServerState::Connected);
    // The timed-out child is not left running.
    assert_eq!(
        wait_gone(&marker).await,
        Vec::<u32>::new(),
        "the hung server process survived"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_is_failed_with_the_command_name() {
    let runtime = start(vec![server(
        "ghost",
        stdio("/nonexistent/mcp-server-ghost", &[]),
    )]);
    let s = runtime.wait_settled(SETTLE).await;
    let error = failed_error(&s.servers["ghost"].state);
    assert!(
        error.contains("could not start `/nonexistent/mcp-server-ghost`"),
        "{error}"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_http_server_is_failed() {
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let mut cfg = server("offline", http(&url));
    cfg.startup_timeout = Duration::from_secs(10);
    let runtime = start(vec![cfg]);
    let s = runtime.wait_settled(SETTLE).await;
    let error = failed_error(&s.servers["offline"].state);
    assert!(!error.is_empty());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_server_is_never_started() {
    let marker = format!("disabled-{}", uuid::Uuid::new_v4());
    let mut off = server("off", fixture_stdio(&["--name", &marker]));
    off.enabled = false;
    let runtime = start(vec![off, server("on", fixture_stdio(&[]))]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["off"].state, ServerState::Disabled);
    assert!(!s.catalogs.contains_key("off"));
    assert!(
        processes_with(&marker).is_empty(),
        "a disabled server was spawned"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_session_fails_the_server_and_clears_its_tools() {
    let marker = format!("crash-{}", uuid::Uuid::new_v4());
    let runtime = start(vec![
        server(
            "crashy",
            fixture_stdio(&["--name", &marker, "--stderr-banner", "crashy is up"]),
        ),
        server("steady", fixture_stdio(&[])),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["crashy"].state, ServerState::Connected);
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: kill only sends a signal to the fixture process this test started.
    unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) };

    let s = runtime
        .wait_for(SETTLE, |s| {
            !matches!(s.servers["crashy"].state, ServerState::Connected)
        })
        .await;
    let error = failed_error(&s.servers["crashy"].state);
    assert!(error.contains("connection closed"), "{error}");
    assert!(
        error.contains("crashy is up"),
        "the stderr tail is shown: {error}"
    );
    assert!(
        s.tools().all(|t| t.server == "steady"),
        "no ghost tools from the crashed server"
    );
    assert!(!s.changes.is_empty());
    let err = runtime
        .call_tool("mcp__crashy__echo", args(json!({"message": "x"})))
        .await
        .expect_err("gone");
    assert!(matches!(err, CallError::UnknownTool { .. }), "{err}");
    let ok = runtime
        .call_tool("mcp__steady__echo", args(json!({"message": "x"})))
        .await
        .expect("steady works");
    assert_eq!(text(&ok), "x");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_connection_that_died_is_a_transport_error() {
    let marker = format!("midcall-{}", uuid::Uuid::new_v4());
    let runtime = start(vec![server("dying", fixture_stdio(&["--name", &marker]))]);
    runtime.wait_settled(SETTLE).await;
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1);
    let call = runtime.call_tool("mcp__dying__slow", args(json!({"ms": 10_000})));
    let kill = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SAFETY: signals only the fixture process this test started.
        unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) };
    };
    let (result, ()) = tokio::join!(call, kill);
    let err = result.expect_err("the server died during the call");
    assert!(matches!(err, CallError::Transport { .. }), "{err}");
    assert!(err.retryable());
    runtime.shutdown().await;
}

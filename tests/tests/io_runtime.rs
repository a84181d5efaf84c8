//! `RuntimeBuilder::io_runtime`: the servers' connections run on the embedder's tokio runtime
//! (spawn, initialize, each session's message loop), survive a restart there, and leave neither
//! a task on that runtime nor a process behind once the harness is shut down. A current-thread
//! runtime is refused with a clear error.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::{ServerState, Snapshot};
use mcp_harness_runtime::RuntimeBuilder;
use serde_json::json;

fn connected(s: &Snapshot, names: &[&str]) -> bool {
    names.iter().all(|n| {
        s.servers
            .get(*n)
            .is_some_and(|st| st.state == ServerState::Connected)
    })
}

/// Waits (bounded) until the runtime has at most `tasks` alive tasks; returns how many it has.
async fn tasks_down_to(handle: &tokio::runtime::Handle, tasks: usize) -> usize {
    for _ in 0..100 {
        let alive = handle.metrics().num_alive_tasks();
        if alive <= tasks {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.metrics().num_alive_tasks()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_run_on_the_embedders_runtime_and_leave_nothing_behind() {
    let handle = tokio::runtime::Handle::current();
    let marker = format!("io-runtime-{}", uuid::Uuid::new_v4());
    let before = handle.metrics().num_alive_tasks();
    let runtime = RuntimeBuilder::new(config(vec![
        server("a", fixture_stdio(&["--name", &marker])),
        server("b", fixture_stdio(&["--name", &marker])),
    ]))
    .io_runtime(handle.clone())
    .start()
    .expect("start");
    let s = runtime
        .wait_for(SETTLE, |s| connected(s, &["a", "b"]))
        .await;
    assert!(connected(&s, &["a", "b"]), "{:?}", s.servers);
    // Each session's message loop (and its process reaper) lives on this runtime now.
    let during = handle.metrics().num_alive_tasks();
    assert!(
        during >= before + 2,
        "the sessions run on the embedder's runtime: {before} tasks before, {during} connected"
    );
    let result = runtime
        .call_tool(
            "mcp__a__echo",
            args(json!({"message": "over your runtime"})),
        )
        .await
        .expect("echo");
    assert_eq!(text(&result), "over your runtime");

    // A restart connects again on the same runtime.
    let since = s.servers["a"].since;
    runtime.restart("a").expect("restart");
    let s = runtime
        .wait_for(SETTLE, |s| {
            connected(s, &["a"]) && s.servers["a"].since > since
        })
        .await;
    assert!(s.servers["a"].since > since, "{:?}", s.servers["a"]);
    let result = runtime
        .call_tool("mcp__a__echo", args(json!({"message": "again"})))
        .await
        .expect("echo after the restart");
    assert_eq!(text(&result), "again");

    runtime.shutdown().await;
    assert_eq!(wait_gone(&marker).await, Vec::<u32>::new());
    let after = tasks_down_to(&handle, before).await;
    assert!(
        after <= before,
        "no task of the harness is left on the embedder's runtime: {before} before, {after} after shutdown"
    );
}

#[test]
fn a_current_thread_runtime_is_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let started = RuntimeBuilder::new(config(vec![server("a", fixture_stdio(&[]))]))
        .io_runtime(rt.handle().clone())
        .start();
    let err = started.err().expect("refused").to_string();
    assert!(
        err.contains("io_runtime") && err.contains("multi-threaded"),
        "{err}"
    );
}

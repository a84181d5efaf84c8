//! Where the servers' connections run (spawn, initialize, each session's message loop).
//! `RuntimeBuilder::io_runtime`: on the embedder's tokio runtime; they survive a restart there
//! and leave neither a task on that runtime nor a process behind once the harness is shut down.
//! A current-thread runtime is refused with a clear error, unless the embedder says it drives it
//! (`RuntimeBuilder::io_runtime_driven`, as `mcp-harness serve --threads 1` does): then every
//! connection runs on that one thread, with the same guarantees. `RuntimeBuilder::io_threads`: on the
//! harness's own pinned or work-stealing threads, as many as asked, which stop with the harness
//! (shut down or dropped) and take every server process with them. Contradictory or empty
//! choices are refused before anything starts.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::{ServerState, Snapshot};
use mcp_harness_runtime::{IoThreads, RuntimeBuilder};
use serde_json::json;

fn connected(s: &Snapshot, names: &[&str]) -> bool {
    names.iter().all(|n| {
        s.servers
            .get(*n)
            .is_some_and(|st| st.state == ServerState::Connected)
    })
}

/// Restarts `name` and waits (bounded) until a new connection of it is connected.
async fn restarted(runtime: &mcp_harness_runtime::Runtime, name: &str) {
    let since = runtime.snapshot().servers[name].since;
    runtime.restart(name).expect("restart");
    let s = runtime
        .wait_for(SETTLE, |s| {
            connected(s, &[name]) && s.servers[name].since > since
        })
        .await;
    assert!(s.servers[name].since > since, "{:?}", s.servers[name]);
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

/// Servers `a` and `b` (fixtures named `marker`) started by `builder` (which puts their
/// connections on the current runtime), connected; asserts their sessions run on this runtime
/// (at least two more alive tasks than `before`).
async fn two_on_this_runtime(
    builder: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
    marker: &str,
    before: usize,
) -> mcp_harness_runtime::Runtime {
    let runtime = builder(RuntimeBuilder::new(config(vec![
        server("a", fixture_stdio(&["--name", marker])),
        server("b", fixture_stdio(&["--name", marker])),
    ])))
    .start()
    .expect("start");
    let s = runtime
        .wait_for(SETTLE, |s| connected(s, &["a", "b"]))
        .await;
    assert!(connected(&s, &["a", "b"]), "{:?}", s.servers);
    // Each session's message loop (and its process reaper) lives on this runtime now.
    let during = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        during >= before + 2,
        "the sessions run on this runtime: {before} tasks before, {during} connected"
    );
    runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_run_on_the_embedders_runtime_and_leave_nothing_behind() {
    let handle = tokio::runtime::Handle::current();
    let marker = format!("io-runtime-{}", uuid::Uuid::new_v4());
    let before = handle.metrics().num_alive_tasks();
    let runtime = two_on_this_runtime(|b| b.io_runtime(handle.clone()), &marker, before).await;
    let result = runtime
        .call_tool(
            "mcp__a__echo",
            args(json!({"message": "over your runtime"})),
        )
        .await
        .expect("echo");
    assert_eq!(text(&result), "over your runtime");

    // A restart connects again on the same runtime.
    restarted(&runtime, "a").await;
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

/// `io_runtime_driven` on a current-thread runtime: the sessions, a call, a restart and the
/// shutdown all happen on the one thread that `block_on` drives; nothing is left afterwards.
#[test]
fn a_driven_current_thread_runtime_carries_every_connection() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let marker = format!("io-driven-{}", uuid::Uuid::new_v4());
    rt.block_on(async {
        let handle = tokio::runtime::Handle::current();
        let before = handle.metrics().num_alive_tasks();
        let runtime =
            two_on_this_runtime(|b| b.io_runtime_driven(handle.clone()), &marker, before).await;
        let calls = (0..8).map(|i| {
            let runtime = &runtime;
            async move {
                let server = if i % 2 == 0 { "a" } else { "b" };
                let message = format!("call {i}");
                let result = runtime
                    .call_tool(
                        &format!("mcp__{server}__echo"),
                        args(json!({"message": message})),
                    )
                    .await
                    .expect("echo");
                assert_eq!(text(&result), message);
            }
        });
        futures::future::join_all(calls).await;
        restarted(&runtime, "a").await;
        let result = runtime
            .call_tool("mcp__a__echo", args(json!({"message": "again"})))
            .await
            .expect("echo after the restart");
        assert_eq!(text(&result), "again");
        runtime.shutdown().await;
        let after = tasks_down_to(&handle, before).await;
        assert!(
            after <= before,
            "no task of the harness is left: {before} before, {after} after shutdown"
        );
    });
    assert_eq!(rt.block_on(wait_gone(&marker)), Vec::<u32>::new());
}

/// The process-wide thread that forks every stdio server (`transport::reaper`): it lives as
/// long as the process by design (a server's death signal follows its forking thread), so it
/// is no runtime's thread. As the kernel names it (15 bytes).
const SPAWNER_THREAD: &str = "mcp-harness-spa";

/// The names (as the kernel keeps them: at most 15 bytes) of this process's threads that start
/// with `prefix`, the process-wide spawner thread excepted.
fn threads_named(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .filter(|n| n.starts_with(prefix) && n != SPAWNER_THREAD)
        .collect();
    names.sort();
    names
}

/// Waits (bounded) until no thread of this process starts with `prefix`; returns those left.
async fn threads_gone(prefix: &str) -> Vec<String> {
    for _ in 0..100 {
        if threads_named(prefix).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    threads_named(prefix)
}

/// Starts three stdio fixture servers carrying a fresh marker on `threads` and waits until all
/// three are connected; returns the runtime and the marker.
async fn three_connected(threads: IoThreads) -> (mcp_harness_runtime::Runtime, String) {
    let marker = format!("io-threads-{}", uuid::Uuid::new_v4());
    let runtime = RuntimeBuilder::new(config(
        ALL.iter()
            .map(|name| server(name, fixture_stdio(&["--name", &marker])))
            .collect(),
    ))
    .io_threads(threads)
    .start()
    .expect("start");
    let s = runtime.wait_for(SETTLE, |s| connected(s, &ALL)).await;
    assert!(connected(&s, &ALL), "{:?}", s.servers);
    (runtime, marker)
}

const ALL: [&str; 3] = ["a", "b", "c"];

/// Shuts `runtime` down; then no process carrying `marker` and no harness thread is left.
async fn shut_down_and_gone(runtime: mcp_harness_runtime::Runtime, marker: &str) {
    runtime.shutdown().await;
    assert_eq!(wait_gone(marker).await, Vec::<u32>::new());
    assert_eq!(threads_gone("mcp-harness").await, Vec::<String>::new());
}

async fn echo_on_each(runtime: &mcp_harness_runtime::Runtime, servers: &[&str]) {
    for name in servers {
        let message = format!("through {name}");
        let result = runtime
            .call_tool(
                &format!("mcp__{name}__echo"),
                args(json!({"message": message})),
            )
            .await
            .unwrap_or_else(|e| panic!("echo on {name}: {e}"));
        assert_eq!(text(&result), message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_threads_carry_every_connection_and_stop_with_the_runtime() {
    let (runtime, marker) = three_connected(IoThreads::Pinned(2)).await;
    assert_eq!(
        threads_named("mcp-harness-io"),
        ["mcp-harness-io0", "mcp-harness-io1"]
    );
    assert_eq!(
        threads_named("mcp-harness-tas").len(),
        2,
        "two workers for callbacks and the actors' tasks"
    );
    echo_on_each(&runtime, &ALL).await;

    // A restart is placed anew and works like the first connection.
    restarted(&runtime, "b").await;
    echo_on_each(&runtime, &ALL).await;

    shut_down_and_gone(runtime, &marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_runtime_takes_its_pinned_threads_and_servers_with_it() {
    let (runtime, marker) = three_connected(IoThreads::Pinned(3)).await;
    assert_eq!(threads_named("mcp-harness-io").len(), 3);
    echo_on_each(&runtime, &ALL).await;
    tokio::task::block_in_place(|| drop(runtime));
    // The drop joined the actor thread, which joined the pinned threads: nothing is left to
    // wait for.
    assert_eq!(threads_named("mcp-harness"), Vec::<String>::new());
    assert_eq!(wait_gone(&marker).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_stealing_threads_are_as_many_as_asked() {
    let (runtime, marker) = three_connected(IoThreads::WorkStealing(1)).await;
    assert_eq!(threads_named("mcp-harness-io"), ["mcp-harness-io"]);
    echo_on_each(&runtime, &ALL).await;
    shut_down_and_gone(runtime, &marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contradictory_or_empty_io_choices_are_refused_before_anything_starts() {
    let marker = format!("io-refused-{}", uuid::Uuid::new_v4());
    let cfg = || config(vec![server("a", fixture_stdio(&["--name", &marker]))]);
    let both = RuntimeBuilder::new(cfg())
        .io_runtime(tokio::runtime::Handle::current())
        .io_threads(IoThreads::Pinned(2))
        .start()
        .err()
        .expect("refused")
        .to_string();
    assert!(
        both.contains("io_runtime") && both.contains("io_threads") && both.contains("keep one"),
        "{both}"
    );
    for empty in [IoThreads::Pinned(0), IoThreads::WorkStealing(0)] {
        let err = RuntimeBuilder::new(cfg())
            .io_threads(empty)
            .start()
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("io_threads") && err.contains("at least one"),
            "{err}"
        );
    }
    assert_eq!(threads_named("mcp-harness"), Vec::<String>::new());
    assert_eq!(processes_with(&marker), Vec::<u32>::new());
}

//! Shutdown and publication guarantees: no child process survives shutdown or drop; revisions
//! only grow; every published snapshot is internally consistent; a burst of list_changed ends on
//! the server's true final state.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use serde_json::json;

fn three_servers(marker: &str) -> Vec<mcp_harness_runtime::ServerConfig> {
    (0..3)
        .map(|i| server(&format!("s{i}"), fixture_stdio(&["--name", marker])))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_child_process() {
    let marker = format!("shutdown-{}", uuid::Uuid::new_v4());
    let runtime = start(three_servers(&marker));
    let s = runtime.wait_settled(SETTLE).await;
    assert!(
        s.servers
            .values()
            .all(|st| st.state == ServerState::Connected)
    );
    assert_eq!(processes_with(&marker).len(), 3);
    runtime.shutdown().await;
    assert_eq!(wait_gone(&marker).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_runtime_leaves_no_child_process() {
    let marker = format!("drop-{}", uuid::Uuid::new_v4());
    let runtime = start(three_servers(&marker));
    runtime.wait_settled(SETTLE).await;
    assert_eq!(processes_with(&marker).len(), 3);
    drop(runtime);
    // Drop is synchronous: the process groups were killed before it returned; allow the
    // kernel a moment to reap.
    assert_eq!(wait_gone(&marker).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_while_servers_are_still_starting_leaves_no_child_process() {
    let marker = format!("early-drop-{}", uuid::Uuid::new_v4());
    let mut servers = three_servers(&marker);
    servers.push(server(
        "slowstart",
        fixture_stdio(&["--name", &marker, "--hang-at-start"]),
    ));
    let runtime = start(servers);
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(runtime);
    assert_eq!(wait_gone(&marker).await, Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_grow_and_a_burst_ends_on_the_true_state() {
    let runtime = start(vec![
        server("burst", fixture_stdio(&[])),
        server("calm", fixture_stdio(&[])),
    ]);
    runtime.wait_settled(SETTLE).await;
    let mut rx = runtime.watch();
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        // Bounded: stops when the runtime goes away or after 10,000 revisions.
        while seen.len() < 10_000 && rx.changed().await.is_ok() {
            let s = rx.borrow_and_update().clone();
            // Every snapshot is consistent: each indexed tool belongs to a connected server.
            for t in s.tools() {
                assert_eq!(s.servers[&t.server].state, ServerState::Connected);
            }
            seen.push(s.revision);
        }
        seen
    });

    // 40 tools added and every other one removed again, as fast as the server takes them.
    let mut expected = BTreeSet::new();
    for i in 0..40 {
        let name = format!("t{i}");
        runtime
            .call_tool("mcp__burst__add_tool", args(json!({"name": name})))
            .await
            .expect("add");
        expected.insert(format!("mcp__burst__{name}"));
        if i % 2 == 1 {
            runtime
                .call_tool("mcp__burst__remove_tool", args(json!({"name": name})))
                .await
                .expect("remove");
            expected.remove(&format!("mcp__burst__{name}"));
        }
    }
    let dynamic = |s: &mcp_harness_catalog::Snapshot| -> BTreeSet<String> {
        s.tools()
            .filter(|t| {
                t.server == "burst"
                    && t.raw_name.starts_with('t')
                    && t.raw_name[1..].parse::<u32>().is_ok()
            })
            .map(|t| t.qualified_name.clone())
            .collect()
    };
    let last = runtime.wait_for(SETTLE, |s| dynamic(s) == expected).await;
    assert_eq!(dynamic(&last), expected);
    assert_eq!(
        last.catalogs["calm"].tools.len(),
        runtime.snapshot().catalogs["calm"].tools.len()
    );

    runtime.shutdown().await;
    let seen = watcher.await.expect("watcher");
    assert!(!seen.is_empty());
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "revisions must strictly increase: {seen:?}"
    );
    // Batching: 60 list_changed notifications never need 60 revisions' worth of work each.
    assert!(seen.len() <= 61, "{} revisions for 60 changes", seen.len());
}

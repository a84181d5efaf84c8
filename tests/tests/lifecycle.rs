//! Shutdown and publication guarantees: no child process survives shutdown or drop (a server's
//! grandchildren included, in its process group or in a session of their own); revisions only
//! grow; every published snapshot is internally consistent; a burst of list_changed ends on the
//! server's true final state; a burst of changes across servers is published in fewer revisions
//! than it has changes (R16, counted through `Runtime::revisions`).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::{Kind, ServerState};
use mcp_harness_runtime::{Revision, RuntimeBuilder};
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

/// A stdio server's grandchildren — one in its process group, one in a session of its own
/// (`setsid`, out of reach of the group kill) — are gone after shutdown, with the runtime a
/// child subreaper (as the CLI makes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_grandchild_of_a_stdio_server() {
    let marker = format!("grandchildren-{}", uuid::Uuid::new_v4());
    let mut transport = fixture_stdio(&["--spawn-grandchildren"]);
    if let mcp_harness_runtime::TransportConfig::Stdio(spec) = &mut transport {
        spec.env.insert(MARKER_ENV.into(), marker.clone());
    }
    let runtime = RuntimeBuilder::new(config(vec![server("parent", transport)]))
        .child_subreaper(true)
        .start()
        .expect("runtime starts");
    settled_connected(&runtime, "parent").await;
    // The server and its two grandchildren (`sleep`), all carrying the marker in their
    // environment. Bounded: the grandchildren start right after the server process.
    let mut found = processes_with_env(MARKER_ENV, &marker);
    for _ in 0..100 {
        if found.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        found = processes_with_env(MARKER_ENV, &marker);
    }
    assert_eq!(found.len(), 3, "server and two grandchildren: {found:?}");
    let sessions: BTreeSet<i32> = found
        .iter()
        // SAFETY: getsid only reads the session id of a process.
        .map(|pid| unsafe { libc::getsid(*pid as i32) })
        .collect();
    assert_eq!(
        sessions.len(),
        2,
        "one grandchild left the session: {found:?}"
    );
    runtime.shutdown().await;
    let mut left = processes_with_env(MARKER_ENV, &marker);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with_env(MARKER_ENV, &marker);
    }
    assert_eq!(left, Vec::<u32>::new(), "left after shutdown");
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

/// Dropped while a server is still starting: that server's process (hanging before it serves)
/// and the grandchild it started first in its process group (`sleep`) are seen running before
/// the drop, and neither after — the drop kills the server's whole group, not only the process
/// it spawned. (Its other grandchild, in a session of its own, is a child subreaper's to sweep,
/// which this runtime is not: the test kills it itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_while_servers_are_still_starting_leaves_no_child_process() {
    let marker = format!("early-drop-{}", uuid::Uuid::new_v4());
    let mut servers = three_servers(&marker);
    let mut slow = fixture_stdio(&[
        "--name",
        &marker,
        "--spawn-grandchildren",
        "--hang-at-start",
    ]);
    if let mcp_harness_runtime::TransportConfig::Stdio(spec) = &mut slow {
        spec.env.insert(MARKER_ENV.into(), marker.clone());
    }
    servers.push(server("slowstart", slow));
    let runtime = start(servers);
    // Dropped only once the hanging server's process and its grandchildren run, and the server
    // is still starting (bounded: it hangs until killed).
    let mut started = processes_with_env(MARKER_ENV, &marker);
    for _ in 0..200 {
        if started.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        started = processes_with_env(MARKER_ENV, &marker);
    }
    let hanging: Vec<u32> = started
        .iter()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--hang-at-start"))
        })
        .collect();
    assert_eq!(
        (started.len(), hanging.len()),
        (3, 1),
        "the hanging server and its two grandchildren started: {started:?}"
    );
    // SAFETY: getpgid only reads the process group id of a process.
    let (group, elsewhere): (Vec<u32>, Vec<u32>) = started
        .iter()
        .partition(|pid| unsafe { libc::getpgid(**pid as i32) } == hanging[0] as i32);
    assert_eq!(
        group.len(),
        2,
        "the server and one grandchild in its group: {started:?}"
    );
    let state = runtime
        .snapshot()
        .servers
        .get("slowstart")
        .map(|s| s.state.clone());
    assert!(
        state.as_ref().is_some_and(|s| !s.is_settled()),
        "still starting at the drop: {state:?}"
    );
    drop(runtime);
    // Drop is synchronous; allow the kernel a moment to reap (bounded).
    let in_group = || {
        let live = processes_with_env(MARKER_ENV, &marker);
        group
            .iter()
            .copied()
            .filter(|p| live.contains(p))
            .collect::<Vec<u32>>()
    };
    let mut left = in_group();
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = in_group();
    }
    for pid in elsewhere.iter().chain(&left) {
        // SAFETY: kill only sends a signal to a process this test's server started.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    assert_eq!(
        left,
        Vec::<u32>::new(),
        "left after the drop: the server's group was {group:?}"
    );
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
}

/// R16 batching: a burst of tool changes on several servers at once reaches the publisher as
/// one update per server, and those updates go out in fewer publications than there are
/// changes (counted through `Runtime::revisions`, which delivers every revision with its own
/// changes). The window is long enough that the burst's updates land in at most two windows
/// (the first update may go out at once, the rest wait for the window); unbatched, every
/// update would be a revision of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_across_servers_is_published_in_fewer_revisions_than_changes() {
    const SERVERS: usize = 6;
    let servers = (0..SERVERS)
        .map(|i| server(&format!("b{i}"), fixture_stdio(&[])))
        .collect();
    let runtime = RuntimeBuilder::new(config(servers))
        .batch_window(Duration::from_secs(2))
        .revision_buffer(1024)
        .start()
        .expect("start");
    runtime.wait_settled(SETTLE).await;
    let mut stream = runtime.revisions();
    let start = stream.revision();
    let names: Vec<String> = (0..SERVERS)
        .map(|i| format!("mcp__b{i}__add_tool"))
        .collect();
    let adds = names
        .iter()
        .map(|name| runtime.call_tool(name, args(json!({"name": "burst"}))));
    for r in futures::future::join_all(adds).await {
        r.expect("add_tool");
    }
    let all_added = |s: &mcp_harness_catalog::Snapshot| {
        (0..SERVERS).all(|i| s.tool(&format!("mcp__b{i}__burst")).is_some())
    };
    let last = runtime.wait_for(SETTLE, all_added).await;
    assert!(all_added(&last), "every server's change was published");
    let (mut publications, mut changes) = (0u64, 0u64);
    while let Some(item) = stream.try_recv() {
        let Revision::Next(snapshot) = &item else {
            panic!("a reader within the buffer skipped revisions: {item:?}");
        };
        if snapshot.revision > last.revision {
            break;
        }
        let burst = snapshot
            .changes
            .iter()
            .filter(|c| {
                c.kind == Some(Kind::Tools) && c.added.iter().any(|n| n.ends_with("__burst"))
            })
            .count() as u64;
        if burst > 0 {
            publications += 1;
            changes += burst;
        }
    }
    assert!(last.revision > start);
    assert_eq!(
        changes, SERVERS as u64,
        "each server's change published once"
    );
    assert!(
        publications < changes,
        "{changes} changes in {publications} publications: batched"
    );
    runtime.shutdown().await;
}

//! The revision stream and re-listing under floods, through the public runtime API against the
//! fixture: a reader that keeps up gets every revision with its own changes; a reader held back
//! while more revisions are published than the buffer holds gets one item saying how many it
//! stands for, with their combined change (an add and a remove of the same tool cancel out); a
//! flood of list_changed costs a bounded number of listings, counted by the fixture, and the
//! last change is still listed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mcp_harness_catalog::{Change, Kind, Snapshot};
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::{Revision, Runtime, RuntimeBuilder};
use serde_json::json;

/// A runtime with the fixture in-process as `fx`; `buffer` revisions for stream readers.
fn start_fx(buffer: usize) -> Runtime {
    RuntimeBuilder::new(config(Vec::new()))
        .in_process(
            "fx",
            Arc::new(|stream| {
                mcp_harness_fixture::serve_in_process(FixtureOptions::default(), stream);
            }),
        )
        .revision_buffer(buffer)
        .start()
        .expect("runtime starts")
}

/// The fixture's tool names that a test added (`x…`), sorted.
fn added_tools(s: &Snapshot) -> Vec<String> {
    s.catalogs
        .get("fx")
        .map(|c| {
            c.tools
                .iter()
                .map(|t| t.raw_name.clone())
                .filter(|n| n.starts_with('x'))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds or removes tool `name` and waits until the snapshot shows it.
async fn toggle(runtime: &Runtime, add: bool, name: &str) {
    let tool = if add { "add_tool" } else { "remove_tool" };
    runtime
        .call_tool(&format!("mcp__fx__{tool}"), args(json!({"name": name})))
        .await
        .expect("tool call");
    let s = runtime
        .wait_for(SETTLE, |s| added_tools(s).iter().any(|n| n == name) == add)
        .await;
    assert_eq!(
        added_tools(&s).iter().any(|n| n == name),
        add,
        "{tool} {name} was published"
    );
}

/// The tool changes of `changes`: (added, removed) qualified names, in order of the changes.
fn tool_changes(changes: &[Change]) -> Vec<(Vec<String>, Vec<String>)> {
    changes
        .iter()
        .filter(|c| c.server == "fx" && c.kind == Some(Kind::Tools))
        .map(|c| (c.added.clone(), c.removed.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_keeps_up_gets_every_revision_with_its_changes() {
    let runtime = start_fx(64);
    runtime.wait_settled(SETTLE).await;
    let mut stream = runtime.revisions();
    let start = stream.revision();
    let steps = [(true, "x1"), (true, "x2"), (false, "x1"), (true, "x3")];
    for (add, name) in steps {
        toggle(&runtime, add, name).await;
    }
    let end = runtime.snapshot().revision;
    let mut seen = Vec::new();
    let mut expected_revision = start + 1;
    while expected_revision <= end {
        let item = tokio::time::timeout(SETTLE, stream.recv())
            .await
            .expect("an item in time")
            .expect("the stream is open");
        let Revision::Next(snapshot) = &item else {
            panic!("a reader within the buffer skipped revisions: {item:?}");
        };
        assert_eq!(
            snapshot.revision, expected_revision,
            "in order, none left out"
        );
        seen.extend(tool_changes(&snapshot.changes));
        expected_revision += 1;
    }
    let q = |n: &str| format!("mcp__fx__{n}");
    assert_eq!(
        seen,
        [
            (vec![q("x1")], vec![]),
            (vec![q("x2")], vec![]),
            (vec![], vec![q("x1")]),
            (vec![q("x3")], vec![]),
        ],
        "each revision's own tool change"
    );
    assert!(stream.try_recv().is_none(), "nothing more");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_held_back_gets_the_skipped_revisions_combined() {
    let buffer = 2;
    let runtime = start_fx(buffer);
    runtime.wait_settled(SETTLE).await;
    let mut stream = runtime.revisions();
    let start = stream.revision();
    // The reader holds while more revisions than the buffer holds are published: x1 comes and
    // goes (cancels out), x2 stays, x3 comes and goes twice.
    let steps = [
        (true, "x1"),
        (true, "x2"),
        (false, "x1"),
        (true, "x3"),
        (false, "x3"),
        (true, "x3"),
        (false, "x3"),
    ];
    for (add, name) in steps {
        toggle(&runtime, add, name).await;
    }
    let end = runtime.snapshot().revision;
    assert!(
        end - start > buffer as u64,
        "more revisions ({}) than the buffer holds ({buffer})",
        end - start
    );
    let item = tokio::time::timeout(SETTLE, stream.recv())
        .await
        .expect("an item in time")
        .expect("the stream is open");
    let Revision::Skipped {
        from,
        count,
        changes,
        snapshot,
    } = &item
    else {
        panic!("a reader past the buffer got a single revision: {item:?}");
    };
    assert_eq!(*from, start, "from the revision the reader was at");
    assert_eq!(snapshot.revision, end, "to the newest");
    assert_eq!(*count, end - start, "says how many revisions it stands for");
    assert_eq!(
        tool_changes(changes),
        [(vec!["mcp__fx__x2".to_string()], vec![])],
        "the net change: x1 and x3 cancel out, x2 stays ({changes:?})"
    );
    assert!(
        !changes.iter().any(|c| c.kind.is_none()),
        "fx stayed connected: no state change ({changes:?})"
    );
    assert!(
        stream.try_recv().is_none(),
        "revisions inside the combined item are not delivered again"
    );
    // Caught up: the next revision arrives on its own again.
    toggle(&runtime, true, "x4").await;
    let item = tokio::time::timeout(SETTLE, stream.recv())
        .await
        .expect("an item in time")
        .expect("the stream is open");
    let Revision::Next(snapshot) = &item else {
        panic!("a reader that caught up got a combined item: {item:?}");
    };
    assert_eq!(snapshot.revision, end + 1);
    assert_eq!(
        tool_changes(&snapshot.changes),
        [(vec!["mcp__fx__x4".to_string()], vec![])]
    );
    runtime.shutdown().await;
}

/// Listings served for `method` so far, as the fixture counts them.
async fn listings(runtime: &Runtime, server: &str, method: &str) -> u64 {
    let result = runtime
        .call_tool(&format!("mcp__{server}__calls"), None)
        .await
        .expect("calls");
    let counts: serde_json::Value = serde_json::from_str(&text(&result)).expect("JSON counts");
    counts[method].as_u64().unwrap_or(0)
}

/// A flood of 2,000 tools/list_changed costs at most one listing per relist window (plus the
/// one that starts at once and the trailing one), and the snapshot still ends on the flood's
/// last tool. Bounded by the time the flood took, so a slow machine only loosens the bound;
/// without the window the harness re-lists back to back for as long as the flood lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_relists_at_most_once_per_window() {
    let window = Duration::from_millis(400);
    let runtime = RuntimeBuilder::new(config(vec![server("fx", fixture_stdio(&[]))]))
        .relist_window(window)
        .start()
        .expect("start");
    runtime.wait_settled(SETTLE).await;
    let before = listings(&runtime, "fx", "tools/list").await;
    let started = Instant::now();
    runtime
        .call_tool(
            "mcp__fx__flood",
            args(json!({"kind": "tools", "count": 2000})),
        )
        .await
        .expect("flood");
    let last = |s: &Snapshot| {
        s.catalogs
            .get("fx")
            .is_some_and(|c| c.tools.iter().any(|t| t.raw_name == "flood_1999"))
    };
    let s = runtime.wait_for(SETTLE, last).await;
    assert!(last(&s), "the flood's last change is listed");
    let took = started.elapsed();
    let listed = listings(&runtime, "fx", "tools/list").await - before;
    let bound = (took.as_millis() / window.as_millis()) as u64 + 2;
    assert!(
        listed <= bound,
        "{listed} listings for a flood that took {took:?}; at most {bound} with a {window:?} window"
    );
    assert!(listed >= 1, "the flood was listed");
    runtime.shutdown().await;
}

//! Desired state and the one publisher (R19–R21, R6): configuration changes only mark the
//! runtime dirty; a refresh applies the newest one, replacing changed servers and keeping
//! unchanged connections; a cancelled refresh leaves the runtime dirty; concurrent refreshes
//! publish once; calls on a removed server end promptly with a classified error.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_runtime::{CallError, TransportConfig};
use serde_json::json;

fn marker(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::new_v4())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_is_applied_only_by_a_refresh() {
    let (keep, change, gone) = (marker("keep"), marker("change"), marker("gone"));
    let base = vec![
        server("keep", fixture_stdio(&["--name", &keep])),
        server("change", fixture_stdio(&["--name", &change])),
        server("gone", fixture_stdio(&["--name", &gone])),
    ];
    let runtime = start(base);
    runtime.wait_settled(SETTLE).await;
    let keep_pid = processes_with(&keep);
    let change_pid = processes_with(&change);
    assert_eq!((keep_pid.len(), change_pid.len()), (1, 1));

    let changed = marker("changed");
    let added = marker("added");
    runtime.set_config(config(vec![
        server("keep", fixture_stdio(&["--name", &keep])),
        server(
            "change",
            fixture_stdio(&["--name", &changed, "--tools", "1"]),
        ),
        server("new", fixture_stdio(&["--name", &added])),
    ]));
    assert!(runtime.is_dirty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = runtime.snapshot();
    assert!(
        before.servers.contains_key("gone") && !before.servers.contains_key("new"),
        "nothing happens before the refresh"
    );

    let outcome = runtime
        .refresh_if_dirty()
        .await
        .expect("refresh")
        .expect("there was a change");
    assert!(!runtime.is_dirty());
    assert_eq!(outcome.kept, vec!["keep".to_string()]);
    assert_eq!(outcome.removed, vec!["gone".to_string()]);
    let mut started = outcome.started.clone();
    started.sort();
    assert_eq!(started, vec!["change".to_string(), "new".to_string()]);

    let s = runtime.snapshot();
    assert!(!s.servers.contains_key("gone"));
    assert!(
        s.tools().all(|t| t.server != "gone"),
        "no ghost tools of a removed server"
    );
    assert_eq!(s.servers["new"].state, ServerState::Connected);
    assert_eq!(s.servers["change"].state, ServerState::Connected);
    assert!(
        s.tool("mcp__change__tool_0").is_some(),
        "the changed server runs with its new config"
    );
    assert_eq!(
        processes_with(&keep),
        keep_pid,
        "an unchanged server keeps its connection"
    );
    assert_eq!(
        wait_gone(&change).await,
        Vec::<u32>::new(),
        "the old process of a changed server is gone"
    );
    assert_eq!(
        wait_gone(&gone).await,
        Vec::<u32>::new(),
        "a removed server's process is gone"
    );
    assert_eq!(processes_with(&changed).len(), 1);
    assert!(
        runtime.refresh_if_dirty().await.expect("refresh").is_none(),
        "nothing left to do"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_refresh_leaves_the_runtime_dirty() {
    let runtime = start(vec![server("a", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    let mut slow = server("slow", fixture_stdio(&["--hang-at-start"]));
    slow.startup_timeout = Duration::from_secs(3);
    runtime.set_config(config(vec![server("a", fixture_stdio(&[])), slow]));
    // The refresh waits for `slow` to settle; cancel it half way.
    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), runtime.refresh_if_dirty()).await;
    assert!(cancelled.is_err(), "the refresh was still running");
    assert!(runtime.is_dirty(), "the guard restored the dirty flag");
    // The next refresh completes the work (the hung server fails after its own timeout).
    let outcome = runtime
        .refresh_if_dirty()
        .await
        .expect("refresh")
        .expect("still pending");
    assert!(outcome.kept.contains(&"a".to_string()));
    assert!(!runtime.is_dirty());
    let s = runtime.snapshot();
    assert!(
        matches!(s.servers["slow"].state, ServerState::Failed { .. }),
        "the refresh waited for every desired server to settle"
    );
    runtime.shutdown().await;
}

/// A server still starting when an edit replaces or removes it stops then, with the process
/// it started: it does not run on to its startup deadline beside its successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_starting_stops_when_replaced_or_removed() {
    let (first, second) = (marker("starting-1"), marker("starting-2"));
    let slow = |name: &str| {
        let mut slow = server("slow", fixture_stdio(&["--name", name, "--hang-at-start"]));
        slow.startup_timeout = Duration::from_secs(60);
        slow
    };
    let runtime = start(vec![server("a", fixture_stdio(&[])), slow(&first)]);
    for _ in 0..100 {
        if !processes_with(&first).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(processes_with(&first).len(), 1, "the slow server started");
    // Replaced: the refresh waits for the new one to settle (it never does within the test).
    runtime.set_config(config(vec![server("a", fixture_stdio(&[])), slow(&second)]));
    let checked = async {
        let gone = wait_gone(&first).await;
        (gone, processes_with(&second).len())
    };
    let refreshing = tokio::time::timeout(Duration::from_secs(6), runtime.refresh_if_dirty());
    let ((left, successors), _) = tokio::join!(checked, refreshing);
    assert_eq!(left, Vec::<u32>::new(), "the replaced start runs on");
    assert_eq!(successors, 1, "its successor starts");
    // Removed.
    runtime.set_config(config(vec![server("a", fixture_stdio(&[]))]));
    tokio::time::timeout(Duration::from_secs(20), runtime.refresh_if_dirty())
        .await
        .expect("a refresh removing a starting server ends")
        .expect("refresh");
    assert_eq!(
        wait_gone(&second).await,
        Vec::<u32>::new(),
        "the removed start runs on"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refreshes_publish_once() {
    let runtime = start(vec![server("a", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    for round in 0..5 {
        let name = format!("n{round}");
        runtime.set_config(config(vec![
            server("a", fixture_stdio(&[])),
            server(&name, fixture_stdio(&[])),
        ]));
        let refreshes = (0..8).map(|_| runtime.refresh_if_dirty());
        let results = futures::future::join_all(refreshes).await;
        let applied = results.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        assert_eq!(
            applied, 1,
            "exactly one refresh claims and publishes a change (round {round})"
        );
        assert!(runtime.snapshot().servers.contains_key(&name));
    }
    runtime.shutdown().await;
}

/// The fixture over Streamable HTTP on a free loopback port, counting the sessions it opened
/// (one per `initialize` it answered): returns its URL and the count.
async fn counting_fixture_http() -> (String, Arc<AtomicUsize>) {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpService, session::local::LocalSessionManager,
    };
    let fixture = mcp_harness_fixture::FixtureServer::new(Default::default());
    let sessions = Arc::new(AtomicUsize::new(0));
    let counted = sessions.clone();
    let service = StreamableHttpService::new(
        move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(fixture.for_new_connection())
        },
        Arc::new(LocalSessionManager::default()),
        Default::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}/mcp"), sessions)
}

/// R20: pre-warm requests coalesce. The first change's refresh claims it and waits for its
/// servers to settle (one hangs at start until its startup timeout) — outside the refresh lock,
/// so the next changes do not wait behind it: many more changes, each followed by a pre-warm
/// request, arrive in a burst and end in a few refreshes that apply the newest. Counted where
/// it happens: each configuration names a new server `n{i}` on a fixture that counts the
/// sessions it opened, so every configuration a refresh applied is one session there — at
/// least one (the last is connected), a few (a refresh takes the newest configuration when it
/// gets the lock; while one reconciles, the requests of the burst coalesce in the one-slot
/// channel), never one per request; the revisions agree, and nothing is left dirty — with no
/// `refresh_if_dirty` or `bind_step` from the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_requests_coalesce_into_few_refreshes() {
    const CHANGES: usize = 20;
    let (url, sessions) = counting_fixture_http().await;
    let runtime =
        mcp_harness_runtime::RuntimeBuilder::new(config(vec![server("a", fixture_stdio(&[]))]))
            .revision_buffer(4096)
            .start()
            .expect("start");
    runtime.wait_settled(SETTLE).await;
    assert_eq!(sessions.load(Ordering::SeqCst), 0, "no `n` server yet");
    let mut stream = runtime.revisions();
    let mut hang = server("hang", fixture_stdio(&["--hang-at-start"]));
    hang.startup_timeout = Duration::from_secs(2);
    let generation = |i: usize| {
        config(vec![
            server("a", fixture_stdio(&[])),
            hang.clone(),
            server(&format!("n{i}"), http(&url)),
        ])
    };
    // The first change's refresh claims it, then waits (the hanging server) ...
    runtime.set_config(generation(0));
    runtime.prewarm();
    let mut tries = 0;
    while runtime.is_dirty() && tries < 400 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        tries += 1;
    }
    assert!(
        !runtime.is_dirty(),
        "the first pre-warm request was not served"
    );
    // ... while every other change and its pre-warm request arrive.
    for i in 1..CHANGES {
        runtime.set_config(generation(i));
        runtime.prewarm();
    }
    let last = format!("n{}", CHANGES - 1);
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers
                .get(&last)
                .is_some_and(|b| b.state == ServerState::Connected)
        })
        .await;
    assert_eq!(s.servers[&last].state, ServerState::Connected, "applied");
    let opened = sessions.load(Ordering::SeqCst);
    assert!(
        (1..=CHANGES / 2).contains(&opened),
        "{CHANGES} pre-warm requests applied {opened} configurations (sessions the fixture \
         opened for an `n` server); coalesced, they apply a few"
    );
    // The refresh publishes once everything settled; then nothing is dirty (bounded wait).
    let mut tries = 0;
    while runtime.is_dirty() && tries < 200 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        tries += 1;
    }
    assert!(!runtime.is_dirty());
    let mut started = std::collections::BTreeSet::new();
    while let Some(item) = stream.try_recv() {
        let mcp_harness_runtime::Revision::Next(snapshot) = &item else {
            panic!("a reader within the buffer skipped revisions: {item:?}");
        };
        started.extend(
            snapshot
                .servers
                .keys()
                .filter(|n| n.starts_with('n'))
                .cloned(),
        );
    }
    assert!(started.contains(&last), "{started:?}");
    // Coalesced: a few, never one per request (2 as a rule; 5 seen on a loaded 2-core run,
    // where the refreshes of the first changes finished before the rest arrived).
    assert!(
        started.len() <= CHANGES / 4,
        "{CHANGES} pre-warm requests applied {} configurations: {started:?}",
        started.len()
    );
    runtime.shutdown().await;
}

/// A call still running on a removed server when the edit's drain ends is cut, promptly and
/// with a classified error (the drain is 500 ms here; the call would take a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_removed_server_ends_promptly_with_a_classified_error() {
    let runtime = mcp_harness_runtime::RuntimeBuilder::new(config(vec![
        server("leaving", fixture_stdio(&[])),
        server("staying", fixture_stdio(&[])),
    ]))
    .edit_drain(Duration::from_millis(500))
    .start()
    .expect("runtime starts");
    runtime.wait_settled(SETTLE).await;
    let call = runtime.call_tool("mcp__leaving__slow", args(json!({"ms": 60_000})));
    let remove = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(vec![server("staying", fixture_stdio(&[]))]));
        runtime.refresh_if_dirty().await.expect("refresh")
    };
    let (result, outcome) =
        tokio::time::timeout(Duration::from_secs(8), async { tokio::join!(call, remove) })
            .await
            .expect("the call is cut when the drain ends");
    assert_eq!(
        outcome.map(|o| o.removed),
        Some(vec!["leaving".to_string()])
    );
    let err = result.expect_err("the server went away mid-call");
    assert!(matches!(err, CallError::Transport { .. }), "{err}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_config_file_is_applied_and_a_broken_one_is_not() {
    let dir = std::env::temp_dir().join(format!("hot-reload-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("mcp.json");
    let write = |servers: &[&str]| {
        let servers: serde_json::Map<String, serde_json::Value> = servers
            .iter()
            .map(|s| (s.to_string(), json!({"command": fixture_bin()})))
            .collect();
        let text = json!({"mcpServers": servers, "permissions": {"allow": ["**"]}}).to_string();
        std::fs::write(&path, text).expect("write config");
    };
    write(&["a"]);
    let runtime = mcp_harness_runtime::Runtime::start(
        mcp_harness_runtime::Config::load(&path).expect("load"),
    )
    .expect("start");
    runtime.wait_settled(SETTLE).await;
    let load_path = path.clone();
    let loader: mcp_harness_runtime::ConfigLoader = std::sync::Arc::new(move || {
        mcp_harness_runtime::Config::load(&load_path).map_err(|e| e.to_string())
    });
    let watch = runtime.reload_on_change(vec![path.clone()], Duration::from_millis(100), loader);

    write(&["a", "b"]);
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.servers
                .get("b")
                .is_some_and(|b| b.state == ServerState::Connected)
        })
        .await;
    assert_eq!(
        s.servers["b"].state,
        ServerState::Connected,
        "the edit was applied without a restart"
    );

    std::fs::write(&path, "{ this is not json").expect("write broken");
    let mut tries = 0;
    while watch.last_error().is_none() && tries < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        tries += 1;
    }
    let error = watch.last_error().expect("the broken edit is reported");
    assert!(error.contains("mcp.json"), "{error}");
    assert!(!runtime.is_dirty(), "a broken file changes nothing");
    let s = runtime.snapshot();
    assert!(s.servers.contains_key("a") && s.servers.contains_key("b"));
    drop(watch);
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Make before break: a config edit that restarts a server keeps its entries published while
/// the new process starts (its state pending), so an edit that changes nothing a client sees
/// publishes no change of its tools; a call prepared before the edit and made while the new
/// process starts waits for it and runs there, instead of failing on the closed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_server_keeps_its_entries_until_the_new_connection_is_up() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (first, second) = (marker("replaced"), marker("replacement"));
    let runtime = start(vec![server("fx", fixture_stdio(&["--name", &first]))]);
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let call = step.prepare_call("mcp__fx__echo").expect("prepare");
    let mut revisions = runtime.revisions();

    runtime.set_config(config(vec![server(
        "fx",
        fixture_stdio(&["--name", &second, "--start-delay-ms", "600"]),
    )]));
    let during = async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let s = runtime.snapshot();
        let state = s.servers["fx"].state.clone();
        let listed = s.tool("mcp__fx__echo").is_some();
        let answer = call
            .call(args(json!({"message": "across the restart"})))
            .await;
        (state, listed, answer)
    };
    let (refreshed, (state, listed, answer)) = tokio::join!(runtime.refresh_if_dirty(), during);
    refreshed.expect("refresh").expect("a change");
    assert_eq!(state, ServerState::Pending, "the new process was starting");
    assert!(
        listed,
        "the tool left the catalog while its server restarted"
    );
    let answer = answer.expect("the call waited for the new connection");
    assert_eq!(text(&answer), "across the restart");
    assert_eq!(
        processes_with(&second).len(),
        1,
        "it ran on the new process"
    );
    assert_eq!(wait_gone(&first).await, Vec::<u32>::new());

    let mut tool_changes = Vec::new();
    while let Some(revision) = revisions.try_recv() {
        tool_changes.extend(
            revision
                .changes()
                .iter()
                .filter(|c| c.kind.is_some())
                .map(|c| format!("{c:?}")),
        );
    }
    assert!(
        tool_changes.is_empty(),
        "a restart that changed nothing seen published changes: {tool_changes:?}"
    );
    runtime.shutdown().await;
}

/// A call already running on a server's connection when a config edit replaces the server
/// finishes there (the old connection drains before it closes), and a call or a resource read
/// made meanwhile waits and runs on the new process — none fails with "the connection is
/// closed" or "pending".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_server_finishes_the_calls_in_flight_before_it_stops() {
    let (first, second) = (marker("drained"), marker("after-drain"));
    let runtime = calls_across_a_replacement(
        fixture_stdio(&["--name", &first]),
        fixture_stdio(&["--name", &second]),
    )
    .await;
    assert_eq!(processes_with(&second).len(), 1, "the new process runs");
    assert_eq!(wait_gone(&first).await, Vec::<u32>::new());
    runtime.shutdown().await;
}

/// The same over Streamable HTTP (an edit of the server's headers): the call in flight on the
/// old session's response stream finishes before that session is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_http_server_finishes_the_calls_in_flight_before_it_stops() {
    let (url, _served) = fixture_http(mcp_harness_fixture::FixtureOptions::default()).await;
    let edited = TransportConfig::StreamableHttp {
        url: url.clone(),
        headers: [("X-Edited".to_string(), "1".to_string())].into(),
        oauth: None,
    };
    let runtime = calls_across_a_replacement(http(&url), edited).await;
    runtime.shutdown().await;
}

/// Starts server `fx` on `first`, starts a 1.2 s call on it, replaces it with `second` 300 ms
/// later, and at 600 ms (while the old connection drains) calls again and reads a resource:
/// each answered.
async fn calls_across_a_replacement(
    first: TransportConfig,
    second: TransportConfig,
) -> mcp_harness_runtime::Runtime {
    let runtime = start(vec![server("fx", first)]);
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let slow = step.prepare_call("mcp__fx__slow").expect("prepare slow");
    let echo = step.prepare_call("mcp__fx__echo").expect("prepare echo");

    let in_flight = async { slow.call(args(json!({"ms": 1200}))).await };
    let edit = async {
        // The slow call is on the wire before the edit applies.
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(vec![server("fx", second)]));
        runtime.refresh_if_dirty().await
    };
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        // The old connection is draining (the slow call runs until ~1.2 s). A step that
        // requires the server binds at once (its entries stay; it shows as pending).
        let required = runtime.bind_step(&["fx"]).await.map(|_| ());
        let bound_while_draining =
            (runtime.snapshot().servers.get("fx")).is_some_and(|s| s.state == ServerState::Pending);
        let answers = tokio::join!(
            echo.call(args(json!({"message": "after the drain"}))),
            runtime.read_resource("fx", "fixture://static/readme"),
        );
        (required, bound_while_draining, answers)
    };
    let (slow_answer, refreshed, (required, bound_while_draining, (echo_answer, read))) =
        tokio::join!(in_flight, edit, meanwhile);
    required.expect("a step requiring the server being replaced binds");
    assert!(
        bound_while_draining,
        "the step requiring the replaced server was bound only once it left pending"
    );
    read.expect("a resource read meanwhile waited for the new connection too");
    refreshed.expect("refresh").expect("a change");
    let slow_answer = slow_answer.expect("the call in flight finished on the old connection");
    assert!(
        !slow_answer.is_error(),
        "the slow call: {}",
        text(&slow_answer)
    );
    let echo_answer = echo_answer.expect("the call made meanwhile waited for the new connection");
    assert_eq!(text(&echo_answer), "after the drain");
    drop(step);
    runtime
}

/// A server removed from the config leaves the catalog at once, while a call already running on
/// it finishes there before its process stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_leaves_at_once_and_finishes_its_calls_in_flight() {
    let (gone, stays) = (marker("removed-drains"), marker("removed-stays"));
    let runtime = start(vec![
        server("fx", fixture_stdio(&["--name", &gone])),
        server("other", fixture_stdio(&["--name", &stays])),
    ]);
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let slow = step.prepare_call("mcp__fx__slow").expect("prepare slow");

    let in_flight = async { slow.call(args(json!({"ms": 1200}))).await };
    let edit = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(vec![server(
            "other",
            fixture_stdio(&["--name", &stays]),
        )]));
        let refresh = runtime.refresh_if_dirty();
        tokio::pin!(refresh);
        // Before the slow call is answered, the removal is published.
        let listed_while_draining = async {
            for _ in 0..100 {
                if runtime.snapshot().tool("mcp__fx__echo").is_none() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            true
        };
        let (refreshed, listed) = tokio::join!(refresh, listed_while_draining);
        (refreshed, listed)
    };
    let (answer, (refreshed, listed)) = tokio::join!(in_flight, edit);
    refreshed.expect("refresh").expect("a change");
    assert!(!listed, "the removed server's tools stayed listed");
    let answer = answer.expect("the call in flight finished on the removed server");
    assert!(!answer.is_error(), "the slow call: {}", text(&answer));
    assert_eq!(wait_gone(&gone).await, Vec::<u32>::new());
    assert_eq!(
        processes_with(&stays).len(),
        1,
        "the other server kept its process"
    );
    runtime.shutdown().await;
}

/// Shutdown while a removed server drains closes its old connection as it closes the others:
/// the call still running there finishes (within the shutdown's grace), and its process is
/// gone when shutdown returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_draining_connection_close() {
    let gone = marker("shutdown-drains");
    let runtime = mcp_harness_runtime::RuntimeBuilder::new(config(vec![server(
        "fx",
        fixture_stdio(&["--name", &gone]),
    )]))
    .edit_drain(Duration::from_secs(20))
    .start()
    .expect("start");
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let slow = step.prepare_call("mcp__fx__slow").expect("prepare slow");
    let in_flight = async { slow.call(args(json!({"ms": 1500}))).await };
    let edit_then_shutdown = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(Vec::new()));
        runtime
            .refresh_if_dirty()
            .await
            .expect("refresh")
            .expect("a change");
        runtime.shutdown().await;
    };
    let (answer, ()) = tokio::join!(in_flight, edit_then_shutdown);
    let answer = answer.expect("the call on the draining connection finished");
    assert!(!answer.is_error(), "the slow call: {}", text(&answer));
    assert_eq!(wait_gone(&gone).await, Vec::<u32>::new());
}

/// When the replacement fails, the kept entries leave the catalog then, and a call made while
/// it started fails with the replacement's error — not "the connection is closed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_that_fails_takes_the_entries_with_it() {
    let first = marker("replaced-fails");
    let runtime = start(vec![server("fx", fixture_stdio(&["--name", &first]))]);
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let call = step.prepare_call("mcp__fx__echo").expect("prepare");

    runtime.set_config(config(vec![server(
        "fx",
        fixture_stdio(&["--exit-at-start", "3", "--start-delay-ms", "300"]),
    )]));
    let during = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call.call(args(json!({"message": "doomed"}))).await
    };
    let (refreshed, answer) = tokio::join!(runtime.refresh_if_dirty(), during);
    refreshed.expect("refresh").expect("a change");
    let err = answer.expect_err("the replacement failed");
    assert!(
        matches!(err, CallError::ServerUnavailable { .. })
            && err.to_string().contains("a config edit replaced it"),
        "{err}"
    );
    let s = runtime.snapshot();
    assert!(matches!(s.servers["fx"].state, ServerState::Failed { .. }));
    assert!(
        s.tools().all(|t| t.server != "fx"),
        "no ghost tools of a failed replacement"
    );
    runtime.shutdown().await;
}

/// An edit applies while an earlier edit's replaced server still drains: another server's
/// removal is published at once (not after the drain), and a second edit of the draining server
/// decides what starts after the drain — the newest configuration, never the one in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_applies_while_an_earlier_one_drains() {
    let (old, between, newest, other) = (
        marker("drain-old"),
        marker("drain-between"),
        marker("drain-newest"),
        marker("drain-other"),
    );
    let runtime = mcp_harness_runtime::RuntimeBuilder::new(config(vec![
        server("fx", fixture_stdio(&["--name", &old])),
        server("other", fixture_stdio(&["--name", &other])),
    ]))
    .edit_drain(Duration::from_secs(10))
    .start()
    .expect("runtime starts");
    runtime.wait_settled(SETTLE).await;
    let answered = std::sync::atomic::AtomicBool::new(false);
    let slow = async {
        let answer = runtime
            .call_tool("mcp__fx__slow", args(json!({"ms": 5000})))
            .await;
        answered.store(true, Ordering::SeqCst);
        answer
    };
    let edits = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(vec![
            server("fx", fixture_stdio(&["--name", &between])),
            server("other", fixture_stdio(&["--name", &other])),
        ]));
        let first = runtime.refresh_if_dirty();
        let second = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            runtime.set_config(config(vec![server(
                "fx",
                fixture_stdio(&["--name", &newest]),
            )]));
            let second = runtime.refresh_if_dirty();
            tokio::pin!(second);
            let mut removed_while_draining = false;
            for _ in 0..300 {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    _ = &mut second => break,
                }
                if runtime.snapshot().tool("mcp__other__echo").is_none() {
                    removed_while_draining = !answered.load(Ordering::SeqCst);
                    break;
                }
            }
            (second.await, removed_while_draining)
        };
        let (first, (second, removed_while_draining)) = tokio::join!(first, second);
        (first, second, removed_while_draining)
    };
    let (answer, (first, second, removed_while_draining)) = tokio::join!(slow, edits);
    let answer = answer.expect("the call in flight finished on the old connection");
    assert!(!answer.is_error(), "the slow call: {}", text(&answer));
    first.expect("first refresh").expect("a change");
    let second = second.expect("second refresh").expect("a change");
    assert_eq!(second.removed, vec!["other".to_string()]);
    assert!(
        removed_while_draining,
        "the removal waited for the other server's drain"
    );
    assert_eq!(wait_gone(&old).await, Vec::<u32>::new());
    assert_eq!(wait_gone(&other).await, Vec::<u32>::new());
    assert_eq!(
        processes_with(&between),
        Vec::<u32>::new(),
        "the configuration in between never started"
    );
    assert_eq!(processes_with(&newest).len(), 1, "the newest one runs");
    let echo = runtime
        .call_tool("mcp__fx__echo", args(json!({"message": "newest"})))
        .await
        .expect("the newest server answers");
    assert_eq!(text(&echo), "newest");
    runtime.shutdown().await;
}

/// A server removed while an edit's replacement of it drains starts nothing after the drain,
/// and its entries leave at once; the call in flight still finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_removed_while_it_drains_does_not_start_again() {
    let (old, replacement) = (marker("removed-old"), marker("removed-replacement"));
    let runtime = start(vec![server("fx", fixture_stdio(&["--name", &old]))]);
    runtime.wait_settled(SETTLE).await;
    let slow = runtime.call_tool("mcp__fx__slow", args(json!({"ms": 1500})));
    let edits = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runtime.set_config(config(vec![server(
            "fx",
            fixture_stdio(&["--name", &replacement]),
        )]));
        let first = runtime.refresh_if_dirty();
        let second = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            runtime.set_config(config(Vec::new()));
            let outcome = runtime.refresh_if_dirty().await;
            let gone = runtime.snapshot().tool("mcp__fx__echo").is_none();
            (outcome, gone)
        };
        tokio::join!(first, second)
    };
    let (answer, (first, (second, gone))) = tokio::join!(slow, edits);
    let answer = answer.expect("the call in flight finished on the old connection");
    assert!(!answer.is_error(), "the slow call: {}", text(&answer));
    first.expect("first refresh").expect("a change");
    let second = second.expect("second refresh").expect("a change");
    assert_eq!(second.removed, vec!["fx".to_string()]);
    assert!(gone, "the removed server's entries stayed");
    assert_eq!(wait_gone(&old).await, Vec::<u32>::new());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        processes_with(&replacement),
        Vec::<u32>::new(),
        "the replacement started after its server was removed"
    );
    let err = runtime
        .call_tool("mcp__fx__echo", args(json!({"message": "x"})))
        .await
        .expect_err("the server is gone");
    assert!(!err.to_string().is_empty());
    runtime.shutdown().await;
}

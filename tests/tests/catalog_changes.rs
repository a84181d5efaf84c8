//! The catalog under change, through the public runtime API against the fixture: every
//! invalidation edge, newest-listing-wins under floods, the storm of 10 × 1,000 list_changed,
//! two-phase rollback, conflict → zero tools, the listing cache (dropped on close, opt-out),
//! prompts as commands, and resource subscriptions.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use mcp_harness_catalog::{Kind, ServerState, Snapshot};
use mcp_harness_runtime::{Runtime, RuntimeBuilder};
use serde_json::json;

/// The kinds that changed for `server` in `snapshot`'s revision.
fn kinds_changed(snapshot: &Snapshot, server: &str) -> BTreeSet<Kind> {
    snapshot
        .changes
        .iter()
        .filter(|c| c.server == server)
        .filter_map(|c| c.kind)
        .collect()
}

/// Calls `tool` on `server` and waits for the revision whose changes satisfy `pred`.
async fn change_after(
    runtime: &Runtime,
    server: &str,
    tool: &str,
    arguments: serde_json::Value,
    pred: impl Fn(&Snapshot) -> bool,
) -> std::sync::Arc<Snapshot> {
    let mut rx = runtime.watch();
    rx.borrow_and_update();
    runtime
        .call_tool(&format!("mcp__{server}__{tool}"), args(arguments))
        .await
        .expect("tool call");
    let found = tokio::time::timeout(SETTLE, async {
        loop {
            if rx.changed().await.is_err() {
                return None;
            }
            let s = rx.borrow_and_update().clone();
            if pred(&s) {
                return Some(s);
            }
        }
    })
    .await;
    found
        .ok()
        .flatten()
        .expect("the expected revision was published")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_notification_refreshes_exactly_its_edges() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;

    let s = change_after(&runtime, "fx", "add_tool", json!({"name": "t1"}), |s| {
        kinds_changed(s, "fx").contains(&Kind::Tools)
    })
    .await;
    assert_eq!(
        kinds_changed(&s, "fx"),
        BTreeSet::from([Kind::Tools]),
        "tools/list_changed touches tools only"
    );

    let s = change_after(&runtime, "fx", "add_prompt", json!({"name": "p1"}), |s| {
        kinds_changed(s, "fx").contains(&Kind::Prompts)
    })
    .await;
    assert_eq!(
        kinds_changed(&s, "fx"),
        BTreeSet::from([Kind::Prompts, Kind::Commands]),
        "prompts → prompts and the commands built from them"
    );
    assert!(
        s.catalogs["fx"]
            .commands
            .iter()
            .any(|c| c.qualified_name == "mcp__fx__p1")
    );

    let s = change_after(
        &runtime,
        "fx",
        "add_resource",
        json!({"uri": "fixture://r1"}),
        |s| kinds_changed(s, "fx").contains(&Kind::Resources),
    )
    .await;
    let changed = kinds_changed(&s, "fx");
    assert!(changed.contains(&Kind::Resources));
    assert!(
        changed.is_subset(&BTreeSet::from([
            Kind::Resources,
            Kind::ResourceTemplates,
            Kind::Skills,
            Kind::Commands
        ])),
        "{changed:?}"
    );
    assert!(
        s.changes
            .iter()
            .filter(|c| c.server == "fx")
            .all(|c| c.cause == "notifications/resources/list_changed")
    );
    runtime.shutdown().await;
}

/// Floods of varying length against varying batching windows, many times: the snapshot always
/// ends on exactly the server's final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_listing_wins_under_floods() {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for window_ms in [0u64, 1, 16] {
        let runtime = RuntimeBuilder::new(config(vec![
            server("a", fixture_stdio(&[])),
            server("b", fixture_stdio(&[])),
        ]))
        .batch_window(Duration::from_millis(window_ms))
        .start()
        .expect("start");
        runtime.wait_settled(SETTLE).await;
        for round in 0..6 {
            let (ca, cb) = (rand(300) + 1, rand(300) + 1);
            let kind = ["tools", "prompts", "resources"][(round % 3) as usize];
            let (ra, rb) = tokio::join!(
                runtime.call_tool("mcp__a__flood", args(json!({"kind": kind, "count": ca}))),
                runtime.call_tool("mcp__b__flood", args(json!({"kind": kind, "count": cb}))),
            );
            ra.expect("flood a");
            rb.expect("flood b");
            let names = |s: &Snapshot, server: &str| -> Vec<String> {
                let c = &s.catalogs[server];
                let all: Vec<String> = match kind {
                    "tools" => c.tools.iter().map(|t| t.raw_name.clone()).collect(),
                    "prompts" => c.prompts.iter().map(|p| p.raw_name.clone()).collect(),
                    _ => c
                        .resources
                        .iter()
                        .map(|r| r.resource.uri.rsplit('/').next().unwrap_or("").to_string())
                        .collect(),
                };
                all.into_iter()
                    .filter(|n| n.starts_with("flood_") || n.chars().all(|c| c.is_ascii_digit()))
                    .collect()
            };
            let want = |n: u64| {
                if kind == "resources" {
                    (n - 1).to_string()
                } else {
                    format!("flood_{}", n - 1)
                }
            };
            let s = runtime
                .wait_for(SETTLE, |s| {
                    names(s, "a") == [want(ca)] && names(s, "b") == [want(cb)]
                })
                .await;
            assert_eq!(
                names(&s, "a"),
                [want(ca)],
                "window {window_ms} ms, round {round}"
            );
            assert_eq!(
                names(&s, "b"),
                [want(cb)],
                "window {window_ms} ms, round {round}"
            );
        }
        runtime.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_ten_thousand_notifications_ends_on_the_true_state() {
    let servers: Vec<_> = (0..10)
        .map(|i| server(&format!("s{i}"), fixture_stdio(&[])))
        .collect();
    let window = Duration::from_millis(16);
    let runtime = RuntimeBuilder::new(config(servers))
        .batch_window(window)
        .start()
        .expect("start");
    runtime.wait_settled(SETTLE).await;
    let first = runtime.snapshot().revision;
    let started = Instant::now();
    let names: Vec<String> = (0..10).map(|i| format!("mcp__s{i}__flood")).collect();
    let floods = names
        .iter()
        .map(|n| runtime.call_tool(n, args(json!({"kind": "tools", "count": 1000}))));
    for r in futures::future::join_all(floods).await {
        r.expect("flood");
    }
    let truth = |s: &Snapshot| {
        (0..10).all(|i| {
            let flood: Vec<&str> = s
                .catalogs
                .get(&format!("s{i}"))
                .map(|c| {
                    c.tools
                        .iter()
                        .map(|t| t.raw_name.as_str())
                        .filter(|n| n.starts_with("flood_"))
                        .collect()
                })
                .unwrap_or_default();
            flood == ["flood_999"]
        })
    };
    let last = runtime.wait_for(SETTLE, truth).await;
    assert!(truth(&last), "every server ends with exactly flood_999");
    let elapsed = started.elapsed();
    let publications = last.revision - first;
    // At most one publication per window (a lone update goes out at once, a burst at the end).
    let bound = elapsed.as_millis() as u64 / window.as_millis() as u64 + 2;
    assert!(
        publications <= bound,
        "{publications} publications in {elapsed:?} (bound {bound})"
    );
    assert!(publications < 10_000);
    assert!(
        last.servers
            .values()
            .all(|s| s.state == ServerState::Connected)
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_relisting_keeps_the_previous_generation() {
    let runtime = start(vec![server(
        "fx",
        fixture_stdio(&["--tools", "12", "--page-size", "5"]),
    )]);
    let before = runtime.wait_settled(SETTLE).await;
    let count = before.catalogs["fx"].tools.len();
    // Page 1 of the next tools listing fails: the listing is incomplete and must not be used.
    runtime
        .call_tool(
            "mcp__fx__fail_next_list",
            args(json!({"kind": "tools", "page": 1})),
        )
        .await
        .expect("schedule");
    let s = change_after(
        &runtime,
        "fx",
        "add_tool",
        json!({"name": "late_one"}),
        |s| {
            s.servers["fx"]
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("fails on purpose"))
        },
    )
    .await;
    let tools = &s.catalogs["fx"].tools;
    assert_eq!(
        tools.len(),
        count,
        "the old generation is kept whole, not a prefix of the new one"
    );
    assert!(!tools.iter().any(|t| t.raw_name == "late_one"));
    assert_eq!(s.servers["fx"].state, ServerState::Connected);
    let error = s.servers["fx"].last_error.clone().unwrap_or_default();
    assert!(error.contains("previous tools are kept"), "{error}");
    // The next notification lists successfully and brings both new tools.
    let s = change_after(
        &runtime,
        "fx",
        "add_tool",
        json!({"name": "late_two"}),
        |s| s.tool("mcp__fx__late_two").is_some(),
    )
    .await;
    assert!(s.tool("mcp__fx__late_one").is_some());
    assert_eq!(s.catalogs["fx"].tools.len(), count + 2);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_conflict_exposes_zero_tools_with_the_reason() {
    let runtime = start(vec![
        server("dup", fixture_stdio(&["--duplicate-tool", "echo"])),
        server("ok", fixture_stdio(&[])),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["dup"].state, ServerState::Connected);
    assert!(s.catalogs["dup"].tools.is_empty(), "no half catalog");
    let hidden = &s.catalogs["dup"].hidden;
    assert!(
        hidden
            .iter()
            .any(|h| h.reason.contains("name conflict") && h.raw_name == "echo"),
        "{hidden:?}"
    );
    assert!(
        s.tool("mcp__ok__echo").is_some(),
        "other servers are unaffected"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_dropped_on_close_and_honours_opt_out() {
    let marker = format!("cache-{}", uuid::Uuid::new_v4());
    let runtime = start(vec![
        server("cached", fixture_stdio(&["--name", &marker])),
        server("private", fixture_stdio(&["--no-catalog-cache"])),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(
        runtime.cached_kinds("cached"),
        vec![
            Kind::Tools,
            Kind::Prompts,
            Kind::Resources,
            Kind::ResourceTemplates
        ]
    );
    assert!(
        runtime.cached_kinds("private").is_empty(),
        "an opted-out server is never cached"
    );
    assert!(
        !s.catalogs["private"].tools.is_empty(),
        "opting out of caching does not hide the catalog"
    );
    // Prompts still turn into commands without a cache (the inputs are read again).
    let s = change_after(
        &runtime,
        "private",
        "add_prompt",
        json!({"name": "np"}),
        |s| {
            s.catalogs.get("private").is_some_and(|c| {
                c.commands
                    .iter()
                    .any(|c| c.qualified_name == "mcp__private__np")
            })
        },
    )
    .await;
    assert!(
        s.catalogs["private"]
            .prompts
            .iter()
            .any(|p| p.raw_name == "np")
    );
    assert!(runtime.cached_kinds("private").is_empty());

    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1);
    // SAFETY: signals only the fixture process this test started.
    unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) };
    runtime
        .wait_for(SETTLE, |s| {
            s.servers["cached"].state != ServerState::Connected
        })
        .await;
    assert!(
        runtime.cached_kinds("cached").is_empty(),
        "closing drops every kind of the server"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_commands_and_resources_can_be_subscribed() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    let s = runtime.wait_settled(SETTLE).await;
    let command = s.catalogs["fx"]
        .commands
        .iter()
        .find(|c| c.qualified_name == "mcp__fx__greeting")
        .expect("greeting command");
    assert_eq!(command.arguments, vec!["name".to_string()]);
    let prompt = runtime
        .run_command("mcp__fx__greeting", args(json!({"name": "Grace"})))
        .await
        .expect("run command");
    assert!(
        serde_json::to_string(&prompt.messages)
            .unwrap_or_default()
            .contains("Hello, Grace!")
    );

    let mut sub = runtime
        .subscribe_resource("fx", "fixture://static/readme")
        .await
        .expect("subscribe");
    runtime
        .call_tool(
            "mcp__fx__update_resource",
            args(json!({"uri": "fixture://static/readme", "text": "new text"})),
        )
        .await
        .expect("update");
    let update = tokio::time::timeout(SETTLE, sub.next())
        .await
        .expect("an update arrives")
        .expect("runtime alive");
    assert_eq!(
        (update.server.as_str(), update.uri.as_str()),
        ("fx", "fixture://static/readme")
    );
    let read = runtime
        .read_resource("fx", "fixture://static/readme")
        .await
        .expect("read");
    assert!(
        serde_json::to_string(&read.contents)
            .unwrap_or_default()
            .contains("new text")
    );
    runtime.shutdown().await;
}

/// The update that leaves no server pending is published at once, not at the end of the
/// batching window: with a 60 s window, a catalog with every server connected is visible long
/// before the window ends, in a snapshot that holds all of them together, and a later burst is
/// still held back by the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_update_that_settles_the_last_server_is_published_at_once() {
    let servers: Vec<_> = (0..4)
        .map(|i| server(&format!("s{i}"), fixture_stdio(&[])))
        .collect();
    let runtime = RuntimeBuilder::new(config(servers))
        .batch_window(Duration::from_secs(60))
        .start()
        .expect("start");
    let connected = |s: &Snapshot| {
        s.servers.len() == 4
            && s.servers
                .values()
                .all(|st| st.state == ServerState::Connected)
    };
    let s = runtime.wait_for(SETTLE, connected).await;
    assert!(
        connected(&s),
        "every server connected long before the 60 s window ends: {:?}",
        s.servers
            .values()
            .map(|st| st.state.label())
            .collect::<Vec<_>>()
    );
    assert_eq!(s.catalogs.len(), 4, "all catalogs in the same snapshot");
    // A list_changed burst while everything is settled still waits for the window.
    let before = runtime.snapshot().revision;
    runtime
        .call_tool("mcp__s0__flood", args(json!({"kind": "tools", "count": 3})))
        .await
        .expect("flood");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        runtime.snapshot().revision,
        before,
        "a change on a settled catalog is batched by the window"
    );
    assert!(runtime.flush().await > before, "and flushing publishes it");
    let flooded = runtime.snapshot().catalogs["s0"]
        .tools
        .iter()
        .any(|t| t.raw_name == "flood_2");
    assert!(flooded, "the held-back change was the flood's listing");
    runtime.shutdown().await;
}

/// Issue 13 point 5: when two servers' tools end up with one qualified name, the later server
/// used to overwrite the other silently (`--hidden` empty). With server names kept apart by the
/// config, what is left is a crafted name equal to another's sanitised-and-hashed one: server
/// `x.y` with tool `z` is `mcp__x_y__z_<hash>`, and so is server `x_y` with tool `z_<hash>`.
/// Neither is shown; both are hidden with the reason, whichever arrives first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_two_servers_share_hides_both_with_the_reason() {
    let shared = mcp_harness_catalog::qualify("x.y", "z");
    let crafted = shared["mcp__x_y__".len()..].to_string();
    assert_eq!(mcp_harness_catalog::qualify("x_y", &crafted), shared);
    let runtime = start(vec![
        server("x.y", fixture_stdio(&[])),
        server("x_y", fixture_stdio(&[])),
    ]);
    runtime.wait_settled(SETTLE).await;
    for (server, name) in [("x.y", "z"), ("x_y", crafted.as_str())] {
        runtime
            .call_tool(
                &mcp_harness_catalog::qualify(server, "add_tool"),
                args(json!({"name": name})),
            )
            .await
            .expect("add_tool");
    }
    let both_listed = |s: &Snapshot| {
        s.catalogs
            .get("x.y")
            .is_some_and(|c| c.tools.iter().any(|t| t.raw_name == "z"))
            && s.catalogs
                .get("x_y")
                .is_some_and(|c| c.tools.iter().any(|t| t.raw_name == crafted))
    };
    let s = runtime.wait_for(SETTLE, both_listed).await;
    assert!(both_listed(&s), "both tools were listed");
    let binding = runtime.bind_step(&[]).await.expect("bind");
    assert!(
        binding.tools().iter().all(|t| t.name != shared),
        "neither tool is shown under the shared name"
    );
    let hidden: Vec<_> = binding
        .hidden()
        .iter()
        .filter(|h| h.reason.contains("name conflict across servers"))
        .map(|h| (h.server.as_str(), h.raw_name.as_str()))
        .collect();
    assert_eq!(hidden, [("x.y", "z"), ("x_y", crafted.as_str())]);
    let err = binding.prepare_call(&shared).err().expect("refused");
    assert!(err.to_string().contains("hidden"), "{err}");
    runtime.shutdown().await;
}

/// A server forgets its resource subscriptions with its connection: the runtime sends them
/// again on the next one, so a subscriber keeps hearing of updates across a reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_subscription_outlives_a_reconnect() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    let uri = "fixture://static/readme";
    let mut sub = runtime
        .subscribe_resource("fx", uri)
        .await
        .expect("subscribe");
    let before = runtime.snapshot().servers["fx"].since;
    runtime.restart("fx").expect("restart");
    runtime
        .wait_for(SETTLE, |s| {
            s.servers.get("fx").is_some_and(|st| {
                st.since > before && st.state == mcp_harness_catalog::ServerState::Connected
            })
        })
        .await;
    // The renewal follows the new connection's publication: a few updates, each given a
    // moment, until one is heard (bounded).
    let mut heard = None;
    for i in 0..20 {
        runtime
            .call_tool(
                "mcp__fx__update_resource",
                args(json!({"uri": uri, "text": format!("text {i}")})),
            )
            .await
            .expect("update");
        if let Ok(update) = tokio::time::timeout(Duration::from_millis(250), sub.next()).await {
            heard = update;
            break;
        }
    }
    let update = heard.expect("an update after the reconnect");
    assert_eq!((update.server.as_str(), update.uri.as_str()), ("fx", uri));
    runtime.shutdown().await;
}

/// A server that announces a tool change (`tools/list_changed` before the answer that made
/// it) and then gets a call of that tool from a step bound before: the call waits for the
/// listing the notification caused and is refused as stale — never run against the new
/// definition with arguments made for the old one, however soon it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_an_announced_change_is_stale_not_run() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    for round in 0..5u64 {
        let (old, new) = (2 * round + 1, 2 * round + 2);
        runtime
            .call_tool(
                "mcp__fx__mutate_tool",
                args(json!({"name": "vt", "version": old})),
            )
            .await
            .expect("mutate to the old version");
        let listed = |v: u64| {
            move |s: &Snapshot| {
                s.tool("mcp__fx__vt").is_some_and(|t| {
                    t.tool.description.as_deref() == Some(&format!("version {v} of vt"))
                })
            }
        };
        assert!(listed(old)(&*runtime.wait_for(SETTLE, listed(old)).await));
        let bound = runtime.bind_step(&[]).await.expect("bind");
        runtime
            .call_tool(
                "mcp__fx__mutate_tool",
                args(json!({"name": "vt", "version": new, "apply_after_ms": 0})),
            )
            .await
            .expect("mutate to the new version");
        let call = bound
            .prepare_call("mcp__fx__vt")
            .expect("the bound step shows vt");
        let outcome = call.call(args(json!({format!("v{old}"): "x"}))).await;
        match outcome {
            Err(mcp_harness_runtime::CallError::Stale { .. }) => {}
            Ok(result) => panic!(
                "round {round}: ran against a definition the caller did not see: {}",
                text(&result)
            ),
            Err(other) => panic!("round {round}: {other}"),
        }
    }
    runtime.shutdown().await;
}

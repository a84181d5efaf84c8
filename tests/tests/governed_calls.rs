//! The governed call path through the public API (R22–R32): step bindings and their formats,
//! the revision check racing catalog changes, exposure (budgets, cap, tool search),
//! permissions and approvals, argument validation, progress, cancellation, output budget with
//! paging, required servers — each refusal proven not to reach the server.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mcp_harness_policy::{AllowAll, Approval, ApprovalRequest, Approver};
use mcp_harness_runtime::{CallError, CallOptions, ErrorClass, Runtime, RuntimeBuilder};
use mcp_harness_runtime::{READ_OUTPUT_TOOL, SEARCH_TOOL};
use serde_json::{Value, json};

/// How many tools/call requests the fixture `server` received for each tool.
async fn calls(runtime: &Runtime, server: &str) -> Value {
    let r = runtime
        .call_tool(&format!("mcp__{server}__calls"), None)
        .await
        .expect("calls");
    serde_json::from_str(&text(&r)).expect("calls is JSON")
}

fn count(calls: &Value, tool: &str) -> u64 {
    calls.get(tool).and_then(Value::as_u64).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_freezes_the_tools_in_both_formats() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&["fx"]).await.expect("bind");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(names.contains(&"mcp__fx__echo".to_string()));
    assert!(
        names.contains(&READ_OUTPUT_TOOL.to_string()),
        "the built-in output reader is offered"
    );
    let openai = step.openai_tools();
    let echo = openai
        .iter()
        .find(|t| t["function"]["name"] == "mcp__fx__echo")
        .expect("echo");
    assert_eq!(echo["type"], "function");
    assert_eq!(
        echo["function"]["parameters"]["required"],
        json!(["message"])
    );
    let anthropic = step.anthropic_tools();
    let echo = anthropic
        .iter()
        .find(|t| t["name"] == "mcp__fx__echo")
        .expect("echo");
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );

    // A tool added after binding is not in this step; the next step has it.
    runtime
        .call_tool("mcp__fx__add_tool", args(json!({"name": "later"})))
        .await
        .expect("add");
    runtime
        .wait_for(SETTLE, |s| s.tool("mcp__fx__later").is_some())
        .await;
    let err = step
        .prepare_call("mcp__fx__later")
        .err()
        .expect("not in this step");
    assert!(matches!(err, CallError::NotInStep { .. }), "{err}");
    assert!(
        runtime
            .bind_step(&[])
            .await
            .expect("bind")
            .prepare_call("mcp__fx__later")
            .is_ok()
    );
    runtime.shutdown().await;
}

/// Calls from a binding race changes of the very tool they call, many times over. A call either
/// runs the version the binding showed, or is refused as stale without reaching the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_ever_runs_against_a_schema_the_step_did_not_show() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    runtime
        .call_tool(
            "mcp__fx__mutate_tool",
            args(json!({"name": "shifty", "version": 0})),
        )
        .await
        .expect("create");
    runtime
        .wait_for(SETTLE, |s| s.tool("mcp__fx__shifty").is_some())
        .await;
    let (mut ran, mut stale) = (0u32, 0u32);
    for version in 1..=40u64 {
        let step = runtime.bind_step(&[]).await.expect("bind");
        let shown = step
            .tools()
            .into_iter()
            .find(|t| t.name == "mcp__fx__shifty")
            .expect("shown");
        let shown_version: u64 = shown
            .tool
            .description
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("version in description");
        let call = step.prepare_call("mcp__fx__shifty").expect("prepare");
        // The server announces the next version now and runs it 300 ms later.
        let mutate = runtime.call_tool(
            "mcp__fx__mutate_tool",
            args(json!({"name": "shifty", "version": version, "apply_after_ms": 300})),
        );
        let delay = Duration::from_micros((version * 797) % 20_000);
        let attempt = async {
            tokio::time::sleep(delay).await;
            call.call(None).await
        };
        let (mutated, result) = tokio::join!(mutate, attempt);
        mutated.expect("mutate");
        match result {
            Ok(r) => {
                let executed: Value = serde_json::from_str(&text(&r)).expect("json");
                assert_eq!(
                    executed["executed_version"], shown_version,
                    "ran a version the step did not show"
                );
                ran += 1;
            }
            Err(CallError::Stale { .. }) => stale += 1,
            Err(other) => panic!("unexpected error: {other}"),
        }
        // Let the server switch before the next round.
        tokio::time::sleep(Duration::from_millis(320)).await;
    }
    assert_eq!(ran + stale, 40);
    assert!(
        stale > 0,
        "the race never produced a stale call: the test did not exercise the check"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_call_is_refused_and_never_sent() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    runtime
        .call_tool(
            "mcp__fx__mutate_tool",
            args(json!({"name": "moving", "version": 1})),
        )
        .await
        .expect("create");
    runtime
        .wait_for(SETTLE, |s| s.tool("mcp__fx__moving").is_some())
        .await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let call = step.prepare_call("mcp__fx__moving").expect("prepare");
    runtime
        .call_tool(
            "mcp__fx__mutate_tool",
            args(json!({"name": "moving", "version": 2})),
        )
        .await
        .expect("mutate");
    runtime
        .wait_for(SETTLE, |s| {
            s.tool("mcp__fx__moving")
                .is_some_and(|t| t.tool.description.as_deref() == Some("version 2 of moving"))
        })
        .await;
    let err = call.call(None).await.expect_err("stale");
    assert!(matches!(err, CallError::Stale { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Catalog);
    assert!(err.needs_rebind() && !err.retryable());
    assert_eq!(
        count(&calls(&runtime, "fx").await, "moving"),
        0,
        "a stale call never reaches the server"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposure_budgets_and_tool_search() {
    let mut cfg = config(vec![server("fx", fixture_stdio(&["--tools", "30"]))]);
    cfg.exposure = serde_json::from_value(json!({"maxTools": 10})).expect("exposure");
    let runtime = Runtime::start(cfg).expect("start");
    let s = runtime.wait_settled(SETTLE).await;
    let listed = s.catalogs["fx"].tools.len();
    let step = runtime.bind_step(&[]).await.expect("bind");
    // The cap is of everything the model sees: `read_output` is one of the ten.
    let server_tools = step.tools().iter().filter(|t| t.server.is_some()).count();
    assert_eq!(step.tools().len(), 10, "the tool cap holds");
    assert_eq!(server_tools, 9, "the harness's own tool counted first");
    assert_eq!(step.hidden().len(), listed - 9);
    assert!(
        step.hidden()
            .iter()
            .all(|h| h.reason.contains("exposure.maxTools")),
        "{:?}",
        step.hidden()
    );
    runtime.shutdown().await;

    let mut cfg = config(vec![server("fx", fixture_stdio(&["--tools", "30"]))]);
    cfg.exposure = serde_json::from_value(json!({"toolSearch": "on"})).expect("exposure");
    let runtime = Runtime::start(cfg).expect("start");
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(names.contains(&SEARCH_TOOL.to_string()));
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__fx__")),
        "tools are deferred: {names:?}"
    );
    let err = step.prepare_call("mcp__fx__echo").err().expect("deferred");
    assert!(err.to_string().contains(SEARCH_TOOL), "{err}");
    let search = step.prepare_call(SEARCH_TOOL).expect("search tool");
    let found = search
        .call(args(json!({"query": "echo"})))
        .await
        .expect("search");
    assert!(text(&found).contains("mcp__fx__echo"), "{}", text(&found));
    let echo = step
        .prepare_call("mcp__fx__echo")
        .expect("loaded by search");
    assert_eq!(
        text(
            &echo
                .call(args(json!({"message": "found"})))
                .await
                .expect("echo")
        ),
        "found"
    );
    runtime.shutdown().await;
}

struct Recording {
    answer: Approval,
    delay: Duration,
    seen: std::sync::Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Recording {
    fn approve(&self, request: ApprovalRequest) -> futures::future::BoxFuture<'static, Approval> {
        self.seen.lock().expect("lock").push(request);
        let (answer, delay) = (self.answer.clone(), self.delay);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            answer
        })
    }
}

async fn with_approver(
    answer: Approval,
    delay: Duration,
    permissions: Value,
) -> (Runtime, Arc<Recording>) {
    with_approver_waiting(answer, delay, permissions, Duration::from_millis(300)).await
}

/// [`with_approver`] with an approval timeout of `wait`.
async fn with_approver_waiting(
    answer: Approval,
    delay: Duration,
    permissions: Value,
    wait: Duration,
) -> (Runtime, Arc<Recording>) {
    let recording = Arc::new(Recording {
        answer,
        delay,
        seen: Default::default(),
    });
    let mut cfg = config(vec![server("fx", fixture_stdio(&[]))]);
    cfg.permissions = serde_json::from_value(permissions).expect("rules");
    let runtime = RuntimeBuilder::new(cfg)
        .approver(recording.clone())
        .approval_timeout(wait)
        .start()
        .expect("start");
    runtime.wait_settled(SETTLE).await;
    (runtime, recording)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_cancel_and_approval_timeout_never_send() {
    let rules =
        json!({"allow": ["mcp__fx__calls"], "ask": ["mcp__fx__echo"], "deny": ["mcp__fx__add"]});
    for (answer, delay, expect) in [
        (
            Approval::Denied {
                reason: "no".into(),
            },
            Duration::ZERO,
            "no",
        ),
        (Approval::Cancelled, Duration::ZERO, "cancelled"),
        (
            Approval::Approved,
            Duration::from_secs(5),
            "no approval within",
        ),
    ] {
        let (runtime, recording) = with_approver(answer, delay, rules.clone()).await;
        let err = runtime
            .call_tool("mcp__fx__echo", args(json!({"message": "x"})))
            .await
            .expect_err("refused");
        assert!(matches!(err, CallError::Permission { .. }), "{err}");
        assert!(err.to_string().contains(expect), "{err}");
        assert_eq!(recording.seen.lock().expect("lock").len(), 1);
        let err = runtime
            .call_tool("mcp__fx__add", args(json!({"a": 1, "b": 2})))
            .await
            .expect_err("denied");
        assert!(
            err.to_string().contains("mcp__fx__add"),
            "the reason names the rule: {err}"
        );
        assert_eq!(
            recording.seen.lock().expect("lock").len(),
            1,
            "deny rules never reach the approver"
        );
        let counts = calls(&runtime, "fx").await;
        assert_eq!(
            (count(&counts, "echo"), count(&counts, "add")),
            (0, 0),
            "refused calls were never sent"
        );
        runtime.shutdown().await;
    }
    let (runtime, recording) = with_approver(Approval::Approved, Duration::ZERO, rules).await;
    let ok = runtime
        .call_tool("mcp__fx__echo", args(json!({"message": "approved"})))
        .await
        .expect("approved");
    assert_eq!(text(&ok), "approved");
    let seen = recording.seen.lock().expect("lock").clone();
    assert_eq!(seen[0].qualified_name, "mcp__fx__echo");
    assert_eq!(seen[0].args.get("message"), Some(&json!("approved")));
    runtime.shutdown().await;
}

/// A call cancelled while its approval is asked ends then, unsent (the approver's yes would
/// come after 5 s, and the call would run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_asked_is_never_sent() {
    let rules = json!({"allow": ["mcp__fx__calls"], "ask": ["mcp__fx__echo"]});
    let (runtime, recording) = with_approver_waiting(
        Approval::Approved,
        Duration::from_secs(5),
        rules,
        Duration::from_secs(30),
    )
    .await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        ..CallOptions::default()
    };
    let call = runtime.call_tool_with("mcp__fx__echo", args(json!({"message": "x"})), options);
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    };
    let (err, ()) = tokio::join!(call, canceller);
    let err = err.expect_err("cancelled");
    assert!(matches!(err, CallError::Permission { .. }), "{err}");
    assert!(
        err.to_string().contains("while its approval was asked"),
        "{err}"
    );
    assert_eq!(recording.seen.lock().expect("lock").len(), 1);
    let counts = calls(&runtime, "fx").await;
    assert_eq!(count(&counts, "echo"), 0, "the cancelled call was sent");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_for_a_builtin_never_matches_a_server_tool() {
    // `Write` and `*` are rules for built-in (unqualified) names: they never match
    // `mcp__fx__...`, so the call falls to the default approver, which denies.
    let mut cfg = config(vec![server("fx", fixture_stdio(&[]))]);
    cfg.permissions = serde_json::from_value(json!({"allow": ["Write", "*"]})).expect("rules");
    let runtime = RuntimeBuilder::new(cfg).start().expect("start");
    runtime.wait_settled(SETTLE).await;
    let err = runtime
        .call_tool("mcp__fx__echo", args(json!({"message": "x"})))
        .await
        .expect_err("denied");
    assert!(matches!(err, CallError::Permission { .. }), "{err}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_refused_before_sending() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    for bad in [json!({}), json!({"message": 7})] {
        let err = runtime
            .call_tool("mcp__fx__echo", args(bad))
            .await
            .expect_err("invalid");
        assert!(matches!(err, CallError::InvalidArguments { .. }), "{err}");
        assert_eq!(err.class(), ErrorClass::Tool);
        assert!(err.to_string().contains("message"), "{err}");
    }
    assert_eq!(count(&calls(&runtime, "fx").await, "echo"), 0);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_caller_and_cancel_reaches_the_server() {
    let runtime = start(vec![server("fx", fixture_stdio(&[]))]);
    runtime.wait_settled(SETTLE).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        progress: Some(tx),
        ..Default::default()
    };
    let done = runtime
        .call_tool_with("mcp__fx__slow", args(json!({"ms": 450})), options)
        .await
        .expect("slow");
    assert!(text(&done).contains("slept 450 ms"));
    let mut updates = 0;
    while rx.try_recv().is_ok() {
        updates += 1;
    }
    assert!(updates >= 2, "progress notifications delivered: {updates}");

    let cancel = tokio_util::sync::CancellationToken::new();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        ..Default::default()
    };
    let call = runtime.call_tool_with("mcp__fx__slow", args(json!({"ms": 30_000})), options);
    let trigger = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    };
    let (result, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(call, trigger)
    })
    .await
    .expect("cancel ends the call promptly");
    let err = result.expect_err("cancelled");
    assert!(err.to_string().contains("notifications/cancelled"), "{err}");
    // The server got the cancel, for the request of the cancelled call and no other (the
    // notification may land just after the call returned: bounded wait).
    let mut seen = json!(null);
    for _ in 0..100 {
        let r = runtime
            .call_tool("mcp__fx__cancellations", None)
            .await
            .expect("cancellations");
        seen = serde_json::from_str(&text(&r)).expect("cancellations is JSON");
        if seen["cancelled"].as_array().is_some_and(|c| !c.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let slow = seen["slow"].as_array().cloned().unwrap_or_default();
    assert_eq!(slow.len(), 2, "two slow calls reached the server: {seen}");
    let cancelled = seen["cancelled"].as_array().cloned().unwrap_or_default();
    assert_eq!(cancelled.len(), 1, "one cancel reached the server: {seen}");
    assert_eq!(
        cancelled[0]["requestId"], slow[1],
        "the cancel names the second (cancelled) slow call, not the finished one: {seen}"
    );
    let echo = runtime
        .call_tool("mcp__fx__echo", args(json!({"message": "after"})))
        .await
        .expect("echo");
    assert_eq!(text(&echo), "after", "the connection stays usable");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_result_is_stored_and_read_back_in_pages() {
    let mut cfg = config(vec![server("fx", fixture_stdio(&[]))]);
    cfg.output =
        serde_json::from_value(json!({"budgetTokens": 1000, "pageChars": 5000})).expect("output");
    let runtime = RuntimeBuilder::new(cfg)
        .approver(Arc::new(AllowAll))
        .start()
        .expect("start");
    runtime.wait_settled(SETTLE).await;
    let step = runtime.bind_step(&[]).await.expect("bind");
    let big = step
        .prepare_call("mcp__fx__large")
        .expect("prepare")
        .call(args(json!({"bytes": 23_456})))
        .await
        .expect("large");
    let full = text(&big);
    assert_eq!(
        full.len(),
        23_456,
        "the raw result stays available to the embedder"
    );
    let handle = big.output_handle.clone().expect("stored: over the budget");
    let summary = big.normalized.text();
    assert!(
        summary.len() < 6_000,
        "the model gets a bounded summary ({} chars)",
        summary.len()
    );
    assert!(
        summary.contains(&handle) && summary.contains(READ_OUTPUT_TOOL),
        "{summary}"
    );
    let reader = step.prepare_call(READ_OUTPUT_TOOL).expect("reader");
    let mut pages = String::new();
    for page in 1..=5 {
        let r = reader
            .call(args(json!({"handle": handle, "page": page})))
            .await
            .expect("page");
        pages.push_str(&text(&r));
    }
    assert!(
        pages.contains(&full[..4000]) && pages.contains(&full[full.len() - 400..]),
        "every part is readable"
    );
    let err = reader
        .call(args(json!({"handle": "../../etc/passwd", "page": 1})))
        .await
        .expect_err("bad handle");
    // Refused as arguments that are no handle, before anything is read.
    assert!(
        matches!(err, mcp_harness_runtime::CallError::InvalidArguments { .. }),
        "{err:?}"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_servers_report_every_failure_together() {
    let mut hung = server("hung", fixture_stdio(&["--hang-at-start"]));
    hung.startup_timeout = Duration::from_millis(500);
    let runtime = start(vec![
        server("ok", fixture_stdio(&[])),
        hung,
        server("dead", fixture_stdio(&["--exit-at-start", "4"])),
    ]);
    let err = runtime
        .bind_step(&["ok", "hung", "dead", "ghost"])
        .await
        .err()
        .expect("required servers failed");
    let CallError::RequiredServers { failures } = &err else {
        panic!("{err}")
    };
    let names: Vec<&str> = failures.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["hung", "dead", "ghost"]);
    assert!(
        err.to_string().contains("startupTimeoutSec") && err.to_string().contains("not configured"),
        "{err}"
    );
    assert!(runtime.bind_step(&["ok"]).await.is_ok());
    runtime.shutdown().await;
}

//! The harness against our rmcp fixture server over every transport of the spine: stdio,
//! Streamable HTTP and in-process. The same checks run on each: the listing of every kind
//! (paginated), calls, prompts, resources, and a list_changed-driven new revision.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::{CallError, ErrorClass, Runtime};
use serde_json::json;

/// Everything a user does with one connected fixture named `name`.
async fn exercise(runtime: &Runtime, name: &str) {
    let snapshot = runtime.wait_settled(SETTLE).await;
    let status = &snapshot.servers[name];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    assert!(status.protocol_version.is_some());
    let q = |tool: &str| format!("mcp__{name}__{tool}");

    // Listing: static tools, the 25 generated ones (over several pages), prompts, resources.
    let catalog = &snapshot.catalogs[name];
    for tool in [
        "echo", "add", "slow", "large", "fail", "add_tool", "tool_0", "tool_24",
    ] {
        assert!(
            snapshot.tool(&q(tool)).is_some(),
            "{tool} missing: {:?}",
            catalog.names(mcp_harness_catalog::Kind::Tools)
        );
    }
    assert_eq!(
        catalog
            .tools
            .iter()
            .filter(|t| t.raw_name.starts_with("tool_"))
            .count(),
        25
    );
    assert!(catalog.prompts.iter().any(|p| p.raw_name == "greeting"));
    assert!(
        catalog
            .resources
            .iter()
            .any(|r| r.resource.uri == "fixture://static/readme" && r.server == name)
    );
    assert!(
        catalog
            .templates
            .iter()
            .any(|t| t.template.uri_template == "fixture://items/{id}")
    );

    // Calls: the raw name goes on the wire; results come back whole.
    let echo = runtime
        .call_tool(&q("echo"), args(json!({"message": "hi there"})))
        .await
        .expect("echo");
    assert_eq!(text(&echo), "hi there");
    assert_eq!(echo.revision, snapshot.revision);
    let sum = runtime
        .call_tool(&q("add"), args(json!({"a": 2, "b": 3})))
        .await
        .expect("add");
    assert_eq!(
        sum.result
            .structured_content
            .as_ref()
            .and_then(|v| v["sum"].as_f64()),
        Some(5.0)
    );
    assert_eq!(text(&sum), "5");
    let failed = runtime
        .call_tool(&q("fail"), None)
        .await
        .expect("a tool error is a result");
    assert!(failed.is_error());
    let big = runtime
        .call_tool(&q("large"), args(json!({"bytes": 300_000})))
        .await
        .expect("large");
    assert_eq!(text(&big).len(), 300_000);

    // Unknown tools are refused without touching any server.
    let err = runtime
        .call_tool(&q("nope"), None)
        .await
        .expect_err("unknown tool");
    assert!(matches!(err, CallError::UnknownTool { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Catalog);

    // Prompts and resources through the runtime.
    let prompt = runtime
        .get_prompt(name, "greeting", args(json!({"name": "Ada"})))
        .await
        .expect("prompt");
    assert!(
        serde_json::to_string(&prompt.messages)
            .unwrap_or_default()
            .contains("Hello, Ada!")
    );
    let item = runtime
        .read_resource(name, "fixture://items/42")
        .await
        .expect("read");
    assert!(
        serde_json::to_string(&item.contents)
            .unwrap_or_default()
            .contains("item 42")
    );

    // list_changed: a tool added at run time appears in a new revision; removing it takes it away.
    let before = runtime.snapshot().revision;
    runtime
        .call_tool(&q("add_tool"), args(json!({"name": "late_tool"})))
        .await
        .expect("add_tool");
    let after = runtime
        .wait_for(SETTLE, |s| s.tool(&q("late_tool")).is_some())
        .await;
    assert!(
        after.tool(&q("late_tool")).is_some(),
        "late_tool never appeared"
    );
    assert!(after.revision > before);
    let change = after
        .changes
        .iter()
        .find(|c| c.added.contains(&q("late_tool")))
        .expect("change recorded");
    assert_eq!(change.cause, "notifications/tools/list_changed");
    let called = runtime
        .call_tool(&q("late_tool"), args(json!({"x": 1})))
        .await
        .expect("call late tool");
    assert!(text(&called).contains("\"x\""));
    runtime
        .call_tool(&q("remove_tool"), args(json!({"name": "late_tool"})))
        .await
        .expect("remove_tool");
    let gone = runtime
        .wait_for(SETTLE, |s| s.tool(&q("late_tool")).is_none())
        .await;
    assert!(gone.tool(&q("late_tool")).is_none());

    // Prompts and resources changes are followed too.
    runtime
        .call_tool(&q("add_prompt"), args(json!({"name": "late_prompt"})))
        .await
        .expect("add_prompt");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.catalogs
                .get(name)
                .is_some_and(|c| c.prompts.iter().any(|p| p.raw_name == "late_prompt"))
        })
        .await;
    assert!(
        s.catalogs[name]
            .prompts
            .iter()
            .any(|p| p.raw_name == "late_prompt")
    );
    runtime
        .call_tool(
            &q("add_resource"),
            args(json!({"uri": "fixture://late", "text": "late"})),
        )
        .await
        .expect("add_resource");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.catalogs.get(name).is_some_and(|c| {
                c.resources
                    .iter()
                    .any(|r| r.resource.uri == "fixture://late")
            })
        })
        .await;
    assert!(
        s.catalogs[name]
            .resources
            .iter()
            .any(|r| r.resource.uri == "fixture://late")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_fixture() {
    let runtime = start(vec![server(
        "fx",
        fixture_stdio(&["--tools", "25", "--page-size", "7"]),
    )]);
    exercise(&runtime, "fx").await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_fixture() {
    let (url, server_task) = fixture_http(FixtureOptions {
        tools: 25,
        page_size: Some(7),
        ..Default::default()
    })
    .await;
    let runtime = start(vec![server("web", http(&url))]);
    exercise(&runtime, "web").await;
    assert_eq!(runtime.snapshot().servers["web"].transport, "http");
    runtime.shutdown().await;
    server_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_fixture() {
    let runtime = start_in_process(
        "inproc",
        FixtureOptions {
            tools: 25,
            page_size: Some(7),
            ..Default::default()
        },
    );
    exercise(&runtime, "inproc").await;
    assert_eq!(runtime.snapshot().servers["inproc"].transport, "in-process");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_timeout_is_classified_and_names_the_config_key() {
    let mut cfg = server("slowpoke", fixture_stdio(&[]));
    cfg.tool_timeout = Duration::from_millis(300);
    let runtime = start(vec![cfg]);
    runtime.wait_settled(SETTLE).await;
    let err = runtime
        .call_tool("mcp__slowpoke__slow", args(json!({"ms": 5000})))
        .await
        .expect_err("times out");
    assert!(matches!(err, CallError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("toolTimeoutSec"), "{err}");
    assert_eq!(err.class(), ErrorClass::Transport);
    assert!(!err.retryable(), "a timed-out call may have had its effect");
    // The connection is still usable afterwards.
    let echo = runtime
        .call_tool(
            "mcp__slowpoke__echo",
            args(json!({"message": "still here"})),
        )
        .await
        .expect("echo");
    assert_eq!(text(&echo), "still here");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_and_exclude_lists_hide_tools_with_reasons() {
    let mut cfg = server("filtered", fixture_stdio(&["--tools", "3"]));
    cfg.include_tools = Some(vec!["echo".into(), "tool_0".into(), "tool_1".into()]);
    cfg.exclude_tools = vec!["tool_1".into()];
    let runtime = start(vec![cfg]);
    let s = runtime.wait_settled(SETTLE).await;
    let shown: Vec<&str> = s.tools().map(|t| t.raw_name.as_str()).collect();
    assert_eq!(shown, vec!["echo", "tool_0"]);
    let hidden = &s.catalogs["filtered"].hidden;
    assert!(
        hidden
            .iter()
            .any(|h| h.raw_name == "tool_1" && h.reason.contains("excludeTools"))
    );
    assert!(
        hidden
            .iter()
            .any(|h| h.raw_name == "add" && h.reason.contains("includeTools"))
    );
    let err = runtime
        .call_tool("mcp__filtered__tool_1", None)
        .await
        .expect_err("hidden tools cannot be called");
    assert!(matches!(err, CallError::UnknownTool { .. }));
    runtime.shutdown().await;
}

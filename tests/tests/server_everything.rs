//! The harness against the MCP reference server `@modelcontextprotocol/server-everything`
//! (installed by `.ci/install-peers.sh`), over stdio and Streamable HTTP: every kind listed,
//! real tool calls, and a list_changed-driven new revision.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_runtime::Runtime;
use rmcp::model::ContentBlock;
use serde_json::json;

async fn exercise(runtime: &Runtime, name: &str) {
    let s = settled_connected(runtime, name).await;
    let q = |tool: &str| mcp_harness_catalog::qualify(name, tool);
    for tool in [
        "echo",
        "get-sum",
        "get-structured-content",
        "get-tiny-image",
        "gzip-file-as-resource",
    ] {
        assert!(s.tool(&q(tool)).is_some(), "{tool} not listed");
    }
    let catalog = &s.catalogs[name];
    assert!(!catalog.prompts.is_empty(), "prompts listed");
    assert!(!catalog.resources.is_empty(), "resources listed");
    assert!(!catalog.templates.is_empty(), "resource templates listed");
    assert!(catalog.resources.iter().all(|r| r.server == name));

    let echo = runtime
        .call_tool(&q("echo"), args(json!({"message": "hello everything"})))
        .await
        .expect("echo");
    assert!(text(&echo).contains("hello everything"), "{}", text(&echo));
    let sum = runtime
        .call_tool(&q("get-sum"), args(json!({"a": 2, "b": 40})))
        .await
        .expect("get-sum");
    assert!(text(&sum).contains("42"), "{}", text(&sum));
    let weather = runtime
        .call_tool(
            &q("get-structured-content"),
            args(json!({"location": "Chicago"})),
        )
        .await
        .expect("get-structured-content");
    let structured = weather
        .result
        .structured_content
        .clone()
        .expect("structured content");
    assert!(
        structured.get("temperature").is_some_and(|t| t.is_number()),
        "{structured}"
    );
    assert!(
        !weather.result.content.is_empty(),
        "content is kept beside structuredContent"
    );
    let image = runtime
        .call_tool(&q("get-tiny-image"), None)
        .await
        .expect("get-tiny-image");
    assert!(
        image.result.content.iter().any(|c| matches!(c, ContentBlock::Image(i) if i.mime_type == "image/png" && !i.data.is_empty())),
        "an image block"
    );

    // A resource created at run time arrives through resources/list_changed in a new revision.
    resource_made_at_run_time_appears(runtime, name, "harness-test.txt.gz").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let runtime = start(vec![server(
        "everything",
        stdio(&node(), &[&server_everything(), "stdio"]),
    )]);
    exercise(&runtime, "everything").await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let (mut child, port) = spawn_server_everything("streamableHttp").await;
    let runtime = start(vec![server(
        "everything",
        http(&format!("http://127.0.0.1:{port}/mcp")),
    )]);
    exercise(&runtime, "everything").await;
    runtime.shutdown().await;
    let _ = child.kill().await;
}

/// Resource subscriptions deliver `notifications/resources/updated` (server-everything sends
/// them every 5 s for subscribed resources once `toggle-subscriber-updates` is on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_resource_subscription_delivers_updates() {
    let runtime = start(vec![server(
        "everything",
        stdio(&node(), &[&server_everything(), "stdio"]),
    )]);
    let s = runtime.wait_settled(SETTLE).await;
    let uri = s.catalogs["everything"]
        .resources
        .first()
        .expect("a resource")
        .resource
        .uri
        .clone();
    let mut sub = runtime
        .subscribe_resource("everything", &uri)
        .await
        .expect("subscribe");
    runtime
        .call_tool(
            &mcp_harness_catalog::qualify("everything", "toggle-subscriber-updates"),
            None,
        )
        .await
        .expect("toggle updates");
    let update = tokio::time::timeout(Duration::from_secs(30), sub.next())
        .await
        .expect("an update within 30 s")
        .expect("runtime alive");
    assert_eq!(update.uri, uri);
    runtime.shutdown().await;
}

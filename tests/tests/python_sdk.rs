//! The harness against a server built with the official Python MCP SDK (`mcp` on PyPI, its
//! `MCPServer`, pinned and installed into `target/peers/py` by `.ci/install-peers.sh`): the
//! server is `tests/python/sdk_server.py`. Over stdio and over Streamable HTTP it connects and
//! its tools, prompt and resource are listed under qualified names; a structured result matches
//! the tool's `outputSchema` with no warning; a tool that raises comes back as a tool error, not
//! a transport error. Over stdio, besides: every progress notification reaches the caller in
//! order, the prompt and the resource can be used, and a tool the server registers at run time
//! (announced with `notifications/tools/list_changed`) appears in a later snapshot. Over
//! Streamable HTTP, besides: progress sent right before the result still reaches the caller, up
//! to the last step and increasing, in 100 calls out of 100. After shutdown no process the test
//! started is left.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::{Snapshot, qualify};
use mcp_harness_runtime::{CallOptions, Runtime};
use rmcp::model::{ContentBlock, ResourceContents, Role};
use serde_json::json;

/// The server's name in the tests' configs.
const PY: &str = "py";

/// The Python of the peers' venv; fails (never skips) when the peers are not installed.
fn python() -> String {
    let python = peers_dir().join("py/bin/python");
    assert!(
        python.is_file(),
        "the Python MCP SDK is not installed ({} is missing): run `.ci/install-peers.sh target/peers`",
        python.display()
    );
    python.to_string_lossy().into_owned()
}

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("python/sdk_server.py")
        .to_string_lossy()
        .into_owned()
}

/// A text unique to one test, put in the server's command line to find its processes.
fn marker(test: &str) -> String {
    format!("py-sdk-{test}-{}", uuid::Uuid::new_v4())
}

/// A runtime with the SDK server over stdio as [`PY`], settled and connected.
async fn start_stdio(marker: &str) -> Runtime {
    let runtime = start(vec![server(
        PY,
        stdio(&python(), &[&script(), "--marker", marker]),
    )]);
    settled_connected(&runtime, PY).await;
    runtime
}

/// Shuts `runtime` down and checks that no process with `marker` is left.
async fn shut_down(runtime: Runtime, marker: &str) {
    runtime.shutdown().await;
    assert_eq!(
        wait_gone(marker).await,
        Vec::<u32>::new(),
        "processes left after shutdown"
    );
}

fn q(tool: &str) -> String {
    qualify(PY, tool)
}

/// What both transports must do: listing, a structured result, a tool error.
async fn listing_add_and_fail(runtime: &Runtime) {
    let s = runtime.snapshot();
    let status = &s.servers[PY];
    assert_eq!(
        status.server_name.as_deref(),
        Some("py-sdk-test"),
        "{status:?}"
    );
    for tool in ["add", "fail", "slow_progress", "add_tool"] {
        let entry = s
            .tool(&q(tool))
            .unwrap_or_else(|| panic!("{tool} not listed"));
        assert_eq!(entry.qualified_name, format!("mcp__py__{tool}"));
        assert_eq!(entry.raw_name, tool);
    }
    let catalog = &s.catalogs[PY];
    assert!(
        catalog
            .prompts
            .iter()
            .any(|p| p.raw_name == "greet" && p.qualified_name == "mcp__py__greet"),
        "{:?}",
        catalog.prompts
    );
    let readme = catalog
        .resources
        .iter()
        .find(|r| r.resource.uri == "py://readme")
        .expect("py://readme listed");
    assert_eq!(readme.resource.mime_type.as_deref(), Some("text/plain"));

    // `add` returns an int: the SDK wraps it as {"result": int} and declares that as outputSchema.
    let schema = s
        .tool(&q("add"))
        .and_then(|t| t.tool.output_schema.clone())
        .expect("add has an outputSchema");
    assert_eq!(
        schema["properties"]["result"]["type"], "integer",
        "{schema:?}"
    );
    let sum = runtime
        .call_tool(&q("add"), args(json!({"a": 2, "b": 3})))
        .await
        .expect("add");
    assert!(!sum.is_error(), "{:?}", sum.result);
    assert_eq!(text(&sum), "5");
    assert_eq!(sum.result.structured_content, Some(json!({"result": 5})));
    assert_eq!(
        sum.normalized.structured_content,
        Some(json!({"result": 5}))
    );
    assert!(
        sum.normalized.warnings.is_empty(),
        "structuredContent checked against the outputSchema: {:?}",
        sum.normalized.warnings
    );

    // A tool that raises is a tool error (a result with isError), not a failed call.
    let failed = runtime
        .call_tool(&q("fail"), None)
        .await
        .expect("a tool error is a result, not a transport error");
    assert!(failed.is_error(), "{:?}", failed.result);
    assert!(
        failed
            .normalized
            .error_text()
            .contains("fail was asked to fail"),
        "{}",
        failed.normalized.error_text()
    );
    assert!(
        failed.normalized.warnings.is_empty(),
        "an error result is not checked against the outputSchema: {:?}",
        failed.normalized.warnings
    );

    // The connection stays usable after the tool error.
    let again = runtime
        .call_tool(&q("add"), args(json!({"a": -7, "b": 7})))
        .await
        .expect("add after fail");
    assert_eq!(again.result.structured_content, Some(json!({"result": 0})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_lists_and_calls_tools() {
    let marker = marker("stdio-basics");
    let runtime = start_stdio(&marker).await;
    assert_eq!(
        processes_with(&marker).len(),
        1,
        "one Python process for the server"
    );
    listing_add_and_fail(&runtime).await;
    shut_down(runtime, &marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_every_progress_notification_reaches_the_caller_in_order() {
    const STEPS: usize = 8;
    let marker = marker("stdio-progress");
    let runtime = start_stdio(&marker).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        progress: Some(tx),
        ..Default::default()
    };
    let done = runtime
        .call_tool_with(&q("slow_progress"), args(json!({"steps": STEPS})), options)
        .await
        .expect("slow_progress");
    assert!(!done.is_error(), "{:?}", done.result);
    assert_eq!(text(&done), "done");

    // Progress is forwarded to the caller's channel on its own task: allow it to drain.
    let mut got = Vec::new();
    let collect = async {
        while got.len() < STEPS {
            match rx.recv().await {
                Some(p) => got.push(p),
                None => break,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), collect).await;
    let seen: Vec<(f64, Option<f64>, Option<String>)> = got
        .iter()
        .map(|p| (p.progress, p.total, p.message.clone()))
        .collect();
    let expected: Vec<(f64, Option<f64>, Option<String>)> = (1..=STEPS)
        .map(|i| (i as f64, Some(STEPS as f64), Some(format!("step {i}"))))
        .collect();
    assert_eq!(seen, expected, "every progress notification, in order");
    assert!(
        rx.try_recv().is_err(),
        "no progress beyond the {STEPS} sent"
    );
    shut_down(runtime, &marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_the_prompt_and_the_resource_can_be_used() {
    let marker = marker("stdio-prompt");
    let runtime = start_stdio(&marker).await;

    let prompt = runtime
        .get_prompt(PY, "greet", args(json!({"name": "Ada"})))
        .await
        .expect("prompts/get");
    assert_eq!(prompt.messages.len(), 1, "{:?}", prompt.messages);
    let message = &prompt.messages[0];
    assert_eq!(message.role, Role::User);
    match &message.content {
        ContentBlock::Text(t) => {
            assert_eq!(t.text, "Hello, Ada! Greetings from the Python SDK.")
        }
        other => panic!("a text message, got {other:?}"),
    }
    // The prompt is also a command, fetched by its qualified name.
    let command = runtime
        .run_command("mcp__py__greet", args(json!({"name": "Grace"})))
        .await
        .expect("command");
    assert!(
        serde_json::to_string(&command.messages)
            .unwrap_or_default()
            .contains("Hello, Grace!"),
        "{:?}",
        command.messages
    );

    let read = runtime
        .read_resource(PY, "py://readme")
        .await
        .expect("resources/read");
    assert_eq!(read.contents.len(), 1, "{:?}", read.contents);
    match &read.contents[0] {
        ResourceContents::TextResourceContents {
            uri,
            mime_type,
            text,
            ..
        } => {
            assert_eq!(uri, "py://readme");
            assert_eq!(mime_type.as_deref(), Some("text/plain"));
            assert_eq!(
                text,
                "This server is built with the official Python MCP SDK."
            );
        }
        other => panic!("text contents, got {other:?}"),
    }
    shut_down(runtime, &marker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_tool_registered_at_run_time_appears_in_a_later_snapshot() {
    let marker = marker("stdio-list-changed");
    let runtime = start_stdio(&marker).await;
    let before = runtime.snapshot().revision;
    assert!(runtime.snapshot().tool(&q("added_1")).is_none());

    let made = runtime
        .call_tool(&q("add_tool"), None)
        .await
        .expect("add_tool");
    assert!(!made.is_error(), "{:?}", made.result);
    assert_eq!(text(&made), "added_1");
    let has = |s: &Snapshot| s.tool(&q("added_1")).is_some();
    let after = runtime.wait_for(SETTLE, has).await;
    assert!(has(&after), "added_1 never appeared");
    assert!(after.revision > before);
    let change = after
        .changes
        .iter()
        .find(|c| c.added.contains(&q("added_1")))
        .expect("the change is recorded");
    assert_eq!(change.cause, "notifications/tools/list_changed");

    let ran = runtime
        .call_tool(&q("added_1"), None)
        .await
        .expect("call added_1");
    assert!(!ran.is_error(), "{:?}", ran.result);
    assert_eq!(text(&ran), "added_1 ran");
    shut_down(runtime, &marker).await;
}

/// Over Streamable HTTP the last progress notification is sent just before the result, and
/// rmcp may handle it just after (each notification on a task of its own): every call must still
/// deliver progress up to the last step, increasing, and the progress stream must end.
async fn progress_reaches_the_end(runtime: &Runtime) {
    const STEPS: usize = 3;
    // Back to back (no delay between the reports and the result), where the race is likeliest.
    for call in 0..100 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let options = CallOptions {
            progress: Some(tx),
            ..Default::default()
        };
        let done = runtime
            .call_tool_with(
                &q("slow_progress"),
                args(json!({"steps": STEPS, "delay_ms": 0})),
                options,
            )
            .await
            .expect("slow_progress");
        assert_eq!(text(&done), "done");
        let mut got = Vec::new();
        let collect = async {
            while let Some(p) = rx.recv().await {
                got.push(p.progress);
            }
        };
        tokio::time::timeout(Duration::from_secs(10), collect)
            .await
            .expect("the progress stream ends after the call");
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "call {call}: increasing progress, got {got:?}"
        );
        assert_eq!(
            got.last().copied(),
            Some(STEPS as f64),
            "call {call}: progress up to the last step, got {got:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_lists_and_calls_tools() {
    let marker = marker("http");
    let port = free_port();
    let mut child = tokio::process::Command::new(python())
        .args([
            script().as_str(),
            "--transport",
            "streamable-http",
            "--port",
            &port.to_string(),
            "--marker",
            &marker,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the SDK server");
    wait_serving(port, "/mcp").await;

    let runtime = start(vec![server(
        PY,
        http(&format!("http://127.0.0.1:{port}/mcp")),
    )]);
    settled_connected(&runtime, PY).await;
    listing_add_and_fail(&runtime).await;
    progress_reaches_the_end(&runtime).await;
    runtime.shutdown().await;

    // The server is our child, not the runtime's: still there until we end it.
    assert!(
        child.try_wait().expect("child status").is_none(),
        "the SDK server exited on its own"
    );
    child.kill().await.expect("kill the SDK server");
    assert_eq!(
        wait_gone(&marker).await,
        Vec::<u32>::new(),
        "processes left after the test"
    );
}

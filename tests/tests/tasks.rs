//! Task-backed tool calls (MCP Tasks extension, SEP-2663) through the public runtime API:
//! `tools/call` answered with a task is polled with `tasks/get` to its result, each status
//! change reaches `CallOptions::task_status`, progress of the original request keeps reaching
//! `CallOptions::progress`, and the caller's cancel token or the call's timeout sends
//! `tasks/cancel`.
//!
//! The task server is the fixture's [`TaskServer`] (rmcp's own `TaskManager`), run in-process.
//! It honours SEP-2663: it runs a call as a task only for a client that declared the
//! `io.modelcontextprotocol/tasks` extension, and refuses otherwise. In-task input is answered
//! only through the embedder's callbacks with `tasks/update`; without callbacks the task is
//! cancelled.
//!
//! `@modelcontextprotocol/server-everything`'s `simulate-research-query` speaks the older
//! SEP-1686 task protocol of MCP 2025-11-25 (a `task` parameter on `tools/call`,
//! `tasks/result`), which the harness speaks beside SEP-2663 (see `task_augmented.rs`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use mcp_harness_catalog::qualify;
use mcp_harness_fixture::{EXPLODE_MESSAGE, QUEUED, RESEARCH_STAGES, TaskServer};
use mcp_harness_runtime::TaskUpdate;
use mcp_harness_runtime::transport::{CallbackFuture, ClientCallbacks, Supported};
use mcp_harness_runtime::{CallError, CallOptions, Runtime, RuntimeBuilder, TransportConfig};
use rmcp::ErrorData;
use rmcp::model::{ElicitRequestParams, ElicitResult, TaskStatus};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A runtime with the fixture's task server in-process as `tasks`, and `callbacks` if any.
async fn start_tasks_with(callbacks: Option<Arc<dyn ClientCallbacks>>) -> (Runtime, TaskServer) {
    let server = TaskServer::default();
    let serving = server.clone();
    let mut builder = RuntimeBuilder::new(config(Vec::new())).in_process(
        "tasks",
        Arc::new(move |stream| serving.serve_in_process(stream)),
    );
    if let Some(callbacks) = callbacks {
        builder = builder.callbacks(callbacks);
    }
    let runtime = builder.start().expect("runtime starts");
    let s = runtime.wait_settled(SETTLE).await;
    assert!(s.tool(&qualify("tasks", "research")).is_some(), "listed");
    (runtime, server)
}

/// A runtime with the fixture's task server in-process as `tasks`.
async fn start_tasks() -> (Runtime, TaskServer) {
    start_tasks_with(None).await
}

fn drain<T>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> Vec<T> {
    let mut all = Vec::new();
    while let Ok(x) = rx.try_recv() {
        all.push(x);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_call_completes_with_status_changes_and_progress() {
    let (runtime, server) = start_tasks().await;
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        task_status: Some(status_tx),
        progress: Some(progress_tx),
        ..Default::default()
    };
    let done = runtime
        .call_tool_with(&qualify("tasks", "research"), args(json!({})), options)
        .await
        .expect("the task's result");
    assert!(
        text(&done).contains("Research Report"),
        "the result embedded in the completed task: {}",
        text(&done)
    );
    assert!(!done.is_error());

    let updates: Vec<TaskUpdate> = drain(&mut status_rx);
    assert!(
        updates
            .iter()
            .all(|u| u.task_id == updates[0].task_id && !u.task_id.is_empty()),
        "{updates:?}"
    );
    assert_eq!(updates[0].status, TaskStatus::Working, "{updates:?}");
    assert_eq!(updates[0].message.as_deref(), Some(QUEUED), "{updates:?}");
    let messages: Vec<_> = updates
        .iter()
        .filter_map(|u| u.message.as_deref())
        .collect();
    for stage in RESEARCH_STAGES {
        assert!(messages.contains(&stage), "status messages: {updates:?}");
    }
    assert_eq!(
        updates.last().map(|u| u.status),
        Some(TaskStatus::Completed)
    );
    for pair in updates.windows(2) {
        assert_ne!(pair[0], pair[1], "only changes are reported: {updates:?}");
    }
    let progress = drain(&mut progress_rx);
    assert!(
        progress
            .iter()
            .any(|p| p.message.as_deref() == Some("Synthesizing findings")),
        "progress of the original request while the task ran: {progress:?}"
    );
    assert!(
        server.cancelled().is_empty(),
        "a completed task is not cancelled"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_timeout_send_tasks_cancel_and_failures_are_classified() {
    let (runtime, server) = start_tasks().await;
    let stuck = qualify("tasks", "stuck");

    let cancel = CancellationToken::new();
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        task_status: Some(status_tx),
        ..Default::default()
    };
    let trigger = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    };
    let (result, ()) = tokio::join!(runtime.call_tool_with(&stuck, None, options), trigger);
    let e = result.expect_err("cancelled by the caller");
    assert!(
        matches!(&e, CallError::Transport { message, .. } if message.contains("tasks/cancel")),
        "{e}"
    );
    let id = drain(&mut status_rx)
        .first()
        .map(|u| u.task_id.clone())
        .expect("the task was reported");
    assert_eq!(server.cancelled(), vec![id.clone()], "the server was told");

    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        timeout: Some(Duration::from_millis(500)),
        task_status: Some(status_tx),
        ..Default::default()
    };
    let e = runtime
        .call_tool_with(&stuck, None, options)
        .await
        .expect_err("timed out");
    assert!(matches!(e, CallError::Timeout { .. }), "{e}");
    let updates = drain(&mut status_rx);
    let timed_out = updates
        .first()
        .map(|u| u.task_id.clone())
        .expect("the task was reported");
    assert!(
        updates.iter().all(|u| u.status == TaskStatus::Working),
        "never terminal on the client's side: {updates:?}"
    );
    assert_eq!(
        server.cancelled(),
        vec![id, timed_out],
        "the timeout cancels the task"
    );

    let e = runtime
        .call_tool_with(&qualify("tasks", "explode"), None, CallOptions::default())
        .await
        .expect_err("failed");
    assert!(
        matches!(&e, CallError::Protocol { message, .. } if message.contains(EXPLODE_MESSAGE)),
        "{e}"
    );
    assert!(!e.retryable());

    // A task the server cancelled itself is a protocol error too.
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        task_status: Some(status_tx),
        ..Default::default()
    };
    let e = runtime
        .call_tool_with(&qualify("tasks", "give-up"), None, options)
        .await
        .expect_err("cancelled by the server");
    assert!(
        matches!(&e, CallError::Protocol { message, .. } if message.contains("cancelled")),
        "{e}"
    );
    assert_eq!(
        drain(&mut status_rx).last().map(|u| u.status),
        Some(TaskStatus::Cancelled)
    );
    assert_eq!(
        server.cancelled().len(),
        2,
        "terminal tasks (failed, cancelled by the server) are not cancelled"
    );
    runtime.shutdown().await;
}

/// Answers the task's question (`pick`) with "blue".
struct Picker;

impl ClientCallbacks for Picker {
    fn supports(&self) -> Supported {
        Supported {
            elicitation_form: true,
            ..Supported::default()
        }
    }

    fn elicit(&self, _: &str, _: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        Box::pin(async {
            serde_json::from_value(json!({"action": "accept", "content": {"pick": "blue"}}))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_task_input_is_answered_through_the_callbacks_and_never_without_them() {
    let (runtime, server) = start_tasks_with(Some(Arc::new(Picker))).await;
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        task_status: Some(status_tx),
        ..Default::default()
    };
    let done = runtime
        .call_tool_with(&qualify("tasks", "ask"), None, options)
        .await
        .expect("the task's result");
    assert_eq!(text(&done), "picked blue");
    let updates = drain(&mut status_rx);
    assert!(
        updates
            .iter()
            .any(|u| u.status == TaskStatus::InputRequired),
        "{updates:?}"
    );
    assert!(server.cancelled().is_empty());
    runtime.shutdown().await;

    // Without callbacks nothing is answered on the user's behalf: the task is cancelled.
    let (runtime, server) = start_tasks().await;
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        task_status: Some(status_tx),
        ..Default::default()
    };
    let e = runtime
        .call_tool_with(&qualify("tasks", "ask"), None, options)
        .await
        .expect_err("no one to ask");
    assert!(
        matches!(&e, CallError::Protocol { message, .. } if message.contains("pick")),
        "{e}"
    );
    let id = drain(&mut status_rx)
        .first()
        .map(|u| u.task_id.clone())
        .expect("the task was reported");
    assert_eq!(server.cancelled(), vec![id]);
    runtime.shutdown().await;
}

/// Answers the research query's clarification with "historical", counting the questions.
#[derive(Default)]
struct Clarifier {
    asked: Mutex<Vec<String>>,
}

impl ClientCallbacks for Clarifier {
    fn supports(&self) -> Supported {
        Supported {
            elicitation_form: true,
            ..Default::default()
        }
    }

    fn elicit(&self, _server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            other => format!("{other:?}"),
        };
        self.asked.lock().unwrap().push(message);
        Box::pin(async {
            serde_json::from_value(
                json!({"action": "accept", "content": {"interpretation": "historical"}}),
            )
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
        })
    }
}

/// server-everything 2026.8.31 (TypeScript SDK 1.32.2) speaks SEP-1686 tasks: the tool is
/// listed with `execution.taskSupport: "required"` on a server declaring
/// `tasks.requests.tools.call`, so the harness sends the call with a `task`, follows the task
/// with `tasks/get` (status messages per research stage) and fetches the report with
/// `tasks/result`.
async fn research(transport: TransportConfig, ambiguous: bool) {
    let clarifier = Arc::new(Clarifier::default());
    let runtime = RuntimeBuilder::new(config(vec![server("everything", transport)]))
        .callbacks(clarifier.clone())
        .start()
        .expect("start");
    let tool = qualify("everything", "simulate-research-query");
    let s = runtime.wait_for(SETTLE, |s| s.tool(&tool).is_some()).await;
    assert!(s.tool(&tool).is_some(), "listed after initialization");
    let (status_tx, mut status_rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        task_status: Some(status_tx),
        ..Default::default()
    };
    let answer = runtime
        .call_tool_with(
            &tool,
            args(json!({"topic": "tasks", "ambiguous": ambiguous})),
            options,
        )
        .await
        .expect("the research report");
    let report = text(&answer);
    assert!(!answer.is_error(), "{report}");
    assert!(report.contains("# Research Report: tasks"), "{report}");
    assert!(report.contains("Stage 4: Generating report"), "{report}");

    let updates: Vec<TaskUpdate> = drain(&mut status_rx);
    assert!(!updates.is_empty(), "status reported");
    assert!(
        updates
            .iter()
            .all(|u| u.task_id == updates[0].task_id && !u.task_id.is_empty()),
        "one task: {updates:?}"
    );
    assert!(
        updates
            .iter()
            .any(|u| u.message.as_deref().is_some_and(|m| m.ends_with("..."))),
        "the stages' status messages arrive while it runs: {updates:?}"
    );
    let asked = clarifier.asked.lock().unwrap().clone();
    if ambiguous {
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].contains("multiple interpretations"), "{asked:?}");
        assert!(report.contains("Clarification**: historical"), "{report}");
    } else {
        assert!(asked.is_empty(), "{asked:?}");
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_research_query_runs_as_a_sep_1686_task() {
    research(stdio(&node(), &[&server_everything(), "stdio"]), false).await;
}

/// The task asks for clarification (status `input_required`); the elicitation arrives while
/// the harness waits on `tasks/result` and is answered through the embedder's callbacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_research_query_asks_for_clarification_inside_the_task() {
    research(stdio(&node(), &[&server_everything(), "stdio"]), true).await;
}

/// The same over Streamable HTTP (responses as SSE streams, which the harness reads raw) and
/// over the legacy HTTP+SSE transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_research_query_as_a_task_over_http_and_legacy_sse() {
    let (mut child, port) = spawn_server_everything("streamableHttp").await;
    research(http(&format!("http://127.0.0.1:{port}/mcp")), true).await;
    let _ = child.kill().await;
    let (mut child, port) = spawn_server_everything("sse").await;
    research(sse(&format!("http://127.0.0.1:{port}/sse")), false).await;
    let _ = child.kill().await;
}

/// A task that outlives the call's timeout is cancelled with `tasks/cancel` and the call
/// fails as a timeout — not retryable, since the task may have done its work — not as a tool
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sep_1686_task_past_the_timeout_is_cancelled() {
    let runtime = start(vec![server(
        "everything",
        stdio(&node(), &[&server_everything(), "stdio"]),
    )]);
    let tool = qualify("everything", "simulate-research-query");
    runtime.wait_for(SETTLE, |s| s.tool(&tool).is_some()).await;
    let options = CallOptions {
        timeout: Some(Duration::from_millis(1500)),
        ..Default::default()
    };
    let e = runtime
        .call_tool_with(&tool, args(json!({"topic": "slow"})), options)
        .await
        .expect_err("4 stages of 1 s do not fit in 1.5 s");
    assert!(matches!(e, CallError::Timeout { .. }), "{e}");
    assert!(!e.retryable(), "{e}");
    runtime.shutdown().await;
}

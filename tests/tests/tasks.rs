//! Task-backed tool calls (MCP Tasks extension, SEP-2663) through the public runtime API:
//! `tools/call` answered with a task is polled with `tasks/get` to its result, each status
//! change reaches `CallOptions::task_status`, progress of the original request keeps reaching
//! `CallOptions::progress`, and the caller's cancel token or the call's timeout sends
//! `tasks/cancel`.
//!
//! The task server is an rmcp server using rmcp's own `TaskManager`, run in-process. It honours
//! SEP-2663: it runs a call as a task only for a client that declared the
//! `io.modelcontextprotocol/tasks` extension, and answers plainly otherwise.
//!
//! `@modelcontextprotocol/server-everything`'s `simulate-research-query` speaks the older
//! SEP-1686 task protocol of MCP 2025-11-25 (a `task` parameter on `tools/call`,
//! `tasks/result`), which the harness speaks beside SEP-2663 (see `task_augmented.rs`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use mcp_harness_catalog::qualify;
use mcp_harness_runtime::TaskUpdate;
use mcp_harness_runtime::transport::{CallbackFuture, ClientCallbacks, Supported};
use mcp_harness_runtime::{CallError, CallOptions, Runtime, RuntimeBuilder, TransportConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, ElicitRequestParams, ElicitResult, GetTaskParams, GetTaskResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, TaskStatus, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Tools: `research` (stages with status messages and progress, then a report), `stuck` (runs
/// until cancelled) and `explode` (fails).
#[derive(Clone, Default)]
struct TaskServer {
    tasks: TaskManager,
    /// Ids of the tasks `tasks/cancel` was received for.
    cancelled: Arc<Mutex<Vec<String>>>,
}

impl TaskServer {
    fn cancelled(&self) -> Vec<String> {
        self.cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn research(
        progress: impl Fn(f64, &str) + Send,
        ctx: &rmcp::task_manager::TaskContext,
    ) -> CallToolResult {
        for (i, stage) in ["Gathering sources", "Synthesizing findings"]
            .iter()
            .enumerate()
        {
            ctx.set_status_message(*stage);
            progress(i as f64 + 1.0, stage);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        CallToolResult::success(vec![ContentBlock::text("# Research Report: tasks")])
    }
}

impl ServerHandler for TaskServer {
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = Arc::new(
            json!({"type": "object", "properties": {}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        Ok(ListToolsResult::with_all_items(
            ["research", "stuck", "explode"]
                .into_iter()
                .map(|name| Tool::new(name, "runs as a task", schema.clone()))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let (peer, token) = (context.peer.clone(), context.meta.get_progress_token());
        let progress = move |done: f64, message: &str| {
            if let Some(token) = token.clone() {
                let mut note = ProgressNotificationParam::new(token, done);
                note.message = Some(message.to_string());
                let peer = peer.clone();
                tokio::spawn(async move { peer.notify_progress(note).await });
            }
        };
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !declared {
            // SEP-2663: no task for a client that did not declare the extension.
            return Err(ErrorData::invalid_request(
                "this test server runs tools only as tasks, and the client did not declare io.modelcontextprotocol/tasks",
                None,
            ));
        }
        let options = TaskOptions::new().with_poll_interval_ms(100);
        let task = self.tasks.spawn(options, move |ctx| {
            Box::pin(async move {
                match name.as_str() {
                    "research" => Ok(Self::research(progress, &ctx).await),
                    "explode" => Err(TaskExit::Error(ErrorData::internal_error(
                        "the research database is down",
                        None,
                    ))),
                    _ => {
                        ctx.cancelled().await;
                        Err(TaskExit::Cancelled)
                    }
                }
            })
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request.task_id.clone());
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

/// A runtime with the task server in-process as `tasks`.
async fn start_tasks() -> (Runtime, TaskServer) {
    let server = TaskServer::default();
    let serving = server.clone();
    let runtime = RuntimeBuilder::new(config(Vec::new()))
        .in_process(
            "tasks",
            Arc::new(move |stream| {
                let server = serving.clone();
                tokio::spawn(async move {
                    if let Ok(running) = server.serve(stream).await {
                        let _ = running.waiting().await;
                    }
                });
            }),
        )
        .start()
        .expect("runtime starts");
    let s = runtime.wait_settled(SETTLE).await;
    assert!(s.tool(&qualify("tasks", "research")).is_some(), "listed");
    (runtime, server)
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
    let messages: Vec<_> = updates
        .iter()
        .filter_map(|u| u.message.as_deref())
        .collect();
    assert!(
        messages.contains(&"Synthesizing findings"),
        "status messages: {updates:?}"
    );
    assert_eq!(
        updates.last().map(|u| u.status),
        Some(TaskStatus::Completed)
    );
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
    assert_eq!(server.cancelled(), vec![id], "the server was told");

    let options = CallOptions {
        timeout: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let e = runtime
        .call_tool_with(&stuck, None, options)
        .await
        .expect_err("timed out");
    assert!(matches!(e, CallError::Timeout { .. }), "{e}");
    assert_eq!(server.cancelled().len(), 2, "the timeout cancels the task");

    let e = runtime
        .call_tool_with(&qualify("tasks", "explode"), None, CallOptions::default())
        .await
        .expect_err("failed");
    assert!(
        matches!(&e, CallError::Protocol { message, .. } if message.contains("the research database is down")),
        "{e}"
    );
    assert!(!e.retryable());
    assert_eq!(
        server.cancelled().len(),
        2,
        "a failed task is not cancelled"
    );
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

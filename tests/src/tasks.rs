//! The task server (MCP Tasks extension, SEP-2663): an rmcp server that answers every
//! `tools/call` with a task run by rmcp's own `TaskManager`, for the harness's task-following
//! tests. It honours SEP-2663: a call becomes a task only for a client that declared the
//! `io.modelcontextprotocol/tasks` extension, and is refused otherwise.
//!
//! Tools: `research` (two stages, each with a status message and a progress notification of
//! the original request, then a report), `stuck` (runs until cancelled), `explode` (fails),
//! `give-up` (the server cancels it), `ask` (asks for input inside the task with
//! `elicitation/create` and reports the answer).
//!
//! Invariant: every `tasks/cancel` received is recorded, in order, before the task is
//! cancelled ([`TaskServer::cancelled`]), so a test can prove which tasks the client gave up on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::json;

/// The task server's tools.
pub const TASK_TOOL_NAMES: [&str; 5] = ["research", "stuck", "explode", "give-up", "ask"];
/// Status message of every task when it is created.
pub const QUEUED: &str = "queued";
/// The `research` stages, each the task's status message and a progress message in turn.
pub const RESEARCH_STAGES: [&str; 2] = ["Gathering sources", "Synthesizing findings"];
/// The error message of `explode`.
pub const EXPLODE_MESSAGE: &str = "the research database is down";
/// How long each `research` stage and `explode`/`give-up` take.
const STAGE: Duration = Duration::from_millis(200);
/// The poll interval the server suggests (`pollIntervalMs`).
const POLL_MS: u64 = 50;

/// The task server; clones share the task manager and the record of cancels.
#[derive(Clone, Default)]
pub struct TaskServer {
    tasks: TaskManager,
    /// Ids of the tasks `tasks/cancel` was received for.
    cancelled: Arc<Mutex<Vec<String>>>,
}

impl TaskServer {
    /// Ids of the tasks `tasks/cancel` was received for, in order.
    pub fn cancelled(&self) -> Vec<String> {
        self.cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Serves one client over `stream` (an in-process connection); the task ends when the
    /// client goes away.
    pub fn serve_in_process(&self, stream: tokio::io::DuplexStream) {
        let server = self.clone();
        tokio::spawn(async move {
            if let Ok(running) = server.serve(stream).await {
                let _ = running.waiting().await;
            }
        });
    }

    async fn research(progress: impl Fn(f64, &str) + Send, ctx: &TaskContext) -> CallToolResult {
        for (i, stage) in RESEARCH_STAGES.iter().enumerate() {
            ctx.set_status_message(*stage);
            progress(i as f64 + 1.0, stage);
            tokio::time::sleep(STAGE).await;
        }
        CallToolResult::success(vec![ContentBlock::text("# Research Report: tasks")])
    }

    async fn ask(ctx: &TaskContext) -> Result<CallToolResult, TaskExit> {
        let request = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "which one?", "requestedSchema":
                {"type": "object", "properties": {"pick": {"type": "string"}}}}
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let answer = ctx.request_input("pick", request).await?;
        let pick = answer["content"]["pick"].as_str().unwrap_or("nothing");
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "picked {pick}"
        ))]))
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
            TASK_TOOL_NAMES
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
        let options = TaskOptions::new()
            .with_poll_interval_ms(POLL_MS)
            .with_status_message(QUEUED);
        let task = self.tasks.spawn(options, move |ctx| {
            Box::pin(async move {
                match name.as_str() {
                    "research" => Ok(Self::research(progress, &ctx).await),
                    "explode" => {
                        tokio::time::sleep(STAGE).await;
                        Err(TaskExit::Error(ErrorData::internal_error(
                            EXPLODE_MESSAGE,
                            None,
                        )))
                    }
                    "give-up" => {
                        tokio::time::sleep(STAGE).await;
                        Err(TaskExit::Cancelled)
                    }
                    "ask" => Self::ask(&ctx).await,
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

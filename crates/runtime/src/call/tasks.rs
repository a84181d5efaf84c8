//! Task-backed tool calls (MCP Tasks extension, SEP-2663, `io.modelcontextprotocol/tasks`): a
//! server may answer `tools/call` with a task (`resultType: "task"`) instead of the result; the
//! client polls `tasks/get` until the task is terminal, answers in-task input requests with
//! `tasks/update`, and may stop it with `tasks/cancel`. The final result is embedded in the
//! completed task (there is no `tasks/result` in SEP-2663).
//!
//! Invariants:
//! - polling is bounded: one `tasks/get` per interval — the server's latest `pollIntervalMs`,
//!   else [`DEFAULT_POLL_INTERVAL`], clamped to [`MIN_POLL_INTERVAL`]..[`MAX_POLL_INTERVAL`] —
//!   and the task's whole life, from its creation, is bounded by the call's timeout
//!   (`toolTimeoutSec` or `CallOptions::timeout`); status changes do not extend it;
//! - a task this client gives up on is cancelled: on the timeout, on the caller's cancel token,
//!   on input it cannot answer, and on a broken `tasks/get`, `tasks/cancel` is sent (awaited at
//!   most [`CANCEL_GRACE`]) before the call returns;
//! - every status change (status or status message) reaches the caller, in order, through
//!   `CallOptions::task_status` as a [`TaskUpdate`]; progress notifications of the original
//!   request keep reaching `CallOptions::progress` while the task runs;
//! - nothing the server sends is trusted: a task id that changes, a completed task whose result
//!   is not a tool result, a failure or a server-side cancellation end the call with a
//!   classified [`CallError`]; in-task input is answered only through the embedder's callbacks
//!   (never on the user's behalf), each key at most once.

use std::collections::HashSet;
use std::time::Duration;

use mcp_harness_transport::{Callbacks, ClientPeer};
use rmcp::model::{
    CallToolResult, CancelTaskParams, CreateTaskResult, GetTaskParams, InputRequiredResult,
    JsonObject, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::call::mrtr::next_round;
use crate::error::CallError;

/// Poll interval when the server suggests none.
pub(crate) const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// The shortest poll interval honoured (a server asking for less gets this).
pub(crate) const MIN_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The longest poll interval honoured (a server asking for more is polled this often).
pub(crate) const MAX_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// How long `tasks/cancel` is awaited when the client gives up on a task.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// A status change of a task-backed call, delivered through `CallOptions::task_status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskUpdate {
    /// The server's id of the task.
    pub task_id: String,
    /// `working`, `input_required` or a terminal status.
    pub status: TaskStatus,
    /// The server's human-readable status message, if any (untrusted text: show, don't obey).
    pub message: Option<String>,
}

/// What [`follow`] needs of the call that got a task.
pub(crate) struct TaskCall<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub peer: &'a ClientPeer,
    /// The call's timeout: the whole task must end within it.
    pub timeout: Duration,
    pub cancel: Option<CancellationToken>,
    pub status: Option<UnboundedSender<TaskUpdate>>,
    pub callbacks: Option<&'a Callbacks>,
}

impl TaskCall<'_> {
    /// A protocol-class error of this call.
    pub(crate) fn protocol(&self, message: String) -> CallError {
        CallError::Protocol {
            server: self.server.to_string(),
            tool: self.tool.to_string(),
            message,
        }
    }

    /// A failed request of this call, classified.
    pub(crate) fn classify(&self, e: rmcp::ServiceError) -> CallError {
        crate::error::classify(e, self.server, self.tool, self.timeout)
    }

    /// The task outlived the call's timeout (and was cancelled).
    pub(crate) fn timed_out(&self) -> CallError {
        CallError::Timeout {
            server: self.server.to_string(),
            tool: self.tool.to_string(),
            timeout: self.timeout,
        }
    }

    /// The caller cancelled; the server was sent `tasks/cancel` for `task_id`.
    pub(crate) fn cancelled(&self, task_id: &str) -> CallError {
        CallError::Transport {
            server: self.server.to_string(),
            tool: self.tool.to_string(),
            message: format!(
                "cancelled by the caller; the server was told (tasks/cancel of task {task_id})"
            ),
        }
    }
}

/// Why polling stopped without a terminal task.
enum Abandon {
    Timeout,
    Cancelled,
    Failed(CallError),
}

/// Follows the task the server created for a `tools/call` to its end and returns the tool
/// result, or the classified reason there is none.
pub(crate) async fn follow(
    created: CreateTaskResult,
    call: TaskCall<'_>,
) -> Result<CallToolResult, CallError> {
    let deadline = Instant::now() + call.timeout;
    let task_id = created.task.task_id.clone();
    let mut poll = Poller {
        call: &call,
        task_id: &task_id,
        deadline,
        last: None,
        answered: HashSet::new(),
    };
    poll.report(&created.task);
    let mut interval = interval_of(&created.task);
    let outcome = loop {
        match poll.step(interval).await {
            Ok(Step::Running(next)) => interval = next,
            Ok(Step::Done(result)) => return result,
            Err(abandon) => break abandon,
        }
    };
    cancel_task(call.peer, &task_id).await;
    Err(match outcome {
        Abandon::Timeout => call.timed_out(),
        Abandon::Cancelled => call.cancelled(&task_id),
        Abandon::Failed(e) => e,
    })
}

enum Step {
    /// Not terminal yet; poll again after this interval.
    Running(Duration),
    /// Terminal: the result or the classified failure (nothing to cancel).
    Done(Result<CallToolResult, CallError>),
}

struct Poller<'a> {
    call: &'a TaskCall<'a>,
    task_id: &'a str,
    deadline: Instant,
    /// The last (status, message) reported.
    last: Option<(TaskStatus, Option<String>)>,
    /// Input request keys already answered (keys are unique over a task's life).
    answered: HashSet<String>,
}

impl Poller<'_> {
    /// Waits `interval` (never past the deadline), then polls once and acts on the answer.
    async fn step(&mut self, interval: Duration) -> Result<Step, Abandon> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Abandon::Timeout);
        }
        let wake = (now + interval).min(self.deadline);
        self.guarded(tokio::time::sleep_until(wake)).await?;
        let got = self
            .guarded(self.call.peer.get_task(GetTaskParams::new(self.task_id)))
            .await?
            .map_err(|e| Abandon::Failed(self.classify(e)))?;
        let detailed = got.task;
        if detailed.task.task_id != self.task_id {
            return Err(Abandon::Failed(self.protocol(format!(
                "tasks/get for task {} answered with task {}",
                self.task_id, detailed.task.task_id
            ))));
        }
        self.report(&detailed.task);
        let next = interval_of(&detailed.task);
        match detailed.payload {
            TaskPayload::Completed { result } => Ok(Step::Done(self.tool_result(result))),
            TaskPayload::Failed { error } => Ok(Step::Done(Err(self.failed(&error)))),
            TaskPayload::Cancelled => Ok(Step::Done(Err(self.protocol(format!(
                "the server cancelled task {} before it completed",
                self.task_id
            ))))),
            TaskPayload::InputRequired { input_requests } => {
                let fresh: rmcp::model::InputRequests = input_requests
                    .into_iter()
                    .filter(|(key, _)| !self.answered.contains(key))
                    .collect();
                if !fresh.is_empty() {
                    self.answer(fresh).await?;
                }
                Ok(Step::Running(next))
            }
            // `working`, and any status a newer protocol adds: keep polling (bounded).
            _ => Ok(Step::Running(next)),
        }
    }

    /// Answers input requests not answered before through the embedder's callbacks, then
    /// delivers the answers with `tasks/update`.
    async fn answer(&mut self, requests: rmcp::model::InputRequests) -> Result<(), Abandon> {
        let keys: Vec<String> = requests.keys().cloned().collect();
        let mut unused = 0;
        let (answers, _) = self
            .guarded(next_round(
                self.call.server,
                self.call.callbacks,
                InputRequiredResult::from_input_requests(requests),
                &mut unused,
            ))
            .await?
            .map_err(|message| Abandon::Failed(self.protocol(message)))?;
        self.answered.extend(keys);
        let params = UpdateTaskParams::new(self.task_id, answers.unwrap_or_default());
        self.guarded(self.call.peer.update_task(params))
            .await?
            .map_err(|e| Abandon::Failed(self.classify(e)))
    }

    /// Runs `work` unless the caller cancels or the deadline passes first.
    async fn guarded<T>(&self, work: impl Future<Output = T>) -> Result<T, Abandon> {
        let cancel = self.call.cancel.clone();
        let cancelled = async move {
            match cancel {
                Some(token) => token.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = tokio::time::timeout_at(self.deadline, work) => out.map_err(|_| Abandon::Timeout),
            () = cancelled => Err(Abandon::Cancelled),
        }
    }

    /// Sends a [`TaskUpdate`] when the status or the message changed.
    fn report(&mut self, task: &Task) {
        let now = (task.status, task.status_message.clone());
        if self.last.as_ref() == Some(&now) {
            return;
        }
        self.last = Some(now.clone());
        if let Some(tx) = &self.call.status {
            // A caller that stopped listening does not stop the call.
            let _ = tx.send(TaskUpdate {
                task_id: task.task_id.clone(),
                status: now.0,
                message: now.1,
            });
        }
    }

    fn tool_result(&self, result: JsonObject) -> Result<CallToolResult, CallError> {
        serde_json::from_value(serde_json::Value::Object(result)).map_err(|e| {
            self.protocol(format!(
                "task {} completed with a result that is not a tool result: {e}",
                self.task_id
            ))
        })
    }

    fn failed(&self, error: &JsonObject) -> CallError {
        let message = error
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("no message");
        let code = error
            .get("code")
            .and_then(|c| c.as_i64())
            .map(|c| format!(" (error {c})"))
            .unwrap_or_default();
        self.protocol(format!("task {} failed{code}: {message}", self.task_id))
    }

    fn protocol(&self, message: String) -> CallError {
        self.call.protocol(message)
    }

    fn classify(&self, e: rmcp::ServiceError) -> CallError {
        self.call.classify(e)
    }
}

/// The interval the server asks for, clamped, or the default.
fn interval_of(task: &Task) -> Duration {
    task.poll_interval_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL_INTERVAL)
        .clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL)
}

/// Best effort `tasks/cancel` (cancellation is cooperative; the ack guarantees nothing).
async fn cancel_task(peer: &ClientPeer, task_id: &str) {
    let sent = tokio::time::timeout(
        CANCEL_GRACE,
        peer.cancel_task(CancelTaskParams::new(task_id)),
    )
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        tracing::debug!(task_id, "tasks/cancel was not acknowledged");
    }
}

#[cfg(test)]
mod tests {
    //! `follow` against an rmcp server running tasks with rmcp's own `TaskManager`, over an
    //! in-memory connection whose client declares the tasks extension.

    use std::sync::{Arc, Mutex};

    use mcp_harness_transport::{CallbackFuture, ClientCallbacks, Supported};
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ContentBlock,
        ElicitRequestParams, ElicitResult, GetTaskResult, Implementation, ServerCapabilities,
        ServerConfig,
    };
    use rmcp::service::{RequestContext, RoleServer, RunningService};
    use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
    use rmcp::{ErrorData, RoleClient, ServerHandler, ServiceExt};
    use serde_json::json;

    use super::*;

    #[derive(Clone, Default)]
    struct TaskServer {
        tasks: TaskManager,
        /// Ids of the tasks `tasks/cancel` was received for.
        cancelled: Arc<Mutex<Vec<String>>>,
    }

    impl ServerHandler for TaskServer {
        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let name = request.name.to_string();
            let options = TaskOptions::new()
                .with_poll_interval_ms(10)
                .with_status_message("queued");
            let task = self.tasks.spawn(options, move |ctx| {
                Box::pin(async move {
                    let pause = || tokio::time::sleep(Duration::from_millis(120));
                    match name.as_str() {
                        "stages" => {
                            for stage in ["gathering", "writing"] {
                                ctx.set_status_message(stage);
                                pause().await;
                            }
                            Ok(CallToolResult::success(vec![ContentBlock::text("report")]))
                        }
                        "explode" => {
                            pause().await;
                            Err(TaskExit::Error(ErrorData::internal_error("boom", None)))
                        }
                        "give-up" => {
                            pause().await;
                            Err(TaskExit::Cancelled)
                        }
                        "ask" => {
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

    async fn connect() -> (TaskServer, RunningService<RoleClient, ClientConfig>) {
        let server = TaskServer::default();
        let (a, b) = tokio::io::duplex(64 << 10);
        let serving = server.clone();
        tokio::spawn(async move {
            if let Ok(running) = serving.serve(a).await {
                let _ = running.waiting().await;
            }
        });
        let client = ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("tasks-test", "0"),
        )
        .serve(b)
        .await
        .expect("client connects");
        (server, client)
    }

    struct Run {
        cancel: Option<CancellationToken>,
        timeout: Duration,
        callbacks: Option<Callbacks>,
    }

    impl Default for Run {
        fn default() -> Self {
            Self {
                cancel: None,
                timeout: Duration::from_secs(20),
                callbacks: None,
            }
        }
    }

    /// Calls `tool`, which the server runs as a task, and follows it.
    async fn run(
        peer: &ClientPeer,
        tool: &'static str,
        run: Run,
    ) -> (Result<CallToolResult, CallError>, Vec<TaskUpdate>, String) {
        let created = match peer
            .call_tool_once(CallToolRequestParams::new(tool))
            .await
            .expect("tools/call")
        {
            CallToolResponse::Task(created) => created,
            other => panic!("expected a task, got {other:?}"),
        };
        let id = created.task.task_id.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let call = TaskCall {
            server: "srv",
            tool,
            peer,
            timeout: run.timeout,
            cancel: run.cancel,
            status: Some(tx),
            callbacks: run.callbacks.as_ref(),
        };
        let out = follow(created, call).await;
        let mut updates = Vec::new();
        while let Ok(u) = rx.try_recv() {
            updates.push(u);
        }
        (out, updates, id)
    }

    fn cancelled(server: &TaskServer) -> Vec<String> {
        server
            .cancelled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    #[tokio::test]
    async fn a_task_is_polled_to_its_result_and_each_status_change_is_reported() {
        let (server, client) = connect().await;
        let (out, updates, id) = run(client.peer(), "stages", Run::default()).await;
        let result = out.expect("completed");
        assert_eq!(
            result.content[0].as_text().map(|t| t.text.as_str()),
            Some("report")
        );
        assert!(updates.iter().all(|u| u.task_id == id));
        assert_eq!(
            updates.first().map(|u| u.message.as_deref()),
            Some(Some("queued"))
        );
        let messages: Vec<_> = updates
            .iter()
            .filter_map(|u| u.message.as_deref())
            .collect();
        assert!(messages.contains(&"gathering"), "{updates:?}");
        assert!(messages.contains(&"writing"), "{updates:?}");
        assert_eq!(
            updates.last().map(|u| u.status),
            Some(TaskStatus::Completed)
        );
        for pair in updates.windows(2) {
            assert_ne!(pair[0], pair[1], "only changes are reported");
        }
        assert!(
            cancelled(&server).is_empty(),
            "a completed task is not cancelled"
        );
    }

    #[tokio::test]
    async fn a_failed_task_and_a_task_the_server_cancelled_are_protocol_errors() {
        let (server, client) = connect().await;
        let (out, updates, _) = run(client.peer(), "explode", Run::default()).await;
        let e = out.expect_err("failed");
        assert!(
            matches!(&e, CallError::Protocol { message, .. } if message.contains("boom")),
            "{e}"
        );
        assert!(!e.retryable());
        assert_eq!(updates.last().map(|u| u.status), Some(TaskStatus::Failed));

        let (out, _, _) = run(client.peer(), "give-up", Run::default()).await;
        let e = out.expect_err("cancelled by the server");
        assert!(
            matches!(&e, CallError::Protocol { message, .. } if message.contains("cancelled")),
            "{e}"
        );
        assert!(
            cancelled(&server).is_empty(),
            "terminal tasks are not cancelled"
        );
    }

    #[tokio::test]
    async fn the_callers_cancel_sends_tasks_cancel() {
        let (server, client) = connect().await;
        let token = CancellationToken::new();
        let trigger = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            trigger.cancel();
        });
        let run_it = Run {
            cancel: Some(token),
            ..Run::default()
        };
        let (out, _, id) = run(client.peer(), "forever", run_it).await;
        let e = out.expect_err("cancelled");
        assert!(
            matches!(&e, CallError::Transport { message, .. } if message.contains("tasks/cancel")),
            "{e}"
        );
        assert_eq!(cancelled(&server), vec![id]);
    }

    #[tokio::test]
    async fn the_timeout_bounds_the_whole_task_and_cancels_it() {
        let (server, client) = connect().await;
        let run_it = Run {
            timeout: Duration::from_millis(400),
            ..Run::default()
        };
        let (out, updates, id) = run(client.peer(), "forever", run_it).await;
        let e = out.expect_err("timed out");
        assert!(matches!(e, CallError::Timeout { .. }), "{e}");
        assert_eq!(cancelled(&server), vec![id]);
        assert!(updates.iter().all(|u| u.status == TaskStatus::Working));
    }

    #[tokio::test]
    async fn in_task_input_is_answered_through_the_callbacks_with_tasks_update() {
        let (server, client) = connect().await;
        let run_it = Run {
            callbacks: Some(Arc::new(Picker)),
            ..Run::default()
        };
        let (out, updates, _) = run(client.peer(), "ask", run_it).await;
        let result = out.expect("completed");
        assert_eq!(
            result.content[0].as_text().map(|t| t.text.as_str()),
            Some("picked blue")
        );
        assert!(
            updates
                .iter()
                .any(|u| u.status == TaskStatus::InputRequired),
            "{updates:?}"
        );

        // Without callbacks nothing is answered on the user's behalf: the task is cancelled.
        let (out, _, id) = run(client.peer(), "ask", Run::default()).await;
        let e = out.expect_err("no one to ask");
        assert!(
            matches!(&e, CallError::Protocol { message, .. } if message.contains("pick")),
            "{e}"
        );
        assert_eq!(cancelled(&server), vec![id]);
    }

    #[test]
    fn the_poll_interval_is_the_servers_clamped_or_the_default() {
        let mut task = Task::new("t", TaskStatus::Working, "now", "now");
        assert_eq!(interval_of(&task), DEFAULT_POLL_INTERVAL);
        task.poll_interval_ms = Some(0);
        assert_eq!(interval_of(&task), MIN_POLL_INTERVAL);
        task.poll_interval_ms = Some(u64::MAX);
        assert_eq!(interval_of(&task), MAX_POLL_INTERVAL);
        task.poll_interval_ms = Some(1_000);
        assert_eq!(interval_of(&task), Duration::from_secs(1));
    }
}

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

/// `meta` (a request's `_meta`, or a new one) with client capabilities that decline tasks: the
/// ones it already carries (a gateway's client's, forwarded) or else the harness's own, either
/// way without the tasks extension (SEP-2575 per-request capabilities).
pub(crate) fn declining_meta(
    meta: Option<rmcp::model::RequestMetaObject>,
    callbacks: Option<&Callbacks>,
) -> rmcp::model::RequestMetaObject {
    let mut meta = meta.unwrap_or_default();
    let mut capabilities = meta
        .client_capabilities()
        .unwrap_or_else(|| mcp_harness_transport::handler::declared_capabilities(callbacks));
    if let Some(extensions) = &mut capabilities.extensions {
        extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
    }
    meta.set_client_capabilities(capabilities);
    meta
}

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
            upstream: None,
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
    //! The poll interval rule. `follow` against a real task server (rmcp's own `TaskManager`,
    //! the fixture's `TaskServer`) is tested through the public runtime in
    //! `tests/tests/tasks.rs`.

    use super::*;

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

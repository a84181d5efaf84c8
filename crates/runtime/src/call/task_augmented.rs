//! Task-augmented `tools/call` of MCP 2025-11-25 (SEP-1686): for a tool that declares
//! `execution.taskSupport: "required"` on a server that declares
//! `capabilities.tasks.requests.tools.call`, the call carries a `task` parameter, the server
//! answers with a task handle, and the result is fetched with `tasks/result`.
//!
//! rmcp 3.11 models only the newer tasks extension (SEP-2663, [`crate::call::tasks`]); the two facts
//! that select this path come from the raw messages ([`mcp_harness_transport::wire`]) and the
//! requests are sent as custom requests with the wire shapes of the 2025-11-25 schema.
//!
//! Invariants:
//! - the call is sent task-augmented only when both the server and the tool asked for it, and
//!   never retried plainly (a tool that requires a task would refuse);
//! - `tasks/result` is requested at once (the server answers it when the task is terminal and
//!   delivers the task's own requests — elicitation, sampling — while it waits; they reach the
//!   embedder's callbacks like any server request); `tasks/get` is polled beside it only to
//!   report status changes, at the server's `pollInterval` clamped to
//!   [`crate::call::tasks::MIN_POLL_INTERVAL`]..[`crate::call::tasks::MAX_POLL_INTERVAL`];
//! - the whole task, from its creation, is bounded by the call's timeout; on the timeout or the
//!   caller's cancel token `tasks/cancel` is sent (awaited at most
//!   [`crate::call::tasks::CANCEL_GRACE`]) before the call returns;
//! - every status change reaches `CallOptions::task_status` in order, as a
//!   [`crate::call::tasks::TaskUpdate`];
//! - nothing the server sends is trusted: an answer without a task id, a `tasks/result` that is
//!   not a tool result, or a broken `tasks/get` end the call with a classified [`CallError`].

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, CreateTaskResult, CustomRequest,
    JsonObject, ServerResult, Task, TaskStatus,
};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::call::tasks::{
    CANCEL_GRACE, DEFAULT_POLL_INTERVAL, MAX_POLL_INTERVAL, MIN_POLL_INTERVAL, TaskCall, TaskUpdate,
};
use crate::error::CallError;

/// The `tools/call` request for `params`, augmented with a task whose time to live is the
/// call's timeout (the result is of no use to this call after that).
pub(crate) fn request(params: &CallToolRequestParams, timeout: Duration) -> ClientRequest {
    let mut value = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        let ttl = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        object.insert("task".into(), json!({ "ttl": ttl }));
    }
    ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(value)))
}

/// The `tools/call` request for `params`, augmented with `task` as a gateway's client gave it.
pub(crate) fn request_with(params: &CallToolRequestParams, task: JsonObject) -> ClientRequest {
    let mut value = serde_json::to_value(params).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        object.insert("task".into(), Value::Object(task));
    }
    ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(value)))
}

/// A SEP-1686 `CreateTaskResult` (`{"task": {...}, "_meta"?}`) in rmcp's task shape (`ttl` as
/// `ttl_ms`, `pollInterval` as `poll_interval_ms`), for a caller that passes the task on;
/// `None` without a task id.
pub(crate) fn created(raw: &Value) -> Option<CreateTaskResult> {
    let task = raw.get("task")?;
    let id = task.get("taskId")?.as_str()?;
    let text = |key: &str| task.get(key).and_then(Value::as_str).unwrap_or_default();
    let status = task
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or(TaskStatus::Working);
    let mut out = Task::new(id, status, text("createdAt"), text("lastUpdatedAt"));
    out.status_message = task
        .get("statusMessage")
        .and_then(Value::as_str)
        .map(str::to_string);
    out.ttl_ms = task.get("ttl").and_then(Value::as_u64);
    out.poll_interval_ms = task.get("pollInterval").and_then(Value::as_u64);
    let mut created = CreateTaskResult::new(out);
    created.meta = raw
        .get("_meta")
        .and_then(|m| serde_json::from_value(m.clone()).ok());
    Some(created)
}

/// The fields of a SEP-1686 task this client uses.
struct TaskState {
    id: String,
    status: Option<TaskStatus>,
    message: Option<String>,
    poll_interval: Option<Duration>,
}

impl TaskState {
    /// Reads a task object (`CreateTaskResult.task`, or a `tasks/get` result).
    fn read(task: &Value) -> Option<Self> {
        let id = task.get("taskId")?.as_str()?.to_string();
        let status = task
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let message = task
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(str::to_string);
        // 2025-11-25 says `pollInterval`; rmcp's re-encoding of a decoded task says `pollIntervalMs`.
        let poll_interval = ["pollInterval", "pollIntervalMs"]
            .iter()
            .find_map(|k| task.get(*k).and_then(Value::as_u64))
            .map(Duration::from_millis);
        Some(Self {
            id,
            status,
            message,
            poll_interval,
        })
    }
}

/// Follows the task created for a task-augmented `tools/call` (`created` is the raw answer) to
/// its result, or the classified reason there is none.
pub(crate) async fn follow(
    created: Value,
    call: TaskCall<'_>,
) -> Result<CallToolResult, CallError> {
    let deadline = Instant::now() + call.timeout;
    let Some(task) = created.get("task").and_then(TaskState::read) else {
        return Err(call
            .protocol("the server answered a task-augmented tools/call without a task id".into()));
    };
    let mut follower = Follower {
        call: &call,
        task_id: task.id.clone(),
        last: None,
        interval: DEFAULT_POLL_INTERVAL,
    };
    follower.report(&task);

    let result = {
        let guarded = async {
            let fetch = custom("tasks/result", &follower.task_id);
            let handle = call
                .peer
                .send_request_with_option(fetch, PeerRequestOptions::with_timeout(call.timeout))
                .await
                .map_err(|e| call.classify(e))?;
            let answer = handle.await_response();
            tokio::pin!(answer);
            loop {
                tokio::select! {
                    answer = &mut answer => break answer.map_err(|e| call.classify(e)),
                    () = tokio::time::sleep(follower.interval) => follower.poll().await?,
                }
            }
        };
        let cancelled = async {
            match call.cancel.clone() {
                Some(token) => token.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = tokio::time::timeout_at(deadline, guarded) => match out {
                Ok(out) => out,
                Err(_) => Err(abandon(&call, &follower.task_id, Abandon::Timeout).await),
            },
            () = cancelled => Err(abandon(&call, &follower.task_id, Abandon::Cancelled).await),
        }
    }?;
    match result {
        ServerResult::CallToolResult(result) => Ok(result),
        other => Err(crate::error::unexpected(call.server, call.tool, &other)),
    }
}

enum Abandon {
    Timeout,
    Cancelled,
}

/// Sends `tasks/cancel` (best effort) and says why the call ended.
async fn abandon(call: &TaskCall<'_>, task_id: &str, why: Abandon) -> CallError {
    let sent = tokio::time::timeout(
        CANCEL_GRACE,
        call.peer.send_request(custom("tasks/cancel", task_id)),
    )
    .await;
    if !matches!(sent, Ok(Ok(_))) {
        tracing::debug!(task_id, "tasks/cancel was not acknowledged");
    }
    match why {
        Abandon::Timeout => call.timed_out(),
        Abandon::Cancelled => call.cancelled(task_id),
    }
}

struct Follower<'a> {
    call: &'a TaskCall<'a>,
    task_id: String,
    /// The last (status, message) reported.
    last: Option<(Option<TaskStatus>, Option<String>)>,
    interval: Duration,
}

impl Follower<'_> {
    /// One `tasks/get`, reporting a status change.
    async fn poll(&mut self) -> Result<(), CallError> {
        let got = self
            .call
            .peer
            .send_request(custom("tasks/get", &self.task_id))
            .await
            .map_err(|e| self.call.classify(e))?;
        let raw = serde_json::to_value(&got).unwrap_or(Value::Null);
        let task = TaskState::read(&raw).ok_or_else(|| {
            self.call.protocol(format!(
                "tasks/get for task {} answered without a task",
                self.task_id
            ))
        })?;
        if task.id != self.task_id {
            return Err(self.call.protocol(format!(
                "tasks/get for task {} answered with task {}",
                self.task_id, task.id
            )));
        }
        self.report(&task);
        Ok(())
    }

    /// Sends a [`TaskUpdate`] when the status or the message changed; adopts the server's
    /// poll interval.
    fn report(&mut self, task: &TaskState) {
        if let Some(interval) = task.poll_interval {
            self.interval = interval.clamp(MIN_POLL_INTERVAL, MAX_POLL_INTERVAL);
        }
        let now = (task.status, task.message.clone());
        if self.last.as_ref() == Some(&now) {
            return;
        }
        self.last = Some(now.clone());
        if let (Some(tx), Some(status)) = (&self.call.status, now.0) {
            // A caller that stopped listening does not stop the call.
            let _ = tx.send(TaskUpdate {
                task_id: task.id.clone(),
                status,
                message: now.1,
            });
        }
    }
}

/// A `tasks/*` request about `task_id` in the 2025-11-25 shape.
fn custom(method: &str, task_id: &str) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(
        method,
        Some(json!({ "taskId": task_id })),
    ))
}

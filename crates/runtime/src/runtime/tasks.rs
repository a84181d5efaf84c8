//! Requests about a task a server created (SEP-2663 `tasks/get`, `tasks/update`,
//! `tasks/cancel`), sent to that server on its current connection: what a gateway that hands
//! tasks back to its clients ([`HandBack::tasks`](crate::HandBack)) forwards for them. Also
//! the SEP-1686 requests of MCP 2025-11-25 (`tasks/get`, `tasks/result`, `tasks/cancel`,
//! `tasks/list`) about a task handed back for a forwarded `task` parameter
//! ([`Forwarded::task`](crate::Forwarded)).
//!
//! Invariants:
//! - a request goes to the named server only, with the task id and everything else as given:
//!   the server's own answer comes back untouched, its JSON-RPC error (an unknown id's
//!   `-32602`) as [`CallError::Protocol`] with `upstream` set;
//! - each request is bounded by the server's tool timeout, like a call;
//! - SEP-1686 task status notifications are broadcast as sent ([`Runtime::task_statuses`]),
//!   never routed or filtered here.

use mcp_harness_transport::wire::TaskSupport;
use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, ClientRequest, CustomRequest, GetTaskParams,
    GetTaskRequest, GetTaskResult, JsonObject, ServerResult, UpdateTaskParams, UpdateTaskRequest,
};

use rmcp::service::PeerRequestOptions;
use tokio::sync::broadcast;

use super::{Runtime, bound_client, send};
use crate::TaskStatusUpdate;
use crate::error::{CallError, unexpected};

impl Runtime {
    /// `tasks/get` to `server`: the task's current state, its result or error inlined once it
    /// is terminal.
    pub async fn get_task(
        &self,
        server: &str,
        params: GetTaskParams,
    ) -> Result<GetTaskResult, CallError> {
        let client = bound_client(&self.live.published(), server)?;
        let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(params));
        match send(&client, request, server, "tasks/get").await? {
            ServerResult::GetTaskResult(result) => Ok(result),
            other => Err(unexpected(server, "tasks/get", &other)),
        }
    }

    /// `tasks/update` to `server`: answers to the task's outstanding input requests.
    pub async fn update_task(
        &self,
        server: &str,
        params: UpdateTaskParams,
    ) -> Result<(), CallError> {
        let client = bound_client(&self.live.published(), server)?;
        let request = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(params));
        ack(
            server,
            "tasks/update",
            send(&client, request, server, "tasks/update").await?,
        )
    }

    /// `tasks/cancel` to `server` (cooperative: the ack promises nothing about the task).
    pub async fn cancel_task(
        &self,
        server: &str,
        params: CancelTaskParams,
    ) -> Result<(), CallError> {
        let client = bound_client(&self.live.published(), server)?;
        let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(params));
        ack(
            server,
            "tasks/cancel",
            send(&client, request, server, "tasks/cancel").await?,
        )
    }

    /// A task's final result, from a server that ran `tool` (its raw name) as a task, made
    /// what a plain call's result is: checked against the tool's `outputSchema` as the current
    /// catalog lists it and cleaned (R30), and over the output budget stored with a bounded
    /// summary in its place (R31). What a gateway passing tasks through hands its client.
    pub fn finish_task_result(
        &self,
        server: &str,
        tool: &str,
        result: rmcp::model::CallToolResult,
    ) -> crate::NormalizedResult {
        let published = self.live.published();
        let definition = published
            .snapshot
            .catalogs
            .get(server)
            .and_then(|c| c.tools.iter().find(|t| t.raw_name == tool))
            .map(|t| t.tool.clone());
        self.calls
            .finish_result(server, tool, definition.as_deref(), result)
    }

    /// Whether connected `server` declared task-augmented `tools/call`
    /// (`capabilities.tasks.requests.tools.call`, SEP-1686 of MCP 2025-11-25).
    pub fn task_tool_calls(&self, server: &str) -> bool {
        self.live
            .published()
            .clients
            .get(server)
            .is_some_and(|client| client.wire.task_tool_calls())
    }

    /// The `ttl` and `pollInterval` connected `server` last gave for its SEP-1686 task
    /// `task_id`, as it sent them: rmcp's decoding of a 2025-11-25 task drops both, so the
    /// tasks this runtime hands on (`Forwarded::task`, [`Runtime::augmented_task_request_as`])
    /// lack them.
    pub fn task_timing(
        &self,
        server: &str,
        task_id: &str,
    ) -> Option<mcp_harness_transport::wire::TaskTiming> {
        self.live
            .published()
            .clients
            .get(server)
            .and_then(|client| client.wire.task_timing(task_id))
    }

    /// A SEP-1686 request about a task to `server` — `method` is `tasks/get`, `tasks/result`,
    /// `tasks/cancel` or `tasks/list`, `params` as given (`{"taskId": …}`) — answered with the
    /// server's result as JSON. rmcp decodes every answer into its own types first, so a task
    /// may come back in rmcp's field names (`ttlMs`, `pollIntervalMs`) beside or instead of
    /// the 2025-11-25 ones. `tasks/result` waits for the task to end, bounded by the server's
    /// tool timeout like every request here.
    pub async fn augmented_task_request(
        &self,
        server: &str,
        method: &str,
        params: JsonObject,
    ) -> Result<serde_json::Value, CallError> {
        self.augmented_task_request_as(server, method, params, None)
            .await
    }

    /// [`Runtime::augmented_task_request`] made for the call tagged `caller` (as
    /// [`CallOptions::caller`](crate::CallOptions)): a request of the server on this request's
    /// response stream (a task's input request while `tasks/result` waits) reaches the
    /// callbacks with that tag.
    pub async fn augmented_task_request_as(
        &self,
        server: &str,
        method: &str,
        params: JsonObject,
        caller: Option<u64>,
    ) -> Result<serde_json::Value, CallError> {
        let client = bound_client(&self.live.published(), server)?;
        let request = ClientRequest::CustomRequest(CustomRequest::new(
            method.to_string(),
            Some(serde_json::Value::Object(params)),
        ));
        let tagged = caller.and_then(|tag| Some((self.calls.call_tags()?, tag)));
        let options = PeerRequestOptions::with_timeout(client.tool_timeout);
        let answer =
            crate::call::input::send_tagged(&client, request, options, server, method, tagged)
                .await?;
        serde_json::to_value(&answer).map_err(|e| CallError::Protocol {
            upstream: None,
            server: server.to_string(),
            tool: method.to_string(),
            message: format!("the answer could not be encoded again: {e}"),
        })
    }

    /// Every server's SEP-1686 task status notifications (`notifications/tasks/status`, MCP
    /// 2025-11-25) from now on, in the order each server sent them, each with the server that
    /// sent it and that server's own task id; a receiver more than the buffer behind misses
    /// the oldest. Whom a task belongs to is the subscriber's business: the runtime does not
    /// know which caller created it.
    pub fn task_statuses(&self) -> broadcast::Receiver<TaskStatusUpdate> {
        self.task_statuses.subscribe()
    }

    /// What connected `server`'s listing declared of `tool`'s task support
    /// (`execution.taskSupport`; `Forbidden` when it said nothing or is not connected).
    pub fn tool_task_support(&self, server: &str, tool: &str) -> TaskSupport {
        self.live
            .published()
            .clients
            .get(server)
            .map_or(TaskSupport::Forbidden, |client| {
                client.wire.task_support(tool)
            })
    }
}

/// An empty acknowledgement, or the unexpected answer named.
fn ack(server: &str, what: &str, answer: ServerResult) -> Result<(), CallError> {
    match answer {
        ServerResult::TaskAckResult(_) | ServerResult::EmptyResult(_) => Ok(()),
        other => Err(unexpected(server, what, &other)),
    }
}

//! Requests about a task a server created (SEP-2663 `tasks/get`, `tasks/update`,
//! `tasks/cancel`), sent to that server on its current connection: what a gateway that hands
//! tasks back to its clients ([`HandBack::tasks`](crate::HandBack)) forwards for them.
//!
//! Invariants:
//! - a request goes to the named server only, with the task id and everything else as given:
//!   the server's own answer comes back untouched, its JSON-RPC error (an unknown id's
//!   `-32602`) as [`CallError::Protocol`] with `upstream` set;
//! - each request is bounded by the server's tool timeout, like a call.

use mcp_harness_transport::wire::TaskSupport;
use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, ClientRequest, GetTaskParams, GetTaskRequest,
    GetTaskResult, ServerResult, UpdateTaskParams, UpdateTaskRequest,
};

use super::{Runtime, bound_client, send};
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

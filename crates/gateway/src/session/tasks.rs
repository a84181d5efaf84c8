//! Tasks (SEP-2663) passed through: the gateway declares the `io.modelcontextprotocol/tasks`
//! extension while an upstream does; a client that declared it (at `initialize`, or in the
//! request's `_meta` at 2026-07-28) gets an upstream's `CreateTaskResult` as the answer of its
//! `tools/call`, under a gateway task id ([`crate::task_ids`]), and its `tasks/get`,
//! `tasks/update` and `tasks/cancel` go to the owning server with the ids translated both ways.
//!
//! Invariants:
//! - a client sees only gateway ids, an upstream only its own ids;
//! - a task id is answered only for the client it was issued to: for any other client, and for
//!   a malformed, forged or foreign id, the answer is the same `-32602` unknown-task error,
//!   and nothing is sent upstream;
//! - a tool whose server declared SEP-1686 task-augmented calls (MCP 2025-11-25) and that
//!   runs only as a task is followed to its result by the runtime for a client that declared
//!   no tasks at all, and refused with `-32601` for one that declared 2025-11-25 tasks but did
//!   not ask for one (see `session/augmented.rs`);
//! - for a client that did not declare tasks, any other tool its server runs only as a task is refused
//!   with `-32021` before it runs: by the gateway when the server's listing says so
//!   (`execution.taskSupport: "required"`, SEP-1686), else by the server itself, which the
//!   call tells in its `_meta` that the client takes no task (`CallOptions::decline_tasks`;
//!   SEP-2663 listings do not say which tools need a task); its refusal reaches the client as
//!   the JSON-RPC error it is. Any other tool is answered with its final result (a server
//!   that still makes a task gets it followed by the runtime);
//! - the gateway declares tasks from the first time a connected upstream does, for as long
//!   as it runs: a task id outlives its server's connection, and its `tasks/*` are answered
//!   with that server's state (not connected, reconnecting) rather than `-32601`;
//! - rmcp answers `tasks/*` with `-32601` while the gateway declares no tasks, and with
//!   `-32021` for a client that did not declare them (its `validate_tasks_capability`).

use mcp_harness_runtime::transport::wire::TaskSupport;
use mcp_harness_runtime::{CallError, CallReply};
use rmcp::model::{
    CancelTaskParams, ClientCapabilities, CreateTaskResult, GetTaskParams, GetTaskResult,
    MetaObject, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::call::{Failure, upstream_error};
use super::shared::profile_of;
use super::{Session, augmented_front};
use crate::task_ids::{Owner, UpstreamTask};

/// The JSON-RPC code of a request that needs a client capability the client did not declare
/// (SEP-2575 "Missing Required Client Capability").
pub(super) const MISSING_CAPABILITY: i32 = -32021;

/// The `_meta` key under which a result may name the task it relates to.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

impl Session {
    /// Whether a call of `tool` on `server` hands an upstream task back to the client (it
    /// declared the tasks extension), or its refusal: `-32021` for a task-only tool called by
    /// a client that did not.
    pub(super) fn task_hand_back(
        &self,
        context: &RequestContext<RoleServer>,
        server: &str,
        tool: &str,
    ) -> Result<bool, McpError> {
        let support = self.runtime().tool_task_support(server, tool);
        // SEP-1686 (2025-11-25): the server of a task-augmented call must take tasks for it;
        // the runtime hands its task back (`Forwarded::task`), not as an SEP-2663 task.
        let augmented_calls = self.runtime().task_tool_calls(server);
        if augmented_front::asks_task(context) {
            if augmented_calls && support != TaskSupport::Forbidden {
                return Ok(false);
            }
            // A server not connected now (a stdio process the call restarts, R7; one
            // reconnecting, whose call waits for it or fails) is judged by the runtime on the
            // connection the call gets: the task goes with it where that connection takes one
            // for the tool, and the tool runs plainly where it does not (what a receiver that
            // does not take tasks does, SEP-1686) — while the refusal above is for a server
            // whose connection says now that it takes none.
            let connected = self
                .runtime()
                .snapshot()
                .servers
                .get(server)
                .is_some_and(|s| s.state == mcp_harness_runtime::catalog::ServerState::Connected);
            if !connected {
                return Ok(false);
            }
            return Err(augmented_front::not_as_task(format!(
                "`{tool}` does not run as a task (its server declares no task-augmented tools/call, or the tool's execution.taskSupport is forbidden): call it without `task`"
            )));
        }
        if declares_tasks(context) {
            return Ok(true);
        }
        if support == TaskSupport::Required {
            if augmented_calls {
                // A client that declared 2025-11-25 tasks must ask for one; for any other
                // the runtime follows the task to its result.
                if augmented_front::declares_augmented(context) {
                    return Err(augmented_front::not_as_task(format!(
                        "`{tool}` runs only as a task (execution.taskSupport: required): call it with a `task` parameter"
                    )));
                }
                return Ok(false);
            }
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        Ok(false)
    }

    /// What a call's client gets: an upstream task under a gateway task id bound to it; an
    /// upstream's refusal for a missing client capability (a task-only tool, for a client that
    /// did not declare tasks) as the JSON-RPC error it is; anything else as it came.
    pub(super) fn task_outcome(
        &self,
        context: &RequestContext<RoleServer>,
        called: Option<&super::call::Called>,
        outcome: Result<CallReply, CallError>,
    ) -> Result<CallReply, Failure> {
        match (outcome, called) {
            // A SEP-1686 task gets its id of that kind from the caller (`super::augmented`).
            (Ok(CallReply::Task(created)), _) if augmented_front::asks_task(context) => {
                Ok(CallReply::Task(created))
            }
            (Ok(CallReply::Task(created)), Some(called)) => Ok(CallReply::Task(
                self.downstream_task(context, called, created),
            )),
            (
                Err(CallError::Protocol {
                    upstream: Some(error),
                    ..
                }),
                _,
            ) if error.code.0 == MISSING_CAPABILITY => Err(Failure::Rpc(*error)),
            (outcome, _) => outcome.map_err(Failure::Call),
        }
    }

    /// `created` (by `called`'s server) as the calling client sees it: under a gateway task
    /// id bound to that client.
    fn downstream_task(
        &self,
        context: &RequestContext<RoleServer>,
        called: &super::call::Called,
        mut created: CreateTaskResult,
    ) -> CreateTaskResult {
        let upstream = UpstreamTask {
            server: called.server.clone(),
            task_id: created.task.task_id.clone(),
            tool: Some(called.tool.clone()),
            generation: crate::task_ids::generation(&self.runtime().snapshot(), &called.server),
        };
        let id = self.shared().task_ids.issue(&upstream, &owner(context));
        translate_meta(&mut created.meta, &upstream.task_id, &id);
        created.task.task_id = id;
        created
    }

    /// The upstream task behind a client's `id`, else the unknown-task error.
    fn upstream_task(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<UpstreamTask, McpError> {
        let task = self
            .shared()
            .task_ids
            .open(id, &owner(context))
            .ok_or_else(|| {
                McpError::invalid_params(
                    "unknown task id: not a task this client created through this gateway (or it was issued under a session key no longer configured)",
                    None,
                )
            })?;
        if task.outlived(&self.runtime().snapshot()) {
            return Err(task.gone());
        }
        Ok(task)
    }

    /// `tasks/get`, routed to the owning server.
    pub(super) async fn pass_get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let task = self.upstream_task(&request.task_id, &context)?;
        let mut got = self
            .runtime()
            .get_task(&task.server, GetTaskParams::new(task.task_id.clone()))
            .await
            .map_err(|e| task_error(upstream_error(e), &task.task_id, &request.task_id))?;
        translate_meta(&mut got.meta, &task.task_id, &request.task_id);
        // The final result's own `_meta` names the task too (SEP-2663 related-task).
        match &mut got.task.payload {
            rmcp::model::TaskPayload::Completed { result } => {
                if let Some(meta) =
                    (result.get_mut("_meta")).and_then(serde_json::Value::as_object_mut)
                {
                    translate_related(meta, &task.task_id, &request.task_id);
                }
                // What a plain call's result would be: checked, and within the output budget.
                let whole = serde_json::Value::Object(std::mem::take(result));
                if let serde_json::Value::Object(finished) = self.finished(&task, whole) {
                    *result = finished;
                }
            }
            // The error a task failed with may name it too.
            rmcp::model::TaskPayload::Failed { error } => {
                if let Some(serde_json::Value::String(message)) = error.get_mut("message") {
                    *message = replace_token(message, &task.task_id, &request.task_id);
                }
                if let Some(data) = error.get_mut("data") {
                    replace_strings(data, &task.task_id, &request.task_id);
                }
            }
            _ => {}
        }
        got.task.task.task_id = request.task_id;
        Ok(got)
    }

    /// `tasks/update`, routed to the owning server.
    pub(super) async fn pass_update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let task = self.upstream_task(&request.task_id, &context)?;
        let params = UpdateTaskParams::new(task.task_id.clone(), request.input_responses);
        self.runtime()
            .update_task(&task.server, params)
            .await
            .map_err(|e| task_error(upstream_error(e), &task.task_id, &request.task_id))
    }

    /// `tasks/cancel`, routed to the owning server.
    pub(super) async fn pass_cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let task = self.upstream_task(&request.task_id, &context)?;
        self.runtime()
            .cancel_task(&task.server, CancelTaskParams::new(task.task_id.clone()))
            .await
            .map_err(|e| task_error(upstream_error(e), &task.task_id, &request.task_id))
    }
}

/// An upstream's error about its task `upstream`, with that id (standing alone in the message,
/// and as a whole string value in the data) replaced by the client's `id`: an upstream id never
/// reaches a client, and nothing else of the error changes.
pub(super) fn task_error(mut error: McpError, upstream: &str, id: &str) -> McpError {
    if upstream.is_empty() {
        return error;
    }
    if error.message.contains(upstream) {
        error.message = replace_token(&error.message, upstream, id).into();
    }
    if let Some(data) = &mut error.data {
        replace_strings(data, upstream, id);
    }
    error
}

/// `text` with each occurrence of `from` that stands alone (not inside a longer word or id)
/// replaced by `to`.
fn replace_token(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        return text.to_string();
    }
    let part = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(from) {
        let (before, after) = (&rest[..at], &rest[at + from.len()..]);
        let alone = !before.chars().next_back().is_some_and(part)
            && !after.chars().next().is_some_and(part);
        out.push_str(before);
        out.push_str(if alone { to } else { from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Every string value of `value` equal to `from` becomes `to`.
fn replace_strings(value: &mut serde_json::Value, from: &str, to: &str) {
    match value {
        serde_json::Value::String(s) if s == from => *s = to.to_string(),
        serde_json::Value::Array(items) => {
            items.iter_mut().for_each(|v| replace_strings(v, from, to));
        }
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(|v| replace_strings(v, from, to));
        }
        _ => {}
    }
}

/// Whether the request's client declared the tasks extension (in the request's `_meta`, else
/// at `initialize`).
pub(super) fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The client a task created by this request belongs to.
pub(super) fn owner(context: &RequestContext<RoleServer>) -> Owner {
    Owner {
        profile: profile_of(&context.extensions).map(|p| p.name.clone()),
        session: crate::sealed::opened(&context.extensions)
            .map(|opened| opened.payload.session.clone()),
    }
}

/// Rewrites a related-task `_meta` entry naming task `from` to name `to`.
fn translate_meta(meta: &mut Option<MetaObject>, from: &str, to: &str) {
    if let Some(meta) = meta.as_mut() {
        translate_related(&mut meta.0, from, to);
    }
}

/// In a `_meta` object: a related-task entry naming upstream task `from` names `to`; one naming
/// any other upstream task is dropped (an upstream id never reaches a client, and this client
/// could use no other).
pub(super) fn translate_related(
    meta: &mut serde_json::Map<String, serde_json::Value>,
    from: &str,
    to: &str,
) {
    let Some(related) = meta.get_mut(RELATED_TASK) else {
        return;
    };
    match related.get_mut("taskId") {
        Some(id) if id.as_str() == Some(from) => *id = to.into(),
        _ => {
            meta.remove(RELATED_TASK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_upstream_task_id_never_reaches_the_client() {
        let mut meta = json!({RELATED_TASK: {"taskId": "up-1"}, "other": 1});
        let object = meta.as_object_mut().expect("object");
        translate_related(object, "up-1", "ours");
        assert_eq!(meta, json!({RELATED_TASK: {"taskId": "ours"}, "other": 1}));
        let mut meta = json!({RELATED_TASK: {"taskId": "UPSTREAM-SECRET"}, "other": 1});
        translate_related(meta.as_object_mut().expect("object"), "up-1", "ours");
        assert_eq!(
            meta,
            json!({"other": 1}),
            "another upstream task's id is dropped"
        );

        let error = McpError::invalid_params(
            "unknown task: up-1",
            Some(json!({"taskId": "up-1", "why": "gone"})),
        );
        let error = task_error(error, "up-1", "ours");
        assert_eq!(error.message, "unknown task: ours");
        assert_eq!(error.data, Some(json!({"taskId": "ours", "why": "gone"})));
        // A short id is replaced only where it stands alone, and only whole string values.
        let error = McpError::invalid_params(
            "task 1 failed after 10s (task 1)",
            Some(json!({"taskId": "1", "retry": 10, "note": "1 of 1"})),
        );
        let error = task_error(error, "1", "ours");
        assert_eq!(error.message, "task ours failed after 10s (task ours)");
        assert_eq!(
            error.data,
            Some(json!({"taskId": "ours", "retry": 10, "note": "1 of 1"}))
        );
    }
}

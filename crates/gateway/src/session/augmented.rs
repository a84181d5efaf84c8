//! Task-augmented requests of MCP 2025-11-25 (SEP-1686) passed through, for a client reached
//! through a front (HTTP: [`super::augmented_front`]; stdio: [`super::augmented_lines`]; they
//! turn the wire fields rmcp drops into what this handler reads): a `tools/call` with `task` goes upstream task-augmented on
//! the governed path, and the client gets the upstream's `CreateTaskResult` under a gateway
//! task id of the SEP-1686 kind ([`TaskKind::Augmented`]); its `tasks/get`, `tasks/result`
//! and `tasks/cancel` go to the owning server with the ids translated both ways.
//!
//! Invariants:
//! - a task-augmented call is the same governed call as any other (listing, view, revision
//!   check, deny/ask rules, metrics and audit, outcome `task`); it is sent only to a server
//!   that declared task-augmented `tools/call`, for a tool whose `execution.taskSupport` is
//!   not `forbidden`; otherwise it is refused with `-32601`, as the spec has a server do;
//! - a task id opens only for the client it was issued to (profile and session), only as a
//!   SEP-1686 id: any other id is the same `-32602` unknown-task error, and nothing is sent;
//! - `tasks/list` is not served (`-32601`, saying why): the ids are sealed, not stored, so
//!   the gateway holds no list of a client's tasks, and an upstream's list mixes every
//!   client's tasks; `capabilities.tasks` says so by having no `list`;
//! - an upstream's `notifications/tasks/status` about a task reaches only the session it was
//!   handed to, under that session's id (`augmented_status.rs`; the route is recorded
//!   here as the task is handed out); a client may still poll `tasks/get`, or wait on
//!   `tasks/result`;
//! - a listed tool carries its upstream's `execution.taskSupport` only for a client reached
//!   through a front, and only for a server that declared task-augmented calls.

use mcp_harness_runtime::CallReply;
use mcp_harness_runtime::transport::wire::TaskSupport;
use rmcp::model::{CustomRequest, CustomResult, ErrorCode, JsonObject, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::augmented_front::{
    AUGMENTED_CALL, AUGMENTED_CANCEL, AUGMENTED_GET, Front, TOOL_TASKS, declares_augmented,
    serves_augmented,
};
use super::call::{Failure, downstream_normalized, downstream_result, refusal, upstream_error};
use super::{Listed, Session};
use crate::task_ids::{Route, TaskKind, UpstreamTask};

/// The longest an `initialize` that declared SEP-1686 tasks waits for the upstreams to settle.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// The protocol's methods whose params rmcp reads into its own types, with the shape they take.
/// rmcp hands such a request here, as a custom one, only when its params did not fit. Not the
/// methods 2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`,
/// `resources/subscribe`/`unsubscribe`): a stateless request for one reaches here as well, and
/// must be `-32601` (SEP-2575).
const SHAPES: &[(&str, &str)] = &[
    ("tools/call", "`name`, a string, and `arguments`, an object"),
    (
        "prompts/get",
        "`name`, a string, and `arguments`, an object of strings",
    ),
    ("resources/read", "`uri`, a string"),
    (
        "completion/complete",
        "`ref` (a prompt or a resource template) and `argument` {name, value}",
    ),
    ("tools/list", "an optional `cursor`, a string"),
    ("prompts/list", "an optional `cursor`, a string"),
    ("resources/list", "an optional `cursor`, a string"),
    ("resources/templates/list", "an optional `cursor`, a string"),
    (
        "subscriptions/listen",
        "`notifications`, an object naming the notifications to send",
    ),
    ("server/discover", "no params of its own besides `_meta`"),
    ("tasks/get", "`taskId`, a string"),
    (
        "tasks/update",
        "`taskId`, a string, and `inputResponses`, an object",
    ),
    ("tasks/cancel", "`taskId`, a string"),
    ("skills/list", "an optional `cursor`, a string"),
    ("skills/get", "`uri`, a string"),
    (
        "resources/directory/read",
        "`uri`, a string, and an optional `cursor`, a string",
    ),
];

/// The methods 2026-07-28 removed, with their shape: `-32602` for malformed params only in a
/// session of an era that has them.
const SESSION_SHAPES: &[(&str, &str)] = &[
    (
        "logging/setLevel",
        "`level`, one of debug, info, notice, warning, error, critical, alert, emergency",
    ),
    ("resources/subscribe", "`uri`, a string"),
    ("resources/unsubscribe", "`uri`, a string"),
];

/// `-32602` for a protocol method whose params are not the protocol's shape (rmcp could not
/// read them, and handed the request on as an unknown one): never "method not found". The
/// params are not quoted (an argument may be a secret). `in_session`: the client opened a
/// session with `initialize`, whose era has the methods 2026-07-28 removed.
fn malformed(method: &str, in_session: bool) -> Option<McpError> {
    let (_, shape) = SHAPES
        .iter()
        .chain(SESSION_SHAPES.iter().filter(|_| in_session))
        .find(|(known, _)| *known == method)?;
    Some(McpError::invalid_params(
        format!(
            "the params of `{method}` do not have the protocol's shape ({shape}); nothing was done"
        ),
        None,
    ))
}

impl Session {
    /// The custom requests the gateway serves: the SEP-1686 ones (see the module doc).
    pub(super) async fn augmented_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let params = request.params.clone().unwrap_or_else(|| json!({}));
        let in_session = context
            .peer
            .peer_info()
            .is_some_and(|info| info.protocol_version.has_initialize());
        if self.declares(&request.method)
            && let Some(error) = malformed(&request.method, in_session)
        {
            return Err(error);
        }
        // Only a 2025-11-25 request through the front speaks SEP-1686 (`tasks/result` is a
        // removed method for SEP-2663 clients: -32601, like any unknown one).
        let front = self.through_front(&context);
        let answer = match request.method.as_str() {
            _ if !front => {
                return Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("method not found: {}", request.method),
                    None,
                ));
            }
            AUGMENTED_CALL => self.augmented_call(params, context).await?,
            AUGMENTED_GET => self.task_request("tasks/get", &params, &context).await?,
            AUGMENTED_CANCEL => self.task_request("tasks/cancel", &params, &context).await?,
            "tasks/result" => self.task_request("tasks/result", &params, &context).await?,
            "tasks/list" => {
                return Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    "tasks/list is not served by this gateway: it keeps no record of the tasks it hands out (their ids are sealed, not stored), and an upstream's list holds every client's tasks; keep the ids tools/call returned, and follow each with tasks/get or tasks/result",
                    None,
                ));
            }
            other => {
                return Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("method not found: {other}"),
                    None,
                ));
            }
        };
        Ok(CustomResult(answer))
    }

    /// Whether the gateway declares `method`'s extension to this client (always, for a method
    /// of the protocol's core): a malformed request for a method it does not declare is
    /// `-32601`, like a well-formed one.
    fn declares(&self, method: &str) -> bool {
        match method {
            "tasks/get" | "tasks/update" | "tasks/cancel" => self.shared().serves_tasks(),
            "skills/list" | "skills/get" => self.skills_capability().is_some(),
            "resources/directory/read" => self
                .skills_capability()
                .is_some_and(|skills| skills.directory_read),
            _ => true,
        }
    }

    /// A task-augmented `tools/call`: the upstream's task under a gateway id, or the refusal
    /// or result the governed path gave.
    async fn augmented_call(
        &self,
        params: Value,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let mut params = match params {
            Value::Object(params) => params,
            _ => {
                return Err(McpError::invalid_params(
                    "tools/call: params must be an object",
                    None,
                ));
            }
        };
        let task = match params.remove("task") {
            Some(Value::Object(task)) => task,
            _ => {
                return Err(McpError::invalid_params(
                    "tools/call: `task` must be an object (e.g. {\"ttl\": 60000})",
                    None,
                ));
            }
        };
        let request: rmcp::model::CallToolRequestParams =
            serde_json::from_value(Value::Object(params))
                .map_err(|e| McpError::invalid_params(format!("tools/call: {e}"), None))?;
        let tool = request.name.to_string();
        let owner = super::tasks::owner(&context);
        let (called, attempt, _) = self.governed_call(request, context, Some(task)).await?;
        let result = match (attempt, called) {
            (Ok(CallReply::Task(created)), Some(called)) => {
                return Ok(self.downstream_created(&called, created, &owner));
            }
            (Ok(CallReply::Done(result)), _) => downstream_result(result),
            (Ok(_), _) => {
                return Err(McpError::internal_error(
                    "the server answered the task-augmented call with neither a task nor a result",
                    None,
                ));
            }
            (Err(Failure::Call(error)), _) => match refusal(&tool, error)? {
                rmcp::model::CallToolResponse::Complete(result) => result,
                _ => {
                    return Err(McpError::internal_error(
                        "a refusal that is not a tool result",
                        None,
                    ));
                }
            },
            (Err(Failure::Rpc(error)), _) => return Err(error),
            (Err(Failure::Stale(text)), _) => {
                rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(text)])
            }
        };
        Ok(legacy_result(
            serde_json::to_value(result).unwrap_or_default(),
        ))
    }

    /// The upstream's task (made by `called`'s server), as the client sees it: the 2025-11-25
    /// `CreateTaskResult` under a gateway id bound to the client.
    fn downstream_created(
        &self,
        called: &super::call::Called,
        created: rmcp::model::CreateTaskResult,
        owner: &crate::task_ids::Owner,
    ) -> Value {
        let upstream = UpstreamTask {
            server: called.server.clone(),
            task_id: created.task.task_id.clone(),
            tool: Some(called.tool.clone()),
            generation: crate::task_ids::generation(&self.runtime().snapshot(), &called.server),
        };
        let id = self
            .shared()
            .task_ids
            .issue_kind(TaskKind::Augmented, &upstream, owner);
        self.shared().task_ids.routes.insert(
            &upstream,
            Route {
                session: self.state.id,
                id: id.clone(),
            },
        );
        let task = serde_json::to_value(&created.task).unwrap_or_default();
        let timing = self
            .runtime()
            .task_timing(&upstream.server, &upstream.task_id);
        let mut out = json!({ "task": legacy_task(&task, &id, timing) });
        if let Some(meta) = created.meta {
            let mut meta = serde_json::to_value(meta).unwrap_or_default();
            translate_related(&mut meta, &upstream.task_id, &id);
            out["_meta"] = meta;
        }
        out
    }

    /// `tasks/get`, `tasks/result` or `tasks/cancel` about the client's task `params.taskId`,
    /// sent to the owning server under its own id; the answer under the client's id.
    async fn task_request(
        &self,
        method: &str,
        params: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let id = params
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                McpError::invalid_params(format!("{method}: `taskId` is missing"), None)
            })?;
        let owner = super::tasks::owner(context);
        let task_ids = &self.shared().task_ids;
        let task = task_ids
            .open_kind(TaskKind::Augmented, id, &owner)
            .ok_or_else(|| {
                let message = match task_ids.open(id, &owner) {
                    // This client's task, of the tasks extension: another method follows it.
                    Some(_) => format!(
                        "this task was made under the tasks extension (SEP-2663), not MCP 2025-11-25's tasks: follow it with tasks/get (and tasks/cancel), not {method}"
                    ),
                    None => "unknown task id: not a task this client created through this gateway (or it was issued under a session key no longer configured)".to_string(),
                };
                McpError::invalid_params(message, None)
            })?;
        if task.outlived(&self.runtime().snapshot()) {
            return Err(task.gone());
        }
        let mut upstream = JsonObject::new();
        upstream.insert("taskId".into(), task.task_id.clone().into());
        // A task's own requests (elicitation, sampling) arrive while tasks/result waits: they
        // reach this client, the one that asked.
        let in_flight = self.shared().bridge.enter_task(
            &task.server,
            crate::bridge::Caller::of(context),
            Some(task.task_id.clone()),
        );
        let sent = self.runtime().augmented_task_request_as(
            &task.server,
            method,
            upstream,
            Some(in_flight.tag()),
        );
        let mut answer = crate::bridge::as_caller(crate::bridge::Caller::of(context), sent)
            .await
            .map_err(|e| super::tasks::task_error(upstream_error(e), &task.task_id, id))?;
        if let Some(meta) = answer.get_mut("_meta") {
            translate_related(meta, &task.task_id, id);
        }
        Ok(if method == "tasks/result" {
            legacy_result(self.finished(&task, answer))
        } else {
            let meta = answer.get("_meta").cloned();
            let timing = self.runtime().task_timing(&task.server, &task.task_id);
            let mut out = legacy_task(&answer, id, timing);
            if let Some(meta) = meta {
                out["_meta"] = meta;
            }
            out
        })
    }

    /// A task's final result, as a plain call's result would reach the client: checked and
    /// cleaned (R30), over the output budget stored with a summary in its place (R31). As it
    /// came when the task's tool is not known (an id sealed before it was kept) or the answer
    /// is not a tool result.
    pub(super) fn finished(&self, task: &UpstreamTask, result: Value) -> Value {
        let Some(tool) = &task.tool else {
            return result;
        };
        let Ok(parsed) = <rmcp::model::CallToolResult as serde::Deserialize>::deserialize(&result)
        else {
            return result;
        };
        let normalized = self
            .runtime()
            .finish_task_result(&task.server, tool, parsed);
        // What the tool result type does not hold (`resultType` of 2026-07-28) stays.
        let result_type = result.get("resultType").cloned();
        let mut out = serde_json::to_value(downstream_normalized(normalized)).unwrap_or(result);
        if let (Some(kind), Some(object)) = (result_type, out.as_object_mut()) {
            object.insert("resultType".into(), kind);
        }
        out
    }

    /// At `initialize`: tells the stdio front the session's version; for a client that
    /// declared something the gateway declares only once an upstream does — SEP-1686 tasks,
    /// the tasks (SEP-2663) or skills (SEP-2640) extension — while none does yet, waits (at
    /// most [`SETTLE`]) until one does or every server has settled, so the answer's
    /// capabilities say what the upstreams serve (a stdio host initialises while they still
    /// connect, and capabilities are fixed at `initialize`).
    pub(super) async fn augmented_initialize(
        &self,
        request: &rmcp::model::InitializeRequestParams,
        context: &RequestContext<RoleServer>,
    ) {
        if let Some(lines) = &self.state.lines {
            lines.initialized(request.protocol_version.as_str());
        }
        let extensions = request.capabilities.extensions.as_ref();
        let wants = |id: &str| extensions.is_some_and(|e| e.contains_key(id));
        let (augmented, tasks, skills) = (
            declares_augmented(context),
            wants(rmcp::model::TASKS_EXTENSION_ID),
            wants(rmcp::model::SKILLS_EXTENSION_ID),
        );
        let missing = || {
            (augmented && !serves_augmented(self.shared()))
                || (tasks && !self.shared().serves_tasks())
                || (skills && self.skills_capability().is_none())
        };
        if !missing() {
            return;
        }
        self.runtime()
            .wait_for(SETTLE, |snapshot| {
                !missing() || snapshot.servers.values().all(|s| s.state.is_settled())
            })
            .await;
    }

    /// Whether the request came through a front: the HTTP one (a 2025-11-25 request while an
    /// upstream declares task-augmented calls) or the stdio one (a request it read as such).
    fn through_front(&self, context: &RequestContext<RoleServer>) -> bool {
        let http = context
            .extensions
            .get::<axum::http::request::Parts>()
            .is_some_and(|parts| parts.extensions.get::<Front>().is_some());
        http || self
            .state
            .lines
            .as_ref()
            .is_some_and(|lines| lines.front_request(&context.id))
    }

    /// Marks, for a client reached through a front, each listed tool of a server that
    /// declared task-augmented calls with its `execution.taskSupport` (the front shows it).
    pub(super) fn mark_task_tools(
        &self,
        context: &RequestContext<RoleServer>,
        listed: &Listed,
        tools: &mut [Tool],
    ) {
        if !self.through_front(context) {
            return;
        }
        let snapshot = listed.binding.snapshot();
        for tool in tools {
            let Some(entry) = listed
                .view
                .resolve(&tool.name)
                .and_then(|name| snapshot.tool(name))
            else {
                continue;
            };
            if !self.runtime().task_tool_calls(&entry.server) {
                continue;
            }
            let support = match self
                .runtime()
                .tool_task_support(&entry.server, &entry.raw_name)
            {
                TaskSupport::Required => "required",
                TaskSupport::Optional => "optional",
                TaskSupport::Forbidden => continue,
            };
            tool.meta
                .get_or_insert_with(Default::default)
                .0
                .insert(TOOL_TASKS.into(), support.into());
        }
    }
}

/// A task in the 2025-11-25 shape, under `id`, from a task in either shape (rmcp's encoding
/// says `ttlMs` and `pollIntervalMs`), its `ttl` and `pollInterval` as the server sent them
/// (`timing`: rmcp's decoding of a 2025-11-25 task drops both) where known.
fn legacy_task(
    task: &Value,
    id: &str,
    timing: Option<mcp_harness_runtime::transport::wire::TaskTiming>,
) -> Value {
    let field = |names: &[&str]| names.iter().find_map(|n| task.get(*n)).cloned();
    let timing = timing.unwrap_or_default();
    let ttl = (timing.ttl).or_else(|| field(&["ttl", "ttlMs"]));
    let mut out = json!({
        "taskId": id,
        "status": field(&["status"]).unwrap_or_else(|| "working".into()),
        "createdAt": field(&["createdAt"]).unwrap_or_default(),
        "lastUpdatedAt": field(&["lastUpdatedAt"]).unwrap_or_default(),
        "ttl": ttl.unwrap_or(Value::Null),
    });
    if let Some(message) = field(&["statusMessage"]) {
        out["statusMessage"] = message;
    }
    let interval = (timing.poll_interval).or_else(|| field(&["pollInterval", "pollIntervalMs"]));
    if let Some(interval) = interval.filter(|v| !v.is_null()) {
        out["pollInterval"] = interval;
    }
    out
}

/// A result as a 2025-11-25 client reads it (no `resultType`, which that version lacks).
fn legacy_result(mut result: Value) -> Value {
    if let Some(object) = result.as_object_mut() {
        object.remove("resultType");
    }
    result
}

/// Rewrites a related-task `_meta` entry naming task `from` to name `to`.
pub(super) fn translate_related(meta: &mut Value, from: &str, to: &str) {
    if let Some(meta) = meta.as_object_mut() {
        super::tasks::translate_related(meta, from, to);
    }
}

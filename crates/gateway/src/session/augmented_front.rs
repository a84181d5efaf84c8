//! The Streamable HTTP front of SEP-1686 pass-through (task-augmented requests of MCP
//! 2025-11-25): the few wire fields rmcp's typed model has no place for, translated at the
//! `/mcp` endpoint so the session handler can serve them. The translation itself
//! ([`translate_request`], [`translate_answer`]) is shared with the stdio front
//! ([`super::augmented_lines`]).
//!
//! rmcp 3.11 models only the tasks extension (SEP-2663): it drops a client's
//! `capabilities.tasks` and a `tools/call`'s `task` parameter when it decodes them, has no
//! `capabilities.tasks` to send and no `execution` on a tool, and answers `tasks/get` and
//! `tasks/cancel` only under the extension. So, for a 2025-11-25 client once some upstream
//! has declared task-augmented `tools/call` (from then on, for as long as the gateway runs:
//! [`serves_augmented`]):
//! - in: `initialize`'s `capabilities.tasks` moves to `capabilities.experimental` under
//!   [`CLIENT_TASKS`] (kept with the session); a `tools/call` with `task` becomes the custom
//!   request [`AUGMENTED_CALL`], and a `tasks/get` / `tasks/cancel` about a SEP-1686 id (it
//!   starts with [`AUGMENTED_PREFIX`]), or one that cannot be a tasks-extension id, or none,
//!   becomes [`AUGMENTED_GET`] / [`AUGMENTED_CANCEL`]:
//!   rmcp hands custom requests to the handler with their parameters untouched;
//! - out: the `initialize` answer gains `capabilities.tasks` (`cancel` and
//!   `requests.tools.call`; no `list`: see the handler), and a tool the handler marked with
//!   [`TOOL_TASKS`] in its `_meta` gets that value as `execution.taskSupport`.
//!
//! Invariants:
//! - any other request, and every request until an upstream has declared task-augmented
//!   calls, passes untouched without its body being read;
//! - a rewritten request keeps its JSON-RPC id, so the client's answer is the one it awaits;
//!   only the method name and the two fields above change, never a value;
//! - bodies are read only up to [`MAX_BODY`]; a larger one passes untouched.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::Shared;
pub(crate) use crate::task_ids::AUGMENTED_PREFIX;

/// Where a 2025-11-25 client's `capabilities.tasks` is kept (in `capabilities.experimental`).
pub(crate) const CLIENT_TASKS: &str = "mcp-harness/sep-1686-tasks";
/// The `_meta` key of a listed tool under which the handler puts its `execution.taskSupport`.
pub(crate) const TOOL_TASKS: &str = "mcp-harness/sep-1686-taskSupport";
/// A task-augmented `tools/call`, as the handler receives it.
pub(crate) const AUGMENTED_CALL: &str = "mcp-harness/sep-1686/tools/call";
/// `tasks/get` about a SEP-1686 task, as the handler receives it.
pub(crate) const AUGMENTED_GET: &str = "mcp-harness/sep-1686/tasks/get";
/// `tasks/cancel` about a SEP-1686 task, as the handler receives it.
pub(crate) const AUGMENTED_CANCEL: &str = "mcp-harness/sep-1686/tasks/cancel";

/// The largest request or answer body read.
pub(crate) const MAX_BODY: usize = 16 * 1024 * 1024;

/// The protocol version whose task-augmented requests are translated.
pub(crate) const VERSION: &str = "2025-11-25";

/// Put in a request's extensions when this front is in place: the handler marks task tools
/// in its listing only then (no one else would turn the mark into `execution`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Front;

/// Put in a call's extensions when its client asked for a task (SEP-1686 `task`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AugmentedCall;

/// Whether a POST to `/mcp` with `headers` goes through this front: a 2025-11-25 request (an
/// `initialize` may name no version) with a body of known length up to [`MAX_BODY`], once an
/// upstream has declared task-augmented calls ([`serves_augmented`]).
pub(crate) fn in_front(headers: &axum::http::HeaderMap, shared: &Shared) -> bool {
    let in_session = headers.contains_key(&crate::SESSION_ID);
    let version = headers
        .get(&crate::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    // An `initialize` comes without a session; a 2025-11-25 session names its version.
    let candidate = if in_session {
        version == Some(VERSION)
    } else {
        version.is_none_or(|v| v == VERSION)
    };
    let small = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| len <= MAX_BODY);
    candidate && small && serves_augmented(shared)
}

/// Whether the request's client declared `capabilities.tasks` (SEP-1686) at `initialize`.
pub(crate) fn declares_augmented(context: &RequestContext<RoleServer>) -> bool {
    context.peer.peer_info().is_some_and(|info| {
        info.capabilities
            .experimental
            .as_ref()
            .is_some_and(|experimental| experimental.contains_key(CLIENT_TASKS))
    })
}

/// Whether this call's client asked for a task (a SEP-1686 `task` parameter).
pub(crate) fn asks_task(context: &RequestContext<RoleServer>) -> bool {
    context.extensions.get::<AugmentedCall>().is_some()
}

/// The `-32601` a task-only tool called plainly, or a task-augmented call of a tool that
/// takes none, is refused with (what the spec has the server answer).
pub(crate) fn not_as_task(message: String) -> McpError {
    McpError::new(ErrorCode::METHOD_NOT_FOUND, message, None)
}

/// Whether some connected upstream declares task-augmented `tools/call`, or one did since the
/// gateway started ([`Shared::augmented_declared`]: a task id outlives its server's connection).
pub(crate) fn serves_augmented(shared: &Shared) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    if shared.augmented_declared.load(Relaxed) {
        return true;
    }
    let snapshot = shared.runtime.snapshot();
    let live = snapshot
        .catalogs
        .keys()
        .any(|server| shared.runtime.task_tool_calls(server));
    if live {
        shared.augmented_declared.store(true, Relaxed);
    }
    live
}

/// What the answer of a translated request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Answer {
    #[default]
    Untouched,
    /// An `initialize` answer: declare `capabilities.tasks`.
    Initialize,
    /// A `tools/list` answer: turn the handler's marks into `execution.taskSupport`.
    ToolsList,
}

/// One request message as the handler should get it: the translation both fronts (this
/// layer, and the stdio lines of [`super::augmented_lines`]) apply.
#[derive(Debug, Default)]
pub(crate) struct Translated {
    /// The rewritten message; `None`: pass the original bytes untouched.
    pub(crate) rewritten: Option<Vec<u8>>,
    /// What its answer needs.
    pub(crate) answer: Answer,
    /// The request's JSON-RPC id when the handler serves it as a SEP-1686 request (a
    /// `tools/list`, a renamed request, `tasks/result`, `tasks/list`), or its answer is edited.
    pub(crate) front_id: Option<Value>,
}

impl Translated {
    /// Whether the request and its answer pass this front unchanged.
    pub(crate) fn untouched(&self) -> bool {
        self.rewritten.is_none() && self.answer == Answer::Untouched
    }
}

/// The middleware (see the module doc).
pub(crate) async fn layer(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.uri().path() != "/mcp" || request.method() != Method::POST {
        return next.run(request).await;
    }
    let in_session = request.headers().contains_key(&crate::SESSION_ID);
    if !in_front(request.headers(), &shared) {
        return next.run(request).await;
    }
    request.extensions_mut().insert(Front);
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "the request body could not be read\n",
        )
            .into_response();
    };
    let translated = translate_request(&bytes, in_session);
    let bytes = translated.rewritten.map_or(bytes, axum::body::Bytes::from);
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await;
    match translated.answer {
        Answer::Untouched => response,
        answer => rewrite_answer(response, answer).await,
    }
}

/// The request message `bytes` (one JSON-RPC message) as the handler should get it, and what
/// its answer needs; `in_session`: the message is not the session's first (`initialize`).
/// Read only when it names one of the methods translated.
pub(crate) fn translate_request(bytes: &[u8], in_session: bool) -> Translated {
    let untouched = Translated::default;
    // Built once: `memmem::find` builds its searcher on every call.
    static NEEDLES: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 3]> =
        std::sync::LazyLock::new(|| {
            [&b"\"initialize\""[..], b"\"task", b"\"tools/list\""].map(memchr::memmem::Finder::new)
        });
    let interesting = NEEDLES.iter().any(|needle| needle.find(bytes).is_some());
    if !interesting {
        return untouched();
    }
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(bytes) else {
        return untouched();
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params");
    let id = message.get("id").cloned();
    let (renamed, answer) = match method {
        "initialize" if !in_session => {
            let asks = params
                .and_then(|p| p.get("protocolVersion"))
                .and_then(Value::as_str)
                == Some(VERSION);
            if !asks {
                return untouched();
            }
            let capabilities = message
                .get_mut("params")
                .and_then(|p| p.get_mut("capabilities"))
                .and_then(Value::as_object_mut);
            if let Some(capabilities) = capabilities
                && let Some(tasks) = capabilities.remove("tasks")
            {
                let experimental = capabilities
                    .entry("experimental")
                    .or_insert_with(|| json!({}));
                if let Some(experimental) = experimental.as_object_mut() {
                    experimental.insert(CLIENT_TASKS.into(), tasks);
                }
            }
            (None, Answer::Initialize)
        }
        "tools/list" if in_session => {
            return Translated {
                rewritten: None,
                answer: Answer::ToolsList,
                front_id: id,
            };
        }
        "tasks/result" | "tasks/list" if in_session => {
            return Translated {
                front_id: id,
                ..untouched()
            };
        }
        "tools/call" if in_session && params.and_then(|p| p.get("task")).is_some() => {
            (Some(AUGMENTED_CALL), Answer::Untouched)
        }
        "tasks/get" | "tasks/cancel" if in_session => {
            // A SEP-1686 id, or one that cannot be a tasks extension's (a sealed id, long and
            // base64url), or none: the SEP-1686 handler answers (an unknown id is -32602, a
            // missing one says so); rmcp, with no extension tasks, answered -32601 "tasks/get".
            let ours = match params.and_then(|p| p.get("taskId")).and_then(Value::as_str) {
                Some(id) => id.starts_with(AUGMENTED_PREFIX) || !could_be_extension_id(id),
                None => true,
            };
            if !ours {
                return untouched();
            }
            let renamed = if method == "tasks/get" {
                AUGMENTED_GET
            } else {
                AUGMENTED_CANCEL
            };
            (Some(renamed), Answer::Untouched)
        }
        _ => return untouched(),
    };
    if let Some(renamed) = renamed {
        message.insert("method".into(), renamed.into());
    }
    match serde_json::to_vec(&message) {
        Ok(rewritten) => Translated {
            rewritten: Some(rewritten),
            answer,
            front_id: id,
        },
        Err(_) => untouched(),
    }
}

/// Shorter than any task id of the tasks extension (sealed, [`crate::task_ids`]): a 12-byte
/// nonce, a 16-byte tag and a serialized upstream task (17 bytes at the least), in base64url.
const MIN_EXTENSION_ID: usize = 48;

/// Whether `id` may be a task id of the tasks extension (SEP-2663) this gateway handed out.
fn could_be_extension_id(id: &str) -> bool {
    id.len() >= MIN_EXTENSION_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The answer message `json` (one JSON-RPC message) as the client should get it, after a
/// request that needed `answer`; `None`: pass it untouched (nothing to change, or not JSON).
pub(crate) fn translate_answer(answer: Answer, json: &str) -> Option<String> {
    let edit: fn(&mut Value) -> bool = match answer {
        Answer::Untouched => return None,
        Answer::Initialize => declare_tasks,
        Answer::ToolsList => show_task_support,
    };
    let mut value = serde_json::from_str::<Value>(json).ok()?;
    if !edit(&mut value) {
        return None;
    }
    serde_json::to_string(&value).ok()
}

/// `response` with [`translate_answer`] applied to every JSON-RPC message in it (a JSON body,
/// or the `data:` lines of an event stream). An answer that cannot be read whole is a 500.
async fn rewrite_answer(response: Response, answer: Answer) -> Response {
    if !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the answer could not be read\n",
        )
            .into_response();
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut changed = false;
    let mut edit_json = |json: &str| -> Option<String> {
        let edited = translate_answer(answer, json)?;
        changed = true;
        Some(edited)
    };
    let event_stream = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let out = if event_stream {
        let mut out = String::with_capacity(text.len() + 64);
        for line in text.split_inclusive('\n') {
            let (content, end) = match line.strip_suffix('\n') {
                Some(content) => (content, "\n"),
                None => (line, ""),
            };
            match content.strip_prefix("data:") {
                Some(data) => match edit_json(data.trim_start()) {
                    Some(edited) => {
                        out.push_str("data: ");
                        out.push_str(&edited);
                        out.push_str(end);
                    }
                    None => out.push_str(line),
                },
                None => out.push_str(line),
            }
        }
        out
    } else {
        edit_json(&text).unwrap_or_else(|| text.into_owned())
    };
    if !changed {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(out))
}

/// Declares `capabilities.tasks` (2025-11-25 shape) in an `initialize` result.
fn declare_tasks(message: &mut Value) -> bool {
    let Some(capabilities) = message
        .pointer_mut("/result/capabilities")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    capabilities.insert(
        "tasks".into(),
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
    );
    true
}

/// Moves each listed tool's [`TOOL_TASKS`] mark to `execution.taskSupport`.
fn show_task_support(message: &mut Value) -> bool {
    let Some(tools) = message
        .pointer_mut("/result/tools")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let mut changed = false;
    for tool in tools {
        let Some(meta) = tool.get_mut("_meta").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(support) = meta.remove(TOOL_TASKS) else {
            continue;
        };
        if meta.is_empty()
            && let Some(tool) = tool.as_object_mut()
        {
            tool.remove("_meta");
        }
        tool["execution"] = json!({ "taskSupport": support });
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(message: Value, in_session: bool) -> Value {
        let bytes = serde_json::to_vec(&message).unwrap();
        let out = translate_request(&bytes, in_session)
            .rewritten
            .unwrap_or(bytes);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn requests_are_renamed_only_where_they_are_sep_1686() {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "t", "task": {"ttl": 1000}}});
        let out = translated(call.clone(), true);
        assert_eq!(out["method"], AUGMENTED_CALL);
        assert_eq!(out["id"], 7);
        assert_eq!(out["params"], call["params"]);
        let plain = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "task_tool"}});
        assert_eq!(translated(plain.clone(), true), plain);
        let get = |id: &str| {
            json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/get",
            "params": {"taskId": id}})
        };
        let ours = format!("{AUGMENTED_PREFIX}abc");
        assert_eq!(translated(get(&ours), true)["method"], AUGMENTED_GET);
        // An id that cannot be the extension's (too short, not base64url) is answered as a
        // SEP-1686 one: unknown, -32602 (rmcp answered -32601 "tasks/get").
        assert_eq!(translated(get("abc"), true)["method"], AUGMENTED_GET);
        let extension = "A".repeat(MIN_EXTENSION_ID);
        assert_eq!(translated(get(&extension), true)["method"], "tasks/get");
        let none = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {}});
        assert_eq!(translated(none, true)["method"], AUGMENTED_CANCEL);
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"tasks": {"list": {}}},
            "clientInfo": {"name": "c", "version": "1"}}});
        let out = translated(init, false);
        assert_eq!(
            out["params"]["capabilities"]["experimental"][CLIENT_TASKS],
            json!({"list": {}})
        );
        assert!(out["params"]["capabilities"].get("tasks").is_none());
    }

    #[test]
    fn marks_become_execution() {
        let mut list = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "a", "_meta": {TOOL_TASKS: "required"}},
            {"name": "b", "_meta": {TOOL_TASKS: "optional", "other": 1}},
            {"name": "c"}
        ]}});
        assert!(show_task_support(&mut list));
        let tools = &list["result"]["tools"];
        assert_eq!(
            tools[0],
            json!({"name": "a", "execution": {"taskSupport": "required"}})
        );
        assert_eq!(tools[1]["_meta"], json!({"other": 1}));
        assert_eq!(tools[1]["execution"]["taskSupport"], "optional");
        assert_eq!(tools[2], json!({"name": "c"}));
    }
}

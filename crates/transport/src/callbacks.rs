//! Requests a server sends to the client — elicitation (form and URL), sampling, roots — and
//! the embedder's answers to them.
//!
//! Invariants: a capability is declared to servers only when the embedder answers it; a form
//! elicitation the user accepted gets the schema's `default` for every field the answer left
//! out (SEP-1034), so a server never sees a missing field it declared a default for; nothing is
//! answered on the user's behalf without the embedder; a request's [`RequestOrigin`] names a
//! call only when the request is known to belong to it (it arrived on that call's response
//! stream, or the runtime itself asked it within that call) — never by guess.

// Sampling and roots are deprecated by SEP-2577 but servers of every earlier protocol use them.
#![allow(deprecated)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::RequestId;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ListRootsResult,
};
use serde_json::Value;

/// A boxed, sendable future.
pub type CallbackFuture<T> = Pin<Box<dyn Future<Output = Result<T, ErrorData>> + Send>>;

/// What the embedder can answer. Every method has a default that refuses (method not found),
/// and [`ClientCallbacks::supports`] must say which are really implemented. The runtime
/// calls them, and polls their futures, on its own workers (`HarnessClient::
/// with_callback_runtime`), by default never on a server connection's thread: a callback that
/// blocks stalls no server, but holds one of two workers while it does — prefer awaiting.
pub trait ClientCallbacks: Send + Sync + 'static {
    /// Which requests this embedder answers (declared as client capabilities).
    fn supports(&self) -> Supported;

    /// `elicitation/create`: ask the user. For a form, return `Accept` with the content (missing
    /// fields with a schema default are filled in afterwards), `Decline` or `Cancel`. For URL
    /// mode, open or show the URL and return `Accept` once the user went there.
    fn elicit(&self, server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let _ = (server, request);
        Box::pin(async {
            Err(ErrorData::method_not_found::<
                rmcp::model::ElicitationCreateRequestMethod,
            >())
        })
    }

    /// `sampling/createMessage`: run the model on the server's behalf.
    fn sample(
        &self,
        server: &str,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        let _ = (server, request);
        Box::pin(async {
            Err(ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >())
        })
    }

    /// `roots/list`: the directories the user lets servers work in.
    fn roots(&self, server: &str) -> CallbackFuture<ListRootsResult> {
        let _ = server;
        Box::pin(async { Ok(ListRootsResult::default()) })
    }

    /// The table in which the runtime records which of the embedder's calls (the tag given as
    /// `CallOptions::caller`) each of its in-flight requests belongs to, so that
    /// [`RequestOrigin::caller`] can be filled in. `None` (the default): nothing is recorded
    /// and `caller` is `None` unless the runtime asked the request itself within a call.
    fn call_tags(&self) -> Option<&CallTags> {
        None
    }

    /// As [`Self::elicit`], knowing where the request came from. The default ignores `origin`
    /// and calls [`Self::elicit`].
    fn elicit_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: ElicitRequestParams,
    ) -> CallbackFuture<ElicitResult> {
        let _ = origin;
        self.elicit(server, request)
    }

    /// As [`Self::sample`], knowing where the request came from. The default ignores `origin`
    /// and calls [`Self::sample`].
    fn sample_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        let _ = origin;
        self.sample(server, request)
    }

    /// As [`Self::roots`], knowing where the request came from. The default ignores `origin`
    /// and calls [`Self::roots`].
    fn roots_from(&self, server: &str, origin: &RequestOrigin) -> CallbackFuture<ListRootsResult> {
        let _ = origin;
        self.roots(server)
    }

    /// `notifications/elicitation/complete`: the out-of-band flow of `server`'s URL-mode
    /// elicitation `elicitation_id` finished (the user did what the page asked). Called on the
    /// connection's own task: return at once. The default does nothing.
    fn elicitation_complete(&self, server: &str, elicitation_id: &str) {
        let _ = (server, elicitation_id);
    }
}

/// Where a server's request (elicitation, sampling, roots) came from, as far as the client
/// knows. Every field `None`: nothing is known (a stdio server's request, one on the
/// Streamable HTTP standalone GET stream, that names no task).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestOrigin {
    /// The id of our request on whose Streamable HTTP response stream the server's request
    /// arrived (rmcp's `InboundStreamOrigin::OutboundRequest`).
    pub request: Option<RequestId>,
    /// The tag of the embedder's call the request belongs to (`CallOptions::caller`): the call
    /// that sent [`request`](Self::request), as recorded in [`ClientCallbacks::call_tags`], or
    /// the call within which the runtime itself asks (an `input_required` round, a task's
    /// input request).
    pub caller: Option<u64>,
    /// The server's task the request says it belongs to (its
    /// `_meta["io.modelcontextprotocol/related-task"].taskId`, SEP-1686 / SEP-2663): what ties
    /// a task's input request to the task when nothing else does (a stdio server's request
    /// while the task's `tasks/result` is awaited).
    pub related_task: Option<String>,
}

/// The `_meta` key naming the task a message belongs to (SEP-1686 / SEP-2663).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The task id `meta` names under [`RELATED_TASK`], if any.
pub fn related_task(meta: &rmcp::model::JsonObject) -> Option<String> {
    meta.get(RELATED_TASK)?
        .get("taskId")?
        .as_str()
        .map(str::to_string)
}

/// Which call of the embedder each in-flight request of the runtime belongs to, per server.
///
/// Invariants: an entry lives exactly as long as the [`TagGuard`] its registration returned
/// (the runtime drops it when its call ends, however it ends), so the table holds at most the
/// requests in flight; a lookup ([`CallTags::caller`]) first waits for every registration under
/// way, so a server's request never overtakes the registration of the request it arrived with;
/// a (server, id) registered twice at once (two connections of one server reusing an id)
/// resolves to no tag rather than to either.
#[derive(Clone, Default)]
pub struct CallTags {
    inner: Arc<TagsInner>,
}

type TagKey = (Arc<str>, RequestId);

#[derive(Default)]
struct TagsInner {
    /// foldhash: looked up twice on every call (SipHash cost ~1k instructions a call).
    entries: Mutex<HashMap<TagKey, Vec<u64>, foldhash::quality::RandomState>>,
    /// Registrations under way hold the read side from before their request is sent until it
    /// is recorded; a lookup takes the write side first.
    sending: Arc<tokio::sync::RwLock<()>>,
}

impl std::fmt::Debug for CallTags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = self.inner.entries.lock().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("CallTags").field("entries", &len).finish()
    }
}

impl CallTags {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a registration: call it before sending the request, then
    /// [`Registration::finish`] with the request's id once sent. Lookups wait meanwhile.
    pub async fn begin(&self) -> Registration {
        Registration {
            inner: self.inner.clone(),
            _sending: self.inner.sending.clone().read_owned().await,
        }
    }

    /// The tag of the call whose request `id` to `server` is in flight, if one was registered.
    pub async fn caller(&self, server: &str, id: &RequestId) -> Option<u64> {
        drop(self.inner.sending.write().await);
        let entries = self.inner.entries.lock().ok()?;
        match entries.get(&(Arc::from(server), id.clone()))?.as_slice() {
            [tag] => Some(*tag),
            _ => None,
        }
    }

    /// How many requests are registered now.
    pub fn len(&self) -> usize {
        self.inner.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// Whether no request is registered now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A registration under way ([`CallTags::begin`]); dropping it unfinished records nothing.
pub struct Registration {
    inner: Arc<TagsInner>,
    _sending: tokio::sync::OwnedRwLockReadGuard<()>,
}

impl Registration {
    /// Records request `id` to `server` as one of the call tagged `tag`, until the returned
    /// guard drops.
    pub fn finish(self, server: &str, id: RequestId, tag: u64) -> TagGuard {
        let key: TagKey = (Arc::from(server), id);
        if let Ok(mut entries) = self.inner.entries.lock() {
            entries.entry(key.clone()).or_default().push(tag);
        }
        TagGuard {
            inner: self.inner.clone(),
            key,
            tag,
        }
    }
}

/// Keeps one request's entry in [`CallTags`]; removes it when dropped.
pub struct TagGuard {
    inner: Arc<TagsInner>,
    key: TagKey,
    tag: u64,
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        let Ok(mut entries) = self.inner.entries.lock() else {
            return;
        };
        if let Some(tags) = entries.get_mut(&self.key) {
            if let Some(at) = tags.iter().position(|t| *t == self.tag) {
                tags.swap_remove(at);
            }
            if tags.is_empty() {
                entries.remove(&self.key);
            }
        }
    }
}

/// The requests an embedder answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Supported {
    /// Form elicitation (`elicitation.form`).
    pub elicitation_form: bool,
    /// URL elicitation (`elicitation.url`).
    pub elicitation_url: bool,
    /// Sampling (`sampling/createMessage`).
    pub sampling: bool,
    /// Roots (`roots/list`).
    pub roots: bool,
}

/// Shared callbacks, as the handler holds them.
pub type Callbacks = Arc<dyn ClientCallbacks>;

/// Fills in, for an accepted form, the `default` of every schema property the content lacks.
pub fn apply_form_defaults(
    request: &ElicitRequestParams,
    mut result: ElicitResult,
) -> ElicitResult {
    let ElicitRequestParams::FormElicitationParams {
        requested_schema, ..
    } = request
    else {
        return result;
    };
    if result.action != ElicitationAction::Accept {
        return result;
    }
    let Ok(schema) = serde_json::to_value(requested_schema) else {
        return result;
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return result;
    };
    let content = result
        .content
        .get_or_insert_with(|| Value::Object(Default::default()));
    let Some(answer) = content.as_object_mut() else {
        return result;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            answer
                .entry(name.clone())
                .or_insert_with(|| default.clone());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(schema: Value) -> ElicitRequestParams {
        serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": "m",
            "requestedSchema": schema
        }))
        .expect("valid elicitation")
    }

    fn accept(content: Value) -> ElicitResult {
        serde_json::from_value(serde_json::json!({"action": "accept", "content": content}))
            .expect("result")
    }

    #[test]
    fn defaults_fill_only_missing_fields_of_accepted_forms() {
        let request = form(serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer", "default": 36},
                "email": {"type": "string"}
            }
        }));
        let filled = apply_form_defaults(&request, accept(serde_json::json!({"age": 40})));
        assert_eq!(
            filled.content,
            Some(serde_json::json!({"name": "Ada", "age": 40}))
        );
        let declined: ElicitResult =
            serde_json::from_value(serde_json::json!({"action": "decline"})).expect("result");
        assert_eq!(apply_form_defaults(&request, declined.clone()), declined);
    }
}

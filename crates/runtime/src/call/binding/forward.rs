//! What a gateway forwards of its own client's request to the upstream untouched: a SEP-2322
//! retry (`inputResponses`, `requestState`) and the client's declared capabilities (SEP-2575
//! per-request `_meta`), so the upstream itself decides what it may ask of that client.
//!
//! It also carries a 2025-11-25 client's `task` parameter (SEP-1686): the call then goes to a
//! server that declared task-augmented `tools/call` with that parameter, and the server's task
//! comes back to the caller ([`CallReply::Task`](super::CallReply::Task)) instead of followed.
//!
//! Invariant: the runtime never reads, checks nor rewrites what it forwards; the upstream that
//! issued a `requestState` verifies it.

use rmcp::model::{ClientCapabilities, InputResponses, JsonObject, RequestMetaObject};

/// A downstream client's part of one request, sent upstream as the client gave it (the
/// default: nothing — the runtime's own session context applies).
#[derive(Debug, Clone, Default)]
pub struct Forwarded {
    /// `inputResponses` of a retry after an `input_required` answer (sent only on a session
    /// of 2026-07-28 or later, as all of this).
    pub input_responses: Option<InputResponses>,
    /// `requestState` of a retry, echoed byte for byte.
    pub request_state: Option<String>,
    /// The client's `io.modelcontextprotocol/clientCapabilities`, sent in place of the
    /// runtime's own on a 2026-07-28 session (an older session has no per-request
    /// capabilities: nothing of it is sent there). What the upstream may ask of the client
    /// (elicitation, sampling, roots) is the client's; the extensions the runtime itself takes
    /// part in (it follows tasks, reads skills) are added to it.
    pub client_capabilities: Option<ClientCapabilities>,
    /// The `task` parameter of a 2025-11-25 client's task-augmented `tools/call` (SEP-1686,
    /// e.g. `{"ttl": 60000}`), sent as given when the server declared
    /// `capabilities.tasks.requests.tools.call` and the tool's `execution.taskSupport` is not
    /// `forbidden`; the server's task is then handed back as
    /// [`CallReply::Task`](super::CallReply::Task) (its SEP-1686 fields in rmcp's task shape:
    /// `ttl` as `ttl_ms`, `pollInterval` as `poll_interval_ms`). Elsewhere it is ignored and
    /// the call runs as without it.
    pub task: Option<JsonObject>,
}

impl Forwarded {
    /// Whether nothing is forwarded.
    pub fn is_empty(&self) -> bool {
        self.input_responses.is_none()
            && self.request_state.is_none()
            && self.client_capabilities.is_none()
            && self.task.is_none()
    }

    /// The `_meta` entries that replace the session's own on the request, if any.
    pub(crate) fn meta(&self) -> Option<RequestMetaObject> {
        let mut capabilities = self.client_capabilities.clone()?;
        let extensions = capabilities.extensions.get_or_insert_default();
        for id in mcp_harness_transport::handler::EXTENSIONS {
            extensions.entry(id.to_string()).or_default();
        }
        let mut meta = RequestMetaObject::new();
        meta.set_client_capabilities(capabilities);
        Some(meta)
    }
}

//! Requests a server sends to the client — elicitation (form and URL), sampling, roots — and
//! the embedder's answers to them.
//!
//! Invariants: a capability is declared to servers only when the embedder answers it; a form
//! elicitation the user accepted gets the schema's `default` for every field the answer left
//! out (SEP-1034), so a server never sees a missing field it declared a default for; nothing is
//! answered on the user's behalf without the embedder.

// Sampling and roots are deprecated by SEP-2577 but servers of every earlier protocol use them.
#![allow(deprecated)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::ErrorData;
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

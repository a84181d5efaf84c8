//! Tools that ask the client something (`--client-requests`): `ask_form` sends a form
//! elicitation whose schema has every field kind the protocol allows, `ask_roots` asks for the
//! client's roots, `ask_sample` asks the client to run its model, `ask_url` sends a URL-mode
//! elicitation and, once answered, `notifications/elicitation/complete` for it. Each returns, as one text
//! block of JSON, exactly what the client answered — or the error it answered with — so a test
//! sees what reached the server.
//!
//! Invariant: the fixture never interprets the answer; it reports it as received, with the
//! number of `notifications/roots/list_changed` this server got so far and what its own
//! `roots/list`, asked on the last of them outside any call, got.

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResult, ServerRequest, Tool},
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{FixtureServer, text_result};

/// Names of the tools listed with `--client-requests`, in listing order.
pub const CLIENT_REQUEST_TOOL_NAMES: [&str; 4] = ["ask_form", "ask_roots", "ask_sample", "ask_url"];

/// The `requestedSchema` of `ask_form`: strings with and without constraints, an integer, a
/// number, a boolean, a titled and an untitled single-select enum and a multi-select. Written
/// in an order that is not alphabetical, but rmcp sends requests through a `serde_json::Value`,
/// so the client receives the properties sorted by name.
pub const FORM_SCHEMA: &str = r#"{
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Full name",
                 "description": "How we address you", "minLength": 2},
        "age": {"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
        "ratio": {"type": "number", "title": "Ratio", "description": "Between 0 and 1",
                  "minimum": 0, "maximum": 1, "default": 0.5},
        "subscribe": {"type": "boolean", "title": "Subscribe", "default": false},
        "color": {"type": "string", "title": "Color", "oneOf": [
            {"const": "r", "title": "Red"},
            {"const": "g", "title": "Green"},
            {"const": "b", "title": "Blue"}
        ]},
        "size": {"type": "string", "enum": ["s", "m", "l"], "default": "m"},
        "tags": {"type": "array", "title": "Tags", "minItems": 1,
                 "items": {"type": "string", "enum": ["x", "y", "z"]}}
    },
    "required": ["name", "age", "color", "tags"]
}"#;

/// The `elicitationId` of `ask_url`'s elicitation.
pub const URL_ELICITATION_ID: &str = "fixture-url-flow";

/// The tools' definitions.
pub(crate) fn client_request_tools() -> Vec<Tool> {
    let schema = |v: Value| std::sync::Arc::new(v.as_object().cloned().unwrap_or_default());
    vec![
        Tool::new(
            "ask_form",
            "Asks the client to fill in a form with every field kind; returns its answer as JSON.",
            schema(json!({"type": "object", "properties": {
                "message": {"type": "string", "description": "The question"}}})),
        ),
        Tool::new(
            "ask_roots",
            "Asks the client for its roots; returns them and how many roots/list_changed arrived.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "ask_sample",
            "Asks the client to run its model (sampling/createMessage); returns its answer or error.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "ask_url",
            "Asks the client to open a page (URL-mode elicitation), then says the flow completed.",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ]
}

impl FixtureServer {
    /// Runs one of [`CLIENT_REQUEST_TOOL_NAMES`]; `None` for another name.
    pub(crate) async fn client_request_call(
        &self,
        name: &str,
        message: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResult, McpError>> {
        // Decoded from text, so the schema's properties keep their order.
        let request = match name {
            "ask_form" => format!(
                r#"{{"method": "elicitation/create", "params": {{"mode": "form",
                    "message": {}, "requestedSchema": {FORM_SCHEMA}}}}}"#,
                Value::String(message.unwrap_or_else(|| "Tell us about you".into()))
            ),
            "ask_roots" => r#"{"method": "roots/list"}"#.to_string(),
            "ask_url" => json!({"method": "elicitation/create", "params": {
                "mode": "url", "message": "Open the page to go on",
                "url": "https://example.com/flow", "elicitationId": URL_ELICITATION_ID,
            }})
            .to_string(),
            "ask_sample" => json!({"method": "sampling/createMessage", "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
                "maxTokens": 10,
            }})
            .to_string(),
            _ => return None,
        };
        let request: ServerRequest = match serde_json::from_str(&request) {
            Ok(r) => r,
            Err(e) => return Some(Err(McpError::internal_error(e.to_string(), None))),
        };
        let answer = match context.peer.send_request(request).await {
            Ok(result) => json!({"result": serde_json::to_value(result).unwrap_or(Value::Null)}),
            Err(rmcp::service::ServiceError::McpError(e)) => {
                json!({"error": {"code": e.code.0, "message": e.message}})
            }
            Err(e) => json!({"error": {"message": e.to_string()}}),
        };
        if name == "ask_url" {
            // The out-of-band flow ended: the client is told which elicitation it was.
            let complete = rmcp::model::ServerNotification::CustomNotification(
                rmcp::model::CustomNotification::new(
                    "notifications/elicitation/complete",
                    Some(json!({"elicitationId": URL_ELICITATION_ID})),
                ),
            );
            let _ = context.peer.send_notification(complete).await;
        }
        let mut answer = answer;
        let state = self.lock();
        answer["rootsListChanged"] = json!(state.roots_changed);
        answer["rootsAfterChange"] = json!(state.roots_after_change);
        Some(Ok(text_result(answer.to_string())))
    }
}

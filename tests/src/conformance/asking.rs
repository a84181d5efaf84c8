//! Asking the client on the caller's request: a request to the client mid-call (every version
//! before 2026-07-28), or, on a 2026-07-28 session, the same request as an `input_required`
//! round whose retry carries the answer.
//!
//! Invariant: one input request per round, under [`CLIENT_REQUEST`]; a client that cannot
//! answer is reported in the tool's text, never answered on its behalf.

use rmcp::model::{CallToolResponse, ClientResult, ServerRequest};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use super::mrtr;
use super::{text, tool_result};

/// The key under which a 2026-07-28 request's one input request is asked and answered.
pub(super) const CLIENT_REQUEST: &str = "client_request";

/// Sends `request` (a `ServerRequest` as JSON) to the client on the caller's request and
/// returns the client's result as JSON. A 2026-07-28 session has no requests to the client:
/// there the request is asked as an `input_required` round (the `Err`), and the retry's
/// answer (`responses`) is the result.
pub(super) async fn ask_client(
    context: &RequestContext<RoleServer>,
    responses: &serde_json::Map<String, Value>,
    request: Value,
) -> Result<Result<Value, String>, rmcp::model::InputRequiredResult> {
    let version = context
        .meta
        .protocol_version()
        .or_else(|| context.peer.peer_info().map(|i| i.protocol_version.clone()));
    if version.is_some_and(|v| !v.has_initialize()) {
        if let Some(answer) = responses.get(CLIENT_REQUEST) {
            return Ok(Ok(answer.clone()));
        }
        return match mrtr::input_required(json!({ CLIENT_REQUEST: request }), None) {
            Ok(needed) => Err(needed),
            Err(e) => Ok(Err(e.message.to_string())),
        };
    }
    Ok(ask_peer(context, request).await)
}

/// Sends `request` to the client mid-call (every version before 2026-07-28).
async fn ask_peer(context: &RequestContext<RoleServer>, request: Value) -> Result<Value, String> {
    let request: ServerRequest = serde_json::from_value(request).map_err(|e| e.to_string())?;
    let result: ClientResult = context
        .peer
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::to_value(result).map_err(|e| e.to_string())
}

/// Elicits with `message` and `schema`; the tool's text reports the client's answer.
pub(super) async fn elicit(
    context: &RequestContext<RoleServer>,
    responses: &serde_json::Map<String, Value>,
    message: &str,
    schema: Value,
    label: &str,
) -> Result<CallToolResponse, McpError> {
    let answer = ask_client(
        context,
        responses,
        json!({
            "method": "elicitation/create",
            "params": { "message": message, "requestedSchema": schema }
        }),
    )
    .await;
    let answer = match answer {
        Ok(answer) => answer,
        Err(needed) => return Ok(needed.into()),
    };
    let line = match answer {
        Ok(result) => format!(
            "{label}: action={}, content={}",
            result["action"].as_str().unwrap_or_default(),
            result.get("content").cloned().unwrap_or_else(|| json!({}))
        ),
        Err(error) => format!("Elicitation not supported or error: {error}"),
    };
    tool_result(vec![text(line)])
}

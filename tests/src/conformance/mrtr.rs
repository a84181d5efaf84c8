//! The SEP-2322 multi-round tools (protocol 2026-07-28): instead of asking the client
//! mid-call, a tool answers `resultType: "input_required"` with `inputRequests` (and usually a
//! `requestState`), and the client calls again with `inputResponses` and that state.
//!
//! Invariants:
//! - The server keeps nothing between rounds: everything it needs comes back in
//!   `requestState`.
//! - States that must not be forged (`tampered_state`, `capabilities`) carry a keyed SipHash
//!   tag under a key drawn once per process; an altered state is refused with -32602, never
//!   trusted.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, GetPromptResponse, InputRequiredResult,
    ReadResourceResponse, ReadResourceResult,
};
use serde_json::{Map, Value, json};

use super::{complete, decode, text, tool_result};

/// The multi-round tools, as listed.
pub(super) const TOOLS: &[(&str, &str)] = &[
    (
        "test_input_required_result_elicitation",
        "MRTR: returns InputRequiredResult with elicitation request",
    ),
    (
        "test_input_required_result_sampling",
        "MRTR: returns InputRequiredResult with sampling request",
    ),
    (
        "test_input_required_result_list_roots",
        "MRTR: returns InputRequiredResult with roots/list request",
    ),
    (
        "test_input_required_result_request_state",
        "MRTR: returns InputRequiredResult with requestState",
    ),
    (
        "test_input_required_result_multiple_inputs",
        "MRTR: returns InputRequiredResult with multiple input requests",
    ),
    (
        "test_input_required_result_multi_round",
        "MRTR: multi-round InputRequiredResult workflow",
    ),
    (
        "test_input_required_result_tampered_state",
        "MRTR: HMAC-signed requestState integrity test",
    ),
    (
        "test_input_required_result_capabilities",
        "MRTR: respects client capabilities in inputRequests",
    ),
];

/// The multi-round prompt.
pub(super) const PROMPT: &str = "test_input_required_result_prompt";

/// The multi-round resource (ours; the suite has no resource scenario): `resources/read` asks
/// for a section (elicitation), then for the client's roots (`roots/list`), then answers.
pub(super) const RESOURCE: &str = "test://input-required-resource";

/// What one round of a multi-round tool received.
pub(super) struct Round<'a> {
    /// `inputResponses`, as JSON (empty when absent).
    pub(super) responses: Map<String, Value>,
    /// `requestState`, verbatim.
    pub(super) state: Option<&'a str>,
    /// The capabilities the request declared.
    pub(super) capabilities: Option<ClientCapabilities>,
}

/// The `inputResponses` of a request; each answer must be a result object (SEP-2322: a
/// malformed one is a protocol error, -32602, never silently read as "no answer").
pub(super) fn responses(
    given: Option<rmcp::model::InputResponses>,
) -> Result<Map<String, Value>, McpError> {
    let given = given.unwrap_or_default();
    if let Some((key, _)) = given.iter().find(|(_, v)| !v.is_object()) {
        return Err(McpError::invalid_params(
            format!("inputResponses.{key} must be an object (the client's result)"),
            None,
        ));
    }
    Ok(given.into_iter().collect())
}

pub(super) fn elicit(message: &str, field: &str, kind: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { field: { "type": kind } },
                "required": [field]
            }
        }
    })
}

fn sample(prompt: &str, max_tokens: u32) -> Value {
    json!({
        "method": "sampling/createMessage",
        "params": {
            "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
            "maxTokens": max_tokens
        }
    })
}

pub(super) fn input_required(
    requests: Value,
    state: Option<String>,
) -> Result<InputRequiredResult, McpError> {
    let mut result = json!({ "resultType": "input_required", "inputRequests": requests });
    if let Some(state) = state {
        result["requestState"] = json!(state);
    }
    decode(result)
}

fn nonce() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A field of an elicitation answer's `content` (`"unknown"` when missing).
pub(super) fn answer_text(response: Option<&Value>, field: &str) -> String {
    response
        .and_then(|r| r["content"][field].as_str())
        .unwrap_or("unknown")
        .to_owned()
}

fn key() -> &'static std::collections::hash_map::RandomState {
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    KEY.get_or_init(std::collections::hash_map::RandomState::new)
}

fn tag(data: &str) -> String {
    let mut hasher = key().build_hasher();
    hasher.write(data.as_bytes());
    format!("{:016x}", hasher.finish())
}

/// `{"data": JSON, "tag": keyed hash of data}`.
fn sign(payload: Value) -> String {
    let data = payload.to_string();
    json!({ "tag": tag(&data), "data": data }).to_string()
}

/// The payload of a state made by [`sign`], or None if it was altered.
fn verify(state: &str) -> Option<Value> {
    let outer: Value = serde_json::from_str(state).ok()?;
    let data = outer["data"].as_str()?;
    (outer["tag"].as_str()? == tag(data)).then(|| serde_json::from_str(data).ok())?
}

fn plain_state(state: Option<&str>) -> Option<Value> {
    state.and_then(|s| serde_json::from_str(s).ok())
}

/// Runs multi-round tool `name`; None if `name` is not one of [`TOOLS`].
pub(super) fn call(name: &str, round: &Round<'_>) -> Option<Result<CallToolResponse, McpError>> {
    let responses = &round.responses;
    let done = |line: String| tool_result(vec![text(line)]);
    let ask =
        |requests: Value, state: Option<String>| input_required(requests, state).map(Into::into);
    let result = match name {
        "test_input_required_result_elicitation" => match responses.get("user_name") {
            Some(r) => done(format!("Hello, {}!", answer_text(Some(r), "name"))),
            None => ask(
                json!({ "user_name": elicit("What is your name?", "name", "string") }),
                None,
            ),
        },
        "test_input_required_result_sampling" => match responses.get("sample_request") {
            Some(r) => done(format!(
                "Sampling result: {}",
                r["content"]["text"].as_str().unwrap_or("no response")
            )),
            None => ask(
                json!({ "sample_request": sample("What is the capital of France?", 100) }),
                None,
            ),
        },
        "test_input_required_result_list_roots" => match responses.get("roots_request") {
            Some(r) => done(format!(
                "Found {} root(s)",
                r["roots"].as_array().map_or(0, Vec::len)
            )),
            None => ask(
                json!({ "roots_request": { "method": "roots/list", "params": {} } }),
                None,
            ),
        },
        "test_input_required_result_request_state" => {
            let state = plain_state(round.state);
            let ok = responses
                .get("confirm")
                .is_some_and(|r| r["content"]["ok"] == json!(true));
            if state.is_some_and(|s| s["kind"] == "request-state") && ok {
                done("state-ok: requestState validated".into())
            } else {
                ask(
                    json!({ "confirm": elicit("Please confirm", "ok", "boolean") }),
                    Some(json!({ "kind": "request-state", "nonce": nonce() }).to_string()),
                )
            }
        }
        "test_input_required_result_multiple_inputs" => {
            let state = plain_state(round.state);
            let all = ["user_name", "greeting", "client_roots"]
                .iter()
                .all(|k| responses.contains_key(*k));
            if all && state.is_some_and(|s| s["kind"] == "multiple-inputs") {
                done(format!(
                    "Name: {}; Greeting: {}; Roots: {}",
                    answer_text(responses.get("user_name"), "name"),
                    responses["greeting"]["content"]["text"]
                        .as_str()
                        .unwrap_or("Hello there!"),
                    responses["client_roots"]["roots"]
                        .as_array()
                        .map_or(0, Vec::len)
                ))
            } else {
                ask(
                    json!({
                        "user_name": elicit("What is your name?", "name", "string"),
                        "greeting": sample("Generate a greeting", 50),
                        "client_roots": { "method": "roots/list", "params": {} }
                    }),
                    Some(json!({ "kind": "multiple-inputs", "nonce": nonce() }).to_string()),
                )
            }
        }
        "test_input_required_result_multi_round" => {
            let state = plain_state(round.state).unwrap_or(Value::Null);
            let step1 = || {
                ask(
                    json!({ "step1": elicit("Step 1: What is your name?", "name", "string") }),
                    Some(json!({ "round": 1, "nonce": nonce() }).to_string()),
                )
            };
            match (state["round"].as_u64(), responses.get("step1"), responses.get("step2")) {
                (Some(1), Some(r), _) => ask(
                    json!({ "step2": elicit("Step 2: What is your favorite color?", "color", "string") }),
                    Some(json!({ "round": 2, "name": answer_text(Some(r), "name"), "nonce": nonce() }).to_string()),
                ),
                (Some(2), _, Some(r)) => done(format!(
                    "Multi-round complete for {} who likes {}",
                    state["name"].as_str().unwrap_or("friend"),
                    answer_text(Some(r), "color")
                )),
                _ => step1(),
            }
        }
        "test_input_required_result_tampered_state" => match round.state {
            Some(state) => match verify(state) {
                None => Err(McpError::invalid_params(
                    "requestState integrity check failed",
                    None,
                )),
                Some(v) if v["kind"] == "tamper-test" && responses.contains_key("confirm") => {
                    done("integrity-ok: state verified".into())
                }
                Some(_) => ask(
                    json!({ "confirm": elicit("Please confirm", "ok", "boolean") }),
                    Some(sign(json!({ "kind": "tamper-test", "nonce": nonce() }))),
                ),
            },
            None => ask(
                json!({ "confirm": elicit("Please confirm", "ok", "boolean") }),
                Some(sign(json!({ "kind": "tamper-test", "nonce": nonce() }))),
            ),
        },
        "test_input_required_result_capabilities" => {
            let caps = round.capabilities.clone().unwrap_or_default();
            let mut requests = Map::new();
            if caps.elicitation.is_some() {
                requests.insert(
                    "elicit_input".into(),
                    elicit("Elicitation input", "value", "string"),
                );
            }
            if caps.sampling.is_some() {
                requests.insert("sample_input".into(), sample("Sample request", 50));
            }
            if !responses.is_empty() {
                let keys: Vec<&str> = responses.keys().map(String::as_str).collect();
                done(format!("capabilities-ok: received {}", keys.join(",")))
            } else if requests.is_empty() {
                done("No supported capabilities declared".into())
            } else {
                ask(
                    Value::Object(requests),
                    Some(sign(
                        json!({ "kind": "capabilities-test", "nonce": nonce() }),
                    )),
                )
            }
        }
        _ => return None,
    };
    Some(result)
}

/// An elicitation answer that is not `accept`: refused with -32602 naming the action, so a
/// decline or cancel is never read as an empty answer.
fn refuse_unless_accepted(what: &str, response: &Value) -> Result<(), McpError> {
    match response["action"].as_str() {
        Some("accept") => Ok(()),
        action => Err(McpError::invalid_params(
            format!(
                "{what} needs the user's answer; the elicitation was answered {}",
                action.unwrap_or("without an action")
            ),
            None,
        )),
    }
}

/// The multi-round prompt: asks for a context first, then uses it (a declined or cancelled
/// elicitation is refused).
pub(super) fn prompt(round: &Round<'_>) -> Result<GetPromptResponse, McpError> {
    match round.responses.get("user_context") {
        Some(r) => {
            refuse_unless_accepted(PROMPT, r)?;
            let result: rmcp::model::GetPromptResult = complete(json!({ "messages": [{
                "role": "user",
                "content": text(format!("Prompt with context: {}", answer_text(Some(r), "context")))
            }]}))?;
            Ok(result.into())
        }
        None => Ok(input_required(
            json!({ "user_context": elicit("What context should the prompt use?", "context", "string") }),
            None,
        )?
        .into()),
    }
}

/// The multi-round resource: round 1 asks `section` (elicitation; a decline or cancel is
/// refused), round 2 asks `roots` (`roots/list`) with the section in `requestState`, round 3
/// answers `Section <section> of <n> root(s)`.
pub(super) fn resource(round: &Round<'_>) -> Result<ReadResourceResponse, McpError> {
    let state = plain_state(round.state).unwrap_or(Value::Null);
    let responses = &round.responses;
    match (state["section"].as_str(), responses.get("section"), responses.get("roots")) {
        (Some(section), _, Some(roots)) => {
            let result: ReadResourceResult = complete(json!({ "contents": [{
                "uri": RESOURCE, "mimeType": "text/plain",
                "text": format!("Section {section} of {} root(s)",
                                roots["roots"].as_array().map_or(0, Vec::len))
            }]}))?;
            Ok(result.into())
        }
        (None, Some(answer), _) => {
            refuse_unless_accepted(RESOURCE, answer)?;
            let section = answer_text(Some(answer), "section");
            Ok(input_required(
                json!({ "roots": { "method": "roots/list", "params": {} } }),
                Some(json!({ "section": section, "nonce": nonce() }).to_string()),
            )?
            .into())
        }
        _ => Ok(input_required(
            json!({ "section": elicit("Which section should the resource show?", "section", "string") }),
            None,
        )?
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_state_survives_only_unaltered() {
        let state = sign(json!({ "kind": "tamper-test", "nonce": 1 }));
        assert_eq!(
            verify(&state),
            Some(json!({ "kind": "tamper-test", "nonce": 1 }))
        );
        let forged = state.replace("tamper-test", "tamper-tesT");
        assert_eq!(verify(&forged), None);
        assert_eq!(verify("{\"data\":\"{}\"}"), None);
    }
}

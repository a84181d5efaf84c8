//! Results a broken or hostile server sends (`--bad-results`): text with terminal escape
//! sequences, `structuredContent` that violates the tool's own `outputSchema`, an image whose
//! data is not base64. The client must flag or clean each, never pass it on as if all was well.
//!
//! Invariant: each tool always answers the same bytes, so tests can assert on them.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

/// The text `ansi_text` answers: an escape sequence that clears the screen, colours, a bell, a
/// carriage return that would overwrite the line, a newline and a tab.
pub const ANSI_TEXT: &str = "before\u{1b}[2J\u{1b}[31mred\u{1b}[0m\u{7}\rover\nline\ttab\u{9b}end";

fn object(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// The tools, in listing order.
pub fn bad_result_tools() -> Vec<Tool> {
    let none = || object(json!({"type": "object", "properties": {}}));
    vec![
        Tool::new(
            "ansi_text",
            "Answers text with terminal escape sequences.",
            none(),
        ),
        Tool::new(
            "bad_structured",
            "Declares an outputSchema (n: integer) and answers n as a string.",
            none(),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))),
        Tool::new(
            "bad_structured_error",
            "Declares the same outputSchema and answers a tool error whose structured content \
             breaks it.",
            none(),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))),
        Tool::new(
            "bad_image",
            "Answers an image whose data is not base64.",
            none(),
        ),
    ]
}

/// The answer of `name`, if it is one of these tools.
pub fn call(name: &str) -> Option<CallToolResult> {
    Some(match name {
        "ansi_text" => CallToolResult::success(vec![ContentBlock::text(ANSI_TEXT)]),
        "bad_structured" => {
            let mut result = CallToolResult::success(vec![ContentBlock::text("n is one")]);
            result.structured_content = Some(json!({"n": "one"}));
            result
        }
        "bad_structured_error" => {
            let mut result = CallToolResult::error(vec![ContentBlock::text("failed: n is one")]);
            result.structured_content = Some(json!({"n": "one"}));
            result
        }
        "bad_image" => CallToolResult::success(vec![ContentBlock::image(
            "this is not base64!",
            "image/png",
        )]),
        _ => return None,
    })
}

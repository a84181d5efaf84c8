//! Static catalogue of the fixture: tool definitions, the `greeting` prompt,
//! the readme resource and the item template, plus argument decoding.
//!
//! Invariant: every tool built here has a description and an `inputSchema` of
//! `type: object`; the names returned by [`static_tools`] are exactly
//! [`STATIC_TOOL_NAMES`]; argument helpers never panic on client input and
//! report bad arguments as `invalid_params` errors.

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError,
    model::{JsonObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool},
};
use serde_json::{Value, json};

/// Uri of the static readme resource.
pub const README_URI: &str = "fixture://static/readme";
/// Text of the static readme resource.
pub const README_TEXT: &str = "fixture readme";
/// Uri template of the item resources.
pub const ITEM_TEMPLATE: &str = "fixture://items/{id}";
const ITEM_PREFIX: &str = "fixture://items/";
/// Largest payload the `large` tool produces (256 MiB).
pub const MAX_LARGE_BYTES: u64 = 256 * 1024 * 1024;

/// Names of the tools that are always present, in listing order.
pub const STATIC_TOOL_NAMES: [&str; 12] = [
    "echo",
    "add",
    "slow",
    "large",
    "fail",
    "add_tool",
    "remove_tool",
    "add_prompt",
    "remove_prompt",
    "add_resource",
    "remove_resource",
    "update_resource",
];

fn object_schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// Schema of an object with the given properties and required keys.
fn props(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    object_schema(json!({
        "type": "object",
        "properties": properties,
        "required": required,
    }))
}

fn string_prop(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// The always-present tools, in listing order.
pub fn static_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "echo",
            "Returns the message unchanged.",
            props(
                json!({ "message": string_prop("Text to echo back") }),
                &["message"],
            ),
        ),
        Tool::new(
            "add",
            "Adds two numbers; returns the sum as text and as structuredContent.sum.",
            props(
                json!({
                    "a": { "type": "number", "description": "First addend" },
                    "b": { "type": "number", "description": "Second addend" },
                }),
                &["a", "b"],
            ),
        )
        .with_raw_output_schema(object_schema(json!({
            "type": "object",
            "properties": { "sum": { "type": "number" } },
            "required": ["sum"],
        }))),
        Tool::new(
            "slow",
            "Sleeps for `ms` milliseconds, reporting progress every 100 ms; honours cancellation.",
            props(
                json!({ "ms": { "type": "integer", "minimum": 0, "description": "Milliseconds to sleep" } }),
                &["ms"],
            ),
        ),
        Tool::new(
            "large",
            "Returns one text block of exactly `bytes` bytes.",
            props(
                json!({ "bytes": {
                    "type": "integer", "minimum": 0, "maximum": MAX_LARGE_BYTES,
                    "description": "Size of the returned text in bytes",
                } }),
                &["bytes"],
            ),
        ),
        Tool::new(
            "fail",
            "Always returns a tool error (isError: true), saying `message` when given.",
            props(json!({"message": string_prop("The error's text")}), &[]),
        ),
        Tool::new(
            "add_tool",
            "Adds a tool that echoes its arguments as JSON; sends tools/list_changed.",
            props(
                json!({
                    "name": string_prop("Name of the new tool"),
                    "description": string_prop("Description of the new tool"),
                }),
                &["name"],
            ),
        ),
        Tool::new(
            "remove_tool",
            "Removes a tool added with add_tool; sends tools/list_changed.",
            props(json!({ "name": string_prop("Tool to remove") }), &["name"]),
        ),
        Tool::new(
            "add_prompt",
            "Adds a prompt; sends prompts/list_changed.",
            props(
                json!({ "name": string_prop("Name of the new prompt") }),
                &["name"],
            ),
        ),
        Tool::new(
            "remove_prompt",
            "Removes a prompt added with add_prompt; sends prompts/list_changed.",
            props(
                json!({ "name": string_prop("Prompt to remove") }),
                &["name"],
            ),
        ),
        Tool::new(
            "add_resource",
            "Adds a text resource; sends resources/list_changed.",
            props(
                json!({
                    "uri": string_prop("Uri of the new resource"),
                    "text": string_prop("Text of the new resource"),
                }),
                &["uri"],
            ),
        ),
        Tool::new(
            "remove_resource",
            "Removes a resource added with add_resource; sends resources/list_changed.",
            props(
                json!({ "uri": string_prop("Uri of the resource to remove") }),
                &["uri"],
            ),
        ),
        Tool::new(
            "update_resource",
            "Replaces a resource's text; notifies subscribers with resources/updated.",
            props(
                json!({
                    "uri": string_prop("Uri of the resource"),
                    "text": string_prop("New text"),
                }),
                &["uri", "text"],
            ),
        ),
    ]
}

/// Definition of the generated tool `tool_{index}`.
pub fn generated_tool(index: usize) -> Tool {
    Tool::new(
        format!("tool_{index}"),
        format!("Generated tool number {index}; returns \"tool_{index}: VALUE\"."),
        props(json!({ "value": string_prop("Value to echo") }), &[]),
    )
}

/// Index of a generated tool name, if `name` is `tool_i` with `i < count`.
pub fn generated_index(name: &str, count: usize) -> Option<usize> {
    let digits = name.strip_prefix("tool_")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|i| *i < count)
}

/// Definition of a tool added at runtime.
pub fn dynamic_tool(name: &str, description: Option<String>) -> Tool {
    Tool::new(
        name.to_owned(),
        description
            .unwrap_or_else(|| format!("Dynamic tool {name}; echoes its arguments as JSON.")),
        object_schema(json!({ "type": "object", "additionalProperties": true })),
    )
}

/// The static `greeting` prompt.
pub fn greeting_prompt() -> Prompt {
    Prompt::new(
        "greeting",
        Some("Greets NAME."),
        Some(vec![
            PromptArgument::new("name")
                .with_description("Who to greet")
                .with_required(true),
        ]),
    )
}

/// Definition of a prompt added at runtime.
pub fn dynamic_prompt(name: &str) -> Prompt {
    Prompt::new(name, Some(format!("Dynamic prompt {name}")), None)
}

/// Listing entry of a text resource.
pub fn text_resource(uri: &str) -> Resource {
    let name = if uri == README_URI { "readme" } else { uri };
    Resource::new(uri, name).with_mime_type("text/plain")
}

/// The `fixture://items/{id}` template.
pub fn item_template() -> ResourceTemplate {
    ResourceTemplate::new(ITEM_TEMPLATE, "item")
        .with_description("Item number ID; reads as \"item ID\".")
        .with_mime_type("text/plain")
}

/// The `id` of an item uri, if `uri` matches the item template.
pub fn item_id(uri: &str) -> Option<&str> {
    uri.strip_prefix(ITEM_PREFIX)
        .filter(|id| !id.is_empty() && !id.contains(['/', '?', '#']))
}

/// Checks a name given to `add_tool` / `add_prompt`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if name.is_empty() || name.len() > 128 || !ok_chars {
        return Err(format!(
            "invalid name {name:?}: use 1-128 characters from A-Z a-z 0-9 _ - ."
        ));
    }
    Ok(())
}

/// Text and JSON number for `a + b`: integral sums print without a fraction.
pub fn sum_value(a: f64, b: f64) -> (String, Value) {
    let sum = a + b;
    if sum.is_finite() && sum.fract() == 0.0 && sum.abs() < 9_007_199_254_740_992.0 {
        // Exact: |sum| < 2^53 and integral.
        let int = sum as i64;
        (int.to_string(), Value::from(int))
    } else {
        (sum.to_string(), json!(sum))
    }
}

/// Exactly `bytes` bytes of repeating ASCII text.
pub fn large_text(bytes: usize) -> String {
    const PATTERN: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz\n";
    PATTERN
        .iter()
        .copied()
        .cycle()
        .take(bytes)
        .map(char::from)
        .collect()
}

/// Client-supplied tool arguments with typed accessors.
pub struct Args<'a>(pub &'a JsonObject);

impl Args<'_> {
    fn bad(key: &str, what: &str) -> McpError {
        McpError::invalid_params(format!("argument {key:?} must be {what}"), None)
    }

    /// A required string argument.
    pub fn string(&self, key: &str) -> Result<String, McpError> {
        self.opt_string(key)?
            .ok_or_else(|| Self::bad(key, "a string (required)"))
    }

    /// An optional string argument.
    pub fn opt_string(&self, key: &str) -> Result<Option<String>, McpError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Self::bad(key, "a string")),
        }
    }

    /// A required number argument.
    pub fn number(&self, key: &str) -> Result<f64, McpError> {
        self.0
            .get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| Self::bad(key, "a number (required)"))
    }

    /// A required non-negative integer argument (`3.0` counts as 3).
    pub fn unsigned(&self, key: &str) -> Result<u64, McpError> {
        let value = self.0.get(key);
        if let Some(n) = value.and_then(Value::as_u64) {
            return Ok(n);
        }
        match value.and_then(Value::as_f64) {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => Ok(f as u64),
            _ => Err(Self::bad(key, "a non-negative integer (required)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_consistent() {
        let tools = static_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, STATIC_TOOL_NAMES);
        for tool in &tools {
            assert!(tool.description.is_some());
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(generated_index("tool_3", 4), Some(3));
        assert_eq!(generated_index("tool_4", 4), None);
        assert_eq!(generated_index("tool_03", 4), None);
        assert_eq!(item_id("fixture://items/42"), Some("42"));
        assert_eq!(item_id("fixture://items/"), None);
        assert_eq!(sum_value(2.0, 3.0), ("5".to_owned(), json!(5)));
        assert_eq!(sum_value(0.5, 1.0).0, "1.5");
        assert_eq!(large_text(1000).len(), 1000);
        assert!(validate_name("ok_name-1.x").is_ok());
        assert!(validate_name("bad name").is_err());
    }
}

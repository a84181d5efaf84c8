//! The tools the conformance scenarios list: their names, descriptions and input schemas,
//! exactly as the scenarios compare them (the SEP-1613 2020-12 schema, the SEP-1034 defaults
//! and SEP-1330 enum elicitation schemas, and the SEP-2322 tools of [`super::mrtr`]).

use serde_json::{Value, json};

use super::mrtr;

/// The JSON Schema 2020-12 input schema of `json_schema_2020_12_tool` (SEP-1613): `$schema`,
/// `$defs`, `$ref`, `$anchor`, `allOf`/`anyOf`, `if`/`then`/`else` must reach clients intact.
pub(super) fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": {
            "properties": { "contactMethod": { "const": "phone" } },
            "required": ["contactMethod"]
        },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

pub(super) fn tools() -> Value {
    let mut all = base_tools();
    if let Value::Array(list) = &mut all {
        list.extend(mrtr::TOOLS.iter().map(|(name, description)| {
            json!({
                "name": name,
                "description": description,
                "inputSchema": { "type": "object", "properties": {} }
            })
        }));
        list.extend(super::tasks::tools());
    }
    all
}

pub(super) fn base_tools() -> Value {
    let empty = json!({ "type": "object", "properties": {} });
    let tool = |name: &str, description: &str| json!({ "name": name, "description": description, "inputSchema": empty });
    let string_arg = |name: &str, description: &str, arg: &str, arg_description: &str| {
        json!({
            "name": name,
            "description": description,
            "inputSchema": {
                "type": "object",
                "properties": { arg: { "type": "string", "description": arg_description } },
                "required": [arg]
            }
        })
    };
    json!([
        tool("test_simple_text", "Tests simple text content response"),
        tool("test_image_content", "Tests image content response"),
        tool("test_audio_content", "Tests audio content response"),
        tool("test_embedded_resource", "Tests embedded resource content response"),
        tool(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)"
        ),
        tool(
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution"
        ),
        tool(
            "test_tool_with_progress",
            "Tests tool that reports progress notifications"
        ),
        tool("test_error_handling", "Tests error response handling"),
        tool("test_missing_capability", "Test tool requiring sampling"),
        tool(
            "test_streaming_elicitation",
            "Diagnostic tool validating response progress streams"
        ),
        tool("test_logging_tool", "Diagnostic logging validator tool"),
        tool(
            "test_trigger_tool_change",
            "Sends tools/list_changed to the open listen streams"
        ),
        tool(
            "test_trigger_prompt_change",
            "Sends prompts/list_changed to the open listen streams"
        ),
        tool(
            "test_reconnection",
            "Tests SSE polling (SEP-1699): answers on the POST stream after its priming event"
        ),
        string_arg(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            "prompt",
            "The prompt to send to the LLM"
        ),
        string_arg(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            "message",
            "The message to show the user"
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034"
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330"
        ),
        {
            "name": "test_custom_header",
            "description": "SEP-2243: its argument travels as the Mcp-Param-Region header too",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "region": { "type": "string", "x-mcp-header": "Region" }
                },
                "required": ["region"]
            }
        },
        {
            "name": "json_schema_2020_12_tool",
            "description": "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            "inputSchema": json_schema_2020_12()
        },
    ])
}

/// The `requestedSchema` of the SEP-1034 defaults elicitation.
pub(super) fn sep1034_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        },
        "required": []
    })
}

/// The `requestedSchema` of the SEP-1330 enums elicitation.
pub(super) fn sep1330_schema() -> Value {
    let titled = |titles: [&str; 3]| -> Value {
        Value::Array(
            titles
                .iter()
                .enumerate()
                .map(|(i, title)| json!({ "const": format!("value{}", i + 1), "title": title }))
                .collect(),
        )
    };
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": titled(["First Option", "Second Option", "Third Option"])
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": { "anyOf": titled(["First Choice", "Second Choice", "Third Choice"]) }
            }
        },
        "required": []
    })
}

//! `call`: one tool call through the runtime, printed for a person (or as JSON).

use mcp_harness_runtime::{CallError, Runtime, ToolResult};
use rmcp::model::{ContentBlock, JsonObject};

/// Parses the arguments given on the command line: a JSON object, or nothing.
pub fn parse_args(text: Option<&str>) -> Result<Option<JsonObject>, String> {
    let Some(text) = text else { return Ok(None) };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(format!("tool arguments must be a JSON object, not {other}")),
        Err(e) => Err(format!("tool arguments are not valid JSON: {e}")),
    }
}

/// Calls `name` and renders the result.
pub async fn run(
    runtime: &Runtime,
    name: &str,
    args: Option<JsonObject>,
    as_json: bool,
) -> Result<(String, bool), CallError> {
    let result = runtime.call_tool(name, args).await?;
    Ok((render(&result, as_json), result.is_error()))
}

/// A result as text: text blocks verbatim, other blocks summarised, structured content as JSON.
pub fn render(result: &ToolResult, as_json: bool) -> String {
    if as_json {
        let mut s = serde_json::to_string_pretty(&result.result).unwrap_or_default();
        s.push('\n');
        return s;
    }
    let mut out = String::new();
    for block in &result.result.content {
        match block {
            ContentBlock::Text(t) => out.push_str(&t.text),
            ContentBlock::Image(i) => out.push_str(&format!(
                "[image {}, {} base64 bytes]",
                i.mime_type,
                i.data.len()
            )),
            ContentBlock::Audio(a) => out.push_str(&format!(
                "[audio {}, {} base64 bytes]",
                a.mime_type,
                a.data.len()
            )),
            ContentBlock::Resource(r) => out.push_str(&format!(
                "[embedded resource {}]",
                serde_json::to_string(&r.resource).unwrap_or_default()
            )),
            ContentBlock::ResourceLink(l) => out.push_str(&format!("[resource link {}]", l.uri)),
            other => out.push_str(&format!(
                "[content {}]",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
        out.push('\n');
    }
    if let Some(structured) = &result.result.structured_content {
        out.push_str("structured content:\n");
        out.push_str(&serde_json::to_string_pretty(structured).unwrap_or_default());
        out.push('\n');
    }
    out
}

//! `skills`, `skill`, `prompt`, `read`: skills, prompts run as commands, and resource contents,
//! rendered for a person (or as JSON).

use std::path::Path;
use std::sync::Arc;

use mcp_harness_catalog::skills::SkillEntry;
use mcp_harness_runtime::LoadedSkill;
use rmcp::model::{GetPromptResult, ReadResourceResult, ResourceContents};
use serde_json::json;

use crate::table::{pretty, render};

/// Skills as a table (server, name, description), or JSON.
pub(crate) fn skills(skills: &[Arc<SkillEntry>], as_json: bool) -> String {
    if as_json {
        return pretty(&json!(skills.iter().map(|s| &**s).collect::<Vec<_>>()));
    }
    let rows: Vec<Vec<String>> = skills
        .iter()
        .map(|s| vec![s.name.clone(), s.server.clone(), s.description.clone()])
        .collect();
    render(&["SKILL", "SERVER", "DESCRIPTION"], &rows)
}

/// A loaded skill: where it came from, then its instructions (JSON: the listing entry and the
/// body).
pub(crate) fn loaded_skill(skill: &LoadedSkill, as_json: bool) -> String {
    if as_json {
        return pretty(&json!({"skill": &*skill.entry, "body": skill.body}));
    }
    format!(
        "skill {} from server {} (verified against the listing)\n\n{}\n",
        skill.entry.name,
        skill.entry.server,
        skill.body.trim_end()
    )
}

/// A prompt's messages, one block per message with its role.
pub(crate) fn prompt(result: &GetPromptResult, as_json: bool) -> String {
    if as_json {
        return pretty(&serde_json::to_value(result).unwrap_or_default());
    }
    let mut out = String::new();
    for message in &result.messages {
        let role = serde_json::to_value(&message.role)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let content = serde_json::to_value(&message.content).unwrap_or_default();
        let text = content
            .get("text")
            .and_then(|t| t.as_str())
            .map(String::from)
            .unwrap_or_else(|| content.to_string());
        out.push_str(&format!("[{role}] {text}\n"));
    }
    out
}

/// Writes resource contents to `path` (a new file or one overwritten): each text as is, each
/// blob decoded from base64, in order. Returns the bytes written.
pub(crate) fn write_contents(result: &ReadResourceResult, path: &Path) -> Result<usize, String> {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    for c in &result.contents {
        match c {
            ResourceContents::TextResourceContents { text, .. } => {
                bytes.extend_from_slice(text.as_bytes())
            }
            ResourceContents::BlobResourceContents { uri, blob, .. } => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(blob.trim())
                    .map_err(|e| {
                        format!("the blob of {uri} is not valid base64 ({e}); nothing was written")
                    })?;
                bytes.extend_from_slice(&decoded);
            }
            other => {
                return Err(format!(
                    "contents of an unknown kind ({}); nothing was written",
                    serde_json::to_string(other).unwrap_or_default()
                ));
            }
        }
    }
    std::fs::write(path, &bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(bytes.len())
}

/// Resource contents: text verbatim, blobs summarised.
pub(crate) fn contents(result: &ReadResourceResult, as_json: bool) -> String {
    if as_json {
        return pretty(&serde_json::to_value(result).unwrap_or_default());
    }
    let mut out = String::new();
    for c in &result.contents {
        match c {
            ResourceContents::TextResourceContents { text, .. } => {
                out.push_str(text);
                out.push('\n');
            }
            ResourceContents::BlobResourceContents {
                uri,
                blob,
                mime_type,
                ..
            } => out.push_str(&format!(
                "[blob {uri}, {}, {} base64 bytes]\n",
                mime_type.as_deref().unwrap_or("unknown type"),
                blob.len()
            )),
            other => out.push_str(&format!(
                "{}\n",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
    }
    out
}

//! `skills`, `skill`, `prompt`, `read`: skills, prompts run as commands, and resource contents,
//! rendered for a person (or as JSON).

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

/// A loaded skill: where it came from, then its instructions.
pub(crate) fn loaded_skill(skill: &LoadedSkill) -> String {
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

//! `skills`, `skill`, `prompt`, `read`: skills, prompts run as commands, and resource contents,
//! rendered for a person (or as JSON).

use std::path::Path;
use std::sync::Arc;

use mcp_harness_catalog::skills::SkillEntry;
use mcp_harness_runtime::LoadedSkill;
use rmcp::model::{GetPromptResult, ReadResourceResult, ResourceContents};
use serde_json::json;

use crate::output;
use crate::table::{pretty, render};

/// Skills as a table (server, name, description), or JSON.
pub(crate) fn skills(skills: &[Arc<SkillEntry>], as_json: bool) -> String {
    if as_json {
        return pretty(&json!(skills.iter().map(|s| &**s).collect::<Vec<_>>()));
    }
    // A name two skills of one server share does not tell them apart: those rows show the
    // skill's URI, which `skill SERVER URI` takes.
    let mut named: std::collections::HashMap<(&str, &str), usize> = Default::default();
    for s in skills {
        *named
            .entry((s.server.as_str(), s.name.as_str()))
            .or_default() += 1;
    }
    let shared = |s: &SkillEntry| named[&(s.server.as_str(), s.name.as_str())] > 1;
    let rows: Vec<Vec<String>> = skills
        .iter()
        .map(|s| {
            let name = if shared(s) { &s.uri } else { &s.name };
            vec![name.clone(), s.server.clone(), s.description.clone()]
        })
        .collect();
    render(&["SKILL", "SERVER", "DESCRIPTION"], &rows)
}

/// A loaded skill: where it came from, then its instructions (JSON: the listing entry and the
/// body).
pub(crate) fn loaded_skill(skill: &LoadedSkill, as_json: bool) -> String {
    if as_json {
        return pretty(&json!({"skill": &*skill.entry, "body": skill.body}));
    }
    // Say what was checked: a dynamic listing gives no digest or size for SKILL.md, and the
    // supporting files are checked only when read.
    let checked = match &skill.entry.files {
        mcp_harness_catalog::skills::ListedFiles::Files(_) => {
            "SKILL.md verified against the listing: size, digest and frontmatter"
        }
        mcp_harness_catalog::skills::ListedFiles::Dynamic => {
            "its frontmatter matches the listing; listed as dynamic, it has no digest to check"
        }
    };
    format!(
        "skill {} from server {} ({checked})\n\n{}\n",
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

/// A blob's bytes, decoded from base64 as the SDKs' clients read it: whitespace anywhere
/// ignored (line-wrapped base64), padding optional.
fn decode_blob(blob: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    let compact: String = blob.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .or_else(|e| {
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(compact.trim_end_matches('='))
                .map_err(|_| e)
        })
}

/// The URI a content part names.
fn content_uri(c: &ResourceContents) -> Option<&str> {
    match c {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => Some(uri),
        _ => None,
    }
}

/// Writes resource contents to `path` (a new file or one overwritten; `-`: standard output):
/// each text as is, each
/// blob decoded from base64, in order. Parts of one resource (all naming the same URI) are
/// joined; contents naming several resources are refused, since one file would glue them
/// together with no way to tell them apart. Returns the bytes written.
pub(crate) fn write_contents(result: &ReadResourceResult, path: &Path) -> Result<usize, String> {
    let uris: Vec<&str> = result.contents.iter().filter_map(content_uri).collect();
    if uris.iter().any(|u| *u != uris[0]) {
        let mut named: Vec<&str> = Vec::new();
        for u in &uris {
            if !named.contains(u) {
                named.push(u);
            }
        }
        let shown = named.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        let more = if named.len() > 5 { ", …" } else { "" };
        return Err(format!(
            "the server returned {} resources ({shown}{more}) and --out writes one file; read one of \
             them by its URI, or use --json to get them all; nothing was written",
            named.len()
        ));
    }
    let mut bytes = Vec::new();
    for c in &result.contents {
        match c {
            ResourceContents::TextResourceContents { text, .. } => {
                bytes.extend_from_slice(text.as_bytes())
            }
            ResourceContents::BlobResourceContents { uri, blob, .. } => {
                let decoded = decode_blob(blob).map_err(|e| {
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
    if path == Path::new("-") {
        // The bytes as they are, for a pipe: the usual meaning of `-`.
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
            // A reader that went away (`| head -c 100`) took what it wanted: no failure, as
            // for every command's output.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(format!("cannot write to standard output: {e}"));
            }
            _ => return Ok(bytes.len()),
        }
    }
    std::fs::write(path, &bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(bytes.len())
}

/// What is wrong with a read's contents, one line each (control characters dropped): a blob
/// that is not base64.
fn faults(result: &ReadResourceResult) -> Vec<String> {
    result
        .contents
        .iter()
        .filter_map(|c| match c {
            ResourceContents::BlobResourceContents { uri, blob, .. } => {
                decode_blob(blob).err().map(|e| blob_fault(uri, &e))
            }
            _ => None,
        })
        .collect()
}

fn blob_fault(uri: &str, e: &base64::DecodeError) -> String {
    let uri: String = uri.chars().filter(|c| !c.is_control()).collect();
    format!("the blob of {uri} is not valid base64 ({e})")
}

/// Resource contents — text verbatim, blobs summarised — and what is wrong with them
/// ([`faults`]), each blob decoded once.
pub(crate) fn contents(result: &ReadResourceResult, as_json: bool) -> (String, Vec<String>) {
    if as_json {
        let shown = pretty(&serde_json::to_value(result).unwrap_or_default());
        return (shown, faults(result));
    }
    let mut found = Vec::new();
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
            } => {
                let kind = mime_type.as_deref().unwrap_or("unknown type");
                out.push_str(&match decode_blob(blob) {
                    Ok(bytes) => format!(
                        "[blob {uri}, {kind}, {}; `--out FILE` writes it]\n",
                        output::count(bytes.len(), "byte")
                    ),
                    Err(e) => {
                        found.push(blob_fault(uri, &e));
                        format!(
                            "[blob {uri}, {kind}: not valid base64 ({e}), {} characters as sent]\n",
                            blob.len()
                        )
                    }
                });
            }
            other => out.push_str(&format!(
                "{}\n",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
    }
    (out, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_result(contents: serde_json::Value) -> ReadResourceResult {
        serde_json::from_value(json!({ "contents": contents })).expect("a read result")
    }

    #[test]
    fn a_printed_blob_shows_its_decoded_size_or_that_it_is_not_base64() {
        let result = read_result(json!([
            {"uri": "x://a", "mimeType": "image/png", "blob": "aGVsbG8="},
            {"uri": "x://b", "blob": "not base64!"},
        ]));
        let (shown, faults) = contents(&result, false);
        assert!(
            shown.contains("[blob x://a, image/png, 5 bytes; `--out FILE` writes it]"),
            "{shown}"
        );
        assert!(
            shown.contains("[blob x://b, unknown type: not valid base64 (")
                && shown.contains("11 characters as sent]"),
            "{shown}"
        );
        assert_eq!(
            faults,
            super::faults(&result),
            "one reading, shown or as JSON"
        );
        assert_eq!(faults.len(), 1, "{faults:?}");
        // Line-wrapped or unpadded base64 is base64 to the SDKs' clients too.
        assert_eq!(decode_blob("aGVs\nbG8=\n").as_deref(), Ok(&b"hello"[..]));
        assert_eq!(decode_blob("aGVsbG8").as_deref(), Ok(&b"hello"[..]));
        assert!(
            faults[0].contains("x://b is not valid base64"),
            "{faults:?}"
        );
    }

    #[test]
    fn out_joins_the_parts_of_one_resource_and_refuses_several_resources() {
        let dir = std::env::temp_dir().join(format!("mcp-harness-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("out.bin");

        let parts = read_result(json!([
            {"uri": "x://a", "text": "hel"},
            {"uri": "x://a", "blob": "bG8="},
        ]));
        assert_eq!(write_contents(&parts, &file), Ok(5));
        assert_eq!(std::fs::read(&file).expect("written"), b"hello");

        let _ = std::fs::remove_file(&file);
        let several = read_result(json!([
            {"uri": "x://a", "text": "one"},
            {"uri": "x://b", "text": "two"},
        ]));
        let e = write_contents(&several, &file).expect_err("two resources, one file");
        assert!(
            e.contains("2 resources (x://a, x://b)") && e.contains("nothing was written"),
            "{e}"
        );
        assert!(!file.exists(), "nothing was written");
        let _ = std::fs::remove_dir_all(dir);
    }
}

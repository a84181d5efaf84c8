//! Config sources: the MCP config files users already have (Claude Code, Claude Desktop, Cursor,
//! VS Code, Codex, Gemini CLI, and our own), and the merge of user, project and dynamic sources
//! (R1, see [`Sources`]).
//!
//! Invariants:
//! - every format is first converted to our own `mcpServers` JSON — the *canonical form*, in which
//!   environment references stay `${VAR}` and are never expanded — and only then validated and
//!   expanded by [`Config::parse`], so a server from any host obeys exactly the rules of one
//!   written in our format, and `config import` (which prints the canonical form) can never write
//!   a value that came from the environment;
//! - a key a host documents but the harness does not use is dropped with a note naming it; any
//!   other key is an error naming the file, the server and the key;
//! - no error or note of this module contains a value read from the environment (they name
//!   keys, servers, inputs and variables), and none quotes a header, env or token value from
//!   the file either.

mod claude;
mod codex;
mod converted;
mod cursor;
mod gemini;
mod merge;
mod policy;
pub(crate) mod remote;
pub(crate) mod trust;
mod vscode;

use std::path::Path;

use serde_json::Value;

use converted::error;

use crate::config::{Config, ConfigError};

pub use converted::{Converted, Format, InputPrompt, InputRequest, remembering};
pub use merge::{Merged, Origin, Scope, Sources, user_config_path};
pub use policy::Policy;
pub use remote::RemoteSource;
pub use trust::{TrustError, TrustRecord, TrustState, TrustStore, UntrustedFile, path_of_key};

impl Format {
    /// Detects the format of `path` from its name, its folder and, failing those, its shape.
    /// `document` is the parsed file (for a `.toml` file it is not looked at).
    pub fn detect(path: &Path, document: &Value) -> Result<Format, ConfigError> {
        let name = file_name(path);
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if name.ends_with(".toml") {
            return Ok(Format::Codex);
        }
        let by_name = match (name.as_str(), parent) {
            ("claude_desktop_config.json", _) => Some(Format::ClaudeDesktop),
            (".mcp-harness.json", _) | ("config.json", "mcp-harness") => Some(Format::Harness),
            ("mcp.json", ".cursor") => Some(Format::Cursor),
            ("mcp.json", ".vscode") => Some(Format::VsCode),
            ("settings.json", ".gemini") => Some(Format::Gemini),
            (".mcp.json" | ".claude.json", _) => Some(Format::ClaudeCode),
            _ => None,
        };
        if let Some(format) = by_name {
            return Ok(format);
        }
        let Some(root) = document.as_object() else {
            return Err(error(path, "a config file must be a JSON object"));
        };
        let servers = root.get("mcpServers").and_then(Value::as_object);
        let any_server = |test: &dyn Fn(&serde_json::Map<String, Value>) -> bool| {
            servers.is_some_and(|s| s.values().filter_map(Value::as_object).any(test))
        };
        let server_has = |keys: &[&str]| any_server(&|o| keys.iter().any(|k| o.contains_key(*k)));
        if root.contains_key("servers") && !root.contains_key("mcpServers")
            || name == "settings.json"
                && root.get("mcp").is_some_and(|m| m.get("servers").is_some())
        {
            Ok(Format::VsCode)
        } else if name == "settings.json" && servers.is_some() || server_has(gemini::ONLY_KEYS) {
            Ok(Format::Gemini)
        } else if any_server(&claude::only_claude_code) {
            Ok(Format::ClaudeCode)
        } else if servers.is_some()
            || root
                .keys()
                .all(|k| claude::HARNESS_SECTIONS.contains(&k.as_str()))
        {
            Ok(Format::Harness)
        } else {
            Err(error(
                path,
                "cannot tell which host this config is for: expected `mcpServers` (Claude Code, \
                 Claude Desktop, Cursor, Gemini CLI, mcp-harness), `servers` (VS Code), or a \
                 `.toml` file with `[mcp_servers.NAME]` (Codex)",
            ))
        }
    }
}

/// Reads `path` in any supported format and returns its servers, expanding `${VAR}` from the
/// process environment. The CLI's `--config PATH` uses this: only this file is read. Its
/// `allowedServers` / `deniedServers`, if any, are applied.
pub fn load_any(path: &Path) -> Result<(Config, Format), ConfigError> {
    load_any_with(path, &|name| std::env::var(name).ok())
}

/// [`load_any`] with `lookup` resolving `${VAR}` (and VS Code inputs).
pub fn load_any_with(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Format), ConfigError> {
    let text = read(path)?;
    parse_any(&text, path, lookup)
}

/// Parses config text of any supported format; `path` names the file in messages and decides
/// the format together with the text's shape.
pub fn parse_any(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Format), ConfigError> {
    let (config, converted) = parse_noted(text, path, lookup, None)?;
    for note in &converted.notes {
        tracing::info!(file = %path.display(), "{note}");
    }
    Ok((config, converted.format))
}

/// [`load_any_with`], asking `prompt` for VS Code inputs the environment has no value for.
pub fn load_any_asking(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    prompt: &InputPrompt,
) -> Result<(Config, Format), ConfigError> {
    let text = read(path)?;
    let (config, converted) = parse_noted(&text, path, lookup, Some(prompt))?;
    for note in &converted.notes {
        tracing::info!(file = %path.display(), "{note}");
    }
    Ok((config, converted.format))
}

/// [`load_any_with`], also returning the canonical form, whose notes then include the servers
/// the file's own `allowedServers` / `deniedServers` refused.
pub fn load_noted(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Converted), ConfigError> {
    let text = read(path)?;
    parse_noted(&text, path, lookup, None)
}

fn parse_noted(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    prompt: Option<&InputPrompt>,
) -> Result<(Config, Converted), ConfigError> {
    let mut converted = convert(text, path)?;
    let mut config = converted.to_config_asking(path, lookup, prompt)?;
    if let Some(policy) = converted.policy.clone() {
        config.servers.retain(|name, _| match policy.refusal(name) {
            Some(reason) => {
                converted
                    .notes
                    .push(format!("server \"{name}\": not loaded: {reason}"));
                false
            }
            None => true,
        });
    }
    Ok((config, converted))
}

/// Reads `path` and converts it to the canonical form without expanding anything: what
/// `mcp-harness config import` prints. The result is checked as a config would be (keys, types,
/// transports), with every `${VAR}` standing for a placeholder.
pub fn import(path: &Path) -> Result<Converted, ConfigError> {
    let text = read(path)?;
    import_text(&text, path)
}

/// [`import`] of text already read.
pub fn import_text(text: &str, path: &Path) -> Result<Converted, ConfigError> {
    let mut converted = convert(text, path)?;
    converted.to_config(path, &|_| Some("placeholder".to_string()))?;
    if let (Some(policy), Value::Object(doc)) = (&converted.policy, &mut converted.document) {
        doc.extend(policy.to_json());
    }
    if let (Some(on), Value::Object(doc)) =
        (converted.trust_project_permissions, &mut converted.document)
    {
        doc.insert("trustProjectPermissions".into(), on.into());
    }
    if let (Some(remote), Value::Object(doc)) = (&converted.remote, &mut converted.document) {
        let entries = remote.iter().map(RemoteSource::to_json).collect();
        doc.insert("remoteSources".into(), Value::Array(entries));
    }
    Ok(converted)
}

/// Detects the format of `text` and converts it to the canonical form.
pub fn convert(text: &str, path: &Path) -> Result<Converted, ConfigError> {
    let file = path.display().to_string();
    if file_name(path).ends_with(".toml") {
        let document: Value = toml::from_str(text).map_err(|e| {
            // The message only: toml's rendering quotes the offending line, which may hold a
            // secret written in the file.
            let line = e
                .span()
                .and_then(|s| text.get(..s.start))
                .map(|before| before.matches('\n').count() + 1)
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            error(
                path,
                &format!("not valid TOML: {}{line}", e.message().trim()),
            )
        })?;
        return codex::convert(&file, document);
    }
    let document: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| error(path, &format!("not valid JSON: {e}")))?;
    let format = Format::detect(path, &document)?;
    let Value::Object(root) = document else {
        return Err(error(path, "a config file must be a JSON object"));
    };
    // `${workspaceFolder}` is the open folder to VS Code and Cursor; in a file outside a
    // project's `.vscode` / `.cursor` folder (the user's own) there is none to take.
    // `~/.cursor/mcp.json` is Cursor's user file, though its folder is named as a project's.
    let folder = path.parent();
    let in_home = folder
        .and_then(Path::parent)
        .zip(std::env::var_os("HOME"))
        .is_some_and(|(above, home)| above == Path::new(&home));
    let in_project = !in_home
        && matches!(
            folder.and_then(|d| d.file_name()).and_then(|n| n.to_str()),
            Some(".vscode" | ".cursor")
        );
    let workspace_note = (matches!(format, Format::Cursor | Format::VsCode)
        && !in_project
        && Value::Object(root.clone())
            .to_string()
            .contains("${workspaceFolder"))
    .then(|| {
        format!(
            "`${{workspaceFolder}}` became {}: this file is not in a project's `.vscode` or \
             `.cursor` folder, where it would name the folder open in the editor; write the path \
             you mean instead",
            project_root(path)
        )
    });
    let mut converted = match format {
        Format::Harness | Format::ClaudeCode | Format::ClaudeDesktop => {
            let host_settings =
                format == Format::ClaudeDesktop || file_name(path) == ".claude.json";
            claude::convert(format, &file, root, host_settings)
        }
        Format::Cursor => cursor::convert(&file, root, &project_root(path)),
        Format::VsCode => {
            let root = if file_name(path) == "settings.json" {
                match root.get("mcp") {
                    Some(Value::Object(mcp)) => mcp.clone(),
                    _ => return Err(error(path, "VS Code settings have no `mcp` object")),
                }
            } else {
                root
            };
            vscode::convert(&file, root, &project_root(path))
        }
        Format::Gemini => gemini::convert(&file, root),
        Format::Codex => codex::convert(&file, Value::Object(root)),
    }?;
    converted.notes.extend(workspace_note);
    Ok(converted)
}

/// A config file's text (at most [`MAX_CONFIG_BYTES`], UTF-8), or an error naming it.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    read_capped(path)
        .and_then(|bytes| {
            String::from_utf8(bytes).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                )
            })
        })
        .map_err(|e| error(path, &format!("cannot read the config file: {e}")))
}

/// The most bytes a config file may hold: a larger one is a mistake (or a trap in a project
/// folder), refused before it costs every command its time and memory.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A config file's bytes, at most [`MAX_CONFIG_BYTES`] (more is an `InvalidData` error saying
/// so).
pub fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it holds more than {} MiB, which no config file needs",
                MAX_CONFIG_BYTES >> 20
            ),
        ));
    }
    Ok(bytes)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The folder an editor would open for `path`: the parent of `.vscode` / `.cursor`, else the
/// file's own folder.
fn project_root(path: &Path) -> String {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = match dir.file_name().and_then(|n| n.to_str()) {
        Some(".vscode" | ".cursor") => dir.parent().unwrap_or(dir),
        _ => dir,
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// Removes `//` and `/* */` comments and trailing commas outside strings (VS Code, Cursor and
/// Gemini CLI accept JSON with comments). Line breaks are kept, so error positions still match.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            (']' | '}', _) => {
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.remove(trimmed - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

//! Cursor's `.cursor/mcp.json` (project) and `~/.cursor/mcp.json` (user): `mcpServers` in
//! Claude's shape, with VS Code-style variables (`${env:VAR}`, `${userHome}`,
//! `${workspaceFolder}`).
//!
//! Invariant: only Cursor's documented server keys are accepted; variables become `${VAR}`
//! references without being resolved (see the VS Code module for the rewriting).

use serde_json::{Map, Value};

use super::converted::{Converted, Format, check_keys, map_strings, server_error, server_objects};
use super::vscode;
use crate::config::ConfigError;

const KNOWN: &[&str] = &["type", "command", "args", "env", "url", "headers"];

const IGNORED: &[(&str, &str)] = &[
    (
        "envFile",
        "Cursor loads it; mcp-harness does not read env files, set `env` instead",
    ),
    (
        "auth",
        "Cursor's static OAuth client; mcp-harness does not run OAuth from the config yet",
    ),
];

/// Converts a Cursor `mcp.json` object.
pub(super) fn convert(
    file: &str,
    mut root: Map<String, Value>,
    workspace: &str,
) -> Result<Converted, ConfigError> {
    let mut out = Converted::new(Format::Cursor);
    let servers = server_objects(file, "mcpServers", root.remove("mcpServers"))?;
    if let Some(key) = root.keys().next() {
        return Err(ConfigError {
            location: file.to_string(),
            message: format!("unknown key `{key}`; Cursor's mcp.json has only `mcpServers`"),
        });
    }
    let mut canonical = Map::new();
    for (name, mut server) in servers {
        let disabled = server.remove("disabled");
        check_keys(
            file,
            &name,
            Format::Cursor,
            &mut server,
            KNOWN,
            IGNORED,
            &mut out.notes,
        )?;
        if let Some(disabled) = disabled {
            server.insert("disabled".into(), disabled);
            super::converted::disabled_as_enabled(&mut server);
        }
        let mut value = Value::Object(server);
        let mut inputs = Vec::new();
        map_strings(&mut value, &mut |s| {
            vscode::editor_vars(s, workspace, &mut inputs)
        })
        .map_err(|e| server_error(file, &name, e))?;
        if let Some(id) = inputs.first() {
            return Err(server_error(
                file,
                &name,
                format!("`${{input:{id}}}` is a VS Code variable; Cursor files use `${{env:VAR}}`"),
            ));
        }
        canonical.insert(name, value);
    }
    out.document = serde_json::json!({ "mcpServers": canonical });
    Ok(out)
}

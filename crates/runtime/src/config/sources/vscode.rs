//! VS Code's `mcp.json` (`servers`, `inputs`) and the editor variables it shares with Cursor.
//!
//! Invariant: every editor variable becomes our own syntax without being resolved —
//! `${env:VAR}` → `${VAR}`, `${userHome}` → `${HOME}`, `${input:ID}` → `${MCP_INPUT_<ID>}`
//! (the ID uppercased, other characters `_`) — except `${workspaceFolder}`, which is the folder
//! holding `.vscode` (a path, not a secret). An input with no value is an error naming the input
//! and the variable to set; the harness does not prompt.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::converted::{
    Converted, Format, InputRef, check_keys, is_var_name, map_strings, server_error, server_objects,
};
use crate::config::ConfigError;

const KNOWN: &[&str] = &["type", "command", "args", "env", "cwd", "url", "headers"];

const IGNORED: &[(&str, &str)] = &[
    (
        "envFile",
        "VS Code loads it; mcp-harness does not read env files, set `env` instead",
    ),
    ("dev", "VS Code's watch-and-debug mode for server authors"),
    ("sandboxEnabled", "VS Code's sandbox for stdio servers"),
    ("sandbox", "VS Code's sandbox for stdio servers"),
    ("gallery", "where VS Code installed the server from"),
    ("version", "the version VS Code installed"),
];

/// Converts a VS Code `mcp.json` object (or the `mcp` object of `settings.json`).
pub(super) fn convert(
    file: &str,
    mut root: Map<String, Value>,
    workspace: &str,
) -> Result<Converted, ConfigError> {
    let mut out = Converted::new(Format::VsCode);
    let servers = server_objects(file, "servers", root.remove("servers"))?;
    let declared = inputs(file, root.remove("inputs"))?;
    if let Some(key) = root.keys().next() {
        return Err(ConfigError {
            location: file.to_string(),
            message: format!("unknown key `{key}`; VS Code's mcp.json has `servers` and `inputs`"),
        });
    }
    let mut canonical = Map::new();
    // Each variable stands for one input: two ids spelled alike (`api-key`, `api_key`) would
    // silently share one value.
    let mut variables: BTreeMap<String, String> = BTreeMap::new();
    for id in declared.keys() {
        claim(file, &mut variables, id)?;
    }
    for (name, mut server) in servers {
        check_keys(
            file,
            &name,
            Format::VsCode,
            &mut server,
            KNOWN,
            IGNORED,
            &mut out.notes,
        )?;
        let mut used = Vec::new();
        let mut value = Value::Object(server);
        map_strings(&mut value, &mut |s| editor_vars(s, workspace, &mut used))
            .map_err(|e| server_error(file, &name, e))?;
        let mut refs: Vec<InputRef> = Vec::new();
        for id in used {
            if refs.iter().any(|r| r.id == id) {
                continue;
            }
            let variable = claim(file, &mut variables, &id)?;
            out.notes.push(format!(
                "server \"{name}\": VS Code input \"{id}\" is read from the environment variable {variable}"
            ));
            let (description, password) = declared.get(&id).cloned().unwrap_or_default();
            refs.push(InputRef {
                description,
                password,
                id,
                variable,
            });
        }
        if !refs.is_empty() {
            out.inputs.insert(name.clone(), refs);
        }
        canonical.insert(name, value);
    }
    out.document = serde_json::json!({ "mcpServers": canonical });
    Ok(out)
}

/// `id`'s variable, recorded as its; an error when another input's id already maps to it.
fn claim(
    file: &str,
    variables: &mut BTreeMap<String, String>,
    id: &str,
) -> Result<String, ConfigError> {
    let variable = input_variable(id);
    match variables.get(&variable) {
        Some(other) if other != id => Err(ConfigError {
            location: format!("{file}: inputs"),
            message: format!(
                "inputs \"{other}\" and \"{id}\" would both be read from {variable} (ids are \
                 uppercased, other characters `_`); rename one of them"
            ),
        }),
        _ => {
            variables.insert(variable.clone(), id.to_string());
            Ok(variable)
        }
    }
}

/// The declared inputs: id → (description, password).
fn inputs(
    file: &str,
    value: Option<Value>,
) -> Result<BTreeMap<String, (Option<String>, bool)>, ConfigError> {
    let location = || format!("{file}: inputs");
    let items = match value {
        None => return Ok(BTreeMap::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ConfigError {
                location: location(),
                message: "must be a list of inputs".into(),
            });
        }
    };
    let mut out = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let Some(id) = item.get("id").and_then(Value::as_str) else {
            return Err(ConfigError {
                location: location(),
                message: format!("input {i} has no string `id`"),
            });
        };
        let description = item
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string);
        let password = item.get("password").and_then(Value::as_bool) == Some(true);
        out.insert(id.to_string(), (description, password));
    }
    Ok(out)
}

/// `MCP_INPUT_<ID>`: the ID uppercased, anything but letters and digits as `_`.
pub(crate) fn input_variable(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("MCP_INPUT_{id}")
}

/// Rewrites VS Code / Cursor variables in `s` into our `${VAR}` syntax (see the module doc);
/// the ids of `${input:ID}` references are pushed to `inputs`. `${VAR}` and `${VAR:-default}`
/// pass through unchanged.
pub(super) fn editor_vars(
    s: &str,
    workspace: &str,
    inputs: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let body = &after[..end];
        match body.split_once(':') {
            Some(("env", var)) if is_var_name(var) => out.push_str(&format!("${{{var}}}")),
            Some(("input", id)) if !id.is_empty() => {
                out.push_str(&format!("${{{}}}", input_variable(id)));
                inputs.push(id.to_string());
            }
            Some((kind, _)) if !body.contains(":-") => {
                return Err(format!(
                    "`${{{kind}:...}}` variables are not supported; use `${{env:VAR}}` or `${{input:ID}}`"
                ));
            }
            _ => match body {
                "userHome" => out.push_str("${HOME}"),
                "workspaceFolder" => out.push_str(workspace),
                "workspaceFolderBasename" => out.push_str(
                    std::path::Path::new(workspace)
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or(""),
                ),
                "pathSeparator" | "/" => out.push('/'),
                _ => out.push_str(&format!("${{{body}}}")),
            },
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

//! `enable` / `disable` of a server (`"enabled": false`, or a host's `"disabled": true` where
//! the entry has that key; enabling removes both, `enabled` defaulting to true) or of one tool (its raw name in the server's `excludeTools`, which wins over
//! `includeTools`; enabling removes it there and adds it to `includeTools` when that list is set).
//!
//! Invariant: these are the keys the config and the tool filter (`policy::ToolFilter`) already
//! read; nothing else is written, and an edit that changes nothing writes nothing.

use super::check::{self, Checked};
use super::ordered::{Json, Object};
use super::{EditError, ScopeArg, ToggleArgs, find, lock_scope, save};

/// `enable`/`disable` of a server or of one tool (checked against the server's listing first,
/// see [`check`]).
pub(super) async fn run(args: &ToggleArgs, on: bool) -> Result<String, EditError> {
    let scope = args.scope.unwrap_or(ScopeArg::User);
    let (server, tool) = match (&args.tool, split_qualified(&args.target)) {
        (Some(tool), _) => (args.target.clone(), Some(tool.clone())),
        (None, Some((server, tool))) => (server, Some(tool)),
        (None, None) => (args.target.clone(), None),
    };
    let mut unchecked = String::new();
    let tool = match tool {
        None => None,
        // Already disabled, as written: nothing to check, nothing to write. (An enable is
        // always checked: a name in no list reads as enabled whether or not the server has it,
        // and a qualified name's raw name may be the one excluded.)
        Some(tool) if !on && already_excluded(&find(&server, scope)?, &server, &tool) => Some(tool),
        Some(tool) => match check::tool(&server, &tool).await? {
            Checked::Listed(raw) => Some(raw),
            Checked::Unchecked(why) => {
                unchecked = format!(
                    "\nnote: not checked that server \"{server}\" has a tool {tool:?} ({why}); \
                     written as given, a raw name as the server lists it"
                );
                Some(tool)
            }
        },
    };
    let _lock = lock_scope(scope)?;
    let mut file = find(&server, scope)?;
    let shown = file.shown();
    let entry = file.server_mut(&server).ok_or_else(|| {
        EditError::Invalid(format!("{shown}: `mcpServers.{server}` must be an object"))
    })?;
    let verb = if on { "enabled" } else { "disabled" };
    let what = match &tool {
        None => {
            let was = super::show::enabled(entry);
            // A host's own `disabled` (Cursor, Cline) is kept in its style: set, or gone.
            let key = if entry.contains("disabled") {
                "disabled"
            } else {
                "enabled"
            };
            if on {
                // `enabled` defaults to true: the key goes, rather than saying so; so does a
                // `disabled` that says otherwise.
                entry.remove("enabled");
                if matches!(entry.get("disabled"), Some(Json::Bool(true))) {
                    entry.remove("disabled");
                }
            } else if key == "disabled" {
                entry.insert("disabled", Json::Bool(true));
            } else {
                entry.insert("enabled", Json::Bool(false));
            }
            if was == on {
                return Ok(format!(
                    "server \"{server}\" is already {verb} in {shown}\n"
                ));
            }
            format!("server \"{server}\" in {shown} (`mcpServers.{server}.{key}`)")
        }
        Some(tool) => {
            let changed = if on {
                enable_tool(entry, tool)
            } else {
                disable_tool(entry, tool)
            };
            if !changed {
                return Ok(format!(
                    "tool {tool:?} of server \"{server}\" is already {verb} in {shown}\n"
                ));
            }
            format!(
                "tool {tool:?} of server \"{server}\" in {shown} \
                 (`mcpServers.{server}.{}`)",
                if on && entry.contains("includeTools") {
                    "excludeTools`, `includeTools"
                } else {
                    "excludeTools"
                }
            )
        }
    };
    let note = save(&file, scope)?;
    let shadowed = super::shadowed(&server, &file.path, false);
    let claude = if super::claude_code_file(&file.path) {
        format!(
            "note: Claude Code, which reads {shown} too, does not read `enabled` or \
             `excludeTools`: this changes what mcp-harness runs, not what Claude Code runs (its \
             own switches are `disabledMcpjsonServers` and permission rules in its settings)\n"
        )
    } else {
        String::new()
    };
    Ok(format!(
        "{verb} {what}{note}{unchecked}\n{shadowed}{claude}"
    ))
}

/// Whether `tool`, by the name given, is in `excludeTools` of `file`'s entry of `server`.
fn already_excluded(file: &super::ConfigFile, server: &str, tool: &str) -> bool {
    file.server(server)
        .is_some_and(|entry| names(entry.get("excludeTools")).iter().any(|t| t == tool))
}

/// Adds `tool` to `excludeTools` (which wins over `includeTools`); whether anything changed.
fn disable_tool(server: &mut Object, tool: &str) -> bool {
    let mut list = names(server.get("excludeTools"));
    if list.iter().any(|t| t == tool) {
        return false;
    }
    list.push(tool.to_string());
    server.insert("excludeTools", names_json(&list));
    true
}

/// Removes `tool` from `excludeTools` (the key goes when empty) and, when `includeTools` is set
/// without it, adds it there; whether anything changed.
fn enable_tool(server: &mut Object, tool: &str) -> bool {
    let mut changed = false;
    let mut excluded = names(server.get("excludeTools"));
    if excluded.iter().any(|t| t == tool) {
        excluded.retain(|t| t != tool);
        if excluded.is_empty() {
            server.remove("excludeTools");
        } else {
            server.insert("excludeTools", names_json(&excluded));
        }
        changed = true;
    }
    if server.contains("includeTools") {
        let mut included = names(server.get("includeTools"));
        if !included.iter().any(|t| t == tool) {
            included.push(tool.to_string());
            server.insert("includeTools", names_json(&included));
            changed = true;
        }
    }
    changed
}

fn names(list: Option<&Json>) -> Vec<String> {
    match list {
        Some(Json::Array(items)) => items
            .iter()
            .filter_map(Json::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

fn names_json(list: &[String]) -> Json {
    Json::Array(list.iter().map(|t| Json::from(t.as_str())).collect())
}

/// `mcp__SERVER__TOOL` → (SERVER, TOOL). Server names never contain `__`, so the first `__`
/// after the prefix ends the server.
pub(crate) fn split_qualified(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then(|| (server.to_string(), tool.to_string()))
}

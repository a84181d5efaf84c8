//! `mcpServers` files: our own format, Claude Code (`.mcp.json`, `~/.claude.json`) and Claude
//! Desktop (`claude_desktop_config.json`).
//!
//! Invariant: these share our own server keys, so a server is copied as written (references
//! unexpanded) and [`Config::parse`](crate::Config::parse) rejects any key that is neither ours
//! nor one Claude Code documents: `headersHelper` and the `oauth` keys the harness does not use
//! are dropped with a note, and the `oauth` keys it does use (`clientId`, `scopes`) are kept.

use serde_json::{Map, Value};

use super::converted::{Converted, Format, server_objects};
use super::policy::Policy;
use crate::config::ConfigError;

/// Server keys Claude Code documents that the harness does not use, with why.
const IGNORED: &[(&str, &str)] = &[
    (
        "headersHelper",
        "a Claude Code command that prints headers; set `headers` with ${VAR} instead",
    ),
    // Written by other hosts' editors (Cline, Roo) into files Claude Desktop reads too.
    (
        "autoApprove",
        "tools run without asking through `permissions.allow` (e.g. \"mcp__SERVER__TOOL\")",
    ),
    (
        "alwaysAllow",
        "tools run without asking through `permissions.allow` (e.g. \"mcp__SERVER__TOOL\")",
    ),
];

/// `oauth` keys Claude Code documents that the harness does not use, with why.
const IGNORED_OAUTH: &[(&str, &str)] = &[
    (
        "callbackPort",
        "the callback port is an option of the login: `mcp-harness login SERVER --port PORT` \
         (default 33418)",
    ),
    (
        "authServerMetadataUrl",
        "the authorization server is discovered from the server's metadata",
    ),
];

/// Whether `server` (an `mcpServers` entry) is written the way only Claude Code writes one:
/// `headersHelper`, or an `oauth` with a key of Claude Code's or its space-separated `scopes`.
/// An `oauth` with only `clientId` reads the same in both formats.
pub(super) fn only_claude_code(server: &Map<String, Value>) -> bool {
    server.contains_key("headersHelper")
        || server
            .get("oauth")
            .and_then(Value::as_object)
            .is_some_and(|oauth| {
                IGNORED_OAUTH
                    .iter()
                    .any(|(key, _)| oauth.contains_key(*key))
                    || oauth.get("scopes").is_some_and(Value::is_string)
            })
}

/// Drops the keys of Claude Code's `oauth` the harness does not use (with a note each) and
/// reads its `scopes`, one space-separated string there, as our list.
fn convert_oauth(name: &str, oauth: &mut Map<String, Value>, notes: &mut Vec<String>) {
    for (key, why) in IGNORED_OAUTH {
        if oauth.remove(*key).is_some() {
            notes.push(format!("server \"{name}\": `oauth.{key}` ignored ({why})"));
        }
    }
    if let Some(Value::String(scopes)) = oauth.get("scopes") {
        let list = scopes
            .split_whitespace()
            .map(|s| Value::String(s.to_owned()))
            .collect();
        oauth.insert("scopes".into(), Value::Array(list));
    }
}

/// Top-level keys of our own format besides `mcpServers` (validated by `Config::parse`).
pub(super) const HARNESS_SECTIONS: &[&str] = &[
    "mcpServers",
    "metadataLimits",
    "exposure",
    "permissions",
    "output",
    "gateway",
    "allowedServers",
    "deniedServers",
    "remoteSources",
    "trustProjectPermissions",
];

/// Notes the servers `~/.claude.json` keeps per project (Claude Code's local scope, under
/// `projects.PATH.mcpServers`): only the file's own `mcpServers` (user scope) is read.
fn note_project_servers(file: &str, root: &Map<String, Value>, notes: &mut Vec<String>) {
    let Some(Value::Object(projects)) = root.get("projects") else {
        return;
    };
    for (project, settings) in projects {
        let servers = settings.get("mcpServers").and_then(Value::as_object);
        let Some(servers) = servers.filter(|s| !s.is_empty()) else {
            continue;
        };
        let names: Vec<&str> = servers.keys().map(String::as_str).collect();
        notes.push(format!(
            "{file}: the servers of project {project} ({}) are Claude Code's local scope, not \
             imported; add the ones you want with `mcp-harness add-json NAME JSON` \
             (`--scope project` in that folder)",
            names.join(", ")
        ));
    }
}

/// Converts an `mcpServers` file. With `host_settings` (Claude Desktop's config, Claude Code's
/// `~/.claude.json`) the file is the host's whole settings: only `mcpServers` is read.
pub(super) fn convert(
    format: Format,
    file: &str,
    mut root: Map<String, Value>,
    host_settings: bool,
) -> Result<Converted, ConfigError> {
    let mut out = Converted::new(format);
    let servers = server_objects(file, "mcpServers", root.remove("mcpServers"))?;
    let mut document = Map::new();
    if format == Format::Harness {
        let allowed = root.remove("allowedServers");
        let denied = root.remove("deniedServers");
        if allowed.is_some() || denied.is_some() {
            out.policy = Some(Policy::from_json(file, allowed, denied)?);
        }
        if let Some(remote) = root.remove("remoteSources") {
            out.remote = Some(super::remote::RemoteSource::list_from_json(file, remote)?);
        }
        match root.remove("trustProjectPermissions") {
            None => {}
            Some(Value::Bool(on)) => out.trust_project_permissions = Some(on),
            Some(_) => {
                return Err(ConfigError {
                    location: format!("{file}: trustProjectPermissions"),
                    message: "must be true or false".into(),
                });
            }
        }
    }
    if host_settings {
        note_project_servers(file, &root, &mut out.notes);
    } else {
        // Everything else is a section of ours; `Config::parse` rejects unknown keys by name.
        document.extend(root);
    }
    let mut canonical = Map::new();
    for (name, mut server) in servers {
        if format != Format::Harness {
            for (key, why) in IGNORED {
                if server.remove(*key).is_some() {
                    out.notes
                        .push(format!("server \"{name}\": `{key}` ignored ({why})"));
                }
            }
            if let Some(Value::Object(oauth)) = server.get_mut("oauth") {
                convert_oauth(&name, oauth, &mut out.notes);
            }
            super::converted::disabled_as_enabled(&mut server);
        }
        canonical.insert(name, Value::Object(server));
    }
    document.insert("mcpServers".into(), Value::Object(canonical));
    out.document = Value::Object(document);
    Ok(out)
}

//! Which servers a command starts.
//!
//! Invariant: a command that names its server — `read`, `subscribe`, `skill` by server name,
//! `call` and `prompt` by a qualified name (`mcp__SERVER__NAME`, made by
//! [`mcp_harness_catalog::qualify`]) — starts only the configured servers that name can belong
//! to; a name no configured server can have produced starts every server (said in a `-v` log).
//! `--server NAME` narrows every command to the named servers; a name that is not configured
//! is a usage error naming the configured ones. A targeted `call` never shows the model's view
//! differently from a run with every server: when its tool lies beyond the share of the
//! exposure limits that is guaranteed whatever the other servers list, every server is started
//! before the call ([`widen_for_call`]).

use std::collections::BTreeSet;

use mcp_harness_catalog::Snapshot;
use mcp_harness_catalog::naming::SEPARATOR;
use mcp_harness_runtime::{Config, Runtime};

/// What a command names.
pub(crate) enum Wants<'a> {
    /// Nothing in particular: every server (`servers`, `tools`, `watch`, ...).
    Every,
    /// One server by its configured name (`read SERVER URI`).
    Server(&'a str),
    /// A tool or prompt by its qualified name (`call NAME`, `prompt NAME`).
    Qualified(&'a str),
}

/// The servers to start, and what a targeted `call` may need to widen to.
pub(crate) struct Plan {
    /// The config to start with (only the chosen servers).
    pub config: Config,
    /// Set when the servers were chosen from a qualified name alone: the config with every
    /// server (after `--server`), which decides exposure.
    pub full: Option<Config>,
}

/// Chooses the servers for a command that `wants` something, within `only` (`--server`, empty:
/// no limit). An `Err` is a usage error for the user (exit 2).
pub(crate) fn plan(config: Config, wants: &Wants<'_>, only: &[String]) -> Result<Plan, String> {
    let configured = || {
        let names: Vec<&str> = config.servers.keys().map(String::as_str).collect();
        if names.is_empty() {
            "no server is configured".to_string()
        } else {
            format!("configured servers: {}", names.join(", "))
        }
    };
    for name in only {
        if !config.servers.contains_key(name) {
            return Err(match crate::sources::not_loaded(name) {
                Some(not_loaded) => format!("--server {name}: {not_loaded}"),
                None => format!(
                    "--server {name}: no server named `{name}` ({})",
                    configured()
                ),
            });
        }
    }
    let limited = if only.is_empty() {
        config.clone()
    } else {
        keep(&config, &only.iter().cloned().collect())
    };
    match wants {
        Wants::Every => Ok(Plan {
            config: limited,
            full: None,
        }),
        Wants::Server(server) => {
            if !limited.servers.contains_key(*server) {
                return Err(if config.servers.contains_key(*server) {
                    format!(
                        "server `{server}` is left out by --server {}",
                        only.join(", ")
                    )
                } else {
                    format!("no server named `{server}` ({})", configured())
                });
            }
            Ok(Plan {
                config: keep(&limited, &BTreeSet::from([server.to_string()])),
                full: None,
            })
        }
        Wants::Qualified(name) => {
            let found = owners(&limited, name);
            if found.is_empty() {
                let elsewhere = owners(&config, name);
                if !elsewhere.is_empty() {
                    return Err(format!(
                        "`{name}` belongs to server {}, which --server {} leaves out",
                        elsewhere.into_iter().collect::<Vec<_>>().join(", "),
                        only.join(", ")
                    ));
                }
                tracing::info!(
                    name = %name,
                    "no configured server makes this name; starting every server to look for it"
                );
                return Ok(Plan {
                    config: limited,
                    full: None,
                });
            }
            if found.len() > 1 {
                tracing::info!(
                    name = %name,
                    servers = %found.iter().cloned().collect::<Vec<_>>().join(", "),
                    "the name can belong to more than one server; starting each of them"
                );
            }
            Ok(Plan {
                config: keep(&limited, &found),
                full: Some(limited),
            })
        }
    }
}

/// `config` with only the servers in `names`.
fn keep(config: &Config, names: &BTreeSet<String>) -> Config {
    let mut narrowed = config.clone();
    narrowed.servers.retain(|name, _| names.contains(name));
    narrowed
}

/// The servers of `config` whose tools or prompts can have the qualified name `name`.
fn owners(config: &Config, name: &str) -> BTreeSet<String> {
    config
        .servers
        .keys()
        .filter(|server| can_belong_to(name, server))
        .cloned()
        .collect()
}

/// Whether [`mcp_harness_catalog::qualify`] can make `name` for some tool of `server`: either
/// the plain `mcp__SERVER__TOOL`, or the sanitised form — `mcp__` + the server with every
/// character outside `[A-Za-z0-9_-]` made `_` + `__` + the tool, cut to 55 characters, then `_`
/// and an 8-digit hash.
fn can_belong_to(name: &str, server: &str) -> bool {
    let plain_prefix = format!("mcp{SEPARATOR}{server}{SEPARATOR}");
    if let Some(tool) = name.strip_prefix(&plain_prefix)
        && !tool.is_empty()
        && mcp_harness_catalog::qualify(server, tool) == name
    {
        return true;
    }
    // The sanitised form: `<head>_<8 hex>`, 64 characters when cut, shorter otherwise.
    let Some((head, hash)) = name.rsplit_once('_') else {
        return false;
    };
    if hash.len() != 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let sanitized: String = plain_prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cut = mcp_harness_catalog::MAX_NAME_LEN - 9;
    head.starts_with(&sanitized) || (head.chars().count() == cut && sanitized.starts_with(head))
}

/// Before a targeted `call` of `name`: when `name` exists on the started servers but is not
/// within the share of the exposure limits every server is sure to get (1/n of `maxTools` and
/// of `totalSchemaBytes` for n configured servers), whether the model sees it depends on what
/// the other servers list — so every server of `full` is started and this waits (at most
/// `deadline`) for them to settle. Returns whether it widened.
pub(crate) async fn widen_for_call(
    runtime: &Runtime,
    full: &Config,
    name: &str,
    deadline: std::time::Duration,
) -> bool {
    let snapshot = runtime.snapshot();
    if snapshot.tool(name).is_none() || guaranteed(full, &snapshot, name) {
        return false;
    }
    tracing::info!(
        name = %name,
        "whether the model sees this tool depends on the other servers' tools; starting every server"
    );
    runtime.set_config(full.clone());
    if let Err(e) = runtime.refresh_if_dirty().await {
        tracing::warn!(error = %e, "the other servers could not be started");
    }
    crate::progress::settle(runtime, deadline).await;
    true
}

/// Whether `name` is exposed (direct or deferred) under `full`'s exposure policy with the
/// limits cut to one server's guaranteed share.
fn guaranteed(full: &Config, snapshot: &Snapshot, name: &str) -> bool {
    let n = full.servers.values().filter(|s| s.enabled).count().max(1);
    let mut share = full.exposure.clone();
    share.max_tools /= n;
    share.total_schema_bytes /= n;
    let exposure = share.expose(snapshot.tools());
    exposure
        .direct
        .iter()
        .chain(&exposure.deferred)
        .any(|t| t.entry.qualified_name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_harness_catalog::qualify;

    #[test]
    fn names_belong_to_the_servers_that_can_make_them() {
        for (server, tool) in [
            ("fx", "echo"),
            ("a-b", "x__y"),
            ("my.server", "do thing"),
            ("srv", &"t".repeat(80)),
            (&"s".repeat(70), "t"),
        ] {
            let name = qualify(server, tool);
            assert!(can_belong_to(&name, server), "{server} {tool} {name}");
        }
        assert!(!can_belong_to("mcp__fx__echo", "f"));
        assert!(!can_belong_to("mcp__fx__echo", "fx_"));
        assert!(!can_belong_to("mcp__fx__echo", "other"));
        assert!(!can_belong_to("mcp_harness__read_output", "harness"));
        // `x.y`'s sanitised names start like server `x_y`'s: both are owners.
        let hashed = qualify("x.y", "z");
        assert!(can_belong_to(&hashed, "x.y") && can_belong_to(&hashed, "x_y"));
    }
}

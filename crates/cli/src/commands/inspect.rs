//! `servers`, `tools`, `prompts`, `resources`: the settled catalog as a table or as JSON.
//!
//! Invariant: `tools` shows what a bound step shows the model, and `tools --hidden` what it
//! does not, both read from one [`StepBinding`] — never recomputed here.

use std::collections::BTreeMap;
use std::path::Path;

use mcp_harness_catalog::{HiddenEntry, ServerState, Snapshot};
use mcp_harness_runtime::sources::Origin;
use mcp_harness_runtime::{BoundTool, StepBinding};
use serde_json::json;

use crate::exit::Exit;
use crate::output::rfc3339;
use crate::table::{cut, pretty, render};

/// Where the servers of a run came from (the SOURCE column of `servers`).
pub(crate) enum ServerSources {
    /// Every server from this one source (`--config PATH`, or the demo's built-in servers).
    All { scope: String, location: String },
    /// Each server from its own source in the merged config.
    Each(BTreeMap<String, Origin>),
}

impl ServerSources {
    /// The sources of the config [`super::config::load`] gives for `explicit`: that file for every
    /// server, or each server's origin in the merged sources. A merge that fails now (it worked
    /// when the config was loaded) leaves the sources unknown rather than failing the command.
    pub(crate) fn of(explicit: Option<&Path>) -> Self {
        match explicit {
            Some(path) => Self::All {
                scope: "--config".into(),
                location: crate::output::short(path),
            },
            None => match crate::sources::shared().merge() {
                Ok(merged) => Self::Each(merged.origins),
                Err(e) => {
                    tracing::warn!(error = %e, "the config sources could not be read again");
                    Self::Each(BTreeMap::new())
                }
            },
        }
    }

    /// `(scope, location)` of `server`, if known.
    fn get(&self, server: &str) -> Option<(String, String)> {
        match self {
            Self::All { scope, location } => Some((scope.clone(), location.clone())),
            Self::Each(origins) => origins.get(server).map(|o| {
                let location = match (&o.path, &o.url) {
                    (Some(p), _) => crate::output::short(p),
                    (None, Some(url)) => url.clone(),
                    (None, None) => "(dynamic)".into(),
                };
                (o.scope.name().to_string(), location)
            }),
        }
    }
}

/// The servers table, then the full error (with stderr tail) of every server that is not well.
pub(crate) fn servers(snapshot: &Snapshot, as_json: bool, sources: &ServerSources) -> String {
    if as_json {
        return pretty(&json!(
            snapshot
                .servers
                .values()
                .map(|s| {
                    let mut v = serde_json::to_value(s).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert(
                            "tools".into(),
                            json!(
                                snapshot
                                    .catalogs
                                    .get(&s.name)
                                    .map(|c| c.tools.len())
                                    .unwrap_or(0)
                            ),
                        );
                        o.insert("since".into(), json!(rfc3339(s.since)));
                        o.insert("next_retry".into(), json!(s.next_retry.map(rfc3339)));
                        let (scope, source) = sources.get(&s.name).unzip();
                        o.insert("source".into(), json!(source));
                        o.insert("scope".into(), json!(scope));
                    }
                    v
                })
                .collect::<Vec<_>>()
        ));
    }
    let rows: Vec<Vec<String>> = snapshot
        .servers
        .values()
        .map(|s| {
            let tools = snapshot
                .catalogs
                .get(&s.name)
                .map(|c| c.tools.len().to_string())
                .unwrap_or_else(|| "-".into());
            vec![
                s.name.clone(),
                s.state.label().into(),
                s.transport.clone(),
                tools,
                ago(s.since),
                s.next_retry.map(until).unwrap_or_default(),
                sources
                    .get(&s.name)
                    .map(|(scope, location)| cut(&format!("{scope} {location}")))
                    .unwrap_or_else(|| "-".into()),
                s.last_error.as_deref().map(cut).unwrap_or_default(),
            ]
        })
        .collect();
    let mut out = render(
        &[
            "SERVER",
            "STATE",
            "TRANSPORT",
            "TOOLS",
            "SINCE",
            "RETRY",
            "SOURCE",
            "LAST ERROR",
        ],
        &rows,
    );
    for s in snapshot.servers.values() {
        if let ServerState::Failed { error }
        | ServerState::NeedsAuth { reason: error }
        | ServerState::Untrusted { reason: error } = &s.state
        {
            out.push_str(&format!(
                "\n{} ({}):\n{}\n",
                s.name,
                s.state.label(),
                indent(error)
            ));
            if matches!(s.state, ServerState::NeedsAuth { .. }) {
                // What to run, as `tools` and `call` say it.
                out.push_str(&format!("  {}\n", crate::explain::server_down_told(s)));
            }
            if let Some(next) = s.next_retry {
                out.push_str(&format!("  next try: {}\n", until(next)));
            }
        }
    }
    out
}

/// What a bound step shows the model — the same binding `call` and an embedder's
/// `Runtime::bind_step` use, so this list is never a computation of its own: the tools in the
/// prompt (server tools and the harness's built-in ones), then those found through tool search
/// (tool search on). `hidden` lists instead what the model does not see and why: what each
/// server's listing withheld or adjusted, then what the step hides (exposure budgets, name
/// conflicts across servers).
pub(crate) fn tools(binding: &StepBinding, as_json: bool, hidden: bool) -> String {
    if hidden {
        // Withheld entries first, then entries shown after an adjustment, then what the step
        // hides.
        let snapshot = binding.snapshot();
        let entries: Vec<(&str, &HiddenEntry)> = snapshot
            .catalogs
            .values()
            .flat_map(|c| {
                c.hidden
                    .iter()
                    .map(|h| ("hidden", h))
                    .chain(c.adjusted.iter().map(|h| ("adjusted", h)))
            })
            .chain(binding.hidden().iter().map(|h| ("hidden", h)))
            .collect();
        if as_json {
            return pretty(&json!(entries
                .iter()
                .map(|(what, h)| json!({"status": what, "server": h.server, "kind": h.kind, "name": h.raw_name, "reason": h.reason}))
                .collect::<Vec<_>>()));
        }
        let rows: Vec<Vec<String>> = entries
            .iter()
            .map(|(what, h)| {
                vec![
                    what.to_string(),
                    h.server.clone(),
                    h.kind.to_string(),
                    h.raw_name.clone(),
                    h.reason.clone(),
                ]
            })
            .collect();
        return render(&["STATUS", "SERVER", "KIND", "NAME", "REASON"], &rows);
    }
    let shown: Vec<(&str, BoundTool)> = binding
        .tools()
        .into_iter()
        .map(|t| {
            (
                if t.server.is_some() {
                    "direct"
                } else {
                    "built-in"
                },
                t,
            )
        })
        .chain(binding.deferred().into_iter().map(|t| ("deferred", t)))
        .collect();
    if as_json {
        // Each tool's definition as the server listed it (title, outputSchema, annotations,
        // icons, _meta: every field the protocol model keeps), its `name` the qualified one;
        // server tools in server-name order, each server's in its listing order.
        let snapshot = binding.snapshot();
        let position = |t: &BoundTool| {
            t.server.as_ref().and_then(|server| {
                let catalog = snapshot.catalogs.get(server)?;
                catalog
                    .tools
                    .iter()
                    .position(|e| e.raw_name == *t.tool.name)
            })
        };
        let mut ordered: Vec<&(&str, BoundTool)> = shown.iter().collect();
        ordered.sort_by_key(|(how, t)| (*how == "built-in", t.server.clone(), position(t)));
        return pretty(&json!(
            ordered
                .iter()
                .map(|(how, t)| {
                    let mut v = serde_json::to_value(&*t.tool).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("rawName".into(), json!(t.tool.name));
                        o.insert("name".into(), json!(t.name));
                        o.insert("server".into(), json!(t.server));
                        o.insert("exposure".into(), json!(how));
                    }
                    v
                })
                .collect::<Vec<_>>()
        ));
    }
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|(how, t)| {
            vec![
                t.name.clone(),
                t.server.clone().unwrap_or_else(|| "(harness)".into()),
                how.to_string(),
                t.tool.description.as_deref().unwrap_or("").to_string(),
            ]
        })
        .collect();
    render(&["TOOL", "SERVER", "EXPOSURE", "DESCRIPTION"], &rows)
}

/// Prompts, each usable as a command.
pub(crate) fn prompts(snapshot: &Snapshot, as_json: bool) -> String {
    let all: Vec<_> = snapshot
        .catalogs
        .values()
        .flat_map(|c| c.prompts.iter())
        .collect();
    if as_json {
        return pretty(&json!(
            all.iter()
                .map(|p| json!({
                    "name": p.qualified_name, "server": p.server, "rawName": p.raw_name,
                    "description": p.prompt.description, "arguments": p.prompt.arguments,
                }))
                .collect::<Vec<_>>()
        ));
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|p| {
            let args = p
                .prompt
                .arguments
                .as_deref()
                .filter(|a| !a.is_empty())
                .map(crate::explain::argument_list)
                .unwrap_or_default();
            vec![
                p.qualified_name.clone(),
                p.server.clone(),
                args,
                p.prompt.description.clone().unwrap_or_default(),
            ]
        })
        .collect();
    render(&["PROMPT", "SERVER", "ARGUMENTS", "DESCRIPTION"], &rows)
}

/// Resources and resource templates, each with its server.
pub(crate) fn resources(snapshot: &Snapshot, as_json: bool) -> String {
    if as_json {
        return pretty(&json!({
            "resources": snapshot.catalogs.values().flat_map(|c| c.resources.iter()).collect::<Vec<_>>(),
            "templates": snapshot.catalogs.values().flat_map(|c| c.templates.iter()).collect::<Vec<_>>(),
        }));
    }
    let mut rows: Vec<Vec<String>> = snapshot
        .catalogs
        .values()
        .flat_map(|c| c.resources.iter())
        .map(|r| {
            vec![
                r.resource.uri.clone(),
                r.server.clone(),
                r.resource.name.clone(),
                r.resource.mime_type.clone().unwrap_or_default(),
            ]
        })
        .collect();
    rows.extend(
        snapshot
            .catalogs
            .values()
            .flat_map(|c| c.templates.iter())
            .map(|t| {
                vec![
                    t.template.uri_template.clone(),
                    t.server.clone(),
                    format!("{} (template)", t.template.name),
                    t.template.mime_type.clone().unwrap_or_default(),
                ]
            }),
    );
    render(&["URI", "SERVER", "NAME", "MIME TYPE"], &rows)
}

/// The exit status of a listing: [`Exit::Server`] when a server failed, needs authorization or
/// never settled (what it would have listed is missing), else [`Exit::Ok`]. Disabled and
/// untrusted servers are the user's choice, not a failure.
pub(crate) fn listing_exit(snapshot: &Snapshot) -> Exit {
    let incomplete = snapshot.servers.values().any(|s| {
        matches!(
            s.state,
            ServerState::Failed { .. } | ServerState::NeedsAuth { .. } | ServerState::Pending
        )
    });
    if incomplete { Exit::Server } else { Exit::Ok }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long ago `t` was, for a person ("3s ago").
fn ago(t: std::time::SystemTime) -> String {
    match t.elapsed() {
        Ok(d) => format!("{}s ago", d.as_secs()),
        Err(_) => "now".into(),
    }
}

/// How long until `t` ("in 2s").
fn until(t: std::time::SystemTime) -> String {
    match t.duration_since(std::time::SystemTime::now()) {
        Ok(d) if d.as_millis() >= 500 => format!("in {}s", d.as_secs_f64().round()),
        _ => "now".into(),
    }
}

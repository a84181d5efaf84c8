//! `complete` (`completion/complete`) and `ping`, and the completion lookups the `shell`'s tab
//! completion makes through the same code.
//!
//! Invariants: a completion target is resolved from the catalog only — a prompt by its
//! qualified name (the raw name is what is sent), a resource template by its URI template —
//! and its server is the one that listed it; a request goes only to that server. Output shapes
//! (`--json`): `complete` prints `{"server", "ref": {"type", "name" | "uri"}, "argument",
//! "values": [...], "total", "hasMore"}`; `ping` prints `{"server", "ms"}`.

use std::collections::HashMap;

use mcp_harness_catalog::Snapshot;
use mcp_harness_runtime::Runtime;
use rmcp::model::{ArgumentInfo, CompleteRequestParams, CompletionContext, Reference};
use serde_json::json;

use crate::exit::Exit;

/// What a completion is for: the server that listed the prompt or template, and the reference
/// sent to it.
pub(crate) struct Target {
    /// The server that listed it.
    pub server: String,
    /// `ref/prompt` (raw name) or `ref/resource` (URI template).
    pub reference: Reference,
    /// The arguments (prompt) or variables (template) it has, in their order.
    pub arguments: Vec<String>,
}

/// Finds `name` in `snapshot`: a prompt's qualified name, or a resource template's URI
/// template. An `Err` says what to list to find the right name (not in the catalog), or that
/// several servers list the template (a usage error: `--server` chooses).
pub(crate) fn target(snapshot: &Snapshot, name: &str) -> Result<Target, (String, Exit)> {
    for catalog in snapshot.catalogs.values() {
        if let Some(p) = catalog.prompts.iter().find(|p| p.qualified_name == name) {
            return Ok(Target {
                server: p.server.clone(),
                reference: Reference::for_prompt(p.raw_name.clone()),
                arguments: p
                    .prompt
                    .arguments
                    .iter()
                    .flatten()
                    .map(|a| a.name.clone())
                    .collect(),
            });
        }
    }
    let templates: Vec<_> = snapshot
        .catalogs
        .values()
        .flat_map(|c| c.templates.iter())
        .filter(|t| t.template.uri_template == name)
        .collect();
    match templates.as_slice() {
        [t] => Ok(Target {
            server: t.server.clone(),
            reference: Reference::for_resource(name),
            arguments: variables(name),
        }),
        // A prompt of a server that is not connected is not listed: its state is the news.
        [] if let Some(status) = crate::explain::qualified_server(name)
            .and_then(|server| snapshot.servers.get(server))
            .filter(|s| s.state != mcp_harness_catalog::ServerState::Connected) =>
        {
            Err((crate::explain::server_down_told(status), Exit::Server))
        }
        [] => Err((
            format!(
                "no prompt or resource template named `{name}`; `mcp-harness prompts` lists the \
                 prompts, `mcp-harness resources` the templates (give a template by its URI \
                 template, e.g. 'file:///{{path}}')"
            ),
            Exit::Catalog,
        )),
        several => Err((
            format!(
                "the resource template `{name}` is listed by servers {}; choose one with {}",
                several
                    .iter()
                    .map(|t| t.server.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if crate::explain::in_shell() {
                    "the shell's --server (`mcp-harness --server SERVER shell`)"
                } else {
                    "--server"
                }
            ),
            Exit::Usage,
        )),
    }
}

/// The variable names of a URI template, in order (`{+path}`, `{?q,page}` give `path`, `q`,
/// `page`).
pub(crate) fn variables(template: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let inner = &rest[open + 1..open + close];
        let inner = inner.trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for name in inner.split(',') {
            let name = name.trim_end_matches('*');
            let name = name.split(':').next().unwrap_or(name);
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        rest = &rest[open + close + 1..];
    }
    names
}

/// Asks `target`'s server for completions of `argument` typed so far as `value`, with the
/// arguments already filled in as `context`.
pub(crate) async fn values(
    runtime: &Runtime,
    target: &Target,
    argument: &str,
    value: &str,
    context: HashMap<String, String>,
) -> Result<rmcp::model::CompletionInfo, mcp_harness_runtime::CallError> {
    let mut params =
        CompleteRequestParams::new(target.reference.clone(), ArgumentInfo::new(argument, value));
    if !context.is_empty() {
        params = params.with_context(CompletionContext::with_arguments(context));
    }
    runtime
        .complete(&target.server, params)
        .await
        .map(|r| r.completion)
}

/// `complete NAME ARGUMENT [VALUE] [--with KEY=VALUE]...`.
pub(crate) async fn complete(
    runtime: &Runtime,
    name: &str,
    argument: &str,
    value: &str,
    with: &[String],
    json: bool,
) -> u8 {
    let mut context = HashMap::new();
    for pair in with {
        let Some((k, v)) = pair.split_once('=') else {
            return crate::fail(
                &format!("--with {pair}: write an argument already filled in as KEY=VALUE"),
                Exit::Usage,
            );
        };
        context.insert(k.to_string(), v.to_string());
    }
    let target = match target(&runtime.snapshot(), name) {
        Ok(t) => t,
        Err((e, exit)) => return crate::fail(&e, exit),
    };
    if runtime
        .server_capabilities(&target.server)
        .is_some_and(|c| c.completions.is_none())
    {
        return crate::fail(
            &format!(
                "server {} does not offer completion (it did not declare the `completions` \
                 capability); nothing was sent",
                target.server
            ),
            Exit::Usage,
        );
    }
    if !target.arguments.is_empty() && !target.arguments.iter().any(|a| a == argument) {
        return crate::fail(
            &format!(
                "`{name}` has no argument `{argument}` (it has: {})",
                target.arguments.join(", ")
            ),
            Exit::Usage,
        );
    }
    match values(runtime, &target, argument, value, context).await {
        Ok(info) => {
            if json {
                let reference = match &target.reference {
                    Reference::Prompt(p) => json!({"type": "ref/prompt", "name": p.name}),
                    Reference::Resource(r) => json!({"type": "ref/resource", "uri": r.uri}),
                    #[allow(unreachable_patterns)]
                    _ => json!(null),
                };
                emitln!(
                    "{}",
                    json!({
                        "server": target.server,
                        "ref": reference,
                        "argument": argument,
                        "values": info.values,
                        "total": info.total,
                        "hasMore": info.has_more.unwrap_or(false),
                    })
                );
            } else if info.values.is_empty() {
                emitln!("(none)");
            } else {
                // One value per line: a line break inside a value is shown as `\n`, so one
                // value never reads as two.
                let mut text = String::new();
                for v in &info.values {
                    text.push_str(&v.replace('\r', "\\r").replace('\n', "\\n"));
                    text.push('\n');
                }
                emit!("{}", crate::output::for_stdout(&text));
                if info.has_more == Some(true) {
                    let total = info.total.map(|t| format!(" of {t}")).unwrap_or_default();
                    say!("({} shown{total}; type more to narrow)", info.values.len());
                }
            }
            Exit::Ok.code()
        }
        Err(e) => crate::fail_call(runtime, &e),
    }
}

/// `ping SERVER`: the round-trip time of one `ping`.
pub(crate) async fn ping(runtime: &Runtime, server: &str, json: bool) -> u8 {
    match runtime.ping(server).await {
        Ok(took) => {
            let ms = took.as_secs_f64() * 1000.0;
            if json {
                emitln!("{}", json!({"server": server, "ms": ms}));
            } else {
                emitln!("{server}: answered in {ms:.1} ms");
            }
            Exit::Ok.code()
        }
        Err(e) => crate::fail_call(runtime, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::variables;

    #[test]
    fn template_variables_in_order() {
        assert_eq!(variables("fixture://items/{id}"), ["id"]);
        assert_eq!(
            variables("file:///{+path}{?q,page}/{id:3}"),
            ["path", "q", "page", "id"]
        );
        assert!(variables("plain://x").is_empty());
    }
}

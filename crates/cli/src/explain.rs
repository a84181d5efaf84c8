//! What a failed request says to a person, and the checks made before a request is sent.
//!
//! Invariant: each message is one sentence in the user's terms — commands to run, listings to
//! look at, config keys, the configured servers — never the runtime's vocabulary (catalog
//! revisions, error classes); a request refused here was not sent, and says so. The exit status
//! comes from [`Exit`], as the table documents it.

use mcp_harness_catalog::{CommandSource, ServerState, ServerStatus, Snapshot};
use mcp_harness_runtime::{CallError, Runtime};
use rmcp::model::JsonObject;

use crate::exit::Exit;

/// What the user asked for by name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// A tool (`call`).
    Tool,
    /// A prompt (`prompt`).
    Prompt,
}

/// A refusal or failure for the user: one message, one exit status.
pub(crate) struct Failure {
    pub message: String,
    pub exit: Exit,
}

/// `error` of a request about `name` (a tool, a prompt, a server's resource) in words for a
/// person, looked up against what `snapshot` shows.
pub(crate) fn describe(error: &CallError, asked: Asked, snapshot: &Snapshot) -> Failure {
    let failure = |message: String, exit: Exit| Failure { message, exit };
    match error {
        CallError::UnknownTool { name, .. } => unknown_name(name, asked, snapshot),
        CallError::ServerUnavailable { server, .. } => match snapshot.servers.get(server) {
            Some(status) => failure(server_down_told(status), Exit::Server),
            None => failure(
                format!(
                    "no server named `{server}` ({})",
                    configured(snapshot.servers.keys())
                ),
                Exit::Usage,
            ),
        },
        CallError::InvalidArguments { name, details } => {
            let what = if details.contains(name.as_str()) || details.contains("input schema") {
                details.clone()
            } else {
                format!("the arguments of `{name}` are invalid: {details}")
            };
            failure(format!("{what}; nothing was sent"), Exit::Usage)
        }
        CallError::NotInStep { name, hint, .. } => failure(
            format!("`{name}` is not among the tools the model sees now{hint}"),
            Exit::Catalog,
        ),
        CallError::Stale { name, .. } => failure(
            format!(
                "`{name}` changed while it was being called (its server updated its tools); nothing was sent: run the command again"
            ),
            Exit::Catalog,
        ),
        // A server that is not connected lists no skill: its state is the news, not the name.
        CallError::UnknownSkill { server, .. }
            if snapshot
                .servers
                .get(server)
                .is_some_and(|s| s.state != ServerState::Connected) =>
        {
            let status = &snapshot.servers[server];
            failure(server_down_told(status), Exit::Server)
        }
        CallError::UnknownSkill { server, name, .. } => failure(
            format!(
                "server `{server}` has no skill named `{name}`; `mcp-harness skills` lists them"
            ),
            Exit::Catalog,
        ),
        other => failure(other.to_string(), Exit::of(other)),
    }
}

/// Prints `error` of a request for a `asked` name ([`describe`]) on stderr; its exit status.
pub(crate) fn fail(runtime: &Runtime, error: &CallError, asked: Asked) -> u8 {
    let failure = describe(error, asked, &runtime.snapshot());
    crate::fail(&failure.message, failure.exit)
}

/// `name` is neither a tool nor (for `prompt`) a prompt: its server is down, it is another kind
/// of entry, its server is not configured, or it is misspelt (the closest names are offered).
fn unknown_name(name: &str, asked: Asked, snapshot: &Snapshot) -> Failure {
    // Through `--connect` every name is the gateway's: while it is not connected (it asks for
    // a token, say), that is the news, not the name's server.
    let server = match crate::connect::connected() {
        true => Some(crate::connect::SERVER),
        false => qualified_server(name),
    };
    if let Some(status) = server.and_then(|s| snapshot.servers.get(s))
        && status.state != ServerState::Connected
    {
        return Failure {
            message: format!("`{name}` is unavailable: {}", server_down_told(status)),
            exit: Exit::Server,
        };
    }
    let usage = |message: String| Failure {
        message,
        exit: Exit::Catalog,
    };
    let catalogs = || snapshot.catalogs.values();
    let is_tool = catalogs().any(|c| c.tools.iter().any(|t| t.qualified_name == name));
    let command = catalogs()
        .flat_map(|c| c.commands.iter())
        .find(|c| c.qualified_name == name);
    match (asked, command.map(|c| &c.source)) {
        (Asked::Tool, Some(CommandSource::Prompt { .. })) => {
            return usage(format!(
                "`{name}` is a prompt, not a tool: run it with `mcp-harness prompt {name}` (see `mcp-harness prompts`)"
            ));
        }
        (_, Some(CommandSource::Skill { name: skill })) => {
            let server = command.map(|c| c.server.as_str()).unwrap_or_default();
            return usage(format!(
                "`{name}` is a skill: load it with `mcp-harness skill {server} {skill}` (see `mcp-harness skills`)"
            ));
        }
        _ => {}
    }
    if asked == Asked::Prompt && is_tool {
        return usage(format!(
            "`{name}` is a tool, not a prompt: call it with `mcp-harness call {name}` (see `mcp-harness tools`)"
        ));
    }
    if let Some(resource) = catalogs()
        .flat_map(|c| c.resources.iter())
        .find(|r| r.resource.uri == name || r.resource.name == name)
    {
        return usage(format!(
            "`{name}` is a resource: read it with `mcp-harness read {} {}` (see `mcp-harness resources`)",
            resource.server, resource.resource.uri
        ));
    }
    // A tool its server lists but the config hides (`excludeTools`, `includeTools`, a bad
    // schema): said with the reason, and how to show it again when a command does that.
    if asked == Asked::Tool
        && let Some(server) = server
        && let Some(hidden) = snapshot.catalogs.get(server).and_then(|c| {
            c.hidden.iter().find(|h| {
                h.kind == mcp_harness_catalog::Kind::Tools
                    && name.strip_prefix(&format!("mcp__{server}__")) == Some(h.raw_name.as_str())
            })
        })
    {
        let again = match hidden.reason.contains("excludeTools")
            || hidden.reason.contains("includeTools")
        {
            true => format!(
                "; `mcp-harness enable {server} {}` shows it again",
                hidden.raw_name
            ),
            false => String::new(),
        };
        return usage(format!(
            "`{name}` is hidden: {}{again} (see `mcp-harness tools --hidden`)",
            hidden.reason
        ));
    }
    let (noun, listing) = match asked {
        Asked::Tool => ("tool", "tools"),
        Asked::Prompt => ("prompt", "prompts"),
    };
    let names: Vec<&str> = match asked {
        Asked::Tool => catalogs()
            .flat_map(|c| c.tools.iter().map(|t| t.qualified_name.as_str()))
            .collect(),
        Asked::Prompt => catalogs()
            .flat_map(|c| c.prompts.iter().map(|p| p.qualified_name.as_str()))
            .collect(),
    };
    let mut message = format!("no {noun} named `{name}`");
    // A server listed under its names as they are (`names: "as-listed"`, a gateway's) shows
    // `mcp__<its upstream>__...`: that part names no configured server, and is no mistake.
    if let Some(server) = server
        && !snapshot.servers.contains_key(server)
        && !names.iter().any(|n| qualified_server(n) == Some(server))
    {
        message.push_str(&match crate::sources::not_loaded(server) {
            Some(not_loaded) => format!(": {not_loaded}"),
            None => format!(
                ": no server named `{server}` is configured ({})",
                configured(snapshot.servers.keys())
            ),
        });
    }
    let close = closest(name, &names);
    if !close.is_empty() {
        let quoted: Vec<String> = close.iter().map(|n| format!("`{n}`")).collect();
        message.push_str(&format!("; did you mean {}?", quoted.join(" or ")));
    }
    message.push_str(&format!(" (`mcp-harness {listing}` lists them)"));
    usage(message)
}

/// The server part of `mcp__SERVER__NAME` (server names never hold `__`).
pub(crate) fn qualified_server(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("mcp__")?;
    rest.split_once("__")
        .map(|(server, _)| server)
        .filter(|s| !s.is_empty())
}

/// `configured servers: a, b`, or that none is.
pub(crate) fn configured<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        "no server is configured".into()
    } else {
        format!("configured servers: {}", names.join(", "))
    }
}

/// After a listing (`tools`, `prompts`, `resources`, `skills`): one line on stderr per server
/// that failed, needs authorization or never finished connecting, saying why — what it would
/// have listed is missing.
pub(crate) fn note_incomplete(snapshot: &Snapshot) {
    for status in snapshot.servers.values() {
        if matches!(
            status.state,
            ServerState::Failed { .. } | ServerState::NeedsAuth { .. } | ServerState::Pending
        ) {
            note!("warning: {} (not listed)", server_down(status));
        }
    }
}

/// How many of the tail's last lines a one-shot command's failure shows (`servers` shows all).
const TAIL_LINES: usize = 10;

/// [`server_down`], followed for a failed server by the last lines its process wrote on
/// stderr, which usually say why: the failure of a command that needed the server.
pub(crate) fn server_down_told(status: &ServerStatus) -> String {
    let mut told = server_down(status);
    let ServerState::Failed { error } = &status.state else {
        return told;
    };
    let Some((_, tail)) = error.split_once(mcp_harness_transport::STDERR_TAIL_MARK) else {
        return told;
    };
    // The runtime's note on background probing follows the tail.
    let tail = tail
        .rsplit_once(" (")
        .filter(|(_, note)| note.contains("probing again in the background"))
        .map_or(tail, |(tail, _)| tail);
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return told;
    }
    told.push_str("\n  its stderr ended with (`mcp-harness servers` shows more):");
    for line in &lines[lines.len().saturating_sub(TAIL_LINES)..] {
        told.push_str("\n    ");
        told.extend(line.chars().filter(|c| !c.is_control()));
    }
    told
}

tokio::task_local! {
    /// Set while the interactive shell runs: its hints name the shell's own commands, which
    /// change only the session, instead of the CLI's, which edit the config.
    pub(crate) static IN_SHELL: ();
}

/// Whether the command runs inside `shell` (its own options differ from the CLI's).
pub(crate) fn in_shell() -> bool {
    IN_SHELL.try_with(|_| ()).is_ok()
}

/// What a server waiting for authorization needs, and who does it, to follow its name: the
/// gateway's token (under `--connect`), the credentials in its `headers` (a legacy sse server
/// has no OAuth login), else a `login`.
pub(crate) fn needs_auth(status: &ServerStatus) -> String {
    let name = &status.name;
    match crate::connect::needs_auth_hint() {
        Some(hint) => format!(": {hint}"),
        None if status.transport == "sse" => " needs authorization: put the credentials it \
            expects in its `headers` in the config (a legacy sse server has no OAuth login)"
            .to_string(),
        None => format!(" needs authorization: run `mcp-harness login {name}`"),
    }
}

/// Why a configured server cannot answer, as one line with what to do.
pub(crate) fn server_down(status: &ServerStatus) -> String {
    let name = &status.name;
    let line = |text: &str| -> String {
        let first = text.lines().next().unwrap_or_default();
        first.chars().filter(|c| !c.is_control()).collect()
    };
    match &status.state {
        ServerState::Failed { error } => {
            // The error before the runtime's note on background probing, which a one-shot
            // command does not wait for.
            let error = match error.find("probing again in the background") {
                Some(at) => error[..at]
                    .rfind(" (")
                    .map_or(error.as_str(), |cut| &error[..cut]),
                None => error,
            };
            format!("server `{name}` failed: {}", line(error))
        }
        ServerState::NeedsAuth { .. } => format!("server `{name}`{}", needs_auth(status)),
        ServerState::Disabled if in_shell() => {
            format!("server `{name}` is disabled: `enable {name}` starts it for this session")
        }
        ServerState::Disabled => format!(
            "server `{name}` is disabled in the config (`enabled: false`; `mcp-harness enable {name}`)"
        ),
        ServerState::Untrusted { reason } => {
            format!("server `{name}` is not started: {}", line(reason))
        }
        ServerState::Pending => format!(
            "server `{name}` did not finish connecting in time (raise its `startupTimeoutSec`)"
        ),
        ServerState::Connected => format!("server `{name}` is connected"),
    }
}

/// Up to three of `names` closest to `wanted` by edit distance, nearest first, within a
/// distance that still looks like a typo (a third of the name, at least 2). A name that
/// differs only in the server or only in the tool part counts as close when that part is.
fn closest<'a>(wanted: &str, names: &[&'a str]) -> Vec<&'a str> {
    // A third of the part after the server: `mcp__fx__ech` is close to `mcp__fx__echo`, not
    // to `mcp__fx__add`.
    let limit = (tail(wanted).chars().count() / 3).max(2);
    fn tail(n: &str) -> &str {
        n.strip_prefix("mcp__")
            .and_then(|r| r.split_once("__"))
            .map_or(n, |(_, t)| t)
    }
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .map(|&n| {
            let whole = distance(wanted, n);
            // The same tool asked of the wrong (or a misspelt) server.
            let same_tool = if tail(n) == tail(wanted) && tail(n) != n {
                limit
            } else {
                usize::MAX
            };
            (whole.min(same_tool), n)
        })
        .filter(|(d, _)| *d <= limit)
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// Levenshtein distance over characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// What a request needs the server to have declared at initialize.
#[derive(Clone, Copy)]
pub(crate) enum Needs {
    /// `resources/read`: the `resources` capability.
    Resources,
    /// `resources/subscribe`: `resources.subscribe: true`.
    Subscribe,
}

/// Refuses, before sending, a request `server` did not declare (no round trip for a `-32601`).
/// A server that is not connected passes: the request then fails with its state.
pub(crate) fn check_declared(runtime: &Runtime, server: &str, needs: Needs) -> Result<(), String> {
    let Some(caps) = runtime.server_capabilities(server) else {
        return Ok(());
    };
    match (needs, &caps.resources) {
        (_, None) => Err(format!(
            "server `{server}` does not offer resources (it declared no `resources` capability); nothing was sent"
        )),
        (Needs::Subscribe, Some(r)) if r.subscribe != Some(true) => Err(format!(
            "server `{server}` does not support subscriptions (its `resources` capability has no `subscribe: true`); nothing was sent"
        )),
        _ => Ok(()),
    }
}

/// Checks `args` of prompt `name` against the arguments the prompt declared: each required one
/// present, every value a string (prompt arguments are strings). A skill's command is refused
/// (it is loaded with `skill`, not fetched as a prompt); a name not in `snapshot` passes (the
/// request then says it is unknown).
pub(crate) fn check_prompt_args(
    snapshot: &Snapshot,
    name: &str,
    args: Option<&JsonObject>,
) -> Result<(), String> {
    if let Some(command) = snapshot
        .catalogs
        .values()
        .flat_map(|c| c.commands.iter())
        .find(|c| c.qualified_name == name)
        && let CommandSource::Skill { name: skill } = &command.source
    {
        return Err(format!(
            "`{name}` is a skill, not a prompt: load it with `mcp-harness skill {} {skill}`; nothing was sent",
            command.server
        ));
    }
    let Some(prompt) = snapshot
        .catalogs
        .values()
        .flat_map(|c| c.prompts.iter())
        .find(|p| p.qualified_name == name)
    else {
        return Ok(());
    };
    let declared = prompt.prompt.arguments.as_deref().unwrap_or_default();
    // A null counts as not given: required, it is missing; optional, it is better left out.
    let given = |key: &str| args.and_then(|a| a.get(key)).filter(|v| !v.is_null());
    let required = |key: &str| {
        declared
            .iter()
            .any(|a| a.name == key && a.required == Some(true))
    };
    let missing: Vec<&str> = declared
        .iter()
        .filter(|a| a.required == Some(true) && given(&a.name).is_none())
        .map(|a| a.name.as_str())
        .collect();
    let null: Vec<&str> = args
        .into_iter()
        .flatten()
        .filter(|(k, v)| v.is_null() && !required(k))
        .map(|(k, _)| k.as_str())
        .collect();
    let not_text: Vec<&str> = args
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_string() && !v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    if missing.is_empty() && null.is_empty() && not_text.is_empty() {
        return Ok(());
    }
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "missing required {} {}",
            if missing.len() == 1 {
                "argument"
            } else {
                "arguments"
            },
            quote(&missing)
        ));
    }
    if !null.is_empty() {
        problems.push(format!(
            "{} {} null: leave an optional argument out instead",
            quote(&null),
            if null.len() == 1 { "is" } else { "are" }
        ));
    }
    if !not_text.is_empty() {
        let (what, be) = match not_text.len() {
            1 => ("", "is"),
            _ => ("s", "are"),
        };
        problems.push(format!(
            "the value{what} of {} {be} not a string (a prompt's arguments are strings: \
             write \"3\", not 3)",
            quote(&not_text)
        ));
    }
    Err(format!(
        "prompt `{name}`: {}; nothing was sent (its arguments: {})",
        problems.join("; "),
        argument_list(prompt.prompt.arguments.as_deref().unwrap_or_default())
    ))
}

/// `a (required), b`, or `none`.
pub(crate) fn argument_list(arguments: &[rmcp::model::PromptArgument]) -> String {
    if arguments.is_empty() {
        return "none".into();
    }
    arguments
        .iter()
        .map(|a| {
            if a.required == Some(true) {
                format!("{} (required)", a.name)
            } else {
                a.name.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn quote(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_offered_nearest_first() {
        let names = ["mcp__fast__add", "mcp__fast__adder", "mcp__fx__echo"];
        assert_eq!(
            closest("mcp__fast__adde", &names),
            vec!["mcp__fast__add", "mcp__fast__adder"]
        );
        assert_eq!(closest("mcp__fast__ad", &names), vec!["mcp__fast__add"]);
        assert_eq!(closest("mcp__fst__add", &names)[0], "mcp__fast__add");
        // The right tool of another server.
        assert_eq!(closest("mcp__slow__echo", &names), vec!["mcp__fx__echo"]);
        assert!(closest("mcp__fx__nothing_alike", &names).is_empty());
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn the_server_of_a_qualified_name() {
        assert_eq!(qualified_server("mcp__fx__echo"), Some("fx"));
        assert_eq!(qualified_server("mcp__fx__a__b"), Some("fx"));
        assert_eq!(qualified_server("mcp_harness__read_output"), None);
        assert_eq!(qualified_server("echo"), None);
    }
}

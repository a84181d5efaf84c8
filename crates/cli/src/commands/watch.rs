//! `watch`: prints every new revision and, for each, which servers and kinds changed and why.

use mcp_harness_catalog::Snapshot;
use mcp_harness_runtime::Runtime;

/// One revision as text: a header line, then one line per change.
pub fn describe(snapshot: &Snapshot) -> String {
    let connected = snapshot
        .servers
        .values()
        .filter(|s| s.state.label() == "connected")
        .count();
    let mut out = format!(
        "revision {}: {} servers ({} connected), {} tools\n",
        snapshot.revision,
        snapshot.servers.len(),
        connected,
        snapshot.tools().count()
    );
    for change in &snapshot.changes {
        match change.kind {
            None => out.push_str(&format!("  {}: {}\n", change.server, change.cause)),
            Some(kind) => {
                let mut parts = Vec::new();
                if !change.added.is_empty() {
                    parts.push(format!("+{}", change.added.join(" +")));
                }
                if !change.removed.is_empty() {
                    parts.push(format!("-{}", change.removed.join(" -")));
                }
                out.push_str(&format!(
                    "  {} {}: {} ({})\n",
                    change.server,
                    kind,
                    parts.join(" "),
                    change.cause
                ));
            }
        }
    }
    out
}
/// Runs one command typed while watching and says what happened: `restart SERVER` (a stdio
/// server is never restarted behind the user's back; this is how they ask for it), `help`.
pub fn command(runtime: &Runtime, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => String::new(),
        ["restart", server] => match runtime.restart(server) {
            Ok(()) => format!("restarting {server}"),
            Err(e) => format!("cannot restart {server}: {e}"),
        },
        ["help"] => "commands: restart SERVER".into(),
        _ => format!(
            "unknown command `{}` (commands: restart SERVER)",
            line.trim()
        ),
    }
}

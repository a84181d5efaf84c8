//! `watch`: prints every new revision and, for each, which servers and kinds changed and why; when
//! the terminal fell behind the runtime's buffer, the revisions it missed come as one item that
//! says how many they were, with their combined change.

use mcp_harness_catalog::{Change, Snapshot};
use mcp_harness_runtime::{Revision, Runtime};

use crate::output::count;

/// One item of the revision stream as text: a revision as [`describe`] shows it, or, when this
/// reader fell behind, the revisions it missed as one, with their combined change.
pub(crate) fn describe_item(item: &Revision) -> String {
    match item {
        Revision::Next(snapshot) => describe(snapshot),
        Revision::Skipped {
            from,
            count: skipped,
            changes,
            snapshot,
        } => {
            let mut out = format!(
                "revisions {}..={} ({} skipped while this reader was behind; \
                 their combined change follows)\n",
                from + 1,
                snapshot.revision,
                count(*skipped as usize, "revision")
            );
            out.push_str(&describe_changes(snapshot, changes));
            out
        }
    }
}

/// One revision as text: a header line, then one line per change.
pub(crate) fn describe(snapshot: &Snapshot) -> String {
    describe_changes(snapshot, &snapshot.changes)
}

/// One item of the revision stream as one JSON line (`watch --json`).
pub(crate) fn item_json_line(item: &Revision) -> String {
    match item {
        Revision::Next(snapshot) => json_line(snapshot, &snapshot.changes, None),
        Revision::Skipped {
            count,
            changes,
            snapshot,
            ..
        } => json_line(snapshot, changes, Some(*count)),
    }
}

/// A revision as one JSON object on one line: revision, time, counts, the changes, and how many
/// revisions were combined into it when the reader fell behind.
pub(crate) fn json_line(snapshot: &Snapshot, changes: &[Change], skipped: Option<u64>) -> String {
    let connected = snapshot
        .servers
        .values()
        .filter(|s| s.state.label() == "connected")
        .count();
    let changes: Vec<serde_json::Value> = changes
        .iter()
        .map(|c| {
            serde_json::json!({
                "server": c.server,
                "kind": c.kind.map(|k| k.to_string()),
                "cause": c.cause,
                "added": c.added,
                "removed": c.removed,
                "changed": c.changed,
            })
        })
        .collect();
    serde_json::json!({
        "revision": snapshot.revision,
        "time": crate::output::rfc3339(std::time::SystemTime::now()),
        "servers": snapshot.servers.len(),
        "connected": connected,
        "tools": snapshot.tools().count(),
        "changes": changes,
        "skipped": skipped,
    })
    .to_string()
}

fn header(snapshot: &Snapshot) -> String {
    let connected = snapshot
        .servers
        .values()
        .filter(|s| s.state.label() == "connected")
        .count();
    format!(
        "revision {}: {} ({connected} connected), {}\n",
        snapshot.revision,
        count(snapshot.servers.len(), "server"),
        count(snapshot.tools().count(), "tool")
    )
}

/// `snapshot`'s header, then one line per change of `changes`.
fn describe_changes(snapshot: &Snapshot, changes: &[Change]) -> String {
    let mut out = header(snapshot);
    for change in changes {
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
                if !change.changed.is_empty() {
                    parts.push(format!("~{}", change.changed.join(" ~")));
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
pub(crate) fn command(runtime: &Runtime, line: &str) -> String {
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

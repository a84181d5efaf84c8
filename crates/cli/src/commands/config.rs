//! `mcp-harness config` (the merged config: each server's transport, source file and whether it
//! is enabled, and what was dropped and why) and `mcp-harness config import FILE [--out PATH]`
//! (another host's config in our format). Also how every other command loads its config:
//! `--config PATH` reads only that file, in any supported format; without it the user and
//! project sources are merged, and the user config's remote sources join as a second batch.
//!
//! Invariant: nothing here prints a value read from the environment: the table shows no
//! commands, server URLs or headers (a remote source is shown by its config key and its URL
//! without query or credentials), and an import keeps `${VAR}` references unexpanded.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mcp_harness_runtime::Config;
use mcp_harness_runtime::sources::{self, Format, Merged, Origin, Scope, Sources};

use crate::table;

/// `config` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum Action {
    /// Convert a Claude Code, Claude Desktop, Cursor, VS Code, Codex or Gemini CLI config to the
    /// mcp-harness format. `${VAR}` references are kept, never replaced by their values.
    /// `--from HOST` instead finds that host's own config file and adds its servers to ours
    /// (see `commands/import.rs`).
    Import {
        /// The file to convert (format detected from its name and shape).
        #[arg(required_unless_present = "from", conflicts_with = "from")]
        file: Option<PathBuf>,
        /// Write the result here (a new file, readable only by you) instead of printing it.
        #[arg(long, value_name = "PATH", conflicts_with = "from")]
        out: Option<PathBuf>,
        #[command(flatten)]
        host: super::import::FromHost,
    },
}

/// The config every other command runs with: only `explicit` when given, else the merged
/// sources (remote ones as far as fetched). Dropped servers are logged (with why). With `ask`, an
/// untrusted project file is shown and asked about on a terminal; otherwise (or without a
/// terminal) its servers stay untrusted and a warning names the command that trusts it.
pub(crate) fn load(explicit: Option<&Path>, ask: bool) -> Result<Config, String> {
    if let Some(path) = explicit {
        return sources::load_any_asking(
            path,
            &|name| std::env::var(name).ok(),
            &crate::sources::input_prompt(),
        )
        .map(|(c, _)| c)
        .map_err(|e| e.to_string());
    }
    let sources = crate::sources::shared();
    let merged = sources.merge().map_err(|e| e.to_string())?;
    let merged = super::trust::ask_or_hold(sources, merged, ask)?;
    if merged.files.is_empty() {
        return Err(format!(
            "no config found ({}): pass --config PATH, or try `mcp-harness demo`",
            looked_in(sources)
        ));
    }
    for (server, reason) in &merged.dropped {
        tracing::warn!(%server, "not loaded: {reason}");
    }
    crate::sources::remember_dropped(merged.dropped.clone());
    for note in &merged.notes {
        tracing::info!("{note}");
    }
    Ok(merged.config)
}

/// The files the config of [`load`] comes from (watched for hot reload): `explicit`, or every
/// source file that may exist (so creating one is noticed too) and the trust store of project
/// files.
pub(crate) fn files(explicit: Option<&Path>) -> Vec<PathBuf> {
    match explicit {
        Some(path) => vec![path.to_path_buf()],
        None => {
            let sources = crate::sources::shared();
            // The plugins folder too: adding or removing a plugin changes its time. And the
            // trust store: `trust` and `trust --revoke` start and stop a project's servers.
            sources
                .files()
                .into_iter()
                .map(|(_, path)| path)
                .chain(sources.plugins_dir())
                .chain(
                    sources
                        .trust_store()
                        .map(|store| store.path().to_path_buf()),
                )
                .collect()
        }
    }
}

/// Runs `config` (with `action`, or showing the merged config); returns the exit code.
/// `yes` (the global `--yes`) skips the question of `import --from`.
pub(crate) async fn run(
    explicit: Option<&Path>,
    json: bool,
    action: Option<&Action>,
    yes: bool,
) -> u8 {
    let result = match action {
        Some(Action::Import {
            file: Some(file),
            out,
            ..
        }) => import(file, out.as_deref()),
        Some(Action::Import { host, .. }) => return super::import::run(host, yes),
        None => show(explicit, json).await,
    };
    crate::exit::printed(result)
}

fn looked_in(sources: &Sources) -> String {
    let files: Vec<String> = sources
        .files()
        .iter()
        .map(|(_, p)| p.display().to_string())
        .collect();
    files.join(", ")
}

/// The merged config (or only `explicit`) as a table or JSON. Unset environment variables do
/// not stop it: they are listed instead, and a server that needs one is shown unusable, saying
/// which (`${VAR:-default}` takes its default), as every other command reads it.
async fn show(explicit: Option<&Path>, json: bool) -> Result<String, String> {
    // Read first as every command reads it (a server needing an unset variable is unusable);
    // a file that then fails (an unset variable outside `mcpServers`, such as the gateway's
    // session keys) is read again with unset variables empty, as this view always could.
    match view(explicit, json, false).await {
        Ok(shown) => Ok(shown),
        Err(_) => view(explicit, json, true).await,
    }
}

/// [`show`] with unset variables read as unset, or (`empty`) as empty.
async fn view(explicit: Option<&Path>, json: bool, empty: bool) -> Result<String, String> {
    let unset = Arc::new(Mutex::new(BTreeSet::new()));
    let lookup = {
        let unset = unset.clone();
        move |name: &str| {
            // What the sources read to find the user config is not a `${VAR}` of a config.
            if matches!(name, "XDG_CONFIG_HOME" | "HOME") {
                return std::env::var(name).ok();
            }
            std::env::var(name).ok().or_else(|| {
                if let Ok(mut u) = unset.lock() {
                    u.insert(name.to_string());
                }
                empty.then(String::new)
            })
        }
    };
    let mut merged = match explicit {
        Some(path) => {
            let (config, converted) =
                sources::load_noted(path, &lookup).map_err(|e| e.to_string())?;
            let origin = Origin {
                url: None,
                path: Some(path.to_path_buf()),
                format: converted.format,
                scope: Scope::Explicit,
            };
            Merged {
                origins: config
                    .servers
                    .keys()
                    .map(|n| (n.clone(), origin.clone()))
                    .collect(),
                config,
                dropped: Vec::new(),
                files: vec![origin],
                notes: converted.notes,
                remote: Vec::new(),
                untrusted: Vec::new(),
            }
        }
        None => {
            // A header other commands would refuse (its variable unset) is refused here too,
            // not sent empty.
            let sources = Sources::new()
                .with_env(lookup)
                .with_header_env(|name| std::env::var(name).ok());
            let mut merged = sources.merge().map_err(|e| e.to_string())?;
            if !merged.remote.is_empty() {
                let outcomes = sources.fetch_remote().await.map_err(|e| e.to_string())?;
                let failed: Vec<String> = outcomes
                    .into_iter()
                    .filter_map(|(_, outcome)| outcome.err())
                    .map(|e| format!("{e}; its servers are not loaded"))
                    .collect();
                merged = sources.merge().map_err(|e| e.to_string())?;
                merged.notes.extend(failed);
            }
            for file in &merged.untrusted {
                merged.notes.push(format!(
                    "{}; to review and trust it, run: {}",
                    file.reason(),
                    super::trust::command(&file.path)
                ));
            }
            if merged.files.is_empty() && merged.config.servers.is_empty() {
                return Err(format!(
                    "no config found ({}): pass --config PATH, or write one of those files \
                     (`mcp-harness config import FILE --out .mcp-harness.json` converts another \
                     host's)",
                    looked_in(&sources)
                ));
            }
            merged
        }
    };
    // A name that looks like a secret typed into the braces is not shown.
    let unset: Vec<String> = unset
        .lock()
        .map(|u| {
            u.iter()
                .map(
                    |name| match mcp_harness_runtime::looks_like_a_secret(name) {
                        true => "(a name that looks like a secret, not shown)".to_string(),
                        false => name.clone(),
                    },
                )
                .collect()
        })
        .unwrap_or_default();
    if !unset.is_empty() {
        merged.notes.push(format!(
            "environment variables not set: {} ({}; other commands refuse a `${{VAR}}` without \
             a default that is unset)",
            unset.join(", "),
            if empty {
                "read as empty here"
            } else {
                "a server that needs one is unusable"
            }
        ));
    }
    Ok(if json {
        table::pretty(&to_json(&merged))
    } else {
        to_table(&merged)
    })
}

fn to_json(merged: &Merged) -> serde_json::Value {
    let servers: Vec<serde_json::Value> = merged
        .config
        .servers
        .values()
        .map(|s| {
            let origin = merged.origins.get(&s.name);
            serde_json::json!({
                "name": s.name,
                "transport": s.transport.kind(),
                "enabled": s.enabled,
                "untrusted": s.untrusted,
                "source": origin.and_then(|o| {
                    o.path.as_ref().map(|p| p.display().to_string()).or_else(|| o.url.clone())
                }),
                "scope": origin.map(|o| o.scope.name()),
                "format": origin.map(|o| o.format.id()),
            })
        })
        .collect();
    let dropped: Vec<serde_json::Value> = merged
        .dropped
        .iter()
        .map(|(server, reason)| serde_json::json!({"server": server, "reason": reason}))
        .collect();
    let files: Vec<serde_json::Value> = merged
        .files
        .iter()
        .map(|o| {
            serde_json::json!({
                "path": o.path.as_ref().map(|p| p.display().to_string()),
                "scope": o.scope.name(),
                "format": o.format.id(),
            })
        })
        .collect();
    serde_json::json!({
        "servers": servers,
        "dropped": dropped,
        "files": files,
        "notes": merged.notes,
    })
}

fn to_table(merged: &Merged) -> String {
    let rows: Vec<Vec<String>> = merged
        .config
        .servers
        .values()
        .map(|s| {
            let origin = merged.origins.get(&s.name);
            vec![
                s.name.clone(),
                s.transport.kind().to_string(),
                match (s.enabled, &s.untrusted) {
                    (_, Some(_)) => "untrusted",
                    (true, None) => "yes",
                    (false, None) => "no",
                }
                .to_string(),
                origin.map_or("", |o| o.scope.name()).to_string(),
                origin.map_or("", |o| o.format.name()).to_string(),
                match origin {
                    Some(Origin { path: Some(p), .. }) => crate::output::short(p),
                    Some(Origin { url: Some(u), .. }) => u.clone(),
                    _ => "(dynamic)".to_string(),
                },
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        "no servers\n".to_string()
    } else {
        table::render(
            &[
                "SERVER",
                "TRANSPORT",
                "ENABLED",
                "SCOPE",
                "FORMAT",
                "SOURCE",
            ],
            &rows,
        )
    };
    if !merged.dropped.is_empty() {
        out.push_str("\ndropped:\n");
        for (server, reason) in &merged.dropped {
            out.push_str(&format!("  {server}: {reason}\n"));
        }
    }
    if !merged.notes.is_empty() {
        out.push_str("\nnotes:\n");
        for note in &merged.notes {
            out.push_str(&format!("  {note}\n"));
        }
    }
    // Notes quote keys a file or a remote source wrote: a person reads this, piped or not.
    crate::output::for_terminal(&out)
}

/// Converts `file`; prints it with the secrets written literally in it redacted (as `get`
/// shows servers), or writes it whole to `out` (never over an existing file).
fn import(file: &Path, out: Option<&Path>) -> Result<String, String> {
    let converted = sources::import(file).map_err(|e| e.to_string())?;
    for note in &converted.notes {
        say!("note: {note}");
    }
    let text = table::pretty(&converted.document);
    let count = converted.servers().map_or(0, |s| s.len());
    let Some(out) = out else {
        let mut shown = crate::commands::edit::ordered::Json::from(&converted.document);
        let mut hidden = false;
        if let Some(servers) = shown
            .as_object_mut()
            .and_then(|root| root.get_mut("mcpServers"))
            .and_then(crate::commands::edit::ordered::Json::as_object_mut)
        {
            let names: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
            for name in names {
                let Some(server) = servers.get(&name).and_then(|s| s.as_object()) else {
                    continue;
                };
                let redacted = crate::commands::edit::redacted(server);
                hidden |= redacted.as_object() != Some(server);
                servers.insert(&name, redacted);
            }
        }
        // Our own format's remote sources: their URLs and headers are redacted alike.
        if let Some(crate::commands::edit::ordered::Json::Array(sources)) = shown
            .as_object_mut()
            .and_then(|root| root.get_mut("remoteSources"))
        {
            for source in sources.iter_mut() {
                let Some(entry) = source.as_object() else {
                    continue;
                };
                let redacted = crate::commands::edit::redacted(entry);
                hidden |= redacted.as_object() != Some(entry);
                *source = redacted;
            }
        }
        if hidden {
            say!(
                "note: values written literally in {} that may be secrets are shown as {}; \
                 `--out PATH` writes them (to a new file only you can read)",
                file.display(),
                mcp_harness_transport::redact::MARKER
            );
        }
        return Ok(table::pretty(&shown.to_value()));
    };
    write_new(out, &text).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => format!(
            "{} already exists; `--out` writes only a new file (it may hold secrets): choose another path, or remove that file first",
            out.display()
        ),
        _ => format!("{}: cannot write: {e}", out.display()),
    })?;
    Ok(format!(
        "wrote {} ({count} server{} from {})\n",
        out.display(),
        if count == 1 { "" } else { "s" },
        describe(converted.format, file)
    ))
}

fn describe(format: Format, file: &Path) -> String {
    format!("{format} config {}", file.display())
}

/// Creates `path` (failing if it exists), readable and writable by the owner only: an imported
/// file may hold secrets that were written literally in the original.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

//! `mcp-harness config import --from HOST`: finds another host's MCP config where that host keeps
//! it on Linux and macOS, shows the servers it would add (secrets redacted), asks on a terminal
//! (`--yes` skips the question) and adds them to the user config (or `--scope project`).
//!
//! Invariants: every file is read through the host readers of `mcp_harness_runtime::sources`
//! (the same conversion `--config` and the plain `config import FILE` use, `${VAR}` kept
//! unexpanded); a server whose name the target file already has is skipped, and said to be,
//! unless `--force`; without a terminal and without `--yes` nothing is written (exit 2); all
//! servers are written in one atomic replacement of the target file (see `edit::file`).

use std::path::PathBuf;

use mcp_harness_runtime::sources;

use super::edit::{self, ConfigFile, EditError, ScopeArg, ordered::Json};
use crate::exit::Exit;
use crate::table;

/// A host whose config `--from` reads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Host {
    /// Claude Code: `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json` when set).
    ClaudeCode,
    /// Claude Desktop: `claude_desktop_config.json` in `~/.config/Claude` (Linux, honouring
    /// `XDG_CONFIG_HOME`) or `~/Library/Application Support/Claude` (macOS).
    ClaudeDesktop,
    /// Cursor: `~/.cursor/mcp.json`.
    Cursor,
    /// VS Code: `mcp.json` (else `settings.json`'s `mcp`) in the user folder, `~/.config/Code/User`
    /// (Linux) or `~/Library/Application Support/Code/User` (macOS).
    #[value(name = "vscode")]
    VsCode,
    /// Codex: `$CODEX_HOME/config.toml`, default `~/.codex/config.toml`.
    Codex,
    /// Gemini CLI: `~/.gemini/settings.json`.
    Gemini,
}

/// `config import --from HOST` options.
#[derive(clap::Args, Debug)]
pub(crate) struct FromHost {
    /// Import the servers of this host's own config file instead of a FILE.
    #[arg(long, value_enum, value_name = "HOST")]
    pub(crate) from: Option<Host>,
    /// With --from: which config to add them to (default: user).
    #[arg(long, short = 's', value_enum, requires = "from")]
    scope: Option<ScopeArg>,
    /// With --from: replace servers of the same name instead of skipping them.
    #[arg(long, requires = "from")]
    force: bool,
}

impl Host {
    fn name(self) -> &'static str {
        match self {
            Host::ClaudeCode => "Claude Code",
            Host::ClaudeDesktop => "Claude Desktop",
            Host::Cursor => "Cursor",
            Host::VsCode => "VS Code",
            Host::Codex => "Codex",
            Host::Gemini => "Gemini CLI",
        }
    }

    /// Where the host keeps its user config, most specific first (`lookup` reads the
    /// environment: `HOME`, `XDG_CONFIG_HOME`, `CODEX_HOME`, `CLAUDE_CONFIG_DIR`).
    fn candidates(self, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
        let var = |k: &str| lookup(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let Some(home) = var("HOME") else {
            return Vec::new();
        };
        let xdg = var("XDG_CONFIG_HOME")
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".config"));
        let mac = home.join("Library/Application Support");
        let app = |dir: &str| -> Vec<PathBuf> {
            if cfg!(target_os = "macos") {
                vec![mac.join(dir), xdg.join(dir)]
            } else {
                vec![xdg.join(dir)]
            }
        };
        match self {
            Host::ClaudeCode => vec![
                var("CLAUDE_CONFIG_DIR")
                    .unwrap_or_else(|| home.clone())
                    .join(".claude.json"),
            ],
            Host::ClaudeDesktop => app("Claude")
                .into_iter()
                .map(|d| d.join("claude_desktop_config.json"))
                .collect(),
            Host::Cursor => vec![home.join(".cursor/mcp.json")],
            Host::VsCode => app("Code/User")
                .into_iter()
                .flat_map(|d| [d.join("mcp.json"), d.join("settings.json")])
                .collect(),
            Host::Codex => vec![
                var("CODEX_HOME")
                    .unwrap_or_else(|| home.join(".codex"))
                    .join("config.toml"),
            ],
            Host::Gemini => vec![home.join(".gemini/settings.json")],
        }
    }
}

/// What happens to one server found in the host's file.
enum Step {
    Add,
    Replace,
    /// The target already has it (or an earlier host file did): kept as it is.
    Skip(String),
}

struct Planned {
    name: String,
    from: PathBuf,
    server: serde_json::Map<String, serde_json::Value>,
    step: Step,
}

/// Runs `config import --from HOST`; returns the exit code.
pub(crate) fn run(args: &FromHost, yes: bool) -> u8 {
    let Some(host) = args.from else {
        say!("error: `config import` needs a FILE or --from HOST");
        return crate::exit::Exit::Usage.code();
    };
    match import(host, args, yes) {
        Ok(exit) => exit.code(),
        Err(e) => {
            say!(
                "error: {}",
                mcp_harness_transport::redact::text(&e.to_string())
            );
            e.exit_code()
        }
    }
}

fn import(host: Host, args: &FromHost, yes: bool) -> Result<Exit, EditError> {
    let scope = args.scope.unwrap_or(ScopeArg::User);
    let candidates = host.candidates(&|k| std::env::var(k).ok());
    let found: Vec<PathBuf> = candidates.iter().filter(|p| p.is_file()).cloned().collect();
    // VS Code's settings.json counts only when it has an `mcp` section and no mcp.json exists.
    let found: Vec<PathBuf> = match host {
        Host::VsCode => found.into_iter().take(1).collect(),
        _ => found,
    };
    if found.is_empty() {
        let looked: Vec<String> = candidates.iter().map(|p| edit::shown(p)).collect();
        return Err(EditError::Usage(format!(
            "no {} config found (looked in {}); `mcp-harness config import FILE` converts a file \
             kept elsewhere",
            host.name(),
            if looked.is_empty() {
                "nothing: HOME is not set".to_string()
            } else {
                looked.join(", ")
            }
        )));
    }
    let target_path = edit::scope_files(scope)?.remove(0);
    // Held through the question too: the plan shown is the plan written.
    let _lock = edit::lock_scope(scope)?;
    let mut target = ConfigFile::open(&target_path)?;
    let mut plan: Vec<Planned> = Vec::new();
    for path in &found {
        let converted = sources::import(path).map_err(|e| EditError::Invalid(e.to_string()))?;
        for note in &converted.notes {
            say!("note: {}", mcp_harness_transport::redact::text(note));
        }
        let Some(servers) = converted.servers() else {
            continue;
        };
        for (name, server) in servers {
            let Some(server) = server.as_object() else {
                continue;
            };
            let step = if let Some(earlier) = plan.iter().find(|p| &p.name == name) {
                Step::Skip(format!("also in {}", edit::shown(&earlier.from)))
            } else if target.server(name).is_some() {
                if args.force {
                    Step::Replace
                } else {
                    Step::Skip(format!("exists in {} (--force replaces)", target.shown()))
                }
            } else {
                Step::Add
            };
            plan.push(Planned {
                name: name.clone(),
                from: path.clone(),
                server: server.clone(),
                step,
            });
        }
    }
    emit!("{}", render(host, &plan, &target));
    let writes = plan
        .iter()
        .filter(|p| matches!(p.step, Step::Add | Step::Replace))
        .count();
    if writes == 0 {
        emitln!("nothing to import");
        return Ok(Exit::Ok);
    }
    if !yes {
        if !crate::terminal::interactive() {
            say!(
                "error: nothing written: confirming needs a terminal; rerun with --yes to import \
                 the servers above"
            );
            return Ok(Exit::Usage);
        }
        let question = format!(
            "Write {writes} server{} to {}? [y/N] ",
            plural(writes),
            target.shown()
        );
        if !crate::terminal::ask_yes_no(&question) {
            emitln!("nothing written");
            return Ok(Exit::Ok);
        }
    }
    let servers = target.servers_mut()?;
    for p in plan
        .iter()
        .filter(|p| matches!(p.step, Step::Add | Step::Replace))
    {
        servers.insert(&p.name, Json::Object(readable(&p.server)));
    }
    let note = edit::save(&target, scope)?;
    let skipped = plan.len() - writes;
    emitln!(
        "imported {writes} server{} from {} into {}{}{note}",
        plural(writes),
        host.name(),
        target.shown(),
        if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        }
    );
    Ok(Exit::Ok)
}

/// Keys of a server written first, in this order (the canonical form sorts them); the rest
/// follow in name order.
const FIRST_KEYS: &[&str] = &["type", "command", "args", "env", "cwd", "url", "headers"];

/// `server` with the keys people read first at the top.
fn readable(server: &serde_json::Map<String, serde_json::Value>) -> edit::ordered::Object {
    FIRST_KEYS
        .iter()
        .filter_map(|k| server.get(*k).map(|v| (k.to_string(), Json::from(v))))
        .chain(
            server
                .iter()
                .filter(|(k, _)| !FIRST_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), Json::from(v))),
        )
        .collect()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The plan as a table: each server, how it is reached (secrets redacted), where it comes from
/// and what will happen to it.
fn render(host: Host, plan: &[Planned], target: &ConfigFile) -> String {
    if plan.is_empty() {
        return format!("the {} config has no servers\n", host.name());
    }
    let rows: Vec<Vec<String>> = plan
        .iter()
        .map(|p| {
            let server = readable(&p.server);
            vec![
                p.name.clone(),
                edit::transport_of(&server).to_string(),
                edit::target(&server),
                edit::shown(&p.from),
                match &p.step {
                    Step::Add => "add".to_string(),
                    Step::Replace => "replace".to_string(),
                    Step::Skip(why) => format!("skip: {why}"),
                },
            ]
            .into_iter()
            .map(|c| c.chars().filter(|c| !c.is_control()).collect())
            .collect()
        })
        .collect();
    format!(
        "{} servers to add to {}:\n{}",
        host.name(),
        target.shown(),
        table::render(
            &["SERVER", "TRANSPORT", "COMMAND / URL", "FROM", "ACTION"],
            &rows
        )
    )
}

//! Editing the config files the harness reads, the way other hosts' CLIs do (`claude mcp add`,
//! `codex mcp add`): `add`, `add-json`, `remove`, `get`, `list`, `enable`, `disable`.
//!
//! Invariants: the files written are exactly the files the config merge reads — the user config
//! (`--scope user`, the default) and the project's `.mcp-harness.json` / `.mcp.json`
//! (`--scope project`; `add` writes `.mcp-harness.json`); a disabled server is `"enabled": false`
//! and a disabled tool is a raw name in the server's `excludeTools` (the keys the config and the
//! tool filter already have, nothing parallel); every other key, and the order of all keys, is
//! kept (see [`file`](mod@file)); nothing printed holds an env value, a header value or a URL's query
//! values (see [`show`]).

mod check;
mod file;
pub(crate) mod ordered;
mod show;
mod toggle;

use std::path::{Path, PathBuf};

use mcp_harness_runtime::sources::Scope;

pub(crate) use file::{ConfigFile, EditError, shown};
use ordered::{Json, Object};
pub(crate) use show::{redacted, target};

/// Which files an edit writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScopeArg {
    /// The user config (`$XDG_CONFIG_HOME/mcp-harness/config.json`).
    User,
    /// The project files of the current folder (`.mcp-harness.json`, `.mcp.json`).
    Project,
}

/// How `add` reaches the server.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportArg {
    /// A local process: `add NAME -- COMMAND ARGS...`.
    Stdio,
    /// Streamable HTTP: `add --transport http NAME URL`.
    Http,
    /// Legacy HTTP+SSE: `add --transport sse NAME URL`.
    Sse,
}

/// The config-editing commands.
#[derive(clap::Subcommand)]
pub(crate) enum Edit {
    /// Add a server: `add NAME -- COMMAND ARGS...` (stdio) or `add --transport http NAME URL`.
    /// Writes the user config unless `--scope project`.
    Add(AddArgs),
    /// Add a server from its JSON definition: `add-json NAME '{"command": "x"}'`.
    AddJson(AddJsonArgs),
    /// Remove a server from the user config (or `--scope project`).
    Remove {
        name: String,
        #[arg(long, short = 's', value_enum)]
        scope: Option<ScopeArg>,
    },
    /// One server's definition as written, secrets redacted. Looks in every config file unless
    /// `--scope` is given.
    Get {
        name: String,
        #[arg(long, short = 's', value_enum)]
        scope: Option<ScopeArg>,
    },
    /// The servers of the config files (all of them, or one `--scope`), as written.
    List {
        #[arg(long, short = 's', value_enum)]
        scope: Option<ScopeArg>,
    },
    /// Enable a server (`enable NAME`) or one of its tools (`enable NAME TOOL`,
    /// `enable mcp__NAME__TOOL`).
    Enable(ToggleArgs),
    /// Disable a server (`"enabled": false`) or one of its tools (the server's `excludeTools`):
    /// `disable NAME`, `disable NAME TOOL`, `disable mcp__NAME__TOOL`.
    Disable(ToggleArgs),
}

/// `add`.
#[derive(clap::Args)]
pub(crate) struct AddArgs {
    /// How to reach the server.
    #[arg(long, short = 't', value_enum, default_value = "stdio")]
    transport: TransportArg,
    /// An environment variable of a stdio server (repeatable); `${VAR}` references are kept.
    #[arg(long, short = 'e', value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// An HTTP header of a remote server (repeatable), e.g. `Authorization: Bearer ${TOKEN}`.
    #[arg(long, short = 'H', value_name = "KEY: VALUE")]
    header: Vec<String>,
    /// Which config to write (default: user).
    #[arg(long, short = 's', value_enum)]
    scope: Option<ScopeArg>,
    /// Replace a server of the same name.
    #[arg(long)]
    force: bool,
    /// The server's name (the key under `mcpServers`).
    name: String,
    /// The command and its arguments (stdio), or the URL (http, sse).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND_OR_URL"
    )]
    target: Vec<String>,
}

/// `add-json`.
#[derive(clap::Args)]
pub(crate) struct AddJsonArgs {
    /// The server's name.
    name: String,
    /// The server's definition, a JSON object in the `mcpServers` format. (Not named `json`:
    /// that id is the global `--json` flag's.)
    #[arg(value_name = "JSON")]
    definition: String,
    /// Which config to write (default: user).
    #[arg(long, short = 's', value_enum)]
    scope: Option<ScopeArg>,
    /// Replace a server of the same name.
    #[arg(long)]
    force: bool,
}

/// `enable` / `disable`.
#[derive(clap::Args)]
pub(crate) struct ToggleArgs {
    /// A server name, or a tool's qualified name `mcp__SERVER__TOOL`.
    pub(super) target: String,
    /// A tool of that server (its raw name, as the server lists it).
    pub(super) tool: Option<String>,
    /// Which config to write (default: user).
    #[arg(long, short = 's', value_enum)]
    pub(super) scope: Option<ScopeArg>,
}

/// Runs an edit command; returns the exit code.
/// `json` (the global `--json`) makes `get` and `list` print JSON.
/// The config-editing commands; `connect` and `servers`: the `--connect` and `--server`
/// flags, which only `list --server` uses (to show those servers).
pub(crate) async fn run(
    explicit: Option<&Path>,
    connect: bool,
    servers: &[String],
    edit: &Edit,
    json: bool,
) -> u8 {
    let listing = matches!(edit, Edit::List { .. });
    if connect || (!servers.is_empty() && !listing) {
        let (flag, why) = match connect {
            true => (
                "--connect",
                "talks to a running gateway, while this command reads and edits the config files \
                 (`mcp-harness --connect URL servers` shows the gateway's servers)",
            ),
            false => (
                "--server",
                "chooses which servers a command starts, and this one starts none (`list \
                 --server NAME` shows only those)",
            ),
        };
        say!("error: {flag} {why}; drop {flag}");
        return crate::exit::Exit::Usage.code();
    }
    if explicit.is_some() {
        let what = match edit {
            Edit::Get { .. } | Edit::List { .. } => {
                "`get` and `list` show the user or the project config (`--scope user|project`); \
                 `mcp-harness --config FILE config` shows a file"
            }
            _ => {
                "the config-editing commands write the user or the project config \
                 (`--scope user|project`), not a `--config` file"
            }
        };
        say!("error: {what}; drop --config");
        return crate::exit::Exit::Usage.code();
    }
    let result = match edit {
        Edit::Add(args) => add(args),
        Edit::AddJson(args) => add_json(args),
        Edit::Remove { name, scope } => remove(name, *scope),
        Edit::Get { name, scope } => show::get(name, *scope, json),
        Edit::List { scope } => show::list(*scope, servers, json),
        Edit::Enable(args) => toggle::run(args, true).await,
        Edit::Disable(args) => toggle::run(args, false).await,
    };
    match result {
        Ok(text) => {
            emit!("{text}");
            crate::exit::Exit::Ok.code()
        }
        Err(e) => {
            say!(
                "error: {}",
                mcp_harness_transport::redact::text(&e.to_string())
            );
            e.exit_code()
        }
    }
}

/// The files of `scope`, highest precedence first (the first one is where `add` writes).
pub(crate) fn scope_files(scope: ScopeArg) -> Result<Vec<PathBuf>, EditError> {
    let files = crate::sources::shared().files();
    let pick = |wanted: Scope| {
        files
            .iter()
            .find(|(s, _)| *s == wanted)
            .map(|(_, p)| p.clone())
    };
    let out: Vec<PathBuf> = match scope {
        ScopeArg::User => pick(Scope::User).into_iter().collect(),
        ScopeArg::Project => [Scope::ProjectHarnessJson, Scope::ProjectMcpJson]
            .into_iter()
            .filter_map(pick)
            .collect(),
    };
    if out.is_empty() {
        return Err(EditError::Usage(match scope {
            ScopeArg::User => "the user config location is unknown: set HOME or \
                               XDG_CONFIG_HOME, or use --scope project"
                .into(),
            ScopeArg::Project => "the current folder cannot be read".into(),
        }));
    }
    Ok(out)
}

/// The edit lock of the folder of `scope`'s files (see [`file::lock`]).
pub(crate) fn lock_scope(scope: ScopeArg) -> Result<file::EditLock, EditError> {
    file::lock(&scope_files(scope)?[0])
}

/// The name of a scope for messages.
pub(crate) fn scope_name(scope: ScopeArg) -> &'static str {
    match scope {
        ScopeArg::User => "user",
        ScopeArg::Project => "project",
    }
}

fn add(args: &AddArgs) -> Result<String, EditError> {
    let mut server = Object::default();
    let mut note = String::new();
    let mut header = args.header.clone();
    let mut scope = args.scope;
    let mut force = args.force;
    let mut target = args.target.clone();
    if args.transport != TransportArg::Stdio {
        // `add --transport http NAME URL --header K:V`: options after the URL are options (a
        // stdio command's own flags, after `--`, are the command's).
        target = remote_options(&args.target, &mut header, &mut scope, &mut force)?;
    }
    match args.transport {
        TransportArg::Stdio => {
            note = own_options_after_command(&target)?;
            if !header.is_empty() {
                return Err(EditError::Usage(
                    "--header is for --transport http or sse; a stdio server takes --env".into(),
                ));
            }
            let (command, rest) = target
                .split_first()
                .ok_or_else(|| EditError::Usage("give the command: add NAME -- COMMAND".into()))?;
            server.insert("command", Json::from(command.as_str()));
            if !rest.is_empty() {
                server.insert(
                    "args",
                    Json::Array(rest.iter().map(|a| Json::from(a.as_str())).collect()),
                );
            }
            if !args.env.is_empty() {
                server.insert("env", pairs(&args.env, '=', "--env", "KEY=VALUE")?);
            }
        }
        TransportArg::Http | TransportArg::Sse => {
            if !args.env.is_empty() {
                return Err(EditError::Usage(
                    "--env is for stdio servers; a remote server takes --header".into(),
                ));
            }
            let [url] = target.as_slice() else {
                return Err(EditError::Usage(format!(
                    "--transport {} takes one URL: add --transport {0} NAME URL",
                    if args.transport == TransportArg::Http {
                        "http"
                    } else {
                        "sse"
                    }
                )));
            };
            let kind = if args.transport == TransportArg::Http {
                "http"
            } else {
                "sse"
            };
            server.insert("type", Json::from(kind));
            server.insert("url", Json::from(url.as_str()));
            if !header.is_empty() {
                server.insert("headers", pairs(&header, ':', "--header", "KEY: VALUE")?);
            }
        }
    }
    insert_server(&args.name, server, scope, force).map(|done| done + &note)
}

/// Judges `add`'s own options written after a stdio command when no `--` set the command
/// apart: `--scope user|project` and a final `--force` can only be meant for mcp-harness
/// (`add fs npx -y server --scope project` would write `--scope project` into the server's
/// arguments, in the user config) and are refused; `--env`/`-e` and `--header`/`-H` are
/// common in servers' own command lines (`docker run -e VAR`, `mcp-remote URL --header …`), so
/// they stay the command's, with a note. Values are never quoted: they may be secrets.
fn own_options_after_command(target: &[String]) -> Result<String, EditError> {
    let words: Vec<&str> = target.iter().skip(1).map(String::as_str).collect();
    // clap took a `--` before the command (one more on the command line than among the
    // command's words): the words are the command's, whatever they say.
    let given = std::env::args_os().filter(|a| a == "--").count();
    if given > target.iter().filter(|w| *w == "--").count() {
        return Ok(String::new());
    }
    let scope = words
        .windows(2)
        .any(|pair| matches!(pair[0], "--scope" | "-s") && matches!(pair[1], "user" | "project"))
        || words.iter().any(|w| {
            matches!(
                *w,
                "--scope=user" | "--scope=project" | "-s=user" | "-s=project"
            )
        });
    let force = words.last() == Some(&"--force");
    if scope || force {
        let flag = if scope { "--scope" } else { "--force" };
        return Err(EditError::Usage(format!(
            "`{flag}` after the command would be passed to the server as its own argument; put \
             mcp-harness's options before the name, or the command after `--`: \
             mcp-harness add [OPTIONS] NAME -- COMMAND [ARGS...]"
        )));
    }
    // Only in the shape `add` takes them (`-e KEY=VALUE`, `-H 'Name: value'`): `docker run -e
    // VAR` passes a variable by name, which is docker's alone.
    let ours = words.windows(2).find_map(|pair| match pair[0] {
        "--env" | "-e" if pair[1].contains('=') => Some(pair[0]),
        "--header" | "-H" if pair[1].contains(':') => Some(pair[0]),
        _ => None,
    });
    Ok(match ours {
        Some(flag) => format!(
            "note: `{flag}` after the command is written as the server's own argument; if it was \
             meant for mcp-harness, put it before the name (mcp-harness add [OPTIONS] NAME -- \
             COMMAND [ARGS...])\n"
        ),
        None => String::new(),
    })
}

/// Splits `--header`/`-H`, `--scope`/`-s` and `--force` written after a remote server's URL
/// off the positional words.
fn remote_options(
    words: &[String],
    header: &mut Vec<String>,
    scope: &mut Option<ScopeArg>,
    force: &mut bool,
) -> Result<Vec<String>, EditError> {
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(word) = it.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (word.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| EditError::Usage(format!("{name} needs a value")))
        };
        match flag {
            "--header" | "-H" => header.push(value("--header")?),
            "--scope" | "-s" => {
                *scope = Some(match value("--scope")?.as_str() {
                    "user" => ScopeArg::User,
                    "project" => ScopeArg::Project,
                    _ => return Err(EditError::Usage("--scope is `user` or `project`".into())),
                });
            }
            "--force" => *force = true,
            _ => out.push(word.clone()),
        }
    }
    Ok(out)
}

fn add_json(args: &AddJsonArgs) -> Result<String, EditError> {
    let server = match Json::parse(&args.definition) {
        Ok(Json::Object(o)) => o,
        Ok(_) => {
            return Err(EditError::Usage(
                "the definition must be a JSON object, e.g. '{\"command\": \"npx\"}'".into(),
            ));
        }
        // serde_json's message gives the position only, never the text.
        Err(e) => return Err(EditError::Usage(format!("the definition is not JSON: {e}"))),
    };
    insert_server(&args.name, server, args.scope, args.force)
}

/// `KEY=VALUE` / `KEY: VALUE` arguments as an object, in the order given.
fn pairs(items: &[String], sep: char, flag: &str, shape: &str) -> Result<Json, EditError> {
    let mut out = Object::default();
    for (n, item) in items.iter().enumerate() {
        let Some((key, value)) = item.split_once(sep) else {
            // Not quoted: without its separator it may be the value alone, a token.
            return Err(EditError::Usage(format!(
                "{flag} number {} has no `{sep}` (what it says is not shown: it may be a \
                 secret): write {flag} '{shape}'",
                n + 1
            )));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(EditError::Usage(format!(
                "{flag} needs a key: {flag} '{shape}'"
            )));
        }
        out.insert(key, Json::from(value.trim_start()));
    }
    Ok(Json::Object(out))
}

fn insert_server(
    name: &str,
    server: Object,
    scope: Option<ScopeArg>,
    force: bool,
) -> Result<String, EditError> {
    let scope = scope.unwrap_or(ScopeArg::User);
    let files = scope_files(scope)?;
    let _lock = file::lock(&files[0])?;
    // In the project, a server of `.mcp.json` is replaced where it is; a new one goes to ours.
    let mut target = &files[0];
    for path in &files {
        if ConfigFile::open(path)?.server(name).is_some() {
            target = path;
            break;
        }
    }
    let mut file = ConfigFile::open(target)?;
    let existed = file.server(name).is_some();
    if existed && !force {
        return Err(EditError::Exists {
            server: name.to_string(),
            file: file.shown(),
        });
    }
    let mut server = server;
    let claude = claude_code_file(&file.path);
    if claude && server.contains("url") && !server.contains("type") {
        // Claude Code reads a remote server of `.mcp.json` only with its `type`.
        server.insert("type", Json::from("http"));
    }
    let foreign: Vec<&str> = server
        .iter()
        .map(|(key, _)| key.as_str())
        .filter(|key| claude && !CLAUDE_CODE_KEYS.contains(key))
        .collect();
    let foreign = match foreign.as_slice() {
        [] => String::new(),
        keys => format!(
            "note: Claude Code, which reads {} too, ignores `{}` (mcp-harness's own)\n",
            file.shown(),
            keys.join("`, `")
        ),
    };
    let kind = transport_of(&server);
    file.servers_mut()?.insert(name, Json::Object(server));
    let note = save(&file, scope)?;
    Ok(format!(
        "{} {kind} server \"{name}\" in {} ({} config){note}\n{foreign}{}",
        if existed { "replaced" } else { "added" },
        file.shown(),
        scope_name(scope),
        shadowed(name, &file.path, false)
    ))
}

/// The keys of a server in `.mcp.json` Claude Code reads.
const CLAUDE_CODE_KEYS: [&str; 8] = [
    "type",
    "command",
    "args",
    "env",
    "url",
    "headers",
    "headersHelper",
    "oauth",
];

/// Whether `path` is a project's `.mcp.json`, which Claude Code reads too.
pub(crate) fn claude_code_file(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name == ".mcp.json")
}

/// A note when the definition of `name` that takes effect after this edit is not the one in
/// `edited` (another file's of higher precedence shadows it; after a `remove`, another is
/// left): the edit said it was done, and nothing changed in what runs.
/// With `removed` false, also [`duplicates_of`]'s notes (one merge for both).
pub(crate) fn shadowed(name: &str, edited: &Path, removed: bool) -> String {
    let Ok(merged) = crate::sources::shared().merge() else {
        return String::new();
    };
    let duplicates = if removed {
        String::new()
    } else {
        duplicates_of(&merged, name)
    };
    shadowing(&merged, name, edited, removed) + &duplicates
}

/// [`shadowed`]'s own note.
fn shadowing(
    merged: &mcp_harness_runtime::sources::Merged,
    name: &str,
    edited: &Path,
    removed: bool,
) -> String {
    let Some(path) = merged
        .origins
        .get(name)
        .and_then(|o| o.path.as_ref().map(|p| (o, p)))
    else {
        return String::new();
    };
    let (origin, path) = path;
    let same = path == edited
        || matches!(
            (std::fs::canonicalize(path), std::fs::canonicalize(edited)),
            (Ok(a), Ok(b)) if a == b
        );
    if same {
        return String::new();
    }
    let reach = match origin.scope {
        Scope::User | Scope::ProjectMcpJson | Scope::ProjectHarnessJson => {
            format!(
                " (run the command with `--scope {}` for that one)",
                origin.scope.name()
            )
        }
        _ => String::new(),
    };
    let shown = file::shown(path);
    if removed {
        format!(
            "note: server \"{name}\" is still defined in {shown}, which takes effect now{reach}\n"
        )
    } else {
        format!(
            "note: the definition of server \"{name}\" that takes effect is the one in {shown} \
             ({} config), not this one{reach}\n",
            origin.scope.name()
        )
    }
}

/// A note for each server the merge now leaves out as a duplicate because of `name` (or
/// `name` itself): an `add` that silently knocked out a working server, or was itself left
/// out, says so.
fn duplicates_of(merged: &mcp_harness_runtime::sources::Merged, name: &str) -> String {
    let keeper = format!("as \"{name}\"");
    merged
        .dropped
        .iter()
        .filter(|(dropped, why)| {
            why.starts_with("a duplicate") && (dropped == name || why.contains(&keeper))
        })
        .map(|(dropped, why)| {
            format!(
                "note: server \"{dropped}\" is not loaded: {why} (make the definitions differ, or remove one)\n"
            )
        })
        .collect()
}

fn remove(name: &str, scope: Option<ScopeArg>) -> Result<String, EditError> {
    let scope = scope.unwrap_or(ScopeArg::User);
    let _lock = lock_scope(scope)?;
    let mut file = find(name, scope)?;
    if let Ok(servers) = file.servers_mut() {
        servers.remove(name);
    }
    let note = save(&file, scope)?;
    Ok(format!(
        "removed server \"{name}\" from {}{note}\n{}",
        file.shown(),
        shadowed(name, &file.path, true)
    ))
}

/// The file of `scope` that defines `name`, read for editing; else why not, naming the files
/// looked in and, when another scope has the server, the flag that reaches it.
pub(crate) fn find(name: &str, scope: ScopeArg) -> Result<ConfigFile, EditError> {
    let files = scope_files(scope)?;
    for path in &files {
        let file = ConfigFile::open(path)?;
        if file.server(name).is_some() {
            return Ok(file);
        }
    }
    let other = match scope {
        ScopeArg::User => ScopeArg::Project,
        ScopeArg::Project => ScopeArg::User,
    };
    let elsewhere = scope_files(other).ok().and_then(|paths| {
        paths.into_iter().find(|p| {
            ConfigFile::open(p)
                .map(|f| f.server(name).is_some())
                .unwrap_or(false)
        })
    });
    let looked: Vec<String> = files.iter().map(|p| file::shown(p)).collect();
    Err(EditError::NotFound {
        server: name.to_string(),
        looked: format!("{} ({} config)", looked.join(", "), scope_name(scope)),
        hint: match elsewhere {
            Some(p) => format!(
                "; it is in {}: add `--scope {}`",
                file::shown(&p),
                scope_name(other)
            ),
            None => match not_editable(name) {
                Some(from) => format!(
                    "; it comes from {from}, which mcp-harness does not edit (change it there)"
                ),
                None => "; `mcp-harness list` shows the configured servers".into(),
            },
        },
    })
}

/// Where a server no scope's file defines comes from, when the merge has it: a plugin folder's
/// `.mcp.json` or a remote source.
fn not_editable(name: &str) -> Option<String> {
    let merged = crate::sources::shared().merge().ok()?;
    let origin = merged.origins.get(name)?;
    match origin.scope {
        Scope::Plugin | Scope::Remote => Some(format!("{} ({})", origin, origin.scope.name())),
        _ => None,
    }
}

/// Saves `file`; for a project file, keeps the user's trust in step with their own edit: a file
/// trusted before (or created by this edit) is trusted with its new content, an untrusted one
/// stays untrusted and the returned note says how to trust it.
pub(crate) fn save(file: &ConfigFile, scope: ScopeArg) -> Result<String, EditError> {
    let written = file.save()?;
    if scope != ScopeArg::Project {
        return Ok(String::new());
    }
    let hold = || {
        format!(
            "\nnote: {} is not trusted, so its servers do not start; to review and trust it, \
             run: {}",
            file.shown(),
            super::trust::command(&file.path)
        )
    };
    let Some(store) = crate::sources::shared().trust_store() else {
        return Ok(hold());
    };
    let trusted_before = match &file.before {
        None => true,
        Some(bytes) => matches!(
            store.state(&file.path, bytes),
            Ok(mcp_harness_runtime::sources::TrustState::Trusted)
        ),
    };
    if !trusted_before {
        return Ok(hold());
    }
    match store.trust(&file.path, &written) {
        Ok(()) => Ok(String::new()),
        Err(e) => Ok(format!("\nnote: {e}{}", hold())),
    }
}

/// `stdio`, `http` or `sse`, as a server object says.
pub(crate) fn transport_of(server: &Object) -> &'static str {
    match server.get("type").and_then(Json::as_str) {
        Some("sse") => "sse",
        Some("stdio") => "stdio",
        Some(_) => "http",
        None if server.contains("url") => "http",
        None => "stdio",
    }
}

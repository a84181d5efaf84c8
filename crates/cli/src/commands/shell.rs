//! `shell`: one runtime, several commands. On a terminal, a line editor with history and tab
//! completion of commands, qualified tool and prompt names, server names, a tool's or
//! prompt's argument keys (from its schema) and the values a server completes
//! (`completion/complete`: prompt argument values, template variables); otherwise the same commands are read from stdin
//! line by line, so a script can pipe them in.
//!
//! Invariants: each command runs through the one-shot command's code path
//! ([`crate::execute`]) and prints exactly what that command prints (`--json` included); the
//! servers stay up between commands, so their state carries over; Ctrl-C stops the command
//! running (not the shell); `enable`/`disable` change only this session (the config files are
//! left alone); changing the roots tells every server (`notifications/roots/list_changed`). The
//! shell's exit status is the last command's (0 when none ran), as in `sh`.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Parser, Subcommand};
use mcp_harness_runtime::{Config, Runtime};
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;

use super::complete_line::{self, Query};
use super::protocol;
use crate::exit::Exit;
use crate::terminal::Roots;

/// One line typed in the shell.
#[derive(Parser)]
#[command(
    name = "",
    no_binary_name = true,
    override_usage = "COMMAND [ARGS] (`help` lists them, `help COMMAND` explains one)",
    disable_version_flag = true,
    help_template = "Commands (Tab completes commands, names, argument keys and values; ↑ recalls):\n{subcommands}"
)]
struct Line {
    #[command(subcommand)]
    step: Step,
}

#[derive(Subcommand)]
enum Step {
    /// Each server's state, transport, tool count and last error.
    Servers,
    /// The tools the model sees; --hidden: what is withheld, and why.
    Tools {
        #[arg(long)]
        hidden: bool,
    },
    /// Prompts, usable as commands.
    Prompts,
    /// Resources and resource templates.
    Resources,
    /// Skills; with a query, the best matches first.
    Skills { query: Option<String> },
    /// Call a tool: `call mcp__srv__tool '{"arg": 1}'`.
    Call {
        name: String,
        /// Arguments as a JSON object (quote it, or start it with `{`).
        args: Option<String>,
    },
    /// Run a command built from a prompt: `prompt mcp__srv__review '{"file": "x"}'`.
    Prompt { name: String, args: Option<String> },
    /// Read a resource: `read SERVER URI [--out FILE]`.
    Read {
        server: String,
        uri: String,
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print updates of a resource (Ctrl-C stops): `subscribe SERVER URI [--count N]`.
    Subscribe {
        server: String,
        uri: String,
        /// Stop after this many updates (at least 1, as on the command line).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Values for a prompt argument or template variable: `complete NAME ARGUMENT [VALUE]`.
    Complete {
        name: String,
        argument: String,
        #[arg(default_value = "")]
        value: String,
        #[arg(long = "with", value_name = "KEY=VALUE")]
        with: Vec<String>,
    },
    /// Ping a server: the round-trip time.
    Ping { server: String },
    /// Close a server's connection and connect it again.
    Restart { server: String },
    /// Start a configured server that is disabled, for this session only.
    Enable { server: String },
    /// Stop a server for this session only (the config files are left alone).
    Disable { server: String },
    /// The roots offered to servers; with folders, offer those instead (servers are told).
    Roots { dirs: Vec<PathBuf> },
    /// Leave the shell (also: quit, Ctrl-D).
    #[command(alias = "quit")]
    Exit,
}

/// What the shell needs besides the runtime.
pub(crate) struct Session {
    /// The settle deadline the one-shot commands use.
    pub deadline: Duration,
    /// `--config`, for `servers`' sources.
    pub config_path: Option<PathBuf>,
    /// The config the runtime started with (after `--server`): `enable`/`disable` edit a copy.
    pub config: Config,
    /// `--json`.
    pub json: bool,
    /// `--server`.
    pub only: Vec<String>,
    /// The roots the callbacks offer.
    pub roots: Arc<Roots>,
    /// `--server-log-level`, sent to each server that connects during the session.
    pub log_level: Option<crate::server_logs::KeepLevel>,
}

/// Splits a line like a shell: whitespace separates words, `'…'` and `"…"` quote, `\` escapes
/// outside single quotes; an unquoted word starting with `{` takes the rest of the line as is
/// (JSON arguments need no quoting).
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut chars = line.trim().char_indices().peekable();
    let trimmed = line.trim();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if c == '{' {
            words.push(trimmed[start..].trim_end().to_string());
            break;
        }
        let mut word = String::new();
        while let Some(&(_, c)) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '\'' => loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, c)) => word.push(c),
                        None => return Err("a quote (') is not closed".into()),
                    }
                },
                '"' => loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        // As in sh: inside double quotes a backslash escapes only `"`, `\`,
                        // `$` and `` ` ``; before anything else it is kept (a JSON `\n` stays
                        // an escape for the JSON).
                        Some((_, '\\')) => match chars.peek() {
                            Some(&(_, c @ ('"' | '\\' | '$' | '`'))) => {
                                chars.next();
                                word.push(c);
                            }
                            Some(_) => word.push('\\'),
                            None => return Err("a quote (\") is not closed".into()),
                        },
                        Some((_, c)) => word.push(c),
                        None => return Err("a quote (\") is not closed".into()),
                    }
                },
                '\\' => match chars.next() {
                    Some((_, c)) => word.push(c),
                    None => return Err("the line ends with \\".into()),
                },
                c => word.push(c),
            }
        }
        words.push(word);
    }
    Ok(words)
}

/// What tab completion offers.
struct Names {
    /// Qualified tool names with their argument keys, in the schema's order.
    tools: Vec<(String, Vec<String>)>,
    /// Qualified prompt names with their argument names.
    prompts: Vec<(String, Vec<String>)>,
    /// Configured server names.
    servers: Vec<String>,
}

impl Names {
    fn of(snapshot: &mcp_harness_catalog::Snapshot, servers: Vec<String>) -> Self {
        let tools = snapshot
            .tools()
            .map(|t| {
                let keys = t
                    .tool
                    .input_schema
                    .get("properties")
                    .and_then(|p| p.as_object())
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (t.qualified_name.clone(), keys)
            })
            .collect();
        let prompts = snapshot
            .catalogs
            .values()
            .flat_map(|c| c.prompts.iter())
            .map(|p| {
                let args = p
                    .prompt
                    .arguments
                    .iter()
                    .flatten()
                    .map(|a| a.name.clone())
                    .collect();
                (p.qualified_name.clone(), args)
            })
            .collect();
        Names {
            tools,
            prompts,
            servers,
        }
    }
}

/// The line editor's helper: completion only (no hints, colours or multi-line validation),
/// from the latest published snapshot (tools a server adds are offered at once).
struct Helper {
    snapshots: tokio::sync::watch::Receiver<Arc<mcp_harness_catalog::Snapshot>>,
    servers: Arc<Mutex<Vec<String>>>,
    commands: Vec<String>,
    /// Asks the shell's loop for server-completed values (`completion/complete`).
    values: ValueAsker,
}

/// A request for completed values and where to answer it.
type ValueRequest = (Query, std::sync::mpsc::Sender<Vec<String>>);

/// The editor thread's side of value completion: the shell's loop answers while it waits for
/// the line (the only time the editor completes).
type ValueAsker = tokio::sync::mpsc::UnboundedSender<ValueRequest>;

/// How long a Tab waits for a server's completions before offering nothing.
const VALUES_WAIT: Duration = Duration::from_secs(5);

impl Helper {
    /// The server's values for `query`, as replacements (none when it does not answer in time).
    fn values(&self, query: Query) -> (usize, Vec<Pair>) {
        let start = query.start;
        let (prefix, suffix) = (query.prefix.clone(), query.suffix);
        let (tx, rx) = std::sync::mpsc::channel();
        if self.values.send((query, tx)).is_err() {
            return (start, Vec::new());
        }
        let values = rx.recv_timeout(VALUES_WAIT).unwrap_or_default();
        // A server's values reach the terminal: without control characters (an escape
        // sequence would retitle or clear it).
        let pairs = values
            .into_iter()
            .map(|v| v.chars().filter(|c| !c.is_control()).collect::<String>())
            .filter(|v| !v.is_empty())
            .map(|v| Pair {
                display: v.clone(),
                replacement: format!("{prefix}{v}{suffix}"),
            })
            .collect();
        (start, pairs)
    }
}

fn candidates<'a>(
    prefix: &str,
    options: impl Iterator<Item = &'a String>,
    suffix: &str,
) -> Vec<Pair> {
    options
        .filter(|o| o.starts_with(prefix))
        .map(|o| Pair {
            display: o.clone(),
            replacement: format!("{o}{suffix}"),
        })
        .collect()
}

impl Completer for Helper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = complete_line::word_start(before);
        let word = &before[start..];
        let earlier: Vec<&str> = before[..start].split_whitespace().collect();
        let servers = self.servers.lock().map(|s| s.clone()).unwrap_or_default();
        let snapshot = self.snapshots.borrow().clone();
        let names = Names::of(&snapshot, servers);
        let templates: Vec<String> = match earlier.as_slice() {
            ["read", server] => snapshot
                .catalogs
                .get(*server)
                .map(|c| {
                    c.templates
                        .iter()
                        .map(|t| t.template.uri_template.clone())
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if let Some(query) = complete_line::query(before, &earlier, word, start, &templates) {
            return Ok(self.values(query));
        }
        let found = match earlier.as_slice() {
            [] => candidates(word, self.commands.iter(), " "),
            ["help"] => candidates(word, self.commands.iter(), " "),
            ["call"] => candidates(word, names.tools.iter().map(|(n, _)| n), " "),
            ["prompt"] => candidates(word, names.prompts.iter().map(|(n, _)| n), " "),
            ["complete"] => {
                let templates: Vec<String> = snapshot
                    .catalogs
                    .values()
                    .flat_map(|c| c.templates.iter())
                    .map(|t| t.template.uri_template.clone())
                    .collect();
                candidates(
                    word,
                    names.prompts.iter().map(|(n, _)| n).chain(&templates),
                    " ",
                )
            }
            ["complete", name] => {
                let arguments = protocol::target(&snapshot, name)
                    .map(|t| t.arguments)
                    .unwrap_or_default();
                candidates(word, arguments.iter(), " ")
            }
            ["read" | "subscribe" | "restart" | "enable" | "disable" | "ping"] => {
                candidates(word, names.servers.iter(), " ")
            }
            [kind @ ("call" | "prompt"), name, ..] => {
                let list = if *kind == "call" {
                    &names.tools
                } else {
                    &names.prompts
                };
                let keys = list
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, k)| k.as_slice())
                    .unwrap_or_default();
                // Inside a JSON object: the key being typed after its opening quote (or a
                // bare `{`, `'{` or `,`).
                let (at, partial) = match word.rfind('"') {
                    Some(q) if !word[q..].contains(':') => (q, &word[q + 1..]),
                    _ if word.ends_with('{') || word.ends_with(',') => (word.len(), ""),
                    _ => return Ok((pos, Vec::new())),
                };
                let offered: Vec<Pair> = keys
                    .iter()
                    .filter(|k| k.starts_with(partial))
                    .map(|k| Pair {
                        display: k.clone(),
                        replacement: format!("\"{k}\": "),
                    })
                    .collect();
                return Ok((start + at, offered));
            }
            _ => Vec::new(),
        };
        Ok((start, found))
    }
}

impl Hinter for Helper {
    type Hint = String;
}

impl Highlighter for Helper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for Helper {}

impl rustyline::Helper for Helper {}

/// Where lines come from: a line editor on its own thread (it blocks), asked for one line at a
/// time so that nothing else reads the terminal while a command runs (an elicitation may), or
/// stdin read line by line.
struct Input {
    ask: std::sync::mpsc::Sender<()>,
    /// Each line read (`Err`: one that is not text, said), `None` at end of input.
    lines: tokio::sync::mpsc::Receiver<Option<Result<String, String>>>,
    /// The editor's requests for completed values, answered while a line is awaited.
    values: tokio::sync::mpsc::UnboundedReceiver<ValueRequest>,
}

impl Input {
    fn start(
        snapshots: tokio::sync::watch::Receiver<Arc<mcp_harness_catalog::Snapshot>>,
        servers: Arc<Mutex<Vec<String>>>,
        commands: Vec<String>,
    ) -> Self {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tx, lines) = tokio::sync::mpsc::channel(1);
        let (values_tx, values) = tokio::sync::mpsc::unbounded_channel();
        let interactive = crate::terminal::interactive();
        std::thread::spawn(move || {
            let mut editor = if interactive {
                let config = rustyline::Config::builder()
                    .auto_add_history(true)
                    .max_history_size(1000)
                    .ok()
                    .map(|b| b.build())
                    .unwrap_or_default();
                match rustyline::Editor::<Helper, rustyline::history::DefaultHistory>::with_config(
                    config,
                ) {
                    Ok(mut e) => {
                        e.set_helper(Some(Helper {
                            snapshots,
                            servers,
                            commands,
                            values: values_tx,
                        }));
                        Some(e)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no line editor; reading plain lines");
                        None
                    }
                }
            } else {
                None
            };
            let mut read = 0u64;
            while asked.recv().is_ok() {
                let line = match editor.as_mut() {
                    Some(editor) => loop {
                        match editor.readline("mcp> ") {
                            Ok(line) => break Some(Ok(line)),
                            // Ctrl-C at the prompt clears the line, as in a shell.
                            Err(rustyline::error::ReadlineError::Interrupted) => continue,
                            Err(_) => break None,
                        }
                    },
                    None => {
                        read += 1;
                        // A line too long or not text is said and skipped, not the end.
                        let mut stdin = std::io::stdin().lock();
                        crate::lines::read(&mut stdin, crate::lines::MAX_LINE_BYTES)
                            .ok()
                            .and_then(|line| line.text(read))
                    }
                };
                let end = line.is_none();
                if tx.blocking_send(line).is_err() || end {
                    break;
                }
            }
        });
        Input { ask, lines, values }
    }

    /// The next line; `None` at end of input. Meanwhile, answers the editor's requests for
    /// completed values from `runtime`.
    async fn next(&mut self, runtime: &Runtime) -> Option<Result<String, String>> {
        self.ask.send(()).ok()?;
        loop {
            tokio::select! {
                line = self.lines.recv() => return line.flatten(),
                Some((query, answer)) = self.values.recv() => {
                    let _ = answer.send(completed(runtime, &query).await);
                }
            }
        }
    }
}

/// The values `query`'s server completes (none when the target is unknown or the server fails:
/// a Tab must not print errors into the line being edited).
async fn completed(runtime: &Runtime, query: &Query) -> Vec<String> {
    let Ok(target) = protocol::target(&runtime.snapshot(), &query.target) else {
        return Vec::new();
    };
    let values = protocol::values(
        runtime,
        &target,
        &query.argument,
        &query.typed,
        Default::default(),
    );
    match tokio::time::timeout(VALUES_WAIT, values).await {
        Ok(Ok(info)) => info.values,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "no completions");
            Vec::new()
        }
        Err(_) => Vec::new(),
    }
}

/// Runs the shell until `exit` or end of input; returns the last command's exit status.
pub(crate) async fn run(runtime: &Runtime, mut session: Session) -> u8 {
    use clap::CommandFactory;
    let commands: Vec<String> = Line::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .chain(["help".to_string(), "quit".to_string()])
        .collect();
    let servers = Arc::new(Mutex::new(Vec::new()));
    let mut input = Input::start(runtime.watch(), servers.clone(), commands);
    // Every server connects first (with the spinner on a terminal), as for `servers`. Ctrl-C
    // meanwhile ends the shell as it ends a one-shot command: the servers are closed, none
    // left behind.
    tokio::select! {
        _ = crate::progress::settle(runtime, session.deadline) => {}
        _ = tokio::signal::ctrl_c() => {
            say!("\ninterrupted by Ctrl-C; closing servers");
            return Exit::Interrupted.code();
        }
    }
    if crate::terminal::interactive() {
        say!("mcp-harness shell: `help` lists the commands; Tab completes; Ctrl-D leaves.");
    }
    let mut last = Exit::Ok.code();
    loop {
        if let Ok(mut names) = servers.lock() {
            *names = session.config.servers.keys().cloned().collect();
        }
        let line = match input.next(runtime).await {
            Some(Ok(line)) => line,
            Some(Err(unreadable)) => {
                last = crate::fail(&unreadable, Exit::Usage);
                continue;
            }
            None => break,
        };
        let words = match split(&line) {
            Ok(w) if w.is_empty() || w[0].starts_with('#') => continue,
            Ok(w) => w,
            Err(e) => {
                last = crate::fail(&e, Exit::Usage);
                continue;
            }
        };
        let step = match Line::try_parse_from(&words) {
            Ok(l) => l.step,
            Err(e) => {
                use clap::error::ErrorKind;
                let shown = e.render().to_string();
                if matches!(
                    e.kind(),
                    ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) {
                    emit!("{shown}");
                    last = Exit::Ok.code();
                } else {
                    say_part!("{shown}");
                    last = Exit::Usage.code();
                }
                continue;
            }
        };
        if matches!(step, Step::Exit) {
            break;
        }
        let interrupt = tokio_util::sync::CancellationToken::new();
        let command = crate::INTERRUPT.scope(interrupt.clone(), one(runtime, &mut session, step));
        tokio::pin!(command);
        last = tokio::select! {
            code = &mut command => code,
            _ = tokio::signal::ctrl_c() => {
                say!("\ninterrupted");
                // A call in flight tells its server it is cancelled before the prompt returns.
                interrupt.cancel();
                let _ = tokio::time::timeout(crate::INTERRUPT_GRACE, &mut command).await;
                Exit::Interrupted.code()
            }
        };
    }
    last
}

/// Runs one command.
async fn one(runtime: &Runtime, session: &mut Session, step: Step) -> u8 {
    if let Some(level) = &mut session.log_level {
        // Servers that (re)connected since the last command get the level before this one.
        crate::progress::settle(runtime, session.deadline).await;
        level.apply(runtime).await;
    }
    if let Step::Call { args, .. } | Step::Prompt { args, .. } = &step
        && args.as_deref() == Some("-")
    {
        // stdin is where the shell's own lines come from.
        return crate::fail(
            "in the shell, give the arguments on the line or as @FILE (`-` would read the shell's own input); nothing was sent",
            Exit::Usage,
        );
    }
    let command = match step {
        Step::Servers => crate::Command::Servers,
        Step::Tools { hidden } => crate::Command::Tools { hidden },
        Step::Prompts => crate::Command::Prompts,
        Step::Resources => crate::Command::Resources,
        Step::Skills { query } => crate::Command::Skills { query },
        Step::Call { name, args } => crate::Command::Call { name, args },
        Step::Prompt { name, args } => crate::Command::Prompt { name, args },
        Step::Read { server, uri, out } => crate::Command::Read { server, uri, out },
        Step::Subscribe { server, uri, count } => crate::Command::Subscribe { server, uri, count },
        Step::Complete {
            name,
            argument,
            value,
            with,
        } => crate::Command::Complete {
            name,
            argument,
            value,
            with,
        },
        Step::Ping { server } => crate::Command::Ping { server },
        Step::Restart { server } => {
            let asked = std::time::SystemTime::now();
            return match runtime.restart(&server) {
                Ok(()) => {
                    // The actor restarts in the background: the next line must not meet the
                    // old connection's state. Wait for a report made after the restart was
                    // asked (not one still on its way from before), then until it settled (as
                    // `enable` does).
                    runtime
                        .wait_for(session.deadline, |s| {
                            s.servers.get(&server).is_some_and(|st| st.since >= asked)
                        })
                        .await;
                    crate::progress::settle(runtime, session.deadline).await;
                    if let Err(code) = back(runtime, &server) {
                        return code;
                    }
                    done(session.json, "restart", &server, "restarted");
                    Exit::Ok.code()
                }
                Err(e) => crate::fail_call(runtime, &e),
            };
        }
        Step::Enable { server } => return toggle(runtime, session, &server, true).await,
        Step::Disable { server } => return toggle(runtime, session, &server, false).await,
        Step::Roots { dirs } => return roots(runtime, session, &dirs).await,
        Step::Exit => return Exit::Ok.code(),
    };
    crate::execute(
        runtime,
        command,
        session.deadline,
        session.config_path.clone(),
        None,
        session.json,
        session.only.clone(),
    )
    .await
}

/// One line saying what a shell-only command did (a JSON object with `--json`).
fn done(json: bool, command: &str, server: &str, what: &str) {
    if json {
        emitln!(
            "{}",
            serde_json::json!({"command": command, "server": server})
        );
    } else {
        emitln!("{what} {server}");
    }
}

/// `enable`/`disable SERVER` for this session: the runtime's config with the server's
/// `enabled` changed, applied now.
async fn toggle(runtime: &Runtime, session: &mut Session, server: &str, on: bool) -> u8 {
    let Some(entry) = session.config.servers.get_mut(server) else {
        let known: Vec<&str> = session.config.servers.keys().map(String::as_str).collect();
        return crate::fail(
            &format!(
                "no server named `{server}` in this session (servers: {})",
                known.join(", ")
            ),
            Exit::Usage,
        );
    };
    entry.enabled = on;
    runtime.set_config(session.config.clone());
    if let Err(e) = runtime.refresh_if_dirty().await {
        return crate::fail(&e.to_string(), Exit::Server);
    }
    if on {
        // The server's actor starts after the refresh; its first report replaces `disabled`.
        // Until then the snapshot looks settled, so this waits for that report, then settles.
        let name = server.to_string();
        runtime
            .wait_for(session.deadline, |s| {
                s.servers.get(&name).is_some_and(|st| {
                    !matches!(st.state, mcp_harness_catalog::ServerState::Disabled)
                })
            })
            .await;
        crate::progress::settle(runtime, session.deadline).await;
        if let Err(code) = back(runtime, server) {
            return code;
        }
    }
    let (command, what) = if on {
        ("enable", "enabled for this session:")
    } else {
        ("disable", "disabled for this session:")
    };
    done(session.json, command, server, what);
    Exit::Ok.code()
}

/// Whether `server`, just (re)started, is connected: else the failure is said (as a command
/// that needs the server says it) and the status to exit with is returned.
fn back(runtime: &Runtime, server: &str) -> Result<(), u8> {
    let snapshot = runtime.snapshot();
    match snapshot.servers.get(server) {
        Some(status) if status.state != mcp_harness_catalog::ServerState::Connected => Err(
            crate::fail(&crate::explain::server_down_told(status), Exit::Server),
        ),
        _ => Ok(()),
    }
}

/// `roots [DIR...]`: lists the roots, or offers `dirs` instead and tells every server.
async fn roots(runtime: &Runtime, session: &Session, dirs: &[PathBuf]) -> u8 {
    if !dirs.is_empty() {
        let resolved = match dirs
            .iter()
            .map(|d| Roots::resolve(d))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(r) => r,
            Err(e) => {
                return crate::fail(
                    &format!("roots {e}; the roots stay as they were"),
                    Exit::Usage,
                );
            }
        };
        // A folder given twice is one root.
        let mut seen = std::collections::HashSet::new();
        let resolved: Vec<_> = resolved
            .into_iter()
            .filter(|d| seen.insert(d.clone()))
            .collect();
        if session.roots.set(resolved) {
            let told = runtime.notify_roots_changed().await;
            note!(
                "roots changed; told {}",
                crate::output::count(told, "server")
            );
        }
    }
    let list = session.roots.list();
    if session.json {
        let uris: Vec<String> = list.iter().map(|d| crate::terminal::file_uri(d)).collect();
        emitln!("{}", serde_json::json!({ "roots": uris }));
    } else {
        for dir in list {
            emitln!(
                "{}",
                crate::output::for_stdout(&crate::terminal::file_uri(&dir))
            );
        }
    }
    Exit::Ok.code()
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn lines_split_like_a_shell_with_bare_json() {
        assert_eq!(
            split(r#"call mcp__a__b '{"x": "y z"}'"#).unwrap(),
            ["call", "mcp__a__b", r#"{"x": "y z"}"#]
        );
        assert_eq!(
            split(r#"call mcp__a__b {"x": "y z"}  "#).unwrap(),
            ["call", "mcp__a__b", r#"{"x": "y z"}"#]
        );
        assert_eq!(split(r#"read s "a b"\ c"#).unwrap(), ["read", "s", "a b c"]);
        assert!(split("call 'open").is_err());
        assert!(split("   ").unwrap().is_empty());
        // Inside double quotes only `"`, `\`, `$` and `` ` `` are escaped, as in sh: JSON
        // escapes reach the JSON.
        assert_eq!(
            split(r#"call t "{\"m\": \"a\nb C:\temp \u0041 \\ \$\"}""#).unwrap(),
            ["call", "t", r#"{"m": "a\nb C:\temp \u0041 \ $"}"#]
        );
        assert!(split(r#"call t "a\"#).is_err());
    }
}

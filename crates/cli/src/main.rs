//! `mcp-harness`: inspect, call and watch MCP servers through the harness runtime.
//!
//! Invariant: every command that starts a runtime shuts it down before exiting — on success, on
//! error, on Ctrl-C, SIGTERM and SIGHUP (a closed terminal or SSH session) — so no server
//! process outlives the CLI. The CLI is a child subreaper from its start, so a server's
//! descendant that left the server's process group comes back to it and is killed at shutdown;
//! if the CLI is SIGKILLed, its servers die with it (`PR_SET_PDEATHSIG`).

/// `print!` that treats a closed stdout (`mcp-harness tools | head`) as the reader being done:
/// the rest is dropped instead of panicking, so the command still shuts its servers down.
macro_rules! emit {
    ($($arg:tt)*) => {{
        $crate::output::write_stdout(format_args!($($arg)*), false);
    }};
}

/// `eprintln!` that never panics: when stderr is gone (a closed pipe, a hung-up terminal) the line
/// is dropped. A panic there would take down whichever thread was speaking (an approval prompt,
/// a progress line) and, on the main thread, turn any exit into 101.
/// What it writes passes through [`output::for_terminal`]: a server's words in an error (its
/// JSON-RPC error message, an authorization server's description) cannot drive the terminal.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = $crate::output::for_terminal(&format!($($arg)*));
        let _ = writeln!(std::io::stderr(), "{text}");
    }};
}

/// A line on stderr that is neither data nor an error (how servers are starting, a warning):
/// as `{"note": "…"}` under `--json`, so that stderr is one JSON object per line — errors
/// (`error: …`) and log lines (`-v`) aside — else as [`say!`] writes it.
macro_rules! note {
    ($($arg:tt)*) => {{
        let text = format!($($arg)*);
        if $crate::output::json_stderr() {
            say!("{}", serde_json::json!({"note": text}));
        } else {
            say!("{text}");
        }
    }};
}

/// `eprint!` with the same behaviour as [`say!`].
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = $crate::output::for_terminal(&format!($($arg)*));
        let _ = write!(std::io::stderr(), "{text}");
    }};
}

/// `println!` with the same behaviour as [`emit!`].
macro_rules! emitln {
    () => {{
        $crate::output::write_stdout(format_args!(""), true);
    }};
    ($($arg:tt)*) => {{
        $crate::output::write_stdout(format_args!($($arg)*), true);
    }};
}

#[cfg(feature = "mimalloc")]
mod allocator;
mod args;
mod commands;
mod connect;
mod elicit;
mod exit;
mod explain;
mod lines;
mod output;
mod progress;
mod server_logs;
mod sources;
mod table;
mod targets;
mod terminal;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use args::{Cli, Command};
use clap::Parser;
use mcp_harness_runtime::{Config, Runtime};

/// Logs on stderr at `verbose`. At the default verbosity a command for a person (`quiet`) leaves
/// a server's connect failures to the one line the command prints about them: rmcp's own
/// report (Rust types, response bodies) and the runtime's retry notes show from `-v` on.
fn init_logs(verbose: u8, quiet: bool) {
    let default = match verbose {
        0 if quiet => "warn,rmcp=off,mcp_harness_runtime::connection::server=error",
        0 => "warn",
        1 => "info",
        // rmcp's service logs every message it sends and receives at debug: a call's
        // arguments and results, a prompt's text. Those need -vvv (or RUST_LOG).
        2 => "debug,rmcp::service=info",
        _ => "trace",
    };
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{FilterExt as _, filter_fn};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let from_env = tracing_subscriber::EnvFilter::try_from_default_env().ok();
    // Below -vv and without RUST_LOG, rmcp's reports of an answer that found its peer gone
    // are left out (see `peer_gone_report`).
    let routine = from_env.is_none() && verbose < 2;
    let filter = from_env.unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let filter = filter.and(filter_fn(move |meta| {
        !(routine && routine_rmcp_report(meta))
    }));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(move || RedactedStderr { ansi })
        // tracing-subscriber reports a failed write with `eprintln!`, which panics when stderr
        // is gone; `RedactedStderr` never fails, and this keeps it that way.
        .log_internal_errors(false)
        .with_filter(filter);
    tracing_subscriber::registry().with(layer).init();
}

/// Whether `meta` is one of rmcp's reports that are routine for a gateway, left out of the log
/// below `-vv` (`RUST_LOG` or `-vv` show them): its ERROR that an answer could not be sent
/// (`%error` and a message, from its service loop) — the client went away first, and a closed
/// `subscriptions/listen` stream makes one every time it ends — and its WARN for every error
/// answered (`id`, `error`): one line per refused request, quoting what the client sent.
fn routine_rmcp_report(meta: &tracing::Metadata<'_>) -> bool {
    let fields = meta.fields();
    meta.is_event()
        && meta.target() == "rmcp::service"
        && fields.field("error").is_some()
        && fields.field("message").is_some()
        && match *meta.level() {
            tracing::Level::ERROR => fields.len() == 2,
            tracing::Level::WARN => fields.len() == 3 && fields.field("id").is_some(),
            _ => false,
        }
}

/// The log's stderr: each formatted event (written whole) passes through the one redaction
/// (`transport::redact`: configured secrets and credential shapes), so neither our logs nor
/// rmcp's show a configured secret or one a server echoed. A write that
/// fails (stderr closed) is dropped, never reported: the log must not break what it describes.
struct RedactedStderr {
    /// The log is written with colours (stderr is a terminal).
    ansi: bool,
}

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shown = mcp_harness_transport::redact::text(&String::from_utf8_lossy(buf));
        // And what a server echoed into an error rmcp logs (a token endpoint's refusal of a
        // refresh quoting the refresh token and the client's Basic credentials).
        let shown = mcp_harness_transport::redact::credential_shapes(&shown);
        // And the gateway's sealed session ids, which rmcp logs whole at debug (a session
        // restored from its id) and which, without client profiles, are the session's only
        // credential.
        let shown = opaque_ids(&shown);
        // One event, one line: a value with a line break in it (a client's request id, say)
        // cannot forge a log line of its own.
        let shown = log_line(&shown, self.ansi);
        let _ = std::io::stderr().write_all(cut_line(&shown).as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// The shortest run of base64url characters taken for an opaque id (a sealed session id is
/// over 200): shown as its first 8 characters.
const OPAQUE_ID_CHARS: usize = 160;

/// `line` with each run of at least [`OPAQUE_ID_CHARS`] base64url characters cut to its first
/// 8 and `…[redacted]`.
fn opaque_ids(line: &str) -> std::borrow::Cow<'_, str> {
    let id_char = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    let bytes = line.as_bytes();
    let mut out: Option<String> = None;
    let (mut at, mut copied) = (0, 0);
    while at < bytes.len() {
        if !id_char(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && id_char(bytes[at]) {
            at += 1;
        }
        if at - start >= OPAQUE_ID_CHARS {
            let out = out.get_or_insert_with(|| String::with_capacity(line.len()));
            out.push_str(&line[copied..start + 8]);
            out.push_str("…[redacted]");
            copied = at;
        }
    }
    match out {
        Some(mut out) => {
            out.push_str(&line[copied..]);
            std::borrow::Cow::Owned(out)
        }
        None => std::borrow::Cow::Borrowed(line),
    }
}

/// The most bytes of one log line: rmcp logs what a peer sent (a client's megabyte name in
/// its `initialize`), which a log need not hold whole.
const MAX_LOG_LINE: usize = 16 * 1024;

/// `line` (ending with its newline) cut to [`MAX_LOG_LINE`] bytes on a character boundary,
/// saying how much was left out.
fn cut_line(line: &str) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LOG_LINE {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut end = MAX_LOG_LINE;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    let left = line.trim_end_matches('\n').len() - end;
    format!("{} … [{left} more bytes]\n", &line[..end]).into()
}

/// `event` (a formatted log event, ending with its newline) made safe for a terminal: the line
/// breaks inside it written as `\n` and `\r` (a value cannot forge a log line of its own), and
/// every other control character but a tab as `\u{..}` (an escape sequence in a value — a
/// client's request id, a server's message — cannot retitle the terminal, clear it or move its
/// cursor). With `ansi`, the log's own colours stay: an SGR sequence (`ESC [ digits ; m`) is
/// kept.
fn log_line(event: &str, ansi: bool) -> std::borrow::Cow<'_, str> {
    let body = event.strip_suffix('\n').unwrap_or(event);
    if !body.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(event);
    }
    let mut out = String::with_capacity(body.len() + 16);
    let mut rest = body;
    while let Some(c) = rest.chars().next() {
        if ansi
            && c == '\u{1b}'
            && let Some(len) = sgr_len(rest)
        {
            out.push_str(&rest[..len]);
            rest = &rest[len..];
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    if body.len() < event.len() {
        out.push('\n');
    }
    std::borrow::Cow::Owned(out)
}

/// The length of the SGR sequence (`ESC [`, digits and `;`, `m`) at the start of `s`, if one
/// is there.
fn sgr_len(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    if bytes.get(1) != Some(&b'[') {
        return None;
    }
    let end = 2 + bytes[2..]
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b';'))?;
    (bytes[end] == b'm').then_some(end + 1)
}

fn main() -> ExitCode {
    // Before anything else: when started as the stdio servers' trampoline, this never returns.
    mcp_harness_runtime::transport::reaper::spawn_trampoline();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_failed(e),
    };
    init_logs(cli.verbose, !matches!(cli.command, Command::Serve(_)));
    if !matches!(cli.command, Command::FixtureServer { .. })
        && let Err(e) = mcp_harness_transport::reaper::become_subreaper()
    {
        tracing::debug!(error = %e, "not a child subreaper; setsid'd server descendants may outlive us");
    }
    // `serve --threads` picks the gateway's; every other command runs on two workers.
    let threads = match &cli.command {
        Command::Serve(args) => args.threads(),
        _ => 2,
    };
    let mut rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        rt.worker_threads(threads);
        rt
    };
    #[cfg(feature = "mimalloc")]
    allocator::install(&mut rt);
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::Exit::Failed.code());
        }
    };
    let code = rt.block_on(run(cli));
    // Every server is closed by now. A blocking thread may still be in a read of stdin (a
    // question given up at Ctrl-C stops within 100 ms): exit without waiting longer for it.
    rt.shutdown_timeout(Duration::from_millis(300));
    ExitCode::from(output::finish_stdout(code))
}

/// What clap says instead of running a command: help and the version on stdout (exit 0, or 1
/// when stdout cannot be written, as for any command's output), usage errors on stderr (exit
/// 2).
fn parse_failed(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    use std::io::IsTerminal as _;
    use std::io::Write as _;
    let shown = match std::io::stdout().is_terminal() {
        true => e.render().ansi().to_string(),
        false => e.render().to_string(),
    };
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            if e.exit_code() == 0 =>
        {
            let mut out = std::io::stdout().lock();
            match out.write_all(shown.as_bytes()).and_then(|()| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    say!("error: the output could not be written to stdout: {e}");
                    ExitCode::from(exit::Exit::Failed.code())
                }
                _ => ExitCode::SUCCESS,
            }
        }
        _ => {
            let _ = e.print();
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
    }
}

/// Startup deadline used when waiting for servers to settle: the longest configured one, plus
/// a margin for listing.
fn settle_deadline(runtime: &Runtime, config: &Config) -> Duration {
    let _ = runtime;
    config
        .servers
        .values()
        .map(|s| s.startup_timeout)
        .max()
        .unwrap_or(Duration::from_secs(30))
        + Duration::from_secs(5)
}

async fn run(cli: Cli) -> u8 {
    if let Command::FixtureServer { args } = cli.command {
        return mcp_harness_fixture::run_main(args).await.clamp(0, 255) as u8;
    }
    output::set_json_stderr(cli.json);
    if cli.json
        && let Some((name, why)) = match &cli.command {
            Command::Login(_) => Some(("login", "talks to a person")),
            Command::Logout { .. } => Some(("logout", "talks to a person")),
            Command::Trust { .. } => Some(("trust", "talks to a person")),
            Command::Demo => Some(("demo", "talks to a person")),
            Command::ConformanceClient { .. } => {
                Some(("conformance-client", "speaks to the conformance suite"))
            }
            Command::Completions { .. } => Some(("completions", "prints a shell script")),
            Command::Man => Some(("man", "prints a manual page (roff)")),
            _ => None,
        }
    {
        return fail(
            &format!("`{name}` {why} and has no JSON output; run it without --json"),
            exit::Exit::Usage,
        );
    }
    if let Some(code) = args::generated(&cli.command) {
        return code;
    }
    // The user's own token store: `login`, `logout` and the runtime below (which adds a step-up
    // browser on a terminal).
    let auth = mcp_harness_transport::auth::AuthContext::new();
    match &cli.command {
        Command::Login(args) => {
            return match commands::auth::login(cli.config.as_deref(), &auth, args).await {
                Ok(()) => exit::Exit::Ok.code(),
                Err(e) => fail(&e.message, e.exit),
            };
        }
        Command::Logout { server } => {
            return match commands::auth::logout(cli.config.as_deref(), &auth, server).await {
                Ok(()) => exit::Exit::Ok.code(),
                Err(e) => fail(&e.message, e.exit),
            };
        }
        _ => {}
    }
    if let Command::Edit(edit) = &cli.command {
        return commands::edit::run(
            cli.config.as_deref(),
            cli.connect.is_some(),
            &cli.servers,
            edit,
            cli.json,
        )
        .await;
    }
    if let Command::Trust { path, revoke } = &cli.command {
        return commands::trust::run(path.as_deref(), *revoke);
    }
    if let Command::Config { action } = &cli.command {
        return commands::config::run(cli.config.as_deref(), cli.json, action.as_ref(), cli.yes)
            .await;
    }
    let roots = match terminal::Roots::from_args(&cli.roots) {
        Ok(r) => std::sync::Arc::new(r),
        Err(e) => return fail(&e, exit::Exit::Usage),
    };
    // Serving, upstream requests and approvals go to the calling client through this bridge.
    let bridge = mcp_harness_gateway::ClientBridge::new();
    let mut widen_to = None;
    // `serve`'s client profiles (the config's `gateway` section).
    let mut gateway_clients = mcp_harness_runtime::GatewayConfig::default();
    let mut session_config = None;
    let mut files_seen = None;
    let (runtime, deadline) = match &cli.command {
        Command::Demo => match commands::demo::build() {
            Ok(rt) => (rt, Duration::from_secs(35)),
            Err(e) => return fail(&e, exit::Exit::Failed),
        },
        Command::ConformanceClient { url } => match commands::conformance::build(url) {
            Ok(rt) => (rt, Duration::from_secs(30)),
            Err(e) => return fail(&e, exit::Exit::Failed),
        },
        _ => {
            // What the config files look like before they are read: `serve` watches them for
            // changes from here, so an edit made while it starts (remote sources are fetched
            // first) is applied, not lost.
            if matches!(cli.command, Command::Serve(_)) && cli.connect.is_none() {
                files_seen = Some(mcp_harness_runtime::FilesSeen::now(
                    &commands::config::files(cli.config.as_deref()),
                ));
            }
            let wants = cli.command.wants();
            let targeted = !matches!(wants, targets::Wants::Every) || !cli.servers.is_empty();
            if targeted && cli.config.is_none() && cli.connect.is_none() {
                // The remote sources are fetched first: a targeted command joins no second
                // batch, which would start every server.
                tokio::select! {
                    fetched = sources::shared().fetch_remote() => {
                        if let Err(e) = fetched {
                            tracing::warn!(error = %e, "remote sources not fetched");
                        }
                    }
                    signal = interrupted() => {
                        say!("\ninterrupted by {signal} while fetching the remote sources");
                        return exit::Exit::Interrupted.code();
                    }
                }
            }
            let loaded = match &cli.connect {
                Some(_) if cli.config.is_some() => Err(
                    "--connect talks to a running gateway, which has its own config; drop --config"
                        .to_string(),
                ),
                Some(url) => {
                    connect::mark(cli.connect_token_env.as_deref());
                    cli.connect_token_env
                        .as_deref()
                        .map(connect::Token::from_env)
                        .transpose()
                        .and_then(|token| connect::config(url, token))
                }
                None => commands::config::load(cli.config.as_deref(), true),
            };
            let config = match loaded {
                Ok(c) => c,
                Err(e) => return fail(&e, exit::Exit::Usage),
            };
            let config = match targets::plan(config, &wants, &cli.servers) {
                Ok(plan) => {
                    widen_to = plan.full;
                    plan.config
                }
                Err(e) => return fail(&e, exit::Exit::Usage),
            };
            // Serving, stdin belongs to the protocol (or to nobody): no terminal questions.
            let serving = matches!(cli.command, Command::Serve(_));
            if serving {
                gateway_clients = config.gateway.clone();
            }
            let bridge = &bridge;
            // Through --connect the gateway's rules decide (its questions come as elicitations).
            let allow_all = cli.yes || cli.connect.is_some();
            let approver: std::sync::Arc<dyn mcp_harness_policy::Approver> = if allow_all {
                std::sync::Arc::new(mcp_harness_policy::AllowAll)
            } else if serving {
                // An `ask` becomes an elicitation to the calling client (or a refusal).
                bridge.approver()
            } else {
                std::sync::Arc::new(terminal::TerminalApprover)
            };
            // R33 step-up: on a terminal, a 403 insufficient_scope opens the browser for the
            // wider scopes (the loopback callback `login` uses); elsewhere the request fails,
            // naming the scopes for `mcp-harness login`.
            let auth = {
                use std::io::IsTerminal;
                if !serving && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                    auth.with_step_up_browser(std::sync::Arc::new(
                        mcp_harness_transport::auth::LoopbackStepUp,
                    ))
                } else {
                    auth
                }
            };
            let mut builder = mcp_harness_runtime::RuntimeBuilder::new(config.clone())
                .auth_context(auth)
                .approver(approver);
            builder = if let Command::Serve(args) = &cli.command {
                // A config edit drains a replaced server's calls as SIGTERM drains the gateway.
                let builder = builder
                    .callbacks(bridge.callbacks())
                    .edit_drain(args.drain());
                // The upstream connections run on the gateway's own runtime, so a call is never
                // handed to an I/O thread and back: with one thread, that thread carries
                // everything; with more, the workers share sessions and connections. Since
                // calls are written from the caller's task (express and direct calls), this
                // measured as fast as the pinned I/O threads at saturation and cheaper in CPU
                // per call (docs/benchmark-history.md, session 41; sessions 20 and 21 chose the
                // pinned threads before that).
                let here = tokio::runtime::Handle::current();
                if args.threads() == 1 {
                    builder.io_runtime_driven(here)
                } else {
                    builder.io_runtime(here)
                }
            } else {
                builder.callbacks(std::sync::Arc::new(terminal::TerminalCallbacks {
                    roots: roots.clone(),
                }))
            };
            let started = builder.start();
            session_config = Some(config.clone());
            match started {
                Ok(rt) => {
                    let d = settle_deadline(&rt, &config);
                    (rt, d)
                }
                Err(e) => return fail(&e.to_string(), exit::Exit::Usage),
            }
        }
    };
    // Two-phase loading: remote sources are fetched while the local servers connect. `watch`
    // shows them join live; a one-shot command waits for them (each bounded by its timeout).
    if cli.config.is_none()
        && cli.connect.is_none()
        && cli.servers.is_empty()
        && matches!(cli.command.wants(), targets::Wants::Every)
        && !matches!(
            cli.command,
            Command::Demo | Command::ConformanceClient { .. }
        )
    {
        let joining = runtime.join_remote_sources(sources::shared().clone());
        if !matches!(cli.command, Command::Watch { .. }) {
            let joined = async {
                let _ = joining.await;
                if let Err(e) = runtime.refresh_if_dirty().await {
                    tracing::warn!(error = %e, "the remote sources' servers could not be applied");
                }
            };
            tokio::select! {
                () = joined => {}
                signal = interrupted() => {
                    say!("\ninterrupted by {signal} while fetching the remote sources; closing servers");
                    runtime.shutdown().await;
                    return exit::Exit::Interrupted.code();
                }
            }
        }
    }
    if let Command::Serve(args) = cli.command {
        // Config edits apply while serving; clients get list_changed for what they can see.
        // `--prefix none` serves one server under its own names: an edit that configures
        // another is refused (the running config kept), as such a start is.
        let one_server = args.unprefixed();
        let _reload = live_reload(
            &runtime,
            cli.config.clone(),
            cli.servers.clone(),
            files_seen,
            one_server,
        );
        return commands::serve::run(runtime, bridge, args, gateway_clients).await;
    }
    // Servers' log messages on stderr while the command runs.
    let logs = server_logs::show(
        &runtime,
        server_logs::threshold(cli.server_log_level, cli.verbose),
        cli.json,
    );
    let mut log_level = cli.server_log_level.map(server_logs::KeepLevel::new);
    if let Command::Shell = cli.command {
        let session = commands::shell::Session {
            log_level,
            deadline,
            config_path: cli.config.clone(),
            config: session_config.unwrap_or_default(),
            json: cli.json,
            only: cli.servers.clone(),
            roots,
        };
        // Ctrl-C stops the command running, not the shell; SIGTERM and SIGHUP end it (and the
        // terminal gets back the settings it had, whatever the line editor left).
        let _terminal = terminal::Restore::now();
        let code = tokio::select! {
            code = explain::IN_SHELL.scope((), commands::shell::run(&runtime, session)) => code,
            signal = ended() => {
                say!("\n{signal}: closing servers");
                exit::Exit::Interrupted.code()
            }
        };
        // After the shutdown: log lines still on their way when the command ended are shown.
        runtime.shutdown().await;
        logs.finish().await;
        return code;
    }
    if let Some(level) = &mut log_level {
        // The level is in force before the command's first request.
        progress::settle(&runtime, deadline).await;
        level.apply(&runtime).await;
    }
    let interrupt = tokio_util::sync::CancellationToken::new();
    let code = {
        let command = INTERRUPT.scope(
            interrupt.clone(),
            execute(
                &runtime,
                cli.command,
                deadline,
                cli.config.clone(),
                widen_to,
                cli.json,
                cli.servers.clone(),
            ),
        );
        tokio::pin!(command);
        tokio::select! {
            code = &mut command => code,
            signal = interrupted() => {
                // After SIGHUP the terminal may be gone: a failed write must not stop the shutdown.
                {
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "\ninterrupted by {signal}; closing servers");
                }
                // A call in flight tells its server it is cancelled before the command ends.
                interrupt.cancel();
                let _ = tokio::time::timeout(INTERRUPT_GRACE, &mut command).await;
                exit::Exit::Interrupted.code()
            }
        }
    };
    // After the shutdown: log lines still on their way when the command ended are shown.
    runtime.shutdown().await;
    logs.finish().await;
    code
}

tokio::task_local! {
    /// Cancelled when the user interrupts the running command (Ctrl-C, SIGTERM): a call in
    /// flight then sends its server `notifications/cancelled` before the command ends.
    pub(crate) static INTERRUPT: tokio_util::sync::CancellationToken;
}

/// Completes when the user interrupts the running command (never outside one): a streaming
/// command (`watch`, `subscribe`) ends at once instead of waiting out [`INTERRUPT_GRACE`].
pub(crate) async fn interrupt_asked() {
    match INTERRUPT.try_with(Clone::clone) {
        Ok(token) => token.cancelled().await,
        Err(_) => std::future::pending().await,
    }
}

/// How long an interrupted command gets to end on its own (a call telling its server).
pub(crate) const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// Applies edits of the config files (`--config`, or every file the merge reads) while the
/// command runs, checked every second; an edited config keeps the `--server` limit, and with
/// `one_server` (`serve --prefix none`) one that configures more than one server is refused.
/// Changes count from `since` (the files before the config was read) when given, else from now.
fn live_reload(
    runtime: &Runtime,
    config: Option<PathBuf>,
    only: Vec<String>,
    since: Option<mcp_harness_runtime::FilesSeen>,
    one_server: bool,
) -> mcp_harness_runtime::ConfigWatch {
    let files = commands::config::files(config.as_deref());
    let joiner = runtime.remote_joiner();
    let loader: mcp_harness_runtime::ConfigLoader = std::sync::Arc::new(move || {
        let loaded = commands::config::load(config.as_deref(), false)?;
        // A remote source the edit added is fetched now; its servers join when it answers
        // (not under `--server`: joining merges every server, as at startup).
        if config.is_none()
            && only.is_empty()
            && sources::shared()
                .unfetched()
                .is_ok_and(|new| !new.is_empty())
        {
            joiner.join_new(sources::shared().clone());
        }
        let planned = targets::plan(loaded, &targets::Wants::Every, &only)?.config;
        // None is fine: the one server was removed, and nothing collides.
        if one_server && planned.servers.len() > 1 {
            let names: Vec<&str> = planned.servers.keys().map(String::as_str).collect();
            return Err(format!(
                "`serve --prefix none` serves exactly one server under its own names, and this edit configures {} ({}): keep one (or pick it with `--server NAME`), or restart `serve` without `--prefix none`",
                names.len(),
                names.join(", ")
            ));
        }
        Ok(planned)
    });
    match since {
        Some(since) => runtime.reload_on_change_since(files, Duration::from_secs(1), loader, since),
        None => runtime.reload_on_change(files, Duration::from_secs(1), loader),
    }
}

async fn execute(
    runtime: &Runtime,
    command: Command,
    deadline: Duration,
    config: Option<PathBuf>,
    widen_to: Option<Config>,
    json: bool,
    only: Vec<String>,
) -> u8 {
    use commands::*;
    use exit::Exit;
    match command {
        Command::Servers => {
            let sources = inspect::ServerSources::of(config.as_deref());
            print_settled(runtime, deadline, json, |s| {
                inspect::servers(s, json, &sources)
            })
            .await
        }
        Command::Tools { hidden } => {
            // Exactly what a step bound now shows: the binding `call` uses.
            progress::settle(runtime, deadline).await;
            match runtime.bind_step(&[]).await {
                Ok(binding) => {
                    show(&inspect::tools(&binding, json, hidden), json);
                    explain::note_incomplete(binding.snapshot());
                    inspect::listing_exit(binding.snapshot()).code()
                }
                Err(e) => fail_call(runtime, &e),
            }
        }
        Command::Prompts => {
            let code = print_settled(runtime, deadline, json, |s| inspect::prompts(s, json)).await;
            explain::note_incomplete(&runtime.snapshot());
            code
        }
        Command::Resources => {
            let code =
                print_settled(runtime, deadline, json, |s| inspect::resources(s, json)).await;
            explain::note_incomplete(&runtime.snapshot());
            code
        }
        Command::Call { name, args } => {
            let args = match call::read_args(args).await {
                Ok(a) => a,
                Err(e) => return fail(&e, Exit::Usage),
            };
            progress::settle(runtime, deadline).await;
            if let Some(full) = &widen_to {
                let deadline = settle_deadline(runtime, full);
                targets::widen_for_call(runtime, full, &name, deadline).await;
            }
            match call::run(runtime, &name, args, json).await {
                Ok(outcome) => {
                    use std::io::IsTerminal;
                    // A tool's error is an error: the configured secrets a server quotes in
                    // it are redacted as in every other error (a result is the tool's data).
                    // (With --json, `render` redacted the document string by string.)
                    let said = match outcome.is_error && !json {
                        true => mcp_harness_transport::redact::text(&outcome.text),
                        false => outcome.text.clone(),
                    };
                    if json {
                        // The result object on stdout even when the tool failed; the exit
                        // status says it failed.
                        emit!("{said}");
                    } else if outcome.is_error {
                        // Server text reaches a terminal only without its control characters.
                        let text = if std::io::stderr().is_terminal() {
                            output::for_terminal(&said)
                        } else {
                            said
                        };
                        say_part!("tool error: {text}");
                    } else {
                        emit!("{}", output::for_stdout(&outcome.text));
                    }
                    for warning in &outcome.warnings {
                        note!("warning: {warning}");
                    }
                    if outcome.is_error || !outcome.warnings.is_empty() {
                        Exit::Failed.code()
                    } else {
                        Exit::Ok.code()
                    }
                }
                Err(e) => fail_call(runtime, &e),
            }
        }
        Command::Watch { count } => {
            // Hot reload: an edit of the config files is applied while watching.
            let _reload = live_reload(runtime, config, only, None, false);
            // Every revision with its changes; a reader that fell behind gets the ones it missed
            // as one combined item, saying so.
            let mut revisions = runtime.revisions();
            let mut seen = 0u64;
            if revisions.revision() > 0 {
                let current = revisions.current();
                if json {
                    emitln!("{}", watch::json_line(current, &current.changes, None));
                } else {
                    emit!("{}", output::for_stdout(&watch::describe(current)));
                }
                seen += 1;
                if count.is_some_and(|c| seen >= c) {
                    return Exit::Ok.code();
                }
            }
            // Commands typed while watching (`restart SERVER`), read on a plain thread; a
            // line too long or not text is said and skipped.
            let (lines_tx, mut lines) = tokio::sync::mpsc::channel(16);
            std::thread::spawn(move || {
                let mut stdin = std::io::stdin().lock();
                for number in 1.. {
                    let line = lines::read(&mut stdin, lines::MAX_LINE_BYTES);
                    let Some(line) = line.ok().and_then(|l| l.text(number)) else {
                        break;
                    };
                    if lines_tx.blocking_send(line).is_err() {
                        break;
                    }
                }
            });
            loop {
                tokio::select! {
                    () = output::stdout_closed() => return Exit::Ok.code(),
                    () = interrupt_asked() => return Exit::Interrupted.code(),
                    item = revisions.recv() => {
                        let Some(item) = item else { return Exit::Ok.code() };
                        if json {
                            emitln!("{}", watch::item_json_line(&item));
                        } else {
                            emit!("{}", output::for_stdout(&watch::describe_item(&item)));
                        }
                        seen += 1;
                        if count.is_some_and(|c| seen >= c) {
                            return Exit::Ok.code();
                        }
                    }
                    Some(line) = lines.recv() => match line {
                        Ok(line) => say!("{}", watch::command(runtime, &line)),
                        Err(skipped) => say!("error: {skipped}"),
                    },
                }
            }
        }
        Command::Skills { query } => {
            let snapshot = progress::settle(runtime, deadline).await;
            show(
                &resources::skills(&runtime.search_skills(query.as_deref().unwrap_or("")), json),
                json,
            );
            explain::note_incomplete(&snapshot);
            inspect::listing_exit(&snapshot).code()
        }
        Command::Skill { server, name } => {
            progress::settle(runtime, deadline).await;
            match runtime.load_skill(&server, &name).await {
                Ok(skill) => {
                    show(&resources::loaded_skill(&skill, json), json);
                    Exit::Ok.code()
                }
                Err(e) => fail_call(runtime, &e),
            }
        }
        Command::Prompt { name, args } => {
            let args = match call::read_args(args).await {
                Ok(a) => a,
                Err(e) => return fail(&e, Exit::Usage),
            };
            let snapshot = progress::settle(runtime, deadline).await;
            if let Err(e) = explain::check_prompt_args(&snapshot, &name, args.as_ref()) {
                return fail(&e, Exit::Usage);
            }
            match runtime.run_command(&name, args).await {
                Ok(result) => {
                    show(&resources::prompt(&result, json), json);
                    Exit::Ok.code()
                }
                Err(e) => explain::fail(runtime, &e, explain::Asked::Prompt),
            }
        }
        Command::Read { server, uri, out } => {
            progress::settle(runtime, deadline).await;
            if let Err(e) = explain::check_declared(runtime, &server, explain::Needs::Resources) {
                return fail(&e, Exit::Usage);
            }
            // A skill's file is shown only as its listing vouched for it (digest and size).
            let read = runtime
                .read_resource(&server, &uri)
                .await
                .and_then(|result| {
                    runtime.verify_skill_read(&server, &uri, &result)?;
                    Ok(result)
                });
            match read {
                Ok(result) => match out {
                    Some(path) => match resources::write_contents(&result, &path) {
                        Ok(written) if path == std::path::Path::new("-") => {
                            // Stdout holds the bytes: the summary is a note on stderr.
                            note!(
                                "wrote {} to standard output",
                                output::count(written, "byte")
                            );
                            Exit::Ok.code()
                        }
                        Ok(written) => {
                            if json {
                                emitln!(
                                    "{}",
                                    serde_json::json!({"uri": uri, "server": server, "out": path, "bytes": written})
                                );
                            } else {
                                say!(
                                    "wrote {} to {}",
                                    output::count(written, "byte"),
                                    path.display()
                                );
                            }
                            Exit::Ok.code()
                        }
                        Err(e) => fail(&e, Exit::Failed),
                    },
                    None => {
                        // A faulty result (a blob that is not base64) is printed, said, and a
                        // failure, as a faulty tool result is.
                        let (shown, faults) = resources::contents(&result, json);
                        show(&shown, json);
                        for fault in &faults {
                            note!("warning: {fault}");
                        }
                        match faults.is_empty() {
                            true => Exit::Ok.code(),
                            false => Exit::Failed.code(),
                        }
                    }
                },
                Err(e) => fail_call(runtime, &e),
            }
        }
        Command::Subscribe { server, uri, count } => {
            progress::settle(runtime, deadline).await;
            if let Err(e) = explain::check_declared(runtime, &server, explain::Needs::Subscribe) {
                return fail(&e, Exit::Usage);
            }
            let mut sub = match runtime.subscribe_resource(&server, &uri).await {
                Ok(s) => s,
                Err(e) => return fail_call(runtime, &e),
            };
            let line = |event: &str, uri: &str, server: &str| {
                serde_json::json!({
                    "event": event, "server": server, "uri": uri,
                    "time": output::rfc3339(std::time::SystemTime::now()),
                })
            };
            if json {
                emitln!("{}", line("subscribed", &uri, &server));
            } else {
                emitln!(
                    "{}",
                    output::for_stdout(&format!("subscribed to {uri} on {server}"))
                );
            }
            let mut seen = 0u64;
            // The server's state: a reconnect renews the subscription (said once), a server
            // that gave up ends it.
            let mut snapshots = runtime.watch();
            let mut lost = false;
            loop {
                let update = tokio::select! {
                    () = output::stdout_closed() => break,
                    () = interrupt_asked() => return Exit::Interrupted.code(),
                    update = sub.next() => update,
                    changed = snapshots.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let snapshot = snapshots.borrow_and_update().clone();
                        let Some(status) = snapshot.servers.get(&server) else { continue };
                        match &status.state {
                            mcp_harness_catalog::ServerState::Connected if lost => {
                                lost = false;
                                say!("{server} is back; subscribing again");
                            }
                            mcp_harness_catalog::ServerState::Failed { .. }
                            | mcp_harness_catalog::ServerState::NeedsAuth { .. }
                            | mcp_harness_catalog::ServerState::Disabled
                            | mcp_harness_catalog::ServerState::Untrusted { .. } => {
                                say!(
                                    "error: {}; the subscription ended",
                                    explain::server_down(status)
                                );
                                return Exit::Server.code();
                            }
                            mcp_harness_catalog::ServerState::Pending if !lost => {
                                lost = true;
                                say!("the connection to {server} was lost; subscribing again once it is back");
                            }
                            _ => {}
                        }
                        continue;
                    }
                };
                let Some(update) = update else { break };
                if json {
                    emitln!("{}", line("updated", &update.uri, &update.server));
                } else {
                    emitln!(
                        "{}",
                        output::for_stdout(&format!("updated: {} ({})", update.uri, update.server))
                    );
                }
                seen += 1;
                if count.is_some_and(|c| seen >= c) {
                    break;
                }
            }
            Exit::Ok.code()
        }
        Command::Complete {
            name,
            argument,
            value,
            with,
        } => {
            progress::settle(runtime, deadline).await;
            protocol::complete(runtime, &name, &argument, &value, &with, json).await
        }
        Command::Ping { server } => {
            progress::settle(runtime, deadline).await;
            protocol::ping(runtime, &server, json).await
        }
        Command::Demo => match demo::run(runtime).await {
            Ok(()) => Exit::Ok.code(),
            Err(e) => fail(&e, Exit::Failed),
        },
        Command::ConformanceClient { url } => match conformance::run(runtime, &url).await {
            Ok(()) => Exit::Ok.code(),
            Err(e) => fail(&e, Exit::Failed),
        },
        Command::FixtureServer { .. }
        | Command::Completions { .. }
        | Command::Man
        | Command::Shell
        | Command::Serve(_)
        | Command::Config { .. }
        | Command::Login(_)
        | Command::Trust { .. }
        | Command::Edit(_)
        | Command::Logout { .. } => Exit::Ok.code(),
    }
}

/// Writes a command's output: JSON as is, text for a person through [`output::for_stdout`].
fn show(text: &str, json: bool) {
    if json {
        emit!("{text}");
    } else {
        emit!("{}", output::for_stdout(text));
    }
}

/// Waits for every server, prints `render` of the settled snapshot; exit 3 when a server
/// failed or needs authorization (the listing is incomplete).
async fn print_settled(
    runtime: &Runtime,
    deadline: Duration,
    json: bool,
    render: impl Fn(&mcp_harness_catalog::Snapshot) -> String,
) -> u8 {
    let snapshot = progress::settle(runtime, deadline).await;
    show(&render(&snapshot), json);
    commands::inspect::listing_exit(&snapshot).code()
}

/// The first of Ctrl-C, SIGTERM and SIGHUP. A signal whose handler cannot be installed is
/// left to its default action (the process ends, its servers with it through their death
/// signal).
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    async fn next(kind: SignalKind) {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        () = next(SignalKind::terminate()) => "SIGTERM",
        () = next(SignalKind::hangup()) => "SIGHUP",
    }
}

/// The first of SIGTERM and SIGHUP (the shell's end; Ctrl-C only stops its command).
async fn ended() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    async fn next(kind: SignalKind) {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    }
    tokio::select! {
        () = next(SignalKind::terminate()) => "SIGTERM",
        () = next(SignalKind::hangup()) => "SIGHUP",
    }
}

/// `error: MESSAGE` on stderr (secrets redacted, control characters dropped: the message may
/// quote a server, its JSON-RPC error message say), and `code`'s status.
fn fail(message: &str, code: exit::Exit) -> u8 {
    let message = mcp_harness_transport::redact::text(message);
    say!("error: {message}");
    code.code()
}

/// A request's error on stderr in words for a person ([`explain`]), with its exit status.
fn fail_call(runtime: &Runtime, error: &mcp_harness_runtime::CallError) -> u8 {
    explain::fail(runtime, error, explain::Asked::Tool)
}

#[cfg(test)]
mod log_tests {
    use super::log_line;

    #[test]
    fn a_value_cannot_forge_a_line_nor_drive_the_terminal() {
        let plain = "INFO a plain line\n";
        assert_eq!(log_line(plain, false), plain);
        let forged = "WARN id=a\nERROR forged\r\n";
        assert_eq!(log_line(forged, false), "WARN id=a\\nERROR forged\\r\n");
        let hostile = "WARN id=i\u{1b}]0;PWNED\u{7}\u{1b}[2J\u{1b}[31mRED\u{1b}[0m\n";
        assert_eq!(
            log_line(hostile, false),
            "WARN id=i\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\\u{1b}[31mRED\\u{1b}[0m\n"
        );
        // On a terminal the log's colours stay (a value may colour itself; it cannot retitle
        // the terminal nor clear it).
        assert_eq!(
            log_line(hostile, true),
            "WARN id=i\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\u{1b}[31mRED\u{1b}[0m\n"
        );
        assert_eq!(
            log_line("\u{1b}[2mdim\u{1b}[0m\tx\n", true),
            "\u{1b}[2mdim\u{1b}[0m\tx\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A megabyte log line is cut to [`MAX_LOG_LINE`] bytes on a character boundary, and
    /// still ends its line; a short one is left as it is.
    #[test]
    fn long_log_lines_are_cut_on_a_character_boundary() {
        let line = format!("{}\n", "é".repeat(1 << 19));
        let cut = cut_line(&line);
        assert!(cut.len() < MAX_LOG_LINE + 64, "{}", cut.len());
        assert!(
            cut.ends_with(" more bytes]\n"),
            "{}",
            &cut[cut.len() - 40..]
        );
        assert_eq!(cut_line("short\n"), "short\n");
    }

    /// A sealed session id in a log line (rmcp logs a restored session's whole) shows its
    /// first 8 characters; shorter words, ids and digests are left as they are.
    #[test]
    fn opaque_ids_in_log_lines_are_cut() {
        let id = format!("AQN3-BC1{}", "x_Y-9".repeat(50));
        let line = format!("DEBUG session restored session_id=\"{id}\" next\n");
        let shown = opaque_ids(&line);
        assert_eq!(
            shown,
            "DEBUG session restored session_id=\"AQN3-BC1…[redacted]\" next\n"
        );
        let digest = "a".repeat(64);
        assert_eq!(opaque_ids(&digest), digest.as_str());
        assert_eq!(opaque_ids("é plain words"), "é plain words");
    }
}

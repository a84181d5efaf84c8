//! `mcp-harness serve`: the gateway in front of every configured server, over stdio (one host
//! starts it as its MCP server) or Streamable HTTP (`--http ADDR`, many clients).
//!
//! Invariant: when serving ends (the stdio client leaves, or SIGTERM/SIGINT/SIGHUP) no new
//! request is taken first (the HTTP listener stops; over stdio, standard input is no longer
//! read), in-flight requests get at most `--drain-secs` to be answered, and then the runtime is
//! shut down, so no upstream process outlives the command.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::exit::Exit;
use mcp_harness_gateway::{ClientBridge, Gateway, GatewayOptions, HttpOptions, Prefix};
use mcp_harness_gateway::{KeyError, SESSION_KEYS_ENV, SessionKeys};
use mcp_harness_runtime::{Runtime, SecretText};

/// The keys that seal session ids: `MCP_HARNESS_SESSION_KEYS` when it is set (it wins over the
/// config, whole), else `gateway.sessionKeys`, else none (a random key is made at start).
fn session_keys(config: Option<&SecretText>) -> Result<Option<SessionKeys>, String> {
    if std::env::var_os(SESSION_KEYS_ENV).is_some() {
        if config.is_some() {
            tracing::warn!(
                "{SESSION_KEYS_ENV} is set: its keys are used and `gateway.sessionKeys` in the config is ignored"
            );
        }
        return SessionKeys::from_env().map_err(|e| e.to_string());
    }
    let Some(keys) = config else {
        return Ok(None);
    };
    SessionKeys::parse(keys.expose()).map(Some).map_err(|e| match e {
        KeyError::Empty => "`gateway.sessionKeys` holds no key; give comma-separated base64 32-byte keys (e.g. `openssl rand -base64 32`), or remove it".to_string(),
        KeyError::Invalid { position } => format!(
            "key {position} of `gateway.sessionKeys` is not base64 of 32 bytes; make one with `openssl rand -base64 32` (and keep it out of the file: `\"sessionKeys\": \"${{VAR}}\"`)"
        ),
    })
}

/// How upstream names appear to clients.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum PrefixArg {
    /// `mcp__SERVER__tool` for every tool and prompt, whether or not other servers exist.
    Server,
    /// The upstream's own names (exactly one configured server).
    None,
}

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// How upstream names appear to clients.
    #[arg(long, value_enum, default_value = "server")]
    prefix: PrefixArg,
    /// List tool names of at most N characters (24-64): longer ones are cut and end in a hash
    /// of the whole name (stable, still callable). For a host that puts its own prefix before
    /// each tool: Claude Code names them `mcp__<its name for the gateway>__<tool>`, so with the
    /// gateway registered as `harness` (14 characters of prefix) pass 50 to stay within 64.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u16).range(24..=64))]
    max_name_length: u16,
    /// Also accept this `Host` header (a public hostname; loopback names are always accepted).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Accept browser requests from this origin (`https://app.example:443`); default: loopback
    /// origins only.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Append one JSON line per tool call to this file (time, client, server, tool, decision,
    /// outcome, duration; created with mode 0600).
    #[arg(long, value_name = "FILE")]
    audit: Option<std::path::PathBuf>,
    /// Put each call's arguments in the audit log too (they may hold personal data).
    #[arg(long, requires = "audit")]
    audit_arguments: bool,
    /// Threads of the gateway process (default: 1 over stdio, 2 with --http). 1: the server,
    /// every session and every upstream connection on one thread, so a call is never handed
    /// between threads; N: N workers share the server, the sessions and the upstream
    /// connections (no I/O threads of the harness's own). See the README's benchmarks.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
    /// At most this many open HTTP sessions; more initializes get 429 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = mcp_harness_gateway::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// At most this many open HTTP connections; one more gets 503 with Retry-After and is
    /// closed (keep it under the process's open-file limit, `ulimit -n`).
    #[arg(long, value_name = "N", default_value_t = mcp_harness_gateway::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Close an HTTP connection after this many seconds with no request in progress (the
    /// client's next request opens another; its session is kept).
    #[arg(long, value_name = "SECONDS", default_value_t = mcp_harness_gateway::DEFAULT_CONNECTION_IDLE.as_secs())]
    connection_idle_secs: u64,
    /// Free an HTTP session's memory after this many seconds without a request and without an
    /// open GET stream (its next request restores it from its sealed id).
    #[arg(long, value_name = "SECONDS", default_value_t = mcp_harness_gateway::DEFAULT_IDLE_TIMEOUT.as_secs())]
    idle_secs: u64,
    /// At most this many calls in flight per client session; more are refused with a retry hint.
    #[arg(long, value_name = "N", default_value_t = mcp_harness_gateway::DEFAULT_MAX_CALLS_PER_SESSION)]
    max_calls_per_session: usize,
    /// The gateway's URL as clients reach it (its /mcp endpoint), the audience client access
    /// tokens must name; overrides `gateway.publicUrl`. Default: http://ADDR/mcp.
    #[arg(long, value_name = "URL", requires = "http", value_parser = public_url)]
    public_url: Option<String>,
    /// How long an HTTP session id stays valid after it was last re-sealed (ids are sealed with
    /// the keys in MCP_HARNESS_SESSION_KEYS; without it, a random key made at start).
    #[arg(long, value_name = "SECONDS", default_value_t = mcp_harness_gateway::DEFAULT_SESSION_TTL.as_secs())]
    session_ttl_secs: u64,
    /// Send a ping (an SSE comment) on every open HTTP event stream after this many seconds
    /// without a message, so proxies that cut idle connections keep long calls and GET streams.
    #[arg(long, value_name = "SECONDS", default_value_t = mcp_harness_gateway::DEFAULT_SSE_PING.as_secs())]
    sse_ping_secs: u64,
    /// On SIGTERM, how long in-flight requests may take before the servers are shut down
    /// (over stdio, standard input is no longer read and the answers owed are written within
    /// it, counted from the signal, the client's end of input or the last answer, three times
    /// it at most in all; a second signal cuts it); on a
    /// config edit that removes or replaces a server, how long its calls in flight may take
    /// before its connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    drain_secs: u64,
    /// Hand every HTTP request to rmcp's handler, the requests of established sessions too
    /// (by default the gateway serves those itself: the same checks, a cheaper decode). For
    /// comparing the two, or ruling the gateway's own path out when something looks off.
    #[arg(long, requires = "http")]
    rmcp_posts: bool,
}

/// `--public-url`, checked as `gateway.publicUrl` is.
fn public_url(url: &str) -> Result<String, String> {
    match mcp_harness_runtime::public_url_problem(url) {
        Some(problem) => Err(problem.to_string()),
        None => Ok(url.to_string()),
    }
}

/// `serve --threads` when not given: one client over stdio calls one at a time (one thread
/// answers it soonest); many over HTTP call at once (a second thread serves more of them:
/// `cargo xtask bench --only serve`).
const DEFAULT_THREADS_STDIO: u16 = 1;
const DEFAULT_THREADS_HTTP: u16 = 2;

impl ServeArgs {
    /// Whether upstream names are served as they are (`--prefix none`: one server only).
    pub(crate) fn unprefixed(&self) -> bool {
        matches!(self.prefix, PrefixArg::None)
    }

    /// `--threads`: how many threads the process's tokio runtime gets (1: current-thread).
    pub(crate) fn threads(&self) -> usize {
        let default = match self.http {
            Some(_) => DEFAULT_THREADS_HTTP,
            None => DEFAULT_THREADS_STDIO,
        };
        usize::from(self.threads.unwrap_or(default))
    }

    /// `--drain-secs`.
    pub(crate) fn drain(&self) -> Duration {
        Duration::from_secs(self.drain_secs)
    }
}

/// Serves until the client leaves or a signal arrives; shuts the runtime down.
pub(crate) async fn run(
    runtime: Runtime,
    bridge: ClientBridge,
    args: ServeArgs,
    clients: mcp_harness_runtime::GatewayConfig,
) -> u8 {
    let runtime = Arc::new(runtime);
    let public_url = args.public_url.clone().or(clients.public_url.clone());
    let config_keys = clients.session_keys.clone();
    let clients = if args.http.is_none() {
        if !clients.clients.is_empty() {
            tracing::info!(
                "`gateway.clients` apply to HTTP clients; over stdio the host that started the gateway sees the whole catalog"
            );
        }
        // Over stdio nobody authenticates: the profiles (and their token variables) are unused.
        mcp_harness_runtime::GatewayConfig::default()
    } else {
        clients
    };
    // OpenTelemetry traces: the standard OTEL_* variables (no endpoint set: no tracing).
    let traces = match mcp_harness_gateway::TraceExport::from_env(&|name| std::env::var(name).ok())
    {
        Ok(traces) => traces,
        Err(e) => {
            let code = crate::fail(&format!("cannot export traces: {e}"), Exit::Usage);
            shut_down(runtime).await;
            return code;
        }
    };
    let options = GatewayOptions {
        traces,
        prefix: match args.prefix {
            PrefixArg::Server => Prefix::Server,
            PrefixArg::None => Prefix::None,
        },
        max_tool_name_len: usize::from(args.max_name_length),
        audit: args.audit.clone(),
        audit_arguments: args.audit_arguments,
        max_calls_per_session: args.max_calls_per_session,
        clients,
        ..GatewayOptions::default()
    };
    let code = match Gateway::new(runtime.clone(), options, bridge).await {
        Ok(gateway) => {
            let code = serve(&gateway, &args, public_url, config_keys.as_ref()).await;
            // The last calls' spans go out before the process does (bounded).
            gateway.flush_traces(Duration::from_secs(2)).await;
            code
        }
        Err(e) => crate::fail(&e.to_string(), Exit::Usage),
    };
    shut_down(runtime).await;
    code
}

async fn serve(
    gateway: &Gateway,
    args: &ServeArgs,
    public_url: Option<String>,
    config_keys: Option<&SecretText>,
) -> u8 {
    let Some(addr) = args.http else {
        return serve_stdio(gateway, args.drain()).await;
    };
    let keys = match session_keys(config_keys) {
        Ok(keys) => keys.map(Arc::new),
        Err(e) => return crate::fail(&e, Exit::Usage),
    };
    let shared_keys = keys.is_some();
    let mut http = HttpOptions::new(addr);
    http.session_keys = keys;
    http.session_ttl = Duration::from_secs(args.session_ttl_secs.max(1));
    http.allowed_hosts = args.allow_hosts.clone();
    http.allowed_origins = args.allow_origins.clone();
    http.max_sessions = args.max_sessions;
    http.max_connections = args.max_connections;
    http.connection_idle = Duration::from_secs(args.connection_idle_secs.max(1));
    http.idle_timeout = Duration::from_secs(args.idle_secs.max(1));
    http.sse_ping = Duration::from_secs(args.sse_ping_secs.max(1));
    http.public_url = public_url;
    http.own_posts = !args.rmcp_posts;
    #[cfg(feature = "mimalloc")]
    {
        http.release_memory = crate::allocator::release;
    }
    let mut server = match gateway.serve_http(http).await {
        Ok(server) => server,
        Err(e) => return crate::fail(&e.to_string(), Exit::Usage),
    };
    // Said at every verbosity: a replica started without the shared keys is otherwise silent,
    // and every request another replica's client sends it gets 404.
    say!("mcp-harness: serving {}", server.url());
    if !shared_keys {
        say!(
            "mcp-harness: session ids are sealed with a key made at start: they open on this process only (set {} to share sessions between replicas)",
            mcp_harness_gateway::SESSION_KEYS_ENV
        );
    }
    let signal = tokio::select! {
        () = server.wait() => return crate::fail("the HTTP server stopped", Exit::Failed),
        signal = crate::interrupted() => signal,
    };
    say!(
        "mcp-harness: {signal}: draining (at most {} s; a second signal cuts it), then closing servers",
        args.drain_secs
    );
    let again = std::sync::atomic::AtomicBool::new(false);
    let cut = async {
        crate::interrupted().await;
        again.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    if !server
        .shutdown_until(Duration::from_secs(args.drain_secs), cut)
        .await
    {
        if again.load(std::sync::atomic::Ordering::Relaxed) {
            say!("mcp-harness: a second signal: the requests still running were cut");
        } else {
            say!(
                "mcp-harness: requests still running after {} s were cut (raise --drain-secs)",
                args.drain_secs
            );
        }
    }
    Exit::Ok.code()
}

/// Serves the one stdio client until its input ends, or a stop signal arrives: from the signal
/// on standard input is no longer read (lines already read are), and the session writes the
/// answers it owes, for at most `drain`.
async fn serve_stdio(gateway: &Gateway, drain: Duration) -> u8 {
    let stop = tokio_util::sync::CancellationToken::new();
    let cut = tokio_util::sync::CancellationToken::new();
    let served = gateway.serve_stdio_until_cut(
        stop.clone().cancelled_owned(),
        cut.clone().cancelled_owned(),
        drain,
    );
    tokio::pin!(served);
    let signal = tokio::select! {
        served = &mut served => return match served {
            Ok(()) => Exit::Ok.code(),
            Err(e) => crate::fail(&e.to_string(), Exit::Failed),
        },
        signal = crate::interrupted() => signal,
    };
    stop.cancel();
    tracing::info!(
        signal,
        "stopping the stdio gateway: no new request is read; the calls in flight get at most {drain:?}"
    );
    // The session waits `drain` from the signal or its last answer; this bound only backs it
    // up, and caps a drain that answers keep extending. A second signal cuts it.
    let bounded = tokio::time::timeout(drain.saturating_mul(3) + Duration::from_secs(2), served);
    tokio::pin!(bounded);
    tokio::select! {
        ended = &mut bounded => match ended {
            // A stop before `initialize` ends the start with an error: still a stop.
            Ok(Err(e)) => tracing::info!(error = %e, "the stdio session ended at the stop"),
            Ok(Ok(())) => {}
            Err(_) => tracing::warn!(
                "calls still running {drain:?} after {signal} were cut (raise --drain-secs)"
            ),
        },
        again = crate::interrupted() => {
            tracing::warn!("{again} after {signal}: the calls still running were cut");
            // Each is answered so (not left to look cancelled by its client), within the
            // session's second of grace.
            cut.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut bounded).await;
        }
    }
    // A stop signal is how a service is stopped: 0, as over HTTP (a service manager counts 130
    // as a failure).
    Exit::Ok.code()
}

/// Shuts the runtime down once the gateway's sessions let go of it (bounded); dropping it
/// instead also stops every server, so the bound never leaves a process behind.
async fn shut_down(mut runtime: Arc<Runtime>) {
    for _ in 0..50 {
        match Arc::try_unwrap(runtime) {
            Ok(owned) => {
                owned.shutdown().await;
                return;
            }
            Err(shared) => runtime = shared,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::debug!("sessions still hold the runtime; dropping it stops its servers");
}

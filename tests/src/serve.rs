//! Entry points that put a [`FixtureServer`] on a transport.
//!
//! Invariants:
//! - In stdio mode nothing but JSON-RPC is written to stdout: logs, the
//!   banner and error messages go to stderr.
//! - `hang_at_start` and `exit_at_start` take effect before any transport is
//!   opened, in every entry point; only [`run_main`] turns them into process
//!   effects (stderr message, exit code) and prints the banner. Likewise `crash_after_calls`
//!   only ends the connection in the library entry points ([`Crashed`]); [`run_main`] turns it
//!   into exit code [`CRASH_EXIT_CODE`].
//! - The HTTP listener binds exactly the address it is given ([`run_main`]
//!   passes 127.0.0.1) and serves Streamable HTTP only under `/mcp`, with
//!   stateful sessions that all share one fixture state; every request passes the
//!   [`fault_layer`] first (503 budget, forgotten sessions, counters); every accepted socket
//!   has `TCP_NODELAY` set (`serve_nodelay`).

use std::{
    io::Write,
    net::{Ipv4Addr, SocketAddr},
    os::fd::AsFd,
    pin::Pin,
    sync::Arc,
};

use mcp_harness_transport::http_server::serve_nodelay;
use rmcp::{
    ServiceExt,
    transport::async_rw::AsyncRwTransport,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio::{io::DuplexStream, net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    conformance::ConformanceServer,
    handler::FixtureServer,
    handler::lifecycle::{CRASH_EXIT_CODE, CrashAfter, Crashed, FaultLayer, fault_layer},
    options::{FixtureOptions, TransportKind},
};

/// Error type of the serving functions.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Applies `exit_at_start` / `hang_at_start` / `start_delay_ms` for the library entry points.
async fn start_gate(opts: &FixtureOptions) -> Result<(), BoxError> {
    if let Some(code) = opts.exit_at_start {
        return Err(format!("fixture: exiting at start with code {code}").into());
    }
    if opts.hang_at_start {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(opts.start_delay_ms)).await;
    Ok(())
}

/// Serves one client on `read`/`write` until it disconnects, or until the answer to the
/// `crash_after_calls`-th `tools/call` was sent (then [`Crashed`] is returned).
async fn serve_rw<R, W>(opts: FixtureOptions, read: R, write: W) -> Result<(), BoxError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let write = crate::wire_faults::FaultWrite::new(write, opts.wire_faults);
    let server = FixtureServer::new(opts);
    let crashed = CancellationToken::new();
    let transport = CrashAfter {
        inner: AsyncRwTransport::new_server(read, write),
        server: server.clone(),
        crashed: crashed.clone(),
    };
    let running = server.clone().serve(transport).await?;
    tokio::select! {
        reason = running.waiting() => {
            tracing::debug!(reason = ?reason?, "session ended");
            Ok(())
        }
        () = crashed.cancelled() => Err(Box::new(Crashed {
            calls: server.options().crash_after_calls.unwrap_or_default(),
        })),
    }
}

/// Serves one client on stdin/stdout until it disconnects (or `crash_after_calls` fires).
pub async fn serve_stdio(opts: FixtureOptions) -> Result<(), BoxError> {
    start_gate(&opts).await?;
    if opts.conformance {
        let running = ConformanceServer::new().serve((stdin(), stdout())).await?;
        let reason = running.waiting().await?;
        tracing::debug!(?reason, "conformance session ended");
        return Ok(());
    }
    serve_rw(opts, stdin(), stdout()).await
}

/// Standard input as the runtime's own non-blocking pipe when it is one (as a client that
/// spawns the server makes it), else tokio's `stdin()`.
///
/// tokio's `stdin()`/`stdout()` do every read and write on its blocking thread pool: each
/// message crosses threads and the pool starts threads on demand, which costs a short-lived
/// server more CPU than the messages themselves (measured: cold start of 100 fixture servers,
/// the listings' share of the servers' CPU about halved). The pipe is a duplicate of fd 0, set
/// non-blocking; the client's end is a separate open file, so it is not affected.
fn stdin() -> Pin<Box<dyn tokio::io::AsyncRead + Send>> {
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::pin(pipe),
        Err(_) => Box::pin(tokio::io::stdin()),
    }
}

/// Standard output as a non-blocking pipe when it is one, else tokio's `stdout()`: see
/// [`stdin`]. In stdio mode stdout carries only JSON-RPC, so nothing else writes to it.
fn stdout() -> Pin<Box<dyn tokio::io::AsyncWrite + Send>> {
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(tokio::net::unix::pipe::Sender::from_owned_fd);
    match pipe {
        Ok(pipe) => Box::pin(pipe),
        Err(_) => Box::pin(tokio::io::stdout()),
    }
}

/// Serves Streamable HTTP at `http://ADDR/mcp` with stateful sessions.
///
/// Returns the bound address (useful with port 0) and the task running the
/// server; aborting that task stops the listener and closes every session.
pub async fn serve_http(
    opts: FixtureOptions,
    addr: SocketAddr,
) -> Result<(SocketAddr, JoinHandle<()>), BoxError> {
    start_gate(&opts).await?;
    if opts.crash_after_calls.is_some() {
        return Err("--crash-after-calls applies to stdio and in-process serving only".into());
    }
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    if opts.conformance {
        return Ok((bound, serve_conformance_http(listener)));
    }
    let fail_http = opts.fail_http;
    let server = FixtureServer::new(opts);
    {
        let mut state = server.lock();
        state.http.serving = true;
        state.http.fail_next = fail_http;
    }
    let sessions = Arc::new(LocalSessionManager::default());
    let layer = FaultLayer {
        server: server.clone(),
        sessions: sessions.clone(),
    };
    let ct = CancellationToken::new();
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token());
    if !bound.ip().is_loopback() {
        config.allowed_hosts.push(bound.ip().to_string());
    }
    let service =
        StreamableHttpService::new(move || Ok(server.for_new_connection()), sessions, config);
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(layer, fault_layer));
    let handle = tokio::spawn(async move {
        // Cancels every session when this task ends or is aborted.
        let _sessions = ct.drop_guard();
        // TCP_NODELAY on every accepted socket: without it each request on a keep-alive
        // connection waits ~40 ms for a delayed ACK (see `http_server`).
        if let Err(error) = serve_nodelay(listener, router).await {
            tracing::error!(%error, "http server stopped");
        }
    });
    Ok((bound, handle))
}

/// Serves [`ConformanceServer`] as Streamable HTTP under `/mcp` on `listener`, with rmcp's
/// defaults (stateful sessions, loopback `Host`s only, SSE priming with a retry hint) and no
/// fault layer: what the suite checks is rmcp's behaviour plus the conformance handler.
fn serve_conformance_http(listener: TcpListener) -> JoinHandle<()> {
    let server = ConformanceServer::new();
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token());
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move {
        let _sessions = ct.drop_guard();
        if let Err(error) = serve_nodelay(listener, router).await {
            tracing::error!(%error, "conformance http server stopped");
        }
    })
}

/// Serves one client over an in-memory pipe; the task ends when the client
/// disconnects. With `exit_at_start` the pipe is closed at once; with
/// `hang_at_start` it is held open and never answered.
pub fn serve_in_process(opts: FixtureOptions, stream: DuplexStream) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(error) = start_gate(&opts).await {
            tracing::debug!(%error, "in-process fixture not started");
            return;
        }
        let (read, write) = tokio::io::split(stream);
        if let Err(error) = serve_rw(opts, read, write).await {
            tracing::debug!(%error, "in-process fixture ended");
        }
    })
}

/// Sends logs to stderr, filtered by `RUST_LOG` (default `warn`). Does nothing
/// if the embedding program already installed a subscriber.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// `--spawn-grandchildren`: a `sleep` in this process group and one in a new session.
fn spawn_grandchildren() -> Vec<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    let sleep = || {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("3600")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    };
    let mut setsid = sleep();
    // SAFETY: setsid is async-signal-safe and touches only the forked child.
    unsafe {
        setsid.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut children = Vec::new();
    for mut cmd in [sleep(), setsid] {
        match cmd.spawn() {
            Ok(child) => {
                say(&format!("fixture: started grandchild {}", child.id()));
                children.push(child);
            }
            Err(error) => say(&format!("fixture: cannot start a grandchild: {error}")),
        }
    }
    children
}

/// Writes one line to stderr, ignoring failures (stderr may be closed).
fn say(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
}

/// Runs the fixture as a program: parses `args` (without the program name),
/// serves on the chosen transport, and returns the process exit code
/// (2 for bad arguments, the requested code for `--exit-at-start`, 1 on
/// serving errors, 0 when the client disconnects).
pub async fn run_main(args: Vec<String>) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", crate::options::USAGE);
        return 0;
    }
    let opts = match FixtureOptions::from_args(args) {
        Ok(opts) => opts,
        Err(message) => {
            say(&format!("mcp-fixture-server: {message}"));
            return 2;
        }
    };
    init_logging();
    if let Some(banner) = &opts.stderr_banner {
        say(banner);
    }
    if let Some(name) = &opts.echo_env {
        let value = std::env::var(name).unwrap_or_default();
        say(&format!("fixture: {name}={value}"));
    }
    // Never waited for: they are the processes a harness must clean up after this one.
    let _grandchildren = opts.spawn_grandchildren.then(spawn_grandchildren);
    if let Some(code) = opts.exit_at_start {
        say(&format!("fixture: exiting at start with code {code}"));
        return code;
    }
    match opts.transport {
        TransportKind::Stdio => match serve_stdio(opts.clone()).await {
            Ok(()) if opts.ignore_stdin_eof => {
                say("fixture: stdin closed; staying up (--ignore-stdin-eof)");
                std::future::pending::<()>().await;
                0
            }
            Ok(()) => 0,
            Err(error) if error.is::<Crashed>() => {
                say(&error.to_string());
                CRASH_EXIT_CODE
            }
            Err(error) => {
                say(&format!("fixture: stdio server failed: {error}"));
                1
            }
        },
        TransportKind::Http => {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, opts.port));
            let (bound, handle) = match serve_http(opts, addr).await {
                Ok(served) => served,
                Err(error) => {
                    say(&format!("fixture: cannot serve http on {addr}: {error}"));
                    return 1;
                }
            };
            let mut stdout = std::io::stdout().lock();
            let announced =
                writeln!(stdout, "listening on http://{bound}/mcp").and_then(|()| stdout.flush());
            drop(stdout);
            if let Err(error) = announced {
                say(&format!("fixture: cannot write to stdout: {error}"));
                handle.abort();
                return 1;
            }
            match handle.await {
                Ok(()) => 0,
                Err(error) => {
                    say(&format!("fixture: http server task failed: {error}"));
                    1
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;

    /// Drives `serve_in_process` with raw JSON-RPC lines.
    #[tokio::test]
    async fn in_process_add_tool_notifies() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let task = serve_in_process(FixtureOptions::default(), server);
        let (read, mut write) = tokio::io::split(client);
        let mut lines = BufReader::new(read).lines();
        let messages = [
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion":"2025-06-18","capabilities":{},
                "clientInfo":{"name":"t","version":"1"}}}),
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
                "params":{"name":"add_tool","arguments":{"name":"extra"}}}),
        ];
        for message in messages {
            let line = format!("{message}\n");
            write.write_all(line.as_bytes()).await.expect("write");
        }
        let mut seen_notification = false;
        loop {
            let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
                .await
                .expect("reply in time")
                .expect("read")
                .expect("server still open");
            let value: Value = serde_json::from_str(&line).expect("json line");
            if value["method"] == "notifications/tools/list_changed" {
                seen_notification = true;
            }
            if value["id"] == 2 {
                assert_eq!(value["result"]["content"][0]["text"], "added tool extra");
                break;
            }
        }
        assert!(seen_notification, "list_changed must precede the result");
        drop(write);
        drop(lines);
        tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("server ends when the client leaves")
            .expect("server task");
    }
}

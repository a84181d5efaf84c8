//! Servers' log messages (`notifications/message`) on stderr while a command runs, and
//! `--server-log-level` (`logging/setLevel`).
//!
//! Invariants: log lines go to stderr only (stdout keeps the command's output, `--json`
//! included); a message is shown when its level is at or above the threshold — the level given
//! with `--server-log-level`, else warning (debug with `-v`); with `--json` each is one JSON
//! object on its own line (`{"log": {...}}`). The level is sent only to connected servers that
//! declared the `logging` capability, once per connection.

#![allow(deprecated)] // logging: every protocol before 2026-07-28

use std::collections::BTreeSet;
use std::time::SystemTime;

use mcp_harness_catalog::ServerState;
use mcp_harness_runtime::{Runtime, ServerLog};

/// A log level as the protocol orders them, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Level {
    /// Detailed debugging information.
    Debug,
    /// Informational messages.
    Info,
    /// Normal but significant events.
    Notice,
    /// Warning conditions.
    Warning,
    /// Error conditions.
    Error,
    /// Critical conditions.
    Critical,
    /// Action must be taken immediately.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl Level {
    /// The protocol's level.
    fn wire(self) -> rmcp::model::LoggingLevel {
        use rmcp::model::LoggingLevel as L;
        match self {
            Level::Debug => L::Debug,
            Level::Info => L::Info,
            Level::Notice => L::Notice,
            Level::Warning => L::Warning,
            Level::Error => L::Error,
            Level::Critical => L::Critical,
            Level::Alert => L::Alert,
            Level::Emergency => L::Emergency,
        }
    }

    /// The level of a received message.
    fn of(level: rmcp::model::LoggingLevel) -> Self {
        use rmcp::model::LoggingLevel as L;
        match level {
            L::Debug => Level::Debug,
            L::Info => Level::Info,
            L::Notice => Level::Notice,
            L::Warning => Level::Warning,
            L::Error => Level::Error,
            L::Critical => Level::Critical,
            L::Alert => Level::Alert,
            L::Emergency => Level::Emergency,
        }
    }

    /// The protocol's name of the level.
    fn name(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Critical => "critical",
            Level::Alert => "alert",
            Level::Emergency => "emergency",
        }
    }
}

/// Shows the servers' log messages on stderr until dropped, and keeps `--server-log-level`
/// sent to every connection that declares logging.
pub(crate) struct ServerLogs {
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ServerLogs {
    /// Shows the messages already received, then stops. Called after the runtime's shutdown,
    /// so a message a server sent before its answer, still being handed over when the command
    /// ended, is shown too.
    pub(crate) async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let bounded = tokio::time::timeout(std::time::Duration::from_secs(1), &mut self.task);
        let _ = bounded.await;
    }
}

impl Drop for ServerLogs {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts showing `runtime`'s server logs at `threshold` and above (as JSON lines with
/// `json`), until the returned handle is dropped.
pub(crate) fn show(runtime: &Runtime, threshold: Level, json: bool) -> ServerLogs {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut logs = runtime.server_logs();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let shown = move |log: &ServerLog| {
        if Level::of(log.params.level) >= threshold {
            say!("{}", line(log, json));
        }
    };
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                received = logs.recv() => match received {
                    Ok(log) => shown(&log),
                    Err(RecvError::Lagged(missed)) => match json {
                        // With --json, stderr stays one JSON object per line.
                        true => say!("{}", serde_json::json!({"dropped": {"server_logs": missed}})),
                        false => say!(
                            "({missed} server log messages dropped: they came faster than shown)"
                        ),
                    },
                    Err(RecvError::Closed) => break,
                },
                _ = &mut stopped => {
                    // What is already queued is shown; nothing more is waited for.
                    loop {
                        match logs.try_recv() {
                            Ok(log) => shown(&log),
                            Err(TryRecvError::Lagged(_)) => continue,
                            Err(_) => break,
                        }
                    }
                    break;
                }
            }
        }
    });
    ServerLogs {
        task,
        stop: Some(stop),
    }
}

/// The threshold at which messages are shown: the `--server-log-level`, else warning (debug
/// with `-v`).
pub(crate) fn threshold(level: Option<Level>, verbose: u8) -> Level {
    match (level, verbose) {
        (Some(level), _) => level,
        (None, 0) => Level::Warning,
        (None, _) => Level::Debug,
    }
}

/// Sends `level` (`logging/setLevel`) to every connected server that declared logging and is
/// not in `done` (server names with the time they connected); adds them to `done`. Failures are
/// one warning each, not an error: the command still runs.
async fn level_connected(
    runtime: &Runtime,
    level: Level,
    done: &mut BTreeSet<(String, SystemTime)>,
) {
    let snapshot = runtime.snapshot();
    for (server, status) in &snapshot.servers {
        if !matches!(status.state, ServerState::Connected)
            || !done.insert((server.clone(), status.since))
            || runtime
                .server_capabilities(server)
                .is_none_or(|c| c.logging.is_none())
        {
            continue;
        }
        if let Err(e) = runtime.set_log_level(server, level.wire()).await {
            note!("warning: could not set the log level of server {server}: {e}");
        }
    }
}

/// `--server-log-level` kept in force across the commands of one runtime: each call of
/// [`KeepLevel::apply`] sends the level to the servers that connected since the last one
/// (`enable`, `restart` and reconnects in a `shell`).
pub(crate) struct KeepLevel {
    level: Level,
    done: BTreeSet<(String, SystemTime)>,
}

impl KeepLevel {
    /// Nothing sent yet.
    pub(crate) fn new(level: Level) -> Self {
        KeepLevel {
            level,
            done: BTreeSet::new(),
        }
    }

    /// Sends the level to the servers connected since the last time (call before a command).
    pub(crate) async fn apply(&mut self, runtime: &Runtime) {
        level_connected(runtime, self.level, &mut self.done).await;
    }
}

/// One log message for stderr: `[SERVER LEVEL LOGGER] DATA` for a person (text data as is,
/// other data as compact JSON, control characters dropped), or with `json` the object
/// `{"log": {"server", "level", "logger", "data", "time"}}`.
fn line(log: &ServerLog, json: bool) -> String {
    let level = Level::of(log.params.level).name();
    // A server's words: the configured secrets it quotes are redacted (before its line breaks
    // become spaces; in JSON, in their escaped spelling).
    use mcp_harness_transport::redact;
    if json {
        // String by string: the line stays JSON.
        return serde_json::json!({"log": {
            "server": log.server,
            "level": level,
            "logger": log.params.logger.as_deref().map(redact::text),
            "data": redact::json(&log.params.data),
            "time": crate::output::rfc3339(SystemTime::now()),
        }})
        .to_string();
    }
    let data = match &log.params.data {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let logger = log
        .params
        .logger
        .as_deref()
        .map(|l| format!(" {l}"))
        .unwrap_or_default();
    let text = redact::text(&format!("[{} {level}{logger}] {data}", log.server));
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

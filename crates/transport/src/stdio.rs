//! The stdio transport: the server is a child process in its own process group; its stdin/stdout
//! carry JSON-RPC, its stderr is drained into a bounded tail.
//!
//! Invariant: from spawn on, the child's process group is owned by a [`ProcessGroup`], whose drop
//! kills the whole group, so a failed connect, a dropped session or a dropped runtime leaves no
//! process behind (grandchildren such as `npx` → `node` included). The leader also dies with the
//! harness process, even when that is SIGKILLed (`PR_SET_PDEATHSIG`, see [`crate::reaper`]), and
//! carries [`crate::reaper::OWNER_ENV`] so that descendants which left the group are found.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use crate::connector::{BoxFuture, ConnectOptions, Connector, Session, initialize_with};
use crate::error::TransportError;
use crate::express::ExpressSetup;
use crate::handler::HarnessClient;
use crate::lines::LineTransport;
use crate::process::ProcessGroup;
use crate::stderr::StderrTail;

/// How to start a stdio server.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StdioSpec {
    /// Program to run, looked up on `PATH` when it has no slash.
    pub command: String,
    /// Arguments passed to the program.
    pub args: Vec<String>,
    /// Set on top of the base environment. Values are never logged.
    pub env: BTreeMap<String, String>,
    /// Working directory; the harness's own when `None`.
    pub cwd: Option<PathBuf>,
    /// The base environment: the harness's whole environment (`true`, the default), or only
    /// `MINIMAL_ENV` (`false`), so secrets in the harness's environment do not reach servers
    /// that were not given them. Either way without `NEVER_INHERITED` and [`withhold_env`]'s
    /// variables (the harness's own secrets).
    pub inherit_env: bool,
}

/// Env values hidden, URLs in arguments redacted: a spec in a log holds no secret.
impl std::fmt::Debug for StdioSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioSpec")
            .field("command", &self.command)
            .field("args", &crate::redact::Args(&self.args))
            .field("env", &crate::redact::Values(&self.env))
            .field("cwd", &self.cwd)
            .field("inherit_env", &self.inherit_env)
            .finish()
    }
}

/// What a stdio server gets from the harness's environment when `inherit_env` is off.
pub(crate) const MINIMAL_ENV: [&str; 11] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR",
    "TZ",
];

/// The harness's own secrets in its environment, never inherited by a stdio server (one whose
/// `env` names one still gets that value): the gateway's session keys, `login`'s client secret,
/// and the OTLP exporter's headers (a collector's credentials; the other `OTEL_*` variables are
/// passed on, so an instrumented server still finds the collector and joins the trace).
pub(crate) const NEVER_INHERITED: [&str; 6] = [
    "MCP_HARNESS_SESSION_KEYS",
    "MCP_HARNESS_CLIENT_SECRET",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];

/// Variables the harness's configuration names as holding its own secrets (the gateway's client
/// tokens, a workload's JWT for an upstream's token endpoint): like [`NEVER_INHERITED`], never
/// inherited by a stdio server.
static WITHHELD: std::sync::RwLock<std::collections::BTreeSet<String>> =
    std::sync::RwLock::new(std::collections::BTreeSet::new());

/// Adds `names` to the environment variables no stdio server inherits (one whose `env` names
/// one still gets that value). Kept for the process's life: a variable that held a secret
/// under an earlier configuration may still hold it.
pub fn withhold_env(names: impl IntoIterator<Item = String>) {
    let mut withheld = WITHHELD.write().unwrap_or_else(|p| p.into_inner());
    withheld.extend(names);
}

/// Starts a child process and speaks MCP over its stdio.
#[derive(Debug, Clone)]
pub struct StdioConnector {
    /// How to start the server.
    pub spec: StdioSpec,
}

impl Connector for StdioConnector {
    fn kind(&self) -> &'static str {
        "stdio"
    }

    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>> {
        let spec = self.spec.clone();
        Box::pin(async move {
            let spawn_error = |source| TransportError::Spawn {
                command: spec.command.clone(),
                source,
                stderr_tail: None,
            };
            // The server's PATH, where its program is looked up.
            let path = match spec.env.get("PATH") {
                Some(path) => Some(std::ffi::OsString::from(path)),
                None => std::env::var_os("PATH"),
            };
            let mut cmd = crate::reaper::server_command(
                &spec.command,
                &spec.args,
                path.as_deref(),
                spec.cwd.as_deref(),
            )
            .map_err(spawn_error)?;
            if !spec.inherit_env {
                cmd.env_clear();
                for name in MINIMAL_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        cmd.env(name, value);
                    }
                }
            }
            for name in NEVER_INHERITED {
                cmd.env_remove(name);
            }
            for name in WITHHELD.read().unwrap_or_else(|p| p.into_inner()).iter() {
                cmd.env_remove(name);
            }
            cmd.envs(&spec.env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .env(crate::reaper::OWNER_ENV, std::process::id().to_string())
                .process_group(0)
                .kill_on_drop(true);
            if let Some(cwd) = &spec.cwd {
                cmd.current_dir(cwd);
            }
            // Started by the process-lifetime spawner thread: the death signal follows the
            // thread that started the process, and this task's thread may end before the
            // harness does.
            let io = tokio::runtime::Handle::current();
            let spawned = crate::reaper::spawn_lasting(move || {
                let _io = io.enter();
                cmd.spawn()
            })
            .await;
            let mut child = spawned.map_err(spawn_error)?;
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(TransportError::Spawn {
                    command: spec.command.clone(),
                    source: std::io::Error::other("child stdio pipes missing"),
                    stderr_tail: None,
                });
            };
            let group = Arc::new(ProcessGroup::watch(child));
            let tail = StderrTail::default();
            tail.drain(options.server.clone(), stderr);
            tracing::debug!(server = %options.server, command = %spec.command, pgid = group.pgid(), "spawned stdio server");
            let transport = LineTransport::new(stdout, stdin, options.inbound(true));
            let express = ExpressSetup::written(transport.sender("stdio (express)"));
            initialize_with(
                handler,
                transport,
                &options,
                Some(tail),
                Some(group),
                express,
            )
            .await
        })
    }
}

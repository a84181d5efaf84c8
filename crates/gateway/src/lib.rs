//! mcp-harness as an MCP **server**: one endpoint (stdio or Streamable HTTP) that serves the
//! merged, governed catalog of every server a [`Runtime`] runs.
//!
//! Invariants:
//! - the gateway uses the runtime only through its public API, and holds one runtime (one
//!   connection per upstream server) however many clients connect;
//! - a client's `tools/call` runs on the [`StepBinding`](mcp_harness_runtime::StepBinding) of
//!   that client's last `tools/list`: a tool that changed since is refused as stale, never run
//!   against a schema the client did not see; a client that never listed binds to the current
//!   revision;
//! - a client is sent the `list_changed` notifications of exactly the kinds whose visible
//!   listing changed since it was last told, and nothing when nothing visible changed;
//! - with client profiles (`gateway.clients`), every HTTP request to `/mcp` proves one (or is
//!   refused 401/403), a session serves only the profile that opened it, and each client is
//!   shown, and may use, only its profile's view;
//! - names are stable: with [`Prefix::Server`] every tool and prompt carries its server's
//!   prefix, and every `skill://` URI its server's name, whether or not another server exists.

mod auth;
mod bridge;
mod direct;
mod drain;
mod h1;
mod hold;
mod http;
mod in_session;
mod lean;
mod log_level;
mod names;
mod notify;
mod ops;
mod sealed;
mod session;
mod session_stream;
mod sidecar;
mod spans;
mod stdio;
mod sync;
mod task_ids;
mod trace;
mod traced;
mod unfit;

use std::sync::Arc;

/// `Mcp-Session-Id` as a header name: a lookup by a `&str` parses the name again each time
/// (several lookups on every request).
pub(crate) const SESSION_ID: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-session-id");
/// `Mcp-Protocol-Version` as a header name (see [`SESSION_ID`]).
pub(crate) const PROTOCOL_VERSION: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-protocol-version");

use mcp_harness_runtime::Runtime;

pub use auth::ClientsError;
pub use bridge::ClientBridge;
pub use http::{
    DEFAULT_CONNECTION_IDLE, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS,
    DEFAULT_SSE_PING, HttpOptions, HttpServer, ServeError, release_freed_memory,
};
pub use sealed::{
    DEFAULT_SESSION_TTL, KeyError, Refusal, SESSION_KEYS_ENV, SessionKeys, SessionProfile,
};
pub use trace::{TraceExport, TraceExportError};

/// How upstream names appear downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefix {
    /// `mcp__SERVER__name` for every tool and prompt, always (stable when servers come and go).
    #[default]
    Server,
    /// The upstream's own names: only with exactly one configured server, so the gateway can
    /// stand in front of one server unchanged.
    None,
}

/// What the gateway serves and how it introduces itself.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// How upstream names appear downstream.
    pub prefix: Prefix,
    /// The longest tool name listed (at most 64): longer ones are shortened with a hash
    /// (`catalog::shorten`), for hosts that put their own prefix before each tool name.
    pub max_tool_name_len: usize,
    /// The name in `serverInfo`.
    pub name: String,
    /// Append one JSON line per call here (time, client, server, tool, decision, outcome,
    /// duration).
    pub audit: Option<std::path::PathBuf>,
    /// Put each call's arguments in the audit log too (they may hold personal data).
    pub audit_arguments: bool,
    /// At most this many calls in flight per client session; more are refused with a retry
    /// hint.
    pub max_calls_per_session: usize,
    /// The client profiles (`gateway` in the config). Without profiles every client sees the
    /// whole catalog unauthenticated; with them, HTTP clients must prove one (stdio serves its
    /// one client, the host that started it, the whole catalog).
    pub clients: mcp_harness_runtime::GatewayConfig,
    /// Export OpenTelemetry traces of calls here (`None`: no tracing at all); see
    /// [`TraceExport::from_env`].
    pub traces: Option<TraceExport>,
}

/// The default bound of calls in flight per session.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 32;

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            prefix: Prefix::Server,
            max_tool_name_len: mcp_harness_runtime::catalog::MAX_NAME_LEN,
            name: "mcp-harness".into(),
            audit: None,
            audit_arguments: false,
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
            clients: mcp_harness_runtime::GatewayConfig::default(),
            traces: None,
        }
    }
}

/// Why the gateway refused to start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// `--prefix none` with other than one configured server.
    #[error(
        "`--prefix none` serves exactly one upstream under its own names, but {count} servers are configured; drop `--prefix none` or keep one server in the config"
    )]
    PrefixNoneNeedsOneServer {
        /// How many servers are configured.
        count: usize,
    },
    /// The audit log could not be opened.
    #[error("cannot open the audit log {path}: {source} (check `--audit`)")]
    Audit {
        /// The path asked for.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A client profile cannot be used.
    #[error(transparent)]
    Clients(#[from] ClientsError),
}

/// The gateway: a shared runtime, the options, the connected clients and the task that tells
/// them about catalog changes. Cheap to clone; every transport serves the same one.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<session::Shared>,
}

impl Gateway {
    /// A gateway in front of `runtime`; starts the task that sends `list_changed` to clients
    /// (it ends when the last clone of the gateway is dropped). Waits (at most 5 s) for the
    /// runtime's first publication, which names every configured server. Must run inside a
    /// tokio runtime.
    ///
    /// `bridge` must be the one whose callbacks and approver the runtime was built with (else
    /// upstream requests and approvals cannot reach the calling client).
    pub async fn new(
        runtime: Arc<Runtime>,
        options: GatewayOptions,
        bridge: ClientBridge,
    ) -> Result<Self, GatewayError> {
        let first = runtime
            .wait_for(std::time::Duration::from_secs(5), |s| s.revision > 0)
            .await;
        if options.prefix == Prefix::None {
            let count = first.servers.len();
            if count != 1 {
                return Err(GatewayError::PrefixNoneNeedsOneServer { count });
            }
        }
        let audit = match &options.audit {
            Some(path) => Some(ops::Audit::open(path, options.audit_arguments).map_err(
                |source| GatewayError::Audit {
                    path: path.clone(),
                    source,
                },
            )?),
            None => None,
        };
        let clients =
            auth::Clients::new(&options.clients, &|name| std::env::var(name).ok())?.map(Arc::new);
        let shared = Arc::new(session::Shared::new(
            runtime, options, bridge, audit, clients,
        ));
        notify::spawn(&shared);
        session::augmented_status::spawn(&shared);
        Ok(Self { shared })
    }

    /// Serves one client over stdin/stdout until it disconnects.
    pub async fn serve_stdio(&self) -> Result<(), ServeError> {
        stdio::serve(self.shared.clone()).await
    }

    /// [`Gateway::serve_stdio`] until `stop` resolves (a stop signal): standard input is no
    /// longer read from then on, and the answers the session owes get at most `drain` to be
    /// written before it ends — also when the client ends its input itself; but a `stop` after
    /// the client ended its input (a host closing: stdin, then SIGTERM) cuts the calls still
    /// running at once (each answered that the gateway cut it).
    pub async fn serve_stdio_until(
        &self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        drain: std::time::Duration,
    ) -> Result<(), ServeError> {
        let never = std::future::pending();
        stdio::serve_until(self.shared.clone(), stop, never, drain).await
    }

    /// [`Gateway::serve_stdio_until`], whose drain also ends when `cut` resolves (a second
    /// stop signal): the calls still running are answered that the gateway cut them (as at
    /// the drain's deadline) and the session ends within a second.
    pub async fn serve_stdio_until_cut(
        &self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        cut: impl std::future::Future<Output = ()> + Send + 'static,
        drain: std::time::Duration,
    ) -> Result<(), ServeError> {
        stdio::serve_until(self.shared.clone(), stop, cut, drain).await
    }

    /// Serves one client over any byte stream pair (in-process clients, tests) until it
    /// disconnects.
    pub async fn serve_io<R, W>(&self, read: R, write: W) -> Result<(), ServeError>
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        stdio::serve_io(self.shared.clone(), read, write, stdio::EOF_IDLE).await
    }

    /// Serves Streamable HTTP at `http://ADDR/mcp` (many clients); see [`HttpServer`].
    pub async fn serve_http(&self, options: HttpOptions) -> Result<HttpServer, ServeError> {
        http::serve(self.shared.clone(), options).await
    }

    /// Sends the finished trace spans to the collector now, waiting at most `limit` (call it
    /// after serving, before the process exits; nothing happens without a trace export).
    pub async fn flush_traces(&self, limit: std::time::Duration) {
        if let Some(tracer) = &self.shared.tracer {
            tracer.flush(limit).await;
        }
    }

    /// How many client sessions are open now.
    pub fn sessions(&self) -> usize {
        self.shared.sessions.len()
    }
}

//! The [`Connector`] trait every transport implements, and the [`Session`] it yields.
//!
//! A session owns everything its transport started (the rmcp service loop, a child process
//! group, a stderr drain) and releases all of it when shut down or dropped.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{ProtocolVersion, ServerCapabilities};
use rmcp::service::{
    ClientInitializeError, QuitReason, RunningService, serve_client_with_lifecycle_and_ct,
};
use rmcp::transport::IntoTransport;
use tokio_util::sync::CancellationToken;

use crate::ClientPeer;
use crate::error::TransportError;
use crate::express::{Express, ExpressSetup, Injected};
use crate::handler::HarnessClient;
use crate::ordered::{Delivered, InOrder};
use crate::outstanding::{Outstanding, Tracked};
use crate::process::ProcessGroup;
use crate::stderr::StderrTail;
use crate::wire::WireNotes;

/// A boxed, sendable future, as connectors return them (the `futures` crate's own).
pub(crate) use futures::future::BoxFuture;

/// What every connect attempt is given besides the handler.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Name of the server, for logs and messages.
    pub server: String,
    /// initialize must complete within this (rmcp has no deadline of its own). Default 30 s.
    pub startup_timeout: Duration,
    /// Where a connector that sees raw server messages records what rmcp's model drops (see
    /// [`crate::wire`]). Fresh per connect attempt; connectors that cannot see raw messages
    /// leave it empty.
    pub wire: WireNotes,
    /// The largest message accepted from the server (`maxMessageBytes`); a larger one fails
    /// the request it answers at once (see [`crate::inbound`]).
    pub max_message_bytes: usize,
}

impl ConnectOptions {
    /// The decoding of raw messages for this connection attempt; `track` for transports that
    /// see both directions (requests sent, answers received).
    pub fn inbound(&self, track: bool) -> crate::inbound::Inbound {
        crate::inbound::Inbound::new(
            &self.server,
            self.max_message_bytes,
            self.wire.clone(),
            track,
        )
    }

    /// Options for `server` with the default 30 s startup deadline.
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            startup_timeout: Duration::from_secs(30),
            wire: WireNotes::default(),
            max_message_bytes: crate::inbound::DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// Opens one kind of transport and initialises an MCP session over it.
///
/// Implementors' obligations:
/// - `connect` must complete or fail within `options.startup_timeout` (use `initialize`);
/// - anything it started (processes, tasks, sockets) must be owned by the returned [`Session`] or
///   released when the future fails or is dropped;
/// - errors are [`TransportError`]s, with the stderr tail attached where there is one;
/// - it must not log secrets (header values, environment values).
pub trait Connector: Send + Sync + 'static {
    /// Short name of the transport shown to users: `stdio`, `http`, `in-process`, ...
    fn kind(&self) -> &'static str;

    /// Whether the server is reached over a network (it then goes through the remote connection
    /// queue, is health-checked and reconnected with backoff). Default `false`; network
    /// transports must return `true`.
    fn is_remote(&self) -> bool {
        false
    }

    /// A cheap fingerprint of the credentials stored for `server` (for example a token file's
    /// modification time and size), or `None` when this transport keeps none. A server waiting
    /// for authorization (needs-auth) is connected again when it changes — after
    /// `mcp-harness login` in another process, say — without probing the server meanwhile.
    fn credentials_stamp(&self, _server: &str) -> Option<String> {
        None
    }

    /// Opens the transport and runs initialize with `handler` as the client.
    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>>;
}

/// What initialize negotiated.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The protocol version agreed.
    pub protocol_version: ProtocolVersion,
    /// `serverInfo.name`.
    pub server_name: Option<String>,
    /// `serverInfo.version`.
    pub server_version: Option<String>,
    /// The server's capabilities.
    pub capabilities: ServerCapabilities,
    /// The server's instructions, as sent.
    pub instructions: Option<String>,
}

/// A live, initialised MCP client session.
pub struct Session {
    service: Option<RunningService<RoleClient, HarnessClient>>,
    peer: ClientPeer,
    info: SessionInfo,
    cancel: CancellationToken,
    stderr: Option<StderrTail>,
    process: Option<Arc<ProcessGroup>>,
    wire: WireNotes,
    /// For a remote session: fires when a request shows the server went away.
    broken: Option<crate::net::Breakage>,
    /// The requests sent on this session that still wait for their answer.
    outstanding: Arc<Outstanding>,
    /// Where a `tools/call` can be sent past rmcp's service loop (Streamable HTTP, stdio,
    /// in-process).
    express: Option<Express>,
}

/// How a stdio server's process ended, for a request that failed because it did: its exit
/// status (or signal) and its stderr tail (redacted). Cheap to clone; holds neither the process
/// group nor the session, so keeping one never delays a kill.
#[derive(Clone)]
pub struct ExitReport {
    stderr: Option<StderrTail>,
    status: Option<tokio::sync::watch::Receiver<Option<std::process::ExitStatus>>>,
}

impl ExitReport {
    /// Waits (at most 500 ms each) for the process to be reaped and its stderr drained, then
    /// says how it ended: `the server process exited (exit status: 3)` plus the stderr tail, or
    /// `None` when the process is still running and wrote nothing.
    pub async fn describe(&self) -> Option<String> {
        let limit = Duration::from_millis(500);
        let status = match &self.status {
            Some(rx) => {
                let mut rx = rx.clone();
                match tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await {
                    Ok(Ok(s)) => *s,
                    _ => None,
                }
            }
            None => None,
        };
        if let Some(s) = &self.stderr {
            s.wait_finished(limit).await;
        }
        let tail = self.stderr.as_ref().and_then(StderrTail::text);
        let head = match status {
            Some(status) => format!("the server process ended ({status})"),
            None if tail.is_some() => "the connection closed".to_string(),
            None => return None,
        };
        Some(match tail.as_deref().map(str::trim_end) {
            Some(t) if !t.is_empty() => format!("{head}{}{t}", crate::error::STDERR_TAIL_MARK),
            _ => head,
        })
    }
}

impl Session {
    /// Ends this session's closed future (see [`Session::take_closed`]) as soon as `breakage`
    /// fires, instead of when the transport library notices (rmcp keeps an HTTP session open
    /// after its server died).
    pub fn closed_on(mut self, breakage: crate::net::Breakage) -> Self {
        self.broken = Some(breakage);
        self
    }

    /// How the stdio server's process ended, once it has (`None` for other transports).
    pub fn exit_report(&self) -> Option<ExitReport> {
        let process = self.process.as_ref()?;
        Some(ExitReport {
            stderr: self.stderr.clone(),
            status: Some(process.status_watch()),
        })
    }

    /// The rmcp peer to send requests on. Cheap to clone; fails with a transport error once the
    /// session is closed.
    pub fn peer(&self) -> &ClientPeer {
        &self.peer
    }

    /// Where this session's `tools/call` requests can be sent from the caller's task, past
    /// rmcp's worker (see [`Express`]); `None` for a transport without it.
    pub fn express(&self) -> Option<&Express> {
        self.express.as_ref()
    }

    /// What initialize negotiated.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// What the connection's raw messages said that rmcp's model drops (SEP-1686 task support).
    pub fn wire(&self) -> &WireNotes {
        &self.wire
    }

    /// The stdio server's recent stderr, if this is a stdio session and it wrote any.
    pub fn stderr_tail(&self) -> Option<String> {
        self.stderr.as_ref().and_then(StderrTail::text)
    }

    /// A future that resolves when the session ends by itself (server exit, connection lost) or
    /// is shut down — for a stdio server, once its stderr has been drained too (at most 500 ms
    /// more), so the tail then holds its last words. It can be taken once; later calls return
    /// `None`.
    pub fn take_closed(&mut self) -> Option<BoxFuture<'static, String>> {
        let service = self.service.take()?;
        let process = self.process.clone();
        let stderr = self.stderr.clone();
        let broken = self.broken.clone();
        Some(Box::pin(async move {
            let waited = match broken {
                Some(broken) => tokio::select! {
                    waited = service.waiting() => waited,
                    reason = broken.fired() => return format!("the connection broke ({reason})"),
                },
                None => service.waiting().await,
            };
            // What a dying server wrote last is usually why: let its stderr drain first, so
            // `stderr_tail` read after this resolves has it.
            if let Some(s) = &stderr {
                s.wait_finished(Duration::from_millis(500)).await;
            }
            let reason = match waited {
                Ok(QuitReason::Cancelled) => "closed by the harness".to_string(),
                Ok(QuitReason::Closed) => "the server closed the connection".to_string(),
                Ok(QuitReason::JoinError(e)) | Err(e) => format!("session task failed: {e}"),
                Ok(_) => "session ended".to_string(),
            };
            match process
                .as_ref()
                .and_then(|p| p.exit_status_within(Duration::from_millis(500)))
            {
                Some(fut) => match fut.await {
                    Some(status) => format!("{reason} (process {status})"),
                    None => reason,
                },
                None => reason,
            }
        }))
    }

    /// Waits until every request sent on this session so far (and any sent meanwhile) has its
    /// answer, or was cancelled, or the connection ended — `limit` at the longest — so a
    /// session closed after it cuts no call short. Returns how many were still waiting.
    pub async fn drain(&self, limit: Duration) -> usize {
        self.outstanding.settle(limit).await
    }

    /// How many requests sent on this session wait for their answer now (and callers hold it
    /// to send: [`Session::sends`]).
    pub fn unanswered(&self) -> usize {
        // Against a caller's hold taken before it read the published connection: with the
        // retirement published before this, one of the two sees the other.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.outstanding.count()
    }

    /// Where a caller holds this session before sending on it, so a drain waits for its call.
    pub fn sends(&self) -> crate::Sends {
        crate::Sends::new(self.outstanding.clone())
    }

    /// Closes the session: stops the service loop, then terminates the process group (TERM, and
    /// KILL after a grace period) for stdio servers.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(mut service) = self.service.take() {
            let _ = service.close_with_timeout(Duration::from_secs(2)).await;
        }
        if let Some(process) = self.process.take() {
            process.terminate(Duration::from_secs(2)).await;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cancel.cancel();
        // ProcessGroup's own Drop kills the group when the last reference goes.
    }
}

/// Runs initialize over `transport` within `options.startup_timeout` and builds the session.
/// Every connector funnels through here so that deadlines and error classes are uniform.
pub(crate) async fn initialize<T, E, A>(
    handler: HarnessClient,
    transport: T,
    options: &ConnectOptions,
    stderr: Option<StderrTail>,
    process: Option<Arc<ProcessGroup>>,
) -> Result<Session, TransportError>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    initialize_with(handler, transport, options, stderr, process, None).await
}

/// [`initialize`], for a transport whose session can also make express calls
/// (`crate::express`) when `express` is given.
pub(crate) async fn initialize_with<T, E, A>(
    handler: HarnessClient,
    transport: T,
    options: &ConnectOptions,
    stderr: Option<StderrTail>,
    process: Option<Arc<ProcessGroup>>,
    express: Option<ExpressSetup>,
) -> Result<Session, TransportError>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let cancel = CancellationToken::new();
    // Notifications ahead of the responses sent after them (see `ordered`).
    let delivered = Arc::new(Delivered::default());
    let handler = handler.ordered(delivered.clone());
    let outstanding = Arc::new(Outstanding::default());
    let (express, side) = match express {
        Some(setup) => {
            let (lane, side) = setup.lane(outstanding.clone(), delivered.clone());
            (Some(lane), side)
        }
        None => (None, None),
    };
    let transport = Tracked::new(
        InOrder::new(Injected::new(transport.into_transport(), side), delivered),
        outstanding.clone(),
    );
    let started = tokio::time::timeout(
        options.startup_timeout,
        serve_client_with_lifecycle_and_ct(
            handler.clone(),
            transport,
            handler.lifecycle(),
            cancel.clone(),
        ),
    )
    .await;
    let tail = |stderr: &Option<StderrTail>| stderr.as_ref().and_then(StderrTail::text);
    let service = match started {
        Err(_) => {
            cancel.cancel();
            return Err(TransportError::StartupTimeout {
                timeout: options.startup_timeout,
                stderr_tail: tail(&stderr),
            });
        }
        Ok(Err(e)) => {
            cancel.cancel();
            // A server that died during initialize usually explains why on stderr, and its
            // exit status says how it ended: let it drain and be reaped (together, 300 ms).
            let limit = Duration::from_millis(300);
            let drained = async {
                if let Some(s) = &stderr {
                    s.wait_finished(limit).await;
                }
            };
            let ended = async {
                match process.as_ref().and_then(|p| p.exit_status_within(limit)) {
                    Some(status) => status.await,
                    None => None,
                }
            };
            let ((), status) = tokio::join!(drained, ended);
            let error = init_error(e, tail(&stderr));
            return Err(match (error, status) {
                (
                    TransportError::Initialize {
                        message,
                        auth_required,
                        stderr_tail,
                    },
                    Some(status),
                ) => TransportError::Initialize {
                    message: format!("{message}; the server process ended ({status})"),
                    auth_required,
                    stderr_tail,
                },
                (error, _) => error,
            });
        }
        Ok(Ok(service)) => service,
    };
    let peer = service.peer().clone();
    // Our catalog owns caching; rmcp's cache would serve stale lists on error.
    peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    let info = match peer.peer_info() {
        Some(i) => SessionInfo {
            protocol_version: i.protocol_version.clone(),
            server_name: i.server_info.as_ref().map(|s| s.name.clone()),
            server_version: i.server_info.as_ref().map(|s| s.version.clone()),
            capabilities: i.capabilities.clone(),
            instructions: i.instructions.clone(),
        },
        None => {
            cancel.cancel();
            return Err(TransportError::Initialize {
                message: "the server sent no initialize result".into(),
                auth_required: false,
                stderr_tail: tail(&stderr),
            });
        }
    };
    tracing::debug!(server = %options.server, protocol = %info.protocol_version, "initialized");
    let has_initialize = info.protocol_version.has_initialize();
    if !has_initialize {
        crate::listen::spawn(
            &options.server,
            peer.clone(),
            &info.capabilities,
            handler,
            cancel.clone(),
        );
    }
    Ok(Session {
        service: Some(service),
        peer,
        info,
        cancel,
        stderr,
        process,
        wire: options.wire.clone(),
        broken: None,
        outstanding,
        // Express calls only in the eras with `initialize` (sessions, no per-request `_meta`).
        express: express.filter(|_| has_initialize),
    })
}

/// The HTTP status of a server (or a token source's authorization server) that answered 5xx or
/// 429 somewhere in `err`'s chain.
fn unavailable_status_in(err: &(dyn std::error::Error + 'static)) -> Option<u16> {
    crate::net::http_status_in(err).or_else(|| {
        // A token source's failure travels as an I/O error (see `ClientCredentialsAuth`).
        crate::net::carried_in(err)
            .find_map(|e| e.downcast_ref::<crate::auth::ClientCredentialsError>())
            .and_then(crate::auth::ClientCredentialsError::unavailable_status)
    })
}

/// A failed handshake as our error: a connection that could not be made is
/// [`TransportError::Unreachable`]; otherwise the message says what failed without rmcp's Rust
/// type names or a URL (the connector adds the URL, without its query).
fn init_error(e: ClientInitializeError, stderr_tail: Option<String>) -> TransportError {
    // rmcp refuses a 401 whose `WWW-Authenticate` is not ASCII before it can say it was a 401:
    // still a request for authorization (`mcp-harness login` reads the challenge itself).
    let auth_required = e.is_authorization_required()
        || crate::net::describe(&e).contains("invalid www-authenticate header value");
    let message = match &e {
        ClientInitializeError::TransportError { error, context } => {
            if !auth_required
                && let Some(failure) = crate::net::http_failure_in(error)
                    .or_else(|| crate::net::http_not_found_in(error.error.as_ref()))
            {
                return TransportError::Unreachable {
                    url: String::new(),
                    failure,
                };
            }
            let what = crate::net::describe(error.error.as_ref());
            let message = match context.strip_prefix("send ") {
                Some(request) => format!("{what} (while sending the {request})"),
                None => format!("{what} (while {context})"),
            };
            if !auth_required && let Some(status) = unavailable_status_in(error.error.as_ref()) {
                return TransportError::Unavailable { status, message };
            }
            message
        }
        other => crate::net::describe(other),
    };
    TransportError::Initialize {
        message,
        auth_required,
        stderr_tail,
    }
}

//! The Streamable HTTP transport downstream: many clients at `http://ADDR/mcp`.
//!
//! Invariants:
//! - every accepted socket has TCP_NODELAY (a response written in pieces is not held back by
//!   Nagle's algorithm against the client's delayed ACK);
//! - `Host` must be one the server was told to accept (loopback by default) and, when origins
//!   are configured, a browser `Origin` must be one of them: DNS rebinding gets 403;
//! - shutting the server down closes every session and stops accepting.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt as _;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

use crate::sealed::{SealedSessionManager, SealedStore, Sealer, SessionKeys};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::session::{Session, Shared};

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {source} (choose another address with `--http HOST:PORT`)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The client's `initialize` failed.
    #[error("the client's initialize failed: {0}")]
    Initialize(String),
    /// The session ended with an error.
    #[error("the session ended with an error: {0}")]
    Session(String),
}

/// Where and how to serve Streamable HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address to listen on (port 0 picks one). Loopback unless the user says otherwise.
    pub addr: SocketAddr,
    /// Extra `Host` values to accept besides loopback names (a public deployment's hostnames).
    pub allowed_hosts: Vec<String>,
    /// Browser origins to accept (`https://app.example:443`); empty: requests with an `Origin`
    /// header are accepted only from loopback origins.
    pub allowed_origins: Vec<String>,
    /// At most this many open sessions; an `initialize` beyond gets 429 with `Retry-After`.
    pub max_sessions: usize,
    /// A session with no request for this long is closed here (a later request with its id
    /// restores it from the id).
    pub idle_timeout: Duration,
    /// The keys that seal session ids; `None`: a random key made at start (ids then open on
    /// this process only, so replicas cannot share sessions).
    pub session_keys: Option<Arc<SessionKeys>>,
    /// How long a session id stays valid after it was last re-sealed.
    pub session_ttl: Duration,
}

/// The default bound of open HTTP sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// The default idle time after which a session is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

impl HttpOptions {
    /// Loopback-only serving at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            session_keys: None,
            session_ttl: crate::sealed::DEFAULT_SESSION_TTL,
        }
    }
}

/// A running HTTP server.
pub struct HttpServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Runs until the server stops (it stops only on [`HttpServer::shutdown`] or a listener
    /// failure).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }

    /// Stops accepting, closes every session and waits for the server task.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

pub(crate) async fn serve(
    shared: Arc<Shared>,
    options: HttpOptions,
) -> Result<HttpServer, ServeError> {
    let listener = TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: options.addr,
        source,
    })?;
    let stop = CancellationToken::new();
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
        config.allowed_hosts.push(addr.ip().to_string());
    }
    config
        .allowed_hosts
        .extend(options.allowed_hosts.iter().cloned());
    let mut origins = options.allowed_origins.clone();
    if origins.is_empty() {
        origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
            .map(String::from)
            .to_vec();
    }
    config.allowed_origins = origins;
    let keys = options.session_keys.clone().unwrap_or_else(|| {
        tracing::info!(
            "no {} configured: made a random session key; session ids from this process open nowhere else, so replicas cannot share sessions and sessions end at restart",
            crate::sealed::SESSION_KEYS_ENV
        );
        Arc::new(SessionKeys::generate())
    });
    let sealer = Sealer::new(keys, options.session_ttl);
    config.session_store = Some(Arc::new(SealedStore::new(sealer.clone())));
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.idle_timeout);
    let sessions = Arc::new(SealedSessionManager::new(manager, sealer.clone()));
    let ops = Ops {
        shared: shared.clone(),
        sessions: sessions.clone(),
        max_sessions: options.max_sessions.max(1),
    };
    let service =
        StreamableHttpService::new(move || Ok(Session::new(shared.clone())), sessions, config);
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            sealer,
            crate::sealed::layer,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            ops.clone(),
            session_limit,
        ))
        .with_state(ops);
    let listener = listener.tap_io(|socket| {
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted socket");
        }
    });
    let shutdown = stop.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "the HTTP server stopped");
        }
    });
    tracing::info!(url = %format!("http://{addr}/mcp"), "serving Streamable HTTP");
    Ok(HttpServer { addr, stop, task })
}

/// What the operational routes and the session limit read.
#[derive(Clone)]
struct Ops {
    shared: Arc<Shared>,
    sessions: Arc<SealedSessionManager>,
    max_sessions: usize,
}

/// 200 once the first catalog was published and every upstream settled (connected, failed or
/// waiting for a login: a dead upstream costs only its own entries), else 503 naming the
/// servers still starting.
async fn readyz(State(ops): State<Ops>) -> Response {
    let snapshot = ops.shared.runtime.snapshot();
    let starting: Vec<&str> = snapshot
        .servers
        .iter()
        .filter(|(_, status)| !status.state.is_settled())
        .map(|(name, _)| name.as_str())
        .collect();
    if snapshot.revision > 0 && starting.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        let body = format!("starting: {}\n", starting.join(", "));
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// The Prometheus text exposition.
async fn metrics(State(ops): State<Ops>) -> Response {
    let http_sessions = ops.sessions.len().await;
    let body = ops.shared.metrics.render(
        &ops.shared.runtime.snapshot(),
        ops.shared.sessions.len(),
        http_sessions,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Refuses a new session (a POST to `/mcp` without `Mcp-Session-Id`, at a protocol that has
/// sessions) when `max_sessions` are open: 429 with `Retry-After` and a JSON-RPC error body.
async fn session_limit(State(ops): State<Ops>, request: Request, next: Next) -> Response {
    let opens_session = request.uri().path() == "/mcp"
        && request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && request
            .headers()
            .get("mcp-protocol-version")
            .is_none_or(|v| v.as_bytes() < b"2026-07-28".as_slice());
    if opens_session && ops.sessions.len().await >= ops.max_sessions {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": -32000,
                "message": format!(
                    "the gateway has {} open sessions, its limit; retry later or close idle sessions",
                    ops.max_sessions
                ),
                "data": {"retryAfterMs": 5000}
            }
        });
        let mut response = (StatusCode::TOO_MANY_REQUESTS, body.to_string()).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    next.run(request).await
}

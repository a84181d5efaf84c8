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

use axum::serve::ListenerExt as _;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
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
}

impl HttpOptions {
    /// Loopback-only serving at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
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
    let sessions = Arc::new(LocalSessionManager::default());
    let service =
        StreamableHttpService::new(move || Ok(Session::new(shared.clone())), sessions, config);
    let router = axum::Router::new().nest_service("/mcp", service);
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

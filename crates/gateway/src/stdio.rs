//! The stdio transport downstream: one client, the host that started `mcp-harness serve`.
//!
//! Invariant: stdout carries only JSON-RPC (logs go to stderr); when stdin/stdout are pipes they
//! are read and written without a blocking-pool hop per message.

use std::os::fd::AsFd as _;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::ServiceExt as _;

use crate::ServeError;
use crate::session::{Session, Shared};
use crate::traced::Traced;

pub(crate) async fn serve(shared: Arc<Shared>) -> Result<(), ServeError> {
    serve_io(shared, stdin(), stdout()).await
}

pub(crate) async fn serve_io<R, W>(shared: Arc<Shared>, read: R, write: W) -> Result<(), ServeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let tracer = shared.tracer.clone();
    let running = Traced::new(Session::new(shared), tracer)
        .serve((read, write))
        .await
        .map_err(|e| ServeError::Initialize(e.to_string()))?;
    let reason = running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    tracing::debug!(?reason, "stdio client ended the session");
    Ok(())
}

/// Standard input as a non-blocking pipe when it is one, else tokio's `stdin()` (a socketpair
/// or a terminal).
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

/// Standard output as a non-blocking pipe when it is one, else tokio's `stdout()`.
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

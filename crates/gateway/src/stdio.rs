//! The stdio transport downstream: one client, the host that started `mcp-harness serve`.
//!
//! Invariant: stdout carries only JSON-RPC (logs go to stderr); when stdin/stdout are pipes they
//! are read and written without a blocking-pool hop per message. The lines pass the SEP-1686
//! front ([`crate::session::augmented_lines`]), which leaves them untouched unless the client
//! speaks 2025-11-25 while an upstream declares task-augmented `tools/call`.
//!
//! The lines themselves are read, decoded and written by [`transport::LineTransport`], which answers
//! every line it cannot take (rmcp's own line transport drops them without a word) and applies
//! backpressure ([`backlog`]): a client that writes requests and never reads their answers
//! stalls in its own write instead of growing the gateway.

mod backlog;
mod transport;

use std::os::fd::AsFd as _;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::ServiceExt as _;

use crate::ServeError;
use crate::session::augmented_lines::{FrontRead, FrontWrite, Lines};
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
    let lines = Arc::new(Lines::new(shared.clone()));
    let read = FrontRead::new(read, lines.clone());
    let write = FrontWrite::new(write, lines.clone());
    let transport = transport::LineTransport::new(read, write);
    let running = Traced::new(Session::with_lines(shared, Some(lines)), tracer)
        .serve(transport)
        .await
        .map_err(|e| ServeError::Initialize(initialize_failure(&e)))?;
    let reason = running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    tracing::debug!(?reason, "stdio client ended the session");
    Ok(())
}

/// Why the client's start failed, in words that quote nothing it sent (rmcp's own text for a
/// message other than `initialize` prints the message, secrets and all; and for an answer it
/// could not read, the answer).
fn initialize_failure(error: &rmcp::service::ServerInitializeError) -> String {
    use rmcp::service::ServerInitializeError as Failed;
    match error {
        Failed::ExpectedInitializeRequest(_) => {
            "the client's first message was not `initialize` (nor a request the session can start with)".into()
        }
        Failed::UnexpectedInitializeResponse(_) => "the client answered `initialize` unexpectedly".into(),
        other => other.to_string(),
    }
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

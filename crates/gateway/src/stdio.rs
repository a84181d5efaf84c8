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
//!
//! The session ends when the client's input ends (once the answers owed are written, bounded:
//! [`transport::EOF_IDLE`]) or when its output is gone (a write failed); when the transport
//! gives up on the client, the calls still running are cancelled at once rather than waited
//! for. Under a stop signal ([`serve_until`]) input is read no more and the owed answers are
//! drained; a stop after the client ended its input itself, or a second one (`cut`), cuts the
//! calls still running at once. The tasks this spawns end with the session, also when its
//! future is dropped.

mod backlog;
mod transport;

pub(crate) use transport::EOF_IDLE;

use std::os::fd::AsFd as _;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::service::{QuitReason, RunningService};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::ServeError;
use crate::session::augmented_lines::{FrontRead, FrontWrite, Lines};
use crate::session::{Session, Shared};
use crate::traced::Traced;

pub(crate) async fn serve(shared: Arc<Shared>) -> Result<(), ServeError> {
    serve_io(shared, stdin(), stdout(), transport::EOF_IDLE).await
}

/// [`serve`] until `stop` resolves: from then on standard input reads as ended (no new request
/// is taken; lines already read are) and the answers owed get at most `drain`.
pub(crate) async fn serve_until(
    shared: Arc<Shared>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    cut: impl std::future::Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> Result<(), ServeError> {
    let (stopped, eof) = (CancellationToken::new(), CancellationToken::new());
    let signal = stopped.clone();
    let stopping = tokio::spawn(async move {
        stop.await;
        signal.cancel();
    });
    let input = UntilStopped {
        read: stdin(),
        stop: Some(Box::pin(stopped.clone().cancelled_owned())),
        eof: eof.clone(),
    };
    // A stop after the client ended its input itself is a host closing in a hurry (the SDKs
    // close stdin, wait 2 s, then SIGTERM, then SIGKILL 2 s later): the calls still running
    // are cut at once — answered so, and cancelled upstream — rather than drained to a
    // SIGKILL that cancels nothing.
    let hurried = async move {
        eof.cancelled().await;
        stopped.cancelled().await;
        tracing::info!("stopped after the client ended its input: the calls still running are cut");
    };
    let cut = async move {
        tokio::select! {
            () = cut => {}
            () = hurried => {}
        }
    };
    let _stopping = AbortOnDropHandle::new(stopping);
    serve_io_cut(shared, input, stdout(), drain, cut).await
}

pub(crate) async fn serve_io<R, W>(
    shared: Arc<Shared>,
    read: R,
    write: W,
    end_wait: Duration,
) -> Result<(), ServeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    serve_io_cut(shared, read, write, end_wait, std::future::pending()).await
}

/// [`serve_io`], its session's end also forced when `cut_now` resolves (see [`finished`]).
async fn serve_io_cut<R, W>(
    shared: Arc<Shared>,
    read: R,
    write: W,
    end_wait: Duration,
    cut_now: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let tracer = shared.tracer.clone();
    let lines = Arc::new(Lines::new(shared.clone()));
    let read = FrontRead::new(read, lines.clone());
    let write = FrontWrite::new(write, lines.clone());
    let cut = CancellationToken::new();
    let transport = transport::LineTransport::new(read, write)
        .with_end_wait(end_wait)
        .with_cut(cut.clone());
    let ended = transport.ended();
    let session = Session::with_lines(shared, Some(lines), cut.clone());
    let running = Traced::new(session, tracer)
        .serve(transport)
        .await
        .map_err(|e| ServeError::Initialize(initialize_failure(&e)))?;
    // A second stop signal: the transport gives up on the client now, as at its end wait.
    let forced = ended.clone();
    let _forcing = AbortOnDropHandle::new(tokio::spawn(async move {
        cut_now.await;
        forced.cancel();
    }));
    let reason = finished(running, ended, cut)
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    tracing::debug!(?reason, "stdio client ended the session");
    Ok(())
}

/// Once the transport gave up on the client, how long the session's end waits for its cancelled
/// calls to finish (and their answers to go out, where they still can).
const CUT_GRACE: Duration = Duration::from_secs(1);

/// Waits for the session's end. Once the transport gave up on the client (`ended`), the
/// session's calls are cut (each answered so, where its answer can still be written) and the
/// session is cancelled, which cancels the calls still running (and their upstream calls),
/// whose answers cannot be delivered or are no longer waited for; and the end is waited for at
/// most [`CUT_GRACE`]: after its loop rmcp waits up to 5 s for the calls' handlers, and a
/// cancelled call with a progress notification still to send cannot finish before that wait
/// times out (the loop that would take the notification has stopped). The rmcp task left
/// behind then ends on its own; the session's runtime is shut down by the caller.
async fn finished<S>(
    running: RunningService<rmcp::RoleServer, S>,
    ended: CancellationToken,
    cut: CancellationToken,
) -> Result<QuitReason, tokio::task::JoinError>
where
    S: rmcp::Service<rmcp::RoleServer>,
{
    let cancel = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        reason = &mut waiting => reason,
        () = ended.cancelled() => {
            cut.cancel();
            cancel.cancel();
            tokio::time::timeout(CUT_GRACE, waiting)
                .await
                .unwrap_or(Ok(QuitReason::Cancelled))
        }
    }
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

/// A reader until a stop: once `stop` resolves it reads as ended (and the inner reader is not
/// polled again), which the session takes as its client's end of input.
struct UntilStopped<R> {
    read: R,
    /// `None` once stopped.
    stop: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// Cancelled when the inner reader ended by itself (the client closed its side).
    eof: CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for UntilStopped<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(stop) = &mut this.stop {
            // Polled first: a stop wins over input that is ready.
            if stop.as_mut().poll(cx).is_pending() {
                let (before, room) = (buf.filled().len(), buf.remaining() > 0);
                let read = Pin::new(&mut this.read).poll_read(cx, buf);
                if room
                    && matches!(read, std::task::Poll::Ready(Ok(())))
                    && buf.filled().len() == before
                {
                    this.eof.cancel();
                }
                return read;
            }
            this.stop = None;
        }
        // Nothing put in `buf`: the end of input.
        std::task::Poll::Ready(Ok(()))
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

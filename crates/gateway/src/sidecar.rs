//! A session request's own response stream, for what rmcp would send on the session's GET
//! stream: rmcp routes a notification by request only when it is progress, so an upstream's
//! log lines during a `tools/call` would reach a 2025 client only on a GET stream it need not
//! open. Each POSTed `tools/call`'s event stream gets a side channel here (no other request
//! forwards log lines), and the call's log forwarder writes to it.
//!
//! Invariants:
//! - a side channel lives exactly as long as its request's response stream (registered when
//!   the stream is made, removed when it is dropped), keyed by the session id the request
//!   carried and its JSON-RPC id;
//! - what is waiting on the side channel goes out before the stream's next own message, so a
//!   line written before the call's result reaches the client before that result;
//! - a side channel holds at most [`DEPTH`] messages: a client that does not read its own
//!   stream loses the newer ones (the sender is told), never memory.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dashmap::DashMap;
use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::mpsc;

/// Messages waiting for one response stream at most.
const DEPTH: usize = 256;

/// The side channels of the response streams open now.
#[derive(Default)]
pub(crate) struct Sidecars {
    /// Hashed with foldhash, not SipHash (as the sealed ids' maps: a call hashes its long
    /// session id here three times); only requests of sessions held here are inserted, at most
    /// their calls in flight each.
    channels: DashMap<
        (Arc<str>, RequestId),
        mpsc::Sender<ServerJsonRpcMessage>,
        foldhash::quality::RandomState,
    >,
}

/// Where a request's extra messages go.
pub(crate) type Sidecar = mpsc::Sender<ServerJsonRpcMessage>;

impl Sidecars {
    /// Opens the side channel of `request`, POSTed in session `session` — before the request
    /// reaches its handler, which looks the channel up — to put beside its answer's stream
    /// ([`Opened::around`]); `None` for a message that is not a request.
    pub(crate) fn open(
        self: &Arc<Self>,
        session: &str,
        request: Option<RequestId>,
    ) -> Option<Opened> {
        let (_, side, registered) = self.open_direct(session, request?);
        Some(Opened { side, registered })
    }

    /// Opens the side channel of request `request` of session `session`, for a stream made
    /// from the receiver (a direct call's, see `crate::in_session::direct`): the sender (what
    /// the call sends its client on its stream), the receiver, and the registration, which
    /// removes the channel when dropped.
    pub(crate) fn open_direct(
        self: &Arc<Self>,
        session: &str,
        request: RequestId,
    ) -> (Sidecar, mpsc::Receiver<ServerJsonRpcMessage>, Registered) {
        let key = (Arc::<str>::from(session), request);
        let (tx, side) = mpsc::channel(DEPTH);
        self.channels.insert(key.clone(), tx.clone());
        let registered = Registered {
            sidecars: self.clone(),
            key,
        };
        (tx, side, registered)
    }

    /// The side channel of the request `context` answers, while its response stream is open.
    pub(crate) fn of(&self, context: &RequestContext<RoleServer>) -> Option<Sidecar> {
        let session = context
            .extensions
            .get::<axum::http::request::Parts>()?
            .headers
            .get(&crate::SESSION_ID)?
            .to_str()
            .ok()?;
        let key = (Arc::<str>::from(session), context.id.clone());
        self.channels.get(&key).map(|tx| tx.clone())
    }
}

/// A side channel opened for a request whose answer's stream is on its way.
pub(crate) struct Opened {
    side: mpsc::Receiver<ServerJsonRpcMessage>,
    registered: Registered,
}

impl Opened {
    /// `stream`, the request's answer, with the side channel's messages put in.
    pub(crate) fn around<S>(self, stream: S) -> WithSidecar
    where
        S: Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    {
        WithSidecar {
            inner: Box::pin(stream),
            side: self.side,
            held: None,
            _open: self.registered,
        }
    }
}

/// Removes its side channel when the stream goes.
pub(crate) struct Registered {
    sidecars: Arc<Sidecars>,
    key: (Arc<str>, RequestId),
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.sidecars.channels.remove(&self.key);
    }
}

/// A response stream and its side channel, the side channel first.
pub(crate) struct WithSidecar {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync + 'static>>,
    side: mpsc::Receiver<ServerJsonRpcMessage>,
    /// The stream's own message, held back while side-channel messages that arrived before it
    /// go out.
    held: Option<ServerSseMessage>,
    _open: Registered,
}

impl Stream for WithSidecar {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Poll::Ready(Some(message)) = self.side.poll_recv(cx) {
            return Poll::Ready(Some(ServerSseMessage::from_message(message)));
        }
        if let Some(own) = self.held.take() {
            return Poll::Ready(Some(own));
        }
        match self.inner.as_mut().poll_next(cx) {
            // The stream's own message: whatever reached the side channel meanwhile goes first.
            Poll::Ready(Some(own)) => match self.side.try_recv() {
                Ok(message) => {
                    self.held = Some(own);
                    Poll::Ready(Some(ServerSseMessage::from_message(message)))
                }
                Err(_) => Poll::Ready(Some(own)),
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use rmcp::model::{NumberOrString, ServerNotification, ServerResult};

    fn note(text: &str) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::notification(ServerNotification::ProgressNotification(
            rmcp::model::ProgressNotification::new(rmcp::model::ProgressNotificationParam::new(
                rmcp::model::ProgressToken(NumberOrString::String(text.into())),
                1.0,
            )),
        ))
    }

    /// The side channel opened for request `id` of session `session`, its sender (as the
    /// call's log forwarder holds it) and the result message of that request.
    fn opened(
        sidecars: &Arc<Sidecars>,
        session: &str,
        id: i64,
    ) -> (Opened, Sidecar, ServerSseMessage) {
        let request = RequestId::Number(id);
        let opened = sidecars
            .open(session, Some(request.clone()))
            .expect("a request");
        let key = (Arc::<str>::from(session), request.clone());
        let side = sidecars
            .channels
            .get(&key)
            .map(|tx| tx.clone())
            .expect("registered");
        let result = ServerJsonRpcMessage::response(ServerResult::empty(()), request);
        (opened, side, ServerSseMessage::from_message(result))
    }

    fn shown(message: &ServerSseMessage) -> String {
        serde_json::to_string(message.message.as_deref().expect("a message")).unwrap_or_default()
    }

    /// Lines written before the result go out before it; the channel leaves with its stream.
    #[tokio::test]
    async fn side_messages_precede_the_result_and_leave_with_the_stream() {
        let sidecars = Arc::new(Sidecars::default());
        let (opened, side, result) = opened(&sidecars, "s1", 7);
        let own = futures::stream::iter([result]);
        side.try_send(note("first")).expect("room");
        side.try_send(note("second")).expect("room");
        let mut stream = opened.around(own);
        let mut seen = Vec::new();
        while let Some(message) = stream.next().await {
            seen.push(shown(&message));
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(
            seen[0].contains("first") && seen[1].contains("second"),
            "{seen:?}"
        );
        assert!(seen[2].contains("\"result\""), "{seen:?}");
        drop(stream);
        assert!(
            sidecars.channels.is_empty(),
            "the channel outlived its stream"
        );
    }

    /// A line that reaches the side channel while the stream's own result is being taken
    /// still goes out first.
    #[tokio::test]
    async fn a_line_racing_the_result_goes_first() {
        let sidecars = Arc::new(Sidecars::default());
        let (opened, side, result) = opened(&sidecars, "s2", 8);
        let own = futures::stream::once(async move {
            side.try_send(note("racing")).expect("room");
            result
        });
        let seen: Vec<String> = opened.around(own).map(|m| shown(&m)).collect().await;
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].contains("racing"), "{seen:?}");
        assert!(seen[1].contains("\"result\""), "{seen:?}");
    }
}

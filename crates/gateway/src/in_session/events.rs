//! An answer's event stream as an HTTP body: the bytes rmcp's handler writes, made with less.
//!
//! rmcp's handler (and this path until session 37) stacks a `map` that serialises each message
//! into a `String`, a `take_until` on a child of the server's cancellation token, and
//! `sse_stream`'s body, which copies that `String` again into each frame and makes a keep-alive
//! timer for every answer, reset (a timer-wheel removal and insertion) at every event. Here each
//! event is serialised once, straight into its frame, and the keep-alive timer and the wait for
//! the server's shutdown are made only when the stream has nothing to send: a quick answer,
//! whose events are all ready when its body is first polled, makes neither.
//!
//! Invariants:
//! - an event's bytes are `sse_stream`'s for the same event (`data:`, then `id:` and `retry:`
//!   when set, then a blank line); a keep-alive is its default comment (`:` and a blank line);
//! - a keep-alive goes out only after `keep_alive` has passed without an event;
//! - once the server's token is cancelled the body ends at its next poll, events ready or not
//!   (as `take_until` ends it), and a body waiting for its next event is woken for it.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use http_body::Frame;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// What polling the body gives: its next frame, or its end.
type Polled = Poll<Option<Result<Frame<Bytes>, Infallible>>>;

/// A keep-alive, `sse_stream`'s default comment.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// The event stream `S` as an HTTP body (see the module's invariants).
pub(crate) struct EventBody<S> {
    stream: S,
    /// The interval of keep-alives (`None`: none are sent).
    keep_alive: Option<Duration>,
    /// The keep-alive timer, made the first time the stream has nothing to send.
    timer: Option<Pin<Box<Sleep>>>,
    /// An event went out since the timer was last set.
    sent: bool,
    /// The server's token: the body ends when it is cancelled.
    shutdown: CancellationToken,
    /// The wait for `shutdown`, made the first time the stream has nothing to send.
    shutting: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    ended: bool,
}

impl<S> EventBody<S> {
    pub(crate) fn new(
        stream: S,
        keep_alive: Option<Duration>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            stream,
            keep_alive,
            timer: None,
            sent: false,
            shutdown,
            shutting: None,
            ended: false,
        }
    }

    fn end(&mut self) -> Polled {
        self.ended = true;
        // The wait and the timer leave now, not when the answer is dropped.
        self.shutting = None;
        self.timer = None;
        Poll::Ready(None)
    }

    /// Nothing to send: wakes at shutdown or at the next keep-alive, whichever comes first;
    /// `Some` when that is now.
    fn idle(&mut self, cx: &mut Context<'_>) -> Option<Polled> {
        let shutting = self
            .shutting
            .get_or_insert_with(|| Box::pin(self.shutdown.clone().cancelled_owned()));
        if shutting.as_mut().poll(cx).is_ready() {
            return Some(self.end());
        }
        let interval = self.keep_alive?;
        let deadline = Instant::now() + interval;
        match &mut self.timer {
            // An event went out since it was set: the next keep-alive is an interval from now.
            Some(timer) if self.sent => timer.as_mut().reset(deadline),
            Some(_) => {}
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        self.sent = false;
        let timer = self.timer.as_mut().expect("set above");
        if timer.as_mut().poll(cx).is_pending() {
            return None;
        }
        timer.as_mut().reset(Instant::now() + interval);
        Some(Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
            KEEP_ALIVE,
        ))))))
    }
}

impl<S> http_body::Body for EventBody<S>
where
    S: Stream<Item = ServerSseMessage> + Unpin,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let shut = match this.shutting.as_mut() {
            Some(shutting) => shutting.as_mut().poll(cx).is_ready(),
            None => this.shutdown.is_cancelled(),
        };
        if shut {
            return this.end();
        }
        match this.stream.poll_next_unpin(cx) {
            Poll::Ready(Some(event)) => {
                this.sent = true;
                Poll::Ready(Some(Ok(Frame::data(frame(&event)))))
            }
            Poll::Ready(None) => this.end(),
            Poll::Pending => this.idle(cx).unwrap_or(Poll::Pending),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// One event's bytes, its message serialised straight into them.
fn frame(event: &ServerSseMessage) -> Bytes {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"data: ");
    if let Some(message) = &event.message {
        serde_json::to_writer(&mut frame, message.as_ref()).expect("a message serialises");
    }
    frame.push(b'\n');
    if let Some(id) = &event.event_id {
        frame.extend_from_slice(b"id: ");
        frame.extend_from_slice(id.as_bytes());
        frame.push(b'\n');
    }
    if let Some(retry) = event.retry {
        let _ = writeln!(frame, "retry: {}", retry.as_millis());
    }
    frame.push(b'\n');
    Bytes::from(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;
    use rmcp::model::{ServerJsonRpcMessage, ServerResult};

    fn result(id: i64, text: &str) -> ServerSseMessage {
        let result =
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
        ServerSseMessage::from_message(ServerJsonRpcMessage::response(
            ServerResult::CallToolResult(result),
            rmcp::model::RequestId::Number(id),
        ))
    }

    /// What rmcp's handler writes for `event` (`sse_stream`'s writer).
    fn rmcp_writes(event: &ServerSseMessage) -> Bytes {
        let mut sse = match &event.message {
            Some(message) => sse_stream::Sse::default()
                .data(serde_json::to_string(message.as_ref()).expect("serialises")),
            None => sse_stream::Sse::default().data(""),
        };
        sse.id = event.event_id.clone();
        sse.retry = event.retry.map(|retry| retry.as_millis() as u64);
        sse.into()
    }

    async fn next(
        body: &mut Pin<&mut EventBody<impl Stream<Item = ServerSseMessage> + Unpin>>,
    ) -> Option<Bytes> {
        let frame = body.frame().await?.expect("infallible");
        Some(frame.into_data().expect("data"))
    }

    /// Every kind of event is written byte for byte as rmcp's writer writes it.
    #[test]
    fn events_are_rmcp_s_bytes() {
        let mut with_id = result(4, "with an id, \"quoted\"\nand a newline");
        with_id.event_id = Some("0/17".into());
        let mut with_retry = result(5, "é");
        with_retry.retry = Some(Duration::from_millis(2500));
        for event in [
            ServerSseMessage::priming("0/3", Duration::from_secs(3)),
            result(1, "plain"),
            with_id,
            with_retry,
        ] {
            assert_eq!(frame(&event), rmcp_writes(&event));
        }
    }

    /// A quick answer (every event ready) goes out, ends, and never made a timer or a wait.
    #[tokio::test]
    async fn a_ready_answer_makes_no_timer() {
        let events = vec![
            ServerSseMessage::priming("0/1", Duration::from_secs(3)),
            result(1, "done"),
        ];
        let expected: Vec<Bytes> = events.iter().map(rmcp_writes).collect();
        let body = EventBody::new(
            futures::stream::iter(events),
            Some(Duration::from_secs(15)),
            CancellationToken::new(),
        );
        let mut body = std::pin::pin!(body);
        let mut seen = Vec::new();
        while let Some(frame) = next(&mut body).await {
            seen.push(frame);
        }
        assert_eq!(seen, expected);
        assert!(body.timer.is_none() && body.shutting.is_none());
        assert!(http_body::Body::is_end_stream(&*body));
    }

    /// With nothing to send, a keep-alive goes out each interval; an event puts the next one an
    /// interval after it.
    #[tokio::test(start_paused = true)]
    async fn keep_alives_come_only_after_an_interval_without_events() {
        let (tx, rx) = tokio::sync::mpsc::channel::<ServerSseMessage>(4);
        let stream = tokio_stream_like(rx);
        let body = EventBody::new(
            stream,
            Some(Duration::from_secs(1)),
            CancellationToken::new(),
        );
        let mut body = std::pin::pin!(body);
        let start = Instant::now();
        assert_eq!(next(&mut body).await.as_deref(), Some(KEEP_ALIVE));
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
        tokio::time::advance(Duration::from_millis(600)).await;
        tx.send(result(1, "late")).await.expect("open");
        let event = next(&mut body).await.expect("the event");
        assert!(event.starts_with(b"data: {"));
        let after = Instant::now();
        assert_eq!(next(&mut body).await.as_deref(), Some(KEEP_ALIVE));
        assert_eq!(
            Instant::now() - after,
            Duration::from_secs(1),
            "not an interval after the event"
        );
    }

    /// The server's shutdown ends a body at once: one waiting for its next event is woken for
    /// it, and one with events ready sends none of them.
    #[tokio::test]
    async fn shutdown_ends_the_body() {
        let shutdown = CancellationToken::new();
        let (_tx, rx) = tokio::sync::mpsc::channel::<ServerSseMessage>(4);
        let body = EventBody::new(tokio_stream_like(rx), None, shutdown.clone());
        let mut body = std::pin::pin!(body);
        let waiting = async {
            let frame = body.frame().await;
            assert!(frame.is_none(), "a frame after shutdown");
        };
        let cancel = async {
            tokio::task::yield_now().await;
            shutdown.cancel();
        };
        tokio::time::timeout(
            Duration::from_secs(5),
            futures::future::join(waiting, cancel),
        )
        .await
        .expect("woken at shutdown");

        let ready = EventBody::new(
            futures::stream::iter(vec![result(1, "never sent")]),
            None,
            shutdown.clone(),
        );
        let mut ready = std::pin::pin!(ready);
        assert!(ready.frame().await.is_none());
    }

    /// A receiver as a stream (tokio's own adapter is in a crate the gateway does not use).
    fn tokio_stream_like(
        mut rx: tokio::sync::mpsc::Receiver<ServerSseMessage>,
    ) -> impl Stream<Item = ServerSseMessage> + Unpin {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}

//! Direct calls, the HTTP side: an in-session `tools/call` run on the task that read its POST
//! (`crate::session::direct` runs it), answered here.
//!
//! The answer waits for the call's result or its first other message (progress, a log line, a
//! request of the client) for at most [`super::HOLD`]: a lone result is one JSON body; anything
//! else is an event stream — a priming event (an id, the retry hint), then each message, the
//! result last, every event with an id of this stream — with rmcp's keep-alive comments.
//!
//! Invariants:
//! - a stream's events can be resumed (`GET` with `Last-Event-ID`) in the session that made it
//!   while its call runs and for [`REPLAY_TTL`] after it ended unseen: when the client goes away
//!   before the result, the call runs on to its end (as rmcp's would), and its last
//!   [`REPLAY_DEPTH`] events are kept for a resumption; a stream that delivered its result is
//!   forgotten at once;
//! - a client's JSON-RPC response or `notifications/cancelled` reaches the direct call it names
//!   in its own session only ([`intercept`]); a cancellation goes on to rmcp as well (its
//!   handler hears of it as for any request).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderValue, Response, StatusCode, header};
use dashmap::DashMap;
use futures::Stream;
use http_body_util::BodyExt as _;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::{Notify, mpsc};

use super::Answer;
use crate::direct::InFlight;
use crate::sidecar::Registered;

/// How many of a stream's latest events are kept for a resumption.
pub(crate) const REPLAY_DEPTH: usize = 64;
/// How long the events of a call whose client went away are kept after the call ended.
pub(crate) const REPLAY_TTL: Duration = Duration::from_secs(60);

/// The answer a direct call is on its way to.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = ServerJsonRpcMessage> + Send>>;

/// What a direct call's answer is made of while the call runs.
pub(crate) struct Live {
    /// The call (`None` once answered). In a mutex only to be `Sync` as a response body must
    /// be; it is reached through `get_mut`, never locked.
    call: Option<Mutex<CallFuture>>,
    /// What the call sends its client before its result.
    side: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Messages taken from `side` and not sent yet.
    queued: VecDeque<ServerJsonRpcMessage>,
    /// The result, once there, sent after `queued`.
    answer: Option<ServerJsonRpcMessage>,
    _sidecar: Registered,
    _in_flight: InFlight,
}

impl Live {
    pub(crate) fn new(
        call: CallFuture,
        side: mpsc::Receiver<ServerJsonRpcMessage>,
        sidecar: Registered,
        in_flight: InFlight,
    ) -> Self {
        Self {
            call: Some(Mutex::new(call)),
            side,
            queued: VecDeque::new(),
            answer: None,
            _sidecar: sidecar,
            _in_flight: in_flight,
        }
    }

    /// Polls the side channel, then the call: `Ready` once a message was queued or the
    /// result came (with what reached the side channel before it queued ahead of it).
    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Poll::Ready(Some(message)) = self.side.poll_recv(cx) {
            self.queued.push_back(message);
            return Poll::Ready(());
        }
        let Some(call) = self.call.as_mut() else {
            return Poll::Pending;
        };
        let call = call
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match call.as_mut().poll(cx) {
            Poll::Ready(answer) => {
                self.call = None;
                while let Ok(message) = self.side.try_recv() {
                    self.queued.push_back(message);
                }
                self.answer = Some(answer);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits for the result or the first message, for at most `hold` (by the connection's
    /// `clock` when there is one).
    pub(crate) async fn gather(&mut self, hold: Duration, clock: Option<&crate::hold::HoldClock>) {
        let progress = std::future::poll_fn(|cx| self.poll_progress(cx));
        tokio::select! {
            biased;
            () = progress => {}
            () = crate::hold::hold_until(clock, tokio::time::Instant::now() + hold) => {}
        }
    }

    /// The result, when it is all there is to send.
    pub(crate) fn lone_answer(&mut self) -> Option<ServerJsonRpcMessage> {
        if self.queued.is_empty() {
            self.answer.take()
        } else {
            None
        }
    }
}

/// The events of the direct streams that can be resumed, by (session identity, stream).
#[derive(Default)]
pub(crate) struct Replays {
    map: DashMap<(Arc<str>, u64), Arc<Replay>, foldhash::quality::RandomState>,
    next: AtomicU64,
}

/// The latest events of one stream.
#[derive(Default)]
pub(crate) struct Replay {
    state: Mutex<ReplayState>,
    more: Notify,
}

#[derive(Default)]
struct ReplayState {
    events: VecDeque<(u64, ServerSseMessage)>,
    done: bool,
}

impl Replay {
    fn push(&self, index: u64, event: &ServerSseMessage, done: bool) {
        {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.events.push_back((index, event.clone()));
            if state.events.len() > REPLAY_DEPTH {
                state.events.pop_front();
            }
            state.done |= done;
        }
        self.more.notify_waiters();
    }

    /// The first kept event after `index`, or whether the stream is over.
    fn after(&self, index: u64) -> Result<(u64, ServerSseMessage), bool> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state
            .events
            .iter()
            .find(|(at, _)| *at > index)
            .cloned()
            .ok_or(state.done)
    }
}

impl Replays {
    /// A new stream of session `identity`: its number and its events' record.
    fn open(self: &Arc<Self>, identity: Arc<str>) -> (u64, Arc<Replay>) {
        let stream = self.next.fetch_add(1, Ordering::Relaxed);
        let replay = Arc::new(Replay::default());
        self.map.insert((identity, stream), replay.clone());
        (stream, replay)
    }

    /// The events after `Last-Event-ID` `last` of a stream of session `identity`: `None` when
    /// `last` is not an id of such a stream that can still be resumed.
    pub(crate) fn resume(
        &self,
        identity: &str,
        last: &str,
    ) -> Option<impl Stream<Item = ServerSseMessage> + Send + Sync + Unpin + 'static> {
        let (stream, index) = parse_event_id(last)?;
        let replay = self
            .map
            .get(&(Arc::<str>::from(identity), stream))?
            .value()
            .clone();
        Some(Box::pin(futures::stream::unfold(
            (replay, index),
            |(replay, index)| async move {
                loop {
                    let waited = {
                        let more = replay.more.notified();
                        match replay.after(index) {
                            Ok(found) => Some(found),
                            Err(true) => return None,
                            Err(false) => {
                                more.await;
                                None
                            }
                        }
                    };
                    if let Some((at, event)) = waited {
                        return Some((event, (replay, at)));
                    }
                }
            },
        )))
    }
}

/// Whether a `Last-Event-ID` is one of a direct stream.
pub(crate) fn is_direct_event_id(id: &str) -> bool {
    parse_event_id(id).is_some()
}

fn event_id(stream: u64, index: u64) -> String {
    format!("d{stream}.{index}")
}

fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, index) = id.strip_prefix('d')?.split_once('.')?;
    Some((stream.parse().ok()?, index.parse().ok()?))
}

/// A direct call's answer as an event stream (see the module's doc).
pub(crate) struct Events {
    live: Option<Live>,
    key: (Arc<str>, u64),
    replay: Arc<Replay>,
    replays: Arc<Replays>,
    retry: Option<Duration>,
    /// The index of the last event made (0: the priming event).
    index: u64,
    primed: bool,
    /// Driven to its end with nobody reading (its client went away).
    detached: bool,
}

impl Events {
    pub(crate) fn new(
        live: Live,
        identity: Arc<str>,
        replays: &Arc<Replays>,
        retry: Option<Duration>,
    ) -> Self {
        let (stream, replay) = replays.open(identity.clone());
        Self {
            live: Some(live),
            key: (identity, stream),
            replay,
            replays: replays.clone(),
            retry,
            index: 0,
            primed: false,
            detached: false,
        }
    }

    fn event(&mut self, message: ServerJsonRpcMessage, last: bool) -> ServerSseMessage {
        self.index += 1;
        let event = ServerSseMessage::new(event_id(self.key.1, self.index), message);
        self.replay.push(self.index, &event, last);
        if last && !self.detached {
            // Delivered to its reader: nothing to resume.
            self.replays.map.remove(&self.key);
        }
        event
    }
}

impl Stream for Events {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if !this.primed {
            this.primed = true;
            let mut priming = ServerSseMessage::priming(event_id(this.key.1, 0), Duration::ZERO);
            priming.retry = this.retry;
            this.replay.push(0, &priming, false);
            return Poll::Ready(Some(priming));
        }
        let Some(live) = this.live.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            if let Some(message) = live.queued.pop_front() {
                return Poll::Ready(Some(this.event(message, false)));
            }
            if let Some(answer) = live.answer.take() {
                this.live = None;
                return Poll::Ready(Some(this.event(answer, true)));
            }
            match live.poll_progress(cx) {
                Poll::Ready(()) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        // The client went away before the result: the call runs on, its events kept for a
        // resumption, as long as there is a runtime to run it on.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut rest = Events {
            live: Some(live),
            key: self.key.clone(),
            replay: self.replay.clone(),
            replays: self.replays.clone(),
            retry: self.retry,
            index: self.index,
            primed: true,
            detached: true,
        };
        runtime.spawn(async move {
            use futures::StreamExt as _;
            while rest.next().await.is_some() {}
            tokio::time::sleep(REPLAY_TTL).await;
            rest.replays.map.remove(&rest.key);
        });
    }
}

/// A lone result as one JSON body.
pub(crate) fn json(message: &ServerJsonRpcMessage) -> Answer {
    let body = serde_json::to_vec(message).unwrap_or_default();
    let mut answer = Response::new(http_body_util::Full::new(Bytes::from(body)).boxed());
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer
}

/// What a client's POST of a message that is not a request meant for direct calls: a
/// response to one's request is handed over and accepted here (`Some`, 202 as rmcp answers);
/// a cancellation cancels the direct call it names and, like anything else, goes on to rmcp
/// (`None`).
pub(crate) fn intercept(
    bytes: &[u8],
    identity: &str,
    held: &crate::direct::DirectCalls,
) -> Option<Answer> {
    let message: ClientJsonRpcMessage = serde_json::from_slice(bytes).ok()?;
    let answered = match message {
        ClientJsonRpcMessage::Response(response) => {
            held.answer(identity, &response.id, Ok(response.result))
        }
        ClientJsonRpcMessage::Error(error) => {
            let id = error.id?;
            held.answer(identity, &id, Err(error.error))
        }
        ClientJsonRpcMessage::Notification(notification) => {
            if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                && let Some(request) = &cancelled.params.request_id
                && held.cancel(identity, request)
            {
                tracing::debug!(%request, "a direct call cancelled by its client");
            }
            return None;
        }
        _ => return None,
    };
    answered.then(|| super::text(StatusCode::ACCEPTED, String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_told_apart_from_rmcp_ones() {
        assert_eq!(parse_event_id(&event_id(7, 3)), Some((7, 3)));
        assert!(is_direct_event_id("d0.0"));
        for rmcp_like in ["0/0", "1/0", "3", "d", "d1", "d1.x", "dx.1", ""] {
            assert!(!is_direct_event_id(rmcp_like), "{rmcp_like}");
        }
    }
}

//! A session's newest GET stream is the one its notifications go to.
//!
//! rmcp sends a session's server-initiated messages (list changes, resource updates, log lines
//! outside a call) on the first GET stream for as long as that stream's receiver lives, and
//! makes any later GET an idle extra stream that gets nothing. But a client opens a second GET
//! stream of one session when it lost the first — usually resuming it with `Last-Event-ID` —
//! and the gateway learns the first is gone only when a write to its connection fails: behind
//! a proxy that dropped only the client's side, maybe never. Until then every notification
//! went into the lost stream, and a resumed one had nothing replayed. And a new GET stream
//! *without* `Last-Event-ID` got every cached message again, requests to the user included.
//!
//! Invariants:
//! - at most one open stream per session, the newest; opening a new one ends the one before it
//!   *before* rmcp is asked for the new one (its receiver dropped, so rmcp makes the new stream
//!   the session's and replays its cache), and the old response ends at once;
//! - a new stream opened without `Last-Event-ID` skips the replayed messages an earlier stream
//!   of the session already handed to its response: it gets only what no stream carried;
//! - the table holds one entry per session that opened a GET stream, and forgets it when the
//!   session ends ([`SessionStreams::retain`]) or a new worker takes the session over (it
//!   numbers its events from 0 again).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use dashmap::DashMap;
use futures::{Stream, StreamExt as _};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;

/// An event stream as rmcp's HTTP service takes it.
pub(crate) type EventStream = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// Each session's GET stream, by the session's in-memory key.
#[derive(Default)]
pub(crate) struct SessionStreams {
    slots: DashMap<String, Arc<Mutex<Slot>>>,
}

/// A session's GET stream, and how far its streams got.
#[derive(Default)]
struct Slot {
    /// The open stream; taken out (its receiver dropped) when a newer one replaces it.
    stream: Option<EventStream>,
    /// Who waits on the stream: woken when it is taken out, so its response ends.
    waker: Option<Waker>,
    /// The highest event index any stream of the session handed to its response.
    delivered: Option<usize>,
    /// Which stream is open, so a response dropped late does not take out a newer one.
    generation: u64,
}

impl SessionStreams {
    /// Opens `session`'s new GET stream: ends the one open before (its receiver is dropped now,
    /// its response ends) and returns the highest event index the session's streams carried.
    /// Call it before rmcp opens the new stream, then [`Self::hold`] what rmcp returned.
    pub(crate) fn replace(&self, session: &str) -> Option<usize> {
        let slot = self.slots.entry(session.to_string()).or_default().clone();
        let mut slot = lock(&slot);
        slot.stream = None;
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
        slot.delivered
    }

    /// `stream`, the GET stream just opened for `session`, held so the next one can end it;
    /// events up to index `skip_through` (replayed, already carried) are not passed on.
    pub(crate) fn hold(
        &self,
        session: &str,
        stream: EventStream,
        skip_through: Option<usize>,
    ) -> Held {
        let slot = self.slots.entry(session.to_string()).or_default().clone();
        let generation = {
            let mut held = lock(&slot);
            held.generation += 1;
            held.stream = Some(stream);
            held.waker = None;
            held.generation
        };
        Held {
            slot,
            generation,
            skip_through,
        }
    }

    /// Forgets the sessions `keep` says no longer run.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.slots.retain(|session, _| keep(session));
        self.slots.shrink_to_fit();
    }

    /// Forgets `session` (it ended).
    pub(crate) fn forget(&self, session: &str) {
        self.slots.remove(session);
    }
}

/// A poisoned slot is still a slot: its fields are valid whatever panicked while it was held.
fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The index of a session stream's event id (`N`; a call's stream's ids are `N/request`).
fn index(event: &ServerSseMessage) -> Option<usize> {
    event.event_id.as_deref()?.parse().ok()
}

/// A held GET stream as the HTTP response reads it: ends when a newer stream replaced it.
pub(crate) struct Held {
    slot: Arc<Mutex<Slot>>,
    generation: u64,
    skip_through: Option<usize>,
}

impl Stream for Held {
    type Item = ServerSseMessage;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut slot = lock(&this.slot);
        if slot.generation != this.generation {
            return Poll::Ready(None);
        }
        loop {
            let Some(stream) = slot.stream.as_mut() else {
                return Poll::Ready(None);
            };
            match stream.poll_next_unpin(cx) {
                Poll::Pending => {
                    if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        slot.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(event)) => {
                    let index = index(&event);
                    if index.is_some() && index <= this.skip_through {
                        continue;
                    }
                    if index > slot.delivered {
                        slot.delivered = index;
                    }
                    return Poll::Ready(Some(event));
                }
                Poll::Ready(None) => return Poll::Ready(None),
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut slot = lock(&self.slot);
        if slot.generation == self.generation {
            slot.stream = None;
            slot.waker = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of what its sender sends.
    fn channel() -> (tokio::sync::mpsc::Sender<ServerSseMessage>, EventStream) {
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (tx, Box::pin(stream))
    }

    fn event(index: usize) -> ServerSseMessage {
        ServerSseMessage::priming(index.to_string(), std::time::Duration::from_secs(1))
    }

    #[tokio::test]
    async fn a_newer_stream_ends_the_one_before_and_drops_its_receiver() {
        let streams = SessionStreams::default();
        assert_eq!(streams.replace("s1"), None);
        let (old_tx, old) = channel();
        let mut old = streams.hold("s1", old, None);
        old_tx.send(event(1)).await.expect("send");
        assert_eq!(old.next().await.and_then(|e| index(&e)), Some(1));
        let waiting = tokio::spawn(async move { old.next().await.is_none() });
        tokio::task::yield_now().await;

        assert_eq!(
            streams.replace("s1"),
            Some(1),
            "what the old stream carried"
        );
        assert!(old_tx.is_closed(), "the old receiver is dropped at once");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the old response is woken and ends")
            .expect("task");
        assert!(ended);
    }

    #[tokio::test]
    async fn a_new_stream_skips_what_an_earlier_one_carried() {
        let streams = SessionStreams::default();
        let (tx, new) = channel();
        let mut new = streams.hold("s1", new, Some(2));
        for i in 1..=4 {
            tx.send(event(i)).await.expect("send");
        }
        drop(tx);
        let seen: Vec<_> = new
            .by_ref()
            .filter_map(|e| async move { index(&e) })
            .collect()
            .await;
        assert_eq!(seen, [3, 4]);
        assert_eq!(streams.replace("s1"), Some(4));
    }

    #[tokio::test]
    async fn an_old_response_dropped_late_does_not_take_out_the_new_one() {
        let streams = SessionStreams::default();
        let (_old_tx, old) = channel();
        let old = streams.hold("s1", old, None);
        streams.replace("s1");
        let (new_tx, new) = channel();
        let _new = streams.hold("s1", new, None);
        drop(old);
        assert!(!new_tx.is_closed(), "the new stream is still held");
        streams.forget("s1");
        streams.retain(|_| false);
    }
}

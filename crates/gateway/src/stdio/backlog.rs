//! Backpressure for the stdio client: what the gateway owes it, and when to stop reading.
//!
//! Invariants:
//! - [`Backlog::owed`] counts every request received until its answer is written or dropped,
//!   and every other message handed out to be written until it is written or dropped: each
//!   counted once, released once (an answer takes over its request's count), so the count
//!   cannot drift;
//! - a request the client cancels stays counted for [`CANCEL_GRACE`] unless its answer is handed
//!   out first (rmcp drops the answer of a request cancelled before it is answered, and its
//!   handler may still be running): a client cancelling what it sends cannot read past the
//!   bound;
//! - an id in flight (or cancelled within the grace) is one entry: a request repeating it is
//!   refused by the transport, never handed to rmcp (which would answer only one of them); once
//!   a cancellation's grace is over its id is free, whether or not a sweep released it yet;
//! - a receive waits only while the count is at [`OWED`], and is woken by the release that
//!   takes it below or by the end of a cancellation's grace;
//! - once the input ended ([`Backlog::drained`]) the wait for what is owed ends at the latest
//!   [`Backlog::drained`]'s `idle` after the end or after the last *answer* written, whichever
//!   is later: progress notifications and other messages written do not extend it, so a call
//!   that reports progress cannot hold the session for its whole length.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::sync::Notify;

use crate::sync::lock;

/// The most requests in flight (read, their answers not yet written) plus other messages
/// waiting for standard output, before standard input is no longer read.
pub(crate) const OWED: usize = 1024;

/// How long a cancelled request stays counted when no answer is handed out for it.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// What the gateway owes its stdio client (see the module doc).
#[derive(Default)]
pub(super) struct Backlog {
    owed: AtomicUsize,
    /// The requests received and not yet answered: `None` while running, the time of its
    /// cancellation once cancelled.
    open: Mutex<HashMap<RequestId, Option<Instant>>>,
    /// Woken when `owed` falls below [`OWED`] (or by any release while `every_release`).
    room: Notify,
    /// A receive is waiting (logged once per wait).
    waiting: AtomicBool,
    /// The client closed its input: every release wakes the wait for the last answers.
    every_release: AtomicBool,
    /// Since the input ended: when it did, or when the last answer was written after it.
    quiet_since: Mutex<Option<Instant>>,
}

/// Why a received message is not handed to rmcp.
pub(super) enum Refused {
    /// A request whose id is in flight.
    IdInUse(RequestId),
}

impl Backlog {
    fn owe(&self) {
        self.owed.fetch_add(1, Ordering::AcqRel);
    }

    fn release(&self) {
        let before = self.owed.fetch_sub(1, Ordering::AcqRel);
        if before == OWED || self.every_release.load(Ordering::Acquire) {
            self.waiting.store(false, Ordering::Relaxed);
            self.room.notify_waiters();
        }
    }

    /// `message` was received: a request opens its id (or is refused when the id is open), a
    /// cancellation starts its request's grace.
    pub(super) fn received(&self, message: &RxJsonRpcMessage<RoleServer>) -> Result<(), Refused> {
        match message {
            JsonRpcMessage::Request(request) => self.open(&request.id)?,
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                    && let Some(at) = lock(&self.open).get_mut(id)
                {
                    at.get_or_insert_with(Instant::now);
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
        Ok(())
    }

    /// Opens `id` for a request just received: refused while the id is in flight or cancelled
    /// within the grace. An id whose cancellation's grace is over is taken over by the new
    /// request (its count with it: the old entry would have been released by a sweep anyway),
    /// since sweeps run only at the bound and at the end.
    fn open(&self, id: &RequestId) -> Result<(), Refused> {
        let mut open = lock(&self.open);
        match open.get(id) {
            Some(Some(at)) if at.elapsed() >= CANCEL_GRACE => {
                open.insert(id.clone(), None);
            }
            Some(_) => return Err(Refused::IdInUse(id.clone())),
            None => {
                open.insert(id.clone(), None);
                self.owe();
            }
        }
        Ok(())
    }

    /// Releases the cancelled requests whose grace is over; when the next one ends, if any.
    fn sweep(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next = None;
        let mut released = 0;
        lock(&self.open).retain(|_, cancelled| match cancelled {
            Some(at) if now.duration_since(*at) >= CANCEL_GRACE => {
                released += 1;
                false
            }
            Some(at) => {
                let ends = *at + CANCEL_GRACE;
                next = Some(next.map_or(ends, |n: Instant| n.min(ends)));
                true
            }
            None => true,
        });
        for _ in 0..released {
            self.release();
        }
        next
    }

    /// `message` is handed out to be written: outstanding until the guard is dropped. An
    /// answer takes over its request's count; anything else is counted anew.
    pub(super) fn sending(self: &Arc<Self>, message: &TxJsonRpcMessage<RoleServer>) -> Owed {
        let answered = match message {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        let taken_over = answered.is_some_and(|id| lock(&self.open).remove(id).is_some());
        if !taken_over {
            self.owe();
        }
        Owed {
            backlog: self.clone(),
            answer: answered.is_some(),
        }
    }

    /// A message of the transport's own (a refusal, an answer) handed out to be written:
    /// counted anew.
    pub(super) fn sending_own(self: &Arc<Self>) -> Owed {
        self.owe();
        Owed {
            backlog: self.clone(),
            answer: true,
        }
    }

    /// An answer was written: after the end of input, the wait for the rest starts again.
    fn answered(&self) {
        if self.every_release.load(Ordering::Acquire) {
            *lock(&self.quiet_since) = Some(Instant::now());
        }
    }

    /// Returns once fewer than [`OWED`] are outstanding (cancelled requests past their grace
    /// are released only here and at the end: below the bound they cost nothing).
    pub(super) async fn room(&self) {
        if self.owed.load(Ordering::Acquire) < OWED {
            return;
        }
        loop {
            // Registered before the check, so the release that makes room cannot be missed.
            let room = self.room.notified();
            let next_grace = self.sweep();
            let owed = self.owed.load(Ordering::Acquire);
            if owed < OWED {
                return;
            }
            if !self.waiting.swap(true, Ordering::Relaxed) {
                tracing::debug!(
                    owed,
                    "the stdio client is not reading its answers; standard input waits"
                );
            }
            wait(room, next_grace).await;
        }
    }

    /// Waits until nothing is owed, giving up once `idle` passed since the end of input and
    /// since the last answer written: the client closed its input, and the answers already
    /// due are written before the session ends. The times are kept here, not in the future:
    /// rmcp drops and calls `receive` again at every message it handles, progress included,
    /// and a deadline kept in the future would start over each time. Returns whether
    /// everything owed was written (`false`: given up).
    pub(super) async fn drained(&self, idle: Duration) -> bool {
        self.every_release.store(true, Ordering::Release);
        lock(&self.quiet_since).get_or_insert_with(Instant::now);
        loop {
            let released = self.room.notified();
            let next_grace = self.sweep();
            let owed = self.owed.load(Ordering::Acquire);
            if owed == 0 {
                return true;
            }
            let quiet_since = lock(&self.quiet_since).unwrap_or_else(Instant::now);
            let deadline = quiet_since + idle;
            if Instant::now() >= deadline {
                tracing::info!(
                    owed,
                    "the stdio client closed its input; answers still owed after {idle:?} without one written are not waited for"
                );
                return false;
            }
            let until = next_grace.map_or(deadline, |grace| grace.min(deadline));
            wait(released, Some(until)).await;
        }
    }

    /// Counts the quiet time [`Backlog::drained`] waits from now (a new wait, after the calls
    /// still running were cut).
    pub(super) fn quiet_from_now(&self) {
        *lock(&self.quiet_since) = Some(Instant::now());
    }

    #[cfg(test)]
    pub(super) fn owed(&self) -> usize {
        self.owed.load(Ordering::Acquire)
    }
}

/// Waits for `notified`, or until `until` when given.
async fn wait(notified: tokio::sync::futures::Notified<'_>, until: Option<Instant>) {
    match until {
        Some(until) => {
            let _ = tokio::time::timeout_at(until.into(), notified).await;
        }
        None => notified.await,
    }
}

/// One message handed out to be written, released when dropped (written or not).
pub(super) struct Owed {
    backlog: Arc<Backlog>,
    /// An answer (or a refusal): its writing restarts the wait after the end of input.
    answer: bool,
}

impl Owed {
    /// The message was written (then released).
    pub(super) fn written(self) {
        if self.answer {
            self.backlog.answered();
        }
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        self.backlog.release();
    }
}

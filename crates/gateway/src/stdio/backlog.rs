//! Backpressure for the stdio client: what the gateway owes it, and when to stop reading.
//!
//! Invariant: [`Backlog::owed`] counts the requests received whose id is still open (neither
//! answered with the answer written or dropped, nor cancelled by the client) plus the other
//! messages handed out to be written and not yet written or dropped; each is counted once and
//! released once, so the count cannot drift. A receive waits only while the count is at
//! [`OWED`] and is woken by the release that takes it below. Requests a receive waits behind are
//! still released by their answers (a hung upstream call ends at its timeout).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::sync::Notify;

use crate::sync::lock;

/// The most requests in flight (read, their answers not yet written) plus other messages
/// waiting for standard output, before standard input is no longer read.
pub(crate) const OWED: usize = 1024;

/// What the gateway owes its stdio client (see the module doc).
#[derive(Default)]
pub(super) struct Backlog {
    owed: AtomicUsize,
    /// Ids of the requests received and not yet answered nor cancelled (rmcp answers one id in
    /// flight once: a repeated id is one entry).
    open: Mutex<HashSet<RequestId>>,
    /// Woken when `owed` falls below [`OWED`].
    room: Notify,
    /// A receive is waiting (logged once per wait).
    waiting: AtomicBool,
}

impl Backlog {
    fn owe(&self) {
        self.owed.fetch_add(1, Ordering::AcqRel);
    }

    fn release(&self) {
        if self.owed.fetch_sub(1, Ordering::AcqRel) == OWED {
            self.waiting.store(false, Ordering::Relaxed);
            self.room.notify_waiters();
        }
    }

    /// `message` was received: a request opens its id, a cancellation settles the one it names.
    pub(super) fn received(&self, message: &RxJsonRpcMessage<RoleServer>) {
        match message {
            JsonRpcMessage::Request(request) => {
                if lock(&self.open).insert(request.id.clone()) {
                    self.owe();
                }
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.settled(id);
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
    }

    /// The request `id` was answered (the answer written or dropped) or cancelled.
    fn settled(&self, id: &RequestId) {
        if lock(&self.open).remove(id) {
            self.release();
        }
    }

    /// `message` is handed out to be written: outstanding until the guard is dropped.
    pub(super) fn sending(self: &Arc<Self>, message: &TxJsonRpcMessage<RoleServer>) -> Outstanding {
        let answered = match message {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        match answered {
            Some(id) => Outstanding::Answer(self.clone(), id),
            None => {
                self.owe();
                Outstanding::Other(self.clone())
            }
        }
    }

    /// Returns once fewer than [`OWED`] are outstanding.
    pub(super) async fn room(&self) {
        loop {
            // Registered before the check, so the release that makes room cannot be missed.
            let room = self.room.notified();
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
            room.await;
        }
    }

    #[cfg(test)]
    pub(super) fn owed(&self) -> usize {
        self.owed.load(Ordering::Acquire)
    }
}

/// One message handed out to be written, released when dropped (written or not).
pub(super) enum Outstanding {
    Answer(Arc<Backlog>, RequestId),
    Other(Arc<Backlog>),
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        match self {
            Self::Answer(backlog, id) => backlog.settled(id),
            Self::Other(backlog) => backlog.release(),
        }
    }
}

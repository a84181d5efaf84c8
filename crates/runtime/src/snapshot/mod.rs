//! The catalog snapshot lifecycle (R16, R21): the one [`publisher::Publisher`] that writes
//! published snapshots under the revision gate, and the [`revisions::Revisions`] stream of every
//! revision.
//!
//! Architecture invariant: `snapshot` imports nothing else of this crate; connections and calls
//! import it.

pub(crate) mod publisher;
pub(crate) mod revisions;

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use arc_swap::ArcSwap;
use mcp_harness_catalog::Snapshot;
use tokio::sync::{broadcast, watch};

use publisher::{Flush, Published, Publisher, RevisionGate};
use revisions::Revisions;

/// The read side of the published view: the latest [`Published`] (lock-free), a watch of the
/// latest snapshot, the stream of every revision, and the publisher to flush.
///
/// Invariant: only the publisher writes `current`; everything here reads it.
pub(crate) struct Live {
    current: Arc<ArcSwap<Published>>,
    rx: watch::Receiver<Arc<Snapshot>>,
    /// Every published snapshot, in a bounded buffer (only resubscribed: the publisher holds
    /// the one sender, so the stream ends when it stops).
    revisions: broadcast::Receiver<Arc<Snapshot>>,
    publisher: Addr<Publisher>,
    gate: Arc<RevisionGate>,
}

impl Live {
    /// The read side of what `publisher` writes into `current` under `gate`.
    pub(crate) fn new(
        current: Arc<ArcSwap<Published>>,
        rx: watch::Receiver<Arc<Snapshot>>,
        revisions: broadcast::Receiver<Arc<Snapshot>>,
        publisher: Addr<Publisher>,
        gate: Arc<RevisionGate>,
    ) -> Self {
        Self {
            current,
            rx,
            revisions,
            publisher,
            gate,
        }
    }

    /// The latest published view.
    pub(crate) fn published(&self) -> Arc<Published> {
        self.current.load_full()
    }

    /// Whether `published` is still the latest view (nothing was published since).
    pub(crate) fn is_latest(&self, published: &Arc<Published>) -> bool {
        Arc::ptr_eq(&self.current.load(), published)
    }

    /// The latest published snapshot.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load().snapshot.clone()
    }

    /// A receiver of the latest snapshot.
    pub(crate) fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.rx.clone()
    }

    /// Every revision published from now on.
    pub(crate) fn revisions(&self) -> Revisions {
        Revisions::new(&self.revisions, self.current.clone())
    }

    /// Publishes pending updates now; the revision then current (0 once the publisher is gone).
    pub(crate) async fn flush(&self) -> u64 {
        self.publisher.send(Flush).await.unwrap_or(0)
    }

    /// Waits until a published snapshot satisfies `pred`, at most `timeout`; returns the latest.
    pub(crate) async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&Snapshot) -> bool,
    ) -> Arc<Snapshot> {
        let mut rx = self.rx.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| pred(s))).await;
        self.snapshot()
    }

    /// Whether connection `epoch` is still `server`'s current one.
    pub(crate) fn is_current_connection(&self, server: &str, epoch: u64) -> bool {
        self.current
            .load()
            .clients
            .get(server)
            .is_some_and(|c| c.epoch == epoch && !c.retired)
    }

    /// The read side of the revision gate: no publication lands while it is held (R24).
    pub(crate) async fn gate_read(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.gate.lock.read().await
    }
}

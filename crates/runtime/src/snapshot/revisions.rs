//! The revision stream ([`crate::Runtime::revisions`]): every published revision with its
//! changes, in order, for as long as the reader keeps up with a bounded buffer.
//!
//! Invariants: a reader never loses a change silently — each revision after the one it started
//! from reaches it either on its own ([`Revision::Next`], with the publisher's changes and
//! causes) or, when the reader fell more than the buffer behind, inside one
//! [`Revision::Skipped`] that names how many revisions it stands for and carries their combined
//! change (the net difference between the last snapshot delivered and the newest one: an entry
//! added and removed again within the skipped revisions cancels out, a state that changed and
//! came back is not reported, one removed and added back is neither added nor removed);
//! revisions arrive in increasing order, each at most once; the buffer is bounded, so a reader
//! that never reads costs at most that many snapshots (shared `Arc`s).

use std::collections::BTreeSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use mcp_harness_catalog::{Change, Kind, Snapshot, diff_names};
use tokio::sync::broadcast;

use crate::snapshot::publisher::Published;

/// Default number of revisions a reader may fall behind before they are combined.
pub(crate) const DEFAULT_REVISION_BUFFER: usize = 256;

/// One item of the revision stream.
#[derive(Debug, Clone)]
pub enum Revision {
    /// The next revision, with its own changes (`snapshot.changes`).
    Next(Arc<Snapshot>),
    /// The reader fell behind: the revisions after `from` up to `snapshot.revision` (`count` of
    /// them) were not delivered one by one; `changes` is their combined change.
    Skipped {
        /// The last revision delivered before (or the one the stream started from).
        from: u64,
        /// How many revisions this item stands for (`snapshot.revision - from`).
        count: u64,
        /// The net change from revision `from` to `snapshot`.
        changes: Vec<Change>,
        /// The newest snapshot.
        snapshot: Arc<Snapshot>,
    },
}

impl Revision {
    /// The snapshot this item brings the reader to.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        match self {
            Revision::Next(s) | Revision::Skipped { snapshot: s, .. } => s,
        }
    }

    /// The changes since the previous item.
    pub fn changes(&self) -> &[Change] {
        match self {
            Revision::Next(s) => &s.changes,
            Revision::Skipped { changes, .. } => changes,
        }
    }
}

/// A reader of every revision published after it was created.
pub struct Revisions {
    rx: broadcast::Receiver<Arc<Snapshot>>,
    /// The last snapshot delivered (or the one current when the stream started).
    last: Arc<Snapshot>,
    current: Arc<ArcSwap<Published>>,
}

impl Revisions {
    /// Subscribes before reading the current snapshot, so nothing published in between is
    /// missed (it is skipped as already seen instead).
    pub(crate) fn new(
        source: &broadcast::Receiver<Arc<Snapshot>>,
        current: Arc<ArcSwap<Published>>,
    ) -> Self {
        let rx = source.resubscribe();
        let last = current.load().snapshot.clone();
        Self { rx, last, current }
    }

    /// The revision the reader is at (the last one delivered).
    pub fn revision(&self) -> u64 {
        self.last.revision
    }

    /// The snapshot the reader is at (the last one delivered, or the one current when the stream
    /// started).
    pub fn current(&self) -> &Arc<Snapshot> {
        &self.last
    }

    /// The next item; `None` once the runtime has stopped and everything was delivered.
    pub async fn recv(&mut self) -> Option<Revision> {
        loop {
            match self.rx.recv().await {
                Ok(snapshot) => {
                    if let Some(item) = self.deliver(snapshot) {
                        return Some(item);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Some(item) = self.catch_up() {
                        return Some(item);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next item if one is ready now.
    pub fn try_recv(&mut self) -> Option<Revision> {
        loop {
            match self.rx.try_recv() {
                Ok(snapshot) => {
                    if let Some(item) = self.deliver(snapshot) {
                        return Some(item);
                    }
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    if let Some(item) = self.catch_up() {
                        return Some(item);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    fn deliver(&mut self, snapshot: Arc<Snapshot>) -> Option<Revision> {
        if snapshot.revision <= self.last.revision {
            return None; // already delivered, or inside a combined item
        }
        let item = if snapshot.revision == self.last.revision + 1 {
            Revision::Next(snapshot.clone())
        } else {
            // Cannot happen with one publisher (revisions are consecutive), but never hide it.
            self.combined(snapshot.clone())
        };
        self.last = snapshot;
        Some(item)
    }

    /// After the buffer overflowed: one item from the last delivered revision to the newest.
    /// (The publisher stores the newest snapshot before it broadcasts it, so it is at least as
    /// new as anything still buffered; those are skipped as already covered.)
    fn catch_up(&mut self) -> Option<Revision> {
        let newest = self.current.load().snapshot.clone();
        if newest.revision <= self.last.revision {
            return None;
        }
        let item = self.combined(newest.clone());
        self.last = newest;
        Some(item)
    }

    fn combined(&self, snapshot: Arc<Snapshot>) -> Revision {
        let from = self.last.revision;
        Revision::Skipped {
            from,
            count: snapshot.revision - from,
            changes: combined_changes(&self.last, &snapshot),
            snapshot,
        }
    }
}

/// The net change from `old` to `new`, in the publisher's terms: per server, a state change
/// (`kind: None`) when its state differs, and per kind the names added and removed (and the
/// tools whose definition changed).
pub(crate) fn combined_changes(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let cause = format!(
        "combined change of revisions {}..={} (the reader fell behind)",
        old.revision + 1,
        new.revision
    );
    let servers: BTreeSet<&String> = old.servers.keys().chain(new.servers.keys()).collect();
    let mut changes = Vec::new();
    for server in servers {
        let (before, after) = (old.servers.get(server), new.servers.get(server));
        let state = |s: Option<&mcp_harness_catalog::ServerStatus>| s.map(|s| s.state.clone());
        if state(before) != state(after) {
            let label = |s: Option<&mcp_harness_catalog::ServerStatus>| {
                s.map_or("absent", |s| s.state.label())
            };
            changes.push(Change {
                server: server.clone(),
                kind: None,
                cause: format!("{} → {}: {cause}", label(before), label(after)),
                added: Vec::new(),
                removed: Vec::new(),
                changed: Vec::new(),
            });
        }
        for kind in Kind::ALL {
            let names = |s: &Snapshot| {
                s.catalogs
                    .get(server)
                    .map(|c| c.names(kind))
                    .unwrap_or_default()
            };
            let (b, a) = (names(old), names(new));
            let changed = match (kind, old.catalogs.get(server), new.catalogs.get(server)) {
                (Kind::Tools, Some(before), Some(after)) => before.changed_tools(after),
                _ => Vec::new(),
            };
            if b != a || !changed.is_empty() {
                let (added, removed) = diff_names(&b, &a);
                changes.push(Change {
                    server: server.clone(),
                    kind: Some(kind),
                    cause: cause.clone(),
                    added,
                    removed,
                    changed,
                });
            }
        }
    }
    changes
}

//! The one publisher: the only writer of published snapshots.
//!
//! Invariants: every server's latest status and catalog arrive here as [`ServerUpdate`]s and
//! replace only that server's entries; at most one publication happens per batching window
//! (a lone update is published at once, a burst at the end of the window), except that the
//! update which leaves no server pending (startup or a reconnect has finished) is published at
//! once, so nobody waits out a window for a catalog that is complete; each publication builds a
//! whole new immutable [`Published`] with the next
//! revision and swaps it in atomically, so readers see the whole old or the whole new; a server
//! that is not connected contributes no entries and no client — except one a config edit is
//! replacing ([`Replacing`]): until its new connection is up, it fails, or its deadline passes,
//! it keeps its last entries and its old client *retired* (never current, so a call made then
//! waits for the new connection instead of using the closed one), and a restart that changes
//! nothing a client sees publishes no change of its entries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use arc_swap::ArcSwap;
use mcp_harness_catalog::{
    Change, Kind, ServerCatalog, ServerState, ServerStatus, Snapshot, SnapshotBuilder, diff_names,
};
use mcp_harness_transport::ClientPeer;
use tokio::sync::{broadcast, watch};

/// Default batching window (R16).
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(16);

/// The exact connection a published catalog came from; calls made from that catalog use it.
#[derive(Clone)]
pub(crate) struct ServerClient {
    pub peer: ClientPeer,
    /// Which connection of the server this is (increases on every reconnect).
    pub epoch: u64,
    /// The tool-list notifications of this connection the published tools cover; when its
    /// `wire` has counted more, a listing is on its way and a call waits for it.
    pub tools_covered: u64,
    pub tool_timeout: Duration,
    /// What the connection's raw messages said that rmcp's model drops (SEP-1686 task tools).
    pub wire: mcp_harness_transport::WireNotes,
    /// How the stdio server's process ended, for a call that failed because it did.
    pub exit: Option<mcp_harness_transport::ExitReport>,
    /// The connection was closed because a config edit replaced the server; kept only so calls
    /// bound to it wait for the new one. Never the current connection.
    pub retired: bool,
    /// Where a plain `tools/call` is sent from the caller's task (Streamable HTTP).
    pub express: Option<mcp_harness_transport::Express>,
    /// Held by a call from before it checks this connection is current until it ends, so a
    /// config edit's drain waits for it rather than closing the connection under it.
    pub sends: mcp_harness_transport::Sends,
}

/// A published runtime view: the snapshot plus the client of each connected server.
#[derive(Clone)]
pub(crate) struct Published {
    pub snapshot: Arc<Snapshot>,
    pub(crate) clients: BTreeMap<String, ServerClient>,
}

impl Published {
    pub(crate) fn empty() -> Self {
        Self {
            snapshot: Arc::new(Snapshot::empty()),
            clients: BTreeMap::new(),
        }
    }

    /// A config edit is replacing `server`: its published client is the retired one.
    pub(crate) fn replacing(&self, server: &str) -> bool {
        self.clients.get(server).is_some_and(|c| c.retired)
    }
}

/// A server's new status and, when connected, its complete current catalog and client.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ServerUpdate {
    pub status: ServerStatus,
    pub catalog: Option<Arc<ServerCatalog>>,
    pub client: Option<ServerClient>,
    /// What caused the update, shown by `watch`.
    pub cause: String,
}

/// A server left the configuration: its status and entries leave the next snapshot.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RemoveServer {
    pub name: String,
    pub cause: String,
}

/// A config edit is replacing `name`'s connection: it shows as pending from now on, and its
/// entries stay (see the module's invariants) until the new connection reports something
/// other than pending, or `limit` passes.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Replacing {
    pub name: String,
    pub limit: Duration,
}

/// The change of `server` from the state labelled `from` to `to`, and why.
fn state_change(server: &str, from: &str, to: &ServerState, cause: &str) -> Change {
    Change {
        server: server.to_string(),
        kind: None,
        cause: format!("{from} → {}: {cause}", to.label()),
        added: Vec::new(),
        removed: Vec::new(),
        changed: Vec::new(),
    }
}

/// Orders snapshot swaps against prepared calls: a call holds the read side from its
/// staleness check until its request is handed to the transport; the publisher holds the
/// write side while it swaps. A refresh therefore never lands between a call's check and its
/// send (R24).
#[derive(Debug, Default)]
pub(crate) struct RevisionGate {
    pub(crate) lock: tokio::sync::RwLock<()>,
}

/// Publish whatever is pending now instead of at the end of the window.
#[derive(Message)]
#[rtype(result = "u64")]
pub(crate) struct Flush;

struct Entry {
    status: ServerStatus,
    catalog: Option<Arc<ServerCatalog>>,
    client: Option<ServerClient>,
    /// Set while a config edit replaces the server: which replacement (its deadline checks it).
    replacing: Option<u64>,
}

/// The publisher actor.
pub(crate) struct Publisher {
    servers: BTreeMap<String, Entry>,
    pending: Vec<Change>,
    dirty: bool,
    revision: u64,
    window: Duration,
    flush: Option<SpawnHandle>,
    last_publish: Option<tokio::time::Instant>,
    gate: Arc<RevisionGate>,
    current: Arc<ArcSwap<Published>>,
    tx: watch::Sender<Arc<Snapshot>>,
    /// Every snapshot, for [`crate::Revisions`] readers (bounded; a lagging reader catches up).
    every: broadcast::Sender<Arc<Snapshot>>,
    /// Numbers the replacements ([`Replacing`]).
    replacements: u64,
}

impl Publisher {
    /// A publisher that knows every configured server from the start (`initial`: pending or
    /// disabled), so no snapshot ever omits a configured server.
    pub(crate) fn new(
        window: Duration,
        current: Arc<ArcSwap<Published>>,
        (tx, every): (
            watch::Sender<Arc<Snapshot>>,
            broadcast::Sender<Arc<Snapshot>>,
        ),
        gate: Arc<RevisionGate>,
        initial: Vec<ServerStatus>,
    ) -> Self {
        let pending = initial
            .iter()
            .map(|status| Change {
                server: status.name.clone(),
                kind: None,
                cause: match &status.state {
                    ServerState::Disabled => "disabled (`enabled: false` in the config)".into(),
                    ServerState::Untrusted { reason } => format!("untrusted: {reason}"),
                    _ => format!("configured ({})", status.state.label()),
                },
                added: Vec::new(),
                removed: Vec::new(),
                changed: Vec::new(),
            })
            .collect();
        let servers = initial
            .into_iter()
            .map(|status| {
                let entry = Entry {
                    status,
                    catalog: None,
                    client: None,
                    replacing: None,
                };
                (entry.status.name.clone(), entry)
            })
            .collect();
        Self {
            servers,
            pending,
            dirty: true,
            revision: 0,
            window,
            flush: None,
            last_publish: None,
            gate,
            current,
            tx,
            every,
            replacements: 0,
        }
    }

    fn apply(&mut self, update: ServerUpdate) {
        let name = update.status.name.clone();
        let connected = update.status.state == ServerState::Connected;
        let old = self.servers.get(&name);
        // A server being replaced keeps its entries while its new connection is pending.
        let replacing = old
            .and_then(|e| e.replacing)
            .filter(|_| update.status.state == ServerState::Pending);
        let (new_catalog, client) = match (connected, replacing) {
            (true, _) => (update.catalog, update.client),
            (false, Some(_)) => (
                old.and_then(|e| e.catalog.clone()),
                old.and_then(|e| e.client.clone()).map(|mut client| {
                    client.retired = true;
                    client
                }),
            ),
            (false, None) => (None, None),
        };
        let old_state = old.map(|e| e.status.state.clone());
        if old_state.as_ref() != Some(&update.status.state) {
            let from = old_state.as_ref().map(ServerState::label).unwrap_or("new");
            let change = state_change(&name, from, &update.status.state, &update.cause);
            self.pending.push(change);
        }
        for kind in Kind::ALL {
            let before = old
                .and_then(|e| e.catalog.as_ref())
                .map(|c| c.names(kind))
                .unwrap_or_default();
            let after = new_catalog
                .as_ref()
                .map(|c| c.names(kind))
                .unwrap_or_default();
            // A definition changed under its name: what makes a bound call stale.
            let changed = match (kind, old.and_then(|e| e.catalog.as_ref()), &new_catalog) {
                (Kind::Tools, Some(before), Some(after)) => before.changed_tools(after),
                _ => Vec::new(),
            };
            if before != after || !changed.is_empty() {
                let (added, removed) = diff_names(&before, &after);
                self.pending.push(Change {
                    server: name.clone(),
                    kind: Some(kind),
                    cause: update.cause.clone(),
                    added,
                    removed,
                    changed,
                });
            }
        }
        // Any status detail (errors, instructions) is worth a new revision too.
        self.dirty = true;
        self.servers.insert(
            name,
            Entry {
                status: update.status,
                catalog: new_catalog,
                client,
                replacing,
            },
        );
    }

    /// The replacement `replacement` of `name` did not connect within its limit: its kept
    /// entries leave (as they would have at once without a replacement).
    fn replacement_overdue(&mut self, name: &str, replacement: u64, ctx: &mut Context<Self>) {
        let Some(entry) = self.servers.get(name) else {
            return;
        };
        if entry.replacing != Some(replacement) {
            return;
        }
        let status = entry.status.clone();
        if let Some(entry) = self.servers.get_mut(name) {
            entry.replacing = None;
        }
        tracing::info!(server = %name, "the replaced server did not connect in time; its entries leave the catalog");
        self.apply(ServerUpdate {
            status,
            catalog: None,
            client: None,
            cause: "its replacement did not connect within `startupTimeoutSec`".into(),
        });
        self.schedule(ctx);
    }

    /// Publishes now if nothing was published within the last window (so a lone update is
    /// visible at once), else at the end of that window (so a burst becomes one publication).
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if self.flush.is_some() {
            return;
        }
        let since = self
            .last_publish
            .map(|t| t.elapsed())
            .unwrap_or(self.window);
        if since >= self.window {
            self.publish(ctx);
        } else {
            self.flush = Some(ctx.run_later(self.window - since, |act, ctx| {
                act.publish(ctx);
            }));
        }
    }

    /// Builds the next snapshot and swaps it in under the revision gate's write side, so no
    /// prepared call is between its staleness check and its send while the swap happens. The
    /// mailbox waits for the swap: updates are applied to the new revision, never lost.
    fn publish(&mut self, ctx: &mut Context<Self>) -> u64 {
        self.flush = None;
        if !self.dirty {
            return self.revision;
        }
        self.dirty = false;
        self.revision += 1;
        self.last_publish = Some(tokio::time::Instant::now());
        let mut builder = SnapshotBuilder::new();
        let mut clients = BTreeMap::new();
        for (name, entry) in &self.servers {
            match (&entry.replacing, &entry.catalog) {
                (Some(_), Some(catalog)) => {
                    builder.replaced_server(entry.status.clone(), catalog.clone())
                }
                _ => builder.server(entry.status.clone(), entry.catalog.clone()),
            };
            if let Some(client) = &entry.client {
                clients.insert(name.clone(), client.clone());
            }
        }
        for change in self.pending.drain(..) {
            builder.change(change);
        }
        let snapshot = Arc::new(builder.build(self.revision));
        tracing::debug!(
            revision = self.revision,
            changes = snapshot.changes.len(),
            "published catalog"
        );
        let published = Arc::new(Published {
            snapshot: snapshot.clone(),
            clients,
        });
        let (gate, current, tx) = (self.gate.clone(), self.current.clone(), self.tx.clone());
        let every = self.every.clone();
        ctx.wait(
            async move {
                let _swap = gate.lock.write().await;
                current.store(published);
                // No receivers is fine: watchers come and go. Stored before it is broadcast, so
                // a lagging revision reader that reads `current` is never behind the buffer.
                let _ = every.send(snapshot.clone());
                let _ = tx.send(snapshot);
            }
            .into_actor(self),
        );
        self.revision
    }
}

impl Actor for Publisher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Revision 1: every configured server, pending or disabled.
        self.publish(ctx);
    }
}

impl Handler<ServerUpdate> for Publisher {
    type Result = ();

    fn handle(&mut self, update: ServerUpdate, ctx: &mut Self::Context) {
        let settles = update.status.state.is_settled()
            && self
                .servers
                .get(&update.status.name)
                .is_some_and(|e| !e.status.state.is_settled());
        self.apply(update);
        if settles && self.servers.values().all(|e| e.status.state.is_settled()) {
            // The last pending server settled: the catalog is complete now; publish it now.
            if let Some(handle) = self.flush.take() {
                ctx.cancel_future(handle);
            }
            self.publish(ctx);
        } else {
            self.schedule(ctx);
        }
    }
}

impl Handler<Flush> for Publisher {
    type Result = ResponseActFuture<Self, u64>;

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) -> Self::Result {
        if let Some(handle) = self.flush.take() {
            ctx.cancel_future(handle);
        }
        // The swap runs as a waiting future; this answer is polled only after it completed.
        let revision = self.publish(ctx);
        Box::pin(actix::fut::ready(revision))
    }
}

impl Handler<Replacing> for Publisher {
    type Result = ();

    fn handle(&mut self, msg: Replacing, ctx: &mut Self::Context) {
        let Some(entry) = self.servers.get_mut(&msg.name) else {
            return;
        };
        if entry.catalog.is_none() {
            // Nothing listed to keep: the replacement is an ordinary start.
            return;
        }
        self.replacements += 1;
        let replacement = self.replacements;
        entry.replacing = Some(replacement);
        // The old connection is closing now: calls from here on wait for the new one.
        if let Some(client) = &mut entry.client {
            client.retired = true;
        }
        // And the server says so: pending (its new connection), not connected, while the old
        // one drains.
        if entry.status.state != ServerState::Pending {
            let cause = "a config edit replaces it (its calls in flight finish first)";
            let from = entry.status.state.label();
            let change = state_change(&msg.name, from, &ServerState::Pending, cause);
            self.pending.push(change);
            entry.status.state = ServerState::Pending;
            entry.status.since = std::time::SystemTime::now();
        }
        self.dirty = true;
        self.schedule(ctx);
        ctx.run_later(msg.limit, move |act, ctx| {
            act.replacement_overdue(&msg.name, replacement, ctx);
        });
    }
}

impl Handler<RemoveServer> for Publisher {
    type Result = ();

    fn handle(&mut self, msg: RemoveServer, ctx: &mut Self::Context) {
        if let Some(old) = self.servers.remove(&msg.name) {
            let removed = |kind| {
                old.catalog
                    .as_ref()
                    .map(|c| c.names(kind))
                    .unwrap_or_default()
            };
            self.pending.push(Change {
                server: msg.name.clone(),
                kind: None,
                cause: format!("removed: {}", msg.cause),
                added: Vec::new(),
                removed: Vec::new(),
                changed: Vec::new(),
            });
            for kind in Kind::ALL {
                let names = removed(kind);
                if !names.is_empty() {
                    self.pending.push(Change {
                        server: msg.name.clone(),
                        kind: Some(kind),
                        cause: format!("removed: {}", msg.cause),
                        added: Vec::new(),
                        removed: names,
                        changed: Vec::new(),
                    });
                }
            }
            self.dirty = true;
            self.schedule(ctx);
        }
    }
}

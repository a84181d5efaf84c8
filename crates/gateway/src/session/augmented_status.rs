//! SEP-1686 task status notifications (`notifications/tasks/status`, MCP 2025-11-25) of the
//! upstreams, forwarded to the client that owns the task: one task per gateway reads the
//! runtime's [`task_statuses`](mcp_harness_runtime::Runtime::task_statuses) and looks each up
//! in the bounded route table ([`crate::task_ids::Routes`]) that [`super::augmented`] fills
//! when it hands a SEP-1686 task out.
//!
//! Invariants:
//! - a notification goes to the one session the task was handed to (its GET stream, or the
//!   stdio client), under the sealed id that session holds: never the upstream id, never to
//!   another session (of the same profile or any other); one of a task with no route (not
//!   handed out through this gateway, handed out before its session ended, or forgotten past
//!   the cap) is dropped;
//! - a status that comes before its task is handed out (an upstream announces a task as it
//!   creates it, before its `CreateTaskResult` reaches the gateway) is held, bounded
//!   ([`EARLY_TASKS`] tasks, [`EARLY_PER_TASK`] statuses each, [`EARLY_FOR`]), and sent, in
//!   order and before any later status of the task, once the task is handed out;
//! - a terminal status is forwarded and then its route forgotten;
//! - each session's notifications go out in the order the runtime broadcast them, through an
//!   outbox of its own ([`Outboxes`]): a client slow to take them delays only itself; one
//!   notification waits at most [`SEND_DEADLINE`] for its client, and a client more than
//!   [`OUTBOX`] notifications behind misses the newer ones (said in the log).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mcp_harness_runtime::TaskStatusUpdate;
use mcp_harness_runtime::transport::TASK_STATUS_NOTIFICATION;
use rmcp::model::{CustomNotification, ServerNotification};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::augmented::translate_related;
use super::{Listener, Shared};

/// How long one status notification may take to queue for its client before it is skipped.
const SEND_DEADLINE: Duration = Duration::from_secs(5);

/// At most this many tasks have statuses held before they are handed out.
const EARLY_TASKS: usize = 64;
/// At most this many statuses are held per task (the latest kept).
const EARLY_PER_TASK: usize = 8;
/// A held status is dropped when its task is not handed out within this.
const EARLY_FOR: Duration = Duration::from_secs(30);
/// Notifications waiting for one client at most.
const OUTBOX: usize = 64;
/// How often an idle outbox checks that its session is still there.
const IDLE_CHECK: Duration = Duration::from_secs(30);

/// Per session, the notifications on their way to it, each outbox drained in order by a task
/// of its own that lives while the session does (checked every [`IDLE_CHECK`] when idle).
struct Outboxes<T> {
    boxes: HashMap<u64, mpsc::Sender<T>>,
    deadline: Duration,
    /// The map's size at which the outboxes of ended sessions are dropped next (twice the
    /// size after the last pruning: amortised, not a scan per notification).
    prune_at: usize,
}

/// The fewest outboxes kept before ended sessions' are dropped.
const PRUNE_FLOOR: usize = 64;

impl<T: Send + 'static> Outboxes<T> {
    fn new(deadline: Duration) -> Self {
        Self {
            boxes: HashMap::new(),
            deadline,
            prune_at: PRUNE_FLOOR,
        }
    }

    /// Queues `item` for `session`; `deliver` sends one item to it, `alive` says whether the
    /// session is still there (both used by the outbox's task when this starts it).
    fn post<D, F>(
        &mut self,
        session: u64,
        item: T,
        deliver: D,
        alive: impl Fn() -> bool + Send + 'static,
    ) where
        D: Fn(T) -> F + Send + 'static,
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        if self.boxes.len() >= self.prune_at {
            self.boxes.retain(|_, tx| !tx.is_closed());
            self.prune_at = (self.boxes.len() * 2).max(PRUNE_FLOOR);
        }
        let open = self.boxes.get(&session).filter(|tx| !tx.is_closed());
        let tx = match open {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = mpsc::channel(OUTBOX);
                tokio::spawn(drain(session, rx, deliver, alive, self.deadline));
                self.boxes.insert(session, tx.clone());
                tx
            }
        };
        if tx.try_send(item).is_err() {
            tracing::warn!(
                session,
                "client is {OUTBOX} task status notifications behind; this one skipped"
            );
        }
    }
}

/// Delivers `session`'s outbox in order until the session is gone or refuses one.
async fn drain<T, D, F>(
    session: u64,
    mut rx: mpsc::Receiver<T>,
    deliver: D,
    alive: impl Fn() -> bool,
    deadline: Duration,
) where
    D: Fn(T) -> F,
    F: Future<Output = Result<(), String>>,
{
    loop {
        let item = match tokio::time::timeout(IDLE_CHECK, rx.recv()).await {
            Ok(Some(item)) => item,
            Ok(None) => return,
            Err(_) if alive() => continue,
            Err(_) => return,
        };
        match tokio::time::timeout(deadline, deliver(item)).await {
            Ok(Ok(())) => tracing::debug!(session, "task status forwarded"),
            Ok(Err(error)) => {
                tracing::debug!(session, %error, "task status not forwarded; the session is gone");
                return;
            }
            Err(_) => tracing::warn!(
                session,
                "client did not take a task status notification within {deadline:?}; skipped"
            ),
        }
    }
}

/// Statuses of tasks not handed out yet, (server, upstream id) → (first held at, statuses).
#[derive(Default)]
struct Early(HashMap<(String, String), (Instant, Vec<TaskStatusUpdate>)>);

impl Early {
    /// Holds `update` until its task is handed out, within the bounds.
    fn hold(&mut self, update: TaskStatusUpdate) {
        let now = Instant::now();
        self.0
            .retain(|_, (since, _)| now.duration_since(*since) < EARLY_FOR);
        let key = (update.server.clone(), update.task_id.clone());
        if !self.0.contains_key(&key) && self.0.len() >= EARLY_TASKS {
            let oldest = self
                .0
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.0.remove(&oldest);
            }
        }
        let (_, held) = self.0.entry(key).or_insert_with(|| (now, Vec::new()));
        if held.len() >= EARLY_PER_TASK {
            held.remove(0);
        }
        held.push(update);
    }

    /// The held statuses of the tasks that have a route now, each task's in order.
    fn routed(&mut self, shared: &Shared) -> Vec<TaskStatusUpdate> {
        let keys: Vec<_> = self
            .0
            .keys()
            .filter(|(server, task)| {
                let now = crate::task_ids::generation(&shared.runtime.snapshot(), server);
                shared.task_ids.routes.has(server, task, now)
            })
            .cloned()
            .collect();
        keys.iter()
            .filter_map(|key| self.0.remove(key))
            .flat_map(|(_, held)| held)
            .collect()
    }
}

/// Starts forwarding the task status notifications of `shared`'s runtime; it ends with the
/// gateway (checked at each notification) or the runtime.
pub(crate) fn spawn(shared: &Arc<Shared>) {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let mut statuses = shared.runtime.task_statuses();
    // Its own handle: waiting on it does not keep the gateway alive.
    let inserted = shared.task_ids.routes.inserted.clone();
    tokio::spawn(async move {
        let mut early = Early::default();
        let mut outboxes = Outboxes::new(SEND_DEADLINE);
        loop {
            let update = tokio::select! {
                update = statuses.recv() => update,
                () = inserted.notified() => {
                    let Some(shared) = weak.upgrade() else { break };
                    for held in early.routed(&shared) {
                        send(&shared, &weak, &mut outboxes, held);
                    }
                    continue;
                }
            };
            let update = match update {
                Ok(update) => update,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "task status notifications were not forwarded: the gateway fell behind"
                    );
                    continue;
                }
                Err(RecvError::Closed) => break,
            };
            let Some(shared) = weak.upgrade() else { break };
            let now = crate::task_ids::generation(&shared.runtime.snapshot(), &update.server);
            if !shared
                .task_ids
                .routes
                .has(&update.server, &update.task_id, now)
            {
                tracing::trace!(server = %update.server, "task status before its task was handed out; held");
                early.hold(update);
                continue;
            }
            for held in early.routed(&shared) {
                send(&shared, &weak, &mut outboxes, held);
            }
            send(&shared, &weak, &mut outboxes, update);
        }
    });
}

/// Queues `update` for the session that owns its task, if any.
fn send(
    shared: &Shared,
    weak: &Weak<Shared>,
    outboxes: &mut Outboxes<ServerNotification>,
    update: TaskStatusUpdate,
) {
    let terminal = update.is_terminal();
    let now = crate::task_ids::generation(&shared.runtime.snapshot(), &update.server);
    let Some(route) = shared
        .task_ids
        .routes
        .route(&update.server, &update.task_id, terminal, now)
    else {
        tracing::trace!(server = %update.server, "task status of a task not handed out here; dropped");
        return;
    };
    let listener = shared
        .sessions
        .get(&route.session)
        .map(|registered| registered.listener.clone());
    let Some(Listener::Peer(peer)) = listener else {
        // The session is gone (its routes go with it) or listens otherwise (2026-07-28, which
        // has no SEP-1686 tasks).
        shared.task_ids.routes.forget_session(route.session);
        return;
    };
    let mut params = update.params;
    params.insert("taskId".into(), Value::from(route.id.as_str()));
    if let Some(meta) = params.get_mut("_meta") {
        translate_related(meta, &update.task_id, &route.id);
    }
    let notification = ServerNotification::CustomNotification(CustomNotification::new(
        TASK_STATUS_NOTIFICATION,
        Some(Value::Object(params)),
    ));
    let session = route.session;
    let weak = weak.clone();
    let alive = move || {
        weak.upgrade()
            .is_some_and(|shared| shared.sessions.contains_key(&session))
    };
    let deliver = move |notification| {
        let peer = peer.clone();
        async move {
            peer.send_notification(notification)
                .await
                .map_err(|e| e.to_string())
        }
    };
    outboxes.post(session, notification, deliver, alive);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that never takes its notifications delays nobody else, and each session's
    /// notifications arrive in order.
    #[tokio::test]
    async fn a_stuck_session_delays_only_itself() {
        let (got, mut seen) = mpsc::unbounded_channel::<(u64, u32)>();
        let mut outboxes = Outboxes::new(Duration::from_secs(60));
        for n in 0..3 {
            // Session 1 never takes one; session 2 takes each at once.
            outboxes.post(
                1,
                n,
                |_| std::future::pending::<Result<(), String>>(),
                || true,
            );
            let got = got.clone();
            outboxes.post(
                2,
                n,
                move |n| {
                    let got = got.clone();
                    async move { got.send((2, n)).map_err(|e| e.to_string()) }
                },
                || true,
            );
        }
        let mut delivered = Vec::new();
        for _ in 0..3 {
            let next = tokio::time::timeout(Duration::from_secs(5), seen.recv()).await;
            delivered.push(
                next.expect("delivered while session 1 is stuck")
                    .expect("open"),
            );
        }
        assert_eq!(delivered, [(2, 0), (2, 1), (2, 2)]);
    }

    /// A session more than the outbox behind loses the newer notifications, not memory.
    #[tokio::test]
    async fn an_outbox_is_bounded() {
        let mut outboxes = Outboxes::new(Duration::from_secs(60));
        for n in 0..(OUTBOX * 3) {
            outboxes.post(
                1,
                n,
                |_| std::future::pending::<Result<(), String>>(),
                || true,
            );
        }
        let tx = outboxes.boxes.get(&1).expect("an outbox");
        assert_eq!(tx.capacity(), 0, "full at {OUTBOX}, not growing");
    }
}

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
//! - notifications are forwarded one at a time, in the order the runtime broadcast them, each
//!   bounded by [`SEND_DEADLINE`]: a client that does not take one within it misses it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mcp_harness_runtime::TaskStatusUpdate;
use mcp_harness_runtime::transport::TASK_STATUS_NOTIFICATION;
use rmcp::model::{CustomNotification, ServerNotification};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

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
            .filter(|(server, task)| shared.task_ids.routes.has(server, task))
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
        loop {
            let update = tokio::select! {
                update = statuses.recv() => update,
                () = inserted.notified() => {
                    let Some(shared) = weak.upgrade() else { break };
                    for held in early.routed(&shared) {
                        send(&shared, held).await;
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
            if !shared.task_ids.routes.has(&update.server, &update.task_id) {
                tracing::trace!(server = %update.server, "task status before its task was handed out; held");
                early.hold(update);
                continue;
            }
            for held in early.routed(&shared) {
                send(&shared, held).await;
            }
            send(&shared, update).await;
        }
    });
}

/// Sends `update` to the session that owns its task, if any.
async fn send(shared: &Shared, update: TaskStatusUpdate) {
    let terminal = update.is_terminal();
    let Some(route) = shared
        .task_ids
        .routes
        .route(&update.server, &update.task_id, terminal)
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
    match tokio::time::timeout(SEND_DEADLINE, peer.send_notification(notification)).await {
        Ok(Ok(())) => {
            tracing::debug!(session = route.session, status = %update.status, "task status forwarded");
        }
        Ok(Err(error)) => {
            tracing::debug!(session = route.session, %error, "task status not forwarded");
        }
        Err(_) => tracing::warn!(
            session = route.session,
            "client did not take a task status notification within 5 s; skipped"
        ),
    }
}

//! Progress notifications of in-flight requests, routed by (server, connection epoch, progress
//! token) straight from the session to the caller, with no actor hop.
//!
//! Invariants:
//! - a route exists from just after its request is handed to the transport until its result
//!   is in (see `PreparedCall::call_with`), which is after every progress notification sent
//!   before that result was delivered (the transport keeps that order: `ordered.rs`);
//! - progress that arrives before its route exists (a fast server can answer before the caller
//!   registered) is held, at most [`EARLY_KEEP`] notifications for at most [`EARLY_TTL`], and
//!   handed over when the route is registered;
//! - each route forwards only increasing `progress` values, so a notification handled out of
//!   order (rmcp handles each on a task of its own) is dropped instead of moving the caller's
//!   progress backwards;
//! - the epoch keeps a new connection's reused tokens apart from an old connection's late
//!   progress.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};

/// The progress routes of every server's connections (see the module's invariants).
#[derive(Default)]
pub(crate) struct ProgressRoutes {
    state: std::sync::Mutex<RoutesState>,
}

/// Most progress notifications held for requests whose route does not exist yet.
pub(crate) const EARLY_KEEP: usize = 64;
/// How long such a notification is held.
pub(crate) const EARLY_TTL: Duration = Duration::from_secs(5);

type RouteKey = (String, u64, String);

#[derive(Default)]
struct RoutesState {
    routes: HashMap<RouteKey, Route>,
    early: VecDeque<(RouteKey, std::time::Instant, ProgressNotificationParam)>,
}

struct Route {
    tx: tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>,
    last: Option<f64>,
}

impl Route {
    fn forward(&mut self, server: &str, progress: ProgressNotificationParam) -> bool {
        if self.last.is_some_and(|last| progress.progress <= last) {
            tracing::trace!(
                server,
                progress = progress.progress,
                "progress out of order, dropped"
            );
            return false;
        }
        self.last = Some(progress.progress);
        self.tx.send(progress).is_ok()
    }
}

impl ProgressRoutes {
    fn lock(&self) -> std::sync::MutexGuard<'_, RoutesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes progress for `token` of `server`'s connection `epoch` to the returned receiver
    /// until the guard drops; progress that arrived for it already is delivered first.
    #[cfg(test)]
    pub(crate) fn register(
        self: &Arc<Self>,
        server: &str,
        epoch: u64,
        token: &ProgressToken,
    ) -> (
        ProgressRoute,
        tokio::sync::mpsc::UnboundedReceiver<ProgressNotificationParam>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (self.register_sender(server, epoch, token, tx), rx)
    }

    /// Routes progress for `token` of `server`'s connection `epoch` to `tx` until the guard
    /// drops; progress that arrived for it already is sent first.
    pub(crate) fn register_sender(
        self: &Arc<Self>,
        server: &str,
        epoch: u64,
        token: &ProgressToken,
        tx: tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>,
    ) -> ProgressRoute {
        let key = (server.to_string(), epoch, token_key(token));
        let mut route = Route { tx, last: None };
        let mut state = self.lock();
        let now = std::time::Instant::now();
        state
            .early
            .retain(|(_, at, _)| now.duration_since(*at) < EARLY_TTL);
        let mut kept = VecDeque::with_capacity(state.early.len());
        for (k, at, progress) in state.early.drain(..) {
            if k == key {
                route.forward(server, progress);
            } else {
                kept.push_back((k, at, progress));
            }
        }
        state.early = kept;
        state.routes.insert(key.clone(), route);
        drop(state);
        ProgressRoute {
            routes: self.clone(),
            key,
        }
    }

    /// Delivers `progress` of `server`'s connection `epoch` to its request's caller; false when
    /// it does not advance the progress already delivered, or when no route exists (it is then
    /// held for a route registered soon, see the type's invariants).
    pub(crate) fn deliver(
        &self,
        server: &str,
        epoch: u64,
        progress: ProgressNotificationParam,
    ) -> bool {
        let key = (
            server.to_string(),
            epoch,
            token_key(&progress.progress_token),
        );
        let mut state = self.lock();
        if let Some(route) = state.routes.get_mut(&key) {
            return route.forward(server, progress);
        }
        if state.early.len() >= EARLY_KEEP {
            state.early.pop_front();
        }
        state
            .early
            .push_back((key, std::time::Instant::now(), progress));
        false
    }
}

fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

/// Removes its route when dropped.
pub(crate) struct ProgressRoute {
    routes: Arc<ProgressRoutes>,
    key: RouteKey,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().routes.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(token: u32, value: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(rmcp::model::NumberOrString::Number(token.into())),
            value,
        )
    }

    #[test]
    fn progress_before_its_route_is_held_and_handed_over_in_order() {
        let routes = Arc::new(ProgressRoutes::default());
        // Arrives before the caller registered (a fast server), for this connection and an
        // old one that used the same token.
        assert!(!routes.deliver("s", 2, progress(7, 1.0)));
        assert!(!routes.deliver("s", 1, progress(7, 5.0)));
        assert!(!routes.deliver("s", 2, progress(7, 2.0)));
        let (route, mut rx) = routes.register("s", 2, &progress(7, 0.0).progress_token);
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(1.0));
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(2.0));
        assert!(
            rx.try_recv().is_err(),
            "the old connection's progress is not ours"
        );
        // Routed now; a value that does not advance is dropped.
        assert!(routes.deliver("s", 2, progress(7, 3.0)));
        assert!(!routes.deliver("s", 2, progress(7, 2.5)));
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(3.0));
        assert!(rx.try_recv().is_err());
        drop(route);
        assert!(
            !routes.deliver("s", 2, progress(7, 4.0)),
            "no route after the guard"
        );
    }

    #[test]
    fn progress_nobody_claims_is_bounded() {
        let routes = Arc::new(ProgressRoutes::default());
        for i in 0..(EARLY_KEEP as u32 * 3) {
            routes.deliver("s", 1, progress(i, 1.0));
        }
        assert_eq!(routes.lock().early.len(), EARLY_KEEP);
        // The newest are kept.
        let newest = EARLY_KEEP as u32 * 3 - 1;
        let (_route, mut rx) = routes.register("s", 1, &progress(newest, 0.0).progress_token);
        assert!(rx.try_recv().is_ok());
        let (_route, mut rx) = routes.register("s", 1, &progress(0, 0.0).progress_token);
        assert!(rx.try_recv().is_err());
    }
}

//! The bound on open 2026-07-28 `subscriptions/listen` streams, so they cannot take every
//! connection: a listen holds its connection for as long as the client is interested, and
//! without a bound of their own, one client opening listens and reading nothing could use all
//! of `--max-connections` and leave every other request a 503.
//!
//! Invariants:
//! - at most [`ListenLimit::max`] listen streams are open on this replica (half of
//!   `--max-connections`, so ordinary requests always find a connection), and at most a
//!   profile's `maxSessions` of that profile's; one more is answered 429 with `Retry-After`
//!   before rmcp sees it, naming what to change;
//! - a stream's place is held from its admission until its response body ends or is dropped
//!   (the client went away, or a write stalled), and given back exactly once;
//! - a POST is a listen when its SEP-2243 `Mcp-Method` header says so (rmcp refuses a header
//!   that does not match the body, so a lying header only costs its own short request a place).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::Request;
use axum::http::Method;

use crate::auth::Identity;

/// Open listen streams, in all and per profile.
pub(super) struct ListenLimit {
    max: usize,
    open: AtomicUsize,
    by_profile: dashmap::DashMap<String, usize>,
}

/// One admitted listen stream's place, given back when dropped.
pub(super) struct Listening {
    limit: Arc<ListenLimit>,
    profile: Option<String>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.limit.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(profile) = &self.profile
            && let Some(mut open) = self.limit.by_profile.get_mut(profile)
        {
            *open = open.saturating_sub(1);
        }
    }
}

impl ListenLimit {
    /// Listens may use half of `max_connections` (at least one).
    pub(super) fn new(max_connections: usize) -> Self {
        Self {
            max: (max_connections / 2).max(1),
            open: AtomicUsize::new(0),
            by_profile: dashmap::DashMap::new(),
        }
    }

    /// `request`'s place when it is a listen (`Ok(None)`: not a listen), or what the 429
    /// refusing it says.
    pub(super) fn admit(self: &Arc<Self>, request: &Request) -> Result<Option<Listening>, String> {
        if !is_listen(request) {
            return Ok(None);
        }
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max).then_some(open + 1)
            });
        if taken.is_err() {
            tracing::info!(
                max = self.max,
                "a listen stream over the gateway's limit was refused"
            );
            return Err(format!(
                "the gateway has {} open subscriptions/listen streams, its limit (half of \
                 `serve --max-connections`); close one or retry later",
                self.max
            ));
        }
        let mut listening = Listening {
            limit: self.clone(),
            profile: None,
        };
        let Some(Identity(profile)) = request.extensions().get::<Identity>() else {
            return Ok(Some(listening));
        };
        let Some(max) = profile.max_sessions else {
            return Ok(Some(listening));
        };
        let name = &profile.name;
        {
            let mut open = self.by_profile.entry(name.clone()).or_default();
            if *open >= max {
                drop(open);
                tracing::info!(client = %name, max, "a listen stream over the client's own limit was refused");
                return Err(format!(
                    "client `{name}` has {max} open subscriptions/listen streams, its limit \
                     (`gateway.clients.{name}.maxSessions`); close one or retry later"
                ));
            }
            *open += 1;
        }
        listening.profile = Some(name.clone());
        Ok(Some(listening))
    }
}

/// Whether `request` is a 2026-07-28 `subscriptions/listen` POST to `/mcp`.
fn is_listen(request: &Request) -> bool {
    request.method() == Method::POST
        && request.uri().path() == "/mcp"
        && request
            .headers()
            .get("mcp-method")
            .is_some_and(|method| method.as_bytes() == b"subscriptions/listen")
}

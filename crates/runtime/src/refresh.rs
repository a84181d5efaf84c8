//! Per-kind refresh bookkeeping of one server connection: single flight with a trailing
//! refetch, and tickets.
//!
//! Invariants:
//! - at most one listing per kind is in flight; a notification that arrives meanwhile schedules
//!   exactly one more listing, started after the current one completes, so the last listing
//!   always starts after the last notification (the final state is never missed) and a flood of
//!   N notifications costs at most two listings in flight over its whole length per kind;
//! - a completed listing is applied only if its ticket is newer than the last applied one
//!   (the newest fetch wins, whatever order completions arrive in).

use std::collections::HashMap;

use mcp_harness_catalog::Kind;

#[derive(Debug, Default, Clone, Copy)]
struct KindState {
    issued: u64,
    applied: u64,
    in_flight: bool,
    again: bool,
}

/// Refresh state of every kind of one connection.
#[derive(Debug, Default)]
pub struct Refreshes {
    kinds: HashMap<Kind, KindState>,
}

/// What to do when a listing completes.
#[derive(Debug, PartialEq, Eq)]
pub struct Completion {
    /// Apply this listing (it is the newest).
    pub apply: bool,
    /// Start another listing with this ticket (a notification came in meanwhile).
    pub next: Option<u64>,
}

impl Refreshes {
    /// A listing of `kind` is wanted: returns the ticket to start now, or `None` when one is in
    /// flight (then one more is scheduled for when it completes).
    pub fn request(&mut self, kind: Kind) -> Option<u64> {
        let state = self.kinds.entry(kind).or_default();
        if state.in_flight {
            state.again = true;
            return None;
        }
        state.in_flight = true;
        state.issued += 1;
        Some(state.issued)
    }

    /// The listing with `ticket` completed (successfully or not).
    pub fn complete(&mut self, kind: Kind, ticket: u64) -> Completion {
        let state = self.kinds.entry(kind).or_default();
        let apply = ticket > state.applied;
        if apply {
            state.applied = ticket;
        }
        let next = if state.again {
            state.again = false;
            state.issued += 1;
            Some(state.issued)
        } else {
            state.in_flight = false;
            None
        };
        Completion { apply, next }
    }

    /// Whether a listing of `kind` is in flight.
    pub fn in_flight(&self, kind: Kind) -> bool {
        self.kinds.get(&kind).is_some_and(|s| s.in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_flight_with_one_trailing_listing() {
        let mut r = Refreshes::default();
        let t1 = r.request(Kind::Tools).expect("first starts");
        for _ in 0..1000 {
            assert_eq!(r.request(Kind::Tools), None, "coalesced while in flight");
        }
        let c = r.complete(Kind::Tools, t1);
        assert!(c.apply);
        let t2 = c.next.expect("one trailing listing");
        assert!(t2 > t1);
        assert_eq!(
            r.complete(Kind::Tools, t2),
            Completion {
                apply: true,
                next: None
            }
        );
        assert!(!r.in_flight(Kind::Tools));
        // Other kinds are independent.
        assert!(r.request(Kind::Prompts).is_some());
        assert!(r.request(Kind::Tools).is_some());
    }

    #[test]
    fn stale_completions_are_not_applied() {
        let mut r = Refreshes::default();
        let t1 = r.request(Kind::Resources).expect("start");
        r.request(Kind::Resources);
        let t2 = r.complete(Kind::Resources, t1).next.expect("trailing");
        assert!(r.complete(Kind::Resources, t2).apply);
        // A completion carrying an old ticket (e.g. delivered late) is ignored.
        assert!(!r.complete(Kind::Resources, t1).apply);
    }

    /// Random interleavings of notifications and completions: the last applied listing is
    /// always one that started after the last notification.
    #[test]
    fn the_last_notification_is_always_covered() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..500 {
            let mut r = Refreshes::default();
            let mut running: Vec<u64> = Vec::new();
            let mut last_notification_at = 0u64;
            let mut applied_start = 0u64;
            let mut clock = 0u64;
            let mut starts: HashMap<u64, u64> = HashMap::new();
            for _ in 0..(rand() % 50 + 1) {
                clock += 1;
                if rand() % 2 == 0 || running.is_empty() {
                    last_notification_at = clock;
                    if let Some(t) = r.request(Kind::Tools) {
                        starts.insert(t, clock);
                        running.push(t);
                    }
                } else {
                    let t = running.remove(0);
                    let c = r.complete(Kind::Tools, t);
                    if c.apply {
                        applied_start = starts[&t];
                    }
                    if let Some(n) = c.next {
                        starts.insert(n, clock);
                        running.push(n);
                    }
                }
            }
            while let Some(t) = running.pop() {
                clock += 1;
                let c = r.complete(Kind::Tools, t);
                if c.apply {
                    applied_start = starts[&t];
                }
                if let Some(n) = c.next {
                    starts.insert(n, clock);
                    running.push(n);
                }
            }
            assert!(
                applied_start >= last_notification_at,
                "the final listing predates the last notification"
            );
        }
    }
}

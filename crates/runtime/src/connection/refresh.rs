//! Per-kind refresh bookkeeping of one server connection: single flight with a trailing
//! refetch, a least time between listings, and tickets.
//!
//! Invariants:
//! - at most one listing per kind is in flight or waiting to start; a notification that arrives
//!   while one runs schedules exactly one more, started after the current one completes, and
//!   one that arrives while a listing waits to start is covered by it — so the last listing
//!   always starts after the last notification (the final state is never missed);
//! - two listings of one kind start at least `window` apart (a listing due sooner waits for the
//!   end of the window), so a flood of notifications costs at most one listing per window per
//!   kind, however long it lasts;
//! - a completed listing is applied only if its ticket is newer than the last applied one
//!   (the newest fetch wins, whatever order completions arrive in).

use std::collections::HashMap;
use std::time::Duration;

use mcp_harness_catalog::Kind;
use tokio::time::Instant;

/// Default least time between two listings of one kind caused by notifications.
pub(crate) const DEFAULT_RELIST_WINDOW: Duration = Duration::from_millis(250);

/// Where a kind's listing is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// None in flight.
    #[default]
    Idle,
    /// One is due, waiting for the end of the window; it covers every notification until then.
    Waiting,
    /// One is in flight.
    Running,
}

#[derive(Debug, Default, Clone, Copy)]
struct KindState {
    issued: u64,
    applied: u64,
    phase: Phase,
    /// A notification came in while a listing ran: one more follows it.
    again: bool,
    last_start: Option<Instant>,
}

/// Refresh state of every kind of one connection.
#[derive(Debug, Default)]
pub(crate) struct Refreshes {
    kinds: HashMap<Kind, KindState>,
    window: Duration,
}

/// A listing to start: its ticket, and when (`at` is now or later, the end of the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    pub ticket: u64,
    pub at: Instant,
}

/// What to do when a listing completes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    /// Apply this listing (it is the newest).
    pub apply: bool,
    /// Start another listing (a notification came in meanwhile).
    pub next: Option<Start>,
}

impl Refreshes {
    /// Bookkeeping whose listings of one kind start at least `window` apart.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            kinds: HashMap::new(),
            window,
        }
    }

    fn due(&self, state: &KindState, now: Instant) -> Instant {
        state
            .last_start
            .map_or(now, |last| (last + self.window).max(now))
    }

    /// A listing of `kind` is wanted at `now`: the listing to start (call [`Refreshes::started`]
    /// when it does), or `None` when one in flight or waiting already takes care of it.
    pub(crate) fn request(&mut self, kind: Kind, now: Instant) -> Option<Start> {
        let mut state = self.kinds.get(&kind).copied().unwrap_or_default();
        let start = match state.phase {
            Phase::Running => {
                state.again = true;
                None
            }
            Phase::Waiting => None,
            Phase::Idle => {
                state.issued += 1;
                state.phase = Phase::Waiting;
                Some(Start {
                    ticket: state.issued,
                    at: self.due(&state, now),
                })
            }
        };
        self.kinds.insert(kind, state);
        start
    }

    /// The listing with `ticket` starts now; `false` when it is no longer wanted (stale).
    pub(crate) fn started(&mut self, kind: Kind, ticket: u64, now: Instant) -> bool {
        let Some(state) = self.kinds.get_mut(&kind) else {
            return false;
        };
        if state.phase != Phase::Waiting || state.issued != ticket {
            return false;
        }
        state.phase = Phase::Running;
        state.last_start = Some(now);
        true
    }

    /// The listing with `ticket` completed (successfully or not) at `now`.
    pub(crate) fn complete(&mut self, kind: Kind, ticket: u64, now: Instant) -> Completion {
        let mut state = self.kinds.get(&kind).copied().unwrap_or_default();
        let apply = ticket > state.applied;
        if apply {
            state.applied = ticket;
        }
        let next = if state.again {
            state.again = false;
            state.issued += 1;
            state.phase = Phase::Waiting;
            Some(Start {
                ticket: state.issued,
                at: self.due(&state, now),
            })
        } else {
            state.phase = Phase::Idle;
            None
        };
        self.kinds.insert(kind, state);
        Completion { apply, next }
    }

    #[cfg(test)]
    /// Whether a listing of `kind` is in flight or waiting to start.
    pub(crate) fn in_flight(&self, kind: Kind) -> bool {
        self.kinds
            .get(&kind)
            .is_some_and(|s| s.phase != Phase::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(250);

    /// Requests and starts a listing at `now`, asserting it may start at once.
    fn start_now(r: &mut Refreshes, kind: Kind, now: Instant) -> u64 {
        let s = r.request(kind, now).expect("starts");
        assert_eq!(s.at, now, "due at once");
        assert!(r.started(kind, s.ticket, now));
        s.ticket
    }

    #[test]
    fn single_flight_with_one_trailing_listing() {
        let now = Instant::now();
        let mut r = Refreshes::new(Duration::ZERO);
        let t1 = start_now(&mut r, Kind::Tools, now);
        for _ in 0..1000 {
            assert_eq!(
                r.request(Kind::Tools, now),
                None,
                "coalesced while in flight"
            );
        }
        let c = r.complete(Kind::Tools, t1, now);
        assert!(c.apply);
        let t2 = c.next.expect("one trailing listing");
        assert!(t2.ticket > t1);
        assert!(r.started(Kind::Tools, t2.ticket, now));
        assert_eq!(
            r.complete(Kind::Tools, t2.ticket, now),
            Completion {
                apply: true,
                next: None
            }
        );
        assert!(!r.in_flight(Kind::Tools));
        // Other kinds are independent.
        assert!(r.request(Kind::Prompts, now).is_some());
        assert!(r.request(Kind::Tools, now).is_some());
    }

    #[test]
    fn stale_completions_are_not_applied() {
        let now = Instant::now();
        let mut r = Refreshes::new(Duration::ZERO);
        let t1 = start_now(&mut r, Kind::Resources, now);
        r.request(Kind::Resources, now);
        let t2 = r.complete(Kind::Resources, t1, now).next.expect("trailing");
        assert!(r.started(Kind::Resources, t2.ticket, now));
        assert!(r.complete(Kind::Resources, t2.ticket, now).apply);
        // A completion carrying an old ticket (e.g. delivered late) is ignored.
        assert!(!r.complete(Kind::Resources, t1, now).apply);
        // A start for a ticket no longer wanted does not start.
        assert!(!r.started(Kind::Resources, t1, now));
    }

    #[test]
    fn listings_start_a_window_apart_and_the_waiting_one_covers_later_notifications() {
        let t0 = Instant::now();
        let mut r = Refreshes::new(WINDOW);
        let t1 = start_now(&mut r, Kind::Tools, t0);
        // A notification 10 ms later: one more after this listing, not before the window ends.
        assert_eq!(r.request(Kind::Tools, t0 + Duration::from_millis(10)), None);
        let next = r
            .complete(Kind::Tools, t1, t0 + Duration::from_millis(20))
            .next
            .expect("trailing");
        assert_eq!(next.at, t0 + WINDOW, "waits for the end of the window");
        // Notifications while it waits are covered by it: nothing more is scheduled.
        for ms in 30..240 {
            assert_eq!(r.request(Kind::Tools, t0 + Duration::from_millis(ms)), None);
        }
        assert!(r.started(Kind::Tools, next.ticket, next.at));
        let done = r.complete(Kind::Tools, next.ticket, next.at + Duration::from_millis(5));
        assert_eq!(done.next, None, "nothing came in while it ran");
        // Idle, but within the window of the last start: due at its end.
        let later = r
            .request(Kind::Tools, next.at + Duration::from_millis(100))
            .expect("one more");
        assert_eq!(later.at, next.at + WINDOW);
        // Idle past the window: due at once.
        let mut r = Refreshes::new(WINDOW);
        let t = start_now(&mut r, Kind::Prompts, t0);
        r.complete(Kind::Prompts, t, t0);
        let s = r.request(Kind::Prompts, t0 + WINDOW * 3).expect("starts");
        assert_eq!(s.at, t0 + WINDOW * 3);
    }

    /// Random interleavings of notifications, starts and completions with random times: the
    /// last applied listing always started after the last notification, and no two listings
    /// started less than a window apart.
    #[test]
    fn the_last_notification_is_always_covered_and_starts_are_spaced() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let base = Instant::now();
        for window_ms in [0u64, 5, 50] {
            let window = Duration::from_millis(window_ms);
            for _ in 0..300 {
                let mut r = Refreshes::new(window);
                let mut clock = base;
                let mut waiting: Option<Start> = None;
                let mut running: Option<(u64, Instant)> = None;
                let mut last_notification = base;
                let mut applied_start: Option<Instant> = None;
                let mut starts: Vec<Instant> = Vec::new();
                let steps = rand() % 60 + 1;
                let mut step = 0;
                while step < steps || waiting.is_some() || running.is_some() {
                    step += 1;
                    clock += Duration::from_millis(rand() % 20);
                    let choice = if step < steps {
                        rand() % 3
                    } else {
                        1 + rand() % 2
                    };
                    match choice {
                        0 => {
                            last_notification = clock;
                            if let Some(s) = r.request(Kind::Tools, clock) {
                                assert!(waiting.is_none() && running.is_none());
                                waiting = Some(s);
                            }
                        }
                        1 => {
                            if let Some(s) = waiting.filter(|s| s.at <= clock) {
                                assert!(r.started(Kind::Tools, s.ticket, clock));
                                starts.push(clock);
                                waiting = None;
                                running = Some((s.ticket, clock));
                            }
                        }
                        _ => {
                            if let Some((t, started_at)) = running.take() {
                                let c = r.complete(Kind::Tools, t, clock);
                                if c.apply {
                                    applied_start = Some(started_at);
                                }
                                waiting = c.next;
                            }
                        }
                    }
                }
                if let Some(applied) = applied_start {
                    assert!(
                        applied >= last_notification,
                        "the final listing predates the last notification"
                    );
                }
                for pair in starts.windows(2) {
                    assert!(pair[1] - pair[0] >= window, "two starts within a window");
                }
            }
        }
    }
}

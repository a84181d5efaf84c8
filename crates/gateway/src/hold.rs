//! One HTTP connection's hold timer: the timer its answers hold their head with (see
//! `in_session::held`), kept for the connection's life instead of made per answer.
//!
//! tokio wakes its own driver (an `eventfd` write, then an `epoll_wait` that returns at once)
//! whenever a timer is registered that expires before every timer the driver knew of when it
//! last parked. A fresh hold timer per answer is such a timer on every call, and its wake-up
//! is paid between reading the request and forwarding it upstream. Reset for each answer, this
//! timer moves to a later deadline than the one the driver already knows, and nothing wakes.
//! It fires once after the connection's last answer: one poll of the connection, which finds
//! nothing to do.
//!
//! Invariants:
//! - a wait ends at its own deadline (or when dropped), never at an earlier wait's deadline;
//! - one wait holds the timer at a time (HTTP/1.1 answers one request at a time); a wait that
//!   finds it held uses a timer of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// The hold timer of one connection.
pub(crate) struct HoldClock {
    sleep: Mutex<Pin<Box<Sleep>>>,
    /// A wait holds the timer.
    busy: AtomicBool,
}

impl HoldClock {
    /// A connection's timer (not registered until its first wait). Within a tokio runtime.
    pub(crate) fn new() -> Self {
        Self {
            sleep: Mutex::new(Box::pin(tokio::time::sleep_until(Instant::now()))),
            busy: AtomicBool::new(false),
        }
    }

    /// Completes at `deadline`.
    pub(crate) fn until(&self, deadline: Instant) -> Until<'_> {
        let shared = !self.busy.swap(true, Ordering::Acquire);
        Until {
            clock: self,
            deadline,
            own: (!shared).then(|| Box::pin(tokio::time::sleep_until(deadline))),
        }
    }
}

/// Completes at `deadline`: on `clock` when the request came with its connection's, else on
/// a timer of its own.
pub(crate) async fn hold_until(clock: Option<&HoldClock>, deadline: Instant) {
    match clock {
        Some(clock) => clock.until(deadline).await,
        None => tokio::time::sleep_until(deadline).await,
    }
}

/// A wait on a connection's hold timer (see [`HoldClock::until`]).
pub(crate) struct Until<'a> {
    clock: &'a HoldClock,
    deadline: Instant,
    /// The wait's own timer, when the connection's was held by another wait.
    own: Option<Pin<Box<Sleep>>>,
}

impl Future for Until<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(own) = self.own.as_mut() {
            return own.as_mut().poll(cx);
        }
        let mut sleep = self.clock.sleep.lock().unwrap_or_else(|p| p.into_inner());
        if sleep.deadline() != self.deadline {
            sleep.as_mut().reset(self.deadline);
        }
        sleep.as_mut().poll(cx)
    }
}

impl Drop for Until<'_> {
    fn drop(&mut self) {
        if self.own.is_none() {
            self.clock.busy.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const HOLD: Duration = Duration::from_millis(50);

    /// A later wait on the same clock ends at its own deadline: not at the earlier wait's
    /// (still registered when the earlier wait ended early), and not before.
    #[tokio::test(start_paused = true)]
    async fn a_reused_clock_keeps_each_waits_deadline() {
        let clock = HoldClock::new();
        let first = Instant::now() + HOLD;
        // The first wait ends early (its answer came): the timer stays set for `first`.
        let early = tokio::time::timeout(Duration::from_millis(10), clock.until(first)).await;
        assert!(early.is_err(), "ended before its deadline");
        tokio::time::advance(Duration::from_millis(20)).await;
        let second = Instant::now() + HOLD;
        assert!(second > first);
        clock.until(second).await;
        assert!(
            Instant::now() >= second,
            "ended at the first wait's deadline"
        );
        assert!(Instant::now() < second + Duration::from_millis(2));
    }

    /// A clock whose timer already fired (an idle connection) still times the next wait.
    #[tokio::test(start_paused = true)]
    async fn a_fired_clock_times_the_next_wait() {
        let clock = HoldClock::new();
        clock.until(Instant::now() + HOLD).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        let deadline = Instant::now() + HOLD;
        clock.until(deadline).await;
        assert!(Instant::now() >= deadline);
    }

    /// Two waits at once: the second times itself with its own timer, and each is woken at
    /// its own deadline (one shared timer would wake only the last to poll it).
    #[tokio::test(start_paused = true)]
    async fn waits_at_once_each_end_at_their_own_deadline() {
        let clock = HoldClock::new();
        let start = Instant::now();
        let (a, b) = tokio::join!(
            async {
                clock.until(start + Duration::from_millis(30)).await;
                Instant::now()
            },
            async {
                clock.until(start + Duration::from_millis(60)).await;
                Instant::now()
            },
        );
        assert_eq!(a - start, Duration::from_millis(30));
        assert_eq!(b - start, Duration::from_millis(60));
        // Both released it: the next wait holds the shared timer again.
        let next = clock.until(Instant::now() + HOLD);
        assert!(next.own.is_none());
    }
}

//! How server connections are supervised: reconnect backoff for remote transports, health
//! checks that notice a dead HTTP server, and the two connection queues.
//!
//! Invariants:
//! - a remote server that loses its connection (or cannot connect for a reason a retry may fix)
//!   is reconnected with exponential backoff and jitter, at most `max_attempts` times in a row;
//!   then it is failed and its catalog cleared (R7). Jitter spreads a reconnect storm across
//!   many servers instead of synchronising it. stdio servers are never restarted in a loop;
//! - a remote session that stops answering pings is treated as closed, even when the transport
//!   library does not notice (rmcp keeps an HTTP session "open" after its server died);
//! - at most `local` stdio/in-process and `remote` HTTP servers connect at once (R5), and a slow
//!   server holds its slot for at most `slot_hold` — it goes on connecting, but the queue moves.
//!   A slot covers starting the server (spawn or connect, and initialize); it is given back as
//!   soon as initialize completed, and the first listing runs after it;
//! - waiting attempts start in the order they were queued, each on the thread that freed its
//!   slot (a task spawned there, not a waiter woken elsewhere): on a machine busy starting
//!   servers, waking another thread costs a scheduling delay per hand-off, which adds up along
//!   a queue of a hundred servers; a cancelled attempt never starts and never holds a slot.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{AbortHandle, Abortable};

use crate::connection::io_threads::IoPlace;

/// Reconnect and health-check settings (runtime-wide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Attempts in a row before a remote server is failed. Default 5.
    pub max_attempts: u32,
    /// Delay before the first attempt. Default 1 s; doubles per attempt.
    pub initial_delay: Duration,
    /// Longest delay between attempts. Default 30 s.
    pub max_delay: Duration,
    /// How often a remote session is pinged. Default 30 s.
    pub health_interval: Duration,
    /// How long a connection must have lasted for its loss to start a new run of attempts.
    /// Default 10 s (a proxy that cuts idle streams at 30 s or more is not a failing server). A server lost sooner goes on counting from the attempts it took to
    /// connect, so one that connects and dies at once backs off (and is failed, then probed at
    /// `max_delay`) rather than reconnecting at `initial_delay` forever.
    pub stable_after: Duration,
    /// How long a ping may take. Default 10 s. Two failed pings in a row close the session.
    pub ping_timeout: Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            health_interval: Duration::from_secs(30),
            stable_after: Duration::from_secs(10),
            ping_timeout: Duration::from_secs(10),
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `attempt` (1-based): `initial · 2^(attempt-1)`, capped, then
    /// scaled by a jitter factor in [0.5, 1.0] drawn from `seed`.
    pub fn delay(&self, attempt: u32, seed: u64) -> Duration {
        let exp = self
            .initial_delay
            .saturating_mul(
                1u32.checked_shl(attempt.saturating_sub(1).min(20))
                    .unwrap_or(u32::MAX),
            )
            .min(self.max_delay);
        let jitter = 0.5 + (splitmix(seed) % 1_000) as f64 / 2_000.0;
        exp.mul_f64(jitter)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The two connection queues.
#[derive(Clone)]
pub(crate) struct ConnectQueues {
    local: Arc<SlotQueue>,
    remote: Arc<SlotQueue>,
    /// Longest time one connecting server keeps its slot.
    pub slot_hold: Duration,
}

/// Default concurrency of the local (stdio, in-process) queue.
pub const DEFAULT_LOCAL_SLOTS: usize = 3;
/// Default concurrency of the remote (HTTP) queue.
pub const DEFAULT_REMOTE_SLOTS: usize = 20;
/// Default longest hold of a slot by one server.
pub(crate) const DEFAULT_SLOT_HOLD: Duration = Duration::from_secs(2);

impl ConnectQueues {
    pub(crate) fn new(local: usize, remote: usize, slot_hold: Duration) -> Self {
        Self {
            local: SlotQueue::new(local),
            remote: SlotQueue::new(remote),
            slot_hold,
        }
    }

    /// Starts `attempt` with a slot of the local or remote queue: at once, on `place`, when one
    /// is free; otherwise after the attempts queued before it, on the thread that frees a slot.
    /// Dropping the returned [`Attempt`] cancels it, whether it is still queued or running.
    pub(crate) fn start<F, Fut>(&self, remote: bool, place: &IoPlace, attempt: F) -> Attempt
    where
        F: FnOnce(Slot) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let queue = if remote { &self.remote } else { &self.local };
        let (abort, registration) = AbortHandle::new_pair();
        let place = place.clone();
        let start: StartFn = Box::new(move |slot, on_releasing_thread| {
            let run = Abortable::new(attempt(slot), registration);
            let run = async move {
                let _ = run.await;
            };
            if on_releasing_thread {
                place.spawn_here(run);
            } else {
                drop(place.spawn(run));
            }
        });
        SlotQueue::push(queue, abort.clone(), start);
        Attempt(abort)
    }
}

/// Starts an attempt with its slot; the flag says whether it runs where the slot was freed.
type StartFn = Box<dyn FnOnce(Slot, bool) + Send>;

/// One queue: how many slots are free, and the attempts waiting for one, in order.
struct SlotQueue {
    state: Mutex<QueueState>,
}

struct QueueState {
    free: usize,
    waiting: VecDeque<(AbortHandle, StartFn)>,
}

impl SlotQueue {
    fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(QueueState {
                free: slots.max(1),
                waiting: VecDeque::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // The state stays consistent even if a holder panicked: every change is one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(this: &Arc<Self>, abort: AbortHandle, start: StartFn) {
        let mut state = this.lock();
        if state.free > 0 {
            state.free -= 1;
            drop(state);
            start(Slot(Some(this.clone())), false);
        } else {
            state.waiting.push_back((abort, start));
        }
    }

    /// A slot came back: it goes to the first waiting attempt not cancelled, or is free again.
    fn release(this: Arc<Self>) {
        let next = {
            let mut state = this.lock();
            loop {
                match state.waiting.pop_front() {
                    Some((abort, _)) if abort.is_aborted() => continue,
                    Some((_, start)) => break start,
                    None => {
                        state.free += 1;
                        return;
                    }
                }
            }
        };
        next(Slot(Some(this)), true);
    }
}

/// A slot of a connection queue, held by one attempt; dropping it hands it on.
pub(crate) struct Slot(Option<Arc<SlotQueue>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(queue) = self.0.take() {
            SlotQueue::release(queue);
        }
    }
}

/// A queued or running connection attempt; dropping it cancels the attempt (a running one is
/// dropped at its next wake-up on its own thread, with everything it started).
pub(crate) struct Attempt(AbortHandle);

impl Drop for Attempt {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Default for ConnectQueues {
    fn default() -> Self {
        Self::new(DEFAULT_LOCAL_SLOTS, DEFAULT_REMOTE_SLOTS, DEFAULT_SLOT_HOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = ReconnectPolicy::default();
        for seed in 0..200u64 {
            let d1 = p.delay(1, seed);
            assert!(
                d1 >= Duration::from_millis(500) && d1 <= Duration::from_secs(1),
                "{d1:?}"
            );
            let d3 = p.delay(3, seed);
            assert!(
                d3 >= Duration::from_secs(2) && d3 <= Duration::from_secs(4),
                "{d3:?}"
            );
            let d40 = p.delay(40, seed);
            assert!(d40 <= p.max_delay && d40 >= p.max_delay / 2, "{d40:?}");
        }
        // Different servers (seeds) do not reconnect in lockstep.
        let spread: std::collections::BTreeSet<_> = (0..50u64).map(|s| p.delay(2, s)).collect();
        assert!(spread.len() > 40, "jitter spreads the storm");
    }

    /// Which attempt started, on which thread.
    type Started = std::sync::mpsc::Receiver<(&'static str, String)>;

    /// Queues `n` attempts that each report (name, thread) once started and then hold their
    /// slot until told to go.
    fn queue_attempts(
        q: &ConnectQueues,
        remote: bool,
        place: &IoPlace,
        names: &[&'static str],
    ) -> (Vec<Attempt>, Started, Vec<tokio::sync::oneshot::Sender<()>>) {
        let (started_tx, started) = std::sync::mpsc::channel();
        let mut go = Vec::new();
        let attempts = names
            .iter()
            .map(|&name| {
                let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
                go.push(go_tx);
                let started_tx = started_tx.clone();
                q.start(remote, place, move |slot| async move {
                    let thread = std::thread::current().name().unwrap_or("").to_string();
                    let _ = started_tx.send((name, thread));
                    let _ = go_rx.await;
                    drop(slot);
                })
            })
            .collect();
        (attempts, started, go)
    }

    fn next_started(started: &Started) -> Option<(&'static str, String)> {
        started.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn queues_bound_concurrency_keep_order_and_skip_cancelled_attempts() {
        let (_threads, handles) =
            crate::connection::io_threads::PinnedThreads::start(2).expect("threads");
        let place = IoPlace::Pinned(handles);
        let q = ConnectQueues::new(2, 1, Duration::from_secs(2));
        let (mut attempts, started, mut go) =
            queue_attempts(&q, false, &place, &["a", "b", "c", "d", "e"]);
        let mut first: Vec<_> = (0..2).filter_map(|_| next_started(&started)).collect();
        first.sort();
        assert_eq!(first.iter().map(|s| s.0).collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            started.recv_timeout(Duration::from_millis(50)).is_err(),
            "the third local attempt waits"
        );
        // The remote queue is separate.
        let (_remote, remote_started, _remote_go) = queue_attempts(&q, true, &place, &["r"]);
        assert_eq!(next_started(&remote_started).map(|s| s.0), Some("r"));

        // "c" is cancelled while queued: it never starts, and its turn passes to "d".
        drop(attempts.remove(2));
        let a_thread = first[0].1.clone();
        let _ = go.remove(0).send(());
        let d = next_started(&started).expect("d starts when a frees its slot");
        assert_eq!(d.0, "d");
        assert_eq!(d.1, a_thread, "d starts on the thread that freed the slot");
        assert!(started.recv_timeout(Duration::from_millis(50)).is_err());

        // Cancelling a running attempt frees its slot for the next one.
        drop(attempts.remove(0)); // a: already done
        drop(attempts.remove(0)); // b: running, holds a slot
        assert_eq!(next_started(&started).map(|s| s.0), Some("e"));
    }
}

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
//!   soon as initialize completed, and the first listing runs after it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
#[derive(Debug, Clone)]
pub struct ConnectQueues {
    local: Arc<Semaphore>,
    remote: Arc<Semaphore>,
    /// Longest time one connecting server keeps its slot.
    pub slot_hold: Duration,
}

/// Default concurrency of the local (stdio, in-process) queue.
pub const DEFAULT_LOCAL_SLOTS: usize = 3;
/// Default concurrency of the remote (HTTP) queue.
pub const DEFAULT_REMOTE_SLOTS: usize = 20;
/// Default longest hold of a slot by one server.
pub const DEFAULT_SLOT_HOLD: Duration = Duration::from_secs(2);

impl ConnectQueues {
    pub fn new(local: usize, remote: usize, slot_hold: Duration) -> Self {
        Self {
            local: Arc::new(Semaphore::new(local.max(1))),
            remote: Arc::new(Semaphore::new(remote.max(1))),
            slot_hold,
        }
    }

    /// Waits for a slot in the local or remote queue.
    pub async fn slot(&self, remote: bool) -> Option<OwnedSemaphorePermit> {
        let queue = if remote { &self.remote } else { &self.local };
        queue.clone().acquire_owned().await.ok()
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

    #[tokio::test(start_paused = true)]
    async fn queues_bound_concurrency() {
        let q = ConnectQueues::new(2, 1, Duration::from_secs(2));
        let a = q.slot(false).await;
        let b = q.slot(false).await;
        assert!(a.is_some() && b.is_some());
        let third = tokio::time::timeout(Duration::from_millis(10), q.slot(false)).await;
        assert!(third.is_err(), "the third local connect waits");
        assert!(q.slot(true).await.is_some(), "the remote queue is separate");
        drop(a);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), q.slot(false))
                .await
                .is_ok()
        );
    }
}

//! The log level the gateway asks of its upstream servers on behalf of its clients.
//!
//! Each client's `logging/setLevel` filters what the gateway forwards to that client; the
//! upstreams are asked (`logging/setLevel`, to each connected server that declares `logging`)
//! for the most verbose level any live session asked for, so a client asking for `debug` gets
//! the upstream's debug lines and not only what the upstream sends by default.
//!
//! Invariants:
//! - the level asked of the upstreams is the most verbose one among the sessions alive that
//!   asked (counted per level: a session's later ask replaces its earlier one, its end removes
//!   it); while no live session asked, nothing is sent and upstreams keep what they were last
//!   asked (MCP has no "back to your default");
//! - each connected upstream is sent a level once per connection and change: a reconnected or
//!   newly added server is asked at the next catalog publication, and one that fails to answer
//!   is asked again at the next;
//! - sends are serialised, each bounded by [`SEND_DEADLINE`], so the last level asked is the
//!   last one sent and a stuck upstream delays only the ask that is waiting for it.

// Logging is deprecated by SEP-2577, but servers of every earlier protocol use it.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use mcp_harness_runtime::Runtime;
use mcp_harness_runtime::catalog::ServerState;
use rmcp::model::LoggingLevel;

use crate::sync::lock;

/// How long one upstream may take to answer `logging/setLevel`.
const SEND_DEADLINE: Duration = Duration::from_secs(5);

/// The levels, least severe first (index = the `LoggingLevel` discriminant).
const LEVELS: [LoggingLevel; 8] = [
    LoggingLevel::Debug,
    LoggingLevel::Info,
    LoggingLevel::Notice,
    LoggingLevel::Warning,
    LoggingLevel::Error,
    LoggingLevel::Critical,
    LoggingLevel::Alert,
    LoggingLevel::Emergency,
];

/// The sessions' asks and what each upstream connection was sent.
#[derive(Default)]
pub(crate) struct UpstreamLogLevel {
    /// Live sessions that asked, per level.
    asked: Mutex<[u32; 8]>,
    /// Held while sending: per server, the connection (its `since`) and the level it was sent.
    sent: tokio::sync::Mutex<HashMap<String, (SystemTime, u8)>>,
}

impl UpstreamLogLevel {
    /// The most verbose level a live session asked for.
    fn wanted(&self) -> Option<u8> {
        let asked = lock(&self.asked);
        asked.iter().position(|&n| n > 0).map(|i| i as u8)
    }

    /// A session asked for `level`, replacing its earlier ask `previous`.
    pub(crate) fn ask(&self, previous: Option<u8>, level: u8) {
        let mut asked = lock(&self.asked);
        if let Some(previous) = previous.and_then(|p| asked.get_mut(usize::from(p))) {
            *previous = previous.saturating_sub(1);
        }
        if let Some(count) = asked.get_mut(usize::from(level)) {
            *count += 1;
        }
    }

    /// A session that asked for `level` ended; true when that changes the level wanted.
    pub(crate) fn forget(&self, level: u8) -> bool {
        let before = self.wanted();
        if let Some(count) = lock(&self.asked).get_mut(usize::from(level)) {
            *count = count.saturating_sub(1);
        }
        let after = self.wanted();
        after.is_some() && after != before
    }

    /// Sends the level wanted to each connected upstream declaring `logging` that was not yet
    /// sent it on its current connection.
    pub(crate) async fn apply(&self, runtime: &Runtime) {
        let Some(wanted) = self.wanted() else { return };
        let mut sent = self.sent.lock().await;
        let snapshot = runtime.snapshot();
        let due: Vec<(&String, SystemTime)> = snapshot
            .servers
            .iter()
            .filter(|(server, status)| {
                matches!(status.state, ServerState::Connected)
                    && sent.get(*server) != Some(&(status.since, wanted))
                    && runtime
                        .server_capabilities(server)
                        .is_some_and(|c| c.logging.is_some())
            })
            .map(|(server, status)| (server, status.since))
            .collect();
        let level = LEVELS[usize::from(wanted)];
        let sends = due.iter().map(|(server, _)| async move {
            tokio::time::timeout(SEND_DEADLINE, runtime.set_log_level(server, level)).await
        });
        let answers = futures::future::join_all(sends).await;
        for ((server, since), answer) in due.into_iter().zip(answers) {
            match answer {
                Ok(Ok(())) => {
                    sent.insert(server.clone(), (since, wanted));
                }
                Ok(Err(error)) => {
                    tracing::warn!(%server, ?level, %error, "the upstream refused logging/setLevel; asked again at the next publication");
                }
                Err(_) => {
                    tracing::warn!(%server, ?level, "the upstream did not answer logging/setLevel within {SEND_DEADLINE:?}; asked again at the next publication");
                }
            }
        }
        sent.retain(|server, _| snapshot.servers.contains_key(server));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_verbose_live_ask_wins_and_leaves_with_its_session() {
        let levels = UpstreamLogLevel::default();
        assert_eq!(levels.wanted(), None);
        levels.ask(None, LoggingLevel::Warning as u8);
        assert_eq!(levels.wanted(), Some(LoggingLevel::Warning as u8));
        levels.ask(None, LoggingLevel::Debug as u8);
        assert_eq!(levels.wanted(), Some(LoggingLevel::Debug as u8));
        // The debug session asks again, for error: warning is now the most verbose.
        levels.ask(Some(LoggingLevel::Debug as u8), LoggingLevel::Error as u8);
        assert_eq!(levels.wanted(), Some(LoggingLevel::Warning as u8));
        assert!(levels.forget(LoggingLevel::Warning as u8));
        assert_eq!(levels.wanted(), Some(LoggingLevel::Error as u8));
        // The last asking session ends: nothing is wanted, nothing to send.
        assert!(!levels.forget(LoggingLevel::Error as u8));
        assert_eq!(levels.wanted(), None);
    }

    #[test]
    fn levels_map_to_their_discriminants() {
        for (i, level) in LEVELS.iter().enumerate() {
            assert_eq!(*level as usize, i);
        }
    }
}

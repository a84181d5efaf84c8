//! The server actor's connection state: one enum whose variants own what exists only in that
//! state (a session, a timer, a watch, the calls waiting for a restart), and the public
//! [`ServerState`] derived from it.
//!
//! Invariants:
//! - a timer or session lives exactly as long as the state that owns it: leaving a state
//!   (`ServerActor::leave`, or `ServerActor::stop`) cancels its timer and closes its session, so
//!   a timer of a state already left can never fire into a newer one;
//! - the public state is never stored beside the phase: [`Phase::public_state`] and
//!   [`Phase::next_retry`] derive it, and `Stopped` publishes nothing.

use std::time::SystemTime;

use actix::SpawnHandle;
use mcp_harness_catalog::{Kind, ServerCatalog, ServerState};
use mcp_harness_transport::Session;
use tokio::time::Instant;

use crate::connection::refresh::Refreshes;

/// The answer to `ReviveForCall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Revival {
    /// The server runs again on connection `epoch`, restarted after the crash of the bound
    /// connection (for this call or a concurrent one).
    Connected { epoch: u64 },
    /// The one restart after the crash did not bring the server back (`replaced`: the restart
    /// was the new connection of a server a config edit replaced).
    Failed { error: String, replaced: bool },
    /// Nothing to restart: the server did not fail by its process exiting (or is being
    /// stopped); the call goes on as bound and its staleness check decides.
    NotApplicable,
}

/// A restart for calls in flight: the epoch whose crash it restarts after, and the calls
/// waiting for it (owned by the [`Run`] it belongs to; made and finished in `revival.rs`).
pub(super) struct Revive {
    pub(super) origin: u64,
    /// The restart is the first connection of a server a config edit replaced (not a crash).
    pub(super) replaced: bool,
    pub(super) waiters: Vec<tokio::sync::oneshot::Sender<Revival>>,
}

/// Where a server's connection is. The transitions, each a `ServerActor` method:
/// - every state but `Stopped` → `Connecting`: `restart` (the actor started, or `Restart`);
///   from `BackingOff` `retry_after_backoff`; from `Connecting` `retry_with_discover` (the era
///   fallback, R8); from `NeedsAuth` `reconnect_after_login`; from `Exited` `revive` (a call
///   asked for the crashed process, R7);
/// - `Connecting` → `Live` (`go_live`), → `BackingOff` (`back_off`: a remote server's attempt
///   failed in a way a retry may mend), → `Failed` or `NeedsAuth` (`give_up`);
/// - `Live` → `BackingOff` (remote), `Exited` (stdio) or `Failed` (`lose_connection`);
/// - every state → `Stopped` (`stop`), which is final.
pub(super) enum Phase {
    /// An attempt (queue slot, handshake, first listing) is running for the current epoch.
    Connecting(Connecting),
    /// Connected and listed (boxed: it is by far the largest).
    Live(Box<Live>),
    /// A remote server waits for its next attempt.
    BackingOff(BackingOff),
    /// The server requires authorization the harness does not have; it is not probed (R4).
    NeedsAuth {
        reason: String,
        /// The watch of the stored credentials (a local file, not the server); `None` when
        /// the connector keeps no credentials to watch.
        watch: Option<SpawnHandle>,
    },
    /// Connecting failed for good, or a connection that is neither remote nor stdio ended.
    Failed { error: String },
    /// The stdio process of the current connection exited: it is not restarted in a loop, but
    /// a call bound to it may restart it once (`ReviveForCall`).
    Exited { error: String },
    /// Shut down (removed, replaced, runtime shutdown): nothing reconnects or reports again.
    Stopped,
}

/// One run of connection attempts, from what began it until the server connects or gives up.
/// It lives in `Connecting` and `BackingOff`, and goes from one to the other.
pub(super) struct Run {
    pub(super) pace: Pace,
    /// Set when the run is a restart for calls: the calls waiting for its outcome.
    pub(super) revival: Option<Revive>,
}

/// How a run's attempts are timed and shown.
pub(super) enum Pace {
    /// After the actor started or a `Restart`: all attempts together get `startupTimeoutSec`,
    /// which runs out at `deadline`.
    Startup { deadline: Instant },
    /// After a lost connection, a login or a restart for calls: fast attempts with backoff.
    Recovering,
    /// The fast attempts are spent (or a startup ended unreachable): the server is failed and
    /// probed at the capped interval; starting a probe does not make it pending.
    Probing,
}

/// What `Connecting` owns.
pub(super) struct Connecting {
    pub(super) run: Run,
    /// Why `initialize` was refused, while `server/discover` is tried in its place: if that is
    /// refused too, this is the error the server is failed with (the server is not of the newer
    /// era, so the discover refusal says nothing useful).
    pub(super) refused_initialize: Option<String>,
    /// While probing: the failure the server goes on showing during this attempt (`None`: it
    /// shows pending).
    pub(super) failure: Option<String>,
    /// The attempt under way, cancelled (with the process it started) when this phase is left
    /// before it ends: a replaced or removed server's slow start does not run on to its
    /// deadline beside its successor.
    pub(super) attempt: Option<actix::SpawnHandle>,
}

/// What `Live` owns: the connection and everything listed on it.
pub(super) struct Live {
    pub(super) session: Session,
    /// The current catalog generation.
    pub(super) catalog: ServerCatalog,
    pub(super) refreshes: Refreshes,
    /// Kinds this connection's server declared.
    pub(super) declared: Vec<Kind>,
    /// Whether this connection's listings may be cached (the server did not opt out).
    pub(super) cacheable: bool,
    /// The periodic health check of a remote session.
    pub(super) health: Option<SpawnHandle>,
    /// Pings in a row that got no answer.
    pub(super) missed_pings: u32,
    /// The tool-list notifications ([`WireNotes::tools_changed`]) the applied tool listing
    /// covers: it started after that many had arrived.
    ///
    /// [`WireNotes::tools_changed`]: mcp_harness_transport::WireNotes::tools_changed
    pub(super) tools_covered: u64,
}

/// What `BackingOff` owns.
pub(super) struct BackingOff {
    pub(super) run: Run,
    /// The next attempt; `None` once it fired.
    pub(super) retry: Option<SpawnHandle>,
    /// When the next attempt is due.
    pub(super) at: SystemTime,
    /// `Some(error)` while the server shows failed as it waits (probing), `None` while pending.
    pub(super) failure: Option<String>,
}

impl Pace {
    /// When a startup runs out of time, while starting.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self {
            Pace::Startup { deadline } => Some(*deadline),
            Pace::Recovering | Pace::Probing => None,
        }
    }
}

impl Connecting {
    /// A new run of attempts at `pace`.
    pub(super) fn new(pace: Pace, revival: Option<Revive>) -> Self {
        Self {
            run: Run { pace, revival },
            refused_initialize: None,
            failure: None,
            attempt: None,
        }
    }
}

impl Phase {
    /// The state the publisher is told; `None` once stopped (a stopped server reports nothing).
    pub(super) fn public_state(&self) -> Option<ServerState> {
        let failed_or_pending = |failure: &Option<String>| match failure {
            Some(error) => ServerState::Failed {
                error: error.clone(),
            },
            None => ServerState::Pending,
        };
        Some(match self {
            Phase::Connecting(connecting) => failed_or_pending(&connecting.failure),
            Phase::BackingOff(backing_off) => failed_or_pending(&backing_off.failure),
            Phase::Live(_) => ServerState::Connected,
            Phase::NeedsAuth { reason, .. } => ServerState::NeedsAuth {
                reason: reason.clone(),
            },
            Phase::Failed { error } | Phase::Exited { error } => ServerState::Failed {
                error: error.clone(),
            },
            Phase::Stopped => return None,
        })
    }

    /// When the next reconnect attempt is due.
    pub(super) fn next_retry(&self) -> Option<SystemTime> {
        match self {
            Phase::BackingOff(backing_off) => Some(backing_off.at),
            _ => None,
        }
    }

    /// The run of attempts in progress.
    pub(super) fn run_mut(&mut self) -> Option<&mut Run> {
        match self {
            Phase::Connecting(Connecting { run, .. })
            | Phase::BackingOff(BackingOff { run, .. }) => Some(run),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: &str) -> Option<ServerState> {
        Some(ServerState::Failed {
            error: error.into(),
        })
    }

    #[test]
    fn an_attempt_shows_pending_unless_a_probe_goes_on_showing_its_failure() {
        let mut connecting = Connecting::new(Pace::Recovering, None);
        let phase = Phase::Connecting(connecting);
        assert_eq!(phase.public_state(), Some(ServerState::Pending));
        assert_eq!(phase.next_retry(), None);
        connecting = Connecting::new(Pace::Probing, None);
        connecting.failure = Some("unreachable (probing)".into());
        let phase = Phase::Connecting(connecting);
        assert_eq!(phase.public_state(), failed("unreachable (probing)"));
    }

    #[test]
    fn backing_off_shows_when_it_retries_and_whether_it_probes() {
        let at = SystemTime::now();
        let backing_off = |failure: Option<&str>| {
            Phase::BackingOff(BackingOff {
                run: Run {
                    pace: Pace::Recovering,
                    revival: None,
                },
                retry: None,
                at,
                failure: failure.map(String::from),
            })
        };
        assert_eq!(backing_off(None).public_state(), Some(ServerState::Pending));
        assert_eq!(backing_off(None).next_retry(), Some(at));
        assert_eq!(backing_off(Some("gone")).public_state(), failed("gone"));
    }

    #[test]
    fn settled_states_show_their_reason_and_a_stopped_server_shows_nothing() {
        let exited = Phase::Exited {
            error: "exit status 1".into(),
        };
        assert_eq!(exited.public_state(), failed("exit status 1"));
        let needs_auth = Phase::NeedsAuth {
            reason: "401".into(),
            watch: None,
        };
        assert_eq!(
            needs_auth.public_state(),
            Some(ServerState::NeedsAuth {
                reason: "401".into()
            })
        );
        assert_eq!(Phase::Stopped.public_state(), None);
        assert_eq!(Phase::Stopped.next_retry(), None);
    }
}

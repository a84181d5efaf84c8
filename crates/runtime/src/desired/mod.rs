//! Desired state and the single publisher of configuration changes (R19, R20).
//!
//! Invariants:
//! - changing the desired configuration only marks the runtime dirty (a new generation);
//! - at most one refresh runs at a time; it claims the newest generation, and if it is dropped
//!   before it published, a guard restores the claim so the runtime is dirty again;
//! - pre-warming is a hint through a one-slot channel (requests coalesce); the refresh at the
//!   start of a step is what guarantees the step sees the desired state.

pub(crate) mod reload;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::call::context::LivePermissions;
use crate::config::Config;
use crate::connection::registry::{Reconciled, Registry};
use crate::error::StartError;
use crate::snapshot::Live;

struct Desired {
    config: Config,
    /// Bumped by every change.
    generation: u64,
    /// The generation last claimed by a refresh (restored if that refresh did not publish).
    applied: u64,
}

/// A claimed generation.
struct Claim {
    generation: u64,
    previous: u64,
    config: Config,
}

/// Dirty flag, single-publisher lock and pre-warm channel.
struct RefreshControl {
    desired: Mutex<Desired>,
    single: tokio::sync::Mutex<()>,
    prewarm: mpsc::Sender<()>,
}

impl RefreshControl {
    /// Control for a runtime started with `config` (already applied), and the receiving end of
    /// the pre-warm channel.
    fn new(config: Config) -> (Self, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel(1);
        let control = Self {
            desired: Mutex::new(Desired {
                config,
                generation: 0,
                applied: 0,
            }),
            single: tokio::sync::Mutex::new(()),
            prewarm: tx,
        };
        (control, rx)
    }

    fn desired(&self) -> std::sync::MutexGuard<'_, Desired> {
        self.desired.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mark(&self, config: Config) {
        let mut d = self.desired();
        d.config = config;
        d.generation += 1;
    }

    fn is_dirty(&self) -> bool {
        let d = self.desired();
        d.generation > d.applied
    }

    fn prewarm(&self) {
        // Full means a refresh is already requested: coalesced.
        let _ = self.prewarm.try_send(());
    }

    fn claim(&self) -> Option<Claim> {
        let mut d = self.desired();
        if d.generation == d.applied {
            return None;
        }
        let claim = Claim {
            generation: d.generation,
            previous: d.applied,
            config: d.config.clone(),
        };
        d.applied = d.generation;
        Some(claim)
    }

    fn restore(&self, claim: &Claim) {
        let mut d = self.desired();
        if d.applied == claim.generation {
            d.applied = claim.previous;
        }
    }
}

/// Restores the claim unless the refresh published (a refresh dropped half way leaves the
/// runtime dirty).
struct DirtyGuard<'a> {
    control: &'a RefreshControl,
    claim: Claim,
    published: bool,
}

impl Drop for DirtyGuard<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.control.restore(&self.claim);
        }
    }
}

/// The desired state of one runtime: the change control plus what applying a change uses (the
/// registry reconciles, the live view tells when the new servers have settled).
pub(crate) struct DesiredState {
    control: RefreshControl,
    registry: Arc<Registry>,
    live: Arc<Live>,
    /// The permission rules calls are decided by, replaced with the servers.
    permissions: Arc<LivePermissions>,
    /// The configuration the runtime started with (its settings that apply only at a start),
    /// and the keys last said to differ from it: each reload says what differs from what
    /// runs, once per change of that list (a revert says so too).
    applied: Mutex<(Config, Vec<&'static str>)>,
    /// Refreshes applied and waiting for their new servers to settle (outside the lock).
    settling: tokio::sync::watch::Sender<usize>,
}

/// One refresh waiting for its servers to settle, counted until dropped.
struct Settling<'a>(&'a tokio::sync::watch::Sender<usize>);

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl DesiredState {
    /// Desired state for a runtime started with `config` (already applied), and the receiving
    /// end of its pre-warm channel (for [`prewarmer`]).
    pub(crate) fn new(
        config: Config,
        registry: Arc<Registry>,
        live: Arc<Live>,
        permissions: Arc<LivePermissions>,
    ) -> (Self, mpsc::Receiver<()>) {
        let applied = Mutex::new((config.clone(), Vec::new()));
        let (control, rx) = RefreshControl::new(config);
        (
            Self {
                control,
                registry,
                live,
                permissions,
                applied,
                settling: tokio::sync::watch::Sender::new(0),
            },
            rx,
        )
    }

    /// Puts `config`'s permission rules in force and says (WARN) which of its other settings
    /// changed, which apply only when the runtime starts again.
    fn apply_settings(&self, config: &Config) {
        let source = config.source.as_ref().map_or_else(
            || "the configuration".to_string(),
            |p| p.display().to_string(),
        );
        if self.permissions.replace(&config.permissions) {
            tracing::info!(file = %source, "`permissions` reloaded: calls from now on are decided by the new rules");
        }
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        let (running, said) = &mut *applied;
        let changed = |before: &dyn std::fmt::Debug, after: &dyn std::fmt::Debug| {
            format!("{before:?}") != format!("{after:?}")
        };
        let mut later = Vec::new();
        if changed(&running.exposure, &config.exposure) {
            later.push("exposure");
        }
        if changed(&running.metadata_limits, &config.metadata_limits) {
            later.push("metadataLimits");
        }
        if changed(&running.output, &config.output) {
            later.push("output");
        }
        if changed(&running.gateway, &config.gateway) {
            later.push("gateway");
        }
        if later == *said {
            return;
        }
        if later.is_empty() {
            tracing::info!(
                file = %source,
                "the settings that apply only at a start match what runs again"
            );
        } else {
            tracing::warn!(
                file = %source,
                keys = %later.join(", "),
                "these settings differ from what runs and apply only when the runtime starts again (restart `mcp-harness serve`); `mcpServers` and `permissions` apply live"
            );
        }
        *said = later;
    }

    /// Makes `config` the desired configuration (marks the runtime dirty; applies nothing).
    pub(crate) fn mark(&self, config: Config) {
        self.control.mark(config);
    }

    /// Whether a change is waiting to be applied.
    pub(crate) fn is_dirty(&self) -> bool {
        self.control.is_dirty()
    }

    /// Waits (at most `limit`) until no applied refresh is still waiting for its new servers
    /// to settle: a model step binds the complete new runtime, whichever caller applied it.
    pub(crate) async fn settled(&self, limit: Duration) {
        let mut settling = self.settling.subscribe();
        let _ = tokio::time::timeout(limit, settling.wait_for(|n| *n == 0)).await;
    }

    /// [`Self::settled`] for a refresh another caller applies, bounded by the longest startup;
    /// with none settling, returns at once without looking the bound up.
    async fn others_settled(&self) {
        if *self.settling.borrow() == 0 {
            return;
        }
        self.settled(self.registry.longest_startup() + Duration::from_secs(1))
            .await;
    }

    /// Asks for a refresh ahead of need (coalesced).
    pub(crate) fn prewarm(&self) {
        self.control.prewarm();
    }

    /// See [`crate::Runtime::refresh_if_dirty`]. A change another caller (the pre-warm) is
    /// applying is waited for as if this call applied it: from its claim, not only once its
    /// servers started, so no caller sees the runtime between the two.
    pub(crate) async fn refresh_if_dirty(&self) -> Result<Option<Reconciled>, StartError> {
        let control = &self.control;
        if !control.is_dirty() {
            self.others_settled().await;
            return Ok(None);
        }
        let (mut guard, outcome, desired, deadline, settling) = {
            let _single = control.single.lock().await;
            let Some(claim) = control.claim() else {
                // Another refresh published it while we waited.
                drop(_single);
                self.others_settled().await;
                return Ok(None);
            };
            // Counted from the claim: a caller finding nothing dirty now waits for this.
            self.settling.send_modify(|n| *n += 1);
            let settling = Settling(&self.settling);
            let guard = DirtyGuard {
                control,
                claim,
                published: false,
            };
            let outcome = self
                .registry
                .reconcile(&guard.claim.config)
                .await
                .map_err(StartError::System)?;
            if !outcome.started.is_empty() || !outcome.removed.is_empty() {
                tracing::info!(
                    started = ?outcome.started,
                    removed = ?outcome.removed,
                    kept = outcome.kept.len(),
                    "servers changed by the configuration"
                );
            }
            self.apply_settings(&guard.claim.config);
            let desired: Vec<String> = guard.claim.config.servers.keys().cloned().collect();
            let deadline = guard
                .claim
                .config
                .servers
                .values()
                .map(|s| s.startup_timeout)
                .max()
                .unwrap_or(Duration::ZERO)
                + self.registry.drain_left()
                + Duration::from_secs(1);
            (guard, outcome, desired, deadline, settling)
        };
        // The new runtime is complete when every desired server has settled — the ones started
        // now, the ones starting once their old connection drained, and any a cancelled refresh
        // started before us. Awaited without the lock: a server slow to start or to drain holds
        // up this caller, never the next edit (cancelled here, the claim is restored unless a
        // later edit was claimed meanwhile). A model step another caller binds meanwhile waits
        // only for the servers not draining: a replaced one keeps its entries (calls wait for
        // its new connection) and binds at once.
        let draining = self.registry.draining();
        let starting: Vec<String> = desired
            .iter()
            .filter(|n| !draining.contains(*n))
            .cloned()
            .collect();
        let started = tokio::time::Instant::now();
        {
            let _settling = settling;
            self.live
                .wait_for(deadline, |s| self.all_settled(s, &starting))
                .await;
        }
        let left = deadline.saturating_sub(started.elapsed());
        self.live
            .wait_for(left, |s| self.all_settled(s, &desired))
            .await;
        self.live.flush().await;
        guard.published = true;
        Ok(Some(outcome))
    }

    /// Whether every server of `names` has settled in `snapshot`, or is no longer configured
    /// (a later edit removed it: its removal is published, so this is asked again then).
    fn all_settled(&self, snapshot: &mcp_harness_catalog::Snapshot, names: &[String]) -> bool {
        names.iter().all(|n| match snapshot.servers.get(n) {
            Some(status) if status.state.is_settled() => true,
            _ => !self.registry.is_configured(n),
        })
    }
}

/// Serves pre-warm requests until the runtime goes away, each refresh on its own task: one
/// waiting for its new servers to settle does not hold up the next edit's.
pub(crate) async fn prewarmer(desired: Weak<DesiredState>, mut rx: mpsc::Receiver<()>) {
    while rx.recv().await.is_some() {
        let Some(desired) = desired.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = desired.refresh_if_dirty().await {
                tracing::warn!(error = %e, "pre-warm refresh failed; the next step will retry");
            }
        });
    }
}

//! The set of server actors, and reconciling it with a desired configuration.
//!
//! Invariants:
//! - one actor per enabled configured server; a disabled server has no actor and is reported
//!   disabled;
//! - reconciling stops the actors of removed or changed servers *before* starting their
//!   replacements: a stopped actor is marked stopped first (it can no longer reconnect or
//!   report), then its session is closed — once the calls already sent on it are answered,
//!   the edit drain (`ServerSettings::edit_drain`) at the longest — then the new actor starts
//!   with a new connection: an old connection can never overwrite the new state (R6), and a
//!   config edit cuts no call short that could finish within the drain;
//! - servers whose configuration did not change keep their actor and their connection;
//! - a changed server's entries stay published (its old client retired) while its new actor
//!   connects — make before break, as far as the catalog goes: a restart that changes nothing a
//!   client sees sends no change, and a call made meanwhile waits for the new connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use mcp_harness_catalog::{ServerState, ServerStatus};
use mcp_harness_transport::InProcessServe;
use mcp_harness_transport::auth::AuthContext;

use crate::config::{Config, ServerConfig};
use crate::connection::server::{SHUTDOWN_GRACE, ServerActor, ServerSettings, Stop, close_session};
use crate::snapshot::publisher::{Flush, Publisher, RemoveServer, Replacing, ServerUpdate};

/// Added to a replaced server's startup deadline before its kept entries leave the catalog
/// (the publisher's safety net: the new actor reports a failure by then itself).
const REPLACEMENT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a config edit that removes or replaces a server waits, by default, for the calls
/// already sent on its connection before closing it ([`crate::RuntimeBuilder::edit_drain`]; as
/// `serve --drain-secs` does for the whole gateway).
pub(crate) const DEFAULT_EDIT_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

struct Member {
    config: ServerConfig,
    /// `None` for a disabled server.
    addr: Option<Addr<ServerActor>>,
}

/// How a stopping server ended in a reconciliation.
enum Stopped {
    Removed(String),
    Restarted(String),
}

/// What a reconciliation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Servers started (new, or replaced because their configuration changed).
    pub started: Vec<String>,
    /// Servers stopped and gone (removed from the configuration).
    pub removed: Vec<String>,
    /// Servers whose connection was kept.
    pub kept: Vec<String>,
}

/// The live server actors.
pub(crate) struct Registry {
    arbiter: ArbiterHandle,
    publisher: Addr<Publisher>,
    settings: ServerSettings,
    in_process: BTreeMap<String, InProcessServe>,
    /// The runtime's token store and step-up, for every connector made here.
    auth: AuthContext,
    members: Mutex<BTreeMap<String, Member>>,
    /// Bumped whenever an actor is recorded, for calls waiting for a replacement to start.
    recorded: tokio::sync::watch::Sender<u64>,
}

impl Registry {
    /// Must be created on the actor thread (it captures that thread's arbiter).
    pub(crate) fn new(
        publisher: Addr<Publisher>,
        settings: ServerSettings,
        in_process: BTreeMap<String, InProcessServe>,
        auth: AuthContext,
    ) -> Self {
        Self {
            arbiter: Arbiter::current(),
            publisher,
            settings,
            in_process,
            auth,
            members: Mutex::new(BTreeMap::new()),
            recorded: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The runtime's auth context.
    pub(crate) fn auth(&self) -> &AuthContext {
        &self.auth
    }

    fn members(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Member>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the actor of `config` (or reports it disabled) and records it.
    pub(crate) fn add(&self, config: ServerConfig) -> Result<(), String> {
        self.start(config, false)
    }

    /// [`Self::add`]; `replacing`: the server's previous actor was just stopped for a config
    /// edit, and calls bound to its connections wait for this one's first connection.
    fn start(&self, config: ServerConfig, replacing: bool) -> Result<(), String> {
        let addr = if config.enabled && config.untrusted.is_none() {
            let connector =
                config
                    .transport
                    .connector(&config.name, &self.in_process, &self.auth)?;
            let (shared, publisher, settings) = (
                Arc::new(config.clone()),
                self.publisher.clone(),
                self.settings.clone(),
            );
            Some(Supervisor::start_in_arbiter(&self.arbiter, move |_| {
                let actor = ServerActor::new(shared, connector, publisher, settings);
                if replacing { actor.replacing() } else { actor }
            }))
        } else {
            let (state, cause) = match &config.untrusted {
                Some(reason) => (
                    ServerState::Untrusted {
                        reason: reason.clone(),
                    },
                    reason.clone(),
                ),
                None => (
                    ServerState::Disabled,
                    "`enabled: false` in the config".into(),
                ),
            };
            self.publisher.do_send(ServerUpdate {
                status: ServerStatus::new(&config.name, config.transport.kind(), state),
                catalog: None,
                client: None,
                cause,
            });
            None
        };
        self.members()
            .insert(config.name.clone(), Member { config, addr });
        self.recorded.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Runs `fut` on the actor thread (for background work of the runtime).
    pub(crate) fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.arbiter.spawn(fut);
    }

    /// The actor of `server`, if it is configured and enabled.
    pub(crate) fn addr(&self, server: &str) -> Option<Addr<ServerActor>> {
        self.members().get(server).and_then(|m| m.addr.clone())
    }

    /// The actor replacing `server` once one is recorded: a replaced server has none while its
    /// old connection drains, so this waits that drain (`edit_drain`) plus the grace to close
    /// the old session at the longest.
    pub(crate) async fn replacement_addr(&self, server: &str) -> Option<Addr<ServerActor>> {
        let limit = self.settings.edit_drain + SHUTDOWN_GRACE;
        let mut recorded = self.recorded.subscribe();
        let wait = async {
            loop {
                if let Some(addr) = self.addr(server) {
                    return Some(addr);
                }
                recorded.changed().await.ok()?;
            }
        };
        tokio::time::timeout(limit, wait).await.ok().flatten()
    }

    /// The longest startup deadline among `servers` (zero for unknown ones).
    pub(crate) fn startup_deadline(&self, servers: &[&str]) -> std::time::Duration {
        let members = self.members();
        servers
            .iter()
            .filter_map(|s| members.get(*s))
            .map(|m| m.config.startup_timeout)
            .max()
            .unwrap_or_default()
    }

    /// The longest startup deadline of any configured server.
    pub(crate) fn longest_startup(&self) -> std::time::Duration {
        self.members()
            .values()
            .map(|m| m.config.startup_timeout)
            .max()
            .unwrap_or_default()
    }

    /// Every live actor.
    pub(crate) fn addrs(&self) -> Vec<Addr<ServerActor>> {
        self.members()
            .values()
            .filter_map(|m| m.addr.clone())
            .collect()
    }

    /// Makes the running set match `desired`: removed and changed servers are stopped first,
    /// then new and changed ones started; unchanged ones are left alone.
    pub(crate) async fn reconcile(&self, desired: &Config) -> Result<Reconciled, String> {
        let mut outcome = Reconciled::default();
        let mut stopping = Vec::new();
        {
            let mut members = self.members();
            let names: Vec<String> = members.keys().cloned().collect();
            for name in names {
                match desired.servers.get(&name) {
                    Some(cfg) if *cfg == members[&name].config => outcome.kept.push(name),
                    other => {
                        if let Some(member) = members.remove(&name) {
                            stopping.push((name.clone(), member, other.is_none()));
                        }
                    }
                }
            }
        }
        // Each stopping server on its own, together: one slow drain holds up only its server.
        let stops = stopping
            .into_iter()
            .map(|(name, member, removed)| async move {
                let replacement = desired.servers.get(&name).filter(|_| !removed);
                if let (Some(_), Some(config)) = (&member.addr, replacement) {
                    // Make before break: its entries stay until the new connection is up (or
                    // failed, or late), so an edit that changes nothing seen changes nothing.
                    self.publisher.do_send(Replacing {
                        name: name.clone(),
                        limit: self.settings.edit_drain
                            + config.startup_timeout
                            + REPLACEMENT_GRACE,
                    });
                    // The old client is published retired before its session closes: a call bound
                    // from now on waits for the new connection instead of reaching the closing one.
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.publisher.send(Flush)).await;
                }
                // Marks the actor stopped (no reconnect, no report) and takes its session.
                let session = match &member.addr {
                    Some(addr) => tokio::time::timeout(SHUTDOWN_GRACE, addr.send(Stop))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten(),
                    None => None,
                };
                if replacement.is_none() {
                    // A removed server's entries leave at once; its calls in flight still finish.
                    self.publisher.do_send(RemoveServer {
                        name: name.clone(),
                        cause: "no longer in the configuration".into(),
                    });
                }
                if let Some(session) = session {
                    close_session(&name, session, self.settings.edit_drain).await;
                }
                match replacement {
                    None => Ok::<_, String>(Stopped::Removed(name)),
                    Some(config) => {
                        self.start(config.clone(), member.addr.is_some())?;
                        Ok(Stopped::Restarted(name))
                    }
                }
            });
        for stopped in futures::future::join_all(stops).await {
            match stopped? {
                Stopped::Removed(name) => outcome.removed.push(name),
                Stopped::Restarted(name) => outcome.started.push(name),
            }
        }
        for (name, cfg) in &desired.servers {
            if outcome.kept.contains(name) || outcome.started.contains(name) {
                continue;
            }
            self.start(cfg.clone(), false)?;
            outcome.started.push(name.clone());
        }
        outcome.started.sort();
        Ok(outcome)
    }
}

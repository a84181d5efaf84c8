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
//! - the drain runs in the background: a reconciliation returns once the stopped actors are
//!   stopped, so the next edit (a removal, another server's change) applies at once. While a
//!   server drains it is *draining*, with what starts after it (the newest configuration's
//!   entry, or nothing): a later edit of that server changes only that, so one server never has
//!   two connections and the newest configuration is the one that starts;
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

/// A server whose old connection drains after an edit replaced or removed it.
struct Draining {
    /// What starts once the old session is closed (`None`: nothing, the server was removed).
    next: Option<ServerConfig>,
    /// Whether the old entries are kept for the one that starts (calls bound to the old
    /// connection wait for it): not once the server was removed meanwhile.
    replacing: bool,
}

/// The running servers and the draining ones; a name is in at most one of them.
#[derive(Default)]
struct Members {
    running: BTreeMap<String, Member>,
    draining: BTreeMap<String, Draining>,
}

/// A server a reconciliation stops.
struct Stopping {
    name: String,
    member: Member,
    /// Its entries stay for a replacement (make before break).
    kept: bool,
    /// The replacement's startup deadline.
    startup: std::time::Duration,
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
    members: Mutex<Members>,
    /// Bumped whenever an actor is recorded, for calls waiting for a replacement to start.
    recorded: tokio::sync::watch::Sender<u64>,
    /// Set when the runtime shuts down: a drain ending after it starts nothing.
    closing: std::sync::atomic::AtomicBool,
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
            members: Mutex::new(Members::default()),
            recorded: tokio::sync::watch::Sender::new(0),
            closing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The runtime's auth context.
    pub(crate) fn auth(&self) -> &AuthContext {
        &self.auth
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the actor of `config` (or reports it disabled) and records it.
    pub(crate) fn add(&self, config: ServerConfig) -> Result<(), String> {
        let member = self.launch(config, false)?;
        self.record(&mut self.members(), member);
        Ok(())
    }

    /// The transport connector of `config`, or why it cannot be made (an in-process server
    /// nobody registered).
    fn connector(
        &self,
        config: &ServerConfig,
    ) -> Result<Arc<dyn mcp_harness_transport::Connector>, String> {
        config
            .transport
            .connector(&config.name, &self.in_process, &self.auth)
    }

    /// Starts the actor of `config` (or reports it disabled); `replacing`: the server's
    /// previous actor was stopped for a config edit, and calls bound to its connections wait
    /// for this one's first connection.
    fn launch(&self, config: ServerConfig, replacing: bool) -> Result<Member, String> {
        let addr = if config.enabled && config.untrusted.is_none() {
            let connector = self.connector(&config)?;
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
            let (state, cause) = match (&config.untrusted, &config.unusable) {
                (Some(reason), _) => (
                    ServerState::Untrusted {
                        reason: reason.clone(),
                    },
                    reason.clone(),
                ),
                // It could not start: said as a failure, naming the variable to set (and
                // logged: a gateway's operator sees no command's error line).
                (None, Some(error)) => {
                    // Under the servers' target: a command for a person says it in its own line.
                    tracing::warn!(target: "mcp_harness_runtime::connection::server", server = %config.name, %error, "the server cannot start");
                    (
                        ServerState::Failed {
                            error: error.clone(),
                        },
                        error.clone(),
                    )
                }
                (None, None) => (
                    ServerState::Disabled,
                    "`enabled: false` in the config".into(),
                ),
            };
            let mut status = ServerStatus::new(&config.name, config.transport.kind(), state);
            // The LAST ERROR of a server that could not start is why.
            status.last_error = config.unusable.clone();
            self.publisher.do_send(ServerUpdate {
                status,
                catalog: None,
                client: None,
                cause,
            });
            None
        };
        Ok(Member { config, addr })
    }

    /// Records a started member (under the members lock, so no reconciliation sees the name
    /// neither running nor draining).
    fn record(&self, members: &mut Members, member: Member) {
        members.running.insert(member.config.name.clone(), member);
        self.recorded.send_modify(|n| *n += 1);
    }

    /// Runs `fut` on the actor thread (for background work of the runtime).
    pub(crate) fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        self.arbiter.spawn(fut);
    }

    /// The actor of `server`, if it is configured and enabled.
    pub(crate) fn addr(&self, server: &str) -> Option<Addr<ServerActor>> {
        self.members()
            .running
            .get(server)
            .and_then(|m| m.addr.clone())
    }

    /// The actor replacing `server` once one is recorded: a replaced server has none while its
    /// old connection drains, so this waits that drain (`edit_drain`) plus the grace to close
    /// the old session at the longest — `None` at once when nothing will start (the server
    /// was removed meanwhile, or is disabled).
    pub(crate) async fn replacement_addr(&self, server: &str) -> Option<Addr<ServerActor>> {
        let limit = self.settings.edit_drain + SHUTDOWN_GRACE;
        let mut recorded = self.recorded.subscribe();
        let wait = async {
            loop {
                {
                    let members = self.members();
                    if let Some(member) = members.running.get(server) {
                        return member.addr.clone();
                    }
                    if members
                        .draining
                        .get(server)
                        .is_none_or(|d| d.next.is_none())
                    {
                        return None;
                    }
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
            .filter_map(|s| members.configured(s))
            .map(|c| c.startup_timeout)
            .max()
            .unwrap_or_default()
    }

    /// The longest startup deadline of any configured server.
    pub(crate) fn longest_startup(&self) -> std::time::Duration {
        let members = self.members();
        let running = members.running.values().map(|m| &m.config);
        let next = members.draining.values().filter_map(|d| d.next.as_ref());
        running
            .chain(next)
            .map(|c| c.startup_timeout)
            .max()
            .unwrap_or_default()
    }

    /// Every live actor.
    pub(crate) fn addrs(&self) -> Vec<Addr<ServerActor>> {
        self.members()
            .running
            .values()
            .filter_map(|m| m.addr.clone())
            .collect()
    }

    /// Whether `server` is configured (running, disabled, or starting once drained): not once a
    /// later edit removed it.
    pub(crate) fn is_configured(&self, server: &str) -> bool {
        self.members().configured(server).is_some()
    }

    /// The servers draining now that start again once drained.
    pub(crate) fn draining(&self) -> Vec<String> {
        let members = self.members();
        let next = members.draining.iter().filter(|(_, d)| d.next.is_some());
        next.map(|(name, _)| name.clone()).collect()
    }

    /// How long until every server draining now has closed its old connection, at the longest
    /// (zero when none drains).
    pub(crate) fn drain_left(&self) -> std::time::Duration {
        match self.members().draining.is_empty() {
            true => std::time::Duration::ZERO,
            false => self.settings.edit_drain + SHUTDOWN_GRACE,
        }
    }

    /// Makes the running set match `desired`: removed and changed servers are stopped (their
    /// old connections drain in the background, after which a changed one starts again), new
    /// ones started; unchanged ones are left alone. Refused, changing nothing, when a server of
    /// `desired` cannot be started at all.
    pub(crate) async fn reconcile(
        self: &Arc<Self>,
        desired: &Config,
    ) -> Result<Reconciled, String> {
        let mut outcome = Reconciled::default();
        let mut stopping = Vec::new();
        mcp_harness_transport::withhold_env(desired.secret_env_names());
        {
            let mut members = self.members();
            for (name, config) in &desired.servers {
                let unchanged = members
                    .running
                    .get(name)
                    .is_some_and(|m| m.config == *config);
                if !unchanged && config.enabled && config.untrusted.is_none() {
                    self.connector(config)?;
                }
            }
            let Members { running, draining } = &mut *members;
            // A draining server starts as the newest configuration says, once drained.
            for (name, drain) in draining.iter_mut() {
                let next = desired.servers.get(name).cloned();
                if drain.next == next {
                    continue; // untouched by this edit
                }
                if drain.next.is_some() && next.is_none() {
                    drain.replacing = false;
                    self.publisher.do_send(RemoveServer {
                        name: name.clone(),
                        cause: "no longer in the configuration".into(),
                    });
                }
                match next {
                    Some(_) => outcome.started.push(name.clone()),
                    None => outcome.removed.push(name.clone()),
                }
                drain.next = next;
            }
            let names: Vec<String> = running.keys().cloned().collect();
            for name in names {
                match desired.servers.get(&name) {
                    Some(cfg) if *cfg == running[&name].config => outcome.kept.push(name),
                    next => {
                        let member = running.remove(&name).expect("listed above");
                        let kept = member.addr.is_some() && next.is_some();
                        let startup = next.map_or(Default::default(), |c| c.startup_timeout);
                        match next {
                            Some(_) => outcome.started.push(name.clone()),
                            None => outcome.removed.push(name.clone()),
                        }
                        // Draining from now on: a call waiting for the replacement and the
                        // next edit see it (the actor is stopped below).
                        draining.insert(
                            name.clone(),
                            Draining {
                                next: next.cloned(),
                                replacing: kept,
                            },
                        );
                        stopping.push(Stopping {
                            name,
                            member,
                            kept,
                            startup,
                        });
                    }
                }
            }
            for (name, cfg) in &desired.servers {
                if members.running.contains_key(name) || members.draining.contains_key(name) {
                    continue;
                }
                let member = self.launch(cfg.clone(), false)?;
                self.record(&mut members, member);
                outcome.started.push(name.clone());
            }
            // Waiters for a replacement that will not come (removed) stop waiting.
            self.recorded.send_modify(|n| *n += 1);
        }
        // Each stopping server on its own, together: one slow stop holds up only its server.
        let stops = stopping.into_iter().map(|stop| self.stop(stop));
        futures::future::join_all(stops).await;
        outcome.started.sort();
        outcome.removed.sort();
        Ok(outcome)
    }

    /// Stops `stop`'s actor and takes its session; the session drains and closes in the
    /// background, after which what the configuration says by then starts.
    async fn stop(self: &Arc<Self>, stop: Stopping) {
        let Stopping {
            name,
            member,
            kept,
            startup,
        } = stop;
        if kept {
            // Make before break: its entries stay until the new connection is up (or failed,
            // or late), so an edit that changes nothing seen changes nothing.
            self.publisher.do_send(Replacing {
                name: name.clone(),
                limit: self.settings.edit_drain + startup + REPLACEMENT_GRACE,
            });
            // The old client is published retired before its session closes: a call bound from
            // now on waits for the new connection instead of reaching the closing one.
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
        if !kept
            && self
                .members()
                .draining
                .get(&name)
                .is_some_and(|d| d.next.is_none())
        {
            // A removed server's entries leave at once; its calls in flight still finish. The
            // removal is published before the session starts closing: a call bound to the
            // catalog before it is refused as stale, never written to a closed connection
            // (the publisher may hold an update back for its batch window).
            self.publisher.do_send(RemoveServer {
                name: name.clone(),
                cause: "no longer in the configuration".into(),
            });
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.publisher.send(Flush)).await;
        }
        let registry = Arc::clone(self);
        self.arbiter.spawn(async move {
            if let Some(session) = session {
                close_session(&name, session, registry.settings.edit_drain).await;
            }
            registry.drained(&name);
        });
    }

    /// The runtime is shutting down: a drain that ends from now on starts nothing.
    pub(crate) fn close(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits, `limit` at the longest, until every old connection draining now has closed
    /// (shutdown closes them as it closes the running ones, instead of dropping them with the
    /// actor thread).
    pub(crate) async fn drains_closed(&self, limit: std::time::Duration) {
        let mut recorded = self.recorded.subscribe();
        let wait = async {
            while !self.members().draining.is_empty() {
                if recorded.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            let left: Vec<String> = self.members().draining.keys().cloned().collect();
            tracing::warn!(servers = ?left, "closing the old connections of servers still draining after a config edit, without waiting further");
        }
    }

    /// `server`'s old connection is closed: what the configuration says now starts.
    fn drained(&self, server: &str) {
        let mut members = self.members();
        let Some(Draining { next, replacing }) = members.draining.remove(server) else {
            return;
        };
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            drop(members);
            self.recorded.send_modify(|n| *n += 1);
            return;
        }
        let Some(config) = next else {
            self.recorded.send_modify(|n| *n += 1);
            return;
        };
        match self.launch(config, replacing) {
            Ok(member) => self.record(&mut members, member),
            Err(e) => {
                // Checked when the edit was applied; said rather than lost.
                tracing::error!(server = %server, error = %e, "the server could not be started again after its config edit");
                self.recorded.send_modify(|n| *n += 1);
            }
        }
    }
}

impl Members {
    /// `server`'s configuration: the running one, or the one starting after its drain.
    fn configured(&self, server: &str) -> Option<&ServerConfig> {
        match self.running.get(server) {
            Some(member) => Some(&member.config),
            None => self.draining.get(server).and_then(|d| d.next.as_ref()),
        }
    }
}

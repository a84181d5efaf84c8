//! One supervised actor per configured server. It owns the server's connection state — one
//! `Phase` at a time (`server/phase.rs` names the states and their transitions) — with the
//! current catalog generation, and reports every state change and catalog change to the
//! publisher.
//!
//! Invariants:
//! - every connection attempt gets a new epoch; events, listings and closures from an older epoch
//!   are ignored, so an old connection can never overwrite the state of a newer one;
//! - the status the publisher gets is derived from the phase when it is reported, never kept
//!   beside it; what outlives a phase (since when, the last error, attempts in a row, the
//!   server's identity) is the `Record`;
//! - when the session ends, the server is reported failed (with the stderr tail for stdio), its
//!   catalog leaves the next snapshot and its cache entries are dropped; stdio servers are not
//!   restarted in a loop ([`Restart`] is explicit, and a call bound to a stdio connection whose
//!   process exited may restart it once: `ReviveForCall`, in `revival.rs`);
//! - shutdown cancels the state's timers before it closes the session (R6).
//!
//! The stages live in child modules: `attempt` (connecting), `listings` (applying listings
//! to a live connection), `timers` (backoff, health check, credentials watch) and `revival`
//! (a restart for calls).

mod attempt;
mod listings;
mod phase;
mod revival;
mod timers;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use mcp_harness_catalog::graph::{self, Trigger};
use mcp_harness_catalog::sanitize::{MetadataLimits, clean_instructions};
use mcp_harness_catalog::{PageLimits, ServerCatalog, ServerState, ServerStatus};
use mcp_harness_policy::ToolFilter;
use mcp_harness_transport::{Callbacks, Connector, ServerEvent, Session, TransportError};
use rmcp::model::ProtocolVersion;
use tokio::sync::broadcast;

use crate::config::ServerConfig;
use crate::connection::cache::{ListingCache, opts_out};
use crate::connection::io_threads::IoPlace;
use crate::connection::listing::declared_kinds;
use crate::connection::progress::ProgressRoutes;
use crate::connection::refresh::Refreshes;
use crate::connection::supervision::{ConnectQueues, ReconnectPolicy};
use crate::snapshot::publisher::{Publisher, ServerClient, ServerUpdate};
pub(crate) use phase::Revival;
use phase::{Connecting, Live, Pace, Phase, Revive, Run};
pub(crate) use revival::ReviveForCall;

/// How often a needs-auth server's stored credentials are checked (a file stat, no network).
pub(crate) const CREDENTIALS_POLL: Duration = Duration::from_secs(1);
/// How long runtime shutdown waits for one server to close before moving on.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A `notifications/resources/updated` from a server, as the runtime broadcasts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdate {
    /// The server that sent it.
    pub server: String,
    /// The resource that changed.
    pub uri: String,
}

/// A `notifications/message` (log output) from a server, as the runtime broadcasts it.
#[derive(Debug, Clone)]
pub struct ServerLog {
    /// The server that sent it.
    pub server: String,
    /// The notification as the server sent it.
    #[allow(deprecated)] // logging: every protocol before 2026-07-28
    pub params: rmcp::model::LoggingMessageNotificationParam,
    /// When the harness received it: a listener that attributes a line to a call judges by
    /// the calls in flight then, not when it gets to the line.
    pub received: std::time::Instant,
}

/// A SEP-1686 `notifications/tasks/status` (MCP 2025-11-25) from a server, as the runtime
/// broadcasts it: `task_id` and `status` are the params' own strings, `params` the whole
/// notification params untouched (the task: `statusMessage`, `createdAt`, `ttl`, `_meta`…).
#[derive(Debug, Clone)]
pub struct TaskStatusUpdate {
    /// The server that sent it (and runs the task).
    pub server: String,
    /// The server's own id of the task.
    pub task_id: String,
    /// The task's status (`working`, `input_required`, `completed`, `failed`, `cancelled`).
    pub status: String,
    /// The notification's params as the server sent them.
    pub params: rmcp::model::JsonObject,
}

impl TaskStatusUpdate {
    /// Whether the status is terminal (`completed`, `failed` or `cancelled`): no other
    /// notification follows for the task.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// Shared settings every server actor is started with.
#[derive(Clone)]
pub(crate) struct ServerSettings {
    pub protocol_version: Option<ProtocolVersion>,
    pub limits: PageLimits,
    pub metadata: MetadataLimits,
    pub cache: Arc<ListingCache>,
    pub resource_updates: broadcast::Sender<ResourceUpdate>,
    /// Where servers' log notifications are broadcast (no receiver: dropped).
    pub logs: broadcast::Sender<ServerLog>,
    /// Where servers' SEP-1686 task status notifications are broadcast (no receiver: dropped).
    pub task_statuses: broadcast::Sender<TaskStatusUpdate>,
    /// The embedder's answers to elicitation, sampling and roots requests.
    pub callbacks: Option<Callbacks>,
    /// Where progress of in-flight requests is delivered.
    pub progress: Arc<ProgressRoutes>,
    /// Reconnect backoff and health checks for remote servers.
    pub reconnect: ReconnectPolicy,
    /// The local and remote connection queues.
    pub queues: ConnectQueues,
    /// Where connection attempts run (spawn, initialize, the session's message loop).
    pub io: IoPlace,
    /// Least time between two listings of one kind caused by notifications.
    pub relist_window: std::time::Duration,
    /// How long a config edit lets the calls in flight on a removed or replaced server's
    /// connection run before closing it.
    pub edit_drain: std::time::Duration,
}

/// A new connection epoch, unique in the process: a server a config edit replaced runs in a
/// new actor, whose connections must not share an epoch with the old actor's (a call bound to
/// the old, closed connection would pass for one on the current connection).
pub(super) fn next_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

static NEXT_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A notification from the server of connection `epoch`.
#[derive(Message)]
#[rtype(result = "()")]
struct Notified {
    epoch: u64,
    event: ServerEvent,
}

/// Stay down: the actor is marked stopped (it neither reconnects nor reports again) and hands
/// its session, if it has one, to the sender to close ([`close_session`]) — for the runtime's
/// shutdown, or a config edit that removed or replaced the server. Dropping the last address
/// then ends the actor.
#[derive(Message)]
#[rtype(result = "Option<Session>")]
pub(crate) struct Stop;

/// Closes a stopped actor's `session` once the requests already sent on it are answered,
/// `drain` at the longest (zero: at once).
pub(crate) async fn close_session(server: &str, session: Session, drain: Duration) {
    let waiting = session.unanswered();
    if !drain.is_zero() && waiting > 0 {
        tracing::info!(server = %server, requests = waiting, "waiting up to {drain:?} for the requests in flight before closing the connection");
        let cut = session.drain(drain).await;
        if cut > 0 {
            tracing::warn!(server = %server, requests = cut, "closing the connection with requests still unanswered after {drain:?}");
        }
    }
    session.shutdown().await;
}

/// Close the current session (if any) and connect again with a new epoch.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Restart;

/// What the published status keeps across phases; the state itself and the time of the next
/// retry are derived from the phase.
struct Record {
    /// When the public state last changed.
    since: SystemTime,
    /// The most recent error, kept after recovery for diagnostics.
    last_error: Option<String>,
    /// Reconnect attempts made in a row (0 once connected, or after a restart).
    attempts: u32,
    /// When the live connection began, and the attempts it took: a connection lost before
    /// `stable_after` goes on from them (see [`ReconnectPolicy::stable_after`](crate::ReconnectPolicy::stable_after)).
    connected: Option<(std::time::Instant, u32)>,
    protocol_version: Option<String>,
    server_name: Option<String>,
    server_version: Option<String>,
    instructions: Option<String>,
}

/// The server actor.
pub(crate) struct ServerActor {
    config: Arc<ServerConfig>,
    connector: Arc<dyn Connector>,
    publisher: Addr<Publisher>,
    settings: ServerSettings,
    filter: ToolFilter,
    /// The current connection attempt's number.
    epoch: u64,
    phase: Phase,
    record: Record,
    /// The protocol version to ask for after the server refused `initialize` itself (never
    /// after a later failure, such as the first listing); dropped again when that handshake
    /// is refused too, so the next attempt opens with `initialize` (R8).
    fallback: Option<ProtocolVersion>,
    /// The last restart for calls, kept across phases: it answers calls bound to a connection
    /// older than its crash.
    revived: Option<revival::Revived>,
}

impl ServerActor {
    pub(crate) fn new(
        config: Arc<ServerConfig>,
        connector: Arc<dyn Connector>,
        publisher: Addr<Publisher>,
        settings: ServerSettings,
    ) -> Self {
        let filter = ToolFilter {
            include: config.include_tools.clone(),
            exclude: config.exclude_tools.clone(),
        };
        Self {
            config,
            connector,
            publisher,
            settings,
            filter,
            epoch: 0,
            // Pending until `started` makes the first attempt.
            phase: Phase::Connecting(Connecting::new(Pace::Recovering, None)),
            record: Record {
                since: SystemTime::now(),
                last_error: None,
                attempts: 0,
                connected: None,
                protocol_version: None,
                server_name: None,
                server_version: None,
                instructions: None,
            },
            fallback: None,
            revived: None,
        }
    }

    /// The actor of a server a config edit is replacing: its first run of attempts is the
    /// restart that calls bound to the replaced actor's connections wait for (as for a crashed
    /// process, `revival.rs`).
    pub(crate) fn replacing(mut self) -> Self {
        let revive = Revive {
            // Every connection made so far, the replaced ones among them.
            origin: NEXT_EPOCH.load(std::sync::atomic::Ordering::Relaxed),
            replaced: true,
            waiters: Vec::new(),
        };
        self.phase = Phase::Connecting(Connecting::new(Pace::Recovering, Some(revive)));
        self
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    /// The status the publisher gets, derived from the phase (`None` once stopped).
    fn public_status(&self) -> Option<ServerStatus> {
        let state = self.phase.public_state()?;
        let record = &self.record;
        Some(ServerStatus {
            next_retry: self.phase.next_retry(),
            since: record.since,
            last_error: record.last_error.clone(),
            protocol_version: record.protocol_version.clone(),
            server_name: record.server_name.clone(),
            server_version: record.server_version.clone(),
            instructions: record.instructions.clone(),
            attempts: record.attempts,
            ..ServerStatus::new(&self.config.name, self.connector.kind(), state)
        })
    }

    /// Sends the current status (and catalog and client, when live) to the publisher.
    fn report(&self, cause: impl Into<String>) {
        let Some(mut status) = self.public_status() else {
            return;
        };
        let live = match &self.phase {
            Phase::Live(live) => Some(live),
            _ => None,
        };
        let client = live.map(|live| ServerClient {
            peer: live.session.peer().clone(),
            epoch: self.epoch,
            tools_covered: live.tools_covered,
            tool_timeout: self.config.tool_timeout,
            wire: live.session.wire().clone(),
            exit: live.session.exit_report(),
            retired: false,
            express: live.session.express().cloned(),
            sends: live.session.sends(),
        });
        // Every printer of a status (tables, JSON, watch) reads this copy: redacted once here.
        status.last_error = status
            .last_error
            .map(|e| mcp_harness_transport::redact::text(&e));
        if let ServerState::Failed { error: text } | ServerState::NeedsAuth { reason: text } =
            &mut status.state
        {
            *text = mcp_harness_transport::redact::text(text);
        }
        self.publisher.do_send(ServerUpdate {
            status,
            catalog: live.map(|live| Arc::new(live.catalog.clone())),
            client,
            cause: cause.into(),
        });
    }

    /// Records that the public state changed (to the one the phase now derives): since now,
    /// and a failure's error as the last error.
    fn mark_state(&mut self) {
        if let Some(ServerState::Failed { error } | ServerState::NeedsAuth { reason: error }) =
            self.phase.public_state()
        {
            self.record.last_error = Some(error);
        }
        self.record.since = SystemTime::now();
    }

    /// Leaves the current phase, cancelling its timer and closing its session in the
    /// background; returns the run of attempts in progress (from `Connecting` or `BackingOff`),
    /// which a new attempt carries on. The phase is `Stopped` until the caller enters the next.
    fn leave(&mut self, ctx: &mut Context<Self>) -> Option<Connecting> {
        let cancel = |ctx: &mut Context<Self>, handle: Option<SpawnHandle>| {
            if let Some(handle) = handle {
                ctx.cancel_future(handle);
            }
        };
        match std::mem::replace(&mut self.phase, Phase::Stopped) {
            Phase::Connecting(mut connecting) => {
                cancel(ctx, connecting.attempt.take());
                Some(connecting)
            }
            Phase::BackingOff(backing_off) => {
                cancel(ctx, backing_off.retry);
                Some(Connecting {
                    run: backing_off.run,
                    refused_initialize: None,
                    failure: backing_off.failure,
                    attempt: None,
                })
            }
            Phase::Live(live) => {
                cancel(ctx, live.health);
                actix::spawn(live.session.shutdown());
                None
            }
            Phase::NeedsAuth { watch, .. } => {
                cancel(ctx, watch);
                None
            }
            Phase::Failed { .. } | Phase::Exited { .. } | Phase::Stopped => None,
        }
    }

    /// Any state but `Stopped` → `Connecting` at the startup pace: `startupTimeoutSec` from
    /// now for all attempts together. A restart for calls in flight goes on with it.
    fn restart(&mut self, ctx: &mut Context<Self>) {
        let deadline = tokio::time::Instant::now() + self.config.startup_timeout;
        self.record.attempts = 0;
        let carried = self.leave(ctx);
        let (revival, refused_initialize) = carried
            .map(|c| (c.run.revival, c.refused_initialize))
            .unwrap_or_default();
        let mut connecting = Connecting::new(Pace::Startup { deadline }, revival);
        connecting.refused_initialize = refused_initialize;
        self.begin_attempt(connecting, ctx);
    }

    /// `BackingOff` → `Connecting`: the backoff timer fired.
    fn retry_after_backoff(&mut self, ctx: &mut Context<Self>) {
        let Phase::BackingOff(backing_off) = &mut self.phase else {
            return;
        };
        // It fired: nothing left to cancel.
        backing_off.retry = None;
        self.attempt_again(ctx);
    }

    /// `Connecting` → `Connecting`: the server refused `initialize` (`refusal`); the next
    /// attempt opens with `server/discover` (the fallback is already set).
    fn retry_with_discover(&mut self, refusal: String, ctx: &mut Context<Self>) {
        if let Phase::Connecting(connecting) = &mut self.phase {
            connecting.refused_initialize = Some(refusal);
        }
        self.attempt_again(ctx);
    }

    /// `NeedsAuth` → `Connecting`: the stored credentials changed.
    fn reconnect_after_login(&mut self, ctx: &mut Context<Self>) {
        self.attempt_again(ctx);
    }

    /// → `Connecting`: the run of attempts in progress goes on, or a recovering one starts.
    fn attempt_again(&mut self, ctx: &mut Context<Self>) {
        let connecting = self
            .leave(ctx)
            .unwrap_or_else(|| Connecting::new(Pace::Recovering, None));
        self.begin_attempt(connecting, ctx);
    }

    /// `Connecting` → `Live`: the attempt of the current epoch connected and listed.
    fn go_live(&mut self, attempted: attempt::Attempted, ctx: &mut Context<Self>) {
        let attempt::Attempted {
            mut session,
            listed,
            partial,
            tools_covered,
        } = attempted;
        let Some(connecting) = self.leave(ctx) else {
            return;
        };
        let epoch = self.epoch;
        let info = session.info().clone();
        let closed = session.take_closed();
        let declared = declared_kinds(&info);
        self.phase = Phase::Live(Box::new(Live {
            session,
            catalog: ServerCatalog {
                naming: self.config.names,
                ..ServerCatalog::default()
            },
            refreshes: Refreshes::new(self.settings.relist_window),
            declared: declared.clone(),
            cacheable: !opts_out(&info),
            health: None,
            missed_pings: 0,
            tools_covered,
        }));
        for (kind, l) in listed {
            self.apply(kind, 0, Arc::new(l));
        }
        self.rebuild_derived(&BTreeSet::from(graph::DERIVED), &declared, false, ctx);
        // A tools/list_changed that came while the first listing ran may postdate it: listed
        // again, as any notification of a live connection is.
        if let Phase::Live(live) = &self.phase
            && live.session.wire().tools_changed() > live.tools_covered
        {
            self.on_trigger(Trigger::ToolsListChanged, ctx);
        }
        self.record.protocol_version = Some(info.protocol_version.to_string());
        self.record.server_name = info.server_name.clone();
        self.record.server_version = info.server_version.clone();
        self.record.instructions = info
            .instructions
            .as_deref()
            .map(|i| clean_instructions(i, &self.settings.metadata));
        if let Some(closed) = closed {
            ctx.spawn(
                closed
                    .into_actor(self)
                    .map(move |reason, act, ctx| act.lose_connection(epoch, reason, ctx)),
            );
        }
        self.record.connected = Some((std::time::Instant::now(), self.record.attempts));
        self.record.attempts = 0;
        if !partial.is_empty() {
            let why = partial.join("; ");
            tracing::warn!(server = %self.name(), error = %why, "connected with a kind unlisted");
            self.record.last_error = Some(why);
        }
        if self.connector.is_remote() {
            let every = self.settings.reconnect.health_interval;
            let health = ctx.run_interval(every, |act, ctx| act.health_check(ctx));
            if let Phase::Live(live) = &mut self.phase {
                live.health = Some(health);
            }
        }
        self.mark_state();
        if let Phase::Live(live) = &self.phase {
            tracing::info!(server = %self.name(), tools = live.catalog.tools.len(), "connected");
        }
        self.report("initial listing");
        self.finish_revival(connecting.run.revival, Ok(epoch));
    }

    /// `Connecting` → `NeedsAuth` or `Failed`: the run of attempts ended without a connection.
    fn give_up(&mut self, run: Run, message: String, needs_auth: bool, ctx: &mut Context<Self>) {
        self.phase = if needs_auth {
            Phase::NeedsAuth {
                reason: message.clone(),
                watch: None,
            }
        } else {
            Phase::Failed {
                error: message.clone(),
            }
        };
        self.mark_state();
        self.report("connect failed");
        self.finish_revival(run.revival, Err(message));
        if needs_auth {
            self.watch_credentials(ctx);
        }
    }

    /// `Live` → `BackingOff` (remote), `Exited` (stdio) or `Failed`: the connection of `epoch`
    /// ended (`reason`).
    fn lose_connection(&mut self, epoch: u64, reason: String, ctx: &mut Context<Self>) {
        let Phase::Live(live) = &self.phase else {
            return;
        };
        if epoch != self.epoch {
            return;
        }
        let error = TransportError::Closed {
            reason,
            stderr_tail: live.session.stderr_tail(),
        };
        tracing::warn!(server = %self.name(), error = %error, "connection lost");
        let _ = self.leave(ctx);
        self.settings.cache.drop_server(&self.config.name);
        let message = error.to_string();
        if self.connector.is_remote() {
            // A connection that did not last is one more attempt of the run that made it.
            if let Some((at, attempts)) = self.record.connected.take()
                && at.elapsed() < self.settings.reconnect.stable_after
            {
                self.record.attempts = attempts;
            }
            let run = Run {
                pace: Pace::Recovering,
                revival: None,
            };
            self.back_off(run, &message, true, ctx);
            return;
        }
        // Only a stdio process that went away may be restarted by a call (R7).
        self.phase = if self.connector.kind() == "stdio" {
            Phase::Exited { error: message }
        } else {
            Phase::Failed { error: message }
        };
        self.mark_state();
        self.report("connection lost");
    }

    /// Any state → `Stopped`: timers first (a pending reconnect must never bring back the old
    /// configuration), then calls waiting for a restart are answered and the cache entries
    /// dropped; returns the session for the caller to close.
    fn stop(&mut self, ctx: &mut Context<Self>) -> Option<Session> {
        let cancel = |ctx: &mut Context<Self>, handle: Option<SpawnHandle>| {
            if let Some(handle) = handle {
                ctx.cancel_future(handle);
            }
        };
        let (session, revival) = match std::mem::replace(&mut self.phase, Phase::Stopped) {
            Phase::Live(live) => {
                cancel(ctx, live.health);
                (Some(live.session), None)
            }
            Phase::BackingOff(backing_off) => {
                cancel(ctx, backing_off.retry);
                (None, backing_off.run.revival)
            }
            Phase::NeedsAuth { watch, .. } => {
                cancel(ctx, watch);
                (None, None)
            }
            Phase::Connecting(connecting) => {
                cancel(ctx, connecting.attempt);
                (None, connecting.run.revival)
            }
            Phase::Failed { .. } | Phase::Exited { .. } | Phase::Stopped => (None, None),
        };
        self.finish_revival(
            revival,
            Err("the server was stopped (removed, replaced or shut down)".into()),
        );
        self.settings.cache.drop_server(&self.config.name);
        session
    }
}

impl Actor for ServerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if !matches!(self.phase, Phase::Stopped) {
            self.restart(ctx);
        }
    }
}

impl Supervised for ServerActor {
    fn restarting(&mut self, ctx: &mut Self::Context) {
        tracing::info!(server = %self.name(), "server actor restarting");
        if matches!(self.phase, Phase::Live(_)) {
            let _ = self.leave(ctx);
            // `started` follows at once and makes the next attempt.
            self.phase = Phase::Connecting(Connecting::new(Pace::Recovering, None));
        }
        self.settings.cache.drop_server(&self.config.name);
    }
}

impl Handler<Notified> for ServerActor {
    type Result = ();

    fn handle(&mut self, msg: Notified, ctx: &mut Self::Context) {
        if msg.epoch != self.epoch {
            return;
        }
        match msg.event {
            ServerEvent::ToolsListChanged => self.on_trigger(Trigger::ToolsListChanged, ctx),
            ServerEvent::PromptsListChanged => self.on_trigger(Trigger::PromptsListChanged, ctx),
            ServerEvent::ResourcesListChanged => {
                self.on_trigger(Trigger::ResourcesListChanged, ctx)
            }
            ServerEvent::ResourceUpdated { uri } => {
                tracing::debug!(server = %self.name(), %uri, "resource updated");
                // No receivers is fine: nobody subscribed through the runtime.
                let _ = self.settings.resource_updates.send(ResourceUpdate {
                    server: self.config.name.clone(),
                    uri,
                });
            }
            ServerEvent::Progress(p) => {
                tracing::trace!(server = %self.name(), progress = p.progress, "progress");
            }
            #[allow(deprecated)]
            ServerEvent::Log(log) => {
                // Broadcast by the session's event sink (`attempt.rs`); none come this way.
                tracing::debug!(target: "mcp_harness::server_log", server = %self.name(), level = ?log.level, "{}", log.data);
            }
            ServerEvent::TaskStatus(_) => {
                // Broadcast by the session's event sink (`attempt.rs`); none come this way.
            }
        }
    }
}

impl Handler<Restart> for ServerActor {
    type Result = ();

    fn handle(&mut self, _: Restart, ctx: &mut Self::Context) {
        if matches!(self.phase, Phase::Stopped) {
            return;
        }
        tracing::info!(server = %self.name(), "restart requested");
        self.restart(ctx);
    }
}

impl Handler<Stop> for ServerActor {
    type Result = Option<Session>;

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) -> Self::Result {
        self.stop(ctx)
    }
}

/// Whether a failed handshake means the server is unavailable for now (it answered HTTP 5xx or
/// 429) rather than that it refused the handshake: such a server is retried as it is, never
/// switched to another protocol era. The transport reports the status as a typed error.
fn unavailable(e: &TransportError) -> bool {
    e.unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_failure(message: &str) -> TransportError {
        TransportError::Initialize {
            message: message.into(),
            auth_required: false,
            stderr_tail: None,
        }
    }

    #[test]
    fn only_5xx_and_429_count_as_unavailable() {
        let answered = |status: u16| TransportError::Unavailable {
            status,
            message: format!("HTTP {status}"),
        };
        assert!(unavailable(&answered(503)));
        assert!(unavailable(&answered(429)));
        // The status is typed: a refusal's text is never read for one.
        assert!(!unavailable(&init_failure(
            "error: HTTP 503, when send initialize request"
        )));
        assert!(!unavailable(&init_failure("unsupported protocol version")));
    }
}

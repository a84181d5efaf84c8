//! One supervised actor per configured server. It owns the server's transport session and its
//! current catalog generation, and reports every state change and catalog change to the
//! publisher.
//!
//! Invariants:
//! - every connection attempt gets a new epoch; events, listings and closures from an older epoch
//!   are ignored, so an old connection can never overwrite the state of a newer one;
//! - what a notification refreshes is decided by the catalog's dependency graph
//!   ([`mcp_harness_catalog::graph::plan`]), never by code here;
//! - per kind, one listing is in flight at a time with one trailing listing, two listings start
//!   at least the relist window apart (`RuntimeBuilder::relist_window`), and only a listing
//!   newer than the last applied one is applied ([`Refreshes`]), so interleaved notifications
//!   can never leave a stale last write and a flood costs one listing per window;
//! - a listing is complete or an error; a failed re-listing keeps the previous generation and
//!   records the error (two-phase sync);
//! - derived kinds (commands) are rebuilt from the listing cache after any of their inputs
//!   change; an input missing from the cache (evicted, or the server opted out of caching) is
//!   fetched first;
//! - when the session ends, the server is reported failed (with the stderr tail for stdio), its
//!   catalog leaves the next snapshot and its cache entries are dropped; stdio servers are not
//!   restarted in a loop ([`Restart`] is explicit, and a call bound to a stdio connection whose
//!   process exited may restart it once: `ReviveForCall` — one restart per exit, shared by every
//!   call that asks, none after a restart that failed).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use mcp_harness_catalog::graph::{self, Trigger};
use mcp_harness_catalog::sanitize::{MetadataLimits, clean_instructions};
use mcp_harness_catalog::{Kind, PageLimits, ServerCatalog, ServerState, ServerStatus};
use mcp_harness_policy::ToolFilter;
use mcp_harness_transport::Callbacks;
use mcp_harness_transport::{
    ConnectOptions, Connector, EventSink, HarnessClient, ServerEvent, Session, TransportError,
};
use rmcp::model::{ProgressNotificationParam, ProgressToken, ProtocolVersion};
use tokio::sync::broadcast;

use crate::cache::{ListingCache, opts_out};
use crate::config::ServerConfig;
use crate::io_threads::IoPlace;
use crate::listing::{Listed, declared_kinds, list_kind};
use crate::publisher::{Publisher, ServerClient, ServerUpdate};
use crate::refresh::Refreshes;
use crate::supervision::{ConnectQueues, ReconnectPolicy, Slot};

/// A stable per-server number, so reconnect jitter differs between servers.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The cause of a listing made because a derived kind needed an input the cache no longer had.
const REREAD: &str = "re-reading an input of a derived kind";
/// How often a needs-auth server's stored credentials are checked (a file stat, no network).
pub const CREDENTIALS_POLL: Duration = Duration::from_secs(1);

/// A `notifications/resources/updated` from a server, as the runtime broadcasts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdate {
    pub server: String,
    pub uri: String,
}

/// Shared settings every server actor is started with.
#[derive(Clone)]
pub struct ServerSettings {
    pub protocol_version: Option<ProtocolVersion>,
    pub limits: PageLimits,
    pub metadata: MetadataLimits,
    pub cache: Arc<ListingCache>,
    pub resource_updates: broadcast::Sender<ResourceUpdate>,
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
}

/// Progress notifications of in-flight requests, routed by (server, connection epoch, progress
/// token) straight from the session to the caller (no actor hop).
///
/// Invariants: a route exists from just after its request is handed to the transport until
/// every progress notification the wire tap saw for it has been handled (see
/// `PreparedCall::call_with` and [`ProgressRoute::settle`]); progress that arrives before
/// its route exists (a fast server can answer before the caller registered) is held, at most
/// [`EARLY_KEEP`] notifications for at most [`EARLY_TTL`], and handed over when the route is
/// registered; each route forwards only increasing `progress` values, so a notification
/// handled out of order (rmcp handles each on a task of its own) is dropped instead of moving
/// the caller's progress backwards. The epoch keeps a new connection's reused tokens apart from
/// an old connection's late progress.
#[derive(Default)]
pub struct ProgressRoutes {
    state: std::sync::Mutex<RoutesState>,
}

/// Most progress notifications held for requests whose route does not exist yet.
pub const EARLY_KEEP: usize = 64;
/// How long such a notification is held.
pub const EARLY_TTL: Duration = Duration::from_secs(5);

type RouteKey = (String, u64, String);

#[derive(Default)]
struct RoutesState {
    routes: HashMap<RouteKey, Route>,
    early: VecDeque<(RouteKey, std::time::Instant, ProgressNotificationParam)>,
}

struct Route {
    tx: tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>,
    last: Option<f64>,
    /// How many notifications for this route were handled (forwarded or dropped as out of
    /// order), held ones included.
    handled: tokio::sync::watch::Sender<u64>,
}

impl Route {
    fn forward(&mut self, server: &str, progress: ProgressNotificationParam) -> bool {
        self.handled.send_modify(|n| *n += 1);
        if self.last.is_some_and(|last| progress.progress <= last) {
            tracing::trace!(
                server,
                progress = progress.progress,
                "progress out of order, dropped"
            );
            return false;
        }
        self.last = Some(progress.progress);
        self.tx.send(progress).is_ok()
    }
}

impl ProgressRoutes {
    fn lock(&self) -> std::sync::MutexGuard<'_, RoutesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes progress for `token` of `server`'s connection `epoch` to the returned receiver
    /// until the guard drops; progress that arrived for it already is delivered first.
    pub fn register(
        self: &Arc<Self>,
        server: &str,
        epoch: u64,
        token: &ProgressToken,
    ) -> (
        ProgressRoute,
        tokio::sync::mpsc::UnboundedReceiver<ProgressNotificationParam>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (self.register_sender(server, epoch, token, tx), rx)
    }

    /// Routes progress for `token` of `server`'s connection `epoch` to `tx` until the guard
    /// drops; progress that arrived for it already is sent first.
    pub fn register_sender(
        self: &Arc<Self>,
        server: &str,
        epoch: u64,
        token: &ProgressToken,
        tx: tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>,
    ) -> ProgressRoute {
        let key = (server.to_string(), epoch, token_key(token));
        let (handled, handled_rx) = tokio::sync::watch::channel(0);
        let mut route = Route {
            tx,
            last: None,
            handled,
        };
        let mut state = self.lock();
        let now = std::time::Instant::now();
        state
            .early
            .retain(|(_, at, _)| now.duration_since(*at) < EARLY_TTL);
        let mut kept = VecDeque::with_capacity(state.early.len());
        for (k, at, progress) in state.early.drain(..) {
            if k == key {
                route.forward(server, progress);
            } else {
                kept.push_back((k, at, progress));
            }
        }
        state.early = kept;
        state.routes.insert(key.clone(), route);
        drop(state);
        ProgressRoute {
            routes: self.clone(),
            key,
            handled: handled_rx,
        }
    }

    /// Delivers `progress` of `server`'s connection `epoch` to its request's caller; false when
    /// it does not advance the progress already delivered, or when no route exists (it is then
    /// held for a route registered soon, see the type's invariants).
    pub fn deliver(&self, server: &str, epoch: u64, progress: ProgressNotificationParam) -> bool {
        let key = (
            server.to_string(),
            epoch,
            token_key(&progress.progress_token),
        );
        let mut state = self.lock();
        if let Some(route) = state.routes.get_mut(&key) {
            return route.forward(server, progress);
        }
        if state.early.len() >= EARLY_KEEP {
            state.early.pop_front();
        }
        state
            .early
            .push_back((key, std::time::Instant::now(), progress));
        false
    }
}

fn token_key(token: &ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

/// Removes its route when dropped.
pub struct ProgressRoute {
    routes: Arc<ProgressRoutes>,
    key: RouteKey,
    handled: tokio::sync::watch::Receiver<u64>,
}

/// How long [`ProgressRoute::settle`] waits at most for notifications the wire showed: only a
/// notification rmcp could not decode (and so never hands over) makes it wait that long.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(2);

impl ProgressRoute {
    /// Waits until `seen` notifications (what the wire tap counted for this request by the time
    /// its response arrived) have been handled by this route: rmcp hands each notification to a
    /// task of its own and the response straight to the caller, so the last progress before a
    /// result may be handled just after it. Bounded by [`SETTLE_LIMIT`].
    pub async fn settle(&mut self, seen: u64) {
        let waited = tokio::time::timeout(SETTLE_LIMIT, self.handled.wait_for(|n| *n >= seen));
        if waited.await.is_err() {
            tracing::debug!(
                server = %self.key.0,
                seen,
                handled = *self.handled.borrow(),
                "progress the wire showed was not handed over"
            );
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().routes.remove(&self.key);
    }
}

/// A notification from the server of connection `epoch`.
#[derive(Message)]
#[rtype(result = "()")]
struct Notified {
    epoch: u64,
    event: ServerEvent,
}

/// Close the session and stay down (runtime shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Close the current session (if any) and connect again with a new epoch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Restart;

/// Asked by a call bound to connection `bound_epoch` that is no longer current (R7): restart the
/// server once if its stdio process exited, and say which connection the call may use.
#[derive(Message)]
#[rtype(result = "Revival")]
pub(crate) struct ReviveForCall {
    pub(crate) bound_epoch: u64,
}

/// The answer to [`ReviveForCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Revival {
    /// The server runs again on connection `epoch`, restarted after the crash of the bound
    /// connection (for this call or a concurrent one).
    Connected { epoch: u64 },
    /// The one restart after the crash did not bring the server back.
    Failed { error: String },
    /// Nothing to restart: the server did not fail by its process exiting (or is being
    /// stopped); the call goes on as bound and its staleness check decides.
    NotApplicable,
}

/// The server actor.
pub struct ServerActor {
    config: Arc<ServerConfig>,
    connector: Arc<dyn Connector>,
    publisher: Addr<Publisher>,
    settings: ServerSettings,
    filter: ToolFilter,
    epoch: u64,
    session: Option<Session>,
    catalog: ServerCatalog,
    status: ServerStatus,
    refreshes: Refreshes,
    /// Kinds this connection's server declared.
    declared: Vec<Kind>,
    /// Whether this connection's listings may be cached (the server did not opt out).
    cacheable: bool,
    stopped: bool,
    /// The pending reconnect attempt, cancelled first whenever the server is stopped,
    /// restarted or replaced (R6).
    retry: Option<SpawnHandle>,
    /// The periodic health check of a remote session.
    health: Option<SpawnHandle>,
    /// Pings in a row that got no answer.
    missed_pings: u32,
    /// While needs-auth: the watch of the stored credentials (a local file, not the server).
    auth_watch: Option<SpawnHandle>,
    /// The protocol version to ask for after the server refused `initialize` itself (never
    /// after a later failure, such as the first listing); dropped again when that handshake
    /// is refused too, so the next attempt opens with `initialize` (R8).
    fallback: Option<ProtocolVersion>,
    /// Why `initialize` was refused, while `server/discover` is being tried in its place: if
    /// that is refused too, this is the error the server is failed with (the server is not of
    /// the newer era, so the discover refusal says nothing useful).
    refused_initialize: Option<String>,
    /// While starting (first connect, or after `Restart`): when `startupTimeoutSec` runs out for
    /// all attempts together; `None` once connected.
    startup_deadline: Option<tokio::time::Instant>,
    /// After the fast reconnect attempts (or a refused connection at startup): the server is
    /// failed and probed at the capped interval; a probe does not make it pending.
    probing: bool,
    /// Whether the current connection ended because its stdio process exited.
    exited: bool,
    /// The epoch whose crash a restart for calls is in flight for.
    reviving: Option<u64>,
    /// Calls waiting for that restart.
    revive_waiters: Vec<tokio::sync::oneshot::Sender<Revival>>,
    /// The last restart for calls: the epoch that crashed, and the new epoch or the error.
    revived: Option<(u64, Result<u64, String>)>,
}

impl ServerActor {
    pub fn new(
        config: Arc<ServerConfig>,
        connector: Arc<dyn Connector>,
        publisher: Addr<Publisher>,
        settings: ServerSettings,
    ) -> Self {
        let status = ServerStatus::new(&config.name, connector.kind(), ServerState::Pending);
        let filter = ToolFilter {
            include: config.include_tools.clone(),
            exclude: config.exclude_tools.clone(),
        };
        let relist_window = settings.relist_window;
        Self {
            config,
            connector,
            publisher,
            settings,
            filter,
            epoch: 0,
            session: None,
            catalog: ServerCatalog::default(),
            status,
            refreshes: Refreshes::new(relist_window),
            declared: Vec::new(),
            cacheable: false,
            stopped: false,
            retry: None,
            health: None,
            missed_pings: 0,
            auth_watch: None,
            fallback: None,
            refused_initialize: None,
            startup_deadline: None,
            probing: false,
            exited: false,
            reviving: None,
            revive_waiters: Vec::new(),
            revived: None,
        }
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    /// Sends the current status (and catalog and client, when connected) to the publisher.
    fn report(&self, cause: impl Into<String>) {
        let connected = self.status.state == ServerState::Connected;
        let client = match (&self.session, connected) {
            (Some(s), true) => Some(ServerClient {
                peer: s.peer().clone(),
                epoch: self.epoch,
                tool_timeout: self.config.tool_timeout,
                wire: s.wire().clone(),
                exit: s.exit_report(),
            }),
            _ => None,
        };
        // Every printer of a status (tables, JSON, watch) reads this copy: redacted once here.
        let mut status = self.status.clone();
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
            catalog: connected.then(|| Arc::new(self.catalog.clone())),
            client,
            cause: cause.into(),
        });
    }

    fn set_state(&mut self, state: ServerState) {
        if let ServerState::Failed { error } | ServerState::NeedsAuth { reason: error } = &state {
            self.status.last_error = Some(error.clone());
        }
        self.status.state = state;
        self.status.since = SystemTime::now();
    }

    /// Forgets the current connection: its session is closed in the background, its listings
    /// leave the cache, and its refresh bookkeeping is reset.
    fn drop_connection(&mut self) {
        if let Some(session) = self.session.take() {
            actix::spawn(session.shutdown());
        }
        self.settings.cache.drop_server(&self.config.name);
        self.catalog = ServerCatalog::default();
        self.refreshes = Refreshes::new(self.settings.relist_window);
        self.declared.clear();
    }

    /// Cancels the pending reconnect and the health check.
    fn cancel_timers(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.retry.take() {
            ctx.cancel_future(handle);
        }
        if let Some(handle) = self.health.take() {
            ctx.cancel_future(handle);
        }
        if let Some(handle) = self.auth_watch.take() {
            ctx.cancel_future(handle);
        }
        self.status.next_retry = None;
    }

    /// In needs-auth, the server is not probed (R4); its stored credentials are watched
    /// instead, and a change (a login, from any process) connects it again.
    fn watch_credentials(&mut self, ctx: &mut Context<Self>) {
        let Some(before) = self.connector.credentials_stamp(self.name()) else {
            return;
        };
        if let Some(handle) = self.auth_watch.take() {
            ctx.cancel_future(handle);
        }
        self.auth_watch = Some(ctx.run_interval(CREDENTIALS_POLL, move |act, ctx| {
            if act.stopped || !matches!(act.status.state, ServerState::NeedsAuth { .. }) {
                return;
            }
            if act.connector.credentials_stamp(act.name()).as_ref() != Some(&before) {
                tracing::info!(server = %act.name(), "stored credentials changed; connecting");
                act.connect(ctx);
            }
        }));
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.cancel_timers(ctx);
        self.drop_connection();
        self.exited = false;
        self.epoch += 1;
        let epoch = self.epoch;
        if !self.probing {
            self.set_state(ServerState::Pending);
            self.report(if self.status.attempts > 0 {
                "reconnecting"
            } else {
                "connecting"
            });
        }
        // At startup, `startupTimeoutSec` is the budget of all attempts together.
        // (The first attempt has all of it: it starts with the budget.)
        let budget = match self.startup_deadline {
            Some(deadline) if self.status.attempts > 0 => deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(Duration::from_millis(1)),
            _ => self.config.startup_timeout,
        };

        let weak = ctx.address().downgrade();
        let (progress, server) = (self.settings.progress.clone(), self.config.name.clone());
        let sink: EventSink = Arc::new(move |event| {
            if let ServerEvent::Progress(p) = event {
                // Straight to the waiting caller, no actor hop.
                if !progress.deliver(&server, epoch, p) {
                    tracing::trace!(server = %server, "progress not (yet) forwarded to a caller");
                }
                return;
            }
            if let Some(addr) = weak.upgrade() {
                addr.do_send(Notified { epoch, event });
            }
        });
        let handler = HarnessClient::new(sink)
            .with_protocol_version(
                self.fallback
                    .clone()
                    .or_else(|| self.settings.protocol_version.clone()),
            )
            .with_callbacks(&self.config.name, self.settings.callbacks.clone())
            // The actor thread's runtime: its workers run nothing else, so an embedder's
            // callback that blocks stalls no connection.
            .with_callback_runtime(tokio::runtime::Handle::try_current().ok());
        let options = ConnectOptions {
            server: self.name().to_string(),
            startup_timeout: budget,
            wire: Default::default(),
            max_message_bytes: self.config.max_message_bytes,
        };
        let connecting = self.connector.connect(handler, options);
        let limits = self.settings.limits;
        let page_timeout = budget;
        let slot_hold = self.settings.queues.slot_hold;
        let attempt = async move |slot: Slot| {
            // One slot of the local or remote queue while connecting, for at most `slot_hold`:
            // a slow server keeps connecting but stops holding up the queue.
            let mut slot = Some(slot);
            let mut connecting = connecting;
            let session = tokio::select! {
                result = &mut connecting => result,
                () = tokio::time::sleep(slot_hold) => {
                    slot = None;
                    connecting.await
                }
            }
            .map_err(|e| (e, Stage::Handshake))?;
            // The slot is for starting the server (spawn + initialize); the listing that follows
            // is ordinary traffic on a running server, so the next server starts meanwhile.
            drop(slot);
            // The first listing belongs to startup: a server is connected only once listed.
            let kinds = declared_kinds(session.info());
            let listings = futures::future::join_all(kinds.iter().map(|&k| {
                list_kind(
                    session.peer().clone(),
                    session.wire().clone(),
                    k,
                    limits,
                    page_timeout,
                )
            }))
            .await;
            let mut listed = Vec::new();
            for (kind, result) in kinds.into_iter().zip(listings) {
                match result {
                    Ok(l) => listed.push((kind, l)),
                    Err(failure) => {
                        session.shutdown().await;
                        // A 401 while listing (an expired or missing token) means needs-auth.
                        let error = TransportError::Initialize {
                            message: format!(
                                "the first {kind} listing failed: {}",
                                failure.message
                            ),
                            auth_required: failure.auth_required,
                            stderr_tail: None,
                        };
                        return Err((error, Stage::Listing));
                    }
                }
            }
            Ok((session, listed))
        };
        // The attempt runs on the I/O threads (the embedder's runtime if it gave one), not on
        // the actor thread: spawning a process blocks its thread until the child execs, and
        // every actor and the publisher share the actor thread. The actor holds the attempt and
        // cancels it when it drops it (the actor stopped), which drops whatever the attempt
        // started; the session it made is owned by the actor and closed with it.
        let (done, outcome) = tokio::sync::oneshot::channel();
        let attempt = self.settings.queues.start(
            self.connector.is_remote(),
            &self.settings.io,
            async move |slot| {
                let _ = done.send(attempt(slot).await);
            },
        );
        let outcome = async move {
            let _attempt = attempt;
            outcome.await
        };
        ctx.spawn(outcome.into_actor(self).map(move |outcome, act, ctx| {
            let result = outcome.unwrap_or_else(|_| {
                Err((TransportError::Initialize {
                    message: "the connect attempt ended without an outcome (it panicked, or its I/O thread stopped)".into(),
                    auth_required: false,
                    stderr_tail: None,
                }, Stage::Handshake))
            });
            act.on_connected(epoch, result, ctx)
        }));
    }

    fn on_connected(
        &mut self,
        epoch: u64,
        result: Result<Attempted, (TransportError, Stage)>,
        ctx: &mut Context<Self>,
    ) {
        if epoch != self.epoch || self.stopped {
            if let Ok((session, _)) = result {
                actix::spawn(session.shutdown());
            }
            return;
        }
        match result {
            Ok((mut session, listed)) => {
                let info = session.info().clone();
                self.declared = declared_kinds(&info);
                self.cacheable = !opts_out(&info);
                for (kind, l) in listed {
                    self.apply(kind, 0, Arc::new(l));
                }
                let fresh = self.declared.clone();
                self.rebuild_derived(&BTreeSet::from(graph::DERIVED), &fresh, false, ctx);
                self.status.protocol_version = Some(info.protocol_version.to_string());
                self.status.server_name = info.server_name.clone();
                self.status.server_version = info.server_version.clone();
                self.status.instructions = info
                    .instructions
                    .as_deref()
                    .map(|i| clean_instructions(i, &self.settings.metadata));
                if let Some(closed) = session.take_closed() {
                    ctx.spawn(
                        closed
                            .into_actor(self)
                            .map(move |reason, act, ctx| act.on_closed(epoch, reason, ctx)),
                    );
                }
                self.session = Some(session);
                self.startup_deadline = None;
                self.probing = false;
                self.status.attempts = 0;
                self.status.next_retry = None;
                self.missed_pings = 0;
                self.refused_initialize = None;
                if self.connector.is_remote() {
                    let every = self.settings.reconnect.health_interval;
                    self.health = Some(ctx.run_interval(every, |act, ctx| act.health_check(ctx)));
                }
                self.set_state(ServerState::Connected);
                tracing::info!(server = %self.name(), tools = self.catalog.tools.len(), "connected");
                self.report("initial listing");
                self.finish_revival(Ok(epoch));
            }
            Err((e, stage)) => {
                tracing::warn!(server = %self.name(), error = %e, "connect failed");
                // The server answered, but not to `initialize`/`server/discover` as such: a
                // refusal of the handshake itself (not a 5xx/429, not a needs-auth, not a
                // failure of the listing after it, not an unreachable server).
                let refused_handshake = stage == Stage::Handshake
                    && self.connector.is_remote()
                    && !unavailable(&e)
                    && matches!(
                        e,
                        TransportError::Initialize {
                            auth_required: false,
                            ..
                        }
                    );
                if refused_handshake && self.settings.protocol_version.is_none() {
                    if self.fallback.is_none() {
                        // A server of the 2026-07-28 era may refuse the `initialize` handshake:
                        // try `server/discover` once before giving up (R8: fall back across eras).
                        tracing::info!(server = %self.name(), "initialize refused; trying server/discover (protocol 2026-07-28)");
                        self.fallback = Some(ProtocolVersion::V_2026_07_28);
                        self.refused_initialize = Some(e.to_string());
                        self.connect(ctx);
                        return;
                    }
                    // `server/discover` was refused as well: not a server of that era after
                    // all; the next attempt (or a restart) opens with `initialize` again.
                    tracing::info!(server = %self.name(), "server/discover refused too; the next attempt uses initialize");
                    self.fallback = None;
                }
                let refused_initialize = self.refused_initialize.take();
                let mut message = match refused_initialize {
                    Some(first) if refused_handshake => first,
                    _ => e.to_string(),
                };
                if self.connector.is_remote() && e.retryable() {
                    // The attempt after the next backoff would start past the startup budget.
                    let next = self.settings.reconnect.delay(
                        self.status.attempts + 1,
                        self.epoch ^ fnv(&self.config.name),
                    );
                    let now = tokio::time::Instant::now();
                    let out_of_time = self.startup_deadline.is_some_and(|d| now + next >= d);
                    let budget = self.config.startup_timeout.as_secs_f64();
                    match (&e, self.status.last_error.as_deref()) {
                        // The last attempt had only what was left of the budget: say the
                        // budget, and the error of the attempt before it.
                        (TransportError::StartupTimeout { .. }, Some(last))
                            if self.startup_deadline.is_some() && self.status.attempts > 0 =>
                        {
                            message = format!(
                                "startup gave up after {budget}s of attempts (raise `startupTimeoutSec`); the last error: {last}"
                            );
                        }
                        (TransportError::StartupTimeout { .. }, _) => {}
                        _ if out_of_time => {
                            message = format!(
                                "{message} (startup gave up after {budget}s of attempts; raise `startupTimeoutSec`)"
                            );
                        }
                        _ => {}
                    }
                    // A refused connection at startup fails at once: nothing listens there,
                    // and waiting through the fast attempts only delays saying so.
                    let refused_at_startup = self.startup_deadline.is_some() && e.refused();
                    let fast = !out_of_time && !refused_at_startup;
                    if self.schedule_reconnect(&message, fast, ctx) {
                        return;
                    }
                }
                self.startup_deadline = None;
                self.probing = false;
                let state = if e.needs_auth() {
                    ServerState::NeedsAuth {
                        reason: message.clone(),
                    }
                } else {
                    ServerState::Failed {
                        error: message.clone(),
                    }
                };
                let needs_auth = matches!(state, ServerState::NeedsAuth { .. });
                self.set_state(state);
                self.report("connect failed");
                self.finish_revival(Err(message));
                if needs_auth {
                    self.watch_credentials(ctx);
                }
            }
        }
    }

    fn on_closed(&mut self, epoch: u64, reason: String, ctx: &mut Context<Self>) {
        if epoch != self.epoch || self.stopped {
            return;
        }
        let Some(session) = self.session.as_ref() else {
            return;
        };
        let error = TransportError::Closed {
            reason,
            stderr_tail: session.stderr_tail(),
        };
        tracing::warn!(server = %self.name(), error = %error, "connection lost");
        self.drop_connection();
        if let Some(handle) = self.health.take() {
            ctx.cancel_future(handle);
        }
        let message = error.to_string();
        if self.connector.is_remote() && self.schedule_reconnect(&message, true, ctx) {
            return;
        }
        // Only a stdio process that went away may be restarted by a call (R7).
        self.exited = self.connector.kind() == "stdio";
        self.set_state(ServerState::Failed { error: message });
        self.report("connection lost");
    }

    /// Answers every call waiting for the restart in flight (if any) with how it ended.
    fn finish_revival(&mut self, outcome: Result<u64, String>) {
        let Some(origin) = self.reviving.take() else {
            return;
        };
        let answer = match &outcome {
            Ok(epoch) => Revival::Connected { epoch: *epoch },
            Err(error) => Revival::Failed {
                error: error.clone(),
            },
        };
        for waiter in self.revive_waiters.drain(..) {
            let _ = waiter.send(answer.clone());
        }
        self.revived = Some((origin, outcome));
    }

    /// What a call bound to `bound_epoch` gets (see [`ReviveForCall`]); `None` when it has to
    /// wait for the restart in flight.
    fn revival_for(&mut self, bound_epoch: u64, ctx: &mut Context<Self>) -> Option<Revival> {
        if self.stopped {
            return Some(Revival::NotApplicable);
        }
        if self.reviving.is_some() {
            return None;
        }
        let failed = matches!(self.status.state, ServerState::Failed { .. });
        if failed && self.exited && bound_epoch <= self.epoch {
            // One restart per exit: `exited` is cleared by the connect, and a connect that
            // fails leaves the server failed without it.
            tracing::info!(server = %self.name(), "the process exited; restarting it once for a call");
            self.reviving = Some(self.epoch);
            self.status.attempts = 0;
            self.connect(ctx);
            return None;
        }
        match &self.revived {
            // The connection that replaced the bound one came from a restart for calls.
            Some((origin, Ok(epoch)))
                if *origin >= bound_epoch
                    && *epoch == self.epoch
                    && self.status.state == ServerState::Connected =>
            {
                Some(Revival::Connected { epoch: *epoch })
            }
            Some((origin, Err(error))) if *origin >= bound_epoch && failed => {
                Some(Revival::Failed {
                    error: error.clone(),
                })
            }
            _ => Some(Revival::NotApplicable),
        }
    }

    /// Schedules the next reconnect attempt with backoff and jitter; false (nothing scheduled)
    /// once the server is stopped. While `fast` and fast attempts remain, the server is pending
    /// with its error and the time of the next attempt; after them (or when not `fast`) it is
    /// failed, its error saying so, and probed at the capped interval for as long as it is
    /// configured, the time of the next probe in its status. Either way it has no catalog (its
    /// tools cannot be called) until an attempt succeeds.
    fn schedule_reconnect(&mut self, error: &str, fast: bool, ctx: &mut Context<Self>) -> bool {
        let policy = self.settings.reconnect.clone();
        if self.stopped {
            return false;
        }
        self.status.attempts += 1;
        let seed = self.epoch ^ fnv(&self.config.name);
        let delay = policy.delay(self.status.attempts, seed);
        let fast = fast && self.status.attempts <= policy.max_attempts;
        self.retry = Some(ctx.run_later(delay, |act, ctx| {
            act.retry = None;
            act.connect(ctx);
        }));
        self.status.next_retry = Some(SystemTime::now() + delay);
        self.status.last_error = Some(error.to_string());
        if fast {
            self.set_state(ServerState::Pending);
            tracing::info!(server = %self.name(), attempt = self.status.attempts, delay_ms = delay.as_millis() as u64, "reconnecting after backoff");
            self.report(format!(
                "reconnect {} of {} in {:.1}s",
                self.status.attempts,
                policy.max_attempts,
                delay.as_secs_f64()
            ));
            return true;
        }
        let first = !self.probing;
        self.probing = true;
        // A startup that ended here is over: calls waiting for it get the error now.
        self.startup_deadline = None;
        if first {
            tracing::warn!(server = %self.name(), error, "unreachable; probing in the background");
        }
        let tried = match self.status.attempts - 1 {
            0 => String::new(),
            n => format!("{n} reconnect attempts failed; "),
        };
        let error = format!(
            "{error} ({tried}probing again in the background, at most every {}s; `restart` tries now)",
            policy.max_delay.as_secs_f64()
        );
        self.set_state(ServerState::Failed {
            error: error.clone(),
        });
        self.report(format!("next probe in {:.1}s", delay.as_secs_f64()));
        if first {
            self.finish_revival(Err(error));
        }
        true
    }

    /// Pings a remote session; two unanswered pings in a row close it (rmcp does not notice a
    /// dead HTTP server by itself).
    fn health_check(&mut self, ctx: &mut Context<Self>) {
        let Some(session) = &self.session else { return };
        let (peer, epoch, limit) = (
            session.peer().clone(),
            self.epoch,
            self.settings.reconnect.ping_timeout,
        );
        let ping = async move {
            let request = rmcp::model::ClientRequest::PingRequest(Default::default());
            matches!(
                tokio::time::timeout(limit, peer.send_request(request)).await,
                Ok(Ok(_))
            )
        };
        ctx.spawn(ping.into_actor(self).map(move |answered, act, ctx| {
            if epoch != act.epoch || act.stopped {
                return;
            }
            if answered {
                act.missed_pings = 0;
                return;
            }
            act.missed_pings += 1;
            tracing::warn!(server = %act.name(), missed = act.missed_pings, "no answer to ping");
            if act.missed_pings >= 2 {
                act.on_closed(epoch, "the server stopped answering pings".into(), ctx);
            }
        }));
    }

    /// Stores a complete listing (newest wins) and puts it into the current generation.
    fn apply(&mut self, kind: Kind, ticket: u64, listed: Arc<Listed>) {
        if self.cacheable {
            self.settings
                .cache
                .store(&self.config.name, kind, self.epoch, ticket, listed.clone());
        }
        let name = self.config.name.clone();
        let limits = &self.settings.metadata;
        match &*listed {
            Listed::Tools(t) => {
                self.catalog.set_tools(&name, t.clone(), limits);
                self.filter.apply(&name, &mut self.catalog);
            }
            Listed::Prompts(p) => self.catalog.set_prompts(&name, p.clone(), limits),
            Listed::Resources(r) => self.catalog.set_resources(&name, r.clone(), limits),
            Listed::Templates(t) => self.catalog.set_templates(&name, t.clone(), limits),
            Listed::Skills(k) => self.catalog.set_skills(&name, k.clone(), limits),
        }
    }

    /// Rebuilds each derived kind in `kinds` from the current generation of its inputs. An
    /// input that is declared, not `fresh` (just listed) and not in the cache (evicted, or the
    /// server opted out of caching) is read again when `may_reread`; its listing then triggers
    /// one more rebuild (which reads nothing again, so this never loops).
    fn rebuild_derived(
        &mut self,
        kinds: &BTreeSet<Kind>,
        fresh: &[Kind],
        may_reread: bool,
        ctx: &mut Context<Self>,
    ) {
        for &derived in kinds {
            if may_reread && self.status.state == ServerState::Connected {
                let stale: Vec<Kind> = graph::inputs_of(derived)
                    .iter()
                    .copied()
                    .filter(|k| self.declared.contains(k) && !fresh.contains(k))
                    .filter(|k| {
                        self.settings
                            .cache
                            .get(&self.config.name, *k, self.epoch)
                            .is_none()
                    })
                    .collect();
                for kind in stale {
                    self.fetch(kind, REREAD, ctx);
                }
            }
            match derived {
                Kind::Commands => self.catalog.rebuild_commands(&self.config.name),
                other => tracing::error!(kind = %other, "no rebuild rule for a derived kind"),
            }
        }
    }

    fn on_trigger(&mut self, trigger: Trigger, ctx: &mut Context<Self>) {
        if self.status.state != ServerState::Connected {
            return;
        }
        let plan = graph::plan(trigger);
        let mut fetched_any = false;
        for kind in plan.refetch {
            if self.declared.contains(&kind) {
                self.fetch(kind, trigger.method(), ctx);
                fetched_any = true;
            }
        }
        if !fetched_any {
            tracing::debug!(server = %self.name(), method = trigger.method(), "notification for a kind the server did not declare");
        }
    }

    fn fetch(&mut self, kind: Kind, cause: &'static str, ctx: &mut Context<Self>) {
        let Some(start) = self.refreshes.request(kind, tokio::time::Instant::now()) else {
            return; // in flight or waiting; it (or the one after it) covers this
        };
        self.start_fetch(kind, start, cause, ctx);
    }

    /// Starts the listing `start` now, or at the end of the relist window.
    fn start_fetch(
        &mut self,
        kind: Kind,
        start: crate::refresh::Start,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        let now = tokio::time::Instant::now();
        if start.at <= now {
            self.spawn_fetch(kind, start.ticket, cause, ctx);
            return;
        }
        let epoch = self.epoch;
        ctx.run_later(start.at - now, move |act, ctx| {
            if act.epoch == epoch && !act.stopped {
                act.spawn_fetch(kind, start.ticket, cause, ctx);
            }
        });
    }

    fn spawn_fetch(
        &mut self,
        kind: Kind,
        ticket: u64,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        let Some(session) = &self.session else { return };
        if !self
            .refreshes
            .started(kind, ticket, tokio::time::Instant::now())
        {
            return; // no longer wanted (a newer connection reset the bookkeeping)
        }
        let epoch = self.epoch;
        let fut = list_kind(
            session.peer().clone(),
            session.wire().clone(),
            kind,
            self.settings.limits,
            self.config.startup_timeout,
        );
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            act.on_fetched(
                epoch,
                kind,
                ticket,
                result.map_err(|f| f.message),
                cause,
                ctx,
            )
        }));
    }

    fn on_fetched(
        &mut self,
        epoch: u64,
        kind: Kind,
        ticket: u64,
        result: Result<Listed, String>,
        cause: &'static str,
        ctx: &mut Context<Self>,
    ) {
        if epoch != self.epoch || self.stopped || self.status.state != ServerState::Connected {
            return;
        }
        let completion = self
            .refreshes
            .complete(kind, ticket, tokio::time::Instant::now());
        if let Some(next) = completion.next {
            self.start_fetch(kind, next, cause, ctx);
        }
        if !completion.apply {
            tracing::debug!(server = %self.name(), %kind, ticket, "dropping a listing older than the one applied");
            return;
        }
        match result {
            Ok(listed) => {
                self.apply(kind, ticket, Arc::new(listed));
                let dependents: BTreeSet<Kind> = graph::DERIVED
                    .into_iter()
                    .filter(|d| graph::inputs_of(*d).contains(&kind))
                    .collect();
                self.rebuild_derived(&dependents, &[kind], cause != REREAD, ctx);
                self.report(cause);
            }
            Err(message) => {
                tracing::warn!(server = %self.name(), %kind, error = %message, "re-listing failed; keeping the previous generation");
                self.status.last_error = Some(format!(
                    "{message} (after {cause}; the previous {kind} are kept)"
                ));
                self.report(format!("{cause}: re-listing failed"));
            }
        }
    }
}

impl Actor for ServerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.startup_deadline = Some(tokio::time::Instant::now() + self.config.startup_timeout);
        self.connect(ctx);
    }
}

impl Supervised for ServerActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        tracing::info!(server = %self.name(), "server actor restarting");
        self.drop_connection();
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
                tracing::debug!(target: "mcp_harness::server_log", server = %self.name(), level = ?log.level, "{}", log.data);
            }
        }
    }
}

impl Handler<Restart> for ServerActor {
    type Result = ();

    fn handle(&mut self, _: Restart, ctx: &mut Self::Context) {
        if self.stopped {
            return;
        }
        tracing::info!(server = %self.name(), "restart requested");
        self.status.attempts = 0;
        self.probing = false;
        self.startup_deadline = Some(tokio::time::Instant::now() + self.config.startup_timeout);
        self.connect(ctx);
    }
}

impl Handler<ReviveForCall> for ServerActor {
    type Result = ResponseFuture<Revival>;

    fn handle(&mut self, msg: ReviveForCall, ctx: &mut Self::Context) -> Self::Result {
        if let Some(answer) = self.revival_for(msg.bound_epoch, ctx) {
            return Box::pin(std::future::ready(answer));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.revive_waiters.push(tx);
        Box::pin(async move {
            rx.await.unwrap_or(Revival::Failed {
                error: "the server was stopped while it restarted".into(),
            })
        })
    }
}

impl Handler<Shutdown> for ServerActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) -> Self::Result {
        // Timers first: a pending reconnect must never bring back the old configuration.
        self.cancel_timers(ctx);
        self.stopped = true;
        self.finish_revival(Err(
            "the server was stopped (removed, replaced or shut down)".into(),
        ));
        self.settings.cache.drop_server(&self.config.name);
        let session = self.session.take();
        Box::pin(
            async move {
                if let Some(session) = session {
                    session.shutdown().await;
                }
            }
            .into_actor(self),
        )
    }
}

/// Whether a failed handshake means the server is unavailable for now (it answered HTTP 5xx or
/// 429) rather than that it refused the handshake: such a server is retried as it is, never
/// switched to another protocol era. The transport reports the status as a typed error.
fn unavailable(e: &TransportError) -> bool {
    e.unavailable()
}

/// A connected session with its first listing of each declared kind.
type Attempted = (Session, Vec<(Kind, Listed)>);

/// Where a connect attempt failed: the handshake, or the first listing after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Handshake,
    Listing,
}

/// How long runtime shutdown waits for one server to close before moving on.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(token: u32, value: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(rmcp::model::NumberOrString::Number(token.into())),
            value,
        )
    }

    #[test]
    fn progress_before_its_route_is_held_and_handed_over_in_order() {
        let routes = Arc::new(ProgressRoutes::default());
        // Arrives before the caller registered (a fast server), for this connection and an
        // old one that used the same token.
        assert!(!routes.deliver("s", 2, progress(7, 1.0)));
        assert!(!routes.deliver("s", 1, progress(7, 5.0)));
        assert!(!routes.deliver("s", 2, progress(7, 2.0)));
        let (route, mut rx) = routes.register("s", 2, &progress(7, 0.0).progress_token);
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(1.0));
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(2.0));
        assert!(
            rx.try_recv().is_err(),
            "the old connection's progress is not ours"
        );
        // Routed now; a value that does not advance is dropped.
        assert!(routes.deliver("s", 2, progress(7, 3.0)));
        assert!(!routes.deliver("s", 2, progress(7, 2.5)));
        assert_eq!(rx.try_recv().map(|p| p.progress).ok(), Some(3.0));
        assert!(rx.try_recv().is_err());
        drop(route);
        assert!(
            !routes.deliver("s", 2, progress(7, 4.0)),
            "no route after the guard"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_the_progress_the_wire_showed_and_no_longer() {
        let routes = Arc::new(ProgressRoutes::default());
        let token = progress(9, 0.0).progress_token;
        // One held before the route, counted once handed over.
        routes.deliver("s", 1, progress(9, 1.0));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut route = routes.register_sender("s", 1, &token, tx);
        // The wire showed three: the last two are handled after the response reached us.
        let late = {
            let routes = routes.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                routes.deliver("s", 1, progress(9, 2.0));
                tokio::task::yield_now().await;
                routes.deliver("s", 1, progress(9, 3.0));
            })
        };
        route.settle(3).await;
        let mut got = Vec::new();
        while let Ok(p) = rx.try_recv() {
            got.push(p.progress);
        }
        assert_eq!(got, [1.0, 2.0, 3.0], "all three before settle returns");
        late.await.unwrap();
        // A notification the wire showed but rmcp never handed over costs at most the limit.
        let before = tokio::time::Instant::now();
        route.settle(4).await;
        assert_eq!(before.elapsed(), SETTLE_LIMIT);
    }

    #[test]
    fn progress_nobody_claims_is_bounded() {
        let routes = Arc::new(ProgressRoutes::default());
        for i in 0..(EARLY_KEEP as u32 * 3) {
            routes.deliver("s", 1, progress(i, 1.0));
        }
        assert_eq!(routes.lock().early.len(), EARLY_KEEP);
        // The newest are kept.
        let newest = EARLY_KEEP as u32 * 3 - 1;
        let (_route, mut rx) = routes.register("s", 1, &progress(newest, 0.0).progress_token);
        assert!(rx.try_recv().is_ok());
        let (_route, mut rx) = routes.register("s", 1, &progress(0, 0.0).progress_token);
        assert!(rx.try_recv().is_err());
    }

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

//! What the gateway keeps for all sessions: the runtime, the registry of live listeners with
//! the list digests each was last told, the tool views recent listings showed (by digest), and
//! the upstream resource subscriptions shared by the sessions that asked for them.
//!
//! Invariant: an upstream resource subscription is held once per (server, URI) for as long as
//! at least one session subscribes to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use mcp_harness_runtime::{ClientProfile, Runtime, StepBinding};
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};

use crate::GatewayOptions;
use crate::auth::{Clients, Identity};
use crate::bridge::ClientBridge;
use crate::names::ToolView;
use crate::ops::{Audit, Metrics};
use crate::sync::lock;
use tokio::sync::broadcast;

/// How many updates of one resource a session may not have forwarded yet before the older
/// ones merge (each says only that the resource changed).
const UPDATES_BEHIND: usize = 16;

/// The sessions subscribed to one upstream resource.
struct Subscribed {
    count: usize,
    /// Tells each subscribed session that the resource changed.
    updates: broadcast::Sender<()>,
    /// Takes the resource's updates off the runtime's stream.
    forward: tokio::task::JoinHandle<()>,
    /// Whether upstream holds the subscription; each subscriber takes it in turn, and the first
    /// to find it `false` subscribes upstream (so every subscriber waits for, and a refused one
    /// gets, the upstream's answer, and the next one tries again).
    upstream: Upstream,
}

/// Whether upstream holds one resource subscription, taken by one subscriber at a time.
pub(super) type Upstream = Arc<tokio::sync::Mutex<bool>>;

/// How many recent tool views a gateway remembers by digest per client profile, to check a
/// call bound to a listing (made on another replica, or by a client without a session) against
/// the definition that listing showed. Per profile: one profile's listings never push out
/// another's, nor tell it which digests another profile was shown.
const REMEMBERED_VIEWS: usize = 32;
/// How many tool views of the current snapshot (one per client profile) are kept built.
const BUILT_VIEWS: usize = 16;

/// A tool view built for one snapshot and profile (held by pointer: the same snapshot and the
/// same profile always build the same view).
struct Built {
    snapshot: Arc<mcp_harness_runtime::catalog::Snapshot>,
    profile: Option<Arc<ClientProfile>>,
    view: Arc<ToolView>,
}

/// The list kinds a client is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
}

/// What a client was last shown (or told about), one digest per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Digests {
    pub(crate) tools: u64,
    pub(crate) prompts: u64,
    pub(crate) resources: u64,
}

impl Digests {
    pub(crate) fn get(&self, kind: ListKind) -> u64 {
        match kind {
            ListKind::Tools => self.tools,
            ListKind::Prompts => self.prompts,
            ListKind::Resources => self.resources,
        }
    }

    pub(crate) fn set(&mut self, kind: ListKind, digest: u64) {
        match kind {
            ListKind::Tools => self.tools = digest,
            ListKind::Prompts => self.prompts = digest,
            ListKind::Resources => self.resources = digest,
        }
    }
}

/// Where a client's notifications go.
#[derive(Clone)]
pub(crate) enum Listener {
    /// A session of a protocol before 2026-07-28 (its GET stream or stdio).
    Peer(Peer<RoleServer>),
    /// A 2026-07-28 `subscriptions/listen` stream.
    Subscription(SubscriptionSink),
}

/// A client the notifier tells about changes.
pub(crate) struct Registered {
    pub(crate) listener: Listener,
    /// The client's profile (`None`: the whole catalog).
    pub(crate) profile: Option<Arc<ClientProfile>>,
    /// What this client was last shown or told, per kind.
    pub(crate) told: Mutex<Digests>,
    /// The catalog revision it registered at when `told` started from digests the notifier
    /// computed for an older revision (0: not so). The notifier's first pass at or before that
    /// revision only catches `told` up, telling nothing: what changed before a client
    /// registered is not news to it.
    pub(crate) catch_up_to: AtomicU64,
}

/// What every session shares: the runtime, the options and the registry of listeners.
pub(crate) struct Shared {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) bridge: ClientBridge,
    pub(crate) metrics: Metrics,
    pub(super) audit: Option<Audit>,
    pub(crate) options: GatewayOptions,
    pub(crate) sessions: DashMap<u64, Registered>,
    next_id: AtomicU64,
    /// Sessions ended so far (the memory trim in [`crate::drain`] follows it).
    pub(crate) closed: AtomicU64,
    /// The client profiles (`None`: no authentication, one view for all).
    pub(crate) clients: Option<Arc<Clients>>,
    /// The digests of the latest views the notifier computed, per profile name (`None`: the
    /// whole catalog): what a new listener starts from.
    pub(crate) current: Mutex<HashMap<Option<String>, Digests>>,
    /// The catalog revision `current` was computed for.
    pub(crate) current_revision: AtomicU64,
    /// A published catalog had every upstream settled: the gateway is ready (`/readyz`) from
    /// then on until it drains.
    pub(crate) settled_once: std::sync::atomic::AtomicBool,
    /// The sessions' subscriptions per (server, URI): upstream holds one subscription, and one
    /// task per resource takes its updates off the runtime's stream of all updates and tells
    /// only that resource's subscribers — an update wakes one task per subscribed resource and
    /// the sessions subscribed to it, not every subscription of every session.
    subscribed: Mutex<HashMap<(String, String), Subscribed>>,
    /// The latest distinct tool views per profile name ("" without one), newest last (at most
    /// [`REMEMBERED_VIEWS`] each).
    views: Mutex<HashMap<String, std::collections::VecDeque<Arc<ToolView>>>>,
    /// The tool views of the newest snapshot bound, per profile: a call without a listing of
    /// its own (every 2026-07-28 call) binds the current catalog, and building its view costs
    /// O(tools) — once per snapshot and profile instead of once per call.
    built: Mutex<Vec<Built>>,
    /// Records and exports call spans (`None`: tracing is off, nothing is recorded).
    pub(crate) tracer: Option<Arc<crate::trace::Tracer>>,
    /// Seals the ids of upstream tasks handed to clients (SEP-2663 pass-through).
    pub(crate) task_ids: crate::task_ids::TaskIds,
    /// Some upstream declared tasks since the gateway started: the gateway declares them from
    /// then on, so a client holding a task id of a server that went away is answered about
    /// it (that server is not connected) instead of `-32601`.
    pub(crate) tasks_declared: std::sync::atomic::AtomicBool,
    /// Some upstream declared SEP-1686 task-augmented `tools/call` since the gateway started:
    /// the 2025-11-25 front stays on from then, so a client's `tasks/get` about a task of a
    /// server now down is answered about that server, not `-32601`.
    pub(crate) augmented_declared: std::sync::atomic::AtomicBool,
    /// The log level asked of the upstreams for the sessions' `logging/setLevel`.
    pub(crate) log_level: crate::log_level::UpstreamLogLevel,
    /// The side channels of the HTTP requests' response streams open now.
    pub(crate) sidecars: Arc<crate::sidecar::Sidecars>,
    /// The HTTP sessions of this process, by session id (see [`super::direct`]).
    pub(crate) held: Arc<super::direct::HeldSessions>,
}

impl Shared {
    pub(crate) fn new(
        runtime: Arc<Runtime>,
        options: GatewayOptions,
        bridge: ClientBridge,
        audit: Option<Audit>,
        clients: Option<Arc<Clients>>,
    ) -> Self {
        let tracer = options.traces.clone().map(crate::trace::Tracer::start);
        Self {
            tracer,
            runtime,
            bridge,
            metrics: Metrics::default(),
            audit,
            options,
            sessions: DashMap::new(),
            next_id: AtomicU64::new(1),
            closed: AtomicU64::new(0),
            clients,
            current: Mutex::new(HashMap::new()),
            current_revision: AtomicU64::new(0),
            settled_once: Default::default(),
            subscribed: Mutex::new(HashMap::new()),
            views: Mutex::new(HashMap::new()),
            built: Mutex::new(Vec::new()),
            task_ids: crate::task_ids::TaskIds::default(),
            tasks_declared: Default::default(),
            augmented_declared: Default::default(),
            log_level: Default::default(),
            sidecars: Default::default(),
            held: Default::default(),
        }
    }

    /// Whether the gateway declares the tasks extension: some connected upstream does, or did
    /// since the gateway started ([`Shared::tasks_declared`]; looked at on every request that
    /// asks and at every catalog publication, so a task handed out is never missed).
    pub(crate) fn serves_tasks(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.tasks_declared.load(Relaxed) {
            return true;
        }
        let snapshot = self.runtime.snapshot();
        let live = snapshot.catalogs.keys().any(|server| {
            self.runtime
                .server_capabilities(server)
                .is_some_and(|c| c.supports_tasks())
        });
        if live {
            self.tasks_declared.store(true, Relaxed);
        }
        live
    }

    /// The view of `binding` for `profile`, built now (not cached: a binding a session loaded
    /// tools into shows more than the shared view of its snapshot).
    pub(crate) fn fresh_view(
        &self,
        binding: &StepBinding,
        profile: Option<&Arc<ClientProfile>>,
    ) -> ToolView {
        ToolView::new(
            binding,
            (self.options.prefix, self.options.max_tool_name_len),
            profile.map(|p| &**p),
        )
    }

    /// The view of a fresh `binding` (nothing loaded through tool search yet) for `profile`,
    /// remembered under its digest; built once per snapshot and profile.
    pub(crate) fn tool_view(
        &self,
        binding: &StepBinding,
        profile: Option<&Arc<ClientProfile>>,
    ) -> Arc<ToolView> {
        let same = |built: &Built| {
            Arc::ptr_eq(&built.snapshot, binding.snapshot())
                && match (&built.profile, profile) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        };
        if let Some(built) = lock(&self.built).iter().find(|built| same(built)) {
            return built.view.clone();
        }
        let view = Arc::new(self.fresh_view(binding, profile));
        self.remember(&view, profile);
        let mut built = lock(&self.built);
        // Only the newest snapshot's views are kept (a binding of an older one, racing a
        // publication, builds its view without keeping it).
        if built
            .first()
            .is_some_and(|b| b.snapshot.revision > binding.snapshot().revision)
        {
            return view;
        }
        built.retain(|b| Arc::ptr_eq(&b.snapshot, binding.snapshot()));
        if built.len() >= BUILT_VIEWS {
            built.remove(0);
        }
        built.push(Built {
            snapshot: binding.snapshot().clone(),
            profile: profile.cloned(),
            view: view.clone(),
        });
        view
    }

    /// Remembers `view`, shown to a client of `profile`, under its digest (the newest view of a
    /// digest wins).
    pub(crate) fn remember(&self, view: &Arc<ToolView>, profile: Option<&Arc<ClientProfile>>) {
        let mut all = lock(&self.views);
        let views = all.entry(profile_key(profile)).or_default();
        if views.back().is_some_and(|last| last.digest == view.digest) {
            return;
        }
        views.retain(|known| known.digest != view.digest);
        views.push_back(view.clone());
        while views.len() > REMEMBERED_VIEWS {
            views.pop_front();
        }
    }

    /// The view whose digest is `digest` remembered for `profile`.
    pub(super) fn recall(
        &self,
        digest: u64,
        profile: Option<&Arc<ClientProfile>>,
    ) -> Option<Arc<ToolView>> {
        lock(&self.views)
            .get(&profile_key(profile))?
            .iter()
            .rev()
            .find(|view| view.digest == digest)
            .cloned()
    }

    /// Registers session `id` for change notifications (once: a second registration of the same
    /// session keeps what it was told).
    pub(super) fn register(
        &self,
        id: u64,
        listener: Listener,
        profile: Option<Arc<ClientProfile>>,
    ) {
        if self.sessions.contains_key(&id) {
            return;
        }
        let key = profile.as_ref().map(|p| p.name.clone());
        let now = self.runtime.snapshot().revision;
        let (told, computed_for) = {
            let current = lock(&self.current);
            let told = current.get(&key).copied().unwrap_or_default();
            (told, self.current_revision.load(Ordering::Acquire))
        };
        let catch_up_to = if computed_for < now { now } else { 0 };
        self.sessions.insert(
            id,
            Registered {
                listener,
                profile,
                told: Mutex::new(told),
                catch_up_to: AtomicU64::new(catch_up_to),
            },
        );
    }

    /// Records that session `id` was just shown `digest` of `kind`.
    pub(super) fn shown(&self, id: u64, kind: ListKind, digest: u64) {
        if let Some(registered) = self.sessions.get(&id) {
            lock(&registered.told).set(kind, digest);
        }
    }

    /// Counts one more session subscribed to `uri` on `server`: where it hears of the
    /// resource's updates, and the upstream subscription it then makes sure of
    /// ([`Self::ensure_upstream`]).
    pub(super) fn hold(&self, server: &str, uri: &str) -> (Upstream, broadcast::Receiver<()>) {
        let mut held = lock(&self.subscribed);
        let key = (server.to_string(), uri.to_string());
        if let Some(subscribed) = held.get_mut(&key) {
            subscribed.count += 1;
            return (subscribed.upstream.clone(), subscribed.updates.subscribe());
        }
        let (updates, heard) = broadcast::channel(UPDATES_BEHIND);
        let mut stream = self.runtime.resource_updates(server, uri);
        let told = updates.clone();
        let forward = tokio::spawn(async move {
            while stream.next().await.is_some() {
                // No subscriber left for a moment: the task ends with the last release.
                let _ = told.send(());
            }
        });
        let upstream = Upstream::default();
        held.insert(
            key,
            Subscribed {
                count: 1,
                updates,
                forward,
                upstream: upstream.clone(),
            },
        );
        (upstream, heard)
    }

    /// Makes sure upstream holds the subscription to `uri` on `server` that `upstream` (from
    /// [`Self::hold`]) stands for: subscribes when no one did yet, else waits for the
    /// subscriber making it. An error is the upstream's refusal, which the next subscriber
    /// meets again for itself.
    pub(super) async fn ensure_upstream(
        &self,
        upstream: &Upstream,
        server: &str,
        uri: &str,
    ) -> Result<(), mcp_harness_runtime::CallError> {
        let mut subscribed = upstream.lock().await;
        if !*subscribed {
            self.runtime.subscribe_resource(server, uri).await?;
            *subscribed = true;
        }
        Ok(())
    }

    /// Counts one session fewer subscribed to `uri` on `server`; the last one unsubscribes
    /// upstream.
    pub(super) fn release(self: &Arc<Self>, server: String, uri: String) {
        let last = {
            let mut held = lock(&self.subscribed);
            let key = (server.clone(), uri.clone());
            match held.get_mut(&key) {
                Some(subscribed) if subscribed.count > 1 => {
                    subscribed.count -= 1;
                    false
                }
                // The last: upstream is told unless it never held the subscription (every
                // subscribe refused). No one else holds `upstream` (each holder counts).
                Some(_) => held.remove(&key).is_some_and(|subscribed| {
                    subscribed.forward.abort();
                    subscribed.upstream.try_lock().map_or(true, |held| *held)
                }),
                None => false,
            }
        };
        if last && let Ok(handle) = tokio::runtime::Handle::try_current() {
            let shared = self.clone();
            handle.spawn(async move {
                if let Err(error) = shared.runtime.unsubscribe_resource(&server, &uri).await {
                    tracing::debug!(%server, %uri, %error, "resources/unsubscribe failed");
                }
            });
        }
    }

    pub(super) fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The profile the HTTP request behind `extensions` proved (`None` over stdio, or without
/// profiles).
pub(super) fn profile_of(extensions: &rmcp::model::Extensions) -> Option<Arc<ClientProfile>> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .map(|identity| identity.0.clone())
}

/// The key of `profile`'s remembered views ("" for a client without one).
fn profile_key(profile: Option<&Arc<ClientProfile>>) -> String {
    profile.map(|p| p.name.clone()).unwrap_or_default()
}

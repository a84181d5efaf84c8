//! Building and starting a [`Runtime`]: the configuration plus what only code can provide
//! (in-process servers, batching window, protocol version, caps).
//!
//! Invariant: `start` either fails before anything runs (a server that cannot be built) or
//! returns a runtime whose every configured server is in the first published snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use arc_swap::ArcSwap;
use mcp_harness_catalog::{PageLimits, ServerState, ServerStatus, Snapshot};
use mcp_harness_policy::{Approver, DenyAll};
use mcp_harness_transport::auth::AuthContext;
use mcp_harness_transport::{Callbacks, InProcessServe};
use rmcp::model::ProtocolVersion;
use tokio::sync::{broadcast, watch};

use crate::call::context::{CallContext, LivePermissions, Policy};
use crate::call::output::{OutputStore, OutputStoreConfig};
use crate::config::{
    Config, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, ServerConfig, TransportConfig,
};
use crate::connection::cache::{DEFAULT_MAX_ENTRIES, ListingCache};
use crate::connection::io_threads::{IoPlace, IoThreads, PinnedThreads};
use crate::connection::progress::ProgressRoutes;
use crate::connection::registry::Registry;
use crate::connection::server::ServerSettings;
use crate::connection::supervision::{
    ConnectQueues, DEFAULT_LOCAL_SLOTS, DEFAULT_REMOTE_SLOTS, DEFAULT_SLOT_HOLD, ReconnectPolicy,
};
use crate::desired::{DesiredState, prewarmer};
use crate::error::StartError;
use crate::runtime::{Parts, RESOURCE_UPDATE_BUFFER, Runtime};
use crate::snapshot::Live;
use crate::snapshot::publisher::{DEFAULT_BATCH_WINDOW, Published, Publisher, RevisionGate};

/// Default time a person has to answer an approval.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// Builds a [`Runtime`]: a config plus what only code can provide.
pub struct RuntimeBuilder {
    config: Config,
    in_process: BTreeMap<String, InProcessServe>,
    window: Duration,
    protocol_version: Option<ProtocolVersion>,
    limits: PageLimits,
    cache_entries: usize,
    callbacks: Option<Callbacks>,
    approver: Arc<dyn Approver>,
    approval_timeout: Duration,
    reconnect: ReconnectPolicy,
    local_slots: usize,
    remote_slots: usize,
    io: Option<tokio::runtime::Handle>,
    /// The embedder drives `io` for the harness's whole life ([`Self::io_runtime_driven`]).
    io_driven: bool,
    io_threads: Option<IoThreads>,
    revision_buffer: usize,
    relist_window: Duration,
    edit_drain: Duration,
    child_subreaper: bool,
    auth: AuthContext,
}

impl Runtime {
    /// Starts a runtime for `config` with default settings.
    pub fn start(config: Config) -> Result<Runtime, StartError> {
        RuntimeBuilder::new(config).start()
    }
}

impl RuntimeBuilder {
    /// A builder for `config`, every setting at its default.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            in_process: BTreeMap::new(),
            window: DEFAULT_BATCH_WINDOW,
            protocol_version: None,
            limits: PageLimits::default(),
            cache_entries: DEFAULT_MAX_ENTRIES,
            callbacks: None,
            approver: Arc::new(DenyAll),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            reconnect: ReconnectPolicy::default(),
            local_slots: DEFAULT_LOCAL_SLOTS,
            remote_slots: DEFAULT_REMOTE_SLOTS,
            io: None,
            io_driven: false,
            io_threads: None,
            revision_buffer: crate::snapshot::revisions::DEFAULT_REVISION_BUFFER,
            relist_window: crate::connection::refresh::DEFAULT_RELIST_WINDOW,
            edit_drain: crate::connection::registry::DEFAULT_EDIT_DRAIN,
            child_subreaper: false,
            auth: AuthContext::new(),
        }
    }

    /// The OAuth state this runtime's remote servers use: the token store's directory, who
    /// authorizes a step-up, the step-up budgets and the keyring copies (default
    /// [`AuthContext::new`]: the user's own token store, no step-up browser). Two runtimes in
    /// one process with contexts of their own never disturb each other's.
    pub fn auth_context(mut self, context: AuthContext) -> Self {
        self.auth = context;
        self
    }

    /// How many revisions a [`Runtime::revisions`](crate::Runtime::revisions) reader may fall
    /// behind before the ones it missed reach it as one combined item (default 256, at least 1).
    pub fn revision_buffer(mut self, revisions: usize) -> Self {
        self.revision_buffer = revisions.max(1);
        self
    }

    /// The least time between two listings of one kind of one server that notifications
    /// (`list_changed`) cause (default 250 ms; zero: no bound). A flood of notifications then
    /// costs at most one listing per window per kind, and the last listing still starts after
    /// the last notification.
    pub fn relist_window(mut self, window: Duration) -> Self {
        self.relist_window = window;
        self
    }

    /// How long a config edit that removes or replaces a server lets the calls already sent on
    /// its connection run before closing it (default 10 s; zero: closed at once, cutting them).
    /// Calls made meanwhile to a replaced server wait for its new connection.
    pub fn edit_drain(mut self, drain: Duration) -> Self {
        self.edit_drain = drain;
        self
    }

    /// Makes the embedding process a child subreaper (Linux; default off): a server's
    /// descendant that leaves its process group (`setsid`) and outlives its parent is then
    /// reparented to this process instead of init, and [`Runtime::shutdown`] (and the
    /// runtime's drop) kills and reaps every such descendant that carries this process's
    /// [`OWNER_ENV`](mcp_harness_transport::reaper::OWNER_ENV) tag. Process-wide and
    /// permanent: orphans of every child this process starts come back to it, and ones
    /// without the tag stay zombies until the embedder reaps them. The CLI turns it on.
    pub fn child_subreaper(mut self, on: bool) -> Self {
        self.child_subreaper = on;
        self
    }

    /// Runs the servers' connections (process spawn, initialize, each session's message loop)
    /// on the embedder's tokio runtime instead of the harness's own I/O threads. A caller on
    /// that runtime then gets each answer without a hand-off between two runtimes (a few
    /// percent of a fast echo call over stdio: `cargo xtask bench`, `echo_per_call` vs.
    /// `echo_per_call_io_runtime`). The runtime must be multi-threaded
    /// (checked by [`Self::start`]) and must outlive the harness: shut the [`Runtime`] down
    /// first, which closes every session and kills every stdio server it started. Without it,
    /// a runtime whose threads the embedder blocks also stalls the harness's connections.
    pub fn io_runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.io = Some(handle);
        self.io_driven = false;
        self
    }

    /// [`Self::io_runtime`], a current-thread runtime accepted too: the embedder promises to
    /// drive it (`block_on` around everything that uses the harness) until the [`Runtime`] is
    /// shut down, and never to block that thread. One thread then carries the embedder's work
    /// and every connection, with no hand-off between threads on a call — what
    /// `mcp-harness serve --threads 1` does (`cargo xtask bench --only serve`).
    pub fn io_runtime_driven(mut self, handle: tokio::runtime::Handle) -> Self {
        self.io = Some(handle);
        self.io_driven = true;
        self
    }

    /// The threads the harness starts for its servers' connections (default
    /// [`IoThreads::Pinned`]`(2)`: each connection on one thread of its own single-threaded
    /// runtime, so a call wakes one thread, not a pool). [`IoThreads::WorkStealing`] shares
    /// one work-stealing pool among all connections instead (`cargo xtask bench` measures
    /// both). Not together with [`Self::io_runtime`] (checked by [`Self::start`]).
    pub fn io_threads(mut self, threads: IoThreads) -> Self {
        self.io_threads = Some(threads);
        self
    }

    /// Reconnect backoff and health checks of remote servers (see [`ReconnectPolicy`]).
    pub fn reconnect(mut self, policy: ReconnectPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// How many local (stdio, in-process) and remote servers connect at once (defaults 3 and
    /// 20; R5).
    pub fn connection_slots(mut self, local: usize, remote: usize) -> Self {
        self.local_slots = local;
        self.remote_slots = remote;
        self
    }

    /// Who answers calls that need approval (`permissions` rules with `ask`, or no rule at
    /// all). Default [`DenyAll`]: a library cannot ask anyone, so such calls are refused with the
    /// config key that would allow them.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// How long an approval may take before the call is refused (default 5 minutes).
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// The embedder's answers to servers' elicitation, sampling and roots requests. Without
    /// them those capabilities are not declared and such requests are refused.
    pub fn callbacks(mut self, callbacks: Callbacks) -> Self {
        self.callbacks = Some(callbacks);
        self
    }

    /// Bound on cached listings across all servers (default 4,096).
    pub fn cache_entries(mut self, entries: usize) -> Self {
        self.cache_entries = entries;
        self
    }

    /// Adds a server that runs in this process: `serve` is called with the server end of a
    /// duplex pipe on every connect.
    pub fn in_process(mut self, name: impl Into<String>, serve: InProcessServe) -> Self {
        let name = name.into();
        self.config.servers.insert(
            name.clone(),
            ServerConfig {
                name: name.clone(),
                transport: TransportConfig::InProcess,
                enabled: true,
                startup_timeout: DEFAULT_STARTUP_TIMEOUT,
                tool_timeout: DEFAULT_TOOL_TIMEOUT,
                max_message_bytes: crate::config::DEFAULT_MAX_MESSAGE_BYTES,
                include_tools: None,
                exclude_tools: Vec::new(),
                untrusted: None,
                unusable: None,
                names: Default::default(),
                protocol_version: None,
            },
        );
        self.in_process.insert(name, serve);
        self
    }

    /// Updates arriving within `window` are published as one revision (default 16 ms).
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Ask servers for this protocol version in initialize (default: rmcp's newest).
    pub fn protocol_version(mut self, version: &str) -> Self {
        self.protocol_version =
            serde_json::from_value(serde_json::Value::String(version.to_string())).ok();
        self
    }

    /// Caps for following list pagination.
    pub fn page_limits(mut self, limits: PageLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Starts the actor system and every enabled server; returns at once, with every enabled
    /// server pending and every disabled one reported as disabled.
    pub fn start(self) -> Result<Runtime, StartError> {
        // Check every server can be built before anything starts.
        for server in self.config.servers.values().filter(|s| s.enabled) {
            server
                .transport
                .connector(&server.name, &self.in_process, &self.auth)
                .map_err(StartError::System)?;
        }
        if let Some(io) = &self.io
            && io.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
            && !self.io_driven
        {
            return Err(StartError::System(
                "`RuntimeBuilder::io_runtime` needs a multi-threaded tokio runtime: a \
                 current-thread runtime runs connections only while its owner polls it \
                 (`RuntimeBuilder::io_runtime_driven` if it does for the harness's whole life)"
                    .into(),
            ));
        }
        let threads = match (&self.io, self.io_threads) {
            (Some(_), Some(_)) => {
                return Err(StartError::System(
                    "`RuntimeBuilder::io_runtime` and `RuntimeBuilder::io_threads` both set: \
                     connections run either on your runtime or on the harness's threads; \
                     keep one"
                        .into(),
                ));
            }
            (_, Some(t)) if t.count() == 0 => {
                return Err(StartError::System(format!(
                    "`RuntimeBuilder::io_threads({t:?})`: at least one thread is needed"
                )));
            }
            (_, t) => t.unwrap_or_default(),
        };
        if self.child_subreaper {
            mcp_harness_transport::reaper::become_subreaper().map_err(|e| {
                StartError::System(format!(
                    "`RuntimeBuilder::child_subreaper`: cannot become a child subreaper: {e}"
                ))
            })?;
        }
        let initial: Vec<ServerStatus> = self
            .config
            .servers
            .values()
            .map(|s| {
                // As the registry will publish it: an unset variable is a failure that names
                // it, never "disabled" (a command reading the first state would say so).
                let state = match (&s.untrusted, &s.unusable, s.enabled) {
                    (Some(reason), _, _) => ServerState::Untrusted {
                        reason: reason.clone(),
                    },
                    (None, Some(error), _) => ServerState::Failed {
                        error: error.clone(),
                    },
                    (None, None, true) => ServerState::Pending,
                    (None, None, false) => ServerState::Disabled,
                };
                let mut status = ServerStatus::new(&s.name, s.transport.kind(), state);
                status.last_error = s.unusable.clone();
                status
            })
            .collect();
        let current = Arc::new(ArcSwap::from_pointee(Published::empty()));
        let (tx, rx) = watch::channel(Arc::new(Snapshot::empty()));
        let (every, revisions) = broadcast::channel(self.revision_buffer);
        let cache = Arc::new(ListingCache::new(self.cache_entries));
        let (resource_updates, _) = broadcast::channel(RESOURCE_UPDATE_BUFFER);
        let (logs, _) = broadcast::channel(RESOURCE_UPDATE_BUFFER);
        let (task_statuses, _) = broadcast::channel(RESOURCE_UPDATE_BUFFER);
        let gate = Arc::new(RevisionGate::default());
        let progress = Arc::new(ProgressRoutes::default());
        // The pinned threads belong to the actor thread, which stops them after its actors.
        // The actor system's runtime hosts the connections only with `WorkStealing`; otherwise
        // its two workers run the embedder's callbacks and the few tasks actors spawn.
        let (pinned, io, actor_workers) = match (self.io, threads) {
            (Some(handle), _) => (None, IoPlace::Embedder(handle), 2),
            (None, IoThreads::WorkStealing(n)) => (None, IoPlace::Shared, n),
            (None, IoThreads::Pinned(n)) => {
                let (threads, handles) = PinnedThreads::start(n).map_err(|e| {
                    StartError::System(format!("cannot start the harness's I/O threads: {e}"))
                })?;
                (Some(threads), IoPlace::Pinned(handles), 2)
            }
        };
        let shared = matches!(io, IoPlace::Shared);
        let settings = ServerSettings {
            protocol_version: self.protocol_version,
            limits: self.limits,
            metadata: self.config.metadata_limits.clone(),
            cache: cache.clone(),
            resource_updates: resource_updates.clone(),
            logs: logs.clone(),
            task_statuses: task_statuses.clone(),
            callbacks: self.callbacks.clone(),
            progress: progress.clone(),
            reconnect: self.reconnect.clone(),
            queues: ConnectQueues::new(self.local_slots, self.remote_slots, DEFAULT_SLOT_HOLD),
            relist_window: self.relist_window,
            edit_drain: self.edit_drain,
            io,
        };
        let window = self.window;
        let servers: Vec<ServerConfig> = self.config.servers.values().cloned().collect();
        mcp_harness_transport::withhold_env(self.config.secret_env_names());
        let in_process = self.in_process;
        let auth = self.auth;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (current_t, gate_t) = (current.clone(), gate.clone());

        let thread = std::thread::Builder::new()
            .name("mcp-harness-actors".into())
            .spawn(move || {
                let runner = actix::System::with_tokio_rt(|| {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(actor_workers)
                        .thread_name(if shared {
                            "mcp-harness-io"
                        } else {
                            "mcp-harness-tasks"
                        })
                        .enable_all()
                        .build()
                        .unwrap_or_else(|e| panic!("cannot build the tokio runtime: {e}"))
                });
                let started = runner.block_on(async move {
                    let publisher =
                        Publisher::new(window, current_t, (tx, every), gate_t, initial).start();
                    let registry = Registry::new(publisher.clone(), settings, in_process, auth);
                    for server in servers {
                        registry.add(server)?;
                    }
                    Ok((
                        System::current(),
                        Arbiter::current(),
                        publisher,
                        Arc::new(registry),
                    ))
                });
                let _ = ready_tx.send(started);
                let _ = runner.run();
                // The actors are gone; now the sessions still on the pinned threads go too.
                drop(pinned);
            })
            .map_err(|e| StartError::System(e.to_string()))?;

        let (system, arbiter, publisher, registry) = ready_rx
            .recv()
            .map_err(|_| StartError::System("the actor thread died while starting".into()))?
            .map_err(StartError::System)?;
        let output = OutputStore::open(OutputStoreConfig {
            root: self.config.output.dir.clone(),
            page_chars: self.config.output.page_chars.max(1),
            ..OutputStoreConfig::default()
        })
        .map_err(|e| StartError::System(format!("`output.dir`: {e}")))?;
        let live = Arc::new(Live::new(current, rx, revisions, publisher, gate));
        let permissions = Arc::new(LivePermissions::new(self.config.permissions.clone()));
        let calls = Arc::new(CallContext::new(
            live.clone(),
            registry.clone(),
            progress,
            self.callbacks,
            Policy {
                exposure: self.config.exposure.clone(),
                permissions: permissions.clone(),
                approver: self.approver,
                approval_timeout: self.approval_timeout,
            },
            output,
            self.config.output.clone(),
        ));
        let (desired, prewarm_rx) = DesiredState::new(
            self.config.clone(),
            registry.clone(),
            live.clone(),
            permissions,
        );
        let desired = Arc::new(desired);
        arbiter.spawn(prewarmer(Arc::downgrade(&desired), prewarm_rx));
        Ok(Runtime::assemble(Parts {
            live,
            registry,
            #[cfg(feature = "testing")]
            cache,
            resource_updates,
            logs,
            task_statuses,
            calls,
            desired,
            system,
            thread,
        }))
    }
}

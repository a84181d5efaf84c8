//! One client session: the MCP server handler a downstream client talks to, and the state the
//! gateway keeps for all of them.
//!
//! Invariants:
//! - a session's calls bind to the [`StepBinding`] of its last `tools/list` (or, before its
//!   first, to the current revision); a name it did not list is unknown, a tool that changed
//!   since is refused as stale with a result telling the client to list again;
//! - a registered listener (an initialised session's peer, or a 2026-07-28 subscription) is
//!   removed when its session or subscription ends, so the registry holds only live clients;
//! - a client's token or identity never reaches an upstream: calls go out on the runtime's own
//!   connections;
//! - every list, call, get, read, subscribe and completion of an authenticated client is
//!   answered from the view of its profile (the one its HTTP request proved), so what it may
//!   not see is absent from its lists and unknown when named.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use mcp_harness_policy::{ApprovalRequest, Effect};
use mcp_harness_runtime::{
    CallError, CallOptions, ClientProfile, Runtime, StepBinding, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, Reference,
    ResourceUpdatedNotificationParam, ResultType, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};

use crate::GatewayOptions;
use crate::auth::{Clients, Identity};
use crate::bridge::{ClientBridge, as_caller};
use crate::names::{PromptView, ResourceView, ToolView};
use crate::ops::{Audit, CallRecord, Metrics, Outcome};
use crate::sealed::{self, ListedMark};

/// How many recent tool views a gateway remembers by digest, to check a call bound to a
/// listing made on another replica against the definition that listing showed.
const REMEMBERED_VIEWS: usize = 32;

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
}

/// What every session shares: the runtime, the options and the registry of listeners.
pub(crate) struct Shared {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) bridge: ClientBridge,
    pub(crate) metrics: Metrics,
    audit: Option<Audit>,
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
    /// How many sessions subscribe to each (server, URI): upstream holds one subscription.
    subscribed: Mutex<HashMap<(String, String), usize>>,
    /// The latest distinct tool views, newest last (at most [`REMEMBERED_VIEWS`]).
    views: Mutex<std::collections::VecDeque<Arc<ToolView>>>,
}

impl Shared {
    pub(crate) fn new(
        runtime: Arc<Runtime>,
        options: GatewayOptions,
        bridge: ClientBridge,
        audit: Option<Audit>,
        clients: Option<Arc<Clients>>,
    ) -> Self {
        Self {
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
            subscribed: Mutex::new(HashMap::new()),
            views: Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Remembers `view` under its digest (the newest view of a digest wins).
    pub(crate) fn remember(&self, view: &Arc<ToolView>) {
        let mut views = lock(&self.views);
        if views.back().is_some_and(|last| last.digest == view.digest) {
            return;
        }
        views.retain(|known| known.digest != view.digest);
        views.push_back(view.clone());
        while views.len() > REMEMBERED_VIEWS {
            views.pop_front();
        }
    }

    /// The remembered view whose digest is `digest`.
    fn recall(&self, digest: u64) -> Option<Arc<ToolView>> {
        lock(&self.views)
            .iter()
            .rev()
            .find(|view| view.digest == digest)
            .cloned()
    }

    /// Registers session `id` for change notifications (once: a second registration of the same
    /// session keeps what it was told).
    fn register(&self, id: u64, listener: Listener, profile: Option<Arc<ClientProfile>>) {
        if self.sessions.contains_key(&id) {
            return;
        }
        let key = profile.as_ref().map(|p| p.name.clone());
        let told = lock(&self.current).get(&key).copied().unwrap_or_default();
        self.sessions.insert(
            id,
            Registered {
                listener,
                profile,
                told: Mutex::new(told),
            },
        );
    }

    /// Records that session `id` was just shown `digest` of `kind`.
    fn shown(&self, id: u64, kind: ListKind, digest: u64) {
        if let Some(registered) = self.sessions.get(&id) {
            lock(&registered.told).set(kind, digest);
        }
    }

    /// Counts one more session subscribed to `uri` on `server`; true for the first.
    fn hold(&self, server: &str, uri: &str) -> bool {
        let mut held = lock(&self.subscribed);
        let count = held
            .entry((server.to_string(), uri.to_string()))
            .or_default();
        *count += 1;
        *count == 1
    }

    /// Counts one session fewer subscribed to `uri` on `server`; the last one unsubscribes
    /// upstream.
    fn release(self: &Arc<Self>, server: String, uri: String) {
        let last = {
            let mut held = lock(&self.subscribed);
            let key = (server.clone(), uri.clone());
            match held.get_mut(&key) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    held.remove(&key);
                    true
                }
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

    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The profile the HTTP request behind `extensions` proved (`None` over stdio, or without
/// profiles).
fn profile_of(extensions: &rmcp::model::Extensions) -> Option<Arc<ClientProfile>> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .map(|identity| identity.0.clone())
}

pub(crate) use crate::sync::lock;

/// A session's last tool listing: the binding calls run on, the names it showed, and which
/// listing of the session it was (its sequence number, shared with the sealed id).
struct Listed {
    binding: StepBinding,
    view: Arc<ToolView>,
    seq: u32,
}

/// Per-session state; dropping it (the session ended) unregisters the session.
struct SessionState {
    id: u64,
    shared: Arc<Shared>,
    listed: Mutex<Option<Arc<Listed>>>,
    /// Bounds the calls in flight in this session.
    calls: Arc<tokio::sync::Semaphore>,
    /// This session's resource subscriptions: (server, URI) → the task forwarding updates.
    subscriptions: Mutex<HashMap<(String, String), tokio::task::JoinHandle<()>>>,
    /// The least severe log level this client asked for (`logging/setLevel`; the
    /// `LoggingLevel` discriminant, `Debug` = 0 = everything until it asks).
    log_level: std::sync::atomic::AtomicU8,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.shared.sessions.remove(&self.id);
        self.shared.closed.fetch_add(1, Ordering::Relaxed);
        let subscriptions = std::mem::take(&mut *lock(&self.subscriptions));
        for ((server, uri), task) in subscriptions {
            task.abort();
            self.shared.release(server, uri);
        }
    }
}

/// Removes a registration when dropped.
struct Unregister<'a>(&'a Shared, u64);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0.sessions.remove(&self.1);
    }
}

/// The handler of one client session (rmcp builds one per session, and one per stateless
/// request).
#[derive(Clone)]
pub(crate) struct Session {
    state: Arc<SessionState>,
}

impl Session {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            state: Arc::new(SessionState {
                id: shared.fresh_id(),
                calls: Arc::new(tokio::sync::Semaphore::new(
                    shared.options.max_calls_per_session.max(1),
                )),
                shared,
                listed: Mutex::new(None),
                subscriptions: Mutex::new(HashMap::new()),
                log_level: std::sync::atomic::AtomicU8::new(0),
            }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.state.shared
    }

    fn runtime(&self) -> &Runtime {
        &self.state.shared.runtime
    }

    async fn bind_now(&self, profile: Option<&ClientProfile>) -> Result<Listed, McpError> {
        let binding = self
            .runtime()
            .bind_step(&[])
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let view = Arc::new(ToolView::new(
            &binding,
            self.shared().options.prefix,
            profile,
        ));
        self.shared().remember(&view);
        Ok(Listed {
            binding,
            view,
            seq: 0,
        })
    }

    /// The listing a call runs on. The session's own listing here, unless its id says the
    /// client listed later elsewhere (another replica): then the current catalog, provided it
    /// shows the requested tool exactly as that listing did (checked by the listing's digest,
    /// against the views this replica remembers); else the call is refused as stale.
    async fn listing_for_call(
        &self,
        requested: &str,
        mark: Option<ListedMark>,
        profile: Option<&ClientProfile>,
    ) -> Result<Arc<Listed>, Failure> {
        let local = lock(&self.state.listed).clone();
        let mark = match (local, mark) {
            (Some(local), Some(mark)) if mark.seq > local.seq => mark,
            (Some(local), _) => return Ok(local),
            (None, Some(mark)) => mark,
            (None, None) => {
                return self
                    .bind_now(profile)
                    .await
                    .map(Arc::new)
                    .map_err(Failure::Rpc);
            }
        };
        let current = self.bind_now(profile).await.map_err(Failure::Rpc)?;
        if current.view.digest == mark.tools {
            return Ok(Arc::new(current));
        }
        let listed = self.shared().recall(mark.tools);
        let same = listed.as_ref().is_some_and(|listed| {
            listed
                .tool(requested)
                .is_some_and(|then| current.view.tool(requested) == Some(then))
        });
        if same {
            return Ok(Arc::new(current));
        }
        if listed.is_some_and(|listed| listed.tool(requested).is_none()) {
            return Err(Failure::Call(CallError::NotInStep {
                name: requested.to_string(),
                revision: current.binding.revision(),
                hint: String::new(),
            }));
        }
        Err(Failure::Stale(format!(
            "`{requested}` was not run: this session listed tools through another gateway replica, and this replica's catalog does not show `{requested}` as that listing did (catalog digest {:016x}). List tools again (tools/list) and retry with the definition you get.",
            mark.tools
        )))
    }
}

/// Why a call produced no result.
enum Failure {
    /// The runtime refused or failed the call.
    Call(CallError),
    /// The gateway could not bind the catalog.
    Rpc(McpError),
    /// The client's listing (made on another replica) does not match this replica's catalog.
    Stale(String),
}

impl Session {
    /// Binds, resolves and runs one call: (the server it went to, what came back).
    async fn run_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> (Option<String>, Result<ToolResult, Failure>) {
        let profile = profile_of(&context.extensions);
        let mark = sealed::opened(&context.extensions).and_then(|opened| opened.payload.listed);
        let requested = request.name.as_ref();
        let listed = match self
            .listing_for_call(requested, mark, profile.as_deref())
            .await
        {
            Ok(listed) => listed,
            Err(failure) => return (None, Err(failure)),
        };
        let Some(name) = listed.view.resolve(requested) else {
            let error = CallError::NotInStep {
                name: requested.to_string(),
                revision: listed.binding.revision(),
                hint: String::new(),
            };
            return (None, Err(Failure::Call(error)));
        };
        let server = listed
            .binding
            .snapshot()
            .tool(name)
            .map(|entry| entry.server.clone());
        let call = match listed.binding.prepare_call(name) {
            Ok(call) => call,
            Err(error) => return (server, Err(Failure::Call(error))),
        };
        let mut approved = false;
        if let Some(profile) = &profile {
            let args = request.arguments.clone().unwrap_or_default();
            if let Some(rule) = profile.permissions.matching(name, &args) {
                let text = format!(
                    "rule `{}` in `gateway.clients.{}.permissions.{}`",
                    rule.text(),
                    profile.name,
                    rule.effect().key()
                );
                match rule.effect() {
                    Effect::Deny => {
                        let error = CallError::Permission {
                            name: name.to_string(),
                            reason: format!("{text} denies `{name}`"),
                        };
                        return (server, Err(Failure::Call(error)));
                    }
                    Effect::Ask => {
                        let ask = ApprovalRequest {
                            qualified_name: name.to_string(),
                            server: server.clone().unwrap_or_default(),
                            args,
                            reason: format!("{text} asks before `{name}` runs"),
                            annotations: listed
                                .binding
                                .snapshot()
                                .tool(name)
                                .and_then(|entry| entry.tool.annotations.clone()),
                        };
                        let answer = as_caller(
                            context.peer.clone(),
                            self.shared().bridge.approver().approve(ask),
                        )
                        .await;
                        match answer {
                            mcp_harness_policy::Approval::Approved => approved = true,
                            mcp_harness_policy::Approval::Denied { reason } => {
                                let error = CallError::Permission {
                                    name: name.to_string(),
                                    reason,
                                };
                                return (server, Err(Failure::Call(error)));
                            }
                            mcp_harness_policy::Approval::Cancelled => {
                                let error = CallError::Permission {
                                    name: name.to_string(),
                                    reason: "the approval was cancelled".into(),
                                };
                                return (server, Err(Failure::Call(error)));
                            }
                        }
                    }
                    Effect::Allow => approved = true,
                }
            }
        }
        let mut options = CallOptions {
            cancel: Some(context.ct.clone()),
            ..CallOptions::default()
        };
        let forward = context.meta.get_progress_token().map(|token| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProgressNotificationParam>();
            options.progress = Some(tx);
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some(mut progress) = rx.recv().await {
                    progress.progress_token = token.clone();
                    if peer.notify_progress(progress).await.is_err() {
                        break;
                    }
                }
            })
        });
        let logs = server
            .clone()
            .map(|server| self.forward_logs(server, context.peer.clone()));
        let _in_flight = server
            .as_deref()
            .map(|server| self.shared().bridge.enter(server, context.peer.clone()));
        let run = call.call_with(request.arguments, options);
        let outcome = if approved {
            as_caller(
                context.peer.clone(),
                crate::bridge::approved(name.to_string(), run),
            )
            .await
        } else {
            as_caller(context.peer.clone(), run).await
        };
        if let Some(forward) = forward {
            // The sender went with the options: the forwarder ends after the last progress.
            let _ = forward.await;
        }
        if let Some((stop, forwarder)) = logs {
            let _ = stop.send(());
            let _ = forwarder.await;
        }
        (server, outcome.map_err(Failure::Call))
    }

    /// Forwards the log notifications `server` sends from now on to `peer` (the client calling
    /// it), at or above the level that client set. Sending on the returned stop ends it after
    /// it forwarded what had arrived by then (the runtime broadcasts a log line before the
    /// call's result comes back, so the caller gets its call's lines before the result).
    #[allow(deprecated)] // logging: every protocol before 2026-07-28
    fn forward_logs(
        &self,
        server: String,
        peer: Peer<RoleServer>,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        let mut rx = self.runtime().server_logs();
        let state = self.state.clone();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut forwarded = false;
            let wanted = |log: &mcp_harness_runtime::ServerLog| {
                log.server == server
                    && (log.params.level as u8) >= state.log_level.load(Ordering::Relaxed)
            };
            loop {
                let log = tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    log = rx.recv() => log,
                };
                match log {
                    Ok(log) if wanted(&log) => {
                        forwarded = true;
                        if peer.notify_logging_message(log.params).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(%server, missed, "log forwarder fell behind");
                    }
                    Err(RecvError::Closed) => return,
                }
            }
            // The call ended. rmcp runs an upstream's notification handlers in tasks of their
            // own, so a line the upstream sent just before its result may still be on its way:
            // a call that logged waits up to LOG_GRACE for such stragglers; one that did not
            // takes only what has arrived (no added latency).
            let deadline = tokio::time::Instant::now() + LOG_GRACE;
            loop {
                let log = if forwarded {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Ok(log)) => log,
                        Ok(Err(RecvError::Lagged(_))) => continue,
                        Ok(Err(RecvError::Closed)) | Err(_) => return,
                    }
                } else {
                    match rx.try_recv() {
                        Ok(log) => log,
                        Err(TryRecvError::Lagged(_)) => continue,
                        Err(TryRecvError::Empty | TryRecvError::Closed) => return,
                    }
                };
                if wanted(&log) && peer.notify_logging_message(log.params).await.is_err() {
                    return;
                }
            }
        });
        (stop, task)
    }
}

/// A refusal the calling model should read (a tool error result), or a JSON-RPC error for a
/// request that names nothing this session listed.
fn refusal(requested: &str, error: CallError) -> Result<CallToolResponse, McpError> {
    match error {
        CallError::UnknownTool { revision, .. } | CallError::NotInStep { revision, .. } => {
            Err(McpError::invalid_params(
                format!(
                    "unknown tool `{requested}`: not among the tools this session listed (catalog revision {revision}); list tools again (tools/list)"
                ),
                None,
            ))
        }
        CallError::Stale { .. } => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{error}. The tool changed since this session listed tools: list tools again (tools/list) and retry with the new definition."
        ))])
        .into()),
        other => Ok(CallToolResult::error(vec![ContentBlock::text(other.to_string())]).into()),
    }
}

/// How long a call that forwarded log lines waits, after its result, for lines its upstream
/// sent just before the result (their handlers run in tasks of their own).
const LOG_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// The error a client gets for a failed prompts/get, resources/read or completion/complete:
/// the upstream's own JSON-RPC error as it sent it (e.g. -32602 with `data.uri` for an unknown
/// resource), else an internal error saying what failed.
fn upstream_error(error: CallError) -> McpError {
    match error {
        CallError::Protocol {
            upstream: Some(data),
            ..
        } => *data,
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// The result a client gets: the normalised one (output budget applied), `isError` kept.
fn downstream_result(result: ToolResult) -> CallToolResult {
    let normalized = result.normalized;
    let mut out = if normalized.is_error {
        CallToolResult::error(normalized.content)
    } else {
        CallToolResult::success(normalized.content)
    };
    out.structured_content = normalized.structured_content;
    out.meta = normalized.meta;
    out
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)] // logging: every protocol before 2026-07-28
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_completions()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            &self.shared().options.name,
            env!("CARGO_PKG_VERSION"),
        ))
    }

    /// The upstream's own tool `name` as listed to this session (rmcp checks SEP-2243
    /// `Mcp-Param-*` headers against its `x-mcp-header` annotations): from the session's last
    /// listing, else from the current catalog.
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        if let Some(listed) = lock(&self.state.listed).as_ref() {
            return listed.view.tools.iter().find(|t| t.name == name).cloned();
        }
        let snapshot = self.runtime().snapshot();
        let prefix = self.shared().options.prefix;
        let found = snapshot.tools().find(|entry| match prefix {
            crate::Prefix::None => entry.raw_name == name,
            crate::Prefix::Server => entry.qualified_name == name,
        });
        found.map(|entry| {
            let mut tool = (*entry.tool).clone();
            tool.name = name.to_string().into();
            tool
        })
    }

    #[allow(deprecated)] // logging/setLevel: every protocol before 2026-07-28
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state
            .log_level
            .store(request.level as u8, Ordering::Relaxed);
        Ok(())
    }

    /// Registers the session for change notifications already at `initialize`: behind a load
    /// balancer the client's `notifications/initialized` may reach another replica than the one
    /// that opened the session and later holds its GET stream.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let profile = profile_of(&context.extensions);
        self.shared()
            .register(self.state.id, Listener::Peer(context.peer.clone()), profile);
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let profile = profile_of(&context.extensions);
        tracing::debug!(
            session = self.state.id,
            client = profile.as_ref().map(|p| p.name.as_str()),
            "client initialized"
        );
        self.shared()
            .register(self.state.id, Listener::Peer(context.peer), profile);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let profile = profile_of(&context.extensions);
        let mut listed = self.bind_now(profile.as_deref()).await?;
        let opened = sealed::opened(&context.extensions);
        let local = lock(&self.state.listed).as_ref().map_or(0, |l| l.seq);
        let sealed_seq = opened
            .as_ref()
            .and_then(|o| o.payload.listed)
            .map_or(0, |mark| mark.seq);
        listed.seq = local.max(sealed_seq).saturating_add(1);
        if let Some(opened) = &opened {
            let mark = ListedMark {
                seq: listed.seq,
                tools: listed.view.digest,
            };
            opened.sealer.listed(&opened.payload.session, mark);
        }
        let listed = Arc::new(listed);
        let tools = listed.view.tools.clone();
        self.shared()
            .shown(self.state.id, ListKind::Tools, listed.view.digest);
        *lock(&self.state.listed) = Some(listed);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Ok(_permit) = self.state.calls.clone().try_acquire_owned() else {
            let limit = self.shared().options.max_calls_per_session;
            return Err(McpError::new(
                rmcp::model::ErrorCode(-32000),
                format!(
                    "too many calls in flight in this session (at most {limit}); retry when one has finished"
                ),
                Some(serde_json::json!({"retryAfterMs": 1000})),
            ));
        };
        let started = std::time::Instant::now();
        // The profile's name when the client proved one, else the name it gave itself.
        let client = match profile_of(&context.extensions) {
            Some(profile) => profile.name.clone(),
            None => context
                .peer
                .peer_info()
                .map(|info| info.client_info.name.clone())
                .unwrap_or_else(|| "unknown".into()),
        };
        let tool = request.name.to_string();
        let arguments = request.arguments.clone();
        let (server, attempt) = self.run_call(request, context).await;
        let outcome = match &attempt {
            Ok(result) if result.is_error() => Outcome::ToolError,
            Ok(_) => Outcome::Ok,
            Err(Failure::Call(error)) => match error {
                CallError::UnknownTool { .. } | CallError::NotInStep { .. } => Outcome::Unknown,
                CallError::Stale { .. } => Outcome::Stale,
                CallError::Permission { .. } => Outcome::Refused,
                _ => Outcome::Failed,
            },
            Err(Failure::Rpc(_)) => Outcome::Failed,
            Err(Failure::Stale(_)) => Outcome::Stale,
        };
        self.shared().metrics.record(
            &CallRecord {
                client: &client,
                server: server.as_deref().unwrap_or("-"),
                tool: &tool,
                outcome,
                duration: started.elapsed(),
                arguments: arguments.as_ref(),
            },
            self.shared().audit.as_ref(),
        );
        match attempt {
            Ok(result) => Ok(downstream_result(result).into()),
            Err(Failure::Call(error)) => refusal(&tool, error),
            Err(Failure::Rpc(error)) => Err(error),
            Err(Failure::Stale(text)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into())
            }
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let profile = profile_of(&context.extensions);
        let view = PromptView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile.as_deref(),
        );
        self.shared()
            .shown(self.state.id, ListKind::Prompts, view.digest);
        Ok(ListPromptsResult::with_all_items(view.prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let profile = profile_of(&context.extensions);
        let view = PromptView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile.as_deref(),
        );
        let Some(target) = view.resolve(&request.name) else {
            return Err(McpError::invalid_params(
                format!(
                    "unknown prompt `{}`; list prompts again (prompts/list)",
                    request.name
                ),
                None,
            ));
        };
        self.runtime()
            .get_prompt(&target.server, &target.raw_name, request.arguments)
            .await
            .map(|mut result| {
                // An upstream of an older protocol sends none; rmcp drops it for such clients.
                result.result_type.get_or_insert(ResultType::COMPLETE);
                result.into()
            })
            .map_err(upstream_error)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let profile = profile_of(&context.extensions);
        let view = ResourceView::new(&self.runtime().snapshot(), profile.as_deref());
        self.shared()
            .shown(self.state.id, ListKind::Resources, view.digest);
        Ok(ListResourcesResult::with_all_items(view.resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let profile = profile_of(&context.extensions);
        let view = ResourceView::new(&self.runtime().snapshot(), profile.as_deref());
        Ok(ListResourceTemplatesResult::with_all_items(view.templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let profile = profile_of(&context.extensions);
        let view = ResourceView::new(&self.runtime().snapshot(), profile.as_deref());
        let Some(server) = view.owner(&request.uri) else {
            return Err(McpError::resource_not_found(
                format!(
                    "no connected server lists resource `{}`; list resources again (resources/list)",
                    request.uri
                ),
                None,
            ));
        };
        self.runtime()
            .read_resource(server, &request.uri)
            .await
            .map(|mut result| {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                result.into()
            })
            .map_err(upstream_error)
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let profile = profile_of(&context.extensions);
        let profile = profile.as_deref();
        let snapshot = self.runtime().snapshot();
        let server = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let view = PromptView::new(&snapshot, self.shared().options.prefix, profile);
                let target = view.resolve(&prompt.name).ok_or_else(|| {
                    McpError::invalid_params(
                        format!(
                            "unknown prompt `{}`; list prompts again (prompts/list)",
                            prompt.name
                        ),
                        None,
                    )
                })?;
                prompt.name = target.raw_name.clone();
                target.server.clone()
            }
            Reference::Resource(resource) => ResourceView::new(&snapshot, profile)
                .owner(&resource.uri)
                .map(str::to_string)
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!(
                            "no connected server lists resource template `{}`",
                            resource.uri
                        ),
                        None,
                    )
                })?,
            _ => {
                return Err(McpError::invalid_params(
                    "completion/complete: unknown reference type",
                    None,
                ));
            }
        };
        self.runtime()
            .complete(&server, request)
            .await
            .map(|mut result| {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                result
            })
            .map_err(upstream_error)
    }

    #[allow(deprecated)] // resources/subscribe: every protocol before 2026-07-28
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let uri = request.uri;
        let profile = profile_of(&context.extensions);
        let server = ResourceView::new(&self.runtime().snapshot(), profile.as_deref())
            .owner(&uri)
            .map(str::to_string)
            .ok_or_else(|| {
                McpError::resource_not_found(
                    format!("no connected server lists resource `{uri}`; list resources again"),
                    None,
                )
            })?;
        let key = (server.clone(), uri.clone());
        if lock(&self.state.subscriptions).contains_key(&key) {
            return Ok(());
        }
        let first = self.state.shared.hold(&server, &uri);
        let subscription = if first {
            self.runtime().subscribe_resource(&server, &uri).await
        } else {
            Ok(self.runtime().resource_updates(&server, &uri))
        };
        let mut subscription = match subscription {
            Ok(subscription) => subscription,
            Err(error) => {
                self.state.shared.release(server, uri);
                return Err(McpError::internal_error(error.to_string(), None));
            }
        };
        let peer = context.peer.clone();
        let forwarded = uri.clone();
        let task = tokio::spawn(async move {
            while subscription.next().await.is_some() {
                let update = ResourceUpdatedNotificationParam::new(forwarded.clone());
                if peer.notify_resource_updated(update).await.is_err() {
                    break;
                }
            }
        });
        lock(&self.state.subscriptions).insert(key, task);
        Ok(())
    }

    #[allow(deprecated)] // resources/unsubscribe: every protocol before 2026-07-28
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let found = {
            let mut subscriptions = lock(&self.state.subscriptions);
            let key = subscriptions
                .keys()
                .find(|(_, uri)| *uri == request.uri)
                .cloned();
            key.and_then(|key| subscriptions.remove(&key).map(|task| (key, task)))
        };
        if let Some(((server, uri), task)) = found {
            task.abort();
            self.state.shared.release(server, uri);
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        accepted.prompts_list_changed = requested.prompts_list_changed;
        accepted.resources_list_changed = requested.resources_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let id = self.shared().fresh_id();
        let profile = profile_of(&context.request_context().extensions);
        self.shared()
            .register(id, Listener::Subscription(context.sink().clone()), profile);
        // Unregisters however the subscription ends (cancelled, or this future dropped).
        let _unregister = Unregister(self.shared(), id);
        context.cancelled().await;
        Ok(())
    }
}

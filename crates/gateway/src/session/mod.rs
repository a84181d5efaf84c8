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
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use mcp_harness_runtime::{CallError, CallReply, Reply, Runtime, StepBinding};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetSkillRequestParams, GetSkillResult, GetTaskParams, GetTaskResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceDirectoryRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, Reference, ResourceUpdatedNotificationParam,
    ResultType, ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::names::{PromptView, ResourceView, SkillView, ToolView, resources_digest};
use crate::ops::{CallRecord, Outcome};
use crate::sealed::{self, ListedMark};
use crate::spans::Target::{Prompt, Resource};
use crate::spans::{end_upstream, meta};
use crate::sync::lock;

mod augmented;
pub(crate) mod augmented_front;
pub(crate) mod augmented_lines;
pub(crate) mod augmented_status;
mod call;
pub(crate) mod direct;
mod mrtr;
mod progress;
mod shared;
mod skills;
mod tasks;

use call::{Failure, downstream_result, refusal, upstream_error};
use shared::profile_of;
pub(crate) use shared::{Digests, ListKind, Listener, Shared};
use tasks::MISSING_CAPABILITY;

/// A session's last tool listing: the binding calls run on, the names it showed, and which
/// listing of the session it was (its sequence number, shared with the sealed id).
struct Listed {
    binding: StepBinding,
    view: Arc<ToolView>,
    seq: u32,
}

/// A subscription's task forwarding updates to the session (`None` while it is being made).
type Forwarder = Option<tokio::task::JoinHandle<()>>;

/// The most resource subscriptions one session holds (a template lets a client name any
/// number of URIs; each held subscription costs a task and, for the first holder, an upstream
/// subscription). Concurrent subscribes of one session may pass it by at most its calls in
/// flight.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 256;

/// Per-session state; dropping it (the session ended) unregisters the session.
struct SessionState {
    id: u64,
    shared: Arc<Shared>,
    listed: Mutex<Option<Arc<Listed>>>,
    /// The deferred tools this client loaded through tool search (binding names), loaded again
    /// into each new listing: a host lists again after the `list_changed` a search sends, and
    /// what its model found must stay. What the last search's listing held: within its load
    /// budget.
    loaded: Mutex<Vec<String>>,
    /// Bounds the calls in flight in this session.
    calls: Arc<tokio::sync::Semaphore>,
    /// This session's resource subscriptions: (server, URI) → the task forwarding updates
    /// (`None` while the subscription is being made: a concurrent subscribe of the same URI
    /// finds it taken, and an unsubscribe meanwhile leaves the maker to undo it).
    subscriptions: Mutex<HashMap<(String, String), Forwarder>>,
    /// The level this client last asked for (`logging/setLevel`; the `LoggingLevel`
    /// discriminant) plus one, 0 while it never asked: it is forwarded log lines at or above
    /// that level (everything until it asks), and the ask is counted in the level asked of the
    /// upstreams while the session lives.
    log_asked: std::sync::atomic::AtomicU8,
    /// The stdio front of SEP-1686 pass-through, for the stdio session.
    lines: Option<Arc<augmented_lines::Lines>>,
    /// The session identity it is found by in [`Shared::held`], once its client initialized.
    http_key: std::sync::OnceLock<Arc<str>>,
    /// `initialize` was answered: a second one is refused (it would change the client's
    /// declared capabilities and version mid-session).
    initialized: std::sync::atomic::AtomicBool,
    /// Cancelled when the gateway stops waiting for this session's calls (its drain deadline
    /// passed, a second stop signal, or the stdio client gone): each call still running is
    /// cancelled, its server told, and its client answered that the call was cut.
    cut: tokio_util::sync::CancellationToken,
}

impl SessionState {
    /// The least severe level of the log lines this client is forwarded (`Debug`, everything,
    /// until it asks).
    fn log_level(&self) -> u8 {
        self.log_asked
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(1)
    }
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.shared.sessions.remove(&self.id);
        self.shared.bridge.leave(self.id);
        if let Some(key) = self.http_key.get() {
            self.shared.held.remove(key, self);
        }
        self.shared.task_ids.routes.forget_session(self.id);
        self.shared.closed.fetch_add(1, Ordering::Relaxed);
        let subscriptions = std::mem::take(&mut *lock(&self.subscriptions));
        for ((server, uri), task) in subscriptions {
            if let Some(task) = task {
                task.abort();
                self.shared.release(server, uri);
            }
        }
        let asked = *self.log_asked.get_mut();
        if let Some(level) = asked.checked_sub(1)
            && self.shared.log_level.forget(level)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            // The most verbose asker left: the upstreams are asked for the next one.
            let shared = self.shared.clone();
            handle.spawn(async move { shared.log_level.apply(&shared.runtime).await });
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
    /// A session whose calls still running are cut when `cut` is cancelled.
    pub(crate) fn new(shared: Arc<Shared>, cut: tokio_util::sync::CancellationToken) -> Self {
        Self::with_lines(shared, None, cut)
    }

    /// The session of a client whose lines pass `lines` (the stdio front).
    pub(crate) fn with_lines(
        shared: Arc<Shared>,
        lines: Option<Arc<augmented_lines::Lines>>,
        cut: tokio_util::sync::CancellationToken,
    ) -> Self {
        Self {
            state: Arc::new(SessionState {
                id: shared.fresh_id(),
                calls: Arc::new(tokio::sync::Semaphore::new(
                    shared.options.max_calls_per_session.max(1),
                )),
                shared,
                listed: Mutex::new(None),
                loaded: Mutex::new(Vec::new()),
                subscriptions: Mutex::new(HashMap::new()),
                log_asked: std::sync::atomic::AtomicU8::new(0),
                lines,
                http_key: std::sync::OnceLock::new(),
                initialized: std::sync::atomic::AtomicBool::new(false),
                cut,
            }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.state.shared
    }

    fn runtime(&self) -> &Runtime {
        &self.state.shared.runtime
    }

    /// The client span of `method` sent to `server` for the request of `context` (`None`: not
    /// traced).
    fn upstream(
        &self,
        context: &RequestContext<RoleServer>,
        method: &'static str,
        target: crate::spans::Target<'_>,
        server: &str,
    ) -> Option<crate::trace::Span> {
        let tracer = self.shared().tracer.as_ref();
        crate::spans::upstream(tracer, &context.extensions, method, target, server)
    }

    /// The resources `profile` may see in the current snapshot.
    fn resource_view(&self, profile: Option<&mcp_harness_runtime::ClientProfile>) -> ResourceView {
        ResourceView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile,
        )
    }
}

/// Refuses a list request's `cursor` (`-32602`): every list is answered in one page, so no
/// cursor was handed out and one sent is not the gateway's (answering it with the first page
/// would repeat entries to a client that follows it).
fn no_cursor(request: Option<&PaginatedRequestParams>, method: &str) -> Result<(), McpError> {
    match request.and_then(|r| r.cursor.as_deref()) {
        Some(cursor) if !cursor.is_empty() => Err(McpError::invalid_params(
            format!(
                "unknown `cursor` for {method}: the gateway answers it in one page and hands out \
                 no cursor; list again without one"
            ),
            None,
        )),
        _ => Ok(()),
    }
}

impl Session {
    /// One `tools/call` on the governed path (the session's call limit, its listing, the
    /// profile's rules, metrics and audit): what came back, and whether the client answers
    /// its own `input_required` rounds (and the server it went to). With `task` (a 2025-11-25 client's SEP-1686 `task`
    /// parameter) the call goes upstream task-augmented and its task comes back.
    async fn governed_call(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
        task: Option<rmcp::model::JsonObject>,
    ) -> Result<(Option<call::Called>, Result<CallReply, Failure>, bool), McpError> {
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
        let Ok(_permit) = self.state.calls.clone().try_acquire_owned() else {
            // Counted (and audited) like any call the gateway refused before running it.
            self.shared().metrics.record(
                &CallRecord {
                    client: &client,
                    server: "-",
                    tool: &tool,
                    outcome: Outcome::Throttled,
                    duration: started.elapsed(),
                    arguments: None,
                },
                self.shared().audit.as_ref(),
            );
            let limit = self.shared().options.max_calls_per_session;
            return Err(McpError::new(
                rmcp::model::ErrorCode(-32000),
                format!(
                    "too many calls in flight in this session (at most {limit}); retry when one has finished"
                ),
                Some(serde_json::json!({"retryAfterMs": 1000})),
            ));
        };
        let notes = crate::spans::notes(&context.extensions);
        // Kept for the audit line only when it carries them: a deep copy of every call's
        // arguments otherwise.
        let arguments = match &self.shared().audit {
            Some(audit) if audit.wants_arguments() => request.arguments.clone(),
            _ => None,
        };
        let rounds = mrtr::Rounds::of(
            &context,
            request.input_responses.clone(),
            request.request_state.clone(),
        );
        let pass_through = rounds.pass_through;
        let mut rounds = rounds;
        if task.is_some() {
            context.extensions.insert(augmented_front::AugmentedCall);
        }
        rounds.forward.task = task;
        // Boxed: the call's future is large, and every async frame above this one would
        // otherwise hold (and move) a copy of its size.
        let (called, attempt) = Box::pin(self.run_call(request, context, rounds)).await;
        let server = called.as_ref().map(|c| c.server.as_str());
        let outcome = match &attempt {
            Ok(CallReply::Done(result)) if result.is_error() => Outcome::ToolError,
            Ok(CallReply::Done(_)) => Outcome::Ok,
            Ok(CallReply::Task(_)) => Outcome::Task,
            Ok(CallReply::InputRequired(_)) => Outcome::InputRequired,
            Err(Failure::Call(error)) => match error {
                CallError::UnknownTool { .. } | CallError::NotInStep { .. } => Outcome::Unknown,
                CallError::Stale { .. } => Outcome::Stale,
                CallError::Permission { .. } => Outcome::Refused,
                CallError::InvalidArguments { .. } => Outcome::InvalidArguments,
                CallError::Timeout { .. } => Outcome::Timeout,
                _ => Outcome::Failed,
            },
            // A task-only tool called plainly, or a task asked of a tool that takes none.
            Err(Failure::Rpc(error))
                if error.code.0 == MISSING_CAPABILITY
                    || error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
            {
                Outcome::Refused
            }
            Err(Failure::Rpc(_)) => Outcome::Failed,
            Err(Failure::Stale(_)) => Outcome::Stale,
        };
        self.shared().metrics.record(
            &CallRecord {
                client: &client,
                server: server.unwrap_or("-"),
                tool: &tool,
                outcome,
                duration: started.elapsed(),
                arguments: arguments.as_ref(),
            },
            self.shared().audit.as_ref(),
        );
        if let Some(notes) = notes {
            notes.call(server, outcome.as_str());
        }
        Ok((called, attempt, pass_through))
    }
}

/// A resource subscription being made by one session, which holds its reservation and an
/// upstream hold ([`Shared::hold`]): dropped while still armed (the upstream refused it, or the
/// request was cancelled and its future dropped), it removes the reservation and gives the
/// hold back, so neither outlives the request.
struct Making<'a> {
    state: &'a SessionState,
    /// (server, the upstream's URI).
    key: (String, String),
    /// Not yet in place.
    armed: bool,
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        {
            let mut held = lock(&self.state.subscriptions);
            if held.get(&self.key).is_some_and(Option::is_none) {
                held.remove(&self.key);
            }
        }
        let (server, uri) = self.key.clone();
        self.state.shared.release(server, uri);
    }
}

/// The resource subscriptions of one 2026-07-28 `subscriptions/listen` stream: each held
/// upstream (shared with every other subscriber of the resource) and its updates sent on the
/// stream, until this is dropped.
struct ListenedResources {
    shared: Arc<Shared>,
    /// Each resource held, from before its upstream subscription is awaited (the listen may be
    /// dropped while it is), with the task forwarding its updates once there is one.
    held: Vec<((String, String), Forwarder)>,
}

impl Drop for ListenedResources {
    fn drop(&mut self) {
        for ((server, uri), forward) in self.held.drain(..) {
            if let Some(forward) = forward {
                forward.abort();
            }
            self.shared.release(server, uri);
        }
    }
}

impl Session {
    /// Subscribes `context`'s stream to the resources its acknowledgement took, routed for
    /// `profile`. One upstream refuses (or no longer lists) is left out, said in the log: the
    /// acknowledgement went before.
    async fn listen_to_resources(
        &self,
        context: &SubscriptionContext,
        profile: Option<&mcp_harness_runtime::ClientProfile>,
    ) -> ListenedResources {
        let shared = self.state.shared.clone();
        let mut listened = ListenedResources {
            shared: shared.clone(),
            held: Vec::new(),
        };
        let Some(mut uris) = context.accepted().resource_subscriptions.clone() else {
            return listened;
        };
        // A URI asked twice is held (and heard of) once.
        uris.sort_unstable();
        uris.dedup();
        let view = self.resource_view(profile);
        for uri in uris {
            let Some((server, upstream)) = view.route(&uri) else {
                tracing::debug!(%uri, "a listened resource no connected server lists now; left out");
                continue;
            };
            let (upstream_held, mut updates) = shared.hold(&server, &upstream);
            listened
                .held
                .push(((server.clone(), upstream.clone()), None));
            if let Err(error) = shared
                .ensure_upstream(&upstream_held, &server, &upstream)
                .await
            {
                tracing::debug!(%server, %uri, %error, "resources/subscribe for a listen stream refused upstream; left out");
                listened.held.pop();
                shared.release(server, upstream);
                continue;
            }
            let sink = context.sink().clone();
            let forward = tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match updates.recv().await {
                        Ok(()) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => break,
                    }
                    if sink.notify_resource_updated(uri.clone()).await.is_err() {
                        break;
                    }
                }
            });
            if let Some((_, slot)) = listened.held.last_mut() {
                *slot = Some(forward);
            }
        }
        listened
    }
}

/// Whether `arguments` fit `prompt`'s declared arguments: every required one given (a null is
/// not given), every value a string (the protocol's prompt arguments are strings).
fn prompt_arguments(
    prompt: &rmcp::model::Prompt,
    arguments: Option<&rmcp::model::JsonObject>,
) -> Result<(), String> {
    let given = |name: &str| arguments.and_then(|a| a.get(name)).filter(|v| !v.is_null());
    let missing: Vec<String> = prompt
        .arguments
        .iter()
        .flatten()
        .filter(|a| a.required == Some(true) && given(&a.name).is_none())
        .map(|a| format!("`{}`", a.name))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing required argument {}", missing.join(", ")));
    }
    let not_text: Vec<String> = arguments
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_string() && !v.is_null())
        .map(|(k, _)| format!("`{k}`"))
        .collect();
    match not_text.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "the value of {} is not a string (a prompt's arguments are strings)",
            not_text.join(", ")
        )),
    }
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
            .enable_completions();
        let capabilities = match self.skills_capability() {
            Some(skills) if skills.directory_read => {
                capabilities.enable_skills_with_directory_read()
            }
            Some(_) => capabilities.enable_skills(),
            None => capabilities,
        };
        let capabilities = if self.shared().serves_tasks() {
            capabilities.enable_tasks()
        } else {
            capabilities
        }
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
        let found = match prefix {
            crate::Prefix::None => snapshot.tools().find(|entry| entry.raw_name == name),
            crate::Prefix::Server => snapshot.tool(name),
        };
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
        let level = request.level as u8;
        let previous = self.state.log_asked.swap(level + 1, Ordering::Relaxed);
        let shared = self.shared();
        shared.log_level.ask(previous.checked_sub(1), level);
        // In force upstream before the answer, as the client expects of its own setLevel.
        shared.log_level.apply(&shared.runtime).await;
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
        if self.state.initialized.swap(true, Ordering::AcqRel) {
            return Err(McpError::invalid_request(
                "this session is already initialized: `initialize` comes once, first (open a \
                 new session to start over)",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.augmented_initialize(&request, &context).await;
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
        // An HTTP session (its id opened by the sealing layer) can serve direct calls now.
        if let Some(opened) = sealed::opened(&context.extensions) {
            self.shared()
                .held
                .insert(&opened.payload.session, &self.state, context.peer.clone());
        }
        // The stdio client is the only one: an upstream's request outside any call (its roots
        // asked at start, say) is its.
        if self.state.lines.is_some() {
            self.shared()
                .bridge
                .reside(self.state.id, context.peer.clone());
            // Upstreams that asked for roots before the client came got none: told the roots
            // changed, they ask again, and the client answers.
            if self.shared().bridge.sole_resident(self.state.id)
                && context
                    .peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.roots.is_some())
            {
                let shared = self.state.shared.clone();
                tokio::spawn(async move {
                    let told = shared.runtime.notify_roots_changed().await;
                    tracing::debug!(told, "upstreams told the stdio client's roots are here");
                });
            }
        }
        self.shared()
            .register(self.state.id, Listener::Peer(context.peer), profile);
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // Over stdio the upstreams are this client's alone: they are told, and ask its roots
        // again. Over HTTP (or with more stdio-like clients, an embedder's) they are shared by
        // every client (and an upstream's roots/list outside a call is answered with none):
        // not forwarded.
        if self.state.lines.is_some() && self.shared().bridge.sole_resident(self.state.id) {
            let told = self.runtime().notify_roots_changed().await;
            tracing::debug!(told, "forwarded the client's roots/list_changed");
        } else {
            tracing::debug!(
                session = self.state.id,
                "a client's roots/list_changed is not forwarded: the upstreams serve every client"
            );
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        no_cursor(request.as_ref(), "tools/list")?;
        let profile = profile_of(&context.extensions);
        let mut listed = self.bind_now(profile.as_ref()).await?;
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
        let mut tools = listed.view.tools.clone();
        self.mark_task_tools(&context, &listed, &mut tools);
        self.shared()
            .shown(self.state.id, ListKind::Tools, listed.view.digest);
        let digest = listed.view.digest;
        *lock(&self.state.listed) = Some(listed);
        let mut result = ListToolsResult::with_all_items(tools);
        result.meta = Some(call::listing_meta(digest));
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tool = request.name.to_string();
        let (_, attempt, pass_through) = self.governed_call(request, context, None).await?;
        match attempt {
            Ok(CallReply::Done(result)) => Ok(downstream_result(result).into()),
            Ok(CallReply::InputRequired(needed)) => Ok(needed.into()),
            Ok(CallReply::Task(created)) => Ok(CallToolResponse::Task(created)),
            Err(Failure::Call(error)) => match mrtr::upstream_error(pass_through, error) {
                Ok(upstream) => Err(upstream),
                Err(error) => refusal(&tool, error),
            },
            Err(Failure::Rpc(error)) => Err(error),
            Err(Failure::Stale(text)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into())
            }
        }
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        self.augmented_request(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.pass_get_task(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.pass_update_task(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.pass_cancel_task(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        no_cursor(request.as_ref(), "prompts/list")?;
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
        // Checked against what the client was listed, as the CLI checks: nothing is sent that
        // the prompt's server would refuse for its shape.
        if let Some(listed) = view.prompts.iter().find(|p| p.name == request.name)
            && let Err(why) = prompt_arguments(listed, request.arguments.as_ref())
        {
            return Err(McpError::invalid_params(
                format!("prompt `{}`: {why}; it was not sent", request.name),
                None,
            ));
        }
        let span = self.upstream(
            &context,
            "prompts/get",
            Prompt(&target.raw_name),
            &target.server,
        );
        let rounds = mrtr::Rounds::of(&context, request.input_responses, request.request_state);
        // Asked of this client only: the rounds followed for it and the upstream's requests.
        let bridge = &self.shared().bridge;
        let caller = crate::bridge::Caller::of(&context);
        let reply = mrtr::as_request_of(
            bridge,
            &target.server,
            caller,
            self.runtime().get_prompt_reply(
                &target.server,
                &target.raw_name,
                // A null is an argument not given (as checked above): not sent as one.
                request.arguments.map(|mut arguments| {
                    arguments.retain(|_, value| !value.is_null());
                    arguments
                }),
                &rounds.forward,
                &meta(span.as_ref()),
                rounds.pass_through,
            ),
        )
        .await;
        end_upstream(span, reply.as_ref().map(|_| false));
        Ok(match reply.map_err(upstream_error)? {
            Reply::Done(mut result) => {
                // An upstream of an older protocol sends none; rmcp drops it for such clients.
                result.result_type.get_or_insert(ResultType::COMPLETE);
                result.into()
            }
            Reply::InputRequired(needed) => needed.into(),
        })
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        no_cursor(request.as_ref(), "resources/list")?;
        let profile = profile_of(&context.extensions);
        let snapshot = self.runtime().snapshot();
        let prefix = self.shared().options.prefix;
        let view = ResourceView::new(&snapshot, prefix, profile.as_deref());
        let skills = SkillView::new(&snapshot, prefix, profile.as_deref());
        self.shared().shown(
            self.state.id,
            ListKind::Resources,
            resources_digest(&view, &skills),
        );
        Ok(ListResourcesResult::with_all_items(view.resources))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        no_cursor(request.as_ref(), "resources/templates/list")?;
        let profile = profile_of(&context.extensions);
        let view = self.resource_view(profile.as_deref());
        Ok(ListResourceTemplatesResult::with_all_items(view.templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let profile = profile_of(&context.extensions);
        let view = self.resource_view(profile.as_deref());
        let not_listed = || {
            McpError::resource_not_found(
                format!(
                    "no connected server lists resource `{}`; list resources again (resources/list)",
                    request.uri
                ),
                None,
            )
        };
        let Some((server, upstream)) = view.route(&request.uri) else {
            return Err(not_listed());
        };
        // A URI no listing or template claims is sent on (a server may serve more than it
        // lists); its server's "not found" is answered as a URI the profile may not see is, so
        // the answer never tells a hidden URI from an absent one.
        let claimed = view.claims(&request.uri);
        let span = self.upstream(&context, "resources/read", Resource(&upstream), &server);
        let rounds = mrtr::Rounds::of(&context, request.input_responses, request.request_state);
        let bridge = &self.shared().bridge;
        let caller = crate::bridge::Caller::of(&context);
        let reply = mrtr::as_request_of(
            bridge,
            &server,
            caller,
            self.runtime().read_resource_reply(
                &server,
                &upstream,
                &rounds.forward,
                &meta(span.as_ref()),
                rounds.pass_through,
            ),
        )
        .await;
        end_upstream(span, reply.as_ref().map(|_| false));
        let reply = reply.map_err(upstream_error).map_err(|error| {
            match !claimed && error.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
                true => not_listed(),
                false => error,
            }
        })?;
        Ok(match reply {
            Reply::Done(mut result) => {
                result.result_type.get_or_insert(ResultType::COMPLETE);
                skills::shown_contents(&view, &server, &mut result.contents);
                result.into()
            }
            Reply::InputRequired(needed) => needed.into(),
        })
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
            Reference::Resource(resource) => {
                let view = ResourceView::new(&snapshot, self.shared().options.prefix, profile);
                let (server, upstream) = view.route(&resource.uri).ok_or_else(|| {
                    McpError::invalid_params(
                        format!(
                            "no connected server lists resource template `{}`",
                            resource.uri
                        ),
                        None,
                    )
                })?;
                resource.uri = upstream;
                server
            }
            _ => {
                return Err(McpError::invalid_params(
                    "completion/complete: unknown reference type",
                    None,
                ));
            }
        };
        // A server that offers no completion is not asked (it would answer -32601 to a
        // request the gateway declares): nothing to offer, as for a value with no match.
        if self
            .runtime()
            .server_capabilities(&server)
            .is_some_and(|c| c.completions.is_none())
        {
            return Ok(CompleteResult::new(rmcp::model::CompletionInfo::default()));
        }
        let target = match &request.r#ref {
            Reference::Prompt(prompt) => Prompt(&prompt.name),
            Reference::Resource(template) => Resource(&template.uri),
            _ => crate::spans::Target::None,
        };
        let span = self.upstream(&context, "completion/complete", target, &server);
        meta(span.as_ref()).apply(&mut request);
        let result = self.runtime().complete(&server, request).await;
        end_upstream(span, result.as_ref().map(|_| false));
        result
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
        let (server, upstream) = self
            .resource_view(profile.as_deref())
            .route(&uri)
            .ok_or_else(|| {
                McpError::resource_not_found(
                    format!("no connected server lists resource `{uri}`; list resources again"),
                    None,
                )
            })?;
        // The gateway declares subscriptions for all its upstreams; one that did not declare
        // them is not asked (it would answer -32601, read as the gateway's own, or accept a
        // subscription it never keeps).
        if self
            .runtime()
            .server_capabilities(&server)
            .is_some_and(|c| c.resources.as_ref().and_then(|r| r.subscribe) != Some(true))
        {
            return Err(McpError::invalid_request(
                format!(
                    "`{uri}` is served by a server that does not offer resource subscriptions \
                     (it did not declare `resources.subscribe`); read it again to see changes"
                ),
                None,
            ));
        }
        let key = (server.clone(), upstream.clone());
        {
            let mut held = lock(&self.state.subscriptions);
            if held.contains_key(&key) {
                return Ok(());
            }
            if held.len() >= MAX_SUBSCRIPTIONS {
                return Err(McpError::invalid_request(
                    format!(
                        "this session already holds {MAX_SUBSCRIPTIONS} resource subscriptions, the most the gateway keeps for one session; unsubscribe from one (resources/unsubscribe) before subscribing to `{uri}`"
                    ),
                    None,
                ));
            }
            // Taken from now on: concurrent subscribes of one URI hold it upstream once.
            held.insert(key.clone(), None);
        }
        let (upstream_held, mut updates) = self.state.shared.hold(&server, &upstream);
        // Undone however this ends before the subscription is in place (refused, or this
        // request cancelled and its future dropped mid-way).
        let mut making = Making {
            state: &self.state,
            key: key.clone(),
            armed: true,
        };
        let ensured = self
            .state
            .shared
            .ensure_upstream(&upstream_held, &server, &upstream);
        // An upstream's JSON-RPC error (its -32002 for a URI it does not know) as sent.
        ensured.await.map_err(upstream_error)?;
        drop(upstream_held);
        let peer = context.peer.clone();
        let forwarded = uri.clone();
        let task = tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match updates.recv().await {
                    // Updates this session fell behind on say no more than the next one.
                    Ok(()) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                }
                let update = ResourceUpdatedNotificationParam::new(forwarded.clone());
                if peer.notify_resource_updated(update).await.is_err() {
                    break;
                }
            }
        });
        let mut held = lock(&self.state.subscriptions);
        match held.get_mut(&key) {
            Some(slot @ None) => {
                *slot = Some(task);
                making.armed = false;
            }
            // Unsubscribed while it was being made: undone here (`making` gives the hold back).
            _ => task.abort(),
        }
        Ok(())
    }

    #[allow(deprecated)] // resources/unsubscribe: every protocol before 2026-07-28
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let profile = profile_of(&context.extensions);
        let view = self.resource_view(profile.as_deref());
        let routed = view.route(&request.uri);
        let found: Vec<_> = {
            let mut subscriptions = lock(&self.state.subscriptions);
            // Where it routes now, and every other this client was shown under that URI (its
            // server gone, the URI another's now, subscribed again since): the client holds one
            // subscription per URI, and one unsubscribe ends it.
            let keys: Vec<_> = (subscriptions.keys())
                .filter(|key| {
                    routed.as_ref() == Some(*key) || view.shown(&key.0, &key.1) == request.uri
                })
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|key| subscriptions.remove(&key).map(|task| (key, task)))
                .collect()
        };
        // One still being made (`None`) is undone by its maker.
        for ((server, uri), task) in found {
            if let Some(task) = task {
                task.abort();
                self.state.shared.release(server, uri);
            }
        }
        Ok(())
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        no_cursor(request.as_ref(), "skills/list")?;
        let profile = profile_of(&context.extensions);
        Ok(self.skills_listing(profile.as_deref()))
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        let profile = profile_of(&context.extensions);
        self.skill(&request.uri, profile.as_deref())
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.directory(&request.uri, request.cursor, &context).await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        accepted.prompts_list_changed = requested.prompts_list_changed;
        accepted.resources_list_changed = requested.resources_list_changed;
        // The filter is decided before the request's identity reaches this handler: a URI is
        // taken when every client profile may see it (so the acknowledgement tells no client
        // of a resource hidden from it), at most as many as a session may subscribe to.
        if let Some(uris) = &requested.resource_subscriptions {
            let views: Vec<ResourceView> = match &self.shared().clients {
                None => vec![self.resource_view(None)],
                Some(clients) => (clients.profiles.iter())
                    .map(|p| self.resource_view(Some(p)))
                    .collect(),
            };
            let mut taken: Vec<String> = Vec::new();
            for uri in uris {
                if taken.len() < MAX_SUBSCRIPTIONS
                    && !taken.contains(uri)
                    && views.iter().all(|view| view.route(uri).is_some())
                {
                    taken.push(uri.clone());
                }
            }
            accepted.resource_subscriptions = (!taken.is_empty()).then_some(taken);
        }
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let id = self.shared().fresh_id();
        let profile = profile_of(&context.request_context().extensions);
        // Held while the stream lasts, given back however it ends.
        let _resources = self.listen_to_resources(&context, profile.as_deref()).await;
        self.shared()
            .register(id, Listener::Subscription(context.sink().clone()), profile);
        // Unregisters however the subscription ends (cancelled, or this future dropped).
        let _unregister = Unregister(self.shared(), id);
        context.cancelled().await;
        Ok(())
    }
}

//! Step binding and prepared calls: what the model saw is exactly what executes (R22–R24).
//!
//! Invariants:
//! - a [`StepBinding`] freezes one published runtime (snapshot + clients) and the exposure
//!   decided on it; its tool list never changes (tools loaded through tool search are added to
//!   it, but only ones the frozen catalog had);
//! - [`StepBinding::prepare_call`] answers from the binding only — never by a fresh lookup of
//!   a name in the current catalog — and refuses tools the binding does not show;
//! - a [`PreparedCall`] checks, under the read side of the revision gate and immediately before
//!   handing the request to the transport, that the current catalog still has the same tool
//!   (same definition) on the same connection; a catalog swap cannot land between that check
//!   and the send; a stale call is refused, never sent;
//! - the arguments are validated against the input schema the binding showed, and permission
//!   is decided before the check: deny, cancel or an approval timeout never send `tools/call`;
//! - a call given a [`CallOptions::caller`] tag has its `tools/call` recorded under that tag in
//!   the callbacks' [`CallTags`](mcp_harness_transport::callbacks::CallTags) from before it is
//!   sent until the call ends (however it ends), and the requests the runtime itself answers
//!   within the call (input rounds, a task's input requests) reach the callbacks with that tag.

mod forward;
mod reply;
mod rounds;

pub use self::forward::Forwarded;
pub use self::reply::{CallReply, HandBack};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_harness_catalog::{HiddenEntry, Snapshot, ToolEntry};
use mcp_harness_policy::{Approval, ApprovalRequest, Decision, SearchRequest};
use mcp_harness_transport::{ExpressCall, ExpressError};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientNotification,
    ClientRequest, JsonObject, ProgressNotificationParam, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestHandle};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use self::rounds::{Further, FurtherRounds};
use super::context::CallContext;
use super::frozen::{
    AUTHENTICATE_TOOL, BoundTool, Frozen, READ_OUTPUT_TOOL, SEARCH_TOOL, SearchState, bound,
    hidden_name,
};
use crate::call::result::{NormalizedResult, normalize};
use crate::call::validate::{ArgumentValidator, drop_null_optionals};
use crate::error::CallError;
use crate::snapshot::publisher::{Published, ServerClient};

/// What a step may call: a frozen list of tools, each pinned to its server connection and to
/// the catalog revision it came from. A clone is the same step (it shares what tool search
/// loaded).
#[derive(Clone)]
pub struct StepBinding {
    ctx: Arc<CallContext>,
    published: Arc<Published>,
    frozen: Arc<Frozen>,
    search: Arc<SearchState>,
}

impl StepBinding {
    pub(crate) fn new(ctx: Arc<CallContext>, published: Arc<Published>) -> Self {
        let frozen = ctx.frozen_for(&published.snapshot);
        Self {
            search: Arc::new(SearchState {
                frozen: frozen.clone(),
                loaded: Mutex::new((frozen.load_budget.clone(), Vec::new())),
            }),
            ctx,
            published,
            frozen,
        }
    }

    /// The catalog revision this step is bound to.
    pub fn revision(&self) -> u64 {
        self.published.snapshot.revision
    }

    /// The snapshot this step is bound to.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.published.snapshot
    }

    /// The tools the model sees in this step: the directly exposed ones, the built-in ones, and
    /// any loaded through tool search so far.
    pub fn tools(&self) -> Vec<BoundTool> {
        let mut all = self.frozen.direct.clone();
        all.extend(self.search.loaded().1.iter().cloned());
        all
    }

    /// The tools in the OpenAI function-calling format.
    pub fn openai_tools(&self) -> Vec<Value> {
        self.tools().iter().map(BoundTool::openai).collect()
    }

    /// The tools in the Anthropic tool format.
    pub fn anthropic_tools(&self) -> Vec<Value> {
        self.tools().iter().map(BoundTool::anthropic).collect()
    }

    /// The tools the model can find through tool search in this step (tool search on) and
    /// that it has not loaded yet, in name order.
    pub fn deferred(&self) -> Vec<BoundTool> {
        let loaded = self.search.loaded();
        self.frozen
            .deferred
            .iter()
            .filter(|t| !loaded.1.iter().any(|l| l.name == t.entry.qualified_name))
            .map(|t| bound(&t.entry))
            .collect()
    }

    /// What the model does not see in this step, and why: the tools the exposure policy hides
    /// and those whose name another server's tool also has. (Entries the listing already
    /// withheld are in each server's catalog, [`ServerCatalog::hidden`].)
    ///
    /// [`ServerCatalog::hidden`]: mcp_harness_catalog::ServerCatalog::hidden
    pub fn hidden(&self) -> &[HiddenEntry] {
        &self.frozen.hidden
    }

    /// Searches the deferred tools (tool search on) and loads the matches into this step, as
    /// far as the load budget allows; returns the definitions loaded, for the model. This is
    /// what the model's call of the built-in search tool does.
    pub fn search_tools(&self, request: &SearchRequest) -> Vec<Value> {
        self.search.search_and_load(request)
    }

    /// Loads the named deferred tools into this step as a search that found them would (as
    /// far as the load budget allows), for a host that keeps what its model loaded across
    /// steps (a gateway session binding again when its client lists again). Names this step
    /// does not defer are ignored.
    pub fn load(&self, names: &[String]) {
        self.search.load_named(names);
    }

    /// The names of the tools tool search loaded into this step, in the order loaded.
    pub fn loaded(&self) -> Vec<String> {
        self.search
            .loaded()
            .1
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    /// The call of `name` as this step shows it: pinned to the bound connection, schema and
    /// revision. Refused if the step does not show `name`.
    pub fn prepare_call(&self, name: &str) -> Result<PreparedCall, CallError> {
        if name == SEARCH_TOOL && self.frozen.shows(SEARCH_TOOL) {
            return Ok(self.builtin_call(Builtin::Search));
        }
        if name == READ_OUTPUT_TOOL {
            return Ok(self.builtin_call(Builtin::ReadOutput));
        }
        if let Some((server, reason, headers)) = self.frozen.authenticate.get(name) {
            return Ok(PreparedCall {
                ctx: self.ctx.clone(),
                target: Target::Authenticate {
                    name: name.to_string(),
                    server: server.clone(),
                    reason: reason.clone(),
                    headers: *headers,
                },
                published: self.published.clone(),
                search: self.search.clone(),
            });
        }
        let visible =
            self.frozen.shows(name) || self.search.loaded().1.iter().any(|t| t.name == name);
        let entry =
            self.frozen
                .index
                .get(name)
                .filter(|_| visible)
                .ok_or_else(|| {
                    let hint = if self
                        .frozen
                        .deferred
                        .iter()
                        .any(|t| t.entry.qualified_name == name)
                    {
                        format!("; find it with `{SEARCH_TOOL}` first")
                    } else if self.frozen.hidden.iter().any(|h| {
                        crate::call::binding::hidden_name(&self.published.snapshot, h) == name
                    }) {
                        "; it is hidden (`mcp-harness tools --hidden` says why)".to_string()
                    } else {
                        String::new()
                    };
                    CallError::NotInStep {
                        name: name.to_string(),
                        revision: self.revision(),
                        hint,
                    }
                })?;
        let client = self
            .published
            .clients
            .get(&entry.server)
            .cloned()
            .ok_or_else(|| CallError::ServerUnavailable {
                server: entry.server.clone(),
                state: "not connected".into(),
            })?;
        Ok(PreparedCall {
            ctx: self.ctx.clone(),
            target: Target::Server {
                entry: entry.clone(),
                client,
                validator: self.ctx.validator(&entry.qualified_name, &entry.tool),
            },
            published: self.published.clone(),
            search: self.search.clone(),
        })
    }

    fn builtin_call(&self, which: Builtin) -> PreparedCall {
        PreparedCall {
            ctx: self.ctx.clone(),
            target: Target::Builtin(which),
            published: self.published.clone(),
            search: self.search.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builtin {
    Search,
    ReadOutput,
}

// One per prepared call, nearly always `Server`: boxing it would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Target {
    Server {
        entry: ToolEntry,
        client: ServerClient,
        validator: Arc<ArgumentValidator>,
    },
    Builtin(Builtin),
    /// The authenticate tool of a server waiting for authorization.
    Authenticate {
        name: String,
        server: String,
        reason: String,
        /// Its credentials go in its configured `headers` (a legacy sse server: no login).
        headers: bool,
    },
}

/// Options of one call.
#[derive(Default)]
pub struct CallOptions {
    /// Receives `notifications/progress` of this call.
    pub progress: Option<tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>>,
    /// Cancels the call: the server is sent `notifications/cancelled`.
    pub cancel: Option<CancellationToken>,
    /// Replaces the server's `toolTimeoutSec` for this call.
    pub timeout: Option<Duration>,
    /// Receives the status changes of a call the server runs as a task (SEP-2663); see
    /// [`TaskUpdate`](crate::TaskUpdate).
    pub task_status: Option<tokio::sync::mpsc::UnboundedSender<crate::call::tasks::TaskUpdate>>,
    /// A W3C `traceparent` sent to the server in the request's `_meta` (SEP-414), so its
    /// spans join the caller's trace.
    pub traceparent: Option<String>,
    /// The W3C `tracestate` sent alongside [`traceparent`](Self::traceparent) (only with it).
    pub tracestate: Option<String>,
    /// Non-final answers handed back instead of followed (a gateway passing tasks and
    /// `input_required` rounds through); only [`PreparedCall::call_reply`] honours it.
    pub hand_back: HandBack,
    /// What a gateway forwards of its client's request untouched (a SEP-2322 retry, the
    /// client's declared capabilities).
    pub forward: Forwarded,
    /// Tells a server that declared the tasks extension, in the request's `_meta` (SEP-2575 per-request client capabilities:
    /// the harness's own, without the tasks extension), that this caller takes no task
    /// (SEP-2663): a server that honours it runs the call to its result, or refuses a
    /// task-only tool (`-32021`, a [`CallError::Protocol`] carrying its error) before running
    /// it. A gateway sets it for a client that did not declare tasks.
    pub decline_tasks: bool,
    /// An opaque tag of the embedder's for this call (a gateway: which client's call it is).
    /// A server's elicitation, sampling or roots request that belongs to this call reaches the
    /// callbacks with it in [`RequestOrigin::caller`](mcp_harness_transport::callbacks::RequestOrigin::caller):
    /// one arriving on the call's Streamable HTTP response stream (when the callbacks keep
    /// [`call_tags`](mcp_harness_transport::ClientCallbacks::call_tags)), and those the runtime
    /// asks itself within the call. `None` (the default): nothing is recorded.
    pub caller: Option<u64>,
}

/// The outcome of a call that was sent and answered.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The server that ran the call (`mcp-harness` for built-in tools).
    pub server: String,
    /// The raw tool name (for built-in tools, their name).
    pub tool: String,
    /// The catalog revision the call was bound to.
    pub revision: u64,
    /// The result as the server sent it, with blocks validated (R30).
    pub result: CallToolResult,
    /// The normalised result, as the model should get it (possibly a bounded summary of a
    /// stored large result, with its handle).
    pub normalized: NormalizedResult,
    /// Set when the result was over the output budget and stored (R31).
    pub output_handle: Option<String>,
}

impl ToolResult {
    /// Whether the tool reported an error (`isError`): the tool-error class of R32.
    pub fn is_error(&self) -> bool {
        self.normalized.is_error
    }
}

/// A call pinned to what a step showed: connection, schema, permission inputs and revision.
pub struct PreparedCall {
    ctx: Arc<CallContext>,
    target: Target,
    /// The published view the step was bound to (its snapshot, its connections).
    published: Arc<Published>,
    search: Arc<SearchState>,
}

impl PreparedCall {
    /// The model-visible name.
    pub fn name(&self) -> &str {
        match &self.target {
            Target::Server { entry, .. } => &entry.qualified_name,
            Target::Builtin(Builtin::Search) => SEARCH_TOOL,
            Target::Builtin(Builtin::ReadOutput) => READ_OUTPUT_TOOL,
            Target::Authenticate { name, .. } => name,
        }
    }

    /// The server that runs the call (`mcp-harness` for built-in tools).
    fn server_name(&self) -> &str {
        match &self.target {
            Target::Server { entry, .. } => &entry.server,
            Target::Authenticate { server, .. } => server,
            Target::Builtin(_) => "mcp-harness",
        }
    }

    /// The catalog revision this call is bound to.
    pub fn revision(&self) -> u64 {
        self.published.snapshot.revision
    }

    /// Whether nothing was published since the binding: then the bound definitions and
    /// connections are the current ones, and no lookup is needed to know it.
    fn nothing_published_since(&self) -> bool {
        self.ctx.live.is_latest(&self.published)
    }

    /// Runs the call with default options.
    pub async fn call(&self, arguments: Option<JsonObject>) -> Result<ToolResult, CallError> {
        self.call_with(arguments, CallOptions::default()).await
    }

    /// Validates, asks permission, checks staleness under the gate, sends, awaits the answer
    /// (with progress, cancellation and timeout, following every further round: input
    /// requests, tasks), normalises and applies the output budget. `options.hand_back` is
    /// ignored here: see [`Self::call_reply`].
    pub async fn call_with(
        &self,
        arguments: Option<JsonObject>,
        mut options: CallOptions,
    ) -> Result<ToolResult, CallError> {
        options.hand_back = HandBack::default();
        match self.call_reply(arguments, options).await? {
            CallReply::Done(result) => Ok(result),
            // Unreachable with nothing to hand back; said, not panicked, should it ever happen.
            CallReply::Task(_) | CallReply::InputRequired(_) => Err(CallError::Protocol {
                upstream: None,
                server: self.server_name().to_string(),
                tool: self.name().to_string(),
                message: "a non-final answer was handed back unasked (a harness bug)".into(),
            }),
        }
    }

    /// As [`Self::call_with`], but a task or an `input_required` answer of a kind named in
    /// `options.hand_back` is returned untouched instead of followed.
    pub async fn call_reply(
        &self,
        arguments: Option<JsonObject>,
        options: CallOptions,
    ) -> Result<CallReply, CallError> {
        let args = arguments.unwrap_or_default();
        match &self.target {
            Target::Builtin(which) => self.call_builtin(*which, &args).map(CallReply::Done),
            Target::Authenticate {
                server,
                reason,
                headers,
                ..
            } => Ok(CallReply::Done(self.authenticate(server, reason, *headers))),
            Target::Server {
                entry,
                client,
                validator,
            } => {
                self.call_server(entry, client, validator, args, options)
                    .await
            }
        }
    }

    async fn call_server(
        &self,
        entry: &ToolEntry,
        client: &ServerClient,
        validator: &ArgumentValidator,
        args: JsonObject,
        options: CallOptions,
    ) -> Result<CallReply, CallError> {
        let args = drop_null_optionals(&entry.tool.input_schema, args);
        let args = validator
            .validated(args)
            .map_err(|e| CallError::InvalidArguments {
                name: entry.qualified_name.clone(),
                details: e.to_string(),
            })?;
        // The common path (allowed, same connection) awaits nothing here; asking for approval
        // and restarting a crashed server are boxed so the call's future stays small.
        if let Some(ask) = self.permission(entry, &args)? {
            Box::pin(self.ask_approval(ask, options.cancel.as_ref())).await?;
        }
        // The listing a tools/list_changed of the bound connection caused is awaited before
        // the hold below: a config edit retiring the connection meanwhile need not wait for it.
        self.await_announced_listing(entry, client).await;
        // Held before the connection is checked, until the call ends: a config edit that
        // retires this connection after the check waits for the call in its drain.
        let held = client.sends.hold();
        // A binding made while a config edit replaces the server holds its retired client:
        // never current, even when nothing was published since.
        let current = (self.nothing_published_since() && !client.retired)
            || self.ctx.is_current_connection(&entry.server, client.epoch);
        // R7: a stdio server whose process exited since the binding is restarted once. The
        // old connection is let go first: its drain is what the restart may wait for.
        let (revived, _held) = match current {
            true => (None, held),
            false => {
                drop(held);
                let revived =
                    Box::pin(self.ctx.revive_for_call(entry, client, self.revision())).await?;
                let held = revived.as_ref().unwrap_or(client).sends.hold();
                (revived, held)
            }
        };
        let client = revived.as_ref().unwrap_or(client);

        let timeout = options.timeout.unwrap_or(client.tool_timeout);
        let mut request_options = PeerRequestOptions::with_timeout(timeout);
        if options.progress.is_some() {
            request_options = request_options
                .reset_timeout_on_progress()
                .with_max_total_timeout(timeout.saturating_mul(MAX_TOTAL_FACTOR));
        }
        let mut params = CallToolRequestParams::new(entry.raw_name.clone());
        if !args.is_empty() || entry.tool.input_schema.get("properties").is_some() {
            params = params.with_arguments(args);
        }
        if let Some(traceparent) = &options.traceparent {
            rmcp::model::RequestParamsMeta::set_traceparent(&mut params, traceparent);
            if let Some(tracestate) = &options.tracestate {
                rmcp::model::RequestParamsMeta::set_tracestate(&mut params, tracestate);
            }
        }

        // SEP-1686: a tool that requires a task is called with one (never plainly); a caller
        // passing its client's `task` on gets the task back (where the server takes one).
        let forwarded_task = options.forward.task.clone().filter(|_| {
            client.wire.task_tool_calls()
                && client.wire.task_support(&entry.raw_name)
                    != mcp_harness_transport::wire::TaskSupport::Forbidden
        });
        let hand_back_augmented = forwarded_task.is_some();
        let task_augmented = hand_back_augmented || client.wire.requires_task(&entry.raw_name);
        // The request is kept for further rounds only where the protocol has them (SEP-2322,
        // from the 2026-07-28 era on, or an era not known): elsewhere the copy would be made
        // and dropped on every call for nothing.
        let rounds_possible = client
            .peer
            .peer_info()
            .is_none_or(|info| !info.protocol_version.has_initialize());
        if rounds_possible && !options.forward.is_empty() {
            params.input_responses = options.forward.input_responses.clone();
            params.request_state = options.forward.request_state.clone();
            request_options.meta = options.forward.meta();
        }
        // Only a server that declared the tasks extension has tasks to decline; the capabilities
        // declined with are the forwarded client's when there are some.
        if options.decline_tasks
            && client
                .peer
                .peer_info()
                .is_some_and(|info| info.capabilities.supports_tasks())
        {
            request_options.meta = Some(crate::call::tasks::declining_meta(
                request_options.meta.take(),
                self.ctx.callbacks.as_ref(),
            ));
        }
        let retry = rounds_possible.then(|| params.clone());
        let request = if let Some(task) = forwarded_task {
            crate::call::task_augmented::request_with(&params, task)
        } else if task_augmented {
            crate::call::task_augmented::request(&params, timeout)
        } else {
            ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params))
        };
        // What the server sends from here on that answers nothing is named if the call times out.
        let mark = client.wire.anomaly_mark();
        let classify = |e: rmcp::ServiceError| {
            // A server that stopped accepting our authorization (a rejected refresh, a revoked
            // grant) is connected again, which finds it needs-auth (R4) instead of leaving it
            // "connected" with every call failing.
            if crate::error::authorization_lost(&e) {
                self.ctx.reconnect(&entry.server);
            }
            crate::error::explain_timeout(
                crate::error::classify(e, &entry.server, &entry.raw_name, timeout),
                || client.wire.anomalies_since(mark),
            )
        };

        // Which call a server's request on this call's response stream belongs to: recorded
        // from before the request is sent (a lookup waits for it) until the call ends.
        let tags = options.caller.and_then(|tag| {
            let tags = self.ctx.callbacks.as_ref()?.call_tags()?.clone();
            Some((tags, tag))
        });
        // A plain call (no task) goes as an express call where the session has them: POSTed
        // from this task instead of through rmcp's worker (`Express`).
        let prepared = match client.express.as_ref() {
            Some(lane) if !task_augmented && request_options.meta.is_none() => {
                lane.prepare(request, options.progress.is_some())
            }
            _ => Err(request),
        };
        // Again for a notice that came since, or for the connection a restart made.
        self.await_announced_listing(entry, client).await;
        // The staleness check and the hand-off to the transport happen under the gate's read
        // side; the publisher swaps only under its write side.
        let mut kept_options = None;
        let (sent, _tagged) = {
            let _gate = self.ctx.live.gate_read().await;
            self.check_current(entry, client)?;
            let registration = match &tags {
                Some((tags, _)) => Some(tags.begin().await),
                None => None,
            };
            let sent = match prepared {
                Ok(call) => {
                    // Kept: a server that refuses the express POST gets the call from rmcp.
                    kept_options = Some(request_options);
                    Sent::Express(call)
                }
                // Boxed, as every await off the express path: this future's state is as
                // large as the largest future it awaits inline, and it is moved whole.
                Err(request) => Sent::Rmcp(
                    Box::pin(
                        client
                            .peer
                            .send_request_with_option(request, request_options),
                    )
                    .await
                    .map_err(classify)?,
                ),
            };
            let tagged = registration
                .zip(tags.as_ref())
                .map(|(r, (_, tag))| r.finish(&entry.server, sent.id().clone(), *tag));
            (sent, tagged)
        };
        // Progress goes to the caller while this lives — to the result, since the transport
        // hands a response on only once the notifications sent before it were delivered, and
        // through a task's further rounds. An express call's passes through its wait, which
        // each one keeps alive (as rmcp does for its own).
        let route = |token: &rmcp::model::ProgressToken, tx| {
            self.ctx
                .progress
                .register_sender(&entry.server, client.epoch, token, tx)
        };
        let mut express_progress = None;
        let express_token = match &sent {
            Sent::Express(call) => Some(call.progress_token()),
            Sent::Rmcp(_) => None,
        };
        let mut _route = match (&sent, options.progress) {
            (Sent::Rmcp(handle), Some(tx)) => Some(route(&handle.progress_token, tx)),
            (Sent::Express(call), Some(tx)) => {
                let (seen, progress) = tokio::sync::mpsc::unbounded_channel();
                express_progress = Some((progress, tx));
                Some(route(&call.progress_token(), seen))
            }
            _ => None,
        };
        let response = match sent {
            Sent::Rmcp(handle) => {
                Box::pin(self.rmcp_answer(handle, entry, &options.cancel)).await?
            }
            Sent::Express(call) => {
                let answered = self.express_answer(
                    call,
                    entry,
                    client,
                    timeout,
                    &options.cancel,
                    &mut express_progress,
                );
                match Box::pin(answered).await? {
                    Ok(response) => response,
                    Err(request) => {
                        tracing::debug!(
                            server = %entry.server,
                            "the server refused an express call before running it; sent through rmcp"
                        );
                        let registration = match &tags {
                            Some((tags, _)) => Some(tags.begin().await),
                            None => None,
                        };
                        let handle =
                            Box::pin(client.peer.send_request_with_option(
                                *request,
                                kept_options.unwrap_or_default(),
                            ))
                            .await
                            .map_err(classify)?;
                        let _retagged = registration
                            .zip(tags.as_ref())
                            .map(|(r, (_, tag))| r.finish(&entry.server, handle.id.clone(), *tag));
                        _route = express_progress
                            .take()
                            .map(|(_, tx)| route(&handle.progress_token, tx));
                        Box::pin(self.rmcp_answer(handle, entry, &options.cancel)).await?
                    }
                }
            }
        };
        // A stdio server that died during the call: say how, as at start (exit status, tail).
        // Its end is published first (bounded), so the caller's next step does not see it
        // connected, its tools listed.
        if matches!(response, Err(rmcp::ServiceError::TransportClosed)) {
            Box::pin(self.ctx.await_connection_gone(&entry.server, client.epoch)).await;
        }
        let response = match response {
            Err(rmcp::ServiceError::TransportClosed) => match &client.exit {
                Some(exit) => match exit.describe().await {
                    Some(why) => {
                        return Err(CallError::Transport {
                            server: entry.server.clone(),
                            tool: entry.raw_name.clone(),
                            message: format!("the connection closed during the call: {why}"),
                        });
                    }
                    None => Err(rmcp::ServiceError::TransportClosed),
                },
                None => Err(rmcp::ServiceError::TransportClosed),
            },
            other => other,
        };
        let result = match response.map_err(classify)? {
            ServerResult::CallToolResult(r) => r,
            other => {
                // An express call's progress went through its wait; through a task's further
                // rounds it goes straight to the caller. The old route goes first (a route is
                // one per token); what reaches neither meanwhile is held for the new one.
                if let (Some((mut seen, tx)), Some(token)) =
                    (express_progress.take(), express_token.as_ref())
                {
                    drop(_route.take());
                    while let Ok(p) = seen.try_recv() {
                        let _ = tx.send(p);
                    }
                    _route = Some(route(token, tx));
                }
                let rest = FurtherRounds {
                    entry,
                    client,
                    timeout,
                    retry,
                    task_augmented,
                    cancel: options.cancel,
                    task_status: options.task_status,
                    hand_back: options.hand_back,
                    hand_back_augmented,
                    callbacks: self::rounds::within(self.ctx.callbacks.as_ref(), options.caller),
                };
                match Box::pin(self.further_rounds(other, rest, &classify)).await? {
                    Further::Result(result) => result,
                    Further::HandedBack(reply) => return Ok(reply),
                }
            }
        };
        let output_schema = self.search.frozen.output_schema(entry);
        let spilled = self.ctx.normalized_and_spilled(
            &entry.server,
            &entry.raw_name,
            Some(&entry.tool),
            output_schema.as_deref(),
            result.clone(),
        );
        let output_handle = spilled.handle().map(|h| h.to_string());
        Ok(CallReply::Done(ToolResult {
            server: entry.server.clone(),
            tool: entry.raw_name.clone(),
            revision: self.revision(),
            result,
            normalized: spilled.into_result(),
            output_handle,
        }))
    }

    /// Where `client`'s server announced a change of its tools after the listing this step
    /// shows, the listing it causes is awaited (bounded): the staleness check then compares
    /// against it, and a changed tool is refused as stale instead of run with arguments for its
    /// old schema. Nothing is awaited otherwise (one atomic load).
    async fn await_announced_listing(&self, entry: &ToolEntry, client: &ServerClient) {
        let notices = client.wire.tools_changed();
        if notices > client.tools_covered {
            Box::pin(
                self.ctx
                    .await_tool_listing(&entry.server, client.epoch, notices),
            )
            .await;
        }
    }

    /// The answer to a request rmcp sent, the server told when `cancel` fires first.
    async fn rmcp_answer(
        &self,
        handle: RequestHandle<RoleClient>,
        entry: &ToolEntry,
        cancel: &Option<CancellationToken>,
    ) -> Result<Result<ServerResult, rmcp::ServiceError>, CallError> {
        let Some(cancel) = cancel else {
            return Ok(handle.await_response().await);
        };
        // Boxed: the caller's future stays small (it is moved whole, once per call).
        Box::pin(async {
            let (peer, id) = (handle.peer.clone(), handle.id.clone());
            tokio::select! {
                r = handle.await_response() => Ok(r),
                () = cancel.cancelled() => Err(told_cancelled(&peer, id, entry).await),
            }
        })
        .await
    }

    /// The answer to an express call, within `timeout` of its start or of its last progress
    /// when `progress` is given (then within [`MAX_TOTAL_FACTOR`] × `timeout` in all, and each
    /// progress goes on to the caller) — the server told when a limit passes, as rmcp does —
    /// the server told when `cancel` fires first; the request back when the server refused it
    /// before running it (it is to be sent through rmcp).
    async fn express_answer(
        &self,
        call: ExpressCall,
        entry: &ToolEntry,
        client: &ServerClient,
        timeout: Duration,
        cancel: &Option<CancellationToken>,
        progress: &mut Option<ExpressProgress>,
    ) -> Result<Result<Result<ServerResult, rmcp::ServiceError>, Box<ClientRequest>>, CallError>
    {
        let id = call.id().clone();
        let cancelled = async {
            match cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let answer = call.answer();
        let idle = tokio::time::sleep(timeout);
        let total = timeout.saturating_mul(MAX_TOTAL_FACTOR);
        // Only a call with progress has a total limit: no second timer for the others.
        let mut all = progress
            .is_some()
            .then(|| Box::pin(tokio::time::sleep(total)));
        let all_passed = async {
            match all.as_mut() {
                Some(all) => all.await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(answer, idle, all_passed, cancelled);
        let limited = |limit: Duration, reason: &'static str| {
            let (peer, id) = (client.peer.clone(), id.clone());
            async move {
                tell_cancelled(&peer, id, reason).await;
                Ok(Ok(Err(rmcp::ServiceError::Timeout { timeout: limit })))
            }
        };
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => {
                    // The progress sent before the answer was delivered before it: on first.
                    if let Some((seen, to)) = progress.as_mut() {
                        while let Ok(p) = seen.try_recv() {
                            let _ = to.send(p);
                        }
                    }
                    return Ok(match answered {
                        Ok(result) => Ok(Ok(result)),
                        Err(ExpressError::Failed(e)) => Ok(Err(e)),
                        Err(ExpressError::Unsent(request)) => Err(request),
                    });
                }
                Some(p) = async { progress.as_mut()?.0.recv().await }, if progress.is_some() => {
                    if let Some((_, to)) = progress.as_ref() {
                        let _ = to.send(p);
                    }
                    idle.as_mut().reset(tokio::time::Instant::now() + timeout);
                }
                // The ends below are boxed: inline, each would be part of every call's future.
                () = &mut idle => return Box::pin(limited(timeout, "request timeout")).await,
                () = &mut all_passed => {
                    return Box::pin(limited(total, "maximum total timeout exceeded")).await;
                }
                () = &mut cancelled => {
                    return Err(Box::pin(told_cancelled(&client.peer, id, entry)).await);
                }
            }
        }
    }

    /// Refuses the call unless the current catalog has the same tool, with the same definition,
    /// on the same connection as the binding.
    fn check_current(&self, entry: &ToolEntry, client: &ServerClient) -> Result<(), CallError> {
        let now = self.ctx.live.published();
        // The view bound is still the current one (the common case). A call that runs on a
        // revived connection is never here: reviving publishes a newer view first.
        if Arc::ptr_eq(&now, &self.published) {
            return Ok(());
        }
        // The catalog shares one `Arc` per definition across revisions while it is unchanged;
        // a different `Arc` is still the same tool if the definition is equal.
        let same_tool = now
            .snapshot
            .tool(&entry.qualified_name)
            .is_some_and(|t| Arc::ptr_eq(&t.tool, &entry.tool) || *t.tool == *entry.tool);
        let same_connection = now
            .clients
            .get(&entry.server)
            .is_some_and(|c| c.epoch == client.epoch);
        if same_tool && same_connection {
            Ok(())
        } else {
            Err(CallError::Stale {
                name: entry.qualified_name.clone(),
                bound: self.revision(),
                current: now.snapshot.revision,
            })
        }
    }

    /// The permission decision for this call: allowed (`None`), refused, or an approval to ask.
    fn permission(
        &self,
        entry: &ToolEntry,
        args: &JsonObject,
    ) -> Result<Option<ApprovalRequest>, CallError> {
        let name = &entry.qualified_name;
        match self.ctx.policy.permissions.current().decide(
            name,
            args,
            entry.tool.annotations.as_ref(),
        ) {
            Decision::Allow => Ok(None),
            Decision::Deny { reason } => Err(CallError::Permission {
                name: name.clone(),
                reason,
            }),
            Decision::Ask { reason } => Ok(Some(ApprovalRequest {
                qualified_name: name.clone(),
                server: entry.server.clone(),
                args: args.clone(),
                reason,
                annotations: entry.tool.annotations.clone(),
            })),
        }
    }

    /// Asks the approver, at most `approval_timeout`; the call is not sent unless approved.
    async fn ask_approval(
        &self,
        request: ApprovalRequest,
        cancel: Option<&CancellationToken>,
    ) -> Result<(), CallError> {
        let name = request.qualified_name.clone();
        let refuse = |reason: String| CallError::Permission {
            name: name.clone(),
            reason,
        };
        let asked = tokio::time::timeout(
            self.ctx.policy.approval_timeout,
            self.ctx.policy.approver.approve(request),
        );
        // A call cancelled while its approval is asked ends then, unsent: the question is
        // dropped (withdrawn), and a late yes sends nothing.
        let cancelled = async {
            match cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let asked = tokio::select! {
            asked = asked => asked,
            () = cancelled => {
                return Err(refuse(CANCELLED_WHILE_ASKED.into()));
            }
        };
        match asked {
            Ok(Approval::Approved) => Ok(()),
            Ok(Approval::Denied { reason }) => Err(refuse(reason)),
            Ok(Approval::Cancelled) => Err(refuse("the approval was cancelled".into())),
            Err(_) => Err(refuse(format!(
                "no approval within {}s (the call was not sent)",
                self.ctx.policy.approval_timeout.as_secs()
            ))),
        }
    }

    /// What the authenticate tool answers: who must do what. Nothing is sent anywhere; the
    /// server connects by itself once its credentials are stored.
    fn authenticate(&self, server: &str, reason: &str, headers: bool) -> ToolResult {
        let reason: String = reason
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        let text = if headers {
            format!(
                "The MCP server \"{server}\" needs the user's authorization before its tools can \
                 be used ({reason}). It is a legacy SSE server, which has no login: ask the user \
                 to put the credentials it expects in the server's `headers` in the mcp-harness \
                 config (for example `\"Authorization\": \"Bearer ${{TOKEN}}\"`, the token in \
                 their environment). Once they have, its tools replace this one; there is \
                 nothing else to call."
            )
        } else {
            format!(
                "The MCP server \"{server}\" needs the user's authorization before its tools can \
                 be used ({reason}). Ask the user to run `mcp-harness login {server}` in a \
                 terminal (with `--no-browser` on a machine without a browser: it prints the URL \
                 to open elsewhere and takes the redirect URL pasted back). Once they have, the \
                 server connects by itself and its tools replace this one in the next step; \
                 there is nothing else to call."
            )
        };
        let result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
        let normalized = normalize(result.clone(), None, self.ctx.result_limits);
        ToolResult {
            server: server.to_string(),
            tool: AUTHENTICATE_TOOL.to_string(),
            revision: self.revision(),
            result,
            normalized,
            output_handle: None,
        }
    }

    fn call_builtin(&self, which: Builtin, args: &JsonObject) -> Result<ToolResult, CallError> {
        let text = match which {
            Builtin::Search => {
                let request = SearchRequest::from_args(args).map_err(|details| {
                    CallError::InvalidArguments {
                        name: SEARCH_TOOL.into(),
                        details,
                    }
                })?;
                serde_json::to_string(&json!({"tools": self.search.search_and_load(&request)}))
                    .unwrap_or_default()
            }
            Builtin::ReadOutput => self
                .ctx
                .output
                .read_output(args)
                .map_err(|e| match e {
                    // Arguments that are not a handle and a page: refused like any tool's
                    // arguments that do not fit its schema (nothing was read).
                    crate::call::output::OutputError::BadHandle { .. }
                    | crate::call::output::OutputError::BadArguments { .. } => {
                        CallError::InvalidArguments {
                            name: READ_OUTPUT_TOOL.into(),
                            details: e.to_string(),
                        }
                    }
                    other => CallError::Output(other.to_string()),
                })?
                .render(),
        };
        let result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
        let normalized = normalize(result.clone(), None, self.ctx.result_limits);
        Ok(ToolResult {
            server: "mcp-harness".into(),
            tool: self.name().to_string(),
            revision: self.revision(),
            result,
            normalized,
            output_handle: None,
        })
    }
}

/// With progress, the timeout restarts on each progress notification, up to this many times
/// the configured timeout in total (a server reporting progress forever still ends).
const MAX_TOTAL_FACTOR: u32 = 10;

/// An express call's progress as it reaches the call (`.0`), and the caller's channel (`.1`).
type ExpressProgress = (
    tokio::sync::mpsc::UnboundedReceiver<ProgressNotificationParam>,
    tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>,
);

/// A call handed to its transport: through rmcp, or as an express call.
enum Sent {
    Rmcp(RequestHandle<RoleClient>),
    Express(ExpressCall),
}

impl Sent {
    fn id(&self) -> &RequestId {
        match self {
            Sent::Rmcp(handle) => &handle.id,
            Sent::Express(call) => call.id(),
        }
    }
}

/// The refusal of a call cancelled while its approval was asked (an embedder that asks on
/// its own path says the same, and can tell it from other refusals).
pub const CANCELLED_WHILE_ASKED: &str =
    "cancelled by the caller while its approval was asked; the call was not sent";

/// How long telling a server of a cancel may take: the cancelled call's caller is answered
/// after it, and a server slow to take the notification must not hold that answer (a
/// gateway cutting its calls at shutdown gives them a second).
const TELL_CANCELLED_LIMIT: Duration = Duration::from_millis(500);

/// Tells the server that request `id` is cancelled, for `reason` (at most
/// [`TELL_CANCELLED_LIMIT`]).
async fn tell_cancelled(peer: &mcp_harness_transport::ClientPeer, id: RequestId, reason: &str) {
    let note = CancelledNotificationParam::new(Some(id), Some(reason.into()));
    let told = peer.send_notification(ClientNotification::CancelledNotification(
        rmcp::model::CancelledNotification::new(note),
    ));
    if tokio::time::timeout(TELL_CANCELLED_LIMIT, told)
        .await
        .is_err()
    {
        tracing::debug!("a server did not take notifications/cancelled in time; not waited for");
    }
}

/// The error of a call its caller cancelled, once the server was told.
async fn told_cancelled(
    peer: &mcp_harness_transport::ClientPeer,
    id: RequestId,
    entry: &ToolEntry,
) -> CallError {
    tell_cancelled(peer, id, "cancelled by the user").await;
    CallError::Transport {
        server: entry.server.clone(),
        tool: entry.raw_name.clone(),
        message: "cancelled by the caller; the server was told (notifications/cancelled)".into(),
    }
}

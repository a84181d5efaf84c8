//! The call path of a session: which listing a call binds to (its own, or one made on another
//! replica checked by digest), the profile's permission rules, progress and log forwarding to
//! the caller, and how a refusal or failure reaches the client.
//!
//! Invariant: a call runs only against a definition the client listed; anything else is refused
//! as unknown or stale before it reaches an upstream.

use std::future::Future;
use std::sync::Arc;

use mcp_harness_policy::{ApprovalRequest, Effect};
use mcp_harness_runtime::{
    CallError, CallOptions, CallReply, ClientProfile, SEARCH_TOOL, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ProgressNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::bridge::{Caller, as_caller};
use crate::sealed::{self, ListedMark};
use crate::sync::lock;

use super::shared::profile_of;
use super::{Listed, Session};

impl Session {
    pub(super) async fn bind_now(
        &self,
        profile: Option<&Arc<ClientProfile>>,
    ) -> Result<Listed, McpError> {
        // Not waiting for a config change in progress: a server slow to start must not hold
        // up every client's listing; the change reaches clients as `list_changed`.
        let binding = self.runtime().bind_current();
        let loaded = lock(&self.state.loaded).clone();
        let view = if loaded.is_empty() {
            self.shared().tool_view(&binding, profile)
        } else {
            binding.load(&loaded);
            Arc::new(self.shared().fresh_view(&binding, profile))
        };
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
    pub(super) async fn listing_for_call(
        &self,
        requested: &str,
        mark: Option<ListedMark>,
        profile: Option<&Arc<ClientProfile>>,
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
        let listed = self.shared().recall(mark.tools, profile);
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
            "`{requested}` was not run: the listing this call is bound to (catalog digest {:016x}) is not one this gateway still knows as showing `{requested}` as it is now (it was made on another replica, or the catalog changed since). List tools again (tools/list) and retry with the definition you get.",
            mark.tools
        )))
    }
}

/// The `_meta` key under which a `tools/list` result names its listing (the content digest of
/// the tools it showed, 16 hex digits), and under which a `tools/call` may name the listing it
/// was made from: what binds the calls of a client without a session (2026-07-28, or one that
/// keeps its first session id) to what it listed, on any replica.
/// What a client is told of a call cut when the gateway stopped waiting for it (the code and
/// retry hint of the drain's refusal of a new request).
fn cut_error() -> McpError {
    McpError::new(
        rmcp::model::ErrorCode(-32000),
        "the gateway shut down before this call ended and cut it (`serve --drain-secs` bounds how long it waits); a call already sent was cancelled upstream (notifications/cancelled); retry (another replica, or this one after its restart)",
        Some(serde_json::json!({"retryAfterMs": 5000})),
    )
}

pub(super) const LISTING_META: &str = "mcp-harness/listing";

/// The `_meta` of a `tools/list` result that showed tools of content digest `digest`.
pub(super) fn listing_meta(digest: u64) -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::JsonObject::new();
    meta.insert(LISTING_META.into(), format!("{digest:016x}").into());
    rmcp::model::MetaObject(meta)
}

/// The listing a call names in its `_meta` (sequence 0: a session's own later listing wins);
/// a value that is not one a listing answered with is refused, never taken for no listing (the
/// client would believe its call bound to what it listed).
fn listing_mark(meta: &rmcp::model::RequestMetaObject) -> Result<Option<ListedMark>, McpError> {
    let Some(value) = meta.0.0.get(LISTING_META) else {
        return Ok(None);
    };
    let tools = value
        .as_str()
        .filter(|digest| digest.len() == 16 && digest.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|digest| u64::from_str_radix(digest, 16).ok());
    match tools {
        Some(tools) => Ok(Some(ListedMark { seq: 0, tools })),
        None => Err(McpError::invalid_params(
            format!(
                "`_meta[\"{LISTING_META}\"]` must be the 16 hex digits a tools/list answered \
                 with under the same key; drop it to bind the listing this session last saw (or, \
                 without one, the current catalog)"
            ),
            None,
        )),
    }
}

/// `progress` as the notification rmcp's peer would send.
fn progress_message(progress: ProgressNotificationParam) -> rmcp::model::ServerJsonRpcMessage {
    rmcp::model::ServerJsonRpcMessage::notification(
        rmcp::model::ServerNotification::ProgressNotification(rmcp::model::Notification::new(
            progress,
        )),
    )
}

/// The tool a call went to: its server and its raw name there.
#[derive(Debug, Clone)]
pub(super) struct Called {
    pub(super) server: String,
    pub(super) tool: String,
}

/// Why a call produced no result.
pub(super) enum Failure {
    /// The runtime refused or failed the call.
    Call(CallError),
    /// The gateway could not bind the catalog.
    Rpc(McpError),
    /// The client's listing (made on another replica) does not match this replica's catalog.
    Stale(String),
}

impl Session {
    /// Binds, resolves and runs one call: (the tool it went to, what came back).
    pub(super) async fn run_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        rounds: super::mrtr::Rounds,
    ) -> (Option<Called>, Result<CallReply, Failure>) {
        let profile = profile_of(&context.extensions);
        // The client and request everything asked for this call is asked of.
        let caller = Caller::of(&context);
        // A malformed listing key is refused whether or not the session's id marks a listing
        // (which, when it does, binds the call).
        let from_meta = match listing_mark(&context.meta) {
            Ok(mark) => mark,
            Err(refused) => return (None, Err(Failure::Rpc(refused))),
        };
        let mark = sealed::opened(&context.extensions)
            .and_then(|o| o.payload.listed)
            .or(from_meta);
        let requested = request.name.as_ref();
        let listed = match self
            .listing_for_call(requested, mark, profile.as_ref())
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
        // Looked up once: each lookup is two ordered-map searches by name.
        let entry = listed.binding.snapshot().tool(name);
        let server = entry.map(|entry| entry.server.clone());
        let called = entry.map(|entry| Called {
            server: entry.server.clone(),
            tool: entry.raw_name.clone(),
        });
        let call = match listed.binding.prepare_call(name) {
            Ok(call) => call,
            Err(error) => return (called, Err(Failure::Call(error))),
        };
        // SEP-2663: a declaring client gets the upstream's task; a task-only tool is refused
        // for one that did not declare tasks.
        let hand_back_tasks = match entry {
            Some(entry) => match self.task_hand_back(&context, &entry.server, &entry.raw_name) {
                Ok(hand_back) => hand_back,
                Err(error) => return (called, Err(Failure::Rpc(error))),
            },
            None => false,
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
                        return (called, Err(Failure::Call(error)));
                    }
                    Effect::Ask => {
                        let ask = ApprovalRequest {
                            qualified_name: name.to_string(),
                            server: server.clone().unwrap_or_default(),
                            args,
                            reason: format!(
                                "{text} asks before `{name}` runs; add \"{name}\" to `gateway.clients.{}.permissions.allow` to run it without asking",
                                profile.name
                            ),
                            annotations: entry.and_then(|entry| entry.tool.annotations.clone()),
                        };
                        // Asked within the caller's scope: the approver finds the client there
                        // as it starts (made outside it, it found none and refused).
                        let approver = self.shared().bridge.approver();
                        let asked =
                            as_caller(caller.clone(), async move { approver.approve(ask).await });
                        // Bounded as the runtime bounds its approvals; a call cancelled while
                        // asked ends unsent (the question withdrawn, a late yes sends nothing).
                        let limit = self.runtime().approval_timeout();
                        let answer = tokio::select! {
                            answer = tokio::time::timeout(limit, asked) => answer,
                            () = self.state.cut.cancelled() => {
                                return (called, Err(Failure::Rpc(cut_error())));
                            }
                            () = context.ct.cancelled() => {
                                let error = CallError::Permission {
                                    name: name.to_string(),
                                    reason: mcp_harness_runtime::CANCELLED_WHILE_ASKED.into(),
                                };
                                return (called, Err(Failure::Call(error)));
                            }
                        };
                        let answer =
                            answer.unwrap_or_else(|_| mcp_harness_policy::Approval::Denied {
                                reason: format!(
                                    "no approval within {}s (the call was not sent)",
                                    limit.as_secs()
                                ),
                            });
                        match answer {
                            mcp_harness_policy::Approval::Approved => approved = true,
                            mcp_harness_policy::Approval::Denied { reason } => {
                                let error = CallError::Permission {
                                    name: name.to_string(),
                                    reason,
                                };
                                return (called, Err(Failure::Call(error)));
                            }
                            mcp_harness_policy::Approval::Cancelled => {
                                let error = CallError::Permission {
                                    name: name.to_string(),
                                    reason: "the approval was cancelled".into(),
                                };
                                return (called, Err(Failure::Call(error)));
                            }
                        }
                    }
                    Effect::Allow => approved = true,
                }
            }
        }
        let mut options = CallOptions {
            cancel: Some(context.ct.clone()),
            hand_back: rounds.hand_back(),
            forward: rounds.forward,
            ..CallOptions::default()
        };
        options.hand_back.tasks = hand_back_tasks;
        options.decline_tasks = !hand_back_tasks;
        let forward = context.meta.get_progress_token().map(|token| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<ProgressNotificationParam>();
            options.progress = Some(tx);
            let peer = context.peer.clone();
            // A direct call's progress rides its own stream, which rmcp's worker does not know.
            let direct = context
                .extensions
                .get::<crate::direct::DirectCall>()
                .cloned();
            super::progress::forward(rx, move |mut progress| {
                progress.progress_token = token.clone();
                let (peer, direct) = (peer.clone(), direct.clone());
                async move {
                    match &direct {
                        Some(direct) => direct.send(progress_message(progress)).await,
                        None => peer.notify_progress(progress).await.is_ok(),
                    }
                }
            })
        });
        let in_flight = server
            .as_deref()
            .map(|server| self.shared().bridge.enter(server, caller.clone()));
        // The upstream's requests of this very call reach this client (by the call's tag).
        options.caller = in_flight.as_ref().map(crate::bridge::InFlight::tag);
        let upstream = self.shared().tracer.as_ref().and_then(|tracer| {
            let raw = entry.map_or(name, |entry| entry.raw_name.as_str());
            let server = server.as_deref().unwrap_or("-");
            let target = crate::spans::Target::Tool(raw);
            crate::spans::upstream(
                Some(tracer),
                &context.extensions,
                "tools/call",
                target,
                server,
            )
        });
        if upstream.is_some() {
            let trace = crate::spans::meta(upstream.as_ref());
            options.traceparent = trace.traceparent;
            options.tracestate = trace.tracestate;
        }
        let run = Box::pin(call.call_reply(request.arguments, options));
        let run = async {
            if approved {
                as_caller(caller, crate::bridge::approved(name.to_string(), run)).await
            } else {
                as_caller(caller, run).await
            }
        };
        let run = async {
            match server.clone() {
                Some(server) => {
                    let own = in_flight.as_ref().map(crate::bridge::InFlight::tag);
                    self.forwarding_logs(server, &context, own, run).await
                }
                None => run.await,
            }
        };
        let (outcome, cut) = self.unless_cut(run, &context).await;
        if let Some(span) = upstream {
            crate::spans::end_upstream(
                Some(span),
                outcome
                    .as_ref()
                    .map(|reply| matches!(reply, CallReply::Done(r) if r.is_error())),
            );
        }
        if let Some(forward) = forward {
            // The sender went with the options: the forwarder ends after the last progress.
            let _ = forward.await;
        }
        if name == SEARCH_TOOL && outcome.is_ok() {
            self.after_search(&listed, profile.as_ref(), &context).await;
        }
        let outcome = match outcome {
            // Cancelled by the cut (sent, or still asked): the client is told so, not that it
            // cancelled.
            Err(CallError::Transport { .. }) if cut => Err(Failure::Rpc(cut_error())),
            Err(CallError::Permission { reason, .. })
                if cut && reason == mcp_harness_runtime::CANCELLED_WHILE_ASKED =>
            {
                Err(Failure::Rpc(cut_error()))
            }
            outcome => self.task_outcome(&context, called.as_ref(), outcome),
        };
        (called, outcome)
    }

    /// `run`, the call of request `context`, and whether the session's calls were cut before
    /// it ended: a cut cancels it (its server is told) rather than losing it with its
    /// connection, and its client is answered [`cut_error`].
    async fn unless_cut<F>(&self, run: F, context: &RequestContext<RoleServer>) -> (F::Output, bool)
    where
        F: Future<Output = Result<CallReply, CallError>>,
    {
        let cut = &self.state.cut;
        // Cut already: never sent (a call sent now would be cancelled at once, and its client
        // told to retry what may have run).
        if cut.is_cancelled() {
            let never = CallError::Transport {
                server: String::new(),
                tool: String::new(),
                message: String::new(),
            };
            return (Err(never), true);
        }
        tokio::pin!(run);
        let outcome = tokio::select! {
            biased;
            outcome = &mut run => outcome,
            () = cut.cancelled() => {
                context.ct.cancel();
                run.await
            }
        };
        (outcome, cut.is_cancelled())
    }

    /// After a tool search in listing `listed`: what it loaded becomes callable in this
    /// session at once (the listing's view is rebuilt), is kept for the session's later
    /// listings, and the client is told `tools/list_changed` so its host lists it.
    async fn after_search(
        &self,
        listed: &Arc<Listed>,
        profile: Option<&Arc<ClientProfile>>,
        context: &RequestContext<RoleServer>,
    ) {
        let view = self.shared().fresh_view(&listed.binding, profile);
        if view.digest == listed.view.digest {
            // Nothing new was loaded; a session that never listed has seen definitions all
            // the same, and its later calls are checked against them.
            lock(&self.state.listed).get_or_insert_with(|| listed.clone());
            return;
        }
        // The listing's binding had the session's earlier loads loaded too: it holds them all
        // (those its catalog still has), within one listing's load budget.
        *lock(&self.state.loaded) = listed.binding.loaded();
        {
            let mut current = lock(&self.state.listed);
            // Only the listing the search ran in: a listing made meanwhile already has them.
            // A session that never listed has listed now: the search showed the definitions
            // it loaded, and later calls are checked against those, not the catalog of the day.
            if current.as_ref().is_none_or(|c| Arc::ptr_eq(c, listed)) {
                *current = Some(Arc::new(Listed {
                    binding: listed.binding.clone(),
                    view: Arc::new(view),
                    seq: listed.seq,
                }));
            }
        }
        if let Err(error) = context.peer.notify_tool_list_changed().await {
            tracing::debug!(%error, "tools/list_changed after a tool search not sent");
        }
    }

    /// Runs `call` while forwarding the log notifications `server` sends meanwhile to the
    /// client calling it (`context`; its in-flight id `own`), at or above the level that
    /// client set, while no other client calls `server` (a line names no call); once `call` is
    /// done, the lines that had arrived by then go too before its output is returned (the
    /// runtime broadcasts a log line before the call's result comes back, so the caller gets
    /// its call's lines before the result). On the call's own task: no task, channel or join
    /// per call.
    #[allow(deprecated)] // logging: every protocol before 2026-07-28
    pub(super) async fn forwarding_logs<F: Future>(
        &self,
        server: String,
        context: &RequestContext<RoleServer>,
        own: Option<u64>,
        call: F,
    ) -> F::Output {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        let mut rx = self.runtime().server_logs();
        let state = &self.state;
        // The call's own response stream when it is an HTTP session's event stream; else (stdio,
        // a stream already gone) the session's notification channel.
        let sidecar = self.shared().sidecars.of(context);
        let peer = &context.peer;
        let send = async |params: rmcp::model::LoggingMessageNotificationParam| {
            let Some(sidecar) = &sidecar else {
                return Box::pin(peer.notify_logging_message(params)).await;
            };
            let line = rmcp::model::ServerJsonRpcMessage::notification(
                rmcp::model::ServerNotification::LoggingMessageNotification(
                    rmcp::model::LoggingMessageNotification::new(params),
                ),
            );
            // Full: the client does not read its own call's stream; closed: it left it.
            if sidecar.try_send(line).is_err() {
                tracing::debug!("a log line of a call not taken by its client; skipped");
            }
            Ok(())
        };
        // A log line names no call: it goes to this caller only while no other client calls
        // the server (another client's call may be what it is about).
        let caller = Caller::of(context);
        let bridge = &self.shared().bridge;
        let wanted = |log: &mcp_harness_runtime::ServerLog| {
            log.server == server
                && (log.params.level as u8) >= state.log_level()
                && (bridge.sole_client(&server, &caller, own, log.received)
                    || {
                        tracing::debug!(%server, "a log line sent while several clients call the server is forwarded to none");
                        false
                    })
        };
        let mut call = std::pin::pin!(call);
        let output = loop {
            let log = tokio::select! {
                biased;
                output = &mut call => break output,
                log = rx.recv() => log,
            };
            match log {
                Ok(log) if wanted(&log) => {
                    if send(log.params).await.is_err() {
                        // The client is gone: nothing more to forward.
                        return call.await;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(%server, missed, "log forwarder fell behind");
                }
                Err(RecvError::Closed) => return call.await,
            }
        };
        // The call ended. The transport hands a result on only once the lines its upstream sent
        // before it were broadcast, so they are all here already: take them, wait for nothing.
        loop {
            let log = match rx.try_recv() {
                Ok(log) => log,
                Err(TryRecvError::Lagged(_)) => continue,
                Err(TryRecvError::Empty | TryRecvError::Closed) => return output,
            };
            if wanted(&log) && send(log.params).await.is_err() {
                return output;
            }
        }
    }
}

/// A refusal the calling model should read (a tool error result), or a JSON-RPC error for a
/// request that names nothing this session listed.
pub(super) fn refusal(requested: &str, error: CallError) -> Result<CallToolResponse, McpError> {
    match error {
        CallError::UnknownTool { revision, .. } | CallError::NotInStep { revision, .. } => {
            Err(McpError::invalid_params(
                format!(
                    "unknown tool `{requested}`: not in the catalog this session's calls bind to (catalog revision {revision}: its last tools/list, or the current catalog if it never listed); list tools (tools/list) to see what there is"
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

/// The error a client gets for a failed prompts/get, resources/read or completion/complete:
/// the upstream's own JSON-RPC error as it sent it (e.g. -32602 with `data.uri` for an unknown
/// resource), else an internal error saying what failed.
pub(super) fn upstream_error(error: CallError) -> McpError {
    match error {
        CallError::Protocol {
            upstream: Some(data),
            ..
        } => *data,
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// The result a client gets: the normalised one (output budget applied), `isError` kept.
pub(super) fn downstream_result(result: ToolResult) -> CallToolResult {
    downstream_normalized(result.normalized)
}

/// The most bytes of a result's structured content given as text when it goes as an error.
const MAX_STRUCTURED_TEXT: usize = 64 * 1024;

/// A normalized result (a call's, or a task's final one) as the client gets it. A result
/// whose `structuredContent` breaks the tool's `outputSchema` (or, for a success, is missing
/// though the tool has one) goes as a tool error carrying its content — the structured
/// content as text when there is no text — and a note saying what was wrong, without the
/// structured content: the SDKs' clients check it against the schema they listed (the
/// TypeScript SDK's on errors too) and fail the whole call, so the model lost the text too.
pub(super) fn downstream_normalized(
    normalized: mcp_harness_runtime::NormalizedResult,
) -> CallToolResult {
    use mcp_harness_runtime::WarningKind;
    let unfit = normalized.warnings.iter().find(|w| match w.kind {
        WarningKind::StructuredContentMismatch => true,
        // A tool error need not carry structured content.
        WarningKind::StructuredContentMissing => !normalized.is_error,
        _ => false,
    });
    if let Some(warning) = unfit {
        let mut content = normalized.content.clone();
        // A result that gave its data only as structured content keeps it, as text.
        let texts = content.iter().any(|block| block.as_text().is_some());
        if let Some(structured) = normalized.structured_content.as_ref().filter(|_| !texts) {
            let mut json = structured.to_string();
            if json.len() > MAX_STRUCTURED_TEXT {
                let mut cut = MAX_STRUCTURED_TEXT;
                while !json.is_char_boundary(cut) {
                    cut -= 1;
                }
                json.truncate(cut);
                json.push_str("… [cut]");
            }
            content.push(rmcp::model::ContentBlock::text(json));
        }
        content.push(rmcp::model::ContentBlock::text(format!(
            "[mcp-harness: the tool's result does not fit the outputSchema it listed ({}); \
             passed on as an error with its content]",
            warning.message
        )));
        let mut out = CallToolResult::error(content);
        out.meta = normalized.meta;
        return out;
    }
    let mut out = if normalized.is_error {
        CallToolResult::error(normalized.content)
    } else {
        CallToolResult::success(normalized.content)
    };
    out.structured_content = normalized.structured_content;
    out.meta = normalized.meta;
    out
}

//! The bridge from upstream servers to the downstream client a request belongs to: an upstream's
//! elicitation, sampling and roots requests, and the runtime's `ask` approvals.
//!
//! Invariants:
//! - an approval is asked of exactly the client whose `tools/call` needs it (the call's task
//!   carries that client), as a form elicitation when that client declared elicitation, else it
//!   is refused with the permission rule to add;
//! - an upstream's request goes only to the client whose request it belongs to, never to
//!   another: an `input_required` round the runtime follows for a client (tools, prompts,
//!   resources of a client older than 2026-07-28) is followed in that request's own task, which
//!   carries its client; an upstream's own request goes to the call's client when it is known
//!   to belong to a call (it arrived on that call's Streamable HTTP response stream, or the
//!   runtime asks it within the call: the call's tag is its [`InFlight`] id), or when it names
//!   (related-task `_meta`) the upstream task whose `tasks/result` a client awaits (naming a
//!   task no client awaits, it goes to no other client's call: only to the stdio client, else
//!   refused); otherwise (a
//!   stdio upstream, the HTTP standalone stream) to the one client with a request in flight on that
//!   upstream when there is exactly one (or when every call in flight there is one client
//!   session's); with none, the stdio gateway's one client (it is asked as if connected
//!   directly); otherwise, or with several clients (it cannot be attributed), sampling and
//!   elicitation are refused and roots are empty;
//! - the in-flight record of a call is removed when the call ends, however it ends;
//! - an approval is answered yes without asking only for the one tool the calling client's
//!   profile approved in this very call.

// Sampling and roots are deprecated by SEP-2577, but servers of every earlier protocol use them.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use futures::future::BoxFuture;
use mcp_harness_policy::{Approval, ApprovalRequest, Approver, DenyAll};
use mcp_harness_runtime::transport::callbacks::{CallTags, RequestOrigin};
use mcp_harness_runtime::transport::{CallbackFuture, Callbacks, ClientCallbacks, Supported};
use rmcp::model::RequestId;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, GetExtensions,
    ListRootsRequest, ListRootsResult, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, RequestContext, ServiceError};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::json;

tokio::task_local! {
    /// The client whose request (`tools/call`, `prompts/get`, `resources/read`) this task runs.
    static CALLER: Caller;
    /// The qualified name of the tool this task's call runs with its client profile's approval
    /// (a profile `allow` rule, or an `ask` the client already accepted).
    static APPROVED: String;
}

/// Runs `call` as approved by the caller's profile for `tool`: an `ask` of the top-level rules
/// is answered yes without asking again (a top-level `deny` never reaches the approver).
pub(crate) async fn approved<F: std::future::Future>(tool: String, call: F) -> F::Output {
    APPROVED.scope(tool, call).await
}

/// Runs `call` as a call of `caller` (what the approver asks).
pub(crate) async fn as_caller<F: std::future::Future>(caller: Caller, call: F) -> F::Output {
    CALLER.scope(caller, call).await
}

/// Tells the client a request of ours is withdrawn when dropped armed (its answer no longer
/// awaited).
struct Withdraw {
    /// `None`: answered, nothing to withdraw.
    peer: Option<Peer<RoleServer>>,
    id: RequestId,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = self.id.clone();
        runtime.spawn(async move {
            let cancelled = rmcp::model::CancelledNotificationParam::new(
                Some(id),
                Some("the call this was asked for ended".into()),
            );
            if let Err(error) = peer.notify_cancelled(cancelled).await {
                tracing::debug!(%error, "withdrawing a request to the client failed");
            }
        });
    }
}

/// A downstream client's request in flight: the client, and the request's id, so that what is
/// asked of the client for it (an upstream's elicitation, sampling, roots; an approval) rides
/// that request's own response stream (SEP-2260), not the session's standalone GET stream —
/// which a client need not open.
#[derive(Clone)]
pub(crate) struct Caller {
    peer: Peer<RoleServer>,
    /// `None` for the stdio client asked outside any request of its own
    /// ([`ClientBridge::reside`]).
    request: Option<RequestId>,
    /// The request is a direct call (`crate::session::direct`): its own stream carries what
    /// is asked for it, which rmcp's session worker does not know.
    direct: Option<crate::direct::DirectCall>,
    /// Cancelled when the call ends (its [`InFlight`] is dropped): what is still asked of the
    /// client for it is withdrawn then.
    ended: Option<tokio_util::sync::CancellationToken>,
}

impl Caller {
    /// The request `context` belongs to, as a caller.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Self {
        Self {
            peer: context.peer.clone(),
            request: Some(context.id.clone()),
            direct: context
                .extensions
                .get::<crate::direct::DirectCall>()
                .cloned(),
            ended: None,
        }
    }

    /// Sends `request` to the client on the stream of the request this caller makes. Given up
    /// before the answer (the call it was for timed out, was cancelled or ended), it is
    /// withdrawn: the client is told (`notifications/cancelled`, on the session's stream) and
    /// can close its form — on a direct call's stream as on rmcp's.
    async fn ask(&self, mut request: ServerRequest) -> Result<ClientResult, ServiceError> {
        let asked = async {
            use futures::future::Either;
            let (id, answer) = match &self.direct {
                Some(direct) => {
                    let id = direct.next_id();
                    (id.clone(), Either::Left(direct.ask(id, request)))
                }
                None => {
                    if let Some(id) = &self.request {
                        request
                            .extensions_mut()
                            .insert(OriginatingRequestId(id.clone()));
                    }
                    let handle = self
                        .peer
                        .send_request_with_option(
                            request,
                            rmcp::service::PeerRequestOptions::no_options(),
                        )
                        .await?;
                    (handle.id.clone(), Either::Right(handle.await_response()))
                }
            };
            let mut withdraw = Withdraw {
                peer: Some(self.peer.clone()),
                id,
            };
            let answer = answer.await;
            withdraw.peer = None;
            answer
        };
        let ended = async {
            match &self.ended {
                Some(ended) => ended.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            answer = asked => answer,
            // The upstream that asked may never say it gave up: the call's end does.
            () = ended => Err(ServiceError::McpError(McpError::invalid_request(
                "the call this was asked for ended before the client answered",
                None,
            ))),
        }
    }

    /// The same client and request, tied to no call's end (what is asked of it is withdrawn
    /// only with its session).
    fn unbound(&self) -> Caller {
        Caller {
            ended: None,
            ..self.clone()
        }
    }

    /// Asks the client's elicitation `params`.
    async fn elicit(&self, params: ElicitRequestParams) -> Result<ElicitResult, ServiceError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.ask(request).await? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Asks the client's sampling `params`, checked as rmcp's `create_message` checks them.
    async fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ServiceError> {
        if (params.tools.is_some() || params.tool_choice.is_some())
            && !self.peer.supports_sampling_tools()
        {
            return Err(ServiceError::McpError(McpError::invalid_params(
                "tools or toolChoice provided but client does not support sampling tools capability",
                None,
            )));
        }
        params
            .validate()
            .map_err(|e| ServiceError::McpError(McpError::invalid_params(e, None)))?;
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.ask(request).await? {
            ClientResult::CreateMessageResult(result) => Ok(*result),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Asks the client's roots.
    async fn roots(&self) -> Result<ListRootsResult, ServiceError> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.ask(request).await? {
            ClientResult::ListRootsResult(result) => Ok(result),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Whether the client declared elicitation of `params`'s mode: a URL one needs
    /// `elicitation.url`; a form one `elicitation.form`, or an empty `elicitation` (which
    /// declares form, as before modes existed).
    fn can_elicit_mode(&self, params: &ElicitRequestParams) -> bool {
        let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
        self.peer
            .peer_info()
            .is_some_and(|info| declares_mode(info.capabilities.elicitation.as_ref(), url))
    }

    /// Whether `other` is a call of the same client session: the session's peers share the
    /// client's `initialize` information (a stateless request has none: never the same).
    fn same_client(&self, other: &Caller) -> bool {
        match (self.peer.peer_info(), other.peer.peer_info()) {
            (Some(mine), Some(theirs)) => Arc::ptr_eq(&mine, &theirs),
            _ => false,
        }
    }

    /// Whether the client declared sampling.
    fn can_sample(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some())
    }
}

/// Where to allow `request`'s tool so it runs without asking: the profile's allow list when a
/// client profile's rule asked, else the top-level one.
fn allow_hint(request: &ApprovalRequest) -> String {
    let name = &request.qualified_name;
    let key = request
        .reason
        .split('`')
        .find(|part| part.starts_with("gateway.clients.") && part.ends_with(".permissions.ask"))
        .map(|ask| format!("{}.allow", ask.trim_end_matches(".ask")))
        .unwrap_or_else(|| "permissions.allow".into());
    format!("add \"{name}\" to `{key}` to run it without asking")
}

/// Whether `declared` elicitation covers a URL-mode request (`url`) or a form one: URL mode
/// needs `url`; form needs `form`, or an empty declaration (form, as before modes existed).
fn declares_mode(declared: Option<&rmcp::model::ElicitationCapability>, url: bool) -> bool {
    declared.is_some_and(|declared| match url {
        true => declared.url.is_some(),
        false => declared.form.is_some() || declared.url.is_none(),
    })
}

/// Connects the runtime's client-side callbacks and approvals to the gateway's clients. Give
/// [`ClientBridge::callbacks`] and [`ClientBridge::approver`] to the
/// [`RuntimeBuilder`](mcp_harness_runtime::RuntimeBuilder), and the bridge to the
/// [`Gateway`](crate::Gateway).
#[derive(Clone, Default)]
pub struct ClientBridge {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Per upstream server: the calls in flight on it, oldest first.
    inflight: DashMap<String, Vec<Entry>, foldhash::quality::RandomState>,
    /// Per upstream server: the calls that ended lately (newest last, at most [`ENDED_KEPT`]),
    /// for [`ClientBridge::sole_client`] to judge a log line by the calls in flight when it
    /// was received.
    ended: DashMap<String, std::collections::VecDeque<Ended>, foldhash::quality::RandomState>,
    next: AtomicU64,
    /// Which call (its in-flight id) each in-flight upstream request belongs to; the runtime
    /// fills it for calls given a `caller` tag.
    tags: CallTags,
    /// The stdio-like sessions' clients (their session ids): while there is exactly one (the
    /// stdio gateway's), an upstream's request outside any call is that client's, as it would
    /// be connected directly; with several (an embedder serving more), nobody's.
    resident: std::sync::Mutex<Vec<(u64, Caller)>>,
    /// URL-mode elicitations asked of clients, (server, elicitation id, client), oldest first
    /// and at most [`URL_ASKED_KEPT`]: the server's `notifications/elicitation/complete` goes
    /// to the client it asked, and only to it.
    url_asked: std::sync::Mutex<std::collections::VecDeque<(String, String, Caller)>>,
}

/// How many URL-mode elicitations are remembered for their completion notification; past it
/// the oldest is forgotten (its completion is not forwarded; the client's answer stands).
const URL_ASKED_KEPT: usize = 256;

/// A call in flight on an upstream.
struct Entry {
    id: u64,
    caller: Caller,
    /// The upstream task it waits on (`tasks/result` of a SEP-1686 task).
    task: Option<String>,
    /// When it began.
    since: std::time::Instant,
}

/// A call that ended: whose, and when it was in flight.
struct Ended {
    id: u64,
    caller: Caller,
    since: std::time::Instant,
    until: std::time::Instant,
}

/// How many ended calls are kept per upstream; a log line older than the oldest kept end is
/// attributed to nobody (it cannot be told whose call was then in flight).
const ENDED_KEPT: usize = 64;

/// Removes its call from the in-flight record when dropped, and withdraws what is still asked
/// of the client for it.
pub(crate) struct InFlight {
    inner: Arc<Inner>,
    server: String,
    id: u64,
    ended: tokio_util::sync::CancellationToken,
}

impl InFlight {
    /// The call's tag, to give the runtime as `CallOptions::caller`: an upstream request of
    /// this call then reaches this call's client.
    pub(crate) fn tag(&self) -> u64 {
        self.id
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ended.cancel();
        let mut gone = None;
        if let Some(mut calls) = self.inner.inflight.get_mut(&self.server)
            && let Some(at) = calls.iter().position(|entry| entry.id == self.id)
        {
            gone = Some(calls.remove(at));
        }
        if let Some(entry) = gone {
            let ended = Ended {
                id: entry.id,
                caller: entry.caller,
                since: entry.since,
                until: std::time::Instant::now(),
            };
            // The server's ring exists after its first call: no name copied per call.
            let mut ring = match self.inner.ended.get_mut(&self.server) {
                Some(ring) => ring,
                None => self.inner.ended.entry(self.server.clone()).or_default(),
            };
            if ring.len() == ENDED_KEPT {
                ring.pop_front();
            }
            ring.push_back(ended);
        }
        self.inner
            .inflight
            .remove_if(&self.server, |_, calls| calls.is_empty());
    }
}

impl ClientBridge {
    /// A bridge with no call in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// The callbacks that forward upstream requests to the calling client.
    pub fn callbacks(&self) -> Callbacks {
        Arc::new(Forward {
            inner: self.inner.clone(),
        })
    }

    /// The approver that asks the calling client (elicitation) or refuses naming the rule.
    pub fn approver(&self) -> Arc<dyn Approver> {
        Arc::new(AskCaller)
    }

    /// Whether every call in flight on `server` is `caller`'s own (in-flight id `own`) or
    /// another call of its client session: a line the server sends that names no call (a log
    /// line) is then that client's; with another client calling too, it cannot be attributed.
    ///
    /// Judged as of `at`, when the line was received: a call that has ended since (another
    /// client's, whose line it may be) still counts, and one begun since does not.
    pub(crate) fn sole_client(
        &self,
        server: &str,
        caller: &Caller,
        own: Option<u64>,
        at: std::time::Instant,
    ) -> bool {
        let mine = |id: u64, who: &Caller| Some(id) == own || who.same_client(caller);
        let live = self.inner.inflight.get(server).is_none_or(|calls| {
            calls
                .iter()
                .all(|entry| entry.since > at || mine(entry.id, &entry.caller))
        });
        live && self.inner.ended.get(server).is_none_or(|ended| {
            // Older than every kept end: whose calls were in flight then is not known.
            let known = ended.len() < ENDED_KEPT || ended.front().is_none_or(|e| e.until <= at);
            known
                && ended
                    .iter()
                    .all(|e| e.until < at || e.since > at || mine(e.id, &e.caller))
        })
    }

    /// Makes `peer`, session `session`'s client, the one an upstream's request outside any call
    /// goes to (the stdio gateway's only client; never an HTTP one, whose upstreams are shared).
    pub(crate) fn reside(&self, session: u64, peer: Peer<RoleServer>) {
        let caller = Caller {
            peer,
            request: None,
            direct: None,
            ended: None,
        };
        let mut resident = crate::sync::lock(&self.inner.resident);
        resident.retain(|(id, _)| *id != session);
        resident.push((session, caller));
    }

    /// Undoes [`Self::reside`] for `session`.
    pub(crate) fn leave(&self, session: u64) {
        let mut resident = crate::sync::lock(&self.inner.resident);
        resident.retain(|(id, _)| *id != session);
    }

    /// Whether `session` is the only stdio-like client there is (its roots changes speak for
    /// every upstream's client).
    pub(crate) fn sole_resident(&self, session: u64) -> bool {
        let resident = crate::sync::lock(&self.inner.resident);
        matches!(resident.as_slice(), [(id, _)] if *id == session)
    }

    /// Records a call of `caller` in flight on `server` until the guard drops.
    pub(crate) fn enter(&self, server: &str, caller: Caller) -> InFlight {
        self.enter_task(server, caller, None)
    }

    /// As [`Self::enter`], for a request that waits on the upstream's `task`: a request of the
    /// upstream naming that task (its related-task `_meta`) reaches `caller`.
    pub(crate) fn enter_task(
        &self,
        server: &str,
        caller: Caller,
        task: Option<String>,
    ) -> InFlight {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let ended = tokio_util::sync::CancellationToken::new();
        let caller = Caller {
            ended: Some(ended.clone()),
            ..caller
        };
        self.inner
            .inflight
            .entry(server.to_string())
            .or_default()
            .push(Entry {
                id,
                caller,
                task,
                since: std::time::Instant::now(),
            });
        InFlight {
            inner: self.inner.clone(),
            server: server.to_string(),
            id,
            ended,
        }
    }
}

/// Whom an upstream's request goes to.
enum Route {
    /// The client of the call the request belongs to.
    Caller(Caller),
    /// No client calls the upstream now (or the request's call has ended).
    Nobody,
    /// This many clients call the upstream and the request does not say for which call.
    Ambiguous(usize),
}

impl Inner {
    /// The client an upstream request of `server` with `origin` belongs to: the client whose
    /// request this task runs (a round the runtime follows within that very request), else the
    /// tagged call's, else the only caller's; never a guess between several.
    fn route(&self, server: &str, origin: &RequestOrigin) -> Route {
        if let Ok(peer) = CALLER.try_with(Clone::clone) {
            return Route::Caller(peer);
        }
        let calls = self.inflight.get(server);
        // A request of a call that ended is nobody's, calls in flight or not.
        if let Some(tag) = origin.caller {
            return match calls.as_ref().and_then(|c| c.iter().find(|e| e.id == tag)) {
                Some(entry) => Route::Caller(entry.caller.clone()),
                None => Route::Nobody,
            };
        }
        let Some(calls) = calls else {
            return self.resident();
        };
        if let Some(task) = &origin.related_task {
            // A request naming a task is that task's client's: the one awaiting its result, or
            // (no one awaiting it) the stdio client — never another client's call that happens
            // to be the only one in flight.
            return match calls.iter().find(|e| e.task.as_ref() == Some(task)) {
                Some(entry) => Route::Caller(entry.caller.clone()),
                None => self.resident(),
            };
        }
        match calls.as_slice() {
            [] => self.resident(),
            [only] => Route::Caller(only.caller.clone()),
            // Several calls of one client (a host running calls side by side over stdio): the
            // request is that client's whichever call it is for.
            // Tied to none of them: it is withdrawn when the session ends, not when the first
            // call does (its answer may be for another).
            [first, rest @ ..] if rest.iter().all(|e| e.caller.same_client(&first.caller)) => {
                Route::Caller(first.caller.unbound())
            }
            several => Route::Ambiguous(several.len()),
        }
    }

    /// The stdio client when it is the only one, else nobody.
    fn resident(&self) -> Route {
        let resident = crate::sync::lock(&self.resident);
        match resident.as_slice() {
            [(_, caller)] => Route::Caller(caller.clone()),
            _ => Route::Nobody,
        }
    }

    /// The calling client of a sampling or elicitation request, or the error that refuses it.
    fn caller(&self, what: &str, server: &str, origin: &RequestOrigin) -> Result<Caller, McpError> {
        match self.route(server, origin) {
            Route::Caller(peer) => Ok(peer),
            Route::Nobody => Err(no_caller(what, server)),
            Route::Ambiguous(count) => {
                tracing::debug!(server, count, request = ?origin.request, "refused an upstream {what}: it names no call and several clients call the server");
                Err(McpError::invalid_request(
                    format!(
                        "the {what} of server \"{server}\" cannot be attributed to one caller: \
                         {count} clients of the gateway are calling it now and the request does \
                         not say for which call (a stdio upstream, or the HTTP standalone \
                         stream); it is refused rather than sent to a client it may not belong to"
                    ),
                    None,
                ))
            }
        }
    }
}

struct Forward {
    inner: Arc<Inner>,
}

fn no_caller(what: &str, server: &str) -> McpError {
    McpError::invalid_request(
        format!(
            "no client of the gateway can answer this {what} of server \"{server}\": it belongs to \
             no call in flight (no client calls the server, the call it was for ended, or it \
             names a task whose result no client awaits), and it is given to no other client"
        ),
        None,
    )
}

impl ClientCallbacks for Forward {
    fn supports(&self) -> Supported {
        Supported {
            elicitation_form: true,
            elicitation_url: true,
            sampling: true,
            roots: true,
        }
    }

    fn elicit(&self, server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        self.elicit_from(server, &RequestOrigin::default(), request)
    }

    fn sample(
        &self,
        server: &str,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        self.sample_from(server, &RequestOrigin::default(), request)
    }

    fn roots(&self, server: &str) -> CallbackFuture<ListRootsResult> {
        self.roots_from(server, &RequestOrigin::default())
    }

    fn call_tags(&self) -> Option<&CallTags> {
        Some(&self.inner.tags)
    }

    fn elicitation_complete(&self, server: &str, elicitation_id: &str) {
        let caller = {
            let mut asked = crate::sync::lock(&self.inner.url_asked);
            let at = asked
                .iter()
                .position(|(s, id, _)| s == server && id == elicitation_id);
            at.and_then(|at| asked.remove(at))
                .map(|(_, _, caller)| caller)
        };
        let Some(caller) = caller else {
            tracing::debug!(
                server,
                "an elicitation completion for no client asked here; dropped"
            );
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let params = json!({"elicitationId": elicitation_id});
        runtime.spawn(async move {
            let notification = rmcp::model::ServerNotification::CustomNotification(
                rmcp::model::CustomNotification::new(
                    mcp_harness_runtime::transport::ELICITATION_COMPLETE_NOTIFICATION,
                    Some(params),
                ),
            );
            if let Err(error) = caller.peer.send_notification(notification).await {
                tracing::debug!(%error, "an elicitation completion not delivered");
            }
        });
    }

    fn elicit_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: ElicitRequestParams,
    ) -> CallbackFuture<ElicitResult> {
        let caller = self.inner.caller("elicitation", server, origin);
        let inner = self.inner.clone();
        let server = server.to_string();
        Box::pin(async move {
            let caller = caller?;
            if let ElicitRequestParams::UrlElicitationParams { elicitation_id, .. } = &request
                && !elicitation_id.is_empty()
                && caller.can_elicit_mode(&request)
            {
                let mut asked = crate::sync::lock(&inner.url_asked);
                if asked.len() >= URL_ASKED_KEPT {
                    asked.pop_front();
                }
                asked.push_back((server.clone(), elicitation_id.clone(), caller.unbound()));
            }
            if !caller.can_elicit_mode(&request) {
                let mode = match &request {
                    ElicitRequestParams::UrlElicitationParams { .. } => "URL-mode elicitation",
                    _ => "elicitation",
                };
                return Err(McpError::invalid_request(
                    format!(
                        "the calling client does not support {mode} (server \"{server}\" asked)"
                    ),
                    None,
                ));
            }
            caller.elicit(request).await.map_err(|e| {
                McpError::internal_error(format!("the client's elicitation failed: {e}"), None)
            })
        })
    }

    fn sample_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        let caller = self.inner.caller("sampling request", server, origin);
        let server = server.to_string();
        Box::pin(async move {
            let caller = caller?;
            // Asked of a client that never declared it, the request would wait for an answer
            // that may never come (a client may ignore what it does not know).
            if !caller.can_sample() {
                return Err(McpError::invalid_request(
                    format!(
                        "the calling client does not support sampling (server \"{server}\" asked)"
                    ),
                    None,
                ));
            }
            caller.sample(request).await.map_err(|e| {
                McpError::internal_error(format!("the client's sampling failed: {e}"), None)
            })
        })
    }

    fn roots_from(&self, server: &str, origin: &RequestOrigin) -> CallbackFuture<ListRootsResult> {
        let caller = match self.inner.route(server, origin) {
            Route::Caller(caller) => Some(caller),
            Route::Nobody => None,
            Route::Ambiguous(count) => {
                tracing::debug!(server, count, request = ?origin.request, "answered an upstream roots/list with no roots: it names no call and several clients call the server");
                None
            }
        };
        Box::pin(async move {
            match caller {
                Some(caller)
                    if caller
                        .peer
                        .peer_info()
                        .is_some_and(|info| info.capabilities.roots.is_some()) =>
                {
                    caller.roots().await.map_err(|e| {
                        McpError::internal_error(
                            format!("the client's roots/list failed: {e}"),
                            None,
                        )
                    })
                }
                _ => Ok(ListRootsResult::default()),
            }
        })
    }
}

/// Asks the client whose call needs approval.
struct AskCaller;

impl Approver for AskCaller {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        if APPROVED
            .try_with(|tool| *tool == request.qualified_name)
            .unwrap_or(false)
        {
            return Box::pin(async { Approval::Approved });
        }
        // The question is a form: asked only of a client that declared form elicitation.
        let caller = CALLER.try_with(Clone::clone).ok().filter(|caller| {
            caller
                .peer
                .peer_info()
                .is_some_and(|info| declares_mode(info.capabilities.elicitation.as_ref(), false))
        });
        let Some(caller) = caller else {
            return DenyAll.approve(request);
        };
        let arguments = serde_json::Value::Object(request.args.clone()).to_string();
        let message = format!(
            "Allow `{}` (server \"{}\") to run? {}. Arguments: {}",
            request.qualified_name, request.server, request.reason, arguments
        );
        let params: Result<ElicitRequestParams, _> = serde_json::from_value(json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {}}
        }));
        Box::pin(async move {
            let Ok(params) = params else {
                return Approval::Cancelled;
            };
            match caller.elicit(params).await {
                Ok(answer) => match answer.action {
                    ElicitationAction::Accept => Approval::Approved,
                    ElicitationAction::Decline => Approval::Denied {
                        // The rule that asked names the allow list to add it to (a client
                        // profile's own, or the top-level one).
                        reason: format!(
                            "the user declined `{}`; {}",
                            request.qualified_name,
                            allow_hint(&request)
                        ),
                    },
                    _ => Approval::Cancelled,
                },
                Err(error) => Approval::Denied {
                    reason: format!("asking the client for approval failed: {error}"),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A declined approval names the allow list of the rule that asked.
    #[test]
    fn a_declined_approval_names_the_allow_list_of_the_rule_that_asked() {
        let request = |reason: &str| ApprovalRequest {
            qualified_name: "mcp__fx__echo".into(),
            server: "fx".into(),
            args: Default::default(),
            reason: reason.into(),
            annotations: None,
        };
        let profile = request(
            "rule `mcp__fx__echo` in `gateway.clients.alice.permissions.ask` asks before `mcp__fx__echo` runs",
        );
        assert!(
            allow_hint(&profile).contains("`gateway.clients.alice.permissions.allow`"),
            "{}",
            allow_hint(&profile)
        );
        let top = request("rule `mcp__fx__*` in `permissions.ask`");
        assert!(allow_hint(&top).contains("`permissions.allow`"));
    }

    /// A form-only client is not sent a URL-mode elicitation; an empty declaration is form.
    #[test]
    fn elicitation_modes_follow_the_declaration() {
        let declared = |json: serde_json::Value| {
            serde_json::from_value::<rmcp::model::ElicitationCapability>(json).unwrap()
        };
        let empty = declared(json!({}));
        let form = declared(json!({"form": {}}));
        let url = declared(json!({"url": {}}));
        let both = declared(json!({"form": {}, "url": {}}));
        assert!(!declares_mode(None, false) && !declares_mode(None, true));
        assert!(declares_mode(Some(&empty), false) && !declares_mode(Some(&empty), true));
        assert!(declares_mode(Some(&form), false) && !declares_mode(Some(&form), true));
        assert!(!declares_mode(Some(&url), false) && declares_mode(Some(&url), true));
        assert!(declares_mode(Some(&both), false) && declares_mode(Some(&both), true));
    }
}

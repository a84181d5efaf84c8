//! The sessions that serve direct calls (see `crate::direct`), found by their identity, and
//! how one serves a call: as rmcp's service loop would, on the caller's task.
//!
//! Invariants:
//! - a session is found here only while its handler state lives (the map holds it weakly; its
//!   state removes its own entry when dropped), once its client completed the handshake
//!   (`notifications/initialized`, or rmcp restored it), and until rmcp closes it;
//! - a call served here runs through exactly the handler rmcp would run it through (the traced
//!   session and rmcp's own dispatch of a `tools/call`, its answer shaped for the client's
//!   protocol version as rmcp's dispatch shapes it), with the context rmcp would give it: the
//!   same id, `_meta`, extensions (the HTTP request's parts) and peer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientRequest, ErrorCode, JsonRpcRequest,
    ProtocolVersion, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use super::{Session, SessionState, Shared};
use crate::direct::{DirectCall, DirectCalls};
use crate::traced::Traced;

/// The sessions of this process that serve direct calls, by identity (the one inside every
/// sealed id of the session).
pub(crate) struct HeldSessions {
    map: DashMap<Arc<str>, Entry, foldhash::quality::RandomState>,
    /// The direct calls' open ends (each session's token among them).
    pub(crate) calls: Arc<DirectCalls>,
    /// When this process started, for the touch times.
    epoch: Instant,
}

impl Default for HeldSessions {
    fn default() -> Self {
        Self {
            map: DashMap::default(),
            calls: Arc::default(),
            epoch: Instant::now(),
        }
    }
}

struct Entry {
    state: Weak<SessionState>,
    peer: Peer<RoleServer>,
    /// When rmcp's session worker last heard of this session through a direct call
    /// (milliseconds since `epoch`).
    touched: AtomicU64,
}

/// A session found by its identity, ready to serve one direct call.
pub(crate) struct Held {
    session: Session,
    peer: Peer<RoleServer>,
    /// Cancelled when the session closes.
    closed: CancellationToken,
    /// rmcp's worker has not heard of the session for a while (see [`HeldSessions::get`]).
    pub(crate) touch_due: bool,
}

impl HeldSessions {
    /// The session of identity `identity`, while it lives. `touch_due` is set, and the touch
    /// time renewed, when rmcp's session worker last heard of it through a direct call
    /// `touch_every` ago or more: the worker ends a session it hears nothing of for its idle
    /// limit, and a client that only calls tools talks to it through direct calls alone.
    pub(crate) fn get(&self, identity: &str, touch_every: Duration) -> Option<Held> {
        let entry = self.map.get(identity)?;
        let state = entry.state.upgrade()?;
        let now = self.now();
        let touched = entry.touched.load(Ordering::Relaxed);
        let touch_due = now.saturating_sub(touched) >= touch_every.as_millis() as u64
            && entry
                .touched
                .compare_exchange(touched, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        Some(Held {
            session: Session { state },
            peer: entry.peer.clone(),
            closed: self.calls.session_token(identity),
            touch_due,
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Records `state`'s session under its identity.
    pub(super) fn insert(&self, identity: &str, state: &Arc<SessionState>, peer: Peer<RoleServer>) {
        let identity: Arc<str> = Arc::from(identity);
        let _ = state.http_key.set(identity.clone());
        let entry = Entry {
            state: Arc::downgrade(state),
            peer,
            touched: AtomicU64::new(self.now()),
        };
        self.map.insert(identity, entry);
    }

    /// Forgets the entry of `identity` when it is `state`'s (a restored session may have
    /// taken the identity over since).
    pub(super) fn remove(&self, identity: &str, state: *const SessionState) {
        let removed = self.map.remove_if(identity, |_, entry| {
            std::ptr::eq(entry.state.as_ptr(), state)
        });
        if removed.is_some() {
            self.calls.forget(identity);
        }
    }
}

impl Held {
    /// Serves `request` as rmcp's service loop would, on this task: its answer, an error
    /// answer included. `direct` goes in the request's context.
    pub(crate) async fn serve(
        self,
        mut request: JsonRpcRequest<ClientRequest>,
        shared: Arc<Shared>,
        direct: DirectCall,
        ct: CancellationToken,
    ) -> ServerJsonRpcMessage {
        let id = request.id.clone();
        let meta = std::mem::take(rmcp::model::GetMeta::get_meta_mut(&mut request.request));
        let mut extensions = std::mem::take(rmcp::model::GetExtensions::extensions_mut(
            &mut request.request,
        ));
        extensions.insert(direct);
        let mut context = RequestContext::new(id.clone(), self.peer);
        context.ct = ct;
        context.meta = meta;
        context.extensions = extensions;
        let handler = Traced::new(self.session, shared.tracer.clone());
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let answer = match request.request {
            // rmcp's dispatch of a `tools/call` in a session that began with `initialize` (see
            // `Service::handle_request`): the handler, then SEP-2663's guard. Called directly,
            // not through the dispatch, whose future is the size of every handler's.
            ClientRequest::CallToolRequest(call) => {
                let declared_tasks = context
                    .client_capabilities()
                    .is_some_and(|caps| caps.supports_tasks());
                match rmcp::ServerHandler::call_tool(&handler, call.params, context).await {
                    Ok(CallToolResponse::Task(_)) if !declared_tasks => {
                        Err(McpError::missing_required_client_capability(
                            ClientCapabilities::builder().enable_tasks().build(),
                        ))
                    }
                    Ok(response) => Ok(ServerResult::from(response)),
                    Err(error) => Err(error),
                }
            }
            other => {
                let answer = rmcp::Service::handle_request(&handler, other, context);
                return match Box::pin(answer).await {
                    Ok(result) => ServerJsonRpcMessage::response(result, id),
                    Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
                };
            }
        };
        // What rmcp's dispatch does with every answer (`Service::handle_request`): the shape of
        // the client's protocol version.
        let answer = match answer {
            Ok(ServerResult::InputRequiredResult(_)) if !modern => Err(McpError::invalid_request(
                "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                None,
            )),
            Ok(mut result) => {
                if modern {
                    result.fill_missing_cache_hints();
                } else {
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                }
                Ok(result)
            }
            Err(mut error) => {
                if modern && error.code == ErrorCode::RESOURCE_NOT_FOUND {
                    error.code = ErrorCode::INVALID_PARAMS;
                }
                Err(error)
            }
        };
        match answer {
            Ok(result) => ServerJsonRpcMessage::response(result, id),
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        }
    }

    /// A token cancelled when the session closes.
    pub(crate) fn call_token(&self) -> CancellationToken {
        self.closed.child_token()
    }
}

//! Direct calls' open ends: an in-session `tools/call` served on the task that read its POST
//! (`crate::in_session::direct`, run by `crate::session::direct`) passes neither rmcp's
//! session worker nor its service loop, so what they would route for it is routed here: its
//! progress and its requests to the client ride its own response stream ([`DirectCall`]), the
//! client's answers to those requests and its cancellation come back here, and closing its
//! session cancels it.
//!
//! Invariants:
//! - a request a direct call makes of its client carries an id of its own (from 2^40, above
//!   any id rmcp's peer hands out) and is answered only by the client's response naming that
//!   id in that session; an unanswered one is forgotten when its call ends or its session
//!   closes;
//! - a session's token ([`DirectCalls::session_token`]) is cancelled when rmcp closes the
//!   session (a DELETE, a worker that ended) or the endpoint stops, and every direct call of
//!   the session runs under a child of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use rmcp::ErrorData as McpError;
use rmcp::model::{ClientResult, RequestId, ServerJsonRpcMessage, ServerRequest};
use rmcp::service::ServiceError;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::sidecar::Sidecar;

/// Hashed with foldhash (keys carry a session identity chosen by this process, not a client).
type Hasher = foldhash::quality::RandomState;

/// A request of a direct call in one session: (session identity, JSON-RPC id).
type Key = (Arc<str>, RequestId);

/// The first id of a request a direct call makes of its client: above the `u32` ids rmcp's
/// peer counts, far below 2^53 (the largest integer every SDK reads exactly).
const FIRST_ASK_ID: u64 = 1 << 40;

/// The open ends of the direct calls of one endpoint.
pub(crate) struct DirectCalls {
    /// Requests direct calls made of their clients, waiting for the answer.
    asks: DashMap<Key, oneshot::Sender<Result<ClientResult, McpError>>, Hasher>,
    /// Direct calls in flight, cancelled by the client's `notifications/cancelled`.
    calls: DashMap<Key, CancellationToken, Hasher>,
    /// Per session identity, cancelled when rmcp closes the session.
    sessions: DashMap<Arc<str>, CancellationToken, Hasher>,
    next_ask: AtomicU64,
    /// Cancelled when the endpoint stops: every session's token is its child.
    root: OnceLock<CancellationToken>,
}

impl Default for DirectCalls {
    fn default() -> Self {
        Self {
            asks: DashMap::default(),
            calls: DashMap::default(),
            sessions: DashMap::default(),
            next_ask: AtomicU64::new(FIRST_ASK_ID),
            root: OnceLock::new(),
        }
    }
}

impl DirectCalls {
    /// Ends every session's direct calls when `root` is cancelled (the endpoint stopped).
    pub(crate) fn stop_with(&self, root: CancellationToken) {
        let _ = self.root.set(root);
    }

    /// The token of session `identity`: cancelled when the session closes.
    pub(crate) fn session_token(&self, identity: &str) -> CancellationToken {
        if let Some(token) = self.sessions.get(identity) {
            return token.clone();
        }
        self.sessions
            .entry(Arc::from(identity))
            .or_insert_with(|| match self.root.get() {
                Some(root) => root.child_token(),
                None => CancellationToken::new(),
            })
            .clone()
    }

    /// rmcp closed the session of `identity`: its direct calls are cancelled.
    pub(crate) fn close(&self, identity: &str) {
        if let Some((_, token)) = self.sessions.remove(identity) {
            token.cancel();
        }
        // What is still asked of the session's client is not answered now: each ask ends
        // (its upstream answered), whichever call it belongs to.
        self.asks.retain(|(session, _), _| &**session != identity);
    }

    /// Forgets the token of session `identity` (its handler is gone: no call of it is left).
    pub(crate) fn forget(&self, identity: &str) {
        self.sessions.remove(identity);
    }

    /// Registers the direct call `request` of session `identity`, cancelled by `ct`, until
    /// the guard drops; `None` when a call of that id is in flight in the session already (a
    /// cancel could not tell them apart).
    pub(crate) fn call_in_flight(
        self: &Arc<Self>,
        identity: Arc<str>,
        request: RequestId,
        ct: CancellationToken,
    ) -> Option<InFlight> {
        let key = (identity, request);
        match self.calls.entry(key.clone()) {
            dashmap::Entry::Occupied(_) => return None,
            dashmap::Entry::Vacant(place) => {
                place.insert(ct);
            }
        }
        Some(InFlight {
            calls: self.clone(),
            key,
        })
    }

    /// Whether any direct call is in flight or waits for its client: only then can a
    /// client's response or cancellation be meant for one.
    pub(crate) fn expects_client_messages(&self) -> bool {
        !self.calls.is_empty() || !self.asks.is_empty()
    }

    /// Cancels the direct call `request` of session `identity`; whether there was one.
    pub(crate) fn cancel(&self, identity: &str, request: &RequestId) -> bool {
        let key = (Arc::<str>::from(identity), request.clone());
        match self.calls.get(&key) {
            Some(ct) => {
                ct.cancel();
                true
            }
            None => false,
        }
    }

    /// Hands the client's answer to the request `id` a direct call of session `identity`
    /// made; whether one waited for it.
    pub(crate) fn answer(
        &self,
        identity: &str,
        id: &RequestId,
        answer: Result<ClientResult, McpError>,
    ) -> bool {
        let key = (Arc::<str>::from(identity), id.clone());
        match self.asks.remove(&key) {
            Some((_, waiting)) => {
                let _ = waiting.send(answer);
                true
            }
            None => false,
        }
    }
}

/// Removes a direct call from [`DirectCalls`]' calls in flight when dropped.
pub(crate) struct InFlight {
    calls: Arc<DirectCalls>,
    key: Key,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.calls.calls.remove(&self.key);
    }
}

/// In a direct call's context (its extensions): where what the call sends its client goes.
#[derive(Clone)]
pub(crate) struct DirectCall {
    /// The call's own response stream.
    pub(crate) stream: Sidecar,
    pub(crate) identity: Arc<str>,
    pub(crate) calls: Arc<DirectCalls>,
}

impl DirectCall {
    /// Sends `message` on the call's stream; `false` once the stream is gone.
    pub(crate) async fn send(&self, message: ServerJsonRpcMessage) -> bool {
        self.stream.send(message).await.is_ok()
    }

    /// A fresh id for a request of this call to its client.
    pub(crate) fn next_id(&self) -> RequestId {
        RequestId::Number(self.calls.next_ask.fetch_add(1, Ordering::Relaxed) as i64)
    }

    /// Asks the client `request` as `id` ([`DirectCall::next_id`]) on the call's stream and
    /// waits for its answer; dropped first, the ask is forgotten (the caller withdraws it).
    pub(crate) async fn ask(
        &self,
        id: RequestId,
        request: ServerRequest,
    ) -> Result<ClientResult, ServiceError> {
        let (tx, rx) = oneshot::channel();
        let key = (self.identity.clone(), id.clone());
        self.calls.asks.insert(key.clone(), tx);
        let _forget = Forget {
            calls: &self.calls,
            key,
        };
        if !self.send(ServerJsonRpcMessage::request(request, id)).await {
            return Err(ServiceError::TransportClosed);
        }
        match rx.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(ServiceError::McpError(error)),
            Err(_) => Err(ServiceError::TransportClosed),
        }
    }
}

/// Forgets an ask when dropped (answered, or its call ended first).
struct Forget<'a> {
    calls: &'a DirectCalls,
    key: Key,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.calls.asks.remove(&self.key);
    }
}

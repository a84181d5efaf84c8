//! Express calls: a `tools/call` sent from the caller's own task, past rmcp's service loop.
//!
//! Why: through rmcp, a call's request and its answer each cross rmcp's service loop — and for
//! Streamable HTTP its worker, for a line transport (stdio, in-process) a task spawned per
//! send — with a channel hop and a move of the message at each. Profiled through the gateway,
//! that was about a quarter of the task polls of a call. Two ways:
//! - **POSTed** (Streamable HTTP): the call's POST goes through the same client stack rmcp's
//!   worker uses (so the same authorization, wire tap, size limits and connection watch), and
//!   a lone answer is taken there;
//! - **written** (a line transport): the call's line goes through the transport's own writer
//!   (noted as its own sends are), and its answer is taken out of what rmcp's service loop
//!   reads, before rmcp sees it, behind the notifications the server sent before it — as
//!   rmcp's own answers are.
//!
//! Invariants:
//! - an express call is sent only in a session rmcp has already used: a POSTed one with the
//!   session id and protocol headers rmcp's worker last sent a message with; before that, or
//!   for a request the caller does not hand here, rmcp sends it;
//! - its id never collides with rmcp's (rmcp counts up from 0 in `u32`; these start at 2^32);
//! - a server that refused the POST before running it (session gone, authorization refused)
//!   makes the call [`ExpressError::Unsent`]: the caller sends it the usual way, where rmcp
//!   recovers the session or reports the refusal; a call the server may have run is never
//!   sent twice. A session found gone is not asked again: rmcp's worker gets "session
//!   expired" for its next message in it at once, and re-initialises;
//! - every other message on a POSTed call's event stream (progress, logs, the server's own
//!   requests) goes to rmcp's service loop as if its worker had read it, marked with the
//!   stream it came on, and the call's answer after them then goes the same way (behind them,
//!   in order) and is handed back to the caller ([`Outstanding::divert`]); an answer alone is
//!   handed back at once, after the session's earlier counted notifications
//!   ([`Delivered::caught_up`]);
//! - a written call's answer is diverted from before its line is written until the call ends;
//!   one that comes after (an abandoned call) goes to rmcp, which drops it; once the
//!   connection ended, a waiting or new written call fails as closed at once;
//! - a stream that ends before the answer is resumed from its last event id (`Last-Event-ID`):
//!   a broken one at once the first time, one the server ended after its `retry`, any further
//!   attempt after the connection's backoff, at most [`crate::http`]'s reconnect bound in a row
//!   without an event; without an event id the call fails at once with the reason;
//! - while it waits, the call is counted in the session's [`Outstanding`] requests.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetExtensions, GetMeta, NumberOrString, ProgressToken,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{InboundStreamOrigin, ServiceError};
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::transport::{DynamicTransportError, Transport};
use tokio::sync::{mpsc, oneshot};

use crate::layer::{Events, PostResult};
use crate::lines::LineSend;
use crate::ordered::Delivered;
use crate::outstanding::Outstanding;

/// The first express call id: above every id rmcp's `u32` counter can give.
const FIRST_ID: i64 = 1 << 32;

/// How many messages from express calls' event streams wait for rmcp's service loop at most;
/// a call whose stream brings more waits (its stream is read no further) until there is room.
const SIDE_CAPACITY: usize = 32;

/// How a session's messages are sent, as rmcp's worker last sent one in it: the express call
/// sends its POST the same way.
#[derive(Clone)]
struct Attachment {
    uri: Arc<str>,
    session: Option<Arc<str>>,
    auth: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
    limits: StreamableHttpResponseLimits,
}

/// Where [`Recording`] keeps the session's [`Attachment`] for express calls, and the session
/// an express call found gone.
#[derive(Clone, Default)]
pub(crate) struct AttachmentSlot(Arc<Mutex<SlotState>>);

#[derive(Default)]
struct SlotState {
    current: Option<Arc<Attachment>>,
    /// The session id a server answered an express call with "no such session" for: rmcp's
    /// worker is told so at its next message in it, without asking the server again.
    gone: Option<Arc<str>>,
}

impl AttachmentSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes how `message` was sent, unless it starts a session (its answer brings the session
    /// id) or nothing changed since the last one.
    fn note(
        &self,
        uri: &Arc<str>,
        message: &ClientJsonRpcMessage,
        session: &Option<Arc<str>>,
        auth: &Option<String>,
        headers: &HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) {
        if let ClientJsonRpcMessage::Request(r) = message
            && matches!(
                r.request,
                ClientRequest::InitializeRequest(_) | ClientRequest::DiscoverRequest(_)
            )
        {
            return;
        }
        let mut slot = self.lock();
        let same = slot.current.as_ref().is_some_and(|a| {
            a.session == *session && a.auth == *auth && a.headers == *headers && a.uri == *uri
        });
        if !same {
            slot.current = Some(Arc::new(Attachment {
                uri: uri.clone(),
                session: session.clone(),
                auth: auth.clone(),
                headers: headers.clone(),
                limits,
            }));
        }
    }

    /// Whether `message` may be sent in `session` — not when an express call found it gone
    /// (rmcp's worker then re-initialises) — noting how it is sent.
    fn sending<E: std::error::Error + Send + Sync + 'static>(
        &self,
        uri: &Arc<str>,
        message: &ClientJsonRpcMessage,
        session: &Option<Arc<str>>,
        auth: &Option<String>,
        headers: &HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<(), StreamableHttpError<E>> {
        if self.is_gone(session) {
            return Err(StreamableHttpError::SessionExpired);
        }
        self.note(uri, message, session, auth, headers, limits);
        Ok(())
    }

    fn clear(&self) {
        self.lock().current = None;
    }

    fn get(&self) -> Option<Arc<Attachment>> {
        self.lock().current.clone()
    }

    /// The server no longer knows `session`: no express call is sent in it any more, and
    /// rmcp's worker learns it at its next message in it ([`AttachmentSlot::is_gone`]).
    fn gone(&self, session: &Option<Arc<str>>) {
        let mut slot = self.lock();
        if slot.current.as_ref().is_some_and(|a| a.session == *session) {
            slot.current = None;
        }
        slot.gone = session.clone();
    }

    /// Whether a message in `session` would find it gone (an express call found it so).
    fn is_gone(&self, session: &Option<Arc<str>>) -> bool {
        session.is_some() && self.lock().gone == *session
    }
}

/// A Streamable HTTP client that notes in its [`AttachmentSlot`] how rmcp's worker sends the
/// session's messages; otherwise exactly the client it wraps.
#[derive(Clone)]
pub(crate) struct Recording<C> {
    inner: C,
    slot: AttachmentSlot,
}

impl<C> Recording<C> {
    pub(crate) fn new(inner: C, slot: AttachmentSlot) -> Self {
        Self { inner, slot }
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Recording<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult<Self::Error> {
        self.slot.sending(
            &uri,
            &message,
            &session_id,
            &auth_header,
            &custom_headers,
            StreamableHttpResponseLimits::default(),
        )?;
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult<Self::Error> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.slot.sending(
            &uri,
            &message,
            &session_id,
            &auth_header,
            &custom_headers,
            limits,
        )?;
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult<Self::Error> {
        self.slot.sending(
            &uri,
            &message,
            &session_id,
            &auth_header,
            &custom_headers,
            limits,
        )?;
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.slot.clear();
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    forward_get_streams!(inner);
}

/// Why a POST or a resumption failed, as far as the caller decides on it, and the error.
struct Failure {
    /// The server refused the request before running it (session gone, authorization
    /// refused), or has no event stream to resume.
    refused: bool,
    /// The server no longer knows the session.
    expired: bool,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl Failure {
    fn of<E: std::error::Error + Send + Sync + 'static>(e: StreamableHttpError<E>) -> Self {
        let refused = matches!(
            e,
            StreamableHttpError::SessionExpired
                | StreamableHttpError::AuthRequired(_)
                | StreamableHttpError::InsufficientScope(_)
                | StreamableHttpError::ServerDoesNotSupportSse
        );
        Self {
            refused,
            expired: matches!(e, StreamableHttpError::SessionExpired),
            error: Box::new(e),
        }
    }
}

/// The requests an express call makes, through the session's client (type-erased).
trait Poster: Send + Sync {
    fn post(
        &self,
        message: ClientJsonRpcMessage,
        at: &Attachment,
    ) -> BoxFuture<'static, Result<StreamableHttpPostResponse, Failure>>;

    fn resume(
        &self,
        at: &Attachment,
        last_event_id: String,
    ) -> BoxFuture<'static, Result<Events, Failure>>;
}

/// [`Poster`] through a client `C`.
struct Through<C>(Arc<C>);

impl<C> Poster for Through<C>
where
    C: StreamableHttpClient + Send + Sync + 'static,
{
    fn post(
        &self,
        message: ClientJsonRpcMessage,
        at: &Attachment,
    ) -> BoxFuture<'static, Result<StreamableHttpPostResponse, Failure>> {
        let client = self.0.clone();
        let at = at.clone();
        Box::pin(async move {
            client
                .post_message_with_response_limits(
                    at.uri, message, at.session, at.auth, at.headers, at.limits,
                )
                .await
                .map_err(Failure::of)
        })
    }

    fn resume(
        &self,
        at: &Attachment,
        last_event_id: String,
    ) -> BoxFuture<'static, Result<Events, Failure>> {
        let client = self.0.clone();
        let at = at.clone();
        Box::pin(async move {
            client
                .get_stream_with_max_sse_event_size(
                    at.uri,
                    at.session,
                    Some(last_event_id),
                    at.auth,
                    at.headers,
                    at.limits.max_sse_event_size,
                )
                .await
                .map_err(Failure::of)
        })
    }
}

/// What a connector hands [`crate::connector`] so that its session can make express calls.
pub(crate) enum ExpressSetup {
    /// POSTed through the session's Streamable HTTP client.
    Post(PostSetup),
    /// Written as a line to the server's input (stdio, in-process).
    Line(Box<dyn LineSend>),
}

/// [`ExpressSetup::Post`]'s parts.
pub(crate) struct PostSetup {
    poster: Box<dyn Poster>,
    slot: AttachmentSlot,
    retry: Arc<dyn SseRetryPolicy>,
    max_reconnects: usize,
}

impl ExpressSetup {
    /// Express calls through `client` — the stack rmcp's worker is given, but without the
    /// [`Recording`] around it (an express call's own POST notes nothing in `slot`).
    pub(crate) fn new<C>(
        client: C,
        slot: AttachmentSlot,
        retry: Arc<dyn SseRetryPolicy>,
        max_reconnects: usize,
    ) -> Self
    where
        C: StreamableHttpClient + Send + Sync + 'static,
    {
        Self::Post(PostSetup {
            poster: Box::new(Through(Arc::new(client))),
            slot,
            retry,
            max_reconnects,
        })
    }

    /// Express calls written through `line` (a line transport's [`LineSend`]), unless they are
    /// turned off ([`enabled`]).
    pub(crate) fn written(line: impl LineSend + 'static) -> Option<Self> {
        enabled().then(|| Self::Line(Box::new(line)))
    }

    /// The session's side of it: the lane, and (for POSTed calls) where rmcp's service loop
    /// reads what their streams bring.
    pub(crate) fn lane(
        self,
        outstanding: Arc<Outstanding>,
        delivered: Arc<Delivered>,
    ) -> (Express, Option<mpsc::Receiver<ServerJsonRpcMessage>>) {
        let (way, received) = match self {
            Self::Post(setup) => {
                let (side, received) = mpsc::channel(SIDE_CAPACITY);
                let way = Way::Post(Posting {
                    poster: setup.poster,
                    slot: setup.slot,
                    retry: setup.retry,
                    max_reconnects: setup.max_reconnects,
                    side,
                });
                (way, Some(received))
            }
            Self::Line(line) => (Way::Line(line), None),
        };
        let lane = Lane {
            way,
            outstanding,
            delivered,
            next: AtomicI64::new(FIRST_ID),
        };
        (Express(Arc::new(lane)), received)
    }
}

/// Whether express calls are made: unless [`crate::EXPRESS_ENV`] is `0`.
pub(crate) fn enabled() -> bool {
    !std::env::var(crate::EXPRESS_ENV).is_ok_and(|v| v.trim() == "0")
}

/// A session's express lane (see the module doc). Cheap to clone.
#[derive(Clone)]
pub struct Express(Arc<Lane>);

struct Lane {
    way: Way,
    outstanding: Arc<Outstanding>,
    delivered: Arc<Delivered>,
    next: AtomicI64,
}

/// How a lane's calls reach the server.
enum Way {
    /// POSTed; the call's event stream read by the call.
    Post(Posting),
    /// Written as a line; the answer taken out of what rmcp's service loop reads, before rmcp
    /// sees it ([`Outstanding::divert`]), behind the notifications sent before it.
    Line(Box<dyn LineSend>),
}

/// [`Way::Post`]'s parts.
struct Posting {
    poster: Box<dyn Poster>,
    slot: AttachmentSlot,
    retry: Arc<dyn SseRetryPolicy>,
    max_reconnects: usize,
    side: mpsc::Sender<ServerJsonRpcMessage>,
}

impl std::fmt::Debug for Express {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Express").finish_non_exhaustive()
    }
}

impl Express {
    /// `request` ready to be sent here, with its id (and, when `progress`, its id as its
    /// `progressToken`, [`ExpressCall::progress_token`]), when it is a `tools/call` and rmcp's
    /// worker has used the session; else `request` back (the caller sends it through rmcp).
    // The request handed back is moved once, on a path every call takes: no copy to avoid.
    #[allow(clippy::result_large_err)]
    pub fn prepare(
        &self,
        request: ClientRequest,
        progress: bool,
    ) -> Result<ExpressCall, ClientRequest> {
        if !matches!(request, ClientRequest::CallToolRequest(_)) {
            return Err(request);
        }
        let attachment = match &self.0.way {
            Way::Post(post) => match post.slot.get() {
                Some(attachment) => Some(attachment),
                None => return Err(request),
            },
            Way::Line(_) => None,
        };
        let id = NumberOrString::Number(self.0.next.fetch_add(1, Ordering::Relaxed));
        let mut sent = request.clone();
        if progress {
            sent.get_meta_mut()
                .set_progress_token(ProgressToken(id.clone()));
        }
        Ok(ExpressCall(Box::new(Call {
            lane: self.0.clone(),
            message: ClientJsonRpcMessage::request(sent, id.clone()),
            request,
            id,
            attachment,
        })))
    }
}

/// Why an express call has no answer.
#[derive(Debug)]
pub enum ExpressError {
    /// The server refused the POST before running the call (its session is gone, or the
    /// authorization was refused): the request, to send through rmcp, which recovers or
    /// reports it.
    Unsent(Box<ClientRequest>),
    /// The call failed as rmcp would have reported it.
    Failed(ServiceError),
}

/// One `tools/call`, sent by [`ExpressCall::answer`]. Pointer-sized: it sits in its caller's
/// future, which is moved around whole.
pub struct ExpressCall(Box<Call>);

struct Call {
    lane: Arc<Lane>,
    id: RequestId,
    message: ClientJsonRpcMessage,
    /// The request as the caller gave it, handed back should the server refuse the POST.
    request: ClientRequest,
    /// How the session's messages are POSTed (`None` for a line).
    attachment: Option<Arc<Attachment>>,
}

/// Counts a call among the session's outstanding requests while it lives.
struct Counted<'a>(&'a Outstanding, &'a RequestId);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.answered(self.1);
    }
}

/// Takes a written call's diversion back when the call ends unanswered (abandoned, timed out):
/// an answer after that goes to rmcp, which drops an answer to no request of its own.
struct Diverted<'a>(&'a Outstanding, &'a RequestId);

impl Drop for Diverted<'_> {
    fn drop(&mut self) {
        self.0.undivert(self.1);
    }
}

impl ExpressCall {
    /// The call's JSON-RPC id (for `notifications/cancelled`, and to tell its server's requests).
    pub fn id(&self) -> &RequestId {
        &self.0.id
    }

    /// The `progressToken` the call carries when it was prepared with progress: its id.
    pub fn progress_token(&self) -> ProgressToken {
        ProgressToken(self.0.id.clone())
    }

    /// Sends the call and waits for its answer. Dropping the future abandons the call (the
    /// caller tells the server, as with rmcp).
    pub async fn answer(self) -> Result<ServerResult, ExpressError> {
        let Call {
            lane,
            id,
            message,
            request,
            attachment,
        } = *self.0;
        lane.outstanding.sent_id(&id);
        let _counted = Counted(&lane.outstanding, &id);
        let message = match (&lane.way, attachment) {
            (Way::Line(line), _) => lane.written(line.as_ref(), &id, message).await?,
            (Way::Post(post), Some(attachment)) => {
                lane.posted(post, &id, message, request, &attachment)
                    .await?
            }
            // Not prepared for a POST (`prepare` gives every POSTed call its attachment).
            (Way::Post(_), None) => return Err(ExpressError::Unsent(Box::new(request))),
        };
        match message {
            ServerJsonRpcMessage::Response(r) if r.id == id => Ok(r.result),
            ServerJsonRpcMessage::Error(e) if e.id.as_ref() == Some(&id) => {
                Err(ExpressError::Failed(ServiceError::McpError(e.error)))
            }
            _ => Err(ExpressError::Failed(ServiceError::UnexpectedResponse)),
        }
    }
}

impl Lane {
    /// Writes call `id` as a line; its answer is taken out of what rmcp's service loop reads
    /// (behind the notifications before it, as rmcp's own answers are).
    async fn written(
        &self,
        line: &dyn LineSend,
        id: &RequestId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, ExpressError> {
        let (to, answered) = oneshot::channel();
        // Before the line is written: its answer may be read before the write returns.
        self.outstanding.divert(id.clone(), to);
        let _diverted = Diverted(&self.outstanding, id);
        if let Err(e) = line.send(message).await {
            return Err(ExpressError::Failed(send_error(line.name(), Box::new(e))));
        }
        answered
            .await
            .map_err(|_| ExpressError::Failed(ServiceError::TransportClosed))
    }

    /// POSTs call `id` and reads its answer: the server's refusal before running it hands
    /// `request` back ([`ExpressError::Unsent`]).
    async fn posted(
        &self,
        post: &Posting,
        id: &RequestId,
        message: ClientJsonRpcMessage,
        request: ClientRequest,
        attachment: &Attachment,
    ) -> Result<ServerJsonRpcMessage, ExpressError> {
        let posted = post.poster.post(message, attachment).await;
        match posted {
            Ok(StreamableHttpPostResponse::Json(message, _)) => {
                self.delivered.caught_up().await;
                Ok(message)
            }
            Ok(StreamableHttpPostResponse::Sse(events, _)) => {
                self.read(post, events, id, attachment).await
            }
            Ok(StreamableHttpPostResponse::Accepted) => Err(failed(
                "the server accepted the call (HTTP 202) without answering it".into(),
            )),
            Ok(_) => Err(failed(
                "the server answered the call in a way this client does not know".into(),
            )),
            Err(e) if e.refused => {
                if e.expired {
                    post.slot.gone(&attachment.session);
                }
                Err(ExpressError::Unsent(Box::new(request)))
            }
            Err(e) => Err(ExpressError::Failed(send_error(TRANSPORT_NAME, e.error))),
        }
    }

    /// Reads call `id`'s event stream (resuming it as needed) up to its answer; everything
    /// else on it goes to rmcp's service loop, and the answer too when anything went before it.
    async fn read(
        &self,
        post: &Posting,
        mut events: Events,
        id: &RequestId,
        attachment: &Attachment,
    ) -> Result<ServerJsonRpcMessage, ExpressError> {
        let mut last_event_id: Option<String> = None;
        let mut server_retry = None;
        let mut handed_on = false;
        // Resumptions in a row that brought no event.
        let mut attempts = 0;
        loop {
            let mut broken = false;
            while let Some(item) = events.next().await {
                let event = match item {
                    Ok(event) => event,
                    Err(e) => {
                        // Described without URLs: a query value may be a secret.
                        let why = crate::net::describe(&e);
                        tracing::debug!("an express call's event stream failed: {why}");
                        broken = true;
                        break;
                    }
                };
                attempts = 0;
                tracing::trace!(id = ?event.id, event = ?event.event, data = event.data.is_some(), "an express call's event");
                if let Some(retry) = event.retry {
                    server_retry = Some(std::time::Duration::from_millis(retry));
                }
                if event.id.is_some() {
                    last_event_id = event.id;
                }
                let message = matches!(event.event.as_deref(), None | Some("" | "message"));
                let Some(data) = event.data.filter(|_| message) else {
                    continue;
                };
                let mut message = match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(message) => message,
                    Err(e) => {
                        tracing::debug!("skipped an undecodable event of an express call: {e}");
                        continue;
                    }
                };
                let answer = match &message {
                    ServerJsonRpcMessage::Response(r) => r.id == *id,
                    ServerJsonRpcMessage::Error(e) => e.id.as_ref() == Some(id),
                    _ => false,
                };
                if answer && !handed_on {
                    drop(crate::net::ReadToEnd::boxed(events));
                    self.delivered.caught_up().await;
                    return Ok(message);
                }
                if let ServerJsonRpcMessage::Request(r) = &mut message {
                    r.request
                        .extensions_mut()
                        .insert(InboundStreamOrigin::OutboundRequest(id.clone()));
                }
                let answered = answer.then(|| {
                    let (to, from) = oneshot::channel();
                    self.outstanding.divert(id.clone(), to);
                    from
                });
                // Boxed: inline, the channel's send would be part of every call's future.
                if Box::pin(post.side.send(message)).await.is_err() {
                    return Err(ExpressError::Failed(ServiceError::TransportClosed));
                }
                handed_on = true;
                if let Some(answered) = answered {
                    drop(crate::net::ReadToEnd::boxed(events));
                    return answered
                        .await
                        .map_err(|_| ExpressError::Failed(ServiceError::TransportClosed));
                }
            }
            // The stream ended (or broke) before the answer: resume it, if it can be — a
            // broken one at once the first time (its call is likely still running), one the
            // server ended after the `retry` it asked for, any further attempt after the
            // connection's backoff, at most `max_reconnects` in a row without an event.
            let Some(last) = last_event_id.clone() else {
                return Err(failed(
                    "the server ended the call's event stream without answering it, and gave no event id to resume it from".into(),
                ));
            };
            let wait = match (attempts, broken) {
                (0, true) => Some(std::time::Duration::ZERO),
                (0, false) => server_retry.or_else(|| post.retry.retry(0)),
                (n, _) => post.retry.retry(n),
            };
            let Some(wait) = wait.filter(|_| attempts < post.max_reconnects) else {
                return Err(failed(
                    format!(
                        "the call's event stream could not be resumed after event `{last}` ({attempts} attempts)"
                    )
                    .into(),
                ));
            };
            attempts += 1;
            tokio::time::sleep(wait).await;
            tracing::debug!(after = %last, "resuming an express call's event stream");
            events = match post.poster.resume(attachment, last).await {
                Ok(events) => events,
                Err(e) if e.refused => {
                    return Err(ExpressError::Failed(send_error(TRANSPORT_NAME, e.error)));
                }
                Err(e) => {
                    tracing::debug!(
                        "resuming an express call's event stream failed: {}",
                        crate::net::describe(e.error.as_ref())
                    );
                    futures::stream::empty().boxed()
                }
            };
        }
    }
}

/// The transport name POSTed express calls' errors carry.
const TRANSPORT_NAME: &str = "streamable-http (express)";

/// `message` as a failed POSTed call.
fn failed(message: Cow<'static, str>) -> ExpressError {
    let error = StreamableHttpError::<std::io::Error>::UnexpectedServerResponse(message);
    ExpressError::Failed(send_error(TRANSPORT_NAME, Box::new(error)))
}

/// `error` as rmcp reports a request its transport (`name`) could not send.
fn send_error(name: &'static str, error: Box<dyn std::error::Error + Send + Sync>) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        name,
        std::any::TypeId::of::<Express>(),
        error,
    ))
}

/// The transport under rmcp's service loop: the inner transport's messages and, in between,
/// those the session's express calls hand on (see the module doc).
pub(crate) struct Injected<T> {
    inner: T,
    side: Option<mpsc::Receiver<ServerJsonRpcMessage>>,
}

impl<T> Injected<T> {
    pub(crate) fn new(inner: T, side: Option<mpsc::Receiver<ServerJsonRpcMessage>>) -> Self {
        Self { inner, side }
    }
}

impl<T> Transport<RoleClient> for Injected<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    // Cancel-safe: both receives are.
    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let Some(side) = self.side.as_mut() else {
            return self.inner.receive().await;
        };
        tokio::select! {
            biased;
            message = self.inner.receive() => message,
            Some(message) = side.recv() => Some(message),
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientNotification, GetExtensions as _,
        JsonRpcMessage, ServerNotification,
    };
    use rmcp::transport::common::client_side_sse::FixedInterval;

    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, DuplexStream, ReadHalf, WriteHalf};

    use super::*;
    use crate::inbound::Inbound;
    use crate::lines::LineTransport;
    use crate::ordered::{InOrder, Sequence};
    use crate::outstanding::Tracked;
    use crate::wire::WireNotes;

    /// The test's end of a line session's pipe, line by line.
    type ServerLines = tokio::io::Lines<tokio::io::BufReader<ReadHalf<DuplexStream>>>;

    type Post = Result<StreamableHttpPostResponse, Failure>;

    /// A server scripted per request: what the POST gets, and a stream per resumption (the
    /// event ids it resumed after are recorded).
    #[derive(Default)]
    struct Scripted {
        post: Mutex<Option<Post>>,
        resumes: Mutex<VecDeque<Events>>,
        resumed_after: Arc<Mutex<Vec<String>>>,
    }

    impl Poster for Scripted {
        fn post(
            &self,
            _: ClientJsonRpcMessage,
            _: &Attachment,
        ) -> BoxFuture<'static, Result<StreamableHttpPostResponse, Failure>> {
            let post = self.post.lock().unwrap().take().expect("one POST");
            Box::pin(async move { post })
        }

        fn resume(
            &self,
            _: &Attachment,
            last_event_id: String,
        ) -> BoxFuture<'static, Result<Events, Failure>> {
            self.resumed_after.lock().unwrap().push(last_event_id);
            let next = self.resumes.lock().unwrap().pop_front();
            Box::pin(async move {
                next.ok_or_else(|| {
                    Failure::of(StreamableHttpError::<std::io::Error>::SessionExpired)
                })
            })
        }
    }

    /// A transport that never receives anything by itself (the inner one of a session).
    struct Silent;

    impl Transport<RoleClient> for Silent {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
            std::future::pending().await
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    const FIRST: &str = "4294967296";

    fn event(data: &str, id: Option<&str>) -> Result<sse_stream::Sse, sse_stream::Error> {
        Ok(sse_stream::Sse {
            event: None,
            data: (!data.is_empty()).then(|| data.to_string()),
            id: id.map(str::to_string),
            retry: None,
        })
    }

    fn events(items: Vec<Result<sse_stream::Sse, sse_stream::Error>>) -> Events {
        futures::stream::iter(items).boxed()
    }

    fn answer() -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{FIRST},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#
        )
    }

    fn message(json: &str) -> ServerJsonRpcMessage {
        serde_json::from_str(json).expect("a server message")
    }

    /// A session's express lane, what its rmcp service loop receives, its outstanding
    /// requests, and how many counted notifications its handlers delivered.
    struct Session {
        express: Express,
        rmcp: mpsc::UnboundedReceiver<ServerJsonRpcMessage>,
        outstanding: Arc<Outstanding>,
        deliveries: Arc<std::sync::atomic::AtomicUsize>,
    }

    /// A session's express lane over `poster`, attached.
    fn lane(poster: Scripted) -> Session {
        let slot = AttachmentSlot::default();
        let notified = ClientJsonRpcMessage::notification(
            ClientNotification::InitializedNotification(Default::default()),
        );
        slot.note(
            &Arc::from("http://127.0.0.1:1/mcp"),
            &notified,
            &Some(Arc::from("s")),
            &None,
            &HashMap::new(),
            StreamableHttpResponseLimits::default(),
        );
        let setup = ExpressSetup::Post(PostSetup {
            poster: Box::new(poster),
            slot,
            retry: Arc::new({
                let mut quick = FixedInterval::default();
                quick.duration = Duration::from_millis(10);
                quick
            }),
            max_reconnects: 2,
        });
        run(setup, Silent)
    }

    /// A session's express lane from `setup` over `inner`; what rmcp's service loop would
    /// receive comes out of [`Session::rmcp`] (counted notifications delivered in turn, each
    /// after 50 ms).
    fn run<T>(setup: ExpressSetup, inner: T) -> Session
    where
        T: Transport<RoleClient> + Send + 'static,
    {
        let outstanding = Arc::new(Outstanding::default());
        let delivered = Arc::new(Delivered::default());
        let (express, side) = setup.lane(outstanding.clone(), delivered.clone());
        let mut transport = Tracked::new(
            InOrder::new(Injected::new(inner, side), delivered.clone()),
            outstanding.clone(),
        );
        let (to_rmcp, from_session) = mpsc::unbounded_channel();
        let deliveries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let delivering = deliveries.clone();
        tokio::spawn(async move {
            let deliveries = delivering;
            while let Some(mut message) = transport.receive().await {
                if let JsonRpcMessage::Notification(n) = &mut message
                    && let Some(sequence) = n.notification.extensions().get::<Sequence>().copied()
                {
                    // A slow handler: what comes after must still wait for it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    delivered
                        .in_turn(sequence, || {
                            deliveries.fetch_add(1, Ordering::SeqCst);
                        })
                        .await;
                }
                if to_rmcp.send(message).is_err() {
                    return;
                }
            }
        });
        Session {
            express,
            rmcp: from_session,
            outstanding,
            deliveries,
        }
    }

    fn call(express: &Express) -> ExpressCall {
        express
            .prepare(echo(), false)
            .unwrap_or_else(|_| panic!("the session is attached"))
    }

    fn echo() -> ClientRequest {
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("echo")))
    }

    /// The call's answer, within 5 s (a lost answer fails the test instead of hanging it).
    async fn answered(call: ExpressCall) -> Result<ServerResult, ExpressError> {
        tokio::time::timeout(Duration::from_secs(5), call.answer())
            .await
            .expect("an answer within 5 s")
    }

    fn text(result: ServerResult) -> String {
        match result {
            ServerResult::CallToolResult(r) => serde_json::to_value(&r.content).unwrap()[0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            other => panic!("not a tool result: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_session_is_attached_only_once_the_worker_used_it_and_ids_start_past_rmcps() {
        let slot = AttachmentSlot::default();
        let uri: Arc<str> = Arc::from("http://127.0.0.1:1/mcp");
        let initialize = ClientJsonRpcMessage::request(
            ClientRequest::InitializeRequest(rmcp::model::InitializeRequest::new(
                Default::default(),
            )),
            NumberOrString::Number(0),
        );
        let limits = StreamableHttpResponseLimits::default();
        slot.note(&uri, &initialize, &None, &None, &HashMap::new(), limits);
        assert!(
            slot.get().is_none(),
            "an initialize request attaches nothing"
        );
        let notified = ClientJsonRpcMessage::notification(
            ClientNotification::InitializedNotification(Default::default()),
        );
        slot.note(
            &uri,
            &notified,
            &Some(Arc::from("s1")),
            &None,
            &HashMap::new(),
            limits,
        );
        assert_eq!(slot.get().unwrap().session.as_deref(), Some("s1"));
        slot.clear();
        assert!(
            slot.get().is_none(),
            "a deleted session is no longer attached"
        );

        let Session { express, .. } = lane(Scripted::default());
        let ping = ClientRequest::PingRequest(Default::default());
        assert!(
            express.prepare(ping, false).is_err(),
            "only a tools/call is sent here"
        );
        let (a, b) = (call(&express), call(&express));
        assert_eq!(a.id(), &NumberOrString::Number(1 << 32));
        assert_eq!(b.id(), &NumberOrString::Number((1 << 32) + 1));
        let meta = |call: &ExpressCall| {
            serde_json::to_value(&call.0.message).unwrap()["params"]["_meta"].clone()
        };
        assert!(meta(&a).is_null(), "no progress asked: no token");
        let c = express
            .prepare(echo(), true)
            .unwrap_or_else(|_| panic!("attached"));
        assert_eq!(
            meta(&c)["progressToken"],
            serde_json::json!((1u64 << 32) + 2)
        );
        assert_eq!(c.progress_token(), ProgressToken(c.id().clone()));
        match &c.0.request {
            ClientRequest::CallToolRequest(r) => {
                assert!(
                    r.params.meta.is_none(),
                    "the request kept for rmcp carries no token of ours"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_lone_answer_is_the_calls_result_and_rmcp_never_sees_it() {
        let poster = Scripted::default();
        *poster.post.lock().unwrap() = Some(Ok(StreamableHttpPostResponse::Json(
            message(&answer()),
            None,
        )));
        let Session {
            express,
            mut rmcp,
            outstanding,
            ..
        } = lane(poster);
        let result = answered(call(&express)).await.expect("answered");
        assert_eq!(text(result), "ok");
        assert_eq!(outstanding.count(), 0, "no longer waiting");
        let seen = tokio::time::timeout(Duration::from_millis(50), rmcp.recv()).await;
        assert!(seen.is_err(), "rmcp got {seen:?}");
    }

    #[tokio::test]
    async fn what_comes_before_the_answer_goes_to_rmcp_marked_and_the_answer_after_it() {
        let progress = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{FIRST},"progress":1}}}}"#
        );
        let elicit = r#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"message":"sure?","requestedSchema":{"type":"object","properties":{}}}}"#;
        let poster = Scripted::default();
        *poster.post.lock().unwrap() = Some(Ok(StreamableHttpPostResponse::Sse(
            events(vec![
                event(&progress, Some("1")),
                event(elicit, Some("2")),
                event(&answer(), Some("3")),
            ]),
            None,
        )));
        let Session {
            express,
            mut rmcp,
            outstanding,
            deliveries,
        } = lane(poster);
        let result = answered(call(&express)).await.expect("answered");
        assert_eq!(text(result), "ok");
        assert_eq!(
            deliveries.load(Ordering::SeqCst),
            1,
            "the progress sent before the answer was delivered before the answer came back"
        );
        assert_eq!(outstanding.count(), 0);
        match rmcp.recv().await {
            Some(JsonRpcMessage::Notification(n)) => assert!(matches!(
                n.notification,
                ServerNotification::ProgressNotification(_)
            )),
            other => panic!("expected the progress first, got {other:?}"),
        }
        match rmcp.recv().await {
            Some(JsonRpcMessage::Request(r)) => assert_eq!(
                r.request.extensions().get::<InboundStreamOrigin>(),
                Some(&InboundStreamOrigin::OutboundRequest(
                    NumberOrString::Number(1 << 32)
                )),
                "the server's request is marked with the call it came with"
            ),
            other => panic!("expected the elicitation, got {other:?}"),
        }
        let seen = tokio::time::timeout(Duration::from_millis(50), rmcp.recv()).await;
        assert!(
            seen.is_err(),
            "the answer went to the call, not rmcp: {seen:?}"
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_early_is_resumed_after_its_last_event() {
        let poster = Scripted::default();
        let mut priming = event("", Some("e1"));
        if let Ok(e) = &mut priming {
            e.retry = Some(10);
        }
        *poster.post.lock().unwrap() = Some(Ok(StreamableHttpPostResponse::Sse(
            events(vec![priming]),
            None,
        )));
        poster
            .resumes
            .lock()
            .unwrap()
            .push_back(events(vec![event(&answer(), Some("e2"))]));
        let resumed_after = poster.resumed_after.clone();
        let Session { express, .. } = lane(poster);
        let result = answered(call(&express))
            .await
            .expect("answered after resuming");
        assert_eq!(text(result), "ok");
        assert_eq!(*resumed_after.lock().unwrap(), ["e1"]);
    }

    #[tokio::test]
    async fn resumptions_that_bring_nothing_are_bounded() {
        let poster = Scripted::default();
        *poster.post.lock().unwrap() = Some(Ok(StreamableHttpPostResponse::Sse(
            events(vec![event("", Some("e1"))]),
            None,
        )));
        for _ in 0..5 {
            poster.resumes.lock().unwrap().push_back(events(vec![]));
        }
        let resumed_after = poster.resumed_after.clone();
        let Session { express, .. } = lane(poster);
        match answered(call(&express)).await {
            Err(ExpressError::Failed(e)) => {
                let text = crate::net::describe(&e);
                assert!(
                    text.contains("could not be resumed after event `e1`"),
                    "{text}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(
            resumed_after.lock().unwrap().len(),
            2,
            "as many attempts as the bound"
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_without_an_event_id_fails_the_call_at_once() {
        let poster = Scripted::default();
        *poster.post.lock().unwrap() = Some(Ok(StreamableHttpPostResponse::Sse(
            events(vec![event("", None)]),
            None,
        )));
        let resumed_after = poster.resumed_after.clone();
        let Session {
            express,
            outstanding,
            ..
        } = lane(poster);
        match answered(call(&express)).await {
            Err(ExpressError::Failed(e)) => {
                let text = crate::net::describe(&e);
                assert!(text.contains("without answering"), "{text}");
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert!(resumed_after.lock().unwrap().is_empty());
        assert_eq!(outstanding.count(), 0);
    }

    #[tokio::test]
    async fn a_post_refused_before_running_is_left_to_rmcp() {
        let poster = Scripted::default();
        *poster.post.lock().unwrap() = Some(Err(Failure::of(
            StreamableHttpError::<std::io::Error>::SessionExpired,
        )));
        let Session {
            express,
            outstanding,
            ..
        } = lane(poster);
        assert!(matches!(
            answered(call(&express)).await,
            Err(ExpressError::Unsent(_))
        ));
        assert_eq!(outstanding.count(), 0);
        // The session is gone: no express call in it, and rmcp's worker is told at once.
        assert!(express.prepare(echo(), false).is_err());
        let Way::Post(post) = &express.0.way else {
            panic!("a POSTing lane")
        };
        let slot = &post.slot;
        assert!(slot.is_gone(&Some(Arc::from("s"))));
        let notified = ClientJsonRpcMessage::notification(
            ClientNotification::InitializedNotification(Default::default()),
        );
        let uri: Arc<str> = Arc::from("http://127.0.0.1:1/mcp");
        let limits = StreamableHttpResponseLimits::default();
        slot.note(
            &uri,
            &notified,
            &Some(Arc::from("s2")),
            &None,
            &HashMap::new(),
            limits,
        );
        assert!(
            !slot.is_gone(&Some(Arc::from("s2"))),
            "the new session is not gone"
        );
        assert!(express.prepare(echo(), false).is_ok());

        let poster = Scripted::default();
        let failed = StreamableHttpError::<std::io::Error>::UnexpectedServerResponse(
            "HTTP 500 Internal Server Error: boom".into(),
        );
        *poster.post.lock().unwrap() = Some(Err(Failure::of(failed)));
        let Session { express, .. } = lane(poster);
        assert!(
            matches!(answered(call(&express)).await, Err(ExpressError::Failed(_))),
            "a server that may have run the call is never sent it again"
        );
    }

    /// A session whose express calls are written as lines to a server played by the test: its
    /// end of the pipe, read and written line by line.
    fn line_session() -> (Session, ServerLines, WriteHalf<DuplexStream>) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(client);
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), true);
        let transport = LineTransport::new(read, write, inbound);
        let setup = ExpressSetup::Line(Box::new(transport.sender("stdio (express)")));
        let (server_read, server_write) = tokio::io::split(server);
        (
            run(setup, transport),
            tokio::io::BufReader::new(server_read).lines(),
            server_write,
        )
    }

    /// The next message rmcp's service loop gets, within 5 s.
    async fn to_rmcp(session: &mut Session) -> ServerJsonRpcMessage {
        tokio::time::timeout(Duration::from_secs(5), session.rmcp.recv())
            .await
            .expect("a message for rmcp within 5 s")
            .expect("the session is open")
    }

    async fn line_of(lines: &mut ServerLines) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("a line within 5 s")
            .expect("readable")
            .expect("a line");
        serde_json::from_str(&line).expect("JSON")
    }

    #[tokio::test]
    async fn a_written_call_takes_its_answer_before_rmcp_and_after_the_progress_before_it() {
        let (mut session, mut lines, mut server) = line_session();
        let call = session
            .express
            .prepare(echo(), true)
            .unwrap_or_else(|_| panic!("a line lane is ready at once"));
        let answering = tokio::spawn(answered(call));
        let sent = line_of(&mut lines).await;
        assert_eq!(sent["method"], "tools/call");
        assert_eq!(sent["id"].to_string(), FIRST);
        assert_eq!(sent["params"]["_meta"]["progressToken"].to_string(), FIRST);
        assert_eq!(session.outstanding.count(), 1);
        let progress = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{FIRST},"progress":1}}}}"#
        );
        server
            .write_all(format!("{progress}\n{}\n", answer()).as_bytes())
            .await
            .unwrap();
        // The answer waits for the progress's (slow) handler, then is the call's alone.
        assert_eq!(text(answering.await.unwrap().expect("answered")), "ok");
        assert_eq!(session.deliveries.load(Ordering::SeqCst), 1);
        let seen = to_rmcp(&mut session).await;
        assert!(matches!(seen, JsonRpcMessage::Notification(_)), "{seen:?}");
        assert_eq!(session.outstanding.count(), 0);
        // Nothing else reached rmcp: the next thing it sees is the next line.
        server
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n")
            .await
            .unwrap();
        let next = to_rmcp(&mut session).await;
        assert!(matches!(next, JsonRpcMessage::Notification(_)), "{next:?}");
    }

    #[tokio::test]
    async fn an_abandoned_written_call_leaves_its_answer_to_rmcp_and_a_closed_pipe_fails_calls() {
        let (mut session, mut lines, mut server) = line_session();
        // Abandoned once its line is written (as a cancelled call is).
        let abandoned =
            tokio::time::timeout(Duration::from_millis(100), call(&session.express).answer()).await;
        assert!(abandoned.is_err(), "no answer yet");
        assert_eq!(line_of(&mut lines).await["id"].to_string(), FIRST);
        assert_eq!(session.outstanding.count(), 0);
        server
            .write_all(format!("{}\n", answer()).as_bytes())
            .await
            .unwrap();
        let late = to_rmcp(&mut session).await;
        assert!(matches!(late, JsonRpcMessage::Response(_)), "{late:?}");

        // The server goes away: a call waiting for its answer, and any later one, fails as
        // rmcp's own would — closed, at once.
        let waiting = tokio::spawn(answered(call(&session.express)));
        line_of(&mut lines).await;
        drop((server, lines));
        let failed = waiting.await.unwrap();
        assert!(
            matches!(
                failed,
                Err(ExpressError::Failed(ServiceError::TransportClosed))
            ),
            "{failed:?}"
        );
        let later = answered(call(&session.express)).await;
        assert!(matches!(later, Err(ExpressError::Failed(_))), "{later:?}");
        assert_eq!(session.outstanding.count(), 0);
    }
}

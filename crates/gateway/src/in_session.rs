//! The POSTs of an established session, served without rmcp's trial decode.
//!
//! rmcp's `StreamableHttpService` decodes every POST body by trying each request variant in
//! turn (see [`decode`]); for a `tools/call` that is about 30k of the gateway's ~340k
//! instructions per call. [`InSession`] stands in front of it at `/mcp` and serves the common
//! case itself: a request of a method in [`decode`]'s table, in a session this process holds,
//! under a protocol version that has a session. It then does what rmcp's handler does for such
//! a request — the same checks in the same order, the request's HTTP parts in its extensions,
//! the session manager's `create_stream`, the same event stream with the same keep-alive.
//! Two things differ: the decode, and when the answer's head leaves — with the request's first
//! message when that comes within [`HOLD`], so a quick answer is one write (see [`held`]).
//!
//! Invariants:
//! - a POST is answered here only when every check rmcp's handler makes would pass; anything
//!   else (another method or verb, an unknown or 2026-07-28 protocol version, `_meta` naming a
//!   protocol version, a session this process does not hold, any header rmcp would refuse or
//!   that is not plainly one it accepts) goes to rmcp's handler with its body untouched, so rmcp
//!   decides every refusal, restore and stateless request;
//! - the DNS-rebinding check (`Host`, `Origin`) is rmcp's own: its answer for a pair of values
//!   is asked once, with a body-less request rmcp refuses by method only after that check, and
//!   remembered ([`Rebinding`]);
//! - a `tools/call` answered here is a direct call ([`direct`]): run on this task instead of
//!   through `create_stream`, answered as one JSON body when its result is all there is; the
//!   only `GET` taken here is one whose `Last-Event-ID` names a direct call's stream, and the
//!   only messages other than requests are a client's responses to a direct call's requests
//!   (a cancellation of one is seen here and still goes on to rmcp);
//! - with `own_posts` off, every request goes to rmcp's handler (the comparison in the tests).

mod decode;
pub(crate) mod direct;
mod events;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use futures::StreamExt as _;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions as _, GetMeta as _, ProtocolVersion};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager as _, StreamableHttpService,
};
use tokio_util::sync::CancellationToken;

use crate::hold::HoldClock;
use crate::sealed::SealedSessionManager;
use crate::traced::Traced;
use crate::{PROTOCOL_VERSION, SESSION_ID};

/// rmcp's HTTP service as the gateway builds it.
pub(crate) type Service =
    StreamableHttpService<Traced<crate::session::Session>, SealedSessionManager>;
/// An answer as rmcp's HTTP service makes it.
pub(crate) type Answer = Response<BoxBody<Bytes, Infallible>>;

/// The `/mcp` handler: in-session requests served here, everything else by rmcp's service.
pub(crate) struct InSession {
    /// rmcp's handler, for everything not served here.
    pub(crate) service: Service,
    /// The session manager rmcp's handler was built with.
    pub(crate) sessions: Arc<SealedSessionManager>,
    /// `StreamableHttpServerConfig::sse_keep_alive` of `service`.
    pub(crate) keep_alive: Option<Duration>,
    /// `StreamableHttpServerConfig::cancellation_token` of `service`.
    pub(crate) cancel: CancellationToken,
    /// `StreamableHttpServerConfig::max_request_body_bytes` of `service`.
    pub(crate) max_body: usize,
    /// Serve in-session requests here (`false`: all go to rmcp's handler).
    pub(crate) own_posts: bool,
    /// rmcp's DNS-rebinding answers, remembered.
    pub(crate) rebinding: Rebinding,
    /// What the sessions share (the sessions that serve direct calls among it).
    pub(crate) shared: Arc<crate::session::Shared>,
    /// Serve a `tools/call` on the task that read it, a direct call (`false`: every call
    /// through rmcp's session worker).
    pub(crate) direct: bool,
    /// The events of direct calls' streams, for resumptions.
    pub(crate) replays: Arc<direct::Replays>,
    /// `StreamableHttpServerConfig::sse_retry` of `service`: the retry hint of a priming event.
    pub(crate) retry: Option<Duration>,
    /// How often a session that only makes direct calls is shown to rmcp's worker as in use
    /// (a fraction of the worker's idle limit).
    pub(crate) touch_every: Duration,
}

impl InSession {
    /// Answers `request` as rmcp's handler would.
    ///
    /// Every path but a held session's POST awaits a boxed future: this one's state is as
    /// large as the largest future it awaits inline, and the whole state is copied each time
    /// it is moved (into its caller's, into a box) — several KiB on every call otherwise.
    pub(crate) async fn handle(&self, mut request: Request) -> Answer {
        if self.direct
            && request.method() == Method::GET
            && let Some(answer) = Box::pin(self.resume(&mut request)).await
        {
            return answer;
        }
        if request.method() != Method::POST {
            return Box::pin(self.service.handle(request)).await;
        }
        let serves = self.serves(request.uri(), request.headers()).await;
        let (parts, body) = request.into_parts();
        let bytes = match read_body(body, self.max_body).await {
            Ok(bytes) => bytes,
            Err(answer) => return answer,
        };
        if !serves {
            return Box::pin(self.rmcp(parts, bytes)).await;
        }
        self.post(parts, bytes).await
    }

    /// Answers a POST whose body was read already (`bytes`) as [`Self::handle`] would.
    pub(crate) async fn handle_read(
        &self,
        parts: axum::http::request::Parts,
        bytes: Bytes,
    ) -> Answer {
        debug_assert_eq!(parts.method, Method::POST);
        if bytes.len() > self.max_body || !self.serves(&parts.uri, &parts.headers).await {
            return Box::pin(self.rmcp(parts, bytes)).await;
        }
        self.post(parts, bytes).await
    }

    /// Whether rmcp's DNS-rebinding check lets a request to `uri` with `headers` through (the
    /// gateway's other routes ask it too).
    pub(crate) async fn host_allowed(&self, uri: &axum::http::Uri, headers: &HeaderMap) -> bool {
        self.rebinding.allows(&self.service, uri, headers).await
    }

    /// Whether a POST of this target and these headers is served here: own POSTs are on, its
    /// headers are plainly ones rmcp accepts, and rmcp's DNS-rebinding check lets them through.
    async fn serves(&self, uri: &axum::http::Uri, headers: &HeaderMap) -> bool {
        self.own_posts
            && self.plainly_acceptable(headers)
            && self.rebinding.allows(&self.service, uri, headers).await
    }

    /// A POST of headers rmcp plainly accepts, from a `Host`/`Origin` it allows, its body read.
    async fn post(&self, parts: axum::http::request::Parts, bytes: Bytes) -> Answer {
        let Some(mut request) = decode::decode(&bytes)
            .filter(|request| request.request.get_meta().protocol_version().is_none())
        else {
            if self.direct
                && self.shared.held.calls.expects_client_messages()
                && let Some(identity) = identity(&parts)
                && let Some(accepted) = direct::intercept(&bytes, identity, &self.shared.held.calls)
            {
                return accepted;
            }
            return Box::pin(self.rmcp(parts, bytes)).await;
        };
        let Some(session) = parts
            .headers
            .get(&SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(SessionId::from)
        else {
            return Box::pin(self.rmcp(parts, bytes)).await;
        };
        // Not held here (idle-closed, another replica's, ended): rmcp restores it or says 404.
        if !matches!(self.sessions.has_session(&session).await, Ok(true)) {
            return Box::pin(self.rmcp(parts, bytes)).await;
        }
        tracing::trace!(
            method = request.request.method(),
            "served on the own POST path"
        );
        if self.direct
            && matches!(
                request.request,
                rmcp::model::ClientRequest::CallToolRequest(_)
            )
            && let Some(identity) = identity(&parts).map(Arc::<str>::from)
            && let Some(held) = self.shared.held.get(&identity, self.touch_every)
        {
            return Box::pin(self.direct_call(held, identity, request, parts, session)).await;
        }
        let clock = parts.extensions.get::<Arc<HoldClock>>().cloned();
        // rmcp's handler moves the parts into the request; the session reads them there.
        request.request.extensions_mut().insert(parts);
        let message = ClientJsonRpcMessage::Request(request);
        match Box::pin(self.sessions.create_stream(&session, message)).await {
            Ok(stream) => sse_answer(
                held(stream, HOLD, clock.as_deref()).await,
                self.keep_alive,
                self.cancel.clone(),
            ),
            Err(error) => {
                tracing::error!("Internal server error when get session: {error}");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Encounter an error when get session: {error}"),
                )
            }
        }
    }

    /// Runs `request` of session `session` (of identity `identity`) on this task, a direct
    /// call (see [`direct`]).
    async fn direct_call(
        &self,
        held: crate::session::direct::Held,
        identity: Arc<str>,
        mut request: rmcp::model::JsonRpcRequest<rmcp::model::ClientRequest>,
        parts: axum::http::request::Parts,
        session: SessionId,
    ) -> Answer {
        tracing::trace!("a direct call");
        if held.touch_due {
            let sessions = self.sessions.clone();
            let session = session.clone();
            tokio::spawn(async move { sessions.touch(&session).await });
        }
        let shared = self.shared.clone();
        let id = request.id.clone();
        let ct = held.call_token();
        // A call whose id is in flight in this session already is refused, as on rmcp's path
        // (`SealedSessionManager::create_stream`): its answer and a cancel could not be told
        // apart from the other's.
        let Some(in_flight) =
            (shared.held.calls).call_in_flight(identity.clone(), id.clone(), ct.clone())
        else {
            return direct::json(&crate::sealed::repeated_id_answer(&id));
        };
        let (stream, side, sidecar) = shared.sidecars.open_direct(&session, id.clone());
        let clock = parts.extensions.get::<Arc<HoldClock>>().cloned();
        request.request.extensions_mut().insert(parts);
        let call = crate::direct::DirectCall {
            stream,
            identity: identity.clone(),
            calls: shared.held.calls.clone(),
        };
        let mut live = direct::Live::new(
            Box::pin(held.serve(request, shared, call, ct)),
            side,
            sidecar,
            in_flight,
        );
        live.gather(HOLD, clock.as_deref()).await;
        if let Some(answer) = live.lone_answer() {
            return direct::json(&answer);
        }
        let events = direct::Events::new(live, identity, &self.replays, self.retry);
        sse_answer(events, self.keep_alive, self.cancel.clone())
    }

    /// A `GET` resuming a direct call's stream (its `Last-Event-ID` names one) in a session
    /// this process holds: the stream's events after that id; `None` for every other `GET`,
    /// which rmcp's handler serves.
    async fn resume(&self, request: &mut Request) -> Option<Answer> {
        let (last, identity) = resumption(request)?;
        let (uri, headers) = (request.uri().clone(), std::mem::take(request.headers_mut()));
        let allowed = self.rebinding.allows(&self.service, &uri, &headers).await;
        *request.headers_mut() = headers;
        if !allowed {
            return None;
        }
        let last = last.as_str();
        Some(match self.replays.resume(&identity, last) {
            Some(events) => sse_answer(events, self.keep_alive, self.cancel.clone()),
            None => text(
                StatusCode::NOT_FOUND,
                format!(
                    "the stream of event `{last}` cannot be resumed on this replica: its call ended and its result was delivered or kept for {}s only, or the call ran on another replica (a call's stream is resumed only where it runs: behind a load balancer, keep a session's requests on one replica); make the call again only if running it twice is safe",
                    direct::REPLAY_TTL.as_secs()
                ),
            ),
        })
    }

    /// The request, its body read already, to rmcp's handler.
    /// rmcp's answer to a POST of body `bytes`, its plain-text refusals made JSON-RPC errors
    /// that say what is wrong ([`readable_refusal`]).
    async fn rmcp(&self, parts: axum::http::request::Parts, bytes: Bytes) -> Answer {
        let answer = self
            .service
            .handle(Request::from_parts(
                parts,
                axum::body::Body::from(bytes.clone()),
            ))
            .await;
        readable_refusal(answer, &bytes).await
    }

    /// Whether the headers are ones rmcp's handler plainly accepts for an in-session request:
    /// both media types accepted, a JSON body, a session id, and a protocol version that is
    /// absent or known and has sessions. "Plainly": an `Accept` with parameters or quotes is
    /// left to rmcp's parser, never guessed at.
    fn plainly_acceptable(&self, headers: &HeaderMap) -> bool {
        headers.contains_key(&SESSION_ID)
            && accepts_both(headers)
            && json_body(headers)
            && match headers.get(&PROTOCOL_VERSION) {
                None => true,
                Some(value) => value.to_str().is_ok_and(|version| {
                    version < ProtocolVersion::STANDARD_HEADERS.as_str()
                        && ProtocolVersion::KNOWN_VERSIONS
                            .iter()
                            .any(|known| known.as_str() == version)
                }),
            }
    }
}

/// What a `GET` resuming a direct call's stream names: the `Last-Event-ID`, and the identity
/// of the session it is made in; `None` for another `GET`.
fn resumption(request: &Request) -> Option<(String, Arc<str>)> {
    let last = request.headers().get("last-event-id")?.to_str().ok()?;
    if !direct::is_direct_event_id(last) || !request.headers().contains_key(&SESSION_ID) {
        return None;
    }
    let identity = request
        .extensions()
        .get::<crate::sealed::Opened>()
        .map(|opened| Arc::<str>::from(opened.payload.session.as_str()))?;
    Some((last.to_owned(), identity))
}

/// The identity of the session a request's sealed id names (the sealing layer opened it).
fn identity(parts: &axum::http::request::Parts) -> Option<&str> {
    parts
        .extensions
        .get::<crate::sealed::Opened>()
        .map(|opened| opened.payload.session.as_str())
}

/// Whether `Accept` lists both `application/json` and `text/event-stream` as plain entries (no
/// parameters): then rmcp's parser finds both too. `false` means "not plainly", not "no".
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        if value.contains('"') {
            return false;
        }
        for entry in value.split(',').map(str::trim) {
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// rmcp's own `Content-Type` check: its essence is `application/json`.
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// The body, read as rmcp's handler reads it: at most `max` bytes (413 beyond, its words), a
/// read error 500 (its words).
pub(crate) async fn read_body(body: axum::body::Body, max: usize) -> Result<Bytes, Answer> {
    let mut collected = bytes::BytesMut::new();
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        match frame {
            Ok(frame) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.len() > max.saturating_sub(collected.len()) {
                    return Err(text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("Payload Too Large: request body exceeds {max} bytes"),
                    ));
                }
                if collected.is_empty() && body.is_end_stream() {
                    // One frame, the whole body: no copy.
                    return Ok(data);
                }
                collected.extend_from_slice(&data);
            }
            Err(error) => {
                return Err(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Failed to read request body: {error}"),
                ));
            }
        }
    }
    Ok(collected.freeze())
}

/// How long an answer's head waits for the request's first message (see [`held`]).
const HOLD: Duration = Duration::from_millis(50);

/// `stream` with its first events gathered before the answer's head is made: those that come
/// within `hold`, up to and including its first message (the priming event has none).
///
/// hyper sends a response's head as soon as its body has nothing more ready. Made at once, the
/// head and the priming event go out in one write and the answer in a second, and the client is
/// woken for each: a cross-CPU wake-up the gateway pays in the kernel on every call. Gathered,
/// a call answered within `hold` goes out in one write with its head. A slower call's head and
/// priming event go out at `hold`, and every message is still sent the moment it comes.
///
/// Timed by the connection's `clock` when it has one (see [`crate::hold`]), else by a timer of
/// its own.
async fn held(
    stream: impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    hold: Duration,
    clock: Option<&HoldClock>,
) -> impl futures::Stream<Item = ServerSseMessage> + Unpin + Send + Sync + 'static {
    let mut stream = Box::pin(stream.fuse());
    let mut first = Vec::new();
    let gather = async {
        while let Some(event) = stream.next().await {
            let message = event.message.is_some();
            first.push(event);
            if message {
                break;
            }
        }
    };
    tokio::select! {
        biased;
        () = gather => {}
        () = crate::hold::hold_until(clock, tokio::time::Instant::now() + hold) => {}
    }
    futures::stream::iter(first).chain(stream)
}

/// A plain-text answer, as rmcp makes its refusals.
fn text(status: StatusCode, body: String) -> Answer {
    let mut answer = Response::new(http_body_util::Full::new(Bytes::from(body)).boxed());
    *answer.status_mut() = status;
    answer
}

/// The event stream answering a request, as rmcp's handler makes it: each message one event
/// (its id and retry hint kept; a priming event has empty data), a comment every `keep_alive`
/// without one, and the end when the server's token `shutdown` is cancelled (see [`events`]).
fn sse_answer(
    stream: impl futures::Stream<Item = ServerSseMessage> + Unpin + Send + Sync + 'static,
    keep_alive: Option<Duration>,
    shutdown: CancellationToken,
) -> Answer {
    let mut answer = Response::new(events::EventBody::new(stream, keep_alive, shutdown).boxed());
    let headers = answer.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    answer
}

/// rmcp's DNS-rebinding answers (is this `Host`, with this `Origin`, allowed?), remembered for a
/// few pairs of values. rmcp's answer depends on those values and its configuration only, and
/// its handler makes the check before it looks at the method: a body-less `PUT` with the same
/// values gets 405 when they pass, 400/403 when they do not.
#[derive(Default)]
pub(crate) struct Rebinding {
    answers: Mutex<Vec<(Pair, bool)>>,
}

/// The values rmcp's check reads: the URI's authority (used without a `Host`), `Host`, `Origin`
/// (the first of each header: rmcp reads no other).
struct Pair {
    authority: Option<axum::http::uri::Authority>,
    host: Option<HeaderValue>,
    origin: Option<HeaderValue>,
}

impl Pair {
    /// Whether these are the values of the pair (compared without copying them).
    fn is(
        &self,
        authority: Option<&axum::http::uri::Authority>,
        host: Option<&HeaderValue>,
        origin: Option<&HeaderValue>,
    ) -> bool {
        self.authority.as_ref() == authority
            && self.host.as_ref() == host
            && self.origin.as_ref() == origin
    }
}

/// At most this many pairs are remembered (a deployment has a few names; beyond, each is asked).
const REMEMBERED: usize = 16;

impl Rebinding {
    /// Whether rmcp's check lets a request to `uri` with `headers` through.
    async fn allows(&self, service: &Service, uri: &axum::http::Uri, headers: &HeaderMap) -> bool {
        let (authority, host, origin) = (
            uri.authority(),
            headers.get(header::HOST),
            headers.get(header::ORIGIN),
        );
        if let Some((_, allowed)) = self
            .answers
            .lock()
            .expect("not poisoned")
            .iter()
            .find(|(known, _)| known.is(authority, host, origin))
        {
            return *allowed;
        }
        let mut probe = Request::new(axum::body::Body::empty());
        *probe.method_mut() = Method::PUT;
        *probe.uri_mut() = uri.clone();
        for name in [header::HOST, header::ORIGIN] {
            for value in headers.get_all(&name) {
                probe.headers_mut().append(name.clone(), value.clone());
            }
        }
        let allowed =
            Box::pin(service.handle(probe)).await.status() == StatusCode::METHOD_NOT_ALLOWED;
        let mut answers = self.answers.lock().expect("not poisoned");
        if answers.len() < REMEMBERED
            && !answers
                .iter()
                .any(|(known, _)| known.is(authority, host, origin))
        {
            let pair = Pair {
                authority: authority.cloned(),
                host: host.cloned(),
                origin: origin.cloned(),
            };
            answers.push((pair, allowed));
        }
        allowed
    }
}

/// What rmcp says before the reason when a body is not one JSON-RPC message.
const UNREADABLE: &str = "fail to deserialize request body";

/// rmcp's answer to a request without a session id (other than `initialize`).
const NO_SESSION: &str = "Bad Request: Session ID is required";

/// rmcp answers a body it cannot read as a JSON-RPC message with 415 and a line of text, and a
/// request it takes for one needing a session, without a session id, with 400 and a line of
/// text. The spec asks for an HTTP error and allows a JSON-RPC error, which is what SDK
/// clients show: each becomes 400 with a JSON-RPC error saying what is wrong with `body` —
/// `-32700` (not JSON, or not UTF-8), `-32600` naming the member at fault ([`crate::unfit`]) or
/// the missing session, `-32602` for an `initialize` whose params do not have its shape —
/// with the request's id when it has a usable one. Every other answer passes unchanged (415
/// for a wrong `Content-Type` included).
async fn readable_refusal(answer: Answer, body: &[u8]) -> Answer {
    let status = answer.status();
    if status != StatusCode::UNSUPPORTED_MEDIA_TYPE && status != StatusCode::BAD_REQUEST {
        return answer;
    }
    let (parts, said) = answer.into_parts();
    let Ok(said) = said.collect().await.map(|said| said.to_bytes());
    let (id, error) = if said.starts_with(UNREADABLE.as_bytes()) {
        unreadable(body)
    } else if said == NO_SESSION.as_bytes() {
        without_session(body)
    } else {
        return Response::from_parts(parts, http_body_util::Full::new(said).boxed());
    };
    json_rpc_refusal(id, error)
}

/// 400 with the JSON-RPC error of a request at a protocol that has sessions sent without one
/// (see [`without_session`]).
pub(crate) fn initialize_first(body: &[u8]) -> Answer {
    let (id, error) = without_session(body);
    json_rpc_refusal(id, error)
}

/// 400 with `error` as a JSON-RPC error answer to `id`.
fn json_rpc_refusal(id: Option<rmcp::model::RequestId>, error: rmcp::model::ErrorData) -> Answer {
    let id = id.map_or(serde_json::Value::Null, |id| id.into_json_value());
    let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error});
    let mut refused = text(StatusCode::BAD_REQUEST, error.to_string());
    refused.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    refused
}

/// What is wrong with a body rmcp could not read as one JSON-RPC message.
fn unreadable(body: &[u8]) -> (Option<rmcp::model::RequestId>, rmcp::model::ErrorData) {
    use crate::unfit::{Unfit, unfit};
    use rmcp::model::ErrorData;
    if let Err(error) = std::str::from_utf8(body) {
        let message = format!("Parse error: the body is not UTF-8 ({error})");
        return (None, ErrorData::parse_error(message, None));
    }
    if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        // serde's syntax messages name a place, never the text.
        let message = format!("Parse error: the body is not a JSON message ({error})");
        return (None, ErrorData::parse_error(message, None));
    }
    match unfit(body) {
        Unfit::Refused(id, mut error) => {
            error.message = format!("Invalid Request: {}", error.message).into();
            (id, error)
        }
        Unfit::Answer => (
            None,
            ErrorData::invalid_request(
                "Invalid Request: the answer does not fit MCP's schema; the request it answers ends at its timeout",
                None,
            ),
        ),
        Unfit::Notification => (
            None,
            ErrorData::invalid_request(
                "Invalid Request: the notification does not fit MCP's schema",
                None,
            ),
        ),
    }
}

/// What is wrong with a request rmcp took for one needing a session, sent without one: an
/// `initialize` whose params rmcp could not read, or any other request.
fn without_session(body: &[u8]) -> (Option<rmcp::model::RequestId>, rmcp::model::ErrorData) {
    use rmcp::model::ErrorData;
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<serde_json::Value>,
        method: Option<serde_json::Value>,
    }
    let head = serde_json::from_slice::<Head>(body).ok();
    let id = head
        .as_ref()
        .and_then(|head| head.id.clone())
        .and_then(|id| serde_json::from_value(id).ok());
    let initialize = head
        .and_then(|head| head.method)
        .is_some_and(|method| method == "initialize");
    let error = if initialize {
        ErrorData::invalid_params(
            "Invalid params: `initialize` takes `protocolVersion` (a string), `capabilities` (an object) and `clientInfo` (an object with `name` and `version` strings)",
            None,
        )
    } else {
        ErrorData::invalid_request(
            "Invalid Request: no `Mcp-Session-Id` header: send `initialize` first, then the session id it answers with on every request",
            None,
        )
    };
    (id, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// Only plain lists naming both types are taken as accepting both; weights, parameters
    /// and quotes are left to rmcp's parser (which may well accept them too).
    #[test]
    fn accept_is_plain_or_left_to_rmcp() {
        for yes in [
            vec![("accept", "application/json, text/event-stream")],
            vec![("accept", "TEXT/EVENT-STREAM,application/json")],
            vec![
                ("accept", "application/json"),
                ("accept", "text/event-stream"),
            ],
            vec![("accept", "*/*, application/json, text/event-stream")],
        ] {
            assert!(accepts_both(&headers(&yes)), "{yes:?}");
        }
        for not_plainly in [
            vec![("accept", "application/json")],
            vec![("accept", "*/*")],
            vec![("accept", "application/json, text/event-stream;q=0")],
            vec![("accept", "application/json;q=1, text/event-stream")],
            vec![("accept", "application/json, text/event-stream, x/y;a=\",\"")],
            vec![],
        ] {
            assert!(!accepts_both(&headers(&not_plainly)), "{not_plainly:?}");
        }
    }

    #[test]
    fn content_type_is_read_as_rmcp_reads_it() {
        assert!(json_body(&headers(&[("content-type", "application/json")])));
        assert!(json_body(&headers(&[(
            "content-type",
            " Application/JSON ; charset=utf-8"
        )])));
        assert!(!json_body(&headers(&[("content-type", "text/plain")])));
        assert!(!json_body(&headers(&[(
            "content-type",
            "application/jsonx"
        )])));
        assert!(!json_body(&headers(&[])));
    }
}

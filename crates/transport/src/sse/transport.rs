//! The legacy HTTP+SSE transport itself: rmcp's `Transport<RoleClient>` over an event stream
//! (read by a reader task, re-opened with backoff) and the POSTs to the announced endpoint (one
//! at a time, by a POST task). See the [module docs](super) for its invariants.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header;
use reqwest::{StatusCode, Url};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::AuthRequiredError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::parser::SseParser;
use crate::endpoint::shown;
use crate::error::TransportError;
use crate::inbound::Inbound;
use crate::net::describe_request as describe;
use crate::net::{NetFailure, net_failure};

/// How many times in a row a dropped event stream is re-opened before the session ends.
pub(super) const MAX_RECONNECTS: u32 = 5;
/// The first reconnect delay when the server sent no `retry:`.
const DEFAULT_RETRY: Duration = Duration::from_millis(500);
/// The shortest reconnect delay, whatever the server's `retry:` says (`retry: 0` would
/// reconnect in a busy loop).
const MIN_RETRY: Duration = Duration::from_millis(100);
/// A re-opened stream counts as healthy again — its reconnects start over — once it has
/// carried a message after staying open this long: a server that answers each reconnect with
/// a message and a close does not reconnect for ever.
const HEALTHY_AFTER: Duration = Duration::from_secs(5);
/// Backoff never grows beyond this (unless the server's own `retry:` is longer, up to
/// [`MAX_SERVER_RETRY`]).
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A POST not answered within this is let go (its slot freed). It counted as sent long
/// before ([`POST_ANSWER_WAIT`]), so its request is not failed: a server that answers a POST
/// only once it handled the message may still be at it, and its answer comes on the stream
/// (the caller's own deadline decides).
pub(super) const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// A message whose POST is not answered within this counts as sent (a legacy server answers
/// `202` at once; the answer comes on the stream): the caller's own deadline (a tool call's
/// `toolTimeoutSec`) runs from then, instead of waiting [`POST_TIMEOUT`] first. A failure
/// after it is logged, a request is answered with it (not a POST held past [`POST_TIMEOUT`]:
/// the server may be at it), and a session gone still closes the connection. (Counted from when the message is queued: one queued behind
/// [`POSTS_IN_FLIGHT`] slow POSTs may count as sent before its own POST starts.)
const POST_ANSWER_WAIT: Duration = Duration::from_secs(2);
/// Server messages buffered between the stream reader and rmcp.
const INBOUND_BUFFER: usize = 256;
/// The most bytes of messages held from before the `endpoint` event (each may be as large as
/// the message cap; nothing legitimate comes before it).
const EARLY_BYTES: usize = 4 << 20;
/// The longest reconnect delay a server's `retry:` may ask for.
const MAX_SERVER_RETRY: Duration = Duration::from_secs(120);
/// POSTs in flight at once: a server that answers a POST only once it has handled the message
/// holds one slot per message, not the whole session (a slow call does not stall the others
/// and the pings that keep the connection).
const POSTS_IN_FLIGHT: usize = 16;

/// The HTTP clients of a legacy SSE session, both with the configured headers and following
/// redirects only within the origin: the event stream's follows any redirect, the POSTs' only
/// a 307 or 308 (a 301, 302 or 303 would resend the message as a GET without it).
#[derive(Clone, Debug)]
pub(crate) struct Clients {
    pub(crate) stream: reqwest::Client,
    pub(crate) post: reqwest::Client,
}

/// Resolves the data of an `endpoint` event against the SSE URL; refuses an endpoint on
/// another origin (scheme, host or port).
pub(super) fn resolve_endpoint(sse_url: &Url, data: &str) -> Result<Url, String> {
    let data = data.trim();
    if data.is_empty() {
        return Err("the server's `endpoint` event names no URL".into());
    }
    let endpoint = sse_url
        .join(data)
        .map_err(|e| format!("the server's `endpoint` event is not a URL ({e})"))?;
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        return Err(format!(
            "the server at {} announced its message endpoint with credentials in the URL; \
             refusing (they would replace the configured headers)",
            shown(sse_url)
        ));
    }
    if endpoint.origin() != sse_url.origin() {
        return Err(format!(
            "the server at {} announced its message endpoint on another origin ({}); refusing to \
             send messages (and the configured headers) there",
            shown(sse_url),
            endpoint.origin().ascii_serialization()
        ));
    }
    Ok(endpoint)
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// Why the event stream could not be opened.
enum OpenError {
    /// The request failed; `failure` when that was the connection itself (refused, DNS, TLS).
    Request {
        message: String,
        failure: Option<NetFailure>,
    },
    Auth(StatusCode),
    Status(StatusCode),
    NotEventStream(String),
}

impl OpenError {
    fn into_transport_error(self, url: &Url) -> TransportError {
        let url = shown(url);
        let (message, auth_required) = match self {
            // Nothing there to open a stream on: retrying soon cannot help, so it fails fast
            // (`TransportError::fails_fast`), as Streamable HTTP does.
            OpenError::Request {
                failure: Some(failure @ (NetFailure::Refused | NetFailure::Dns | NetFailure::Tls)),
                ..
            } => {
                return TransportError::Unreachable { url, failure };
            }
            OpenError::Status(status) if matches!(status.as_u16(), 404 | 410) => {
                return TransportError::Unreachable {
                    url,
                    failure: NetFailure::NotFound,
                };
            }
            OpenError::Request { message: e, .. } => (
                format!("could not open the SSE stream at {url}: {e}"),
                false,
            ),
            OpenError::Auth(status) => (
                format!(
                    "the SSE stream at {url} answered {status}: the server requires \
                     authorization (set it in `headers`)"
                ),
                true,
            ),
            OpenError::Status(status) => (
                format!(
                    "the SSE stream at {url} answered {status}{}",
                    if matches!(status.as_u16(), 404 | 405) {
                        " (is this a legacy HTTP+SSE URL? Streamable HTTP servers take `type: \"http\"`)"
                    } else {
                        ""
                    }
                ),
                false,
            ),
            OpenError::NotEventStream(content_type) => (
                format!(
                    "the SSE stream at {url} answered with Content-Type `{content_type}`, not \
                     text/event-stream (a Streamable HTTP server takes `type: \"http\"`)"
                ),
                false,
            ),
        };
        TransportError::Initialize {
            message,
            auth_required,
            stderr_tail: None,
        }
    }
}

/// GETs the event stream; returns its body and the URL it finally came from.
async fn get_stream(
    client: &reqwest::Client,
    url: &Url,
    last_event_id: Option<&str>,
) -> Result<(ByteStream, Url), OpenError> {
    let mut request = client
        .get(url.clone())
        .header(header::ACCEPT, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache");
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.send().await.map_err(|e| OpenError::Request {
        message: describe(&e),
        failure: net_failure(&e),
    })?;
    let status = response.status();
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(OpenError::Auth(status));
    }
    if !status.is_success() {
        return Err(OpenError::Status(status));
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !content_type
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
    {
        return Err(OpenError::NotEventStream(content_type));
    }
    let final_url = response.url().clone();
    Ok((Box::pin(response.bytes_stream()), final_url))
}

/// A POST that failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum LegacySseError {
    #[error("could not encode the message: {0}")]
    /// The message could not be encoded.
    Encode(#[from] serde_json::Error),
    #[error("POST to the message endpoint failed: {0}")]
    /// The POST could not be sent or answered.
    Post(String),
    #[error("the message endpoint did not answer the POST within {}s", POST_TIMEOUT.as_secs())]
    /// The POST was not answered within [`POST_TIMEOUT`]: whether the server took the message
    /// is not known (one that answers a POST only once it handled the message may be at it).
    PostTimeout,
    #[error("the message endpoint answered {status}: the server requires authorization")]
    /// The endpoint asked for authorization (401/403).
    Unauthorized {
        /// The HTTP status.
        status: StatusCode,
        #[source]
        /// The underlying error.
        source: AuthRequiredError,
    },
    #[error("the message endpoint answered {status}: the server no longer knows this session")]
    /// The server forgot the session (404/410).
    SessionGone {
        /// The HTTP status.
        status: StatusCode,
    },
    #[error("the message endpoint answered {status}")]
    /// The endpoint answered another error status.
    Rejected {
        /// The HTTP status.
        status: StatusCode,
    },
    #[error("the SSE session is closed")]
    /// The transport was closed.
    Closed,
}

struct Post {
    message: ClientJsonRpcMessage,
    done: oneshot::Sender<Result<(), LegacySseError>>,
}

/// rmcp's `Transport<RoleClient>` over a legacy HTTP+SSE session.
pub(super) struct LegacySseTransport {
    inbound: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Notes each request sent, so answers to no request are recognised.
    decoder: Inbound,
    posts: mpsc::UnboundedSender<Post>,
    cancel: CancellationToken,
    _stop_tasks: DropGuard,
}

impl LegacySseTransport {
    /// Opens the event stream, waits for the `endpoint` event and starts the reader and POST
    /// tasks. Not bounded in time: the caller puts a deadline around it. (Tests; connectors
    /// use `open_observed`.)
    #[cfg(test)]
    pub(crate) async fn open(
        client: Clients,
        sse_url: Url,
        server: String,
    ) -> Result<Self, TransportError> {
        let inbound = Inbound::new(
            &server,
            crate::inbound::DEFAULT_MAX_MESSAGE_BYTES,
            crate::wire::WireNotes::default(),
            true,
        );
        let opened = std::sync::atomic::AtomicBool::new(false);
        Self::open_observed(client, sse_url, inbound, &opened).await
    }

    /// [`Self::open`], decoding every message through `inbound` (which shows it to its wire
    /// notes, holds it to its size cap and fails the request an undecodable one answers);
    /// `opened` is set once the server answered the GET with its event stream (a deadline
    /// around this then tells a stream without an `endpoint` from a server that did not answer).
    pub(super) async fn open_observed(
        clients: Clients,
        sse_url: Url,
        inbound: Inbound,
        opened: &std::sync::atomic::AtomicBool,
    ) -> Result<Self, TransportError> {
        let server = inbound.server().to_string();
        let client = clients.stream;
        let (mut stream, base) = get_stream(&client, &sse_url, None)
            .await
            .map_err(|e| e.into_transport_error(&sse_url))?;
        opened.store(true, std::sync::atomic::Ordering::Relaxed);
        // The cap plus room for the event's framing (`data:` prefixes).
        let mut parser = SseParser::with_limit(inbound.limit().saturating_add(1024));
        let mut early = Vec::new();
        let mut early_bytes = 0;
        let mut events = Vec::new();
        let mut endpoint = None;
        while endpoint.is_none() {
            let bytes = match stream.next().await {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) => {
                    return Err(TransportError::Initialize {
                        message: format!(
                            "the SSE stream at {} failed before the server announced its \
                             message endpoint: {}",
                            shown(&sse_url),
                            describe(&e)
                        ),
                        auth_required: false,
                        stderr_tail: None,
                    });
                }
                None => {
                    return Err(TransportError::Initialize {
                        message: format!(
                            "the SSE stream at {} ended before the server announced its message \
                             endpoint (is this a legacy HTTP+SSE URL?)",
                            shown(&sse_url)
                        ),
                        auth_required: false,
                        stderr_tail: None,
                    });
                }
            };
            parser
                .feed(&bytes, &mut events)
                .map_err(|e| TransportError::Initialize {
                    message: with_limit_hint(&e, &server),
                    auth_required: false,
                    stderr_tail: None,
                })?;
            for event in events.drain(..) {
                match event.event.as_str() {
                    "endpoint" if endpoint.is_none() => {
                        // `base` is where the stream came from after same-origin redirects. A
                        // refused endpoint is the server's doing, not the config's: the
                        // connection is retried as after any failed handshake.
                        let url = resolve_endpoint(&base, &event.data).map_err(|message| {
                            TransportError::Initialize {
                                message,
                                auth_required: false,
                                stderr_tail: None,
                            }
                        })?;
                        endpoint = Some(url);
                    }
                    "message"
                        if early.len() >= INBOUND_BUFFER
                            || early_bytes + event.data.len() > EARLY_BYTES =>
                    {
                        // Nothing can answer a request yet: a stream of messages here is a
                        // server misbehaving, held in memory until the endpoint comes.
                        return Err(TransportError::Initialize {
                            message: format!(
                                "the SSE stream at {} sent more than {INBOUND_BUFFER} messages or \
                                 {} MiB before announcing its message endpoint (a legacy \
                                 HTTP+SSE server sends its `endpoint` event first)",
                                shown(&sse_url),
                                EARLY_BYTES >> 20
                            ),
                            auth_required: false,
                            stderr_tail: None,
                        });
                    }
                    "message" => {
                        early_bytes += event.data.len();
                        early.extend(inbound.decode(event.data.as_bytes(), None));
                    }
                    _ => {}
                }
            }
        }
        let endpoint = endpoint.expect("loop ends with an endpoint");
        tracing::debug!(server = %server, endpoint = %shown(&endpoint), "legacy SSE endpoint");
        let cancel = CancellationToken::new();
        let inbound_decoder = inbound.clone();
        let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND_BUFFER);
        let (posts, post_rx) = mpsc::unbounded_channel();
        let reader = Reader {
            client: client.clone(),
            sse_url,
            base,
            endpoint: endpoint.clone(),
            parser,
            inbound: inbound_tx,
            decoder: inbound.clone(),
            cancel: cancel.clone(),
            server: server.clone(),
        };
        let late = LateFailures {
            inbound: reader.inbound.downgrade(),
            decoder: inbound.clone(),
        };
        tokio::spawn(reader.run(stream, early));
        tokio::spawn(post_loop(
            clients.post,
            endpoint,
            post_rx,
            cancel.clone(),
            server,
            late,
        ));
        Ok(Self {
            inbound: inbound_rx,
            decoder: inbound_decoder,
            posts,
            _stop_tasks: cancel.clone().drop_guard(),
            cancel,
        })
    }
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = LegacySseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.decoder.sent(&item);
        // Queued now, so POSTs keep the order of these calls.
        let (done, result) = oneshot::channel();
        let queued = self
            .posts
            .send(Post {
                message: item,
                done,
            })
            .is_ok();
        async move {
            if !queued {
                return Err(LegacySseError::Closed);
            }
            match tokio::time::timeout(POST_ANSWER_WAIT, result).await {
                Ok(answered) => answered.unwrap_or(Err(LegacySseError::Closed)),
                Err(_) => Ok(()),
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.inbound.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.cancel.cancel();
        self.inbound.close();
        Ok(())
    }
}

/// How one stream ended.
enum StreamEnd {
    /// The transport was closed or dropped.
    Stopped,
    /// The stream dropped; re-opening it may help.
    Dropped(String),
    /// The session cannot go on.
    Fatal(String),
}

struct Reader {
    client: reqwest::Client,
    sse_url: Url,
    /// Where the current stream came from (after same-origin redirects).
    base: Url,
    endpoint: Url,
    parser: SseParser,
    inbound: mpsc::Sender<ServerJsonRpcMessage>,
    decoder: Inbound,
    cancel: CancellationToken,
    server: String,
}

impl Reader {
    async fn run(mut self, mut stream: ByteStream, early: Vec<ServerJsonRpcMessage>) {
        for message in early {
            if !self.deliver(message).await {
                return;
            }
        }
        let mut failures = 0u32;
        loop {
            let opened = tokio::time::Instant::now();
            let why = match self.pump(&mut stream, &mut failures, opened).await {
                StreamEnd::Stopped => return,
                StreamEnd::Fatal(why) => {
                    tracing::warn!(server = %self.server, "legacy SSE session ends: {why}");
                    return;
                }
                StreamEnd::Dropped(why) => why,
            };
            // Re-open the stream, at most MAX_RECONNECTS times in a row.
            let mut last = why;
            loop {
                if failures >= MAX_RECONNECTS {
                    tracing::warn!(
                        server = %self.server,
                        "legacy SSE stream lost ({last}); gave up after {MAX_RECONNECTS} reconnects"
                    );
                    return;
                }
                failures += 1;
                let delay = backoff(self.parser.retry(), failures);
                tracing::debug!(server = %self.server, attempt = failures, delay_ms = delay.as_millis() as u64, "re-opening the SSE stream ({last})");
                tokio::select! {
                    () = self.cancel.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                let opened = tokio::select! {
                    () = self.cancel.cancelled() => return,
                    r = get_stream(&self.client, &self.sse_url, self.parser.last_event_id()) => r,
                };
                match opened {
                    Ok((s, base)) => {
                        stream = s;
                        self.base = base;
                        self.parser.restart();
                        break;
                    }
                    Err(OpenError::Auth(status)) => {
                        tracing::warn!(server = %self.server, "legacy SSE session ends: the stream answered {status} on reconnect");
                        return;
                    }
                    Err(e) => last = e.into_transport_error(&self.sse_url).to_string(),
                }
            }
        }
    }

    /// Hands one message to rmcp; false once nobody receives any more.
    async fn deliver(&self, message: ServerJsonRpcMessage) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            sent = self.inbound.send(message) => sent.is_ok(),
        }
    }

    /// Reads `stream` (open since `opened`) until it ends; a message on it once it has been
    /// open [`HEALTHY_AFTER`] starts the reconnects over.
    async fn pump(
        &mut self,
        stream: &mut ByteStream,
        failures: &mut u32,
        opened: tokio::time::Instant,
    ) -> StreamEnd {
        let mut events = Vec::new();
        loop {
            let chunk = tokio::select! {
                () = self.cancel.cancelled() => return StreamEnd::Stopped,
                chunk = stream.next() => chunk,
            };
            let bytes = match chunk {
                None => return StreamEnd::Dropped("the server ended the stream".into()),
                Some(Err(e)) => return StreamEnd::Dropped(describe(&e)),
                Some(Ok(bytes)) => bytes,
            };
            // An event over the cap fails the request it answers (when its start names it),
            // else is logged and counted; the events around it are taken as usual.
            if let Err(e) = self.parser.feed(&bytes, &mut events) {
                tracing::warn!(server = %self.server, "{}", with_limit_hint(&e, &self.server));
                let refused = self.parser.refused();
                let limit = self.decoder.limit();
                if let Some(message) = self.decoder.too_large(limit, false, refused, None)
                    && !self.deliver(message).await
                {
                    return StreamEnd::Stopped;
                }
            }
            for event in std::mem::take(&mut events) {
                match event.event.as_str() {
                    "message" => {
                        if opened.elapsed() >= HEALTHY_AFTER {
                            *failures = 0;
                        }
                        if let Some(message) = self.decoder.decode(event.data.as_bytes(), None)
                            && !self.deliver(message).await
                        {
                            return StreamEnd::Stopped;
                        }
                    }
                    "endpoint" => match resolve_endpoint(&self.base, &event.data) {
                        Ok(url) if url == self.endpoint => {}
                        Ok(_) => {
                            return StreamEnd::Fatal(
                                "the re-opened stream announced a new message endpoint: the \
                                 server started a new session and the old one is gone"
                                    .into(),
                            );
                        }
                        Err(e) => return StreamEnd::Fatal(e),
                    },
                    _ => {}
                }
            }
        }
    }
}

/// `e` (an event over the cap) with the config key that raises the cap.
fn with_limit_hint(e: &super::parser::SseError, server: &str) -> String {
    format!("{e}; raise `maxMessageBytes` of server \"{server}\" if it sends messages that large")
}

/// The delay before reconnect `attempt` (1-based): the server's `retry:` (or 500 ms; at least
/// 100 ms), doubled per attempt, at most 30 s (or the server's `retry:` when that is longer).
fn backoff(retry: Option<Duration>, attempt: u32) -> Duration {
    let base = retry
        .unwrap_or(DEFAULT_RETRY)
        .clamp(MIN_RETRY, MAX_SERVER_RETRY);
    let grown = base.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    grown.min(MAX_BACKOFF.max(base))
}

/// Where a request whose POST failed after it counted as sent ([`POST_ANSWER_WAIT`]) gets its
/// answer: an error made up for it, taken in as the server's messages are (its caller waits
/// for one).
struct LateFailures {
    /// Weak: the stream's reader ending still ends what rmcp receives.
    inbound: mpsc::WeakSender<ServerJsonRpcMessage>,
    decoder: Inbound,
}

impl LateFailures {
    async fn fail(&self, message: &ClientJsonRpcMessage, error: &LegacySseError) {
        let ClientJsonRpcMessage::Request(request) = message else {
            return;
        };
        let error = rmcp::model::ErrorData::internal_error(
            format!("the server did not take the request: {error}"),
            None,
        );
        let answer = ServerJsonRpcMessage::error(error, Some(request.id.clone()));
        let Ok(bytes) = serde_json::to_vec(&answer) else {
            return;
        };
        if let (Some(answer), Some(inbound)) =
            (self.decoder.decode(&bytes, None), self.inbound.upgrade())
        {
            let _ = inbound.send(answer).await;
        }
    }
}

async fn post_loop(
    client: reqwest::Client,
    endpoint: Url,
    mut posts: mpsc::UnboundedReceiver<Post>,
    cancel: CancellationToken,
    server: String,
    late: LateFailures,
) {
    use futures::StreamExt as _;
    let one = |post: Post| {
        let (client, endpoint, cancel, server, late) =
            (&client, &endpoint, &cancel, &server, &late);
        async move {
            let result = tokio::select! {
                () = cancel.cancelled() => Err(LegacySseError::Closed),
                result = post_one(client, endpoint, &post.message) => result,
            };
            if let Err(e @ LegacySseError::SessionGone { .. }) = &result {
                tracing::warn!(server = %server, "legacy SSE session ends: {e}");
                cancel.cancel();
            }
            // No one waits for it when it took longer than POST_ANSWER_WAIT: said here, and a
            // request is answered with the failure.
            match post.done.send(result) {
                // A POST held past its limit after it counted as sent: the server may be
                // handling the message (some answer a POST only then); its answer may still
                // come on the stream, and the caller's own deadline decides. Said, not failed.
                Err(Err(LegacySseError::PostTimeout)) => tracing::warn!(
                    server = %server,
                    "the server held a POSTed message's request over {}s; its answer is awaited on the stream until the caller's own deadline",
                    POST_TIMEOUT.as_secs()
                ),
                Err(Err(e)) => {
                    tracing::warn!(server = %server, "a message POSTed to the server, counted as sent after {}s without an answer, failed: {e}", POST_ANSWER_WAIT.as_secs());
                    late.fail(&post.message, &e).await;
                }
                _ => {}
            }
        }
    };
    // Started in the order they were sent; up to POSTS_IN_FLIGHT at once.
    let mut running = futures::stream::FuturesUnordered::new();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            () = cancel.cancelled() => return,
            Some(()) = running.next(), if !running.is_empty() => {}
            post = posts.recv(), if open && running.len() < POSTS_IN_FLIGHT => match post {
                Some(post) => running.push(one(post)),
                None => open = false,
            },
        }
    }
}

async fn post_one(
    client: &reqwest::Client,
    endpoint: &Url,
    message: &ClientJsonRpcMessage,
) -> Result<(), LegacySseError> {
    let body = serde_json::to_vec(message)?;
    let response = client
        .post(endpoint.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .timeout(POST_TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|e| match e.is_timeout() {
            true => LegacySseError::PostTimeout,
            false => LegacySseError::Post(describe(&e)),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    Err(match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => LegacySseError::Unauthorized {
            status,
            source: AuthRequiredError::new(
                response
                    .headers()
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string(),
            ),
        },
        StatusCode::NOT_FOUND | StatusCode::GONE => LegacySseError::SessionGone { status },
        _ => LegacySseError::Rejected { status },
    })
}

/// The HTTP clients of a legacy SSE session: `headers` (sensitive) on every request,
/// redirects only within the origin (see [`Clients`]).
pub(crate) fn http_clients(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<Clients, TransportError> {
    Ok(Clients {
        stream: http_client(headers, false)?,
        post: http_client(headers, true)?,
    })
}

fn http_client(
    headers: &std::collections::BTreeMap<String, String>,
    keep_body: bool,
) -> Result<reqwest::Client, TransportError> {
    let headers = crate::endpoint::header_map(headers)?;
    reqwest::Client::builder()
        .default_headers(headers)
        // The headers must not travel to another origin.
        .redirect(crate::endpoint::same_origin_redirects(5, keep_body))
        .connect_timeout(Duration::from_secs(10))
        // reqwest's default, stated: with Nagle's algorithm a POST written in two segments
        // waits for the server's delayed ACK (~40 ms a message).
        .tcp_nodelay(true)
        .build()
        .map_err(|e| TransportError::InvalidConfig(format!("could not build the HTTP client: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_endpoints_against_the_stream_url() {
        let base = Url::parse("http://127.0.0.1:3001/sse").unwrap();
        assert_eq!(
            resolve_endpoint(&base, "/message?sessionId=abc")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:3001/message?sessionId=abc"
        );
        assert_eq!(
            resolve_endpoint(&base, " http://127.0.0.1:3001/m?s=1\n")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:3001/m?s=1"
        );
        let nested = Url::parse("https://h.test/mcp/sse?token=secret").unwrap();
        assert_eq!(
            resolve_endpoint(&nested, "messages/?session_id=1")
                .unwrap()
                .as_str(),
            "https://h.test/mcp/messages/?session_id=1"
        );
        for other in [
            "http://evil.test:3001/message",
            "http://127.0.0.1:3002/message",
            "https://127.0.0.1:3001/message",
            "//evil.test/message",
            "data:text/plain,hi",
        ] {
            let err = resolve_endpoint(&base, other).expect_err(other);
            assert!(err.contains("another origin"), "{other}: {err}");
        }
        let err = resolve_endpoint(&base, "http://u:p@127.0.0.1:3001/message").unwrap_err();
        assert!(err.contains("credentials"), "{err}");
        let err = resolve_endpoint(&nested, "http://evil.test/x").unwrap_err();
        assert!(!err.contains("secret"), "the query is not shown: {err}");
        assert!(resolve_endpoint(&base, "  ").is_err());
    }

    #[test]
    fn backoff_doubles_from_retry_and_is_capped() {
        assert_eq!(backoff(None, 1), Duration::from_millis(500));
        assert_eq!(backoff(None, 3), Duration::from_secs(2));
        assert_eq!(
            backoff(Some(Duration::from_millis(10)), 5),
            Duration::from_millis(1600),
            "never below 100 ms"
        );
        assert_eq!(backoff(Some(Duration::ZERO), 1), MIN_RETRY);
        assert_eq!(backoff(None, 40), MAX_BACKOFF);
        assert_eq!(
            backoff(Some(Duration::from_secs(60)), 3),
            Duration::from_secs(60)
        );
        assert_eq!(
            backoff(Some(Duration::from_secs(86_400)), 1),
            MAX_SERVER_RETRY,
            "a day's `retry:` is not waited"
        );
    }

    // ---- against a minimal HTTP server on loopback ----

    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Debug, Clone)]
    struct Request {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Request {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// What the fake server answers: a status line and headers, a body, and whether to keep
    /// the connection open after writing it (an event stream that stays up).
    struct Reply {
        head: &'static str,
        body: String,
        hold: bool,
        /// How long to wait before answering.
        delay: Duration,
    }

    /// An answer of `head` alone, at once.
    fn reply(head: &'static str) -> Reply {
        Reply {
            head,
            body: String::new(),
            hold: false,
            delay: Duration::ZERO,
        }
    }

    /// No answer, the connection held open.
    fn held() -> Reply {
        Reply {
            head: "",
            body: String::new(),
            hold: true,
            delay: Duration::ZERO,
        }
    }

    fn stream(body: &str, hold: bool) -> Reply {
        Reply {
            head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n",
            body: body.into(),
            hold,
            delay: Duration::ZERO,
        }
    }

    type Handler = Arc<dyn Fn(&Request, usize) -> Reply + Send + Sync>;

    /// Serves one request per connection; the handler gets the request and how many GETs came
    /// before it.
    async fn fake_server(handler: Handler) -> (Url, Arc<Mutex<Vec<Request>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/sse", listener.local_addr().unwrap())).unwrap();
        let seen = Arc::new(Mutex::new(Vec::<Request>::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (handler, log) = (handler.clone(), log.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let mut first = lines.next().unwrap_or("").split(' ');
                    let (method, path) = (
                        first.next().unwrap_or("").to_string(),
                        first.next().unwrap_or("").to_string(),
                    );
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                        .collect();
                    let length = headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + length {
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let request = Request {
                        method,
                        path,
                        headers,
                        body: String::from_utf8_lossy(&buf[head_end..]).to_string(),
                    };
                    let gets = {
                        let mut log = log.lock().unwrap();
                        let gets = log.iter().filter(|r| r.method == "GET").count();
                        log.push(request.clone());
                        gets
                    };
                    let reply = handler(&request, gets);
                    tokio::time::sleep(reply.delay).await;
                    // An empty head: the request is never answered.
                    if !reply.head.is_empty() {
                        let _ = socket
                            .write_all(format!("{}\r\n{}", reply.head, reply.body).as_bytes())
                            .await;
                    }
                    if reply.hold {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                });
            }
        });
        (url, seen)
    }

    fn client(headers: &[(&str, &str)]) -> Clients {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        http_clients(&headers).unwrap()
    }

    const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    /// Messages before the endpoint are held until it comes: a server sending more than the
    /// inbound buffer of them first is refused, not buffered without end.
    #[tokio::test]
    async fn a_flood_of_messages_before_the_endpoint_is_refused() {
        let flood = format!("data: {PING}\n\n").repeat(INBOUND_BUFFER + 1);
        let (url, _) = fake_server(Arc::new(move |_: &Request, _| stream(&flood, true))).await;
        let refused = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .err()
            .expect("refused");
        let text = refused.to_string();
        assert!(
            text.contains("before announcing its message endpoint"),
            "{text}"
        );
        // A few messages first are kept for after it.
        let few = format!("data: {PING}\n\n").repeat(3) + "event: endpoint\ndata: /m\n\n";
        let (url, _) = fake_server(Arc::new(move |_: &Request, _| stream(&few, true))).await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        for _ in 0..3 {
            transport.receive().await.expect("an early message");
        }
    }

    /// A POST the server never answers counts as sent after a short wait: the caller's own
    /// deadline runs from then (rmcp waits for the send before it starts a request's timeout),
    /// not from the POST's 30 s limit.
    #[tokio::test]
    async fn a_post_never_answered_counts_as_sent_after_a_short_wait() {
        let (url, _) = fake_server(Arc::new(|req: &Request, _| match req.method.as_str() {
            "GET" => stream("event: endpoint\ndata: /message?sessionId=s1\n\n", true),
            _ => held(),
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let message: ClientJsonRpcMessage = serde_json::from_str(PING).unwrap();
        let start = tokio::time::Instant::now();
        let sent = tokio::time::timeout(Duration::from_secs(10), transport.send(message))
            .await
            .expect("send ends well before the POST's own limit");
        assert!(sent.is_ok(), "{sent:?}");
        assert!(start.elapsed() >= POST_ANSWER_WAIT, "{:?}", start.elapsed());
    }

    /// A POST the server holds does not hold the messages after it (a server that answers a
    /// POST once it has handled the message: a slow call, and the pings behind it).
    #[tokio::test]
    async fn a_held_post_does_not_hold_the_next() {
        let (url, seen) = fake_server(Arc::new(|req: &Request, _| match req.method.as_str() {
            "GET" => stream("event: endpoint\ndata: /message?sessionId=s1\n\n", true),
            _ if req.body.contains("\"slow\"") => held(),
            _ => reply("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n"),
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let slow: ClientJsonRpcMessage =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":1,"method":"slow"}"#).unwrap();
        let ping: ClientJsonRpcMessage =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).unwrap();
        assert!(transport.send(slow).await.is_ok(), "counted as sent");
        assert!(transport.send(ping).await.is_ok(), "sent");
        let posted = |method: &str| {
            seen.lock()
                .unwrap()
                .iter()
                .any(|r| r.method == "POST" && r.body.contains(method))
        };
        assert!(posted("\"ping\""), "the ping reached the server");
        assert!(posted("\"slow\""));
    }

    /// A POST answered with a 302 is not resent as a GET (which would drop the message and
    /// count it as delivered): the redirect comes back as the POST's failure.
    #[tokio::test]
    async fn a_post_redirected_by_a_302_is_not_followed() {
        let (url, seen) = fake_server(Arc::new(|req: &Request, _| match req.method.as_str() {
            "GET" if req.path.starts_with("/sse") => {
                stream("event: endpoint\ndata: /message?sessionId=s1\n\n", true)
            }
            "GET" => reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"),
            _ => reply("HTTP/1.1 302 Found\r\nLocation: /other\r\nContent-Length: 0\r\n"),
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let message: ClientJsonRpcMessage = serde_json::from_str(PING).unwrap();
        let sent = transport.send(message).await;
        assert!(sent.is_err(), "{sent:?}");
        assert!(
            seen.lock().unwrap().iter().all(|r| r.path != "/other"),
            "followed"
        );
    }

    /// A request whose POST fails after it counted as sent is answered with the failure: its
    /// caller does not wait out its own deadline for an answer that cannot come.
    #[tokio::test]
    async fn a_post_failing_after_it_counted_as_sent_answers_its_request() {
        let (url, _) = fake_server(Arc::new(|req: &Request, _| match req.method.as_str() {
            "GET" => stream("event: endpoint\ndata: /message?sessionId=s1\n\n", true),
            _ => Reply {
                head: "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n",
                body: String::new(),
                hold: false,
                delay: POST_ANSWER_WAIT + Duration::from_secs(1),
            },
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let message: ClientJsonRpcMessage = serde_json::from_str(PING).unwrap();
        assert!(transport.send(message).await.is_ok(), "counted as sent");
        let answer = tokio::time::timeout(Duration::from_secs(10), transport.receive())
            .await
            .expect("answered before the POST's own limit")
            .expect("an answer");
        let ServerJsonRpcMessage::Error(error) = answer else {
            panic!("an error: {answer:?}");
        };
        assert_eq!(error.id, Some(rmcp::model::RequestId::Number(1)));
        assert!(
            error.error.message.contains("500"),
            "{}",
            error.error.message
        );
    }

    #[tokio::test]
    async fn posts_to_the_endpoint_and_receives_message_events() {
        let (url, seen) = fake_server(Arc::new(|req: &Request, _| match req.method.as_str() {
            "GET" => stream(
                &format!("event: endpoint\ndata: /message?sessionId=s1\n\ndata: {PING}\n\n"),
                true,
            ),
            _ => Reply {
                head: "HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\nConnection: close\r\n",
                body: "Accepted".into(),
                hold: false,
                delay: Duration::ZERO,
            },
        }))
        .await;
        let mut transport = LegacySseTransport::open(
            client(&[("Authorization", "Bearer t0ken")]),
            url,
            "t".into(),
        )
        .await
        .expect("opens");
        let first = transport.receive().await.expect("the early message");
        assert!(serde_json::to_string(&first).unwrap().contains("ping"));
        for id in 1..=3 {
            let message: ClientJsonRpcMessage = serde_json::from_value(
                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}),
            )
            .unwrap();
            transport.send(message).await.expect("posted");
        }
        let seen = seen.lock().unwrap().clone();
        let get = &seen[0];
        assert_eq!(get.header("accept"), Some("text/event-stream"));
        assert_eq!(get.header("authorization"), Some("Bearer t0ken"));
        let posts: Vec<_> = seen.iter().filter(|r| r.method == "POST").collect();
        assert_eq!(posts.len(), 3);
        for (i, post) in posts.iter().enumerate() {
            assert_eq!(post.path, "/message?sessionId=s1");
            assert_eq!(post.header("content-type"), Some("application/json"));
            assert_eq!(post.header("authorization"), Some("Bearer t0ken"));
            assert!(post.body.contains(&format!("\"id\":{}", i + 1)), "in order");
        }
        transport.close().await.unwrap();
        assert!(transport.receive().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_stream_is_reopened_with_last_event_id_then_given_up() {
        let (url, seen) = fake_server(Arc::new(|_: &Request, gets| {
            if gets == 0 {
                stream(
                    &format!(
                        "retry: 10\nevent: endpoint\ndata: /m?s=1\n\nid: 41\ndata: {PING}\n\n"
                    ),
                    false,
                )
            } else {
                // Same session, then dropped at once.
                stream("event: endpoint\ndata: /m?s=1\n\n", false)
            }
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        assert!(transport.receive().await.is_some());
        let end = tokio::time::timeout(Duration::from_secs(10), transport.receive())
            .await
            .expect("the session ends after the reconnects");
        assert!(end.is_none());
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1 + MAX_RECONNECTS as usize);
        assert!(
            seen[1..]
                .iter()
                .all(|r| r.header("last-event-id") == Some("41"))
        );
        assert_eq!(seen[0].header("last-event-id"), None);
    }

    /// `retry: 0` and a message on every re-opened stream before it drops: the reconnects
    /// still wait (at least 100 ms, doubling) and still give up — a message on a stream that
    /// stayed up only a moment is no sign of health.
    #[tokio::test]
    async fn a_server_dropping_each_reopened_stream_after_a_message_is_given_up() {
        let (url, seen) = fake_server(Arc::new(|_: &Request, _| {
            stream(
                &format!("retry: 0\nevent: endpoint\ndata: /m?s=1\n\ndata: {PING}\n\n"),
                false,
            )
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            while transport.receive().await.is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "the reconnects never ended");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1 + MAX_RECONNECTS as usize);
    }

    #[tokio::test]
    async fn a_new_endpoint_after_reconnect_ends_the_session() {
        let (url, seen) = fake_server(Arc::new(|_: &Request, gets| {
            stream(
                &format!("retry: 1\nevent: endpoint\ndata: /m?s={gets}\n\n"),
                gets > 0,
            )
        }))
        .await;
        let mut transport = LegacySseTransport::open(client(&[]), url, "t".into())
            .await
            .expect("opens");
        let end = tokio::time::timeout(Duration::from_secs(10), transport.receive())
            .await
            .expect("the session ends");
        assert!(end.is_none());
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn open_errors_are_classified() {
        let (url, seen) = fake_server(Arc::new(|req: &Request, _| match req.path.as_str() {
            "/sse" => reply("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n"),
            "/json" => Reply {
                head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n",
                body: "{}".into(),
                hold: false,
                delay: Duration::ZERO,
            },
            _ => stream("event: endpoint\ndata: http://elsewhere.test/m\n\n", true),
        }))
        .await;
        let err = LegacySseTransport::open(client(&[("X-Key", "s3cret")]), url.clone(), "t".into())
            .await
            .err()
            .expect("401");
        assert!(err.needs_auth(), "{err}");
        assert!(!err.to_string().contains("s3cret"));
        let err = LegacySseTransport::open(client(&[]), url.join("/json").unwrap(), "t".into())
            .await
            .err()
            .expect("not an event stream");
        assert!(err.to_string().contains("text/event-stream"), "{err}");
        let err = LegacySseTransport::open(client(&[]), url.join("/other").unwrap(), "t".into())
            .await
            .err()
            .expect("foreign endpoint");
        assert!(err.retryable(), "the server's doing: tried again later");
        assert!(err.to_string().contains("another origin"), "{err}");
        assert!(
            seen.lock().unwrap().iter().all(|r| r.method == "GET"),
            "nothing was posted"
        );
    }
}

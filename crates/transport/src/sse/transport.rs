//! The legacy HTTP+SSE transport (protocol 2024-11-05), which rmcp 3.11 no longer ships.
//!
//! The client GETs an event stream (`Accept: text/event-stream`). The server's first `endpoint`
//! event names a URL (often relative, e.g. `/message?sessionId=…`) to which the client POSTs
//! each JSON-RPC message (`Content-Type: application/json`); the server's messages arrive as
//! `message` events on the stream. [`LegacySseTransport`] implements rmcp's
//! `Transport<RoleClient>` over that pair and is handed to [`initialize`] like every other
//! transport.
//!
//! Invariants:
//! - messages are POSTed only to an endpoint on the SSE URL's origin (scheme, host, port); an
//!   endpoint elsewhere is refused before anything is sent, so the configured headers never
//!   leave that origin (redirects are followed only within it, at most 5);
//! - every `message` event is decoded through [`Inbound`]: an undecodable answer fails its
//!   request at once, an answer to no request is logged and counted;
//! - configured header values are marked sensitive and appear in no log or error; URLs in
//!   errors and logs lose their query and user info;
//! - one SSE event is at most the server's `maxMessageBytes` (default 64 MiB; a parser made
//!   without one, [`MAX_EVENT_BYTES`]); a larger one ends the stream with an
//!   error saying so;
//! - a dropped stream is re-opened at most [`MAX_RECONNECTS`] times in a row (the count restarts
//!   when a `message` arrives), after exponential backoff starting at the server's `retry:` (or
//!   500 ms), with `Last-Event-ID`. A re-opened stream that announces a *different* endpoint
//!   means the server started a new session: the old one is gone, so the session ends. When the
//!   stream cannot be kept, `receive` returns `None`, rmcp closes the service and the session's
//!   owner sees the closure;
//! - POSTs go out one at a time in the order rmcp sends them (legacy servers answer 202 at
//!   once; the answer comes on the stream), each within [`POST_TIMEOUT`]; a 404/410 means the
//!   server forgot the session, which ends it;
//! - everything the transport starts (a stream reader task and a POST task) stops when the
//!   transport is closed or dropped.

use std::collections::BTreeMap;
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

use crate::connector::{BoxFuture, ConnectOptions, Connector, Session, initialize};
use crate::endpoint::shown;
use crate::error::TransportError;
use crate::handler::HarnessClient;
use crate::inbound::Inbound;
use crate::net::describe_request as describe;
use crate::wire::WireNotes;

/// The most bytes one SSE event (its lines, before dispatch) may take.
pub const MAX_EVENT_BYTES: usize = 16 << 20;
/// How many times in a row a dropped event stream is re-opened before the session ends.
pub const MAX_RECONNECTS: u32 = 5;
/// The first reconnect delay when the server sent no `retry:`.
const DEFAULT_RETRY: Duration = Duration::from_millis(500);
/// Backoff never grows beyond this (unless the server's own `retry:` is longer).
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A POST must be answered within this.
pub const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Server messages buffered between the stream reader and rmcp.
const INBOUND_BUFFER: usize = 256;

/// Connects to a legacy HTTP+SSE server (`type: "sse"`).
///
/// How it meets the [`Connector`] obligations:
/// - deadline: opening the stream and waiting for the `endpoint` event run under
///   `startup_timeout`; [`initialize`] gets what is left of it (a timeout in either reports the
///   whole configured deadline);
/// - ownership: until initialize starts, the response stream lives in the connect future and
///   is dropped with it; afterwards the reader and POST tasks are tied to the transport by a
///   cancellation guard, and the transport is owned by the rmcp service inside the [`Session`]
///   (or dropped by rmcp when initialize fails);
/// - errors: every failure is a [`TransportError`]; a 401/403 on the GET is
///   `Initialize { auth_required: true }` (on a POST during initialize, rmcp classifies it the
///   same way through [`AuthRequiredError`]); an endpoint on another origin is `InvalidConfig`
///   (retrying cannot help);
/// - secrets: header values are sensitive `HeaderValue`s, never formatted; URLs are shown
///   without query or user info.
#[derive(Debug, Clone)]
pub struct LegacySseConnector {
    /// The SSE stream URL (e.g. `http://host:3001/sse`).
    pub url: String,
    /// Sent with every request, GET and POST (e.g. `Authorization`). Values are never logged.
    pub headers: BTreeMap<String, String>,
}

impl LegacySseConnector {
    fn client(&self) -> Result<reqwest::Client, TransportError> {
        let headers = crate::endpoint::header_map(&self.headers)?;
        // Follow redirects only within the origin: the headers must not travel elsewhere.
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if same_origin && attempt.previous().len() <= 5 {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        reqwest::Client::builder()
            .default_headers(headers)
            .redirect(redirects)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| {
                TransportError::InvalidConfig(format!("could not build the HTTP client: {e}"))
            })
    }
}

impl Connector for LegacySseConnector {
    fn kind(&self) -> &'static str {
        "sse"
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>> {
        let this = self.clone();
        Box::pin(async move {
            let url = crate::endpoint::http_url(&this.url)?;
            let client = this.client()?;
            let started = tokio::time::Instant::now();
            let timed_out = || TransportError::StartupTimeout {
                timeout: options.startup_timeout,
                stderr_tail: None,
            };
            let transport = tokio::time::timeout(
                options.startup_timeout,
                LegacySseTransport::open_observed(client, url, options.inbound(true)),
            )
            .await
            .map_err(|_| timed_out())??;
            let mut rest = options.clone();
            rest.startup_timeout = options.startup_timeout.saturating_sub(started.elapsed());
            match initialize(handler, transport, &rest, None, None).await {
                Err(TransportError::StartupTimeout { .. }) => Err(timed_out()),
                other => other,
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The SSE parser (https://html.spec.whatwg.org/multipage/server-sent-events.html#parsing-an-event-stream)

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` type; `message` when the event named none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event ID in force when this event was dispatched, if any.
    pub id: Option<String>,
}

/// Why a stream could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error(
        "an SSE event is larger than {} MiB, the most one event may be; the stream was abandoned",
        .limit >> 20
    )]
    EventTooLarge { limit: usize },
}

/// An incremental SSE parser: feed it chunks as they arrive, in any split.
#[derive(Debug)]
pub struct SseParser {
    limit: usize,
    /// The current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF of the next chunk belongs to it.
    after_cr: bool,
    /// Whether the first line of this stream was seen (a BOM may precede it).
    seen_first_line: bool,
    event: String,
    data: String,
    last_event_id: String,
    retry: Option<Duration>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser that refuses events larger than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit,
            line: Vec::new(),
            after_cr: false,
            seen_first_line: false,
            event: String::new(),
            data: String::new(),
            last_event_id: String::new(),
            retry: None,
        }
    }

    /// The last event ID seen (what a reconnect sends as `Last-Event-ID`), if any.
    pub fn last_event_id(&self) -> Option<&str> {
        (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str())
    }

    /// The reconnection time the server asked for with `retry:`, if any.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Starts a new stream (after a reconnect): a partial event is discarded, the last event ID
    /// and the reconnection time are kept.
    pub fn restart(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.seen_first_line = false;
        self.event.clear();
        self.data.clear();
    }

    /// Parses `chunk`, appending every event it completes to `out`.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        while !chunk.is_empty() {
            if std::mem::take(&mut self.after_cr) && chunk[0] == b'\n' {
                chunk = &chunk[1..];
                continue;
            }
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.push_line_bytes(&chunk[..end])?;
                    self.after_cr = chunk[end] == b'\r';
                    chunk = &chunk[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.process_line(&line)? {
                        out.push(event);
                    }
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    self.push_line_bytes(chunk)?;
                    break;
                }
            }
        }
        Ok(())
    }

    fn too_large(&self) -> SseError {
        SseError::EventTooLarge { limit: self.limit }
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() + self.data.len() + self.event.len() > self.limit {
            return Err(self.too_large());
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn process_line(&mut self, mut line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if !std::mem::replace(&mut self.seen_first_line, true) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line[0] == b':' {
            return Ok(None); // a comment (keep-alive)
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.data.len() + value.len() + 1 + self.event.len() > self.limit {
                    return Err(self.too_large());
                }
                self.data.push_str(&value);
                self.data.push('\n');
            }
            b"id" if !value.contains('\0') => self.last_event_id = value.into_owned(),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {} // unknown fields are ignored
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id: self.last_event_id().map(str::to_string),
        })
    }
}

/// Resolves the data of an `endpoint` event against the SSE URL; refuses an endpoint on
/// another origin (scheme, host or port).
pub fn resolve_endpoint(sse_url: &Url, data: &str) -> Result<Url, String> {
    let data = data.trim();
    if data.is_empty() {
        return Err("the server's `endpoint` event names no URL".into());
    }
    let endpoint = sse_url
        .join(data)
        .map_err(|e| format!("the server's `endpoint` event is not a URL ({e})"))?;
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

// ---------------------------------------------------------------------------------------------
// The transport

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// Why the event stream could not be opened.
enum OpenError {
    Request(String),
    Auth(StatusCode),
    Status(StatusCode),
    NotEventStream(String),
}

impl OpenError {
    fn into_transport_error(self, url: &Url) -> TransportError {
        let url = shown(url);
        let (message, auth_required) = match self {
            OpenError::Request(e) => (
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
    let response = request
        .send()
        .await
        .map_err(|e| OpenError::Request(describe(&e)))?;
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
pub enum LegacySseError {
    #[error("could not encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("POST to the message endpoint failed: {0}")]
    Post(String),
    #[error("the message endpoint answered {status}: the server requires authorization")]
    Unauthorized {
        status: StatusCode,
        #[source]
        source: AuthRequiredError,
    },
    #[error("the message endpoint answered {status}: the server no longer knows this session")]
    SessionGone { status: StatusCode },
    #[error("the message endpoint answered {status}")]
    Rejected { status: StatusCode },
    #[error("the SSE session is closed")]
    Closed,
}

struct Post {
    message: ClientJsonRpcMessage,
    done: oneshot::Sender<Result<(), LegacySseError>>,
}

/// rmcp's `Transport<RoleClient>` over a legacy HTTP+SSE session.
pub struct LegacySseTransport {
    inbound: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Notes each request sent, so answers to no request are recognised.
    decoder: Inbound,
    posts: mpsc::UnboundedSender<Post>,
    cancel: CancellationToken,
    _stop_tasks: DropGuard,
}

impl LegacySseTransport {
    /// Opens the event stream, waits for the `endpoint` event and starts the reader and POST
    /// tasks. Not bounded in time: the caller puts a deadline around it.
    pub async fn open(
        client: reqwest::Client,
        sse_url: Url,
        server: String,
    ) -> Result<Self, TransportError> {
        let inbound = Inbound::new(
            &server,
            crate::inbound::DEFAULT_MAX_MESSAGE_BYTES,
            WireNotes::default(),
            true,
        );
        Self::open_observed(client, sse_url, inbound).await
    }

    /// [`Self::open`], decoding every message through `inbound` (which shows it to its wire
    /// notes, holds it to its size cap and fails the request an undecodable one answers).
    pub async fn open_observed(
        client: reqwest::Client,
        sse_url: Url,
        inbound: Inbound,
    ) -> Result<Self, TransportError> {
        let server = inbound.server().to_string();
        let (mut stream, base) = get_stream(&client, &sse_url, None)
            .await
            .map_err(|e| e.into_transport_error(&sse_url))?;
        // The cap plus room for the event's framing (`data:` prefixes).
        let mut parser = SseParser::with_limit(inbound.limit().saturating_add(1024));
        let mut early = Vec::new();
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
                    message: e.to_string(),
                    auth_required: false,
                    stderr_tail: None,
                })?;
            for event in events.drain(..) {
                match event.event.as_str() {
                    "endpoint" if endpoint.is_none() => {
                        // `base` is where the stream came from after same-origin redirects.
                        let url = resolve_endpoint(&base, &event.data)
                            .map_err(TransportError::InvalidConfig)?;
                        endpoint = Some(url);
                    }
                    "message" => early.extend(inbound.decode(event.data.as_bytes(), None)),
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
        tokio::spawn(reader.run(stream, early));
        tokio::spawn(post_loop(client, endpoint, post_rx, cancel.clone(), server));
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
            result.await.unwrap_or(Err(LegacySseError::Closed))
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
            let why = match self.pump(&mut stream, &mut failures).await {
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

    async fn pump(&mut self, stream: &mut ByteStream, failures: &mut u32) -> StreamEnd {
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
            if let Err(e) = self.parser.feed(&bytes, &mut events) {
                return StreamEnd::Fatal(e.to_string());
            }
            for event in std::mem::take(&mut events) {
                match event.event.as_str() {
                    "message" => {
                        *failures = 0;
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

/// The delay before reconnect `attempt` (1-based): the server's `retry:` (or 500 ms), doubled
/// per attempt, at most 30 s (or the server's `retry:` when that is longer).
fn backoff(retry: Option<Duration>, attempt: u32) -> Duration {
    let base = retry.unwrap_or(DEFAULT_RETRY);
    let grown = base.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    grown.min(MAX_BACKOFF.max(base))
}

async fn post_loop(
    client: reqwest::Client,
    endpoint: Url,
    mut posts: mpsc::UnboundedReceiver<Post>,
    cancel: CancellationToken,
    server: String,
) {
    loop {
        let post = tokio::select! {
            () = cancel.cancelled() => return,
            post = posts.recv() => match post {
                Some(post) => post,
                None => return,
            },
        };
        let result = tokio::select! {
            () = cancel.cancelled() => Err(LegacySseError::Closed),
            result = post_one(&client, &endpoint, &post.message) => result,
        };
        if let Err(e @ LegacySseError::SessionGone { .. }) = &result {
            tracing::warn!(server = %server, "legacy SSE session ends: {e}");
            cancel.cancel();
        }
        let _ = post.done.send(result);
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
        .map_err(|e| LegacySseError::Post(describe(&e)))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> (Vec<SseEvent>, SseParser) {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out).expect("parses");
        }
        (out, parser)
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(str::to_string),
        }
    }

    #[test]
    fn parses_fields_multiline_data_and_comments() {
        let (events, parser) = parse_all(&[b": keep-alive\n\
              event: endpoint\ndata: /message?sessionId=1\n\n\
              data: {\"a\":\ndata:1}\nid: 7\nretry: 2500\n\n\
              data\n\n\
              data:  two spaces\nfoo: ignored\n\n\
              event: only-type\n\n\
              data: tail without end"]);
        assert_eq!(
            events,
            vec![
                ev("endpoint", "/message?sessionId=1", None),
                ev("message", "{\"a\":\n1}", Some("7")),
                ev("message", "", Some("7")),
                ev("message", " two spaces", Some("7")),
            ]
        );
        assert_eq!(parser.last_event_id(), Some("7"));
        assert_eq!(parser.retry(), Some(Duration::from_millis(2500)));
    }

    #[test]
    fn any_line_ending_and_any_split() {
        let text = b"\xEF\xBB\xBFdata: a\r\ndata: b\rid: x\n\r\nevent: e\rdata: c\r\r";
        let whole = parse_all(&[text]).0;
        assert_eq!(
            whole,
            vec![ev("message", "a\nb", Some("x")), ev("e", "c", Some("x"))]
        );
        // Byte by byte (a CR at the end of one chunk and an LF at the start of the next).
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse_all(&bytes).0, whole);
        for split in 1..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(parse_all(&[a, b]).0, whole, "split at {split}");
        }
    }

    #[test]
    fn id_and_retry_rules() {
        let (events, parser) =
            parse_all(&[b"id: 1\ndata: a\n\nid: bad\0id\nretry: 1.5\nretry: x\ndata: b\n\n"]);
        assert_eq!(
            events[1].id.as_deref(),
            Some("1"),
            "an id with NUL is ignored"
        );
        assert_eq!(parser.retry(), None, "a non-integer retry is ignored");
        let (events, parser) = parse_all(&[b"id: 1\ndata: a\n\nid\ndata: b\n\n"]);
        assert_eq!(events[1].id, None, "an empty id resets it");
        assert_eq!(parser.last_event_id(), None);
    }

    #[test]
    fn restart_keeps_id_and_retry_but_drops_a_partial_event() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        parser
            .feed(b"id: 9\nretry: 10\ndata: done\n\ndata: half", &mut out)
            .expect("parses");
        parser.restart();
        parser
            .feed(b"\n\ndata: next\n\n", &mut out)
            .expect("parses");
        assert_eq!(
            out,
            vec![
                ev("message", "done", Some("9")),
                ev("message", "next", Some("9"))
            ]
        );
        assert_eq!(parser.retry(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn an_event_over_the_limit_is_an_error_naming_it() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        let line = vec![b'x'; 1 << 20];
        parser.feed(b"data: ", &mut out).expect("parses");
        let mut result = Ok(());
        for _ in 0..17 {
            result = parser.feed(&line, &mut out);
            if result.is_err() {
                break;
            }
        }
        let err = result.expect_err("too large");
        assert!(err.to_string().contains("16 MiB"), "{err}");
        // Many data lines add up too.
        let mut parser = SseParser::with_limit(100);
        let err = parser
            .feed(&b"data: 0123456789\n".repeat(10), &mut out)
            .expect_err("too large");
        assert_eq!(err, SseError::EventTooLarge { limit: 100 });
        // Events below the limit pass however many there are.
        let mut parser = SseParser::with_limit(100);
        parser
            .feed(&b"data: 0123456789\n\n".repeat(100), &mut out)
            .expect("each event is small");
    }

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
            Duration::from_millis(160)
        );
        assert_eq!(backoff(None, 40), MAX_BACKOFF);
        assert_eq!(
            backoff(Some(Duration::from_secs(60)), 3),
            Duration::from_secs(60)
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
    }

    fn stream(body: &str, hold: bool) -> Reply {
        Reply {
            head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n",
            body: body.into(),
            hold,
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
                    let _ = socket
                        .write_all(format!("{}\r\n{}", reply.head, reply.body).as_bytes())
                        .await;
                    if reply.hold {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                });
            }
        });
        (url, seen)
    }

    fn client(headers: &[(&str, &str)]) -> reqwest::Client {
        LegacySseConnector {
            url: String::new(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
        .client()
        .unwrap()
    }

    const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

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
            "/sse" => Reply {
                head: "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n",
                body: String::new(),
                hold: false,
            },
            "/json" => Reply {
                head: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n",
                body: "{}".into(),
                hold: false,
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
        assert!(!err.retryable());
        assert!(err.to_string().contains("another origin"), "{err}");
        assert!(
            seen.lock().unwrap().iter().all(|r| r.method == "GET"),
            "nothing was posted"
        );
    }
}

//! The gateway's own HTTP/1.1 server side: one accepted connection read and written here,
//! each request handed to its service whole, each answer written as its body becomes ready.
//!
//! Why: hyper's server dispatcher, its body channel and the service adapters around it were a
//! large share of the code a call runs through (see the README's benchmark section); a
//! request-response loop over one buffer each way does the same job for what the gateway
//! serves — bodies of a bounded size, answers of a known length or event streams.
//!
//! Invariants:
//! - nothing read grows without bound: a request head is at most [`MAX_HEAD`] bytes and
//!   [`MAX_HEADERS`] headers, a chunk-size line at most [`MAX_LINE`], trailers at most
//!   [`MAX_HEAD`], a body at most the connection's `max_body` (413 beyond, before the service
//!   sees it), and what a client sends ahead while its request is served at most
//!   [`MAX_AHEAD`];
//! - a head started and not finished within `head_timeout` closes the connection, a body of
//!   which nothing more arrives for `head_timeout`, or which arrives slower than
//!   [`MIN_BODY_RATE`] once its first `head_timeout` is over, gets 408; an idle connection (no
//!   request started) is closed after `idle_timeout` without one (timed by one timer per connection,
//!   armed again only when it fires), or when the server stops;
//! - a request the connection cannot read (a malformed head, an unreadable body framing, a head
//!   or body over its limit) gets a plain-text 4xx naming what was wrong and closes the
//!   connection; nothing of it reaches the service;
//! - a client that closes its connection while its request is served or its answer streams
//!   drops the request's future and its body, as hyper does without half-close: what the
//!   service does for it is cancelled unless the body hands it on when dropped (a direct
//!   call's event stream does, for a resumption);
//! - an answer goes out with `content-length` when its body's size is known, else chunked
//!   (HTTP/1.1) or delimited by the connection's close (HTTP/1.0); the frames a body has ready
//!   go out in one write with its head, and nothing ready is held back;
//! - after `stop` no new request is read: an idle connection closes at once, a busy one after
//!   its answer (which says `connection: close`).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{CONNECTION, CONTENT_LENGTH, DATE, EXPECT, HOST, TRANSFER_ENCODING};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, Version};
use axum::response::Response;
use bytes::{Buf as _, Bytes, BytesMut};
use futures::FutureExt as _;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use mcp_harness_runtime::transport::http1::{
    BadHeader, BodyEnd, LengthError, body_end, chunk_size, has_token, header_map,
};

use crate::hold::HoldClock;

/// The largest request head, and the most bytes of a chunked body's trailers.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most headers of a request.
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest chunk-size line of a chunked body.
pub(crate) const MAX_LINE: usize = 4 * 1024;
/// The most bytes read ahead of the request being served (a pipelined next request).
pub(crate) const MAX_AHEAD: usize = 64 * 1024;
/// How much is read at a time.
const READ: usize = 8 * 1024;
/// A connection's buffer larger than this after a request (a large body read through it) is
/// let go, so a connection idle after one large request holds no more than one that sent small
/// ones.
const KEEP_BETWEEN: usize = 64 * 1024;
/// A body chunk at least this large is written on its own rather than copied behind the head.
const WRITE_THROUGH: usize = 16 * 1024;
/// How long a connection closed after a refusal keeps reading (and dropping) what the client
/// still sends, so its kernel does not reset the connection before the refusal is read.
const LINGER: Duration = Duration::from_secs(2);
/// The most bytes dropped that way.
const LINGER_BYTES: usize = 64 << 20;
/// The slowest a request body may arrive, in bytes a second, once its first `head_timeout` is
/// over (Apache's `RequestReadTimeout body=20,MinRate=500` rule): a body trickled just fast
/// enough never to stall would otherwise hold its connection for as long as its client likes.
pub(crate) const MIN_BODY_RATE: usize = 500;

/// What one connection is allowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// How long a started request head may take to arrive, the longest wait for more of a
    /// request's body, and the longest a client may leave an answer unread (a write that makes
    /// no progress for this long closes the connection: a client that reads nothing holds no
    /// connection, and no answer, for good).
    pub(crate) head_timeout: Duration,
    /// How long the connection stays open with no request in progress.
    pub(crate) idle_timeout: Duration,
    /// The largest request body.
    pub(crate) max_body: usize,
}

/// A request the connection refuses without the service: the status and a line saying why
/// (no status: the client closed the connection in the middle of it, nobody to answer).
#[derive(Debug)]
struct Refusal {
    status: Option<StatusCode>,
    why: String,
    /// Seconds the client should wait before it tries again (`Retry-After`).
    retry_after: Option<u64>,
}

impl Refusal {
    /// The answer saying it: `status`, a line of text, `Retry-After` when it has one.
    fn answer(&self, status: StatusCode) -> Response<String> {
        let mut answer = Response::new(format!("{status}: {}\n", self.why));
        *answer.status_mut() = status;
        let headers = answer.headers_mut();
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        answer
    }
}

fn refusal(status: StatusCode, why: impl Into<String>) -> Refusal {
    Refusal {
        status: Some(status),
        why: why.into(),
        retry_after: None,
    }
}

fn bad_request(why: impl Into<String>) -> Refusal {
    refusal(StatusCode::BAD_REQUEST, why)
}

/// How a request's body ends.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    /// After this many bytes.
    Length(usize),
    /// With its last chunk.
    Chunked,
}

/// A request's head as the connection read it.
struct Head {
    request: Request<()>,
    framing: Framing,
    /// The client waits for `100 Continue` before sending the body.
    expects_continue: bool,
    /// The connection may carry another request after this one.
    keep_alive: bool,
}

/// What answers the requests a connection reads, each with its body read whole.
pub(crate) trait Service: Clone + Send + 'static {
    /// The answer to `request`, whose body is `body`.
    fn call(&mut self, request: Request<()>, body: Bytes) -> impl Future<Output = Response> + Send;
}

impl Service for axum::Router {
    fn call(&mut self, request: Request<()>, body: Bytes) -> impl Future<Output = Response> + Send {
        let (parts, ()) = request.into_parts();
        // A router is always ready (axum's `poll_ready` returns `Ready` at once).
        let answer = tower::Service::call(self, Request::from_parts(parts, Body::from(body)));
        answer.map(|answer| match answer {
            Ok(answer) => answer,
            Err(never) => match never {},
        })
    }
}

/// Serves `socket` until the client closes it, a request cannot be read, or `stop`: every
/// request goes to `service` with the connection's hold timer in its extensions.
pub(crate) async fn serve<S: Service>(
    mut socket: TcpStream,
    service: S,
    limits: Limits,
    stop: CancellationToken,
) {
    let clock = Arc::new(HoldClock::new());
    let (mut reader, mut writer) = socket.split();
    let mut connection = Connection::new(&mut reader, &mut writer, limits);
    if let Err(error) = connection.run(service, clock, &stop).await {
        tracing::debug!(%error, "an HTTP connection ended with an error");
    }
}

/// Answers whatever `socket` sends with 503 saying `why` and closes it: a connection over the
/// server's limit.
pub(crate) async fn turn_away(mut socket: TcpStream, limits: Limits, why: String) {
    let (mut reader, mut writer) = socket.split();
    let mut connection = Connection::new(&mut reader, &mut writer, limits);
    let refusal = Refusal {
        retry_after: Some(1),
        ..refusal(StatusCode::SERVICE_UNAVAILABLE, why)
    };
    if let Err(error) = connection.refuse(refusal).await {
        tracing::debug!(%error, "turning a connection away failed");
    }
}

/// One connection's two directions and buffers.
struct Connection<'a, R, W> {
    reader: &'a mut R,
    writer: &'a mut W,
    /// Read and not yet used.
    input: BytesMut,
    /// Made and not yet written.
    output: Vec<u8>,
    limits: Limits,
    /// Fires at the latest `idle_timeout` after `active`; armed again, not made anew, when it
    /// fires early (no timer is registered per request).
    idle: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// When the connection last finished an answer (or opened).
    active: tokio::time::Instant,
    /// When the body being read started, and how much of it has arrived since (see
    /// [`MIN_BODY_RATE`]).
    body: (tokio::time::Instant, usize),
}

/// How serving one request ended.
enum Served {
    /// The connection may read the next request.
    Again,
    /// The connection closes (the client's wish, HTTP/1.0, a refusal, the client gone).
    Close,
}

impl<'a, R, W> Connection<'a, R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    fn new(reader: &'a mut R, writer: &'a mut W, limits: Limits) -> Self {
        Self {
            reader,
            writer,
            // Both grow at their first use: an idle connection holds no more than it read.
            input: BytesMut::new(),
            output: Vec::new(),
            limits,
            idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
            active: tokio::time::Instant::now(),
            body: (tokio::time::Instant::now(), 0),
        }
    }

    async fn run<S: Service>(
        &mut self,
        mut service: S,
        clock: Arc<HoldClock>,
        stop: &CancellationToken,
    ) -> std::io::Result<()> {
        loop {
            let head = tokio::select! {
                biased;
                () = stop.cancelled(), if self.input.is_empty() => return Ok(()),
                head = self.read_head() => head,
            };
            let head = match head {
                Ok(Some(head)) => head,
                Ok(None) => return Ok(()),
                Err(refusal) => return self.refuse(refusal).await,
            };
            // No `100 Continue` for no body, or one refused unread.
            let wanted = match head.framing {
                Framing::Length(n) => n > 0 && n <= self.limits.max_body,
                Framing::Chunked => true,
            };
            if head.expects_continue && wanted && self.input.is_empty() {
                self.send(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            }
            let body = match self.read_body(&head.framing).await {
                Ok(body) => body,
                Err(refusal) => return self.refuse(refusal).await,
            };
            let mut request = head.request;
            request.extensions_mut().insert(clock.clone());
            match self
                .exchange(&mut service, request, body, head.keep_alive, stop)
                .await?
            {
                Served::Again if !stop.is_cancelled() => {
                    self.active = tokio::time::Instant::now();
                    self.shed();
                }
                _ => return self.writer.shutdown().await,
            }
        }
    }

    /// Lets go of buffers a large request or answer grew past [`KEEP_BETWEEN`], keeping what
    /// was read ahead.
    fn shed(&mut self) {
        if self.input.capacity() > KEEP_BETWEEN {
            self.input = BytesMut::from(&self.input[..]);
        }
        if self.output.capacity() > KEEP_BETWEEN {
            self.output = Vec::new();
        }
    }

    /// The next request's head; `None` when the client closed the connection between requests.
    async fn read_head(&mut self) -> Result<Option<Head>, Refusal> {
        let mut deadline = None;
        loop {
            if !self.input.is_empty() {
                if let Some(head) = self.parse_head()? {
                    return Ok(Some(head));
                }
                if self.input.len() >= MAX_HEAD {
                    return Err(refusal(
                        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                        format!("the request head is larger than {} KiB", MAX_HEAD / 1024),
                    ));
                }
            }
            let read = match deadline {
                None if self.input.is_empty() => match self.read_idle().await {
                    Some(read) => read,
                    None => {
                        tracing::debug!("an idle connection closed at the idle timeout");
                        return Ok(None);
                    }
                },
                _ => {
                    let at = *deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + self.limits.head_timeout
                    });
                    match tokio::time::timeout_at(at, self.read_more()).await {
                        Ok(read) => read,
                        Err(_) => {
                            return Err(refusal(
                                StatusCode::REQUEST_TIMEOUT,
                                format!(
                                    "the request head did not arrive in full within {} s",
                                    self.limits.head_timeout.as_secs_f64()
                                ),
                            ));
                        }
                    }
                }
            };
            match read {
                Ok(0) if self.input.is_empty() => return Ok(None),
                Ok(0) => {
                    tracing::debug!("the client closed the connection in a request head");
                    return Ok(None);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "reading a request head failed");
                    return Ok(None);
                }
            }
        }
    }

    /// The head at the start of the input, taken out of it; `None` while it is incomplete.
    fn parse_head(&mut self) -> Result<Option<Head>, Refusal> {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut slots);
        let length = match parsed.parse(&self.input) {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(refusal(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    format!("the request has more than {MAX_HEADERS} headers"),
                ));
            }
            Err(error) => {
                return Err(bad_request(format!(
                    "the request is not HTTP/1.1 ({error})"
                )));
            }
        };
        let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
            .map_err(|_| bad_request("the request's method is not a valid token"))?;
        let uri: Uri = parsed
            .path
            .unwrap_or_default()
            .parse()
            .map_err(|_| bad_request("the request's target is not a valid URI"))?;
        let version = if parsed.version == Some(1) {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        };
        let headers = header_map(parsed.headers).map_err(|bad| match bad {
            BadHeader::Name => bad_request("the request has an invalid header name"),
            BadHeader::Value => bad_request("the request has an invalid header value"),
        })?;
        self.input.advance(length);
        // Two `Host`s: a proxy in front may have read the other (RFC 9112, 3.2).
        if headers.get_all(HOST).iter().nth(1).is_some() {
            return Err(bad_request("the request has more than one Host header"));
        }
        let framing = framing(&headers)?;
        // Both framings named: read as chunked, and the connection not trusted with another
        // request (a proxy in front may have read it the other way).
        let both = headers.contains_key(TRANSFER_ENCODING) && headers.contains_key(CONTENT_LENGTH);
        let keep_alive = !both
            && match version {
                Version::HTTP_11 => !has_token(&headers, &CONNECTION, "close"),
                _ => has_token(&headers, &CONNECTION, "keep-alive"),
            };
        let expects_continue = version == Version::HTTP_11
            && headers
                .get(EXPECT)
                .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let mut request = Request::new(());
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.version_mut() = version;
        *request.headers_mut() = headers;
        Ok(Some(Head {
            request,
            framing,
            expects_continue,
            keep_alive,
        }))
    }

    /// The request's body, whole.
    async fn read_body(&mut self, framing: &Framing) -> Result<Bytes, Refusal> {
        let max = self.limits.max_body;
        match *framing {
            Framing::Length(0) => Ok(Bytes::new()),
            Framing::Length(length) if length > max => Err(too_large(max)),
            Framing::Length(length) => {
                // Timed only when it did not all come with its head.
                if self.input.len() < length {
                    self.body = (tokio::time::Instant::now(), 0);
                }
                while self.input.len() < length {
                    self.input.reserve(length - self.input.len());
                    self.read_or_cut().await?;
                }
                Ok(self.input.split_to(length).freeze())
            }
            Framing::Chunked => self.read_chunked().await,
        }
    }

    /// A chunked body, its chunks joined; trailers read and dropped.
    async fn read_chunked(&mut self) -> Result<Bytes, Refusal> {
        let max = self.limits.max_body;
        self.body = (tokio::time::Instant::now(), 0);
        let mut body = BytesMut::new();
        loop {
            let line = self.line(MAX_LINE, "a chunk-size line").await?;
            // The minimum rate counts the body's data, not its framing: extensions do not
            // keep a slow body alive.
            self.body.1 = self.body.1.saturating_sub(line.len() + 2);
            let size = chunk_size(&line)
                .and_then(|size| usize::try_from(size).ok())
                .ok_or_else(|| bad_request("a chunk size of the request body is not hex"))?;
            if size == 0 {
                break;
            }
            if size > max - body.len() {
                return Err(too_large(max));
            }
            while self.input.len() < size + 2 {
                self.input.reserve(size + 2 - self.input.len());
                self.read_or_cut().await?;
            }
            body.extend_from_slice(&self.input[..size]);
            if &self.input[size..size + 2] != b"\r\n" {
                return Err(bad_request(
                    "a chunk of the request body does not end its line",
                ));
            }
            self.input.advance(size + 2);
            self.body.1 = self.body.1.saturating_sub(2);
        }
        // The trailers, together at most as long as a head.
        let mut trailers = 0;
        loop {
            let line = self
                .line(MAX_HEAD.saturating_sub(trailers), "the trailers")
                .await?;
            self.body.1 = self.body.1.saturating_sub(line.len() + 2);
            if line.is_empty() {
                return Ok(body.freeze());
            }
            trailers += line.len() + 2;
        }
    }

    /// The next line of the input, at most `max` bytes long without its CRLF (a bare LF ends
    /// no line of the body's framing: 400).
    async fn line(&mut self, max: usize, what: &str) -> Result<Bytes, Refusal> {
        let too_long = || {
            bad_request(format!(
                "{what} of the request body is longer than {max} bytes"
            ))
        };
        let mut searched = 0;
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.input[searched..]) {
                let end = searched + at;
                if end > max + 1 {
                    return Err(too_long());
                }
                let line = self.input.split_to(end + 1).freeze();
                return match line[..end].last() {
                    Some(b'\r') => Ok(line.slice(..end - 1)),
                    _ => Err(bad_request(format!(
                        "{what} of the request body does not end with CRLF"
                    ))),
                };
            }
            searched = self.input.len();
            if searched > max + 1 {
                return Err(too_long());
            }
            self.read_or_cut().await?;
        }
    }

    /// Reads more of a request's body; the client closing the connection then is a refusal
    /// nobody is left to read, one sending nothing for `head_timeout` gets 408, and so does one
    /// sending slower than [`MIN_BODY_RATE`] once the body's first `head_timeout` is over.
    async fn read_or_cut(&mut self) -> Result<(), Refusal> {
        let stall = self.limits.head_timeout;
        let (started, received) = self.body;
        let wait = body_wait(started, received, stall);
        match tokio::time::timeout(wait, self.read_more()).await {
            Ok(Ok(0) | Err(_)) => Err(Refusal {
                status: None,
                retry_after: None,
                why: "the client closed the connection in a request".into(),
            }),
            Ok(Ok(read)) => {
                self.body.1 += read;
                Ok(())
            }
            Err(_) => Err(body_late(started, received, wait, stall)),
        }
    }

    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.input.reserve(READ);
        self.reader.read_buf(&mut self.input).await
    }

    /// As [`Self::read_more`] on an idle connection; `None` once it has been idle for
    /// `idle_timeout`.
    async fn read_idle(&mut self) -> Option<std::io::Result<usize>> {
        self.input.reserve(READ);
        loop {
            tokio::select! {
                biased;
                read = self.reader.read_buf(&mut self.input) => return Some(read),
                () = self.idle.as_mut() => {
                    let due = self.active + self.limits.idle_timeout;
                    if tokio::time::Instant::now() >= due {
                        return None;
                    }
                    self.idle.as_mut().reset(due);
                }
            }
        }
    }

    /// `request` (with `body`) served by `service` and its answer written; the client closing
    /// the connection meanwhile drops both.
    async fn exchange<S: Service>(
        &mut self,
        service: &mut S,
        request: Request<()>,
        body: Bytes,
        keep_alive: bool,
        stop: &CancellationToken,
    ) -> std::io::Result<Served> {
        let head_only = request.method() == Method::HEAD;
        let version = request.version();
        let answer = service.call(request, body);
        let Some(answer) = self.unless_closed(answer).await else {
            return Ok(Served::Close);
        };
        let (parts, body) = answer.into_parts();
        let bodiless = head_only
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let length = (!bodiless).then(|| body.size_hint().exact()).flatten();
        let chunked = !bodiless && length.is_none() && version == Version::HTTP_11;
        let keep_alive = keep_alive
            && !stop.is_cancelled()
            && !has_token(&parts.headers, &CONNECTION, "close")
            && (bodiless || length.is_some() || chunked);
        self.write_head(&parts, version, length, chunked, keep_alive);
        if bodiless {
            self.flush().await?;
        } else if !self.write_body(body, chunked).await? {
            return Ok(Served::Close);
        }
        Ok(if keep_alive {
            Served::Again
        } else {
            Served::Close
        })
    }

    /// `future`'s output, or `None` when the client closed the connection first. What the
    /// client sends meanwhile is kept (up to [`MAX_AHEAD`]) for the next request.
    async fn unless_closed<F: Future>(&mut self, future: F) -> Option<F::Output> {
        let mut future = pin!(future);
        loop {
            let room = self.input.len() < MAX_AHEAD;
            if room {
                self.input.reserve(READ);
            }
            tokio::select! {
                biased;
                output = &mut future => return Some(output),
                read = self.reader.read_buf(&mut self.input), if room => match read {
                    Ok(0) | Err(_) => {
                        tracing::debug!("the client closed its connection while its request was served");
                        return None;
                    }
                    Ok(_) => {}
                },
            }
        }
    }

    /// Puts the answer's head in the output.
    fn write_head(
        &mut self,
        parts: &axum::http::response::Parts,
        version: Version,
        length: Option<u64>,
        chunked: bool,
        keep_alive: bool,
    ) {
        let out = &mut self.output;
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(parts.status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        for (name, value) in &parts.headers {
            if name == CONNECTION
                || name == TRANSFER_ENCODING
                || (name == CONTENT_LENGTH && (length.is_some() || chunked))
            {
                continue;
            }
            header_line(out, name.as_str().as_bytes(), value.as_bytes());
        }
        if !parts.headers.contains_key(DATE) {
            date::put(out);
        }
        if let Some(length) = length {
            header_line(out, b"content-length", length.to_string().as_bytes());
        }
        if chunked {
            header_line(out, b"transfer-encoding", b"chunked");
        }
        if !keep_alive {
            header_line(out, b"connection", b"close");
        } else if version == Version::HTTP_10 {
            header_line(out, b"connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Writes `body` after the head in the output: each run of frames ready at once in one
    /// write. `false` when the client closed the connection meanwhile, or the body failed (the
    /// answer is then cut, and the connection closes).
    async fn write_body(&mut self, body: Body, chunked: bool) -> std::io::Result<bool> {
        let mut body = body;
        loop {
            let frame = match body.frame().now_or_never() {
                Some(frame) => frame,
                None => {
                    self.flush().await?;
                    match self.unless_closed(body.frame()).await {
                        Some(frame) => frame,
                        None => return Ok(false),
                    }
                }
            };
            let data = match frame {
                None => break,
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    // Trailers: not sent.
                    Err(_) => continue,
                },
                Some(Err(error)) => {
                    tracing::debug!(%error, "an answer's body failed; its connection closes");
                    self.flush().await?;
                    return Ok(false);
                }
            };
            if data.is_empty() {
                continue;
            }
            if chunked {
                self.output
                    .extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            }
            if data.len() >= WRITE_THROUGH {
                self.flush().await?;
                self.send(&data).await?;
            } else {
                self.output.extend_from_slice(&data);
            }
            if chunked {
                self.output.extend_from_slice(b"\r\n");
            }
        }
        if chunked {
            self.output.extend_from_slice(b"0\r\n\r\n");
        }
        self.flush().await?;
        Ok(true)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.output.is_empty() {
            let output = std::mem::take(&mut self.output);
            let sent = self.send(&output).await;
            self.output = output;
            self.output.clear();
            sent?;
        }
        Ok(())
    }

    /// Writes all of `bytes`; an error once the client has taken none of them for
    /// `head_timeout` (its connection then closes).
    async fn send(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        let stall = self.limits.head_timeout;
        while !bytes.is_empty() {
            // A write the socket takes at once (nearly all) arms no timer.
            let written = match self.writer.write(bytes).now_or_never() {
                Some(written) => written?,
                None => match tokio::time::timeout(stall, self.writer.write(bytes)).await {
                    Ok(written) => written?,
                    Err(_) => {
                        tracing::debug!("a client left its answer unread; its connection closes");
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("the client read nothing for {} s", stall.as_secs_f64()),
                        ));
                    }
                },
            };
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[written..];
        }
        Ok(())
    }

    /// Answers a request the connection could not read with `refusal`, then closes: the write
    /// side at once, the read side once the client stops sending (at most [`LINGER`] and
    /// [`LINGER_BYTES`]), so its kernel does not reset the connection over unread bytes before
    /// the client read the answer.
    async fn refuse(&mut self, refusal: Refusal) -> std::io::Result<()> {
        let Some(status) = refusal.status else {
            tracing::debug!(why = %refusal.why, "a request was cut short");
            return Ok(());
        };
        tracing::debug!(%status, why = %refusal.why, "refused a request it cannot read");
        let (parts, text) = refusal.answer(status).into_parts();
        self.write_head(
            &parts,
            Version::HTTP_11,
            Some(text.len() as u64),
            false,
            false,
        );
        self.output.extend_from_slice(text.as_bytes());
        self.flush().await?;
        self.writer.shutdown().await?;
        let mut dropped = 0;
        let _ = tokio::time::timeout(LINGER, async {
            while dropped < LINGER_BYTES {
                self.input.clear();
                match self.read_more().await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => dropped += read,
                }
            }
        })
        .await;
        Ok(())
    }
}

/// How long a request body begun at `started`, `received` bytes of it so far, may wait for
/// more: `stall` at most, and no later than its first `stall` plus a second per
/// [`MIN_BODY_RATE`] bytes it sent.
fn body_wait(started: tokio::time::Instant, received: usize, stall: Duration) -> Duration {
    let due = started + stall + Duration::from_secs_f64(received as f64 / MIN_BODY_RATE as f64);
    stall.min(due.saturating_duration_since(tokio::time::Instant::now()))
}

/// The 408 of a body whose wait ([`body_wait`]) passed with nothing more: too slow when
/// something came and the rate's deadline cut the wait short, else a stall.
fn body_late(
    started: tokio::time::Instant,
    received: usize,
    wait: Duration,
    stall: Duration,
) -> Refusal {
    let why = if received > 0 && wait < stall {
        format!(
            "the request body arrived too slowly: {received} bytes in {:.1} s; after its first {} s a body must keep up {MIN_BODY_RATE} bytes a second",
            started.elapsed().as_secs_f32(),
            stall.as_secs_f32()
        )
    } else {
        format!(
            "the request body stalled: nothing of it arrived for {} s",
            stall.as_secs_f32()
        )
    };
    refusal(StatusCode::REQUEST_TIMEOUT, why)
}

/// A request body another HTTP/1.1 server read the head of (hyper's, with
/// `MCP_HARNESS_OWN_H1=0`), read whole under this server's rules: over `limits.max_body`
/// bytes 413, nothing more for `limits.head_timeout` or slower than [`MIN_BODY_RATE`] after
/// it 408 — the same answers, each closing the connection. A body that fails (its client
/// went) gets a 400 nobody may read.
pub(crate) async fn read_whole<B>(body: B, limits: Limits) -> Result<Bytes, Response>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let max = limits.max_body;
    if body.size_hint().lower() > max as u64 {
        return Err(refused(too_large(max)));
    }
    let stall = limits.head_timeout;
    let started = tokio::time::Instant::now();
    let mut body = pin!(body);
    let mut collected = BytesMut::new();
    let mut received = 0;
    loop {
        let wait = body_wait(started, received, stall);
        let frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx));
        match tokio::time::timeout(wait, frame).await {
            Ok(None) => return Ok(collected.freeze()),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers: dropped, as this server drops them
                };
                if data.len() > max - collected.len() {
                    return Err(refused(too_large(max)));
                }
                received += data.len();
                collected.extend_from_slice(&data);
            }
            Ok(Some(Err(error))) => {
                return Err(refused(bad_request(format!(
                    "the request body could not be read: {error}"
                ))));
            }
            Err(_) => return Err(refused(body_late(started, received, wait, stall))),
        }
    }
}

/// `refusal` as an answer that closes the connection (for another server to write).
fn refused(refusal: Refusal) -> Response {
    let status = refusal.status.unwrap_or(StatusCode::BAD_REQUEST);
    tracing::debug!(%status, why = %refusal.why, "refused a request body it cannot read");
    let mut answer = refusal.answer(status).map(Body::from);
    answer
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// The refusal of a body over `max` bytes, in the words of rmcp's own check.
fn too_large(max: usize) -> Refusal {
    refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("Payload Too Large: request body exceeds {max} bytes"),
    )
}

fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// How a request with `headers` frames its body: `Transfer-Encoding` ending in `chunked` (any
/// other coding is refused: its end could not be found), else `Content-Length` (several
/// values must agree), else none.
fn framing(headers: &HeaderMap) -> Result<Framing, Refusal> {
    match body_end(headers) {
        Ok(BodyEnd::Chunked) => Ok(Framing::Chunked),
        Ok(BodyEnd::OtherCoding) => Err(bad_request(
            "the request's transfer-encoding must name chunked once, last",
        )),
        Ok(BodyEnd::Length(length)) => Ok(Framing::Length(
            usize::try_from(length).unwrap_or(usize::MAX),
        )),
        Ok(BodyEnd::Unsaid) => Ok(Framing::Length(0)),
        Err(LengthError::NotANumber) => {
            Err(bad_request("the request's content-length is not a number"))
        }
        Err(LengthError::Different) => {
            Err(bad_request("the request has two different content-lengths"))
        }
    }
}

/// The `date` header, formatted once a second per thread.
mod date {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};

    thread_local! {
        /// The second it was made for, and the header line.
        static LINE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }

    /// Puts `date: <now>` and its line end in `out`.
    pub(super) fn put(out: &mut Vec<u8>) {
        let now = SystemTime::now();
        let second = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        LINE.with_borrow_mut(|(made, line)| {
            if *made != second {
                line.clear();
                line.extend_from_slice(b"date: ");
                line.extend_from_slice(httpdate::fmt_http_date(now).as_bytes());
                line.extend_from_slice(b"\r\n");
                *made = second;
            }
            out.extend_from_slice(line);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::SocketAddr;
    use std::sync::Mutex;

    use axum::routing::{get, post};
    use tokio::net::TcpListener;
    use tokio::sync::{mpsc, oneshot};

    const LIMITS: Limits = Limits {
        head_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(60),
        max_body: 1024,
    };
    /// How long a test waits for anything the server should do at once.
    const SOON: Duration = Duration::from_secs(5);

    /// What the test routes share with the test.
    #[derive(Clone, Default)]
    struct Hooks {
        /// Dropped with `/hang`'s future.
        hung: Arc<Mutex<Option<oneshot::Sender<()>>>>,
        /// `/stream`'s frames.
        frames: Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>,
    }

    fn router(hooks: Hooks) -> axum::Router {
        let Hooks { hung, frames } = hooks;
        axum::Router::new()
            .route("/hello", get(|| async { "hello" }))
            .route("/echo", post(|body: Bytes| async move { body }))
            .route(
                "/hang",
                get(move || async move {
                    let _dropped_with_me = hung.lock().unwrap().take();
                    std::future::pending::<&str>().await
                }),
            )
            .route(
                "/stream",
                get(move || async move {
                    let frames = frames.lock().unwrap().take().expect("one stream");
                    Body::from_stream(futures::stream::unfold(frames, |mut frames| async move {
                        let frame = frames.recv().await?;
                        Some((Ok::<_, std::io::Error>(frame), frames))
                    }))
                }),
            )
    }

    /// Serves `router` on loopback until the token is cancelled; the task ends when every
    /// connection has.
    async fn start(
        router: axum::Router,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        start_with(router, LIMITS).await
    }

    /// As [`start`], each connection with `limits`.
    async fn start_with(
        router: axum::Router,
        limits: Limits,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    accepted = listener.accept() => {
                        let (socket, _) = accepted.unwrap();
                        connections.spawn(serve(socket, router.clone(), limits, token.clone()));
                    }
                }
            }
            while connections.join_next().await.is_some() {}
        });
        (addr, stop, task)
    }

    /// An answer as a client reads it: status, lower-cased head, body (chunks joined).
    #[derive(Debug)]
    struct Answer {
        status: u16,
        head: String,
        body: String,
    }

    /// Reads one answer from `stream`, with `pending` holding what was read beyond it.
    async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Answer {
        tokio::time::timeout(SOON, async {
            let head = read_head_text(stream, pending).await.to_ascii_lowercase();
            let status = head[9..12].parse().unwrap();
            let mut body = Vec::new();
            if let Some(length) = header(&head, "content-length") {
                let length: usize = length.parse().unwrap();
                while pending.len() < length {
                    fill(stream, pending).await;
                }
                body.extend(pending.drain(..length));
            } else if header(&head, "transfer-encoding") == Some("chunked") {
                loop {
                    let line = loop {
                        if let Some(at) = pending.windows(2).position(|w| w == b"\r\n") {
                            break at;
                        }
                        fill(stream, pending).await;
                    };
                    let size =
                        usize::from_str_radix(std::str::from_utf8(&pending[..line]).unwrap(), 16)
                            .unwrap();
                    while pending.len() < line + 2 + size + 2 {
                        fill(stream, pending).await;
                    }
                    body.extend_from_slice(&pending[line + 2..line + 2 + size]);
                    pending.drain(..line + 2 + size + 2);
                    if size == 0 {
                        break;
                    }
                }
            }
            Answer {
                status,
                head,
                body: String::from_utf8(body).unwrap(),
            }
        })
        .await
        .expect("an answer in time")
    }

    /// Reads an answer's head (through its blank line) from `stream`, `pending` holding what
    /// was read beyond it.
    async fn read_head_text(stream: &mut TcpStream, pending: &mut Vec<u8>) -> String {
        let end = loop {
            if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            fill(stream, pending).await;
        };
        String::from_utf8(pending.drain(..end).collect()).unwrap()
    }

    async fn fill(stream: &mut TcpStream, pending: &mut Vec<u8>) {
        let mut buf = [0u8; 4096];
        let read = stream.read(&mut buf).await.unwrap();
        assert!(
            read > 0,
            "closed before the answer ended: {:?}",
            String::from_utf8_lossy(pending)
        );
        pending.extend_from_slice(&buf[..read]);
    }

    fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
        head.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    }

    /// Whether the server closed `stream` (soon).
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(SOON, stream.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    async fn connect(addr: SocketAddr) -> TcpStream {
        TcpStream::connect(addr).await.unwrap()
    }

    #[tokio::test]
    async fn keep_alive_pipelined_and_chunked_requests_are_answered_in_order() {
        let (addr, stop, task) = start(router(Hooks::default())).await;
        let mut client = connect(addr).await;
        let mut pending = Vec::new();
        client
            .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let first = read_answer(&mut client, &mut pending).await;
        assert_eq!(
            (first.status, first.body.as_str()),
            (200, "hello"),
            "{first:?}"
        );
        assert_eq!(header(&first.head, "content-length"), Some("5"));
        assert!(header(&first.head, "date").is_some(), "{first:?}");
        assert!(header(&first.head, "connection").is_none(), "{first:?}");
        // Two requests in one write, the first with a chunked body (extension, trailer).
        client
            .write_all(
                b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n\
                  3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: t\r\n\r\n\
                  POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nxyz",
            )
            .await
            .unwrap();
        let second = read_answer(&mut client, &mut pending).await;
        let third = read_answer(&mut client, &mut pending).await;
        assert_eq!(
            (second.status, second.body.as_str()),
            (200, "abcde"),
            "{second:?}"
        );
        assert_eq!(
            (third.status, third.body.as_str()),
            (200, "xyz"),
            "{third:?}"
        );
        // HEAD: the length, no body; the connection still carries the next request.
        client
            .write_all(b"HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let head = read_head_text(&mut client, &mut pending).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let last = read_answer(&mut client, &mut pending).await;
        assert_eq!(
            (last.status, last.body.as_str()),
            (200, "hello"),
            "HEAD sent a body? {last:?}"
        );
        assert_eq!(header(&last.head, "connection"), Some("close"));
        assert!(
            closed(&mut client).await,
            "`connection: close` kept the connection"
        );
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn http_1_0_closes_unless_kept_alive() {
        let (addr, stop, task) = start(router(Hooks::default())).await;
        let mut client = connect(addr).await;
        let mut pending = Vec::new();
        client
            .write_all(b"GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let kept = read_answer(&mut client, &mut pending).await;
        assert_eq!(
            header(&kept.head, "connection"),
            Some("keep-alive"),
            "{kept:?}"
        );
        client
            .write_all(b"GET /hello HTTP/1.0\r\n\r\n")
            .await
            .unwrap();
        let last = read_answer(&mut client, &mut pending).await;
        assert_eq!((last.status, last.body.as_str()), (200, "hello"));
        assert_eq!(header(&last.head, "connection"), Some("close"), "{last:?}");
        assert!(closed(&mut client).await);
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A server whose `/stream` answers with the frames sent on the channel returned, and a
    /// client that asked for it.
    async fn streaming() -> (
        mpsc::Sender<Bytes>,
        TcpStream,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let hooks = Hooks::default();
        let (send, frames) = mpsc::channel(4);
        *hooks.frames.lock().unwrap() = Some(frames);
        let (addr, stop, task) = start(router(hooks)).await;
        let mut client = connect(addr).await;
        client
            .write_all(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        (send, client, stop, task)
    }

    /// Each frame of a streamed answer reaches the client when it is made, chunked.
    #[tokio::test]
    async fn a_streamed_answer_goes_out_frame_by_frame() {
        let (send, mut client, stop, task) = streaming().await;
        send.send(Bytes::from_static(b"data: one\n\n"))
            .await
            .unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("data: one") {
            fill(&mut client, &mut seen).await;
        }
        let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        assert!(!text.contains("0\r\n\r\n"), "ended early: {text}");
        send.send(Bytes::from_static(b"data: two\n\n"))
            .await
            .unwrap();
        drop(send);
        while !String::from_utf8_lossy(&seen).ends_with("0\r\n\r\n") {
            fill(&mut client, &mut seen).await;
        }
        assert!(String::from_utf8_lossy(&seen).contains("b\r\ndata: two\n\n\r\n"));
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A client that reads nothing of a streamed answer holds its connection no longer than
    /// the stall limit: the connection closes and the answer's stream is dropped.
    #[tokio::test]
    async fn a_client_that_reads_nothing_is_let_go() {
        let (send, client, stop, task) = streaming().await;
        // Frames until the socket buffers are full and the server's write stalls; then the
        // answer is dropped and sending fails. Bounded in count and time.
        let frame = Bytes::from(vec![b'x'; 64 * 1024]);
        let started = tokio::time::Instant::now();
        let mut dropped = false;
        for _ in 0..100_000 {
            if started.elapsed() > SOON * 2 {
                break;
            }
            match tokio::time::timeout(SOON, send.send(frame.clone())).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    dropped = true;
                    break;
                }
                Err(_) => panic!("the stalled write was not cut within {SOON:?}"),
            }
        }
        assert!(dropped, "the unread answer was never dropped");
        drop(client);
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A client that goes away while its request is served cancels it.
    #[tokio::test]
    async fn a_client_closing_drops_its_request() {
        let hooks = Hooks::default();
        let (guard, dropped) = oneshot::channel();
        *hooks.hung.lock().unwrap() = Some(guard);
        let (addr, stop, task) = start(router(hooks)).await;
        let mut client = connect(addr).await;
        client
            .write_all(b"GET /hang HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(client);
        let dropped = tokio::time::timeout(SOON, dropped).await;
        assert!(
            matches!(dropped, Ok(Err(_))),
            "the request's future lived on: {dropped:?}"
        );
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// What cannot be read is refused at once, in words, and closes the connection; the server
    /// goes on serving others.
    #[tokio::test]
    async fn unreadable_requests_are_refused_and_closed() {
        let (addr, stop, task) = start(router(Hooks::default())).await;
        let over = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2000\r\n\r\n{}",
            "x".repeat(2000)
        );
        let many = format!(
            "GET /hello HTTP/1.1\r\n{}\r\n",
            (0..MAX_HEADERS + 1)
                .map(|n| format!("x-{n}: y\r\n"))
                .collect::<String>()
        );
        let long = format!("GET /hello HTTP/1.1\r\nx: {}\r\n", "y".repeat(MAX_HEAD));
        let chunked =
            |rest: &str| format!("POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n{rest}");
        // Each line whole in one write: the limits hold for a line that arrives at once.
        let extension = chunked(&format!("2;{}\r\n{{}}\r\n0\r\n\r\n", "e".repeat(MAX_LINE)));
        let trailers = chunked(&format!(
            "2\r\n{{}}\r\n0\r\n{}x-last: {}\r\n\r\n",
            format!("x-t: {}\r\n", "a".repeat(95)).repeat(MAX_HEAD / 100),
            "b".repeat(200)
        ));
        let signed = chunked("+2\r\n{}\r\n0\r\n\r\n");
        let bare_lf = chunked("2\n{}\r\n0\n\n");
        let cases: [(&str, &[u8], u16, &str); 15] = [
            (
                "a body over the limit",
                over.as_bytes(),
                413,
                "exceeds 1024 bytes",
            ),
            (
                "a chunked body over the limit",
                b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n401\r\n",
                413,
                "exceeds",
            ),
            ("not HTTP", b"hello there\r\n\r\n", 400, "not HTTP/1.1"),
            (
                "a bad chunk size",
                b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                400,
                "not hex",
            ),
            (
                "another transfer coding",
                b"POST /echo HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
                400,
                "must name chunked once, last",
            ),
            (
                "chunked twice in one header",
                b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked, chunked\r\n\r\n",
                400,
                "must name chunked once, last",
            ),
            (
                "chunked in two headers",
                b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n",
                400,
                "must name chunked once, last",
            ),
            (
                "a chunk-size line too long",
                extension.as_bytes(),
                400,
                "a chunk-size line of the request body is longer than 4096 bytes",
            ),
            (
                "trailers too long",
                trailers.as_bytes(),
                400,
                "the trailers of the request body is longer than",
            ),
            ("a signed chunk size", signed.as_bytes(), 400, "not hex"),
            (
                "a chunk-size line ended by LF alone",
                bare_lf.as_bytes(),
                400,
                "does not end with CRLF",
            ),
            (
                "two hosts",
                b"GET /hello HTTP/1.1\r\nhost: 127.0.0.1\r\nhost: evil.example\r\n\r\n",
                400,
                "more than one Host",
            ),
            (
                "two lengths",
                b"POST /echo HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
                400,
                "two different",
            ),
            (
                "too many headers",
                many.as_bytes(),
                431,
                "more than 100 headers",
            ),
            (
                "a head too large",
                long.as_bytes(),
                431,
                "larger than 64 KiB",
            ),
        ];
        for (what, request, status, words) in cases {
            let mut client = connect(addr).await;
            client.write_all(request).await.unwrap();
            let answer = read_answer(&mut client, &mut Vec::new()).await;
            assert_eq!(answer.status, status, "{what}: {answer:?}");
            assert!(answer.body.contains(words), "{what}: {answer:?}");
            assert_eq!(header(&answer.head, "connection"), Some("close"), "{what}");
            assert!(closed(&mut client).await, "{what}: still open");
        }
        // An over-limit body announced with `Expect: 100-continue` is refused unsent.
        let mut client = connect(addr).await;
        client
            .write_all(
                b"POST /echo HTTP/1.1\r\ncontent-length: 5000\r\nexpect: 100-continue\r\n\r\n",
            )
            .await
            .unwrap();
        let answer = read_answer(&mut client, &mut Vec::new()).await;
        assert_eq!(answer.status, 413, "{answer:?}");
        drop(client);
        // One within the limit is asked for.
        let mut client = connect(addr).await;
        client
            .write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n")
            .await
            .unwrap();
        let mut pending = Vec::new();
        let go_on = read_answer(&mut client, &mut pending).await;
        assert_eq!(go_on.status, 100, "{go_on:?}");
        client.write_all(b"ok").await.unwrap();
        let echoed = read_answer(&mut client, &mut pending).await;
        assert_eq!((echoed.status, echoed.body.as_str()), (200, "ok"));
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A large chunked body grows the connection's buffer to its chunk's size; what stays of it
    /// between requests is no larger than a small request leaves, the bytes read ahead kept.
    #[tokio::test]
    async fn a_large_body_leaves_no_large_buffer_behind() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (mut reader, mut writer) = tokio::io::split(server);
        let limits = Limits {
            max_body: 1 << 20,
            ..LIMITS
        };
        let mut connection = Connection::new(&mut reader, &mut writer, limits);
        let size = 512 * 1024;
        let mut request =
            format!("POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n{size:x}\r\n")
                .into_bytes();
        request.extend(std::iter::repeat_n(b'x', size));
        request.extend_from_slice(b"\r\n0\r\n\r\nGET /hello HTTP/1.1\r\n");
        client.write_all(&request).await.unwrap();
        let head = connection.read_head().await.unwrap().expect("a head");
        let body = connection.read_body(&head.framing).await.unwrap();
        assert_eq!(body.len(), size);
        assert!(connection.input.capacity() > KEEP_BETWEEN);
        connection.shed();
        assert!(connection.input.capacity() <= KEEP_BETWEEN);
        assert_eq!(&connection.input[..], b"GET /hello HTTP/1.1\r\n");
    }

    /// A started head must finish within the head timeout, a body must not stall for longer;
    /// an idle connection may wait, and closes when the server stops.
    #[tokio::test]
    async fn stalled_heads_and_bodies_are_cut_and_idle_connections_close_at_stop() {
        let (addr, stop, task) = start(router(Hooks::default())).await;
        let mut slow = connect(addr).await;
        slow.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
        let mut trickle = connect(addr).await;
        trickle
            .write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc")
            .await
            .unwrap();
        let mut idle = connect(addr).await;
        let started = tokio::time::Instant::now();
        let cut = read_answer(&mut slow, &mut Vec::new()).await;
        assert_eq!(cut.status, 408, "{cut:?}");
        assert!(cut.body.contains("did not arrive in full"), "{cut:?}");
        assert!(closed(&mut slow).await, "the unfinished head was not cut");
        assert!(started.elapsed() >= LIMITS.head_timeout / 2);
        let stalled = read_answer(&mut trickle, &mut Vec::new()).await;
        assert_eq!(stalled.status, 408, "{stalled:?}");
        assert!(stalled.body.contains("stalled"), "{stalled:?}");
        assert!(
            closed(&mut trickle).await,
            "the stalled body's connection stayed open"
        );
        drop(trickle);
        tokio::time::sleep(LIMITS.head_timeout).await;
        idle.write_all(b"GET /hello HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut idle, &mut Vec::new()).await;
        assert_eq!(
            answer.status, 200,
            "the idle connection was cut: {answer:?}"
        );
        stop.cancel();
        assert!(
            closed(&mut idle).await,
            "the idle connection outlived the stop"
        );
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A body in `pieces` of `piece` bytes, one every `every` (from its start), as hyper's
    /// connection hands a body on.
    fn trickled(
        piece: usize,
        pieces: usize,
        every: Duration,
    ) -> impl http_body::Body<Data = Bytes, Error = std::convert::Infallible> {
        let frames = futures::stream::unfold(0, move |sent| async move {
            if sent == pieces {
                return None;
            }
            tokio::time::sleep(every).await;
            let frame = http_body::Frame::data(Bytes::from(vec![b'x'; piece]));
            Some((Ok(frame), sent + 1))
        });
        http_body_util::StreamBody::new(frames)
    }

    /// What `read_whole` refused, as status and text.
    async fn refused_with(answer: Response) -> (StatusCode, String) {
        assert_eq!(answer.headers()[CONNECTION], "close");
        let status = answer.status();
        let text = answer.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&text).into_owned())
    }

    /// A body read from hyper's connection (`MCP_HARNESS_OWN_H1=0`) gets this server's
    /// answers: read whole when it keeps up, 408 when it trickles slower than
    /// [`MIN_BODY_RATE`] past its first head timeout or stalls for one, 413 beyond the limit
    /// (at once when its length says so) — each closing the connection. Timed on tokio's
    /// paused clock: the limits are the real 30 s ones.
    #[tokio::test(start_paused = true)]
    async fn bodies_from_hyper_are_read_under_the_same_rules() {
        let limits = Limits {
            head_timeout: Duration::from_secs(30),
            ..LIMITS
        };
        let second = Duration::from_secs(1);

        let whole = read_whole(trickled(100, 10, second), limits).await;
        assert_eq!(whole.ok().map(|body| body.len()), Some(1000));

        // 5 bytes a second: never a stall, cut once 30 s + a second per 500 bytes are over.
        let started = tokio::time::Instant::now();
        let slow = read_whole(trickled(5, 1000, second), limits).await;
        let took = started.elapsed();
        let (status, text) = refused_with(slow.expect_err("cut")).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{text}");
        assert!(text.contains("too slowly"), "{text}");
        assert!(
            took >= limits.head_timeout && took < Duration::from_secs(32),
            "{took:?}"
        );

        let (status, text) = refused_with(
            read_whole(trickled(5, 1, Duration::from_secs(31)), limits)
                .await
                .expect_err("stalled"),
        )
        .await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{text}");
        assert!(text.contains("stalled"), "{text}");

        let (status, text) = refused_with(
            read_whole(trickled(600, 2, second), limits)
                .await
                .expect_err("large"),
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
        let announced = http_body_util::Full::new(Bytes::from(vec![b'x'; 2000]));
        let (status, _) =
            refused_with(read_whole(announced, limits).await.expect_err("large")).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// A body that never stalls but arrives slower than [`MIN_BODY_RATE`] gets 408 once its
    /// first head timeout (plus a second per 500 bytes it sent) is over, not when its client
    /// is done; one that keeps up is read whole.
    #[tokio::test]
    async fn bodies_slower_than_the_minimum_rate_are_cut() {
        // Room for a loaded machine's late timers: the steady body's pieces come 0.8 s
        // inside the stall limit.
        let limits = Limits {
            head_timeout: Duration::from_secs(1),
            ..LIMITS
        };
        let (addr, stop, task) = start_with(router(Hooks::default()), limits).await;
        let mut slow = connect(addr).await;
        let started = tokio::time::Instant::now();
        slow.write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 1000\r\n\r\n")
            .await
            .unwrap();
        let tick = limits.head_timeout / 5;
        // One byte a tick: never a stall, ~5 bytes a second. Bounded: at most 100 bytes.
        let mut cut = false;
        for _ in 0..100 {
            if slow.write_all(b"x").await.is_err() {
                cut = true;
                break;
            }
            let mut byte = [0u8; 1];
            // The answer arrived: the body was cut.
            if let Ok(Ok(_)) = tokio::time::timeout(tick, slow.peek(&mut byte)).await {
                cut = true;
                break;
            }
        }
        assert!(cut, "the trickled body was never cut");
        let answer = read_answer(&mut slow, &mut Vec::new()).await;
        assert_eq!(answer.status, 408, "{answer:?}");
        assert!(answer.body.contains("too slowly"), "{answer:?}");
        // Cut at its deadline, long before its client would have finished (1000 ticks).
        assert!(started.elapsed() >= limits.head_timeout, "cut too early");
        assert!(
            started.elapsed() < SOON,
            "cut too late: {:?}",
            started.elapsed()
        );

        // In pieces, each well inside the stall limit and faster than the rate: read whole.
        let mut steady = connect(addr).await;
        steady
            .write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 1000\r\n\r\n")
            .await
            .unwrap();
        for _ in 0..4 {
            tokio::time::sleep(tick).await;
            steady.write_all(&[b'y'; 250]).await.unwrap();
        }
        let echoed = read_answer(&mut steady, &mut Vec::new()).await;
        assert_eq!(
            (echoed.status, echoed.body.len()),
            (200, 1000),
            "{echoed:?}"
        );
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A connection with no request in progress closes once it has been idle for the idle
    /// timeout; one whose requests keep coming stays open past it (its timer is armed again,
    /// not made anew per request).
    #[tokio::test]
    async fn idle_connections_close_at_the_idle_timeout_and_busy_ones_stay() {
        // Long enough that a loaded machine's late timers (a step is a quarter of it) do not
        // make the busy connection look idle.
        const IDLE: Duration = Duration::from_secs(1);
        let limits = Limits {
            idle_timeout: IDLE,
            ..LIMITS
        };
        let (addr, stop, task) = start_with(router(Hooks::default()), limits).await;
        let mut idle = connect(addr).await;
        let mut busy = connect(addr).await;
        idle.write_all(b"GET /hello HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_answer(&mut idle, &mut Vec::new()).await.status, 200);
        let answered = tokio::time::Instant::now();
        // Three idle timeouts of requests a quarter of one apart.
        for _ in 0..12 {
            busy.write_all(b"GET /hello HTTP/1.1\r\n\r\n")
                .await
                .unwrap();
            let answer = read_answer(&mut busy, &mut Vec::new()).await;
            assert_eq!(
                answer.status, 200,
                "the busy connection was cut: {answer:?}"
            );
            tokio::time::sleep(IDLE / 4).await;
        }
        assert!(
            answered.elapsed() > IDLE * 2,
            "the busy connection was not kept past the idle timeout"
        );
        assert!(closed(&mut idle).await, "the idle connection stayed open");
        stop.cancel();
        tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    }

    /// A connection turned away (over the server's limit) reads 503 with `Retry-After` and
    /// the reason, then the close — the request it sent is read and dropped, not reset.
    #[tokio::test]
    async fn a_connection_turned_away_reads_503_with_retry_after() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = connect(addr).await;
        let (socket, _) = listener.accept().await.unwrap();
        let turning = tokio::spawn(turn_away(socket, LIMITS, "too many connections".into()));
        client
            .write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let answer = read_answer(&mut client, &mut Vec::new()).await;
        assert_eq!(answer.status, 503, "{answer:?}");
        assert_eq!(header(&answer.head, "retry-after"), Some("1"), "{answer:?}");
        assert!(answer.body.contains("too many connections"), "{answer:?}");
        assert!(closed(&mut client).await, "the connection stayed open");
        drop(client);
        tokio::time::timeout(SOON, turning).await.unwrap().unwrap();
    }
}

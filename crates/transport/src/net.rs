//! Network failures in words a user can act on, and the watch that notices a remote server went
//! away.
//!
//! Invariants:
//! - a message made here never holds a Rust type name (rmcp names its transport by type) nor a
//!   URL's user info, query or fragment: URLs inside library messages are cut out, and the
//!   caller adds the server's URL (as `http::shown` prints it: no query);
//! - a [`Breakage`] fires at most once, with the first reason, and only for a failure of the
//!   connection itself (refused, reset, cut short, timed out connecting): an HTTP status, a
//!   refused authorization or an unreadable message never fires it, nor does the cut of an
//!   event stream that can be resumed (an event on it carried an id: its resume request
//!   reports whether the server is still there);
//! - a POST's event stream dropped before its end is read to its end in the background (at most
//!   `DRAIN_WINDOW` and `DRAIN_EVENTS`), so its keep-alive connection goes back to the pool
//!   instead of being closed (`ReadToEnd`);
//! - a body read whole is read through `read_capped`: never more than its cap is kept;
//! - a connection's event-stream GETs are paced (`Pace`): after a few streams in a row that
//!   ended without a message, each GET first waits, 100 ms doubled up to 5 s, so a server that
//!   answers every GET with `retry: 0` and nothing else is asked a handful of times, not
//!   thousands of times a second.

use std::error::Error;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::FutureExt as _;
use futures::{Stream, StreamExt};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpError, StreamableHttpPostResponse,
};
use tokio_util::sync::CancellationToken;

use crate::layer::{Events, HttpLayer, PostResult, StreamResult};

/// What went wrong with the connection to a server, as the user can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFailure {
    /// Nothing listens at the address (the server is not running, or another port).
    Refused,
    /// The connection was reset or cut short (the server stopped or crashed meanwhile).
    Reset,
    /// Connecting took too long (a firewall, a wrong host, a network down).
    TimedOut,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed (http vs https, or a certificate).
    Tls,
    /// The server answered the handshake with HTTP 404 Not Found or 410 Gone: something listens
    /// there, but no MCP endpoint at that path. Made only for the handshake
    /// ([`http_not_found_in`]): it is an answer, not a broken connection, so it never fires a
    /// [`Breakage`].
    NotFound,
}

impl NetFailure {
    /// What to check, naming the config key.
    pub fn hint(self) -> &'static str {
        match self {
            NetFailure::Refused => {
                "is the server running and listening at that address? Check `url`"
            }
            NetFailure::Reset => {
                "the server closed the connection; check that it is running and that `url` is its MCP endpoint"
            }
            NetFailure::TimedOut => {
                "check the host and port in `url`, the network and any firewall"
            }
            NetFailure::Dns => "check the host name in `url`",
            NetFailure::Tls => {
                "check the scheme of `url` (http or https) and the server's certificate"
            }
            NetFailure::NotFound => {
                "check the path in `url`: it must be the server's MCP endpoint (often `/mcp`; `/sse` for a legacy HTTP+SSE server)"
            }
        }
    }
}

impl std::fmt::Display for NetFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NetFailure::Refused => "connection refused",
            NetFailure::Reset => "the connection was reset or cut short",
            NetFailure::TimedOut => "connecting timed out",
            NetFailure::Dns => "the host name did not resolve",
            NetFailure::Tls => "the TLS handshake failed",
            NetFailure::NotFound => "the server answered HTTP 404 Not Found (nothing at that path)",
        })
    }
}

/// `response`'s whole body, or `None` as soon as it is known to be larger than `max` bytes (its
/// `Content-Length` says so, or the bytes read pass it); no more than `max` bytes are kept.
pub(crate) async fn read_capped(
    response: reqwest::Response,
    max: usize,
) -> reqwest::Result<Option<Vec<u8>>> {
    let length = response.content_length();
    read_capped_body(length, response.bytes_stream(), max).await
}

/// A body of `length` (when its answer says it) read from `chunks` as [`read_capped`] reads one.
pub(crate) async fn read_capped_body<E>(
    length: Option<u64>,
    chunks: impl Stream<Item = Result<bytes::Bytes, E>>,
    max: usize,
) -> Result<Option<Vec<u8>>, E> {
    if length.is_some_and(|n| n > max as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    let mut stream = std::pin::pin!(chunks);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if chunk.len() > max - body.len() {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// rmcp's error of the Streamable HTTP transport over reqwest.
type HttpError = StreamableHttpError<reqwest::Error>;

/// The errors of `err`'s source chain, outermost first; it goes on into the reqwest error of an
/// rmcp client error (which rmcp does not give as its source).
fn chain<'a>(err: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(err), |e: &&'a (dyn Error + 'static)| {
        let e: &'a (dyn Error + 'static) = *e;
        match e.downcast_ref::<HttpError>() {
            Some(StreamableHttpError::Client(inner)) => Some(inner as &(dyn Error + 'static)),
            _ => e.source(),
        }
    })
}

/// The connection failure in an error of the Streamable HTTP transport, if it is one.
pub(crate) fn http_failure<E: Error + Send + Sync + 'static>(
    err: &StreamableHttpError<E>,
) -> Option<NetFailure> {
    match err {
        StreamableHttpError::Client(inner) => net_failure(inner),
        StreamableHttpError::Io(io) => net_failure(io),
        StreamableHttpError::Sse(sse) => net_failure(sse),
        _ => None,
    }
}

/// The connection failure in `err` when it comes from the Streamable HTTP transport (never for
/// another transport's I/O error: a stdio pipe is not a network).
pub fn http_failure_in(err: &(dyn Error + 'static)) -> Option<NetFailure> {
    chain(err)
        .find_map(|e| e.downcast_ref::<HttpError>())
        .and_then(http_failure)
}

/// [`NetFailure::NotFound`] when a Streamable HTTP error somewhere in `err`'s chain is an answer
/// with HTTP 404 or 410 (rmcp reports it as an unexpected response `HTTP 404 ...: <body>`, or
/// as its `HttpStatusError`); the body (often an HTML page) is dropped.
pub fn http_not_found_in(err: &(dyn Error + 'static)) -> Option<NetFailure> {
    let gone = |status: u16| matches!(status, 404 | 410);
    chain(err).find_map(|e| match e.downcast_ref::<HttpError>() {
        Some(StreamableHttpError::HttpStatus(status)) if gone(status.status) => {
            Some(NetFailure::NotFound)
        }
        Some(StreamableHttpError::UnexpectedServerResponse(text))
            if text.starts_with("HTTP 404") || text.starts_with("HTTP 410") =>
        {
            Some(NetFailure::NotFound)
        }
        _ => None,
    })
}

/// The HTTP status of an answer that says the server is unavailable for now (5xx or 429, which
/// rmcp reports as its `HttpStatusError`) in a Streamable HTTP error somewhere in `err`'s
/// chain.
pub(crate) fn http_status_in(err: &(dyn Error + 'static)) -> Option<u16> {
    chain(err).find_map(|e| match e.downcast_ref::<HttpError>() {
        Some(StreamableHttpError::HttpStatus(status)) => Some(status.status),
        _ => None,
    })
}

/// The I/O errors in `err`'s chain with the error they carry (an I/O error's `source` skips
/// it): a layer's own failure travels as one inside rmcp's error.
pub(crate) fn carried_in<'a>(
    err: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + Send + Sync + 'static)> {
    chain(err).filter_map(|e| match e.downcast_ref::<HttpError>() {
        Some(StreamableHttpError::Io(io)) => io.get_ref(),
        _ => e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref()),
    })
}

/// The connection failure somewhere in `err`'s sources, if it is one.
pub(crate) fn net_failure(err: &(dyn Error + 'static)) -> Option<NetFailure> {
    use std::io::ErrorKind as K;
    for e in chain(err) {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                K::ConnectionRefused => return Some(NetFailure::Refused),
                K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::UnexpectedEof
                | K::NotConnected => return Some(NetFailure::Reset),
                K::TimedOut => return Some(NetFailure::TimedOut),
                _ => {}
            }
        }
        if let Some(SseError::Body(inner)) = e.downcast_ref::<SseError>()
            && let Some(failure) = net_failure(inner.as_ref())
        {
            return Some(failure);
        }
        if let Some(r) = e.downcast_ref::<reqwest::Error>()
            && r.is_connect()
            && r.is_timeout()
        {
            return Some(NetFailure::TimedOut);
        }
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("dns error") || text.contains("failed to lookup address") {
            return Some(NetFailure::Dns);
        }
        if text.contains("invalid peer certificate")
            || text.contains("tls handshake")
            || text.contains("invalidcontenttype")
        {
            return Some(NetFailure::Tls);
        }
        if text.contains("connection closed before message completed")
            || text.contains("incomplete message")
            || text.contains("end of file before message length reached")
        {
            return Some(NetFailure::Reset);
        }
    }
    None
}

/// The most of a server's own text an error repeats ([`bounded_text`]).
pub const MAX_ERROR_TEXT: usize = 4096;

/// `text` cut to [`MAX_ERROR_TEXT`] bytes (at a character boundary), saying how much was left
/// out: a server's error text can be megabytes, and an error is printed, logged and kept as
/// the server's last error.
pub fn bounded_text(text: String) -> String {
    if text.len() <= MAX_ERROR_TEXT {
        return text;
    }
    // Secrets are replaced before the cut: one straddling it would be cut out of reach of the
    // redaction that comes later, its first part shown. Only what can reach the cut is looked
    // at (the kept part and one secret's length past it): a server's text may be megabytes.
    let window = floor_boundary(&text, MAX_ERROR_TEXT + crate::redact::longest_secret());
    let mut kept = crate::redact::text(&text[..window]);
    if kept.len() <= MAX_ERROR_TEXT && window == text.len() {
        return kept;
    }
    let end = floor_boundary(&kept, MAX_ERROR_TEXT);
    let left_out = text.len().saturating_sub(end);
    kept.truncate(end);
    kept.push_str(&format!(" … ({left_out} more bytes not shown)"));
    kept
}

/// The largest character boundary of `text` at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// `err` and its sources as one line without Rust type names or URLs: rmcp's wrapper that
/// names the transport by type is skipped, `for url (...)` is cut, a source whose text the
/// outer message already holds is not repeated, credential shapes are replaced
/// ([`crate::redact::credentials`]), and the whole is [`bounded_text`].
pub fn describe(err: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in chain(err) {
        if e.downcast_ref::<rmcp::transport::DynamicTransportError>()
            .is_some()
        {
            continue;
        }
        let text = without_urls(&e.to_string());
        let text = strip_type_wrapper(&text);
        if text.is_empty()
            || parts
                .last()
                .is_some_and(|last| last.contains(text.as_str()))
        {
            continue;
        }
        parts.push(text);
    }
    // A remote party's words (an authorization server echoing the refresh it refused) carry
    // no credential and no control character onward.
    let joined = bounded_text(crate::redact::credentials(&parts.join(": ")));
    match joined.contains(UNPARSED_TOKEN_RESPONSE) {
        // oauth2's words for a token endpoint that answered with something else than a token
        // response (a 5xx page, a malformed `expires_in`): said in ours, with what to do.
        true => format!(
            "{joined} — the authorization server's answer to the token request is not a valid \
             token response (an HTTP error, or a malformed field): it is tried again on the next \
             reconnect; if it persists, log in again (`mcp-harness login`)"
        ),
        false => joined,
    }
}

/// What the oauth2 crate says when a token endpoint's answer is not a token response.
const UNPARSED_TOKEN_RESPONSE: &str = "Failed to parse server response";

/// `text` without rmcp's `Transport [type::Name<...>] error: ` prefix.
fn strip_type_wrapper(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find("Transport [") {
        let Some(end) = out[start..].find("] error: ") else {
            break;
        };
        out.replace_range(start..start + end + "] error: ".len(), "");
    }
    out.trim().to_string()
}

/// `text` with every ` for url (...)` (reqwest's way of naming the URL) cut out.
pub(crate) fn without_urls(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(start) = out.find(" for url (") {
        let Some(end) = out[start..].find(')') else {
            out.truncate(start);
            break;
        };
        out.replace_range(start..start + end + 1, "");
    }
    out
}

/// A reqwest error as text without its URL (which may carry a query or credentials).
pub(crate) fn describe_request(e: &reqwest::Error) -> String {
    let head = if e.is_connect() {
        "could not connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "reading the response failed"
    } else {
        "request failed"
    };
    let mut parts = vec![head.to_string()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// Fires once when a request to the server shows the connection is gone (see the invariants),
/// so the session is closed at once instead of at the next missed ping.
#[derive(Clone, Default)]
pub struct Breakage {
    fired: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl Breakage {
    /// Records `reason` (the first one wins) and fires.
    pub fn fire(&self, reason: String) {
        if self.reason.set(reason).is_ok() {
            tracing::debug!(reason = %self.reason.get().map_or("", String::as_str), "the connection to the server broke");
        }
        self.fired.cancel();
    }

    /// Resolves with the reason once fired.
    pub async fn fired(&self) -> String {
        self.fired.cancelled().await;
        self.reason.get().cloned().unwrap_or_default()
    }
}

/// The `HttpLayer` that fires a [`Breakage`] when a request cannot reach the server or an
/// event stream is cut short, and paces the connection's event-stream GETs (`Pace`: one for
/// the session's own stream, one for resumes).
#[derive(Clone)]
pub struct Watch {
    breakage: Breakage,
    /// The server's URL as shown (no query).
    url: String,
    /// Paces the session's own event stream.
    standalone: Arc<Pace>,
    /// Paces the resumes of broken response streams (their own count: a session stream the
    /// server keeps closing does not hold up a call's resume).
    resumes: Arc<Pace>,
}

/// How many event streams in a row may end without a message before the next GET waits.
const FREE_GETS: u32 = 3;
/// The first wait before a GET once [`FREE_GETS`] streams in a row were fruitless.
const FIRST_PACE: Duration = Duration::from_millis(100);
/// The longest wait before a GET.
const MAX_PACE: Duration = Duration::from_secs(5);
/// A stream open this long counts as fruitful even if it carried no message (a quiet server's
/// stream that it closes now and then).
const FRUITFUL_AFTER: Duration = Duration::from_secs(5);

/// Paces one connection's event-stream GETs: the standalone stream and the resumes of broken
/// response streams (`Last-Event-ID`).
///
/// Why: rmcp opens such a stream again as soon as the server's `retry:` says once it ends, and
/// starts its count of attempts over whenever a GET succeeds, so a server that answers every
/// GET with `retry: 0` and an empty stream was asked thousands of times a second until the
/// call waiting on the stream timed out. Invariant: a GET that follows [`FREE_GETS`] or more
/// fruitless streams in a row (ended without a message, open less than [`FRUITFUL_AFTER`])
/// first waits [`FIRST_PACE`], doubled for each further one, at most [`MAX_PACE`]; a fruitful
/// stream starts the count over.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Fruitless streams in a row.
    fruitless: std::sync::atomic::AtomicU32,
}

impl Pace {
    /// How long the next GET waits.
    fn delay(&self) -> Duration {
        let fruitless = self.fruitless.load(std::sync::atomic::Ordering::Relaxed);
        if fruitless < FREE_GETS {
            return Duration::ZERO;
        }
        let doublings = (fruitless - FREE_GETS).min(16);
        FIRST_PACE.saturating_mul(1 << doublings).min(MAX_PACE)
    }

    /// One stream ended (or was dropped).
    fn ended(&self, fruitful: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if fruitful {
            self.fruitless.store(0, Relaxed);
        } else {
            let _ = self
                .fruitless
                .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_add(1)));
        }
    }

    /// `stream` counted when it ends or is dropped.
    fn count(self: &Arc<Self>, stream: Events) -> Events {
        let mut outcome = Outcome {
            pace: self.clone(),
            opened: std::time::Instant::now(),
            fruitful: false,
        };
        stream
            .inspect(move |item| {
                // The whole `Outcome` lives in the closure (not a copy of its flag): it is
                // told to its pace when the stream is dropped.
                let outcome = &mut outcome;
                if let Ok(event) = item {
                    let message = matches!(event.event.as_deref(), None | Some("" | "message"));
                    outcome.fruitful |=
                        message && event.data.as_ref().is_some_and(|d| !d.is_empty());
                }
            })
            .boxed()
    }
}

/// One GET stream's outcome, told to its [`Pace`] when the stream is dropped.
struct Outcome {
    pace: Arc<Pace>,
    opened: std::time::Instant,
    fruitful: bool,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        self.pace
            .ended(self.fruitful || self.opened.elapsed() >= FRUITFUL_AFTER);
    }
}

impl Watch {
    /// Made from its parts.
    pub fn new(breakage: Breakage, url: String) -> Self {
        Self {
            breakage,
            url,
            standalone: Arc::default(),
            resumes: Arc::default(),
        }
    }

    fn check<E: Error + Send + Sync + 'static>(&self, what: &str, err: &StreamableHttpError<E>) {
        if let Some(failure) = http_failure(err) {
            self.breakage
                .fire(format!("{what} to {}: {failure}", self.url));
        }
    }

    /// `stream` watched: a cut fires the breakage only when nothing can resume the stream —
    /// no event on it carried an id. After one did, rmcp resumes it (a GET with
    /// `Last-Event-ID`), and if the server is gone that request's failure fires instead: a
    /// network blip mid-call costs a resume, not the session and every call in it.
    fn watch_stream(&self, stream: Events) -> Events {
        let this = self.clone();
        let mut resumable = false;
        stream
            .inspect(move |item| match item {
                Ok(event) => resumable |= event.id.is_some(),
                Err(e) if !resumable => {
                    if let Some(failure) = net_failure(e) {
                        this.breakage
                            .fire(format!("the event stream from {}: {failure}", this.url));
                    }
                }
                Err(_) => {}
            })
            .boxed()
    }
}

impl HttpLayer for Watch {
    fn sends_again(&self) -> bool {
        false
    }

    async fn post<E, F, Fut>(&self, _attached: bool, auth: Option<String>, send: F) -> PostResult<E>
    where
        E: Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: std::future::Future<Output = PostResult<E>> + Send,
    {
        match send(auth).await {
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => {
                Ok(StreamableHttpPostResponse::Sse(
                    self.watch_stream(ReadToEnd::boxed(stream)),
                    session,
                ))
            }
            Err(e) => {
                self.check("a request", &e);
                Err(e)
            }
            other => other,
        }
    }

    async fn get<E, F, Fut>(&self, auth: Option<String>, send: F) -> StreamResult<E>
    where
        E: Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: std::future::Future<Output = StreamResult<E>> + Send,
    {
        self.get_for(false, auth, send).await
    }

    async fn get_for<E, F, Fut>(
        &self,
        resume: bool,
        auth: Option<String>,
        send: F,
    ) -> StreamResult<E>
    where
        E: Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: std::future::Future<Output = StreamResult<E>> + Send,
    {
        let pace = if resume {
            &self.resumes
        } else {
            &self.standalone
        };
        let wait = pace.delay();
        if !wait.is_zero() {
            tracing::debug!(url = %self.url, ?wait, resume, "the server's last event streams ended without a message: waiting before the next GET");
            tokio::time::sleep(wait).await;
        }
        match send(auth).await {
            Ok(stream) => Ok(pace.count(self.watch_stream(stream))),
            Err(e) => {
                self.check("the event stream's request", &e);
                Err(e)
            }
        }
    }
}

/// How long a dropped POST stream is read on for its end (the server closes it right after the
/// answer; rmcp's own wait for that end is 50 ms).
pub(crate) const DRAIN_WINDOW: Duration = Duration::from_millis(100);
/// How many more events a dropped POST stream may carry before its connection is given up.
pub(crate) const DRAIN_EVENTS: usize = 16;

/// A POST's event stream that, dropped before its end, is read to its end in the background.
///
/// Why: rmcp's client stops reading a request's stream as soon as its worker has the answer,
/// and the stream's last chunk (the end of the chunked body) often comes in a packet of its own
/// a little later. Dropped unread, that body makes hyper close the connection, and the next
/// request pays a new TCP connection on both sides: about one call in a hundred through the
/// gateway at one call at a time, more under load — the tail of every sequential benchmark.
/// Read to its end, the connection goes back to the pool. What is read after the drop is
/// dropped too: the request it belonged to has its answer, or was given up.
pub(crate) struct ReadToEnd {
    /// The stream until its end was read (`None` after it).
    inner: Option<Events>,
}

impl ReadToEnd {
    pub(crate) fn boxed(inner: Events) -> Events {
        Self { inner: Some(inner) }.boxed()
    }
}

impl Stream for ReadToEnd {
    type Item = Result<sse_stream::Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let next = inner.poll_next_unpin(cx);
        if matches!(next, Poll::Ready(None)) {
            this.inner = None;
        }
        next
    }
}

impl Drop for ReadToEnd {
    fn drop(&mut self) {
        // Read to its end already: nothing to do.
        let Some(mut inner) = self.inner.take() else {
            return;
        };
        // Usually the end is already in the buffer by the time the stream is dropped.
        let mut events = 0;
        loop {
            match inner.next().now_or_never() {
                Some(None) => return,
                Some(Some(_)) if events < DRAIN_EVENTS => events += 1,
                Some(Some(_)) => return,
                None => break,
            }
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let read = tokio::time::timeout(DRAIN_WINDOW, async {
                while inner.next().await.is_some() {
                    events += 1;
                    if events > DRAIN_EVENTS {
                        return false;
                    }
                }
                true
            })
            .await;
            if read != Ok(true) {
                tracing::trace!(
                    events,
                    "a dropped POST stream did not end in time; its connection is closed"
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_long_text_is_cut_in_an_error_saying_how_much() {
        let long = "é".repeat(MAX_ERROR_TEXT);
        let cut = bounded_text(long.clone());
        assert!(cut.len() < MAX_ERROR_TEXT + 64, "{}", cut.len());
        assert!(cut.ends_with(&format!(
            "({} more bytes not shown)",
            long.len() - MAX_ERROR_TEXT
        )));
        let err = std::io::Error::other(format!("boom: {}", "x".repeat(10 << 20)));
        assert!(describe(&err).len() < MAX_ERROR_TEXT + 64);
        assert_eq!(bounded_text("short".into()), "short");
    }

    /// A registered secret straddling the cut is redacted whole, not shown in part.
    #[test]
    fn a_secret_across_the_cut_is_redacted_before_it() {
        let secret = "straddling-SECRET-4711-xyz";
        crate::redact::register([secret]);
        for pad in MAX_ERROR_TEXT - 20..MAX_ERROR_TEXT {
            let text = format!("{} {secret} tail", "E".repeat(pad));
            let cut = bounded_text(text);
            assert!(
                !cut.contains("straddling-SE"),
                "pad {pad}: …{}",
                &cut[cut.len() - 60..]
            );
        }
    }

    #[test]
    fn an_unparsed_token_response_is_said_with_what_to_do() {
        let e = std::io::Error::other("Token refresh failed: Failed to parse server response");
        let text = describe(&e);
        assert!(
            text.starts_with("Token refresh failed: Failed to parse server response — ")
                && text.contains("mcp-harness login"),
            "{text}"
        );
        let plain = describe(&std::io::Error::other("connection refused"));
        assert_eq!(plain, "connection refused");
    }

    /// A stream of `events`, then its end.
    fn ending(events: Vec<sse_stream::Sse>) -> Events {
        futures::stream::iter(events.into_iter().map(Ok)).boxed()
    }

    #[tokio::test]
    async fn fruitless_streams_pace_the_next_gets_and_a_message_starts_over() {
        let pace = Arc::new(Pace::default());
        let retry_only = || sse_stream::Sse::default().retry(0);
        let mut waits = Vec::new();
        for _ in 0..8 {
            waits.push(pace.delay());
            pace.count(ending(vec![retry_only()])).count().await;
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 100, 200, 400, 800, 1600]);
        for _ in 0..10 {
            pace.count(ending(vec![retry_only()])).count().await;
        }
        assert_eq!(pace.delay(), MAX_PACE);
        // A non-message event (a priming event, a ping) is not a message.
        let ping = sse_stream::Sse::default().event("ping").data("x");
        pace.count(ending(vec![ping])).count().await;
        assert_eq!(pace.delay(), MAX_PACE);
        let message = sse_stream::Sse::default().data(r#"{"jsonrpc":"2.0","method":"x"}"#);
        pace.count(ending(vec![message])).count().await;
        assert_eq!(pace.delay(), Duration::ZERO);
        // A stream dropped unread counts too.
        for _ in 0..3 {
            drop(pace.count(ending(Vec::new())));
        }
        assert_eq!(pace.delay(), FIRST_PACE);
    }

    /// A stream of the events sent on `rx`, which sets `ended` when it reaches its end.
    fn events(
        rx: tokio::sync::mpsc::UnboundedReceiver<sse_stream::Sse>,
        ended: Arc<std::sync::atomic::AtomicBool>,
    ) -> Events {
        futures::stream::unfold((rx, ended), |(mut rx, ended)| async move {
            match rx.recv().await {
                Some(event) => Some((Ok(event), (rx, ended))),
                None => {
                    ended.store(true, std::sync::atomic::Ordering::SeqCst);
                    None
                }
            }
        })
        .boxed()
    }

    fn event(data: &str) -> sse_stream::Sse {
        sse_stream::Sse::default().data(data.to_owned())
    }

    #[tokio::test]
    async fn a_dropped_stream_is_read_to_its_late_end() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut stream = ReadToEnd::boxed(events(rx, ended.clone()));
        tx.send(event("answer")).expect("open");
        assert!(stream.next().await.is_some_and(|e| e.is_ok()));
        drop(stream);
        // The end (and one straggler) come after the drop: still read.
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.send(event("late")).expect("still read after the drop");
        drop(tx);
        for _ in 0..100 {
            if ended.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the dropped stream was not read to its end");
    }

    #[tokio::test]
    async fn a_dropped_stream_that_does_not_end_is_let_go() {
        // No end within the window: given up (its connection closed).
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        drop(ReadToEnd::boxed(events(rx, ended.clone())));
        assert!(!tx.is_closed(), "read on in the background");
        tokio::time::sleep(DRAIN_WINDOW + Duration::from_millis(200)).await;
        assert!(tx.is_closed(), "given up after the window");
        // More events than allowed: given up at once.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..=DRAIN_EVENTS {
            tx.send(event("more")).expect("open");
        }
        drop(ReadToEnd::boxed(events(rx, ended.clone())));
        assert!(tx.is_closed(), "a stream that keeps talking is not drained");
        assert!(!ended.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_stream_whose_end_is_buffered_is_read_at_the_drop() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stream = ReadToEnd::boxed(events(rx, ended.clone()));
        tx.send(event("answer")).expect("open");
        drop(tx);
        // The end is in the buffer at the drop: read there and then.
        drop(stream);
        assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn urls_and_type_names_are_cut() {
        assert_eq!(
            without_urls("error sending request for url (http://h/mcp?key=secret)"),
            "error sending request"
        );
        assert_eq!(
            strip_type_wrapper(
                "Transport [rmcp::transport::worker::WorkerTransport<rmcp::X<reqwest::Client>>] error: Client error: refused"
            ),
            "Client error: refused"
        );
    }

    #[test]
    fn io_kinds_are_classified() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(net_failure(&refused), Some(NetFailure::Refused));
        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(net_failure(&eof), Some(NetFailure::Reset));
        let other = std::io::Error::other("something else");
        assert_eq!(net_failure(&other), None);
    }
}

//! A request's POST over plain HTTP/1.1, written and read here: one write per request, the
//! answer read into one buffer, connections kept alive per origin.
//!
//! Why: under [`super::Direct`], reqwest and hyper's client spend about 40k instructions on a
//! request the gateway forwards (a redirect layer that parses the URL twice, tower layers, the
//! connection task and the channels to it) — for a message that is one write and one read.
//!
//! Invariants:
//! - only `http://` URLs without user info, and only when no proxy is configured in the
//!   environment ([`H1::serves`]); the caller sends everything else, every redirect, and every
//!   request whose connection could not be opened (except for a timeout) through reqwest, whose
//!   answer or error is then the one given — a redirect or a refused connection means the
//!   server did not act on the request;
//! - a request carries what reqwest would send: the request's own headers, the configured
//!   defaults for names it lacks, `host` when neither gave one, and the body's
//!   `content-length`; a request whose headers set `content-length` or `transfer-encoding`
//!   themselves is not sent here;
//! - a connection goes back to the pool only when its answer was read to the end that its
//!   framing names (`Content-Length`, or `chunked`), over HTTP/1.1, with no `close` from
//!   either side and no byte beyond the answer; an idle connection is kept at most [`IDLE`] (under
//!   the 5 s after which Node's and uvicorn's servers close one, so a request does not race
//!   that close), at most [`MAX_IDLE`] of them, and is checked for a close before reuse;
//! - a request is written at most twice, the second time only when writing it on a reused
//!   connection failed; once written, it is never sent again;
//! - nothing read grows without bound: an answer's head is at most [`MAX_HEAD`] bytes and
//!   [`MAX_HEADERS`] headers after at most [`MAX_INTERIM`] interim answers, a chunk-size line
//!   at most [`MAX_LINE`], its trailers at most [`MAX_HEAD`]; a body is kept only as its
//!   reader's caller keeps it.

use std::io::{Error, ErrorKind};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes, BytesMut};
use futures::stream::BoxStream;
use reqwest::StatusCode;
use reqwest::header::{
    CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderValue, TRANSFER_ENCODING,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::http1::{BadHeader, BodyEnd, LengthError, body_end, chunk_size, has_token, header_map};

/// How long an idle connection is kept.
pub(crate) const IDLE: Duration = Duration::from_secs(4);
/// The most idle connections kept (over all origins).
pub(crate) const MAX_IDLE: usize = 64;
/// The largest answer head, and the most bytes of trailers, read.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The most interim (1xx) answers read before the answer.
pub(crate) const MAX_INTERIM: usize = 16;
/// The most headers of an answer.
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest chunk-size line.
pub(crate) const MAX_LINE: usize = 4 * 1024;
/// How long opening a connection may take (the reqwest client's `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much is read at a time.
const READ: usize = 16 * 1024;

/// The environment variables through which reqwest sends `http://` requests to a proxy.
const PROXY_VARIABLES: [&str; 4] = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];

/// Plain-HTTP/1.1 POSTs with the configured default headers; idle connections kept per origin.
pub(crate) struct H1 {
    defaults: HeaderMap,
    idle: Mutex<Vec<Idle>>,
    proxied: bool,
}

/// An idle connection to the origin `key`.
struct Idle {
    key: Arc<str>,
    conn: Conn,
    since: Instant,
}

/// A connection and what was read from it beyond the answers taken so far.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

/// Where a URL's requests go: the address to connect to, the `host` header, the request
/// target, the pool's key.
pub(crate) struct Target {
    connect: Connect,
    host: HeaderValue,
    path: String,
    key: Arc<str>,
}

enum Connect {
    Addr(SocketAddr),
    Name(String, u16),
}

/// An answer's status and headers, and the reader of its body.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: BodyReader,
}

impl H1 {
    /// Requests with `defaults` (the config's headers); none are sent here when a proxy is set.
    pub(crate) fn new(defaults: HeaderMap) -> Arc<Self> {
        let proxied = PROXY_VARIABLES
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        Arc::new(Self {
            defaults,
            idle: Mutex::default(),
            proxied,
        })
    }

    /// Where `url`'s requests go when they are sent here; `None` when they are not.
    pub(crate) fn serves(&self, url: &reqwest::Url) -> Option<Target> {
        if self.proxied
            || url.scheme() != "http"
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return None;
        }
        let port = url.port_or_known_default()?;
        let host_str = url.host_str()?;
        let bare = host_str.trim_start_matches('[').trim_end_matches(']');
        let connect = match bare.parse::<IpAddr>() {
            Ok(ip) => Connect::Addr(SocketAddr::new(ip, port)),
            Err(_) => Connect::Name(bare.to_string(), port),
        };
        let host = match url.port() {
            Some(port) => format!("{host_str}:{port}"),
            None => host_str.to_string(),
        };
        let mut path = url.path().to_string();
        if let Some(query) = url.query() {
            path.push('?');
            path.push_str(query);
        }
        Some(Target {
            connect,
            host: HeaderValue::from_str(&host).ok()?,
            key: format!("{host_str}:{port}").into(),
            path,
        })
    }

    /// POSTs `body` with `headers` to `target`: the answer (its head read, its body for the
    /// caller to read), or `None` when it was not sent here and the caller sends it through
    /// reqwest.
    pub(crate) async fn post(
        self: &Arc<Self>,
        target: &Target,
        mut headers: HeaderMap,
        body: &[u8],
    ) -> Result<Option<Answer>, Error> {
        // reqwest's precedence: the request's own headers, then a default for each name they lack.
        for (name, value) in &self.defaults {
            if let reqwest::header::Entry::Vacant(entry) = headers.entry(name) {
                entry.insert(value.clone());
            }
        }
        // Framing of their own (from the request or the defaults): reqwest sends it.
        if headers.contains_key(CONTENT_LENGTH) || headers.contains_key(TRANSFER_ENCODING) {
            return Ok(None);
        }
        // A request that asks to close (a configured `Connection: close`) leaves no connection.
        let closing = has_token(&headers, &CONNECTION, "close");
        let request = encode(target, &headers, body);
        let (mut conn, reused) = match self.take(&target.key) {
            Some(conn) => (conn, true),
            None => match open(target).await? {
                Some(conn) => (conn, false),
                None => return Ok(None),
            },
        };
        if let Err(error) = conn.stream.write_all(&request).await {
            if !reused {
                return Err(error);
            }
            // The server closed the idle connection as it was taken: the request never arrived.
            conn = match open(target).await? {
                Some(conn) => conn,
                None => return Ok(None),
            };
            conn.stream.write_all(&request).await?;
        }
        let (status, headers, framing, keep) = read_head(&mut conn).await?;
        Ok(Some(Answer {
            status,
            headers,
            body: BodyReader {
                conn: Some(conn),
                framing,
                keep: keep && !closing,
                pool: Arc::clone(self),
                key: target.key.clone(),
            },
        }))
    }

    /// An idle connection to `key` that is still open, if one is kept.
    fn take(&self, key: &Arc<str>) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| i.since.elapsed() < IDLE);
        // The newest first; `remove` keeps the rest oldest first for `put`.
        while let Some(at) = idle.iter().rposition(|i| i.key == *key) {
            let Idle { conn, .. } = idle.remove(at);
            if still_open(&conn.stream) {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `key` (the oldest goes when [`MAX_IDLE`] are kept).
    fn put(&self, key: Arc<str>, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|i| i.since.elapsed() < IDLE);
        if idle.len() >= MAX_IDLE {
            idle.remove(0);
        }
        idle.push(Idle {
            key,
            conn,
            since: Instant::now(),
        });
    }
}

/// Whether an idle connection's peer has neither closed it nor sent anything.
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// A new connection to `target`; `None` when it could not be opened for a reason other than a
/// timeout (reqwest then tries, and reports its own error).
async fn open(target: &Target) -> Result<Option<Conn>, Error> {
    let connecting = async {
        match &target.connect {
            Connect::Addr(addr) => TcpStream::connect(addr).await,
            Connect::Name(name, port) => TcpStream::connect((name.as_str(), *port)).await,
        }
    };
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Err(_) => {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!("connecting timed out after {} s", CONNECT_TIMEOUT.as_secs()),
            ));
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "connecting failed; reqwest tries the request");
            return Ok(None);
        }
        Ok(Ok(stream)) => stream,
    };
    // A request is one write; Nagle's algorithm would hold the next one for the delayed ACK.
    stream.set_nodelay(true)?;
    Ok(Some(Conn {
        stream,
        buf: BytesMut::with_capacity(READ),
    }))
}

/// The request's bytes: request line, headers, `host` unless given, `content-length`, body.
fn encode(target: &Target, headers: &HeaderMap, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + target.path.len() + body.len() + 64 * headers.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut header = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    if !headers.contains_key(HOST) {
        header(b"host", target.host.as_bytes());
    }
    for (name, value) in headers {
        header(name.as_str().as_bytes(), value.as_bytes());
    }
    header(b"content-length", body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// After this many more bytes.
    Length(u64),
    /// With the last chunk, in this state.
    Chunked(Chunked),
    /// When the server closes the connection.
    Close,
    /// Read to its end.
    Done,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes to go.
    Data(u64),
    /// At the line end after a chunk's data.
    DataEnd,
    /// In the trailers, this many bytes of them read.
    Trailers(usize),
}

/// The answer's head (interim 1xx answers skipped): status, headers, how its body ends, and
/// whether the connection may carry another request after it.
async fn read_head(conn: &mut Conn) -> Result<(StatusCode, HeaderMap, Framing, bool), Error> {
    let mut interim = 0;
    loop {
        if !conn.buf.is_empty() {
            let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut slots);
            match response.parse(&conn.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let code = response.code.unwrap_or(0);
                    let status = StatusCode::from_u16(code)
                        .map_err(|_| invalid(format!("the answer's status {code} is no status")))?;
                    let http11 = response.version == Some(1);
                    let headers = header_map(response.headers).map_err(|bad| match bad {
                        BadHeader::Name => invalid("the answer has an invalid header name"),
                        BadHeader::Value => invalid("the answer has an invalid header value"),
                    })?;
                    conn.buf.advance(len);
                    if status.is_informational() {
                        if status == StatusCode::SWITCHING_PROTOCOLS {
                            return Err(invalid("the server switched protocols unasked"));
                        }
                        interim += 1;
                        if interim > MAX_INTERIM {
                            return Err(invalid(format!(
                                "the server sent more than {MAX_INTERIM} interim (1xx) answers"
                            )));
                        }
                        continue;
                    }
                    let framing = framing(status, &headers)?;
                    let keep = http11
                        && framing != Framing::Close
                        && !has_token(&headers, &CONNECTION, "close");
                    return Ok((status, headers, framing, keep));
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(invalid(format!(
                        "the answer has more than {MAX_HEADERS} headers"
                    )));
                }
                Err(e) => return Err(invalid(format!("the answer is no HTTP/1.1 answer: {e}"))),
            }
        }
        if conn.buf.len() >= MAX_HEAD {
            return Err(invalid(format!(
                "the answer's head is larger than {} KiB",
                MAX_HEAD / 1024
            )));
        }
        if read_more(conn).await? == 0 {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                "the connection closed before the answer",
            ));
        }
    }
}

/// How the body of an answer with `status` and `headers` ends.
fn framing(status: StatusCode, headers: &HeaderMap) -> Result<Framing, Error> {
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Done);
    }
    Ok(match body_end(headers) {
        Ok(BodyEnd::Chunked) => Framing::Chunked(Chunked::Size),
        Ok(BodyEnd::OtherCoding | BodyEnd::Unsaid) => Framing::Close,
        Ok(BodyEnd::Length(0)) => Framing::Done,
        Ok(BodyEnd::Length(n)) => Framing::Length(n),
        Err(LengthError::NotANumber) => {
            return Err(invalid("the answer's content-length is no number"));
        }
        Err(LengthError::Different) => {
            return Err(invalid("the answer has two different content-lengths"));
        }
    })
}

/// Reads what the connection has into its buffer: the bytes read, 0 at its end.
async fn read_more(conn: &mut Conn) -> Result<usize, Error> {
    conn.buf.reserve(READ);
    conn.stream.read_buf(&mut conn.buf).await
}

fn invalid(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidData, what.into())
}

/// The body of an answer, chunk by chunk; its connection goes back to the pool at its end when
/// it may carry another request.
pub(crate) struct BodyReader {
    conn: Option<Conn>,
    framing: Framing,
    keep: bool,
    pool: Arc<H1>,
    key: Arc<str>,
}

impl BodyReader {
    /// The body's length when the answer says it.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(n) => Some(n),
            Framing::Done => Some(0),
            _ => None,
        }
    }

    /// The body's next bytes; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let next = next_chunk(conn, &mut self.framing).await;
        if next.is_err() {
            self.conn = None;
        }
        next
    }

    /// The body as a stream of its chunks.
    pub(crate) fn into_stream(self) -> BoxStream<'static, Result<Bytes, Error>> {
        Box::pin(futures::stream::try_unfold(self, |mut body| async move {
            Ok(body.chunk().await?.map(|bytes| (bytes, body)))
        }))
    }
}

impl Drop for BodyReader {
    /// Read to its end: the connection is kept for the next request when it may carry one.
    fn drop(&mut self) {
        if self.framing == Framing::Done
            && self.keep
            && let Some(conn) = self.conn.take()
            && conn.buf.is_empty()
        {
            self.pool.put(self.key.clone(), conn);
        }
    }
}

/// A body's end not reached before the connection's.
fn cut_short() -> Error {
    Error::new(
        ErrorKind::UnexpectedEof,
        "the connection closed before the end of the answer's body",
    )
}

/// At most `left` bytes of a body: what the buffer holds, else what one read brings; with how
/// many are left after them.
async fn some_of(conn: &mut Conn, left: u64) -> Result<(Bytes, u64), Error> {
    if conn.buf.is_empty() && read_more(conn).await? == 0 {
        return Err(cut_short());
    }
    let take = conn
        .buf
        .len()
        .min(usize::try_from(left).unwrap_or(usize::MAX));
    Ok((conn.buf.split_to(take).freeze(), left - take as u64))
}

/// The next bytes of a body framed by `framing` (which it advances), `None` at its end.
async fn next_chunk(conn: &mut Conn, framing: &mut Framing) -> Result<Option<Bytes>, Error> {
    loop {
        match *framing {
            Framing::Done => return Ok(None),
            Framing::Close => {
                if conn.buf.is_empty() && read_more(conn).await? == 0 {
                    *framing = Framing::Done;
                    return Ok(None);
                }
                return Ok(Some(conn.buf.split().freeze()));
            }
            Framing::Length(left) => {
                let (bytes, left) = some_of(conn, left).await?;
                *framing = if left == 0 {
                    Framing::Done
                } else {
                    Framing::Length(left)
                };
                return Ok(Some(bytes));
            }
            Framing::Chunked(Chunked::Data(left)) => {
                let (bytes, left) = some_of(conn, left).await?;
                *framing = Framing::Chunked(if left == 0 {
                    Chunked::DataEnd
                } else {
                    Chunked::Data(left)
                });
                return Ok(Some(bytes));
            }
            Framing::Chunked(state) => {
                let limit = match state {
                    Chunked::Trailers(read) => MAX_HEAD.saturating_sub(read),
                    _ => MAX_LINE,
                };
                let too_long = || invalid("a chunked body's line is too long");
                let Some(end) = memchr::memchr(b'\n', &conn.buf) else {
                    if conn.buf.len() > limit {
                        return Err(too_long());
                    }
                    if read_more(conn).await? == 0 {
                        return Err(cut_short());
                    }
                    continue;
                };
                // The limit holds for a line that came whole in one read too.
                if end > limit {
                    return Err(too_long());
                }
                let line = conn.buf.split_to(end + 1);
                // Every line of the framing ends with CR LF (as hyper reads it).
                let line = line
                    .strip_suffix(b"\r\n")
                    .ok_or_else(|| invalid("a chunked body's line does not end with CR LF"))?;
                *framing = Framing::Chunked(match state {
                    Chunked::Size => {
                        let size = chunk_size(line)
                            .ok_or_else(|| invalid("a chunked body's chunk size is no number"))?;
                        if size == 0 {
                            Chunked::Trailers(0)
                        } else {
                            Chunked::Data(size)
                        }
                    }
                    Chunked::DataEnd if line.is_empty() => Chunked::Size,
                    Chunked::DataEnd => {
                        return Err(invalid("a chunk's data is longer than its size says"));
                    }
                    Chunked::Trailers(_) if line.is_empty() => {
                        *framing = Framing::Done;
                        return Ok(None);
                    }
                    Chunked::Trailers(read) => Chunked::Trailers(read + end + 1),
                    Chunked::Data(_) => unreachable!("data is read above"),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h1(proxied: bool) -> H1 {
        H1 {
            defaults: HeaderMap::new(),
            idle: Mutex::default(),
            proxied,
        }
    }

    fn target(h1: &H1, url: &str) -> Option<(String, String, String)> {
        let target = h1.serves(&reqwest::Url::parse(url).unwrap())?;
        let host = target.host.to_str().unwrap().to_string();
        Some((host, target.path, target.key.to_string()))
    }

    #[test]
    fn only_plain_http_without_user_info_or_proxy_is_sent_here() {
        let direct = h1(false);
        let got = target(&direct, "http://127.0.0.1:8080/mcp?x=1#f");
        let want = ("127.0.0.1:8080", "/mcp?x=1", "127.0.0.1:8080");
        assert_eq!(got, Some((want.0.into(), want.1.into(), want.2.into())));
        let got = target(&direct, "http://[::1]/mcp");
        assert_eq!(
            got,
            Some(("[::1]".into(), "/mcp".into(), "[::1]:80".into()))
        );
        let got = target(&direct, "http://localhost:3000");
        assert_eq!(got.map(|t| t.1), Some("/".into()));
        for elsewhere in [
            "https://127.0.0.1/mcp",
            "http://u:p@127.0.0.1/mcp",
            "http://u@h/",
        ] {
            assert!(target(&direct, elsewhere).is_none(), "{elsewhere}");
        }
        assert!(target(&h1(true), "http://127.0.0.1:8080/mcp").is_none());
    }

    #[test]
    fn a_request_is_one_buffer_with_host_and_length() {
        let direct = h1(false);
        let target = direct
            .serves(&reqwest::Url::parse("http://h:1/p").unwrap())
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("1"));
        let bytes = encode(&target, &headers, b"{}");
        assert_eq!(
            bytes,
            b"POST /p HTTP/1.1\r\nhost: h:1\r\nx-a: 1\r\ncontent-length: 2\r\n\r\n{}"
        );
        headers.insert(HOST, HeaderValue::from_static("own"));
        let bytes = String::from_utf8(encode(&target, &headers, b"")).unwrap();
        assert!(
            bytes.starts_with("POST /p HTTP/1.1\r\nx-a: 1\r\nhost: own\r\n"),
            "{bytes}"
        );
    }

    #[test]
    fn an_answer_s_framing_is_read_from_its_headers() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, HeaderValue::from_static(value));
            }
            map
        };
        let ok = StatusCode::OK;
        type Case = (&'static [(&'static str, &'static str)], Result<Framing, ()>);
        let cases: &[Case] = &[
            (&[("content-length", "12")], Ok(Framing::Length(12))),
            (&[("content-length", "0")], Ok(Framing::Done)),
            (&[("content-length", "7, 7")], Ok(Framing::Length(7))),
            (&[("content-length", "7"), ("content-length", "8")], Err(())),
            (&[("content-length", "-1")], Err(())),
            (&[("content-length", "+1")], Err(())),
            (
                &[
                    ("transfer-encoding", "gzip, chunked"),
                    ("content-length", "3"),
                ],
                Ok(Framing::Chunked(Chunked::Size)),
            ),
            (
                &[("transfer-encoding", "chunked, gzip")],
                Ok(Framing::Close),
            ),
            (&[], Ok(Framing::Close)),
        ];
        for (pairs, want) in cases {
            let got = framing(ok, &headers(pairs)).map_err(|_| ());
            assert_eq!(&got, want, "{pairs:?}");
        }
        let length = headers(&[("content-length", "5")]);
        assert_eq!(
            framing(StatusCode::NO_CONTENT, &length).unwrap(),
            Framing::Done
        );
    }
}

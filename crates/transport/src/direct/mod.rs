//! The bottom of the Streamable HTTP client: a request's POST sent on reqwest here, its answer
//! read here; everything else by rmcp's reqwest client.
//!
//! Why: rmcp reads a POST's event stream a byte at a time twice over (its size check, then
//! `sse_stream`'s line search) — a tenth of the gateway's instructions per call. [`Direct`]
//! sends a request's POST the way rmcp's client does and reads the stream with one vectorised
//! line search ([`events`]); to a plain `http://` server it writes and reads the POST itself
//! ([`h1`]) instead of through reqwest and hyper. Notifications, responses, `server/discover`
//! (which has its own fallback for servers that predate it), the GET stream and the DELETE stay
//! rmcp's.
//!
//! Invariant: for every response a request's POST can get, [`Direct`] gives rmcp what rmcp's
//! own reqwest client gives it — the same `StreamableHttpPostResponse` or the same
//! `StreamableHttpError` variant, under the same limits: a 401 or 403 with a challenge is
//! `AuthRequired` / `InsufficientScope`; 202 and 204 are `Accepted`; a 404 in a session is
//! `SessionExpired`; a 429, or a 5xx without a JSON-RPC error, is `HttpStatus` with its bounded
//! `Retry-After`; a JSON-RPC error body under any status is that error; any other failure is
//! `UnexpectedServerResponse` with the status and a bounded prefix of the body. Two
//! differences: in reading an event stream, what the SSE specification says to ignore (an
//! unknown field, a line without a colon) is ignored, where rmcp's parser failed the stream;
//! and a listing in a JSON body with an entry rmcp's types refuse keeps its other entries (the
//! bad ones become placeholders naming why), as an event stream's listing does.

mod events;
mod h1;

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER,
    WWW_AUTHENTICATE,
};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage, ServerResult};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use crate::inbound::{
    JSON_PARSE_ERROR, LISTING_CHECK_FROM, MAX_LISTING_ENTRIES, over_long_listing, salvage_listing,
};
use crate::layer::PostResult;
use events::EventStream;

/// The most bytes of a `Retry-After` kept (rmcp's bound).
const MAX_RETRY_AFTER_BYTES: usize = 128;

/// What a body that could not be read shows in its place (rmcp's words).
const BODY_READ_FAILURE: &str = "<failed to read response body>";

/// The `Accept` of a request's POST (rmcp's).
const ACCEPTED: &str = "text/event-stream, application/json";

/// A reqwest client whose request POSTs are sent and read here (see the module docs).
#[derive(Clone)]
pub(crate) struct Direct {
    http: reqwest::Client,
    /// The last URI posted to, parsed: rmcp passes the same one with every request, and
    /// reqwest would parse its text each time.
    parsed: Arc<std::sync::Mutex<Option<Parsed>>>,
    /// Plain-HTTP POSTs written here, with the default headers `http` was built with.
    h1: Option<Arc<h1::H1>>,
}

/// A URI's text and what it parses to.
type Parsed = (Arc<str>, Arc<ParsedUri>);

/// A URI parsed: its URL, and where its POSTs go when they are written here.
struct ParsedUri {
    url: reqwest::Url,
    target: Option<h1::Target>,
}

impl Direct {
    /// Every request's POST through `http`.
    pub(crate) fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            parsed: Arc::default(),
            h1: None,
        }
    }

    /// A request's POST to an `http://` URL written here (see [`h1`]), with `defaults`: the
    /// default headers `http` was built with, which it sends on every other request.
    pub(crate) fn plain_http_here(http: reqwest::Client, defaults: HeaderMap) -> Self {
        Self {
            h1: Some(h1::H1::new(defaults)),
            ..Self::new(http)
        }
    }

    /// `uri` parsed (once while it stays the same); `None` when it is no URL, which reqwest
    /// then reports as it always does.
    fn url(&self, uri: &Arc<str>) -> Option<Arc<ParsedUri>> {
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((text, known)) = parsed.as_ref()
            && text == uri
        {
            return Some(known.clone());
        }
        let url = reqwest::Url::parse(uri).ok()?;
        let target = self.h1.as_ref().and_then(|h1| h1.serves(&url));
        let known = Arc::new(ParsedUri { url, target });
        *parsed = Some((uri.clone(), known.clone()));
        Some(known)
    }

    /// The reqwest client underneath, for requests of another kind.
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A request's POST: `message` to `uri`, as rmcp's reqwest client sends it.
    async fn request(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult<reqwest::Error> {
        let url = self.url(&uri);
        let attached = session_id.is_some();
        if let Some(h1) = &self.h1
            && let Some(target) = url.as_ref().and_then(|url| url.target.as_ref())
            && let Some(headers) =
                h1_headers(auth.as_deref(), &custom_headers, session_id.as_deref())
            && let Ok(body) = encode(&message)
        {
            match h1.post(target, headers, &body).await {
                Ok(Some(answer)) if !answer.status.is_redirection() => {
                    return answered(Response::H1(answer), attached, limits).await;
                }
                // A redirect, or no connection: reqwest sends it and reports what it gets.
                Ok(_) => {}
                Err(e) => return Err(StreamableHttpError::Io(e)),
            }
        }
        let request = match url {
            Some(url) => self.http.post(url.url.clone()),
            None => self.http.post(uri.as_ref()),
        };
        let mut request = request.header(ACCEPT, ACCEPTED);
        if let Some(auth) = auth {
            request = request.bearer_auth(auth);
        }
        for (name, value) in custom_headers {
            if reserved(&name) {
                return Err(StreamableHttpError::ReservedHeaderConflict(
                    name.to_string(),
                ));
            }
            request = request.header(name, value);
        }
        if let Some(session_id) = session_id {
            request = request.header(HEADER_SESSION_ID, session_id.as_ref());
        }
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
        answered(Response::Reqwest(response), attached, limits).await
    }
}

/// The headers reqwest's request would carry (before its client's defaults) for a POST with
/// `auth`, `custom` and `session`; `None` when reqwest would refuse the request (it then does).
fn h1_headers(
    auth: Option<&str>,
    custom: &HashMap<HeaderName, HeaderValue>,
    session: Option<&str>,
) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(4 + custom.len());
    headers.append(ACCEPT, HeaderValue::from_static(ACCEPTED));
    if let Some(auth) = auth {
        let mut value = HeaderValue::from_str(&format!("Bearer {auth}")).ok()?;
        value.set_sensitive(true);
        headers.append(AUTHORIZATION, value);
    }
    for (name, value) in custom {
        if reserved(name) {
            return None;
        }
        headers.append(name.clone(), value.clone());
    }
    if let Some(session) = session {
        headers.append(SESSION_ID, HeaderValue::from_str(session).ok()?);
    }
    if !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON_MIME_TYPE));
    }
    Some(headers)
}

/// rmcp's `HEADER_SESSION_ID`, lower-cased as a header name is stored (made once, not per
/// request).
const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// A request's body: `message` as JSON, written into a buffer sized for a typical call (a
/// buffer grown from empty is reallocated and copied about ten times for a 1 KiB call).
fn encode(message: &ClientJsonRpcMessage) -> serde_json::Result<Vec<u8>> {
    let mut body = Vec::with_capacity(1024);
    serde_json::to_writer(&mut body, message)?;
    Ok(body)
}

/// An answer to a request's POST, read by reqwest or here.
enum Response {
    Reqwest(reqwest::Response),
    H1(h1::Answer),
}

/// A failure reading an answer's body.
#[derive(Debug)]
enum BodyError {
    Reqwest(reqwest::Error),
    Io(std::io::Error),
}

impl BodyError {
    /// The error itself, boxed (so that the failure classification finds its type).
    fn boxed(self) -> events::BodyFailure {
        match self {
            BodyError::Reqwest(e) => Box::new(e),
            BodyError::Io(e) => Box::new(e),
        }
    }
}

impl From<BodyError> for StreamableHttpError<reqwest::Error> {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Reqwest(e) => StreamableHttpError::Client(e),
            BodyError::Io(e) => StreamableHttpError::Io(e),
        }
    }
}

impl Response {
    fn status(&self) -> StatusCode {
        match self {
            Response::Reqwest(r) => r.status(),
            Response::H1(a) => a.status,
        }
    }

    fn headers(&self) -> &HeaderMap {
        match self {
            Response::Reqwest(r) => r.headers(),
            Response::H1(a) => &a.headers,
        }
    }

    fn content_length(&self) -> Option<u64> {
        match self {
            Response::Reqwest(r) => r.content_length(),
            Response::H1(a) => a.body.content_length(),
        }
    }

    /// The body's chunks.
    fn into_body(self) -> BoxStream<'static, Result<Bytes, BodyError>> {
        match self {
            Response::Reqwest(r) => r.bytes_stream().map_err(BodyError::Reqwest).boxed(),
            Response::H1(a) => a.body.into_stream().map_err(BodyError::Io).boxed(),
        }
    }
}

/// What rmcp's client makes of `response` to a request's POST (`attached`: sent in a session).
async fn answered(
    response: Response,
    attached: bool,
    limits: StreamableHttpResponseLimits,
) -> PostResult<reqwest::Error> {
    let status = response.status();
    let headers = response.headers();
    if let Some(refusal) = challenge(status, headers) {
        return Err(refusal);
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Ok(StreamableHttpPostResponse::Accepted);
    }
    if status == StatusCode::NOT_FOUND && attached {
        return Err(StreamableHttpError::SessionExpired);
    }
    let content_type = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes);
    let is = |mime: &str| content_type.is_some_and(|ct| media_type_is(ct, mime));
    let (json, sse) = (is(JSON_MIME_TYPE), is(EVENT_STREAM_MIME_TYPE));
    let session = headers
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !status.is_success() {
        // Boxed: inline, the failure's reading would be part of every answer's future.
        return Box::pin(failure(response, json, session, limits)).await;
    }
    if sse {
        let body = response.into_body().map_err(BodyError::boxed).boxed();
        let events = EventStream::new(body, limits.max_sse_event_size).boxed();
        return Ok(StreamableHttpPostResponse::Sse(events, session));
    }
    if !json {
        let content_type = content_type.map(|ct| String::from_utf8_lossy(ct).into_owned());
        return Err(StreamableHttpError::UnexpectedContentType(content_type));
    }
    let body = read_bounded(response, limits.max_json_response_size).await?;
    // A listing with an entry rmcp's types refuse decodes as a catch-all result, or not at all
    // (a schema nested past serde's depth): handed on with the entries that decode and the
    // others as placeholders naming why, as the harness's decoder does for an event stream's
    // answer — where rmcp would hand on the catch-all, or fail the request whole.
    if body.len() >= LISTING_CHECK_FROM
        && let Some(kind) = over_long_listing(&body)
    {
        return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
            format!(
                "the server answered with a listing page of more than {MAX_LISTING_ENTRIES} \
                 {kind}, the most a listing may hold; it was not decoded"
            ),
        )));
    }
    let message = match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
        Ok(ServerJsonRpcMessage::Response(r))
            if matches!(
                r.result,
                ServerResult::CustomResult(_) | ServerResult::EmptyResult(_)
            ) =>
        {
            salvage_listing(&body).unwrap_or(ServerJsonRpcMessage::Response(r))
        }
        Ok(message) => message,
        Err(e) => salvage_listing(&body).ok_or_else(|| {
            StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                "{JSON_PARSE_ERROR}{e}: {}",
                preview(&body)
            )))
        })?,
    };
    Ok(StreamableHttpPostResponse::Json(message, session))
}

/// Whether `message` is a request whose POST is sent here (every one but `server/discover`).
fn sent_here(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r)
        if !matches!(r.request, ClientRequest::DiscoverRequest(_)))
}

/// Whether a custom header would override one the client sets itself (rmcp's list, less the
/// protocol version header, which rmcp's worker itself sends as a custom header).
fn reserved(name: &HeaderName) -> bool {
    ["accept", HEADER_SESSION_ID, HEADER_LAST_EVENT_ID]
        .iter()
        .any(|r| name.as_str().eq_ignore_ascii_case(r))
}

/// Whether the `Content-Type` `ct` names the media type `mime` (parameters ignored).
fn media_type_is(ct: &[u8], mime: &str) -> bool {
    let end = memchr::memchr(b';', ct).unwrap_or(ct.len());
    ct[..end].trim_ascii().eq_ignore_ascii_case(mime.as_bytes())
}

/// A 401 or a 403 with a `WWW-Authenticate` challenge, as rmcp's errors for them.
fn challenge(
    status: StatusCode,
    headers: &HeaderMap,
) -> Option<StreamableHttpError<reqwest::Error>> {
    if !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return None;
    }
    let header = headers.get(WWW_AUTHENTICATE)?;
    let Ok(header) = header.to_str() else {
        return Some(StreamableHttpError::UnexpectedServerResponse(
            "invalid www-authenticate header value".into(),
        ));
    };
    Some(if status == StatusCode::UNAUTHORIZED {
        StreamableHttpError::AuthRequired(AuthRequiredError::new(header.to_string()))
    } else {
        StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
            header.to_string(),
            scope_of(header),
        ))
    })
}

/// The `scope` parameter of a challenge, quoted or not.
fn scope_of(header: &str) -> Option<String> {
    let at = header.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let value = &header[at..];
    let scope = match value.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => value
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .next()
            .unwrap_or(""),
    };
    (!scope.is_empty()).then(|| scope.to_string())
}

/// A 429 or a 5xx as rmcp's status error, with a bounded UTF-8 `Retry-After`.
fn status_error(status: StatusCode, headers: &HeaderMap) -> Option<HttpStatusError> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let retry_after = headers
        .get(RETRY_AFTER)
        .filter(|v| v.as_bytes().len() <= MAX_RETRY_AFTER_BYTES)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::to_string);
    Some(HttpStatusError::new(status.as_u16(), retry_after))
}

/// What a request's POST that failed with an HTTP status gets: the JSON-RPC error its body
/// carries, as the answer; else the status error, or the status with a bounded prefix of the
/// body.
async fn failure(
    response: Response,
    json: bool,
    session: Option<String>,
    limits: StreamableHttpResponseLimits,
) -> PostResult<reqwest::Error> {
    let status = response.status();
    let status_error = match status_error(status, response.headers()) {
        Some(error) if !json || status == StatusCode::TOO_MANY_REQUESTS => {
            return Err(error.into());
        }
        other => other,
    };
    // An unchallenged 401/403 keeps its status, whatever its body says.
    let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
    let max = limits.max_error_response_size;
    let unread = || BODY_READ_FAILURE[..BODY_READ_FAILURE.len().min(max)].to_string();
    let body = if json && !auth_failure {
        match read_bounded(response, limits.max_json_response_size).await {
            Ok(body) => match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(error @ ServerJsonRpcMessage::Error(_)) => {
                    return Ok(StreamableHttpPostResponse::Json(error, session));
                }
                _ => lossy(&body[..body.len().min(max)]),
            },
            Err(e @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                return Err(status_error.map_or(e, Into::into));
            }
            Err(_) => unread(),
        }
    } else {
        match read_prefix(response, max).await {
            Ok(prefix) => lossy(&prefix),
            Err(_) => unread(),
        }
    };
    Err(match status_error {
        Some(error) => error.into(),
        None => {
            StreamableHttpError::UnexpectedServerResponse(format!("HTTP {status}: {body}").into())
        }
    })
}

/// The whole body, refused (`ResponseBodyTooLarge`) as soon as it is known to pass `max`.
async fn read_bounded(
    response: Response,
    max: usize,
) -> Result<Vec<u8>, StreamableHttpError<reqwest::Error>> {
    let length = response.content_length();
    crate::net::read_capped_body(length, response.into_body(), max)
        .await?
        .ok_or(StreamableHttpError::ResponseBodyTooLarge { max_size: max })
}

/// At most the first `max` bytes of the body (a diagnostic); the rest is not read.
async fn read_prefix(response: Response, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    let mut chunks = response.into_body();
    while body.len() < max {
        let Some(chunk) = chunks.next().await.transpose()? else {
            break;
        };
        body.extend_from_slice(&chunk[..chunk.len().min(max - body.len())]);
    }
    Ok(body)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The start of a body that is no JSON-RPC message, for the error saying so (rmcp's preview).
fn preview(body: &[u8]) -> String {
    if body.is_empty() {
        return "<empty>".into();
    }
    let text = String::from_utf8_lossy(body);
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

impl StreamableHttpClient for Direct {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult<Self::Error> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
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
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    /// Boxed, so that the layers above and rmcp's worker hold a pointer, not the 3 KiB of a
    /// request in flight (see `Layered`'s POST).
    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = PostResult<Self::Error>> + Send + '_ {
        let post: BoxFuture<'_, _> = if sent_here(&message) {
            let headers = custom_headers;
            Box::pin(self.request(uri, message, session_id, auth_header, headers, limits))
        } else {
            Box::pin(self.http.post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            ))
        };
        post
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    forward_get_streams!(http);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::response::{IntoResponse, Response};
    use rmcp::model::{PingRequest, RequestId};

    use super::*;

    /// The session header's name made once is rmcp's, and a request's body is the JSON that
    /// `serde_json::to_vec` writes.
    #[test]
    fn the_session_header_and_body_are_rmcps() {
        assert_eq!(
            SESSION_ID,
            HeaderName::from_bytes(HEADER_SESSION_ID.as_bytes()).expect("a header name")
        );
        let message = ClientJsonRpcMessage::request(
            rmcp::model::ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(7),
        );
        assert_eq!(
            encode(&message).expect("encodes"),
            serde_json::to_vec(&message).expect("encodes")
        );
    }

    /// A canned answer: status, headers, body.
    type Canned = (u16, &'static [(&'static str, &'static str)], &'static [u8]);

    const SSE: (&str, &str) = ("content-type", "text/event-stream");
    const JSON: (&str, &str) = ("content-type", "application/json");
    const SESSION: (&str, &str) = ("mcp-session-id", "s-1");
    const ANSWER: &[u8] = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    const ERROR: &[u8] = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no"}}"#;

    /// Every kind of answer a request's POST can get (the small limits are those of
    /// [`limits`]: 64-byte events and JSON bodies, 16-byte diagnostics).
    const CASES: &[Canned] = &[
        (200, &[SSE, SESSION], b"id: 0\ndata:\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\nid: 1\n\n"),
        (200, &[("content-type", "Text/Event-Stream; charset=utf-8")], b"data: {}\n\n"),
        (200, &[SSE], b": ping\n\ndata: 0123456789012345678901234567890123456789012345678901234567890123\n\n"),
        (200, &[SSE], b"data: \xc3\n\n"),
        (200, &[JSON, SESSION], ANSWER),
        (200, &[("content-type", "application/json; charset=utf-8")], ANSWER),
        (200, &[JSON], b"{\"not\":\"json-rpc\"}"),
        (200, &[JSON], b""),
        (200, &[JSON], br#"{"jsonrpc":"2.0","id":1,"result":{"x":"0123456789012345678901234567890123456789"}}"#),
        (200, &[("content-type", "text/plain")], b"hello"),
        (200, &[], b""),
        (202, &[], b""),
        (204, &[], b""),
        (401, &[("www-authenticate", "Bearer resource_metadata=\"http://x/.well-known\"")], b""),
        (401, &[JSON], ERROR),
        (401, &[], b"go away, you are not welcome here"),
        (403, &[("www-authenticate", "Bearer error=\"insufficient_scope\", scope=\"a b\"")], b""),
        (403, &[("www-authenticate", "Bearer scope=read:data, error=x")], b""),
        (403, &[("www-authenticate", "Bearer error=\"insufficient_scope\"")], b""),
        (404, &[], b"gone"),
        (400, &[JSON, SESSION], ERROR),
        (400, &[JSON], b"{\"detail\":\"a JSON body that is not JSON-RPC at all\"}"),
        (400, &[JSON], br#"{"detail":"0123456789012345678901234567890123456789012345678901234567890123"}"#),
        (400, &[("content-type", "text/html")], b"<html>a long diagnostic page</html>"),
        // A diagnostic in another charset, and one after a BOM, decode as rmcp's build does.
        (400, &[("content-type", "text/plain; charset=iso-8859-1")], b"caf\xe9"),
        (500, &[("content-type", "text/plain")], b"\xef\xbb\xbfbom"),
        (418, &[("content-type", "text/plain")], b"\xef\xbb\xbfbom"),
        (429, &[JSON, ("retry-after", "17")], ERROR),
        (429, &[("retry-after", "Fri, 23 Oct 2026 12:00:00 GMT")], b""),
        (429, &[("retry-after", "in été")], b""),
        (500, &[JSON], ERROR),
        (500, &[("content-type", "text/plain")], b"boom"),
        (503, &[JSON, ("retry-after", "5")], b"{\"busy\":true}"),
        (503, &[JSON], br#"{"detail":"0123456789012345678901234567890123456789012345678901234567890123"}"#),
    ];

    fn limits() -> StreamableHttpResponseLimits {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = 64;
        limits.max_json_response_size = 64;
        limits.max_error_response_size = 16;
        limits
    }

    /// Serves `CASES[n]` at `/n`; the base URL.
    async fn serve() -> String {
        let app = axum::Router::new().route(
            "/{case}",
            axum::routing::post(
                |axum::extract::Path(case): axum::extract::Path<usize>| async move {
                    let (status, headers, body) = CASES[case];
                    let mut response: Response = body.into_response();
                    *response.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
                    response.headers_mut().remove("content-type");
                    for (name, value) in headers {
                        response.headers_mut().insert(*name, value.parse().unwrap());
                    }
                    response
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// What a client makes of case `n`, as text to compare.
    async fn outcome<C: StreamableHttpClient>(
        client: &C,
        url: &str,
        n: usize,
        session: bool,
    ) -> String {
        outcome_within(client, url, n, session, limits()).await
    }

    /// [`outcome`] under `limits`.
    async fn outcome_within<C: StreamableHttpClient>(
        client: &C,
        url: &str,
        n: usize,
        session: bool,
        limits: StreamableHttpResponseLimits,
    ) -> String {
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let message = ClientJsonRpcMessage::request(ping, RequestId::Number(1));
        let session = session.then(|| Arc::<str>::from("s-0"));
        let uri = Arc::<str>::from(format!("{url}/{n}"));
        let sent = client
            .post_message_with_response_limits(uri, message, session, None, HashMap::new(), limits)
            .await;
        match sent {
            Ok(StreamableHttpPostResponse::Accepted) => "accepted".into(),
            Ok(StreamableHttpPostResponse::Json(m, session)) => {
                format!("json {} {session:?}", serde_json::to_string(&m).unwrap())
            }
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let events: Vec<String> = events
                    .map(|e| e.map_or_else(|e| format!("error {e}"), |e| format!("{e:?}")))
                    .collect()
                    .await;
                format!("sse {events:?} {session:?}")
            }
            Err(e) => format!("{e:?}"),
            Ok(other) => format!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn every_answer_to_a_request_comes_out_as_rmcp_makes_it() {
        let url = serve().await;
        let (rmcp, direct) = (reqwest::Client::new(), Direct::new(reqwest::Client::new()));
        let written = plain();
        for (n, case) in CASES.iter().enumerate() {
            for session in [false, true] {
                let want = outcome(&rmcp, &url, n, session).await;
                let got = outcome(&direct, &url, n, session).await;
                assert_eq!(got, want, "case {n} {case:?}, in a session: {session}");
                let got = outcome(&written, &url, n, session).await;
                assert_eq!(
                    got, want,
                    "written here: case {n} {case:?}, in a session: {session}"
                );
            }
        }
    }

    /// A `Direct` writing plain-HTTP POSTs itself (no default headers).
    fn plain() -> Direct {
        Direct::plain_http_here(reqwest::Client::new(), HeaderMap::new())
    }

    /// A server answering each request to `/n` with the raw bytes `answers[n]`, recording the
    /// head of each request and counting connections; it closes a connection after an answer
    /// that says `connection: close`, and with `close` after every answer.
    struct Raw {
        url: String,
        heads: Arc<std::sync::Mutex<Vec<String>>>,
        connections: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Raw {
        async fn start(answers: Vec<Vec<u8>>, close: bool) -> Raw {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
            let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let answers = Arc::new(answers);
            let (kept, count) = (heads.clone(), connections.clone());
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let (answers, heads) = (answers.clone(), kept.clone());
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        loop {
                            let end = loop {
                                if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                    break at + 4;
                                }
                                let mut chunk = [0u8; 4096];
                                match socket.read(&mut chunk).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                                }
                            };
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            let length: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .map_or(0, |v| v.trim().parse().unwrap());
                            while buf.len() < end + length {
                                let mut chunk = [0u8; 4096];
                                match socket.read(&mut chunk).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                                }
                            }
                            buf.drain(..end + length);
                            let path = head.split(' ').nth(1).unwrap_or("/0").to_string();
                            heads.lock().unwrap().push(head);
                            let n: usize = path.trim_start_matches('/').parse().unwrap_or(0);
                            let says_close =
                                answers[n].windows(17).any(|w| w == b"connection: close");
                            if socket.write_all(&answers[n]).await.is_err() || close || says_close {
                                return;
                            }
                        }
                    });
                }
            });
            Raw {
                url,
                heads,
                connections,
            }
        }

        fn connections(&self) -> usize {
            self.connections.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// Answers framed in every way HTTP/1.1 allows, and interim answers before them.
    const FRAMED: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
          5;ext=1\r\nid: 0\r\n\
          2\r\n\n\n\r\n\
          2C\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n\r\n\
          0\r\nx-trailer: yes\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
          11\r\n{\"jsonrpc\":\"2.0\",\r\n13\r\n\"id\":1,\"result\":{}}\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
          content-length: 36\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n\
          {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: 36\r\n\r\n\
          {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\ngone",
        b"HTTP/1.1 503 Busy\r\nretry-after: 5\r\ncontent-length: 0\r\n\r\n",
    ];

    #[tokio::test]
    async fn answers_framed_every_way_come_out_as_rmcp_makes_them() {
        let answers: Vec<Vec<u8>> = FRAMED.iter().map(|a| a.to_vec()).collect();
        let server = Raw::start(answers, false).await;
        let rmcp = reqwest::Client::new();
        for n in 0..FRAMED.len() {
            for session in [false, true] {
                let want = outcome(&rmcp, &server.url, n, session).await;
                let before = server.connections();
                // A client of its own: the request on a connection of its own.
                let got = outcome(&plain(), &server.url, n, session).await;
                assert_eq!(got, want, "answer {n}, in a session: {session}");
                assert_eq!(
                    server.connections(),
                    before + 1,
                    "answer {n} sent once, here"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_connection_is_kept_alive_only_when_both_sides_may_go_on() {
        let keep = FRAMED[2].to_vec();
        let answers = vec![
            keep,
            FRAMED[3].to_vec(),
            FRAMED[4].to_vec(),
            FRAMED[0].to_vec(),
        ];
        let server = Raw::start(answers, false).await;
        let written = plain();
        for n in [0, 0, 0, 3, 3, 0] {
            let got = outcome(&written, &server.url, n, false).await;
            assert!(got.contains("result"), "{got}");
        }
        assert_eq!(
            server.connections(),
            1,
            "six answers with a length or chunks, one connection"
        );
        // After `connection: close`, and after an HTTP/1.0 answer, the next request opens
        // another connection.
        for (n, opened) in [(1, 0), (0, 1), (2, 0), (0, 1)] {
            let before = server.connections();
            let got = outcome(&written, &server.url, n, false).await;
            assert!(got.contains("result"), "{got}");
            assert_eq!(server.connections(), before + opened, "answer {n}");
        }
    }

    /// A listing in a JSON body with entries rmcp's types refuse — one that decodes as a
    /// catch-all result, one nested past serde's depth that does not decode at all — keeps
    /// its good entry, the others as placeholders; rmcp's client hands on the catch-all, or
    /// fails the request.
    #[tokio::test]
    async fn a_json_listing_keeps_the_entries_that_decode() {
        let json = |body: String| {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let good = r#"{"name":"echo","inputSchema":{"type":"object"}}"#;
        let bad =
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{good},{{"name":5}}]}}}}"#);
        let deep_schema = format!(
            "{}{}",
            r#"{"a":"#.repeat(200),
            "1".to_string() + &"}".repeat(200)
        );
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{good},{{"name":"deep","inputSchema":{deep_schema}}}]}}}}"#
        );
        let server = Raw::start(vec![json(bad), json(deep)], false).await;
        let limits = StreamableHttpResponseLimits::default;
        for n in [0, 1] {
            let rmcp =
                outcome_within(&reqwest::Client::new(), &server.url, n, false, limits()).await;
            let got = outcome_within(&plain(), &server.url, n, false, limits()).await;
            assert!(got.starts_with("json"), "{n}: {got}");
            assert!(got.contains(r#""name":"echo""#), "{n}: {got}");
            assert!(
                got.contains(crate::inbound::UNDECODABLE_META_KEY),
                "{n}: {got}"
            );
            assert_ne!(got, rmcp, "{n}: rmcp's client salvages nothing");
        }
    }

    #[tokio::test]
    async fn a_redirect_is_followed_by_reqwest_as_before() {
        let moved = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /1\r\ncontent-length: 0\r\n\r\n";
        let server = Raw::start(vec![moved.to_vec(), FRAMED[2].to_vec()], false).await;
        let want = outcome(&reqwest::Client::new(), &server.url, 0, true).await;
        assert!(want.contains("result"), "{want}");
        let got = outcome(&plain(), &server.url, 0, true).await;
        assert_eq!(got, want);
        let paths: Vec<String> = server
            .heads
            .lock()
            .unwrap()
            .iter()
            .map(|h| h[..7].to_string())
            .collect();
        assert_eq!(
            paths,
            ["POST /0", "POST /1", "POST /0", "POST /0", "POST /1"]
        );
    }

    #[tokio::test]
    async fn a_configured_connection_close_leaves_no_connection_to_reuse() {
        let server = Raw::start(vec![FRAMED[2].to_vec()], false).await;
        let mut defaults = HeaderMap::new();
        defaults.insert(
            reqwest::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
        let written = Direct::plain_http_here(reqwest::Client::new(), defaults);
        for round in 1..=2 {
            let got = outcome(&written, &server.url, 0, false).await;
            assert!(got.contains("result"), "{got}");
            assert_eq!(server.connections(), round);
        }
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_not_used_again() {
        let server = Raw::start(vec![FRAMED[2].to_vec()], true).await;
        let written = plain();
        for round in 1..=3 {
            let got = outcome(&written, &server.url, 0, false).await;
            assert!(got.contains("result"), "round {round}: {got}");
            assert_eq!(server.connections(), round);
            // The server's close reaches this side while the connection is idle.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_request_written_here_carries_the_headers_reqwest_sends() {
        let answers = vec![FRAMED[2].to_vec()];
        let server = Raw::start(answers, false).await;
        let mut defaults = HeaderMap::new();
        defaults.insert("x-api-key", HeaderValue::from_static("k-1"));
        defaults.insert(ACCEPT, HeaderValue::from_static("text/plain"));
        defaults.insert("x-trace", HeaderValue::from_static("from-config"));
        let rmcp = reqwest::Client::builder()
            .default_headers(defaults.clone())
            .build()
            .unwrap();
        let written = Direct::plain_http_here(rmcp.clone(), defaults);
        let mut custom = HashMap::new();
        custom.insert(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static("2025-11-25"),
        );
        custom.insert(
            HeaderName::from_static("x-trace"),
            HeaderValue::from_static("own"),
        );
        post_ping(&rmcp, &server.url, custom.clone()).await;
        post_ping(&written, &server.url, custom).await;
        let heads = server.heads.lock().unwrap().clone();
        let lines = |head: &str| {
            let mut lines: Vec<String> = head.lines().map(str::to_ascii_lowercase).collect();
            lines.sort();
            lines
        };
        assert_eq!(heads.len(), 2, "{heads:?}");
        assert_eq!(
            lines(&heads[1]),
            lines(&heads[0]),
            "written here vs reqwest"
        );
        assert!(
            heads[1].contains("authorization: Bearer t-1"),
            "{}",
            heads[1]
        );
        assert!(heads[1].contains("x-trace: own") && !heads[1].contains("from-config"));
    }

    /// A ping POSTed by `client` to `url` in session `s-7` with token `t-1` and `custom`.
    async fn post_ping<C: StreamableHttpClient>(
        client: &C,
        url: &str,
        custom: HashMap<HeaderName, HeaderValue>,
    ) {
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let message = ClientJsonRpcMessage::request(ping, RequestId::Number(1));
        let uri = Arc::<str>::from(format!("{url}/0"));
        let (session, auth) = (Some("s-7".into()), Some("t-1".into()));
        let sent = client
            .post_message(uri, message, session, auth, custom)
            .await;
        assert!(sent.is_ok(), "{:?}", sent.err());
    }

    #[tokio::test]
    async fn a_body_cut_short_or_a_head_too_large_is_a_classified_failure() {
        let cut = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 90\r\n\
                    connection: close\r\n\r\n{\"jsonrpc\":"
            .to_vec();
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        huge.extend(
            format!("x-filler: {}\r\n", "0".repeat(1000))
                .repeat(90)
                .as_bytes(),
        );
        huge.extend_from_slice(b"content-length: 0\r\n\r\n");
        let chunk = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                      transfer-encoding: chunked\r\nconnection: close\r\n\r\nzz\r\n"
            .to_vec();
        let mut interim = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(17);
        interim.extend_from_slice(FRAMED[2]);
        let server = Raw::start(vec![cut, huge, chunk, interim], false).await;
        let ping = || {
            ClientJsonRpcMessage::request(
                ClientRequest::PingRequest(PingRequest::default()),
                RequestId::Number(1),
            )
        };
        let post = |n: usize| {
            let uri = Arc::<str>::from(format!("{}/{n}", server.url));
            async move {
                plain()
                    .post_message(uri, ping(), None, None, HashMap::new())
                    .await
                    .expect_err("a failure")
            }
        };
        let cut = post(0).await;
        assert_eq!(
            crate::net::http_failure(&cut),
            Some(crate::net::NetFailure::Reset),
            "{cut:?}"
        );
        let huge = post(1).await;
        assert!(huge.to_string().contains("larger than 64 KiB"), "{huge}");
        let chunk = post(2).await;
        assert!(
            chunk.to_string().contains("chunk size is no number"),
            "{chunk}"
        );
        let interim = post(3).await;
        assert!(
            interim.to_string().contains("more than 16 interim"),
            "{interim}"
        );
    }

    #[tokio::test]
    async fn what_the_specification_ignores_no_longer_fails_the_stream() {
        let app = axum::Router::new().route(
            "/{case}",
            axum::routing::post(|| async { ([SSE], "retry: soon\nx-extra: 1\ndata: {}\n\n") }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let rmcp = outcome(&reqwest::Client::new(), &url, 0, false).await;
        assert!(rmcp.contains("error"), "rmcp's parser refuses it: {rmcp}");
        let got = outcome(&Direct::new(reqwest::Client::new()), &url, 0, false).await;
        let event = r#"Sse { event: None, data: Some(\"{}\"), id: None, retry: None }"#;
        assert_eq!(got, format!("sse [\"{event}\"] None"));
    }

    #[test]
    fn a_uri_is_parsed_once_while_it_stays_the_same() {
        let direct = Direct::new(reqwest::Client::new());
        let (a, b): (Arc<str>, Arc<str>) = ("http://127.0.0.1:1/a".into(), "http://h/b?q=1".into());
        for uri in [&a, &a, &b, &a] {
            assert_eq!(
                direct
                    .url(uri)
                    .map(|p| String::from(p.url.clone()))
                    .as_deref(),
                Some(&**uri)
            );
        }
        assert!(direct.url(&"not a url".into()).is_none());
        assert_eq!(
            direct
                .url(&a)
                .map(|p| String::from(p.url.clone()))
                .as_deref(),
            Some(&*a)
        );
    }

    #[test]
    fn only_requests_other_than_discover_are_sent_here() {
        let ping = ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(1),
        );
        assert!(sent_here(&ping));
        let discover: ClientJsonRpcMessage = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{}}"#,
        )
        .unwrap();
        assert!(!sent_here(&discover), "{discover:?}");
        let note: ClientJsonRpcMessage =
            serde_json::from_str(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .unwrap();
        assert!(!sent_here(&note));
    }
}

//! The bottom of the Streamable HTTP client: a request's POST sent on reqwest here, its answer
//! read here; everything else by rmcp's reqwest client.
//!
//! Why: rmcp reads a POST's event stream a byte at a time twice over (its size check, then
//! `sse_stream`'s line search) — a tenth of the gateway's instructions per call. [`Direct`]
//! sends a request's POST the way rmcp's client does and reads the stream with one vectorised
//! line search ([`events`]). Notifications, responses, `server/discover` (which has its own
//! fallback for servers that predate it), the GET stream and the DELETE stay rmcp's.
//!
//! Invariant: for every response a request's POST can get, [`Direct`] gives rmcp what rmcp's
//! own reqwest client gives it — the same `StreamableHttpPostResponse` or the same
//! `StreamableHttpError` variant, under the same limits: a 401 or 403 with a challenge is
//! `AuthRequired` / `InsufficientScope`; 202 and 204 are `Accepted`; a 404 in a session is
//! `SessionExpired`; a 429, or a 5xx without a JSON-RPC error, is `HttpStatus` with its bounded
//! `Retry-After`; a JSON-RPC error body under any status is that error; any other failure is
//! `UnexpectedServerResponse` with the status and a bounded prefix of the body. The one
//! difference is in reading an event stream: what the SSE specification says to ignore (an
//! unknown field, a line without a colon) is ignored, where rmcp's parser failed the stream.

mod events;

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE,
};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};

use crate::inbound::JSON_PARSE_ERROR;
use crate::layer::{PostResult, StreamResult};
use events::EventStream;

/// The most bytes of a `Retry-After` kept (rmcp's bound).
const MAX_RETRY_AFTER_BYTES: usize = 128;

/// What a body that could not be read shows in its place (rmcp's words).
const BODY_READ_FAILURE: &str = "<failed to read response body>";

/// A reqwest client whose request POSTs are sent and read here (see the module docs).
#[derive(Clone)]
pub(crate) struct Direct {
    http: reqwest::Client,
    /// The last URI posted to, parsed: rmcp passes the same one with every request, and
    /// reqwest would parse its text each time.
    parsed: Arc<std::sync::Mutex<Option<Parsed>>>,
}

/// A URI's text and the URL it parses to.
type Parsed = (Arc<str>, reqwest::Url);

impl Direct {
    pub(crate) fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            parsed: Arc::default(),
        }
    }

    /// `uri` parsed (once while it stays the same); `None` when it is no URL, which reqwest
    /// then reports as it always does.
    fn url(&self, uri: &Arc<str>) -> Option<reqwest::Url> {
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((text, url)) = parsed.as_ref()
            && text == uri
        {
            return Some(url.clone());
        }
        let url = reqwest::Url::parse(uri).ok()?;
        *parsed = Some((uri.clone(), url.clone()));
        Some(url)
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
        let request = match self.url(&uri) {
            Some(url) => self.http.post(url),
            None => self.http.post(uri.as_ref()),
        };
        let mut request = request.header(ACCEPT, "text/event-stream, application/json");
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
        let attached = session_id.is_some();
        if let Some(session_id) = session_id {
            request = request.header(HEADER_SESSION_ID, session_id.as_ref());
        }
        let response = request
            .json(&message)
            .send()
            .await
            .map_err(StreamableHttpError::Client)?;
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
            return failure(response, json, session, limits).await;
        }
        if sse {
            let body = response.bytes_stream().boxed();
            let events = EventStream::new(body, limits.max_sse_event_size).boxed();
            return Ok(StreamableHttpPostResponse::Sse(events, session));
        }
        if !json {
            let content_type = content_type.map(|ct| String::from_utf8_lossy(ct).into_owned());
            return Err(StreamableHttpError::UnexpectedContentType(content_type));
        }
        let body = read_bounded(response, limits.max_json_response_size).await?;
        match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(message) => Ok(StreamableHttpPostResponse::Json(message, session)),
            Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("{JSON_PARSE_ERROR}{e}: {}", preview(&body)),
            ))),
        }
    }
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
    response: reqwest::Response,
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
    response: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, StreamableHttpError<reqwest::Error>> {
    crate::net::read_capped(response, max)
        .await
        .map_err(StreamableHttpError::Client)?
        .ok_or(StreamableHttpError::ResponseBodyTooLarge { max_size: max })
}

/// At most the first `max` bytes of the body (a diagnostic); the rest is not read.
async fn read_prefix(mut response: reqwest::Response, max: usize) -> reqwest::Result<Vec<u8>> {
    let mut body = Vec::new();
    while body.len() < max {
        let Some(chunk) = response.chunk().await? else {
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

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> StreamResult<Self::Error> {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> StreamResult<Self::Error> {
        self.http
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use axum::response::{IntoResponse, Response};
    use rmcp::model::{PingRequest, RequestId};

    use super::*;

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
        let ping = ClientRequest::PingRequest(PingRequest::default());
        let message = ClientJsonRpcMessage::request(ping, RequestId::Number(1));
        let session = session.then(|| Arc::<str>::from("s-0"));
        let uri = Arc::<str>::from(format!("{url}/{n}"));
        let sent = client
            .post_message_with_response_limits(
                uri,
                message,
                session,
                None,
                HashMap::new(),
                limits(),
            )
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
        for (n, case) in CASES.iter().enumerate() {
            for session in [false, true] {
                let want = outcome(&rmcp, &url, n, session).await;
                let got = outcome(&direct, &url, n, session).await;
                assert_eq!(got, want, "case {n} {case:?}, in a session: {session}");
            }
        }
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
            assert_eq!(direct.url(uri).map(String::from).as_deref(), Some(&**uri));
        }
        assert_eq!(direct.url(&"not a url".into()), None);
        assert_eq!(direct.url(&a).map(String::from).as_deref(), Some(&*a));
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

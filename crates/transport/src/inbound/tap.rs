//! The Streamable HTTP side of [`Inbound`]: an [`HttpLayer`] that passes every SSE-framed
//! server message through it before rmcp decodes it, and turns rmcp's refusals of a JSON body
//! (too large, undecodable, another id) into the request's error.
//!
//! Invariants: an event is changed only when [`Inbound`] replaces or drops its message (an
//! event without a message passes as it came); a lost session is reported as rmcp's
//! `SessionExpired` only for a request sent in a session, so rmcp re-initialises at most once.

use std::future::Future;

use futures::StreamExt;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpError, StreamableHttpPostResponse,
};

use super::decode::{Decoded, Inbound, answered};
use crate::layer::{Events, Expect, HttpLayer, PostResult, Posted, StreamResult};

/// The [`HttpLayer`] that passes every SSE-framed server message (POST response streams and
/// the GET stream) through [`Inbound`] before rmcp decodes it — the wire notes see it, a
/// listing loses only its undecodable entries, and an undecodable, oversized or non-UTF-8
/// answer fails its request at once with the reason (a response sent as one JSON body is
/// decoded inside the wrapped client: only its failures are seen, and turned into the
/// request's error) — and that recognises a session the server lost even when it does not say
/// so with a 404 (see its `post_for`).
#[derive(Clone)]
pub(crate) struct Tap {
    inbound: Inbound,
}

/// The start of rmcp's error for a JSON body that is no JSON-RPC message (`crate::direct` makes
/// the same).
pub(crate) const JSON_PARSE_ERROR: &str = "could not parse JSON response as ServerJsonRpcMessage: ";

impl Tap {
    /// A tap decoding through `inbound` (which reports to its wire notes).
    pub(crate) fn new(inbound: Inbound) -> Self {
        Self { inbound }
    }

    fn tap_stream(&self, stream: Events, origin: Option<RequestId>) -> Events {
        let inbound = self.inbound.clone();
        stream
            .map(move |item| tap_item(&inbound, item, origin.as_ref(), Expect::Any).0)
            .boxed()
    }

    /// Reads request `id`'s event stream up to its first message. When that message answers
    /// `id` — the usual stream: perhaps a priming event, then the answer, then the end — the
    /// answer is handed on decoded, as if the server had sent it as a JSON body, and the rest
    /// of the stream is read to its end in the background (`ReadToEnd`), so the connection is
    /// reused. Otherwise (a notification or a server request first, an error, or an end
    /// before any message) the stream is handed on as it came: the events read so far, each
    /// decoded once, then the rest through [`Tap::tap_stream`].
    ///
    /// Why: rmcp decodes a JSON body's message once, where an event stream's message is
    /// decoded twice (here, then by rmcp) and costs rmcp a task, its resumable stream and a
    /// 50 ms drain timer; a lone answer is the common case of every call. Waiting here for the
    /// first message changes nothing for rmcp: its POSTs run concurrently, and until the
    /// stream carries a message it has nothing to deliver.
    async fn lone_answer(
        &self,
        mut stream: Events,
        Posted { id, expect }: Posted,
        session: Option<String>,
    ) -> StreamableHttpPostResponse {
        let mut read = Vec::new();
        loop {
            let Some(item) = stream.next().await else {
                let replay = futures::stream::iter(read).boxed();
                return StreamableHttpPostResponse::Sse(replay, session);
            };
            let (item, message) = tap_item(&self.inbound, item, Some(&id), expect);
            if let Some(message) = message.filter(|m| answers(m, &id)) {
                drop(crate::net::ReadToEnd::boxed(stream));
                return StreamableHttpPostResponse::Json(message, session);
            }
            // A message for rmcp, or an error (it may resume the stream): as it came from here.
            let handed_on = item.as_ref().map_or(true, |event| event.data.is_some());
            read.push(item);
            if handed_on {
                break;
            }
        }
        let rest = self.tap_stream(stream, Some(id));
        StreamableHttpPostResponse::Sse(futures::stream::iter(read).chain(rest).boxed(), session)
    }
}

/// One item of a server's stream through `inbound`, as rmcp should get it, and the message it
/// carries, decoded (an answer to `origin` as `expect` says it can be):
/// - an event: its data replaced when the message was, none when it was dropped; an event
///   without a message as it came;
/// - an error: an event over the size cap or not UTF-8 becomes the error message of the
///   request `origin` (when it is one), with the reason; any other error goes on as it came.
fn tap_item(
    inbound: &Inbound,
    item: Result<sse_stream::Sse, SseError>,
    origin: Option<&RequestId>,
    expect: Expect,
) -> (
    Result<sse_stream::Sse, SseError>,
    Option<ServerJsonRpcMessage>,
) {
    let mut event = match item {
        Ok(event) => event,
        Err(e) => {
            let replaced = match &e {
                SseError::Body(b) if b.to_string().contains("exceeded the maximum size") => {
                    inbound.too_large(inbound.limit(), false, Default::default(), origin)
                }
                SseError::Utf8Parse(u) => {
                    inbound.undecodable_because(format!("it is not valid UTF-8 ({u})"), origin)
                }
                _ => None,
            };
            let Some((m, data)) =
                replaced.and_then(|m| serde_json::to_string(&m).ok().map(|data| (m, data)))
            else {
                return (Err(e), None);
            };
            let event = sse_stream::Sse {
                event: None,
                data: Some(data),
                id: None,
                retry: None,
            };
            return (Ok(event), Some(m));
        }
    };
    let message = matches!(event.event.as_deref(), None | Some("" | "message"));
    let Some(data) = event.data.as_ref().filter(|_| message) else {
        return (Ok(event), None);
    };
    match inbound.decode_expecting(data.as_bytes(), origin, expect) {
        Decoded::AsSent(m) => (Ok(event), Some(m)),
        Decoded::Replaced(m) => {
            event.data = serde_json::to_string(&m).ok().or(event.data);
            (Ok(event), Some(m))
        }
        // Keep the event for its id and retry fields; rmcp skips no data.
        Decoded::Dropped => {
            event.data = None;
            (Ok(event), None)
        }
    }
}

/// Whether `message` is the answer (a result or an error) to request `id`.
fn answers(message: &ServerJsonRpcMessage, id: &RequestId) -> bool {
    answered(message) == Some(Some(id))
}

impl HttpLayer for Tap {
    async fn post<E, F, Fut>(&self, attached: bool, auth: Option<String>, send: F) -> PostResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        self.post_for(None, attached, auth, send).await
    }

    fn sends_again(&self) -> bool {
        false
    }

    /// Taps an SSE response; turns a JSON body over the cap or undecodable into the request's
    /// error; and recognises a lost session the way rmcp recognises a 404: some servers answer
    /// a request in a session they forgot with 400, or 200, and a JSON-RPC error "session not
    /// found" (often with a null id, which would leave the request waiting for ever). Only for
    /// a request sent in a session; rmcp then re-initialises once and resends.
    async fn post_for<E, F, Fut>(
        &self,
        request: Option<Posted>,
        attached: bool,
        auth: Option<String>,
        send: F,
    ) -> PostResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        let response = send(auth).await;
        if let Ok(StreamableHttpPostResponse::Sse(stream, session)) = response {
            return Ok(match request {
                Some(posted) => self.lone_answer(stream, posted, session).await,
                None => StreamableHttpPostResponse::Sse(self.tap_stream(stream, None), session),
            });
        }
        let request = request.map(|posted| posted.id);
        match response {
            Err(StreamableHttpError::ResponseBodyTooLarge { max_size }) if request.is_some() => {
                match self
                    .inbound
                    .too_large(max_size, false, Default::default(), request.as_ref())
                {
                    Some(m) => Ok(StreamableHttpPostResponse::Json(m, None)),
                    None => Err(StreamableHttpError::ResponseBodyTooLarge { max_size }),
                }
            }
            Err(StreamableHttpError::UnexpectedServerResponse(text))
                if request.is_some() && text.starts_with(JSON_PARSE_ERROR) =>
            {
                let reason: String = text[JSON_PARSE_ERROR.len()..].chars().take(300).collect();
                match self.inbound.undecodable_because(reason, request.as_ref()) {
                    Some(m) => Ok(StreamableHttpPostResponse::Json(m, None)),
                    None => Err(StreamableHttpError::UnexpectedServerResponse(text)),
                }
            }
            Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(error), _))
                if attached && session_lost(&error.error.message) =>
            {
                tracing::debug!("the server lost the session (JSON-RPC error)");
                Err(StreamableHttpError::SessionExpired)
            }
            // A JSON body answers this request only: another id would leave it waiting.
            Ok(StreamableHttpPostResponse::Json(message, session)) if request.is_some() => {
                match self.inbound.wrong_id(&message, request.as_ref()) {
                    Some(error) => Ok(StreamableHttpPostResponse::Json(error, session)),
                    None => Ok(StreamableHttpPostResponse::Json(message, session)),
                }
            }
            Err(e)
                if attached
                    && !matches!(e, StreamableHttpError::SessionExpired)
                    && session_lost(&e.to_string()) =>
            {
                tracing::debug!("the server lost the session (HTTP error)");
                Err(StreamableHttpError::SessionExpired)
            }
            other => other,
        }
    }

    async fn get<E, F, Fut>(&self, auth: Option<String>, send: F) -> StreamResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = StreamResult<E>> + Send,
    {
        Ok(self.tap_stream(send(auth).await?, None))
    }
}

/// Whether a server's error text says the session it was sent in is gone.
fn session_lost(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("session")
        && [
            "not found",
            "expired",
            "invalid",
            "unknown",
            "no valid",
            "does not exist",
            "terminated",
        ]
        .iter()
        .any(|m| text.contains(m))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rmcp::model::NumberOrString;

    use super::*;
    use crate::wire::WireNotes;

    type Post = StreamableHttpPostResponse;

    fn tap() -> Tap {
        Tap::new(Inbound::new("fx", 1 << 20, WireNotes::default(), false))
    }

    fn event(data: Option<&str>, id: Option<&str>) -> sse_stream::Sse {
        sse_stream::Sse {
            event: None,
            data: data.map(str::to_string),
            id: id.map(str::to_string),
            retry: None,
        }
    }

    const ANSWER: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
    const PROGRESS: &str = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;

    /// A stream of `items`, then its end, which sets `ended` when it is read.
    fn stream(items: Vec<Result<sse_stream::Sse, SseError>>, ended: Arc<AtomicBool>) -> Events {
        futures::stream::iter(items)
            .chain(futures::stream::poll_fn(move |_| {
                ended.store(true, Ordering::SeqCst);
                std::task::Poll::Ready(None)
            }))
            .boxed()
    }

    async fn lone(items: Vec<Result<sse_stream::Sse, SseError>>) -> (Post, Arc<AtomicBool>) {
        let ended = Arc::new(AtomicBool::new(false));
        let post = tap()
            .lone_answer(
                stream(items, ended.clone()),
                Posted {
                    id: RequestId::Number(7),
                    expect: Expect::Any,
                },
                Some("s".into()),
            )
            .await;
        (post, ended)
    }

    async fn collect(post: Post) -> Vec<Option<String>> {
        match post {
            StreamableHttpPostResponse::Sse(stream, _) => {
                stream
                    .map(|item| item.ok().and_then(|e| e.data))
                    .collect()
                    .await
            }
            _ => panic!("not a stream"),
        }
    }

    #[tokio::test]
    async fn a_lone_answer_after_a_priming_event_is_handed_on_decoded_and_its_stream_read_to_its_end()
     {
        let (post, ended) = lone(vec![
            Ok(event(None, Some("0"))),
            Ok(event(Some(ANSWER), Some("1"))),
        ])
        .await;
        match post {
            StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Response(r), session) => {
                assert_eq!(r.id, NumberOrString::Number(7));
                assert_eq!(session.as_deref(), Some("s"));
            }
            other => panic!("expected the decoded answer, got {other:?}"),
        }
        assert!(
            ended.load(Ordering::SeqCst),
            "the rest of the stream was read"
        );
    }

    #[tokio::test]
    async fn a_notification_first_leaves_the_stream_as_it_came() {
        let (post, _) = lone(vec![
            Ok(event(None, Some("0"))),
            Ok(event(Some(PROGRESS), Some("1"))),
            Ok(event(Some(ANSWER), Some("2"))),
        ])
        .await;
        let data = collect(post).await;
        assert_eq!(
            data,
            vec![None, Some(PROGRESS.to_string()), Some(ANSWER.to_string())]
        );
    }

    #[tokio::test]
    async fn an_answer_with_another_id_is_this_requests_error() {
        let other = r#"{"jsonrpc":"2.0","id":8,"result":{"content":[]}}"#;
        let (post, _) = lone(vec![Ok(event(Some(other), None))]).await;
        match post {
            StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _) => {
                assert_eq!(e.id, Some(NumberOrString::Number(7)));
            }
            other => panic!("expected this request's error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_event_over_the_size_cap_is_this_requests_error_at_once() {
        let big = SseError::Body(Box::new(std::io::Error::other(
            "event exceeded the maximum size",
        )));
        let (post, _) = lone(vec![Ok(event(None, Some("0"))), Err(big)]).await;
        match post {
            StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _) => {
                assert_eq!(e.id, Some(NumberOrString::Number(7)));
                assert!(
                    e.error.message.contains("maxMessageBytes"),
                    "{}",
                    e.error.message
                );
            }
            other => panic!("expected this request's error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_error_or_an_end_before_any_message_goes_on_to_rmcp_as_it_came() {
        let broken = SseError::Body(Box::new(std::io::Error::other("reset")));
        let (post, _) = lone(vec![
            Ok(event(None, Some("0"))),
            Err(broken),
            Ok(event(Some(ANSWER), None)),
        ])
        .await;
        match post {
            StreamableHttpPostResponse::Sse(stream, _) => {
                let items: Vec<_> = stream.collect().await;
                assert_eq!(items.len(), 3);
                assert!(items[1].is_err(), "the error is passed on in its place");
            }
            other => panic!("expected the stream, got {other:?}"),
        }
        let (post, _) = lone(vec![Ok(event(None, Some("0")))]).await;
        assert_eq!(collect(post).await, vec![None]);
    }
}

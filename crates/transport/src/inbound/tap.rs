//! The Streamable HTTP side of [`Inbound`]: an [`HttpLayer`] that passes every SSE-framed
//! server message through it before rmcp decodes it, and turns rmcp's refusals of a JSON body
//! (too large, undecodable, another id) into the request's error.
//!
//! Invariants: an event is changed only when [`Inbound`] replaces or drops its message (an
//! event without a message passes as it came); a lost session is reported as rmcp's
//! `SessionExpired` only for a request sent in a session, so rmcp re-initialises at most once.

use std::future::Future;

use futures::StreamExt;
use futures::stream::BoxStream;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpError, StreamableHttpPostResponse,
};

use super::decode::{Decoded, Inbound};
use crate::layer::{HttpLayer, PostResult, StreamResult};

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

/// The start of rmcp's error for a JSON body that is no JSON-RPC message.
const JSON_PARSE_ERROR: &str = "could not parse JSON response as ServerJsonRpcMessage: ";

impl Tap {
    /// A tap decoding through `inbound` (which reports to its wire notes).
    pub(crate) fn new(inbound: Inbound) -> Self {
        Self { inbound }
    }

    fn tap_stream(
        &self,
        stream: BoxStream<'static, Result<sse_stream::Sse, SseError>>,
        origin: Option<RequestId>,
    ) -> BoxStream<'static, Result<sse_stream::Sse, SseError>> {
        let inbound = self.inbound.clone();
        stream
            .map(move |item| match item {
                Ok(mut event) => {
                    let message = matches!(event.event.as_deref(), None | Some("" | "message"));
                    if let (true, Some(data)) = (message, &event.data) {
                        match inbound.decode_raw(data.as_bytes(), origin.as_ref()) {
                            Decoded::AsSent(_) => {}
                            Decoded::Replaced(m) => {
                                event.data = serde_json::to_string(&m).ok().or(event.data);
                            }
                            // Keep the event for its id and retry fields; rmcp skips no data.
                            Decoded::Dropped => event.data = None,
                        }
                    }
                    Ok(event)
                }
                Err(e) => {
                    let replaced = match &e {
                        SseError::Body(b)
                            if b.to_string().contains("exceeded the maximum size") =>
                        {
                            let limit = inbound.limit();
                            inbound.too_large(limit, false, Default::default(), origin.as_ref())
                        }
                        SseError::Utf8Parse(u) => inbound.undecodable_because(
                            format!("it is not valid UTF-8 ({u})"),
                            origin.as_ref(),
                        ),
                        _ => None,
                    };
                    match replaced.and_then(|m| serde_json::to_string(&m).ok()) {
                        Some(data) => Ok(sse_stream::Sse {
                            event: None,
                            data: Some(data),
                            id: None,
                            retry: None,
                        }),
                        None => Err(e),
                    }
                }
            })
            .boxed()
    }
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

    /// Taps an SSE response; turns a JSON body over the cap or undecodable into the request's
    /// error; and recognises a lost session the way rmcp recognises a 404: some servers answer
    /// a request in a session they forgot with 400, or 200, and a JSON-RPC error "session not
    /// found" (often with a null id, which would leave the request waiting for ever). Only for
    /// a request sent in a session; rmcp then re-initialises once and resends.
    async fn post_for<E, F, Fut>(
        &self,
        request: Option<RequestId>,
        attached: bool,
        auth: Option<String>,
        send: F,
    ) -> PostResult<E>
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        match send(auth).await {
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => Ok(
                StreamableHttpPostResponse::Sse(self.tap_stream(stream, request), session),
            ),
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

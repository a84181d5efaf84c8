//! Wrappers around rmcp's Streamable HTTP client, written once.
//!
//! rmcp's `StreamableHttpClient` has one method per request shape (three POSTs, two GETs and
//! the DELETE that closes a session). Each of our wrappers — the wire tap, step-up
//! authorization, client credentials — only cares about what happens around a request: which
//! authorization header it carries, whether it is sent again, what is done with the answer.
//! Such a wrapper implements [`HttpLayer`], and [`Layered`] forwards every request shape to the
//! inner client through it.
//!
//! Invariant: every request reaches the inner client through the method it came in by, with
//! its arguments unchanged except the authorization header, which the layer chooses; a layer
//! may send a request again (with a new token) but never turns one shape into another; a POST
//! is sent again only by a layer whose `sends_again` says it may (the others get the message
//! moved into their one send, not a copy).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// What a POST (one message) gets back.
pub(crate) type PostResult<E> = Result<StreamableHttpPostResponse, StreamableHttpError<E>>;
/// A server's event stream, as rmcp's client reads it (a POST's answer or the GET stream).
pub(crate) type Events = BoxStream<'static, Result<sse_stream::Sse, SseError>>;
/// What a GET (the server's event stream) gets back.
pub(crate) type StreamResult<E> = Result<Events, StreamableHttpError<E>>;

/// What one wrapper does around each request. `send` sends the request as it came, with the
/// authorization header it is given; it may be called again (a retry with a new token).
pub(crate) trait HttpLayer: Clone + Send + Sync + 'static {
    /// A POST of one message; `attached` says whether it is sent in a session.
    fn post<E, F, Fut>(
        &self,
        attached: bool,
        auth: Option<String>,
        send: F,
    ) -> impl Future<Output = PostResult<E>> + Send
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send;

    /// [`HttpLayer::post`] knowing the request the POST carries (`None` for a notification or
    /// a response); by default the same as `post`.
    fn post_for<E, F, Fut>(
        &self,
        _request: Option<Posted>,
        attached: bool,
        auth: Option<String>,
        send: F,
    ) -> impl Future<Output = PostResult<E>> + Send
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = PostResult<E>> + Send,
    {
        self.post(attached, auth, send)
    }

    /// Whether this layer may call a POST's `send` more than once (a retry). A layer that
    /// answers `false` and sends twice gets an error for the second send: its message was moved
    /// into the first (a large call's arguments are not copied once per layer).
    fn sends_again(&self) -> bool {
        true
    }

    /// A GET of the server's event stream.
    fn get<E, F, Fut>(
        &self,
        auth: Option<String>,
        send: F,
    ) -> impl Future<Output = StreamResult<E>> + Send
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = StreamResult<E>> + Send;

    /// [`HttpLayer::get`] knowing whether the GET resumes a broken stream (it carries
    /// `Last-Event-ID`) or opens the session's own stream; by default the same as `get`.
    fn get_for<E, F, Fut>(
        &self,
        _resume: bool,
        auth: Option<String>,
        send: F,
    ) -> impl Future<Output = StreamResult<E>> + Send
    where
        E: std::error::Error + Send + Sync + 'static,
        F: Fn(Option<String>) -> Fut + Send + Sync,
        Fut: Future<Output = StreamResult<E>> + Send,
    {
        self.get(auth, send)
    }

    /// The authorization header of the DELETE that closes the session (sent once, never
    /// retried): by default the one it came with.
    fn delete_auth(&self, auth: Option<String>) -> impl Future<Output = Option<String>> + Send {
        std::future::ready(auth)
    }
}

/// `inner` with `layer` around each of its requests.
#[derive(Clone)]
pub(crate) struct Layered<L, C> {
    layer: L,
    inner: C,
}

impl<L, C> Layered<L, C> {
    pub(crate) fn new(layer: L, inner: C) -> Self {
        Self { layer, inner }
    }
}

impl<L: HttpLayer, C: StreamableHttpClient + Sync> Layered<L, C> {
    /// A POST of `message` through the layer, `send` making each attempt: the message is moved
    /// into the only attempt when the layer never sends again, else each attempt gets a copy.
    ///
    /// The future is boxed: a layer's future holds its inner client's, so unboxed, the three
    /// layers around a client made a future of 11 KiB that every caller moved (memcpy) again —
    /// about 4% of a gateway call's instructions. Boxed, each level holds a pointer.
    fn post_once_or_again<'a, F, Fut>(
        &'a self,
        message: ClientJsonRpcMessage,
        attached: bool,
        auth: Option<String>,
        send: F,
    ) -> BoxFuture<'a, PostResult<C::Error>>
    where
        F: Fn(ClientJsonRpcMessage, Option<String>) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = PostResult<C::Error>> + Send + 'a,
    {
        Box::pin(async move {
            let posted = Posted::of(&message);
            let outgoing = Outgoing::new(message, self.layer.sends_again());
            let send = &send;
            self.layer
                .post_for(posted, attached, auth, |auth| {
                    let message = outgoing.take();
                    async move {
                        match message {
                            Some(message) => send(message, auth).await,
                            None => Err(StreamableHttpError::UnexpectedServerResponse(
                                "internal error: an HTTP layer that sends a POST once sent it again"
                                    .into(),
                            )),
                        }
                    }
                })
                .await
        })
    }
}

/// A POST's message as a layer's attempts get it: moved out by the first when the layer sends
/// once, copied for each when it may send again.
enum Outgoing {
    /// For a layer that sends once: taken by the first attempt.
    Once(std::sync::Mutex<Option<ClientJsonRpcMessage>>),
    /// For a layer that may send again: kept, each attempt gets a copy.
    Again(ClientJsonRpcMessage),
}

impl Outgoing {
    fn new(message: ClientJsonRpcMessage, again: bool) -> Self {
        if again {
            Self::Again(message)
        } else {
            Self::Once(std::sync::Mutex::new(Some(message)))
        }
    }

    /// The message for the next attempt; `None` when it was moved into an earlier one.
    fn take(&self) -> Option<ClientJsonRpcMessage> {
        match self {
            Self::Once(once) => once.lock().unwrap_or_else(|e| e.into_inner()).take(),
            Self::Again(message) => Some(message.clone()),
        }
    }
}

impl<L: HttpLayer, C: StreamableHttpClient + Sync> StreamableHttpClient for Layered<L, C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult<Self::Error> {
        let attached = session_id.is_some();
        self.post_once_or_again(message, attached, auth_header, |message, auth| {
            self.inner.post_message(
                uri.clone(),
                message,
                session_id.clone(),
                auth,
                custom_headers.clone(),
            )
        })
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
        let attached = session_id.is_some();
        self.post_once_or_again(message, attached, auth_header, |message, auth| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message,
                session_id.clone(),
                auth,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult<Self::Error> {
        let attached = session_id.is_some();
        self.post_once_or_again(message, attached, auth_header, |message, auth| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message,
                session_id.clone(),
                auth,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let auth = self.layer.delete_auth(auth_header).await;
        self.inner
            .delete_session(uri, session_id, auth, custom_headers)
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
        let stream = self
            .layer
            .get_for(last_event_id.is_some(), auth_header, |auth| {
                self.inner.get_stream(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    custom_headers.clone(),
                )
            })
            .await?;
        Ok(after_event(stream, last_event_id))
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
        let stream = self
            .layer
            .get_for(last_event_id.is_some(), auth_header, |auth| {
                self.inner.get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    custom_headers.clone(),
                    max_sse_event_size,
                )
            })
            .await?;
        Ok(after_event(stream, last_event_id))
    }
}

/// A resumed stream without the event it resumes after: some servers (rmcp's among them)
/// replay from the named event, which the client already handled — a progress line twice, or
/// a server request answered a second time.
fn after_event(stream: Events, last_event_id: Option<String>) -> Events {
    let Some(last) = last_event_id else {
        return stream;
    };
    stream
        .skip_while(move |event| {
            std::future::ready(matches!(event, Ok(e) if e.id.as_deref() == Some(last.as_str())))
        })
        .boxed()
}

/// What the answer to a request can be, as far as the transport that sent it knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Any result.
    #[default]
    Any,
    /// A tool's result (or an error): a `tools/call` that asked for no task.
    ToolResult,
}

impl Expect {
    /// What the answer to `request` can be.
    pub(crate) fn of(request: &ClientRequest) -> Self {
        // A task-augmented call is a custom request (rmcp's params have no `task`), so a
        // `tools/call` here asks for the tool's result, not for a task.
        match request {
            ClientRequest::CallToolRequest(_) => Expect::ToolResult,
            _ => Expect::Any,
        }
    }
}

/// The request a POST carries, as far as a layer needs it.
#[derive(Debug, Clone)]
pub(crate) struct Posted {
    /// Its id: the answer must carry it.
    pub(crate) id: RequestId,
    /// What its answer can be.
    pub(crate) expect: Expect,
}

impl Posted {
    /// The request `message` carries, if it is one.
    fn of(message: &ClientJsonRpcMessage) -> Option<Self> {
        let ClientJsonRpcMessage::Request(r) = message else {
            return None;
        };
        Some(Self {
            id: r.id.clone(),
            expect: Expect::of(&r.request),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use futures::StreamExt;
    use rmcp::transport::streamable_http_client::AuthRequiredError;

    use super::*;

    type Seen = Arc<Mutex<Vec<(&'static str, Option<String>)>>>;

    /// A plain `tools/call` expects a tool's result; a task-augmented one (a custom request,
    /// as the runtime sends it) and any other request expect anything; a notification is no
    /// request.
    #[test]
    fn only_a_plain_tool_call_expects_a_tool_result() {
        let message = |value: serde_json::Value| -> ClientJsonRpcMessage {
            serde_json::from_value(value).unwrap()
        };
        let posted = Posted::of(&message(serde_json::json!({"jsonrpc": "2.0", "id": 3,
            "method": "tools/call", "params": {"name": "echo"}})))
        .unwrap();
        assert_eq!(
            (posted.id, posted.expect),
            (RequestId::Number(3), Expect::ToolResult)
        );
        let augmented = ClientJsonRpcMessage::request(
            ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(
                "tools/call",
                Some(serde_json::json!({"name": "echo", "task": {"ttl": 1000}})),
            )),
            RequestId::Number(4),
        );
        assert_eq!(Posted::of(&augmented).unwrap().expect, Expect::Any);
        let list = message(serde_json::json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
        assert_eq!(Posted::of(&list).unwrap().expect, Expect::Any);
        let note =
            message(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(Posted::of(&note).is_none());
    }

    /// An inner client that records the method each request arrived by, with its authorization
    /// header, and refuses (401) every request that does not carry "fresh" — except the DELETE.
    #[derive(Clone, Default)]
    struct Recorder {
        seen: Seen,
    }

    impl Recorder {
        fn answer<T>(
            &self,
            method: &'static str,
            auth: Option<String>,
            ok: T,
        ) -> Result<T, StreamableHttpError<std::io::Error>> {
            let fresh = auth.as_deref() == Some("fresh");
            self.seen.lock().unwrap().push((method, auth));
            if fresh || method == "delete_session" {
                Ok(ok)
            } else {
                Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
                    "Bearer".into(),
                )))
            }
        }
    }

    impl StreamableHttpClient for Recorder {
        type Error = std::io::Error;

        async fn post_message(
            &self,
            _uri: Arc<str>,
            _message: ClientJsonRpcMessage,
            _session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> PostResult<Self::Error> {
            self.answer(
                "post_message",
                auth_header,
                StreamableHttpPostResponse::Accepted,
            )
        }

        async fn post_message_with_max_sse_event_size(
            &self,
            _uri: Arc<str>,
            _message: ClientJsonRpcMessage,
            _session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> PostResult<Self::Error> {
            assert_eq!(max_sse_event_size, 7, "the limit passes unchanged");
            self.answer(
                "post_max_sse",
                auth_header,
                StreamableHttpPostResponse::Accepted,
            )
        }

        async fn post_message_with_response_limits(
            &self,
            _uri: Arc<str>,
            _message: ClientJsonRpcMessage,
            _session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
            limits: StreamableHttpResponseLimits,
        ) -> PostResult<Self::Error> {
            assert_eq!(limits.max_sse_event_size, 9, "the limits pass unchanged");
            self.answer(
                "post_limits",
                auth_header,
                StreamableHttpPostResponse::Accepted,
            )
        }

        async fn delete_session(
            &self,
            _uri: Arc<str>,
            session_id: Arc<str>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> Result<(), StreamableHttpError<Self::Error>> {
            assert_eq!(&*session_id, "s1");
            self.answer("delete_session", auth_header, ())
        }

        async fn get_stream(
            &self,
            _uri: Arc<str>,
            _session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> StreamResult<Self::Error> {
            assert_eq!(last_event_id.as_deref(), Some("e1"));
            self.answer("get_stream", auth_header, futures::stream::empty().boxed())
        }

        async fn get_stream_with_max_sse_event_size(
            &self,
            _uri: Arc<str>,
            _session_id: Option<Arc<str>>,
            _last_event_id: Option<String>,
            auth_header: Option<String>,
            _custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> StreamResult<Self::Error> {
            assert_eq!(max_sse_event_size, 7);
            self.answer("get_max_sse", auth_header, futures::stream::empty().boxed())
        }
    }

    /// Sends with "stale" and, when refused, once more with "fresh"; closes with "closing".
    /// `claims_once`: says it never sends a POST again (which it does).
    #[derive(Clone)]
    struct Renew {
        claims_once: bool,
    }

    impl HttpLayer for Renew {
        async fn post<E, F, Fut>(
            &self,
            _attached: bool,
            _auth: Option<String>,
            send: F,
        ) -> PostResult<E>
        where
            E: std::error::Error + Send + Sync + 'static,
            F: Fn(Option<String>) -> Fut + Send + Sync,
            Fut: Future<Output = PostResult<E>> + Send,
        {
            match send(Some("stale".into())).await {
                Err(StreamableHttpError::AuthRequired(_)) => send(Some("fresh".into())).await,
                other => other,
            }
        }

        async fn get<E, F, Fut>(&self, _auth: Option<String>, send: F) -> StreamResult<E>
        where
            E: std::error::Error + Send + Sync + 'static,
            F: Fn(Option<String>) -> Fut + Send + Sync,
            Fut: Future<Output = StreamResult<E>> + Send,
        {
            match send(Some("stale".into())).await {
                Err(StreamableHttpError::AuthRequired(_)) => send(Some("fresh".into())).await,
                other => other,
            }
        }

        async fn delete_auth(&self, _auth: Option<String>) -> Option<String> {
            Some("closing".into())
        }

        fn sends_again(&self) -> bool {
            !self.claims_once
        }
    }

    /// A layer that sends once gets the message moved into its send; one that may send again
    /// gets a copy per send; one that claims once and sends again gets an error for the second
    /// send, which never reaches the server.
    #[tokio::test]
    async fn a_post_is_moved_into_a_single_send_and_copied_for_a_retry() {
        let message = ClientJsonRpcMessage::notification(
            rmcp::model::ClientNotification::InitializedNotification(Default::default()),
        );
        let once = Outgoing::new(message.clone(), false);
        assert!(once.take().is_some());
        assert!(once.take().is_none());
        let again = Outgoing::new(message.clone(), true);
        assert!(again.take().is_some() && again.take().is_some());

        let recorder = Recorder::default();
        let client = Layered::new(Renew { claims_once: true }, recorder.clone());
        let sent = client
            .post_message(
                "http://127.0.0.1:1/mcp".into(),
                message,
                None,
                None,
                HashMap::new(),
            )
            .await;
        assert!(
            matches!(&sent, Err(StreamableHttpError::UnexpectedServerResponse(m)) if m.contains("sent it again")),
            "{sent:?}"
        );
        assert_eq!(
            *recorder.seen.lock().unwrap(),
            [("post_message", Some("stale".to_string()))]
        );
    }

    #[tokio::test]
    async fn each_request_reaches_the_inner_client_by_its_own_method_with_the_layers_header() {
        let recorder = Recorder::default();
        let client = Layered::new(Renew { claims_once: false }, recorder.clone());
        let uri: Arc<str> = "http://127.0.0.1:1/mcp".into();
        let message = || {
            ClientJsonRpcMessage::notification(
                rmcp::model::ClientNotification::InitializedNotification(Default::default()),
            )
        };
        let session = Some(Arc::<str>::from("s1"));
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = 9;
        assert!(
            client
                .post_message(
                    uri.clone(),
                    message(),
                    session.clone(),
                    None,
                    HashMap::new()
                )
                .await
                .is_ok()
        );
        assert!(
            client
                .post_message_with_max_sse_event_size(
                    uri.clone(),
                    message(),
                    session.clone(),
                    None,
                    HashMap::new(),
                    7
                )
                .await
                .is_ok()
        );
        assert!(
            client
                .post_message_with_response_limits(
                    uri.clone(),
                    message(),
                    session.clone(),
                    None,
                    HashMap::new(),
                    limits
                )
                .await
                .is_ok()
        );
        let last = Some("e1".to_string());
        assert!(
            client
                .get_stream(
                    uri.clone(),
                    session.clone(),
                    last.clone(),
                    None,
                    HashMap::new()
                )
                .await
                .is_ok()
        );
        assert!(
            client
                .get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session.clone(),
                    last,
                    None,
                    HashMap::new(),
                    7
                )
                .await
                .is_ok()
        );
        assert!(
            client
                .delete_session(uri, "s1".into(), Some("given".into()), HashMap::new())
                .await
                .is_ok()
        );

        let seen = recorder.seen.lock().unwrap().clone();
        let expected: Vec<(&str, Option<String>)> = [
            "post_message",
            "post_max_sse",
            "post_limits",
            "get_stream",
            "get_max_sse",
        ]
        .into_iter()
        .flat_map(|m| {
            [
                (m, Some("stale".to_string())),
                (m, Some("fresh".to_string())),
            ]
        })
        .chain([("delete_session", Some("closing".to_string()))])
        .collect();
        assert_eq!(seen, expected);
    }

    #[tokio::test]
    async fn a_resumed_stream_skips_the_event_it_resumes_after() {
        let event = |id: &str| Ok(sse_stream::Sse::default().id(id).data("{}"));
        let replayed = || futures::stream::iter([event("1/0"), event("2/0"), event("3/0")]).boxed();
        let ids = |stream: BoxStream<'static, Result<sse_stream::Sse, SseError>>| async move {
            stream
                .filter_map(|e| async move { e.ok().and_then(|e| e.id) })
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(
            ids(after_event(replayed(), Some("1/0".into()))).await,
            ["2/0", "3/0"]
        );
        // A server that replays only what follows loses nothing.
        assert_eq!(
            ids(after_event(replayed(), Some("0/0".into()))).await,
            ["1/0", "2/0", "3/0"]
        );
        assert_eq!(ids(after_event(replayed(), None)).await.len(), 3);
    }
}

//! Connection-lifecycle faults: a server process that crashes after answering some calls
//! (`--crash-after-calls N`), and an HTTP endpoint that answers 503 for a while (`--fail-http N`,
//! the `fail_http` tool) or forgets sessions (`expire_session`), with counters a test reads back
//! through `http_stats`.
//!
//! Invariants:
//! - with `crash_after_calls = N`, exactly N `tools/call` requests are answered (successes and
//!   errors alike); the connection ends right after the N-th answer was written and flushed, and
//!   the serving function then returns an error (the program exits with [`CRASH_EXIT_CODE`]);
//! - an HTTP request is answered 503 only while the failure budget lasts, and every 503 is
//!   counted; the request that set the budget is answered normally;
//! - a session is forgotten (closed in the session manager, so rmcp answers 404) only for a
//!   `tools/call` request that carries a session id, while the expiry budget lasts; each
//!   forgotten session is counted. Nothing else is touched.

use std::{future::Future, sync::Arc};

use axum::{
    body::Body,
    extract::{Request, State},
    http::{Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    RoleServer,
    model::{JsonObject, RequestId, ServerJsonRpcMessage, Tool},
    transport::{
        Transport,
        streamable_http_server::session::{SessionManager, local::LocalSessionManager},
    },
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::handler::{FixtureServer, text_result};

/// Exit code of the fixture program after `--crash-after-calls` fired.
pub const CRASH_EXIT_CODE: i32 = 70;

/// Names of the HTTP fault tools, listed only while serving Streamable HTTP.
pub const HTTP_FAULT_TOOL_NAMES: [&str; 3] = ["fail_http", "expire_session", "http_stats"];

/// Largest request body the fault layer buffers to read its method (16 MiB).
const MAX_INSPECTED_BODY: usize = 16 << 20;

/// Counts answered `tools/call` requests and notes the one after which the server crashes.
#[derive(Debug, Default)]
pub(crate) struct CrashCounter {
    /// Calls counted so far.
    calls: u64,
    /// The request whose answer is the last one before the crash.
    last: Option<RequestId>,
}

impl CrashCounter {
    /// Counts one `tools/call` (request `id`); remembers it when it is the `after`-th.
    pub(crate) fn count(&mut self, id: &RequestId, after: Option<u64>) {
        self.calls += 1;
        if after == Some(self.calls) {
            self.last = Some(id.clone());
        }
    }

    fn is_last(&self, id: Option<&RequestId>) -> bool {
        self.last.is_some() && self.last.as_ref() == id
    }
}

/// A server transport that ends the connection once the answer to the crash request was sent;
/// `crashed` is cancelled then.
pub(crate) struct CrashAfter<T> {
    pub(crate) inner: T,
    pub(crate) server: FixtureServer,
    pub(crate) crashed: CancellationToken,
}

fn answer_id(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        ServerJsonRpcMessage::Response(r) => Some(&r.id),
        ServerJsonRpcMessage::Error(e) => e.id.as_ref(),
        _ => None,
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for CrashAfter<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let last = self.server.lock().crash.is_last(answer_id(&item));
        let sending = self.inner.send(item);
        let crashed = self.crashed.clone();
        async move {
            let sent = sending.await;
            if last {
                crashed.cancel();
            }
            sent
        }
    }

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// HTTP fault budgets and counters (shared by every session of one server).
#[derive(Debug, Default)]
pub(crate) struct HttpFaults {
    /// Whether the server is serving Streamable HTTP (the fault tools are listed only then).
    pub(crate) serving: bool,
    /// Requests still to be answered 503.
    pub(crate) fail_next: u64,
    /// `tools/call` requests whose session is still to be forgotten.
    expire_next: u64,
    served_503: u64,
    expired: u64,
    handshakes: u64,
    /// `tools/call` requests received, per tool name.
    calls: std::collections::BTreeMap<String, u64>,
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// Definitions of the HTTP fault tools.
pub(crate) fn http_fault_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "fail_http",
            "Answers the next `times` HTTP requests (after this one) with 503 Service Unavailable.",
            schema(json!({
                "type": "object",
                "properties": {"times": {"type": "integer", "minimum": 1}},
                "required": ["times"]
            })),
        ),
        Tool::new(
            "expire_session",
            "Forgets the session of the next `times` tools/call requests (default 1): they get 404 and the client must initialise again.",
            schema(json!({
                "type": "object",
                "properties": {"times": {"type": "integer", "minimum": 1}}
            })),
        ),
        Tool::new(
            "http_stats",
            "Counts since start: requests answered 503, sessions forgotten, handshakes (initialize or server/discover) and tools/call requests received over HTTP per tool (`calls`).",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ]
}

impl FixtureServer {
    /// `fail_http`, `expire_session`, `http_stats`; `None` for any other tool.
    pub(crate) fn http_fault_call(
        &self,
        name: &str,
        times: Option<u64>,
    ) -> Option<rmcp::model::CallToolResult> {
        let mut state = self.lock();
        let faults = &mut state.http;
        if !faults.serving {
            return None;
        }
        Some(match name {
            "fail_http" => {
                let times = times.unwrap_or(1);
                faults.fail_next = times;
                text_result(format!("the next {times} HTTP requests get 503"))
            }
            "expire_session" => {
                let times = times.unwrap_or(1);
                faults.expire_next = times;
                text_result(format!(
                    "the sessions of the next {times} tools/call requests will be forgotten"
                ))
            }
            "http_stats" => text_result(
                json!({
                    "served503": faults.served_503,
                    "expired": faults.expired,
                    "handshakes": faults.handshakes,
                    "calls": faults.calls,
                })
                .to_string(),
            ),
            _ => return None,
        })
    }
}

/// What the fault layer needs: the server (for its fault state) and the session manager (to
/// forget sessions).
#[derive(Clone)]
pub(crate) struct FaultLayer {
    pub(crate) server: FixtureServer,
    pub(crate) sessions: Arc<LocalSessionManager>,
}

/// The axum middleware in front of the MCP service.
pub(crate) async fn fault_layer(
    State(layer): State<FaultLayer>,
    request: Request,
    next: Next,
) -> Response {
    {
        let mut state = layer.server.lock();
        let faults = &mut state.http;
        if faults.fail_next > 0 {
            faults.fail_next -= 1;
            faults.served_503 += 1;
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "fixture: failing on purpose (fail_http)",
            )
                .into_response();
        }
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_INSPECTED_BODY).await {
        Ok(bytes) => bytes,
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "request too large").into_response(),
    };
    let message = serde_json::from_slice::<Value>(&bytes).unwrap_or_default();
    let method = message.get("method").and_then(Value::as_str);
    let tool = message.pointer("/params/name").and_then(Value::as_str);
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(Arc::<str>::from);
    let forget = {
        let mut state = layer.server.lock();
        let faults = &mut state.http;
        match method {
            Some("initialize" | "server/discover") => faults.handshakes += 1,
            Some("tools/call") => {
                let tool = tool.unwrap_or_default().to_owned();
                *faults.calls.entry(tool).or_default() += 1;
            }
            _ => {}
        }
        let forget = method == Some("tools/call") && session.is_some() && faults.expire_next > 0;
        if forget {
            faults.expire_next -= 1;
            faults.expired += 1;
        }
        forget
    };
    if forget && let Some(id) = &session {
        // The session manager no longer knows the id: rmcp answers this request with 404.
        if let Err(error) = layer.sessions.close_session(id).await {
            tracing::warn!(%error, "could not close the session");
        }
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if !layer.server.options().wire_faults {
        return response;
    }
    // `--wire-faults`: the marked answer is broken on its way out.
    let (parts, body) = response.into_parts();
    let frames = futures::StreamExt::map(body.into_data_stream(), |frame| {
        frame.map(crate::wire_faults::rewrite_sse)
    });
    Response::from_parts(parts, Body::from_stream(frames))
}

/// The error a serving function returns after `--crash-after-calls` fired.
#[derive(Debug)]
pub struct Crashed {
    /// How many `tools/call` requests were answered.
    pub calls: u64,
}

impl std::fmt::Display for Crashed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fixture: crashing on purpose after answering {} tools/call",
            self.calls
        )
    }
}

impl std::error::Error for Crashed {}

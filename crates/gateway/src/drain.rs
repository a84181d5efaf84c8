//! Draining the HTTP endpoint on shutdown, and giving memory back after sessions close.
//!
//! Invariants:
//! - every POST to `/mcp` but a 2026-07-28 `subscriptions/listen` counts as in flight from the
//!   moment it is admitted until its response body has been sent to the end or dropped (an SSE
//!   response of a call ends after the call's result), so [`Drain::wait_idle`] returning `true`
//!   means no admitted request but a listen stream is still being answered (a listen stream
//!   holds no call, lasts as long as its client listens, and ends with the process);
//! - once [`Drain::close`] was called no request is admitted: `/mcp` answers 503 with
//!   `Retry-After` and a JSON-RPC error naming the shutdown (a client retries elsewhere), while
//!   the operational routes keep answering (`/readyz` says 503, so a load balancer stops
//!   sending);
//! - the allocator is asked to return freed memory (`HttpOptions::release_memory`) only after
//!   many sessions closed, at most once per tick, never on a request path.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::Notify;

use crate::sealed::SealedSessionManager;
use crate::session::Shared;

/// The in-flight count and the closing flag of one HTTP endpoint.
#[derive(Default)]
pub(crate) struct Drain {
    closing: AtomicBool,
    active: AtomicUsize,
    idle: Notify,
}

impl Drain {
    /// Refuses every request from now on.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether [`Drain::close`] was called.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Admits one request, or refuses it once closing.
    fn enter(self: &Arc<Self>) -> Option<InFlight> {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.closing() {
            self.leave();
            return None;
        }
        Some(InFlight(self.clone()))
    }

    fn leave(&self) {
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no admitted request is in flight, at most `limit`; `false` when the limit
    /// passed first.
    pub(crate) async fn wait_idle(&self, limit: Duration) -> bool {
        let idle = async {
            loop {
                let notified = self.idle.notified();
                if self.active.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, idle).await.is_ok()
    }
}

/// One admitted request; leaves the count when dropped.
struct InFlight(Arc<Drain>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// A response body that holds `T` (its request's [`InFlight`], a listen stream's place) until
/// it is sent or dropped.
struct Holding<T> {
    inner: Body,
    _held: T,
}

/// `response`, its body holding `held` until it ends or is dropped.
pub(crate) fn held_until_sent<T: Send + Unpin + 'static>(response: Response, held: T) -> Response {
    let (parts, inner) = response.into_parts();
    Response::from_parts(parts, Body::new(Holding { inner, _held: held }))
}

impl<T: Unpin> HttpBody for Holding<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request let through the drain gate: a POST to `/mcp` counted until its answer's body ends.
pub(crate) struct Admitted(Option<InFlight>);

/// The drain gate: a POST to `/mcp` is counted while it is answered ([`Admitted::counted`]);
/// `/mcp` is refused once closing (`None`: answer it with [`shutting_down`]); other paths
/// always pass.
pub(crate) fn admit(drain: &Arc<Drain>, request: &Request) -> Option<Admitted> {
    if request.uri().path() != "/mcp" {
        return Some(Admitted(None));
    }
    if request.method() != Method::POST {
        return (!drain.closing()).then_some(Admitted(None));
    }
    admit_post(drain)
}

/// As [`admit`] for a POST to `/mcp`: counted while it is served, refused once draining.
pub(crate) fn admit_post(drain: &Arc<Drain>) -> Option<Admitted> {
    drain.enter().map(|in_flight| Admitted(Some(in_flight)))
}

impl Admitted {
    /// The same request, not counted: a 2026-07-28 `subscriptions/listen` stream, which
    /// holds no call and lasts as long as its client listens, must not keep a drain waiting
    /// to its deadline (it ends with the process).
    pub(crate) fn uncounted(self) -> Self {
        Admitted(None)
    }

    /// `response`, its body holding the count of a POST until it ends.
    pub(crate) fn counted(self, response: Response) -> Response {
        match self.0 {
            Some(in_flight) => held_until_sent(response, in_flight),
            None => response,
        }
    }
}

/// Refuses one more session when `sessions` holds `max` already: 429 (see [`too_many`]).
pub(crate) async fn sessions_full(sessions: &SealedSessionManager, max: usize) -> Option<Response> {
    if sessions.len().await >= max {
        return Some(too_many(format!(
            "the gateway has {max} open sessions, its limit; retry later or close idle sessions"
        )));
    }
    None
}

/// 429 with `Retry-After: 5` and a JSON-RPC error saying `message`.
pub(crate) fn too_many(message: String) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": message, "data": {"retryAfterMs": 5000}}
    });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a request to `/mcp` refused while the gateway drains.
pub(crate) fn shutting_down() -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": "the gateway is shutting down; retry (another replica, or this one after its restart)",
        },
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::RETRY_AFTER, HeaderValue::from_static("1")),
        ],
        body.to_string(),
    )
        .into_response()
}

/// Sessions that must have ended since the last trim before the next one.
const TRIM_AFTER_CLOSED: u64 = 256;

/// Every `tick`, after sessions ended, drops what the sealer kept about them; when
/// [`TRIM_AFTER_CLOSED`] sessions ended since the last trim, or sessions ended since the last
/// trim and none during the last tick (a burst of closings is over: what its last sessions and
/// their tasks freed after the previous trim is returned too), also has `release` return freed
/// heap memory to the system. Without the trim at the end of a burst, a loaded machine kept
/// 30 MB more (the sessions reaped after the last full batch).
pub(crate) async fn trim_after_sessions_close(
    shared: Arc<Shared>,
    sessions: Arc<SealedSessionManager>,
    tick: Duration,
    release: fn(),
    stop: tokio_util::sync::CancellationToken,
) {
    let mut trimmed_at = shared.closed.load(Ordering::Relaxed);
    let mut swept_at = trimmed_at;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(tick) => {}
        }
        let closed = shared.closed.load(Ordering::Relaxed);
        // No session ended during the last tick (the sweep below follows every closing).
        let quiet = closed == swept_at;
        if closed != swept_at {
            // What the sealer learnt about the sessions that ended goes with them.
            sessions.sweep().await;
            shared.sessions.shrink_to_fit();
            swept_at = closed;
        }
        if closed - trimmed_at >= TRIM_AFTER_CLOSED || (quiet && closed != trimmed_at) {
            release();
            trimmed_at = closed;
        }
    }
}

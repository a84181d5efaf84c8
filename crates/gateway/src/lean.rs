//! The lean entry: a POST to `/mcp` in an established session goes from the connection to the
//! `/mcp` handler without the router and its three middleware layers, which otherwise cost
//! every call a route lookup, a boxed `Next` per layer, and its body read and wrapped again by
//! each layer that looks at it (see the README's benchmark section).
//!
//! Invariant: a request is answered here only when every layer would let it pass untouched to
//! the handler — a POST to `/mcp` naming a session, no client profiles (no authentication to
//! do), not a `tools/list` (whose answer the sealing layer reads) and nothing the SEP-1686
//! front rewrites — and then gets what the layers would have done, in their order: the drain
//! gate's refusal or count, the sealing layer's 404 for an id that does not open and its
//! re-issued id on success, the front's mark, and the unreadable-body classification. Every
//! other request goes to the router unchanged (the decision reads the head and the body only,
//! and has no effect). `MCP_HARNESS_LEAN=0` sends every request to the router.

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::Request;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse as _, Response};
use bytes::Bytes;

use crate::drain::{self, Drain};
use crate::in_session::InSession;
use crate::sealed::{self, Opened, Sealer};
use crate::session::{Shared, augmented_front};

/// Set to `0`, every request goes through the router and its middleware (see the module doc):
/// the comparison in the benchmarks, and a way back.
pub(crate) const LEAN_ENV: &str = "MCP_HARNESS_LEAN";

/// What the lean entry needs of the gateway (the same parts the middleware layers hold).
pub(crate) struct Lean {
    pub(crate) drain: Arc<Drain>,
    /// Client profiles are configured: every request is authenticated by the router's gate.
    pub(crate) guarded: bool,
    /// `--max-sessions`: a session started again from its id counts against it.
    pub(crate) max_sessions: usize,
    pub(crate) sealer: Arc<Sealer>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) posts: Arc<InSession>,
}

/// The gateway's service for its HTTP/1.1 connections (on either server): the lean entry
/// where it applies, else the router.
#[derive(Clone)]
pub(crate) struct Front {
    pub(crate) router: axum::Router,
    /// `None`: every request to the router.
    pub(crate) lean: Option<Arc<Lean>>,
}

/// The headers a request may carry once: with two, rmcp (or the profile check, for
/// `Authorization`) reads the first while a proxy in front (routing on SEP-2243's
/// `Mcp-Method`, say, or checking the token) may have read the other.
const ONCE: [&str; 5] = [
    "mcp-protocol-version",
    "mcp-session-id",
    "mcp-method",
    "mcp-name",
    "authorization",
];

/// The first of [`ONCE`] that `headers` repeat (only looked for when some header repeats).
fn repeated_mcp_header(headers: &HeaderMap) -> Option<&'static str> {
    if headers.len() == headers.keys_len() {
        return None;
    }
    ONCE.into_iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())
}

impl crate::h1::Service for Front {
    fn call(&mut self, request: Request<()>, body: Bytes) -> impl Future<Output = Response> + Send {
        if let Some(name) = repeated_mcp_header(request.headers()) {
            let refusal = (
                axum::http::StatusCode::BAD_REQUEST,
                format!("Bad Request: the request has more than one {name} header; send it once\n"),
            );
            return futures::future::Either::Left(futures::future::ready(refusal.into_response()));
        }
        let taken = self.lean.as_ref().and_then(|lean| {
            lean.admits(&request, &body)
                .map(|front| (lean.clone(), front))
        });
        match taken {
            Some((lean, front)) => {
                futures::future::Either::Right(futures::future::Either::Left(async move {
                    lean.serve(request, body, front).await
                }))
            }
            None => futures::future::Either::Right(futures::future::Either::Right(
                self.router.call(request, body),
            )),
        }
    }
}

impl Lean {
    /// Whether the request is taken here (see the module doc), and if so whether it passes
    /// through the SEP-1686 front (which marks it); `None`: the router serves it.
    fn admits(&self, request: &Request<()>, body: &[u8]) -> Option<bool> {
        admits(request, body, self.guarded, |headers| {
            augmented_front::in_front(headers, &self.shared)
        })
    }

    /// Serves a request [`Self::admits`] took.
    async fn serve(&self, request: Request<()>, body: Bytes, front: bool) -> Response {
        // The gates: draining refuses, else the POST is counted until its answer ends.
        let Some(admitted) = drain::admit_post(&self.drain) else {
            return drain::shutting_down();
        };
        let now = SystemTime::now();
        let (mut parts, ()) = request.into_parts();
        // The SEP-1686 front's mark, then the sealing layer's opening.
        if front {
            parts.extensions.insert(augmented_front::Front);
        }
        let opened = match sealed::open_request(&self.sealer, &parts.headers, now) {
            Ok(opened) => opened,
            Err(refusal) => return admitted.counted(sealed::not_found(refusal)),
        };
        // A session this replica does not run now is started again from its id: one more
        // session, under the limit a new one meets (the router's gate checks the others).
        if let Some(payload) = &opened
            && !self.posts.sessions.holds(&payload.session).await
            && let Some(refusal) =
                drain::sessions_full(&self.posts.sessions, self.max_sessions).await
        {
            return admitted.counted(refusal);
        }
        if let Some(payload) = &opened {
            parts.extensions.insert(Opened {
                payload: payload.clone(),
                sealer: self.sealer.clone(),
            });
        }
        let mut answer = self.posts.handle_read(parts, body).await.into_response();
        if answer.status().is_success()
            && let Some(payload) = &opened
        {
            sealed::reissue(&self.sealer, payload, now, &mut answer);
        }
        admitted.counted(answer)
    }
}

/// [`Lean::admits`], with `in_front` saying whether a request of these headers passes through
/// the SEP-1686 front.
fn admits(
    request: &Request<()>,
    body: &[u8],
    guarded: bool,
    in_front: impl FnOnce(&HeaderMap) -> bool,
) -> Option<bool> {
    let headers = request.headers();
    if request.method() != Method::POST
        || request.uri().path() != "/mcp"
        || guarded
        || !headers.contains_key(&crate::SESSION_ID)
        || sealed::may_list_tools(body)
    {
        return None;
    }
    let front = in_front(headers);
    if front && !augmented_front::translate_request(body, true).untouched() {
        return None;
    }
    Some(front)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &[u8] =
        br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}"#;

    fn post(path: &str, session: bool) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = path.parse().unwrap();
        if session {
            request
                .headers_mut()
                .insert("mcp-session-id", "sealed".parse().unwrap());
        }
        request
    }

    #[test]
    fn a_repeated_mcp_header_is_found_and_other_repeats_pass() {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-method", "tools/call".parse().unwrap());
        headers.append("accept", "application/json".parse().unwrap());
        headers.append("accept", "text/event-stream".parse().unwrap());
        assert_eq!(repeated_mcp_header(&headers), None);
        headers.append("mcp-method", "tools/list".parse().unwrap());
        assert_eq!(repeated_mcp_header(&headers), Some("mcp-method"));
        let mut headers = HeaderMap::new();
        headers.insert("mcp-session-id", "a".parse().unwrap());
        headers.append("mcp-session-id", "b".parse().unwrap());
        assert_eq!(repeated_mcp_header(&headers), Some("mcp-session-id"));
    }

    #[test]
    fn only_calls_every_layer_passes_untouched_are_taken() {
        let plain = |_: &HeaderMap| false;
        assert_eq!(admits(&post("/mcp", true), CALL, false, plain), Some(false));
        // The front marks what it lets through untouched.
        assert_eq!(
            admits(&post("/mcp", true), CALL, false, |_| true),
            Some(true)
        );

        // Another path, verb, no session (an `initialize`, a stateless request): the router.
        assert_eq!(admits(&post("/mcp/", true), CALL, false, plain), None);
        assert_eq!(admits(&post("/metrics", true), CALL, false, plain), None);
        assert_eq!(admits(&post("/mcp", false), CALL, false, plain), None);
        let mut get = post("/mcp", true);
        *get.method_mut() = Method::GET;
        assert_eq!(admits(&get, b"", false, plain), None);
        let mut delete = post("/mcp", true);
        *delete.method_mut() = Method::DELETE;
        assert_eq!(admits(&delete, b"", false, plain), None);
        // Client profiles: authenticated by the router's gate.
        assert_eq!(admits(&post("/mcp", true), CALL, true, plain), None);
        // A listing, whose answer the sealing layer reads (or anything that may be one).
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(admits(&post("/mcp", true), list, false, plain), None);
        // A SEP-1686 task-augmented call the front rewrites, only when it is in front.
        let task = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","task":{"ttl":1000}}}"#;
        assert_eq!(admits(&post("/mcp", true), task, false, |_| true), None);
        assert_eq!(admits(&post("/mcp", true), task, false, plain), Some(false));
    }
}

//! SEP-2322 `input_required` pass-through: a client of 2026-07-28 gets its upstream's
//! `InputRequiredResult` (input requests and `requestState`) as the upstream sent it, and its
//! retry — the same request with `inputResponses` and `requestState` — goes upstream as the
//! client sent it, with the capabilities the request declared (SEP-2575 per-request `_meta`),
//! so the upstream itself decides what it may ask of this client and verifies its own state.
//! A client of an older version has no such rounds: the runtime answers them through that
//! client's elicitation, sampling and roots requests, as before — for `prompts/get` and
//! `resources/read` as for `tools/call`, each run as a request of its client
//! ([`as_request_of`]) so those requests reach that client and no other.
//!
//! Invariants: the gateway never reads, checks nor rewrites `requestState` or
//! `inputResponses`; every round is a new request on the governed path (listing, view,
//! permissions), so a retry is refused exactly where a first call would be.

use mcp_harness_runtime::{CallError, Forwarded, HandBack};
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::InputResponses;
use rmcp::service::RequestContext;

/// How one downstream request treats `input_required` rounds.
pub(super) struct Rounds {
    /// Whether the client speaks 2026-07-28 or later: rounds are its own to answer.
    pub(super) pass_through: bool,
    /// What goes upstream of the client's request as it gave it.
    pub(super) forward: Forwarded,
}

impl Rounds {
    /// The rounds of a request with these SEP-2322 fields, made in `context`.
    pub(super) fn of(
        context: &RequestContext<RoleServer>,
        input_responses: Option<InputResponses>,
        request_state: Option<String>,
    ) -> Self {
        let version = context
            .meta
            .protocol_version()
            .or_else(|| context.peer.peer_info().map(|i| i.protocol_version.clone()));
        let pass_through = version.is_some_and(|v| !v.has_initialize());
        if !pass_through {
            return Self {
                pass_through,
                forward: Forwarded::default(),
            };
        }
        Self {
            pass_through,
            forward: Forwarded {
                input_responses,
                request_state,
                client_capabilities: context.meta.client_capabilities(),
                ..Forwarded::default()
            },
        }
    }

    /// What a tool call hands back: the rounds, for a client that answers them itself.
    pub(super) fn hand_back(&self) -> HandBack {
        HandBack {
            input_required: self.pass_through,
            ..HandBack::default()
        }
    }
}

/// Runs `request` (a `prompts/get` or `resources/read` of `server`) as a request of `caller`:
/// the rounds the runtime follows for it, and the upstream's own requests while it is in
/// flight, are asked of `caller` (through `bridge`), never of another session.
pub(super) async fn as_request_of<F: std::future::Future>(
    bridge: &crate::bridge::ClientBridge,
    server: &str,
    caller: crate::bridge::Caller,
    request: F,
) -> F::Output {
    let _in_flight = bridge.enter(server, caller.clone());
    crate::bridge::as_caller(caller, request).await
}

/// A failed call of a client that answers its own rounds: the upstream's JSON-RPC error as it
/// sent it (a tampered `requestState` refused, -32021 for a capability the request did not
/// declare); any other failure is given back, to be refused as for every client.
pub(super) fn upstream_error(pass_through: bool, error: CallError) -> Result<McpError, CallError> {
    match error {
        CallError::Protocol {
            upstream: Some(data),
            ..
        } if pass_through => Ok(*data),
        other => Err(other),
    }
}

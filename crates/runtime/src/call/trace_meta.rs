//! The W3C trace context (SEP-414) a request carries to its server in `_meta`.
//!
//! Invariant: a [`TraceMeta`] adds only the `traceparent` / `tracestate` keys it holds to the
//! request's `_meta`; an empty one leaves the request exactly as it was.

use rmcp::model::RequestParamsMeta;

/// The W3C trace context (SEP-414) a request carries to its server in `_meta`. Sent as given:
/// the caller checks the values (a gateway continues only a well-formed context).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceMeta {
    /// The `traceparent` to send (the caller's span).
    pub traceparent: Option<String>,
    /// The `tracestate` to send alongside it (vendor entries of the trace, passed on).
    pub tracestate: Option<String>,
}

impl TraceMeta {
    /// Sets the values this holds in `params`' `_meta` (nothing when it holds none).
    pub fn apply(&self, params: &mut impl RequestParamsMeta) {
        if let Some(traceparent) = &self.traceparent {
            params.set_traceparent(traceparent);
        }
        if let Some(tracestate) = &self.tracestate {
            params.set_tracestate(tracestate);
        }
    }
}

//! The spans of the MCP requests the gateway serves and of those it sends upstream for them,
//! named and attributed as the OpenTelemetry semantic conventions for MCP prescribe: a server
//! span per request (`{mcp.method.name} {target}`, the target being the tool or prompt name when
//! there is one), continuing the client's trace context ([`crate::trace::incoming`]), and a
//! client span per upstream request made for it, whose `traceparent` and `tracestate` go
//! upstream in that request's `_meta`.
//!
//! Invariants:
//! - a request that is not traced gets no extension, and [`upstream`] returns `None` for it at
//!   once: nothing is allocated for it here;
//! - a server span ends once, with its answer: a JSON-RPC error gives status ERROR,
//!   `error.type` and `rpc.response.status_code` = the error code; a tool result with
//!   `isError` gives status ERROR and `error.type` = `tool_error`;
//! - a span holds method, names, resource URIs, ids and outcomes, never arguments or results;
//!   `mcp.session.id` is a digest of the session's identity, never the `Mcp-Session-Id` itself
//!   (which is what proves the session).

use std::sync::{Arc, Mutex};

use mcp_harness_runtime::{CallError, TraceMeta};
use rmcp::ErrorData as McpError;
use rmcp::model::Extensions;
use rmcp::service::{RequestContext, RoleServer};

use crate::trace::{Kind, Parent, Span, Tracer};

/// What a request names: the span name's target and the attribute it goes in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// Nothing (a listing, `ping`, `initialize`, …).
    None,
    /// A tool (`gen_ai.tool.name`; in the span name).
    Tool(&'a str),
    /// A prompt (`gen_ai.prompt.name`; in the span name).
    Prompt(&'a str),
    /// A resource, template or skill URI (`mcp.resource.uri`; not in the span name, whose
    /// cardinality it would make unbounded).
    Resource(&'a str),
}

impl Target<'_> {
    /// `method` and the tool or prompt named, at most [`NAME_CHARS`] of it (a client names
    /// what it likes: a megabyte name must not become a megabyte span held in the export
    /// queue).
    fn span_name(self, method: &str) -> String {
        match self {
            Target::Tool(name) | Target::Prompt(name) => {
                let name: String = name.chars().take(NAME_CHARS).collect();
                format!("{method} {name}")
            }
            Target::None | Target::Resource(_) => method.to_string(),
        }
    }

    fn record(self, span: &mut Span) {
        match self {
            Target::None => {}
            Target::Tool(name) => {
                span.set("gen_ai.operation.name", "execute_tool");
                span.set("gen_ai.tool.name", name);
            }
            Target::Prompt(name) => span.set("gen_ai.prompt.name", name),
            // Without its query and user info: they may carry keys.
            Target::Resource(uri) => span.set("mcp.resource.uri", &bare_uri(uri)),
        }
    }
}

/// The most characters of a tool or prompt name a span name carries (as a span attribute).
const NAME_CHARS: usize = 256;

/// `uri` without its query, fragment and user info.
fn bare_uri(uri: &str) -> String {
    let cut = uri.find(['?', '#']).unwrap_or(uri.len());
    let uri = &uri[..cut];
    match uri.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => uri.to_string(),
    }
}

/// Attributes a handler adds to the server span of the request it serves (the span ends after
/// the handler returns, outside it).
#[derive(Clone, Default)]
pub(crate) struct Notes(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Notes {
    /// The server a `tools/call` went to, and its outcome as the metrics count it.
    pub(crate) fn call(&self, server: Option<&str>, outcome: &str) {
        let mut notes = crate::sync::lock(&self.0);
        if let Some(server) = server {
            notes.push(("mcp_harness.server", server.to_string()));
        }
        notes.push(("mcp_harness.outcome", outcome.to_string()));
    }
}

/// The notes of the request whose extensions these are (`None`: it is not traced).
pub(crate) fn notes(extensions: &Extensions) -> Option<Notes> {
    extensions.get::<Notes>().cloned()
}

/// A server span being recorded.
pub(crate) struct Serving {
    span: Span,
    notes: Notes,
    /// Whether `mcp_harness.client` is set.
    client: bool,
}

/// How a request was answered, as far as its span tells.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer<'a> {
    /// A result.
    Ok,
    /// A tool result with `isError`.
    ToolError,
    /// An `initialize` result that agreed on this protocol version.
    Initialized(&'a str),
}

/// Starts the server span of request `method` naming `target`, continuing the request's trace
/// context, and leaves what its upstream spans continue ([`Parent`]) and its [`Notes`] in
/// `context.extensions`.
pub(crate) fn serve(
    tracer: &Arc<Tracer>,
    method: &'static str,
    target: Target<'_>,
    context: &mut RequestContext<RoleServer>,
) -> Serving {
    let parent = crate::trace::incoming(&context.meta, &context.extensions);
    let mut span = tracer.span(parent.as_ref(), Kind::Server, target.span_name(method));
    span.set("mcp.method.name", method);
    target.record(&mut span);
    span.set("jsonrpc.request.id", &context.id.to_string());
    if let Some(version) = context.protocol_version() {
        span.set("mcp.protocol.version", version.as_str());
    }
    let client = context.client_info().map(|info| info.name);
    let parts = context.extensions.get::<axum::http::request::Parts>();
    let profile = parts
        .and_then(|parts| parts.extensions.get::<crate::auth::Identity>())
        .map(|identity| identity.0.name.clone());
    let named = profile.or(client);
    if let Some(client) = &named {
        span.set("mcp_harness.client", client);
    }
    match parts {
        Some(parts) => {
            span.set("network.transport", "tcp");
            span.set("network.protocol.name", "http");
            let version = match parts.version {
                axum::http::Version::HTTP_10 => "1.0",
                axum::http::Version::HTTP_11 => "1.1",
                axum::http::Version::HTTP_2 => "2",
                axum::http::Version::HTTP_3 => "3",
                _ => "",
            };
            if !version.is_empty() {
                span.set("network.protocol.version", version);
            }
            if let Some(session) = session_digest(&context.extensions, parts) {
                span.set("mcp.session.id", &session);
            }
        }
        None => span.set("network.transport", "pipe"),
    }
    let notes = Notes::default();
    context.extensions.insert(span.as_parent());
    context.extensions.insert(notes.clone());
    Serving {
        span,
        notes,
        client: named.is_some(),
    }
}

/// 32 hex digits of the SHA-256 of the session's identity: the identity sealed in its id
/// (the same in every id re-sealed for it), else the `Mcp-Session-Id` it sent. `None` outside
/// a session (stateless requests, `initialize`).
fn session_digest(extensions: &Extensions, parts: &axum::http::request::Parts) -> Option<String> {
    use std::fmt::Write as _;
    let sealed = crate::sealed::opened(extensions).map(|opened| opened.payload.session.clone());
    let identity = match sealed {
        Some(identity) => identity,
        None => parts
            .headers
            .get("mcp-session-id")?
            .to_str()
            .ok()?
            .to_string(),
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, identity.as_bytes());
    let mut out = String::with_capacity(32);
    for byte in &digest.as_ref()[..16] {
        let _ = write!(out, "{byte:02x}");
    }
    Some(out)
}

impl Serving {
    /// Sets an attribute of the server span (`initialize`: what the client said of itself).
    pub(crate) fn set(&mut self, key: &'static str, value: &str) {
        self.span.set(key, value);
    }

    /// Names the client by what it said of itself (`initialize`), unless its profile named it.
    pub(crate) fn set_client(&mut self, name: &str) {
        if !self.client {
            self.span.set("mcp_harness.client", name);
            self.client = true;
        }
    }

    /// Ends the server span with what the handler noted and how the request ended.
    pub(crate) fn end(self, result: Result<Answer<'_>, &McpError>) {
        let mut span = self.span;
        for (key, value) in std::mem::take(&mut *crate::sync::lock(&self.notes.0)) {
            span.set(key, &value);
        }
        let error = match result {
            Ok(Answer::ToolError) => Some("tool_error".to_string()),
            Ok(Answer::Initialized(version)) => {
                span.set("mcp.protocol.version", version);
                None
            }
            Ok(Answer::Ok) => None,
            Err(error) => {
                let code = error.code.0.to_string();
                span.set("rpc.response.status_code", &code);
                Some(code)
            }
        };
        if let Some(error) = &error {
            span.set("error.type", error);
        }
        span.end(error.is_some());
    }
}

/// Starts the client span of request `method` sent to `server` for the request whose
/// extensions these are, a child of its server span; `None` when that request is not traced.
/// `target` names what the upstream calls it (its raw tool or prompt name, its own URI).
pub(crate) fn upstream(
    tracer: Option<&Arc<Tracer>>,
    extensions: &Extensions,
    method: &'static str,
    target: Target<'_>,
    server: &str,
) -> Option<Span> {
    let tracer = tracer?;
    let parent = extensions.get::<Parent>()?;
    let mut span = tracer.span(Some(parent), Kind::Client, target.span_name(method));
    span.set("mcp.method.name", method);
    target.record(&mut span);
    span.set("mcp_harness.server", server);
    Some(span)
}

/// The trace context to send upstream in the request `span` describes (empty without one).
pub(crate) fn meta(span: Option<&Span>) -> TraceMeta {
    match span {
        None => TraceMeta::default(),
        Some(span) => TraceMeta {
            traceparent: Some(span.context().header()),
            tracestate: span.state().map(|state| state.as_str().to_string()),
        },
    }
}

/// Ends an upstream span: `Ok(tool_error)` when the upstream answered (`true`: a tool result
/// with `isError`), else the failure — `error.type` is the upstream's JSON-RPC error code when
/// it sent one, else the failure's class (`transport`, `timeout`, …).
pub(crate) fn end_upstream(span: Option<Span>, outcome: Result<bool, &CallError>) {
    let Some(mut span) = span else {
        return;
    };
    let class = match outcome {
        Ok(false) => "ok".to_string(),
        Ok(true) => "tool_error".to_string(),
        Err(error) => serde_json::to_value(error.class())
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "_OTHER".into()),
    };
    span.set("mcp_harness.outcome", &class);
    let error = match outcome {
        Ok(false) => None,
        Err(CallError::Protocol {
            upstream: Some(data),
            ..
        }) => {
            let code = data.code.0.to_string();
            span.set("rpc.response.status_code", &code);
            Some(code)
        }
        Ok(true) | Err(_) => Some(class),
    };
    if let Some(error) = &error {
        span.set("error.type", error);
    }
    span.end(error.is_some());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's megabyte tool name makes no megabyte span name; a resource URI's query and
    /// user info stay out of the span.
    #[test]
    fn span_names_and_uris_are_bounded_and_bare() {
        let long = "x".repeat(1 << 20);
        let name = Target::Tool(&long).span_name("tools/call");
        assert_eq!(name.len(), "tools/call ".len() + NAME_CHARS);
        assert_eq!(
            bare_uri("https://user:pw@host.example/a/b?key=SECRET#frag"),
            "https://host.example/a/b"
        );
        assert_eq!(bare_uri("fixture://items/X?x=SECRET"), "fixture://items/X");
        assert_eq!(bare_uri("urn:x:y"), "urn:x:y");
    }
}

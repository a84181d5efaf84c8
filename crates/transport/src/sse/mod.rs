//! The legacy HTTP+SSE transport (protocol 2024-11-05), which rmcp 3.11 no longer ships.
//!
//! The client GETs an event stream (`Accept: text/event-stream`). The server's first `endpoint`
//! event names a URL (often relative, e.g. `/message?sessionId=…`) to which the client POSTs
//! each JSON-RPC message (`Content-Type: application/json`); the server's messages arrive as
//! `message` events on the stream. `LegacySseTransport` implements rmcp's
//! `Transport<RoleClient>` over that pair and is handed to `initialize` like every other
//! transport.
//!
//! Invariants:
//! - messages are POSTed only to an endpoint on the SSE URL's origin (scheme, host, port); an
//!   endpoint elsewhere is refused before anything is sent, so the configured headers never
//!   leave that origin (redirects are followed only within it, at most 5);
//! - every `message` event is decoded through `Inbound`: an undecodable answer fails its
//!   request at once, an answer to no request is logged and counted;
//! - configured header values are marked sensitive and appear in no log or error; URLs in
//!   errors and logs lose their query and user info;
//! - one SSE event is at most the server's `maxMessageBytes` (default 64 MiB; a parser made
//!   without one, [`MAX_EVENT_BYTES`]); a larger one ends the stream with an
//!   error saying so;
//! - a dropped stream is re-opened at most `MAX_RECONNECTS` times in a row (the count restarts
//!   when a `message` arrives), after exponential backoff starting at the server's `retry:` (or
//!   500 ms), with `Last-Event-ID`. A re-opened stream that announces a *different* endpoint
//!   means the server started a new session: the old one is gone, so the session ends. When the
//!   stream cannot be kept, `receive` returns `None`, rmcp closes the service and the session's
//!   owner sees the closure;
//! - POSTs go out one at a time in the order rmcp sends them (legacy servers answer 202 at
//!   once; the answer comes on the stream), each within `POST_TIMEOUT`; a 404/410 means the
//!   server forgot the session, which ends it;
//! - everything the transport starts (a stream reader task and a POST task) stops when the
//!   transport is closed or dropped.
//!
//! Layout: `parser` (lines → events, the lines cut by `crate::sse_lines`) ← `transport` (the
//! stream, the POSTs) ← `connector` (the [`Connector`](crate::Connector)); nothing points back.

mod connector;
mod parser;
mod transport;

pub use connector::LegacySseConnector;
pub use parser::{MAX_EVENT_BYTES, SseError, SseEvent, SseParser};

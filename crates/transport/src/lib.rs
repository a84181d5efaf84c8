//! Transports for mcp-harness: each [`Connector`] turns one server's connection parameters into an
//! initialised MCP client [`Session`].
//!
//! Invariants this crate keeps:
//! - a [`Session`] exists only after `initialize` completed within the startup deadline; a
//!   connector that fails or times out leaves nothing running (its child process group is killed,
//!   its pipes closed);
//! - a stdio server lives in its own process group, which is killed as a group when the session is
//!   shut down or dropped, so no child outlives the harness;
//! - the last `STDERR_TAIL_BYTES` (64 KiB) of a stdio server's stderr are kept for diagnostics,
//!   never more;
//! - server notifications reach the owner only through the [`EventSink`] given at connect time.
//!
//! This crate knows nothing of catalogs, actors or supervision: it opens, initialises and closes
//! connections. A new transport is a new [`Connector`] implementation; nothing else changes.

/// The two `StreamableHttpClient` methods that open a GET stream, forwarded unchanged to the
/// client in field `$inner` (for wrappers that change only how messages are POSTed).
macro_rules! forward_get_streams {
    ($inner:ident) => {
        async fn get_stream(
            &self,
            uri: std::sync::Arc<str>,
            session_id: Option<std::sync::Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: std::collections::HashMap<
                reqwest::header::HeaderName,
                reqwest::header::HeaderValue,
            >,
        ) -> $crate::layer::StreamResult<Self::Error> {
            self.$inner
                .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
                .await
        }

        async fn get_stream_with_max_sse_event_size(
            &self,
            uri: std::sync::Arc<str>,
            session_id: Option<std::sync::Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: std::collections::HashMap<
                reqwest::header::HeaderName,
                reqwest::header::HeaderValue,
            >,
            max_sse_event_size: usize,
        ) -> $crate::layer::StreamResult<Self::Error> {
            self.$inner
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await
        }
    };
}

pub mod auth;
pub mod callbacks;
mod connector;
mod direct;
mod endpoint;
mod error;
mod express;
pub mod fetch;
pub mod handler;
mod http;
pub mod http1;
// Its tests run in `--lib` test builds without the feature (axum is a dev-dependency).
#[cfg(any(feature = "http-server", test))]
pub mod http_server;
mod in_process;
pub mod inbound;
mod layer;
mod lines;
mod listen;
pub mod net;
mod ordered;
mod outstanding;
mod process;
pub mod reaper;
pub mod redact;
pub mod sse;
mod sse_lines;
mod stderr;
mod stdio;
pub mod wire;

pub use callbacks::{CallbackFuture, Callbacks, ClientCallbacks, Supported};
pub use connector::{ConnectOptions, Connector, ExitReport, Session, SessionInfo};
pub use error::{ErrorKind, STDERR_TAIL_MARK, TransportError};
pub use express::{Express, ExpressCall, ExpressError};
pub use handler::{
    ELICITATION_COMPLETE_NOTIFICATION, EventSink, HarnessClient, ServerEvent,
    TASK_STATUS_NOTIFICATION,
};
pub use http::{EXPRESS_ENV, StreamableHttpConnector};
pub use in_process::{InProcessConnector, InProcessServe};
pub use inbound::{DEFAULT_MAX_MESSAGE_BYTES, WireFault};
pub use outstanding::{SendHold, Sends};
pub use sse::LegacySseConnector;
pub use stdio::{StdioConnector, StdioSpec, withhold_env};
pub use wire::{TaskSupport, WireNotes};

/// The rmcp client peer type every session exposes for requests.
pub type ClientPeer = rmcp::service::Peer<rmcp::RoleClient>;

//! The mcp-harness runtime: supervised server actors, one catalog publisher, and the facade
//! embedders use ([`Runtime`]).
//!
//! Invariants:
//! - the connection lifecycle (per-server [`ServerState`](mcp_harness_catalog::ServerState)) and
//!   the catalog snapshot lifecycle (revisioned [`Snapshot`](mcp_harness_catalog::Snapshot)s) are
//!   separate: a server's entries are in a snapshot only while it is connected;
//! - only the publisher writes snapshots, and it swaps whole immutable ones;
//! - a tool call runs on the exact connection whose listing produced the snapshot entry the
//!   caller resolved, never on a fresh lookup of a name;
//! - dropping or shutting down the runtime leaves no server process behind.
//!
//! Layers (a module imports only the ones below it): `error` and `config` at the bottom;
//! `snapshot` (publisher, revisions); `connection` (server actors and what they use);
//! `call` (bindings and the call path) and `desired` (desired state, hot reload); `runtime` and
//! `builder` on top, imported by nobody inside. Every module is private: the public API is the
//! re-exports below.

mod builder;
mod call;
mod config;
mod connection;
mod desired;
mod error;
mod listens;
mod runtime;
mod snapshot;

#[cfg(test)]
mod parser_props;

pub use builder::{DEFAULT_APPROVAL_TIMEOUT, RuntimeBuilder};
pub use call::binding::{
    CANCELLED_WHILE_ASKED, CallOptions, CallReply, Forwarded, HandBack, PreparedCall, StepBinding,
    ToolResult,
};
pub use call::frozen::{BoundTool, SEARCH_TOOL};
pub use call::input::Reply;
pub use call::output::READ_OUTPUT_TOOL;
pub use call::result::{NormalizedResult, ResultWarning, WarningKind};
pub use call::tasks::TaskUpdate;
pub use config::sources;
pub use config::{
    ClientProfile, Config, ConfigError, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT, GatewayConfig, OutputConfig, ProfileAuth, SecretText, ServerConfig,
    TransportConfig, is_var_name, looks_like_a_secret, public_url_problem,
};
pub use connection::io_threads::IoThreads;
pub use connection::registry::Reconciled;
pub use connection::server::{ResourceUpdate, ServerLog, TaskStatusUpdate};
pub use connection::supervision::{DEFAULT_LOCAL_SLOTS, DEFAULT_REMOTE_SLOTS, ReconnectPolicy};
pub use desired::reload::{ConfigLoader, ConfigWatch, FilesSeen, RemoteJoiner};
pub use error::{CallError, ErrorClass, StartError};
pub use mcp_harness_catalog as catalog;
pub use mcp_harness_transport as transport;
pub use runtime::{LoadedSkill, ResourceSubscription, Runtime, TraceMeta};
pub use snapshot::publisher::DEFAULT_BATCH_WINDOW;
pub use snapshot::revisions::{Revision, Revisions};

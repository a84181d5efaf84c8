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

pub mod binding;
mod builder;
pub mod cache;
pub mod call;
pub mod config;
mod desired;
pub mod error;
pub mod io_threads;
pub mod listing;
mod mrtr;
mod progress;
pub mod publisher;
pub mod refresh;
pub mod registry;
pub mod reload;
pub mod revisions;
mod runtime;
pub mod server;
pub mod sources;
pub mod supervision;
mod task_augmented;
pub mod tasks;

pub use binding::{BoundTool, CallOptions, PreparedCall, StepBinding, ToolResult};
pub use builder::RuntimeBuilder;
pub use config::{Config, ConfigError, ServerConfig, TransportConfig};
pub use error::{CallError, ErrorClass, StartError};
pub use io_threads::IoThreads;
pub use mcp_harness_catalog as catalog;
pub use mcp_harness_transport as transport;
pub use registry::Reconciled;
pub use revisions::{Revision, Revisions};
pub use runtime::{LoadedSkill, ResourceSubscription, Runtime};
pub use server::ResourceUpdate;

//! The CLI's subcommands. Each takes a started [`Runtime`](mcp_harness_runtime::Runtime) and prints what a user asked for; none
//! owns the runtime's lifetime (main starts it and always shuts it down).

pub mod auth;
pub mod call;
pub mod config;
pub mod conformance;
pub mod demo;
pub mod inspect;
pub mod resources;
pub mod trust;
pub mod watch;

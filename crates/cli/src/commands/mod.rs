//! The CLI's subcommands. Each takes a started [`Runtime`](mcp_harness_runtime::Runtime) and prints what a user asked for; none
//! owns the runtime's lifetime (main starts it and always shuts it down).

pub(crate) mod auth;
pub(crate) mod call;
pub(crate) mod complete_line;
pub(crate) mod config;
pub(crate) mod conformance;
pub(crate) mod demo;
pub(crate) mod edit;
pub(crate) mod import;
pub(crate) mod inspect;
pub(crate) mod protocol;
pub(crate) mod resources;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod trust;
pub(crate) mod watch;

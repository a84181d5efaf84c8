//! `mcp-harness-fixture`: an rmcp-based MCP server whose behaviour is chosen
//! by command-line flags, used as the test double for the harness.
//!
//! Invariant: this crate root only re-exports; behaviour lives in
//! [`options`] (flag parsing), `state` (shared mutable catalogue), `tools`
//! (static definitions), `handler`/`ops` (the MCP server), `lifecycle` (crashes,
//! HTTP 503s and forgotten sessions), `skills` (the
//! SEP-2640 skills behind `--skills`), `serve` (transports and the program
//! entry point) and `tasks` (the separate task server of the SEP-2663 tests).

pub mod options;

mod bad_results;
mod faults;
mod handler;
mod hostile;
mod lifecycle;
mod ops;
mod serve;
mod skills;
mod state;
mod tasks;
mod tools;
mod versioned;
mod wire_faults;

pub use faults::{FAULT_TOOL_NAMES, MAX_FLOOD};
pub use handler::FixtureServer;
pub use lifecycle::{CRASH_EXIT_CODE, Crashed, HTTP_FAULT_TOOL_NAMES};
pub use options::{FixtureOptions, SkillTamper, TransportKind};
pub use serve::{BoxError, run_main, serve_http, serve_in_process, serve_stdio};
pub use skills::{PDF_FORMS_URI, PDF_SKILL_URI, RELEASE_NOTES_SKILL_URI, SKILL_TOOL_NAMES};
pub use tasks::{EXPLODE_MESSAGE, QUEUED, RESEARCH_STAGES, TASK_TOOL_NAMES, TaskServer};

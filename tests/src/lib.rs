//! `mcp-harness-fixture`: an rmcp-based MCP server whose behaviour is chosen
//! by command-line flags, used as the test double for the harness.
//!
//! Invariant: this crate root only re-exports; behaviour lives in
//! [`options`] (flag parsing), `tools` (static definitions), `handler` (the MCP
//! server; its parts are its children: `state` (shared mutable catalogue), `lists`
//! (list kinds, cursors), `ops`, `faults`, `lifecycle` (crashes, HTTP 503s and
//! forgotten sessions), `skills` (the SEP-2640 skills behind `--skills`),
//! `versioned`, `bad_results`, `hostile`, `client_requests` (tools that ask the client)),
//! `wire_faults`, `serve` (transports and the program entry point), `conformance` (the
//! official suite's reference server behind `--conformance`), `tasks` (the separate task
//! server of the SEP-2663 tests) and `scratch` (tests' temp folders, removed at exit). The
//! parts name `handler` and `lists`, never each other in a circle (`cargo xtask cycles`).

pub mod options;
pub mod scratch;

mod conformance;

mod handler;
mod serve;
mod tasks;
mod tools;
mod wire_faults;

pub use conformance::ConformanceServer;
pub use handler::FixtureServer;
pub use handler::client_requests::{CLIENT_REQUEST_TOOL_NAMES, FORM_SCHEMA};
pub use handler::faults::{FAULT_TOOL_NAMES, MAX_FLOOD};
pub use handler::lifecycle::{CRASH_EXIT_CODE, Crashed, HTTP_FAULT_TOOL_NAMES};
pub use handler::skills::{
    PDF_FORMS_URI, PDF_SKILL_URI, RELEASE_NOTES_SKILL_URI, SKILL_TOOL_NAMES,
};
pub use options::{FixtureOptions, SkillTamper, TransportKind};
pub use serve::{BoxError, run_main, serve_http, serve_in_process, serve_stdio};
pub use tasks::{EXPLODE_MESSAGE, QUEUED, RESEARCH_STAGES, TASK_TOOL_NAMES, TaskServer};

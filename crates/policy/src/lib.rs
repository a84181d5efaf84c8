//! Policy: what the model may see of the catalog, and what a tool call may do.
//!
//! Invariants this crate keeps, each in its module:
//! - [`filter`], [`exposure`]: every listed tool is exposed (direct or deferred behind tool
//!   search) or hidden with a reason naming the config key that hid it — never silently dropped;
//! - [`permission`]: rules match the fully qualified model-visible name only, so no server tool
//!   can pose as a built-in; a server's annotations are inputs, never grants;
//! - [`visibility`]: a name is admitted when allowed (or no allow list) and not denied.
//!
//! Everything here is pure: no I/O, no actors. The runtime feeds it catalog entries and calls,
//! and applies the outcome (and any approval timeout) itself.

pub mod exposure;
pub mod filter;
mod glob;
pub mod permission;
pub mod uri;
pub mod visibility;

pub use exposure::{
    AppPolicy, ExposedTool, Exposure, ExposurePolicy, LoadBudget, Reserved, SearchRequest,
    ToolSearch, search, search_tool_definition,
};
pub use filter::ToolFilter;
pub use permission::{
    AllowAll, Approval, ApprovalRequest, Approver, Decision, DenyAll, Effect, PermissionRules, Rule,
};
pub use visibility::{NameFilter, PatternKind};

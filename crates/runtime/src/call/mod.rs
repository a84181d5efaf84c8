//! The tool-call path (R23–R31): step bindings and prepared calls, and the pieces they use.
//!
//! - [`binding`]: a [`binding::StepBinding`] freezes the tools the model sees; a
//!   [`binding::PreparedCall`] validates, asks permission and checks under the revision gate
//!   that its tool is unchanged on the same connection just before sending, then follows the
//!   call's further rounds (`binding::rounds`) or hands them back to a caller that asked
//!   ([`binding::HandBack`], a gateway passing tasks and `input_required` through);
//! - [`validate`]: arguments are checked against the exact input schema the model saw, compiled
//!   once per tool, with no network access ever (remote `$ref`s are never fetched);
//! - [`result`]: a `CallToolResult` becomes a [`result::NormalizedResult`] whose content blocks,
//!   URIs and structured content were checked, keeping `content` and `structuredContent` side by
//!   side, with `isError` turned into one tool-error shape;
//! - [`output`]: a result over its token budget is written to a bounded, private store and the
//!   model gets a bounded summary plus a handle it can page through with the built-in
//!   `mcp_harness__read_output` tool;
//! - [`tasks`], [`task_augmented`], [`mrtr`]: the call's further rounds (SEP-2663 and SEP-1686
//!   tasks, multi-round input);
//! - [`input`]: `prompts/get` and `resources/read` with their `input_required` rounds, followed
//!   or handed back.
//!
//! Architecture invariant: `call` sits above `connection` and `snapshot` and below the facade;
//! nothing under `connection` or `snapshot` imports it.

pub(crate) mod binding;
pub(crate) mod context;
pub(crate) mod frozen;
pub(crate) mod input;
pub(crate) mod mrtr;
pub(crate) mod output;
pub(crate) mod result;
pub(crate) mod summary;
pub(crate) mod task_augmented;
pub(crate) mod tasks;
pub(crate) mod trace_meta;
pub(crate) mod validate;

#[cfg(test)]
mod pieces_tests;

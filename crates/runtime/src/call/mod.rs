//! The pure pieces of the tool-call path (R27, R30, R31): nothing here talks to a server.
//!
//! - [`validate`]: arguments are checked against the exact input schema the model saw, compiled
//!   once per tool, with no network access ever (remote `$ref`s are never fetched);
//! - [`result`]: a `CallToolResult` becomes a [`result::NormalizedResult`] whose content blocks,
//!   URIs and structured content were checked, keeping `content` and `structuredContent` side by
//!   side, with `isError` turned into one tool-error shape;
//! - [`output`]: a result over its token budget is written to a bounded, private store and the
//!   model gets a bounded summary plus a handle it can page through with the built-in
//!   `mcp_harness__read_output` tool.

pub mod output;
pub mod result;
pub mod validate;

//! Tools whose definition changes at run time, announced before they behave differently, and a
//! call counter — the test double for step binding and the revision check.
//!
//! Invariants: `mutate_tool` changes what tools/list shows at once and sends
//! tools/list_changed, but the tool *executes* the new version only `apply_after_ms` later (a
//! well-behaved server announces a change before making it); a versioned tool's result always
//! names the version that executed; every tools/call is counted by name before it runs, so a
//! test can prove a call was never sent; every listing (a list request without a cursor) is
//! counted by method (`tools/list`, ...), so a test can bound how often a client re-lists;
//! every `slow` request's id and every `notifications/cancelled` received are recorded in
//! order (`cancellations`), so a test can prove a cancel reached the server for the right
//! request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::{
    RoleServer,
    model::{CallToolResult, JsonObject, Tool},
    service::RequestContext,
};
use serde_json::json;

use crate::{
    handler::lists::Change,
    handler::{FixtureServer, error_result, text_result},
};

/// Names of the tools this module adds.
pub const VERSIONED_TOOL_NAMES: [&str; 3] = ["mutate_tool", "calls", "cancellations"];
/// Longest delay `mutate_tool` accepts before the new version executes.
const MAX_APPLY_AFTER_MS: u64 = 60_000;

/// Versioned tools and call counts, shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct Versioned {
    /// name → (version listed, version executing)
    tools: BTreeMap<String, (u64, u64)>,
    /// tools/call requests received, by tool name.
    calls: BTreeMap<String, u64>,
    /// Request ids of the `slow` calls received, in order.
    slow: Vec<String>,
    /// `notifications/cancelled` received: (request id, reason), in order.
    cancelled: Vec<(Option<String>, Option<String>)>,
}

impl Versioned {
    /// Counts a listing (a first page) by its method.
    pub(crate) fn count_listing(&mut self, method: &str) {
        *self.calls.entry(method.to_string()).or_insert(0) += 1;
    }

    /// Counts a call of `name`.
    pub(crate) fn count(&mut self, name: &str) {
        *self.calls.entry(name.to_string()).or_insert(0) += 1;
    }

    /// Records the request id of a `slow` call.
    pub(crate) fn slow_started(&mut self, request: String) {
        self.slow.push(request);
    }

    /// Records a `notifications/cancelled`.
    pub(crate) fn cancelled(&mut self, request: Option<String>, reason: Option<String>) {
        self.cancelled.push((request, reason));
    }

    /// The listed definitions of the versioned tools: the description and the schema both
    /// carry the version (the schema's one property is `v<version>`).
    pub(crate) fn listed(&self) -> Vec<Tool> {
        self.tools
            .iter()
            .map(|(name, (listed, _))| definition(name, *listed))
            .collect()
    }

    /// The version `name` executes now, if it is a versioned tool.
    pub(crate) fn executing(&self, name: &str) -> Option<u64> {
        self.tools.get(name).map(|(_, executing)| *executing)
    }
}

fn definition(name: &str, version: u64) -> Tool {
    let schema: JsonObject = json!({
        "type": "object",
        "properties": {format!("v{version}"): {"type": "string"}}
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    Tool::new(
        name.to_string(),
        format!("version {version} of {name}"),
        Arc::new(schema),
    )
}

/// Definitions of `mutate_tool`, `calls` and `cancellations`.
pub fn versioned_tools() -> Vec<Tool> {
    let schema = |v: serde_json::Value| Arc::new(v.as_object().cloned().unwrap_or_default());
    vec![
        Tool::new(
            "mutate_tool",
            "Lists tool `name` at `version` now (sending tools/list_changed) and makes it execute that version `apply_after_ms` later.",
            schema(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "integer", "minimum": 0},
                    "apply_after_ms": {"type": "integer", "minimum": 0}
                },
                "required": ["name", "version"]
            })),
        ),
        Tool::new(
            "calls",
            "Returns how many tools/call requests each tool received, and how many listings each list method served (`tools/list`, ...), as JSON.",
            schema(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "cancellations",
            "Returns the request ids of the `slow` calls received (`slow`) and every notifications/cancelled received (`cancelled`: `requestId`, `reason`), in order, as JSON.",
            schema(json!({"type": "object", "properties": {}})),
        ),
    ]
}

impl FixtureServer {
    /// `mutate_tool`.
    pub(crate) async fn mutate_tool(
        &self,
        name: String,
        version: u64,
        apply_after_ms: u64,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Err(message) = crate::tools::validate_name(&name) {
            return error_result(message);
        }
        if apply_after_ms > MAX_APPLY_AFTER_MS {
            return error_result(format!(
                "apply_after_ms must be at most {MAX_APPLY_AFTER_MS}"
            ));
        }
        let fresh = {
            let mut state = self.lock();
            let entry = state
                .versioned
                .tools
                .entry(name.clone())
                .or_insert((version, version));
            let fresh = entry.0 == version && entry.1 == version;
            entry.0 = version;
            fresh
        };
        if !fresh {
            let server = self.clone();
            let name = name.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(apply_after_ms)).await;
                if let Some(entry) = server.lock().versioned.tools.get_mut(&name) {
                    entry.1 = version;
                }
            });
        }
        self.list_changed(Change::Tools, context).await;
        text_result(format!("{name} is listed at version {version}"))
    }

    /// A versioned tool's result: the version that executed.
    pub(crate) fn versioned_call(&self, version: u64) -> CallToolResult {
        text_result(json!({"executed_version": version}).to_string())
    }

    /// `cancellations`.
    pub(crate) fn cancellations(&self) -> CallToolResult {
        let state = self.lock();
        let cancelled: Vec<_> = state
            .versioned
            .cancelled
            .iter()
            .map(|(id, reason)| json!({"requestId": id, "reason": reason}))
            .collect();
        text_result(json!({"slow": state.versioned.slow, "cancelled": cancelled}).to_string())
    }

    /// `calls`.
    pub(crate) fn call_counts(&self) -> CallToolResult {
        text_result(json!(self.lock().versioned.calls).to_string())
    }
}

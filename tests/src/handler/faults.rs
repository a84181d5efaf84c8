//! Fault injection for tests: floods of list_changed notifications and failing list pages.
//!
//! Invariants: a flood leaves the server in a known final state (the list holds exactly the
//! item of the last step, `flood_<count-1>`), so a client can be checked against the truth;
//! a scheduled list failure fails exactly the requested number of requests for that page of
//! that list, and nothing else.

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResult, JsonObject, Prompt, Resource, Tool},
    service::RequestContext,
};
use serde_json::json;

use crate::{
    handler::lists::Change,
    handler::lists::ListKind,
    handler::{FixtureServer, error_result, text_result},
    tools,
};

/// Names of the fault-injection tools, always listed after the static ones.
pub const FAULT_TOOL_NAMES: [&str; 2] = ["flood", "fail_next_list"];
/// Most notifications one `flood` call may send.
pub const MAX_FLOOD: u64 = 100_000;

/// Fault state shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Current flood item per list (`tools`, `prompts`, `resources`).
    flood_tools: Option<u64>,
    flood_prompts: Option<u64>,
    flood_resources: Option<u64>,
    /// (list, page index, failures left).
    list_failures: Vec<(ListKind, usize, u32)>,
}

fn schema(value: serde_json::Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// Definitions of the fault tools.
pub fn fault_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "flood",
            "Replaces the `flood_N` item of a list `count` times, sending list_changed after each step; ends with flood_<count-1>.",
            schema(json!({
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["tools", "prompts", "resources"]},
                    "count": {"type": "integer", "minimum": 1}
                },
                "required": ["kind", "count"]
            })),
        ),
        Tool::new(
            "fail_next_list",
            "Makes the next `times` requests for page `page` (0-based) of a list fail with an internal error.",
            schema(json!({
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["tools", "prompts", "resources", "templates", "skills"]},
                    "page": {"type": "integer", "minimum": 0},
                    "times": {"type": "integer", "minimum": 1}
                },
                "required": ["kind"]
            })),
        ),
    ]
}

fn list_kind(name: &str) -> Option<ListKind> {
    [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::ResourceTemplates,
        ListKind::Skills,
    ]
    .into_iter()
    .find(|k| k.tag() == name)
}

impl Faults {
    /// The flood tool to list, if a flood of tools ran.
    pub(crate) fn flood_tool(&self) -> Option<Tool> {
        self.flood_tools
            .map(|n| tools::dynamic_tool(&format!("flood_{n}"), None))
    }

    /// The flood prompt to list, if any.
    pub(crate) fn flood_prompt(&self) -> Option<Prompt> {
        self.flood_prompts
            .map(|n| tools::dynamic_prompt(&format!("flood_{n}")))
    }

    /// The flood resource to list, if any.
    pub(crate) fn flood_resource(&self) -> Option<Resource> {
        self.flood_resources
            .map(|n| tools::text_resource(&format!("fixture://flood/{n}")))
    }

    /// Whether `name` is the current flood tool.
    pub(crate) fn is_flood_tool(&self, name: &str) -> bool {
        self.flood_tools
            .is_some_and(|n| name == format!("flood_{n}"))
    }

    /// Fails this request if a failure is scheduled for its page.
    pub(crate) fn check_list(&mut self, kind: ListKind, page: usize) -> Result<(), McpError> {
        let hit = self
            .list_failures
            .iter_mut()
            .find(|(k, p, left)| *k == kind && *p == page && *left > 0);
        match hit {
            Some((_, _, left)) => {
                *left -= 1;
                self.list_failures.retain(|(_, _, left)| *left > 0);
                Err(McpError::internal_error(
                    format!("fixture: {} page {page} fails on purpose", kind.tag()),
                    None,
                ))
            }
            None => Ok(()),
        }
    }
}

/// The page index a cursor points at, for fault matching (0 without a cursor).
pub(crate) fn page_of(cursor: Option<&str>, page_size: Option<usize>) -> usize {
    let (Some(cursor), Some(size)) = (cursor, page_size) else {
        return 0;
    };
    let offset = cursor
        .rsplit(':')
        .next()
        .and_then(|o| usize::from_str_radix(o, 16).ok())
        .unwrap_or(0);
    offset / size.max(1)
}

impl FixtureServer {
    /// `flood`: `count` replacements of one list's flood item, each followed by list_changed.
    pub(crate) async fn flood(
        &self,
        kind: &str,
        count: u64,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if count == 0 || count > MAX_FLOOD {
            return error_result(format!("count must be between 1 and {MAX_FLOOD}"));
        }
        let change = match kind {
            "tools" => Change::Tools,
            "prompts" => Change::Prompts,
            "resources" => Change::Resources,
            other => return error_result(format!("unknown list {other:?}")),
        };
        for i in 0..count {
            {
                let mut state = self.lock();
                let slot = match change {
                    Change::Tools => &mut state.faults.flood_tools,
                    Change::Prompts => &mut state.faults.flood_prompts,
                    Change::Resources => &mut state.faults.flood_resources,
                };
                *slot = Some(i);
            }
            self.list_changed(change, context).await;
        }
        text_result(format!(
            "flooded {kind} {count} times; final item flood_{}",
            count - 1
        ))
    }

    /// `fail_next_list`: schedules list failures.
    pub(crate) fn fail_next_list(&self, kind: &str, page: u64, times: u64) -> CallToolResult {
        let Some(kind) = list_kind(kind) else {
            return error_result(format!("unknown list {kind:?}"));
        };
        let (page, times) = (page as usize, times.min(u32::MAX as u64) as u32);
        self.lock().faults.list_failures.push((kind, page, times));
        text_result(format!(
            "the next {times} requests for {} page {page} will fail",
            kind.tag()
        ))
    }
}

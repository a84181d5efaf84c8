//! The frozen view: what one snapshot looks like to the model under the exposure policy
//! ([`Frozen`]: direct, deferred and hidden tools, the authenticate tools of servers waiting
//! for authorization, the built-in tools), the tools a step has loaded through tool search, and
//! the names of the harness's built-in tools.
//!
//! Invariant: a `Frozen` is computed once per snapshot and never changes; a tool's compiled
//! `outputSchema` comes only from the very definition the snapshot holds.

use std::collections::HashMap;

/// A map from a tool's name, looked up on every call (foldhash: SipHash costs several hundred
/// instructions a lookup).
type ByName<V> = HashMap<String, V, foldhash::quality::RandomState>;
use std::sync::{Arc, Mutex, OnceLock};

use mcp_harness_catalog::{HiddenEntry, ServerState, Snapshot, ToolEntry};
use mcp_harness_policy::{
    ExposedTool, LoadBudget, Reserved, SearchRequest, ToolSearch, search, search_tool_definition,
};
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

use super::output::read_output_tool;
use super::result::OutputSchema;

/// Name of the built-in tool that searches deferred tools (tool search on).
pub const SEARCH_TOOL: &str = "mcp_harness__search_tools";
pub(crate) use super::output::READ_OUTPUT_TOOL;
/// Raw name of the tool a server waiting for authorization shows instead of its own (R4):
/// `mcp__<server>__authenticate`.
pub(crate) const AUTHENTICATE_TOOL: &str = "authenticate";

/// One tool of a step, as the model sees it.
#[derive(Debug, Clone)]
pub struct BoundTool {
    /// The model-visible name.
    pub name: String,
    /// The definition the model sees (for server tools: the listed one, raw name replaced by
    /// nothing — the qualified name is `name`).
    pub tool: Arc<Tool>,
    /// The server, or `None` for the harness's built-in tools.
    pub server: Option<String>,
}

impl BoundTool {
    fn description(&self) -> String {
        self.tool.description.as_deref().unwrap_or("").to_string()
    }

    /// This tool in the OpenAI function-calling format.
    pub fn openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description(),
                "parameters": &*self.tool.input_schema,
            }
        })
    }

    /// This tool in the Anthropic tool format.
    pub fn anthropic(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description(),
            "input_schema": &*self.tool.input_schema,
        })
    }
}

/// What a snapshot looks like to the model under the exposure policy: computed once per
/// snapshot and shared by every step bound to it.
pub(crate) struct Frozen {
    pub(super) direct: Vec<BoundTool>,
    /// The names in `direct`, for a call's check that its step shows the tool: a lookup, not a
    /// scan of every tool the step shows.
    shown: std::collections::HashSet<String, foldhash::quality::RandomState>,
    pub(super) deferred: Vec<ExposedTool>,
    pub(super) hidden: Vec<HiddenEntry>,
    pub(super) index: ByName<ToolEntry>,
    /// For each server waiting for authorization, by its authenticate tool's name: the server
    /// and why it waits.
    pub(super) authenticate: ByName<(String, String, bool)>,
    /// The `outputSchema` of each tool in `index` that has one, compiled on the first result
    /// that needs it and then reused by every call of every step bound to this snapshot.
    outputs: ByName<OutputSlot>,
    /// What a step may load through tool search, the harness's own tools already counted.
    pub(super) load_budget: LoadBudget,
}

/// One tool's compiled `outputSchema`, with the definition it was compiled from.
struct OutputSlot {
    tool: Arc<Tool>,
    compiled: OnceLock<Arc<OutputSchema>>,
}

impl Frozen {
    pub(crate) fn new(policy: &mcp_harness_policy::ExposurePolicy, snapshot: &Snapshot) -> Self {
        // The harness's own tools: `read_output`, and (R4) for a server waiting for
        // authorization only a tool that says how to log in. They count against the tool cap
        // and the schema budget before any server tool does.
        let mut own = vec![builtin(READ_OUTPUT_TOOL, read_output_tool())];
        let mut authenticate = ByName::default();
        for (server, status) in &snapshot.servers {
            if let ServerState::NeedsAuth { reason } = &status.state {
                let name = mcp_harness_catalog::qualify(server, AUTHENTICATE_TOOL);
                own.push(BoundTool {
                    name: name.clone(),
                    tool: Arc::new(authenticate_tool(server)),
                    server: Some(server.clone()),
                });
                let headers = status.transport == "sse";
                authenticate.insert(name, (server.clone(), reason.clone(), headers));
            }
        }
        let mut policy = policy.clone();
        policy.reserved = Reserved::of(own.iter().map(|t| (t.name.as_str(), &*t.tool)));
        let exposure = policy.expose(snapshot.tools());
        let mut index = ByName::default();
        let mut direct: Vec<BoundTool> = exposure
            .direct
            .iter()
            .map(|t| {
                index.insert(t.entry.qualified_name.clone(), t.entry.clone());
                bound(&t.entry)
            })
            .collect();
        for t in &exposure.deferred {
            index.insert(t.entry.qualified_name.clone(), t.entry.clone());
        }
        if policy.tool_search == ToolSearch::On {
            direct.push(builtin(SEARCH_TOOL, search_tool_definition()));
        }
        direct.extend(own);
        let outputs = index
            .iter()
            .filter(|(_, entry)| entry.tool.output_schema.is_some())
            .map(|(name, entry)| {
                let slot = OutputSlot {
                    tool: entry.tool.clone(),
                    compiled: OnceLock::new(),
                };
                (name.clone(), slot)
            })
            .collect();
        // Tools whose name another server's tool also has are in no list of the policy's:
        // they are hidden here, with the reason, like those the policy hides.
        let mut hidden = exposure.hidden;
        hidden.extend(snapshot.name_conflicts.iter().cloned());
        let shown = direct.iter().map(|t| t.name.clone()).collect();
        Self {
            direct,
            shown,
            deferred: exposure.deferred,
            hidden,
            index,
            authenticate,
            outputs,
            load_budget: policy.load_budget(),
        }
    }

    /// Whether the step shows `name` directly (loaded tools aside).
    pub(super) fn shows(&self, name: &str) -> bool {
        self.shown.contains(name)
    }

    /// The compiled `outputSchema` of `entry`'s tool (`None` if it has none): compiled once per
    /// snapshot, and only ever from that very definition.
    pub(super) fn output_schema(&self, entry: &ToolEntry) -> Option<Arc<OutputSchema>> {
        let schema = entry.tool.output_schema.as_deref()?;
        match self.outputs.get(&entry.qualified_name) {
            Some(slot) if Arc::ptr_eq(&slot.tool, &entry.tool) => Some(
                slot.compiled
                    .get_or_init(|| Arc::new(OutputSchema::new(schema)))
                    .clone(),
            ),
            _ => Some(Arc::new(OutputSchema::new(schema))),
        }
    }
}

pub(super) fn bound(entry: &ToolEntry) -> BoundTool {
    BoundTool {
        name: entry.qualified_name.clone(),
        tool: entry.tool.clone(),
        server: Some(entry.server.clone()),
    }
}

/// The definition of a needs-auth server's authenticate tool (no arguments).
fn authenticate_tool(server: &str) -> Tool {
    let schema = json!({"type": "object", "properties": {}, "additionalProperties": false});
    let schema = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        AUTHENTICATE_TOOL,
        format!(
            "The MCP server \"{server}\" needs the user's authorization before its tools can be \
             used. Call this to learn what the user has to do."
        ),
        Arc::new(schema),
    )
}

fn builtin(name: &str, tool: Tool) -> BoundTool {
    BoundTool {
        name: name.to_string(),
        tool: Arc::new(tool),
        server: None,
    }
}

/// The model-visible name a hidden tool would have had, under its server's naming in
/// `snapshot`.
pub(crate) fn hidden_name(snapshot: &Snapshot, h: &HiddenEntry) -> String {
    let naming = snapshot
        .catalogs
        .get(&h.server)
        .map(|c| c.naming)
        .unwrap_or_default();
    naming.public(&h.server, &h.raw_name)
}

/// The step's deferred tools and what tool search loaded of them; shared by the binding and
/// its calls of the search tool, so a loaded tool becomes callable in the same step.
pub(super) struct SearchState {
    pub(super) frozen: Arc<Frozen>,
    pub(super) loaded: Mutex<(LoadBudget, Vec<BoundTool>)>,
}

impl SearchState {
    pub(super) fn loaded(&self) -> std::sync::MutexGuard<'_, (LoadBudget, Vec<BoundTool>)> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn search_and_load(&self, request: &SearchRequest) -> Vec<Value> {
        let hits = search(&self.frozen.deferred, &request.query, request.limit);
        let mut loaded = self.loaded();
        let mut out = Vec::new();
        for hit in hits {
            match load_one(&mut loaded, hit) {
                Ok(()) => out.push(bound(&hit.entry).anthropic()),
                Err(reason) => {
                    out.push(json!({"name": hit.entry.qualified_name, "notLoaded": reason}))
                }
            }
        }
        out
    }

    /// Loads the deferred tools named in `names` (see [`StepBinding::load`]).
    ///
    /// [`StepBinding::load`]: super::binding::StepBinding::load
    pub(super) fn load_named(&self, names: &[String]) {
        let mut loaded = self.loaded();
        for tool in self.frozen.deferred.iter() {
            if names.contains(&tool.entry.qualified_name) {
                let _ = load_one(&mut loaded, tool);
            }
        }
    }
}

/// Counts `tool` against the load budget and adds it to the loaded tools, or says why not.
fn load_one(loaded: &mut (LoadBudget, Vec<BoundTool>), tool: &ExposedTool) -> Result<(), String> {
    loaded.0.load(tool)?;
    if !loaded.1.iter().any(|t| t.name == tool.entry.qualified_name) {
        loaded.1.push(bound(&tool.entry));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_harness_catalog::{
        MetadataLimits, ServerCatalog, ServerState, ServerStatus, SnapshotBuilder,
    };
    use mcp_harness_policy::ExposurePolicy;

    fn object(value: Value) -> Arc<JsonObject> {
        Arc::new(value.as_object().cloned().unwrap_or_default())
    }

    fn snapshot(tools: Vec<Tool>) -> Snapshot {
        let mut catalog = ServerCatalog::default();
        catalog.set_tools("srv", tools, &MetadataLimits::default());
        let mut builder = SnapshotBuilder::new();
        builder.server(
            ServerStatus::new("srv", "stdio", ServerState::Connected),
            Some(Arc::new(catalog)),
        );
        builder.build(1)
    }

    #[test]
    fn output_schemas_are_compiled_once_per_snapshot_and_only_from_the_bound_definition() {
        let input = object(json!({"type": "object"}));
        let output = object(json!({"type": "object", "required": ["n"]}));
        let mut with_output = Tool::new("sum", "adds", input.clone());
        with_output.output_schema = Some(output);
        let plain = Tool::new("echo", "echoes", input);
        let frozen = Frozen::new(
            &ExposurePolicy::default(),
            &snapshot(vec![with_output, plain]),
        );

        let sum = frozen
            .index
            .get("mcp__srv__sum")
            .cloned()
            .expect("sum is exposed");
        let first = frozen
            .output_schema(&sum)
            .expect("sum has an output schema");
        let again = frozen
            .output_schema(&sum)
            .expect("sum has an output schema");
        assert!(Arc::ptr_eq(&first, &again), "compiled once, then reused");
        assert!(first.is_usable());

        let echo = frozen
            .index
            .get("mcp__srv__echo")
            .cloned()
            .expect("echo is exposed");
        assert!(frozen.output_schema(&echo).is_none());

        // An entry whose definition is not the one this snapshot holds never gets the cached
        // validator: its own schema is compiled.
        let mut other = sum.clone();
        let mut tool = (*other.tool).clone();
        tool.output_schema = Some(object(json!({"type": 12})));
        other.tool = Arc::new(tool);
        let own = frozen
            .output_schema(&other)
            .expect("it has an output schema");
        assert!(!Arc::ptr_eq(&own, &first));
        assert!(!own.is_usable());
    }
}

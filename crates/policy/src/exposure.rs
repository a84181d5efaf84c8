//! Exposure (R25): which tools the model sees directly, which it finds through tool search, and
//! which it does not see at all.
//!
//! Invariant: **every tool is exposed (direct or deferred) or hidden with a reason**, and the
//! outcome depends only on the policy and the tools, never on the order they arrive in.
//!
//! Rules, in the order they are applied to each tool (tools taken in qualified-name order):
//! 1. model visibility — an MCP Apps tool whose `_meta.ui.visibility` lacks `"model"` is for the
//!    app's UI only;
//! 2. app policy — a tool of an app or connector may be hidden for being destructive or
//!    open-world ([`AppPolicy`]);
//! 3. per-tool budget — the definition the model would see is over
//!    [`ExposurePolicy::per_tool_schema_bytes`];
//! 4. total budget and tool cap, shared fairly across servers — without tool search, each
//!    server shows a prefix of its admitted tools (in name order), and the sizes of those
//!    prefixes are set by water-filling: in each round, every server that still has tools to
//!    show may take up to an equal share of what is left of [`ExposurePolicy::max_tools`] and of
//!    [`ExposurePolicy::total_schema_bytes`]; what a server does not need (it has fewer or
//!    smaller tools) stays in the pool and is shared again in the next round. When no server can
//!    take a whole tool within its share any more, what is left goes one tool per turn,
//!    round-robin in server-name order, to each server whose next tool still fits. So a server
//!    gets at least the longest prefix that fits in `1/n` of the cap and of the budget (`n`
//!    servers with admitted tools) — one server with 200 tools cannot hide every tool of
//!    another — and sharing ends only when no server's next tool fits in what is left. A
//!    server's first tool left out, and every tool after it, is hidden with the limit that was
//!    reached. The harness's own tools the model sees beside them (reading a stored output, how
//!    to log in to a server) are counted first ([`Reserved`]): the cap and the budget are of
//!    everything the model sees.
//!
//! The outcome is deterministic: it depends only on the policy and the set of tools (servers in
//! name order, tools in qualified-name order), never on the order they arrive in.
//!
//! With tool search on, every admitted tool is deferred: the model sees only
//! [`search_tool_definition`] and loads tools it found. The per-tool budget still applies to
//! every tool (a loaded tool is shown whole); the total budget and the tool cap apply to what is
//! loaded, the search tool included, through [`LoadBudget`] — not to the deferred catalog, which
//! is never in the prompt.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;

use mcp_harness_catalog::{HiddenEntry, Kind, ToolEntry};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The config key this policy is read from, used in reasons.
pub const CONFIG_KEY: &str = "exposure";
/// Name of the harness's own search tool. It does not start with `mcp__`, so no server tool
/// (always `mcp__<server>__<tool>`) can take it.
pub const SEARCH_TOOL_NAME: &str = "mcp_harness__search_tools";
/// Results returned by a search when the model gives no `limit`.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Most results one search returns, whatever `limit` the model asks for.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// Longest search query, in characters: a search costs its words times the deferred tools,
/// and runs on the caller's thread, so a 790 KB query held a gateway for seconds.
pub const MAX_SEARCH_QUERY_CHARS: usize = 1_000;
/// Most distinct words of one search query.
pub const MAX_SEARCH_QUERY_WORDS: usize = 32;

/// How many tools the model may see, and how large they may be (`"exposure"` in the config;
/// camelCase keys, unknown keys rejected, missing keys take their default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ExposurePolicy {
    /// `perToolSchemaBytes`: largest definition of one tool as the model sees it — qualified
    /// name, description and input schema, as compact JSON — in bytes. Default 8 KiB. A larger
    /// tool is hidden.
    pub per_tool_schema_bytes: usize,
    /// `totalSchemaBytes`: largest sum of those definitions over the tools the model sees at
    /// once, in bytes. Default 64 KiB.
    pub total_schema_bytes: usize,
    /// `maxTools`: most tools the model sees at once. Default 128 (VS Code's hard cap).
    pub max_tools: usize,
    /// `toolSearch`: `"off"` (default) shows admitted tools directly; `"on"` defers them behind
    /// the search tool.
    pub tool_search: ToolSearch,
    /// `apps`: which tools of apps and connectors to hide. Default: none.
    pub apps: AppPolicy,
    /// The harness's own tools shown beside the servers' (not a config key).
    #[serde(skip)]
    pub reserved: Reserved,
}

/// The harness's own tools the model sees beside the servers' tools: counted against
/// `maxTools` and `totalSchemaBytes` before any server tool is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// How many.
    pub tools: usize,
    /// Their definitions' size, measured as a server tool's is.
    pub bytes: usize,
}

impl Reserved {
    /// The count and size of `tools` (qualified name, definition).
    pub fn of<'a>(tools: impl Iterator<Item = (&'a str, &'a Tool)>) -> Self {
        tools.fold(Self::default(), |sum, (name, tool)| Self {
            tools: sum.tools + 1,
            bytes: sum.bytes + definition_bytes(name, tool).unwrap_or(0),
        })
    }
}

impl Default for ExposurePolicy {
    fn default() -> Self {
        Self {
            per_tool_schema_bytes: 8 * 1024,
            total_schema_bytes: 64 * 1024,
            max_tools: 128,
            tool_search: ToolSearch::Off,
            apps: AppPolicy::default(),
            reserved: Reserved::default(),
        }
    }
}

/// Whether tools are shown directly or found through search.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSearch {
    /// Every admitted tool is in the prompt.
    #[default]
    Off,
    /// Admitted tools are deferred; the model searches and loads them on demand.
    On,
}

/// What to hide among tools that belong to an app or connector (those with
/// `_meta.connector_id` or `_meta.ui.resourceUri`). Annotations are the server's hints; a
/// missing hint counts as the MCP default (destructiveHint true, openWorldHint true, readOnlyHint
/// false), and a tool claiming readOnlyHint is not destructive (the MCP meaning of the hints).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AppPolicy {
    /// `hideDestructive`: hide app and connector tools that may be destructive. Default false.
    pub hide_destructive: bool,
    /// `hideOpenWorld`: hide app and connector tools that may reach an open world (the web,
    /// other people's data). Default false.
    pub hide_open_world: bool,
}

/// What rule 4 gave one server: how many of its admitted tools it shows, their bytes, and how
/// much of the tool cap was left for anyone at the end.
#[derive(Debug, Clone, Copy, Default)]
struct Share {
    count: usize,
    bytes: usize,
    tools_left: usize,
}

/// A tool the model may see, with the size of its definition.
#[derive(Debug, Clone)]
pub struct ExposedTool {
    /// The catalog entry exposed.
    pub entry: ToolEntry,
    /// Bytes of the definition the model sees (qualified name, description, input schema as
    /// compact JSON).
    pub schema_bytes: usize,
    /// `_meta.connector_id`, when the tool belongs to a connector. Server text: escape it for
    /// display.
    pub connector: Option<String>,
    /// `_meta.ui.resourceUri` (or the older `_meta["ui/resourceUri"]`), when the tool belongs to
    /// an MCP App. Server text: escape it for display.
    pub app: Option<String>,
}

/// The outcome of [`ExposurePolicy::expose`]; each list in qualified-name order.
#[derive(Debug, Clone, Default)]
pub struct Exposure {
    /// Tools in the prompt (tool search off).
    pub direct: Vec<ExposedTool>,
    /// Tools found through search and loaded on demand (tool search on).
    pub deferred: Vec<ExposedTool>,
    /// Everything else, each with its reason.
    pub hidden: Vec<HiddenEntry>,
}

impl ExposurePolicy {
    /// Sorts `tools` into direct, deferred and hidden.
    pub fn expose<'a>(&self, tools: impl Iterator<Item = &'a ToolEntry>) -> Exposure {
        let mut tools: Vec<&ToolEntry> = tools.collect();
        tools.sort_by(|a, b| {
            (a.qualified_name.as_str(), a.server.as_str())
                .cmp(&(b.qualified_name.as_str(), b.server.as_str()))
        });
        let mut out = Exposure::default();
        // Admitted tools per server, servers in name order, each server's tools in name order.
        let mut by_server: BTreeMap<&str, Vec<ExposedTool>> = BTreeMap::new();
        for entry in tools {
            match self.admit(entry) {
                Ok(tool) if self.tool_search == ToolSearch::On => out.deferred.push(tool),
                Ok(tool) => by_server.entry(&entry.server).or_default().push(tool),
                Err(reason) => out.hidden.push(hidden(entry, reason)),
            }
        }
        let queues: Vec<Vec<ExposedTool>> = by_server.into_values().collect();
        let servers = queues.len();
        let shown = self.share(&queues);
        for (queue, keep) in queues.into_iter().zip(shown) {
            let mut rest = queue.into_iter();
            out.direct.extend(rest.by_ref().take(keep.count));
            let Some(first_left_out) = rest.next() else {
                continue;
            };
            let reason = self.share_reason(keep, servers, &first_left_out.entry.server);
            out.hidden
                .push(hidden(&first_left_out.entry, reason.clone()));
            out.hidden
                .extend(rest.map(|t| hidden(&t.entry, reason.clone())));
        }
        out.direct
            .sort_by(|a, b| a.entry.qualified_name.cmp(&b.entry.qualified_name));
        out.hidden.sort_by_cached_key(|h| {
            (
                mcp_harness_catalog::qualify(&h.server, &h.raw_name),
                h.server.clone(),
            )
        });
        out
    }

    /// Rule 4: how many tools of each server's queue are shown (each a prefix), sharing the tool
    /// cap and the total schema budget fairly (water-filling): in each round every server still
    /// wanting tools may take up to an equal share of what is left of both, in its name order;
    /// what a server does not use is shared again in the next round. When no server can take a
    /// whole tool within its share any more, what is left goes one tool at a time, round-robin
    /// in server-name order, to servers whose next tool still fits.
    fn share(&self, queues: &[Vec<ExposedTool>]) -> Vec<Share> {
        let mut shares = vec![Share::default(); queues.len()];
        let mut tools_left = self.max_tools.saturating_sub(self.reserved.tools);
        let mut bytes_left = self.total_schema_bytes.saturating_sub(self.reserved.bytes);
        // Each round that takes nothing ends the loop, and each other round takes at least one
        // tool, so this runs at most once per tool (plus one).
        loop {
            let wanting: Vec<usize> = (0..queues.len())
                .filter(|&i| shares[i].count < queues[i].len())
                .collect();
            if wanting.is_empty() || tools_left == 0 {
                break;
            }
            let tool_share = tools_left / wanting.len();
            let byte_share = bytes_left / wanting.len();
            let mut took = false;
            for &i in &wanting {
                let (mut n, mut bytes) = (0usize, 0usize);
                for tool in &queues[i][shares[i].count..] {
                    if n + 1 > tool_share || bytes + tool.schema_bytes > byte_share {
                        break;
                    }
                    n += 1;
                    bytes += tool.schema_bytes;
                }
                shares[i].count += n;
                shares[i].bytes += bytes;
                tools_left -= n;
                bytes_left -= bytes;
                took |= n > 0;
            }
            if !took {
                break;
            }
        }
        // The remainder: round-robin, one tool per server per turn, while any next tool fits.
        let mut took = true;
        while took && tools_left > 0 {
            took = false;
            for (i, queue) in queues.iter().enumerate() {
                let Some(next) = queue.get(shares[i].count) else {
                    continue;
                };
                if tools_left > 0 && next.schema_bytes <= bytes_left {
                    shares[i].count += 1;
                    shares[i].bytes += next.schema_bytes;
                    tools_left -= 1;
                    bytes_left -= next.schema_bytes;
                    took = true;
                }
            }
        }
        for share in &mut shares {
            share.tools_left = tools_left;
        }
        shares
    }

    /// Why a server's tools after the first `share.count` are hidden.
    fn share_reason(&self, share: Share, servers: usize, server: &str) -> String {
        let mut reason = if share.tools_left == 0 {
            self.cap_reached()
        } else {
            self.budget_used_up()
        };
        if servers > 1 {
            reason.push_str(&format!(
                "; shared fairly among {servers} servers, server \"{server}\" shows {} tools ({})",
                share.count,
                size(share.bytes)
            ));
        }
        reason
    }

    /// A budget for loading deferred tools in one step, with the search tool already counted.
    pub fn load_budget(&self) -> LoadBudget {
        // The search tool's definition is fixed: measured once, not at every step's binding
        // (each call of a session that has not listed binds one).
        static SEARCH_BYTES: std::sync::LazyLock<Option<usize>> = std::sync::LazyLock::new(|| {
            definition_bytes(SEARCH_TOOL_NAME, &search_tool_definition())
        });
        let search_bytes = SEARCH_BYTES.unwrap_or(self.total_schema_bytes);
        LoadBudget {
            policy: self.clone(),
            used_bytes: search_bytes,
            loaded: BTreeSet::new(),
        }
    }

    /// Rules 1–3 for one tool: the exposed tool, or why it is hidden.
    fn admit(&self, entry: &ToolEntry) -> Result<ExposedTool, String> {
        let tool = &*entry.tool;
        model_visibility(tool)?;
        let connector = connector_id(tool).map(str::to_string);
        let app = app_resource_uri(tool).map(str::to_string);
        if let Some(owner) = owner_label(connector.as_deref(), app.as_deref()) {
            self.apps.check(&owner, tool.annotations.as_ref())?;
        }
        let schema_bytes = definition_bytes(&entry.qualified_name, tool)
            .ok_or("its definition cannot be serialized")?;
        if schema_bytes > self.per_tool_schema_bytes {
            // The exact count beside a rounded size only (not "306 bytes (306 bytes)").
            let exact = match size(schema_bytes) {
                shown if shown.ends_with(" bytes") => shown,
                shown => format!("{shown} ({schema_bytes} bytes)"),
            };
            return Err(format!(
                "definition is {exact}, over the per-tool schema budget of {} \
                 (`{CONFIG_KEY}.perToolSchemaBytes`)",
                size(self.per_tool_schema_bytes)
            ));
        }
        Ok(ExposedTool {
            entry: entry.clone(),
            schema_bytes,
            connector,
            app,
        })
    }

    /// Why a tool of `bytes` cannot join `tools` tools of `used` bytes (the harness's own
    /// tools not counted in either), if it cannot.
    fn over_budget(&self, used: usize, tools: usize, bytes: usize) -> Option<String> {
        if tools.saturating_add(self.reserved.tools) >= self.max_tools {
            return Some(self.cap_reached());
        }
        let used = used.saturating_add(self.reserved.bytes);
        if used.saturating_add(bytes) > self.total_schema_bytes {
            return Some(self.budget_used_up());
        }
        None
    }

    fn cap_reached(&self) -> String {
        format!(
            "tool cap of {} reached (`{CONFIG_KEY}.maxTools`{})",
            self.max_tools,
            self.counting_own()
        )
    }

    fn budget_used_up(&self) -> String {
        format!(
            "schema budget of {} for all tools is used up (`{CONFIG_KEY}.totalSchemaBytes`{})",
            size(self.total_schema_bytes),
            self.counting_own()
        )
    }

    /// `, counting the harness's own 2 tools` when there are some.
    fn counting_own(&self) -> String {
        match self.reserved.tools {
            0 => String::new(),
            1 => ", counting the harness's own tool".into(),
            n => format!(", counting the harness's own {n} tools"),
        }
    }
}

impl AppPolicy {
    fn check(&self, owner: &str, annotations: Option<&ToolAnnotations>) -> Result<(), String> {
        let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
        let destructive =
            !read_only && annotations.and_then(|a| a.destructive_hint).unwrap_or(true);
        let open_world = annotations.and_then(|a| a.open_world_hint).unwrap_or(true);
        if self.hide_destructive && destructive {
            return Err(format!(
                "may be destructive (destructiveHint true or not given) and belongs to {owner} \
                 (`{CONFIG_KEY}.apps.hideDestructive`)"
            ));
        }
        if self.hide_open_world && open_world {
            return Err(format!(
                "may reach an open world (openWorldHint true or not given) and belongs to \
                 {owner} (`{CONFIG_KEY}.apps.hideOpenWorld`)"
            ));
        }
        Ok(())
    }
}

/// Tracks what one step has loaded on demand (tool search on): the total budget and the tool
/// cap count the search tool and every loaded tool.
#[derive(Debug, Clone)]
pub struct LoadBudget {
    policy: ExposurePolicy,
    used_bytes: usize,
    loaded: BTreeSet<String>,
}

impl LoadBudget {
    /// Counts `tool` as loaded, or says why it does not fit. Loading a tool twice is free.
    pub fn load(&mut self, tool: &ExposedTool) -> Result<(), String> {
        if self.loaded.contains(&tool.entry.qualified_name) {
            return Ok(());
        }
        // The search tool is one of the tools the model sees.
        let tools = self.loaded.len() + 1;
        if let Some(reason) = self
            .policy
            .over_budget(self.used_bytes, tools, tool.schema_bytes)
        {
            return Err(reason);
        }
        self.used_bytes += tool.schema_bytes;
        self.loaded.insert(tool.entry.qualified_name.clone());
        Ok(())
    }

    /// Bytes used so far, the search tool included.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// Qualified names loaded so far.
    pub fn loaded(&self) -> impl Iterator<Item = &str> {
        self.loaded.iter().map(String::as_str)
    }
}

// ---------------------------------------------------------------------------------------------
// `_meta`

fn meta(tool: &Tool) -> Option<&JsonObject> {
    tool.meta.as_ref().map(|m| &m.0)
}

fn ui(tool: &Tool) -> Option<&JsonObject> {
    meta(tool)?.get("ui")?.as_object()
}

/// The connector `tool` belongs to (`_meta.connector_id`), if it names one.
pub fn connector_id(tool: &Tool) -> Option<&str> {
    meta(tool)?
        .get("connector_id")?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The UI resource of the MCP App `tool` belongs to (`_meta.ui.resourceUri`, or the older flat
/// `_meta["ui/resourceUri"]`), if it names one.
pub fn app_resource_uri(tool: &Tool) -> Option<&str> {
    ui(tool)
        .and_then(|ui| ui.get("resourceUri"))
        .or_else(|| meta(tool)?.get("ui/resourceUri"))?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// `Ok` if the model may see `tool` by `_meta.ui.visibility` (absent: `["model", "app"]`, the
/// MCP Apps default; a lone string counts as a one-element list), or why not.
fn model_visibility(tool: &Tool) -> Result<(), String> {
    let Some(visibility) = ui(tool).and_then(|ui| ui.get("visibility")) else {
        return Ok(());
    };
    let audiences: Vec<&str> = match visibility {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => return Err("`_meta.ui.visibility` is not a list of audiences".into()),
    };
    if audiences.contains(&"model") {
        Ok(())
    } else if audiences.contains(&"app") {
        Err("visible to apps only (`_meta.ui.visibility`)".into())
    } else {
        Err("not visible to the model (`_meta.ui.visibility` lacks \"model\")".into())
    }
}

fn owner_label(connector: Option<&str>, app: Option<&str>) -> Option<String> {
    use mcp_harness_catalog::escape_for_display as esc;
    match (connector, app) {
        (Some(c), _) => Some(format!("connector \"{}\"", esc(c, 100))),
        (None, Some(a)) => Some(format!("app \"{}\"", esc(a, 100))),
        (None, None) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Sizes

/// Counts bytes written.
struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ModelView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: &'a JsonObject,
}

/// Bytes of `tool`'s definition as the model sees it under `name`, as compact JSON.
fn definition_bytes(name: &str, tool: &Tool) -> Option<usize> {
    let view = ModelView {
        name,
        description: tool.description.as_deref(),
        input_schema: &tool.input_schema,
    };
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, &view).ok()?;
    Some(counter.0)
}

/// `8 KiB`, `9.5 KiB`, `300 bytes`.
fn size(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else if bytes >= 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    }
}

fn hidden(entry: &ToolEntry, reason: String) -> HiddenEntry {
    HiddenEntry {
        server: entry.server.clone(),
        kind: Kind::Tools,
        raw_name: entry.raw_name.clone(),
        reason,
    }
}

// ---------------------------------------------------------------------------------------------
// Tool search

/// The harness's search tool ([`SEARCH_TOOL_NAME`]): `query` (string, required) and `limit`
/// (integer, default [`DEFAULT_SEARCH_LIMIT`], at most [`MAX_SEARCH_LIMIT`]).
pub fn search_tool_definition() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words to look for in tool names and descriptions, e.g. \"github issue\".",
                "maxLength": MAX_SEARCH_QUERY_CHARS
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_LIMIT,
                "default": DEFAULT_SEARCH_LIMIT,
                "description": "Most tools to return."
            }
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Tool::new(
        SEARCH_TOOL_NAME,
        "Search the tools of the connected MCP servers that are not loaded yet. Returns the best \
         matches (tools whose names match first), which then become available to call.",
        Arc::new(schema),
    )
    .annotate(
        ToolAnnotations::with_title("Search tools")
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// The arguments of a call of the search tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// The words to look for in tool names and descriptions.
    pub query: String,
    /// Clamped to `1..=MAX_SEARCH_LIMIT`.
    pub limit: usize,
}

impl SearchRequest {
    /// Reads the model's arguments; the error is meant for the model.
    pub fn from_args(args: &Map<String, Value>) -> Result<Self, String> {
        let query = match args.get("query") {
            Some(Value::String(q)) => q.clone(),
            Some(_) => return Err("`query` must be a string".into()),
            None => return Err("`query` is required".into()),
        };
        if query.chars().count() > MAX_SEARCH_QUERY_CHARS {
            return Err(format!(
                "`query` is longer than {MAX_SEARCH_QUERY_CHARS} characters: search with a few \
                 words (what the tool does, or part of its name)"
            ));
        }
        let mut distinct = words(&query);
        distinct.sort();
        distinct.dedup();
        if distinct.len() > MAX_SEARCH_QUERY_WORDS {
            return Err(format!(
                "`query` has {} different words, more than {MAX_SEARCH_QUERY_WORDS}: search with \
                 a few words (what the tool does, or part of its name)",
                distinct.len()
            ));
        }
        let limit = match args.get("limit") {
            None | Some(Value::Null) => DEFAULT_SEARCH_LIMIT,
            Some(v) => match v.as_u64() {
                Some(n) => usize::try_from(n).unwrap_or(MAX_SEARCH_LIMIT),
                None => return Err("`limit` must be a positive integer".into()),
            },
        };
        Ok(Self {
            query,
            limit: limit.clamp(1, MAX_SEARCH_LIMIT),
        })
    }
}

/// The deferred tools matching `query`, best first, at most `limit`. The query is split into
/// words (case-insensitive; on anything not a letter or digit and on camelCase); a word matches
/// a word of the tool that starts with it. Tools matching more query words in their qualified
/// name come first; then more words in the description, title or search hint
/// (`_meta.searchHint`, `_meta["<vendor>/searchHint"]`); tools of equal score take turns
/// across servers (server-name order, each server's tools in name order). Tools matching
/// nothing, and every tool for an empty query, are left out.
pub fn search<'a>(deferred: &'a [ExposedTool], query: &str, limit: usize) -> Vec<&'a ExposedTool> {
    let mut query_words = words(query);
    query_words.sort();
    query_words.dedup();
    if query_words.is_empty() || limit == 0 {
        return Vec::new();
    }
    let hits = |haystack: &[String]| {
        query_words
            .iter()
            .filter(|w| haystack.iter().any(|h| h.starts_with(w.as_str())))
            .count()
    };
    let mut scored: Vec<(usize, usize, &ExposedTool)> = deferred
        .iter()
        .filter_map(|t| {
            let name = hits(&words(&t.entry.qualified_name));
            let text = hits(&words(&search_text(&t.entry.tool)));
            (name + text > 0).then_some((name, text, t))
        })
        .collect();
    scored.sort_by(|a, b| {
        (b.0, b.1)
            .cmp(&(a.0, a.1))
            .then_with(|| a.2.entry.qualified_name.cmp(&b.2.entry.qualified_name))
    });
    // Equal scores take turns across servers (each server's in name order), so a server with
    // 200 like-named tools cannot fill every result before another server's first.
    let mut turn: Vec<(usize, usize, usize, &ExposedTool)> = Vec::with_capacity(scored.len());
    let mut seen: std::collections::HashMap<(usize, usize, &str), usize> = Default::default();
    for (name, text, tool) in scored {
        let n = seen
            .entry((name, text, tool.entry.server.as_str()))
            .or_default();
        turn.push((name, text, *n, tool));
        *n += 1;
    }
    turn.sort_by(|a, b| {
        (b.0, b.1)
            .cmp(&(a.0, a.1))
            .then(a.2.cmp(&b.2))
            .then_with(|| {
                (&a.3.entry.server, &a.3.entry.qualified_name)
                    .cmp(&(&b.3.entry.server, &b.3.entry.qualified_name))
            })
    });
    turn.into_iter().take(limit).map(|(.., t)| t).collect()
}

/// Description, titles and search hints of `tool`, joined.
fn search_text(tool: &Tool) -> String {
    let mut parts: Vec<Cow<'_, str>> = Vec::new();
    parts.extend(tool.description.as_deref().map(Cow::Borrowed));
    parts.extend(tool.title.as_deref().map(Cow::Borrowed));
    parts.extend(
        tool.annotations
            .as_ref()
            .and_then(|a| a.title.as_deref())
            .map(Cow::Borrowed),
    );
    if let Some(meta) = meta(tool) {
        for (key, value) in meta {
            if (key == "searchHint" || key.ends_with("/searchHint"))
                && let Some(hint) = value.as_str()
            {
                parts.push(Cow::Borrowed(hint));
            }
        }
    }
    parts.join(" ")
}

/// Lower-case words of `s`: runs of letters and digits, and, where a run is camelCase, also its
/// parts (`GitHub` gives `github`, `git`, `hub`).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in s
        .split(|c: char| !c.is_alphanumeric())
        .filter(|r| !r.is_empty())
    {
        let whole = run.to_lowercase();
        let mut parts = Vec::new();
        let mut part = String::new();
        let mut prev_lower = false;
        for c in run.chars() {
            if c.is_uppercase() && prev_lower {
                parts.push(std::mem::take(&mut part));
            }
            prev_lower = c.is_lowercase() || c.is_numeric();
            part.extend(c.to_lowercase());
        }
        out.push(whole);
        if !parts.is_empty() {
            parts.push(part);
            out.extend(parts);
        }
    }
    out
}

#[cfg(test)]
mod tests;

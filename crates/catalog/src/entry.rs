//! Catalog entries and server states. Every entry keeps its server and its raw definition; the
//! qualified (model-visible) name is computed once, when the entry is built.

use std::sync::Arc;
use std::time::SystemTime;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Skill, Tool};
use serde::Serialize;

use crate::sanitize::{
    MetadataLimits, Rejected, clean_text, escape_for_display, sanitize_prompt, sanitize_resource,
    sanitize_template, sanitize_tool,
};
use crate::skills::{SkillEntry, entries_from_listing};

/// The kinds of catalog entries a server can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Tools (`tools/list`).
    Tools,
    /// Prompts (`prompts/list`).
    Prompts,
    /// Resources (`resources/list`).
    Resources,
    /// Resource templates (`resources/templates/list`).
    ResourceTemplates,
    /// Skills (SEP-2640), served by the server as `skill://` resources.
    Skills,
    /// Commands users can invoke: built from prompts and skills, never listed by a server.
    Commands,
}

impl Kind {
    /// Every kind, in listing order.
    pub const ALL: [Kind; 6] = [
        Kind::Tools,
        Kind::Prompts,
        Kind::Resources,
        Kind::ResourceTemplates,
        Kind::Skills,
        Kind::Commands,
    ];

    /// Name as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources => "resources",
            Kind::ResourceTemplates => "resource templates",
            Kind::Skills => "skills",
            Kind::Commands => "commands",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool as the model sees it, tied to the server and raw name that execute it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEntry {
    /// The configured name of the server that listed it.
    pub server: String,
    /// The model-visible name, `mcp__<server>__<tool>` (sanitised, ≤ 64 chars).
    pub qualified_name: String,
    /// The name sent on the wire in `tools/call`.
    pub raw_name: String,
    /// The definition as the server listed it.
    pub tool: Arc<Tool>,
}

impl ToolEntry {
    /// The entry for `tool` as `server` listed it, its qualified name derived with [`crate::qualify`].
    pub fn new(server: &str, tool: Tool) -> Self {
        Self::named(server, tool, crate::Naming::Qualified)
    }

    /// The entry for `tool` as `server` listed it, its model-visible name made by `naming`.
    pub fn named(server: &str, tool: Tool, naming: crate::Naming) -> Self {
        Self {
            server: server.to_string(),
            qualified_name: naming.public(server, &tool.name),
            raw_name: tool.name.to_string(),
            tool: Arc::new(tool),
        }
    }
}

/// A prompt, offered to users as a command named like a tool.
#[derive(Debug, Clone, Serialize)]
pub struct PromptEntry {
    /// The configured name of the server that listed it.
    pub server: String,
    /// The command name, `mcp__<server>__<prompt>`.
    pub qualified_name: String,
    /// The name sent on the wire in `prompts/get`.
    pub raw_name: String,
    /// The definition as the server listed it.
    pub prompt: Arc<Prompt>,
}

impl PromptEntry {
    /// The entry for `prompt` as `server` listed it.
    pub fn new(server: &str, prompt: Prompt) -> Self {
        Self::named(server, prompt, crate::Naming::Qualified)
    }

    /// The entry for `prompt` as `server` listed it, its command name made by `naming`.
    pub fn named(server: &str, prompt: Prompt, naming: crate::Naming) -> Self {
        Self {
            server: server.to_string(),
            qualified_name: naming.public(server, &prompt.name),
            raw_name: prompt.name.clone(),
            prompt: Arc::new(prompt),
        }
    }
}

/// A resource, with the server that serves it.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceEntry {
    /// The configured name of the server that serves it.
    pub server: String,
    /// The resource as the server listed it (sanitised).
    pub resource: Arc<Resource>,
}

/// A resource template, with the server that serves it.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateEntry {
    /// The configured name of the server that serves it.
    pub server: String,
    /// The template as the server listed it (sanitised).
    pub template: Arc<ResourceTemplate>,
}

/// Where a command comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum CommandSource {
    /// Invoking the command calls `prompts/get` for this raw prompt name.
    Prompt {
        /// The prompt's raw name.
        raw_name: String,
    },
    /// Invoking the command loads this skill (fetched and verified on demand).
    Skill {
        /// The skill's name.
        name: String,
    },
}

/// A command a user can invoke, built from a server's prompts and skills.
#[derive(Debug, Clone, Serialize)]
pub struct CommandEntry {
    /// The configured name of the server the command runs on.
    pub server: String,
    /// `mcp__<server>__<name>`, like tools.
    pub qualified_name: String,
    /// What the command does, cleaned for display.
    pub description: Option<String>,
    /// Argument names, for prompts.
    pub arguments: Vec<String>,
    #[serde(flatten)]
    /// What invoking the command does.
    pub source: CommandSource,
}

/// An entry the model does not see, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HiddenEntry {
    /// The configured name of the server that listed it.
    pub server: String,
    /// What kind of entry it is.
    pub kind: Kind,
    /// The name as listed, escaped for display.
    pub raw_name: String,
    /// Why it is hidden.
    pub reason: String,
}

/// One server's complete catalog, from one listing generation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerCatalog {
    /// Tools, sanitised and qualified.
    pub tools: Vec<ToolEntry>,
    /// Prompts, sanitised and qualified.
    pub prompts: Vec<PromptEntry>,
    /// Resources, sanitised.
    pub resources: Vec<ResourceEntry>,
    /// Resource templates, sanitised.
    pub templates: Vec<TemplateEntry>,
    /// Skills (SEP-2640) as listed; their files are fetched only when a skill is loaded.
    pub skills: Vec<Arc<SkillEntry>>,
    /// Commands derived from `prompts` and skills; rebuilt whenever either changes.
    pub commands: Vec<CommandEntry>,
    /// What was listed but withheld from the model, each with its reason.
    pub hidden: Vec<HiddenEntry>,
    /// What is shown after an adjustment (a description cut, `_meta` dropped, ...), each with
    /// what was changed.
    pub adjusted: Vec<HiddenEntry>,
    /// How the server's names become model-visible names (set before the first listing).
    #[serde(skip)]
    pub naming: crate::Naming,
}

impl ServerCatalog {
    /// Number of entries of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Tools => self.tools.len(),
            Kind::Prompts => self.prompts.len(),
            Kind::Resources => self.resources.len(),
            Kind::ResourceTemplates => self.templates.len(),
            Kind::Skills => self.skills.len(),
            Kind::Commands => self.commands.len(),
        }
    }

    /// The tools of both `self` (before) and `after` under one qualified name whose
    /// definition differs, in name order.
    pub fn changed_tools(&self, after: &ServerCatalog) -> Vec<String> {
        let before: std::collections::HashMap<&str, &Arc<Tool>> = self
            .tools
            .iter()
            .map(|t| (t.qualified_name.as_str(), &t.tool))
            .collect();
        let mut changed: Vec<String> = after
            .tools
            .iter()
            .filter(|t| {
                before
                    .get(t.qualified_name.as_str())
                    .is_some_and(|b| !Arc::ptr_eq(b, &t.tool) && **b != t.tool)
            })
            .map(|t| t.qualified_name.clone())
            .collect();
        changed.sort();
        changed
    }

    /// The identifying names of the entries of `kind` (qualified names for tools and prompts,
    /// URIs for resources, URI templates for templates), sorted.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        let mut names: Vec<String> = match kind {
            Kind::Tools => self
                .tools
                .iter()
                .map(|t| t.qualified_name.clone())
                .collect(),
            Kind::Prompts => self
                .prompts
                .iter()
                .map(|p| p.qualified_name.clone())
                .collect(),
            Kind::Resources => self
                .resources
                .iter()
                .map(|r| r.resource.uri.clone())
                .collect(),
            Kind::ResourceTemplates => self
                .templates
                .iter()
                .map(|t| t.template.uri_template.clone())
                .collect(),
            Kind::Skills => self.skills.iter().map(|s| s.uri.clone()).collect(),
            Kind::Commands => self
                .commands
                .iter()
                .map(|c| c.qualified_name.clone())
                .collect(),
        };
        names.sort();
        names
    }
}

/// Where a server is in its connection lifecycle. Never collapsed into a "connected" boolean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ServerState {
    /// Configured and being connected (spawn, initialize, first listing).
    Pending,
    /// Initialised and listed; its catalog is in the snapshot.
    Connected,
    /// The server requires authorization the harness does not have.
    NeedsAuth {
        /// How the authorization was found missing.
        reason: String,
    },
    /// Connecting failed or the connection was lost; `error` says why.
    Failed {
        /// The error, naming the server.
        error: String,
    },
    /// Disabled in the config (`enabled: false`); never connected.
    Disabled,
    /// Defined by a project config file the user has not trusted (or that changed since it was
    /// trusted); never connected until the user trusts the file. `reason` names the file.
    Untrusted {
        /// The file to trust, and why it is not trusted.
        reason: String,
    },
}

impl ServerState {
    /// Short label for tables.
    pub fn label(&self) -> &'static str {
        match self {
            ServerState::Pending => "pending",
            ServerState::Connected => "connected",
            ServerState::NeedsAuth { .. } => "needs-auth",
            ServerState::Failed { .. } => "failed",
            ServerState::Disabled => "disabled",
            ServerState::Untrusted { .. } => "untrusted",
        }
    }

    /// Whether the server has settled (not pending).
    pub fn is_settled(&self) -> bool {
        !matches!(self, ServerState::Pending)
    }
}

/// What the harness knows about one server's connection.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    /// The configured server name.
    pub name: String,
    /// `stdio`, `http`, `in-process`, ...
    pub transport: String,
    #[serde(flatten)]
    /// Where the connection stands.
    pub state: ServerState,
    /// When the state last changed.
    pub since: SystemTime,
    /// The most recent error, kept after recovery for diagnostics.
    pub last_error: Option<String>,
    /// The protocol version negotiated at initialize.
    pub protocol_version: Option<String>,
    /// The server's name from its `serverInfo`.
    pub server_name: Option<String>,
    /// The server's version from its `serverInfo`.
    pub server_version: Option<String>,
    /// The server's instructions, cleaned and capped.
    pub instructions: Option<String>,
    /// When the next reconnect attempt is due (remote servers after a failure).
    pub next_retry: Option<SystemTime>,
    /// Reconnect attempts made in a row (0 once connected).
    pub attempts: u32,
}

impl ServerStatus {
    /// A status in `state` since now, with no error, retry or attempt yet.
    pub fn new(name: &str, transport: &str, state: ServerState) -> Self {
        Self {
            name: name.to_string(),
            transport: transport.to_string(),
            state,
            since: SystemTime::now(),
            last_error: None,
            protocol_version: None,
            server_name: None,
            server_version: None,
            instructions: None,
            next_retry: None,
            attempts: 0,
        }
    }
}

impl ServerCatalog {
    /// Replaces the server's tools with a new complete listing. Each tool passes through
    /// [`sanitize_tool`] first; one that cannot be made safe is hidden with the reason. If two
    /// tools end up with the same model-visible name (a server listing a name twice, or an
    /// identity-hash collision), the server exposes no tools at all and every listed tool is
    /// recorded as hidden with the reason: half a catalog would let the model call the wrong one.
    pub fn set_tools(&mut self, server: &str, tools: Vec<Tool>, limits: &MetadataLimits) {
        self.hidden.retain(|h| h.kind != Kind::Tools);
        self.adjusted.retain(|h| h.kind != Kind::Tools);
        let admitted = admit(
            server,
            Kind::Tools,
            tools,
            |t| t.name.to_string(),
            |t| sanitize_tool(t, limits),
            &mut self.hidden,
            &mut self.adjusted,
        );
        let entries: Vec<ToolEntry> = admitted
            .into_iter()
            .map(|t| ToolEntry::named(server, t, self.naming))
            .collect();
        match first_conflict(entries.iter().map(|e| (&e.qualified_name, &e.raw_name))) {
            None => self.tools = entries,
            Some(reason) => {
                self.tools = Vec::new();
                self.hidden.extend(entries.into_iter().map(|e| HiddenEntry {
                    server: server.to_string(),
                    kind: Kind::Tools,
                    raw_name: escape_for_display(&e.raw_name, DISPLAY_NAME_CHARS),
                    reason: reason.clone(),
                }));
            }
        }
    }

    /// Replaces the server's prompts; sanitised, and a name conflict hides all of them, as for
    /// tools.
    pub fn set_prompts(&mut self, server: &str, prompts: Vec<Prompt>, limits: &MetadataLimits) {
        self.hidden.retain(|h| h.kind != Kind::Prompts);
        self.adjusted.retain(|h| h.kind != Kind::Prompts);
        let admitted = admit(
            server,
            Kind::Prompts,
            prompts,
            |p| p.name.clone(),
            |p| sanitize_prompt(p, limits),
            &mut self.hidden,
            &mut self.adjusted,
        );
        let entries: Vec<PromptEntry> = admitted
            .into_iter()
            .map(|p| PromptEntry::named(server, p, self.naming))
            .collect();
        match first_conflict(entries.iter().map(|e| (&e.qualified_name, &e.raw_name))) {
            None => self.prompts = entries,
            Some(reason) => {
                self.prompts = Vec::new();
                self.hidden.extend(entries.into_iter().map(|e| HiddenEntry {
                    server: server.to_string(),
                    kind: Kind::Prompts,
                    raw_name: escape_for_display(&e.raw_name, DISPLAY_NAME_CHARS),
                    reason: reason.clone(),
                }));
            }
        }
    }

    /// Rebuilds the commands from the current prompts and skills. Deterministic: the same
    /// inputs always give the same commands, so the newest inputs give the newest commands. A
    /// skill whose command name a prompt already has is left out (prompts come first) and
    /// recorded as hidden.
    pub fn rebuild_commands(&mut self, server: &str) {
        self.hidden.retain(|h| h.kind != Kind::Commands);
        let mut commands: Vec<CommandEntry> = self
            .prompts
            .iter()
            .map(|p| CommandEntry {
                server: server.to_string(),
                qualified_name: p.qualified_name.clone(),
                description: p.prompt.description.clone(),
                arguments: p
                    .prompt
                    .arguments
                    .iter()
                    .flatten()
                    .map(|a| a.name.clone())
                    .collect(),
                source: CommandSource::Prompt {
                    raw_name: p.raw_name.clone(),
                },
            })
            .collect();
        for skill in &self.skills {
            let qualified_name = self.naming.public(server, &skill.name);
            if let Some(taken) = commands.iter().find(|c| c.qualified_name == qualified_name) {
                let by = match &taken.source {
                    CommandSource::Prompt { .. } => "a prompt".to_string(),
                    CommandSource::Skill { .. } => format!(
                        "another skill of the same name (its skills are told apart by URI; this \
                         one is `{}`)",
                        skill.uri
                    ),
                };
                self.hidden.push(HiddenEntry {
                    server: server.to_string(),
                    kind: Kind::Commands,
                    raw_name: skill.name.clone(),
                    reason: format!("{by} already provides the command `{qualified_name}`"),
                });
                continue;
            }
            commands.push(CommandEntry {
                server: server.to_string(),
                qualified_name,
                description: Some(skill.description.clone()),
                arguments: Vec::new(),
                source: CommandSource::Skill {
                    name: skill.name.clone(),
                },
            });
        }
        self.commands = commands;
    }

    /// Replaces the server's skills with a complete `skills/list`: structurally invalid skills
    /// are hidden with the reason; descriptions are cleaned for display (the listed frontmatter
    /// is kept as listed, for verification when a skill is loaded).
    pub fn set_skills(&mut self, server: &str, skills: Vec<Skill>, limits: &MetadataLimits) {
        self.hidden.retain(|h| h.kind != Kind::Skills);
        self.adjusted.retain(|h| h.kind != Kind::Skills);
        let (entries, invalid) = entries_from_listing(server, skills);
        self.hidden.extend(invalid.into_iter().map(|i| HiddenEntry {
            server: server.to_string(),
            kind: Kind::Skills,
            raw_name: escape_for_display(&i.uri, DISPLAY_NAME_CHARS),
            reason: i.reason,
        }));
        self.skills = entries
            .into_iter()
            .map(|mut e| {
                let (clean, changed) = clean_text(&e.description, limits.max_description_chars);
                if changed {
                    self.adjusted.push(HiddenEntry {
                        server: server.to_string(),
                        kind: Kind::Skills,
                        raw_name: e.name.clone(),
                        reason: "description cleaned or cut".into(),
                    });
                }
                e.description = clean;
                Arc::new(e)
            })
            .collect();
    }

    /// Replaces the server's resources (each sanitised; unsafe ones hidden with the reason).
    pub fn set_resources(
        &mut self,
        server: &str,
        resources: Vec<Resource>,
        limits: &MetadataLimits,
    ) {
        self.hidden.retain(|h| h.kind != Kind::Resources);
        self.adjusted.retain(|h| h.kind != Kind::Resources);
        let admitted = admit(
            server,
            Kind::Resources,
            resources,
            |r| r.uri.clone(),
            |r| sanitize_resource(r, limits),
            &mut self.hidden,
            &mut self.adjusted,
        );
        self.resources = admitted
            .into_iter()
            .map(|r| ResourceEntry {
                server: server.to_string(),
                resource: Arc::new(r),
            })
            .collect();
    }

    /// Replaces the server's resource templates (each sanitised; unsafe ones hidden).
    pub fn set_templates(
        &mut self,
        server: &str,
        templates: Vec<ResourceTemplate>,
        limits: &MetadataLimits,
    ) {
        self.hidden.retain(|h| h.kind != Kind::ResourceTemplates);
        self.adjusted.retain(|h| h.kind != Kind::ResourceTemplates);
        let admitted = admit(
            server,
            Kind::ResourceTemplates,
            templates,
            |t| t.uri_template.clone(),
            |t| sanitize_template(t, limits),
            &mut self.hidden,
            &mut self.adjusted,
        );
        self.templates = admitted
            .into_iter()
            .map(|t| TemplateEntry {
                server: server.to_string(),
                template: Arc::new(t),
            })
            .collect();
    }
}

/// Longest raw name shown in a hidden entry (escaped; the raw name itself may be hostile).
const DISPLAY_NAME_CHARS: usize = 200;

/// Runs `sanitize` over `items`: admitted ones are returned, rejected ones recorded in `hidden`.
fn admit<T>(
    server: &str,
    kind: Kind,
    items: Vec<T>,
    name: impl Fn(&T) -> String,
    sanitize: impl Fn(T) -> Result<(T, Vec<String>), Rejected>,
    hidden: &mut Vec<HiddenEntry>,
    adjusted: &mut Vec<HiddenEntry>,
) -> Vec<T> {
    let mut admitted = Vec::with_capacity(items.len());
    for item in items {
        let raw = name(&item);
        match sanitize(item) {
            Ok((clean, notes)) => {
                adjusted.extend(notes.into_iter().map(|note| HiddenEntry {
                    server: server.to_string(),
                    kind,
                    raw_name: escape_for_display(&raw, DISPLAY_NAME_CHARS),
                    reason: note,
                }));
                admitted.push(clean);
            }
            Err(reason) => hidden.push(HiddenEntry {
                server: server.to_string(),
                kind,
                raw_name: escape_for_display(&raw, DISPLAY_NAME_CHARS),
                reason: reason.to_string(),
            }),
        }
    }
    admitted
}

fn first_conflict<'a>(names: impl Iterator<Item = (&'a String, &'a String)>) -> Option<String> {
    let mut seen: std::collections::HashMap<&String, &String> = std::collections::HashMap::new();
    for (qualified, raw) in names {
        if let Some(other) = seen.insert(qualified, raw) {
            return Some(format!(
                "name conflict: `{other}` and `{raw}` both map to `{qualified}`; nothing of this kind is exposed for the server until it lists distinct names"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        Tool::new(
            name.to_string(),
            "d".to_string(),
            Arc::new(serde_json::Map::new()),
        )
    }

    #[test]
    fn duplicate_names_roll_back_to_zero_tools() {
        let mut c = ServerCatalog::default();
        let l = MetadataLimits::default();
        c.set_tools("s", vec![tool("a"), tool("b")], &l);
        assert_eq!(c.tools.len(), 2);
        c.set_tools("s", vec![tool("a"), tool("c"), tool("a")], &l);
        assert!(c.tools.is_empty());
        assert_eq!(c.hidden.len(), 3);
        assert!(c.hidden[0].reason.contains("name conflict"));
        c.set_tools("s", vec![tool("a")], &l);
        assert_eq!(c.tools.len(), 1);
        assert!(
            c.hidden.is_empty(),
            "hidden reasons of an older listing are dropped"
        );
    }

    /// Two skills of one name: the second's command is left out saying it is the other skill
    /// (not "a prompt") and which URI tells it apart.
    #[test]
    fn a_skill_named_like_another_is_left_out_saying_so() {
        use rmcp::model::{Skill, SkillFrontmatter, SkillResources};
        let skill = |uri: &str| {
            let skill = Skill::new(
                uri,
                SkillFrontmatter::new("dup", "D"),
                SkillResources::Dynamic,
            );
            Arc::new(crate::skills::SkillEntry::new("raw", skill).expect("valid"))
        };
        let mut c = ServerCatalog {
            skills: vec![
                skill("skill://a/dup/SKILL.md"),
                skill("skill://b/dup/SKILL.md"),
            ],
            ..Default::default()
        };
        c.rebuild_commands("raw");
        assert_eq!(c.commands.len(), 1);
        let reason = &c.hidden[0].reason;
        assert!(
            reason.contains("another skill") && reason.contains("skill://b/dup/SKILL.md"),
            "{reason}"
        );
    }

    #[test]
    fn changed_tools_are_those_listed_again_with_another_definition() {
        let l = MetadataLimits::default();
        let mut before = ServerCatalog::default();
        before.set_tools("s", vec![tool("a"), tool("b"), tool("gone")], &l);
        let mut after = ServerCatalog::default();
        let b2 = Tool::new("b", "another", Arc::new(serde_json::Map::new()));
        after.set_tools("s", vec![tool("a"), b2, tool("new")], &l);
        assert_eq!(before.changed_tools(&after), ["mcp__s__b"]);
        assert!(before.changed_tools(&before.clone()).is_empty());
    }
}

//! The canonical form every host format is converted to ([`Converted`]), the [`Format`]
//! names, VS Code inputs, and the checks every host's converter shares.
//!
//! Invariant: a `Converted` holds `${VAR}` references unexpanded; only
//! [`Converted::to_config`] expands them, through [`Config::parse`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use super::policy::Policy;
use super::remote::RemoteSource;
use crate::config::{Config, ConfigError};

/// Shared with every converter: whether a name can be a `${VAR}` reference.
pub(super) use crate::config::is_var_name;

/// Which host's config file a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    /// Our own format (`.mcp-harness.json`, the user `config.json`): `mcpServers` plus
    /// `metadataLimits`, `exposure`, `permissions`, `output`, and (user config only)
    /// `allowedServers` / `deniedServers`.
    Harness,
    /// Claude Code: `.mcp.json` (our format plus `headersHelper`, ignored, and `oauth` with
    /// `callbackPort` and `authServerMetadataUrl`, ignored, and `scopes` as one string),
    /// or `~/.claude.json` (only `mcpServers` is read).
    ClaudeCode,
    /// Claude Desktop's `claude_desktop_config.json`: only `mcpServers` is read.
    ClaudeDesktop,
    /// Cursor's `.cursor/mcp.json`: `mcpServers` with `${env:VAR}`-style variables.
    Cursor,
    /// VS Code's `.vscode/mcp.json` (`servers`, `inputs`), or `settings.json` with `mcp`.
    VsCode,
    /// Codex's `config.toml`: `[mcp_servers.NAME]` tables.
    Codex,
    /// Gemini CLI's `.gemini/settings.json`: `mcpServers` with `httpUrl`, `timeout`, `trust`.
    Gemini,
}

impl Format {
    /// Every format, for messages and tests.
    pub const ALL: [Format; 7] = [
        Format::Harness,
        Format::ClaudeCode,
        Format::ClaudeDesktop,
        Format::Cursor,
        Format::VsCode,
        Format::Codex,
        Format::Gemini,
    ];

    /// The host's name, for people.
    pub fn name(self) -> &'static str {
        match self {
            Format::Harness => "mcp-harness",
            Format::ClaudeCode => "Claude Code",
            Format::ClaudeDesktop => "Claude Desktop",
            Format::Cursor => "Cursor",
            Format::VsCode => "VS Code",
            Format::Codex => "Codex",
            Format::Gemini => "Gemini CLI",
        }
    }

    /// A stable identifier, for JSON output.
    pub fn id(self) -> &'static str {
        match self {
            Format::Harness => "harness",
            Format::ClaudeCode => "claude-code",
            Format::ClaudeDesktop => "claude-desktop",
            Format::Cursor => "cursor",
            Format::VsCode => "vscode",
            Format::Codex => "codex",
            Format::Gemini => "gemini",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One file in the canonical form: our own `mcpServers` JSON, `${VAR}` references unexpanded.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The host format the file was read as.
    pub format: Format,
    /// `{"mcpServers": {...}, ...}` — what `config import` prints. [`super::import`] adds
    /// the keys held apart below (`policy`, `remote`, `trust_project_permissions`); until
    /// then this document does not carry them.
    pub document: Value,
    /// What was ignored, and which environment variables VS Code inputs need (names only).
    pub notes: Vec<String>,
    /// `allowedServers` / `deniedServers`, when the file (our format only) has them.
    pub policy: Option<Policy>,
    /// `remoteSources`, when the file (our format only) has them.
    pub remote: Option<Vec<RemoteSource>>,
    /// `trustProjectPermissions`, when the file (our format only) has it.
    pub trust_project_permissions: Option<bool>,
    /// VS Code inputs each server uses: (input id, its description, the variable it is read from).
    pub(super) inputs: BTreeMap<String, Vec<InputRef>>,
    /// Per server: a hint appended to a validation error (e.g. which host key became `type`).
    pub(super) hints: BTreeMap<String, String>,
}

/// A VS Code `${input:ID}` reference, read from the environment variable `MCP_INPUT_<ID>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InputRef {
    pub(super) id: String,
    pub(super) description: Option<String>,
    pub(super) password: bool,
    pub(super) variable: String,
}

/// A VS Code input that has no value in the environment, for an [`InputPrompt`] to ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRequest {
    /// The server whose config uses it.
    pub server: String,
    /// The input's `id`.
    pub id: String,
    /// The input's `description` (from the config file: show it, don't obey it).
    pub description: Option<String>,
    /// `password: true`: do not echo the answer.
    pub password: bool,
    /// The environment variable it would have been read from (`MCP_INPUT_<ID>`).
    pub variable: String,
}

/// Asks a person for a VS Code input's value (`None`: no answer — the config then fails as if
/// no one had been asked). The answer is used only to expand the config; it is never logged.
pub type InputPrompt = std::sync::Arc<dyn Fn(&InputRequest) -> Option<String> + Send + Sync>;

/// `prompt`, asked at most once per input variable: later requests get the first answer (kept
/// in memory only).
pub fn remembering(prompt: InputPrompt) -> InputPrompt {
    let answers: std::sync::Mutex<BTreeMap<String, Option<String>>> = Default::default();
    std::sync::Arc::new(move |request: &InputRequest| {
        let mut answers = answers.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .entry(request.variable.clone())
            .or_insert_with(|| prompt(request))
            .clone()
    })
}

impl Converted {
    pub(super) fn new(format: Format) -> Self {
        Self {
            format,
            document: Value::Object(Map::new()),
            notes: Vec::new(),
            policy: None,
            remote: None,
            trust_project_permissions: None,
            inputs: BTreeMap::new(),
            hints: BTreeMap::new(),
        }
    }

    /// The canonical servers, by name.
    pub fn servers(&self) -> Option<&Map<String, Value>> {
        self.document.get("mcpServers").and_then(Value::as_object)
    }

    /// Validates the canonical form and expands `${VAR}` through `lookup`: the [`Config`] this
    /// file describes. `allowedServers` / `deniedServers` are not applied here.
    pub fn to_config(
        &self,
        path: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        self.to_config_asking(path, lookup, None)
    }

    /// [`Converted::to_config`], asking `prompt` for VS Code inputs the environment has no
    /// value for.
    pub fn to_config_asking(
        &self,
        path: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
        prompt: Option<&InputPrompt>,
    ) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let mut answers: BTreeMap<String, String> = BTreeMap::new();
        // An input nobody answered makes its server unusable (failed, saying which input), not
        // the whole file: its `${MCP_INPUT_…}` is an unset variable below.
        let mut unanswered: BTreeMap<&str, String> = BTreeMap::new();
        for (server, inputs) in &self.inputs {
            for input in inputs {
                if lookup(&input.variable).is_some() || answers.contains_key(&input.variable) {
                    continue;
                }
                let asked = prompt.and_then(|ask| {
                    ask(&InputRequest {
                        server: server.clone(),
                        id: input.id.clone(),
                        description: input.description.clone(),
                        password: input.password,
                        variable: input.variable.clone(),
                    })
                });
                if let Some(value) = asked {
                    answers.insert(input.variable.clone(), value);
                } else if !unanswered.contains_key(server.as_str()) {
                    let about = input
                        .description
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    unanswered.insert(
                        server,
                        format!(
                            "{file}: server \"{server}\": VS Code input \"{}\"{about} has no \
                             value: set the environment variable {} (in a terminal, mcp-harness \
                             asks for it)",
                            input.id, input.variable
                        ),
                    );
                }
            }
        }
        let text =
            serde_json::to_string(&self.document).map_err(|e| error(path, &e.to_string()))?;
        let lookup = |name: &str| answers.get(name).cloned().or_else(|| lookup(name));
        let mut config = Config::parse(&text, path, &lookup).map_err(|mut e| {
            // Positions would point into the canonical text, not the user's file.
            if let Some(at) = e.message.rfind(" at line ") {
                e.message.truncate(at);
            }
            for (server, hint) in &self.hints {
                if e.location == format!("{file}: server \"{server}\"") {
                    e.message = format!("{} ({hint})", e.message);
                }
            }
            e
        })?;
        for (server, why) in unanswered {
            if let Some(config) = config.servers.get_mut(server)
                && config.unusable.is_some()
            {
                config.unusable = Some(why);
            }
        }
        Ok(config)
    }
}

pub(super) fn error(path: &Path, message: &str) -> ConfigError {
    ConfigError {
        location: path.display().to_string(),
        message: message.to_string(),
    }
}

/// An error about one server of `file`.
pub(super) fn server_error(file: &str, server: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        location: format!("{file}: server \"{server}\""),
        message: message.into(),
    }
}

/// A host's `"disabled": true|false` (Cursor, Cline, Roo) as our `enabled`; a `disabled` of
/// another type is left for the config's own check to name.
pub(super) fn disabled_as_enabled(server: &mut Map<String, Value>) {
    if let Some(Value::Bool(disabled)) = server.get("disabled").cloned() {
        server.remove("disabled");
        if disabled {
            server.insert("enabled".into(), Value::Bool(false));
        }
    }
}

/// Checks the keys of one server object: `known` are used, `ignored` are the host's own and
/// dropped with a note. Anything else is an error naming file, server and key.
pub(super) fn check_keys(
    file: &str,
    server: &str,
    host: Format,
    object: &mut Map<String, Value>,
    known: &[&str],
    ignored: &[(&str, &str)],
    notes: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let keys: Vec<String> = object.keys().cloned().collect();
    for key in keys {
        if known.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, why)) = ignored.iter().find(|(k, _)| *k == key) {
            object.remove(&key);
            notes.push(format!("server \"{server}\": `{key}` ignored ({why})"));
            continue;
        }
        let mut all: Vec<&str> = known.to_vec();
        all.extend(ignored.iter().map(|(k, _)| *k));
        return Err(server_error(
            file,
            server,
            format!(
                "unknown key `{key}`; {} servers take: {}",
                host.name(),
                all.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Server objects by name, in file order.
type ServerObjects = Vec<(String, Map<String, Value>)>;

/// The server objects under `key` of `root`, each checked to be an object.
pub(super) fn server_objects(
    file: &str,
    key: &str,
    value: Option<Value>,
) -> Result<ServerObjects, ConfigError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Object(servers)) => servers
            .into_iter()
            .map(|(name, v)| match v {
                Value::Object(o) if !name.trim().is_empty() => Ok((name, o)),
                Value::Object(_) => {
                    Err(server_error(file, &name, "server names must not be empty"))
                }
                _ => Err(server_error(file, &name, "a server must be an object")),
            })
            .collect(),
        Some(_) => Err(ConfigError {
            location: format!("{file}: {key}"),
            message: "must be an object of servers by name".into(),
        }),
    }
}

/// Applies `f` to every string inside `value` (object values, array items), in place.
pub(super) fn map_strings(
    value: &mut Value,
    f: &mut dyn FnMut(&str) -> Result<String, String>,
) -> Result<(), String> {
    match value {
        Value::String(s) => {
            *s = f(s)?;
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(|v| map_strings(v, f)),
        Value::Object(map) => map.values_mut().try_for_each(|v| map_strings(v, f)),
        _ => Ok(()),
    }
}

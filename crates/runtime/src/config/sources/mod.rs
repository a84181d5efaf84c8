//! Config sources: the MCP config files users already have (Claude Code, Claude Desktop, Cursor,
//! VS Code, Codex, Gemini CLI, and our own), and the merge of user, project and dynamic sources
//! (R1, see [`Sources`]).
//!
//! Invariants:
//! - every format is first converted to our own `mcpServers` JSON — the *canonical form*, in which
//!   environment references stay `${VAR}` and are never expanded — and only then validated and
//!   expanded by [`Config::parse`], so a server from any host obeys exactly the rules of one
//!   written in our format, and `config import` (which prints the canonical form) can never write
//!   a value that came from the environment;
//! - a key a host documents but the harness does not use is dropped with a note naming it; any
//!   other key is an error naming the file, the server and the key;
//! - no error or note of this module contains a value read from the environment (they name
//!   keys, servers, inputs and variables), and none quotes a header, env or token value from
//!   the file either.

mod claude;
mod codex;
mod cursor;
mod gemini;
mod merge;
pub(crate) mod remote;
pub(crate) mod trust;
mod vscode;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::config::{Config, ConfigError};

pub use merge::{Merged, Origin, Policy, Scope, Sources, user_config_path};
pub use remote::RemoteSource;
pub use trust::{TrustError, TrustRecord, TrustState, TrustStore, UntrustedFile};

/// Which host's config file a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    /// Our own format (`.mcp-harness.json`, the user `config.json`): `mcpServers` plus
    /// `metadataLimits`, `exposure`, `permissions`, `output`, and (user config only)
    /// `allowedServers` / `deniedServers`.
    Harness,
    /// Claude Code: `.mcp.json` (our format plus `headersHelper` and `oauth`, which are ignored),
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

    /// Detects the format of `path` from its name, its folder and, failing those, its shape.
    /// `document` is the parsed file (for a `.toml` file it is not looked at).
    pub fn detect(path: &Path, document: &Value) -> Result<Format, ConfigError> {
        let name = file_name(path);
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if name.ends_with(".toml") {
            return Ok(Format::Codex);
        }
        let by_name = match (name.as_str(), parent) {
            ("claude_desktop_config.json", _) => Some(Format::ClaudeDesktop),
            (".mcp-harness.json", _) | ("config.json", "mcp-harness") => Some(Format::Harness),
            ("mcp.json", ".cursor") => Some(Format::Cursor),
            ("mcp.json", ".vscode") => Some(Format::VsCode),
            ("settings.json", ".gemini") => Some(Format::Gemini),
            (".mcp.json" | ".claude.json", _) => Some(Format::ClaudeCode),
            _ => None,
        };
        if let Some(format) = by_name {
            return Ok(format);
        }
        let Some(root) = document.as_object() else {
            return Err(error(path, "a config file must be a JSON object"));
        };
        let servers = root.get("mcpServers").and_then(Value::as_object);
        let server_has = |keys: &[&str]| {
            servers.is_some_and(|s| {
                s.values()
                    .filter_map(Value::as_object)
                    .any(|o| keys.iter().any(|k| o.contains_key(*k)))
            })
        };
        if root.contains_key("servers") && !root.contains_key("mcpServers")
            || name == "settings.json"
                && root.get("mcp").is_some_and(|m| m.get("servers").is_some())
        {
            Ok(Format::VsCode)
        } else if name == "settings.json" && servers.is_some() || server_has(gemini::ONLY_KEYS) {
            Ok(Format::Gemini)
        } else if server_has(claude::IGNORED_KEYS) {
            Ok(Format::ClaudeCode)
        } else if servers.is_some()
            || root
                .keys()
                .all(|k| claude::HARNESS_SECTIONS.contains(&k.as_str()))
        {
            Ok(Format::Harness)
        } else {
            Err(error(
                path,
                "cannot tell which host this config is for: expected `mcpServers` (Claude Code, \
                 Claude Desktop, Cursor, Gemini CLI, mcp-harness), `servers` (VS Code), or a \
                 `.toml` file with `[mcp_servers.NAME]` (Codex)",
            ))
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
    /// `{"mcpServers": {...}, ...}` — what `config import` prints (which also carries the
    /// `policy` keys; this document does not until then).
    pub document: Value,
    /// What was ignored, and which environment variables VS Code inputs need (names only).
    pub notes: Vec<String>,
    /// `allowedServers` / `deniedServers`, when the file (our format only) has them.
    pub policy: Option<Policy>,
    /// `remoteSources`, when the file (our format only) has them.
    pub remote: Option<Vec<remote::RemoteSource>>,
    /// `trustProjectPermissions`, when the file (our format only) has it.
    pub trust_project_permissions: Option<bool>,
    /// VS Code inputs each server uses: (input id, its description, the variable it is read from).
    inputs: BTreeMap<String, Vec<InputRef>>,
    /// Per server: a hint appended to a validation error (e.g. which host key became `type`).
    hints: BTreeMap<String, String>,
}

/// A VS Code `${input:ID}` reference, read from the environment variable `MCP_INPUT_<ID>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InputRef {
    id: String,
    description: Option<String>,
    password: bool,
    variable: String,
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
    fn new(format: Format) -> Self {
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
                } else {
                    let about = input
                        .description
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default();
                    return Err(ConfigError {
                        location: format!("{file}: server \"{server}\""),
                        message: format!(
                            "VS Code input \"{}\"{about} has no value: set the environment \
                             variable {} (in a terminal, mcp-harness asks for it)",
                            input.id, input.variable
                        ),
                    });
                }
            }
        }
        let text =
            serde_json::to_string(&self.document).map_err(|e| error(path, &e.to_string()))?;
        let lookup = |name: &str| answers.get(name).cloned().or_else(|| lookup(name));
        Config::parse(&text, path, &lookup).map_err(|mut e| {
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
        })
    }
}

/// Reads `path` in any supported format and returns its servers, expanding `${VAR}` from the
/// process environment. The CLI's `--config PATH` uses this: only this file is read. Its
/// `allowedServers` / `deniedServers`, if any, are applied.
pub fn load_any(path: &Path) -> Result<(Config, Format), ConfigError> {
    load_any_with(path, &|name| std::env::var(name).ok())
}

/// [`load_any`] with `lookup` resolving `${VAR}` (and VS Code inputs).
pub fn load_any_with(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Format), ConfigError> {
    let text = read(path)?;
    parse_any(&text, path, lookup)
}

/// Parses config text of any supported format; `path` names the file in messages and decides
/// the format together with the text's shape.
pub fn parse_any(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Format), ConfigError> {
    let (config, converted) = parse_noted(text, path, lookup, None)?;
    for note in &converted.notes {
        tracing::info!(file = %path.display(), "{note}");
    }
    Ok((config, converted.format))
}

/// [`load_any_with`], asking `prompt` for VS Code inputs the environment has no value for.
pub fn load_any_asking(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    prompt: &InputPrompt,
) -> Result<(Config, Format), ConfigError> {
    let text = read(path)?;
    let (config, converted) = parse_noted(&text, path, lookup, Some(prompt))?;
    for note in &converted.notes {
        tracing::info!(file = %path.display(), "{note}");
    }
    Ok((config, converted.format))
}

/// [`load_any_with`], also returning the canonical form, whose notes then include the servers
/// the file's own `allowedServers` / `deniedServers` refused.
pub fn load_noted(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Converted), ConfigError> {
    let text = read(path)?;
    parse_noted(&text, path, lookup, None)
}

fn parse_noted(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    prompt: Option<&InputPrompt>,
) -> Result<(Config, Converted), ConfigError> {
    let mut converted = convert(text, path)?;
    let mut config = converted.to_config_asking(path, lookup, prompt)?;
    if let Some(policy) = converted.policy.clone() {
        config.servers.retain(|name, _| match policy.refusal(name) {
            Some(reason) => {
                converted
                    .notes
                    .push(format!("server \"{name}\": not loaded: {reason}"));
                false
            }
            None => true,
        });
    }
    Ok((config, converted))
}

/// Reads `path` and converts it to the canonical form without expanding anything: what
/// `mcp-harness config import` prints. The result is checked as a config would be (keys, types,
/// transports), with every `${VAR}` standing for a placeholder.
pub fn import(path: &Path) -> Result<Converted, ConfigError> {
    let text = read(path)?;
    import_text(&text, path)
}

/// [`import`] of text already read.
pub fn import_text(text: &str, path: &Path) -> Result<Converted, ConfigError> {
    let mut converted = convert(text, path)?;
    converted.to_config(path, &|_| Some("placeholder".to_string()))?;
    if let (Some(policy), Value::Object(doc)) = (&converted.policy, &mut converted.document) {
        doc.extend(policy.to_json());
    }
    if let (Some(on), Value::Object(doc)) =
        (converted.trust_project_permissions, &mut converted.document)
    {
        doc.insert("trustProjectPermissions".into(), on.into());
    }
    Ok(converted)
}

/// Detects the format of `text` and converts it to the canonical form.
pub fn convert(text: &str, path: &Path) -> Result<Converted, ConfigError> {
    let file = path.display().to_string();
    if file_name(path).ends_with(".toml") {
        let document: Value = toml::from_str(text).map_err(|e| {
            // The message only: toml's rendering quotes the offending line, which may hold a
            // secret written in the file.
            let line = e
                .span()
                .and_then(|s| text.get(..s.start))
                .map(|before| before.matches('\n').count() + 1)
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            error(
                path,
                &format!("not valid TOML: {}{line}", e.message().trim()),
            )
        })?;
        return codex::convert(&file, document);
    }
    let document: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| error(path, &format!("not valid JSON: {e}")))?;
    let format = Format::detect(path, &document)?;
    let Value::Object(root) = document else {
        return Err(error(path, "a config file must be a JSON object"));
    };
    match format {
        Format::Harness | Format::ClaudeCode | Format::ClaudeDesktop => {
            let host_settings =
                format == Format::ClaudeDesktop || file_name(path) == ".claude.json";
            claude::convert(format, &file, root, host_settings)
        }
        Format::Cursor => cursor::convert(&file, root, &project_root(path)),
        Format::VsCode => {
            let root = if file_name(path) == "settings.json" {
                match root.get("mcp") {
                    Some(Value::Object(mcp)) => mcp.clone(),
                    _ => return Err(error(path, "VS Code settings have no `mcp` object")),
                }
            } else {
                root
            };
            vscode::convert(&file, root, &project_root(path))
        }
        Format::Gemini => gemini::convert(&file, root),
        Format::Codex => codex::convert(&file, Value::Object(root)),
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| error(path, &format!("cannot read the config file: {e}")))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The folder an editor would open for `path`: the parent of `.vscode` / `.cursor`, else the
/// file's own folder.
fn project_root(path: &Path) -> String {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = match dir.file_name().and_then(|n| n.to_str()) {
        Some(".vscode" | ".cursor") => dir.parent().unwrap_or(dir),
        _ => dir,
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

fn error(path: &Path, message: &str) -> ConfigError {
    ConfigError {
        location: path.display().to_string(),
        message: message.to_string(),
    }
}

/// An error about one server of `file`.
fn server_error(file: &str, server: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        location: format!("{file}: server \"{server}\""),
        message: message.into(),
    }
}

/// Removes `//` and `/* */` comments and trailing commas outside strings (VS Code, Cursor and
/// Gemini CLI accept JSON with comments). Line breaks are kept, so error positions still match.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            (']' | '}', _) => {
                let trimmed = out.trim_end().len();
                if out[..trimmed].ends_with(',') {
                    out.remove(trimmed - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Checks the keys of one server object: `known` are used, `ignored` are the host's own and
/// dropped with a note. Anything else is an error naming file, server and key.
fn check_keys(
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
fn server_objects(
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
fn map_strings(
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

/// Whether `name` can be an environment variable in a `${VAR}` reference.
fn is_var_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

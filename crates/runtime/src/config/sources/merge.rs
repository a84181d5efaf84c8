//! Merging config sources (R1): user, project and dynamic servers, in one documented order.
//!
//! Precedence, lowest first — a later source replaces a same-named server wholesale:
//! 0. remote sources listed in the user config's `remoteSources`, once fetched
//!    ([`Sources::fetch_remote`]; see [`super::remote`]), in list order;
//! 0. plugins: each folder of `plugins/` beside the user config (e.g.
//!    `~/.config/mcp-harness/plugins/NAME/`) may hold a `.mcp.json` (Claude Code's plugin
//!    layout), in folder-name order; in it `${PLUGIN_ROOT}` (or `${CLAUDE_PLUGIN_ROOT}`) is the
//!    plugin's folder;
//! 1. user: `$XDG_CONFIG_HOME/mcp-harness/config.json` (default `~/.config/mcp-harness/config.json`);
//! 2. project `./.mcp.json` (Claude Code's file);
//! 3. project `./.mcp-harness.json`;
//! 4. dynamic servers added at run time ([`Sources::add_dynamic`]).
//!
//! Then, in this order: the policy (`allowedServers` / `deniedServers` globs in the user config;
//! deny wins) removes servers; servers with the same content (same command, args, env and cwd,
//! or the same URL and headers, a trailing `/` aside) are de-duplicated, the higher-precedence one kept; disabled servers stay in the
//! result, marked disabled, and take no part in de-duplication (they are never connected).
//!
//! Invariant: every server that a source defines is either in [`Merged::config`] with its
//! [`Origin`], or in [`Merged::dropped`] with the reason — never silently lost — and reasons name
//! servers and files, never values.
//!
//! Sections: `metadataLimits`, `exposure`, `output` and `gateway` (user config only) come whole from the highest-precedence
//! file that has them; `permissions` lists (`allow`, `ask`, `deny`) are concatenated over all
//! files (a deny anywhere holds), and `trustReadOnlyHint` is on if any file turns it on.
//!
//! Project files (2, 3) come with the folder, not from the user (see [`super::trust`]): a project
//! file the user has not trusted with its current content adds its servers only as `untrusted`
//! (disabled, with the reason, listed in [`Merged::untrusted`]) and nothing else — a server of
//! it named like one of an earlier source does not replace that one; a trusted one
//! adds its sections, except the permission relaxations (`permissions.allow`,
//! `trustReadOnlyHint`), which count only when the user config sets
//! `trustProjectPermissions: true` (otherwise they are dropped with a note).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::converted::{Converted, Format, InputPrompt};
use super::remote::RemoteSource;
use super::trust::{ProjectTrust, TrustState, TrustStore, UntrustedFile};
use crate::config::{Config, ConfigError, DedupKey, ServerConfig};

/// Where a server's definition came from, lowest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// A remote source of the user config (`remoteSources`).
    Remote,
    /// A plugin folder's `.mcp.json`.
    Plugin,
    /// The user config.
    User,
    /// The project's `.mcp.json`.
    ProjectMcpJson,
    /// The project's `.mcp-harness.json`.
    ProjectHarnessJson,
    /// Added at run time.
    Dynamic,
    /// The one file given with `--config` (nothing else is read).
    Explicit,
}

impl Scope {
    /// Short name shown to users.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Remote => "remote",
            Scope::Plugin => "plugin",
            Scope::User => "user",
            Scope::ProjectMcpJson | Scope::ProjectHarnessJson => "project",
            Scope::Dynamic => "dynamic",
            Scope::Explicit => "--config",
        }
    }
}

/// The source of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file; `None` for a dynamic or remote server.
    pub path: Option<PathBuf>,
    /// For a remote server: `remoteSources[i] (URL without query)`.
    pub url: Option<String>,
    /// The file's format (a dynamic server counts as ours).
    pub format: Format,
    /// Which source it came from (precedence).
    pub scope: Scope,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.path, &self.url) {
            (Some(p), _) => write!(f, "{}", p.display()),
            (None, Some(url)) => f.write_str(url),
            (None, None) => f.write_str("(dynamic)"),
        }
    }
}

/// The merged configuration.
#[derive(Debug, Clone)]
pub struct Merged {
    /// Every server kept, enabled or not; the sections merged as the module doc says.
    pub config: Config,
    /// Where each server in `config` came from.
    pub origins: BTreeMap<String, Origin>,
    /// Definitions not in `config`, with why: replaced by a same-named one, refused by policy,
    /// or a duplicate of another server.
    pub dropped: Vec<(String, String)>,
    /// The files read, lowest precedence first.
    pub files: Vec<Origin>,
    /// Notes from the files (ignored host keys, inputs read from the environment), each
    /// prefixed with its file.
    pub notes: Vec<String>,
    /// The user config's `remoteSources` (fetched or not).
    pub remote: Vec<RemoteSource>,
    /// Project files whose servers are held back until the user trusts them.
    pub untrusted: Vec<UntrustedFile>,
}

impl Merged {
    /// The servers to connect: enabled ones.
    pub fn enabled(&self) -> impl Iterator<Item = &ServerConfig> {
        self.config.servers.values().filter(|s| s.enabled)
    }

    /// The servers split off before any connection: disabled ones.
    pub fn disabled(&self) -> impl Iterator<Item = &ServerConfig> {
        self.config.servers.values().filter(|s| !s.enabled)
    }
}

/// The user config: `$XDG_CONFIG_HOME/mcp-harness/config.json`, else
/// `$HOME/.config/mcp-harness/config.json` (`XDG_CONFIG_HOME` counts only when absolute).
pub fn user_config_path(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let base = lookup("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            lookup("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(&h).join(".config"))
        })?;
    Some(base.join("mcp-harness").join("config.json"))
}

type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The config sources of one harness: user file, project folder and dynamic servers.
/// [`Sources::merge`] reads the files again on every call.
#[derive(Clone)]
pub struct Sources {
    /// `None`: the default location, found through `lookup`; `Some(None)`: no user config.
    user: Option<Option<PathBuf>>,
    /// `None`: `plugins/` beside the user config; `Some(None)`: no plugins.
    plugins: Option<Option<PathBuf>>,
    project: Option<PathBuf>,
    dynamic: Vec<ServerConfig>,
    lookup: Lookup,
    /// Expands remote sources' header values; `None`: `lookup`.
    header_lookup: Option<Lookup>,
    /// What the remote sources fetched so far answered, by [`RemoteSource::fetch_key`]
    /// (shared by clones, so a reload sees them); parsed at each merge under the entry's rules.
    fetched: Arc<Mutex<BTreeMap<String, String>>>,
    /// Asks for VS Code inputs the environment lacks; each answer is asked once per process.
    prompt: Option<InputPrompt>,
    /// Which project files are trusted.
    trust: ProjectTrust,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("user", &self.user)
            .field("project", &self.project)
            .field("dynamic", &self.dynamic.len())
            .finish_non_exhaustive()
    }
}

impl Default for Sources {
    fn default() -> Self {
        Self::new()
    }
}

impl Sources {
    /// The default sources: the user config, the current directory as the project, the process
    /// environment for `${VAR}`.
    pub fn new() -> Self {
        Self {
            user: None,
            plugins: None,
            project: std::env::current_dir().ok(),
            dynamic: Vec::new(),
            lookup: Arc::new(|name| std::env::var(name).ok()),
            header_lookup: None,
            fetched: Arc::default(),
            prompt: None,
            trust: ProjectTrust::Default,
        }
    }

    /// Keeps trust decisions about project files in `store` (`None`: no store, so no project
    /// file is trusted) instead of `trusted-projects.json` beside the user config.
    pub fn with_trust_store(mut self, store: Option<TrustStore>) -> Self {
        self.trust = ProjectTrust::Store(store);
        self
    }

    /// Opts out of project trust: project files are trusted like the user's own — their servers
    /// start and their permission sections count without asking. Only for an embedder that
    /// vetted the project folder itself.
    pub fn trust_project_files(mut self) -> Self {
        self.trust = ProjectTrust::All;
        self
    }

    /// The store trust decisions are kept in, if any.
    pub fn trust_store(&self) -> Option<TrustStore> {
        match &self.trust {
            ProjectTrust::Default => self.user_file().as_deref().and_then(TrustStore::beside),
            ProjectTrust::Store(store) => store.clone(),
            ProjectTrust::All => None,
        }
    }

    /// Whether `path` (a project file holding `bytes`) may add its servers and sections:
    /// `None` when it may, else the file held back.
    fn untrusted(&self, path: &Path, bytes: &[u8]) -> Option<UntrustedFile> {
        if self.trust == ProjectTrust::All {
            return None;
        }
        let held = |state, error| UntrustedFile {
            path: path.to_path_buf(),
            state,
            servers: Vec::new(),
            error,
        };
        let Some(store) = self.trust_store() else {
            return Some(held(TrustState::Unknown, None));
        };
        match store.state(path, bytes) {
            Ok(TrustState::Trusted) => None,
            Ok(state) => Some(held(state, None)),
            Err(e) => Some(held(TrustState::Unknown, Some(e.to_string()))),
        }
    }

    /// Reads the user config from `path` (`None`: no user config) instead of the default.
    pub fn with_user_file(mut self, path: Option<PathBuf>) -> Self {
        self.user = Some(path);
        self
    }

    /// Asks `prompt` for a VS Code input (`${input:ID}`) the environment has no value for,
    /// instead of failing; an answer is remembered (in memory only) for later merges.
    pub fn with_input_prompt(mut self, prompt: InputPrompt) -> Self {
        self.prompt = Some(super::remembering(prompt));
        self
    }

    /// Reads plugins from the folders in `dir` (`None`: no plugins) instead of `plugins/`
    /// beside the user config.
    pub fn with_plugins_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.plugins = Some(dir);
        self
    }

    /// The folder whose subfolders are plugins, if any.
    pub fn plugins_dir(&self) -> Option<PathBuf> {
        match &self.plugins {
            Some(dir) => dir.clone(),
            None => self.user_file()?.parent().map(|p| p.join("plugins")),
        }
    }

    fn user_file(&self) -> Option<PathBuf> {
        match &self.user {
            Some(p) => p.clone(),
            None => user_config_path(&*self.lookup),
        }
    }

    /// Reads the project files from `dir` (`None`: no project files).
    pub fn with_project_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.project = dir;
        self
    }

    /// Resolves `${VAR}`, VS Code inputs and the default user config location through `lookup`
    /// instead of the process environment.
    pub fn with_env(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.lookup = Arc::new(lookup);
        self
    }

    /// Expands the header values of remote sources through `lookup` when fetching them
    /// (default: the lookup of [`Sources::with_env`]). `config` reads unset variables as empty
    /// to show everything, yet must not fetch with a header other commands would refuse.
    pub fn with_header_env(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.header_lookup = Some(Arc::new(lookup));
        self
    }

    /// Adds a server at run time; it outranks every file. A later one of the same name
    /// replaces an earlier one.
    pub fn add_dynamic(&mut self, server: ServerConfig) {
        self.dynamic.push(server);
    }

    /// The files this merges, lowest precedence first: the `.mcp.json` of each plugin folder
    /// that exists now, then the user and project files whether or not they exist.
    pub fn files(&self) -> Vec<(Scope, PathBuf)> {
        let mut out = Vec::new();
        if let Some(Ok(entries)) = self.plugins_dir().map(std::fs::read_dir) {
            let mut folders: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            folders.sort();
            out.extend(
                folders
                    .into_iter()
                    .map(|f| (Scope::Plugin, f.join(".mcp.json"))),
            );
        }
        if let Some(p) = self.user_file() {
            out.push((Scope::User, p));
        }
        if let Some(dir) = &self.project {
            out.push((Scope::ProjectMcpJson, dir.join(".mcp.json")));
            out.push((Scope::ProjectHarnessJson, dir.join(".mcp-harness.json")));
        }
        out
    }

    /// Reads every existing file and merges them with the dynamic servers (see the module doc).
    /// A file that fails to read or validate fails the merge, naming the file.
    pub fn merge(&self) -> Result<Merged, ConfigError> {
        let lookup = &*self.lookup;
        let mut layers: Vec<(Origin, Converted, Config)> = Vec::new();
        let user_path = self.user_file().filter(|p| p.is_file());
        let mut untrusted_files: Vec<UntrustedFile> = Vec::new();
        let mut early_notes: Vec<String> = Vec::new();
        // From the user config, which `files()` lists before the project files.
        let mut project_permissions = self.trust == ProjectTrust::All;
        for (scope, path) in self.files() {
            let project = matches!(scope, Scope::ProjectMcpJson | Scope::ProjectHarnessJson);
            // A project file that cannot be read (a folder, a link to nothing, a device) cannot
            // have been trusted either: a note, never a stop.
            let unreadable = |e: ConfigError, notes: &mut Vec<String>| match project {
                true => {
                    notes.push(format!("{e} (a project file: it changes nothing)"));
                    Ok(())
                }
                false => Err(e),
            };
            match present(&path) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    unreadable(e, &mut early_notes)?;
                    continue;
                }
            }
            let bytes = match super::read_capped(&path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    let e = ConfigError {
                        location: path.display().to_string(),
                        message: format!("cannot read the config file: {e}"),
                    };
                    unreadable(e, &mut early_notes)?;
                    continue;
                }
            };
            let held = if project {
                self.untrusted(&path, &bytes)
            } else {
                None
            };
            // A file the user has not trusted changes nothing, and cannot stop the harness
            // either: what would be an error in a trusted file is a note, and the file is held.
            let refuse = |error: ConfigError,
                          notes: &mut Vec<String>,
                          untrusted_files: &mut Vec<UntrustedFile>|
             -> Result<(), ConfigError> {
                match &held {
                    None => Err(error),
                    Some(file) => {
                        notes.push(format!(
                            "{error} (the file is not trusted, so it changes nothing; `mcp-harness \
                             trust` shows the same error)"
                        ));
                        if !untrusted_files.iter().any(|f| f.path == file.path) {
                            untrusted_files.push(file.clone());
                        }
                        Ok(())
                    }
                }
            };
            let text = match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    let e = ConfigError {
                        location: path.display().to_string(),
                        message: "cannot read the config file: it is not UTF-8 text".into(),
                    };
                    refuse(e, &mut early_notes, &mut untrusted_files)?;
                    continue;
                }
            };
            let mut converted = match super::convert(&text, &path) {
                Ok(c) => c,
                Err(e) => {
                    refuse(e, &mut early_notes, &mut untrusted_files)?;
                    continue;
                }
            };
            if held.is_some() {
                // Only its servers are read (held back): none of its sections, managed or not.
                if let Value::Object(doc) = &mut converted.document {
                    let mut ignored: Vec<String> = doc
                        .keys()
                        .filter(|k| *k != "mcpServers")
                        .map(|k| format!("`{k}`"))
                        .collect();
                    // Read out of the document already.
                    for (key, there) in [
                        ("allowedServers / deniedServers", converted.policy.is_some()),
                        ("remoteSources", converted.remote.is_some()),
                        (
                            "trustProjectPermissions",
                            converted.trust_project_permissions.is_some(),
                        ),
                    ] {
                        if there {
                            ignored.push(format!("`{key}`"));
                        }
                    }
                    if !ignored.is_empty() {
                        early_notes.push(format!(
                            "{}: {} ignored until the file is trusted (`mcp-harness trust`)",
                            path.display(),
                            ignored.join(", ")
                        ));
                    }
                    doc.retain(|k, _| k == "mcpServers");
                }
                converted.policy = None;
                converted.remote = None;
                converted.trust_project_permissions = None;
            }
            if scope == Scope::User {
                project_permissions |= converted.trust_project_permissions == Some(true);
            } else if converted.trust_project_permissions.is_some() {
                return Err(ConfigError {
                    location: path.display().to_string(),
                    message: "`trustProjectPermissions` is a user setting, read only from the \
                              user config"
                        .into(),
                });
            }
            if scope != Scope::User && converted.policy.is_some() {
                return Err(ConfigError {
                    location: path.display().to_string(),
                    message: format!(
                        "`allowedServers` / `deniedServers` are managed settings, read only from \
                         the user config ({})",
                        user_path
                            .as_deref()
                            .map_or_else(|| "none here".to_string(), |p| p.display().to_string())
                    ),
                });
            }
            if scope != Scope::User
                && converted
                    .document
                    .as_object()
                    .is_some_and(|d| d.contains_key("gateway"))
            {
                // Client profiles grant what clients may see and run: the user's call only.
                return Err(ConfigError {
                    location: format!("{}: gateway", path.display()),
                    message: "`gateway` (the client profiles of `mcp-harness serve`) is read \
                              only from the user config or a `--config` file; move it there"
                        .into(),
                });
            }
            if scope != Scope::User && converted.remote.is_some() {
                return Err(ConfigError {
                    location: path.display().to_string(),
                    message: "`remoteSources` is a managed setting, read only from the user \
                              config"
                        .into(),
                });
            }
            if held.is_none() && project && !project_permissions {
                for note in drop_relaxations(&mut converted.document) {
                    early_notes.push(format!("{}: {note}", path.display()));
                }
            }
            let mut config = if scope == Scope::Plugin {
                let root = path
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let plugin_lookup = |name: &str| match name {
                    "PLUGIN_ROOT" | "CLAUDE_PLUGIN_ROOT" => Some(root.clone()),
                    _ => lookup(name),
                };
                converted.to_config_asking(&path, &plugin_lookup, self.prompt.as_ref())?
            } else {
                match converted.to_config_asking(&path, lookup, self.prompt.as_ref()) {
                    Ok(config) => config,
                    Err(e) => {
                        refuse(e, &mut early_notes, &mut untrusted_files)?;
                        continue;
                    }
                }
            };
            if let Some(mut file) = held {
                let reason = file.reason();
                for server in config.servers.values_mut() {
                    server.enabled = false;
                    server.untrusted = Some(reason.clone());
                }
                file.servers = config.servers.keys().cloned().collect();
                untrusted_files.push(file);
            }
            let origin = Origin {
                url: None,
                path: Some(path),
                format: converted.format,
                scope,
            };
            layers.push((origin, converted, config));
        }
        let policy = layers
            .iter()
            .find(|(o, _, _)| o.scope == Scope::User)
            .and_then(|(_, c, _)| c.policy.clone())
            .unwrap_or_default();

        let mut dropped = Vec::new();
        let mut chosen: BTreeMap<String, (ServerConfig, Origin)> = BTreeMap::new();
        let mut keep =
            |name: String, server: ServerConfig, origin: Origin, dropped: &mut Vec<_>| {
                if let Some((kept, old)) = chosen.get(&name) {
                    // A file the user has not trusted changes nothing: not even which of the
                    // user's servers runs under a name it also uses.
                    if server.untrusted.is_some() && kept.untrusted.is_none() {
                        dropped.push((
                            name.clone(),
                            format!(
                                "the definition in {origin} is not used: that file is not \
                                 trusted, so the one in {old} stays (trusting the file lets it \
                                 take precedence)"
                            ),
                        ));
                        return;
                    }
                    dropped.push((
                    name.clone(),
                    format!(
                        "the definition in {old} is replaced by the one in {origin} (same name; \
                         later sources take precedence)"
                    ),
                ));
                }
                chosen.insert(name, (server, origin));
            };
        let remote: Vec<RemoteSource> = layers
            .iter()
            .find(|(o, _, _)| o.scope == Scope::User)
            .and_then(|(_, c, _)| c.remote.clone())
            .unwrap_or_default();
        let mut notes: Vec<String> = early_notes;
        {
            let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
            // Only sources the user config still lists, in its order.
            for source in &remote {
                let Some(text) = fetched.get(&source.fetch_key()) else {
                    continue;
                };
                let origin = Origin {
                    path: None,
                    url: Some(format!("{} ({})", source.key(), source.shown_url())),
                    format: Format::Harness,
                    scope: Scope::Remote,
                };
                let layer = match source.parse(text, lookup) {
                    Ok(layer) => layer,
                    Err(e) => {
                        notes.push(format!("{origin}: not loaded: {}", e.message));
                        continue;
                    }
                };
                for note in &layer.notes {
                    notes.push(format!("{origin}: {note}"));
                }
                for (name, server) in &layer.config.servers {
                    keep(name.clone(), server.clone(), origin.clone(), &mut dropped);
                }
            }
        }
        for (origin, _, config) in &layers {
            for (name, server) in &config.servers {
                keep(name.clone(), server.clone(), origin.clone(), &mut dropped);
            }
        }
        for server in &self.dynamic {
            let origin = Origin {
                url: None,
                path: None,
                format: Format::Harness,
                scope: Scope::Dynamic,
            };
            keep(server.name.clone(), server.clone(), origin, &mut dropped);
        }

        chosen.retain(|name, _| match policy.refusal(name) {
            Some(reason) => {
                dropped.push((name.clone(), reason));
                false
            }
            None => true,
        });

        dedupe(&mut chosen, &mut dropped);

        let mut config = merged_sections(&layers, lookup)?;
        config.source = layers.last().and_then(|(o, _, _)| o.path.clone());
        let mut origins = BTreeMap::new();
        for (name, (server, origin)) in chosen {
            config.servers.insert(name.clone(), server);
            origins.insert(name, origin);
        }
        notes.extend(
            layers
                .iter()
                .flat_map(|(o, c, _)| c.notes.iter().map(move |n| format!("{o}: {n}"))),
        );
        Ok(Merged {
            config,
            origins,
            dropped,
            files: layers.into_iter().map(|(o, _, _)| o).collect(),
            notes,
            remote,
            untrusted: untrusted_files,
        })
    }

    /// Fetches every remote source the user config lists, concurrently, each within its own
    /// timeout, and keeps what each answered for the next [`Sources::merge`] (a source that
    /// fails keeps its previous answer, if any). Returns each source with its outcome: the
    /// number of servers it defined, or why it failed. Local files are read, never waited on.
    pub async fn fetch_remote(
        &self,
    ) -> Result<Vec<(RemoteSource, Result<usize, ConfigError>)>, ConfigError> {
        let remote = self.merge()?.remote;
        Ok(self.fetch(remote).await)
    }

    /// Fetches the remote sources the user config lists that were never fetched in this
    /// process (added by an edit, or their URL or headers changed), as
    /// [`Sources::fetch_remote`] does; nothing when every one was.
    pub async fn fetch_remote_new(
        &self,
    ) -> Result<Vec<(RemoteSource, Result<usize, ConfigError>)>, ConfigError> {
        Ok(self.fetch(self.unfetched()?).await)
    }

    /// The remote sources the user config lists that were never fetched in this process.
    pub fn unfetched(&self) -> Result<Vec<RemoteSource>, ConfigError> {
        let mut remote = self.merge()?.remote;
        let fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        remote.retain(|s| !fetched.contains_key(&s.fetch_key()));
        Ok(remote)
    }

    async fn fetch(
        &self,
        remote: Vec<RemoteSource>,
    ) -> Vec<(RemoteSource, Result<usize, ConfigError>)> {
        let lookup = self.lookup.clone();
        let header_lookup = self.header_lookup.clone().unwrap_or_else(|| lookup.clone());
        let fetches = remote.iter().map(|source| {
            let lookup = lookup.clone();
            let header_lookup = header_lookup.clone();
            async move {
                let header_lookup = move |name: &str| header_lookup(name);
                let text = source.fetch_text(&header_lookup).await?;
                let lookup = move |name: &str| lookup(name);
                let layer = source.parse(&text, &lookup)?;
                Ok((text, layer.config.servers.len()))
            }
        });
        let answers = futures::future::join_all(fetches).await;
        let mut fetched = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        remote
            .into_iter()
            .zip(answers)
            .map(|(source, answer)| {
                let outcome = answer.map(|(text, count)| {
                    fetched.insert(source.fetch_key(), text);
                    count
                });
                (source, outcome)
            })
            .collect()
    }
}

/// Drops enabled servers whose content equals a higher-precedence enabled one (by name order
/// within one source).
fn dedupe(
    chosen: &mut BTreeMap<String, (ServerConfig, Origin)>,
    dropped: &mut Vec<(String, String)>,
) {
    let mut order: Vec<(Scope, String)> = chosen
        .iter()
        .filter(|(_, (s, _))| s.enabled)
        .map(|(n, (_, o))| (o.scope, n.clone()))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut seen: HashMap<DedupKey, String> = HashMap::new();
    for (_, name) in order {
        let Some(key) = chosen.get(&name).and_then(|(s, _)| s.transport.dedup_key()) else {
            continue;
        };
        let what = key.shared();
        match seen.get(&key) {
            Some(keeper) => {
                let keeper_origin = chosen
                    .get(keeper)
                    .map(|(_, o)| o.to_string())
                    .unwrap_or_default();
                let reason = format!(
                    "a duplicate: {what} as \"{keeper}\" ({keeper_origin}), which takes precedence"
                );
                chosen.remove(&name);
                dropped.push((name, reason));
            }
            None => {
                seen.insert(key, name);
            }
        }
    }
}

/// Removes the permission relaxations (`permissions.allow`, `trustReadOnlyHint: true`) from a
/// project file's canonical document; a note for each one removed.
fn drop_relaxations(document: &mut Value) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(permissions) = document
        .get_mut("permissions")
        .and_then(Value::as_object_mut)
    else {
        return notes;
    };
    let why = "permission relaxations from a project file count only with \
               `trustProjectPermissions: true` in the user config";
    if permissions
        .remove("allow")
        .is_some_and(|a| a.as_array().is_none_or(|a| !a.is_empty()))
    {
        notes.push(format!("`permissions.allow` ignored ({why})"));
    }
    if permissions
        .get("trustReadOnlyHint")
        .and_then(Value::as_bool)
        == Some(true)
    {
        permissions.remove("trustReadOnlyHint");
        notes.push(format!("`permissions.trustReadOnlyHint` ignored ({why})"));
    }
    notes
}

/// The non-server sections of all layers, merged as the module doc says, validated by
/// [`Config::parse`].
fn merged_sections(
    layers: &[(Origin, Converted, Config)],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut sections = Map::new();
    let mut lists: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut trust = false;
    let mut any_permissions = false;
    for (_, converted, _) in layers {
        let Some(doc) = converted.document.as_object() else {
            continue;
        };
        for (key, value) in doc {
            match key.as_str() {
                "mcpServers" => {}
                "permissions" => {
                    any_permissions = true;
                    let Some(p) = value.as_object() else { continue };
                    for list in ["allow", "ask", "deny"] {
                        if let Some(Value::Array(items)) = p.get(list) {
                            lists.entry(list).or_default().extend(items.iter().cloned());
                        }
                    }
                    trust |= p.get("trustReadOnlyHint").and_then(Value::as_bool) == Some(true);
                }
                _ => {
                    sections.insert(key.clone(), value.clone());
                }
            }
        }
    }
    if any_permissions {
        let mut p: Map<String, Value> = lists
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::Array(v)))
            .collect();
        p.insert("trustReadOnlyHint".into(), trust.into());
        sections.insert("permissions".into(), Value::Object(p));
    }
    let text = Value::Object(sections).to_string();
    Config::parse(&text, Path::new("(merged config sections)"), lookup)
}

/// Whether a config file is at `path`: `false` when nothing is there; an error when something
/// is that cannot be one (a folder, a link to nothing or in a loop) — a user config that cannot
/// be read must not be skipped as if absent, taking its servers away unsaid.
fn present(path: &std::path::Path) -> Result<bool, ConfigError> {
    let unusable = |why: String| ConfigError {
        location: path.display().to_string(),
        message: format!("cannot read the config file: {why}; fix or remove it"),
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(unusable(e.to_string())),
        Ok(_) => match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => Ok(true),
            Ok(meta) if meta.is_dir() => Err(unusable("it is a folder".into())),
            Ok(_) => Err(unusable("it is not a regular file".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(unusable(
                "it is a symbolic link to a file that does not exist".into(),
            )),
            Err(e) => Err(unusable(e.to_string())),
        },
    }
}

//! `mcp-harness trust [PATH]`: project config files (`./.mcp.json`, `./.mcp-harness.json`) start
//! their servers only once the user trusted the file's current content. `trust PATH` shows what
//! the file would start and records it; `trust --revoke PATH` forgets it; `trust` lists the trusted
//! files and the project files here that are not. Other commands ask on a terminal
//! ([`ask_or_hold`]) and, without one, leave the servers untrusted and print the command to run.
//!
//! Invariants: what is recorded is the digest of exactly the bytes shown; nothing shown comes from
//! the environment (commands and args as written, `${VAR}` unexpanded; env and header names only,
//! URLs without query or credentials), and control characters from the file are never printed.

use std::path::{Path, PathBuf};

use mcp_harness_runtime::sources::{self, Merged, Sources, TrustState, TrustStore, UntrustedFile};
use serde_json::Value;

/// Runs `trust`; returns the exit code.
pub(crate) fn run(path: Option<&Path>, revoke: bool) -> u8 {
    let sources = crate::sources::shared();
    let Some(store) = sources.trust_store() else {
        say!(
            "error: no trust store: the user config location is unknown (set HOME or \
             XDG_CONFIG_HOME)"
        );
        return crate::exit::Exit::Usage.code();
    };
    let result = match (path, revoke) {
        (None, true) => Err("`--revoke` needs the PATH of the file to forget".to_string()),
        (None, false) => list(&store, sources),
        (Some(path), true) => files_at(path).and_then(|files| {
            let mut out = String::new();
            for file in files {
                match store.revoke(&file) {
                    Ok(true) => out.push_str(&format!(
                        "{}: no longer trusted; its servers will not start\n",
                        shown(&file)
                    )),
                    Ok(false) => out.push_str(&format!("{}: was not trusted\n", shown(&file))),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(out)
        }),
        (Some(path), false) => files_at(path).and_then(|files| {
            let mut out = String::new();
            for file in files {
                let bytes = sources::read_capped(&file)
                    .map_err(|e| format!("{}: cannot read: {e}", shown(&file)))?;
                out.push_str(&describe(&file, &bytes, sources)?);
                store.trust(&file, &bytes).map_err(|e| e.to_string())?;
                out.push_str(&format!(
                    "trusted {} (this content; an edit ends the trust)\n",
                    shown(&file)
                ));
            }
            Ok(out)
        }),
    };
    crate::exit::printed(result)
}

/// `path` itself, or for a folder its project files that exist.
fn files_at(path: &Path) -> Result<Vec<PathBuf>, String> {
    if path.is_dir() {
        let files: Vec<PathBuf> = [".mcp.json", ".mcp-harness.json"]
            .iter()
            .map(|n| path.join(n))
            .filter(|p| p.is_file())
            .collect();
        if files.is_empty() {
            return Err(format!(
                "{}: no .mcp.json or .mcp-harness.json in this folder",
                shown(path)
            ));
        }
        return Ok(files);
    }
    Ok(vec![path.to_path_buf()])
}

fn list(store: &TrustStore, sources: &Sources) -> Result<String, String> {
    let records = store.list().map_err(|e| e.to_string())?;
    let mut out = format!("trust store: {}\n", shown(store.path()));
    if records.is_empty() {
        out.push_str("no trusted project files\n");
    }
    for (key, record) in &records {
        let path = sources::path_of_key(key);
        // Only a regular file is read (a trusted file swapped for a FIFO would hang the list).
        let read = match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => sources::read_capped(&path),
            Ok(_) => Err(std::io::Error::other("not a regular file")),
            Err(e) => Err(e),
        };
        let state = match read {
            Ok(bytes) if record.matches(&bytes) => "trusted",
            Ok(_) => "changed since trusted (not trusted)",
            Err(_) => "missing",
        };
        out.push_str(&format!("  {}: {state}\n", shown(&path)));
    }
    for (scope, file) in sources.files() {
        if !matches!(
            scope,
            sources::Scope::ProjectMcpJson | sources::Scope::ProjectHarnessJson
        ) || !file.is_file()
        {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        match store.state(&file, &bytes) {
            Ok(TrustState::Trusted) => {}
            Ok(_) | Err(_) => out.push_str(&format!(
                "here: {} is not trusted; review it with `{}`\n",
                shown(&file),
                command(&file)
            )),
        }
    }
    Ok(out)
}

/// What `file` would start and change, as written (nothing expanded).
pub(crate) fn describe(file: &Path, bytes: &[u8], sources: &Sources) -> Result<String, String> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| format!("{}: not valid UTF-8", shown(file)))?;
    let converted = sources::import_text(text, file).map_err(|e| e.to_string())?;
    let mut out = format!("{} would add:\n", shown(file));
    let servers = converted.servers().cloned().unwrap_or_default();
    if servers.is_empty() {
        out.push_str("  no servers\n");
    }
    // The names of the user's servers (a project server of one of them replaces it).
    let user = user_config(sources);
    let yours: Vec<String> = user
        .as_ref()
        .and_then(|c| c.servers().map(|s| s.keys().cloned().collect()))
        .unwrap_or_default();
    for (name, server) in &servers {
        let get = |k: &str| server.get(k).and_then(Value::as_str);
        // Names, never values; a value read from the environment names its variables (which
        // of yours the server gets), and a variable that changes what a command runs says so.
        let keys = |k: &str| {
            server
                .get(k)
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(key, value)| {
                            let mut shown = clean(key);
                            let vars = references(value.as_str().unwrap_or_default());
                            if !vars.is_empty() {
                                shown.push_str(&format!(" ← {}", vars.join(" ")));
                            }
                            if k == "env" && changes_what_runs(key) {
                                shown.push_str(" (changes what the command loads)");
                            }
                            shown
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .filter(|s| !s.is_empty())
        };
        let what = match (get("command"), get("url")) {
            (Some(command), _) => {
                let args: Vec<String> = server
                    .get("args")
                    .and_then(Value::as_array)
                    .map(|a| {
                        // Shown as the process gets them, whole: a part hidden here (a URL's
                        // query, as elsewhere) could hide what runs (`sh -c ': http://x/?v=1;
                        // curl … | sh'`). The text is the project file's, in the checkout; the
                        // user's own values (`${VAR}`) are not expanded.
                        a.iter().filter_map(Value::as_str).map(quote).collect()
                    })
                    .unwrap_or_default();
                let mut line = format!("runs: {} {}", quote(command), args.join(" "));
                if let Some(env) = keys("env") {
                    line.push_str(&format!("; env: {env}"));
                }
                if let Some(cwd) = get("cwd") {
                    line.push_str(&format!("; cwd: {}", clean(cwd)));
                }
                line
            }
            (None, Some(url)) => {
                let mut line = format!(
                    "connects to {} ({})",
                    clean(&mcp_harness_transport::redact::bare_url(url)),
                    get("type").unwrap_or("http")
                );
                let vars = references(url);
                if !vars.is_empty() {
                    line.push_str(&format!("; its URL reads {}", vars.join(" ")));
                }
                if let Some(headers) = keys("headers") {
                    line.push_str(&format!("; headers: {headers}"));
                }
                if let Some(oauth) = server.get("oauth").and_then(Value::as_object) {
                    line.push_str(&oauth_reads(oauth));
                }
                line
            }
            (None, None) => "no command or url".to_string(),
        };
        let mut off = if server.get("enabled") == Some(&Value::Bool(false)) {
            " (disabled in the file)".to_string()
        } else {
            String::new()
        };
        if yours.contains(name) {
            off.push_str(" (replaces your server of this name in the user config)");
        }
        out.push_str(&format!(
            "  server \"{}\"{off}: {}\n",
            clean(name),
            what.trim_end()
        ));
    }
    if let Some(p) = converted.document.get("permissions") {
        let allow = p.get("allow").and_then(Value::as_array).map_or(0, Vec::len);
        let hint = p.get("trustReadOnlyHint") == Some(&Value::Bool(true));
        if allow > 0 || hint {
            let counted = user
                .as_ref()
                .and_then(|c| c.trust_project_permissions)
                .unwrap_or(false);
            out.push_str(&format!(
                "  permission relaxations: {allow} allow rule(s){}; {}\n",
                if hint { ", trustReadOnlyHint" } else { "" },
                if counted {
                    "they count (`trustProjectPermissions: true` in the user config)"
                } else {
                    "ignored unless the user config sets `trustProjectPermissions: true`"
                }
            ));
        }
    }
    Ok(out)
}

/// Whether the user config sets `trustProjectPermissions: true`.
/// The user config as written (its servers, `trustProjectPermissions`), read once per review.
fn user_config(sources: &Sources) -> Option<sources::Converted> {
    sources
        .files()
        .into_iter()
        .find(|(scope, _)| *scope == sources::Scope::User)
        .and_then(|(_, path)| sources::import(&path).ok())
}

/// The `${VAR}` references in `value`, as written (`${VAR:-default}` as `${VAR}`): which of the
/// user's variables the server would get.
fn references(value: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else { break };
        let name: String = after[..end]
            .split(":-")
            .next()
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !found.iter().any(|f| f == &format!("${{{name}}}")) {
            found.push(format!("${{{name}}}"));
        }
        rest = &after[end + 1..];
    }
    found
}

/// What a server's `oauth` has the harness read on its behalf: the grant, and the local files
/// and variables it names (a key to sign with, a token to send).
fn oauth_reads(oauth: &serde_json::Map<String, Value>) -> String {
    let grant = oauth
        .get("grant")
        .and_then(Value::as_str)
        .unwrap_or("authorization_code");
    let mut line = format!("; OAuth grant {}", clean(grant));
    for (key, what) in [
        ("privateKeyFile", "signs with the key in "),
        ("assertionFile", "sends the token in "),
        ("idTokenFile", "sends the token in "),
        ("assertionEnv", "sends the token in $"),
        ("idTokenEnv", "sends the token in $"),
    ] {
        if let Some(named) = oauth.get(key).and_then(Value::as_str) {
            line.push_str(&format!(", {what}{}", clean(named)));
        }
    }
    line
}

/// Whether environment variable `name` changes what a command loads or runs, whatever the
/// command is (a project file could point a trusted-looking command at its own code, or a
/// package runner at its own registry).
fn changes_what_runs(name: &str) -> bool {
    const NAMES: [&str; 33] = [
        "NODE_OPTIONS",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "GOFLAGS",
        "GOPROXY",
        "GOPATH",
        "GONOSUMDB",
        "GOSUMDB",
        "RUSTFLAGS",
        "ZDOTDIR",
        "NODE_PATH",
        "NODE_EXTRA_CA_CERTS",
        "PATH",
        "HOME",
        "BASH_ENV",
        "ENV",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "GCONV_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "XDG_CONFIG_HOME",
    ];
    const PREFIXES: [&str; 14] = [
        "LD_",
        "DYLD_",
        "BUN_",
        "DENO_",
        "RUSTC_",
        "COREPACK_",
        "PYTHON",
        "NPM_CONFIG_",
        "YARN_",
        "PNPM_",
        "PIP_",
        "UV_",
        "GIT_",
        "CARGO_",
    ];
    let upper = name.to_ascii_uppercase();
    NAMES.contains(&upper.as_str()) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// After a merge: on a terminal (and when `ask`), shows each untrusted project file and asks
/// whether to trust it, merging again when any was trusted; the files still untrusted get the
/// command to run in their servers' reasons and in a warning.
pub(crate) fn ask_or_hold(
    sources: &Sources,
    mut merged: Merged,
    ask: bool,
) -> Result<Merged, String> {
    if merged.untrusted.is_empty() {
        return Ok(merged);
    }
    if ask
        && crate::terminal::interactive()
        && let Some(store) = sources.trust_store()
    {
        let mut any = false;
        for file in &merged.untrusted {
            if file.error.is_some() {
                continue;
            }
            let Ok(bytes) = std::fs::read(&file.path) else {
                continue;
            };
            let shown_text = match describe(&file.path, &bytes, sources) {
                Ok(t) => t,
                Err(_) => continue,
            };
            let changed = if file.state == TrustState::Changed {
                " (it changed since you trusted it)"
            } else {
                ""
            };
            let question = format!(
                "\nThis folder's config file {}{changed} is not trusted.\n{shown_text}Trust it \
                 and start its servers? [y/N] ",
                shown(&file.path)
            );
            if crate::terminal::ask_yes_no(&question) {
                store.trust(&file.path, &bytes).map_err(|e| e.to_string())?;
                any = true;
            }
        }
        if any {
            merged = sources.merge().map_err(|e| e.to_string())?;
        }
    }
    for file in &merged.untrusted {
        warn_untrusted(file);
    }
    let hints: Vec<(Vec<String>, String)> = merged
        .untrusted
        .iter()
        .map(|f| (f.servers.clone(), command(&f.path)))
        .collect();
    for (servers, command) in hints {
        for name in servers {
            if let Some(server) = merged.config.servers.get_mut(&name)
                && let Some(reason) = &mut server.untrusted
            {
                reason.push_str(&format!(" (run `{command}`)"));
            }
        }
    }
    Ok(merged)
}

fn warn_untrusted(file: &UntrustedFile) {
    let servers: Vec<String> = file.servers.iter().map(|s| format!("\"{s}\"")).collect();
    let what = if servers.is_empty() {
        "its settings are".to_string()
    } else {
        format!("its servers {} are", servers.join(", "))
    };
    say!(
        "warning: {}; {what} not used. To review and trust it, run: {}",
        file.reason(),
        command(&file.path)
    );
}

/// The exact command that trusts `file`.
pub(crate) fn command(file: &Path) -> String {
    let path = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    format!("mcp-harness trust {}", quote(&path.display().to_string()))
}

/// `s` quoted for a POSIX shell when it needs it, control characters removed.
fn quote(s: &str) -> String {
    let s = clean(s);
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `s` with every character a terminal would act on or not show — a control (a line break
/// inside a `sh -c` script, an escape sequence), a right-to-left override that would show
/// `/usr/bin/\u{202e}txt.hsab` as `/usr/bin/bash.txt`, a soft hyphen, a tag character — spelled
/// as its code point (`\u{000A}`), so the review shows every character the file holds.
fn clean(s: &str) -> String {
    mcp_harness_runtime::catalog::sanitize::escape_for_display(s, usize::MAX)
}

fn shown(path: &Path) -> String {
    clean(&path.display().to_string())
}

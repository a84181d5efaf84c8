//! `get` and `list`: servers as written in the config files, for people and (`--json`) scripts.
//!
//! Invariant: nothing shown is a secret: env and header values, `oauth` secrets and a URL's query
//! values and password are replaced by `[redacted]` — unless the value is only `${VAR}`
//! references (with at most an auth scheme word such as `Bearer`), which name a variable and hold
//! no secret; arguments pass through the one redaction of URLs and registered secrets; control
//! characters from the file are never printed.

use std::path::PathBuf;

use mcp_harness_transport::redact;

use super::file::{self, ConfigFile, EditError};
use super::ordered::{Json, Object};
use super::{ScopeArg, scope_files, scope_name, transport_of};
use crate::table;

/// Keys of `oauth` that hold secrets.
const OAUTH_SECRETS: &[&str] = &["clientSecret", "privateKey", "idpClientSecret"];

/// One server as written, with where.
struct Found {
    name: String,
    scope: ScopeArg,
    path: PathBuf,
    server: Object,
}

/// Every server of the files of `scope` (or of all), lowest precedence first: user, `.mcp.json`,
/// `.mcp-harness.json` (the merge's order: a later definition replaces an earlier one).
fn servers(scope: Option<ScopeArg>) -> Result<Vec<Found>, EditError> {
    let scopes = match scope {
        Some(s) => vec![s],
        None => vec![ScopeArg::User, ScopeArg::Project],
    };
    let mut out = Vec::new();
    for scope in scopes {
        let files = match scope_files(scope) {
            Ok(f) => f,
            Err(e) if scope_is_optional(scope) => {
                tracing::debug!("{e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        for path in files.into_iter().rev() {
            let file = ConfigFile::open(&path)?;
            for (name, server) in file.servers().into_iter().flat_map(Object::iter) {
                if let Json::Object(server) = server {
                    out.push(Found {
                        name: name.clone(),
                        scope,
                        path: path.clone(),
                        server: server.clone(),
                    });
                }
            }
        }
    }
    Ok(out)
}

fn scope_is_optional(scope: ScopeArg) -> bool {
    scope == ScopeArg::Project
}

/// The files a scope reads, as an error names them.
fn looked(scope: Option<ScopeArg>) -> String {
    match scope {
        Some(s) => format!("the {} config", scope_name(s)),
        None => "the user or project config".to_string(),
    }
}

/// `get NAME`.
pub(super) fn get(name: &str, scope: Option<ScopeArg>, json: bool) -> Result<String, EditError> {
    let found: Vec<Found> = servers(scope)?
        .into_iter()
        .filter(|f| f.name == name)
        .collect();
    if found.is_empty() {
        return Err(EditError::NotFound {
            server: name.to_string(),
            looked: looked(scope),
            hint: "; `mcp-harness list` shows the configured servers".into(),
        });
    }
    if json {
        let items: Vec<serde_json::Value> = found.iter().map(to_json).collect();
        return Ok(table::pretty(&serde_json::Value::Array(items)));
    }
    let mut out = String::new();
    for (i, f) in found.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&describe(f));
    }
    if found.len() > 1 {
        out.push_str(
            "\nnote: defined in more than one file; the last one listed replaces the others (a \
             project file only once trusted)\n",
        );
    }
    Ok(out)
}

/// `list`.
/// The configured servers (all, or those named in `only`: each must be configured).
pub(super) fn list(
    scope: Option<ScopeArg>,
    only: &[String],
    json: bool,
) -> Result<String, EditError> {
    let mut found = servers(scope)?;
    if !only.is_empty() {
        if let Some(missing) = only
            .iter()
            .find(|name| !found.iter().any(|f| f.name == **name))
        {
            let configured: Vec<String> = found.iter().map(|f| clean(&f.name)).collect();
            return Err(EditError::NotFound {
                server: clean(missing),
                looked: looked(scope),
                hint: match configured.is_empty() {
                    true => "; none is configured".into(),
                    false => format!("; configured: {}", configured.join(", ")),
                },
            });
        }
        found.retain(|f| only.contains(&f.name));
    }
    if json {
        let items: Vec<serde_json::Value> = found.iter().map(to_json).collect();
        return Ok(table::pretty(&serde_json::Value::Array(items)));
    }
    if found.is_empty() {
        return Ok(
            "no servers configured; add one with `mcp-harness add NAME -- COMMAND`\n".into(),
        );
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|f| {
            vec![
                clean(&f.name),
                scope_name(f.scope).to_string(),
                transport_of(&f.server).to_string(),
                if enabled(&f.server) { "yes" } else { "no" }.to_string(),
                clean(&target(&f.server)),
                file::shown(&f.path),
            ]
        })
        .collect();
    Ok(table::render(
        &[
            "SERVER",
            "SCOPE",
            "TRANSPORT",
            "ENABLED",
            "COMMAND / URL",
            "FILE",
        ],
        &rows,
    ))
}

/// Whether the config load reads `server` as enabled: neither `"enabled": false` nor a host's
/// `"disabled": true` (Cursor, Cline).
pub(super) fn enabled(server: &Object) -> bool {
    !matches!(server.get("enabled"), Some(Json::Bool(false)))
        && !matches!(server.get("disabled"), Some(Json::Bool(true)))
}

/// The command line (arguments redacted) or the URL without query or credentials.
pub(crate) fn target(server: &Object) -> String {
    if let Some(url) = server.get("url").and_then(Json::as_str) {
        return redact::bare_url(url);
    }
    let mut parts: Vec<String> = server
        .get("command")
        .and_then(Json::as_str)
        .map(str::to_string)
        .into_iter()
        .collect();
    if let Some(Json::Array(args)) = server.get("args") {
        parts.extend(redact::args(args.iter().filter_map(Json::as_str)));
    }
    parts.join(" ")
}

fn to_json(f: &Found) -> serde_json::Value {
    serde_json::json!({
        "name": f.name,
        "scope": scope_name(f.scope),
        "file": f.path.display().to_string(),
        "transport": transport_of(&f.server),
        "enabled": enabled(&f.server),
        "definition": redacted(&f.server).to_value(),
    })
}

/// One server for people: where it is, then each key as written, secrets redacted.
fn describe(f: &Found) -> String {
    let shown = redacted(&f.server);
    let mut lines: Vec<(String, String)> = vec![
        ("scope".into(), scope_name(f.scope).into()),
        ("file".into(), file::shown(&f.path)),
        ("transport".into(), transport_of(&f.server).into()),
        (
            "enabled".into(),
            if enabled(&f.server) { "yes" } else { "no" }.into(),
        ),
    ];
    if let Some(o) = shown.as_object() {
        for (key, value) in o.iter() {
            if matches!(key.as_str(), "type" | "enabled") {
                continue;
            }
            let sep = if key == "headers" { ": " } else { "=" };
            let text = match value {
                Json::String(s) => s.clone(),
                Json::Array(items) if key == "args" => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| compact(i), str::to_string))
                    .collect::<Vec<_>>()
                    .join(" "),
                Json::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map_or_else(|| compact(i), str::to_string))
                    .collect::<Vec<_>>()
                    .join(", "),
                Json::Object(members) if matches!(key.as_str(), "env" | "headers") => members
                    .iter()
                    .map(|(k, v)| format!("{k}{sep}{}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => compact(other),
            };
            lines.push((key.clone(), text));
        }
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = format!("{}\n", clean(&f.name));
    for (key, value) in lines {
        out.push_str(&format!(
            "  {:<width$} {}\n",
            format!("{}:", clean(&key)),
            clean(&value)
        ));
    }
    out
}

fn compact(v: &Json) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A copy of `server` with every secret replaced (see the module invariant). Keys are matched
/// whatever their case, and a secret-bearing key of the wrong shape (`"env": "TOKEN=..."`) is
/// replaced whole: the file is shown as written, before anything checked it.
pub(crate) fn redacted(server: &Object) -> Json {
    let mut out = server.clone();
    let keys: Vec<String> = out.iter().map(|(k, _)| k.clone()).collect();
    for key in keys {
        let Some(value) = out.get_mut(&key) else {
            continue;
        };
        match (key.to_ascii_lowercase().as_str(), value) {
            ("env" | "headers", Json::Object(members)) => {
                *members = members.iter().map(|(k, v)| (k.clone(), hide(v))).collect();
            }
            ("oauth", Json::Object(oauth)) => {
                let keys: Vec<String> = oauth.iter().map(|(k, _)| k.clone()).collect();
                for key in keys {
                    let shown = match oauth.get(&key) {
                        Some(v) if OAUTH_SECRETS.contains(&key.as_str()) => hide(v),
                        Some(Json::String(s)) => Json::String(redact::text(s)),
                        Some(v) if v.as_object().is_some() || matches!(v, Json::Array(_)) => {
                            Json::from(redact::MARKER)
                        }
                        _ => continue,
                    };
                    oauth.insert(&key, shown);
                }
            }
            ("url", Json::String(url)) => *url = redact::url(url),
            ("args", Json::Array(args)) => {
                let strings: Vec<String> = args
                    .iter()
                    .filter_map(Json::as_str)
                    .map(str::to_string)
                    .collect();
                let mut shown = redact::args(strings.iter().map(String::as_str)).into_iter();
                for arg in args.iter_mut() {
                    if let Json::String(s) = arg
                        && let Some(redacted) = shown.next()
                    {
                        *s = redacted;
                    }
                }
            }
            ("env" | "headers" | "oauth" | "url" | "args", other) => {
                *other = Json::from(redact::MARKER);
            }
            _ => {}
        }
    }
    Json::Object(out)
}

/// `[redacted]`, unless the value only names variables (then it is shown with any default a
/// reference gives, `${VAR:-...}`, redacted: a default may be the secret itself).
fn hide(value: &Json) -> Json {
    match value.as_str() {
        Some(s) if only_references(s) => Json::String(without_defaults(s)),
        _ => Json::from(redact::MARKER),
    }
}

/// `s` with the default of each `${VAR:-default}` replaced by [`redact::MARKER`].
fn without_defaults(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut tail = s;
    while let Some(start) = tail.find("${") {
        let Some(end) = tail[start..].find('}').map(|end| start + end) else {
            break;
        };
        let reference = &tail[start..end];
        out.push_str(&tail[..start]);
        match reference.split_once(":-") {
            Some((name, _)) => {
                out.push_str(name);
                out.push_str(":-");
                out.push_str(redact::MARKER);
            }
            None => out.push_str(reference),
        }
        out.push('}');
        tail = &tail[end + 1..];
    }
    out.push_str(tail);
    out
}

/// Whether `s` is `${VAR}` references, optionally after an auth scheme word, and nothing else
/// — each naming a variable by a name that does not look like a secret typed into the braces.
fn only_references(s: &str) -> bool {
    let mut rest = String::new();
    let mut found = false;
    let mut tail = s;
    while let Some(start) = tail.find("${") {
        rest.push_str(&tail[..start]);
        match tail[start..].find('}') {
            Some(end) => {
                let body = &tail[start + 2..start + end];
                let name = body.split(":-").next().unwrap_or_default();
                // VS Code's spellings: `${env:NAME}`, `${input:id}`.
                let name = ["env:", "input:"]
                    .iter()
                    .find_map(|p| name.strip_prefix(p))
                    .unwrap_or(name);
                let named = mcp_harness_runtime::is_var_name(name)
                    && !mcp_harness_runtime::looks_like_a_secret(name);
                if !named {
                    return false;
                }
                found = true;
                tail = &tail[start + end + 1..];
            }
            None => return false,
        }
    }
    rest.push_str(tail);
    let rest = rest.trim();
    found
        && (rest.is_empty()
            || ["bearer", "basic", "token"].contains(&rest.to_ascii_lowercase().as_str()))
}

/// `s` without control characters (a hostile file could hold terminal escapes).
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Secrets in any shape are hidden: a default inside a reference, a key of the wrong
    /// type or case, a URL's password without a query, URLs in `oauth` and in arguments.
    #[test]
    fn secrets_of_every_shape_are_hidden() {
        let server = Json::parse(
            r#"{
                "url": "http://u:CANARY1@h/mcp",
                "headers": {"Authorization": "Bearer ${UNSET:-CANARY2}", "X": "${KEY}"},
                "env": "TOKEN=CANARY3",
                "Headers": {"A": "CANARY4"},
                "oauth": {"clientId": "id", "clientSecret": "${S:-CANARY5}",
                          "clientMetadataUrl": "http://u:CANARY6@x/?k=CANARY7"},
                "args": ["--url", "http://u:CANARY8@h/x"],
                "URL": ["http://h/?key=CANARY9"]
            }"#,
        )
        .unwrap();
        let shown = redacted(server.as_object().unwrap()).to_value().to_string();
        assert!(!shown.contains("CANARY"), "{shown}");
        for kept in [
            "Bearer ${UNSET:-[redacted]}",
            "${KEY}",
            "http://u:[redacted]@h/mcp",
            "\"clientId\":\"id\"",
            "${S:-[redacted]}",
        ] {
            assert!(shown.contains(kept), "{kept}: {shown}");
        }
    }

    #[test]
    fn references_are_shown_and_values_are_not() {
        assert!(only_references("${TOKEN}"));
        assert!(only_references("Bearer ${GITHUB_TOKEN}"));
        assert!(only_references("${env:A}${env:B}"));
        assert!(!only_references("Bearer abc${X}"));
        assert!(!only_references("literal"));
        assert!(!only_references("${UNCLOSED"));
        assert!(
            !only_references("Bearer ${sk_live_51HxQ2eLkdJ8a9ZZ}"),
            "a key typed into the braces"
        );
        assert!(!only_references("Bearer ${sk_live_SUPERSECRET-123}"));
        let server = match Json::parse(
            r#"{"url": "https://h.test/mcp?key=v4lue", "headers": {"A": "s3cret", "B": "Bearer ${T}"},
                "env": {"K": "v"}, "oauth": {"clientId": "id", "clientSecret": "cs"}}"#,
        ) {
            Ok(Json::Object(o)) => o,
            _ => panic!("object"),
        };
        let text = compact(&redacted(&server));
        for secret in ["v4lue", "s3cret", "\"v\"", "\"cs\""] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        assert!(
            text.contains("Bearer ${T}") && text.contains("\"id\""),
            "{text}"
        );
    }
}

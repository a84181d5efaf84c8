//! Gemini CLI's `settings.json` (`~/.gemini/settings.json`, `.gemini/settings.json`): the
//! `mcpServers` object; every other top-level key is a Gemini setting and is not read, except
//! `mcp.allowed` / `mcp.excluded`, which disable the servers Gemini CLI would skip.
//!
//! Invariant: `httpUrl` is Streamable HTTP, `url` is legacy SSE unless `type` says `"http"`,
//! `timeout` (milliseconds) is the tool-call timeout, `$VAR` becomes `${VAR}`; nothing is
//! resolved here.

use serde_json::{Map, Value};

use super::converted::{
    Converted, Format, check_keys, is_var_name, map_strings, server_error, server_objects,
};
use crate::config::ConfigError;

/// Server keys only Gemini CLI writes (used to recognise its files by shape).
pub(super) const ONLY_KEYS: &[&str] = &[
    "httpUrl",
    "trust",
    "timeout",
    "tcp",
    "authProviderType",
    "targetAudience",
    "targetServiceAccount",
    "extensionName",
];

const KNOWN: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "httpUrl",
    "type",
    "headers",
    "timeout",
    "includeTools",
    "excludeTools",
];

const IGNORED: &[(&str, &str)] = &[
    (
        "trust",
        "Gemini CLI skips confirmations for a trusted server; mcp-harness's permission rules still decide",
    ),
    ("description", "a label Gemini CLI shows"),
    (
        "extensionName",
        "the Gemini CLI extension that added the server",
    ),
    (
        "extension",
        "the Gemini CLI extension that added the server",
    ),
    (
        "oauth",
        "Gemini CLI's OAuth client settings; mcp-harness does not run OAuth from the config yet",
    ),
    (
        "authProviderType",
        "Gemini CLI's Google credential providers are not supported",
    ),
    (
        "targetAudience",
        "Gemini CLI's service-account impersonation",
    ),
    (
        "targetServiceAccount",
        "Gemini CLI's service-account impersonation",
    ),
];

/// Converts a Gemini CLI settings object.
pub(super) fn convert(file: &str, mut root: Map<String, Value>) -> Result<Converted, ConfigError> {
    let mut out = Converted::new(Format::Gemini);
    let servers = server_objects(file, "mcpServers", root.remove("mcpServers"))?;
    let names = |key: &str| -> Option<Vec<String>> {
        root.get("mcp")?.get(key)?.as_array().map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    let allowed = names("allowed");
    let excluded = names("excluded").unwrap_or_default();
    let mut canonical = Map::new();
    for (name, mut server) in servers {
        let fail = |m: &str| server_error(file, &name, m);
        if server.contains_key("tcp") {
            return Err(fail(
                "`tcp` (WebSocket) is not a transport mcp-harness has; use `command`, `httpUrl` or `url`",
            ));
        }
        check_keys(
            file,
            &name,
            Format::Gemini,
            &mut server,
            KNOWN,
            IGNORED,
            &mut out.notes,
        )?;
        let mut value = Value::Object(server);
        map_strings(&mut value, &mut dollar_vars).map_err(|e| fail(&e))?;
        let Value::Object(mut server) = value else {
            continue;
        };
        let kind = match server.remove("type") {
            None => None,
            Some(Value::String(k)) => Some(k),
            Some(_) => return Err(fail("`type` must be \"http\" or \"sse\"")),
        };
        let mut target = Map::new();
        match (server.remove("httpUrl"), server.remove("url")) {
            (Some(_), Some(_)) => return Err(fail("set `httpUrl` or `url`, not both")),
            (Some(url), None) => {
                if kind.as_deref().is_some_and(|k| k != "http") {
                    return Err(fail("`httpUrl` is Streamable HTTP; remove `type`"));
                }
                target.insert("type".into(), "http".into());
                target.insert("url".into(), url);
            }
            (None, Some(url)) => {
                let kind = match kind.as_deref() {
                    None | Some("sse") => "sse",
                    Some("http") => "http",
                    Some(_) => return Err(fail("`type` must be \"http\" or \"sse\"")),
                };
                if kind == "sse" {
                    out.hints.insert(
                        name.clone(),
                        "Gemini CLI's `url` is legacy SSE; for Streamable HTTP use `httpUrl` or \
                         `\"type\": \"http\"`"
                            .into(),
                    );
                }
                target.insert("type".into(), kind.into());
                target.insert("url".into(), url);
            }
            (None, None) => {
                if let Some(k) = kind {
                    return Err(fail(&format!("`type` \"{k}\" needs a `url`")));
                }
            }
        }
        if let Some(timeout) = server.remove("timeout") {
            match timeout.as_f64() {
                Some(ms) if ms.is_finite() && ms > 0.0 && ms <= 86_400_000.0 => {
                    let secs = ms / 1000.0;
                    let secs = if secs.fract() == 0.0 {
                        Value::from(secs as u64)
                    } else {
                        Value::from(secs)
                    };
                    target.insert("toolTimeoutSec".into(), secs);
                }
                _ => {
                    return Err(fail(
                        "`timeout` must be a number of milliseconds between 0 and 86400000",
                    ));
                }
            }
        }
        // command, args, env, cwd, headers, includeTools, excludeTools: our keys too.
        target.extend(server);
        let skipped =
            excluded.contains(&name) || allowed.as_ref().is_some_and(|a| !a.contains(&name));
        if skipped {
            target.insert("enabled".into(), false.into());
            out.notes.push(format!(
                "server \"{name}\": disabled, as Gemini CLI's `mcp.allowed` / `mcp.excluded` skip it"
            ));
        }
        canonical.insert(name, Value::Object(target));
    }
    out.document = serde_json::json!({ "mcpServers": canonical });
    Ok(out)
}

/// `$VAR` → `${VAR}`; `${VAR}` stays; a `$` before anything else is literal.
fn dollar_vars(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let len = after
            .char_indices()
            .find(|(j, c)| {
                !(c.is_ascii_alphanumeric() || *c == '_') || (*j == 0 && c.is_ascii_digit())
            })
            .map_or(after.len(), |(j, _)| j);
        let name = &after[..len];
        if is_var_name(name) {
            out.push_str(&format!("${{{name}}}"));
        } else {
            out.push('$');
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

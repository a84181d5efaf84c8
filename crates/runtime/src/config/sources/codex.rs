//! Codex's `config.toml` (`~/.codex/config.toml`, `.codex/config.toml`): the `[mcp_servers.NAME]`
//! tables; every other top-level key is a Codex setting and is not read.
//!
//! Invariant: secrets Codex takes by variable name stay references — `bearer_token_env_var = "V"`
//! becomes the header `Authorization: Bearer ${V}`, `env_http_headers = { H = "V" }` becomes
//! `H: ${V}`, `env_vars = ["V"]` becomes `env.V = "${V:-}"` — and an inline `bearer_token` is
//! refused, as Codex refuses it.

use serde_json::{Map, Value};

use super::converted::{Converted, Format, check_keys, is_var_name, server_error, server_objects};
use crate::config::ConfigError;

const KNOWN: &[&str] = &[
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "bearer_token",
    "bearer_token_env_var",
    "http_headers",
    "env_http_headers",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "tool_timeout_sec",
    "enabled",
    "required",
    "enabled_tools",
    "disabled_tools",
];

const IGNORED: &[(&str, &str)] = &[
    (
        "experimental_environment",
        "where Codex starts the server; mcp-harness starts it here",
    ),
    (
        "supports_parallel_tool_calls",
        "a Codex scheduling hint; annotations and permission rules decide here",
    ),
    (
        "default_tools_approval_mode",
        "Codex's approval mode; use `permissions` rules",
    ),
    (
        "tools",
        "Codex's per-tool approval modes; use `permissions` rules",
    ),
    (
        "scopes",
        "Codex's OAuth scopes; mcp-harness does not run OAuth from the config yet",
    ),
    (
        "oauth",
        "Codex's OAuth client settings; mcp-harness does not run OAuth from the config yet",
    ),
    (
        "oauth_resource",
        "Codex's OAuth resource; mcp-harness does not run OAuth from the config yet",
    ),
    ("name", "a legacy Codex display name"),
];

/// Converts a parsed `config.toml`.
pub(super) fn convert(file: &str, document: Value) -> Result<Converted, ConfigError> {
    let mut out = Converted::new(Format::Codex);
    let Value::Object(mut root) = document else {
        return Err(ConfigError {
            location: file.to_string(),
            message: "expected a TOML table".into(),
        });
    };
    let servers = server_objects(file, "mcp_servers", root.remove("mcp_servers"))?;
    let mut canonical = Map::new();
    for (name, mut server) in servers {
        check_keys(
            file,
            &name,
            Format::Codex,
            &mut server,
            KNOWN,
            IGNORED,
            &mut out.notes,
        )?;
        let target = server_config(&name, server, &mut out.notes)
            .map_err(|m| server_error(file, &name, m))?;
        canonical.insert(name, Value::Object(target));
    }
    out.document = serde_json::json!({ "mcpServers": canonical });
    Ok(out)
}

/// Sets `header` from the key `from`; a header an earlier key set (names compared as HTTP
/// compares them) is replaced, and a note says which key won.
fn set_header(
    headers: &mut Map<String, Value>,
    header: &str,
    value: String,
    server: &str,
    from: &str,
    notes: &mut Vec<String>,
) {
    let earlier: Vec<String> = headers
        .keys()
        .filter(|k| k.eq_ignore_ascii_case(header))
        .cloned()
        .collect();
    for key in earlier {
        headers.remove(&key);
        notes.push(format!(
            "server \"{server}\": header `{key}` is set twice; the value from `{from}` is kept"
        ));
    }
    headers.insert(header.to_string(), value.into());
}

fn server_config(
    name: &str,
    mut server: Map<String, Value>,
    notes: &mut Vec<String>,
) -> Result<Map<String, Value>, String> {
    if server.contains_key("bearer_token") {
        return Err(
            "an inline `bearer_token` is refused (as Codex refuses it): put the token in an \
             environment variable and set `bearer_token_env_var` to its name"
                .into(),
        );
    }
    let mut target = Map::new();
    let is_stdio = server.contains_key("command");
    if is_stdio {
        for key in ["bearer_token_env_var", "http_headers", "env_http_headers"] {
            if server.contains_key(key) {
                return Err(format!(
                    "`{key}` applies to `url` servers only; this one has a `command`"
                ));
            }
        }
    }
    for (from, to) in [
        ("command", "command"),
        ("args", "args"),
        ("cwd", "cwd"),
        ("url", "url"),
        ("enabled", "enabled"),
        ("enabled_tools", "includeTools"),
        ("disabled_tools", "excludeTools"),
    ] {
        if let Some(v) = server.remove(from) {
            check_type(from, &v)?;
            target.insert(to.into(), literal(v));
        }
    }
    if target.contains_key("url") {
        target.insert("type".into(), "http".into());
    }
    let mut env = literal_map(string_map("env", server.remove("env"))?);
    if let Some(vars) = server.remove("env_vars") {
        let Value::Array(vars) = vars else {
            return Err("`env_vars` must be a list of variable names".into());
        };
        for var in vars {
            let var = match &var {
                Value::String(s) => s.as_str(),
                Value::Object(o) => o.get("name").and_then(Value::as_str).unwrap_or(""),
                _ => "",
            };
            if !is_var_name(var) {
                return Err(
                    "`env_vars` entries must be variable names (or `{ name = \"VAR\" }`)".into(),
                );
            }
            env.entry(var.to_string())
                .or_insert_with(|| format!("${{{var}:-}}").into());
        }
    }
    if !env.is_empty() {
        target.insert("env".into(), Value::Object(env));
    }
    let mut headers = literal_map(string_map("http_headers", server.remove("http_headers"))?);
    for (header, var) in string_map("env_http_headers", server.remove("env_http_headers"))? {
        let var = var.as_str().unwrap_or("");
        if !is_var_name(var) {
            return Err(format!(
                "`env_http_headers.{header}` must name an environment variable"
            ));
        }
        set_header(
            &mut headers,
            &header,
            format!("${{{var}}}"),
            name,
            "env_http_headers",
            notes,
        );
    }
    if let Some(var) = server.remove("bearer_token_env_var") {
        let var = var.as_str().unwrap_or("");
        if !is_var_name(var) {
            return Err("`bearer_token_env_var` must name an environment variable".into());
        }
        let value = format!("Bearer ${{{var}}}");
        set_header(
            &mut headers,
            "Authorization",
            value,
            name,
            "bearer_token_env_var",
            notes,
        );
    }
    if !headers.is_empty() {
        target.insert("headers".into(), Value::Object(headers));
    }
    let startup = match (
        server.remove("startup_timeout_sec"),
        server.remove("startup_timeout_ms"),
    ) {
        (Some(sec), _) => Some(seconds("startup_timeout_sec", &sec, 1.0)?),
        (None, Some(ms)) => Some(seconds("startup_timeout_ms", &ms, 1000.0)?),
        (None, None) => None,
    };
    if let Some(s) = startup {
        target.insert("startupTimeoutSec".into(), s);
    }
    if let Some(t) = server.remove("tool_timeout_sec") {
        target.insert(
            "toolTimeoutSec".into(),
            seconds("tool_timeout_sec", &t, 1.0)?,
        );
    }
    match server.remove("required") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => notes.push(format!(
            "server \"{name}\": `required` ignored (Codex stops when a required server fails; \
             mcp-harness reports the failure and goes on)"
        )),
        Some(_) => return Err("`required` must be true or false".into()),
    }
    Ok(target)
}

/// A table of strings, named `key` in errors (values never shown).
/// `value` as written: Codex expands no `${VAR}`, so a `${` in a Codex value is text (a
/// password may hold one) and is escaped as `$${` for our format, which expands them.
fn literal(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("${", "$${")),
        Value::Array(items) => Value::Array(items.into_iter().map(literal).collect()),
        other => other,
    }
}

/// [`literal`] for every value of `map`.
fn literal_map(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter().map(|(k, v)| (k, literal(v))).collect()
}

fn string_map(key: &str, value: Option<Value>) -> Result<Map<String, Value>, String> {
    match value {
        None => Ok(Map::new()),
        Some(Value::Object(map)) => {
            if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                return Err(format!("`{key}.{k}` must be a string"));
            }
            Ok(map)
        }
        Some(_) => Err(format!("`{key}` must be a table of strings")),
    }
}

fn check_type(key: &str, value: &Value) -> Result<(), String> {
    let ok = match key {
        "command" | "cwd" | "url" => value.is_string(),
        "enabled" => value.is_boolean(),
        _ => value
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string)),
    };
    if ok {
        Ok(())
    } else {
        let expected = match key {
            "command" | "cwd" | "url" => "a string",
            "enabled" => "true or false",
            _ => "a list of strings",
        };
        Err(format!("`{key}` must be {expected}"))
    }
}

/// A positive number of `unit`s per second, as seconds (a whole number when it is one).
fn seconds(key: &str, value: &Value, per_second: f64) -> Result<Value, String> {
    match value.as_f64().map(|v| v / per_second) {
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(if s.fract() == 0.0 {
            Value::from(s as u64)
        } else {
            Value::from(s)
        }),
        _ => Err(format!("`{key}` must be a positive number (at most a day)")),
    }
}

//! Property tests of the parsers that read outside input (issue 13): every host's config format
//! (mcp-harness, Claude Code, Claude Desktop, Cursor, VS Code, Gemini CLI, Codex TOML), `${VAR}`
//! expansion, and the tool-result normaliser. On any input none of them panics; a config either
//! parses or fails with an error that names its file; a normalised result keeps one block per
//! block the server sent and the server's `isError`.

use std::path::Path;

use crate::call::result::{ResultLimits, normalize};
use crate::config::sources;
use crate::config::{Config, expand};
use proptest::prelude::*;
use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

/// Strings with the characters config values and server answers trip on.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", "x", "${HOME}", "${MISSING}", "${MISSING:-dflt}", "${", "${env:HOME}", "${input:tok}",
            "${workspaceFolder}", "${userHome}", "${PLUGIN_ROOT}/bin", "$$", "\\", "\"", "~/x",
            "http://127.0.0.1:1/mcp", "https://example.com/mcp?api_key=s3cret", "sse", "http", "stdio",
            "streamableHttp", "npx", "-y", "data:image/png;base64,AAAA", "image/png", "file:///tmp/x",
            "not a uri", "aGVsbG8=", "%%%", "\u{202e}", "\u{0}",
        ]).prop_map(str::to_owned),
        1 => prop::collection::vec(any::<char>(), 0..12).prop_map(|v| v.into_iter().collect()),
    ]
}

/// Keys of every host's server entries and top-level sections.
const KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "type",
    "url",
    "headers",
    "enabled",
    "startupTimeoutSec",
    "toolTimeoutSec",
    "includeTools",
    "excludeTools",
    "inheritEnv",
    "oauth",
    "names",
    "headersHelper",
    "envFile",
    "dev",
    "httpUrl",
    "timeout",
    "trust",
    "bearer_token_env_var",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "tool_timeout_sec",
    "enabled_tools",
    "disabled_tools",
    "http_headers",
    "env_http_headers",
    "env_vars",
    "scopes",
    "clientId",
    "grant",
    "permissions",
    "exposure",
    "output",
    "gateway",
    "metadataLimits",
    "allowedServers",
    "deniedServers",
    "remoteSources",
    "inputs",
    "servers",
    "mcpServers",
    "mcp",
    "mcp_servers",
    "id",
    "password",
    "allow",
    "deny",
    "ask",
    "maxTools",
    "toolSearch",
    "budgetTokens",
    "maxDescriptionChars",
    "trustReadOnlyHint",
];

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![Just(0i64), Just(-1), Just(30), Just(i64::MAX), any::<i64>()]
            .prop_map(|n| json!(n)),
        prop_oneof![Just(0.5f64), Just(1e300), Just(-0.0)].prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![4 => prop::sample::select(KEYS).prop_map(str::to_owned), 1 => text()], inner),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A config document shaped like one of the hosts' files: a servers section of entries with
/// known keys, and maybe other sections.
fn document() -> impl Strategy<Value = Value> {
    let entry = prop::collection::vec((prop::sample::select(KEYS), value()), 0..7)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    let servers = prop::collection::vec((text(), prop_oneof![4 => entry, 1 => value()]), 0..4)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()));
    (
        prop::sample::select(vec!["mcpServers", "servers", "mcp_servers", "mcp"]),
        servers,
        prop::collection::vec((prop::sample::select(KEYS), value()), 0..3),
    )
        .prop_map(|(section, servers, extra)| {
            let mut root: Map<String, Value> =
                extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            let servers = if section == "mcp" {
                json!({"servers": servers})
            } else {
                servers
            };
            root.insert(section.to_owned(), servers);
            Value::Object(root)
        })
}

/// A TOML rendering of a document's servers section, as Codex writes it (best effort: what
/// TOML cannot hold is left out or quoted).
fn toml_of(doc: &Value) -> String {
    fn scalar(v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(format!("{s:?}")),
            Value::Bool(b) => Some(b.to_string()),
            Value::Number(n) => Some(n.to_string()),
            Value::Array(a) => Some(format!(
                "[{}]",
                a.iter().filter_map(scalar).collect::<Vec<_>>().join(", ")
            )),
            Value::Object(o) => Some(format!(
                "{{ {} }}",
                o.iter()
                    .filter_map(|(k, v)| scalar(v).map(|v| format!("{k:?} = {v}")))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Value::Null => None,
        }
    }
    let mut out = String::new();
    let servers = doc
        .as_object()
        .and_then(|o| o.values().find_map(Value::as_object));
    for (name, entry) in servers.into_iter().flatten() {
        out.push_str(&format!("[mcp_servers.{name:?}]\n"));
        for (k, v) in entry.as_object().into_iter().flatten() {
            if let Some(v) = scalar(v) {
                out.push_str(&format!("{k:?} = {v}\n"));
            }
        }
    }
    out
}

/// The file names that select each host's format.
const PATHS: &[&str] = &[
    "/tmp/p/.mcp-harness.json",
    "/tmp/p/.mcp.json",
    "/tmp/p/.claude.json",
    "/tmp/p/claude_desktop_config.json",
    "/tmp/p/.cursor/mcp.json",
    "/tmp/p/.vscode/mcp.json",
    "/tmp/p/.vscode/settings.json",
    "/tmp/p/.gemini/settings.json",
    "/tmp/p/other.json",
    "/tmp/p/mcp-harness/config.json",
];

fn lookup(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/u".into()),
        "TOKEN" => Some("s3cret".into()),
        "MCP_INPUT_tok" => Some("typed".into()),
        _ => None,
    }
}

fn check_config(result: Result<Config, crate::config::ConfigError>) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        prop_assert!(!e.to_string().is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_host_format_parses_or_fails_cleanly(doc in document(), path in prop::sample::select(PATHS)) {
        let text = doc.to_string();
        let path = Path::new(path);
        let _ = sources::parse_any(&text, path, &lookup);
        let _ = sources::import_text(&text, path);
        check_config(Config::parse(&text, path, &lookup))?;
    }

    #[test]
    fn codex_toml_parses_or_fails_cleanly(doc in document()) {
        let text = toml_of(&doc);
        let path = Path::new("/tmp/p/.codex/config.toml");
        let _ = sources::parse_any(&text, path, &lookup);
        let _ = sources::import_text(&text, path);
    }

    #[test]
    fn arbitrary_text_never_panics(
        text in prop_oneof![
            prop::collection::vec(any::<char>(), 0..64).prop_map(|v| v.into_iter().collect::<String>()),
            document().prop_map(|d| {
                // A document cut short, or with a comment or trailing comma (JSONC).
                let s = d.to_string();
                let cut = s.len() / 2;
                let cut = (0..=cut).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
                format!("// c\n{},", &s[..cut])
            }),
        ],
        path in prop::sample::select(PATHS),
    ) {
        let path = Path::new(path);
        let _ = sources::parse_any(&text, path, &lookup);
        let _ = sources::parse_any(&text, Path::new("/tmp/p/config.toml"), &lookup);
        check_config(Config::parse(&text, path, &lookup))?;
    }

    #[test]
    fn expansion_never_panics(parts in prop::collection::vec(text(), 0..6)) {
        let input = parts.concat();
        let _ = expand(&input, &lookup);
    }
}

/// A content block, well-formed or not.
fn block() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "text",
            "image",
            "audio",
            "resource_link",
            "resource",
            "other",
        ]),
        text(),
        text(),
        value(),
    )
        .prop_map(|(kind, a, b, extra)| match kind {
            "text" => json!({"type": "text", "text": a}),
            "image" | "audio" => json!({"type": kind, "data": a, "mimeType": b}),
            "resource_link" => json!({"type": "resource_link", "uri": a, "name": b}),
            "resource" => json!({"type": "resource", "resource": {"uri": a, "text": b}}),
            _ => json!({"type": "text", "text": a, "annotations": extra}),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn normalised_results_keep_every_block_and_is_error(
        blocks in prop::collection::vec(block(), 0..6),
        structured in proptest::option::of(value()),
        is_error in proptest::option::of(any::<bool>()),
        schema in proptest::option::of(value()),
        max_media in 0usize..64,
    ) {
        let mut raw = json!({"content": blocks});
        if let Some(s) = structured {
            raw["structuredContent"] = s;
        }
        if let Some(e) = is_error {
            raw["isError"] = json!(e);
        }
        let Ok(result) = serde_json::from_value::<CallToolResult>(raw) else {
            return Ok(()); // not a result rmcp would hand us
        };
        let sent = result.content.len();
        let schema = schema.and_then(|s| s.as_object().cloned());
        let limits = ResultLimits { max_media_base64_chars: max_media, ..ResultLimits::default() };
        let normalized = normalize(result, schema.as_ref(), limits);
        prop_assert_eq!(normalized.content.len(), sent);
        prop_assert_eq!(normalized.is_error, is_error.unwrap_or(false));
        let _ = normalized.error_text();
    }
}

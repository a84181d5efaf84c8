//! Config sources: the config files of Claude Code, Claude Desktop, Cursor, VS Code, Codex and
//! Gemini CLI (real-looking samples under `tests/samples/`), their conversion to our format, and
//! the merge of user, project and dynamic sources (precedence, de-duplication, policy, disabled
//! servers). Secrets from the environment must appear in no error and no import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_harness_runtime::sources::{self, Format, Scope, Sources};
use mcp_harness_runtime::{Config, ServerConfig, TransportConfig};
use mcp_harness_transport::auth::OAuthConfig;

fn sample(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/samples")
        .join(relative)
}

/// The environment the samples are read with. Every secret contains `SECRET`.
fn env(name: &str) -> Option<String> {
    let value = match name {
        "HOME" => "/home/ada",
        "GITHUB_TOKEN" => "ghp_SECRET_github",
        "EVENTS_KEY" => "SECRET_events",
        "LINEAR_TOKEN" => "SECRET_linear",
        "DOCS_TOKEN" => "SECRET_docs",
        "MCP_INPUT_PERPLEXITY_KEY" => "pplx-SECRET",
        "CONTEXT7_API_KEY" => "SECRET_context7",
        "FIGMA_OAUTH_TOKEN" => "SECRET_figma",
        "FIGMA_TEAM_ID" => "team-SECRET",
        "DB_CONNECTION_STRING" => "postgres://SECRET@db/app",
        "EXTERNAL_API_KEY" => "SECRET_external",
        "API_TOKEN" => "SECRET_api",
        _ => return None,
    };
    Some(value.to_string())
}

fn load(relative: &str) -> (Config, Format) {
    match sources::load_any_with(&sample(relative), &env) {
        Ok(loaded) => loaded,
        Err(e) => panic!("{relative}: {e}"),
    }
}

fn parse_err(text: &str, path: &str) -> String {
    match sources::parse_any(text, Path::new(path), &env) {
        Ok((c, f)) => panic!(
            "{path}: expected an error, got {f:?} {:?}",
            c.servers.keys()
        ),
        Err(e) => e.to_string(),
    }
}

fn stdio(config: &Config, name: &str) -> mcp_harness_runtime::transport::StdioSpec {
    match &config.servers[name].transport {
        TransportConfig::Stdio(spec) => spec.clone(),
        other => panic!("{name}: expected stdio, got {other:?}"),
    }
}

fn http(config: &Config, name: &str) -> (String, BTreeMap<String, String>) {
    match &config.servers[name].transport {
        TransportConfig::StreamableHttp { url, headers, .. } => (url.clone(), headers.clone()),
        other => panic!("{name}: expected http, got {other:?}"),
    }
}

fn sse(config: &Config, name: &str) -> (String, BTreeMap<String, String>) {
    match &config.servers[name].transport {
        TransportConfig::LegacySse { url, headers } => (url.clone(), headers.clone()),
        other => panic!("{name}: expected sse, got {other:?}"),
    }
}

fn import_text(relative: &str) -> (String, Vec<String>) {
    match sources::import(&sample(relative)) {
        Ok(c) => (c.document.to_string(), c.notes),
        Err(e) => panic!("{relative}: {e}"),
    }
}

/// A server parsed from our own JSON (to add as a dynamic server).
fn server(name: &str, json: &str) -> ServerConfig {
    let text = format!(r#"{{"mcpServers": {{"{name}": {json}}}}}"#);
    match Config::parse(&text, Path::new("(test)"), &env) {
        Ok(mut c) => c.servers.remove(name).expect("the server"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn claude_code_mcp_json() {
    let (c, format) = load("claude-code/.mcp.json");
    assert_eq!(format, Format::ClaudeCode);
    let fs = stdio(&c, "filesystem");
    assert_eq!(fs.command, "npx");
    assert_eq!(fs.args[2], "/home/ada/projects");
    assert_eq!(fs.env["LOG_LEVEL"], "info", "${{VAR:-default}}");
    let (url, headers) = http(&c, "github");
    assert_eq!(url, "https://api.githubcopilot.com/mcp/");
    assert_eq!(headers["Authorization"], "Bearer ghp_SECRET_github");
    let (url, headers) = sse(&c, "events");
    assert_eq!(url, "https://events.example.com/sse");
    assert_eq!(headers["X-Api-Key"], "SECRET_events");
    assert!(http(&c, "sentry").1.is_empty());
    assert!(http(&c, "internal").1.is_empty());
    // Claude Code's pre-registered client is the default of `login`; its space-separated scopes
    // are our list; the keys the harness does not use are dropped with a note each.
    let TransportConfig::StreamableHttp { oauth, .. } = &c.servers["sentry"].transport else {
        panic!("sentry: http");
    };
    assert_eq!(
        oauth,
        &Some(OAuthConfig::AuthorizationCode {
            client_id: Some("sentry-client".into()),
            client_secret: None,
            client_metadata_url: None,
            scopes: vec!["org:read".into(), "event:read".into()],
        })
    );
    let (_, notes) = import_text("claude-code/.mcp.json");
    let notes = notes.join("\n");
    assert!(
        notes.contains("\"internal\": `headersHelper` ignored")
            && notes.contains("\"sentry\": `oauth.callbackPort` ignored")
            && notes.contains("\"sentry\": `oauth.authServerMetadataUrl` ignored")
            && !notes.contains("`oauth` ignored"),
        "{notes}"
    );
}

#[test]
fn claude_desktop_config() {
    let (c, format) = load("claude_desktop_config.json");
    assert_eq!(format, Format::ClaudeDesktop);
    assert_eq!(
        c.servers.keys().collect::<Vec<_>>(),
        ["brave-search", "memory", "sqlite"]
    );
    assert_eq!(
        stdio(&c, "brave-search").env["BRAVE_API_KEY"],
        "BSA-written-in-the-file"
    );
    assert_eq!(stdio(&c, "sqlite").args[2], "/home/ada/test.db");
    // A value written in the file (not from the environment) is kept as written.
    let (text, _) = import_text("claude_desktop_config.json");
    assert!(text.contains("BSA-written-in-the-file") && !text.contains("globalShortcut"));
}

/// What other hosts' editors (Cursor, Cline, Roo) write into these files: `disabled` is our
/// `enabled: false`, `autoApprove`/`alwaysAllow` are noted and dropped — neither makes the
/// whole file unreadable.
#[test]
fn other_hosts_disabled_and_auto_approve_keys_do_not_stop_the_file() {
    let desktop = r#"{"mcpServers": {
        "a": {"command": "x", "autoApprove": ["t"], "alwaysAllow": [], "disabled": true},
        "b": {"command": "y", "disabled": false}}}"#;
    let (c, format) = sources::parse_any(desktop, Path::new("/h/claude_desktop_config.json"), &env)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(format, Format::ClaudeDesktop);
    assert!(!c.servers["a"].enabled);
    assert!(c.servers["b"].enabled);
    let cursor = r#"{"mcpServers": {"c": {"command": "x", "disabled": true}}}"#;
    let (c, format) = sources::parse_any(cursor, Path::new("/p/.cursor/mcp.json"), &env)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(format, Format::Cursor);
    assert!(!c.servers["c"].enabled);
}

#[test]
fn cursor_mcp_json_with_editor_variables_and_comments() {
    let (c, format) = load("cursor/.cursor/mcp.json");
    assert_eq!(format, Format::Cursor);
    let (url, headers) = http(&c, "linear");
    assert_eq!(url, "https://mcp.linear.app/mcp");
    assert_eq!(headers["Authorization"], "Bearer SECRET_linear");
    let docs = stdio(&c, "local-docs");
    let root = std::path::absolute(sample("cursor")).expect("absolute");
    assert_eq!(
        docs.args,
        [
            format!("{}/tools/docs-server.js", root.display()),
            "--home".into(),
            "/home/ada".into()
        ]
    );
    assert_eq!(docs.env["DOCS_TOKEN"], "SECRET_docs");
    assert_eq!(sse(&c, "partner").0, "https://partner.example.com/sse");
    let (text, notes) = import_text("cursor/.cursor/mcp.json");
    assert!(
        text.contains("Bearer ${LINEAR_TOKEN}") && text.contains("${HOME}"),
        "{text}"
    );
    let notes = notes.join("\n");
    assert!(
        notes.contains("`envFile` ignored") && notes.contains("`auth` ignored"),
        "{notes}"
    );
}

#[test]
fn vscode_mcp_json_with_inputs_from_the_environment() {
    let (c, format) = load("vscode/.vscode/mcp.json");
    assert_eq!(format, Format::VsCode);
    assert_eq!(
        stdio(&c, "perplexity").env["PERPLEXITY_API_KEY"],
        "pplx-SECRET"
    );
    assert_eq!(
        http(&c, "github").1["Authorization"],
        "Bearer ghp_SECRET_github"
    );
    let fetch = stdio(&c, "fetch");
    let root = std::path::absolute(sample("vscode")).expect("absolute");
    assert_eq!(fetch.cwd.as_deref(), Some(root.as_path()));
    assert_eq!(sse(&c, "events").0, "http://localhost:3001/sse");

    let (text, notes) = import_text("vscode/.vscode/mcp.json");
    assert!(text.contains("${MCP_INPUT_PERPLEXITY_KEY}"), "{text}");
    let notes = notes.join("\n");
    assert!(
        notes.contains("MCP_INPUT_PERPLEXITY_KEY")
            && notes.contains("`envFile` ignored")
            && notes.contains("`dev` ignored"),
        "{notes}"
    );

    // Without the variable: that server is unusable (kept disabled, failed at start) with an
    // error naming the input, its description and the variable; the others load.
    let no_input = |name: &str| env(name).filter(|_| name != "MCP_INPUT_PERPLEXITY_KEY");
    let (c, _) = sources::load_any_with(&sample("vscode/.vscode/mcp.json"), &no_input)
        .expect("one server's input has no value: the others still load");
    assert!(c.servers["github"].enabled && c.servers["github"].unusable.is_none());
    assert!(!c.servers["perplexity"].enabled);
    let err = c.servers["perplexity"]
        .unusable
        .clone()
        .expect("the server is unusable");
    assert!(
        err.contains("vscode/.vscode/mcp.json")
            && err.contains("\"perplexity\"")
            && err.contains("input \"perplexity-key\"")
            && err.contains("Perplexity API Key")
            && err.contains("MCP_INPUT_PERPLEXITY_KEY"),
        "{err}"
    );
    assert!(!err.contains("SECRET"), "{err}");

    // Two inputs whose ids map to one variable would share one value: refused, both named.
    let err = parse_err(
        r#"{"inputs": [{"id": "api-key", "type": "promptString", "password": true},
                       {"id": "api_key", "type": "promptString"}],
            "servers": {"a": {"command": "x", "env": {"K": "${input:api_key}"}}}}"#,
        "/p/.vscode/mcp.json",
    );
    assert!(
        err.contains("\"api-key\" and \"api_key\"") && err.contains("MCP_INPUT_API_KEY"),
        "{err}"
    );

    // With a prompt (the CLI asks on the terminal): asked once, with what the config says
    // about the input, and the answer expands the config.
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    let prompt: sources::InputPrompt = sources::remembering(std::sync::Arc::new(
        move |request: &sources::InputRequest| {
            log.lock().unwrap().push(request.clone());
            Some("typed-by-the-user".to_string())
        },
    ));
    for _ in 0..2 {
        let (c, _) =
            sources::load_any_asking(&sample("vscode/.vscode/mcp.json"), &no_input, &prompt)
                .expect("the prompt answers");
        let TransportConfig::Stdio(spec) = &c.servers["perplexity"].transport else {
            panic!("stdio");
        };
        assert_eq!(spec.env["PERPLEXITY_API_KEY"], "typed-by-the-user");
    }
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "remembered: {asked:?}");
    assert_eq!(asked[0].server, "perplexity");
    assert_eq!(asked[0].id, "perplexity-key");
    assert_eq!(asked[0].description.as_deref(), Some("Perplexity API Key"));
    assert!(asked[0].password);
    assert_eq!(asked[0].variable, "MCP_INPUT_PERPLEXITY_KEY");
    // An unanswered input in a URL's host: that server is unusable, the file still loads.
    let (c, _) = sources::parse_any(
        r#"{"inputs": [{"id": "host", "type": "promptString"}],
            "servers": {"h": {"type": "http", "url": "https://${input:host}/mcp"},
                        "ok": {"command": "x"}}}"#,
        Path::new("/p/.vscode/mcp.json"),
        &|_: &str| None,
    )
    .expect("the others load");
    assert!(c.servers["ok"].enabled);
    let why = c.servers["h"].unusable.clone().unwrap_or_default();
    assert!(
        why.contains("VS Code input \"host\"") && why.contains("MCP_INPUT_HOST"),
        "{why}"
    );
    // A prompt without an answer (no terminal): that server unusable, as without a prompt.
    let silent: sources::InputPrompt = std::sync::Arc::new(|_: &sources::InputRequest| None);
    let (c, _) = sources::load_any_asking(&sample("vscode/.vscode/mcp.json"), &no_input, &silent)
        .expect("the others load");
    let err = c.servers["perplexity"].unusable.clone().unwrap_or_default();
    assert!(err.contains("MCP_INPUT_PERPLEXITY_KEY"), "{err}");
}

#[test]
fn codex_config_toml_every_key() {
    let (c, format) = load("codex/config.toml");
    assert_eq!(format, Format::Codex);
    assert_eq!(
        c.servers.keys().collect::<Vec<_>>(),
        ["context7", "figma", "old"]
    );
    let ctx = &c.servers["context7"];
    let spec = stdio(&c, "context7");
    assert_eq!(spec.args, ["-y", "@upstash/context7-mcp"]);
    assert_eq!(spec.env["LOG_LEVEL"], "debug");
    assert_eq!(
        spec.env["PASSWORD"], "pa${x}word",
        "Codex expands nothing: a `${{` is text"
    );
    assert_eq!(spec.env["CONTEXT7_API_KEY"], "SECRET_context7", "env_vars");
    assert_eq!(spec.cwd.as_deref(), Some(Path::new("/srv/context7")));
    assert_eq!(ctx.startup_timeout, Duration::from_secs(20));
    assert_eq!(ctx.tool_timeout, Duration::from_millis(60_500));
    assert_eq!(
        ctx.include_tools.as_deref(),
        Some(
            &[
                "resolve-library-id".to_string(),
                "get-library-docs".to_string()
            ][..]
        )
    );
    let figma = &c.servers["figma"];
    let (url, headers) = http(&c, "figma");
    assert_eq!(url, "https://mcp.figma.com/mcp");
    assert_eq!(headers["Authorization"], "Bearer SECRET_figma");
    assert_eq!(headers["X-Figma-Region"], "us-east-1");
    assert_eq!(headers["X-Team-Id"], "team-SECRET");
    assert_eq!(figma.exclude_tools, ["delete_file"]);
    assert_eq!(
        figma.startup_timeout,
        Duration::from_secs(15),
        "startup_timeout_ms"
    );
    assert!(!c.servers["old"].enabled);

    let (text, notes) = import_text("codex/config.toml");
    assert!(
        text.contains("Bearer ${FIGMA_OAUTH_TOKEN}")
            && text.contains("${FIGMA_TEAM_ID}")
            && text.contains("${CONTEXT7_API_KEY:-}")
            && text.contains("pa$${x}word"),
        "{text}"
    );
    let notes = notes.join("\n");
    for key in ["required", "scopes", "tools"] {
        assert!(
            notes.contains(&format!("`{key}` ignored")),
            "{key}: {notes}"
        );
    }

    // env_vars passes an unset variable through as empty, as Codex passes nothing.
    let unset = |name: &str| env(name).filter(|_| name != "CONTEXT7_API_KEY");
    let (c, _) = sources::load_any_with(&sample("codex/config.toml"), &unset).expect("loads");
    assert_eq!(stdio(&c, "context7").env["CONTEXT7_API_KEY"], "");
}

#[test]
fn gemini_settings_json_every_key() {
    let (c, format) = load("gemini/.gemini/settings.json");
    assert_eq!(format, Format::Gemini);
    let py = &c.servers["pythonTools"];
    let spec = stdio(&c, "pythonTools");
    assert_eq!(spec.env["DATABASE_URL"], "postgres://SECRET@db/app", "$VAR");
    assert_eq!(spec.env["API_KEY"], "SECRET_external", "${{VAR}}");
    assert_eq!(spec.cwd.as_deref(), Some(Path::new("./mcp-servers/python")));
    assert_eq!(py.tool_timeout, Duration::from_secs(15), "timeout in ms");
    assert_eq!(
        py.include_tools.as_deref(),
        Some(&["query".to_string(), "schema".to_string()][..])
    );
    let (url, headers) = http(&c, "httpServer");
    assert_eq!(url, "http://localhost:3000/mcp");
    assert_eq!(headers["Authorization"], "Bearer SECRET_api");
    assert_eq!(c.servers["httpServer"].tool_timeout, Duration::from_secs(5));
    assert_eq!(c.servers["httpServer"].exclude_tools, ["drop_table"]);
    assert_eq!(
        sse(&c, "sseServer").0,
        "http://localhost:8080/sse",
        "url is SSE"
    );
    assert_eq!(http(&c, "typedHttp").0, "https://mcp.example.com/mcp");
    assert!(!c.servers["experimental"].enabled, "mcp.excluded");
    assert!(c.servers["pythonTools"].enabled);

    let (text, notes) = import_text("gemini/.gemini/settings.json");
    assert!(text.contains("${DB_CONNECTION_STRING}") && !text.contains("theme"));
    let notes = notes.join("\n");
    for key in ["trust", "description", "oauth"] {
        assert!(
            notes.contains(&format!("`{key}` ignored")),
            "{key}: {notes}"
        );
    }
}

#[test]
fn our_own_format() {
    let (c, format) = load("harness/.mcp-harness.json");
    assert_eq!(format, Format::Harness);
    let fs = &c.servers["fs"];
    assert_eq!(stdio(&c, "fs").args[2], "/home/ada");
    assert_eq!(fs.startup_timeout, Duration::from_secs(10));
    assert_eq!(fs.tool_timeout, Duration::from_secs(20));
    assert_eq!(fs.exclude_tools, ["write_file"]);
    assert_eq!(c.exposure.max_tools, 10);
}

#[test]
fn formats_are_detected_by_name_folder_and_shape() {
    let detect = |path: &str, json: serde_json::Value| Format::detect(Path::new(path), &json);
    let any = serde_json::json!({});
    for (path, format) in [
        ("/a/claude_desktop_config.json", Format::ClaudeDesktop),
        ("/a/.mcp.json", Format::ClaudeCode),
        ("/home/u/.claude.json", Format::ClaudeCode),
        ("/a/.mcp-harness.json", Format::Harness),
        ("/home/u/.config/mcp-harness/config.json", Format::Harness),
        ("/a/.cursor/mcp.json", Format::Cursor),
        ("/a/.vscode/mcp.json", Format::VsCode),
        ("/a/.gemini/settings.json", Format::Gemini),
        ("/a/.codex/config.toml", Format::Codex),
    ] {
        assert_eq!(detect(path, any.clone()).ok(), Some(format), "{path}");
    }
    let shape = |json| detect("/a/servers.json", json).ok();
    assert_eq!(
        shape(serde_json::json!({"servers": {}})),
        Some(Format::VsCode)
    );
    assert_eq!(
        shape(serde_json::json!({"mcpServers": {"a": {"httpUrl": "x"}}})),
        Some(Format::Gemini)
    );
    assert_eq!(
        shape(serde_json::json!({"mcpServers": {"a": {"headersHelper": "x"}}})),
        Some(Format::ClaudeCode)
    );
    assert_eq!(
        shape(serde_json::json!({"mcpServers": {"a": {"command": "x"}}})),
        Some(Format::Harness)
    );
    // An `oauth` is Claude Code's only with a key or a shape of Claude Code's: ours (a grant,
    // a list of scopes) or one with only `clientId` is read in our format, all of it kept.
    for (oauth, format) in [
        (
            serde_json::json!({"clientId": "c", "callbackPort": 8080}),
            Format::ClaudeCode,
        ),
        (
            serde_json::json!({"authServerMetadataUrl": "https://a"}),
            Format::ClaudeCode,
        ),
        (serde_json::json!({"scopes": "a b"}), Format::ClaudeCode),
        (serde_json::json!({"clientId": "c"}), Format::Harness),
        (serde_json::json!({"scopes": ["a"]}), Format::Harness),
        (
            serde_json::json!({"grant": "client_credentials", "clientId": "c"}),
            Format::Harness,
        ),
    ] {
        let server = serde_json::json!({"mcpServers": {"a": {"url": "https://x", "oauth": oauth}}});
        assert_eq!(shape(server), Some(format), "{oauth}");
    }
    assert_eq!(
        detect(
            "/a/settings.json",
            serde_json::json!({"mcp": {"servers": {}}})
        )
        .ok(),
        Some(Format::VsCode)
    );
    let err = detect("/a/x.json", serde_json::json!({"tools": []}))
        .expect_err("unknown shape")
        .to_string();
    assert!(
        err.contains("/a/x.json") && err.contains("mcpServers"),
        "{err}"
    );
    // A file named for no host is read by its shape.
    let (c, format) = load("generic/servers.json");
    assert_eq!(format, Format::Gemini);
    assert_eq!(c.servers["search"].tool_timeout, Duration::from_secs(30));
}

#[test]
fn unknown_keys_name_the_file_server_and_key() {
    for (path, text) in [
        (
            "/p/.mcp.json",
            r#"{"mcpServers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
        (
            "/p/claude_desktop_config.json",
            r#"{"mcpServers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
        (
            "/p/.cursor/mcp.json",
            r#"{"mcpServers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
        (
            "/p/.vscode/mcp.json",
            r#"{"servers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.fs]\ncommand = \"x\"\ncomand = \"y\"\n",
        ),
        (
            "/p/.gemini/settings.json",
            r#"{"mcpServers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
        (
            "/p/.mcp-harness.json",
            r#"{"mcpServers": {"fs": {"command": "x", "comand": "y"}}}"#,
        ),
    ] {
        let err = parse_err(text, path);
        assert!(
            err.contains(path) && err.contains("\"fs\"") && err.contains("comand"),
            "{path}: {err}"
        );
    }
    // Top-level keys of files that are only MCP config.
    for (path, text, key) in [
        (
            "/p/.vscode/mcp.json",
            r#"{"servers": {}, "sevrers": {}}"#,
            "sevrers",
        ),
        (
            "/p/.cursor/mcp.json",
            r#"{"mcpServers": {}, "x": 1}"#,
            "`x`",
        ),
        ("/p/.mcp.json", r#"{"servers": {}}"#, "servers"),
    ] {
        let err = parse_err(text, path);
        assert!(err.contains(path) && err.contains(key), "{path}: {err}");
    }
    // Host settings files: their own settings are not ours to judge.
    assert!(
        sources::parse_any(
            r#"{"theme": "x", "mcpServers": {}}"#,
            Path::new("/p/.gemini/settings.json"),
            &env
        )
        .is_ok()
    );
}

#[test]
fn host_specific_mistakes_are_explained() {
    for (path, text, needle) in [
        (
            "/p/.codex/config.toml",
            "[mcp_servers.a]\nurl = \"https://h\"\nbearer_token = \"tok-SECRET-inline\"\n",
            "bearer_token_env_var",
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.a]\ncommand = \"x\"\nbearer_token_env_var = \"T\"\n",
            "`url` servers only",
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.a]\nurl = \"https://h\"\nenv_http_headers = { X = \"not a var\" }\n",
            "env_http_headers.X",
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_sec = -1\n",
            "tool_timeout_sec",
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.a]\ncommand = \"x\"\nargs = \"-y\"\n",
            "`args` must be a list",
        ),
        ("/p/.codex/config.toml", "[mcp_servers.a\n", "line 1"),
        (
            "/p/.codex/config.toml",
            "model = \"m\"\n[mcp_servers.a]\ncommand = \"x\"\nargs = [\"tok-SECRET\"\n",
            "not valid TOML",
        ),
        (
            "/p/.gemini/settings.json",
            r#"{"mcpServers": {"a": {"tcp": "ws://h"}}}"#,
            "WebSocket",
        ),
        (
            "/p/.gemini/settings.json",
            r#"{"mcpServers": {"a": {"command": "x", "timeout": -5}}}"#,
            "milliseconds",
        ),
        (
            "/p/.gemini/settings.json",
            r#"{"mcpServers": {"a": {"httpUrl": "https://h", "url": "https://h"}}}"#,
            "not both",
        ),
        (
            "/p/.vscode/mcp.json",
            r#"{"servers": {"a": {"command": "x", "args": ["${command:pick}"]}}}"#,
            "not supported",
        ),
        (
            "/p/.cursor/mcp.json",
            r#"{"mcpServers": {"a": {"command": "x", "env": {"K": "${input:k}"}}}}"#,
            "VS Code variable",
        ),
        ("/p/.vscode/mcp.json", "{\"servers\": {", "not valid JSON"),
    ] {
        let err = parse_err(text, path);
        assert!(
            err.contains(path) && err.contains(needle) && !err.contains("SECRET"),
            "{path}: {err}"
        );
    }
    // A variable not set fails only the server that needs it, saying which and where.
    let text =
        r#"{"mcpServers": {"a": {"command": "${NOT_SET_ANYWHERE}"}, "b": {"command": "x"}}}"#;
    let (c, _) = sources::parse_any(text, Path::new("/p/.mcp.json"), &env).expect("kept");
    let why = c.servers["a"].unusable.clone().unwrap_or_default();
    assert!(
        why.contains("/p/.mcp.json") && why.contains("NOT_SET_ANYWHERE") && !c.servers["a"].enabled,
        "{why}"
    );
    assert!(c.servers["b"].enabled && c.servers["b"].unusable.is_none());
}

#[test]
fn secrets_from_the_environment_never_reach_errors_or_imports() {
    // A server whose references resolve to secrets, next to a server with a mistake.
    for (path, text) in [
        (
            "/p/.mcp.json",
            r#"{"mcpServers": {"ok": {"type": "http", "url": "https://h", "headers": {"A": "${GITHUB_TOKEN}"}},
                "bad": {"type": "http", "url": "https://h?k=${GITHUB_TOKEN}", "headers": {"A": "${GITHUB_TOKEN}"}, "toolTimeoutSec": "x"}}}"#,
        ),
        (
            "/p/.codex/config.toml",
            "[mcp_servers.bad]\nurl = \"https://h\"\nbearer_token_env_var = \"FIGMA_OAUTH_TOKEN\"\ncwd = \"/x\"\n",
        ),
        (
            "/p/.gemini/settings.json",
            r#"{"mcpServers": {"bad": {"httpUrl": "https://h", "headers": {"A": "$API_TOKEN"}, "env": {"B": "$API_TOKEN"}}}}"#,
        ),
    ] {
        let err = parse_err(text, path);
        assert!(
            err.contains("\"bad\"") && !err.contains("SECRET"),
            "{path}: {err}"
        );
    }
    for relative in [
        "claude-code/.mcp.json",
        "claude_desktop_config.json",
        "cursor/.cursor/mcp.json",
        "vscode/.vscode/mcp.json",
        "codex/config.toml",
        "gemini/.gemini/settings.json",
        "harness/.mcp-harness.json",
        "xdg/mcp-harness/config.json",
    ] {
        let (text, notes) = import_text(relative);
        assert!(!text.contains("SECRET"), "{relative}: {text}");
        assert!(!notes.join("\n").contains("SECRET"), "{relative}");
        // The import is itself a valid config in our format.
        let (c, format) = sources::parse_any(&text, Path::new("/out/.mcp-harness.json"), &env)
            .unwrap_or_else(|e| panic!("{relative}: the import does not load: {e}"));
        assert_eq!(format, Format::Harness);
        let (original, _) = load(relative);
        assert_eq!(
            c.servers, original.servers,
            "{relative}: the import loads as the original"
        );
    }
}

/// The samples' user (XDG) config and project folder, the project trusted like the user's own
/// (project trust has its own tests, `project_trust.rs`).
fn sample_sources() -> Sources {
    let xdg = sample("xdg").display().to_string();
    Sources::new()
        .trust_project_files()
        .with_project_dir(Some(sample("project")))
        .with_env(move |name| {
            if name == "XDG_CONFIG_HOME" {
                Some(xdg.clone())
            } else {
                env(name)
            }
        })
}

#[test]
fn sources_merge_with_precedence_dedupe_policy_and_disabled_servers() {
    let mut sources = sample_sources();
    let files: Vec<Scope> = sources.files().iter().map(|(s, _)| *s).collect();
    assert_eq!(
        files,
        [
            Scope::User,
            Scope::ProjectMcpJson,
            Scope::ProjectHarnessJson
        ]
    );
    sources.add_dynamic(server(
        "db",
        r#"{"command": "db-mcp", "args": ["--dynamic"]}"#,
    ));
    sources.add_dynamic(server("evil-bot", r#"{"command": "bot"}"#));
    let merged = sources.merge().expect("merges");

    let names: Vec<&String> = merged.config.servers.keys().collect();
    assert_eq!(names, ["db", "docs", "gh", "notes", "notes-copy"]);
    let origin = |name: &str| merged.origins[name].clone();
    assert_eq!(origin("db").scope, Scope::Dynamic);
    assert_eq!(origin("db").path, None);
    assert_eq!(stdio(&merged.config, "db").args, ["--dynamic"]);
    assert_eq!(origin("docs").scope, Scope::ProjectHarnessJson);
    assert_eq!(origin("docs").format, Format::Harness);
    assert_eq!(origin("gh").scope, Scope::ProjectMcpJson);
    assert_eq!(origin("gh").format, Format::ClaudeCode);
    assert_eq!(
        origin("notes").path,
        Some(sample("xdg/mcp-harness/config.json"))
    );

    // Disabled servers stay, marked, and are split off from the ones to connect.
    let disabled: Vec<&str> = merged.disabled().map(|s| s.name.as_str()).collect();
    assert_eq!(disabled, ["notes"]);
    assert_eq!(merged.enabled().count(), 4);

    let dropped = |name: &str| -> Vec<String> {
        merged
            .dropped
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
            .collect()
    };
    // Same name: the later source replaces the earlier wholesale.
    let db = dropped("db");
    assert_eq!(db.len(), 2, "{db:?}");
    assert!(db[0].contains("project/.mcp.json") && db[0].contains("project/.mcp-harness.json"));
    assert!(db[1].contains("(dynamic)"));
    // Policy: deny globs from the user config, applied to dynamic servers too.
    for name in ["scratch", "evil-miner", "evil-bot"] {
        let why = dropped(name);
        assert!(
            why.len() == 1 && why[0].contains("deniedServers"),
            "{name}: {why:?}"
        );
    }
    // Same content: the higher-precedence one wins (URL with or without a trailing slash).
    let github = dropped("github");
    assert!(
        github.len() == 1 && github[0].contains("same URL") && github[0].contains("\"gh\""),
        "{github:?}"
    );
    let memory = dropped("memory");
    assert_eq!(memory.len(), 2, "{memory:?}");
    assert!(memory[0].contains("replaced"), "{memory:?}");
    assert!(
        memory[1].contains("same command, args, env and cwd") && memory[1].contains("\"docs\""),
        "{memory:?}"
    );
    assert_eq!(merged.dropped.len(), 8, "{:#?}", merged.dropped);
    assert!(
        !merged
            .dropped
            .iter()
            .any(|(_, r)| r.contains("SECRET") || r.contains("--read")),
        "reasons name servers and files, not values"
    );

    // Sections: the highest file that has one wins; permission lists add up.
    assert_eq!(merged.config.exposure.max_tools, 20);
    assert_eq!(merged.config.output.page_chars, 4000);
    assert_eq!(merged.config.permissions.rules().len(), 2);
    assert_eq!(merged.files.len(), 3);
    assert_eq!(
        merged.config.source,
        Some(sample("project/.mcp-harness.json"))
    );
}

/// A fresh folder under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    mcp_harness_fixture::scratch::dir(&format!("sources-{tag}"))
}

#[test]
fn allow_lists_and_deny_wins() {
    let dir = temp_dir("policy");
    let user = dir.join("user.json");
    std::fs::write(
        &user,
        r#"{"allowedServers": ["git*", "docs"], "deniedServers": ["gitlab"],
            "mcpServers": {"github": {"command": "gh"}, "gitlab": {"command": "gl"},
                           "docs": {"command": "d"}, "other": {"command": "o"}}}"#,
    )
    .expect("write");
    let merged = Sources::new()
        .with_user_file(Some(user.clone()))
        .with_project_dir(None)
        .with_env(env)
        .merge()
        .expect("merges");
    assert_eq!(
        merged.config.servers.keys().collect::<Vec<_>>(),
        ["docs", "github"]
    );
    let reasons: BTreeMap<_, _> = merged.dropped.iter().cloned().collect();
    assert!(reasons["gitlab"].contains("deniedServers"), "{reasons:?}");
    assert!(reasons["other"].contains("allowedServers"), "{reasons:?}");

    // `--config` reads only that file, and applies its policy.
    let (c, _) = sources::load_any_with(&user, &env).expect("loads");
    assert_eq!(c.servers.keys().collect::<Vec<_>>(), ["docs", "github"]);

    // A project file cannot set the policy (trusted, it is refused; untrusted, it is ignored
    // whole: see project_trust.rs).
    std::fs::write(
        dir.join(".mcp-harness.json"),
        r#"{"deniedServers": ["*"], "mcpServers": {}}"#,
    )
    .expect("write");
    let err = Sources::new()
        .with_user_file(Some(user))
        .with_project_dir(Some(dir.clone()))
        .with_env(env)
        .trust_project_files()
        .merge()
        .expect_err("policy in a project file")
        .to_string();
    assert!(
        err.contains(".mcp-harness.json") && err.contains("user config"),
        "{err}"
    );
    let err = parse_err(
        r#"{"deniedServers": "x"}"#,
        "/home/u/.config/mcp-harness/config.json",
    );
    assert!(
        err.contains("deniedServers") && err.contains("list"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_user_config_follows_xdg() {
    let look = |xdg: Option<&'static str>, home: Option<&'static str>| {
        sources::user_config_path(&move |name| match name {
            "XDG_CONFIG_HOME" => xdg.map(str::to_string),
            "HOME" => home.map(str::to_string),
            _ => None,
        })
    };
    assert_eq!(
        look(Some("/x/cfg"), Some("/home/u")),
        Some(PathBuf::from("/x/cfg/mcp-harness/config.json"))
    );
    assert_eq!(
        look(Some("relative"), Some("/home/u")),
        Some(PathBuf::from("/home/u/.config/mcp-harness/config.json"))
    );
    assert_eq!(look(None, None), None);
    // No files and no dynamic servers: an empty merge.
    let merged = Sources::new()
        .with_user_file(None)
        .with_project_dir(Some(temp_dir("empty")))
        .merge()
        .expect("merges");
    assert!(merged.config.servers.is_empty() && merged.files.is_empty());
}

#[test]
fn a_broken_source_names_its_file() {
    let dir = temp_dir("broken");
    std::fs::write(
        dir.join(".mcp.json"),
        r#"{"mcpServers": {"a": {"command": "x", "bogus": true}}}"#,
    )
    .expect("write");
    let err = Sources::new()
        .with_user_file(None)
        .with_project_dir(Some(dir.clone()))
        .with_env(env)
        .trust_project_files()
        .merge()
        .expect_err("broken")
        .to_string();
    assert!(
        err.contains(".mcp.json") && err.contains("\"a\"") && err.contains("bogus"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn policy_globs() {
    let policy = sources::Policy {
        allowed: Some(vec![
            "git*".into(),
            "g?t".into(),
            "*-prod".into(),
            "a*b*c".into(),
        ]),
        denied: vec!["gitlab".into()],
    };
    for name in ["github", "git", "gat", "db-prod", "aXXbYYc"] {
        assert_eq!(policy.refusal(name), None, "{name}");
    }
    for name in ["agit", "gt", "db-prod2", "gitlab", "abX"] {
        assert!(policy.refusal(name).is_some(), "{name}");
    }
    assert_eq!(sources::Policy::default().refusal("anything"), None);
}

#[test]
fn variables_comments_and_literal_dollars() {
    // VS Code / Cursor variables, JSON comments and trailing commas outside strings only.
    let text = r#"{
        // comment
        "servers": {"a": {"command": "x", /* c */ "args": [
            "${userHome}/x", "${env:HOME}", "${pathSeparator}", "${HOME:-h}", "q\"//", "/* k */",
        ]}},
    }"#;
    let (c, _) = sources::parse_any(text, Path::new("/w/p/.vscode/mcp.json"), &env).expect("ok");
    assert_eq!(
        stdio(&c, "a").args,
        [
            "/home/ada/x",
            "/home/ada",
            "/",
            "/home/ada",
            "q\"//",
            "/* k */"
        ]
    );
    // Gemini: `$VAR` and `${VAR}`; a `$` before anything else is literal.
    let text =
        r#"{"mcpServers": {"a": {"command": "x", "args": ["$HOME/a", "${HOME}", "a$ b$1", "$"]}}}"#;
    let (c, _) = sources::parse_any(text, Path::new("/p/.gemini/settings.json"), &env).expect("ok");
    assert_eq!(
        stdio(&c, "a").args,
        ["/home/ada/a", "/home/ada", "a$ b$1", "$"]
    );
}

#[test]
fn duplicates_need_the_same_content_and_disabled_ones_are_not_duplicates() {
    let dir = temp_dir("dedupe");
    std::fs::write(
        dir.join(".mcp.json"),
        r#"{"mcpServers": {
            "a": {"command": "srv", "args": ["."], "cwd": "/one"},
            "b": {"command": "srv", "args": ["."], "cwd": "/two"},
            "c": {"command": "srv", "args": ["."], "cwd": "/two", "env": {"K": "1"}},
            "d": {"command": "srv", "args": ["."], "cwd": "/two", "enabled": false},
            "e": {"url": "https://h/mcp/"},
            "f": {"type": "sse", "url": "https://h/mcp"}
        }}"#,
    )
    .expect("write");
    let merged = Sources::new()
        .trust_project_files()
        .with_user_file(None)
        .with_project_dir(Some(dir.clone()))
        .with_env(env)
        .merge()
        .expect("merges");
    assert_eq!(
        merged.config.servers.keys().collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(merged.dropped.len(), 1, "{:?}", merged.dropped);
    assert!(merged.dropped[0].0 == "f" && merged.dropped[0].1.contains("\"e\""));
    let _ = std::fs::remove_dir_all(dir);
}

/// Plugin folders beside the user config: each folder's `.mcp.json` adds servers, below the
/// user config in precedence, with `${PLUGIN_ROOT}` (or Claude Code's `${CLAUDE_PLUGIN_ROOT}`)
/// naming the folder; a plugin cannot set managed settings (the key is an error naming the
/// file); a folder without `.mcp.json` adds nothing.
#[test]
fn plugin_folders_add_servers_below_the_user_config() {
    let dir = temp_dir("plugins");
    let user = dir.join("config.json");
    std::fs::write(
        &user,
        r#"{"mcpServers": {"shared": {"command": "user-wins"}}}"#,
    )
    .expect("write");
    let plugin = |name: &str, text: &str| {
        let folder = dir.join("plugins").join(name);
        std::fs::create_dir_all(&folder).expect("plugin dir");
        std::fs::write(folder.join(".mcp.json"), text).expect("write");
        folder
    };
    let alpha = plugin(
        "alpha",
        r#"{"mcpServers": {"alpha-tools": {"command": "${PLUGIN_ROOT}/bin/serve", "args": ["--root", "${CLAUDE_PLUGIN_ROOT}"]},
                           "shared": {"command": "plugin-loses"}}}"#,
    );
    plugin(
        "beta",
        r#"{"mcpServers": {"beta-web": {"type": "http", "url": "https://beta.example/mcp"}}}"#,
    );
    std::fs::create_dir_all(dir.join("plugins").join("empty")).expect("empty plugin");
    let sources = Sources::new()
        .with_user_file(Some(user.clone()))
        .with_project_dir(None)
        .with_env(env);
    assert_eq!(sources.plugins_dir(), Some(dir.join("plugins")));
    let scopes: Vec<Scope> = sources.files().iter().map(|(s, _)| *s).collect();
    assert_eq!(
        scopes,
        [Scope::Plugin, Scope::Plugin, Scope::Plugin, Scope::User],
        "plugin folders in name order, then the user config"
    );
    let merged = sources.merge().expect("merges");
    assert_eq!(
        merged.config.servers.keys().collect::<Vec<_>>(),
        ["alpha-tools", "beta-web", "shared"]
    );
    let TransportConfig::Stdio(spec) = &merged.config.servers["alpha-tools"].transport else {
        panic!("stdio");
    };
    assert_eq!(spec.command, format!("{}/bin/serve", alpha.display()));
    assert_eq!(
        spec.args,
        ["--root".to_string(), alpha.display().to_string()]
    );
    let TransportConfig::Stdio(spec) = &merged.config.servers["shared"].transport else {
        panic!("stdio");
    };
    assert_eq!(spec.command, "user-wins");
    assert_eq!(merged.origins["beta-web"].scope, Scope::Plugin);
    assert_eq!(merged.origins["shared"].scope, Scope::User);
    assert!(
        merged
            .dropped
            .iter()
            .any(|(n, r)| n == "shared" && r.contains("plugins/alpha/.mcp.json")),
        "{:?}",
        merged.dropped
    );

    plugin("gamma", r#"{"deniedServers": ["*"], "mcpServers": {}}"#);
    let err = sources
        .merge()
        .expect_err("managed setting in a plugin")
        .to_string();
    assert!(
        err.contains("plugins/gamma/.mcp.json") && err.contains("deniedServers"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `gateway` (the client profiles of `serve`) comes from the user config; a project file that
/// sets it is refused, naming the key and where it belongs.
#[test]
fn gateway_profiles_come_from_the_user_config_only() {
    let dir = temp_dir("gateway");
    let user = dir.join("config.json");
    std::fs::write(
        &user,
        r#"{"mcpServers": {}, "gateway": {"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "CI_TOKEN"}, "tools": {"deny": ["mcp__a__*"]}}}}}"#,
    )
    .expect("write");
    let merged = Sources::new()
        .with_user_file(Some(user.clone()))
        .with_project_dir(Some(dir.join("none")))
        .with_env(env)
        .merge()
        .expect("merged");
    let ci = &merged.config.gateway.clients["ci"];
    assert!(!ci.tools.admits("mcp__a__rm"));
    assert!(ci.tools.admits("mcp__b__rm"));

    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    std::fs::write(
        project.join(".mcp-harness.json"),
        r#"{"mcpServers": {}, "gateway": {"clients": {}}}"#,
    )
    .expect("write");
    let err = Sources::new()
        .with_user_file(Some(user))
        .with_project_dir(Some(project))
        .with_env(env)
        .trust_project_files()
        .merge()
        .expect_err("gateway in a project file")
        .to_string();
    assert!(
        err.contains(".mcp-harness.json: gateway") && err.contains("user config"),
        "{err}"
    );
}

/// A user config that is there but cannot be read (a folder, a link to nothing) fails the merge
/// naming it, instead of being skipped as absent with its servers gone unsaid.
#[test]
fn an_unreadable_user_config_is_an_error_not_an_absence() {
    let dir = std::env::temp_dir().join(format!("unreadable-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let merge = |user: &Path| {
        Sources::new()
            .with_user_file(Some(user.to_path_buf()))
            .with_project_dir(None)
            .with_env(env)
            .merge()
    };
    let folder = dir.join("folder.json");
    std::fs::create_dir_all(&folder).expect("folder");
    let err = merge(&folder).expect_err("a folder").to_string();
    assert!(
        err.contains("folder.json") && err.contains("it is a folder"),
        "{err}"
    );
    let dangling = dir.join("dangling.json");
    std::os::unix::fs::symlink(dir.join("missing.json"), &dangling).expect("symlink");
    let err = merge(&dangling).expect_err("a dangling link").to_string();
    assert!(err.contains("does not exist"), "{err}");
    let absent = merge(&dir.join("absent.json")).expect("nothing there is no config");
    assert!(absent.config.servers.is_empty());
    // A huge one (sparse: no disk used) is refused before it is read whole.
    let huge = dir.join("huge.json");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(1 << 30))
        .expect("a sparse file");
    let err = merge(&huge).expect_err("a 1 GiB config").to_string();
    assert!(
        err.contains("huge.json") && err.contains("more than 16 MiB"),
        "{err}"
    );
    let err = Config::load(&huge)
        .expect_err("loaded directly")
        .to_string();
    assert!(err.contains("more than 16 MiB"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `${workspaceFolder}` in a user-level VS Code file has no open folder to name: it becomes
/// the file's folder, with a note saying so; in a project's `.vscode` folder, no note.
#[test]
fn a_workspace_folder_outside_a_project_is_noted() {
    let dir = temp_dir("workspace-folder");
    let server = r#"{"servers": {"a": {"command": "node", "args": ["${workspaceFolder}/x.js"]}}}"#;
    let user = dir.join("Code/User/mcp.json");
    let project = dir.join("proj/.vscode/mcp.json");
    for file in [&user, &project] {
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(file, server).expect("write");
    }
    let noted = |file: &Path| {
        sources::import(file)
            .expect("imports")
            .notes
            .iter()
            .any(|n| n.contains("`${workspaceFolder}` became"))
    };
    assert!(noted(&user));
    assert!(!noted(&project));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn importing_our_own_format_keeps_every_user_key() {
    let text = r#"{
        "mcpServers": {"a": {"command": "a-mcp"}},
        "allowedServers": ["a"],
        "trustProjectPermissions": true,
        "remoteSources": [
            {"url": "https://cfg.example.com/mcp.json", "headers": {"Authorization": "Bearer ${CFG_TOKEN}"},
             "timeoutSec": 30, "allowStdio": true, "env": ["CFG_HOME"]},
            {"url": "https://other.example.com/m.json"}
        ]
    }"#;
    let converted = sources::import_text(text, Path::new("/u/config.json")).expect("imports");
    let doc = &converted.document;
    assert_eq!(doc["trustProjectPermissions"], true);
    assert_eq!(doc["allowedServers"][0], "a");
    let remote = &doc["remoteSources"];
    assert_eq!(remote[0]["url"], "https://cfg.example.com/mcp.json");
    assert_eq!(
        remote[0]["headers"]["Authorization"], "Bearer ${CFG_TOKEN}",
        "kept unexpanded"
    );
    assert_eq!(remote[0]["timeoutSec"], 30);
    assert_eq!(remote[0]["allowStdio"], true);
    assert_eq!(remote[0]["env"][0], "CFG_HOME");
    assert_eq!(
        remote[1],
        serde_json::json!({"url": "https://other.example.com/m.json"}),
        "defaults are not written out"
    );
    // What was imported reads back as the same sources.
    let again = sources::import_text(&doc.to_string(), Path::new("/u/config.json"))
        .expect("the import imports");
    assert_eq!(again.remote, converted.remote);
}

#[test]
fn codex_headers_set_twice_are_noted() {
    let text = "[mcp_servers.f]\nurl = \"https://f.example.com/mcp\"\n\
                bearer_token_env_var = \"F_TOKEN\"\n\
                http_headers = { \"authorization\" = \"Basic x\", \"X-A\" = \"1\" }\n\
                env_http_headers = { \"x-a\" = \"A_VAR\" }\n";
    let converted =
        sources::import_text(text, Path::new("/h/.codex/config.toml")).expect("imports");
    let headers = &converted.document["mcpServers"]["f"]["headers"];
    assert_eq!(headers["Authorization"], "Bearer ${F_TOKEN}");
    assert_eq!(headers["x-a"], "${A_VAR}");
    assert!(headers.get("authorization").is_none() && headers.get("X-A").is_none());
    let notes = converted.notes.join("\n");
    assert!(
        notes.contains(
            "header `authorization` is set twice; the value from `bearer_token_env_var` is kept"
        ) && notes.contains("header `X-A` is set twice; the value from `env_http_headers` is kept"),
        "{notes}"
    );
}

#[test]
fn claude_json_project_servers_are_noted_not_dropped_silently() {
    let text = r#"{
        "numStartups": 3,
        "mcpServers": {"user-one": {"command": "u-mcp"}},
        "projects": {
            "/home/ada/app": {"mcpServers": {"db": {"command": "db-mcp"}, "web": {"url": "https://w.example.com/mcp"}}},
            "/home/ada/empty": {"mcpServers": {}},
            "/home/ada/none": {"allowedTools": []}
        }
    }"#;
    let converted =
        sources::import_text(text, Path::new("/home/ada/.claude.json")).expect("imports");
    let servers: Vec<&String> = converted.servers().expect("servers").keys().collect();
    assert_eq!(servers, ["user-one"]);
    let notes = converted.notes.join("\n");
    assert!(
        notes.contains("the servers of project /home/ada/app (db, web) are Claude Code's local scope, not imported"),
        "{notes}"
    );
    assert!(
        !notes.contains("/home/ada/empty") && !notes.contains("/home/ada/none"),
        "{notes}"
    );
}

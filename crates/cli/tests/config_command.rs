//! `mcp-harness config` (the merged config: servers, sources, dropped servers with reasons),
//! `mcp-harness config import FILE [--out PATH]`, and `--config` accepting other hosts' files.
//! Every run gets its own HOME and XDG_CONFIG_HOME, so a developer's own config is never read.

use std::path::{Path, PathBuf};

mod common;

use common::{bin, run_in};

fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("config", tag)
}

const SECRET: &str = "ghp_SECRET_value_42";

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

#[test]
fn config_shows_the_merged_sources_and_what_was_dropped() {
    let dir = temp_dir("merged");
    write(
        &dir.join("xdg/mcp-harness/config.json"),
        r#"{"deniedServers": ["blocked*"],
            "mcpServers": {
              "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                         "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
              "blocked-one": {"command": "x"},
              "notes": {"command": "notes-mcp", "enabled": false}}}"#,
    );
    write(
        &dir.join(".mcp.json"),
        r#"{"mcpServers": {"gh": {"type": "http", "url": "https://api.githubcopilot.com/mcp",
                                  "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
                           "db": {"command": "db-mcp"}}}"#,
    );
    write(
        &dir.join(".mcp-harness.json"),
        r#"{"mcpServers": {"db": {"command": "db-mcp", "args": ["--rw"]}}}"#,
    );
    // The project files are this test's own: trusted (project trust: `project_trust.rs`).
    let (code, _, err) = run_in(&dir, &["trust", "."], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_in(&dir, &["config"], &[("GITHUB_TOKEN", SECRET)]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        "SERVER",
        "SOURCE",
        "./.mcp-harness.json",
        "./.mcp.json",
        "./xdg/mcp-harness/config.json",
        "dropped:",
        "blocked-one: denied by the policy",
        "github: a duplicate: the same URL and headers as \"gh\"",
        "db: the definition in",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("notes ") && l.contains(" no ")),
        "disabled servers stay, marked: {out}"
    );
    assert!(!out.contains(SECRET) && !err.contains(SECRET));

    let (code, out, _) = run_in(&dir, &["config", "--json"], &[("GITHUB_TOKEN", SECRET)]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("--json is JSON");
    let servers = v["servers"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = servers.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["db", "gh", "notes"]);
    assert_eq!(servers[0]["scope"], "project");
    assert_eq!(servers[0]["format"], "harness");
    assert_eq!(servers[1]["format"], "claude-code");
    assert_eq!(servers[2]["enabled"], false);
    assert_eq!(v["dropped"].as_array().map(Vec::len), Some(3));
    assert!(!out.contains(SECRET));

    // `--config` keeps meaning "only this file".
    let (code, out, _) = run_in(
        &dir,
        &["config", "--config", ".mcp.json"],
        &[("GITHUB_TOKEN", SECRET)],
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("gh ") && out.contains("db ") && !out.contains("notes"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn config_without_any_source_says_where_it_looked() {
    let dir = temp_dir("empty");
    let (code, _, err) = run_in(&dir, &["config"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains(".mcp.json") && err.contains(".mcp-harness.json") && err.contains("import"),
        "{err}"
    );
    let (code, _, err) = run_in(&dir, &["servers"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--config") && err.contains("demo"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

const CODEX: &str = r#"
model = "gpt-5-codex"

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_TOKEN"
env_http_headers = { "X-Team" = "FIGMA_TEAM" }
tool_timeout_sec = 30

[mcp_servers.docs]
command = "docs-mcp"
env = { "MODE" = "ro" }
required = true
"#;

#[test]
fn import_converts_and_keeps_references_not_values() {
    let dir = temp_dir("import");
    write(&dir.join("config.toml"), CODEX);
    let secrets = [("FIGMA_TOKEN", SECRET), ("FIGMA_TEAM", "team-SECRET")];
    let (code, out, err) = run_in(&dir, &["config", "import", "config.toml"], &secrets);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the import is JSON");
    assert_eq!(
        v["mcpServers"]["figma"]["headers"]["Authorization"],
        "Bearer ${FIGMA_TOKEN}"
    );
    assert_eq!(
        v["mcpServers"]["figma"]["headers"]["X-Team"],
        "${FIGMA_TEAM}"
    );
    assert_eq!(v["mcpServers"]["figma"]["toolTimeoutSec"], 30);
    assert!(
        !out.contains("SECRET") && !err.contains("SECRET"),
        "{out}{err}"
    );
    assert!(err.contains("`required` ignored"), "{err}");

    // Values written literally are printed redacted (a terminal, a log), written whole by --out.
    write(
        &dir.join("literal.toml"),
        "[mcp_servers.lit]\nurl = \"http://u:pw-LITERAL@h/mcp?key=q-LITERAL\"\n\
         http_headers = { \"X-Key\" = \"hdr-LITERAL\" }\n",
    );
    let (code, out, err) = run_in(&dir, &["config", "import", "literal.toml"], &secrets);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("LITERAL"), "{out}");
    assert!(err.contains("--out"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the import is JSON");
    assert_eq!(
        v["mcpServers"]["lit"]["url"],
        "http://u:[redacted]@h/mcp?key=[redacted]"
    );
    let (code, _, err) = run_in(
        &dir,
        &["config", "import", "literal.toml", "--out", "literal.json"],
        &secrets,
    );
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(dir.join("literal.json")).expect("written");
    assert!(
        written.contains("hdr-LITERAL"),
        "--out writes the file whole: {written}"
    );

    let (code, out, err) = run_in(
        &dir,
        &[
            "config",
            "import",
            "config.toml",
            "--out",
            ".mcp-harness.json",
        ],
        &secrets,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("wrote .mcp-harness.json (2 servers from Codex"),
        "{out}"
    );
    let written = std::fs::read_to_string(dir.join(".mcp-harness.json")).expect("written");
    assert!(!written.contains("SECRET"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join(".mcp-harness.json"))
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600);
    // Never over an existing file.
    let (code, _, err) = run_in(
        &dir,
        &[
            "config",
            "import",
            "config.toml",
            "--out",
            ".mcp-harness.json",
        ],
        &secrets,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains(".mcp-harness.json") && err.contains("exists"),
        "{err}"
    );
    // The written file is picked up as a project source.
    let (code, out, err) = run_in(&dir, &["config"], &secrets);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("figma") && out.contains("./.mcp-harness.json"),
        "{out}"
    );

    // Import errors name the file, the server and the key, and hold no secret.
    write(
        &dir.join("bad.toml"),
        "[mcp_servers.x]\nurl = \"https://h\"\nbearer_token = \"tok-SECRET\"\n",
    );
    let (code, _, err) = run_in(&dir, &["config", "import", "bad.toml"], &secrets);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml") && err.contains("\"x\"") && err.contains("bearer_token"),
        "{err}"
    );
    assert!(!err.contains("SECRET"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn config_flag_accepts_other_hosts_files() {
    let dir = temp_dir("hosts");
    std::fs::create_dir_all(dir.join(".vscode")).expect("dir");
    write(
        &dir.join(".vscode/mcp.json"),
        r#"{"inputs": [{"type": "promptString", "id": "api-key", "description": "The API key"}],
            "servers": {"fx": {"type": "stdio", "command": "x",
                               "env": {"KEY": "${input:api-key}"}, "bogus": 1}}}"#,
    );
    let (code, _, err) = run_in(&dir, &["config", "--config", ".vscode/mcp.json"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains(".vscode/mcp.json") && err.contains("\"fx\"") && err.contains("bogus"),
        "{err}"
    );
    write(
        &dir.join(".vscode/mcp.json"),
        r#"{"inputs": [{"type": "promptString", "id": "api-key", "description": "The API key"}],
            "servers": {"fx": {"type": "stdio", "command": "x",
                               "env": {"KEY": "${input:api-key}"}}}}"#,
    );
    // Without a value (no terminal to ask): that server failed, saying which input.
    let (code, out, err) = run_in(&dir, &["servers", "--config", ".vscode/mcp.json"], &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("input \"api-key\"") && out.contains("MCP_INPUT_API_KEY"),
        "{out}{err}"
    );

    // A Codex file runs a real server through `--config`.
    let toml = format!(
        "[mcp_servers.fx]\ncommand = {:?}\nargs = [\"fixture-server\", \"--tools\", \"1\"]\n\
         enabled_tools = [\"echo\"]\n",
        bin()
    );
    write(&dir.join("config.toml"), &toml);
    let (code, out, err) = run_in(&dir, &["tools", "--config", "config.toml"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("mcp__fx__echo") && !out.contains("mcp__fx__tool_1"),
        "enabled_tools became includeTools: {out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn importing_our_own_format_keeps_remote_sources_redacted_on_screen() {
    let dir = temp_dir("import-remote");
    write(
        &dir.join("mine.json"),
        r#"{"mcpServers": {}, "remoteSources": [
            {"url": "https://cfg.example.com/m.json?key=q-LITERAL",
             "headers": {"X-Key": "hdr-LITERAL", "Authorization": "Bearer ${CFG_TOKEN}"}}]}"#,
    );
    let (code, out, err) = run_in(&dir, &["config", "import", "mine.json"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("LITERAL"), "{out}");
    assert!(err.contains("--out"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the import is JSON");
    assert_eq!(
        v["remoteSources"][0]["url"],
        "https://cfg.example.com/m.json?key=[redacted]"
    );
    let (code, _, err) = run_in(
        &dir,
        &["config", "import", "mine.json", "--out", "copy.json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(dir.join("copy.json")).expect("written");
    assert!(
        written.contains("hdr-LITERAL") && written.contains("Bearer ${CFG_TOKEN}"),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_remote_source_with_an_unset_header_variable_is_not_fetched_by_the_view() {
    let dir = temp_dir("remote-unset");
    // Port 9 on loopback: were the header sent empty, the view would try it and fail
    // differently (connection refused).
    write(
        &dir.join("xdg/mcp-harness/config.json"),
        r#"{"mcpServers": {}, "remoteSources": [
            {"url": "http://127.0.0.1:9/m.json", "headers": {"Authorization": "Bearer ${NOT_SET_ANYWHERE_X}"}}]}"#,
    );
    let (code, out, err) = run_in(&dir, &["config"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("remoteSources[0]")
            && out.contains(
                "`headers.Authorization`: environment variable NOT_SET_ANYWHERE_X is not set"
            )
            && out.contains("its servers are not loaded"),
        "{out}"
    );
    // An unset variable as a URL's host: the view shows the file, that server unusable.
    write(
        &dir.join("plain.json"),
        r#"{"mcpServers": {"h": {"type": "http", "url": "https://${NOT_SET_HOST_X}/mcp"},
                           "fx": {"command": "x"}}}"#,
    );
    let (code, out, err) = run_in(&dir, &["--config", "plain.json", "config"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("NOT_SET_HOST_X") && out.contains("fx"),
        "{out}"
    );
    // An unset variable outside `mcpServers` (the gateway's session keys) does not stop it.
    write(
        &dir.join("gw.json"),
        r#"{"mcpServers": {"fx": {"command": "x"}},
            "gateway": {"sessionKeys": "${NOT_SET_KEYS_X}"}}"#,
    );
    let (code, out, err) = run_in(&dir, &["--config", "gw.json", "config"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("NOT_SET_KEYS_X") && out.contains("fx"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A token file that is no token file (truncated, edited by hand) does not block `logout`: it
/// is deleted, with a warning that nothing was revoked.
#[test]
fn logout_gets_past_a_token_file_that_is_no_token_file() {
    let dir = temp_dir("corrupt-tokens");
    let url = "http://127.0.0.1:9/mcp";
    write(
        &dir.join("mcp.json"),
        &serde_json::json!({"mcpServers": {"prot": {"url": url}}}).to_string(),
    );
    let tokens = dir.join("xdg/mcp-harness/tokens");
    std::fs::create_dir_all(&tokens).expect("tokens dir");
    let key = mcp_harness_transport::auth::server_key("prot", url);
    let file = tokens.join(format!("{key}.json"));
    write(&file, r#"{"not": "a token file"}"#);
    let (code, out, err) = run_in(
        &dir,
        &["--config", "mcp.json", "logout", "prot"],
        &[("MCP_HARNESS_TOKEN_STORE", "file")],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("deleted without revoking anything"), "{err}");
    assert!(!file.exists(), "the file is gone");
    let _ = std::fs::remove_dir_all(dir);
}

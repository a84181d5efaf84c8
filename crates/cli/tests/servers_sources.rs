//! `mcp-harness servers` names the config source of each server: its scope and file in the
//! merged sources, or the `--config` file. Every run gets its own HOME and XDG_CONFIG_HOME, so a
//! developer's own config is never read.

use std::path::{Path, PathBuf};

mod common;

use common::{bin, run_in};

fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("servers", tag)
}

/// A `mcpServers` entry running this binary's built-in fixture server.
fn fixture(name: &str) -> serde_json::Value {
    serde_json::json!({"command": bin(), "args": ["fixture-server", "--name", name]})
}

fn write_servers(path: &Path, servers: serde_json::Value) {
    let text = serde_json::json!({ "mcpServers": servers }).to_string();
    std::fs::write(path, text).expect("write config");
}

/// The table row of `server` (its first column).
fn row<'a>(table: &'a str, server: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(server))
        .unwrap_or_else(|| panic!("no row for {server}: {table}"))
}

#[test]
fn servers_shows_where_each_server_came_from() {
    let dir = temp_dir("merged");
    write_servers(
        &dir.join("xdg/mcp-harness/config.json"),
        serde_json::json!({"mine": fixture("servers-src-user")}),
    );
    write_servers(
        &dir.join(".mcp.json"),
        serde_json::json!({"shared": fixture("servers-src-project")}),
    );
    write_servers(
        &dir.join(".mcp-harness.json"),
        serde_json::json!({"local": fixture("servers-src-harness")}),
    );
    // The project files are this test's own: trusted (project trust: `project_trust.rs`).
    let (code, _, err) = run_in(&dir, &["trust", "."], &[]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = run_in(&dir, &["servers"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap_or("").contains("SOURCE"), "{out}");
    assert!(
        row(&out, "mine").contains("user ./xdg/mcp-harness/config.json"),
        "{out}"
    );
    assert!(row(&out, "shared").contains("project ./.mcp.json"), "{out}");
    assert!(
        row(&out, "local").contains("project ./.mcp-harness.json"),
        "{out}"
    );

    let (code, out, err) = run_in(&dir, &["servers", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let servers: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let by_name = |name: &str| {
        servers
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {out}"))
    };
    let mine = by_name("mine");
    assert_eq!(mine["scope"], "user", "{mine}");
    assert_eq!(mine["source"], "./xdg/mcp-harness/config.json", "{mine}");
    assert_eq!(mine["state"], "connected", "{mine}");
    assert_eq!(by_name("shared")["source"], "./.mcp.json");
    assert_eq!(by_name("local")["source"], "./.mcp-harness.json");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn servers_with_config_names_that_file() {
    let dir = temp_dir("explicit");
    // Present but not read: --config reads only its own file.
    write_servers(
        &dir.join(".mcp.json"),
        serde_json::json!({"ignored": fixture("servers-src-ignored")}),
    );
    let file = dir.join("elsewhere.json");
    write_servers(
        &file,
        serde_json::json!({"only": fixture("servers-src-explicit")}),
    );

    let (code, out, err) = run_in(&dir, &["servers", "--config", "elsewhere.json"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        row(&out, "only").contains("--config ./elsewhere.json"),
        "{out}"
    );
    assert!(!out.contains("ignored"), "{out}");

    let (code, out, err) = run_in(
        &dir,
        &["servers", "--json", "--config", "elsewhere.json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let servers: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(servers[0]["name"], "only", "{out}");
    assert_eq!(servers[0]["scope"], "--config", "{out}");
    assert_eq!(servers[0]["source"], "./elsewhere.json", "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

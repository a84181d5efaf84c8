//! Issue 17 point 2, `--connect URL`: the CLI as a client of a running `mcp-harness serve
//! --http` (in front of the fixture) — it reads no config, shows and accepts the gateway's
//! names unchanged (`mcp__fx__echo`, never `mcp__gateway__mcp__fx__echo`), and the upstream
//! keeps its state between one-shot commands and within a `shell --connect`.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::gateway::Served;
use common::{bin, run_in, temp_home};
use serde_json::{Value, json};

/// The gateway in front of the fixture `fx` (every tool allowed), and its MCP URL.
fn gateway(tag: &str) -> (std::path::PathBuf, Served, String) {
    let dir = temp_home("connect", tag);
    let file = common::gateway::fixture_config(&dir, &["--log-and-complete"]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let url = format!("http://{}/mcp", served.addr);
    // The CLI's own folder has a config that would start another server: --connect ignores it.
    let client = dir.join("client");
    std::fs::create_dir_all(client.join("home")).expect("mkdir");
    std::fs::create_dir_all(client.join("xdg/mcp-harness")).expect("mkdir");
    let local = json!({"mcpServers": {"local": {"command": bin(), "args": ["fixture-server"]}}});
    std::fs::write(client.join(".mcp.json"), local.to_string()).expect("write");
    (client, served, url)
}

/// The `echo` count in the fixture's `calls` answer printed in `out`.
fn echoes(out: &str) -> Vec<u64> {
    out.lines()
        .filter(|l| l.starts_with("{\"calls\""))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["echo"].as_u64().unwrap_or(0))
        .collect()
}

#[test]
fn commands_use_the_gateways_names_and_its_upstreams_state() {
    let (dir, mut served, url) = gateway("oneshot");
    let (code, out, err) = run_in(&dir, &["--connect", &url, "--json", "tools"], &[]);
    assert_eq!(code, 0, "{err}");
    let tools: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let names: Vec<&str> = tools
        .as_array()
        .or_else(|| tools["tools"].as_array())
        .expect("a list of tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"mcp__fx__echo"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__gateway__mcp__")),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__local__")),
        "{names:?}"
    );

    let (code, out, err) = run_in(
        &dir,
        &[
            "--connect",
            &url,
            "call",
            "mcp__fx__echo",
            r#"{"message": "through the gateway"}"#,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "through the gateway\n");
    // The upstream is the gateway's: a second CLI process sees the first one's call.
    let (code, out, err) = run_in(&dir, &["--connect", &url, "call", "mcp__fx__calls"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(echoes(&out), [1], "{out}");
    // Completion goes through the gateway to the prompt's upstream.
    let (code, out, err) = run_in(
        &dir,
        &[
            "--connect",
            &url,
            "complete",
            "mcp__fx__greeting",
            "name",
            "Gu",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Guido\n");
    // `ping` takes the one server, `gateway`.
    let (code, out, err) = run_in(&dir, &["--connect", &url, "ping", "gateway"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("gateway: answered in "), "{out}");
    // A name the gateway does not have, and a URL that is not one.
    let (code, _, err) = run_in(
        &dir,
        &["--connect", &url, "call", "mcp__gateway__echo"],
        &[],
    );
    assert_eq!(code, 5, "{err}");
    // A misspelt name of an upstream the gateway has: a typo, not a server that is missing.
    let (code, _, err) = run_in(&dir, &["--connect", &url, "call", "mcp__fx__ech"], &[]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("did you mean `mcp__fx__echo`") && !err.contains("no server named"),
        "{err}"
    );
    let (code, _, err) = run_in(&dir, &["--connect", "127.0.0.1:1", "tools"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("serve --http"), "{err}");
    assert_eq!(
        served.terminate(std::time::Duration::from_secs(20)),
        Some(0)
    );
}

#[test]
fn a_shell_through_the_gateway_keeps_state_between_calls() {
    let (dir, mut served, url) = gateway("shell");
    let mut child = Command::new(bin())
        .args(["--connect", &url, "shell"])
        .current_dir(&dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the shell");
    let script = "call mcp__fx__echo {\"message\": \"one\"}\n\
                  call mcp__fx__calls\n\
                  call mcp__fx__echo {\"message\": \"two\"}\n\
                  call mcp__fx__calls\n\
                  prompt mcp__fx__greeting {\"name\": \"Ada\"}\n";
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("pipe");
    let out = child.wait_with_output().expect("wait");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("one\n") && stdout.contains("two\n"),
        "{stdout}"
    );
    assert_eq!(echoes(&stdout), [1, 2], "{stdout}");
    assert!(stdout.contains("Hello, Ada!"), "{stdout}");
    assert_eq!(
        served.terminate(std::time::Duration::from_secs(20)),
        Some(0)
    );
}

/// `--server-log-level` through a gateway reaches its upstream: the fixture's `log` tool
/// answers the level in force upstream (`info` by default) and its debug line is shown.
#[test]
fn the_log_level_reaches_the_gateways_upstream() {
    let (dir, _served, url) = gateway("levels");
    let args = [
        "--connect",
        &url,
        "--server-log-level",
        "debug",
        "call",
        "mcp__fx__log",
    ];
    let (code, out, err) = run_in(&dir, &args, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "level debug\n", "{err}");
    assert!(
        err.contains("[gateway debug fixture] debug from log"),
        "the upstream's debug line did not reach the CLI: {err}"
    );
}

/// A gateway whose client profiles ask for a bearer token: `--connect-token-env VAR` sends the
/// token held in VAR (and lists what that profile sees); without it, or with VAR unset, the
/// command fails saying what to pass. The token appears in no output.
#[test]
fn a_token_from_the_environment_reaches_a_gateway_that_asks_for_one() {
    const TOKEN: &str = "connect-test-token-8f2c41";
    let dir = temp_home("connect", "token");
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server"]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "GW_CI_TOKEN"},
                                       "tools": {"allow": ["mcp__fx__echo"]}}}}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let mut served =
        Served::start_with_env(&dir, &file, &[], Stdio::null(), &[("GW_CI_TOKEN", TOKEN)]);
    let url = format!("http://{}/mcp", served.addr);

    let with = [
        "--connect",
        &url,
        "--connect-token-env",
        "MY_GW_TOKEN",
        "tools",
    ];
    let (code, out, err) = run_in(&dir, &with, &[("MY_GW_TOKEN", TOKEN)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mcp__fx__echo"), "{out}");
    assert!(!out.contains("mcp__fx__add"), "the profile's view: {out}");
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN));

    let (code, out, err) = run_in(&dir, &with, &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("MY_GW_TOKEN") && err.contains("not set"),
        "{err}"
    );

    let (code, out, err) = run_in(&dir, &["--connect", &url, "tools"], &[]);
    assert_ne!(code, 0, "no token, yet: {out}");
    assert!(
        err.contains("--connect-token-env"),
        "say what to pass: {err}"
    );

    let (code, out, err) = run_in(
        &dir,
        &[
            "--connect",
            &url,
            "--connect-token-env",
            "MY_GW_TOKEN",
            "tools",
        ],
        &[("MY_GW_TOKEN", "a-wrong-token")],
    );
    assert_ne!(code, 0, "a wrong token: {out}");
    assert!(
        err.contains("--connect-token-env") && !err.contains("a-wrong-token"),
        "{err}"
    );
    // A call says the same, as the gateway's state (exit 3), not as an unknown name (exit 5).
    let call = [
        "--connect",
        &url,
        "call",
        "mcp__fx__echo",
        r#"{"message": "x"}"#,
    ];
    let (code, out, err) = run_in(&dir, &call, &[]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("--connect-token-env"), "{err}");
    assert_eq!(
        served.terminate(std::time::Duration::from_secs(20)),
        Some(0)
    );
}

/// Through a gateway in front of two servers with skills of the same names, `skills` lists
/// each once (it listed the first server's twice), a name both share is refused with the
/// URIs that tell them apart, and a URI loads that very skill.
#[test]
fn skills_of_one_name_through_a_gateway_are_told_apart_by_uri() {
    let dir = temp_home("connect", "skills");
    let file = dir.join("gateway.json");
    let servers = json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--skills"]},
        "sk": {"command": bin(), "args": ["fixture-server", "--skills"]},
    }});
    std::fs::write(&file, servers.to_string()).expect("write");
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let url = format!("http://{}/mcp", served.addr);
    let (code, out, err) = run_in(&dir, &["--connect", &url, "--json", "skills"], &[]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<Value> = serde_json::from_str(&out).expect("skills --json");
    let uris: Vec<&str> = listed.iter().filter_map(|s| s["uri"].as_str()).collect();
    for uri in [
        "skill://fx/release-notes/SKILL.md",
        "skill://sk/release-notes/SKILL.md",
    ] {
        assert_eq!(uris.iter().filter(|u| **u == uri).count(), 1, "{uris:?}");
    }
    let (code, _, err) = run_in(
        &dir,
        &["--connect", &url, "skill", "gateway", "release-notes"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("2 skills named `release-notes`")
            && err.contains("skill://sk/release-notes/SKILL.md"),
        "{err}"
    );
    let (code, out, err) = run_in(
        &dir,
        &[
            "--connect",
            &url,
            "--json",
            "skill",
            "gateway",
            "skill://sk/release-notes/SKILL.md",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("skill://sk/release-notes/SKILL.md"), "{out}");
    let (code, out, err) = run_in(
        &dir,
        &[
            "--connect",
            &url,
            "skill",
            "gateway",
            "skill://sk/release-notes/SKILL.md",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("(SKILL.md verified against the listing: size, digest and frontmatter)"),
        "says what was checked: {out}"
    );
}

//! Issue 17 point 8 through the built binary: `complete` (`completion/complete`) and the
//! shell's Tab on prompt argument values and template variables; server log messages on stderr
//! by level with `--server-log-level` (`logging/setLevel`, sent only to servers that declare
//! logging); `ping`; `completions SHELL` and `man`.

mod common;

use common::{Pty, bin, run_in, temp_home};
use serde_json::{Value, json};

/// A folder with `mcp.json`: the fixture with logging and completion as `fx`, and with
/// `plain`, a fixture that declares neither.
fn setup(tag: &str, plain: bool) -> std::path::PathBuf {
    let dir = temp_home("protocol", tag);
    let mut servers = json!({
        "fx": {"command": bin(), "args": ["fixture-server", "--log-and-complete"]}
    });
    if plain {
        servers["plain"] = json!({"command": bin(), "args": ["fixture-server"]});
    }
    let config = json!({"mcpServers": servers, "permissions": {"allow": ["mcp__fx__*"]}});
    std::fs::write(dir.join("mcp.json"), config.to_string()).expect("write config");
    dir
}

fn cli(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["--config", "mcp.json"];
    all.extend_from_slice(args);
    run_in(dir, &all, &[])
}

#[test]
fn complete_asks_the_prompts_or_templates_server() {
    let dir = setup("complete", true);
    let (code, out, err) = cli(&dir, &["complete", "mcp__fx__greeting", "name", "G"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "Grace\nGuido\n");
    // Both servers list the item template: --server chooses.
    let (code, _, err) = cli(&dir, &["complete", "fixture://items/{id}", "id", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("listed by servers fx, plain; choose one with --server"),
        "{err}"
    );
    let (code, out, err) = cli(
        &dir,
        &[
            "--server",
            "fx",
            "complete",
            "fixture://items/{id}",
            "id",
            "4",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        shown,
        json!({"server": "fx", "ref": {"type": "ref/resource", "uri": "fixture://items/{id}"},
               "argument": "id", "values": ["42"], "total": 1, "hasMore": false})
    );
    let (code, out, _) = cli(&dir, &["complete", "mcp__fx__greeting", "name", "Z"]);
    assert_eq!((code, out.as_str()), (0, "(none)\n"));
    // Unknown names point to the listings; an argument the prompt lacks is a usage error.
    let (code, _, err) = cli(&dir, &["complete", "mcp__fx__nope", "name"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("mcp-harness prompts"), "{err}");
    let (code, _, err) = cli(&dir, &["complete", "mcp__fx__greeting", "who"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("it has: name"), "{err}");
    // A server that does not declare completion is not asked: a usage error, as a request of
    // any other capability a server lacks.
    let (code, _, err) = cli(&dir, &["complete", "mcp__plain__greeting", "name", "A"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("server plain does not offer completion") && err.contains("nothing was sent"),
        "{err}"
    );
}

#[test]
fn server_logs_show_by_level_and_the_level_is_sent() {
    let dir = setup("logs", true);
    // Default: the server's own level (info), warning and above shown.
    let (code, out, err) = cli(&dir, &["call", "mcp__fx__log"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "level info");
    assert!(
        err.contains("[fx warning fixture] warning from log"),
        "{err}"
    );
    assert!(err.contains("[fx error fixture] error from log"), "{err}");
    assert!(!err.contains("info from log"), "{err}");
    // --server-log-level debug: sent before the call, every level shown; `plain` declares no
    // logging and is not asked (it would refuse).
    let (code, out, err) = cli(
        &dir,
        &[
            "--server-log-level",
            "debug",
            "--server",
            "fx",
            "--server",
            "plain",
            "call",
            "mcp__fx__log",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "level debug");
    assert!(err.contains("[fx debug fixture] debug from log"), "{err}");
    assert!(!err.contains("could not set"), "{err}");
    // --json: stdout is the result only; the logs are JSON lines on stderr.
    let (code, out, err) = cli(
        &dir,
        &[
            "--json",
            "--server-log-level",
            "error",
            "call",
            "mcp__fx__log",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(result["content"][0]["text"], "level error", "{out}");
    let logs: Vec<Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("log").is_some())
        .collect();
    assert_eq!(logs.len(), 1, "{err}");
    let log = &logs[0]["log"];
    assert_eq!(
        (&log["server"], &log["level"], &log["logger"], &log["data"]),
        (
            &json!("fx"),
            &json!("error"),
            &json!("fixture"),
            &json!("error from log")
        )
    );
    assert!(
        log["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{log}"
    );
    // Progress too: with --json every line on stderr is a JSON object.
    let (code, out, err) = cli(&dir, &["--json", "call", "mcp__fx__slow", r#"{"ms": 400}"#]);
    assert_eq!(code, 0, "{err}");
    assert!(serde_json::from_str::<Value>(&out).is_ok(), "{out}");
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|v| v["progress"]["progress"].is_number()),
        "{err}"
    );
}

#[test]
fn ping_times_a_round_trip_and_names_configured_servers() {
    let dir = setup("ping", true);
    let (code, out, err) = cli(&dir, &["ping", "fx"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("fx: answered in ") && out.trim_end().ends_with(" ms"),
        "{out}"
    );
    let (code, out, err) = cli(&dir, &["--json", "ping", "plain"]);
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(shown["server"], "plain");
    assert!(shown["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{out}");
    let (code, _, err) = cli(&dir, &["ping", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("configured servers: fx, plain"), "{err}");
}

#[test]
fn completion_scripts_and_the_man_page_come_from_clap() {
    let dir = temp_home("protocol", "scripts");
    let (code, bash, err) = run_in(&dir, &["completions", "bash"], &[]);
    assert_eq!(code, 0, "{err}");
    for command in ["servers", "complete", "ping", "completions", "shell"] {
        assert!(bash.contains(command), "bash lacks {command}");
    }
    // The script parses.
    let script = dir.join("mcp-harness.bash");
    std::fs::write(&script, &bash).expect("write");
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // And completes after a subcommand too (clap's script used to complete the first word
    // only): what bash would offer after `completions ` and `config import --from `.
    for (words, offered) in [
        ("mcp-harness completions ''", "zsh"),
        ("mcp-harness config import --from ''", "claude-desktop"),
    ] {
        let probe = format!(
            "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _mcp__harness mcp-harness '' \"${{COMP_WORDS[COMP_CWORD-1]}}\"; echo \"${{COMPREPLY[*]}}\"",
            script.display()
        );
        let completed = std::process::Command::new("bash")
            .args(["-c", &probe])
            .output()
            .expect("bash");
        let shown = String::from_utf8_lossy(&completed.stdout);
        assert!(
            shown.split_whitespace().any(|w| w == offered),
            "{words}: {shown}"
        );
    }
    let (code, zsh, _) = run_in(&dir, &["completions", "zsh"], &[]);
    assert_eq!(code, 0);
    assert!(zsh.starts_with("#compdef mcp-harness"), "{zsh}");
    assert!(
        zsh.contains("'ping:") && zsh.contains("'complete:"),
        "{zsh}"
    );
    let (code, fish, _) = run_in(&dir, &["completions", "fish"], &[]);
    assert_eq!(code, 0);
    assert!(
        fish.contains("complete -c mcp-harness") && fish.contains("-a \"ping\""),
        "{fish}"
    );
    let (code, _, err) = run_in(&dir, &["completions", "tcsh"], &[]);
    assert_eq!(code, 2, "{err}");
    let (code, out, err) = run_in(&dir, &["--json", "man"], &[]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");

    let (code, man, err) = run_in(&dir, &["man"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        man.starts_with(".ie") || man.contains(".TH mcp\\-harness"),
        "{man}"
    );
    for command in ["servers", "complete", "ping", "completions", "man"] {
        assert!(
            man.contains(&format!("mcp\\-harness\\-{command}(1)")),
            "the man page lacks {command}:\n{man}"
        );
    }
}

#[test]
fn on_a_terminal_tab_completes_values_through_the_server() {
    let dir = setup("pty", false);
    let mut t = Pty::spawn_term(&dir, &["shell", "--config", "mcp.json"], "xterm");
    t.expect("mcp> ");
    // A prompt argument's value inside the JSON.
    t.send("prompt mcp__fx__greeting {\"name\": \"Gr\t");
    t.expect("Grace\"");
    t.send("}\r");
    t.expect("Hello, Grace!");
    t.expect("mcp> ");
    // A template variable in the URI of `read`.
    t.send("read fx fixture://items/4\t");
    t.expect("fixture://items/42 ");
    t.send("\r");
    t.expect("item 42");
    t.expect("mcp> ");
    // `complete`'s argument name, then its value.
    t.send("complete mcp__fx__greeting na\t");
    t.expect("name ");
    t.send("Al\t");
    t.expect("Alan ");
    t.send("\r");
    t.expect("Alan");
    t.expect("mcp> ");
    t.send("exit\r");
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
}

#[test]
fn a_shell_sends_the_level_to_servers_that_connect_later() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let dir = setup("shell-level", false);
    let mut child = Command::new(bin())
        .args([
            "--config",
            "mcp.json",
            "--server-log-level",
            "debug",
            "shell",
        ])
        .current_dir(&dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the shell");
    // A new server process after disable/enable starts at its own level (info) until told.
    let script = "call mcp__fx__log\ndisable fx\nenable fx\ncall mcp__fx__log\n";
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
    let levels: Vec<&str> = stdout.lines().filter(|l| l.starts_with("level ")).collect();
    assert_eq!(levels, ["level debug", "level debug"], "{stdout}");
    assert_eq!(stderr.matches("debug from log").count(), 2, "{stderr}");
}

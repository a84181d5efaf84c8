//! Issue 17 point 6: arguments and names, through the built binary against the built-in fixture
//! server — arguments from `@FILE` and stdin (`-`), "did you mean" for misspelt names, the right
//! listing for a prompt called as a tool (and back), a prompt's required arguments checked
//! before sending, requests the server did not declare refused locally, argument failures said
//! once and classed as usage (exit 2), the configured servers named for an unknown one, and no
//! runtime jargon in any of these messages.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::bin;

/// A fresh folder for one test (`common::temp_home`).
fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("arguments", tag)
}

/// `fx` (the fixture with everything), `nores` (declares no resources) and `nosub` (resources
/// without subscribe).
fn config(dir: &Path) -> String {
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--name", "arguments"]},
        "nores": {"command": bin(), "args": ["fixture-server", "--no-resources"]},
        "nosub": {"command": bin(), "args": ["fixture-server", "--no-subscribe"]},
    }, "permissions": {"allow": ["mcp__fx__*"]}});
    std::fs::write(&path, config.to_string()).expect("write config");
    path.to_string_lossy().into_owned()
}

/// Runs the CLI with `args` and `stdin` (closed when `None`): (exit code, stdout, stderr).
fn run(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-harness");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
        // Dropped: the CLI reads to the end.
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A message for a person: no runtime vocabulary, no Rust debug output.
fn plain(err: &str) {
    for jargon in [
        "revision",
        "Catalog error",
        "Tool error",
        "[Protocol",
        "-32601",
        "Error {",
    ] {
        assert!(!err.contains(jargon), "`{jargon}` in: {err}");
    }
}

#[test]
fn arguments_come_from_a_file_or_stdin() {
    let dir = temp_dir("sources");
    let c = config(&dir);
    let file = dir.join("args.json");
    std::fs::write(&file, r#"{"message": "from a file"}"#).expect("write args");
    let at = format!("@{}", file.display());
    let (code, out, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            &at,
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!((code, out.trim()), (0, "from a file"), "{err}");

    let (code, out, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            "-",
            "--config",
            &c,
        ],
        Some(r#"{"message": "from stdin"}"#),
    );
    assert_eq!((code, out.trim()), (0, "from stdin"), "{err}");

    let (code, out, err) = run(
        &[
            "--server",
            "fx",
            "prompt",
            "mcp__fx__greeting",
            "-",
            "--config",
            &c,
        ],
        Some(r#"{"name": "Ada"}"#),
    );
    assert!(code == 0 && out.contains("Ada"), "{out}{err}");

    // A file that is missing or holds no object: a usage error naming the file; nothing sent.
    let missing = format!("@{}", dir.join("nope.json").display());
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            &missing,
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nope.json") && err.contains("nothing was sent"),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            "-",
            "--config",
            &c,
        ],
        Some("[1, 2]"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("stdin") && err.contains("JSON object"),
        "{err}"
    );
    // In the shell stdin holds the commands: `-` is refused there, and the next line runs.
    let (code, out, err) = run(
        &["--server", "fx", "shell", "--config", &c],
        Some("call mcp__fx__echo -\ncall mcp__fx__echo {\"message\": \"next line\"}\n"),
    );
    assert!(code == 0 && out.contains("next line"), "{out}{err}");
    assert!(err.contains("shell's own input"), "{err}");
    let (_, help, _) = run(&["call", "--help"], None);
    assert!(help.contains("@FILE") && help.contains("stdin"), "{help}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unknown_names_get_the_closest_ones_and_the_right_listing() {
    let dir = temp_dir("names");
    let c = config(&dir);
    // A misspelt tool.
    let (code, _, err) = run(&["call", "mcp__fx__ech", "--config", &c], None);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("did you mean `mcp__fx__echo`"), "{err}");
    assert!(!err.contains("mcp__fx__add"), "only close names: {err}");
    plain(&err);
    // The right tool of a server that is not configured: the configured ones are named.
    let (code, _, err) = run(&["call", "mcp__fxx__echo", "--config", &c], None);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("no server named `fxx`")
            && err.contains("configured servers: fx, nores, nosub")
            && err.contains("did you mean `mcp__fx__echo`"),
        "{err}"
    );
    plain(&err);
    // A prompt called as a tool, a tool run as a prompt.
    let (code, _, err) = run(&["call", "mcp__fx__greeting", "--config", &c], None);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("`mcp__fx__greeting` is a prompt") && err.contains("mcp-harness prompts"),
        "{err}"
    );
    plain(&err);
    let (code, _, err) = run(&["prompt", "mcp__fx__echo", "--config", &c], None);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("`mcp__fx__echo` is a tool") && err.contains("mcp-harness call mcp__fx__echo"),
        "{err}"
    );
    plain(&err);
    let (code, _, err) = run(&["prompt", "mcp__fx__greting", "--config", &c], None);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("did you mean `mcp__fx__greeting`"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn prompts_show_and_check_their_required_arguments() {
    let dir = temp_dir("prompt");
    let c = config(&dir);
    let (code, out, err) = run(&["--server", "fx", "prompts", "--config", &c], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("name (required)"), "{out}");
    // Checked here: the fixture would answer -32602 if it were sent.
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "prompt",
            "mcp__fx__greeting",
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("missing required argument `name`") && err.contains("nothing was sent"),
        "{err}"
    );
    assert!(!err.contains("-32602"), "not sent: {err}");
    plain(&err);
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "prompt",
            "mcp__fx__greeting",
            r#"{"name": 5}"#,
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("strings") && err.contains("`name`"), "{err}");
    // A null is not given: a required argument is missing, an optional one is better left out.
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "prompt",
            "mcp__fx__greeting",
            r#"{"name": null, "tone": null}"#,
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("missing required argument `name`")
            && err.contains("`tone` is null: leave an optional argument out instead")
            && !err.contains("not a string"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn requests_a_server_did_not_declare_are_refused_with_the_reason() {
    let dir = temp_dir("declared");
    let c = config(&dir);
    let (code, _, err) = run(
        &["read", "nores", "fixture://static/readme", "--config", &c],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("does not offer resources") && err.contains("nothing was sent"),
        "{err}"
    );
    plain(&err);
    let (code, _, err) = run(
        &[
            "subscribe",
            "nosub",
            "fixture://static/readme",
            "--count",
            "1",
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not support subscriptions"), "{err}");
    plain(&err);
    // Declared: `read` of the same server goes through.
    let (code, out, err) = run(
        &["read", "nosub", "fixture://static/readme", "--config", &c],
        None,
    );
    assert_eq!((code, out.trim()), (0, "fixture readme"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn invalid_tool_arguments_are_said_once_and_are_usage_errors() {
    let dir = temp_dir("invalid");
    let c = config(&dir);
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            r#"{"message": 5}"#,
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.matches("do not match").count(), 1, "said once: {err}");
    assert!(
        err.contains("/message") && err.contains("nothing was sent"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    plain(&err);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_skill_named_as_a_tool_or_prompt_points_to_skill() {
    let dir = temp_dir("skill");
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--skills"]},
    }});
    std::fs::write(&path, config.to_string()).expect("write config");
    let c = path.to_string_lossy().into_owned();
    for command in ["call", "prompt"] {
        let (code, _, err) = run(&[command, "mcp__fx__pdf-processing", "--config", &c], None);
        assert_ne!(code, 0, "{command}: {err}");
        assert!(
            err.contains("is a skill") && err.contains("mcp-harness skill fx pdf-processing"),
            "{command}: {err}"
        );
        plain(&err);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Arguments from a file or stdin are read up to 64 MiB: `@/dev/zero` is a usage error at that
/// size (it was read until memory ran out); and a read that waits on stdin still ends at
/// SIGTERM with exit 130 (the read blocked the command's thread, and the signal went unheard).
#[test]
fn argument_reads_are_bounded_and_interruptible() {
    let dir = temp_dir("bounded");
    let c = config(&dir);
    let (code, _, err) = run(
        &[
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            "@/dev/zero",
            "--config",
            &c,
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than 64 MiB"), "{err}");

    let mut child = Command::new(bin())
        .args([
            "--server",
            "fx",
            "call",
            "mcp__fx__echo",
            "-",
            "--config",
            &c,
        ])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-harness");
    // Stdin stays open and empty: the read waits.
    let _stdin = child.stdin.take();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Bounded: 10 s.
    let start = std::time::Instant::now();
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let status = status.expect("SIGTERM did not end the command while it read stdin");
    assert_eq!(status.code(), Some(130), "{status:?}");
}

/// Under `--json` what a command says on stderr while it runs is one JSON object per line:
/// the servers still starting, and a warning, as `{"note": …}` (they were plain text).
#[test]
fn json_notes_on_stderr_are_json_lines() {
    let dir = temp_dir("json-notes");
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {
        "slow": {"command": bin(), "args": ["fixture-server", "--start-delay-ms", "1500"]},
        "gone": {"command": bin(), "args": ["fixture-server", "--exit-at-start", "3"]},
    }, "permissions": {"allow": ["mcp__slow__*"]}});
    std::fs::write(&path, config.to_string()).expect("write config");
    let c = path.to_string_lossy().into_owned();
    let (code, out, err) = run(&["--json", "tools", "--config", &c], None);
    assert!(out.contains("mcp__slow__echo"), "{code}: {out}{err}");
    // An error (the server that exited, with its stderr's tail) is said as it is.
    let notes: Vec<serde_json::Value> = err
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for plain in ["waiting for", "warning:", "✓", "✗"] {
        assert!(!err.lines().any(|l| l.starts_with(plain)), "{err}");
    }
    assert!(
        notes.iter().any(|n| n["note"]
            .as_str()
            .is_some_and(|t| t.contains("waiting for"))),
        "{err}"
    );
    assert!(
        notes.iter().any(|n| n["note"]
            .as_str()
            .is_some_and(|t| t.starts_with("warning:"))),
        "{err}"
    );
}

//! Issue 17 point 1: a command waits only for the servers it needs. A config holds a good
//! fixture server and one that hangs before initialize with a startup timeout of ten minutes;
//! the hung one is started through `sh`, which appends a line to a marker file before the
//! fixture runs, so the test knows whether it was ever spawned. Every run is bounded (far below
//! the hung server's timeout): a command that waited for the hung server fails the test by
//! running over, not by a timed assertion on its speed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::bin;

/// A fresh folder for one test (`common::temp_home`).
fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("targeted", tag)
}

/// `fx` (a fixture server) and `hung` (hangs before initialize, startup timeout 600 s, spawns
/// leave a line in `dir/hung-spawned`). Returns the config path and the marker path.
fn config_with_hung_sibling(dir: &Path, hung_timeout_sec: u64) -> (PathBuf, PathBuf) {
    let marker = dir.join("hung-spawned");
    let script = format!(
        "echo spawned >> '{}'; exec \"$0\" fixture-server --hang-at-start",
        marker.display()
    );
    let config = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--name", "targeted"]},
        "hung": {"command": "sh", "args": ["-c", script, bin()], "startupTimeoutSec": hung_timeout_sec}
    }, "permissions": {"allow": ["mcp__fx__*"]}});
    let path = dir.join("mcp.json");
    std::fs::write(&path, config.to_string()).expect("write config");
    (path, marker)
}

/// Runs the CLI with `args`, killed after `limit`: (exit code, stdout, stderr, ran over).
fn run_bounded(args: &[&str], limit: Duration) -> (i32, String, String, bool) {
    let mut child = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-harness");
    let start = Instant::now();
    let mut over = false;
    while child.try_wait().ok().flatten().is_none() {
        if start.elapsed() > limit {
            over = true;
            // SAFETY: signals only the CLI process this test started; it shuts its servers down.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        over,
    )
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn call_read_and_prompt_start_only_their_server() {
    let dir = temp_dir("call");
    let (config, marker) = config_with_hung_sibling(&dir, 600);
    let c = config.to_str().unwrap_or_default();

    let (code, out, err, over) = run_bounded(
        &[
            "call",
            "mcp__fx__echo",
            r#"{"message": "only fx"}"#,
            "--config",
            c,
        ],
        LIMIT,
    );
    assert!(!over, "`call` waited for the hung server: {err}");
    assert_eq!((code, out.trim()), (0, "only fx"), "{err}");

    let (code, out, err, over) = run_bounded(
        &["read", "fx", "fixture://static/readme", "--config", c],
        LIMIT,
    );
    assert!(!over, "`read` waited for the hung server: {err}");
    assert_eq!((code, out.trim()), (0, "fixture readme"), "{err}");

    let (code, out, err, over) = run_bounded(
        &[
            "prompt",
            "mcp__fx__greeting",
            r#"{"name": "Ada"}"#,
            "--config",
            c,
        ],
        LIMIT,
    );
    assert!(!over, "`prompt` waited for the hung server: {err}");
    assert_eq!(code, 0, "{out}{err}");

    let (code, out, err, over) = run_bounded(&["--server", "fx", "tools", "--config", c], LIMIT);
    assert!(
        !over,
        "`--server fx tools` waited for the hung server: {err}"
    );
    assert!(code == 0 && out.contains("mcp__fx__echo"), "{out}{err}");

    assert!(
        !marker.exists(),
        "the hung server was spawned: {:?}",
        std::fs::read_to_string(&marker)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The marker works: a command that needs every server does spawn the hung one (here with a
/// short startup timeout, so `servers` ends and reports it failed).
#[test]
fn servers_waits_for_every_server_and_spawns_the_hung_one() {
    let dir = temp_dir("all");
    let (config, marker) = config_with_hung_sibling(&dir, 1);
    let c = config.to_str().unwrap_or_default();
    let (code, out, err, over) = run_bounded(&["servers", "--config", c], LIMIT);
    assert!(!over, "{err}");
    assert!(out.contains("fx") && out.contains("hung"), "{out}");
    assert_eq!(code, 3, "a server failed: {out}{err}");
    assert!(marker.exists(), "`servers` started every server");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unknown_server_names_are_usage_errors_that_list_the_configured_ones() {
    let dir = temp_dir("unknown");
    let (config, marker) = config_with_hung_sibling(&dir, 600);
    let c = config.to_str().unwrap_or_default();
    for args in [
        vec!["--server", "nosuch", "servers", "--config", c],
        vec!["read", "nosuch", "fixture://static/readme", "--config", c],
        vec!["--server", "hung", "call", "mcp__fx__echo", "--config", c],
    ] {
        let (code, _, err, over) = run_bounded(&args, LIMIT);
        assert!(!over, "{args:?}: {err}");
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("fx") && err.contains("hung"),
            "{args:?}: {err}"
        );
    }
    assert!(!marker.exists(), "a usage error started a server");
    let _ = std::fs::remove_dir_all(dir);
}

/// A name no configured server can make (a harness built-in here) starts every server, and
/// `-v` says why.
#[test]
fn a_name_of_no_server_starts_every_server_and_says_so() {
    let dir = temp_dir("unresolved");
    let (config, marker) = config_with_hung_sibling(&dir, 1);
    let c = config.to_str().unwrap_or_default();
    let (_, out, err, over) = run_bounded(
        &[
            "-v",
            "call",
            "mcp_harness__read_output",
            "{}",
            "--config",
            c,
        ],
        LIMIT,
    );
    assert!(!over, "{err}");
    assert!(
        err.contains("no configured server makes this name; starting every server"),
        "{out}{err}"
    );
    assert!(marker.exists(), "every server was started");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--server fx watch`: an edit of the config is applied to `fx` only; the other server of the
/// edited file is never started.
#[test]
fn watch_with_server_keeps_the_limit_across_a_reload() {
    use std::io::BufRead;
    let dir = temp_dir("reload");
    let (config, marker) = config_with_hung_sibling(&dir, 1);
    let c = config.to_str().unwrap_or_default().to_string();
    let mut child = Command::new(bin())
        .args(["--server", "fx", "watch", "--config", &c])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start watch");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |needle: &str| {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains(needle) => return true,
                Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => return false,
            }
        }
        false
    };
    let connected = wait_for("1 server (1 connected), 17 tools");
    // The edit: fx gets one generated tool more; hung is still in the file.
    let mut edited: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("read")).expect("json");
    edited["mcpServers"]["fx"]["args"] = serde_json::json!(["fixture-server", "--tools", "1"]);
    std::fs::write(&config, edited.to_string()).expect("edit config");
    let reloaded = connected && wait_for("1 server (1 connected), 18 tools");
    // SAFETY: signals only the CLI process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(connected, "fx never connected");
    assert!(reloaded, "the edit was not applied to fx");
    assert!(
        !marker.exists(),
        "the reload started a server --server leaves out"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A server the merge left out (a duplicate of another: the same command and arguments) is
/// named as such where a command asks for it, not as a server that is not configured.
#[test]
fn a_server_left_out_as_a_duplicate_is_named_so() {
    let dir = common::temp_home("targeted", "duplicate");
    let user = dir.join("xdg").join("mcp-harness");
    std::fs::create_dir_all(&user).expect("dir");
    let server = serde_json::json!({"command": common::bin(), "args": ["fixture-server"]});
    let config = serde_json::json!({"mcpServers": {"a": server, "b": server}});
    std::fs::write(user.join("config.json"), config.to_string()).expect("write");
    let (code, _, err) = common::run_in(&dir, &["--server", "b", "tools"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("server `b` is not loaded: a duplicate"),
        "{err}"
    );
    let (code, _, err) = common::run_in(&dir, &["--yes", "call", "mcp__b__echo", "{}"], &[]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("server `b` is not loaded: a duplicate"),
        "{err}"
    );
}

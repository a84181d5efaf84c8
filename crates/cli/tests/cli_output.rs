//! Issue 17 point 5: output for people and for scripts, through the built binary — the exit
//! status table, `call --json` on a failing tool, structured content printed once, `read --out`
//! of a blob, `tools --json` keeping the server's fields and order, counted nouns and `(none)`,
//! JSON lines of `watch`. Against the built-in fixture and the reference server
//! `@modelcontextprotocol/server-everything` (installed by `.ci/install-peers.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

use common::bin;

/// A fresh folder for one test (`common::temp_home`).
fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("output", tag)
}

fn write_config(dir: &Path, servers: serde_json::Value) -> String {
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": servers, "permissions": {
        "allow": ["mcp__fx__*", "mcp__ev__*"], "deny": ["mcp__fx__remove_*"]
    }});
    std::fs::write(&path, config.to_string()).expect("write config");
    path.to_string_lossy().into_owned()
}

fn fixture(dir: &Path) -> String {
    write_config(
        dir,
        serde_json::json!({"fx": {"command": bin(), "args": ["fixture-server", "--name", "output"]}}),
    )
}

/// Where `.ci/install-peers.sh` put server-everything and Node.
fn everything(dir: &Path) -> String {
    let (node, server) = common::everything_paths();
    write_config(
        dir,
        serde_json::json!({"ev": {"command": node, "args": [server]}}),
    )
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run mcp-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each status of the table that the fixture can provoke (130 is `sigterm_leaves_no_child_process`
/// in cli.rs), and the table in `--help`.
#[test]
fn exit_statuses_follow_the_documented_table() {
    let dir = temp_dir("exit");
    let c = fixture(&dir);
    let cases: [(&[&str], i32, &str); 11] = [
        (
            &["watch", "--count", "0"],
            2,
            "usage: a count that would never stop",
        ),
        (
            &["subscribe", "fx", "fixture://static/readme", "--count", "0"],
            2,
            "usage: a count that would never stop",
        ),
        (&["call", "mcp__fx__echo", r#"{"message": "ok"}"#], 0, "ok"),
        (&["call", "mcp__fx__fail"], 1, "tool error"),
        (
            &["call", "mcp__fx__echo", "[1]"],
            2,
            "usage: arguments not an object",
        ),
        (
            &["call", "mcp__fx__echo", r#"{"message": 5}"#],
            2,
            "usage: arguments do not match the schema",
        ),
        (
            &["call", "mcp__fx__remove_tool", r#"{"name": "x"}"#],
            4,
            "refused by a deny rule",
        ),
        (&["call", "mcp__fx__nope"], 5, "not in the catalog"),
        (
            &["login", "nope"],
            2,
            "config: login to a server not configured",
        ),
        (
            &["logout", "nope"],
            2,
            "config: logout of a server not configured",
        ),
        (&["login", "fx"], 2, "config: login to a stdio server"),
    ];
    for (args, expected, why) in cases {
        let mut all = args.to_vec();
        all.extend(["--config", c.as_str()]);
        let (code, out, err) = run(&all);
        assert_eq!(code, expected, "{why}: {args:?}\n{out}{err}");
    }
    let failing = write_config(
        &dir,
        serde_json::json!({
            "fx": {"command": bin(), "args": ["fixture-server"]},
            "down": {"command": bin(), "args": ["fixture-server", "--stderr-banner",
                     "boom: API_KEY is not set", "--exit-at-start", "7"]}
        }),
    );
    for listing in ["servers", "tools"] {
        let (code, out, err) = run(&[listing, "--config", &failing]);
        assert_eq!(code, 3, "{listing} with a failed server: {out}{err}");
    }
    // A command that needed the server says how it ended and what it last wrote.
    for args in [
        &["call", "mcp__down__echo", "{}"][..],
        &["ping", "down"],
        &["skill", "down", "release-notes"],
        &["complete", "mcp__down__greeting", "name", "A"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--config", failing.as_str()]);
        let (code, out, err) = run(&all);
        assert_eq!(code, 3, "{args:?}: {out}{err}");
        assert!(
            err.contains("server `down` failed")
                && err.contains("(exit status: 7)")
                && err.contains("\n    boom: API_KEY is not set"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = run(&["--server", "fx", "tools", "--config", &failing]);
    assert_eq!(code, 0, "the failed server is left out: {err}");
    let (code, _, err) = run(&["demo", "--json"]);
    assert_eq!(
        code, 2,
        "a command without JSON output refuses --json: {err}"
    );
    let (_, help, _) = run(&["--help"]);
    for line in [
        "0 ok",
        "1 the tool or request failed",
        "2 usage or config error",
        "3 a server failed",
        "4 refused by policy",
        "5 not in the catalog",
        "130 interrupted",
    ] {
        assert!(help.contains(line), "--help lacks `{line}`: {help}");
    }
    assert!(help.contains("--json"), "{help}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A server whose config names an unset variable is failed, naming the variable, from the
/// first state a command reads — never "disabled" with `mcp-harness enable` as the fix.
#[test]
fn a_server_with_an_unset_variable_is_failed_naming_it() {
    let dir = temp_dir("unset-var");
    let c = write_config(
        &dir,
        serde_json::json!({"var1": {"command": bin(), "args": ["fixture-server"],
            "env": {"TOK": "${MISSING_TOKEN_FOR_TEST_X}"}}}),
    );
    let (code, out, err) = run(&["--config", &c, "--json", "--server", "var1", "servers"]);
    let listed: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let server = &listed[0];
    assert_eq!(server["state"], "failed", "{code}: {server}");
    assert!(
        server["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("MISSING_TOKEN_FOR_TEST_X")),
        "{server}"
    );
    let (code, _, err) = run(&[
        "--config",
        &c,
        "--yes",
        "call",
        "mcp__var1__echo",
        r#"{"message":"x"}"#,
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("MISSING_TOKEN_FOR_TEST_X") && !err.contains("disabled"),
        "{err}"
    );
}

#[test]
fn call_json_prints_the_result_of_a_failed_tool_on_stdout() {
    let dir = temp_dir("call-json");
    let c = fixture(&dir);
    let (code, out, err) = run(&["call", "mcp__fx__fail", "--json", "--config", &c]);
    assert_eq!(code, 1, "{err}");
    let result: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: stdout {out:?}, stderr {err}"));
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("failed on purpose"))
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tools_json_keeps_the_servers_fields_and_order() {
    let dir = temp_dir("tools-json");
    let c = fixture(&dir);
    let (code, out, err) = run(&["tools", "--json", "--config", &c]);
    assert_eq!(code, 0, "{err}");
    let tools: Vec<serde_json::Value> = serde_json::from_str(&out).expect("tools --json");
    let raw: Vec<&str> = tools
        .iter()
        .filter(|t| t["server"] == "fx")
        .filter_map(|t| t["rawName"].as_str())
        .collect();
    // The fixture lists echo, add, slow, large, fail, ... (not in name order).
    assert_eq!(
        raw[..5],
        ["echo", "add", "slow", "large", "fail"],
        "{raw:?}"
    );
    let add = tools
        .iter()
        .find(|t| t["name"] == "mcp__fx__add")
        .expect("add listed");
    assert_eq!(add["outputSchema"]["required"][0], "sum", "{add}");

    let ev = everything(&dir);
    let (code, out, err) = run(&["tools", "--json", "--config", &ev]);
    assert_eq!(code, 0, "{err}");
    let tools: Vec<serde_json::Value> = serde_json::from_str(&out).expect("tools --json");
    let structured = tools
        .iter()
        .find(|t| t["rawName"] == "get-structured-content")
        .expect("listed");
    assert!(
        structured["title"].is_string() && structured["outputSchema"].is_object(),
        "{structured}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn structured_content_is_printed_once_and_blobs_are_written_decoded() {
    let dir = temp_dir("everything");
    let c = everything(&dir);
    let (code, out, err) = run(&[
        "call",
        "mcp__ev__get-structured-content",
        r#"{"location": "Chicago"}"#,
        "--config",
        &c,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.matches("\"temperature\"").count(),
        1,
        "the text block repeating the structured content is not printed again: {out}"
    );

    let file = dir.join("blob.bin");
    let f = file.to_str().unwrap_or_default();
    let uri = "demo://resource/dynamic/blob/7";
    let (code, _, err) = run(&["read", "ev", uri, "--out", f, "--config", &c]);
    assert_eq!(code, 0, "{err}");
    let bytes = std::fs::read(&file).expect("written");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("Resource 7: This is a base64 blob"),
        "the blob is decoded: {text:?}"
    );
    assert!(
        err.contains(&format!("wrote {} bytes", bytes.len())),
        "{err}"
    );
    let text_file = dir.join("text.txt");
    let t = text_file.to_str().unwrap_or_default();
    let (code, _, err) = run(&[
        "read",
        "ev",
        "demo://resource/dynamic/text/3",
        "--out",
        t,
        "--config",
        &c,
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&text_file).expect("written");
    assert!(text.starts_with("Resource 3"), "{text:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn counts_agree_with_their_noun_and_empty_lists_say_none() {
    let dir = temp_dir("plural");
    let one = write_config(
        &dir,
        serde_json::json!({"fx": {"command": bin(), "args": ["fixture-server", "--name", "plural"]}}),
    );
    // The first revision: one server (pending or connected), its tools counted.
    let (code, out, err) = run(&["watch", "--count", "1", "--config", &one]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(": 1 server (")
            && (out.contains(", 0 tools\n") || out.contains(", 19 tools\n")),
        "{out}"
    );
    let (code, out, err) = run(&["tools", "--hidden", "--config", &one]);
    assert_eq!((code, out.as_str()), (0, "(none)\n"), "{err}");
    let (code, out, err) = run(&["skills", "--config", &one]);
    assert_eq!((code, out.as_str()), (0, "(none)\n"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn watch_json_is_one_object_per_line_with_rfc3339_times() {
    let dir = temp_dir("watch-json");
    let c = fixture(&dir);
    let (code, out, err) = run(&["watch", "--json", "--count", "1", "--config", &c]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let item: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
    assert!(item["revision"].as_u64().is_some_and(|r| r > 0), "{item}");
    assert_eq!(
        (
            item["servers"].as_u64(),
            item["changes"][0]["server"].as_str()
        ),
        (Some(1), Some("fx")),
        "{item}"
    );
    let time = item["time"].as_str().unwrap_or_default();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "RFC 3339: {time}"
    );
    let (code, out, err) = run(&["servers", "--json", "--config", &c]);
    assert_eq!(code, 0, "{err}");
    let servers: serde_json::Value = serde_json::from_str(&out).expect("servers --json");
    let since = servers[0]["since"].as_str().unwrap_or_default();
    assert!(since.ends_with('Z') && since.contains('T'), "{servers}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `subscribe --json` writes one JSON object per line (the first says it subscribed); SIGTERM
/// ends it with status 130.
#[test]
fn subscribe_json_lines_and_interrupted_status() {
    use std::io::BufRead;
    let dir = temp_dir("subscribe");
    let c = fixture(&dir);
    let mut child = Command::new(bin())
        .args([
            "subscribe",
            "fx",
            "fixture://static/readme",
            "--json",
            "--config",
            &c,
        ])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start subscribe");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    // Bounded: the CLI exits (closing stdout) if the subscription fails. The reader stays
    // open until the CLI ended: with its reader gone, subscribe ends by itself (exit 0).
    let mut reader = std::io::BufReader::new(stdout);
    let _ = reader.read_line(&mut first);
    // SAFETY: signals only the CLI process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    drop(reader);
    let err = String::from_utf8_lossy(&out.stderr);
    let line: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?} {err}"));
    assert_eq!(
        (&line["event"], &line["server"], &line["uri"]),
        (
            &serde_json::json!("subscribed"),
            &serde_json::json!("fx"),
            &serde_json::json!("fixture://static/readme")
        ),
        "{line}"
    );
    assert!(
        line["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(130), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A streaming command ends once its reader goes away (`subscribe | head -1`), though nothing
/// more is written; a command whose output cannot be written (a full disk) fails saying so.
#[test]
fn a_gone_reader_ends_a_stream_and_an_unwritable_stdout_fails_the_command() {
    use std::io::BufRead;
    let dir = temp_dir("stdout-gone");
    let c = fixture(&dir);
    let mut child = Command::new(bin())
        .args(["subscribe", "fx", "fixture://static/readme", "--config", &c])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start subscribe");
    let mut first = String::new();
    {
        let stdout = child.stdout.take().expect("stdout");
        let _ = std::io::BufReader::new(stdout).read_line(&mut first);
        // The reader goes away here, as `head -1` does.
    }
    assert!(first.contains("subscribed"), "{first:?}");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let status = status.expect("subscribe ran on after its reader left");
    assert_eq!(status.code(), Some(0));

    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = Command::new(bin())
        .args(["tools", "--json", "--config", &c])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("run tools");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("could not be written to stdout"), "{err}");
    // Help and the version are output like any other: a failed write is exit 1.
    for args in [
        &["--help"][..],
        &["--version"],
        &["tools", "--help"],
        &["help", "tools"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = Command::new(bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .expect("run --help");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("could not be written to stdout"), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A server's stderr lines reach the log at debug (`RUST_LOG=mcp_harness::server_stderr=debug`),
/// with the configured secrets it echoes redacted; without that level they are not logged.
#[test]
fn server_stderr_is_logged_at_debug_redacted() {
    let dir = temp_dir("stderr-log");
    let config = write_config(
        &dir,
        serde_json::json!({"fx": {"command": bin(),
            "args": ["fixture-server", "--stderr-banner", "banner-7c1", "--echo-env", "FX_API_KEY"],
            "env": {"FX_API_KEY": "sk-live-abcdef123456"}}}),
    );
    let args = ["--config", config.as_str(), "tools"];
    let (code, _, stderr) = common::run_in(
        &dir,
        &args,
        &[("RUST_LOG", "mcp_harness::server_stderr=debug")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("banner-7c1"), "{stderr}");
    assert!(stderr.contains("FX_API_KEY=[redacted]"), "{stderr}");
    assert!(
        !stderr.contains("sk-live-abcdef123456"),
        "a secret in the log: {stderr}"
    );
    let (code, _, stderr) = common::run_in(&dir, &args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("banner-7c1"), "{stderr}");
}

/// `subscribe` follows its server: a lost connection is said once, the server back is said
/// once and the subscription renewed (an update made after it is printed), and a server that
/// failed ends the subscription with status 3 and why. Over HTTP (the fixture stopped and
/// started again on its port), then over stdio (its process killed: a stdio server is not
/// restarted in a loop).
#[test]
fn subscribe_says_when_its_server_is_lost_back_or_failed() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let dir = temp_dir("subscribe-lost");
    let port = common::gateway::free_addr()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let marker = format!("sub-lost-{}", std::process::id());
    let start_fixture = || {
        Command::new(bin())
            .args([
                "fixture-server",
                "--transport",
                "http",
                "--port",
                &port,
                "--name",
                &marker,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the fixture")
    };
    let listening = || {
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the fixture did not listen on {port}");
    };
    let mut fixture = start_fixture();
    listening();
    let c = write_config(
        &dir,
        serde_json::json!({"fx": {"url": format!("http://127.0.0.1:{port}/mcp")}}),
    );
    let uri = "fixture://static/readme";
    let subscribe = |config: &str, stderr: Stdio| {
        Command::new(bin())
            .args(["--config", config, "subscribe", "fx", uri])
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start subscribe")
    };
    let log = dir.join("subscribe.err");
    let mut sub = subscribe(&c, Stdio::from(std::fs::File::create(&log).expect("log")));
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = sub.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().take(100) {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = |limit: Duration| lines.recv_timeout(limit).unwrap_or_default();
    assert!(next_line(Duration::from_secs(20)).starts_with("subscribed to"));
    let update = |text: &str| {
        let args = serde_json::json!({"uri": uri, "text": text}).to_string();
        let out = Command::new(bin())
            .args(["--config", &c, "call", "mcp__fx__update_resource", &args])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("update");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    update("one");
    assert_eq!(
        next_line(Duration::from_secs(10)),
        format!("updated: {uri} (fx)")
    );
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait_said = |what: &str| {
        let until = Instant::now() + Duration::from_secs(40);
        while Instant::now() < until && !said().contains(what) {
            std::thread::sleep(Duration::from_millis(100));
        }
        said()
    };

    let _ = fixture.kill();
    let _ = fixture.wait();
    let text = wait_said("was lost");
    assert!(
        text.contains("the connection to fx was lost; subscribing again once it is back"),
        "{text}"
    );
    let mut fixture = start_fixture();
    listening();
    let text = wait_said("fx is back");
    assert!(text.contains("fx is back; subscribing again"), "{text}");
    // The renewal follows the announcement: updates until one is printed (bounded).
    let mut heard = String::new();
    for i in 0..20 {
        update(&format!("after {i}"));
        heard = next_line(Duration::from_millis(500));
        if !heard.is_empty() {
            break;
        }
    }
    assert_eq!(heard, format!("updated: {uri} (fx)"), "{}", said());
    assert_eq!(said().matches("was lost").count(), 1, "{}", said());
    let _ = sub.kill();
    let _ = sub.wait();
    let _ = fixture.kill();
    let _ = fixture.wait();

    // Over stdio: the process killed, the subscription ends with 3 and the reason.
    let stdio_marker = format!("{marker}-stdio");
    let c = write_config(
        &dir,
        serde_json::json!({"fx": {"command": bin(), "args": ["fixture-server", "--name", &stdio_marker]}}),
    );
    let mut sub = subscribe(&c, Stdio::piped());
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(sub.stdout.take().expect("stdout"));
    let _ = reader.read_line(&mut first);
    assert!(first.starts_with("subscribed to"), "{first:?}");
    for pid in common::pids_with(&stdio_marker) {
        // SAFETY: kill(2) on the fixture this test's subscribe started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let until = Instant::now() + Duration::from_secs(20);
    let mut status = None;
    while Instant::now() < until {
        status = sub.try_wait().expect("try_wait");
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if status.is_none() {
        let _ = sub.kill();
    }
    let out = sub.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("server `fx` failed") && err.contains("the subscription ended"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

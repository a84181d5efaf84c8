//! The `mcp-harness` binary as a user runs it: the demo, config errors, inspect and call against
//! the built-in fixture (this binary's hidden `fixture-server`), and SIGTERM leaving no child.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::pids_with;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-harness")
}

/// A config file with one stdio fixture server named `fx` (this binary as the server).
fn fixture_config(dir: &std::path::Path, marker: &str) -> std::path::PathBuf {
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {"fx": {
        "command": bin(),
        "args": ["fixture-server", "--name", marker, "--tools", "2"],
        "toolTimeoutSec": 20
    }}, "permissions": {"allow": ["mcp__fx__*"], "deny": ["mcp__fx__remove_*"]}});
    std::fs::write(&path, config.to_string()).expect("write config");
    path
}

fn temp_dir() -> std::path::PathBuf {
    mcp_harness_fixture::scratch::dir("cli")
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ rand_seed()
    )
}

fn rand_seed() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run mcp-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Live processes whose command line contains `marker` (zombies excluded).
fn processes_with(marker: &str) -> usize {
    pids_with(marker).len()
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

#[test]
fn demo_runs_the_whole_tour() {
    let (code, out, err) = run(&["demo"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("builtin  connected  in-process"), "{out}");
    assert!(out.contains("fixture  connected  stdio"), "{out}");
    assert!(out.contains("hello from mcp-harness"), "{out}");
    assert!(
        out.contains("+mcp__builtin__weather (notifications/tools/list_changed)"),
        "{out}"
    );
    assert!(out.contains("{\"city\":\"Lisbon\"}"), "{out}");
}

#[test]
fn config_errors_name_the_file_server_and_key() {
    let dir = temp_dir();
    let path = dir.join("bad.json");
    std::fs::write(&path, r#"{"mcpServers": {"fs": {"comand": "npx"}}}"#).expect("write");
    let (code, _, err) = run(&["servers", "--config", path.to_str().unwrap_or_default()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.json") && err.contains("\"fs\"") && err.contains("comand"),
        "{err}"
    );
}

#[test]
fn missing_default_config_suggests_the_fix() {
    let dir = temp_dir();
    let out = Command::new(bin())
        .arg("servers")
        .current_dir(&dir)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--config") && err.contains("demo"), "{err}");
}

#[test]
fn inspect_and_call_against_a_stdio_server() {
    let dir = temp_dir();
    let marker = format!("cli-inspect-{}", uuid_like());
    let config = fixture_config(&dir, &marker);
    let c = config.to_str().unwrap_or_default();

    let (code, out, err) = run(&["servers", "--config", c]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("fx  ") && out.contains("connected") && out.contains("stdio"),
        "{out}"
    );
    let (code, out, _) = run(&["servers", "--json", "--config", c]);
    assert_eq!(code, 0);
    let servers: serde_json::Value = serde_json::from_str(&out).expect("servers --json is JSON");
    assert_eq!(servers[0]["state"], "connected");
    assert_eq!(
        servers[0]["tools"], 19,
        "12 static + 2 fault-injection + 3 versioning and counters + 2 generated"
    );

    let (_, out, _) = run(&["tools", "--config", c]);
    assert!(
        out.contains("mcp__fx__echo") && out.contains("mcp__fx__tool_1"),
        "{out}"
    );
    let (_, out, _) = run(&["tools", "--json", "--config", c]);
    let tools: serde_json::Value = serde_json::from_str(&out).expect("tools --json is JSON");
    assert!(tools.as_array().is_some_and(|t| {
        t.iter()
            .any(|t| t["name"] == "mcp__fx__echo" && t["rawName"] == "echo")
    }));
    let (_, out, _) = run(&["prompts", "--config", c]);
    assert!(out.contains("mcp__fx__greeting"), "{out}");
    let (_, out, _) = run(&["resources", "--config", c]);
    assert!(
        out.contains("fixture://static/readme") && out.contains("fixture://items/{id}"),
        "{out}"
    );

    let (code, out, _) = run(&[
        "call",
        "mcp__fx__echo",
        r#"{"message": "from the cli"}"#,
        "--config",
        c,
    ]);
    assert_eq!((code, out.trim()), (0, "from the cli"));
    let (code, _, err) = run(&["call", "mcp__fx__fail", "--config", c]);
    assert_eq!(code, 1);
    assert!(
        err.contains("tool error") && err.contains("failed on purpose"),
        "{err}"
    );
    let (code, _, err) = run(&["call", "mcp__fx__nope", "--config", c]);
    assert_eq!(code, 5, "not in the catalog");
    assert!(
        err.contains("no tool named `mcp__fx__nope`") && err.contains("mcp-harness tools"),
        "{err}"
    );
    let (code, _, err) = run(&["call", "mcp__fx__echo", "[1,2]", "--config", c]);
    assert_eq!(code, 2);
    assert!(err.contains("JSON object"), "{err}");
    // A tool the config hides is said to be hidden, with why and how to show it again.
    let hiding = dir.join("hiding.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(c).expect("read")).expect("json");
    config["mcpServers"]["fx"]["excludeTools"] = serde_json::json!(["echo"]);
    std::fs::write(&hiding, config.to_string()).expect("write");
    let h = hiding.to_str().unwrap_or_default();
    let (code, _, err) = run(&[
        "call",
        "mcp__fx__echo",
        r#"{"message": "x"}"#,
        "--config",
        h,
    ]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("`mcp__fx__echo` is hidden: excluded by `excludeTools`")
            && err.contains("mcp-harness enable fx echo"),
        "{err}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "a fixture outlived the CLI"
    );
}

/// `restart SERVER` typed while watching restarts that server: a new process replaces the old.
#[test]
fn watch_restarts_a_server_when_asked() {
    let dir = temp_dir();
    let marker = format!("cli-restart-{}", uuid_like());
    let config = fixture_config(&dir, &marker);
    let mut child = Command::new(bin())
        .args(["watch", "--config", config.to_str().unwrap_or_default()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    assert!(
        wait_until(Duration::from_secs(30), || pids_with(&marker).len() == 1),
        "the fixture server never started"
    );
    let first = pids_with(&marker);
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "restart fx").expect("type the command");
    stdin.flush().expect("flush");
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now = pids_with(&marker);
            now.len() == 1 && now != first
        }),
        "the server was not restarted: {first:?} → {:?}",
        pids_with(&marker)
    );
    writeln!(stdin, "restart nosuch").expect("type the command");
    drop(stdin);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signals only the CLI process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("restarting fx"), "{err}");
    assert!(err.contains("cannot restart nosuch"), "{err}");
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "a server outlived the CLI"
    );
}

#[test]
fn sigterm_leaves_no_child_process() {
    let dir = temp_dir();
    let marker = format!("cli-sigterm-{}", uuid_like());
    let config = fixture_config(&dir, &marker);
    let mut child = Command::new(bin())
        .args(["watch", "--config", config.to_str().unwrap_or_default()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    assert!(
        wait_until(Duration::from_secs(30), || processes_with(&marker) == 1),
        "the fixture server never started"
    );
    // SAFETY: signals only the CLI process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "SIGTERM left a server running"
    );
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        use std::io::Read;
        let _ = s.read_to_string(&mut out);
    }
    assert!(out.contains("revision"), "watch printed revisions: {out}");
    let _ = std::io::stderr().flush();
}

#[test]
fn secrets_never_reach_the_logs() {
    let dir = temp_dir();
    let marker = format!("cli-secret-{}", uuid_like());
    let secret_env = "env-secret-5f3a9c";
    let secret_header = "header-secret-77d1e0";
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--name", &marker], "env": {"API_KEY": secret_env}},
        "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": format!("Bearer {secret_header}")}, "startupTimeoutSec": 3}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let out = Command::new(bin())
        .args([
            "-vvv",
            "servers",
            "--config",
            config.to_str().unwrap_or_default(),
        ])
        .output()
        .expect("run");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("connected"), "{all}");
    assert!(
        !all.contains(secret_env),
        "an env value leaked into the output"
    );
    assert!(
        !all.contains(secret_header),
        "a header value leaked into the output"
    );
}

#[test]
fn tools_hidden_explains_what_the_model_does_not_see() {
    let dir = temp_dir();
    let marker = format!("cli-hidden-{}", uuid_like());
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "dup": {"command": bin(), "args": ["fixture-server", "--name", &marker, "--duplicate-tool", "echo"]},
        "filtered": {"command": bin(), "args": ["fixture-server", "--name", &marker], "excludeTools": ["slow"]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let (code, out, err) = run(&[
        "tools",
        "--hidden",
        "--config",
        config.to_str().unwrap_or_default(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("STATUS") && out.contains("REASON"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("hidden") && l.contains("dup") && l.contains("name conflict")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("filtered") && l.contains("slow") && l.contains("excludeTools")),
        "{out}"
    );
}

#[test]
fn calls_without_a_rule_are_refused_without_a_terminal_unless_yes() {
    let dir = temp_dir();
    let marker = format!("cli-perm-{}", uuid_like());
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let c = config.to_str().unwrap_or_default();
    let (code, _, err) = run(&[
        "call",
        "mcp__fx__echo",
        r#"{"message": "x"}"#,
        "--config",
        c,
    ]);
    assert_eq!(code, 4, "refused by policy");
    assert!(
        err.contains("was not run") && err.contains("permissions.allow"),
        "{err}"
    );
    let (code, out, err) = run(&[
        "--yes",
        "call",
        "mcp__fx__echo",
        r#"{"message": "x"}"#,
        "--config",
        c,
    ]);
    assert_eq!((code, out.trim()), (0, "x"), "{err}");
}

#[test]
fn deny_rules_hold_and_invalid_arguments_are_refused_before_sending() {
    let dir = temp_dir();
    let marker = format!("cli-deny-{}", uuid_like());
    let config = fixture_config(&dir, &marker);
    let c = config.to_str().unwrap_or_default();
    let (code, _, err) = run(&[
        "--yes",
        "call",
        "mcp__fx__remove_tool",
        r#"{"name": "x"}"#,
        "--config",
        c,
    ]);
    assert_eq!(code, 4, "refused by policy");
    assert!(
        err.contains("mcp__fx__remove_*") && err.contains("was not run"),
        "{err}"
    );
    let (code, _, err) = run(&["call", "mcp__fx__echo", r#"{"message": 5}"#, "--config", c]);
    assert_eq!(
        code, 2,
        "arguments that do not match the schema are a usage error"
    );
    assert!(
        err.contains("do not match its input schema") && err.contains("message"),
        "{err}"
    );
    // The harness's own tool too: a handle that is not one is a usage error, one that is
    // well formed but not stored a failed request.
    let (code, _, err) = run(&[
        "call",
        "mcp_harness__read_output",
        r#"{"handle": "bad"}"#,
        "--config",
        c,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("out-"), "{err}");
    let unknown = format!(r#"{{"handle": "out-{}"}}"#, "0".repeat(32));
    let (code, _, err) = run(&["call", "mcp_harness__read_output", &unknown, "--config", c]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no stored output"), "{err}");
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    // `mcp-harness tools | head -1`: stdout closes before everything is written.
    let dir = temp_dir();
    let marker = format!("cli-pipe-{}", uuid_like());
    // Enough tools that the table is larger than a pipe's buffer.
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--name", &marker, "--tools", "3000"]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let mut child = Command::new(bin())
        .args(["tools", "--config", config.to_str().unwrap_or_default()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tools");
    {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut first);
        assert!(first.starts_with("TOOL"), "{first}");
    } // the read end closes here
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "the server was shut down"
    );
}

/// `tools --json` / `tools --hidden --json` as parsed JSON, with the exit status checked.
fn json_of(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// Issue 13 point 4: server `aaa` (sorts first, 217 tools) took the whole tool cap of 128 and
/// hid every tool of `zzz`, while `tools` listed all of them as visible and `tools --hidden` was
/// empty. Now `tools` is what a bound step shows, `--hidden` what it hides, and the cap is
/// shared fairly.
#[test]
fn tools_shows_what_a_step_exposes_and_the_cap_is_shared_fairly() {
    let dir = temp_dir();
    let marker = format!("cli-fair-{}", uuid_like());
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "aaa": {"command": bin(), "args": ["fixture-server", "--name", &marker, "--tools", "200"]},
        "zzz": {"command": bin(), "args": ["fixture-server", "--name", &marker]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let c = config.to_str().unwrap_or_default();

    let servers = json_of(&["servers", "--json", "--config", c]);
    let listed: Vec<u64> = ["aaa", "zzz"]
        .iter()
        .map(|s| {
            servers
                .as_array()
                .and_then(|a| a.iter().find(|v| v["name"] == *s))
                .and_then(|v| v["tools"].as_u64())
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(listed, [217, 17], "{servers}");

    let shown = json_of(&["tools", "--json", "--config", c]);
    let shown = shown.as_array().cloned().unwrap_or_default();
    let of = |server: &str| {
        shown
            .iter()
            .filter(|t| t["server"] == server && t["exposure"] == "direct")
            .count()
    };
    // zzz needs less than half the cap and shows every tool; aaa gets the rest, after the
    // harness's own `read_output`.
    assert_eq!((of("aaa"), of("zzz")), (110, 17));
    assert!(
        shown
            .iter()
            .any(|t| t["name"] == "mcp_harness__read_output" && t["exposure"] == "built-in"),
        "the built-in tools a step shows are listed"
    );

    let hidden = json_of(&["tools", "--hidden", "--json", "--config", c]);
    let hidden: Vec<_> = hidden
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|h| h["kind"] == "tools")
        .collect();
    assert_eq!(hidden.len(), 217 - 110, "every tool left out is listed");
    for h in &hidden {
        let reason = h["reason"].as_str().unwrap_or_default();
        assert_eq!(h["server"], "aaa");
        assert!(
            reason.contains(
                "tool cap of 128 reached (`exposure.maxTools`, counting the harness's own tool)"
            ) && reason.contains("shared fairly among 2 servers"),
            "{reason}"
        );
    }
    // Shown and hidden together are every listed tool, each once.
    let mut all: Vec<String> = shown
        .iter()
        .filter(|t| t["exposure"] == "direct")
        .map(|t| format!("{}/{}", t["server"], t["rawName"]))
        .chain(
            hidden
                .iter()
                .map(|h| format!("{}/{}", h["server"], h["name"])),
        )
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 217 + 17);

    // What `tools` shows can be called; what `--hidden` lists is refused as hidden.
    let (code, out, err) = run(&[
        "call",
        "mcp__zzz__echo",
        r#"{"message": "zzz is reachable"}"#,
        "--yes",
        "--config",
        c,
    ]);
    assert_eq!((code, out.trim()), (0, "zzz is reachable"), "{err}");
    let gone = format!(
        "mcp__aaa__{}",
        hidden[0]["name"].as_str().unwrap_or_default()
    );
    let (code, _, err) = run(&["call", &gone, "--yes", "--config", c]);
    assert_eq!(
        code, 5,
        "hidden from the model: not in the catalog a step shows"
    );
    assert!(
        err.contains("hidden") && err.contains("tools --hidden"),
        "{err}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "the servers were shut down"
    );
}

/// Issue 13 point 5: a server named `x__y` made tool names that another server's tools can
/// have; the config refuses it, naming the file, the server and the fix.
#[test]
fn server_names_with_double_underscores_are_refused() {
    let dir = temp_dir();
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "x": {"command": bin(), "args": ["fixture-server"]},
        "x__y": {"command": bin(), "args": ["fixture-server"]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let (code, _, err) = run(&["tools", "--config", config.to_str().unwrap_or_default()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("mcp.json") && err.contains("server \"x__y\"") && err.contains("\"x-y\""),
        "{err}"
    );
}

/// Runs the CLI with its stdout on a pseudo-terminal (raw mode: no newline translation);
/// returns the exit status, the bytes written to the terminal and stderr.
fn run_on_terminal(args: &[&str]) -> (i32, Vec<u8>, String) {
    use std::io::Read;
    let (master, slave) = common::open_pty();
    unsafe {
        use std::os::fd::AsRawFd;
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(slave.as_raw_fd(), &mut t), 0);
        libc::cfmakeraw(&mut t);
        assert_eq!(libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t), 0);
    }
    let child = {
        let mut command = Command::new(bin());
        command
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(slave))
            .stderr(Stdio::piped());
        command.spawn().expect("run mcp-harness")
        // The command, and with it our copy of the slave, is dropped here: the reader below
        // sees the end once the CLI exits.
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        // Ends with EIO (Linux) or 0 once no process has the terminal open.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(bytes);
    });
    let out = child.wait_with_output().expect("wait");
    let bytes = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the terminal was closed");
    (
        out.status.code().unwrap_or(-1),
        bytes,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 13 point 9: `call` wrote server text with raw escape sequences to the terminal, and a
/// result that violates its `outputSchema` or carries an image that is not base64 exited 0
/// without a word.
#[test]
fn call_cleans_terminal_output_and_flags_faulty_results() {
    let dir = temp_dir();
    let marker = format!("cli-bad-{}", uuid_like());
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {
        "bad": {"command": bin(), "args": ["fixture-server", "--name", &marker, "--bad-results"]}
    }});
    std::fs::write(&config, text.to_string()).expect("write");
    let c = config.to_str().unwrap_or_default();

    let (code, out, err) =
        run_on_terminal(&["call", "mcp__bad__ansi_text", "--yes", "--config", c]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8_lossy(&out).into_owned();
    // ESC, BEL, the carriage return and the C1 CSI are gone; the newline and the tab stay.
    assert_eq!(out, "before[2J[31mred[0mover\nline\ttabend\n");
    // To a pipe the text is passed on as the server sent it.
    let (code, out, _) = run(&["call", "mcp__bad__ansi_text", "--yes", "--config", c]);
    assert_eq!(code, 0);
    assert!(out.contains("\u{1b}[2J") && out.contains('\r'), "{out:?}");

    let (code, out, err) = run(&["call", "mcp__bad__bad_structured", "--yes", "--config", c]);
    assert_eq!(code, 1, "a faulty result is a failed call: {out}{err}");
    assert!(
        out.contains("n is one"),
        "the result is still printed: {out}"
    );
    assert!(
        err.contains("warning: structuredContent does not match the tool's outputSchema")
            && err.contains("/n"),
        "{err}"
    );
    let (code, out, err) = run(&["call", "mcp__bad__bad_image", "--yes", "--config", c]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("warning: image block 0") && err.contains("not valid base64"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "call",
        "mcp__bad__echo",
        r#"{"message": "fine"}"#,
        "--yes",
        "--config",
        c,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let (_, help, _) = run(&["--help"]);
    assert!(
        help.contains("Exit status")
            && help.contains("1 the tool or request failed (a tool error, a faulty result"),
        "{help}"
    );
    assert!(
        wait_until(Duration::from_secs(5), || processes_with(&marker) == 0),
        "the server was shut down"
    );
}

/// A closed stderr (the reading end of a `2>&1 | ...` pipeline gone, a hung-up terminal) costs
/// the log lines and nothing else: with every log level on, a call still runs and prints its
/// result, and the exit status is the call's. Before, tracing reported the failed log write
/// with `eprintln!`, which panicked the thread that logged: the call failed with status 1 and
/// no output.
#[test]
fn a_closed_stderr_costs_only_the_log() {
    let dir = temp_dir();
    let config = fixture_config(&dir, &format!("closed-stderr-{}", uuid_like()));
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(bin())
        .args([
            "call",
            "mcp__fx__echo",
            r#"{"message": "still here"}"#,
            "--config",
        ])
        .arg(&config)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stderr(Stdio::from(writer))
        .output()
        .expect("run mcp-harness");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "still here")
    );
    let _ = std::fs::remove_dir_all(dir);
}

//! Issue 17 point 2: `mcp-harness shell` — several commands against one runtime whose servers
//! keep their state between them; piped from a script, and on a pseudo-terminal with tab
//! completion and history.

mod common;

use common::{Pty, bin, temp_home};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

/// A folder with `mcp.json` configuring the fixture (with its asking tools) as server `fx`.
fn setup(tag: &str) -> std::path::PathBuf {
    let dir = temp_home("shell", tag);
    let config = json!({"mcpServers": {
        "fx": {"command": bin(), "args": ["fixture-server", "--client-requests"]}
    }});
    std::fs::write(dir.join("mcp.json"), config.to_string()).expect("write config");
    std::fs::create_dir_all(dir.join("elsewhere")).expect("mkdir");
    dir
}

/// `shell` started in `dir` with `extra` arguments, its stdin, stdout and stderr piped.
fn shell(dir: &std::path::Path, extra: &[&str]) -> std::process::Child {
    Command::new(bin())
        .args(["shell", "--yes", "--config", "mcp.json"])
        .args(extra)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-harness shell")
}

/// Runs `shell` in `dir` with `script` piped to stdin: (exit status, stdout, stderr).
fn piped(dir: &std::path::Path, extra: &[&str], script: &str) -> (i32, String, String) {
    let mut child = shell(dir, extra);
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("pipe the script");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_piped_script_runs_against_one_runtime() {
    let dir = setup("piped");
    let script = r#"
# state on the server carries over from one command to the next
call mcp__fx__echo {"message": "one"}
call mcp__fx__echo '{"message": "two words"}'
call mcp__fx__update_resource {"uri": "fixture://static/readme", "text": "changed by the script"}
read fx fixture://static/readme
call mcp__fx__calls
roots elsewhere
call mcp__fx__ask_roots
roots nowhere
disable fx
servers
call mcp__fx__echo {"message": "while disabled"}
enable fx
call mcp__fx__calls
"#;
    let (code, out, err) = piped(&dir, &[], script);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("one\n") && out.contains("two words\n"),
        "{out}"
    );
    assert!(out.contains("changed by the script"), "{out}");
    // One server process saw every call (a fresh one would count 1 echo).
    let counts: Vec<Value> = out
        .lines()
        .filter(|l| l.starts_with("{\"calls\""))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(counts.len(), 2, "{out}");
    assert_eq!(counts[0]["echo"], 2, "{out}");
    assert_eq!(counts[0]["update_resource"], 1, "{out}");
    // Roots changed: the server was told, asked again and got the new folder.
    let here = std::fs::canonicalize(dir.join("elsewhere")).expect("canonical");
    let asked: Value = out
        .lines()
        .find(|l| l.starts_with("{\"result\""))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no roots answer in:\n{out}"));
    assert_eq!(asked["rootsListChanged"], 1, "{out}");
    assert_eq!(
        asked["result"]["roots"][0]["uri"],
        format!("file://{}", here.display()),
        "{out}"
    );
    assert!(err.contains("roots changed; told 1 server"), "{err}");
    assert!(
        err.contains("roots nowhere: ") && err.contains("the roots stay as they were"),
        "the shell's own command is named, not --root: {err}"
    );
    // Disabled for the session, then enabled again: a new process, counting afresh. Meanwhile
    // the hint names the shell's `enable`, not the one editing the config.
    assert!(
        err.contains("server `fx` is disabled: `enable fx` starts it for this session"),
        "{err}"
    );
    assert!(out.contains("disabled for this session: fx"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("fx") && l.contains("disabled")),
        "{out}"
    );
    assert!(counts[1].get("echo").is_none(), "{out}");
}

/// `restart SERVER` returns once the server is back: the next line meets the new process (its
/// call count starts over), not the closing one. A line that is not UTF-8 is said and skipped;
/// the lines after it run.
#[test]
fn a_restart_is_done_before_the_next_line_and_a_bad_line_is_skipped() {
    let dir = setup("restart");
    let script: &[u8] = b"call mcp__fx__echo {\"message\": \"a\"}\nrestart fx\ncall mcp__fx__calls\necho \xff\ncall mcp__fx__echo {\"message\": \"after\"}\n";
    let mut child = shell(&dir, &[]);
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script)
        .expect("pipe the script");
    let out = child.wait_with_output().expect("wait");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("restarted fx"), "{stdout}");
    let counts: Value = stdout
        .lines()
        .find(|l| l.starts_with("{\"calls\""))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no call counts in:\n{stdout}\n{stderr}"));
    assert!(
        counts.get("echo").is_none(),
        "the old process answered: {counts}"
    );
    assert!(stderr.contains("line 4 is not UTF-8"), "{stderr}");
    assert!(
        stdout.contains("after"),
        "the lines after the bad one ran: {stdout}"
    );
}

/// A line's arguments are checked as on the command line: `subscribe --count 0` (which would
/// subscribe and block) is refused, and the script goes on.
#[test]
fn a_lines_arguments_are_checked_as_on_the_command_line() {
    let dir = setup("count");
    let (code, out, err) = piped(
        &dir,
        &[],
        "subscribe fx fixture://static/readme --count 0\ncall mcp__fx__echo {\"message\": \"after\"}\n",
    );
    assert!(err.contains("--count") && err.contains("0"), "{err}");
    assert!(out.contains("after"), "{out}\n{err}");
    assert_eq!(code, 0, "{err}");
}

/// Ctrl-C (SIGINT) during a call stops it and tells its server (`notifications/cancelled`);
/// the shell goes on with the next line.
#[test]
fn ctrl_c_cancels_the_running_call_at_its_server() {
    let dir = setup("interrupt");
    let mut child = shell(&dir, &[]);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(b"call mcp__fx__slow {\"ms\": 20000}\n")
        .expect("type the call");
    stdin.flush().expect("flush");
    // Once the call reports progress it is running at the server: then Ctrl-C.
    let stderr = child.stderr.take().expect("stderr");
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let started = std::time::Instant::now();
    while !lines
        .recv_timeout(std::time::Duration::from_secs(1))
        .is_ok_and(|l| l.starts_with("progress"))
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the call never reported progress"
        );
    }
    // SAFETY: signals only the CLI process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // Asked twice: the fixture records a cancellation on a task of its own, which a request
    // right behind it on the wire may overtake; the second answer has it.
    stdin
        .write_all(b"call mcp__fx__cancellations {}\ncall mcp__fx__cancellations {}\n")
        .expect("type the next commands");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = reader.join().expect("the stderr reader");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let seen: Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("{\"cancelled\""))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no cancellations in:\n{stdout}\n{stderr}"));
    assert_eq!(
        seen["cancelled"].as_array().map(Vec::len),
        Some(1),
        "the server was not told: {seen}"
    );
}

#[test]
fn a_piped_script_honours_json_and_reports_the_last_status() {
    let dir = setup("json");
    let script = "call mcp__fx__add {\"a\": 1, \"b\": 2}\ntools\ncall mcp__fx__nope\n";
    let (code, out, err) = piped(&dir, &["--json"], script);
    // The last command failed: not in the catalog.
    assert_eq!(code, 5, "{err}");
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(docs[0]["structuredContent"]["sum"], 3, "{out}");
    assert!(docs[1].to_string().contains("mcp__fx__echo"), "{out}");
    assert!(err.contains("mcp__fx__nope"), "{err}");

    let (code, _, err) = piped(&dir, &[], "call\n");
    assert_eq!(code, 2, "a usage error: {err}");
}

#[test]
fn on_a_terminal_tab_completes_and_up_recalls() {
    let dir = setup("pty");
    let mut t = Pty::spawn_term(&dir, &["shell", "--yes", "--config", "mcp.json"], "xterm");
    t.expect("mcp> ");
    // A command, a qualified name and an argument key from the tool's schema.
    t.send("cal\t");
    t.expect("call ");
    t.send("mcp__fx__ec\t");
    t.expect("mcp__fx__echo ");
    t.send("{\"mes\t");
    t.expect("\"message\": ");
    t.send("\"from the keyboard\"}\r");
    t.expect("from the keyboard");
    t.expect("mcp> ");
    // ↑ recalls the last line; Enter runs it again (the server counts two echoes).
    t.send("\x1b[A\r");
    t.expect("from the keyboard");
    t.expect("mcp> ");
    t.send("call mcp__fx__calls\r");
    t.expect("\"echo\":2");
    t.expect("mcp> ");
    t.send("exit\r");
    let (code, shown) = t.finish();
    assert_eq!(code, 0, "{shown}");
}

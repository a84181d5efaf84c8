//! Signals to the `mcp-harness` process leave nothing behind: a server that ignores stdin EOF,
//! its grandchild in the server's process group and its grandchild in a session of its own
//! (`setsid`) are all gone after SIGHUP (a closed terminal) and SIGTERM, and so is the output
//! store's temp directory. After SIGKILL, where nothing in the harness runs, the server dies by
//! its death signal and the harness's watchdog process kills the rest, grandchildren included;
//! the watchdog itself ends with the harness.
//!
//! Every process a test starts carries a marker unique to the test in its environment (set as
//! the server's configured `env`, inherited by its children), which is how they are found.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MARKER_VAR: &str = "MCP_HARNESS_SIGNAL_TEST";

/// Live processes (zombies excluded) whose environment holds `MARKER_VAR=marker`.
fn marked(marker: &str) -> Vec<(u32, String)> {
    let tag = format!("{MARKER_VAR}={marker}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("Z");
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if state != "Z" && environ.split(|&b| b == 0).any(|v| v == tag.as_bytes()) {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

/// The harness `pid`'s watchdog processes still running (`mcp-harness __mcp-harness-watchdog
/// <pid>`).
fn watchdogs_of(pid: u32) -> Vec<u32> {
    let wanted = format!("__mcp-harness-watchdog\0{pid}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let found = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let cmd = std::fs::read(entry.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let zombie = stat.rsplit(')').next()?.split_whitespace().next()? == "Z";
            (!zombie && String::from_utf8_lossy(&cmd).contains(&wanted)).then_some(found)
        })
        .collect()
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

/// Kills whatever a failed test left, so a failure does not leak processes into the run.
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for (pid, _) in marked(&self.0) {
            // SAFETY: kill only sends a signal.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
}

fn output_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("mcp-harness-output-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `mcp-harness watch` on one stubborn server, in a private home and TMPDIR; returns once the
/// server and both its grandchildren run.
fn start(tag: &str) -> (Child, String, PathBuf, Sweep) {
    let dir = common::temp_home("signals", tag);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let marker = format!("{tag}-{}", dir.display());
    let config = dir.join("mcp.json");
    let text = serde_json::json!({"mcpServers": {"stubborn": {
        "command": common::bin(),
        "args": ["fixture-server", "--ignore-stdin-eof", "--spawn-grandchildren"],
        "env": {MARKER_VAR: &marker}
    }}});
    std::fs::write(&config, text.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("stderr.log")).expect("stderr log");
    let child = Command::new(common::bin())
        .args(["--config", config.to_str().unwrap_or_default(), "watch"])
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("TMPDIR", &tmp)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start mcp-harness watch");
    let sweep = Sweep(marker.clone());
    let running = wait_until(Duration::from_secs(30), || marked(&marker).len() >= 3);
    assert!(
        running,
        "server and two grandchildren: {:?}\n{}",
        marked(&marker),
        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
    );
    assert_eq!(output_dirs(&tmp).len(), 1, "the output store's temp dir");
    (child, marker, tmp, sweep)
}

fn signal_and_wait(child: &mut Child, signal: i32) {
    // SAFETY: kill only sends a signal to our own child.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
    let exited = wait_until(Duration::from_secs(30), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "the harness did not exit after signal {signal}");
}

fn leaves_nothing_after(signal: i32, tag: &str) {
    let (mut child, marker, tmp, _sweep) = start(tag);
    let harness = child.id();
    assert_eq!(watchdogs_of(harness).len(), 1, "the harness's watchdog");
    signal_and_wait(&mut child, signal);
    let gone = wait_until(Duration::from_secs(10), || marked(&marker).is_empty());
    assert!(gone, "left after signal {signal}: {:?}", marked(&marker));
    assert!(
        wait_until(Duration::from_secs(10), || watchdogs_of(harness).is_empty()),
        "the watchdog outlived the harness"
    );
    assert!(
        output_dirs(&tmp).is_empty(),
        "output store left: {:?}",
        output_dirs(&tmp)
    );
}

#[test]
fn sighup_leaves_no_process_and_no_temp_dir() {
    leaves_nothing_after(libc::SIGHUP, "hup");
}

#[test]
fn sigterm_leaves_no_process_and_no_temp_dir() {
    leaves_nothing_after(libc::SIGTERM, "term");
}

/// On SIGKILL nothing in the harness runs: the server dies through its death signal
/// (`PR_SET_PDEATHSIG`), and the watchdog, seeing its pipe from the harness end, kills the
/// server's group (the grandchild in it, as the real server behind `npx` or `sh -c`) and the
/// processes carrying the harness's tag (the `setsid` grandchild). The temp dir stays until
/// the next harness starts: its output store removes the directories whose owner died (their
/// lock is free).
#[test]
fn sigkill_takes_the_server_and_its_children_down_with_the_harness() {
    let (mut child, marker, tmp, _sweep) = start("kill");
    let harness = child.id();
    assert_eq!(watchdogs_of(harness).len(), 1, "the harness's watchdog");
    signal_and_wait(&mut child, libc::SIGKILL);
    let gone = wait_until(Duration::from_secs(10), || marked(&marker).is_empty());
    assert!(gone, "outlived a SIGKILLed harness: {:?}", marked(&marker));
    assert!(
        wait_until(Duration::from_secs(10), || watchdogs_of(harness).is_empty()),
        "the watchdog outlived the harness"
    );
    assert_eq!(output_dirs(&tmp).len(), 1, "the killed harness's store");
    let empty = tmp.join("empty.json");
    std::fs::write(&empty, r#"{"mcpServers": {}}"#).expect("write empty config");
    let next = Command::new(common::bin())
        .args(["--config", empty.to_str().unwrap_or_default(), "servers"])
        .env("HOME", tmp.join("home"))
        .env("XDG_CONFIG_HOME", tmp.join("xdg"))
        .env("TMPDIR", &tmp)
        .env_remove("RUST_LOG")
        .output()
        .expect("run mcp-harness servers");
    assert!(next.status.success(), "{next:?}");
    assert!(
        output_dirs(&tmp).is_empty(),
        "the next harness left the dead one's store: {:?}",
        output_dirs(&tmp)
    );
}

/// SIGTERM while a one-shot command waits for a remote config source (one that accepts the
/// connection and never answers) ends it as any other interruption: 130, said, servers closed.
#[test]
fn sigterm_while_a_remote_source_is_awaited_is_an_interruption() {
    let dir = common::temp_home("signals", "remote");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let marker = format!("remote-{}", dir.display());
    let xdg = dir.join("xdg");
    std::fs::create_dir_all(xdg.join("mcp-harness")).expect("xdg");
    let config = serde_json::json!({
        "remoteSources": [{"url": format!("http://127.0.0.1:{port}/servers.json"), "timeoutSec": 60}],
        "mcpServers": {"local": {"command": common::bin(), "args": ["fixture-server"],
            "env": {MARKER_VAR: &marker}}},
    });
    std::fs::write(xdg.join("mcp-harness/config.json"), config.to_string()).expect("write");
    let mut child = Command::new(common::bin())
        .arg("servers")
        .current_dir(&dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", &xdg)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcp-harness servers");
    let _sweep = Sweep(marker.clone());
    // The local server runs while the source is awaited.
    assert!(
        wait_until(Duration::from_secs(30), || !marked(&marker).is_empty()),
        "the local server never started"
    );
    signal_and_wait(&mut child, libc::SIGTERM);
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted by SIGTERM while fetching the remote sources"),
        "{err}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || marked(&marker).is_empty()),
        "left: {:?}",
        marked(&marker)
    );
    drop(silent);
}

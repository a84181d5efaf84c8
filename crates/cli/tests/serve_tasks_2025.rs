//! `mcp-harness serve --http` passing SEP-1686 task-augmented calls (MCP 2025-11-25) through,
//! driven by raw 2025-11-25 sessions in front of server-everything, whose
//! `simulate-research-query` runs only as a task: the gateway declares `capabilities.tasks`
//! (cancel, `tools/call`; no list) while an upstream does, shows the tool's
//! `execution.taskSupport`, and a `tools/call` with `task` gets the upstream's task under a
//! gateway id, followed with `tasks/get`, `tasks/result` and `tasks/cancel`. The id is bound to
//! its session: another profile, or another session of the same profile, gets the `-32602` of
//! an id that never existed. A hidden tool stays unknown, a profile's deny rule refuses the
//! call before any task exists, the task-only tool called plainly is `-32601` for a client
//! that declared tasks and followed to its result for one that did not, and metrics count the
//! created task as outcome `task`. Without such an upstream, no `capabilities.tasks`.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, Session, Sse, accept, http, sep1686_tasks};
use common::{everything_stdio, temp_home};
use serde_json::{Value, json};

const ALICE: &str = "alice-sep1686-token-1234567890";
const BOB: &str = "bob-sep1686-token-1234567890";
const CAROL: &str = "carol-sep1686-token-1234567890";
const DAVE: &str = "dave-sep1686-token-1234567890";
const RESEARCH: &str = "mcp__ev__simulate-research-query";

fn research(session: &Session<'_>, task: bool) -> Value {
    let mut params = json!({"name": RESEARCH, "arguments": {"topic": "gateways"}});
    if task {
        params["task"] = json!({"ttl": 60_000});
    }
    session.request("tools/call", params)
}

fn on_task(session: &Session<'_>, method: &str, id: &str) -> Value {
    session.request(method, json!({"taskId": id}))
}

/// The gateway in front of server-everything (`ev`, every tool allowed) with the client
/// profiles `clients` (their tokens from `GW_ALICE` … `GW_DAVE`), once the task tool is listed.
fn gateway(tag: &str, clients: Value) -> Served {
    gateway_with(tag, clients, json!({}))
}

/// [`gateway`] with `extra` top-level config keys.
fn gateway_with(tag: &str, clients: Value, extra: Value) -> Served {
    let dir = temp_home("serve-tasks-2025", tag);
    let config = dir.join("gateway.json");
    let mut document = json!({
        "mcpServers": {"ev": everything_stdio()},
        "permissions": {"allow": ["mcp__ev__*"]},
        "gateway": {"clients": clients}
    });
    if let (Some(document), Some(extra)) = (document.as_object_mut(), extra.as_object()) {
        document.extend(extra.clone());
    }
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let env = [
        ("GW_ALICE", ALICE),
        ("GW_BOB", BOB),
        ("GW_CAROL", CAROL),
        ("GW_DAVE", DAVE),
    ];
    let gateway = Served::start_with_env(&dir, &config, &[], Stdio::from(stderr), &env);
    // The upstream connects in the background: wait (bounded) until its task tool is listed.
    let (probe, _) = Session::open(&gateway.addr, ALICE, json!({}), "probe");
    probe.wait_listed(RESEARCH, Duration::from_secs(60));
    gateway
}

#[test]
fn serve_passes_sep_1686_tasks_through_bound_to_their_session() {
    let clients = json!({
        "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
        "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"}},
        "carol": {"auth": {"type": "bearer", "tokenEnv": "GW_CAROL"},
                  "tools": {"deny": [RESEARCH]}},
        "dave": {"auth": {"type": "bearer", "tokenEnv": "GW_DAVE"},
                 "permissions": {"deny": [RESEARCH]}}
    });
    let gateway = gateway("http", clients);
    let addr = gateway.addr.as_str();

    let (alice, init) = Session::open(addr, ALICE, sep1686_tasks(), "alice");
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "declared while an upstream takes task-augmented calls, without list: {init}"
    );
    let listed = alice.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).cloned();
    let shown = tool(RESEARCH).expect("the task tool is listed");
    assert_eq!(shown["execution"]["taskSupport"], "required", "{shown}");
    assert!(
        shown.get("_meta").is_none(),
        "no private mark left: {shown}"
    );
    let echo = tool("mcp__ev__echo").expect("echo is listed");
    assert!(echo.get("execution").is_none(), "{echo}");

    // A task-augmented call: the task under a gateway id, followed to its result.
    let created = research(&alice, true);
    let task = &created["result"]["task"];
    let id = task["taskId"].as_str().expect("a task id").to_string();
    assert!(id.starts_with("t1686."), "a gateway id: {created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(
        task.get("ttl").is_some() && task.get("createdAt").is_some(),
        "{created}"
    );
    assert!(created["result"].get("resultType").is_none(), "{created}");
    let got = on_task(&alice, "tasks/get", &id);
    assert_eq!(got["result"]["taskId"], id.as_str(), "{got}");
    assert!(
        ["working", "completed"].contains(&got["result"]["status"].as_str().unwrap_or("")),
        "{got}"
    );
    let result = on_task(&alice, "tasks/result", &id);
    let report = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(report.contains("Research Report: gateways"), "{result}");
    let done = on_task(&alice, "tasks/get", &id);
    assert_eq!(done["result"]["status"], "completed", "{done}");

    // Another task: nobody else learns anything about it nor touches it.
    let created = research(&alice, true);
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();
    let unknown = on_task(&alice, "tasks/get", "t1686.nonexistent-12345");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let (bob, _) = Session::open(addr, BOB, sep1686_tasks(), "bob");
    let (again, _) = Session::open(addr, ALICE, sep1686_tasks(), "alice-again");
    for (who, session) in [("bob", &bob), ("alice's other session", &again)] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let foreign = on_task(session, method, &id);
            assert_eq!(
                foreign["error"]["code"], -32602,
                "{who} {method}: {foreign}"
            );
            assert_eq!(
                foreign["error"]["message"], unknown["error"]["message"],
                "{who} {method}: {foreign}"
            );
        }
    }
    let still = on_task(&alice, "tasks/get", &id);
    assert_eq!(
        still["result"]["status"], "working",
        "cancelled by another: {still}"
    );
    let cancelled = on_task(&alice, "tasks/cancel", &id);
    assert_eq!(cancelled["result"]["taskId"], id.as_str(), "{cancelled}");
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let listed = alice.request("tasks/list", json!({}));
    assert_eq!(listed["error"]["code"], -32601, "{listed}");
    assert!(
        listed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not served")),
        "{listed}"
    );

    // The task-only tool called plainly: an error for a client that declared tasks; followed
    // to its result by the gateway for one that did not.
    let plain = research(&alice, false);
    assert_eq!(plain["error"]["code"], -32601, "{plain}");
    let (undeclared, init) = Session::open(addr, ALICE, json!({}), "plain");
    assert!(init["capabilities"].get("tasks").is_some(), "{init}");
    let followed = research(&undeclared, false);
    let report = followed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(report.contains("Research Report: gateways"), "{followed}");

    // Governance: hidden stays unknown; a deny rule refuses before any task exists.
    let (carol, _) = Session::open(addr, CAROL, sep1686_tasks(), "carol");
    let carol_tools = carol.request("tools/list", json!({}));
    assert!(!carol_tools.to_string().contains(RESEARCH), "{carol_tools}");
    let hidden = research(&carol, true);
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    assert!(
        hidden["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "{hidden}"
    );
    let (dave, _) = Session::open(addr, DAVE, sep1686_tasks(), "dave");
    let denied = research(&dave, true);
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert!(denied["result"].get("task").is_none(), "{denied}");
    assert!(denied.to_string().contains("denies"), "{denied}");

    let (_, _, metrics) = http(addr, "GET", "/metrics", &[], "");
    let counted = |outcome: &str| {
        metrics.lines().any(|l| {
            l.contains(&format!("tool=\"{RESEARCH}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
    };
    assert!(counted("task"), "no call counted as a task:\n{metrics}");
    assert!(
        counted("refused"),
        "the denied call not counted:\n{metrics}"
    );
    assert!(
        !counted("failed"),
        "a refusal counted as a failure:\n{metrics}"
    );
}

/// A task's result goes through what a plain call's does: over the output budget, the client
/// gets the bounded summary with a handle, and reads the whole result through
/// `mcp_harness__read_output`.
#[test]
fn a_task_result_over_the_output_budget_is_stored_as_a_calls_is() {
    let clients = json!({"alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}}});
    let gateway = gateway_with("budget", clients, json!({"output": {"budgetTokens": 100}}));
    let (alice, _) = Session::open(&gateway.addr, ALICE, sep1686_tasks(), "alice");
    let created = research(&alice, true);
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();
    let result = on_task(&alice, "tasks/result", &id);
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(text.contains("too large to show whole"), "{result}");
    assert!(result["result"].get("resultType").is_none(), "{result}");
    let handle = text
        .split('"')
        .find(|part| part.starts_with("out-"))
        .expect("a handle in the summary")
        .to_string();
    let page = alice.request(
        "tools/call",
        json!({"name": "mcp_harness__read_output", "arguments": {"handle": handle, "page": 1}}),
    );
    let whole = page["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(whole.contains("Research Report: gateways"), "{page}");
}

#[test]
fn serve_declares_no_sep_1686_tasks_without_an_upstream_that_takes_them() {
    let dir = temp_home("serve-tasks-2025", "none");
    let config = common::gateway::fixture_config(&dir, &[]);
    let gateway = Served::start(&dir, &config, &[], Stdio::null());
    let addr = gateway.addr.as_str();
    let (probe, _) = Session::open(addr, "none", json!({}), "probe");
    let start = Instant::now();
    while !probe
        .request("tools/list", json!({}))
        .to_string()
        .contains("mcp__fx__echo")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "no tools");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (session, init) = Session::open(addr, "none", sep1686_tasks(), "c");
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let call = session.request(
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"text": "x"}, "task": {"ttl": 1000}}),
    );
    assert!(call["result"].get("task").is_none(), "{call}");
    let result = session.request("tasks/result", json!({"taskId": "t1686.x"}));
    assert_eq!(result["error"]["code"], -32601, "{result}");
}

/// The next message of `stream` that is a request (an `elicitation/create` the gateway passes
/// on) or the answer with JSON-RPC id `id`; notifications are skipped.
fn next_request_or_answer(who: &str, stream: &mut Sse, id: u64) -> Value {
    (0..200)
        .map_while(|_| stream.next())
        .find(|m| m.get("method").is_some_and(|_| m.get("id").is_some()) || m["id"] == id)
        .unwrap_or_else(|| panic!("{who}'s tasks/result stream ended before a question or answer"))
}

/// Two clients wait on `tasks/result` of their own task on the same upstream at once, and
/// each task asks for clarification (`input_required`): each client gets its own task's
/// question on its own `tasks/result` stream, answers it, and gets the report made with its
/// own answer — never the other client's question or report.
#[test]
fn each_client_answers_its_own_tasks_question_while_waiting_on_its_result() {
    let clients = json!({
        "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
        "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"}}
    });
    let gateway = gateway("input", clients);
    let addr = gateway.addr.as_str();

    let mut capabilities = sep1686_tasks();
    capabilities["elicitation"] = json!({});
    let clients = [("alice", ALICE), ("bob", BOB)].map(|(name, token)| {
        let (session, _) = Session::open(addr, token, capabilities.clone(), name);
        let params = json!({"name": RESEARCH, "task": {"ttl": 60_000},
            "arguments": {"topic": format!("{name}-topic"), "ambiguous": true}});
        let created = session.request("tools/call", params);
        let id = created["result"]["task"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no task: {created}"))
            .to_string();
        (name, session, id)
    });
    // Both wait on their results before either question is answered.
    let mut waits: Vec<Sse> = clients
        .iter()
        .map(|(_, session, id)| {
            let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/result",
                "params": {"taskId": id}});
            Sse::post(session, &body)
        })
        .collect();
    for ((name, session, _), stream) in clients.iter().zip(&mut waits) {
        let asked = next_request_or_answer(name, stream, 5);
        assert_eq!(asked["method"], "elicitation/create", "{name}: {asked}");
        let question = asked["params"]["message"].as_str().unwrap_or_default();
        assert!(
            question.contains(&format!("{name}-topic")),
            "{name} got another task's question: {asked}"
        );
        let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result":
            accept(json!({"interpretation": format!("{name}-view")}))});
        let (status, _, body) = session.post(&reply);
        assert_eq!(status, 202, "{name}'s answer: {body}");
    }
    for ((name, _, _), stream) in clients.iter().zip(&mut waits) {
        let answer = next_request_or_answer(name, stream, 5);
        let report = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(
            report.contains(&format!("Research Report: {name}-topic")),
            "{name}: {answer}"
        );
        assert!(
            report.contains(&format!("Clarification**: {name}-view")),
            "{name}: {report}"
        );
    }
}

/// The gateway in front of the scripted upstream `up` (`tests/python/task_upstream.py`: its
/// tasks ask for input on their own schedule, may announce themselves, and are numbered from
/// `T1` in each process), with profiles `alice` and `bob`; and the file the upstream's process
/// writes its pid to.
fn scripted_gateway(tag: &str) -> (Served, std::path::PathBuf) {
    let dir = temp_home("serve-tasks-2025", tag);
    let pid_file = dir.join("upstream.pid");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/python/task_upstream.py");
    let server = json!({
        "command": common::peers().join("py/bin/python"),
        "args": [script],
        "env": {"TASK_UPSTREAM_PID": pid_file}
    });
    let document = json!({
        "mcpServers": {"up": server},
        "permissions": {"allow": ["mcp__up__*"]},
        "gateway": {"clients": {
            "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
            "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"}}
        }}
    });
    let config = dir.join("gateway.json");
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let env = [("GW_ALICE", ALICE), ("GW_BOB", BOB)];
    let gateway = Served::start_with_env(&dir, &config, &[], Stdio::from(stderr), &env);
    let (probe, _) = Session::open(&gateway.addr, ALICE, json!({}), "probe");
    probe.wait_listed("mcp__up__work", Duration::from_secs(60));
    (gateway, pid_file)
}

/// SIGKILLs the scripted upstream whose pid is in `pid_file`.
fn kill_upstream(pid_file: &std::path::Path) {
    let pid: i32 = std::fs::read_to_string(pid_file)
        .expect("the upstream's pid")
        .trim()
        .parse()
        .expect("a pid");
    // SAFETY: a signal to the upstream process this test's gateway started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// `up`'s `work` as a task of `session`, with `arguments`: the answer.
fn work_task(session: &Session<'_>, arguments: Value) -> Value {
    session.request(
        "tools/call",
        json!({"name": "mcp__up__work", "task": {"ttl": 60_000}, "arguments": arguments}),
    )
}

/// A task that asks for input while its client awaits no `tasks/result` names the task, not a
/// call: the question goes to no other client's call in flight on that upstream (it went to the
/// only one, whose answer then fed the first client's task).
#[test]
fn a_tasks_question_no_one_awaits_never_reaches_another_clients_call() {
    let (gateway, _) = scripted_gateway("unawaited");
    let mut capabilities = sep1686_tasks();
    capabilities["elicitation"] = json!({});
    let (alice, _) = Session::open(&gateway.addr, ALICE, capabilities.clone(), "alice");
    let (bob, _) = Session::open(&gateway.addr, BOB, capabilities, "bob");
    let arguments = json!({"who": "alice", "secs": 0.1, "ask": true, "ask_after": 0.3});
    let created = work_task(&alice, arguments);
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_string();
    // Bob's call is in flight on the upstream while alice's task asks.
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "mcp__up__sleep", "arguments": {"secs": 1.5}}});
    let mut call = Sse::post(&bob, &request);
    let mut seen = Vec::new();
    for message in (0..100).map_while(|_| call.next()) {
        let answered = message["id"] == 7 && message.get("method").is_none();
        seen.push(message);
        if answered {
            break;
        }
    }
    assert!(
        seen.iter().all(|m| m["method"] != "elicitation/create"),
        "bob was asked alice's task's question: {seen:?}"
    );
    let last = seen.last().cloned().unwrap_or_default();
    assert!(last["result"]["content"].is_array(), "bob's call: {last}");
    let result = on_task(&alice, "tasks/result", &id);
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("for alice") && !text.contains("bob"),
        "{result}"
    );
}

/// A stdio server numbers its tasks afresh when it restarts: a client's id of the previous
/// process's `T1` answers that the task is gone (it reached the new `T1`, another client's),
/// and that client's route of the old `T1` takes no status of the new one, which reaches its
/// own client.
#[test]
fn a_restarted_servers_task_ids_never_reach_another_clients_task() {
    let (gateway, pid_file) = scripted_gateway("restart");
    let (alice, _) = Session::open(&gateway.addr, ALICE, sep1686_tasks(), "alice");
    let (bob, _) = Session::open(&gateway.addr, BOB, sep1686_tasks(), "bob");
    // Bob's calls bind to this listing: one of them starts the exited server again (R7).
    bob.wait_listed("mcp__up__work", Duration::from_secs(20));
    let created = work_task(&alice, json!({"who": "alice", "secs": 30}));
    let alice_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_string();
    kill_upstream(&pid_file);
    let mut statuses = Sse::get(&bob);
    // The next call starts the server again (bounded: 100 tries, 20 s).
    let start = Instant::now();
    let bob_id = loop {
        let created = work_task(&bob, json!({"who": "bob", "secs": 0.5, "announce": true}));
        if let Some(id) = created["result"]["task"]["taskId"].as_str() {
            break id.to_string();
        }
        // Never run plainly, nor refused as a tool that takes no task, while the server
        // starts again: the call's restart decides on the new connection (a call sent before
        // the gateway saw the exit fails on the closed pipe).
        let failed = created["result"]["isError"] == true || created["result"].is_null();
        assert!(failed, "ran plainly: {created}");
        assert_ne!(created["error"]["code"], -32601, "{created}");
        assert!(start.elapsed() < Duration::from_secs(20), "{created}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let answer = on_task(&alice, method, &alice_id);
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("the task is gone") && message.contains("\"up\""),
            "{method} of alice's task of the previous process: {answer}"
        );
    }
    let announced = (0..100)
        .map_while(|_| statuses.next())
        .find(|m| m["method"] == "notifications/tasks/status")
        .unwrap_or_else(|| panic!("bob got no status of his task"));
    assert_eq!(announced["params"]["taskId"], json!(bob_id), "{announced}");
    // The first: the one announced before the task reached the gateway (held for bob, not
    // sent along alice's route of the old T1).
    assert_eq!(announced["params"]["status"], "working", "{announced}");
    let result = on_task(&bob, "tasks/result", &bob_id);
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("result of T1 for bob"), "{result}");
}

/// While the server of a client's task is down, the gateway still serves 2025-11-25 tasks:
/// `tasks/get` and `tasks/result` about the task answer that it is gone with its server, never
/// `-32601` (the front stayed on only while a connected upstream declared task-augmented calls).
#[test]
fn a_tasks_requests_while_its_server_is_down_name_the_server() {
    let (gateway, pid_file) = scripted_gateway("down");
    let (alice, _) = Session::open(&gateway.addr, ALICE, sep1686_tasks(), "alice");
    let created = work_task(&alice, json!({"who": "alice", "secs": 30}));
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_string();
    kill_upstream(&pid_file);
    // Until the gateway sees the exit the request may still fail on the closed pipe; after
    // it, the answer is the task's end (bounded: 100 tries, 10 s).
    let start = Instant::now();
    for tries in 0.. {
        let answer = on_task(&alice, "tasks/get", &id);
        assert_ne!(answer["error"]["code"], -32601, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        if message.contains("the task is gone") && message.contains("\"up\"") {
            break;
        }
        assert!(
            tries < 100 && start.elapsed() < Duration::from_secs(10),
            "{answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = on_task(&alice, "tasks/result", &id);
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the task is gone"), "{result}");
    // A new session's initialize still declares the tasks it may be handed.
    let (late, init) = Session::open(&gateway.addr, ALICE, sep1686_tasks(), "late");
    assert!(init["capabilities"]["tasks"].is_object(), "{init}");
    drop(late);
}

/// A task's `ttl` and `pollInterval` reach the client as the upstream gave them — in the
/// created task, `tasks/get` and the status notifications — though rmcp's decoding of a
/// 2025-11-25 task drops both (the client was told `"ttl": null`, unlimited, and no interval).
#[test]
fn a_tasks_ttl_and_poll_interval_reach_the_client_as_the_upstream_gave_them() {
    let (gateway, _) = scripted_gateway("timing");
    let (alice, _) = Session::open(&gateway.addr, ALICE, sep1686_tasks(), "alice");
    let mut statuses = Sse::get(&alice);
    let created = alice.request(
        "tools/call",
        json!({"name": "mcp__up__work", "task": {"ttl": 45_000},
               "arguments": {"who": "alice", "secs": 0.3}}),
    );
    let task = &created["result"]["task"];
    assert_eq!(task["ttl"], 45_000, "{created}");
    assert_eq!(task["pollInterval"], 250, "{created}");
    let id = task["taskId"].as_str().expect("a task id").to_string();
    let got = on_task(&alice, "tasks/get", &id);
    assert_eq!(got["result"]["ttl"], 45_000, "{got}");
    // An id the gateway never handed out is an unknown task, not an unknown method.
    for method in ["tasks/get", "tasks/cancel"] {
        let bogus = on_task(&alice, method, "T1");
        assert_eq!(bogus["error"]["code"], -32602, "{method}: {bogus}");
    }
    assert_eq!(got["result"]["pollInterval"], 250, "{got}");
    let status = (0..100)
        .map_while(|_| statuses.next())
        .find(|m| m["method"] == "notifications/tasks/status")
        .unwrap_or_else(|| panic!("no status of the task"));
    assert_eq!(status["params"]["taskId"], json!(id), "{status}");
    assert_eq!(status["params"]["ttl"], 45_000, "{status}");
    assert_eq!(status["params"]["pollInterval"], 250, "{status}");
}

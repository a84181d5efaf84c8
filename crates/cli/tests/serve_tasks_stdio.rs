//! `mcp-harness serve` over stdio passing SEP-1686 task-augmented calls (MCP 2025-11-25)
//! through to its one client, as it does for Streamable HTTP clients (`serve_tasks_2025.rs`):
//! a raw 2025-11-25 client writing JSON-RPC lines, in front of server-everything, whose
//! `simulate-research-query` runs only as a task. The client initialises at once (the upstream
//! still starting) and is offered `capabilities.tasks`; the tool shows its
//! `execution.taskSupport`; a `tools/call` with `task` gets the upstream's task under a gateway
//! id, followed with `tasks/get` and `tasks/result`, and another is cancelled. Ids of every
//! kind come back as sent. In front of an upstream without task-augmented calls, the lines pass
//! as before: no `capabilities.tasks`, no task. A client declaring the skills extension is
//! answered once an upstream with skills connected, and offered them. A form asked of the client
//! for a call that ended without it is withdrawn (`notifications/cancelled`).

mod common;

use std::time::{Duration, Instant};

use common::gateway::{StdioClient, sep1686_tasks};
use common::{bin, everything_stdio, temp_home};
use serde_json::{Value, json};

const RESEARCH: &str = "mcp__ev__simulate-research-query";

/// `mcp-harness serve` over stdio, driven line by line; killed when dropped.
struct Gateway {
    client: StdioClient,
}

impl Gateway {
    fn start(tag: &str, servers: Value, allow: &str) -> Self {
        let dir = temp_home("serve-tasks-stdio", tag);
        let document = json!({"mcpServers": servers, "permissions": {"allow": [allow]}});
        let client = StdioClient::new(common::gateway::serve_stdio(&dir, &document));
        Self { client }
    }

    fn send(&mut self, message: Value) -> Value {
        self.client.send(message)
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.client.request(id, method, params)
    }

    /// `initialize` at 2025-11-25 declaring `capabilities`, then `initialized`: the result.
    fn initialize(&mut self, capabilities: Value) -> Value {
        let init = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "stdio-tasks", "version": "1"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init["result"].clone()
    }

    /// The tool listing, once it names `tool` (the upstream connects in the background).
    fn tools_with(&mut self, tool: &str) -> Vec<Value> {
        let start = Instant::now();
        for attempt in 0..300 {
            let listed = self.request(json!(100 + attempt), "tools/list", json!({}));
            let tools = listed["result"]["tools"].as_array().cloned();
            if let Some(tools) = tools.filter(|t| t.iter().any(|t| t["name"] == tool)) {
                return tools;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{tool} never listed: {listed}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{tool} never listed in 300 listings")
    }
}

fn research(task: bool) -> Value {
    let mut params = json!({"name": RESEARCH, "arguments": {"topic": "gateways"}});
    if task {
        params["task"] = json!({"ttl": 60_000});
    }
    params
}

#[test]
fn serve_passes_sep_1686_tasks_through_to_a_stdio_client() {
    let mut gateway = Gateway::start(
        "everything",
        json!({"ev": everything_stdio()}),
        "mcp__ev__*",
    );
    let init = gateway.initialize(sep1686_tasks());
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "declared while the upstream takes task-augmented calls, without list: {init}"
    );
    let tools = gateway.tools_with(RESEARCH);
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).cloned();
    let shown = tool(RESEARCH).expect("the task tool");
    assert_eq!(shown["execution"]["taskSupport"], "required", "{shown}");
    assert!(shown.get("_meta").is_none(), "a private mark left: {shown}");
    let echo = tool("mcp__ev__echo").expect("echo is listed");
    assert!(echo.get("execution").is_none(), "{echo}");

    // A task-augmented call (a string id, kept): the task under a gateway id, followed.
    let created = gateway.request(json!("call-1"), "tools/call", research(true));
    assert_eq!(created["id"], "call-1", "{created}");
    let task = &created["result"]["task"];
    let id = task["taskId"].as_str().expect("a task id").to_string();
    assert!(id.starts_with("t1686."), "a gateway id: {created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(created["result"].get("resultType").is_none(), "{created}");
    let got = gateway.request(json!("get-1"), "tasks/get", json!({"taskId": id}));
    assert_eq!(got["result"]["taskId"], id.as_str(), "{got}");
    let result = gateway.request(json!(7), "tasks/result", json!({"taskId": id}));
    let report = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(report.contains("Research Report: gateways"), "{result}");
    let done = gateway.request(json!(8), "tasks/get", json!({"taskId": id}));
    assert_eq!(done["result"]["status"], "completed", "{done}");

    // Another task, cancelled; an id the gateway never issued is unknown.
    let created = gateway.request(json!(9), "tools/call", research(true));
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_string();
    let cancelled = gateway.request(json!(10), "tasks/cancel", json!({"taskId": id}));
    assert_eq!(cancelled["result"]["taskId"], id.as_str(), "{cancelled}");
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let unknown = gateway.request(
        json!(11),
        "tasks/get",
        json!({"taskId": "t1686.nonexistent-12345"}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let listed = gateway.request(json!(12), "tasks/list", json!({}));
    assert_eq!(listed["error"]["code"], -32601, "{listed}");

    // The task-only tool called plainly, by a client that declared tasks.
    let plain = gateway.request(json!(13), "tools/call", research(false));
    assert_eq!(plain["error"]["code"], -32601, "{plain}");
}

#[test]
fn serve_offers_a_stdio_client_no_sep_1686_tasks_without_an_upstream_that_takes_them() {
    let fixture = json!({"fx": {"command": bin(), "args": ["fixture-server"]}});
    let mut gateway = Gateway::start("fixture", fixture, "mcp__fx__*");
    let init = gateway.initialize(sep1686_tasks());
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let tools = gateway.tools_with("mcp__fx__echo");
    assert!(
        tools.iter().all(|t| t.get("execution").is_none()),
        "{tools:?}"
    );
    let call = gateway.request(
        json!("c"),
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"text": "x"}, "task": {"ttl": 1000}}),
    );
    assert!(call["result"].get("task").is_none(), "{call}");
    let result = gateway.request(json!(2), "tasks/result", json!({"taskId": "t1686.x"}));
    assert_eq!(result["error"]["code"], -32601, "{result}");
}

/// A stdio host initialises at once, before the upstreams have connected; capabilities are
/// fixed at `initialize`, so a client declaring the skills extension is answered once an
/// upstream with skills has connected (or every server settled), and is offered skills.
#[test]
fn serve_offers_a_stdio_client_the_skills_of_an_upstream_still_starting() {
    let mut gateway = Gateway::start(
        "skills",
        json!({"sk": {"command": bin(),
            "args": ["fixture-server", "--skills", "--start-delay-ms", "1500"]}}),
        "mcp__**",
    );
    let result = gateway.initialize(json!({"extensions": {"io.modelcontextprotocol/skills": {}}}));
    assert!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object(),
        "{result}"
    );
    let listed = gateway.request(json!(1), "skills/list", json!({}));
    assert!(
        listed["result"]["skills"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{listed}"
    );
}

/// A form the upstream asked the client to fill in for a call is withdrawn when the call ends
/// without it (here: the call's timeout): the client is sent `notifications/cancelled` for the
/// gateway's `elicitation/create`, so a host can close the form.
#[test]
fn serve_withdraws_an_elicitation_whose_call_ended() {
    let mut gateway = Gateway::start(
        "withdraw",
        json!({"fx": {"command": bin(), "args": ["fixture-server", "--client-requests"],
            "toolTimeoutSec": 2}}),
        "mcp__**",
    );
    gateway.initialize(json!({"elicitation": {"form": {}}}));
    gateway.tools_with("mcp__fx__ask_form");
    let call = json!({"jsonrpc": "2.0", "id": "call", "method": "tools/call",
        "params": {"name": "mcp__fx__ask_form", "arguments": {"message": "never answered"}}});
    gateway.client.write(&call);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut asked = None;
    let mut withdrawn = false;
    while !withdrawn {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(message) = gateway.client.next(left) else {
            panic!("asked {asked:?}, never withdrawn");
        };
        match message["method"].as_str() {
            Some("elicitation/create") => asked = Some(message["id"].clone()),
            Some("notifications/cancelled") => {
                let id = &message["params"]["requestId"];
                withdrawn = asked.as_ref() == Some(id);
            }
            _ => {}
        }
    }
}

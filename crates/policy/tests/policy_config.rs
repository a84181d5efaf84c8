//! The policy as the runtime uses it: `exposure` and `permissions` read from one config document,
//! applied to a published snapshot's tools and to calls.

use std::sync::Arc;

use mcp_harness_catalog::{ServerCatalog, ServerState, ServerStatus, SnapshotBuilder, ToolEntry};
use mcp_harness_policy::{
    AllowAll, Approval, ApprovalRequest, Approver, Decision, DenyAll, ExposurePolicy,
    PermissionRules, SearchRequest, ToolSearch, search, search_tool_definition,
};
use rmcp::model::{Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{Map, Value, json};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    exposure: ExposurePolicy,
    #[serde(default)]
    permissions: PermissionRules,
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn tool(name: &str, description: &str, annotations: ToolAnnotations) -> Tool {
    Tool::new(
        name.to_string(),
        description.to_string(),
        Arc::new(object(json!({"type": "object"}))),
    )
    .annotate(annotations)
}

fn snapshot() -> mcp_harness_catalog::Snapshot {
    let mut b = SnapshotBuilder::new();
    for (server, tools) in [
        (
            "fs",
            vec![
                tool(
                    "read_file",
                    "Read a file.",
                    ToolAnnotations::new().read_only(true),
                ),
                tool("write_file", "Write a file.", ToolAnnotations::new()),
                tool("Write", "Looks like a built-in.", ToolAnnotations::new()),
            ],
        ),
        (
            "github",
            vec![tool(
                "create_issue",
                "Open an issue.",
                ToolAnnotations::new().destructive(false),
            )],
        ),
    ] {
        b.server(
            ServerStatus::new(server, "stdio", ServerState::Connected),
            Some(Arc::new(ServerCatalog {
                tools: tools
                    .into_iter()
                    .map(|t| ToolEntry::new(server, t))
                    .collect(),
                ..Default::default()
            })),
        );
    }
    b.build(1)
}

#[test]
fn one_config_drives_exposure_search_and_permission() {
    let config: Config = match serde_json::from_value(json!({
        "exposure": {"toolSearch": "on", "maxTools": 2},
        "permissions": {
            "allow": ["mcp__github__*", "Write"],
            "deny": [{"tool": "mcp__fs__write_file", "args": {"path": {"glob": "/etc/**"}}}],
        },
    })) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let snapshot = snapshot();
    let exposure = config.exposure.expose(snapshot.tools());
    assert_eq!(config.exposure.tool_search, ToolSearch::On);
    assert!(exposure.direct.is_empty() && exposure.hidden.is_empty());
    assert_eq!(exposure.deferred.len(), 4);

    // The model calls the search tool; the runtime loads what it found, within the budget.
    assert_eq!(search_tool_definition().name, "mcp_harness__search_tools");
    let request = match SearchRequest::from_args(&object(json!({"query": "file", "limit": 5}))) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let found = search(&exposure.deferred, &request.query, request.limit);
    let names: Vec<_> = found
        .iter()
        .map(|t| t.entry.qualified_name.as_str())
        .collect();
    assert_eq!(names, ["mcp__fs__read_file", "mcp__fs__write_file"]);
    let mut budget = config.exposure.load_budget();
    assert!(budget.load(found[0]).is_ok());
    assert!(
        budget.load(found[1]).is_err(),
        "search tool + 1 = maxTools 2"
    );

    let rules = &config.permissions;
    let entry = |name: &str| snapshot.tool(name).map(|e| e.tool.annotations.clone());
    let decide =
        |name: &str, args: Value| rules.decide(name, &object(args), entry(name).flatten().as_ref());
    assert_eq!(
        decide("mcp__github__create_issue", json!({})),
        Decision::Allow
    );
    assert!(matches!(
        decide("mcp__fs__write_file", json!({"path": "/etc/hosts"})),
        Decision::Deny { .. }
    ));
    // The read-only claim does not grant.
    assert!(matches!(
        decide("mcp__fs__read_file", json!({"path": "/etc/hosts"})),
        Decision::Ask { .. }
    ));
    // The rule for the built-in `Write` does not reach the server's `Write`.
    let d = decide("mcp__fs__Write", json!({}));
    let Decision::Ask { reason } = d else {
        panic!("{d:?}")
    };

    let request = ApprovalRequest {
        qualified_name: "mcp__fs__Write".into(),
        server: "fs".into(),
        args: Map::new(),
        reason,
        annotations: None,
    };
    let denied = futures::executor::block_on(DenyAll.approve(request.clone()));
    assert!(matches!(denied, Approval::Denied { reason } if reason.contains("permissions.allow")));
    let approvers: [&dyn Approver; 1] = [&AllowAll];
    assert!(futures::executor::block_on(approvers[0].approve(request)).is_approved());
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let err = |v: Value| match serde_json::from_value::<Config>(v) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err(json!({"exposure": {"perToolBytes": 1}})).contains("unknown field `perToolBytes`"));
    assert!(
        err(json!({"permissions": {"trustReadOnly": true}}))
            .contains("unknown field `trustReadOnly`")
    );
}

use super::*;
use rmcp::model::MetaObject;
use serde_json::json;

fn tool(name: &str, description: &str) -> Tool {
    let schema = json!({"type": "object", "properties": {"x": {"type": "string"}}});
    let schema = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

fn with_meta(mut t: Tool, meta: Value) -> Tool {
    if let Value::Object(m) = meta {
        t.meta = Some(MetaObject(m));
    }
    t
}

fn entry(server: &str, t: Tool) -> ToolEntry {
    ToolEntry::new(server, t)
}

fn names(list: &[ExposedTool]) -> Vec<&str> {
    list.iter()
        .map(|t| t.entry.qualified_name.as_str())
        .collect()
}

fn reason_of<'a>(e: &'a Exposure, raw: &str) -> &'a str {
    e.hidden
        .iter()
        .find(|h| h.raw_name == raw)
        .map_or("<not hidden>", |h| h.reason.as_str())
}

/// Every input tool is in exactly one of the three lists.
fn assert_partition(e: &Exposure, n: usize) {
    assert_eq!(e.direct.len() + e.deferred.len() + e.hidden.len(), n);
}

#[test]
fn defaults_and_config_keys() {
    let p: ExposurePolicy = match serde_json::from_value(json!({})) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(p, ExposurePolicy::default());
    assert_eq!(p.per_tool_schema_bytes, 8192);
    assert_eq!(p.total_schema_bytes, 65536);
    assert_eq!(p.max_tools, 128);
    assert_eq!(p.tool_search, ToolSearch::Off);
    assert_eq!(p.apps, AppPolicy::default());
    let p: ExposurePolicy = match serde_json::from_value(json!({
        "perToolSchemaBytes": 100, "totalSchemaBytes": 1000, "maxTools": 3,
        "toolSearch": "on", "apps": {"hideDestructive": true, "hideOpenWorld": true}
    })) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(p.max_tools, 3);
    assert_eq!(p.tool_search, ToolSearch::On);
    assert!(p.apps.hide_destructive && p.apps.hide_open_world);
    let err = serde_json::from_value::<ExposurePolicy>(json!({"maxTool": 3}))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `maxTool`"), "{err}");
    let err = serde_json::from_value::<ExposurePolicy>(json!({"apps": {"hide": true}}))
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `hide`"), "{err}");
    assert!(serde_json::from_value::<ExposurePolicy>(json!({"toolSearch": "auto"})).is_err());
}

#[test]
fn everything_fits_by_default_in_name_order() {
    let tools = [
        entry("b", tool("z", "d")),
        entry("a", tool("y", "d")),
        entry("a", tool("x", "d")),
    ];
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_eq!(names(&e.direct), ["mcp__a__x", "mcp__a__y", "mcp__b__z"]);
    assert!(e.deferred.is_empty() && e.hidden.is_empty());
    let one = &e.direct[0];
    assert_eq!(
        Some(one.schema_bytes),
        definition_bytes("mcp__a__x", &one.entry.tool)
    );
    let expected = serde_json::to_vec(&json!({
        "name": "mcp__a__x", "description": "d",
        "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}
    }))
    .map_or(0, |v| v.len());
    assert_eq!(one.schema_bytes, expected);
}

#[test]
fn app_only_tools_are_hidden() {
    let tools = [
        entry(
            "s",
            with_meta(
                tool("app_only", "d"),
                json!({"ui": {"visibility": ["app"]}}),
            ),
        ),
        entry(
            "s",
            with_meta(
                tool("both", "d"),
                json!({"ui": {"visibility": ["model", "app"]}}),
            ),
        ),
        entry(
            "s",
            with_meta(tool("nobody", "d"), json!({"ui": {"visibility": []}})),
        ),
        entry(
            "s",
            with_meta(tool("string", "d"), json!({"ui": {"visibility": "model"}})),
        ),
        entry(
            "s",
            with_meta(tool("bad", "d"), json!({"ui": {"visibility": 1}})),
        ),
        entry(
            "s",
            with_meta(
                tool("no_vis", "d"),
                json!({"ui": {"resourceUri": "ui://x"}}),
            ),
        ),
    ];
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_partition(&e, tools.len());
    assert_eq!(
        names(&e.direct),
        ["mcp__s__both", "mcp__s__no_vis", "mcp__s__string"]
    );
    assert_eq!(
        reason_of(&e, "app_only"),
        "visible to apps only (`_meta.ui.visibility`)"
    );
    assert!(reason_of(&e, "nobody").contains("lacks \"model\""));
    assert!(reason_of(&e, "bad").contains("not a list"));
}

#[test]
fn per_tool_budget_hides_large_tools_with_size_limit_and_key() {
    let tools = [
        entry("s", tool("small", "d")),
        entry("s", tool("large", &"x".repeat(9000))),
    ];
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_eq!(names(&e.direct), ["mcp__s__small"]);
    let r = reason_of(&e, "large");
    assert!(
        r.contains("over the per-tool schema budget of 8 KiB"),
        "{r}"
    );
    assert!(r.contains("bytes)") && r.contains("8.9 KiB"), "{r}");
    assert!(r.contains("`exposure.perToolSchemaBytes`"), "{r}");
}

#[test]
fn per_tool_budget_counts_the_qualified_name() {
    let t = entry("server", tool("t", "d"));
    let bytes = definition_bytes(&t.qualified_name, &t.tool).unwrap_or(0);
    let exact = ExposurePolicy {
        per_tool_schema_bytes: bytes,
        ..Default::default()
    };
    assert_eq!(exact.expose([&t].into_iter()).direct.len(), 1);
    let under = ExposurePolicy {
        per_tool_schema_bytes: bytes - 1,
        ..Default::default()
    };
    assert_eq!(under.expose([&t].into_iter()).hidden.len(), 1);
}

#[test]
fn total_budget_admits_a_prefix_in_name_order() {
    let tools: Vec<ToolEntry> = ["d", "a", "c", "b", "e"]
        .iter()
        .map(|n| entry("s", tool(n, "d")))
        .collect();
    let each = definition_bytes("mcp__s__a", &tools[1].tool).unwrap_or(0);
    let p = ExposurePolicy {
        total_schema_bytes: each * 2 + each / 2,
        ..Default::default()
    };
    let e = p.expose(tools.iter());
    assert_partition(&e, 5);
    assert_eq!(names(&e.direct), ["mcp__s__a", "mcp__s__b"]);
    let hidden: Vec<_> = e.hidden.iter().map(|h| h.raw_name.as_str()).collect();
    assert_eq!(hidden, ["c", "d", "e"]);
    for h in &e.hidden {
        assert!(
            h.reason.contains("schema budget of")
                && h.reason.contains("for all tools is used up")
                && h.reason.contains("`exposure.totalSchemaBytes`"),
            "{}",
            h.reason
        );
        assert_eq!(h.kind, Kind::Tools);
        assert_eq!(h.server, "s");
    }
    // The same tools in another order give the same outcome.
    let mut reversed = tools.clone();
    reversed.reverse();
    let again = p.expose(reversed.iter());
    assert_eq!(names(&again.direct), names(&e.direct));
    assert_eq!(again.hidden, e.hidden);
}

#[test]
fn once_the_budget_is_used_up_later_small_tools_stay_hidden() {
    let tools = [
        entry("s", tool("a", "d")),
        entry("s", tool("b", &"x".repeat(400))),
        entry("s", tool("c", "d")),
    ];
    let small = definition_bytes("mcp__s__a", &tools[0].tool).unwrap_or(0);
    let p = ExposurePolicy {
        total_schema_bytes: small * 3,
        ..Default::default()
    };
    let e = p.expose(tools.iter());
    assert_eq!(names(&e.direct), ["mcp__s__a"]);
    assert!(reason_of(&e, "c").contains("used up"));
}

#[test]
fn default_budget_message_says_64_kib() {
    let tools: Vec<ToolEntry> = (0..20)
        .map(|i| entry("s", tool(&format!("t{i:02}"), &"x".repeat(4000))))
        .collect();
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_partition(&e, 20);
    assert!(!e.direct.is_empty() && !e.hidden.is_empty());
    let used: usize = e.direct.iter().map(|t| t.schema_bytes).sum();
    assert!(used <= 64 * 1024);
    assert!(
        e.hidden[0]
            .reason
            .starts_with("schema budget of 64 KiB for all tools is used up")
    );
}

#[test]
fn tool_cap() {
    let tools: Vec<ToolEntry> = (0..130)
        .map(|i| entry("s", tool(&format!("t{i:03}"), "")))
        .collect();
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_eq!(e.direct.len(), 128);
    assert_eq!(e.hidden.len(), 2);
    assert_eq!(e.hidden[0].raw_name, "t128");
    assert_eq!(
        e.hidden[0].reason,
        "tool cap of 128 reached (`exposure.maxTools`)"
    );
}

#[test]
fn specific_reasons_win_over_the_budget() {
    let tools = [
        entry("s", tool("a", "d")),
        entry("s", tool("b", "d")),
        entry(
            "s",
            with_meta(tool("c", "d"), json!({"ui": {"visibility": ["app"]}})),
        ),
    ];
    let p = ExposurePolicy {
        max_tools: 1,
        ..Default::default()
    };
    let e = p.expose(tools.iter());
    assert_eq!(names(&e.direct), ["mcp__s__a"]);
    assert!(reason_of(&e, "b").contains("tool cap of 1"));
    assert!(reason_of(&e, "c").contains("apps only"));
}

#[test]
fn tool_search_defers_every_admitted_tool() {
    let tools: Vec<ToolEntry> = (0..200)
        .map(|i| entry("s", tool(&format!("t{i:03}"), "d")))
        .chain([entry("s", tool("huge", &"x".repeat(9000)))])
        .collect();
    let p = ExposurePolicy {
        tool_search: ToolSearch::On,
        ..Default::default()
    };
    let e = p.expose(tools.iter());
    assert_partition(&e, 201);
    assert!(e.direct.is_empty());
    assert_eq!(
        e.deferred.len(),
        200,
        "the cap does not apply to deferred tools"
    );
    assert!(reason_of(&e, "huge").contains("perToolSchemaBytes"));
}

#[test]
fn load_budget_counts_the_search_tool_and_loaded_tools() {
    let tools: Vec<ToolEntry> = (0..3)
        .map(|i| entry("s", tool(&format!("t{i}"), "d")))
        .collect();
    let p = ExposurePolicy {
        tool_search: ToolSearch::On,
        max_tools: 3,
        ..Default::default()
    };
    let e = p.expose(tools.iter());
    let mut budget = p.load_budget();
    let search_bytes = budget.used_bytes();
    assert!(search_bytes > 100);
    assert_eq!(budget.load(&e.deferred[0]), Ok(()));
    assert_eq!(budget.load(&e.deferred[0]), Ok(()), "loading twice is free");
    assert_eq!(budget.load(&e.deferred[1]), Ok(()));
    let err = budget.load(&e.deferred[2]).unwrap_err();
    assert!(err.contains("tool cap of 3"), "{err}");
    assert_eq!(
        budget.loaded().collect::<Vec<_>>(),
        ["mcp__s__t0", "mcp__s__t1"]
    );
    assert_eq!(
        budget.used_bytes(),
        search_bytes + e.deferred[0].schema_bytes + e.deferred[1].schema_bytes
    );

    let tight = ExposurePolicy {
        total_schema_bytes: search_bytes + e.deferred[0].schema_bytes,
        ..p
    };
    let mut budget = tight.load_budget();
    assert_eq!(budget.load(&e.deferred[0]), Ok(()));
    assert!(budget.load(&e.deferred[1]).unwrap_err().contains("used up"));
}

#[test]
fn connectors_and_apps_are_named() {
    let tools = [
        entry(
            "s",
            with_meta(tool("c", "d"), json!({"connector_id": "gdrive"})),
        ),
        entry(
            "s",
            with_meta(tool("a", "d"), json!({"ui": {"resourceUri": "ui://chart"}})),
        ),
        entry(
            "s",
            with_meta(tool("old", "d"), json!({"ui/resourceUri": "ui://old"})),
        ),
        entry(
            "s",
            with_meta(tool("plain", "d"), json!({"connector_id": 7})),
        ),
    ];
    let e = ExposurePolicy::default().expose(tools.iter());
    let by = |n: &str| e.direct.iter().find(|t| t.entry.raw_name == n);
    assert_eq!(by("c").and_then(|t| t.connector.as_deref()), Some("gdrive"));
    assert_eq!(by("a").and_then(|t| t.app.as_deref()), Some("ui://chart"));
    assert_eq!(by("old").and_then(|t| t.app.as_deref()), Some("ui://old"));
    assert!(by("plain").is_some_and(|t| t.connector.is_none() && t.app.is_none()));
}

#[test]
fn app_policy_hides_by_hints_with_mcp_defaults() {
    let app = |name: &str, a: Option<ToolAnnotations>| {
        let mut t = with_meta(tool(name, "d"), json!({"connector_id": "crm"}));
        t.annotations = a;
        entry("s", t)
    };
    let tools = [
        app("no_hints", None),
        app("read_only", Some(ToolAnnotations::new().read_only(true))),
        app(
            "additive_closed",
            Some(ToolAnnotations::new().destructive(false).open_world(false)),
        ),
        app(
            "destructive_closed",
            Some(ToolAnnotations::new().destructive(true).open_world(false)),
        ),
        app(
            "read_only_closed",
            Some(ToolAnnotations::new().read_only(true).open_world(false)),
        ),
        // Not an app tool: the app policy does not apply.
        entry("s", tool("server_tool", "d")),
    ];
    let destructive = ExposurePolicy {
        apps: AppPolicy {
            hide_destructive: true,
            hide_open_world: false,
        },
        ..Default::default()
    };
    let e = destructive.expose(tools.iter());
    assert_partition(&e, tools.len());
    let hidden: Vec<_> = e.hidden.iter().map(|h| h.raw_name.as_str()).collect();
    assert_eq!(hidden, ["destructive_closed", "no_hints"]);
    let r = reason_of(&e, "no_hints");
    assert!(
        r.contains("destructiveHint true or not given")
            && r.contains("connector \"crm\"")
            && r.contains("`exposure.apps.hideDestructive`"),
        "{r}"
    );

    let open = ExposurePolicy {
        apps: AppPolicy {
            hide_destructive: false,
            hide_open_world: true,
        },
        ..Default::default()
    };
    let e = open.expose(tools.iter());
    let hidden: Vec<_> = e.hidden.iter().map(|h| h.raw_name.as_str()).collect();
    assert_eq!(hidden, ["no_hints", "read_only"]);
    assert!(reason_of(&e, "read_only").contains("`exposure.apps.hideOpenWorld`"));
}

#[test]
fn search_tool_is_well_formed() {
    let t = search_tool_definition();
    assert_eq!(t.name, SEARCH_TOOL_NAME);
    assert!(!SEARCH_TOOL_NAME.starts_with("mcp__"));
    assert!(mcp_harness_catalog::naming::is_valid(SEARCH_TOOL_NAME));
    assert_eq!(t.input_schema["type"], "object");
    assert_eq!(t.input_schema["required"], json!(["query"]));
    assert_eq!(t.input_schema["properties"]["limit"]["type"], "integer");
    assert_eq!(
        t.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
}

#[test]
fn search_request_parsing() {
    let args = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    assert_eq!(
        SearchRequest::from_args(&args(json!({"query": "git"}))),
        Ok(SearchRequest {
            query: "git".into(),
            limit: DEFAULT_SEARCH_LIMIT
        })
    );
    let r = SearchRequest::from_args(&args(json!({"query": "git", "limit": 1000})));
    assert_eq!(r.map(|r| r.limit), Ok(MAX_SEARCH_LIMIT));
    let r = SearchRequest::from_args(&args(json!({"query": "git", "limit": 0})));
    assert_eq!(r.map(|r| r.limit), Ok(1));
    assert!(SearchRequest::from_args(&args(json!({}))).is_err());
    // Bounded: a search costs its words times the deferred tools.
    let long = "a".repeat(MAX_SEARCH_QUERY_CHARS + 1);
    let err = SearchRequest::from_args(&args(json!({"query": long}))).expect_err("too long");
    assert!(err.contains("longer than"), "{err}");
    let many: Vec<String> = (0..=MAX_SEARCH_QUERY_WORDS)
        .map(|i| format!("w{i}"))
        .collect();
    let err =
        SearchRequest::from_args(&args(json!({"query": many.join(" ")}))).expect_err("too many");
    assert!(err.contains("different words"), "{err}");
    let repeated = vec!["git"; 200].join(" ");
    assert!(SearchRequest::from_args(&args(json!({"query": repeated}))).is_ok());
    assert!(SearchRequest::from_args(&args(json!({"query": 3}))).is_err());
    assert!(SearchRequest::from_args(&args(json!({"query": "x", "limit": -1}))).is_err());
    assert!(SearchRequest::from_args(&args(json!({"query": "x", "limit": 2.5}))).is_err());
}

fn deferred(tools: &[ToolEntry]) -> Vec<ExposedTool> {
    ExposurePolicy {
        tool_search: ToolSearch::On,
        ..Default::default()
    }
    .expose(tools.iter())
    .deferred
}

#[test]
fn search_ranks_name_matches_before_description_matches() {
    let tools = [
        entry("tracker", tool("list_tickets", "Lists open GitHub issues.")),
        entry("github", tool("create_issue", "Create a new issue.")),
        entry("github", tool("getIssue", "Fetch one.")),
        entry("notes", tool("add", "Adds a note.")),
    ];
    let d = deferred(&tools);
    let found = search(&d, "Issue", 10);
    let found: Vec<_> = found
        .iter()
        .map(|t| t.entry.qualified_name.as_str())
        .collect();
    assert_eq!(
        found,
        [
            "mcp__github__create_issue",
            "mcp__github__getIssue",
            "mcp__tracker__list_tickets"
        ]
    );
    // More name words first: "github create" matches two words of create_issue's name.
    let found = search(&d, "github create", 10);
    assert_eq!(found[0].entry.raw_name, "create_issue");
    assert_eq!(found.len(), 3);
    // A prefix matches.
    assert_eq!(search(&d, "tick", 10)[0].entry.raw_name, "list_tickets");
    // Limit, empty query, no match.
    assert_eq!(search(&d, "issue", 1).len(), 1);
    assert!(search(&d, "issue", 0).is_empty());
    assert!(search(&d, "  --  ", 10).is_empty());
    assert!(search(&d, "calendar", 10).is_empty());
}

/// Equal scores take turns across servers: a server with many like-named tools cannot fill
/// every result before another server's first.
#[test]
fn equal_search_scores_take_turns_across_servers() {
    let mut tools: Vec<ToolEntry> = (0..20)
        .map(|i| entry("big", tool(&format!("tool_{i:02}"), "A tool.")))
        .collect();
    tools.push(entry("mid", tool("add_tool", "A tool.")));
    tools.push(entry("small", tool("remove_tool", "A tool.")));
    let d = deferred(&tools);
    let found: Vec<_> = search(&d, "tool", 5)
        .iter()
        .map(|t| t.entry.qualified_name.as_str())
        .collect();
    assert_eq!(
        found,
        [
            "mcp__big__tool_00",
            "mcp__mid__add_tool",
            "mcp__small__remove_tool",
            "mcp__big__tool_01",
            "mcp__big__tool_02"
        ]
    );
}

#[test]
fn search_reads_titles_and_search_hints() {
    let mut titled = tool("t1", "nothing");
    titled.title = Some("Spreadsheet export".into());
    let hinted = with_meta(
        tool("t2", "nothing"),
        json!({"anthropic/searchHint": "spreadsheet csv"}),
    );
    let tools = [entry("s", titled), entry("s", hinted)];
    let d = deferred(&tools);
    let found: Vec<_> = search(&d, "spreadsheet", 10)
        .iter()
        .map(|t| t.entry.raw_name.as_str())
        .collect();
    assert_eq!(found, ["t1", "t2"]);
    assert_eq!(search(&d, "csv", 10)[0].entry.raw_name, "t2");
}

#[test]
fn words_split_on_case_and_punctuation() {
    assert_eq!(
        words("mcp__github__createIssue2 HTTPServer"),
        [
            "mcp",
            "github",
            "createissue2",
            "create",
            "issue2",
            "httpserver"
        ]
    );
    assert_eq!(words("Éte-ÉTÉ"), ["éte", "été"]);
    assert!(words("__").is_empty());
    assert_eq!(words("GitHub"), ["github", "git", "hub"]);
}

#[test]
fn sizes_read_well() {
    assert_eq!(size(8 * 1024), "8 KiB");
    assert_eq!(size(9731), "9.5 KiB");
    assert_eq!(size(300), "300 bytes");
}

fn count_of(list: &[ExposedTool], server: &str) -> usize {
    list.iter().filter(|t| t.entry.server == server).count()
}

/// Issue 13 point 4: a server that sorts first with 200 tools used to take the whole tool cap
/// and hide every tool of the next server.
#[test]
fn the_tool_cap_is_shared_fairly_across_servers() {
    let mut tools: Vec<ToolEntry> = (0..200)
        .map(|i| entry("aaa", tool(&format!("t{i:03}"), "")))
        .collect();
    tools.extend((0..10).map(|i| entry("zzz", tool(&format!("u{i}"), ""))));
    let e = ExposurePolicy::default().expose(tools.iter());
    assert_partition(&e, 210);
    // zzz needs less than its half: it shows all 10, and aaa gets the rest of the cap.
    assert_eq!(count_of(&e.direct, "zzz"), 10);
    assert_eq!(count_of(&e.direct, "aaa"), 118);
    // aaa shows a prefix of its tools in name order; the rest is hidden with the cap named.
    let shown: Vec<_> = e
        .direct
        .iter()
        .filter(|t| t.entry.server == "aaa")
        .map(|t| t.entry.raw_name.clone())
        .collect();
    let expected: Vec<_> = (0..118).map(|i| format!("t{i:03}")).collect();
    assert_eq!(shown, expected);
    assert_eq!(e.hidden.len(), 82);
    for h in &e.hidden {
        assert_eq!(h.server, "aaa");
        assert!(
            h.reason
                .starts_with("tool cap of 128 reached (`exposure.maxTools`)")
                && h.reason.contains("shared fairly among 2 servers")
                && h.reason.contains("server \"aaa\" shows 118 tools"),
            "{}",
            h.reason
        );
    }
    // Three servers that all want more than their share get equal shares; the remainder of
    // the division goes round-robin in server-name order.
    let three: Vec<ToolEntry> = ["a", "b", "c"]
        .iter()
        .flat_map(|s| (0..100).map(move |i| entry(s, tool(&format!("t{i:03}"), ""))))
        .collect();
    let p = ExposurePolicy {
        max_tools: 10,
        ..Default::default()
    };
    let e = p.expose(three.iter());
    assert_partition(&e, 300);
    assert_eq!(
        [
            count_of(&e.direct, "a"),
            count_of(&e.direct, "b"),
            count_of(&e.direct, "c")
        ],
        [4, 3, 3]
    );
}

#[test]
fn the_schema_budget_is_shared_fairly_across_servers() {
    // "big" sorts first and has large tools that alone would use the whole budget; "small" has
    // small tools. Each is guaranteed what fits in half the budget, and "small" leaves part of
    // its half unused, which "big" gets.
    let big: Vec<ToolEntry> = (0..40)
        .map(|i| entry("big", tool(&format!("b{i:02}"), &"x".repeat(1000))))
        .collect();
    let small: Vec<ToolEntry> = (0..20)
        .map(|i| entry("small", tool(&format!("s{i:02}"), "d")))
        .collect();
    let big_bytes = definition_bytes(&big[0].qualified_name, &big[0].tool).unwrap_or(0);
    let small_bytes = definition_bytes(&small[0].qualified_name, &small[0].tool).unwrap_or(0);
    let total = big_bytes * 10;
    let p = ExposurePolicy {
        total_schema_bytes: total,
        ..Default::default()
    };
    let all: Vec<ToolEntry> = big.iter().chain(small.iter()).cloned().collect();
    let e = p.expose(all.iter());
    assert_partition(&e, 60);
    assert_eq!(count_of(&e.direct, "small"), 20, "small fits in its half");
    let used: usize = e.direct.iter().map(|t| t.schema_bytes).sum();
    assert!(used <= total);
    assert_eq!(
        count_of(&e.direct, "big"),
        (total - 20 * small_bytes) / big_bytes,
        "big gets what small left over"
    );
    let r = reason_of(&e, "b39");
    assert!(
        r.contains("`exposure.totalSchemaBytes`") && r.contains("shared fairly among 2 servers"),
        "{r}"
    );
    // The outcome does not depend on the order the tools come in.
    let mut reversed = all.clone();
    reversed.reverse();
    let again = p.expose(reversed.iter());
    assert_eq!(names(&again.direct), names(&e.direct));
    assert_eq!(again.hidden, e.hidden);
}

#[test]
fn a_tool_larger_than_its_share_still_gets_what_others_leave() {
    // "a"'s only tool is larger than half the budget; "b" needs little, so "a" gets the rest.
    let a = entry("a", tool("huge", &"x".repeat(3000)));
    let b = entry("b", tool("small", "d"));
    let a_bytes = definition_bytes(&a.qualified_name, &a.tool).unwrap_or(0);
    let b_bytes = definition_bytes(&b.qualified_name, &b.tool).unwrap_or(0);
    let p = ExposurePolicy {
        total_schema_bytes: a_bytes + b_bytes,
        ..Default::default()
    };
    let e = p.expose([&a, &b].into_iter());
    assert_eq!(names(&e.direct), ["mcp__a__huge", "mcp__b__small"]);
    assert!(e.hidden.is_empty());
}

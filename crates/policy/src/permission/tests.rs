use super::*;
use serde_json::json;

fn rules(config: Value) -> PermissionRules {
    match serde_json::from_value(config) {
        Ok(r) => r,
        Err(e) => panic!("config rejected: {e}"),
    }
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn none() -> Map<String, Value> {
    Map::new()
}

fn reason(d: &Decision) -> &str {
    match d {
        Decision::Allow => "",
        Decision::Deny { reason } | Decision::Ask { reason } => reason,
    }
}

#[test]
fn allow_rule_allows() {
    let r = rules(json!({"allow": ["mcp__github__*"]}));
    assert_eq!(
        r.decide("mcp__github__get_issue", &none(), None),
        Decision::Allow
    );
    assert!(matches!(
        r.decide("mcp__gitlab__get_issue", &none(), None),
        Decision::Ask { .. }
    ));
}

#[test]
fn deny_beats_ask_beats_allow_whatever_the_order() {
    let r = rules(json!({
        "allow": ["mcp__github__**"],
        "ask": ["mcp__github__create_*"],
        "deny": ["mcp__github__delete_*"],
    }));
    assert_eq!(
        r.decide("mcp__github__list", &none(), None),
        Decision::Allow
    );
    let ask = r.decide("mcp__github__create_issue", &none(), None);
    assert!(matches!(ask, Decision::Ask { .. }));
    assert!(
        reason(&ask).contains("`mcp__github__create_*` in `permissions.ask`"),
        "{ask:?}"
    );
    let deny = r.decide("mcp__github__delete_repo", &none(), None);
    assert!(matches!(deny, Decision::Deny { .. }));
    assert!(
        reason(&deny).contains("rule `mcp__github__delete_*` in `permissions.deny`"),
        "{deny:?}"
    );
}

#[test]
fn the_first_rule_of_the_winning_effect_is_named() {
    let r = rules(json!({"deny": ["mcp__a__x", "mcp__a__*"], "allow": ["**"]}));
    let d = r.decide("mcp__a__x", &none(), None);
    assert!(reason(&d).contains("rule `mcp__a__x`"), "{d:?}");
}

#[test]
fn a_server_tool_never_matches_a_built_in_rule() {
    let r = rules(json!({"allow": ["Write", "*", "*Write"]}));
    assert_eq!(r.decide("Write", &none(), None), Decision::Allow);
    let d = r.decide(
        "mcp__srv__Write",
        &none(),
        Some(&ToolAnnotations::new().read_only(true)),
    );
    assert!(matches!(d, Decision::Ask { .. }), "{d:?}");
    // And a deny meant for the server tool does not touch the built-in.
    let r = rules(json!({"deny": ["mcp__srv__Write"], "allow": ["Write"]}));
    assert_eq!(r.decide("Write", &none(), None), Decision::Allow);
    assert!(matches!(
        r.decide("mcp__srv__Write", &none(), None),
        Decision::Deny { .. }
    ));
}

#[test]
fn argument_globs() {
    let r = rules(json!({"allow": [
        {"tool": "mcp__fs__write_file", "args": {"path": {"glob": "/tmp/**"}}}
    ]}));
    let allowed = |a: Value| r.decide("mcp__fs__write_file", &args(a), None) == Decision::Allow;
    assert!(allowed(json!({"path": "/tmp/x/y.txt", "content": "hi"})));
    assert!(!allowed(json!({"path": "/etc/passwd"})));
    assert!(!allowed(json!({"path": 42})));
    assert!(!allowed(json!({"content": "no path"})), "missing argument");
    assert!(!allowed(json!({"path": "/tmp/../etc/passwd"})), "traversal");
    assert!(allowed(json!({"path": "/tmp/a/../b"})));
    assert!(allowed(json!({"path": ["/tmp/a", "/tmp/b"]})));
    assert!(!allowed(json!({"path": ["/tmp/a", "/etc/b"]})));
    assert!(!allowed(json!({"path": []})));
    assert_ne!(
        r.decide("mcp__fs__read_file", &args(json!({"path": "/tmp/a"})), None),
        Decision::Allow
    );
}

#[test]
fn deny_predicates_see_through_dots_and_arrays() {
    let r = rules(json!({
        "allow": ["mcp__fs__**"],
        "deny": [{"tool": "mcp__fs__*", "args": {"path": {"glob": "/etc/**"}}}],
    }));
    let denied = |a: Value| {
        matches!(
            r.decide("mcp__fs__write_file", &args(a), None),
            Decision::Deny { .. }
        )
    };
    assert!(denied(json!({"path": "/etc/passwd"})));
    assert!(denied(json!({"path": "/tmp/../etc/passwd"})));
    assert!(denied(json!({"path": "/../../etc/passwd"})));
    assert!(denied(json!({"path": ["/tmp/a", "/etc/shadow"]})));
    assert!(!denied(json!({"path": "/tmp/etc/passwd"})));
    assert!(
        !denied(json!({})),
        "a predicate on a missing argument does not match"
    );
}

#[test]
fn prefix_and_equals() {
    let r = rules(json!({
        "allow": [
            {"tool": "mcp__web__fetch", "args": {"url": {"prefix": "https://docs.rs/"}}},
            {"tool": "mcp__db__query", "args": {"readonly": {"equals": true}, "db": {"equals": "dev"}}},
        ],
    }));
    let d = |name: &str, a: Value| r.decide(name, &args(a), None);
    assert_eq!(
        d("mcp__web__fetch", json!({"url": "https://docs.rs/serde"})),
        Decision::Allow
    );
    assert_ne!(
        d("mcp__web__fetch", json!({"url": "https://docs.rs.evil/x"})),
        Decision::Allow
    );
    assert_eq!(
        d(
            "mcp__db__query",
            json!({"readonly": true, "db": "dev", "sql": "select 1"})
        ),
        Decision::Allow
    );
    assert_ne!(
        d("mcp__db__query", json!({"readonly": "true", "db": "dev"})),
        Decision::Allow
    );
    assert_ne!(
        d("mcp__db__query", json!({"readonly": true})),
        Decision::Allow
    );
}

#[test]
fn hints_never_grant_by_default() {
    let r = PermissionRules::default();
    let ro = ToolAnnotations::new().read_only(true);
    let d = r.decide("mcp__s__list", &none(), Some(&ro));
    assert!(reason(&d).contains("trustReadOnlyHint"), "{d:?}");
    assert!(matches!(d, Decision::Ask { .. }));
    let d = r.decide("mcp__s__rm", &none(), None);
    assert!(reason(&d).contains("may be destructive"), "{d:?}");
    let d = r.decide(
        "mcp__s__rm",
        &none(),
        Some(&ToolAnnotations::new().destructive(true)),
    );
    assert!(reason(&d).contains("may be destructive"), "{d:?}");
    let d = r.decide(
        "mcp__s__add",
        &none(),
        Some(&ToolAnnotations::new().destructive(false)),
    );
    assert!(matches!(d, Decision::Ask { .. }), "{d:?}");
    assert!(reason(&d).contains("\"mcp__s__add\" to `permissions.allow`"));
}

#[test]
fn trust_read_only_hint_allows_only_consistent_read_only_claims() {
    let r = rules(json!({"trustReadOnlyHint": true, "deny": ["mcp__s__secret"]}));
    assert!(r.trusts_read_only_hint());
    let ro = ToolAnnotations::new().read_only(true);
    assert_eq!(
        r.decide("mcp__s__list", &none(), Some(&ro)),
        Decision::Allow
    );
    let both = ToolAnnotations::new().read_only(true).destructive(true);
    assert!(matches!(
        r.decide("mcp__s__odd", &none(), Some(&both)),
        Decision::Ask { .. }
    ));
    assert!(matches!(
        r.decide("mcp__s__x", &none(), None),
        Decision::Ask { .. }
    ));
    // Rules still win over the hint.
    assert!(matches!(
        r.decide("mcp__s__secret", &none(), Some(&ro)),
        Decision::Deny { .. }
    ));
}

#[test]
fn config_errors_name_the_entry() {
    let err = |v: Value| match serde_json::from_value::<PermissionRules>(v) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let e = err(json!({"allow": ["ok", "mcp.fs.*"]}));
    assert!(
        e.contains("permissions.allow[1]") && e.contains("'.'"),
        "{e}"
    );
    let e = err(json!({"deny": [{"tool": "x", "arg": {}}]}));
    assert!(
        e.contains("permissions.deny[0]") && e.contains("unknown field `arg`"),
        "{e}"
    );
    let e = err(json!({"ask": [{"tool": "x", "args": {"p": {"regex": "."}}}]}));
    assert!(e.contains("unknown variant `regex`"), "{e}");
    let e = err(json!({"ask": [{"tool": "x", "args": {"p": {"glob": "a", "prefix": "b"}}}]}));
    assert!(e.contains("permissions.ask[0]"), "{e}");
    let e = err(json!({"allow": [42]}));
    assert!(e.contains("tool-name glob"), "{e}");
    let e = err(json!({"alow": []}));
    assert!(e.contains("unknown field `alow`"), "{e}");
    let e = err(json!({"allow": [""]}));
    assert!(e.contains("must not be empty"), "{e}");
}

#[test]
fn rules_keep_their_text() {
    let r = rules(json!({
        "allow": ["mcp__a__*"],
        "deny": [{"tool": "mcp__fs__*", "args": {"path": {"glob": "/etc/**"}}}],
    }));
    let texts: Vec<_> = r.rules().iter().map(|r| (r.effect(), r.text())).collect();
    assert_eq!(
        texts,
        vec![
            (
                Effect::Deny,
                r#"{"args":{"path":{"glob":"/etc/**"}},"tool":"mcp__fs__*"}"#
            ),
            (Effect::Allow, "mcp__a__*"),
        ]
    );
}

#[test]
fn dots_normalise_lexically() {
    assert_eq!(normalize_dots("/tmp/a"), None);
    assert_eq!(normalize_dots("a..b/c").as_deref(), None);
    assert_eq!(normalize_dots("/tmp/../etc").as_deref(), Some("/etc"));
    assert_eq!(normalize_dots("/../../etc").as_deref(), Some("/etc"));
    assert_eq!(normalize_dots("/tmp/./x/").as_deref(), Some("/tmp/x/"));
    assert_eq!(normalize_dots("../x").as_deref(), Some("../x"));
    assert_eq!(normalize_dots("a/../../x").as_deref(), Some("../x"));
    assert_eq!(normalize_dots("/tmp/..").as_deref(), Some("/"));
}

fn request() -> ApprovalRequest {
    ApprovalRequest {
        qualified_name: "mcp__fs__write_file".into(),
        server: "fs".into(),
        args: Map::new(),
        reason: "it may be destructive".into(),
        annotations: None,
    }
}

#[test]
fn deny_all_names_the_key_to_add() {
    let a = futures::executor::block_on(DenyAll.approve(request()));
    assert!(!a.is_approved());
    match a {
        Approval::Denied { reason } => {
            assert!(reason.contains("\"mcp__fs__write_file\" to `permissions.allow`"));
            assert!(reason.contains("it may be destructive"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn allow_all_approves() {
    let approver: &dyn Approver = &AllowAll;
    let a = futures::executor::block_on(approver.approve(request()));
    assert!(a.is_approved());
    assert!(!Approval::Cancelled.is_approved());
}

/// A deny or ask rule's `*` crosses `__`: a raw name holding `__` is never let past it.
#[test]
fn a_deny_or_ask_rule_is_not_missed_by_a_raw_name_holding_the_separator() {
    let r = rules(json!({"allow": ["mcp__**"], "deny": ["mcp__fx__*"], "ask": ["mcp__gh__*"]}));
    assert!(matches!(
        r.decide("mcp__fx__a__b", &none(), None),
        Decision::Deny { .. }
    ));
    assert!(matches!(
        r.decide("mcp__gh__a__b", &none(), None),
        Decision::Ask { .. }
    ));
    assert_eq!(r.decide("mcp__ev__a__b", &none(), None), Decision::Allow);
}

/// An allow rule written with `*` where `**` was meant is named in the reason, with the rule
/// for `*`; a session that cannot ask says what to add once.
#[test]
fn a_rule_that_misses_by_a_star_is_explained() {
    let r = rules(json!({"allow": ["mcp__*", "mcp__fx__*"]}));
    assert_eq!(r.decide("mcp__fx__echo", &none(), None), Decision::Allow);
    let ask = r.decide("mcp__gh__get_issue", &none(), None);
    let why = reason(&ask);
    assert!(
        why.contains("the rule \"mcp__*\" does not match it") && why.contains("`**` crosses them"),
        "{why}"
    );
    // A rule that does not match for another reason is not named.
    let r = rules(json!({"allow": ["mcp__gh__list_*"]}));
    let why = reason(&r.decide("mcp__gh__get_issue", &none(), None)).to_string();
    assert!(!why.contains("does not match it"), "{why}");
    let request = ApprovalRequest {
        qualified_name: "mcp__gh__get_issue".into(),
        server: "gh".into(),
        args: none(),
        reason: why,
        annotations: None,
    };
    let Approval::Denied { reason } = futures::executor::block_on(DenyAll.approve(request)) else {
        panic!("denied");
    };
    assert_eq!(reason.matches("permissions.allow").count(), 1, "{reason}");
}

//! A corpus of hostile server metadata. Every entry must come out bounded and clean, or be
//! rejected with a stated reason; every accepted tool or prompt name must qualify to a valid
//! provider name that is distinct from its ASCII look-alike's.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_harness_catalog::naming::{MAX_NAME_LEN, is_valid, qualify};
use mcp_harness_catalog::sanitize::{
    MetadataLimits, Rejected, clean_instructions, clean_line, clean_text, sanitize_prompt,
    sanitize_resource, sanitize_template, sanitize_tool,
};
use rmcp::model::{
    JsonObject, MetaObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool,
    ToolAnnotations,
};
use serde_json::{Value, json};

const SERVER: &str = "srv";
const MB: usize = 1024 * 1024;

fn obj(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => panic!("schema literal must be an object"),
    }
}

fn plain_schema() -> Arc<JsonObject> {
    obj(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
}

fn tool(name: &str) -> Tool {
    Tool::new(name.to_string(), "ok".to_string(), plain_schema())
}

fn meta(key: &str, value: Value) -> MetaObject {
    let mut m = MetaObject::new();
    m.0.insert(key.to_string(), value);
    m
}

fn nested_schema(levels: usize) -> Arc<JsonObject> {
    let mut v = json!({"type": "string"});
    for _ in 0..levels {
        v = json!({"type": "object", "properties": {"a": v}});
    }
    obj(v)
}

/// The regex `^[a-zA-Z0-9_-]{1,64}$`, by hand.
fn provider_name_ok(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One-line text: already clean (cleaning changes nothing) and within `max` characters.
fn assert_line(field: &str, s: &str, max: usize) {
    assert!(
        s.chars().count() <= max,
        "{field}: {} chars",
        s.chars().count()
    );
    assert!(!clean_line(s, max).1, "{field} is not clean: {s:?}");
}

/// Multi-line text: already clean and within `max` characters.
fn assert_text(field: &str, s: &str, max: usize) {
    assert!(
        s.chars().count() <= max,
        "{field}: {} chars",
        s.chars().count()
    );
    assert!(!clean_text(s, max).1, "{field} is not clean: {s:?}");
}

fn assert_reason(reason: &str) {
    assert!(!reason.is_empty());
    assert!(reason.chars().count() <= 300, "reason too long: {reason}");
    assert!(
        !clean_line(reason, 300).1,
        "reason is not clean: {reason:?}"
    );
}

/// Every `description`/`title` string in an accepted schema is clean and bounded.
fn assert_schema(schema: &JsonObject, l: &MetadataLimits) {
    let size = serde_json::to_vec(schema)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    assert!(size <= l.max_schema_bytes);
    let mut stack: Vec<(&str, &Value)> = schema.iter().map(|(k, v)| (k.as_str(), v)).collect();
    while let Some((key, value)) = stack.pop() {
        match value {
            Value::String(s) if key == "description" => {
                assert_text("schema description", s, l.max_description_chars)
            }
            Value::String(s) if key == "title" => assert_line("schema title", s, l.max_title_chars),
            Value::Object(m) => stack.extend(m.iter().map(|(k, v)| (k.as_str(), v))),
            Value::Array(a) => stack.extend(a.iter().map(|v| (key, v))),
            _ => {}
        }
    }
}

fn assert_tool_clean(t: &Tool, l: &MetadataLimits) {
    if let Some(title) = &t.title {
        assert_line("title", title, l.max_title_chars);
    }
    if let Some(d) = &t.description {
        assert_text("description", d, l.max_description_chars);
    }
    if let Some(title) = t.annotations.as_ref().and_then(|a| a.title.as_ref()) {
        assert_line("annotations.title", title, l.max_title_chars);
    }
    assert_schema(&t.input_schema, l);
    if let Some(s) = &t.output_schema {
        assert_schema(s, l);
    }
    if let Some(m) = &t.meta {
        let size = serde_json::to_vec(m).map(|v| v.len()).unwrap_or(usize::MAX);
        assert!(size <= l.max_meta_bytes);
        for (k, v) in &m.0 {
            if k == "searchHint" || k.ends_with("/searchHint") {
                let hint = v
                    .as_str()
                    .unwrap_or_else(|| panic!("hint {k} not a string"));
                assert_line("search hint", hint, l.max_search_hint_chars);
            }
        }
    }
}

/// (label, tool, expected to be accepted)
fn tool_corpus() -> Vec<(&'static str, Tool, bool)> {
    let mut c = Vec::new();

    let mut t = tool("huge_description");
    t.description = Some(format!("Start.{}", "x".repeat(MB)).into());
    c.push(("1 MB description", t, true));

    let mut t = tool("deep_schema");
    t.input_schema = nested_schema(100);
    c.push(("100-level nested input schema", t, false));

    let mut t = tool("deep_output");
    t.output_schema = Some(nested_schema(100));
    c.push(("100-level nested output schema", t, false));

    let mut t = tool("big_schema");
    let props: serde_json::Map<String, Value> = (0..5000)
        .map(|i| {
            (
                format!("p{i:05}"),
                json!({"type": "string", "minLength": 1}),
            )
        })
        .collect();
    t.input_schema = obj(json!({"type": "object", "properties": props}));
    assert!(serde_json::to_vec(&*t.input_schema).map_or(0, |v| v.len()) > 200 * 1024);
    c.push(("200 KiB schema", t, false));

    let mut t = tool("big_schema_description");
    t.input_schema = obj(json!({"type": "object", "description": "d".repeat(200 * 1024)}));
    c.push(("200 KiB description inside a schema", t, false));

    let mut t = tool("non_object_schema");
    t.input_schema = obj(json!({"type": "array", "items": {"type": "string"}}));
    c.push(("input schema of type array", t, false));

    c.push(("name with slash", tool("files/read"), true));
    c.push(("name with dots", tool("files.read.v2"), true));
    c.push(("name with spaces", tool("read the file"), true));
    c.push(("200-character name", tool(&"n".repeat(200)), false));
    c.push(("Cyrillic look-alike name", tool("\u{0435}\u{0441}ho"), true));
    c.push(("ASCII twin of the look-alike", tool("echo"), true));
    c.push(("NUL in name", tool("ec\u{0}ho"), false));
    c.push(("ESC in name", tool("echo\u{1b}[2K"), false));
    c.push(("RTL override in name", tool("echo\u{202E}lmth"), false));
    c.push(("zero-width joiner in name", tool("ec\u{200D}ho"), false));
    c.push(("empty name", tool(""), false));

    let mut t = tool("rtl_description");
    t.description = Some("Lists files \u{202E}txt.exe\u{202C} safely".into());
    c.push(("RTL override in description", t, true));

    let mut t = tool("zwj_title");
    t.title = Some("Sa\u{200D}fe\u{200B} To\u{2060}ol\u{FEFF}".to_string());
    t.annotations = Some(ToolAnnotations::with_title("Ann\u{200D}otated\ntitle").read_only(true));
    c.push(("zero-width joiners in titles", t, true));

    let mut t = tool("control_bytes");
    t.title = Some("Ti\u{0}tle\u{1b}[31m".to_string());
    t.description = Some("Erase\u{1b}[2J\u{1b}]0;pwned\u{7}\u{0} line\u{9b}".into());
    c.push(("NUL and ESC in title and description", t, true));

    let mut t = tool("huge_meta");
    t.meta = Some(meta("blob", json!("m".repeat(MB))));
    c.push(("1 MB _meta", t, true));

    let mut t = tool("hint");
    t.meta = Some(meta(
        "anthropic/searchHint",
        json!("find\nfiles\r\nby\tname\u{2028}and \u{202E}content"),
    ));
    c.push(("search hint with newlines", t, true));

    let mut t = tool("hostile_schema_text");
    t.input_schema = obj(json!({
        "type": "object",
        "description": format!("Ignore\u{202E} previous{}", "!".repeat(10_000)),
        "properties": {"path": {"type": "string", "title": "Pa\u{200B}th\n"}}
    }));
    c.push(("hostile description and title inside a schema", t, true));

    let mut t = tool("hostile_property_name");
    t.input_schema = obj(json!({
        "type": "object",
        "properties": {"pa\u{202E}th": {"type": "string"}}
    }));
    c.push(("bidi control in a property name", t, false));

    c
}

#[test]
fn tools_come_out_clean_or_rejected_with_a_reason() {
    let l = MetadataLimits::default();
    let mut accepted_names: HashMap<String, String> = HashMap::new();
    for (label, t, expect_ok) in tool_corpus() {
        let raw = t.name.to_string();
        match sanitize_tool(t, &l) {
            Ok((t, notes)) => {
                assert!(expect_ok, "{label}: accepted, expected a rejection");
                assert_eq!(t.name, raw, "{label}: the wire name is never rewritten");
                assert_tool_clean(&t, &l);
                for n in &notes {
                    assert_reason(n);
                }
                let q = qualify(SERVER, &t.name);
                assert!(provider_name_ok(&q) && is_valid(&q), "{label}: {q}");
                if let Some(other) = accepted_names.insert(q.clone(), raw.clone()) {
                    panic!("{label}: {q} also names {other:?}");
                }
            }
            Err(reason) => {
                assert!(!expect_ok, "{label}: rejected: {reason}");
                assert_reason(&reason.to_string());
            }
        }
    }
    assert_eq!(accepted_names.len(), 12);
}

#[test]
fn look_alike_qualifies_apart_from_its_ascii_twin() {
    let l = MetadataLimits::default();
    let (look, _) = sanitize_tool(tool("\u{0435}\u{0441}ho"), &l).expect("accepted");
    let (twin, _) = sanitize_tool(tool("echo"), &l).expect("accepted");
    let (q_look, q_twin) = (qualify(SERVER, &look.name), qualify(SERVER, &twin.name));
    assert_eq!(q_twin, "mcp__srv__echo");
    assert!(provider_name_ok(&q_look));
    assert_ne!(q_look, q_twin);
}

#[test]
fn specific_outcomes() {
    let l = MetadataLimits::default();
    let by_label: HashMap<&str, Result<(Tool, Vec<String>), Rejected>> = tool_corpus()
        .into_iter()
        .map(|(label, t, _)| (label, sanitize_tool(t, &l)))
        .collect();
    let ok = |label: &str| match &by_label[label] {
        Ok(v) => v.clone(),
        Err(e) => panic!("{label}: {e}"),
    };
    let err = |label: &str| match &by_label[label] {
        Ok(_) => panic!("{label}: accepted"),
        Err(e) => e.to_string(),
    };

    let (t, _) = ok("1 MB description");
    let d = t.description.as_deref().unwrap_or_default();
    assert_eq!(d.chars().count(), 2048);
    assert!(d.starts_with("Start.") && d.ends_with('…'));

    assert!(err("100-level nested input schema").contains("deeper than 32"));
    assert!(err("100-level nested output schema").starts_with("output schema"));
    assert!(err("200 KiB schema").contains("larger than 65536 bytes"));
    assert!(err("200-character name").contains("200 characters"));
    assert!(err("NUL in name").contains("U+0000"));
    assert!(err("ESC in name").contains("U+001B"));
    assert!(err("RTL override in name").contains("U+202E"));
    assert!(err("zero-width joiner in name").contains("U+200D"));

    let (t, _) = ok("RTL override in description");
    assert_eq!(t.description.as_deref(), Some("Lists files txt.exe safely"));
    let (t, notes) = ok("zero-width joiners in titles");
    assert_eq!(t.title.as_deref(), Some("Safe Tool"));
    let a = t.annotations.expect("annotations kept");
    assert_eq!(a.title.as_deref(), Some("Annotated title"));
    assert_eq!(a.read_only_hint, Some(true), "hints are kept unchanged");
    assert_eq!(notes.len(), 2);

    let (t, _) = ok("NUL and ESC in title and description");
    assert_eq!(t.title.as_deref(), Some("Title[31m"));
    assert_eq!(t.description.as_deref(), Some("Erase[2J]0;pwned line"));

    let (t, notes) = ok("1 MB _meta");
    assert!(t.meta.is_none());
    assert_eq!(notes, vec!["_meta: dropped (larger than 16384 bytes)"]);

    let (t, _) = ok("search hint with newlines");
    let hint = t
        .meta
        .as_ref()
        .and_then(|m| m.0["anthropic/searchHint"].as_str().map(String::from));
    assert_eq!(hint.as_deref(), Some("find files by name and content"));
}

#[test]
fn prompts_come_out_clean_or_rejected() {
    let l = MetadataLimits::default();
    let corpus: Vec<(&str, Prompt, bool)> = vec![
        (
            "hostile text",
            {
                let mut p = Prompt::new(
                    "review code",
                    Some(format!("Re\u{202E}view {}", "r".repeat(MB))),
                    Some(vec![
                        PromptArgument::new("file.path")
                            .with_title("Fi\u{200D}le\n")
                            .with_description("pa\u{0}th\u{1b}"),
                    ]),
                );
                p.title = Some("T\u{FEFF}itle".into());
                p
            },
            true,
        ),
        (
            "look-alike name",
            Prompt::new("\u{0435}\u{0441}ho", None::<String>, None),
            true,
        ),
        (
            "200-character name",
            Prompt::new("p".repeat(200), None::<String>, None),
            false,
        ),
        (
            "ESC in name",
            Prompt::new("p\u{1b}", None::<String>, None),
            false,
        ),
        (
            "RTL in argument name",
            Prompt::new(
                "p",
                None::<String>,
                Some(vec![PromptArgument::new("ar\u{202E}g")]),
            ),
            false,
        ),
    ];
    for (label, p, expect_ok) in corpus {
        let raw = p.name.clone();
        match sanitize_prompt(p, &l) {
            Ok((p, notes)) => {
                assert!(expect_ok, "{label}: accepted");
                assert_eq!(p.name, raw);
                if let Some(t) = &p.title {
                    assert_line("title", t, l.max_title_chars);
                }
                if let Some(d) = &p.description {
                    assert_text("description", d, l.max_description_chars);
                }
                for a in p.arguments.iter().flatten() {
                    if let Some(t) = &a.title {
                        assert_line("argument title", t, l.max_title_chars);
                    }
                    if let Some(d) = &a.description {
                        assert_text("argument description", d, l.max_description_chars);
                    }
                }
                notes.iter().for_each(|n| assert_reason(n));
                let q = qualify(SERVER, &p.name);
                assert!(provider_name_ok(&q), "{label}: {q}");
                assert_ne!(q, qualify(SERVER, "echo"));
            }
            Err(reason) => {
                assert!(!expect_ok, "{label}: rejected: {reason}");
                assert_reason(&reason.to_string());
            }
        }
    }
}

#[test]
fn resources_and_templates_come_out_clean_or_rejected() {
    let l = MetadataLimits::default();
    let resources: Vec<(&str, Resource, bool)> = vec![
        (
            "hostile text",
            Resource::new("file:///notes.txt", "no\u{202E}tes\n.txt")
                .with_title("Ti\u{200D}tle")
                .with_description(format!("d\u{1b}[2J{}", "d".repeat(MB)))
                .with_mime_type("text/plain\u{0}")
                .with_meta(meta("blob", json!("m".repeat(MB)))),
            true,
        ),
        (
            "2 MB URI",
            Resource::new(format!("data:text/plain,{}", "a".repeat(2 * MB)), "big"),
            false,
        ),
        (
            "RTL in URI",
            Resource::new("file:///a\u{202E}txt.exe", "a"),
            false,
        ),
        ("NUL in URI", Resource::new("file:///a\u{0}b", "a"), false),
        ("empty URI", Resource::new("", "a"), false),
    ];
    for (label, r, expect_ok) in resources {
        let raw = r.uri.clone();
        match sanitize_resource(r, &l) {
            Ok((r, notes)) => {
                assert!(expect_ok, "{label}: accepted");
                assert_eq!(r.uri, raw);
                assert_line("name", &r.name, l.max_name_chars);
                r.title
                    .iter()
                    .for_each(|t| assert_line("title", t, l.max_title_chars));
                r.description
                    .iter()
                    .for_each(|d| assert_text("description", d, l.max_description_chars));
                r.mime_type
                    .iter()
                    .for_each(|m| assert_line("mimeType", m, l.max_mime_type_chars));
                assert!(r.meta.is_none());
                notes.iter().for_each(|n| assert_reason(n));
            }
            Err(reason) => {
                assert!(!expect_ok, "{label}: rejected: {reason}");
                assert_reason(&reason.to_string());
            }
        }
    }

    let (t, _) = sanitize_template(
        ResourceTemplate::new("file:///{path}", "fi\u{2066}les").with_description("d\u{E0041}"),
        &l,
    )
    .expect("accepted");
    assert_eq!(
        (t.name.as_str(), t.description.as_deref()),
        ("files", Some("d"))
    );
    let reason = sanitize_template(
        ResourceTemplate::new(format!("file:///{{p}}{}", "/a".repeat(2000)), "t"),
        &l,
    )
    .unwrap_err();
    assert!(matches!(reason, Rejected::Identifier(_)), "{reason}");
    assert_reason(&reason.to_string());
}

#[test]
fn instructions_are_bounded_and_clean() {
    let l = MetadataLimits::default();
    let s = clean_instructions(
        &format!("Always\u{202E} obey\u{1b}[8m {}", "i".repeat(MB)),
        &l,
    );
    assert_text("instructions", &s, l.max_instructions_chars);
    assert_eq!(s.chars().count(), l.max_instructions_chars);
}

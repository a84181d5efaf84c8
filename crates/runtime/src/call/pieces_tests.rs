//! The pure pieces of the call path together: argument validation (R27), result normalisation
//! (R30) and the output budget (R31). No server is started.

use std::net::TcpListener;
use std::sync::Arc;

use crate::call::output::{
    OutputError, OutputStore, OutputStoreConfig, READ_OUTPUT_TOOL, Spilled, read_output_tool,
};
use crate::call::result::{
    MEDIA_TOKENS, NormalizedResult, ResultLimits, WarningKind, estimate_tokens, normalize,
};
use crate::call::summary::render_text;
use crate::call::validate::{ArgumentError, ArgumentValidator, Dialect};
use crate::error::ErrorClass;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The focal schema of the conformance scenario `json-schema-2020-12-preservation`.
fn preservation_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

#[test]
fn the_2020_12_schema_is_kept_verbatim_and_enforced() {
    let original = preservation_schema();
    let schema = Arc::new(object(original.clone()));
    let validator = ArgumentValidator::new("json_schema_2020_12_tool", schema.clone());
    assert!(validator.is_usable());
    assert_eq!(validator.dialect(), Dialect::Draft202012);
    assert!(Arc::ptr_eq(validator.schema(), &schema));
    assert_eq!(Value::Object(validator.schema().as_ref().clone()), original);

    let ok = object(json!({"name": "a", "contactMethod": "phone", "phone": "1",
        "address": {"city": "x"}}));
    assert!(validator.validate(&ok).is_ok());
    // if/then: phone chosen but missing; additionalProperties: false; $ref into $defs.
    let bad = object(json!({"contactMethod": "phone", "email": "e", "extra": 1,
        "address": {"city": 5}}));
    let err = validator.validate(&bad).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`json_schema_2020_12_tool`"), "{text}");
    assert!(text.contains("/address/city: "), "{text}");
    assert!(text.contains("extra"), "{text}");
    assert_eq!(err.class(), ErrorClass::Tool);
}

#[test]
fn a_network_ref_is_never_fetched() {
    // A canary on loopback, as in the conformance scenario `json-schema-ref-no-deref`.
    let canary = TcpListener::bind("127.0.0.1:0").unwrap();
    canary.set_nonblocking(true).unwrap();
    let url = format!(
        "http://{}/canary/profile-schema.json",
        canary.local_addr().unwrap()
    );
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"userId": {"type": "string", "pattern": "^[a-z0-9-]+$"}},
        "properties": {"id": {"$ref": "#/$defs/userId"}, "profile": {"$ref": url}},
        "required": ["id"]
    });
    let validator = ArgumentValidator::new("lookup_user", Arc::new(object(schema)));
    assert!(validator.is_usable());
    assert_eq!(validator.unresolved_refs(), std::slice::from_ref(&url));
    assert!(validator.notes().iter().any(|n| n.contains(&url)));
    // The local part is enforced; the unfetched part constrains nothing.
    assert!(
        validator
            .validate(&object(json!({"id": "u-1", "profile": {"x": 1}})))
            .is_ok()
    );
    assert!(
        validator
            .validate(&object(json!({"id": "Not Valid"})))
            .is_err()
    );
    match canary.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the canary was contacted: {other:?}"),
    }
}

#[test]
fn a_remote_ref_with_a_pointer_makes_the_tool_uncallable_with_a_clear_error() {
    let plain = ArgumentValidator::new(
        "t",
        Arc::new(object(json!({"$ref": "https://example.com/x.json"}))),
    );
    assert!(plain.is_usable());
    assert_eq!(plain.unresolved_refs(), ["https://example.com/x.json"]);

    let pointer = ArgumentValidator::new(
        "t",
        Arc::new(object(json!({
            "type": "object",
            "properties": {"a": {"$ref": "https://example.com/x.json#/definitions/a"}}
        }))),
    );
    assert!(!pointer.is_usable());
    let err = pointer.validate(&JsonObject::new()).unwrap_err();
    assert!(matches!(err, ArgumentError::SchemaUnusable { .. }));
    let text = err.to_string();
    assert!(text.contains("`t` was not called"), "{text}");
    assert!(text.contains("https://example.com/x.json"), "{text}");
    assert!(text.contains("never fetches"), "{text}");
    assert_eq!(err.class(), ErrorClass::Protocol);
}

#[test]
fn the_declared_draft_is_honoured() {
    // `$ref` siblings are ignored in draft 7 and applied in 2020-12.
    let body = json!({
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/s", "maxLength": 2}},
        "definitions": {"s": {"type": "string"}}
    });
    let long = object(json!({"a": "abcdef"}));
    let mut draft7 = body.clone();
    draft7["$schema"] = json!("http://json-schema.org/draft-07/schema#");
    let v7 = ArgumentValidator::new("t", Arc::new(object(draft7)));
    assert_eq!(v7.dialect(), Dialect::Draft7);
    assert!(v7.validate(&long).is_ok());
    let v2020 = ArgumentValidator::new("t", Arc::new(object(body)));
    assert_eq!(v2020.dialect(), Dialect::Draft202012);
    assert!(v2020.validate(&long).is_err());

    // Draft 4: boolean exclusiveMaximum.
    let v4 = ArgumentValidator::new(
        "t",
        Arc::new(object(json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "properties": {"n": {"maximum": 5, "exclusiveMaximum": true}}
        }))),
    );
    assert_eq!(v4.dialect(), Dialect::Draft4);
    assert!(v4.validate(&object(json!({"n": 5}))).is_err());
    assert!(v4.validate(&object(json!({"n": 4}))).is_ok());
}

#[test]
fn unknown_dialects_and_broken_schemas() {
    let unknown = ArgumentValidator::new(
        "t",
        Arc::new(object(json!({
            "$schema": "https://example.com/my-dialect",
            "properties": {"n": {"type": "integer"}}
        }))),
    );
    assert!(
        unknown.is_usable(),
        "{:?}",
        unknown.validate(&JsonObject::new())
    );
    assert_eq!(unknown.dialect(), Dialect::Draft202012);
    assert!(
        unknown
            .notes()
            .iter()
            .any(|n| n.contains("unknown `$schema`"))
    );
    assert!(unknown.validate(&object(json!({"n": "x"}))).is_err());

    let broken = ArgumentValidator::new("t", Arc::new(object(json!({"type": 5}))));
    assert!(!broken.is_usable());
    assert!(matches!(
        broken.validate(&JsonObject::new()),
        Err(ArgumentError::SchemaUnusable { .. })
    ));

    // `format` is an annotation only, also in draft 7.
    let format = ArgumentValidator::new(
        "t",
        Arc::new(object(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"when": {"type": "string", "format": "date-time"}}
        }))),
    );
    assert!(
        format
            .validate(&object(json!({"when": "tomorrow"})))
            .is_ok()
    );
}

fn normalized(result: CallToolResult, schema: Option<&Value>) -> NormalizedResult {
    let schema = schema.map(|s| object(s.clone()));
    normalize(result, schema.as_ref(), ResultLimits::default())
}

#[test]
fn structured_content_and_content_are_both_kept() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "required": ["n"]});
    let mut result = CallToolResult::structured(json!({"n": "not a number"}));
    result.content.push(ContentBlock::text("extra"));
    let kept = normalized(result, Some(&schema));
    assert_eq!(kept.content.len(), 2);
    assert_eq!(kept.structured_content, Some(json!({"n": "not a number"})));
    assert!(!kept.is_error);
    assert_eq!(kept.warnings.len(), 1);
    assert_eq!(
        kept.warnings[0].kind,
        WarningKind::StructuredContentMismatch
    );
    assert!(kept.warnings[0].message.contains("/n: "));

    let good = normalized(CallToolResult::structured(json!({"n": 1})), Some(&schema));
    assert!(good.warnings.is_empty());
    let missing = normalized(
        CallToolResult::success(vec![ContentBlock::text("hi")]),
        Some(&schema),
    );
    assert_eq!(
        missing.warnings[0].kind,
        WarningKind::StructuredContentMissing
    );
    // Error results are not held to the output schema.
    let error = normalized(
        CallToolResult::error(vec![
            ContentBlock::text("boom"),
            ContentBlock::text("again"),
        ]),
        Some(&schema),
    );
    assert!(error.is_error && error.warnings.is_empty());
    assert_eq!(error.error_text(), "boom\nagain");
}

#[test]
fn image_only_results_stay_images() {
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let result = normalized(
        CallToolResult::success(vec![ContentBlock::image(png, "image/png")]),
        None,
    );
    assert_eq!(result.content.len(), 1);
    assert!(result.content[0].as_image().is_some());
    assert!(result.warnings.is_empty() && !result.is_empty());
    assert_eq!(estimate_tokens(&result), MEDIA_TOKENS);
}

fn store_in(dir: &std::path::Path, config: OutputStoreConfig) -> OutputStore {
    OutputStore::open(OutputStoreConfig {
        root: Some(dir.to_path_buf()),
        ..config
    })
    .unwrap()
}

fn scratch_dir() -> std::path::PathBuf {
    mcp_harness_fixture::scratch::dir("test")
}

#[test]
fn small_results_pass_unchanged() {
    let store = OutputStore::temp().unwrap();
    let result = normalized(
        CallToolResult::success(vec![ContentBlock::text("hi")]),
        None,
    );
    let spilled = store.spill("s", "t", result.clone(), 10, false);
    assert_eq!(spilled, Spilled::Inline(result));
    assert!(spilled.handle().is_none());
}

#[test]
fn a_large_result_is_stored_and_read_back_by_pages() {
    let store = OutputStore::open(OutputStoreConfig {
        page_chars: 1_000,
        ..OutputStoreConfig::default()
    })
    .unwrap();
    let root = store.root().to_path_buf();
    let text: String = (0..3_000).map(|i| ['a', 'é', '€', '😀'][i % 4]).collect();
    let mut result = CallToolResult::structured(json!({"k": "v"}));
    result.content.push(ContentBlock::text(text));
    let result = normalized(result, None);
    let full = render_text(&result);

    let spilled = store.spill("srv", "big", result, 500, false);
    let Spilled::Stored {
        summary,
        handle,
        pages,
        total_chars,
    } = &spilled
    else {
        panic!("{spilled:?}")
    };
    assert_eq!(*total_chars, full.chars().count());
    assert_eq!(*pages, total_chars.div_ceil(1_000));
    let shown = summary.text();
    assert!(shown.contains(handle.as_str()) && shown.contains(READ_OUTPUT_TOOL));
    assert!(shown.contains("2 content block(s) plus structuredContent"));
    assert!(shown.chars().count() < 3_000, "{}", shown.chars().count());
    assert!(estimate_tokens(summary) <= 500 + 200);

    let mut joined = String::new();
    for page in 1..=*pages {
        let read = store.read_page(handle.as_str(), page).unwrap();
        assert_eq!((read.page, read.pages), (page, *pages));
        assert!(read.text.chars().count() <= 1_000);
        joined.push_str(&read.text);
    }
    assert_eq!(joined, full);
    let args = object(json!({"handle": handle.as_str(), "page": 2}));
    assert_eq!(store.read_output(&args).unwrap().page, 2);
    assert!(matches!(
        store.read_page(handle.as_str(), pages + 1),
        Err(OutputError::PageOutOfRange { .. })
    ));
    assert!(matches!(
        store.read_page(handle.as_str(), 0),
        Err(OutputError::PageOutOfRange { .. })
    ));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let dir_mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let file = root.join(format!("{handle}.txt"));
        let file_mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(file_mode, 0o600);
    }
    drop(spilled);
    drop(store);
    assert!(!root.exists(), "the per-store temp dir is removed on drop");
}

#[test]
fn handles_cannot_escape_the_store() {
    let dir = scratch_dir();
    let secret = dir.join("secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    let store = store_in(&dir.join("store"), OutputStoreConfig::default());
    for handle in [
        "../secret",
        "../secret.txt",
        "out-../../secret",
        "/etc/passwd",
        "out-0123456789abcdef0123456789abcdef/../../secret",
        "",
    ] {
        let err = store.read_page(handle, 1).unwrap_err();
        assert!(
            matches!(err, OutputError::BadHandle { .. }),
            "{handle}: {err}"
        );
        assert_eq!(err.class(), ErrorClass::Output);
    }
    // Well-formed but never stored.
    assert!(matches!(
        store.read_page("out-0123456789abcdef0123456789abcdef", 1),
        Err(OutputError::UnknownHandle { .. })
    ));
    assert!(matches!(
        store.read_output(&object(json!({"page": 1}))),
        Err(OutputError::BadArguments { .. })
    ));
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_store_is_bounded_and_evicts_the_oldest() {
    let dir = scratch_dir();
    let config = OutputStoreConfig {
        max_total_bytes: 25_000,
        ..OutputStoreConfig::default()
    };
    let store = store_in(&dir, config.clone());
    let big = |c: char| {
        normalized(
            CallToolResult::success(vec![ContentBlock::text(c.to_string().repeat(10_000))]),
            None,
        )
    };
    let first = store.spill("s", "t", big('a'), 10, false);
    let second = store.spill("s", "t", big('b'), 10, false);
    let third = store.spill("s", "t", big('c'), 10, false);
    let (first, second, third) = (
        first.handle().unwrap().clone(),
        second.handle().unwrap().clone(),
        third.handle().unwrap().clone(),
    );
    assert!(store.stored_bytes() <= 25_000);
    assert!(matches!(
        store.read_page(first.as_str(), 1),
        Err(OutputError::UnknownHandle { .. })
    ));
    assert!(!dir.join(format!("{first}.txt")).exists());
    assert!(store.read_page(second.as_str(), 1).is_ok());

    // One output larger than the whole store: the preview only, marked as cut.
    let huge = normalized(
        CallToolResult::success(vec![ContentBlock::text("d".repeat(30_000))]),
        None,
    );
    let huge = store.spill("s", "t", huge, 10, false);
    let Spilled::Truncated { summary, error } = &huge else {
        panic!("{huge:?}")
    };
    assert!(matches!(error, OutputError::TooLarge { .. }));
    assert!(summary.text().contains("could not be saved"));

    // A store reopened on the same root finds what is there and can read it.
    drop(store);
    let reopened = store_in(&dir, config);
    assert!(
        reopened
            .read_page(third.as_str(), 1)
            .unwrap()
            .text
            .contains("ccc")
    );
    drop(reopened);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_read_output_tool_is_read_only_and_strict() {
    let tool = read_output_tool();
    assert_eq!(tool.name, READ_OUTPUT_TOOL);
    assert!(READ_OUTPUT_TOOL.len() <= 64);
    let required = tool.input_schema.get("required").unwrap();
    assert_eq!(required, &json!(["handle"]));
    let validator = ArgumentValidator::new(READ_OUTPUT_TOOL, tool.input_schema.clone());
    assert!(
        validator
            .validate(&object(
                json!({"handle": "out-0123456789abcdef0123456789abcdef"})
            ))
            .is_ok()
    );
    assert!(
        validator
            .validate(&object(json!({"handle": "../../etc/passwd"})))
            .is_err()
    );
}

/// Issue 13 point 9: `mcp_harness__read_output` accepted properties its schema forbids.
#[test]
fn read_output_arguments_must_match_its_own_schema() {
    let dir = scratch_dir();
    let store = store_in(&dir.join("store"), OutputStoreConfig::default());
    let handle = "out-0123456789abcdef0123456789abcdef";
    for (args, expected) in [
        (json!({"handle": handle, "extra": 1}), "extra"),
        (json!({"handle": handle, "page": 0}), "/page"),
        (json!({"handle": handle, "page": "2"}), "/page"),
        (json!({"handle": "../secret"}), "/handle"),
        (json!({"page": 1}), "handle"),
    ] {
        let err = store.read_output(&object(args.clone())).unwrap_err();
        assert!(
            matches!(&err, OutputError::BadArguments { reason } if reason.contains(expected)),
            "{args}: {err}"
        );
    }
    // Valid arguments reach the store (which has no such output).
    assert!(matches!(
        store.read_output(&object(json!({"handle": handle, "page": 1}))),
        Err(OutputError::UnknownHandle { .. })
    ));
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_summary_keeps_what_fits_and_names_what_it_left_out() {
    let store = OutputStore::temp().unwrap();
    let long = "x".repeat(20_000);
    // Small structured content fits beside the summary: kept.
    let mut small = CallToolResult::structured(json!({"count": 3}));
    small.content.push(ContentBlock::text(long.clone()));
    let spilled = store.spill("s", "t", normalized(small, None), 1_000, true);
    let summary = spilled.into_result();
    assert_eq!(summary.structured_content, Some(json!({"count": 3})));
    assert!(!summary.is_error);

    // Large structured content of a tool with an outputSchema: left out, and the answer is an
    // error, since clients refuse a result without the structured content the schema promises.
    let big = CallToolResult::structured(json!({"rows": long.clone()}));
    let summary = store
        .spill("s", "t", normalized(big.clone(), None), 1_000, true)
        .into_result();
    assert!(summary.structured_content.is_none() && summary.is_error);
    assert!(
        summary
            .text()
            .contains("left out of this answer: its structuredContent")
    );
    // Without an outputSchema: left out, not an error.
    let summary = store
        .spill("s", "t", normalized(big, None), 1_000, false)
        .into_result();
    assert!(summary.structured_content.is_none() && !summary.is_error);

    // A huge `_meta` is counted, stored, and left out of the summary.
    let mut meta = rmcp::model::MetaObject::default();
    meta.insert("blob".into(), json!(long.clone()));
    let mut with_meta = CallToolResult::success(vec![ContentBlock::text("small")]);
    with_meta.meta = Some(meta);
    let spilled = store.spill("s", "t", normalized(with_meta, None), 1_000, false);
    let handle = spilled.handle().expect("stored").to_string();
    let summary = spilled.into_result();
    assert!(summary.meta.is_none(), "{:?}", summary.meta);
    assert!(summary.text().contains("its _meta"));
    let page = store.read_page(&handle, 1).expect("page 1");
    assert!(page.text.contains("[_meta]"), "{}", page.text);

    // Media over the budget are named.
    let image = || ContentBlock::image("aGVsbG8=", "image/png");
    let media = CallToolResult::success(vec![ContentBlock::text(long), image(), image()]);
    let summary = store
        .spill("s", "t", normalized(media, None), 2_000, false)
        .into_result();
    assert!(
        summary.text().contains("media block(s) ") && summary.text().contains("(over the budget"),
        "{}",
        summary.text()
    );
}

#[test]
fn read_output_takes_a_whole_number_written_as_a_float() {
    let store = OutputStore::temp().unwrap();
    let big = CallToolResult::success(vec![ContentBlock::text("y".repeat(50_000))]);
    let spilled = store.spill("s", "t", normalized(big, None), 10, false);
    let handle = spilled.handle().expect("stored").to_string();
    let args = |page: Value| {
        json!({"handle": handle, "page": page})
            .as_object()
            .cloned()
            .unwrap()
    };
    assert_eq!(store.read_output(&args(json!(2.0))).expect("2.0").page, 2);
    assert!(store.read_output(&args(json!(2.5))).is_err());
}

//! Property tests of the sanitiser (R11, issue 13): on any input it does not panic, and what it
//! returns keeps the invariants its module states — no control, bidi, invisible, private-use or
//! unassigned character reaches the model; text is within its character cap; one-line fields
//! have no line breaks and no leading, trailing or doubled spaces; cleaning is idempotent; a
//! sanitised tool keeps its wire name unchanged and its text fields clean and capped.

use std::sync::Arc;

use mcp_harness_catalog::sanitize::{
    MetadataLimits, clean_line, clean_text, escape_for_display, sanitize_tool,
};
use proptest::prelude::*;
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};
use unicode_general_category::{GeneralCategory, get_general_category};

/// Characters the sanitiser's module says never reach the model (`\n` and `\t` are allowed in
/// multi-line text and checked separately).
fn forbidden(c: char) -> bool {
    if matches!(c, '\n' | '\t') {
        return false;
    }
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200B}'..='\u{200F}'
            | '\u{061C}'
            | '\u{2060}'..='\u{2065}'
            | '\u{FEFF}'
            | '\u{00AD}'
            | '\u{E0000}'..='\u{E007F}'
    ) || matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
            | GeneralCategory::Unassigned
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// Characters a hostile server likes, mixed with ordinary ones.
fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => proptest::char::range(' ', '~'),
        2 => prop::sample::select(vec![
            '\n', '\r', '\t', '\u{0}', '\u{7}', '\u{1b}', '\u{7f}', '\u{85}', '\u{a0}', '\u{ad}',
            '\u{200b}', '\u{200d}', '\u{200e}', '\u{202e}', '\u{2066}', '\u{2028}', '\u{2029}',
            '\u{2060}', '\u{feff}', '\u{fffe}', '\u{e000}', '\u{e0041}', '\u{3000}', '\u{0435}',
            '\u{301}', '\u{fe0f}', '…', '😀',
        ]),
        1 => any::<char>(),
    ]
}

fn hostile_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(hostile_char(), 0..max).prop_map(|v| v.into_iter().collect())
}

/// JSON values with hostile strings, bounded in depth and size.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        hostile_string(24).prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    3 => prop::sample::select(vec![
                        "type", "properties", "description", "title", "enum", "items", "required",
                        "pattern", "$ref", "default", "x",
                    ]).prop_map(str::to_owned),
                    1 => hostile_string(12),
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn small_limits() -> impl Strategy<Value = MetadataLimits> {
    (0usize..40, 0usize..300, 1usize..12, 16usize..4096).prop_map(
        |(name, description, depth, schema)| MetadataLimits {
            max_name_chars: name,
            max_title_chars: name,
            max_description_chars: description,
            max_schema_depth: depth,
            max_schema_bytes: schema,
            max_meta_bytes: schema,
            max_search_hint_chars: name,
            ..MetadataLimits::default()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn clean_text_output_is_clean_capped_and_stable(s in hostile_string(200), max in 0usize..120) {
        let (out, changed) = clean_text(&s, max);
        prop_assert!(out.chars().count() <= max, "{} chars over {max}", out.chars().count());
        prop_assert!(!out.chars().any(forbidden), "forbidden character in {out:?}");
        prop_assert!(!out.contains('\r'));
        prop_assert_eq!(changed, out != s);
        prop_assert_eq!(clean_text(&out, max), (out.clone(), false), "not idempotent");
    }

    #[test]
    fn clean_line_output_is_one_clean_line(s in hostile_string(200), max in 0usize..120) {
        let (out, _) = clean_line(&s, max);
        prop_assert!(out.chars().count() <= max);
        prop_assert!(!out.chars().any(|c| forbidden(c) || matches!(c, '\n' | '\r' | '\t')),
            "{out:?}");
        prop_assert!(!out.starts_with(' ') && !out.ends_with(' ') && !out.contains("  "),
            "spaces in {out:?}");
        prop_assert_eq!(clean_line(&out, max), (out.clone(), false), "not idempotent");
    }

    #[test]
    fn escape_for_display_is_printable_and_capped(s in hostile_string(200), max in 0usize..120) {
        let out = escape_for_display(&s, max);
        prop_assert!(out.chars().count() <= max);
        prop_assert!(!out.chars().any(|c| forbidden(c) || (c.is_whitespace() && c != ' ')),
            "{out:?}");
    }

    #[test]
    fn sanitized_tools_keep_their_name_and_clean_text(
        name in hostile_string(48),
        title in proptest::option::of(hostile_string(80)),
        description in proptest::option::of(hostile_string(400)),
        schema in json_value(),
        output_schema in proptest::option::of(json_value()),
        meta in proptest::option::of(json_value()),
        limits in small_limits(),
    ) {
        let object = |v: Value| -> Arc<JsonObject> {
            Arc::new(match v {
                Value::Object(m) => m,
                other => json!({"type": "object", "properties": {"a": other}})
                    .as_object().cloned().unwrap_or_default(),
            })
        };
        let mut tool = Tool::new(name.clone(), description.clone().unwrap_or_default(), object(schema));
        if description.is_none() {
            tool.description = None;
        }
        tool.title = title;
        tool.output_schema = output_schema.map(object);
        if let Some(Value::Object(m)) = meta {
            tool.meta = serde_json::from_value(Value::Object(m)).ok();
        }
        match sanitize_tool(tool, &limits) {
            Err(reason) => prop_assert!(!reason.to_string().is_empty()),
            Ok((clean, _notes)) => {
                prop_assert_eq!(clean.name.as_ref(), name.as_str(), "wire name rewritten");
                prop_assert!(name.chars().count() <= limits.max_name_chars);
                prop_assert!(!name.chars().any(forbidden));
                if let Some(d) = &clean.description {
                    prop_assert!(d.chars().count() <= limits.max_description_chars);
                    prop_assert!(!d.chars().any(forbidden), "{d:?}");
                }
                if let Some(t) = &clean.title {
                    prop_assert!(t.chars().count() <= limits.max_title_chars);
                    prop_assert!(!t.chars().any(|c| forbidden(c) || c == '\n'), "{t:?}");
                }
                let schema_bytes = serde_json::to_vec(&*clean.input_schema).map(|v| v.len()).unwrap_or(0);
                prop_assert!(schema_bytes <= limits.max_schema_bytes, "schema of {schema_bytes} bytes kept");
            }
        }
    }
}

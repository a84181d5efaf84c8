//! Sanitising whole listed entries (tools, prompts, resources, templates), their `_meta` and
//! annotations.
//!
//! Invariant: an entry comes back either whole, every text field cleaned and capped with one
//! note per change, or refused with the reason to hide it; never half-cleaned.

use std::borrow::Cow;

use rmcp::model::{Annotations, MetaObject, Prompt, Resource, ResourceTemplate, Tool};
use serde_json::Value;

use super::schema::{fits, sanitize_schema};
use super::text::{
    Mode, check_name, check_uri, clean_field, clean_line, clean_opt, escape_for_display,
};
use super::{MetadataLimits, Rejected};

/// (nested past the decoder's depth limit, invalid UTF-8, a shape rmcp refuses); the value is
/// the reason. Same string as `mcp_harness_transport::inbound::UNDECODABLE_META_KEY`.
pub const UNDECODABLE_META_KEY: &str = "io.mcp-harness/undecodable";

/// `Err(reason)` for a placeholder of an entry that could not be decoded: it is hidden, with
/// the reason, and only it (the rest of the listing stands).
fn decodable(meta: &Option<MetaObject>) -> Result<(), Rejected> {
    match meta.as_ref().and_then(|m| m.0.get(UNDECODABLE_META_KEY)) {
        Some(reason) => Err(Rejected::Undecodable(
            reason
                .as_str()
                .map(|r| clean_line(r, 500).0)
                .unwrap_or_else(|| "the entry could not be decoded".to_string()),
        )),
        None => Ok(()),
    }
}

fn is_search_hint_key(key: &str) -> bool {
    key == "searchHint" || key.ends_with("/searchHint")
}

fn sanitize_meta(
    meta: Option<MetaObject>,
    limits: &MetadataLimits,
    notes: &mut Vec<String>,
) -> Option<MetaObject> {
    let mut meta = meta?;
    if !fits(&meta, limits.max_meta_bytes) {
        notes.push(format!(
            "_meta: dropped (larger than {} bytes)",
            limits.max_meta_bytes
        ));
        return None;
    }
    let mut not_strings = Vec::new();
    for (key, value) in meta.0.iter_mut() {
        if !is_search_hint_key(key) {
            continue;
        }
        let field = format!("_meta.{}", escape_for_display(key, 64));
        match value {
            Value::String(s) => {
                if let Some(c) =
                    clean_field(notes, &field, s, limits.max_search_hint_chars, Mode::Line)
                {
                    *s = c;
                }
            }
            _ => not_strings.push(key.clone()),
        }
    }
    for key in not_strings {
        meta.0.remove(&key);
        notes.push(format!(
            "_meta.{}: dropped (a search hint must be a string)",
            escape_for_display(&key, 64)
        ));
    }
    Some(meta)
}

fn sanitize_annotations(annotations: &mut Option<Annotations>, notes: &mut Vec<String>) {
    let Some(a) = annotations else { return };
    if let Some(p) = a.priority
        && !(0.0..=1.0).contains(&p)
    {
        a.priority = None;
        notes.push("annotations.priority: dropped (not within 0..=1)".to_string());
    }
    if let Some(ts) = &a.last_modified
        && (ts.len() > 64
            || !ts
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":.+-".contains(&b)))
    {
        a.last_modified = None;
        notes.push("annotations.lastModified: dropped (not an RFC 3339 timestamp)".to_string());
    }
    if let Some(audience) = &mut a.audience {
        let before = audience.len();
        let mut seen = Vec::new();
        audience.retain(|r| {
            if seen.contains(r) {
                false
            } else {
                seen.push(r.clone());
                true
            }
        });
        if audience.len() != before {
            notes.push("annotations.audience: duplicates removed".to_string());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entries

/// Cleans and bounds a listed tool. `Err` carries the reason to hide the tool entirely: a name
/// that is empty, longer than [`MetadataLimits::max_name_chars`] or contains a disallowed
/// character (the raw name goes on the wire, so it is never rewritten); an input or output
/// schema over the size or depth cap, not `"type": "object"`, or with a property name or value
/// containing a disallowed character. Otherwise returns the tool with title, description,
/// annotation title, schema annotations and search hint cleaned and capped, `_meta` dropped if
/// oversized, and one note per change. Annotation hints are kept unchanged.
pub fn sanitize_tool(
    mut tool: Tool,
    limits: &MetadataLimits,
) -> Result<(Tool, Vec<String>), Rejected> {
    decodable(&tool.meta)?;
    check_name("name", &tool.name, limits.max_name_chars)?;
    let mut notes = Vec::new();
    tool.input_schema = sanitize_schema("input schema", tool.input_schema, limits, &mut notes)?;
    if let Some(schema) = tool.output_schema.take() {
        tool.output_schema = Some(sanitize_schema(
            "output schema",
            schema,
            limits,
            &mut notes,
        )?);
    }
    tool.title = clean_opt(
        &mut notes,
        "title",
        tool.title.take(),
        limits.max_title_chars,
        Mode::Line,
    );
    if let Some(d) = &tool.description
        && let Some(c) = clean_field(
            &mut notes,
            "description",
            d,
            limits.max_description_chars,
            Mode::Text,
        )
    {
        tool.description = Some(Cow::Owned(c));
    }
    if let Some(a) = tool.annotations.as_mut() {
        a.title = clean_opt(
            &mut notes,
            "annotations.title",
            a.title.take(),
            limits.max_title_chars,
            Mode::Line,
        );
    }
    tool.meta = sanitize_meta(tool.meta.take(), limits, &mut notes);
    Ok((tool, notes))
}

/// Cleans and bounds a listed prompt. `Err` (hide the prompt) when its name or an argument name
/// is empty, too long or contains a disallowed character (both go on the wire in
/// `prompts/get`), or when it declares more than [`MetadataLimits::max_prompt_arguments`]
/// arguments. Title, description and argument titles/descriptions are cleaned and capped.
pub fn sanitize_prompt(
    mut prompt: Prompt,
    limits: &MetadataLimits,
) -> Result<(Prompt, Vec<String>), Rejected> {
    decodable(&prompt.meta)?;
    check_name("name", &prompt.name, limits.max_name_chars)?;
    if let Some(args) = &prompt.arguments {
        if args.len() > limits.max_prompt_arguments {
            return Err(Rejected::TooManyArguments {
                declared: args.len(),
                limit: limits.max_prompt_arguments,
            });
        }
        for (i, arg) in args.iter().enumerate() {
            check_name(
                &format!("argument {i} name"),
                &arg.name,
                limits.max_name_chars,
            )?;
            if let Some(first) = args[..i].iter().position(|a| a.name == arg.name) {
                // `prompts/get` passes arguments by name: which one a value fills is unknown.
                return Err(Rejected::Identifier(format!(
                    "argument {i} name \"{}\" is also the name of argument {first}",
                    arg.name
                )));
            }
        }
    }
    let mut notes = Vec::new();
    prompt.title = clean_opt(
        &mut notes,
        "title",
        prompt.title.take(),
        limits.max_title_chars,
        Mode::Line,
    );
    prompt.description = clean_opt(
        &mut notes,
        "description",
        prompt.description.take(),
        limits.max_description_chars,
        Mode::Text,
    );
    for (i, arg) in prompt.arguments.iter_mut().flatten().enumerate() {
        arg.title = clean_opt(
            &mut notes,
            &format!("argument {i} title"),
            arg.title.take(),
            limits.max_title_chars,
            Mode::Line,
        );
        arg.description = clean_opt(
            &mut notes,
            &format!("argument {i} description"),
            arg.description.take(),
            limits.max_description_chars,
            Mode::Text,
        );
    }
    prompt.meta = sanitize_meta(prompt.meta.take(), limits, &mut notes);
    Ok((prompt, notes))
}

/// Cleans the display fields that resources and resource templates share (name, title,
/// description, MIME type, annotations, `_meta`) in place; evaluates to the notes.
macro_rules! clean_resource_like {
    ($item:ident, $limits:ident) => {{
        let mut notes = Vec::new();
        if let Some(c) = clean_field(
            &mut notes,
            "name",
            &$item.name,
            $limits.max_name_chars,
            Mode::Line,
        ) {
            $item.name = c;
        }
        $item.title = clean_opt(
            &mut notes,
            "title",
            $item.title.take(),
            $limits.max_title_chars,
            Mode::Line,
        );
        $item.description = clean_opt(
            &mut notes,
            "description",
            $item.description.take(),
            $limits.max_description_chars,
            Mode::Text,
        );
        $item.mime_type = clean_opt(
            &mut notes,
            "mimeType",
            $item.mime_type.take(),
            $limits.max_mime_type_chars,
            Mode::Line,
        );
        sanitize_annotations(&mut $item.annotations, &mut notes);
        $item.meta = sanitize_meta($item.meta.take(), $limits, &mut notes);
        notes
    }};
}

/// Cleans and bounds a listed resource. `Err` (hide it) when its URI is empty, longer than
/// [`MetadataLimits::max_uri_chars`] or contains a disallowed character (the URI is what
/// `resources/read` sends). The name (a display name here; the URI identifies the resource),
/// title, description and MIME type are cleaned and capped; annotations are validated
/// (priority within 0..=1, `lastModified` a timestamp, audience without duplicates).
pub fn sanitize_resource(
    mut resource: Resource,
    limits: &MetadataLimits,
) -> Result<(Resource, Vec<String>), Rejected> {
    decodable(&resource.meta)?;
    check_uri("uri", &resource.uri, limits.max_uri_chars)?;
    let notes = clean_resource_like!(resource, limits);
    Ok((resource, notes))
}

/// Cleans and bounds a listed resource template, as [`sanitize_resource`]; the URI template is
/// held to the URI rules.
pub fn sanitize_template(
    mut template: ResourceTemplate,
    limits: &MetadataLimits,
) -> Result<(ResourceTemplate, Vec<String>), Rejected> {
    decodable(&template.meta)?;
    check_uri("uri template", &template.uri_template, limits.max_uri_chars)?;
    if crate::uri_template::Template::parse(&template.uri_template).is_none() {
        // No URI could be matched to it: a read or a completion of it would reach no server.
        return Err(Rejected::Identifier(
            "uri template is not a well-formed RFC 6570 template (a `{` left open, a `}` \
             without its `{`, a `{` inside an expression, or an empty `{}`)"
                .into(),
        ));
    }
    let notes = clean_resource_like!(template, limits);
    Ok((template, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sanitize::Rejected;
    use crate::sanitize::text::find_disallowed;
    use rmcp::model::{JsonObject, PromptArgument, ToolAnnotations};
    use serde_json::json;
    use std::sync::Arc;

    fn limits() -> MetadataLimits {
        MetadataLimits::default()
    }

    fn object_schema() -> Arc<JsonObject> {
        schema(json!({"type": "object", "properties": {"x": {"type": "string"}}}))
    }

    fn schema(v: Value) -> Arc<JsonObject> {
        match v {
            Value::Object(m) => Arc::new(m),
            _ => panic!("test schema must be an object"),
        }
    }

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_string(), "does things".to_string(), object_schema())
    }

    #[test]
    fn clean_tool_passes_without_notes() {
        let (t, notes) = sanitize_tool(tool("echo"), &limits()).expect("accepted");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(t, tool("echo"));
    }

    #[test]
    fn bad_names_reject_the_tool() {
        let l = limits();
        for name in ["", "ec\u{0}ho", &"a".repeat(129)] {
            assert!(
                matches!(sanitize_tool(tool(name), &l), Err(Rejected::Identifier(_))),
                "{name:?}"
            );
        }
        assert!(
            sanitize_tool(tool(""), &l)
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(
            sanitize_tool(tool("   "), &l)
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(
            sanitize_tool(tool(&"a".repeat(129)), &l)
                .unwrap_err()
                .to_string()
                .contains("129 characters")
        );
        assert!(sanitize_tool(tool(&"a".repeat(128)), &l).is_ok());
        let err = sanitize_tool(tool("ec\u{0}ho"), &l)
            .unwrap_err()
            .to_string();
        assert!(err.contains("control character (U+0000)"), "{err}");
        let err = sanitize_tool(tool("echo\u{200D}"), &l)
            .unwrap_err()
            .to_string();
        assert!(err.contains("U+200D"), "{err}");
        assert!(sanitize_tool(tool("a\nb"), &l).is_err());
        // Spaces, dots, slashes and look-alikes are the naming layer's job, not rejections.
        assert!(sanitize_tool(tool("do thing/now.v2"), &l).is_ok());
        assert!(sanitize_tool(tool("\u{0435}cho"), &l).is_ok());
    }

    #[test]
    fn text_fields_are_cleaned_with_notes() {
        let mut t = tool("echo");
        t.title = Some("Echo\u{200B}\nTool".into());
        t.description = Some(format!("Hi\u{202E}{}", "d".repeat(5000)).into());
        t.annotations = Some(
            ToolAnnotations::with_title("Ti\u{1b}tle")
                .read_only(true)
                .destructive(false),
        );
        let (t, notes) = sanitize_tool(t, &limits()).expect("accepted");
        assert_eq!(t.title.as_deref(), Some("Echo Tool"));
        let d = t.description.as_deref().unwrap_or_default();
        assert_eq!(d.chars().count(), 2048);
        assert!(d.starts_with("Hid") && d.ends_with('…'));
        let a = t.annotations.expect("kept");
        assert_eq!(a.title.as_deref(), Some("Title"));
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.destructive_hint, Some(false));
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes.iter().any(|n| n.starts_with("description:")
            && n.contains("U+202E")
            && n.contains("truncated to 2048")));
        assert!(notes.iter().all(|n| find_disallowed(n, false).is_none()));
    }

    #[test]
    fn deep_schema_rejects_the_tool() {
        let mut v = json!({"type": "string"});
        for _ in 0..40 {
            v = json!({"type": "object", "properties": {"a": v}});
        }
        let mut t = tool("deep");
        t.input_schema = schema(v);
        let err = sanitize_tool(t, &limits()).unwrap_err().to_string();
        assert!(err.contains("deeper than 32"), "{err}");
    }

    #[test]
    fn large_schema_rejects_the_tool() {
        let l = MetadataLimits {
            max_schema_bytes: 100,
            ..limits()
        };
        let mut t = tool("big");
        t.input_schema = schema(
            json!({"type": "object", "properties": {"x": {"type": "string", "enum": ["a".repeat(100)]}}}),
        );
        assert!(
            sanitize_tool(t, &l)
                .unwrap_err()
                .to_string()
                .contains("larger than 100")
        );
        let mut t = tool("big_out");
        t.output_schema = Some(schema(
            json!({"type": "object", "description": "a".repeat(100)}),
        ));
        assert!(
            sanitize_tool(t, &l)
                .unwrap_err()
                .to_string()
                .starts_with("output schema")
        );
    }

    #[test]
    fn schema_must_be_an_object_schema() {
        let l = limits();
        let mut untyped = tool("x");
        untyped.input_schema = schema(json!({}));
        assert!(
            sanitize_tool(untyped, &l).is_ok(),
            "`{{}}` (no type) is accepted"
        );
        for bad in [json!({"type": "string"}), json!({"type": ["object"]})] {
            let mut t = tool("x");
            t.input_schema = schema(bad);
            assert!(matches!(
                sanitize_tool(t.clone(), &l),
                Err(Rejected::Schema(_))
            ));
            assert!(
                sanitize_tool(t, &l)
                    .unwrap_err()
                    .to_string()
                    .contains("object")
            );
        }
        let mut t = tool("x");
        t.output_schema = Some(schema(json!({"type": "array"})));
        assert!(sanitize_tool(t, &l).is_err());
    }

    #[test]
    fn schema_annotations_are_cleaned_and_identifiers_checked() {
        let l = limits();
        let mut t = tool("x");
        t.input_schema = schema(json!({
            "type": "object",
            "description": "top\u{202E}",
            "properties": {
                "description": {"type": "string", "title": "T\nitle", "default": "a\nb"},
                "title": {"type": "string", "enum": ["x", "y"]},
            },
            "$defs": {"d": {"description": "z".repeat(3000)}}
        }));
        let (t, notes) = sanitize_tool(t, &l).expect("accepted");
        let s = &t.input_schema;
        assert_eq!(s["description"], "top");
        assert_eq!(s["properties"]["description"]["title"], "T itle");
        assert_eq!(s["properties"]["description"]["default"], "a\nb");
        assert_eq!(
            s["$defs"]["d"]["description"]
                .as_str()
                .map(|d| d.chars().count()),
            Some(2048)
        );
        assert_eq!(
            notes,
            vec!["input schema: cleaned 3 description/title annotation(s)"]
        );

        for bad in [
            json!({"type": "object", "properties": {"pa\u{202E}th": {"type": "string"}}}),
            json!({"type": "object", "properties": {"p": {"enum": ["ok", "e\u{1b}[2J"]}}}),
            json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "\u{200B}"}}}),
            json!({"type": "object", "required": ["a\u{0}"]}),
        ] {
            let mut t = tool("x");
            t.input_schema = schema(bad);
            assert!(matches!(
                sanitize_tool(t.clone(), &l),
                Err(Rejected::Schema(_))
            ));
            let err = sanitize_tool(t, &l).unwrap_err().to_string();
            assert!(err.starts_with("input schema:"), "{err}");
        }
    }

    #[test]
    fn a_clean_schema_is_kept_shared_and_a_shared_one_is_not_changed_in_place() {
        let l = limits();
        let clean = schema(json!({
            "type": "object",
            "title": "Plain title",
            "description": "Line one.\n\tLine two.",
            "properties": {"p": {"type": "string", "description": "A path.", "enum": ["a  b"]}},
        }));
        let mut t = tool("x");
        t.input_schema = clean.clone();
        let (t, notes) = sanitize_tool(t, &l).expect("accepted");
        assert!(
            Arc::ptr_eq(&t.input_schema, &clean),
            "a clean schema is not copied"
        );
        assert!(notes.is_empty());

        let dirty = schema(json!({
            "type": "object",
            "properties": {"p": {"type": "string", "title": "  spaced  "}},
        }));
        let mut t = tool("x");
        t.input_schema = dirty.clone();
        let (t, notes) = sanitize_tool(t, &l).expect("accepted");
        assert_eq!(t.input_schema["properties"]["p"]["title"], "spaced");
        assert_eq!(
            dirty["properties"]["p"]["title"], "  spaced  ",
            "the listing's copy"
        );
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn oversized_meta_is_dropped_and_search_hint_flattened() {
        let l = limits();
        let mut t = tool("x");
        let mut meta = MetaObject::new();
        meta.0.insert("blob".into(), json!("b".repeat(20_000)));
        t.meta = Some(meta);
        let (t, notes) = sanitize_tool(t, &l).expect("accepted");
        assert!(t.meta.is_none());
        assert_eq!(notes, vec!["_meta: dropped (larger than 16384 bytes)"]);

        let mut t = tool("x");
        let mut meta = MetaObject::new();
        meta.0.insert(
            "anthropic/searchHint".into(),
            json!(format!("find\nfiles\u{202E} {}", "w ".repeat(300))),
        );
        meta.0.insert("searchHint".into(), json!(42));
        meta.0.insert("other".into(), json!("kept\nas is"));
        t.meta = Some(meta);
        let (t, notes) = sanitize_tool(t, &l).expect("accepted");
        let meta = t.meta.expect("kept");
        let hint = meta.0["anthropic/searchHint"].as_str().unwrap_or_default();
        assert!(hint.starts_with("find files w w"));
        assert!(hint.chars().count() <= 256 && !hint.contains('\n'));
        assert!(!meta.0.contains_key("searchHint"));
        assert_eq!(meta.0["other"], "kept\nas is");
        assert_eq!(notes.len(), 2, "{notes:?}");
    }

    // --- prompts and resources ----------------------------------------------------------------

    #[test]
    fn prompts_are_cleaned_or_rejected() {
        let l = limits();
        let mut p = Prompt::new(
            "review",
            Some("Re\u{200B}view\u{1b}"),
            Some(vec![
                PromptArgument::new("code")
                    .with_title("Co\nde")
                    .with_description("the \u{202E}code"),
            ]),
        );
        p.title = Some("T".repeat(300));
        let (p, notes) = sanitize_prompt(p, &l).expect("accepted");
        assert_eq!(p.description.as_deref(), Some("Review"));
        assert_eq!(p.title.as_ref().map(|t| t.chars().count()), Some(256));
        let arg = &p.arguments.as_ref().expect("kept")[0];
        assert_eq!(arg.title.as_deref(), Some("Co de"));
        assert_eq!(arg.description.as_deref(), Some("the code"));
        assert_eq!(notes.len(), 4, "{notes:?}");

        assert!(sanitize_prompt(Prompt::new("", None::<String>, None), &l).is_err());
        let bad_arg = Prompt::new(
            "p",
            None::<String>,
            Some(vec![PromptArgument::new("a\u{202E}")]),
        );
        assert!(
            sanitize_prompt(bad_arg, &l)
                .unwrap_err()
                .to_string()
                .starts_with("argument 0 name")
        );
        let twice = Prompt::new(
            "p",
            None::<String>,
            Some(vec![
                PromptArgument::new("file"),
                PromptArgument::new("mode"),
                PromptArgument::new("file"),
            ]),
        );
        assert_eq!(
            sanitize_prompt(twice, &l).unwrap_err().to_string(),
            "argument 2 name \"file\" is also the name of argument 0"
        );
        let many = Prompt::new(
            "p",
            None::<String>,
            Some(
                (0..65)
                    .map(|i| PromptArgument::new(format!("a{i}")))
                    .collect(),
            ),
        );
        assert_eq!(
            sanitize_prompt(many.clone(), &l).unwrap_err(),
            Rejected::TooManyArguments {
                declared: 65,
                limit: 64
            }
        );
        assert!(
            sanitize_prompt(many, &l)
                .unwrap_err()
                .to_string()
                .contains("65 arguments")
        );
    }

    #[test]
    fn resources_are_cleaned_or_rejected() {
        let l = limits();
        let r = Resource::new("file:///a.txt", "a\u{202E}.txt\n")
            .with_title("Ti\u{200D}tle")
            .with_description("desc\u{0}")
            .with_mime_type("text/plain\r\n")
            .with_annotations({
                let mut a = Annotations::default();
                a.audience = Some(vec![rmcp::model::Role::User, rmcp::model::Role::User]);
                a.priority = Some(7.0);
                a.last_modified = Some("2025-01-01T00:00:00Z\u{1b}".into());
                a
            });
        let (r, notes) = sanitize_resource(r, &l).expect("accepted");
        assert_eq!(r.uri, "file:///a.txt");
        assert_eq!(r.name, "a.txt");
        assert_eq!(r.title.as_deref(), Some("Title"));
        assert_eq!(r.description.as_deref(), Some("desc"));
        assert_eq!(r.mime_type.as_deref(), Some("text/plain"));
        let a = r.annotations.expect("kept");
        assert_eq!(a.audience.map(|v| v.len()), Some(1));
        assert_eq!(a.priority, None);
        assert_eq!(a.last_modified, None);
        assert_eq!(notes.len(), 7, "{notes:?}");

        for uri in [
            String::new(),
            format!("file:///{}", "a".repeat(2100)),
            "file:///a\u{202E}txt".to_string(),
            "file:///a\nb".to_string(),
        ] {
            assert!(sanitize_resource(Resource::new(uri, "n"), &l).is_err());
        }
    }

    #[test]
    fn templates_are_cleaned_or_rejected() {
        let l = limits();
        let t =
            ResourceTemplate::new("file:///{path}", "files\u{2066}").with_description("d\u{E0041}");
        let (t, notes) = sanitize_template(t, &l).expect("accepted");
        assert_eq!(t.name, "files");
        assert_eq!(t.description.as_deref(), Some("d"));
        assert_eq!(notes.len(), 2);
        for malformed in ["file:///{path", "file:///{}", "a}b", "a{b{c}}"] {
            let err = sanitize_template(ResourceTemplate::new(malformed, "n"), &l)
                .expect_err(malformed)
                .to_string();
            assert!(err.contains("not a well-formed RFC 6570 template"), "{err}");
        }
        let bad = ResourceTemplate::new("file:///{pa\u{200B}th}", "n");
        assert!(
            sanitize_template(bad, &l)
                .unwrap_err()
                .to_string()
                .starts_with("uri template")
        );
    }
}

//! Untrusted metadata (R11). Everything a server lists — names, titles, descriptions, schemas,
//! URIs, `_meta`, instructions — is written by the server and is untrusted.
//!
//! Invariant: **nothing from a server reaches the model uncleaned and unbounded; a field that
//! cannot be made safe hides its entry with a stated reason, it is never half-shown.**
//!
//! - Free text (titles, descriptions, search hints, instructions, schema `description`/`title`)
//!   is cleaned — control, bidi, zero-width/invisible, private-use and unassigned characters are
//!   removed — and capped at a character limit, ending in `…` when cut ([`clean_text`],
//!   [`clean_line`]). Every change is reported as a note.
//! - Identifiers that go on the wire (tool and prompt names, prompt argument names, resource URIs
//!   and URI templates, schema property names, schema values such as `enum` or `pattern`) are
//!   never rewritten: rewriting would make the model call something other than what the server
//!   listed. If one is empty, too long or contains a character that cleaning would remove, the
//!   whole entry is rejected with a reason.
//! - Schemas over the size or depth cap, or whose root is not `"type": "object"`, reject the
//!   tool: a schema that cannot be shown whole must not be half-shown.
//! - `_meta` over its size cap is dropped with a note. It is kept for the embedder; of its values
//!   only the search hint (`searchHint`, `<vendor>/searchHint`) is meant for the model, so only
//!   it is cleaned (flattened to one line and capped).
//! - Tool annotations (`readOnlyHint`, ...) are kept unchanged: they are hints that feed policy
//!   decisions (R13), never grants. Only their `title` is text and is cleaned.
//!
//! Notes and rejection reasons never quote server text raw; where they name a character they
//! give its code point. Use [`escape_for_display`] to show a raw (possibly hostile) name.

use std::borrow::Cow;
use std::io;
use std::sync::Arc;

use rmcp::model::{Annotations, JsonObject, MetaObject, Prompt, Resource, ResourceTemplate, Tool};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use unicode_general_category::{GeneralCategory, get_general_category};

/// Caps on server-provided metadata. Every cap has a documented default and can be configured
/// (camelCase keys; unknown keys are rejected; missing keys take the default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MetadataLimits {
    /// Longest tool, prompt or prompt-argument name, in characters (also the cap on a resource's
    /// display name). Default 128. A longer wire name rejects its entry.
    pub max_name_chars: usize,
    /// Longest title (entry title, annotation title, schema `title`), in characters. Default 256.
    pub max_title_chars: usize,
    /// Longest description (also schema `description`), in characters. Default 2048, as Claude
    /// Code caps tool descriptions.
    pub max_description_chars: usize,
    /// Longest server instructions (from `initialize`), in characters. Default 8192.
    pub max_instructions_chars: usize,
    /// Largest input or output schema, serialized as compact JSON, in bytes. Default 64 KiB.
    /// A larger schema rejects its tool.
    pub max_schema_bytes: usize,
    /// Deepest schema nesting (the root object is level 1; each nested object or array adds
    /// one). Default 32. A deeper schema rejects its tool.
    pub max_schema_depth: usize,
    /// Longest resource URI or URI template, in characters. Default 2048. A longer one rejects
    /// its entry.
    pub max_uri_chars: usize,
    /// Largest `_meta`, serialized as compact JSON, in bytes. Default 16 KiB. A larger `_meta`
    /// is dropped (the entry stays).
    pub max_meta_bytes: usize,
    /// Longest search hint in `_meta`, in characters, after flattening to one line. Default 256.
    pub max_search_hint_chars: usize,
    /// Longest MIME type, in characters. Default 255 (RFC 6838 allows 127 + `/` + 127).
    pub max_mime_type_chars: usize,
    /// Most arguments a prompt may declare. Default 64. More rejects the prompt (an argument,
    /// possibly required, cannot be dropped silently).
    pub max_prompt_arguments: usize,
}

impl Default for MetadataLimits {
    fn default() -> Self {
        Self {
            max_name_chars: 128,
            max_title_chars: 256,
            max_description_chars: 2048,
            max_instructions_chars: 8192,
            max_schema_bytes: 64 * 1024,
            max_schema_depth: 32,
            max_uri_chars: 2048,
            max_meta_bytes: 16 * 1024,
            max_search_hint_chars: 256,
            max_mime_type_chars: 255,
            max_prompt_arguments: 64,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Characters

/// Why `c` may not reach the model, or `None` if it may. `\n` and `\t` are reported as control
/// characters: callers that keep them handle them first.
fn disallowed(c: char) -> Option<&'static str> {
    match c {
        // Printable ASCII, nearly all of real metadata, without the Unicode table lookup.
        ' '..='~' => None,
        '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{061C}' => Some("bidi control"),
        '\u{200B}'..='\u{200D}'
        | '\u{2060}'..='\u{2065}'
        | '\u{FEFF}'
        | '\u{180E}'
        | '\u{00AD}'
        | '\u{034F}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{17B4}'
        | '\u{17B5}'
        | '\u{3164}'
        | '\u{FFA0}' => Some("invisible character"),
        '\u{E0000}'..='\u{E007F}' => Some("tag character"),
        _ => match get_general_category(c) {
            GeneralCategory::Control => Some("control character"),
            GeneralCategory::Format => Some("invisible formatting character"),
            GeneralCategory::PrivateUse => Some("private-use character"),
            GeneralCategory::Surrogate => Some("surrogate"),
            GeneralCategory::Unassigned => Some("unassigned code point or noncharacter"),
            GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => {
                Some("line separator")
            }
            _ => None,
        },
    }
}

/// The first character of `s` that [`disallowed`] reports, with its position (in characters).
/// With `allow_breaks`, `\n`, `\r` and `\t` are allowed.
fn find_disallowed(s: &str, allow_breaks: bool) -> Option<(usize, char, &'static str)> {
    s.chars().enumerate().find_map(|(i, c)| {
        if allow_breaks && matches!(c, '\n' | '\r' | '\t') {
            return None;
        }
        disallowed(c).map(|why| (i, c, why))
    })
}

fn code_point(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Multi-line text: `\n` and `\t` kept, other line breaks become `\n`.
    Text,
    /// One line: all whitespace runs become one space, trimmed.
    Line,
}

struct Cleaned {
    text: String,
    changed: bool,
    /// Characters removed (not counting whitespace normalisation), in the kept part.
    removed: usize,
    first_removed: Option<(char, &'static str)>,
    truncated: bool,
}

fn clean(s: &str, max_chars: usize, mode: Mode) -> Cleaned {
    let line = mode == Mode::Line;
    let break_char = if line { ' ' } else { '\n' };
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)));
    let mut kept = 0usize;
    let mut truncated = false;
    let mut pending_space = false;
    let mut removed = 0usize;
    let mut first_removed = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let mapped = match c {
            '\t' => {
                if line {
                    ' '
                } else {
                    '\t'
                }
            }
            '\n' | '\u{0085}' | '\u{2028}' | '\u{2029}' => break_char,
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    continue;
                }
                break_char
            }
            c if line && c.is_whitespace() => ' ',
            c => match disallowed(c) {
                Some(why) => {
                    removed += 1;
                    first_removed.get_or_insert((c, why));
                    continue;
                }
                None => c,
            },
        };
        if line {
            if mapped == ' ' {
                pending_space = kept > 0;
                continue;
            }
            if pending_space {
                pending_space = false;
                if kept == max_chars {
                    truncated = true;
                    break;
                }
                out.push(' ');
                kept += 1;
            }
        }
        if kept == max_chars {
            truncated = true;
            break;
        }
        out.push(mapped);
        kept += 1;
    }
    if truncated {
        // Make room for the ellipsis so that the result stays within `max_chars`.
        out.pop();
        while line && out.ends_with(' ') {
            out.pop();
        }
        if max_chars > 0 {
            out.push('…');
        }
    }
    let changed = out != s;
    Cleaned {
        text: out,
        changed,
        removed,
        first_removed,
        truncated,
    }
}

/// Whether [`clean`] would return `s` unchanged, decided without building the cleaned text,
/// for the common case: printable ASCII (and `\n`, `\t` in text), no more bytes than
/// `max_chars`, and in one-line mode no leading, trailing or doubled space. `false` means
/// "ask `clean`", not "changed".
fn unchanged_by_clean(s: &str, max_chars: usize, mode: Mode) -> bool {
    if s.len() > max_chars {
        return false;
    }
    match mode {
        Mode::Text => s.bytes().all(|b| matches!(b, b' '..=b'~' | b'\n' | b'\t')),
        Mode::Line => {
            s.bytes().all(|b| matches!(b, b' '..=b'~'))
                && !s.starts_with(' ')
                && !s.ends_with(' ')
                && !s.contains("  ")
        }
    }
}

/// Cleans multi-line text (descriptions): removes control characters except `\n` and `\t`
/// (`\r\n`, lone `\r`, U+0085, U+2028 and U+2029 become `\n`), bidi controls, zero-width and
/// other invisible characters, tag characters, private-use, unassigned code points and
/// noncharacters; variation selectors and ordinary combining marks are kept. The result has at
/// most `max_chars` characters; when cut, it ends in `…`. Returns the text and whether it changed.
pub fn clean_text(s: &str, max_chars: usize) -> (String, bool) {
    let c = clean(s, max_chars, Mode::Text);
    (c.text, c.changed)
}

/// Like [`clean_text`], but for one-line fields (names, titles, search hints): every run of
/// whitespace (including `\r`, `\n`, `\t`) becomes one space, and leading and trailing
/// whitespace is removed.
pub fn clean_line(s: &str, max_chars: usize) -> (String, bool) {
    let c = clean(s, max_chars, Mode::Line);
    (c.text, c.changed)
}

/// Server instructions (from `initialize`), cleaned as text and capped at
/// [`MetadataLimits::max_instructions_chars`].
pub fn clean_instructions(s: &str, limits: &MetadataLimits) -> String {
    clean(s, limits.max_instructions_chars, Mode::Text).text
}

/// A raw, possibly hostile string made safe to show (in tables, logs, hidden-entry lists):
/// every character that cleaning would remove, and every whitespace other than a space, is
/// shown as `\u{XXXX}`; the result has at most `max_chars` characters, ending in `…` when cut.
pub fn escape_for_display(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut kept = 0usize;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = if c == ' ' || (disallowed(c).is_none() && !c.is_whitespace()) {
            c.to_string()
        } else {
            format!("\\u{{{:04X}}}", c as u32)
        };
        let n = piece.chars().count();
        // Unless this is the last piece, keep one character for the ellipsis.
        let room = if chars.peek().is_none() {
            max_chars.saturating_sub(kept)
        } else {
            max_chars.saturating_sub(1).saturating_sub(kept)
        };
        if n > room {
            if max_chars > 0 {
                out.push('…');
            }
            break;
        }
        out.push_str(&piece);
        kept += n;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Fields

/// Cleans one text field, recording a note when it changed; `Some(new)` when it changed.
fn clean_field(
    notes: &mut Vec<String>,
    field: &str,
    s: &str,
    max_chars: usize,
    mode: Mode,
) -> Option<String> {
    let c = clean(s, max_chars, mode);
    if !c.changed {
        return None;
    }
    let mut parts = Vec::new();
    if c.removed > 0 {
        let first = c
            .first_removed
            .map(|(ch, why)| format!(" (first: {why} {})", code_point(ch)))
            .unwrap_or_default();
        parts.push(format!(
            "removed {} disallowed character(s){first}",
            c.removed
        ));
    }
    if c.truncated {
        parts.push(format!("truncated to {max_chars} characters"));
    }
    if parts.is_empty() {
        parts.push(match mode {
            Mode::Line => "whitespace flattened to one line".to_string(),
            Mode::Text => "line breaks normalised".to_string(),
        });
    }
    notes.push(format!("{field}: {}", parts.join("; ")));
    Some(c.text)
}

fn clean_opt(
    notes: &mut Vec<String>,
    field: &str,
    value: Option<String>,
    max_chars: usize,
    mode: Mode,
) -> Option<String> {
    let value = value?;
    Some(clean_field(notes, field, &value, max_chars, mode).unwrap_or(value))
}

/// A wire identifier (name) is accepted as is or rejected; it is never rewritten.
fn check_name(what: &str, name: &str, max_chars: usize) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!("{what} is empty"));
    }
    let n = name.chars().count();
    if n > max_chars {
        return Err(format!(
            "{what} is {n} characters long, over the limit of {max_chars}; the raw name goes on the wire and cannot be shortened"
        ));
    }
    if let Some((i, c, why)) = find_disallowed(name, false) {
        return Err(format!(
            "{what} contains a {why} ({}) at character {i}; the raw name goes on the wire and cannot be rewritten",
            code_point(c)
        ));
    }
    Ok(())
}

fn check_uri(what: &str, uri: &str, max_chars: usize) -> Result<(), String> {
    if uri.trim().is_empty() {
        return Err(format!("{what} is empty"));
    }
    let n = uri.chars().count();
    if n > max_chars {
        return Err(format!(
            "{what} is {n} characters long, over the limit of {max_chars}"
        ));
    }
    if let Some((i, c, why)) = find_disallowed(uri, false) {
        return Err(format!(
            "{what} contains a {why} ({}) at character {i}; a URI is an identifier and cannot be rewritten",
            code_point(c)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Sizes and depth

/// An `io::Write` that only counts, and fails once past its budget.
struct Budget {
    used: usize,
    max: usize,
}

impl io::Write for Budget {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.used = self.used.saturating_add(buf.len());
        if self.used > self.max {
            return Err(io::Error::other("over budget"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `value`, serialized as compact JSON, fits in `max` bytes. Stops serializing at the cap.
fn fits<T: Serialize + ?Sized>(value: &T, max: usize) -> bool {
    let mut budget = Budget { used: 0, max };
    serde_json::to_writer(&mut budget, value).is_ok()
}

/// Whether nesting under `root` (level 1) goes deeper than `max`. Iterative: a hostile depth
/// cannot overflow the stack here.
fn deeper_than(root: &JsonObject, max: usize) -> bool {
    if max == 0 {
        return true;
    }
    let mut stack: Vec<(&Value, usize)> = root.values().map(|v| (v, 2)).collect();
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        if depth > max {
            return true;
        }
        stack.extend(children.map(|v| (v, depth + 1)));
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Schemas

#[derive(Clone, Copy)]
enum Ctx {
    /// A (sub)schema: keys are keywords.
    Schema,
    /// A map from names to subschemas (`properties`, `$defs`, ...).
    Names,
    /// Instance data (`enum`, `const`, `default`, `examples`): checked, never rewritten.
    Data,
}

struct SchemaWalk<'a> {
    what: &'a str,
    limits: &'a MetadataLimits,
    /// Annotations cleaned ([`SchemaWalk::object`]) or that would be ([`SchemaWalk::check`]).
    cleaned: usize,
}

/// What the value under a key is, for both passes of a [`SchemaWalk`].
enum Step {
    /// A string annotation, cleaned to at most this many characters in this mode.
    Annotation(usize, Mode),
    /// Walked in this context.
    Into(Ctx),
}

impl SchemaWalk<'_> {
    fn step(&self, key: &str, value: &Value, ctx: Ctx) -> Step {
        match ctx {
            Ctx::Data => Step::Into(Ctx::Data),
            Ctx::Names => Step::Into(Ctx::Schema),
            Ctx::Schema => match (key, value) {
                ("description" | "$comment", Value::String(_)) => {
                    Step::Annotation(self.limits.max_description_chars, Mode::Text)
                }
                ("title", Value::String(_)) => {
                    Step::Annotation(self.limits.max_title_chars, Mode::Line)
                }
                (
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas",
                    _,
                ) => Step::Into(Ctx::Names),
                ("default" | "const" | "enum" | "examples" | "example", _) => Step::Into(Ctx::Data),
                _ => Step::Into(Ctx::Schema),
            },
        }
    }

    fn check_key(&self, key: &str) -> Result<(), String> {
        match find_disallowed(key, false) {
            Some((_, c, why)) => Err(format!(
                "{}: a property name or keyword contains a {why} ({}); argument names go on the wire and cannot be rewritten",
                self.what,
                code_point(c)
            )),
            None => Ok(()),
        }
    }

    fn check_string(&self, s: &str) -> Result<(), String> {
        match find_disallowed(s, true) {
            Some((_, c, why)) => Err(format!(
                "{}: a string value contains a {why} ({}); schema values are not rewritten",
                self.what,
                code_point(c)
            )),
            None => Ok(()),
        }
    }

    /// The read-only pass: the errors the rewriting pass would return, and in `cleaned` the
    /// number of annotations it would change. Most schemas need no change, and this pass
    /// lets them be kept as they are, shared, instead of copied to be rewritten.
    fn check(&mut self, value: &Value, ctx: Ctx) -> Result<(), String> {
        match value {
            Value::Object(map) => self.check_object(map, ctx),
            Value::Array(items) => items.iter().try_for_each(|v| self.check(v, ctx)),
            Value::String(s) => self.check_string(s),
            _ => Ok(()),
        }
    }

    fn check_object(&mut self, map: &JsonObject, ctx: Ctx) -> Result<(), String> {
        for (key, value) in map {
            self.check_key(key)?;
            match self.step(key, value, ctx) {
                Step::Annotation(max, mode) => {
                    if let Value::String(s) = value
                        && !unchanged_by_clean(s, max, mode)
                        && clean(s, max, mode).changed
                    {
                        self.cleaned += 1;
                    }
                }
                Step::Into(ctx) => self.check(value, ctx)?,
            }
        }
        Ok(())
    }

    /// The rewriting pass: cleans annotations in place.
    fn value(&mut self, value: &mut Value, ctx: Ctx) -> Result<(), String> {
        match value {
            Value::Object(map) => self.object(map, ctx),
            Value::Array(items) => items.iter_mut().try_for_each(|v| self.value(v, ctx)),
            Value::String(s) => self.check_string(s),
            _ => Ok(()),
        }
    }

    fn object(&mut self, map: &mut JsonObject, ctx: Ctx) -> Result<(), String> {
        for (key, value) in map.iter_mut() {
            self.check_key(key)?;
            match self.step(key, value, ctx) {
                Step::Annotation(max, mode) => {
                    if let Value::String(s) = value {
                        self.annotation(s, max, mode);
                    }
                }
                Step::Into(ctx) => self.value(value, ctx)?,
            }
        }
        Ok(())
    }

    fn annotation(&mut self, s: &mut String, max_chars: usize, mode: Mode) {
        if unchanged_by_clean(s, max_chars, mode) {
            return;
        }
        let c = clean(s, max_chars, mode);
        if c.changed {
            *s = c.text;
            self.cleaned += 1;
        }
    }
}

fn sanitize_schema(
    what: &str,
    schema: Arc<JsonObject>,
    limits: &MetadataLimits,
    notes: &mut Vec<String>,
) -> Result<Arc<JsonObject>, String> {
    if deeper_than(&schema, limits.max_schema_depth) {
        return Err(format!(
            "{what} is nested deeper than {} levels",
            limits.max_schema_depth
        ));
    }
    if !fits(&*schema, limits.max_schema_bytes) {
        return Err(format!(
            "{what} is larger than {} bytes",
            limits.max_schema_bytes
        ));
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => {
            return Err(format!(
                "{what} is not of type \"object\" (MCP requires an object schema)"
            ));
        }
        // A schema without `type` accepts any object the server takes; many servers send `{}`
        // for "no arguments", and hiding their tools would help nobody.
        None => {}
    }
    let mut walk = SchemaWalk {
        what,
        limits,
        cleaned: 0,
    };
    walk.check_object(&schema, Ctx::Schema)?;
    if walk.cleaned == 0 {
        return Ok(schema);
    }
    let mut map = Arc::unwrap_or_clone(schema);
    walk.cleaned = 0;
    walk.object(&mut map, Ctx::Schema)?;
    if walk.cleaned > 0 {
        notes.push(format!(
            "{what}: cleaned {} description/title annotation(s)",
            walk.cleaned
        ));
    }
    Ok(Arc::new(map))
}

// ---------------------------------------------------------------------------------------------
// _meta and annotations

/// The `_meta` key the transport sets on a placeholder for a listed entry it could not decode
/// (nested past the decoder's depth limit, invalid UTF-8, a shape rmcp refuses); the value is
/// the reason. Same string as `mcp_harness_transport::inbound::UNDECODABLE_META_KEY`.
pub const UNDECODABLE_META_KEY: &str = "io.mcp-harness/undecodable";

/// `Err(reason)` for a placeholder of an entry that could not be decoded: it is hidden, with
/// the reason, and only it (the rest of the listing stands).
fn decodable(meta: &Option<MetaObject>) -> Result<(), String> {
    match meta.as_ref().and_then(|m| m.0.get(UNDECODABLE_META_KEY)) {
        Some(reason) => Err(reason
            .as_str()
            .map(|r| clean_line(r, 500).0)
            .unwrap_or_else(|| "the entry could not be decoded".to_string())),
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
) -> Result<(Tool, Vec<String>), String> {
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
) -> Result<(Prompt, Vec<String>), String> {
    decodable(&prompt.meta)?;
    check_name("name", &prompt.name, limits.max_name_chars)?;
    if let Some(args) = &prompt.arguments {
        if args.len() > limits.max_prompt_arguments {
            return Err(format!(
                "declares {} arguments, over the limit of {}",
                args.len(),
                limits.max_prompt_arguments
            ));
        }
        for (i, arg) in args.iter().enumerate() {
            check_name(
                &format!("argument {i} name"),
                &arg.name,
                limits.max_name_chars,
            )?;
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
) -> Result<(Resource, Vec<String>), String> {
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
) -> Result<(ResourceTemplate, Vec<String>), String> {
    decodable(&template.meta)?;
    check_uri("uri template", &template.uri_template, limits.max_uri_chars)?;
    let notes = clean_resource_like!(template, limits);
    Ok((template, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{PromptArgument, ToolAnnotations};
    use serde_json::json;

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

    // --- characters -------------------------------------------------------------------------

    #[test]
    fn plain_text_is_unchanged() {
        let s = "Reads a file.\n\tArgs: path (string). Ünïcödé ok, 日本語 ok, emoji ❤\u{FE0F}.";
        assert_eq!(clean_text(s, 1000), (s.to_string(), false));
    }

    #[test]
    fn controls_are_removed_but_newline_and_tab_kept() {
        let (t, changed) = clean_text("a\u{0}b\u{1b}[31mc\u{7f}d\u{9b}e\nf\tg", 100);
        assert!(changed);
        assert_eq!(t, "ab[31mcde\nf\tg");
    }

    #[test]
    fn carriage_returns_and_separators_become_newlines() {
        assert_eq!(
            clean_text("a\r\nb\rc\u{2028}d\u{85}e", 100).0,
            "a\nb\nc\nd\ne"
        );
    }

    #[test]
    fn bidi_controls_are_removed() {
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            let s = format!("safe{c}txt.exe");
            assert_eq!(
                clean_text(&s, 100),
                ("safetxt.exe".to_string(), true),
                "{c:?}"
            );
        }
    }

    #[test]
    fn invisible_characters_are_removed() {
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{2060}',
            '\u{2061}',
            '\u{2062}',
            '\u{2063}',
            '\u{2064}',
            '\u{FEFF}',
            '\u{180E}',
            '\u{00AD}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{3164}',
            '\u{115F}',
        ] {
            let s = format!("ab{c}cd");
            assert_eq!(clean_text(&s, 100).0, "abcd", "{:X}", c as u32);
        }
    }

    #[test]
    fn private_use_unassigned_and_noncharacters_are_removed() {
        for c in [
            '\u{E000}',
            '\u{F8FF}',
            '\u{F0000}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{FDD0}',
            '\u{10FFFF}',
            '\u{0378}',
        ] {
            let s = format!("x{c}y");
            assert_eq!(clean_text(&s, 100).0, "xy", "{:X}", c as u32);
        }
    }

    #[test]
    fn variation_selectors_and_combining_marks_are_kept() {
        let s = "\u{2764}\u{FE0F} e\u{0301} \u{845B}\u{E0100}";
        assert_eq!(clean_text(s, 100), (s.to_string(), false));
    }

    #[test]
    fn truncation_is_bounded_and_marked() {
        let (t, changed) = clean_text(&"é".repeat(10), 5);
        assert!(changed);
        assert_eq!(t, "éééé…");
        assert_eq!(t.chars().count(), 5);
        assert_eq!(clean_text("abcde", 5), ("abcde".to_string(), false));
        assert_eq!(clean_text("abcdef", 0).0, "");
        assert_eq!(clean_text("ab", 1).0, "…");
    }

    #[test]
    fn clean_line_flattens_whitespace() {
        assert_eq!(
            clean_line("  find\r\n\tfiles \u{2028} fast\n", 100),
            ("find files fast".to_string(), true)
        );
        assert_eq!(clean_line("one line", 100), ("one line".to_string(), false));
        let (t, _) = clean_line("abc def ghi", 5);
        assert_eq!(t, "abc…");
        assert!(t.chars().count() <= 5);
    }

    #[test]
    fn instructions_are_capped() {
        let l = MetadataLimits {
            max_instructions_chars: 10,
            ..limits()
        };
        let s = clean_instructions(&format!("use\u{202E} me {}", "x".repeat(100)), &l);
        assert_eq!(s.chars().count(), 10);
        assert!(s.ends_with('…') && !s.contains('\u{202E}'));
    }

    #[test]
    fn escape_for_display_shows_code_points_and_caps() {
        assert_eq!(
            escape_for_display("a\u{202E}b\nc", 100),
            "a\\u{202E}b\\u{000A}c"
        );
        assert_eq!(escape_for_display("abcdef", 4), "abc…");
        assert_eq!(escape_for_display("abcd", 4), "abcd");
        assert_eq!(escape_for_display("a\u{1b}", 5), "a…");
    }

    #[test]
    fn limits_deserialize_with_defaults_and_reject_unknown_keys() {
        let l: MetadataLimits =
            serde_json::from_value(json!({"maxDescriptionChars": 100})).expect("valid limits");
        assert_eq!(l.max_description_chars, 100);
        assert_eq!(l.max_name_chars, 128);
        assert!(serde_json::from_value::<MetadataLimits>(json!({"maxFoo": 1})).is_err());
    }

    // --- tools --------------------------------------------------------------------------------

    #[test]
    fn clean_tool_passes_without_notes() {
        let (t, notes) = sanitize_tool(tool("echo"), &limits()).expect("accepted");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(t, tool("echo"));
    }

    #[test]
    fn bad_names_reject_the_tool() {
        let l = limits();
        assert!(sanitize_tool(tool(""), &l).unwrap_err().contains("empty"));
        assert!(
            sanitize_tool(tool("   "), &l)
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            sanitize_tool(tool(&"a".repeat(129)), &l)
                .unwrap_err()
                .contains("129 characters")
        );
        assert!(sanitize_tool(tool(&"a".repeat(128)), &l).is_ok());
        let err = sanitize_tool(tool("ec\u{0}ho"), &l).unwrap_err();
        assert!(err.contains("control character (U+0000)"), "{err}");
        let err = sanitize_tool(tool("echo\u{200D}"), &l).unwrap_err();
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
        let err = sanitize_tool(t, &limits()).unwrap_err();
        assert!(err.contains("deeper than 32"), "{err}");
    }

    #[test]
    fn depth_counts_levels() {
        let m = schema(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert!(!deeper_than(&m, 3));
        assert!(deeper_than(&m, 2));
        assert!(!deeper_than(&schema(json!({"type": "object"})), 1));
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
                .contains("larger than 100")
        );
        let mut t = tool("big_out");
        t.output_schema = Some(schema(
            json!({"type": "object", "description": "a".repeat(100)}),
        ));
        assert!(
            sanitize_tool(t, &l)
                .unwrap_err()
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
            assert!(sanitize_tool(t, &l).unwrap_err().contains("object"));
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
            let err = sanitize_tool(t, &l).unwrap_err();
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
    fn the_quick_unchanged_test_agrees_with_clean() {
        let samples = [
            "",
            " ",
            "a",
            "a b",
            "a  b",
            " a",
            "a ",
            "a\tb",
            "a\nb",
            "a\r\nb",
            "tab\t",
            "x".repeat(40).leak(),
            "ünï",
            "a\u{7f}b",
            "a\u{0}",
            "~!@#$%^&*()_+{}|:\"<>?",
        ];
        for s in samples {
            for max in [0, 1, 3, 39, 40, 41, 1000] {
                for mode in [Mode::Text, Mode::Line] {
                    if unchanged_by_clean(s, max, mode) {
                        assert!(!clean(s, max, mode).changed, "{s:?} max {max}");
                    }
                }
            }
        }
        assert!(unchanged_by_clean(
            "Reads a file.\n\tArgs: path.",
            100,
            Mode::Text
        ));
        assert!(unchanged_by_clean("Read file", 100, Mode::Line));
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
                .starts_with("argument 0 name")
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
        assert!(
            sanitize_prompt(many, &l)
                .unwrap_err()
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
        let bad = ResourceTemplate::new("file:///{pa\u{200B}th}", "n");
        assert!(
            sanitize_template(bad, &l)
                .unwrap_err()
                .starts_with("uri template")
        );
    }
}

//! The lenient paths for a message that did not decode: a streaming scan of its top level for
//! `"id"` and `"method"` in bounded memory, and the salvage of a listing whose entries do not
//! all decode.
//!
//! Invariants: the scan holds at most `MAX_ID_BYTES` of an id and any depth of nesting without
//! recursion; only the top-level `"id"` counts, wherever in the object it stands; a salvaged
//! listing differs from the message only in its undecodable entries, each replaced by a
//! placeholder with the reason under [`UNDECODABLE_META_KEY`].

use std::ops::Range;

use rmcp::model::{
    Prompt, RequestId, Resource, ResourceTemplate, ServerJsonRpcMessage, ServerResult, Skill, Tool,
};
use serde_json::{Value, json};

use super::fault::UNDECODABLE_META_KEY;

/// Longest id text kept by the scan (longer ids are not recovered).
const MAX_ID_BYTES: usize = 256;

/// What the lenient top-level scan found in a message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// The top-level `id`, when it was recovered.
    pub id: Option<RequestId>,
    /// Whether the message has a top-level `method`.
    pub has_method: bool,
}

/// serde_json's reason without the position suffix's noise kept short.
pub(crate) fn error_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("recursion limit exceeded") {
        format!("it nests deeper than the decoder's limit of 128 levels ({text})")
    } else {
        text
    }
}

/// A streaming scan of one message's top level for `"id"` and `"method"`, in bounded memory:
/// bytes may be fed in pieces (an oversized line is scanned while it is discarded).
#[derive(Debug, Default)]
pub struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1: the next string is a key.
    expect_key: bool,
    /// The key being read (only its first bytes; `"id"` and `"method"` are short).
    key: Vec<u8>,
    key_is_string: bool,
    /// The top-level `"id"` value being captured.
    capture: Option<Vec<u8>>,
    found: Option<RequestId>,
    id_done: bool,
    has_method: bool,
}

impl IdScan {
    /// Scans the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if let Some(c) = self.capture.as_mut() {
                push_bounded(c, b);
            } else if self.key_is_string && !self.escaped && b != b'"' {
                push_bounded(&mut self.key, b);
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.key_is_string {
                    self.key_is_string = false;
                } else if self.depth == 1 && self.capture.is_some() {
                    self.finish_capture();
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key.clear();
                    self.key_is_string = true;
                } else if self.depth == 1
                    && let Some(c) = self.capture.as_mut()
                {
                    push_bounded(c, b);
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'{' {
                    self.expect_key = true;
                } else if self.depth == 1 && self.capture.is_some() {
                    // An object or array is no id.
                    self.capture = None;
                    self.id_done = true;
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_capture();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                if self.key == b"id" && !self.id_done {
                    self.capture = Some(Vec::new());
                } else if self.key == b"method" {
                    self.has_method = true;
                }
            }
            b',' if self.depth == 1 => {
                self.finish_capture();
                self.expect_key = true;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                if self.depth == 1
                    && let Some(c) = self.capture.as_mut()
                {
                    push_bounded(c, b);
                }
            }
        }
    }

    fn finish_capture(&mut self) {
        if let Some(raw) = self.capture.take() {
            self.id_done = true;
            self.found = serde_json::from_slice::<RequestId>(&raw).ok();
        }
    }

    /// What was found so far.
    pub fn scanned(&self) -> Scanned {
        Scanned {
            id: self.found.clone(),
            has_method: self.has_method,
        }
    }
}

fn push_bounded(buf: &mut Vec<u8>, b: u8) {
    if buf.len() <= MAX_ID_BYTES {
        buf.push(b);
    }
}

/// [`IdScan`] over a whole message.
pub(super) fn scan(bytes: &[u8]) -> Scanned {
    let mut s = IdScan::default();
    s.feed(bytes);
    s.scanned()
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Just past the string starting at `start` (a `"`).
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[at] == b'\\' {
            i = at + 2;
        } else {
            return Some(at + 1);
        }
    }
}

/// Just past the value starting at `start`; tolerant: it tracks strings and nesting only, with
/// no recursion (any depth).
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// The members of the object at `span`: raw key bytes and value spans.
fn members(b: &[u8], span: Range<usize>) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    let b = &b[..span.end];
    let mut i = skip_ws(b, span.start);
    if *b.get(i)? != b'{' {
        return None;
    }
    i += 1;
    let mut out = Vec::new();
    loop {
        i = skip_ws(b, i);
        match *b.get(i)? {
            b'}' => return Some(out),
            b',' => i += 1,
            b'"' => {
                let key_end = string_end(b, i)?;
                let key = i + 1..key_end - 1;
                i = skip_ws(b, key_end);
                if *b.get(i)? != b':' {
                    return None;
                }
                i = skip_ws(b, i + 1);
                let end = value_end(b, i)?;
                out.push((key, i..end));
                i = end;
            }
            _ => return None,
        }
    }
}

/// The element spans of the array at `span`.
fn elements(b: &[u8], span: Range<usize>) -> Option<Vec<Range<usize>>> {
    let mut out = Vec::new();
    each_element(b, span, |element| {
        out.push(element);
        true
    })?;
    Some(out)
}

/// Hands `each` the span of every element of the array at `span` until it returns false;
/// `None` when `span` is no array.
fn each_element(
    b: &[u8],
    span: Range<usize>,
    mut each: impl FnMut(Range<usize>) -> bool,
) -> Option<()> {
    let b = &b[..span.end];
    let mut i = skip_ws(b, span.start);
    if *b.get(i)? != b'[' {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        match *b.get(i)? {
            b']' => return Some(()),
            b',' => i += 1,
            _ => {
                let end = value_end(b, i)?;
                if !each(i..end) {
                    return Some(());
                }
                i = end;
            }
        }
    }
}

/// The most entries one listing page may hold: as many as a whole listing may (the catalog's
/// page limits).
pub(crate) const MAX_LISTING_ENTRIES: usize = 10_000;

/// Messages at least this long are checked with [`over_long_listing`] before they are decoded
/// (a shorter one cannot hold enough entries to cost much).
pub(crate) const LISTING_CHECK_FROM: usize = 64 * 1024;

/// The kind (`tools`, ...) of a listing answer in `b` whose page holds more than
/// [`MAX_LISTING_ENTRIES`] entries: refused before it is decoded, since each decoded entry
/// costs many times its bytes (a 35 MB page of a million tiny entries would take gigabytes).
/// Every listing member of the result is counted, whatever its place: the types rmcp decodes
/// a result into take the first kind whose fields are there and ignore the others, so a decoy
/// (`"tools": []` beside a million prompts) must not hide the long one.
pub(crate) fn over_long_listing(b: &[u8]) -> Option<&'static str> {
    let top = members(b, 0..b.len())?;
    let result = member(b, &top, "result")?.clone();
    let inner = members(b, result)?;
    LISTING_KEYS.into_iter().find(|key| {
        let Some(list) = member(b, &inner, key) else {
            return false;
        };
        let mut count = 0;
        let _ = each_element(b, list.clone(), |_| {
            count += 1;
            count <= MAX_LISTING_ENTRIES
        });
        count > MAX_LISTING_ENTRIES
    })
}

/// The members of a result that hold a listing page.
const LISTING_KEYS: [&str; 5] = [
    "tools",
    "prompts",
    "resources",
    "resourceTemplates",
    "skills",
];

fn member<'a>(
    b: &[u8],
    members: &'a [(Range<usize>, Range<usize>)],
    key: &str,
) -> Option<&'a Range<usize>> {
    members
        .iter()
        .find(|(k, _)| &b[k.clone()] == key.as_bytes())
        .map(|(_, v)| v)
}

/// A listing response with the entries that cannot be decoded replaced by placeholders (each
/// with its recovered name and the reason under [`UNDECODABLE_META_KEY`]); `None` when the
/// message is no listing, no entry is at fault, or it still does not decode.
pub(crate) fn salvage_listing(b: &[u8]) -> Option<ServerJsonRpcMessage> {
    let top = members(b, 0..b.len())?;
    let result = member(b, &top, "result")?.clone();
    let inner = members(b, result)?;
    let (key, list) = LISTING_KEYS
        .into_iter()
        .find_map(|k| member(b, &inner, k).map(|v| (k, v.clone())))?;
    let mut replaced: Vec<(Range<usize>, Vec<u8>)> = Vec::new();
    for (n, entry) in elements(b, list)?.into_iter().enumerate() {
        // Decoded at the depth the entry has in the message (message, result, list, entry).
        let mut nested = Vec::with_capacity(entry.len() + 6);
        nested.extend_from_slice(b"[[[");
        nested.extend_from_slice(&b[entry.clone()]);
        nested.extend_from_slice(b"]]]");
        let decoded = match key {
            "tools" => serde_json::from_slice::<Vec<Vec<Vec<Tool>>>>(&nested).map(drop),
            "prompts" => serde_json::from_slice::<Vec<Vec<Vec<Prompt>>>>(&nested).map(drop),
            "resources" => serde_json::from_slice::<Vec<Vec<Vec<Resource>>>>(&nested).map(drop),
            "skills" => serde_json::from_slice::<Vec<Vec<Vec<Skill>>>>(&nested).map(drop),
            _ => serde_json::from_slice::<Vec<Vec<Vec<ResourceTemplate>>>>(&nested).map(drop),
        };
        let Err(e) = decoded else { continue };
        let reason = match std::str::from_utf8(&b[entry.clone()]) {
            Err(u) => format!(
                "the entry is not valid UTF-8 (at byte {} of the entry)",
                u.valid_up_to()
            ),
            Ok(_) => format!("the entry cannot be decoded: {}", error_reason(&e)),
        };
        let fields = members(b, entry.clone()).unwrap_or_default();
        let text = |k: &str| {
            member(b, &fields, k)
                .and_then(|v| serde_json::from_slice::<String>(&b[v.clone()]).ok())
                .filter(|s| !s.is_empty())
        };
        let fallback = format!("undecodable-entry-{n}");
        let name = text("name").unwrap_or_else(|| fallback.clone());
        let meta = json!({ UNDECODABLE_META_KEY: reason });
        let placeholder: Value = match key {
            "tools" => {
                json!({"name": name, "inputSchema": {"type": "object"}, "_meta": meta})
            }
            "prompts" => json!({"name": name, "_meta": meta}),
            "skills" => json!({
                "uri": text("uri").unwrap_or_else(|| format!("undecodable:{fallback}")),
                "frontmatter": {"name": frontmatter_name(b, &fields).unwrap_or(name), "description": ""},
                "resources": "dynamic",
                "_meta": meta
            }),
            "resources" => json!({
                "uri": text("uri").unwrap_or_else(|| format!("undecodable:{fallback}")),
                "name": name, "_meta": meta
            }),
            _ => json!({
                "uriTemplate": text("uriTemplate").unwrap_or_else(|| format!("undecodable:{fallback}")),
                "name": name, "_meta": meta
            }),
        };
        replaced.push((entry, serde_json::to_vec(&placeholder).ok()?));
    }
    if replaced.is_empty() {
        return None;
    }
    let mut rebuilt = Vec::with_capacity(b.len());
    let mut at = 0;
    for (span, with) in &replaced {
        rebuilt.extend_from_slice(&b[at..span.start]);
        rebuilt.extend_from_slice(with);
        at = span.end;
    }
    rebuilt.extend_from_slice(&b[at..]);
    let message = serde_json::from_slice::<ServerJsonRpcMessage>(&rebuilt).ok()?;
    let listing = matches!(
        &message,
        ServerJsonRpcMessage::Response(r) if matches!(
            r.result,
            ServerResult::ListToolsResult(_)
                | ServerResult::ListPromptsResult(_)
                | ServerResult::ListResourcesResult(_)
                | ServerResult::ListResourceTemplatesResult(_)
                | ServerResult::ListSkillsResult(_)
        )
    );
    listing.then_some(message)
}

/// A skill entry's `frontmatter.name`, when it is a string.
fn frontmatter_name(b: &[u8], fields: &[(Range<usize>, Range<usize>)]) -> Option<String> {
    let frontmatter = members(b, member(b, fields, "frontmatter")?.clone())?;
    let name = member(b, &frontmatter, "name")?;
    serde_json::from_slice::<String>(&b[name.clone()])
        .ok()
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn deep(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn the_scan_finds_the_top_level_id_wherever_it_stands_and_skips_nested_ones() {
        let cases: [(&str, Option<RequestId>, bool); 6] = [
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
                Some(RequestId::Number(7)),
                false,
            ),
            (
                r#"{"result":{"id":1,"x":"\"id\":2"},"jsonrpc":"2.0","id":"a\"b"}"#,
                Some(RequestId::String("a\"b".into())),
                false,
            ),
            (r#"{"method":"x","id":3}"#, Some(RequestId::Number(3)), true),
            (r#"{"id":{"nested":1}}"#, None, false),
            (r#"[{"id":1}]"#, None, false),
            (
                r#"{"jsonrpc":"2.0" , "id" : 12 }"#,
                Some(RequestId::Number(12)),
                false,
            ),
        ];
        for (text, id, method) in cases {
            // Whole, and one byte at a time.
            assert_eq!(
                scan(text.as_bytes()),
                Scanned {
                    id: id.clone(),
                    has_method: method
                },
                "{text}"
            );
            let mut s = IdScan::default();
            for b in text.as_bytes() {
                s.feed(std::slice::from_ref(b));
            }
            assert_eq!(s.scanned().id, id, "{text}");
        }
        let huge = format!(r#"{{"result":{{"x":{}}},"id":9}}"#, deep(100_000));
        assert_eq!(scan(huge.as_bytes()).id, Some(RequestId::Number(9)));
    }
}

//! Result normalisation (R30): what a server answered to `tools/call`, checked and put in one
//! shape the host can hand to a model.
//!
//! Invariants:
//! - nothing the server sent is dropped: `content` and `structuredContent` are kept side by side
//!   (complaint 13), in the server's order, with the same number of blocks;
//! - a block that cannot be delivered is replaced, in place, by a text block that says what was
//!   wrong (and a [`ResultWarning`] is recorded): image or audio data that is not standard base64
//!   (RFC 4648, padded, no whitespace) or larger than [`ResultLimits::max_media_base64_chars`];
//!   a MIME type that is not `type/subtype`; an embedded blob that is not base64; a resource
//!   link whose URI is not an RFC 3986 URI (the model could not read it anyway). An embedded
//!   resource with a bad URI keeps its contents and only gets a warning;
//! - a result made only of images or audio stays that: it is never shown as empty;
//! - `structuredContent` is checked against the tool's `outputSchema` when both exist and the
//!   result is not an error; a mismatch (or a missing `structuredContent`) is a warning on the
//!   result, never a failure. The output schema is compiled like input schemas (no fetching,
//!   see [`super::validate`]);
//! - `isError: true` becomes [`NormalizedResult::is_error`], with [`NormalizedResult::error_text`]
//!   as the one message of the tool-error class (R32).

#![warn(missing_docs)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, MetaObject, ResourceContents, TextContent,
};
use serde_json::Value;

use super::validate::{self, MAX_MESSAGE_CHARS, truncate};

/// Tokens counted for each image, audio clip or embedded blob by [`estimate_tokens`]: about what
/// a model charges for a ~1 megapixel image.
pub(crate) const MEDIA_TOKENS: usize = 1_600;

/// Bounds applied while normalising.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResultLimits {
    /// Image, audio or blob data longer than this (base64 chars) is replaced by a note
    /// (default 20 MiB of base64, about 15 MiB of data).
    pub max_media_base64_chars: usize,
    /// At most this many `structuredContent` violations are listed in the warning (default 10).
    pub max_schema_errors: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_media_base64_chars: 20 * 1024 * 1024,
            max_schema_errors: validate::MAX_VIOLATIONS,
        }
    }
}

/// What kind of problem a [`ResultWarning`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// An image, audio or blob block was replaced by a note (bad data or MIME type).
    InvalidMedia,
    /// A resource link or embedded resource has a URI that is not an RFC 3986 URI.
    InvalidUri,
    /// `structuredContent` does not match the tool's `outputSchema`.
    StructuredContentMismatch,
    /// The tool has an `outputSchema` but the (non-error) result has no `structuredContent`.
    StructuredContentMissing,
    /// The tool's `outputSchema` could not be compiled, so `structuredContent` was not checked.
    OutputSchemaUnusable,
}

/// A problem found in a result that did not stop it from being delivered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResultWarning {
    /// What kind of problem.
    pub kind: WarningKind,
    /// Index of the content block concerned, if one is.
    pub block: Option<usize>,
    /// What was wrong, for a person or a model.
    pub message: String,
}

/// A checked tool result: content blocks and structured content side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedResult {
    /// The server's blocks in order; undeliverable ones replaced by a text note each.
    pub content: Vec<ContentBlock>,
    /// The server's `structuredContent`, kept even when it does not match the output schema.
    pub structured_content: Option<Value>,
    /// `isError` from the server (absent means false).
    pub is_error: bool,
    /// The result's `_meta`, untouched.
    pub meta: Option<MetaObject>,
    /// What was wrong but did not stop delivery.
    pub warnings: Vec<ResultWarning>,
}

impl NormalizedResult {
    /// The text blocks joined with newlines (other blocks are left out).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The message of a tool error: its text blocks joined; else its structured content as
    /// JSON; else a sentence saying the tool gave no message. Meaningful when
    /// [`is_error`](Self::is_error) is true.
    pub fn error_text(&self) -> String {
        let text = self.text();
        if !text.trim().is_empty() {
            return text;
        }
        match &self.structured_content {
            Some(value) => value.to_string(),
            None => "the tool reported an error without a message".to_string(),
        }
    }

    /// Whether the result carries no content block and no structured content.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.structured_content.is_none()
    }
}

/// Checks `result` and puts it in the [`NormalizedResult`] shape. Never fails: what cannot be
/// delivered becomes a note and a warning. `output_schema` is the tool's `outputSchema`, if any.
/// The output schema is compiled on each call (no fetching); `resultType` is not carried over:
/// normalise only a complete result (an `incomplete` one is the multi-round-trip path's).
pub(crate) fn normalize(
    result: CallToolResult,
    output_schema: Option<&JsonObject>,
    limits: ResultLimits,
) -> NormalizedResult {
    normalize_against(result, output_schema.map(Schema::Raw), limits)
}

/// [`normalize`] with the tool's `outputSchema` compiled beforehand (once per tool, not once
/// per result): the same checks and the same outcome.
pub(crate) fn normalize_with(
    result: CallToolResult,
    output_schema: Option<&OutputSchema>,
    limits: ResultLimits,
) -> NormalizedResult {
    normalize_against(result, output_schema.map(Schema::Compiled), limits)
}

/// A tool's `outputSchema`, compiled the way every schema in the call path is (no fetching,
/// formats as annotations; see [`super::validate`]) to check the `structuredContent` of its
/// results with [`normalize_with`].
pub(crate) struct OutputSchema {
    compiled: Result<jsonschema::Validator, String>,
}

impl OutputSchema {
    /// Compiles `schema` (a private copy; the caller's object is untouched). Never fails: a
    /// schema that cannot be compiled gives the [`WarningKind::OutputSchemaUnusable`] warning
    /// on every result that has `structuredContent`.
    pub(crate) fn new(schema: &JsonObject) -> Self {
        OutputSchema {
            compiled: validate::compile(schema).validator,
        }
    }

    /// Whether the schema compiled.
    pub(crate) fn is_usable(&self) -> bool {
        self.compiled.is_ok()
    }
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("usable", &self.is_usable())
            .finish()
    }
}

/// An output schema as given to [`normalize`] (compiled only if a result needs it) or to
/// [`normalize_with`].
#[derive(Clone, Copy)]
enum Schema<'a> {
    Raw(&'a JsonObject),
    Compiled(&'a OutputSchema),
}

fn normalize_against(
    result: CallToolResult,
    output_schema: Option<Schema<'_>>,
    limits: ResultLimits,
) -> NormalizedResult {
    let is_error = result.is_error.unwrap_or(false);
    let mut warnings = Vec::new();
    let content = result
        .content
        .into_iter()
        .enumerate()
        .map(|(index, block)| check_block(index, block, &limits, &mut warnings))
        .collect();
    let structured_content = result.structured_content;
    // A tool error need not carry structured content; one that does is checked too (a client
    // SDK checks it against the schema whatever `isError` says).
    if let Some(schema) = output_schema
        && (!is_error || structured_content.is_some())
    {
        check_structured(schema, structured_content.as_ref(), &limits, &mut warnings);
    }
    NormalizedResult {
        content,
        structured_content,
        is_error,
        meta: result.meta,
        warnings,
    }
}

fn check_structured(
    schema: Schema<'_>,
    structured: Option<&Value>,
    limits: &ResultLimits,
    warnings: &mut Vec<ResultWarning>,
) {
    let Some(structured) = structured else {
        warnings.push(ResultWarning {
            kind: WarningKind::StructuredContentMissing,
            block: None,
            message: "the tool declares an outputSchema but returned no structuredContent"
                .to_string(),
        });
        return;
    };
    let compiled_here;
    let compiled = match schema {
        Schema::Compiled(output) => &output.compiled,
        Schema::Raw(schema) => {
            compiled_here = OutputSchema::new(schema);
            &compiled_here.compiled
        }
    };
    let validator = match compiled {
        Ok(validator) => validator,
        Err(reason) => {
            warnings.push(ResultWarning {
                kind: WarningKind::OutputSchemaUnusable,
                block: None,
                message: format!(
                    "structuredContent was not checked: the outputSchema cannot be used ({reason})"
                ),
            });
            return;
        }
    };
    if let Some((violations, total)) =
        validate::violations(validator, structured, limits.max_schema_errors)
    {
        let (count, listed) = validate::problems(&violations, total);
        warnings.push(ResultWarning {
            kind: WarningKind::StructuredContentMismatch,
            block: None,
            message: format!(
                "structuredContent does not match the tool's outputSchema ({count}): {listed}"
            ),
        });
    }
}

fn check_block(
    index: usize,
    block: ContentBlock,
    limits: &ResultLimits,
    warnings: &mut Vec<ResultWarning>,
) -> ContentBlock {
    let problem = match &block {
        ContentBlock::Image(image) => check_media(&image.data, &image.mime_type, limits)
            .err()
            .map(|why| {
                (
                    WarningKind::InvalidMedia,
                    format!("image block {index}: {why}"),
                )
            }),
        ContentBlock::Audio(audio) => check_media(&audio.data, &audio.mime_type, limits)
            .err()
            .map(|why| {
                (
                    WarningKind::InvalidMedia,
                    format!("audio block {index}: {why}"),
                )
            }),
        ContentBlock::ResourceLink(link) => check_uri(&link.uri).err().map(|why| {
            (
                WarningKind::InvalidUri,
                format!(
                    "resource link block {index} (`{}`): {why}",
                    truncate(&link.name, MAX_MESSAGE_CHARS)
                ),
            )
        }),
        ContentBlock::Resource(embedded) => {
            let (uri, blob, mime_type) = match &embedded.resource {
                ResourceContents::TextResourceContents { uri, mime_type, .. } => {
                    (uri, None, mime_type)
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    blob,
                    mime_type,
                    ..
                } => (uri, Some(blob), mime_type),
                #[allow(unreachable_patterns)]
                _ => return block,
            };
            let blob_problem = blob.and_then(|blob| {
                check_base64(blob, limits)
                    .err()
                    .or_else(|| {
                        mime_type
                            .as_deref()
                            .and_then(|mime| check_mime_type(mime).err())
                    })
                    .map(|why| {
                        (
                            WarningKind::InvalidMedia,
                            format!("embedded blob block {index} ({}): {why}", shown(uri)),
                        )
                    })
            });
            if blob_problem.is_none()
                && let Err(why) = check_uri(uri)
            {
                // The contents are still worth reading: keep the block, warn.
                warnings.push(ResultWarning {
                    kind: WarningKind::InvalidUri,
                    block: Some(index),
                    message: format!("embedded resource block {index}: {why}"),
                });
            }
            blob_problem
        }
        _ => None,
    };
    match problem {
        None => block,
        Some((kind, message)) => {
            let note = format!("[mcp-harness: {message}; the block was removed]");
            warnings.push(ResultWarning {
                kind,
                block: Some(index),
                message,
            });
            ContentBlock::Text(TextContent::new(note))
        }
    }
}

/// A value shown in a note: quoted, bounded.
fn shown(value: &str) -> String {
    format!("`{}`", truncate(value, 120))
}

fn check_media(data: &str, mime_type: &str, limits: &ResultLimits) -> Result<(), String> {
    check_mime_type(mime_type)?;
    check_base64(data, limits)
}

fn check_mime_type(mime_type: &str) -> Result<(), String> {
    if mime_type.trim().is_empty() {
        return Err("its MIME type is empty".to_string());
    }
    let valid = match mime_type.split_once('/') {
        Some((kind, rest)) => {
            let subtype = rest.split(';').next().unwrap_or_default().trim();
            !kind.is_empty()
                && !subtype.is_empty()
                && kind.chars().chain(subtype.chars()).all(is_token_char)
        }
        None => false,
    };
    if valid {
        Ok(())
    } else {
        Err(format!(
            "its MIME type {} is not of the form type/subtype",
            shown(mime_type)
        ))
    }
}

/// RFC 2045 token characters.
fn is_token_char(c: char) -> bool {
    c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?=".contains(c)
}

/// Standard padded base64, checked in chunks without decoding the whole of it into memory.
fn check_base64(data: &str, limits: &ResultLimits) -> Result<(), String> {
    if data.is_empty() {
        return Err("its data is empty".to_string());
    }
    if data.len() > limits.max_media_base64_chars {
        return Err(format!(
            "its data is {} base64 chars, over the limit of {}",
            data.len(),
            limits.max_media_base64_chars
        ));
    }
    const CHUNK: usize = 4096;
    let mut buffer = [0u8; CHUNK / 4 * 3];
    for (i, chunk) in data.as_bytes().chunks(CHUNK).enumerate() {
        if let Err(error) = STANDARD.decode_slice(chunk, &mut buffer) {
            let offset = i * CHUNK;
            let why = match error {
                base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidByte(at, b)) => {
                    format!("invalid byte 0x{b:02x} at offset {}", offset + at)
                }
                other => other.to_string(),
            };
            return Err(format!("its data is not valid base64 ({why})"));
        }
    }
    Ok(())
}

fn check_uri(uri: &str) -> Result<(), String> {
    match fluent_uri::Uri::parse(uri) {
        Ok(_) => Ok(()),
        Err(error) => Err(format!(
            "its URI {} is not a valid URI ({error})",
            shown(uri)
        )),
    }
}

/// A rough token count of what the model would be shown: text (content text, embedded text
/// resources, resource-link fields, serialized `structuredContent`, warnings) at 4 chars per
/// token, rounded up, plus [`MEDIA_TOKENS`] for each image, audio clip or embedded blob.
pub(crate) fn estimate_tokens(result: &NormalizedResult) -> usize {
    let mut chars = 0usize;
    let mut media = 0usize;
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => chars += text.text.chars().count(),
            ContentBlock::Image(_) | ContentBlock::Audio(_) => media += 1,
            ContentBlock::ResourceLink(link) => {
                chars += link.uri.chars().count() + link.name.chars().count();
                chars += link.title.as_deref().map_or(0, |t| t.chars().count());
                chars += link.description.as_deref().map_or(0, |d| d.chars().count());
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    chars += uri.chars().count() + text.chars().count();
                }
                ResourceContents::BlobResourceContents { uri, .. } => {
                    chars += uri.chars().count();
                    media += 1;
                }
                #[allow(unreachable_patterns)]
                _ => {}
            },
            _ => chars += serialized(block).map_or(0, |n| n.bytes),
        }
    }
    if let Some(structured) = &result.structured_content {
        chars += serialized(structured).map_or(0, |n| n.chars);
    }
    chars += result
        .warnings
        .iter()
        .map(|w| w.message.chars().count())
        .sum::<usize>();
    // Hosts rarely show `_meta` to the model, but it travels with the answer: a huge one is
    // stored like a huge text.
    if let Some(meta) = result.meta.as_ref().filter(|m| !m.is_empty()) {
        chars += serialized(meta).map_or(0, |n| n.chars);
    }
    chars
        .div_ceil(4)
        .saturating_add(media.saturating_mul(MEDIA_TOKENS))
}

/// The length of a value's compact JSON, counted as it is written (nothing is kept).
#[derive(Default)]
pub(crate) struct Serialized {
    /// Bytes of UTF-8.
    pub(crate) bytes: usize,
    /// Characters.
    pub(crate) chars: usize,
}

impl std::io::Write for Serialized {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len();
        // serde_json writes UTF-8: every byte that is not a continuation byte starts a char.
        self.chars += buf.iter().filter(|&&b| b & 0xC0 != 0x80).count();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How long `value`'s compact JSON is; `None` when it cannot be written.
pub(crate) fn serialized(value: &impl serde::Serialize) -> Option<Serialized> {
    let mut counted = Serialized::default();
    serde_json::to_writer(&mut counted, value).ok()?;
    Some(counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Resource;
    use serde_json::json;

    const PNG: &str = "iVBORw0KGgo=";

    fn run(result: CallToolResult) -> NormalizedResult {
        normalize(result, None, ResultLimits::default())
    }

    #[test]
    fn base64_is_checked_across_chunks() {
        let limits = ResultLimits::default();
        let good = STANDARD.encode(vec![7u8; 10_000]);
        assert!(check_base64(&good, &limits).is_ok());
        let mut bad = good.clone().into_bytes();
        bad[5000] = b'*';
        let bad = String::from_utf8(bad).unwrap();
        let err = check_base64(&bad, &limits).unwrap_err();
        assert!(err.contains("offset 5000"), "{err}");
        assert!(check_base64("abc", &limits).is_err());
        assert!(check_base64("", &limits).is_err());
        let small = ResultLimits {
            max_media_base64_chars: 4,
            ..limits
        };
        assert!(
            check_base64(PNG, &small)
                .unwrap_err()
                .contains("over the limit")
        );
    }

    #[test]
    fn mime_types_need_type_and_subtype() {
        assert!(check_mime_type("image/png").is_ok());
        assert!(check_mime_type("text/plain; charset=utf-8").is_ok());
        for bad in ["", " ", "png", "image/", "/png", "image png/x"] {
            assert!(check_mime_type(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn uris_must_be_absolute_rfc3986() {
        assert!(check_uri("file:///tmp/a.txt").is_ok());
        assert!(check_uri("https://example.com/x?y=1#z").is_ok());
        assert!(check_uri("urn:isbn:0451450523").is_ok());
        for bad in ["", "relative/path", "file:///a b", "http://[::1"] {
            assert!(check_uri(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_media_becomes_a_note_in_place() {
        let result = run(CallToolResult::success(vec![
            ContentBlock::text("before"),
            ContentBlock::image("not base64!", "image/png"),
            ContentBlock::audio(PNG, ""),
            ContentBlock::image(PNG, "image/png"),
        ]));
        assert_eq!(result.content.len(), 4);
        let note = result.content[1].as_text().unwrap();
        assert!(note.text.contains("image block 1") && note.text.contains("base64"));
        let note = result.content[2].as_text().unwrap();
        assert!(note.text.contains("MIME type is empty"));
        assert!(result.content[3].as_image().is_some());
        assert_eq!(result.warnings.len(), 2);
        assert!(
            result
                .warnings
                .iter()
                .all(|w| w.kind == WarningKind::InvalidMedia)
        );
    }

    #[test]
    fn bad_link_uri_is_noted_and_embedded_text_is_kept() {
        let link = Resource::new("not a uri", "doc");
        let result = run(CallToolResult::success(vec![
            ContentBlock::resource_link(link),
            ContentBlock::embedded_text("also bad", "contents"),
            ContentBlock::resource(ResourceContents::blob("%%%", "file:///b")),
        ]));
        assert!(result.content[0].as_text().unwrap().text.contains("`doc`"));
        assert!(result.content[1].as_resource().is_some());
        assert!(result.content[2].as_text().unwrap().text.contains("blob"));
        let kinds: Vec<_> = result.warnings.iter().map(|w| w.kind).collect();
        assert_eq!(
            kinds,
            [
                WarningKind::InvalidUri,
                WarningKind::InvalidUri,
                WarningKind::InvalidMedia
            ]
        );
    }

    #[test]
    fn estimate_counts_text_and_media() {
        let result = run(CallToolResult::success(vec![
            ContentBlock::text("x".repeat(10)),
            ContentBlock::image(PNG, "image/png"),
        ]));
        assert_eq!(estimate_tokens(&result), 3 + MEDIA_TOKENS);
        let structured = run(CallToolResult::structured(json!({"a": 1})));
        // content (the JSON as text) and structuredContent are both counted.
        assert_eq!(estimate_tokens(&structured), (7 + 7_usize).div_ceil(4));
    }

    #[test]
    fn serialized_lengths_are_those_of_the_json_text() {
        let value = json!({"é": ["€😀", 1.5, null], "k\n": "\u{7}"});
        let text = serde_json::to_string(&value).unwrap();
        let counted = serialized(&value).unwrap();
        assert_eq!(
            (counted.bytes, counted.chars),
            (text.len(), text.chars().count())
        );
    }

    #[test]
    fn a_compiled_output_schema_checks_like_a_raw_one() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"]});
        let schema = schema.as_object().cloned().unwrap();
        let compiled = OutputSchema::new(&schema);
        assert!(compiled.is_usable());
        for result in [
            CallToolResult::structured(json!({"n": 1})),
            CallToolResult::structured(json!({"n": "one"})),
            CallToolResult::success(vec![ContentBlock::text("no structured content")]),
            CallToolResult::structured_error(json!({"n": "one"})),
        ] {
            let limits = ResultLimits::default();
            assert_eq!(
                normalize_with(result.clone(), Some(&compiled), limits),
                normalize(result, Some(&schema), limits)
            );
        }
        let unusable = json!({"type": 12}).as_object().cloned().unwrap();
        let compiled = OutputSchema::new(&unusable);
        assert!(!compiled.is_usable());
        let result = CallToolResult::structured(json!({"n": 1}));
        let checked = normalize_with(result, Some(&compiled), ResultLimits::default());
        assert_eq!(checked.warnings[0].kind, WarningKind::OutputSchemaUnusable);
    }

    #[test]
    fn error_text_falls_back() {
        let mut r = run(CallToolResult::error(vec![]));
        assert!(r.is_error);
        assert!(r.error_text().contains("without a message"));
        r.structured_content = Some(json!({"code": 4}));
        assert_eq!(r.error_text(), r#"{"code":4}"#);
    }
}

//! What the model sees of a result as text: the whole rendering that is stored and paged
//! ([`render_text`]), and the bounded summary that replaces a result over its budget.
//!
//! Invariant: a summary holds one text block (header, preview, footer), at most
//! [`MAX_SUMMARY_WARNINGS`] warnings, the structured content only when it fits the budget
//! beside the text, `_meta` only up to [`MAX_SUMMARY_META_BYTES`], and only the media blocks
//! that still fit the budget; the text names whatever was left out. A result of a tool with an
//! `outputSchema` whose structured content was left out is marked an error (clients check that
//! structured content against the schema; an error result is exempt).

use rmcp::model::{ContentBlock, ResourceContents};

use super::result::{MEDIA_TOKENS, NormalizedResult, estimate_tokens, serialized};

/// At most this many warnings of the full result are carried into its summary.
pub(crate) const MAX_SUMMARY_WARNINGS: usize = 10;
/// A result's `_meta` larger than this (compact JSON) is left out of its summary.
pub(crate) const MAX_SUMMARY_META_BYTES: usize = 8 * 1024;

/// The whole result as text: every block in order (media described, not inlined), then the
/// structured content (pretty JSON), then the warnings.
pub(crate) fn render_text(result: &NormalizedResult) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(result.content.len() + 2);
    for (i, block) in result.content.iter().enumerate() {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!(
                "[image block {i}: {}, about {} bytes]",
                image.mime_type,
                image.data.len() / 4 * 3
            ),
            ContentBlock::Audio(audio) => format!(
                "[audio block {i}: {}, about {} bytes]",
                audio.mime_type,
                audio.data.len() / 4 * 3
            ),
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource link block {i}: {} ({})", link.uri, link.name);
                if let Some(description) = &link.description {
                    line.push_str(" - ");
                    line.push_str(description);
                }
                line.push(']');
                line
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => format!(
                    "[resource block {i}: {uri}{}]\n{text}",
                    mime_type
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                ),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource block {i}: {uri}, {} binary data, about {} bytes]",
                    mime_type.as_deref().unwrap_or("unknown type"),
                    blob.len() / 4 * 3
                ),
                #[allow(unreachable_patterns)]
                _ => format!("[resource block {i}]"),
            },
            other => serde_json::to_string(other).unwrap_or_default(),
        });
    }
    if let Some(structured) = &result.structured_content {
        let json = serde_json::to_string_pretty(structured).unwrap_or_default();
        parts.push(format!("[structuredContent]\n{json}"));
    }
    if let Some(meta) = result.meta.as_ref().filter(|m| !m.is_empty()) {
        let json = serde_json::to_string_pretty(meta).unwrap_or_default();
        parts.push(format!("[_meta]\n{json}"));
    }
    if !result.warnings.is_empty() {
        let lines = result
            .warnings
            .iter()
            .map(|w| format!("- {}", w.message))
            .collect::<Vec<_>>()
            .join("\n");
        parts.push(format!("[warnings]\n{lines}"));
    }
    parts.join("\n\n")
}

/// The summary: header + preview + footer as one text block, then the structured content and
/// the media blocks that still fit the budget, `is_error` kept, `_meta` kept when small,
/// warnings bounded; a line of the text names what was left out. `output_schema`: the tool
/// declares one; `saved`: the whole result was stored (else what is left out is lost).
pub(super) fn summarize(
    result: &NormalizedResult,
    header: String,
    preview: &str,
    footer: String,
    budget_tokens: usize,
    (output_schema, saved): (bool, bool),
) -> NormalizedResult {
    let kept = if saved { "saved" } else { "not saved" };
    let mut left_out = Vec::new();
    let meta_bytes = result
        .meta
        .as_ref()
        .and_then(serialized)
        .map_or(0, |n| n.bytes);
    let meta = if meta_bytes <= MAX_SUMMARY_META_BYTES {
        result.meta.clone()
    } else {
        left_out.push(format!("its _meta ({meta_bytes} bytes; {kept})"));
        None
    };
    let mut summary = NormalizedResult {
        content: vec![ContentBlock::text(format!(
            "{header}\n\n{preview}\n{footer}"
        ))],
        structured_content: None,
        is_error: result.is_error,
        meta,
        warnings: result
            .warnings
            .iter()
            .take(MAX_SUMMARY_WARNINGS)
            .cloned()
            .collect(),
    };
    let mut estimate = estimate_tokens(&summary);
    if let Some(structured) = &result.structured_content {
        let tokens = serialized(structured).map_or(usize::MAX, |n| n.chars.div_ceil(4));
        if estimate.saturating_add(tokens) <= budget_tokens {
            summary.structured_content = Some(structured.clone());
            estimate += tokens;
        } else if output_schema && !result.is_error {
            left_out.push(format!(
                "its structuredContent ({kept}); without it this answer is marked an error, \
                 as clients refuse a result of a tool with an outputSchema that lacks it"
            ));
            summary.is_error = true;
        } else {
            left_out.push(format!("its structuredContent ({kept})"));
        }
    }
    let mut media_left_out = Vec::new();
    for (i, block) in result.content.iter().enumerate() {
        if matches!(block, ContentBlock::Image(_) | ContentBlock::Audio(_)) {
            if estimate + MEDIA_TOKENS <= budget_tokens {
                summary.content.push(block.clone());
                estimate += MEDIA_TOKENS;
            } else {
                media_left_out.push(i.to_string());
            }
        }
    }
    if !media_left_out.is_empty() {
        left_out.push(format!(
            "media block(s) {} (over the budget; the text of the result only describes them)",
            media_left_out.join(", ")
        ));
    }
    if !left_out.is_empty()
        && let Some(ContentBlock::Text(text)) = summary.content.first_mut()
    {
        text.text.push_str(&format!(
            "\n[left out of this answer: {}]",
            left_out.join("; ")
        ));
    }
    summary
}

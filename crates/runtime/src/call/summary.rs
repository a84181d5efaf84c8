//! What the model sees of a result as text: the whole rendering that is stored and paged
//! ([`render_text`]), and the bounded summary that replaces a result over its budget.
//!
//! Invariant: a summary holds one text block (header, preview, footer), at most
//! [`MAX_SUMMARY_WARNINGS`] warnings, and only the media blocks that still fit the budget.

use rmcp::model::{ContentBlock, ResourceContents};

use super::result::{MEDIA_TOKENS, NormalizedResult, estimate_tokens};

/// At most this many warnings of the full result are carried into its summary.
pub(crate) const MAX_SUMMARY_WARNINGS: usize = 10;

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

/// The summary: header + preview + footer as one text block, then the media blocks that still
/// fit the budget, `is_error` and `_meta` kept, warnings bounded.
pub(super) fn summarize(
    result: &NormalizedResult,
    header: String,
    preview: &str,
    footer: String,
    budget_tokens: usize,
) -> NormalizedResult {
    let text = format!("{header}\n\n{preview}\n{footer}");
    let mut summary = NormalizedResult {
        content: vec![ContentBlock::text(text)],
        structured_content: None,
        is_error: result.is_error,
        meta: result.meta.clone(),
        warnings: result
            .warnings
            .iter()
            .take(MAX_SUMMARY_WARNINGS)
            .cloned()
            .collect(),
    };
    let mut estimate = estimate_tokens(&summary);
    for block in &result.content {
        if matches!(block, ContentBlock::Image(_) | ContentBlock::Audio(_))
            && estimate + MEDIA_TOKENS <= budget_tokens
        {
            summary.content.push(block.clone());
            estimate += MEDIA_TOKENS;
        }
    }
    summary
}

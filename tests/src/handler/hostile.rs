//! Hostile metadata (`--hostile`): tools whose listing is the kind of thing a malicious or
//! broken server sends — a 1 MB description, a schema nested 50 deep (100 JSON levels), names with `/`, `.`,
//! spaces, 200 characters, a Cyrillic look-alike, bidi overrides and zero-width characters in
//! text. The client must clean, cap or hide each, never pass it on raw.
//!
//! Invariant: the listing is deterministic, so tests can assert on each tool by name.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

fn object(v: Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn plain() -> Arc<JsonObject> {
    object(json!({"type": "object", "properties": {"x": {"type": "string"}}}))
}

/// The hostile tools, in listing order.
pub fn hostile_tools() -> Vec<Tool> {
    let mut deep = json!({"type": "string"});
    for _ in 0..50 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    vec![
        Tool::new("huge_description", "x".repeat(1_000_000), plain()),
        Tool::new("deep_schema", "nested 50 levels", object(deep)),
        Tool::new(
            "path/like.name with spaces",
            "a name with illegal characters",
            plain(),
        ),
        Tool::new("n".repeat(200), "a 200-character name", plain()),
        // Cyrillic 'е' (U+0435) posing as "echo".
        Tool::new("\u{0435}cho", "a look-alike of echo", plain()),
        Tool::new(
            "bidi_text",
            "safe\u{202E}txet desrever\u{202C} and zero\u{200B}width",
            plain(),
        ),
        Tool::new(
            "control\u{0007}name",
            "a name with a control character",
            plain(),
        ),
    ]
}

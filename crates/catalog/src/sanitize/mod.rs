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
//!
//! Layout: `text` (cleaning and identifier checks), `schema` (tool schemas, on top of `text`),
//! `entries` (whole listed entries, on top of both); the caps live here.

mod entries;
mod schema;
mod text;

use serde::{Deserialize, Serialize};

pub use entries::{
    UNDECODABLE_META_KEY, sanitize_prompt, sanitize_resource, sanitize_template, sanitize_tool,
};
pub use text::{clean_instructions, clean_line, clean_text, escape_for_display};

/// Why a listed entry is hidden instead of shown. The text is the reason users see; it never
/// quotes server text raw.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejected {
    /// The transport could not decode the entry ([`UNDECODABLE_META_KEY`]); its reason, cleaned.
    #[error("{0}")]
    Undecodable(String),
    /// A wire identifier (a name, an argument name, a URI or URI template) is empty, too long,
    /// holds a character cleaning would remove, or cannot work (a prompt argument name given
    /// twice, a malformed URI template): it cannot be rewritten, so it cannot be shown.
    #[error("{0}")]
    Identifier(String),
    /// A schema is over its size or depth cap, not an object schema, or holds a property name or
    /// value cleaning would change.
    #[error("{0}")]
    Schema(String),
    /// A prompt declares more arguments than [`MetadataLimits::max_prompt_arguments`].
    #[error("declares {declared} arguments, over the limit of {limit}")]
    TooManyArguments {
        /// How many the prompt declares.
        declared: usize,
        /// The cap.
        limit: usize,
    },
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_deserialize_with_defaults_and_reject_unknown_keys() {
        let l: MetadataLimits =
            serde_json::from_value(json!({"maxDescriptionChars": 100})).expect("valid limits");
        assert_eq!(l.max_description_chars, 100);
        assert_eq!(l.max_name_chars, 128);
        assert!(serde_json::from_value::<MetadataLimits>(json!({"maxFoo": 1})).is_err());
    }

    // --- tools --------------------------------------------------------------------------------
}

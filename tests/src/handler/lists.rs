//! The lists a client pages through and the list-changed kinds: the vocabulary every part of
//! the handler shares, so that none of them needs another to say which list it means.
//!
//! Invariant: pagination cursors are opaque strings bound to one list kind; a cursor that this
//! module did not produce for that kind is rejected.

use rmcp::{ErrorData as McpError, model::Cursor};

/// Which list changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Tools,
    Prompts,
    Resources,
}

/// Which list a cursor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
    Skills,
}

impl ListKind {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
            Self::ResourceTemplates => "templates",
            Self::Skills => "skills",
        }
    }
    /// The list method.
    pub(crate) fn method(self) -> &'static str {
        match self {
            Self::Tools => "tools/list",
            Self::Prompts => "prompts/list",
            Self::Resources => "resources/list",
            Self::ResourceTemplates => "resources/templates/list",
            Self::Skills => "skills/list",
        }
    }
}

/// Cuts one page out of `items`.
///
/// Without a page size every item is returned and any cursor is unknown.
/// Returns the page and the cursor of the next page, if there is one.
pub(crate) fn paginate<T>(
    kind: ListKind,
    mut items: Vec<T>,
    page_size: Option<usize>,
    cursor: Option<&str>,
) -> Result<(Vec<T>, Option<Cursor>), McpError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => decode_cursor(kind, cursor)
            .filter(|_| page_size.is_some())
            .ok_or_else(|| McpError::invalid_params(format!("unknown cursor {cursor:?}"), None))?,
    };
    let Some(size) = page_size else {
        return Ok((items, None));
    };
    let start = start.min(items.len());
    let end = start.saturating_add(size).min(items.len());
    let next = (end < items.len()).then(|| encode_cursor(kind, end));
    items.truncate(end);
    let page = items.split_off(start);
    Ok((page, next))
}

const CURSOR_PREFIX: &str = "fixture-cursor";

fn encode_cursor(kind: ListKind, offset: usize) -> Cursor {
    format!("{CURSOR_PREFIX}:{}:{offset:x}", kind.tag())
}

fn decode_cursor(kind: ListKind, cursor: &str) -> Option<usize> {
    let rest = cursor.strip_prefix(CURSOR_PREFIX)?.strip_prefix(':')?;
    let offset = rest.strip_prefix(kind.tag())?.strip_prefix(':')?;
    if offset.is_empty() || offset.starts_with('+') {
        return None;
    }
    usize::from_str_radix(offset, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_through_everything() {
        let items: Vec<u32> = (0..5).collect();
        let (p1, c1) = paginate(ListKind::Tools, items.clone(), Some(2), None).expect("page 1");
        assert_eq!(p1, vec![0, 1]);
        let (p2, c2) =
            paginate(ListKind::Tools, items.clone(), Some(2), c1.as_deref()).expect("page 2");
        assert_eq!(p2, vec![2, 3]);
        let (p3, c3) =
            paginate(ListKind::Tools, items.clone(), Some(2), c2.as_deref()).expect("page 3");
        assert_eq!(p3, vec![4]);
        assert!(c3.is_none());
    }

    #[test]
    fn rejects_foreign_cursors() {
        let items: Vec<u32> = (0..5).collect();
        let (_, cursor) = paginate(ListKind::Tools, items.clone(), Some(2), None).expect("page");
        assert!(paginate(ListKind::Prompts, items.clone(), Some(2), cursor.as_deref()).is_err());
        assert!(paginate(ListKind::Tools, items.clone(), Some(2), Some("bogus")).is_err());
        assert!(paginate(ListKind::Tools, items.clone(), None, cursor.as_deref()).is_err());
        let (all, next) = paginate(ListKind::Tools, items, None, None).expect("all");
        assert_eq!(all.len(), 5);
        assert!(next.is_none());
    }
}

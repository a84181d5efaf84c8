//! Mutable state shared by every connection of one fixture server.
//!
//! Invariants:
//! - Dynamic tools, prompts, resources and skills keep insertion order and never
//!   collide with each other's names (or with the static/generated ones; the
//!   handler checks that before inserting).
//! - The state is only ever touched through a `std::sync::Mutex` that is never
//!   held across an `.await`; notifications are sent after the lock is dropped,
//!   from the peers/sinks copied out of it.
//! - Pagination cursors are opaque strings bound to one list kind; a cursor that
//!   this module did not produce for that kind is rejected.

use std::collections::{BTreeMap, HashMap};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    model::{Cursor, Tool},
    service::SubscriptionSink,
};

/// Connection identifier: one per client connection (stdio process, duplex
/// pipe, or HTTP session).
pub(crate) type ConnId = u64;

/// A text resource added at runtime (or the static readme).
#[derive(Debug, Clone)]
pub(crate) struct TextResource {
    pub(crate) uri: String,
    pub(crate) text: String,
}

/// Everything that changes while the server runs.
#[derive(Default)]
pub(crate) struct FixtureState {
    /// Tools added with `add_tool`, in insertion order.
    pub(crate) dynamic_tools: Vec<Tool>,
    /// Prompt names added with `add_prompt`, in insertion order.
    pub(crate) dynamic_prompts: Vec<String>,
    /// Text resources: the static readme first, then added ones.
    pub(crate) resources: Vec<TextResource>,
    /// Initialized connections, for list-changed broadcasts.
    pub(crate) peers: BTreeMap<ConnId, Peer<RoleServer>>,
    /// Legacy `resources/subscribe` subscribers per resource uri.
    pub(crate) subscribers: HashMap<String, BTreeMap<ConnId, Peer<RoleServer>>>,
    /// Active `subscriptions/listen` sinks (protocol 2026-07-28 and later).
    pub(crate) sinks: BTreeMap<u64, (ConnId, SubscriptionSink)>,
    /// Next key for `sinks`.
    pub(crate) next_sink: u64,
    /// Fault injection: the current `flood` item of each list, and pending list failures.
    pub(crate) faults: crate::faults::Faults,
    /// Versioned tools and call counts.
    pub(crate) versioned: crate::versioned::Versioned,
    /// SEP-2640 skills (empty unless `--skills`) and how often each skill file was read.
    pub(crate) skills: crate::skills::Skills,
    /// `tools/call` requests counted for `--crash-after-calls`.
    pub(crate) crash: crate::lifecycle::CrashCounter,
    /// HTTP fault budgets and counters (`--fail-http`, `fail_http`, `expire_session`).
    pub(crate) http: crate::lifecycle::HttpFaults,
}

impl FixtureState {
    /// Fresh state holding the static readme resource, and the built-in skills when `opts`
    /// asks for them.
    pub(crate) fn new(opts: &crate::options::FixtureOptions) -> Self {
        Self {
            resources: vec![TextResource {
                uri: crate::tools::README_URI.to_owned(),
                text: crate::tools::README_TEXT.to_owned(),
            }],
            skills: crate::skills::Skills::new(opts),
            ..Self::default()
        }
    }

    /// Drops peers and subscribers whose transport has closed.
    pub(crate) fn prune_closed(&mut self) {
        self.peers.retain(|_, peer| !peer.is_transport_closed());
        for subs in self.subscribers.values_mut() {
            subs.retain(|_, peer| !peer.is_transport_closed());
        }
        self.subscribers.retain(|_, subs| !subs.is_empty());
    }

    /// Finds a text resource by uri.
    pub(crate) fn resource_mut(&mut self, uri: &str) -> Option<&mut TextResource> {
        self.resources.iter_mut().find(|r| r.uri == uri)
    }
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

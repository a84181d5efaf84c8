//! The bounded listing cache, keyed by (server, kind).
//!
//! Invariants:
//! - an entry holds the newest listing of one kind of one server's current connection: a store
//!   with an older (epoch, ticket) than the entry's is refused, so a slow fetch can never
//!   overwrite a newer one;
//! - closing a connection drops every kind of that server ([`ListingCache::drop_server`]), so a
//!   new connection never inherits an old catalog;
//! - the cache holds at most `max_entries` entries; beyond that the least recently used go (a
//!   later read misses and the caller fetches again);
//! - a server that opts out (see [`opts_out`]) is never stored.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use mcp_harness_catalog::Kind;
use mcp_harness_transport::SessionInfo;

use crate::connection::listing::Listed;

/// Default bound on cached listings (1,024 servers × 4 kinds, or more servers with fewer kinds).
pub(crate) const DEFAULT_MAX_ENTRIES: usize = 4096;

/// Experimental capability keys by which a server opts out of listing caches: our own, and the
/// one Codex reads; `{"enabled": false}` opts out.
pub(crate) const OPT_OUT_KEYS: [&str; 2] =
    ["mcp-harness/catalog-cache", "codex/tool-catalog-cache"];

/// Whether the server declared that its listings must not be cached.
pub(crate) fn opts_out(info: &SessionInfo) -> bool {
    let Some(experimental) = &info.capabilities.experimental else {
        return false;
    };
    OPT_OUT_KEYS.iter().any(|key| {
        experimental
            .get(*key)
            .is_some_and(|o| o.get("enabled") == Some(&serde_json::Value::Bool(false)))
    })
}

struct Entry {
    epoch: u64,
    ticket: u64,
    listed: Arc<Listed>,
    used: AtomicU64,
}

/// A process-wide, bounded cache of the latest complete listing per (server, kind).
pub(crate) struct ListingCache {
    entries: DashMap<(String, Kind), Entry>,
    max_entries: usize,
    clock: AtomicU64,
}

impl ListingCache {
    pub(crate) fn new(max_entries: usize) -> Self {
        Self {
            entries: DashMap::new(),
            max_entries: max_entries.max(1),
            clock: AtomicU64::new(0),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Stores `listed` for (server, kind) unless a newer listing is stored. Returns whether it
    /// was stored.
    pub(crate) fn store(
        &self,
        server: &str,
        kind: Kind,
        epoch: u64,
        ticket: u64,
        listed: Arc<Listed>,
    ) -> bool {
        let key = (server.to_string(), kind);
        let now = self.tick();
        let stored = match self.entries.get_mut(&key) {
            Some(mut e) => {
                if (epoch, ticket) <= (e.epoch, e.ticket) {
                    false
                } else {
                    *e = Entry {
                        epoch,
                        ticket,
                        listed,
                        used: AtomicU64::new(now),
                    };
                    true
                }
            }
            None => {
                self.entries.insert(
                    key,
                    Entry {
                        epoch,
                        ticket,
                        listed,
                        used: AtomicU64::new(now),
                    },
                );
                true
            }
        };
        if stored {
            self.evict();
        }
        stored
    }

    /// The cached listing of (server, kind) from connection `epoch`, if any.
    pub(crate) fn get(&self, server: &str, kind: Kind, epoch: u64) -> Option<Arc<Listed>> {
        let e = self.entries.get(&(server.to_string(), kind))?;
        if e.epoch != epoch {
            return None;
        }
        e.used.store(self.tick(), Ordering::Relaxed);
        Some(e.listed.clone())
    }

    /// Drops every kind cached for `server`.
    pub(crate) fn drop_server(&self, server: &str) {
        self.entries.retain(|(s, _), _| s != server);
    }

    #[cfg(test)]
    /// Number of cached listings.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(any(test, feature = "testing"))]
    /// The kinds cached for `server`.
    pub(crate) fn kinds_of(&self, server: &str) -> Vec<Kind> {
        let mut kinds: Vec<Kind> = self
            .entries
            .iter()
            .filter(|e| e.key().0 == server)
            .map(|e| e.key().1)
            .collect();
        kinds.sort();
        kinds
    }

    fn evict(&self) {
        while self.entries.len() > self.max_entries {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|e| e.used.load(Ordering::Relaxed))
                .map(|e| e.key().clone());
            match oldest {
                Some(key) => {
                    self.entries.remove(&key);
                }
                None => return,
            }
        }
    }
}

impl Default for ListingCache {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_ENTRIES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(n: usize) -> Arc<Listed> {
        Arc::new(Listed::Prompts(
            (0..n)
                .map(|i| rmcp::model::Prompt::new(format!("p{i}"), None::<String>, None))
                .collect(),
        ))
    }

    fn len_of(l: &Listed) -> usize {
        match l {
            Listed::Prompts(p) => p.len(),
            _ => usize::MAX,
        }
    }

    #[test]
    fn newest_fetch_wins() {
        let c = ListingCache::default();
        assert!(c.store("s", Kind::Prompts, 1, 2, listed(2)));
        assert!(
            !c.store("s", Kind::Prompts, 1, 1, listed(1)),
            "older ticket refused"
        );
        assert_eq!(c.get("s", Kind::Prompts, 1).map(|l| len_of(&l)), Some(2));
        assert!(
            c.store("s", Kind::Prompts, 2, 1, listed(3)),
            "a newer connection replaces"
        );
        assert!(
            c.get("s", Kind::Prompts, 1).is_none(),
            "old epochs never read"
        );
    }

    #[test]
    fn drop_server_removes_every_kind() {
        let c = ListingCache::default();
        for kind in [
            Kind::Tools,
            Kind::Prompts,
            Kind::Resources,
            Kind::ResourceTemplates,
        ] {
            c.store("a", kind, 1, 1, listed(1));
            c.store("b", kind, 1, 1, listed(1));
        }
        c.drop_server("a");
        assert!(c.kinds_of("a").is_empty());
        assert_eq!(c.kinds_of("b").len(), 4);
    }

    #[test]
    fn bounded_with_lru_eviction() {
        let c = ListingCache::new(3);
        c.store("a", Kind::Tools, 1, 1, listed(1));
        c.store("b", Kind::Tools, 1, 1, listed(1));
        c.store("c", Kind::Tools, 1, 1, listed(1));
        c.get("a", Kind::Tools, 1);
        c.store("d", Kind::Tools, 1, 1, listed(1));
        assert_eq!(c.len(), 3);
        assert!(
            c.get("b", Kind::Tools, 1).is_none(),
            "least recently used evicted"
        );
        assert!(c.get("a", Kind::Tools, 1).is_some());
    }
}

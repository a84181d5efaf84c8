//! Immutable, revisioned snapshots and the difference between two of them.
//!
//! Invariant: a snapshot is built whole by [`SnapshotBuilder::build`] and never mutated; the tool
//! index is derived from the same per-server catalogs it carries, so a reader can never see a tool
//! whose server is absent, failed or disabled.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::entry::{Kind, ServerCatalog, ServerState, ServerStatus, ToolEntry};

/// One published picture of every server and its catalog.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Strictly increasing per publisher; the first published snapshot has revision 1.
    pub revision: u64,
    /// Every configured server's status.
    pub servers: BTreeMap<String, ServerStatus>,
    /// Catalogs of connected servers only.
    pub catalogs: BTreeMap<String, Arc<ServerCatalog>>,
    /// What changed since the previous revision, and why.
    pub changes: Vec<Change>,
    #[serde(skip)]
    tool_index: BTreeMap<String, (String, usize)>,
}

/// One change between two revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub server: String,
    /// `None` for a state change.
    pub kind: Option<Kind>,
    /// What caused it: a notification, a state change, the initial listing.
    pub cause: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl Snapshot {
    /// The empty snapshot before anything was published (revision 0).
    pub fn empty() -> Self {
        Self {
            revision: 0,
            servers: BTreeMap::new(),
            catalogs: BTreeMap::new(),
            changes: Vec::new(),
            tool_index: BTreeMap::new(),
        }
    }

    /// The tool the model knows as `qualified_name`, if this snapshot has it.
    pub fn tool(&self, qualified_name: &str) -> Option<&ToolEntry> {
        let (server, i) = self.tool_index.get(qualified_name)?;
        self.catalogs.get(server)?.tools.get(*i)
    }

    /// Every tool, ordered by qualified name.
    pub fn tools(&self) -> impl Iterator<Item = &ToolEntry> {
        self.tool_index
            .values()
            .filter_map(|(server, i)| self.catalogs.get(server)?.tools.get(*i))
    }

    /// Whether every configured server has settled (none pending).
    pub fn all_settled(&self) -> bool {
        self.servers.values().all(|s| s.state.is_settled())
    }
}

/// Assembles the next snapshot from per-server statuses and catalogs.
#[derive(Debug, Default)]
pub struct SnapshotBuilder {
    servers: BTreeMap<String, ServerStatus>,
    catalogs: BTreeMap<String, Arc<ServerCatalog>>,
    changes: Vec<Change>,
}

impl SnapshotBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a server; its catalog is included only when it is connected.
    pub fn server(
        &mut self,
        status: ServerStatus,
        catalog: Option<Arc<ServerCatalog>>,
    ) -> &mut Self {
        let name = status.name.clone();
        if status.state == ServerState::Connected
            && let Some(c) = catalog
        {
            self.catalogs.insert(name.clone(), c);
        }
        self.servers.insert(name, status);
        self
    }

    /// Records why this snapshot differs from the previous one.
    pub fn change(&mut self, change: Change) -> &mut Self {
        self.changes.push(change);
        self
    }

    /// Freezes the snapshot with `revision`.
    pub fn build(self, revision: u64) -> Snapshot {
        let mut tool_index = BTreeMap::new();
        for (server, catalog) in &self.catalogs {
            for (i, tool) in catalog.tools.iter().enumerate() {
                tool_index.insert(tool.qualified_name.clone(), (server.clone(), i));
            }
        }
        Snapshot {
            revision,
            servers: self.servers,
            catalogs: self.catalogs,
            changes: self.changes,
            tool_index,
        }
    }
}

/// Names added and removed between two sorted name lists.
pub fn diff_names(old: &[String], new: &[String]) -> (Vec<String>, Vec<String>) {
    let added = new
        .iter()
        .filter(|n| old.binary_search(n).is_err())
        .cloned()
        .collect();
    let removed = old
        .iter()
        .filter(|n| new.binary_search(n).is_err())
        .cloned()
        .collect();
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::Tool;

    fn tool(name: &str) -> Tool {
        Tool::new(
            name.to_string(),
            "d".to_string(),
            Arc::new(serde_json::Map::new()),
        )
    }

    #[test]
    fn failed_servers_have_no_tools() {
        let catalog = Arc::new(ServerCatalog {
            tools: vec![ToolEntry::new("a", tool("x"))],
            ..Default::default()
        });
        let mut b = SnapshotBuilder::new();
        b.server(
            ServerStatus::new("a", "stdio", ServerState::Failed { error: "e".into() }),
            Some(catalog.clone()),
        );
        b.server(
            ServerStatus::new("b", "stdio", ServerState::Connected),
            Some(Arc::new(ServerCatalog {
                tools: vec![ToolEntry::new("b", tool("y"))],
                ..Default::default()
            })),
        );
        let s = b.build(7);
        assert_eq!(s.revision, 7);
        assert!(s.tool("mcp__a__x").is_none());
        assert_eq!(s.tool("mcp__b__y").map(|t| t.raw_name.as_str()), Some("y"));
        assert_eq!(s.tools().count(), 1);
        assert!(!s.catalogs.contains_key("a"));
    }

    #[test]
    fn diff_finds_added_and_removed() {
        let old = vec!["a".to_string(), "b".to_string()];
        let new = vec!["b".to_string(), "c".to_string()];
        assert_eq!(
            diff_names(&old, &new),
            (vec!["c".to_string()], vec!["a".to_string()])
        );
    }
}

//! Immutable, revisioned snapshots and the difference between two of them.
//!
//! Invariant: a snapshot is built whole by [`SnapshotBuilder::build`] and never mutated; the tool
//! index is derived from the same per-server catalogs it carries, so a reader can never see a tool
//! whose server is absent, failed or disabled.
//!
//! Names are injective in the index: when tools of different servers have the same qualified
//! name (server names are kept apart by the config, see
//! [`crate::naming::is_unambiguous_server_name`]; what is left is a crafted name equal to
//! another's sanitised-and-hashed one, or a hash collision), none of them is indexed and each
//! is listed in [`Snapshot::name_conflicts`] with the others named — never a silent overwrite,
//! never an order-dependent winner that could make a call reach the wrong server.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::entry::{HiddenEntry, Kind, ServerCatalog, ServerState, ServerStatus, ToolEntry};

/// One published picture of every server and its catalog.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Strictly increasing per publisher; the first published snapshot has revision 1.
    pub revision: u64,
    /// Every configured server's status.
    pub servers: BTreeMap<String, ServerStatus>,
    /// Catalogs of connected servers only (and of servers being replaced, see
    /// [`SnapshotBuilder::replaced_server`]).
    pub catalogs: BTreeMap<String, Arc<ServerCatalog>>,
    /// What changed since the previous revision, and why.
    pub changes: Vec<Change>,
    /// Tools left out of [`Snapshot::tools`] because another server's tool has the same
    /// qualified name; each names the others. In qualified-name order, then server order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub name_conflicts: Vec<HiddenEntry>,
    #[serde(skip)]
    tool_index: BTreeMap<String, (String, usize)>,
}

/// One change between two revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The configured name of the server that changed.
    pub server: String,
    /// `None` for a state change.
    pub kind: Option<Kind>,
    /// What caused it: a notification, a state change, the initial listing.
    pub cause: String,
    /// Qualified names that appeared.
    pub added: Vec<String>,
    /// Qualified names that disappeared.
    pub removed: Vec<String>,
    /// Tools listed before and after under one name whose definition changed (a call bound
    /// before is stale).
    pub changed: Vec<String>,
}

impl Snapshot {
    /// The empty snapshot before anything was published (revision 0).
    pub fn empty() -> Self {
        Self {
            revision: 0,
            servers: BTreeMap::new(),
            catalogs: BTreeMap::new(),
            changes: Vec::new(),
            name_conflicts: Vec::new(),
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
    /// An empty builder: no server, no catalog, no change.
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

    /// Adds a server that is being replaced (a config edit restarts it) with the catalog of
    /// its replaced connection, whatever its state: the entries stay while the new connection
    /// starts, so a restart that changes nothing changes nothing seen.
    pub fn replaced_server(
        &mut self,
        status: ServerStatus,
        catalog: Arc<ServerCatalog>,
    ) -> &mut Self {
        self.catalogs.insert(status.name.clone(), catalog);
        self.servers.insert(status.name.clone(), status);
        self
    }

    /// Records why this snapshot differs from the previous one.
    pub fn change(&mut self, change: Change) -> &mut Self {
        self.changes.push(change);
        self
    }

    /// Freezes the snapshot with `revision`.
    pub fn build(self, revision: u64) -> Snapshot {
        let mut holders: BTreeMap<&str, Vec<(usize, &ToolEntry)>> = BTreeMap::new();
        for catalog in self.catalogs.values() {
            for (i, tool) in catalog.tools.iter().enumerate() {
                holders
                    .entry(&tool.qualified_name)
                    .or_default()
                    .push((i, tool));
            }
        }
        let mut tool_index = BTreeMap::new();
        let mut name_conflicts = Vec::new();
        for (name, tools) in holders {
            if let [(i, only)] = tools.as_slice() {
                tool_index.insert(name.to_string(), (only.server.clone(), *i));
                continue;
            }
            for (_, tool) in &tools {
                let others: Vec<String> = tools
                    .iter()
                    .filter(|(_, o)| o.server != tool.server)
                    .map(|(_, o)| {
                        format!(
                            "tool `{}` of server \"{}\"",
                            crate::escape_for_display(&o.raw_name, 100),
                            o.server
                        )
                    })
                    .collect();
                name_conflicts.push(HiddenEntry {
                    server: tool.server.clone(),
                    kind: Kind::Tools,
                    raw_name: tool.raw_name.clone(),
                    reason: format!(
                        "name conflict across servers: `{name}` is also the name of {}; none of \
                         them is shown, so no call can reach the wrong server (rename the tool \
                         on its server, or rename a server in the config)",
                        others.join(" and ")
                    ),
                });
            }
        }
        Snapshot {
            revision,
            servers: self.servers,
            catalogs: self.catalogs,
            changes: self.changes,
            name_conflicts,
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

    fn connected(b: &mut SnapshotBuilder, server: &str, tools: &[&str]) {
        b.server(
            ServerStatus::new(server, "stdio", ServerState::Connected),
            Some(Arc::new(ServerCatalog {
                tools: tools
                    .iter()
                    .map(|t| ToolEntry::new(server, tool(t)))
                    .collect(),
                ..Default::default()
            })),
        );
    }

    /// Issue 13 point 5: the later server's tool used to overwrite the earlier one's in the
    /// index, silently. What is left once the config refuses ambiguous server names: a tool
    /// whose plain name equals another server's sanitised-and-hashed one.
    #[test]
    fn tools_of_two_servers_with_one_name_are_both_hidden_with_the_reason() {
        let hashed = crate::qualify("x.y", "z");
        assert!(hashed.starts_with("mcp__x_y__z_"), "{hashed}");
        // Server "x_y" with tool "z_<hash>": its plain name is exactly `hashed`.
        let crafted = hashed["mcp__x_y__".len()..].to_string();
        assert_eq!(crate::qualify("x_y", &crafted), hashed);
        for order in [["x.y", "x_y"], ["x_y", "x.y"]] {
            let mut b = SnapshotBuilder::new();
            for server in order {
                let t = if server == "x.y" {
                    "z"
                } else {
                    crafted.as_str()
                };
                connected(&mut b, server, &[t, "other"]);
            }
            let s = b.build(1);
            assert!(s.tool(&hashed).is_none());
            let names: Vec<_> = s.tools().map(|t| t.qualified_name.as_str()).collect();
            assert_eq!(names.len(), 2, "{names:?}");
            assert!(!names.contains(&hashed.as_str()));
            let hidden: Vec<_> = s
                .name_conflicts
                .iter()
                .map(|h| (h.server.as_str(), h.raw_name.as_str()))
                .collect();
            assert_eq!(hidden, [("x.y", "z"), ("x_y", crafted.as_str())]);
            let reason = &s.name_conflicts[0].reason;
            assert!(
                reason.contains("name conflict across servers")
                    && reason.contains(&format!("`{hashed}`"))
                    && reason.contains(&format!("tool `{crafted}` of server \"x_y\"")),
                "{reason}"
            );
        }
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

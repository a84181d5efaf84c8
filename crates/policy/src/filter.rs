//! Per-server include and exclude lists (`includeTools`, `excludeTools`).
//!
//! Invariant: a tool is either kept in `catalog.tools` or moved to [`ServerCatalog::hidden`] with
//! the reason and the config key that hid it — never silently dropped.

use mcp_harness_catalog::{HiddenEntry, Kind, ServerCatalog};

/// Per-server tool filters from the config (`includeTools`, `excludeTools`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// When set, only these raw tool names are exposed.
    pub include: Option<Vec<String>>,
    /// Raw tool names never exposed; wins over `include`.
    pub exclude: Vec<String>,
}

impl ToolFilter {
    /// Moves the tools this filter rejects from `catalog.tools` to `catalog.hidden`.
    pub fn apply(&self, server: &str, catalog: &mut ServerCatalog) {
        if self.include.is_none() && self.exclude.is_empty() {
            return;
        }
        let tools = std::mem::take(&mut catalog.tools);
        for tool in tools {
            let reason = if self.exclude.contains(&tool.raw_name) {
                Some(format!("excluded by `excludeTools` of server \"{server}\""))
            } else if let Some(include) = &self.include {
                (!include.contains(&tool.raw_name))
                    .then(|| format!("not in `includeTools` of server \"{server}\""))
            } else {
                None
            };
            match reason {
                Some(reason) => catalog.hidden.push(HiddenEntry {
                    server: server.to_string(),
                    kind: Kind::Tools,
                    raw_name: tool.raw_name,
                    reason,
                }),
                None => catalog.tools.push(tool),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_harness_catalog::ToolEntry;
    use rmcp::model::Tool;
    use std::sync::Arc;

    fn catalog(names: &[&str]) -> ServerCatalog {
        ServerCatalog {
            tools: names
                .iter()
                .map(|n| {
                    ToolEntry::new(
                        "s",
                        Tool::new(n.to_string(), "d".to_string(), Arc::new(Default::default())),
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn include_and_exclude_hide_with_reasons() {
        let mut c = catalog(&["a", "b", "c"]);
        ToolFilter {
            include: Some(vec!["a".into(), "b".into()]),
            exclude: vec!["b".into()],
        }
        .apply("s", &mut c);
        let shown: Vec<_> = c.tools.iter().map(|t| t.raw_name.as_str()).collect();
        assert_eq!(shown, vec!["a"]);
        assert_eq!(c.hidden.len(), 2);
        assert!(
            c.hidden
                .iter()
                .any(|h| h.raw_name == "b" && h.reason.contains("excludeTools"))
        );
        assert!(
            c.hidden
                .iter()
                .any(|h| h.raw_name == "c" && h.reason.contains("includeTools"))
        );
    }

    #[test]
    fn no_filter_keeps_everything() {
        let mut c = catalog(&["a", "b"]);
        ToolFilter::default().apply("s", &mut c);
        assert_eq!(c.tools.len(), 2);
        assert!(c.hidden.is_empty());
    }
}

//! `snapshot_build_<T>` and `set_tools_<n>`: pure CPU, no servers.
//!
//! S servers of n realistic tools each (a name, a ~200-character description, an input schema
//! with three properties) go through `ServerCatalog::set_tools` once; then, round after round
//! with the order alternating, the bench times
//! - `SnapshotBuilder::server` for every server (status cloned, as the publisher does) +
//!   `build(revision)`, against the least a snapshot needs: the catalogs' `Arc`s cloned into a
//!   `BTreeMap` by server name and every qualified name indexed in a
//!   `BTreeMap<String, (String, usize)>`;
//! - `set_tools` of one server's n tools into a fresh catalog, against a plain clone of the
//!   `Vec<Tool>` (the tools handed to `set_tools` are cloned outside the timed part).
//!
//! What a round builds is dropped outside the timed part.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_harness_runtime::catalog::{
    MetadataLimits, ServerCatalog, ServerState, ServerStatus, SnapshotBuilder,
};
use rmcp::model::Tool;
use serde_json::json;

use super::Bench;
use super::report::Metric;

const SERVERS: usize = 100;
const TOOLS_PER_SERVER: usize = 100;
/// Each of the two timed phases stops early past this.
const PHASE_LIMIT: Duration = Duration::from_secs(20);

fn server_name(s: usize) -> String {
    format!("server_{s:03}")
}

/// A tool as real servers list them.
fn tool(s: usize, t: usize) -> Tool {
    let mut description = format!(
        "Searches the records of project {s} (collection {t}) for entries matching the query and \
         returns them newest first, with their identifiers, titles and last-modified times. "
    );
    while description.len() < 200 {
        description.push_str("Read-only. ");
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for, in any order."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                      "description": "Most entries to return (default 20)."},
            "include_archived": {"type": "boolean",
                                 "description": "Also search archived entries."}
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new(
        format!("search_records_{t:03}"),
        description,
        Arc::new(schema),
    )
}

/// Times `harness` and `baseline` alternately, `rounds` times each or until `PHASE_LIMIT`.
fn alternate(
    rounds: usize,
    mut harness: impl FnMut(u64) -> f64,
    mut baseline: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let started = Instant::now();
    let (mut h, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for round in 0..rounds {
        if started.elapsed() > PHASE_LIMIT {
            break;
        }
        let revision = round as u64 + 1;
        if round % 2 == 0 {
            h.push(harness(revision));
            b.push(baseline());
        } else {
            b.push(baseline());
            h.push(harness(revision));
        }
    }
    (h, b)
}

impl Bench {
    /// Two metrics: the snapshot build and one server's `set_tools`.
    pub(super) fn snapshot_build(&self) -> Result<Vec<Metric>, String> {
        let rounds = self.options.builds;
        let limits = MetadataLimits::default();
        let names: Vec<String> = (0..SERVERS).map(server_name).collect();
        let listings: Vec<Vec<Tool>> = (0..SERVERS)
            .map(|s| (0..TOOLS_PER_SERVER).map(|t| tool(s, t)).collect())
            .collect();
        let catalogs: Vec<Arc<ServerCatalog>> = names
            .iter()
            .zip(&listings)
            .map(|(name, tools)| {
                let mut c = ServerCatalog::default();
                c.set_tools(name, tools.clone(), &limits);
                Arc::new(c)
            })
            .collect();
        let total = SERVERS * TOOLS_PER_SERVER;
        if let Some((name, c)) = names
            .iter()
            .zip(&catalogs)
            .find(|(_, c)| c.tools.len() != TOOLS_PER_SERVER)
        {
            return Err(format!(
                "set_tools kept {} of {TOOLS_PER_SERVER} tools of {name} (hidden: {:?})",
                c.tools.len(),
                c.hidden.first()
            ));
        }
        let statuses: Vec<ServerStatus> = names
            .iter()
            .map(|n| ServerStatus::new(n, "stdio", ServerState::Connected))
            .collect();

        let mut built = 0;
        let (h, b) = alternate(
            rounds,
            |revision| {
                let t0 = Instant::now();
                let mut builder = SnapshotBuilder::new();
                for (status, catalog) in statuses.iter().zip(&catalogs) {
                    builder.server(status.clone(), Some(catalog.clone()));
                }
                let snapshot = builder.build(revision);
                let elapsed = t0.elapsed().as_secs_f64();
                built = snapshot.tools().count();
                drop(black_box(snapshot));
                elapsed
            },
            || {
                let t0 = Instant::now();
                let mut by_server = BTreeMap::new();
                for (name, catalog) in names.iter().zip(&catalogs) {
                    by_server.insert(name.clone(), catalog.clone());
                }
                let mut index: BTreeMap<String, (String, usize)> = BTreeMap::new();
                for (server, catalog) in &by_server {
                    for (i, tool) in catalog.tools.iter().enumerate() {
                        index.insert(tool.qualified_name.clone(), (server.clone(), i));
                    }
                }
                let elapsed = t0.elapsed().as_secs_f64();
                drop(black_box((by_server, index)));
                elapsed
            },
        );
        if built != total {
            return Err(format!("a built snapshot has {built} of {total} tools"));
        }
        let build = Metric::new(
            format!("snapshot_build_{total}"),
            format!(
                "SnapshotBuilder + build over {SERVERS} catalogs of {TOOLS_PER_SERVER} tools vs Arc clones into a BTreeMap + {total}-name index, {} rounds",
                h.len()
            ),
            h,
            b,
        );

        let (name, listing) = (&names[0], &listings[0]);
        let (h, b) = alternate(
            rounds,
            |_| {
                let input = listing.clone();
                let t0 = Instant::now();
                let mut catalog = ServerCatalog::default();
                catalog.set_tools(name, input, &limits);
                let elapsed = t0.elapsed().as_secs_f64();
                drop(black_box(catalog));
                elapsed
            },
            || {
                let t0 = Instant::now();
                let copy = listing.clone();
                let elapsed = t0.elapsed().as_secs_f64();
                drop(black_box(copy));
                elapsed
            },
        );
        let set_tools = Metric::new(
            format!("set_tools_{TOOLS_PER_SERVER}"),
            format!(
                "ServerCatalog::set_tools of {TOOLS_PER_SERVER} tools (sanitise + qualify) vs a Vec<Tool> clone, {} rounds",
                h.len()
            ),
            h,
            b,
        );
        Ok(vec![build, set_tools])
    }
}

//! Mutable state shared by every connection of one fixture server.
//!
//! Invariants:
//! - Dynamic tools, prompts, resources and skills keep insertion order and never
//!   collide with each other's names (or with the static/generated ones; the
//!   handler checks that before inserting).
//! - The state is only ever touched through a `std::sync::Mutex` that is never
//!   held across an `.await`; notifications are sent after the lock is dropped,
//!   from the peers/sinks copied out of it.

use std::collections::{BTreeMap, HashMap};

use rmcp::{Peer, RoleServer, model::Tool, service::SubscriptionSink};

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
    pub(crate) faults: crate::handler::faults::Faults,
    /// Versioned tools and call counts.
    pub(crate) versioned: crate::handler::versioned::Versioned,
    /// SEP-2640 skills (empty unless `--skills`) and how often each skill file was read.
    pub(crate) skills: crate::handler::skills::Skills,
    /// `tools/call` requests counted for `--crash-after-calls`.
    pub(crate) crash: crate::handler::lifecycle::CrashCounter,
    /// HTTP fault budgets and counters (`--fail-http`, `fail_http`, `expire_session`).
    pub(crate) http: crate::handler::lifecycle::HttpFaults,
    /// `notifications/roots/list_changed` received, from every connection.
    pub(crate) roots_changed: u64,
    /// What the server's own `roots/list` (asked on each `roots/list_changed` and, with
    /// `--client-requests`, at start: outside any call, as a filesystem server does) last got:
    /// the roots or the error.
    pub(crate) roots_after_change: Option<serde_json::Value>,
    /// The level last set with `logging/setLevel` (`--log-and-complete`).
    #[allow(deprecated)] // logging: every protocol before 2026-07-28
    pub(crate) log_level: Option<rmcp::model::LoggingLevel>,
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
            skills: crate::handler::skills::Skills::new(opts),
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

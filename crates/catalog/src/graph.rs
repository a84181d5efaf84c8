//! The dependency graph of catalog kinds, as data in one place.
//!
//! Invariant: which kinds a notification refreshes, and which derived kinds are rebuilt after,
//! is decided only by [`DIRECT`] and [`DEPENDS_ON`]; handlers ask [`plan`] and never encode an
//! edge themselves. A kind is refreshed only when something it depends on changed (a prompt
//! change does not re-read skills; a resource change re-reads skills and rebuilds commands).

use std::collections::BTreeSet;

use crate::entry::Kind;

/// What a server can tell us changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// `notifications/tools/list_changed`
    ToolsListChanged,
    /// `notifications/prompts/list_changed`
    PromptsListChanged,
    /// `notifications/resources/list_changed`
    ResourcesListChanged,
}

impl Trigger {
    /// Every trigger.
    pub const ALL: [Trigger; 3] = [
        Trigger::ToolsListChanged,
        Trigger::PromptsListChanged,
        Trigger::ResourcesListChanged,
    ];

    /// The notification's method name, used as the cause of a change.
    pub fn method(self) -> &'static str {
        match self {
            Trigger::ToolsListChanged => "notifications/tools/list_changed",
            Trigger::PromptsListChanged => "notifications/prompts/list_changed",
            Trigger::ResourcesListChanged => "notifications/resources/list_changed",
        }
    }
}

/// The kinds each trigger changes directly.
pub const DIRECT: [(Trigger, &[Kind]); 3] = [
    (Trigger::ToolsListChanged, &[Kind::Tools]),
    (Trigger::PromptsListChanged, &[Kind::Prompts]),
    (
        Trigger::ResourcesListChanged,
        &[Kind::Resources, Kind::ResourceTemplates],
    ),
];

/// Each dependent kind and the kinds it is built from: skills are served as resources, and
/// commands are made from prompts and skills.
pub const DEPENDS_ON: [(Kind, &[Kind]); 2] = [
    (Kind::Skills, &[Kind::Resources]),
    (Kind::Commands, &[Kind::Prompts, Kind::Skills]),
];

/// Kinds built locally from other kinds rather than listed by the server.
pub const DERIVED: [Kind; 1] = [Kind::Commands];

/// What to do about one trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Kinds to fetch again from the server (concurrently; the newest fetch of each wins).
    pub refetch: Vec<Kind>,
    /// Kinds to rebuild locally once the fetched kinds are in.
    pub rebuild: Vec<Kind>,
}

/// Every kind invalidated by `trigger`: its direct kinds and, transitively, their dependents.
pub fn invalidated_by(trigger: Trigger) -> BTreeSet<Kind> {
    let mut out: BTreeSet<Kind> = DIRECT
        .iter()
        .filter(|(t, _)| *t == trigger)
        .flat_map(|(_, kinds)| kinds.iter().copied())
        .collect();
    loop {
        let before = out.len();
        for (dependent, inputs) in DEPENDS_ON {
            if inputs.iter().any(|k| out.contains(k)) {
                out.insert(dependent);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// The kinds of `kind`'s inputs (empty for a kind listed directly).
pub fn inputs_of(kind: Kind) -> &'static [Kind] {
    DEPENDS_ON
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, inputs)| *inputs)
        .unwrap_or(&[])
}

/// The refresh plan for `trigger`.
pub fn plan(trigger: Trigger) -> Plan {
    let invalidated = invalidated_by(trigger);
    Plan {
        refetch: invalidated
            .iter()
            .copied()
            .filter(|k| !DERIVED.contains(k))
            .collect(),
        rebuild: invalidated
            .iter()
            .copied()
            .filter(|k| DERIVED.contains(k))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks every edge of the graph: each trigger's exact refetch and rebuild sets.
    #[test]
    fn every_edge() {
        assert_eq!(
            plan(Trigger::ToolsListChanged),
            Plan {
                refetch: vec![Kind::Tools],
                rebuild: vec![]
            }
        );
        assert_eq!(
            plan(Trigger::PromptsListChanged),
            Plan {
                refetch: vec![Kind::Prompts],
                rebuild: vec![Kind::Commands]
            },
            "prompts change: commands rebuilt, skills reused (not refetched)"
        );
        assert_eq!(
            plan(Trigger::ResourcesListChanged),
            Plan {
                refetch: vec![Kind::Resources, Kind::ResourceTemplates, Kind::Skills],
                rebuild: vec![Kind::Commands],
            },
            "resources change: skills refetched, commands rebuilt"
        );
    }

    #[test]
    fn graph_is_consistent() {
        for (dependent, inputs) in DEPENDS_ON {
            assert!(
                !inputs.contains(&dependent),
                "{dependent:?} depends on itself"
            );
            assert_eq!(inputs_of(dependent), inputs);
        }
        for kind in DERIVED {
            assert!(!inputs_of(kind).is_empty(), "a derived kind needs inputs");
            assert!(
                DIRECT.iter().all(|(_, kinds)| !kinds.contains(&kind)),
                "a derived kind is never listed directly"
            );
        }
        assert!(inputs_of(Kind::Tools).is_empty());
        // Every fetched kind is reachable from some trigger, except skills' own listing, which
        // is reached through resources.
        for kind in [
            Kind::Tools,
            Kind::Prompts,
            Kind::Resources,
            Kind::ResourceTemplates,
            Kind::Skills,
        ] {
            assert!(
                Trigger::ALL
                    .iter()
                    .any(|t| invalidated_by(*t).contains(&kind)),
                "{kind:?}"
            );
        }
    }
}

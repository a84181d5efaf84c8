//! The suites' own scenario listings and the baseline of known failures.
//!
//! Invariant: a baseline entry names an extension scenario the suite lists, once, with a reason.

use std::path::Path;
use std::process::{Command, Stdio};

use super::check_scenario_name;
use super::matrix::{RunSpec, Suite};

/// One client scenario of a suite's `list --client`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Listed {
    pub(super) name: String,
    /// The bracketed tags: spec versions, or `extension`.
    pub(super) tags: Vec<String>,
}

impl Listed {
    pub(super) fn is_extension(&self) -> bool {
        self.tags.iter().any(|t| t == "extension")
    }
}

/// The suite's client scenarios (`list --client`: `  - NAME [TAG,TAG]` lines).
pub(super) fn list_client_scenarios(
    node: &Path,
    peers: &Path,
    suite: Suite,
) -> Result<Vec<Listed>, String> {
    let out = Command::new(node)
        .arg(suite.entry(peers))
        .args(["list", "--client"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`list --client` of the {} suite exited with {}",
            suite.name(),
            out.status
        ));
    }
    let listed = parse_listing(&String::from_utf8_lossy(&out.stdout));
    if listed.is_empty() {
        return Err(format!(
            "`list --client` of the {} suite listed no scenario",
            suite.name()
        ));
    }
    Ok(listed)
}

pub(super) fn parse_listing(text: &str) -> Vec<Listed> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .filter_map(|l| {
            let (name, tags) = match l.split_once(" [") {
                Some((n, t)) => (n, t.trim_end().trim_end_matches(']')),
                None => (l.trim(), ""),
            };
            check_scenario_name(name).ok()?;
            Some(Listed {
                name: name.to_string(),
                tags: tags
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect(),
            })
        })
        .collect()
}

/// A known failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BaselineEntry {
    pub(super) suite: Suite,
    pub(super) scenario: String,
    pub(super) reason: String,
}

/// `SUITE SCENARIO — REASON` lines (`#` comments, blank lines skipped). Every entry names an
/// extension scenario the suite lists, with a reason, once.
pub(super) fn parse_baseline(
    text: &str,
    listed: &[(Suite, Vec<Listed>)],
) -> Result<Vec<BaselineEntry>, String> {
    let mut entries: Vec<BaselineEntry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |m: String| format!("line {}: {m}", i + 1);
        let (head, reason) = line
            .split_once('—')
            .or_else(|| line.split_once(" -- "))
            .ok_or_else(|| at("expected `SUITE SCENARIO — REASON`".into()))?;
        let mut words = head.split_whitespace();
        let (Some(suite), Some(scenario), None) = (words.next(), words.next(), words.next()) else {
            return Err(at("expected `SUITE SCENARIO — REASON`".into()));
        };
        let suite = Suite::parse(suite).map_err(at)?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(at(format!("{scenario}: a known failure needs its reason")));
        }
        // Suites not being run are not checked (their listing was not fetched).
        if let Some((_, scenarios)) = listed.iter().find(|(s, _)| *s == suite) {
            match scenarios.iter().find(|l| l.name == scenario) {
                None => {
                    return Err(at(format!(
                        "the {} suite lists no client scenario `{scenario}`",
                        suite.name()
                    )));
                }
                Some(l) if !l.is_extension() => {
                    return Err(at(format!(
                        "`{scenario}` is not an extension scenario: only extension scenarios                          may be known failures"
                    )));
                }
                Some(_) => {}
            }
        }
        if entries
            .iter()
            .any(|e| e.suite == suite && e.scenario == scenario)
        {
            return Err(at(format!("{} {scenario} is listed twice", suite.name())));
        }
        entries.push(BaselineEntry {
            suite,
            scenario: scenario.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(entries)
}

/// Listed scenarios no run of `runs` covers (per suite).
pub(super) fn not_in_matrix(
    listed: &[(Suite, Vec<Listed>)],
    runs: &[RunSpec],
) -> Vec<(Suite, String)> {
    let mut missing = Vec::new();
    for (suite, scenarios) in listed {
        for l in scenarios {
            let covered = runs
                .iter()
                .any(|r| r.suite == *suite && r.scenarios.contains(&l.name));
            if !covered {
                missing.push((*suite, l.name.clone()));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing() -> Vec<(Suite, Vec<Listed>)> {
        let text = "Client scenarios (test against a client):\n  - initialize [2025-06-18,2025-11-25]\n  - auth/dpop [extension]\n  - auth/client-credentials-basic [extension]\n";
        vec![(Suite::Next, parse_listing(text))]
    }

    #[test]
    fn the_listing_is_parsed_with_its_tags() {
        let l = &listing()[0].1;
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].name, "initialize");
        assert_eq!(l[0].tags, ["2025-06-18", "2025-11-25"]);
        assert!(!l[0].is_extension());
        assert!(l[1].is_extension());
    }

    #[test]
    fn the_baseline_holds_only_extension_scenarios_with_reasons() {
        let ok = parse_baseline(
            "# known\n\nnext auth/dpop — DPoP (RFC 9449) is not implemented\nstable auth/anything — not checked: stable was not listed\n",
            &listing(),
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].suite, Suite::Next);
        assert_eq!(ok[0].reason, "DPoP (RFC 9449) is not implemented");
        let err = |t: &str| parse_baseline(t, &listing()).unwrap_err();
        assert!(err("next initialize — flaky").contains("not an extension scenario"));
        assert!(err("next auth/dpop").contains("SUITE SCENARIO — REASON"));
        assert!(err("next auth/dpop —  ").contains("needs its reason"));
        assert!(err("next auth/nope — x").contains("lists no client scenario"));
        assert!(err("beta auth/dpop — x").contains("unknown suite"));
        assert!(err("next auth/dpop — a\nnext auth/dpop — b").contains("twice"));
    }

    #[test]
    fn every_listed_scenario_must_be_in_the_matrix() {
        let runs = vec![RunSpec {
            suite: Suite::Next,
            spec: None,
            scenarios: vec!["initialize".into(), "auth/dpop".into()],
        }];
        assert_eq!(
            not_in_matrix(&listing(), &runs),
            [(Suite::Next, "auth/client-credentials-basic".to_string())]
        );
    }
}

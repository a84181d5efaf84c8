//! Visibility filters: which servers, tools, prompts and resources one client may see (the
//! gateway's per-client profiles).
//!
//! Invariant: a filter admits a name when `allow` is absent or one of its patterns matches, and
//! no `deny` pattern matches (deny wins). Patterns are the permission rules' globs: over names
//! `*` stays within a `__`-separated segment and `**` crosses them — except in `deny`, where `*`
//! crosses `__` too (a raw name may hold `__`: `mcp__fx__*` hides `mcp__fx__a__b`); over URIs `*`
//! stays within a `/`-separated segment, and a URI deny also matches in its canonical spelling
//! ([`crate::uri::canonical_uri`]). A pattern matches the whole value or nothing.

use crate::glob::{Glob, NAME_SEPARATOR, PATH_SEPARATOR, check_name_pattern};

/// What a filter's patterns are matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// Server names (the keys of `mcpServers`).
    Server,
    /// Qualified tool and prompt names (`mcp__<server>__<name>`).
    Name,
    /// Resource URIs and URI templates.
    Uri,
}

/// Allow and deny patterns over one kind of name.
#[derive(Debug, Clone, Default)]
pub struct NameFilter {
    /// `None`: everything not denied is admitted.
    allow: Option<Vec<Glob>>,
    deny: Vec<Glob>,
}

impl NameFilter {
    /// A filter from the lists as written; an error names the bad pattern (`allow[i]` or
    /// `deny[i]`) and why it can never match.
    pub fn new(
        allow: Option<Vec<String>>,
        deny: Vec<String>,
        kind: PatternKind,
    ) -> Result<Self, String> {
        let compile = |list: &str, patterns: Vec<String>| -> Result<Vec<Glob>, String> {
            // A deny's `*` over names crosses `__`: a raw name holding `__` is never let past it.
            let crossing = list == "deny" && kind == PatternKind::Name;
            patterns
                .into_iter()
                .enumerate()
                .map(|(i, pattern)| {
                    match kind {
                        PatternKind::Name => {
                            check_name_pattern(&pattern)
                                .map_err(|e| format!("{list}[{i}]: {e}"))?;
                        }
                        _ if pattern.is_empty() => {
                            return Err(format!("{list}[{i}]: a pattern must not be empty"));
                        }
                        _ => {}
                    }
                    let separator = match kind {
                        PatternKind::Server | PatternKind::Name => NAME_SEPARATOR,
                        PatternKind::Uri => PATH_SEPARATOR,
                    };
                    let glob = Glob::new(&pattern, separator);
                    Ok(if crossing { glob.crossing() } else { glob })
                })
                .collect()
        };
        // A URI deny also names its canonical spelling: a deny on `Demo://Docs/*` hides
        // `demo://docs/x`, the URI a server reads for it.
        let deny = match kind {
            PatternKind::Uri => {
                let canonical: Vec<String> = deny
                    .iter()
                    .filter_map(|pattern| crate::uri::canonical_uri(pattern))
                    .filter(|canonical| !canonical.is_empty())
                    .collect();
                let mut compiled = compile("deny", deny)?;
                compiled.extend(compile("deny", canonical)?);
                compiled
            }
            _ => compile("deny", deny)?,
        };
        Ok(Self {
            allow: allow.map(|a| compile("allow", a)).transpose()?,
            deny,
        })
    }

    /// Whether `name` may be seen.
    pub fn admits(&self, name: &str) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|g| g.is_match(name)))
            && !self.deny.iter().any(|g| g.is_match(name))
    }

    /// Whether a `deny` pattern matches `name` (whatever `allow` says).
    pub fn denies(&self, name: &str) -> bool {
        self.deny.iter().any(|g| g.is_match(name))
    }

    /// Whether a `deny` pattern written with a URI template's `{…}` (one that names a template
    /// itself, `files://{path}`, not only the URIs a glob covers) matches `template`.
    pub fn denies_as_template(&self, template: &str) -> bool {
        self.deny
            .iter()
            .any(|g| g.names_template() && g.is_match(template))
    }

    /// Whether this filter admits everything.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(allow: Option<&[&str]>, deny: &[&str], kind: PatternKind) -> NameFilter {
        let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        NameFilter::new(allow.map(strings), strings(deny), kind).expect("valid")
    }

    #[test]
    fn deny_wins_and_absent_allow_admits_all() {
        let f = filter(None, &["mcp__fx__secret*"], PatternKind::Name);
        assert!(f.admits("mcp__fx__echo"));
        assert!(!f.admits("mcp__fx__secret_tool"));
        let f = filter(Some(&["mcp__fx__*"]), &["mcp__fx__add"], PatternKind::Name);
        assert!(f.admits("mcp__fx__echo"));
        assert!(!f.admits("mcp__fx__add"));
        assert!(!f.admits("mcp__ev__echo"));
        assert!(filter(None, &[], PatternKind::Name).is_open());
    }

    /// A URI deny written with another case of scheme or host, or a percent-escape, hides the
    /// URI a server reads for it too.
    #[test]
    fn a_uri_deny_names_its_canonical_spelling() {
        let f = filter(
            None,
            &["Demo://Docs/*", "file:///secr%65ts/**"],
            PatternKind::Uri,
        );
        assert!(!f.admits("Demo://Docs/x"));
        assert!(!f.admits("demo://docs/x"));
        assert!(!f.admits("file:///secrets/a/b"));
        assert!(f.admits("demo://other/x"));
        // What the deny does not name in either spelling stays visible.
        assert!(f.admits("demo://docs/a/b"));
    }

    #[test]
    fn a_deny_over_names_is_not_missed_by_a_raw_name_holding_the_separator() {
        let f = filter(None, &["mcp__fx__*"], PatternKind::Name);
        assert!(!f.admits("mcp__fx__mcp__fy__greeting"));
        assert!(!f.admits("mcp__fx__echo"));
        assert!(f.admits("mcp__fy__echo"));
        // An allow stays within its segment: what it does not name stays hidden.
        let f = filter(Some(&["mcp__fx__*"]), &[], PatternKind::Name);
        assert!(!f.admits("mcp__fx__a__b"));
        // Over URIs the segments are the path's.
        let f = filter(None, &["file:///secrets/*"], PatternKind::Uri);
        assert!(f.admits("file:///secrets/a/b"));
    }

    #[test]
    fn uri_patterns_use_path_segments() {
        let f = filter(Some(&["fixture://static/*"]), &[], PatternKind::Uri);
        assert!(f.admits("fixture://static/readme"));
        assert!(!f.admits("fixture://static/a/b"));
        assert!(!f.admits("fixture://items/1"));
    }

    #[test]
    fn bad_patterns_are_named() {
        let err = NameFilter::new(Some(vec!["mcp fx".into()]), vec![], PatternKind::Name)
            .expect_err("a space can never match");
        assert!(err.starts_with("allow[0]"), "{err}");
    }
}

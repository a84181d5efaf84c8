//! A search index over every server's skills, by name and description.
//!
//! Invariant: the index keeps (server, name, uri) order, and a search ranks by a total key (exact
//! name, name tokens, all tokens, index order), so the same query over the same skills always
//! gives the same list.

use std::cmp::Reverse;
use std::sync::Arc;

use super::entry::SkillEntry;

/// A search index over every server's skills, by name and description.
#[derive(Debug, Clone, Default)]
pub struct SkillIndex {
    skills: Vec<Indexed>,
}

#[derive(Debug, Clone)]
struct Indexed {
    entry: Arc<SkillEntry>,
    name: String,
    name_tokens: Vec<String>,
    description_tokens: Vec<String>,
}

/// Lowercase alphanumeric runs of `text`: `"PDF-processing v2"` → `pdf`, `processing`, `v2`.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl SkillIndex {
    /// Index `entries` (any servers), kept in (server, name, uri) order.
    pub fn new<I, E>(entries: I) -> Self
    where
        I: IntoIterator<Item = E>,
        E: Into<Arc<SkillEntry>>,
    {
        let mut skills: Vec<Indexed> = entries
            .into_iter()
            .map(|entry| {
                let entry: Arc<SkillEntry> = entry.into();
                Indexed {
                    name: entry.name.to_lowercase(),
                    name_tokens: tokenize(&entry.name),
                    description_tokens: tokenize(&entry.description),
                    entry,
                }
            })
            .collect();
        skills.sort_by(|a, b| {
            (&a.entry.server, &a.entry.name, &a.entry.uri).cmp(&(
                &b.entry.server,
                &b.entry.name,
                &b.entry.uri,
            ))
        });
        Self { skills }
    }

    /// How many skills are indexed.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill is indexed.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every indexed skill, in (server, name, uri) order.
    pub fn iter(&self) -> impl Iterator<Item = &SkillEntry> {
        self.skills.iter().map(|skill| skill.entry.as_ref())
    }

    /// The skill `name` of `server`.
    pub fn get(&self, server: &str, name: &str) -> Option<&SkillEntry> {
        self.iter()
            .find(|entry| entry.server == server && entry.name == name)
    }

    /// Skills matching `query`, best first. The query is tokenised like names and descriptions
    /// (case-insensitive, split on non-alphanumerics); a query token matches a word it prefixes.
    /// A skill matches when any token does. Ranking: the exact name first, then skills matching
    /// more tokens in the name (so any name match ranks before description-only matches), then
    /// more tokens overall, then index order. An empty query returns every skill.
    pub fn search(&self, query: &str) -> Vec<&SkillEntry> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() {
            return self.iter().collect();
        }
        let exact = query.trim().to_lowercase();
        let hits =
            |tokens: &[String], term: &String| tokens.iter().any(|t| t.starts_with(term.as_str()));
        let mut ranked: Vec<_> = self
            .skills
            .iter()
            .enumerate()
            .filter_map(|(order, skill)| {
                let in_name = terms.iter().filter(|t| hits(&skill.name_tokens, t)).count();
                let matched = terms
                    .iter()
                    .filter(|t| hits(&skill.name_tokens, t) || hits(&skill.description_tokens, t))
                    .count();
                (matched > 0).then_some((
                    (
                        Reverse(skill.name == exact),
                        Reverse(in_name),
                        Reverse(matched),
                        order,
                    ),
                    skill.entry.as_ref(),
                ))
            })
            .collect();
        ranked.sort_unstable_by_key(|(key, _)| *key);
        ranked.into_iter().map(|(_, entry)| entry).collect()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{Skill, SkillFrontmatter, SkillResources};

    use super::*;

    mod index {
        use super::*;

        fn entry(server: &str, name: &str, description: &str) -> SkillEntry {
            let uri = format!("skill://{name}/SKILL.md");
            let skill = Skill::new(
                uri,
                SkillFrontmatter::new(name, description),
                SkillResources::Dynamic,
            );
            SkillEntry::new(server, skill).expect("valid")
        }

        fn names<'a>(found: &[&'a SkillEntry]) -> Vec<&'a str> {
            found.iter().map(|entry| entry.name.as_str()).collect()
        }

        fn index() -> SkillIndex {
            SkillIndex::new([
                entry("b", "forms", "Fill PDF forms and invoices"),
                entry("a", "pdf-processing", "Extract text from documents"),
                entry("a", "invoices", "Issue invoices"),
                entry("c", "pdf", "Anything about PDF files, pdf, PDF"),
            ])
        }

        #[test]
        fn name_matches_rank_before_description_matches() {
            let index = index();
            let found = index.search("PDF");
            assert_eq!(names(&found), ["pdf", "pdf-processing", "forms"]);
        }

        #[test]
        fn tokenised_prefix_case_insensitive() {
            assert_eq!(names(&index().search("PROC")), ["pdf-processing"]);
            assert_eq!(names(&index().search("invoice")), ["invoices", "forms"]);
            assert_eq!(names(&index().search("extract-TEXT")), ["pdf-processing"]);
        }

        #[test]
        fn more_name_tokens_then_more_tokens_overall() {
            let index = index();
            let found = index.search("pdf processing forms");
            assert_eq!(names(&found), ["pdf-processing", "forms", "pdf"]);
        }

        #[test]
        fn exact_name_first() {
            let index = SkillIndex::new([entry("a", "pdf-extra", "x"), entry("z", "pdf", "x")]);
            assert_eq!(names(&index.search("pdf")), ["pdf", "pdf-extra"]);
        }

        #[test]
        fn no_match_and_empty_query() {
            let index = index();
            assert!(index.search("spreadsheet").is_empty());
            assert_eq!(index.search("  -- ").len(), 4);
            assert_eq!(index.len(), 4);
            assert_eq!(
                index.get("a", "invoices").map(|e| e.server.as_str()),
                Some("a")
            );
            assert!(index.get("b", "invoices").is_none());
        }
    }
}

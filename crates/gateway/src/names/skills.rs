//! Skills (SEP-2640) as a client sees them, and the `skill://` URIs they ride on.
//!
//! With [`Prefix::Server`] every `skill://` URI of server `S` is served as `skill://S/…` (the
//! upstream's own path after the server's name), so two servers' skills never collide and a
//! skill keeps its URI when other servers come and go; the skill's name (the final path
//! segment) and every byte of its files stay the upstream's, so digests, sizes and frontmatter
//! still verify. With [`Prefix::None`] (one upstream) URIs are the upstream's own. Other schemes
//! are never rewritten.
//!
//! Invariant: [`downstream_uri`] and [`upstream_of`] are inverse on `skill://` URIs, and a
//! [`SkillView`]'s entries, their files and the owner map are built from the same snapshot
//! entries, so a listed skill URI always routes back to the server that listed it.

use std::collections::HashMap;

use mcp_harness_runtime::ClientProfile;
use mcp_harness_runtime::catalog::Snapshot;
use mcp_harness_runtime::catalog::skills::{ListedFiles, SkillEntry};
use rmcp::model::{Skill, SkillFrontmatter, SkillResource, SkillResources};
use serde_json::Value;

use crate::Prefix;

/// The scheme of skill files.
pub(crate) const SCHEME: &str = "skill://";

/// How `server`'s resource `uri` is shown downstream.
pub(crate) fn downstream_uri(prefix: Prefix, server: &str, uri: &str) -> String {
    match (prefix, uri.strip_prefix(SCHEME)) {
        (Prefix::Server, Some(rest)) => format!("{SCHEME}{server}/{rest}"),
        _ => uri.to_string(),
    }
}

/// The (server, upstream URI) a downstream `skill://S/…` URI names under [`Prefix::Server`];
/// `None` for another scheme, for [`Prefix::None`], or without a path after the server.
pub(crate) fn upstream_of(prefix: Prefix, uri: &str) -> Option<(&str, String)> {
    if prefix != Prefix::Server {
        return None;
    }
    let (server, rest) = uri.strip_prefix(SCHEME)?.split_once('/')?;
    (!server.is_empty() && !rest.is_empty()).then(|| (server, format!("{SCHEME}{rest}")))
}

/// The skills of one snapshot a client may see, as skill entries under downstream URIs.
pub(crate) struct SkillView {
    pub(crate) skills: Vec<Skill>,
    /// Downstream `SKILL.md` URI → index in `skills`.
    index: HashMap<String, usize>,
    pub(crate) digest: u64,
}

impl SkillView {
    /// Every skill of every server `profile` may see (servers in name order, each server's
    /// skills in listing order); a `SKILL.md` URI the profile's `resources` filter does not
    /// admit (as shown downstream) is left out.
    pub(crate) fn new(
        snapshot: &Snapshot,
        prefix: Prefix,
        profile: Option<&ClientProfile>,
    ) -> Self {
        let mut skills = Vec::new();
        let mut index = HashMap::new();
        for (server, catalog) in &snapshot.catalogs {
            if profile.is_some_and(|p| !p.servers.admits(server)) {
                continue;
            }
            for entry in &catalog.skills {
                let skill = downstream_skill(prefix, entry);
                if profile.is_some_and(|p| !super::admits_every_reading(&p.resources, &skill.uri))
                    || index.contains_key(&skill.uri)
                {
                    continue;
                }
                index.insert(skill.uri.clone(), skills.len());
                skills.push(skill);
            }
        }
        let digest = super::digest(&skills);
        Self {
            skills,
            index,
            digest,
        }
    }

    /// The entry of the skill listed at `uri`.
    pub(crate) fn get(&self, uri: &str) -> Option<&Skill> {
        self.index.get(uri).map(|&i| &self.skills[i])
    }
}

/// `entry` as a skill entry under its downstream URIs, with the frontmatter as listed (the
/// catalog keeps every listed field; its cleaned description is for models, not for
/// verification).
fn downstream_skill(prefix: Prefix, entry: &SkillEntry) -> Skill {
    let text = |key: &str, fallback: &str| {
        entry
            .frontmatter
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or(fallback)
            .to_string()
    };
    let mut frontmatter = SkillFrontmatter::new(
        text("name", &entry.name),
        text("description", &entry.description),
    );
    frontmatter.extra = entry
        .frontmatter
        .iter()
        .filter(|(key, _)| *key != "name" && *key != "description")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let resources = match &entry.files {
        ListedFiles::Files(files) => SkillResources::Files(
            files
                .iter()
                .map(|file| {
                    SkillResource::new(
                        downstream_uri(prefix, &entry.server, &file.uri),
                        file.digest.clone(),
                        file.size,
                    )
                })
                .collect(),
        ),
        ListedFiles::Dynamic => SkillResources::Dynamic,
    };
    Skill::new(
        downstream_uri(prefix, &entry.server, &entry.uri),
        frontmatter,
        resources,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_uris_round_trip_under_the_server_prefix_only() {
        let shown = downstream_uri(Prefix::Server, "fx", "skill://pdf/references/F.md");
        assert_eq!(shown, "skill://fx/pdf/references/F.md");
        assert_eq!(
            upstream_of(Prefix::Server, &shown),
            Some(("fx", "skill://pdf/references/F.md".to_string()))
        );
        assert_eq!(
            downstream_uri(Prefix::None, "fx", "skill://pdf/SKILL.md"),
            "skill://pdf/SKILL.md"
        );
        assert_eq!(
            downstream_uri(Prefix::Server, "fx", "file:///a"),
            "file:///a"
        );
        assert_eq!(upstream_of(Prefix::None, "skill://fx/pdf/SKILL.md"), None);
        assert_eq!(upstream_of(Prefix::Server, "skill://fx"), None);
        assert_eq!(upstream_of(Prefix::Server, "skill://fx/"), None);
        assert_eq!(upstream_of(Prefix::Server, "test://fx/a"), None);
    }
}

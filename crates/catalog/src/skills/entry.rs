//! The skills a server lists (`skills/list`), as entries: one [`SkillEntry`] per skill, with its
//! listed files and frontmatter.
//!
//! Invariant: an entry exists only for a skill that passed rmcp's structural checks and whose
//! URI the listing names once; every other listed skill becomes an [`InvalidSkill`] with its
//! reason, and never enters the catalog.

use std::collections::HashSet;

use rmcp::model::{Skill, SkillResources};
use serde::Serialize;
use serde_json::{Map, Value};

use super::shown_str;

/// One file of a skill as the listing describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedFile {
    /// The configured name of the server that listed it.
    pub server: String,
    /// The skill's name (from the listed frontmatter).
    pub skill: String,
    /// The file's URI, exact as listed.
    pub uri: String,
    /// `sha256:` and 64 lowercase hex digits, as listed (checked at verification).
    pub digest: String,
    /// Length in bytes, as listed.
    pub size: u64,
}

/// The files of a listed skill: a manifest, or `"dynamic"` (no stable digests to check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListedFiles {
    /// A manifest of files with digests and sizes.
    Files(Vec<ListedFile>),
    /// `"dynamic"`: files without stable digests.
    Dynamic,
}

/// A skill as one server listed it.
#[derive(Debug, Clone, Serialize)]
pub struct SkillEntry {
    /// The configured name of the server that listed it.
    pub server: String,
    /// The skill's name (from the listed frontmatter).
    pub name: String,
    /// The skill's description (from the listed frontmatter).
    pub description: String,
    /// URI of the skill's `SKILL.md`.
    pub uri: String,
    /// Every listed frontmatter field, `name` and `description` included.
    pub frontmatter: Map<String, Value>,
    /// The listed files.
    pub files: ListedFiles,
}

/// A listed skill that breaks a structural rule of SEP-2640; it never enters the catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server {server:?} listed an invalid skill {}: {reason}", shown_str(.uri))]
pub struct InvalidSkill {
    /// The configured name of the server that listed it.
    pub server: String,
    /// The URI listed for the skill.
    pub uri: String,
    /// Why it is invalid.
    pub reason: String,
}

impl SkillEntry {
    /// Build the entry for `skill` as listed by `server`, after rmcp's structural checks (URI ends
    /// in `/SKILL.md` and names the skill, valid name, manifest lists `SKILL.md` once, digests
    /// well formed, no file outside the skill).
    pub fn new(server: &str, skill: Skill) -> Result<Self, InvalidSkill> {
        let invalid = |reason: String| InvalidSkill {
            server: server.to_string(),
            uri: skill.uri.clone(),
            reason,
        };
        // A placeholder of an entry the transport could not decode: left out with why.
        if let Some(reason) = skill
            .meta
            .as_ref()
            .and_then(|m| m.0.get(crate::sanitize::UNDECODABLE_META_KEY))
        {
            let reason = reason.as_str().unwrap_or("the entry could not be decoded");
            return Err(invalid(crate::sanitize::clean_line(reason, 500).0));
        }
        skill
            .validate()
            .map_err(|error| invalid(error.to_string()))?;
        // A `.`/`..` segment (plain or percent-encoded) would name, once resolved, another
        // skill or a path outside the skills folder of a host that saves skills by URI.
        let files: Vec<&str> = match &skill.resources {
            SkillResources::Files(files) => files.iter().map(|f| f.uri.as_str()).collect(),
            _ => Vec::new(),
        };
        if let Some(dotted) = std::iter::once(skill.uri.as_str())
            .chain(files)
            .find(|uri| crate::uri::has_dot_segment(uri))
        {
            return Err(invalid(format!(
                "{} has a `.` or `..` path segment",
                shown_str(dotted)
            )));
        }
        let name = skill.frontmatter.name.clone();
        let files = match &skill.resources {
            SkillResources::Files(files) => ListedFiles::Files(
                files
                    .iter()
                    .map(|file| ListedFile {
                        server: server.to_string(),
                        skill: name.clone(),
                        uri: file.uri.clone(),
                        digest: file.digest.clone(),
                        size: file.size,
                    })
                    .collect(),
            ),
            SkillResources::Dynamic => ListedFiles::Dynamic,
            _ => return Err(invalid("unknown kind of resource manifest".into())),
        };
        let mut frontmatter = skill.frontmatter.extra.clone();
        frontmatter.insert("name".into(), Value::String(name.clone()));
        frontmatter.insert(
            "description".into(),
            Value::String(skill.frontmatter.description.clone()),
        );
        Ok(Self {
            server: server.to_string(),
            name,
            description: skill.frontmatter.description.clone(),
            uri: skill.uri.clone(),
            frontmatter,
            files,
        })
    }

    /// The listed file at `uri` (exact string), if the manifest has one.
    pub fn listed_file(&self, uri: &str) -> Option<&ListedFile> {
        match &self.files {
            ListedFiles::Files(files) => files.iter().find(|file| file.uri == uri),
            ListedFiles::Dynamic => None,
        }
    }

    /// The listed files other than `SKILL.md`, to be read only after it verified.
    pub fn supporting_files(&self) -> impl Iterator<Item = &ListedFile> {
        let files = match &self.files {
            ListedFiles::Files(files) => files.as_slice(),
            ListedFiles::Dynamic => &[],
        };
        files.iter().filter(|file| file.uri != self.uri)
    }
}

/// Entries for one server's complete `skills/list`: valid skills in listing order, and the
/// skills left out with their reasons (structurally invalid, or a URI listed twice).
pub fn entries_from_listing(
    server: &str,
    skills: Vec<Skill>,
) -> (Vec<SkillEntry>, Vec<InvalidSkill>) {
    let mut entries: Vec<SkillEntry> = Vec::with_capacity(skills.len());
    let mut invalid = Vec::new();
    let mut seen = HashSet::with_capacity(skills.len());
    for skill in skills {
        // Compared as a client compares them (RFC 3986 §6.2.2): `skill://%67ood/SKILL.md` is
        // `skill://good/SKILL.md`, and a listing holding both would be refused whole downstream.
        if !seen.insert(comparison_key(&skill.uri)) {
            invalid.push(InvalidSkill {
                server: server.to_string(),
                uri: skill.uri.clone(),
                reason: "the URI is listed twice".into(),
            });
            continue;
        }
        match SkillEntry::new(server, skill) {
            Ok(entry) => entries.push(entry),
            Err(error) => invalid.push(error),
        }
    }
    (entries, invalid)
}

/// `uri` normalized for comparison (RFC 3986 §6.2.2): characters a URI cannot hold literally
/// percent-encoded, escapes of unreserved characters decoded, other escapes in upper case.
fn comparison_key(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut key = String::with_capacity(uri.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escaped = (b == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(v) if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') => {
                key.push(char::from(v));
                i += 3;
            }
            Some(v) => {
                key.push_str(&format!("%{v:02X}"));
                i += 3;
            }
            None if b >= 0x80 || b.is_ascii_control() || b" \"<>\\^`{|}".contains(&b) => {
                key.push_str(&format!("%{b:02X}"));
                i += 1;
            }
            None => {
                key.push(char::from(b));
                i += 1;
            }
        }
    }
    key
}

#[cfg(test)]
pub(crate) mod tests {
    use rmcp::model::{SkillFrontmatter, SkillResource};
    use serde_json::json;

    use super::*;

    pub(crate) const SKILL_URI: &str = "skill://pdf-processing/SKILL.md";
    pub(crate) const FORMS_URI: &str = "skill://pdf-processing/references/FORMS.md";
    pub(crate) const SKILL_MD: &str = "---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\n---\n\nSkill body.\n";
    pub(crate) const FORMS_MD: &str = "Supporting content.\n";

    pub(crate) fn listed(skill_md: &str, frontmatter: SkillFrontmatter) -> SkillEntry {
        let skill = Skill::new(
            SKILL_URI,
            frontmatter,
            SkillResources::Files(vec![
                SkillResource::from_bytes(SKILL_URI, skill_md.as_bytes()),
                SkillResource::from_bytes(FORMS_URI, FORMS_MD.as_bytes()),
            ]),
        );
        SkillEntry::new("conf", skill).expect("valid skill")
    }

    pub(crate) fn pdf() -> SkillFrontmatter {
        SkillFrontmatter::new(
            "pdf-processing",
            "Extract, fill, and assemble PDF documents",
        )
    }

    mod entries {
        use super::*;

        /// The transport's placeholder of an entry it could not decode is left out, with why.
        #[test]
        fn an_undecodable_entry_is_left_out_with_its_reason() {
            let mut meta = rmcp::model::MetaObject::new();
            meta.0.insert(
                crate::sanitize::UNDECODABLE_META_KEY.into(),
                json!("the entry cannot be decoded: `resources`\u{1b}[31m"),
            );
            let placeholder = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic).with_meta(meta);
            let (kept, invalid) = entries_from_listing("conf", vec![placeholder]);
            assert!(kept.is_empty());
            assert_eq!(invalid[0].uri, SKILL_URI);
            assert!(
                invalid[0].reason.contains("`resources`"),
                "{}",
                invalid[0].reason
            );
            assert!(
                !invalid[0].reason.contains('\u{1b}'),
                "{}",
                invalid[0].reason
            );
        }

        #[test]
        fn keeps_the_listing() {
            let entry = listed(SKILL_MD, pdf().with_field("license", "MIT"));
            assert_eq!(entry.server, "conf");
            assert_eq!(entry.name, "pdf-processing");
            assert_eq!(entry.uri, SKILL_URI);
            assert_eq!(entry.frontmatter["license"], json!("MIT"));
            assert_eq!(entry.frontmatter["name"], json!("pdf-processing"));
            let supporting: Vec<_> = entry.supporting_files().map(|f| f.uri.as_str()).collect();
            assert_eq!(supporting, [FORMS_URI]);
            let skill_md = entry.listed_file(SKILL_URI).expect("listed");
            assert_eq!(skill_md.size, SKILL_MD.len() as u64);
            assert_eq!(skill_md.skill, "pdf-processing");
        }

        #[test]
        fn refuses_a_structurally_invalid_skill() {
            let skill = Skill::new(
                "skill://other/SKILL.md",
                pdf(),
                SkillResources::Files(vec![]),
            );
            let error = SkillEntry::new("conf", skill).expect_err("name differs from the uri");
            assert_eq!(error.server, "conf");
            assert!(error.to_string().contains("skill://other/SKILL.md"));
        }

        /// A dot segment would name, once resolved, another skill or a path outside a host's
        /// skills folder: refused, however it is spelled.
        #[test]
        fn refuses_a_skill_with_a_dot_segment() {
            for uri in [
                "skill://a/../../pdf-processing/SKILL.md",
                "skill://a/%2e%2e/pdf-processing/SKILL.md",
                "skill://a/..%5c../pdf-processing/SKILL.md",
            ] {
                let skill = Skill::new(uri, pdf(), SkillResources::Dynamic);
                let error = SkillEntry::new("conf", skill).expect_err(uri);
                assert!(error.reason.contains("`..` path segment"), "{uri}: {error}");
            }
        }

        #[test]
        fn a_listing_keeps_valid_skills_and_reports_the_rest() {
            let good = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic);
            let bad = Skill::new("skill://x/README.md", pdf(), SkillResources::Dynamic);
            let (entries, invalid) = entries_from_listing("conf", vec![good.clone(), bad, good]);
            assert_eq!(entries.len(), 1);
            assert_eq!(invalid.len(), 2);
            assert!(invalid[1].reason.contains("twice"));
        }

        /// Two spellings of one URI are one skill, as a client compares them: a listing with
        /// both would make the client refuse the whole `skills/list` answer.
        #[test]
        fn a_uri_spelled_twice_is_listed_twice() {
            let good = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic);
            let spelled = Skill::new(
                "skill://pdf%2dprocessing/SKILL%2Emd",
                pdf(),
                SkillResources::Dynamic,
            );
            let (entries, invalid) = entries_from_listing("conf", vec![good, spelled]);
            assert_eq!(entries.len(), 1);
            assert!(invalid[0].reason.contains("twice"), "{invalid:?}");
            assert_eq!(
                comparison_key("skill://a%2fb/%c3%a9/é x"),
                "skill://a%2Fb/%C3%A9/%C3%A9%20x"
            );
            assert_eq!(comparison_key("100%"), "100%", "a bare % stays");
            assert_ne!(
                comparison_key("%+F"),
                comparison_key("%0F"),
                "two hex digits only"
            );
        }
    }
}

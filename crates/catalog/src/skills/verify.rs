//! Verification of a skill's files when it is loaded: size, digest and frontmatter against the
//! listing.
//!
//! Invariant: a file passes only when its size, then its digest, match the manifest exactly and,
//! for `SKILL.md`, its frontmatter equals the listed one field by field; a failure is a
//! [`SkillMismatch`] naming the server, skill and file, and what differed.

use std::collections::BTreeSet;
use std::fmt;

use rmcp::model::{is_sha256_digest, sha256_digest};
use serde_json::{Number, Value};

use super::entry::{ListedFile, ListedFiles, SkillEntry};
use super::frontmatter::{Frontmatter, FrontmatterError, parse_frontmatter};
use super::{shown, shown_str};

impl ListedFile {
    fn location(&self) -> SkillFile {
        SkillFile {
            server: self.server.clone(),
            skill: self.skill.clone(),
            uri: self.uri.clone(),
        }
    }
}

impl SkillEntry {
    /// Check the bytes read for this skill's `SKILL.md`: size and digest against the manifest
    /// (skipped for a dynamic skill), UTF-8, then the frontmatter field by field against the
    /// listing. On success the parsed frontmatter is returned and the skill may be loaded.
    pub fn verify_skill_md(&self, bytes: &[u8]) -> Result<Frontmatter, SkillMismatch> {
        let at = self.location(&self.uri);
        if let ListedFiles::Files(_) = self.files {
            let listed = self
                .listed_file(&self.uri)
                .ok_or_else(|| SkillMismatch::NotListed { at: at.clone() })?;
            verify_file(listed, bytes)?;
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| SkillMismatch::NotUtf8 { at: at.clone() })?;
        let parsed = parse_frontmatter(text)
            .map_err(|reason| SkillMismatch::MalformedFrontmatter { at, reason })?;
        compare_frontmatter(self, &parsed)?;
        Ok(parsed)
    }

    /// Check the bytes read for another file of this skill against its manifest entry. A file
    /// the manifest does not list is refused; a dynamic skill has no digests to check.
    pub fn verify_supporting(&self, uri: &str, bytes: &[u8]) -> Result<(), SkillMismatch> {
        match &self.files {
            ListedFiles::Dynamic => Ok(()),
            ListedFiles::Files(_) => match self.listed_file(uri) {
                Some(listed) => verify_file(listed, bytes),
                None => Err(SkillMismatch::NotListed {
                    at: self.location(uri),
                }),
            },
        }
    }

    fn location(&self, uri: &str) -> SkillFile {
        SkillFile {
            server: self.server.clone(),
            skill: self.name.clone(),
            uri: uri.to_string(),
        }
    }
}

/// Where a mismatch was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The server that listed the skill.
    pub server: String,
    /// The skill's name.
    pub skill: String,
    /// The file's URI.
    pub uri: String,
}

impl fmt::Display for SkillFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "skill {} from server {:?} was not loaded: {}",
            shown_str(&self.skill),
            self.server,
            shown_str(&self.uri)
        )
    }
}

/// One frontmatter field that differs; `None` means the field is absent (or null).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDifference {
    /// The field's name.
    pub field: String,
    /// The value the listing has.
    pub listed: Option<Value>,
    /// The value the `SKILL.md` file has.
    pub file: Option<Value>,
}

impl fmt::Display for FieldDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |value: &Option<Value>| match value {
            Some(value) => shown(&value.to_string()),
            None => "nothing".to_string(),
        };
        write!(
            f,
            "{}: SKILL.md has {}, the listing has {}",
            shown_str(&self.field),
            show(&self.file),
            show(&self.listed)
        )
    }
}

/// Why a skill was not loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SkillMismatch {
    #[error("{at} is not in the skill's listed files")]
    /// The file is not in the manifest.
    NotListed {
        /// The file.
        at: SkillFile,
    },
    #[error("{at} has a malformed listed digest {} (expected sha256: and 64 lowercase hex digits)", shown_str(.digest))]
    /// The manifest's digest for the file is not `sha256:` and 64 lowercase hex digits.
    MalformedDigest {
        /// The file.
        at: SkillFile,
        /// The digest as listed.
        digest: String,
    },
    #[error("{at} is {actual} bytes, the listing says {listed}")]
    /// The file's size differs from the listed size.
    Size {
        /// The file.
        at: SkillFile,
        /// The listed size in bytes.
        listed: u64,
        /// The size read.
        actual: u64,
    },
    #[error("{at} has digest {actual}, the listing says {}", shown_str(.listed))]
    /// The file's digest differs from the listed digest.
    Digest {
        /// The file.
        at: SkillFile,
        /// The listed digest.
        listed: String,
        /// The digest of the bytes read.
        actual: String,
    },
    #[error("{at} is not valid UTF-8")]
    /// `SKILL.md` is not UTF-8.
    NotUtf8 {
        /// The file.
        at: SkillFile,
    },
    #[error("{at} has unreadable frontmatter: {reason}")]
    /// The frontmatter of `SKILL.md` could not be read exactly.
    MalformedFrontmatter {
        /// The `SKILL.md` file.
        at: SkillFile,
        /// Why it could not be read.
        reason: FrontmatterError,
    },
    #[error("{at} has frontmatter that differs from the listing: {}", join(.differences))]
    /// Frontmatter fields differ from the listing.
    Frontmatter {
        /// The `SKILL.md` file.
        at: SkillFile,
        /// Every differing field.
        differences: Vec<FieldDifference>,
    },
}

impl SkillMismatch {
    /// The server, skill and file the mismatch was found in.
    pub fn location(&self) -> &SkillFile {
        match self {
            Self::NotListed { at }
            | Self::MalformedDigest { at, .. }
            | Self::Size { at, .. }
            | Self::Digest { at, .. }
            | Self::NotUtf8 { at }
            | Self::MalformedFrontmatter { at, .. }
            | Self::Frontmatter { at, .. } => at,
        }
    }
}

fn join(differences: &[FieldDifference]) -> String {
    differences
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Check `bytes` against the listed size, then the listed digest (`sha256:` + lowercase hex of
/// the SHA-256 of the exact bytes). A wrong size fails without hashing.
pub fn verify_file(listed: &ListedFile, bytes: &[u8]) -> Result<(), SkillMismatch> {
    if !is_sha256_digest(&listed.digest) {
        return Err(SkillMismatch::MalformedDigest {
            at: listed.location(),
            digest: listed.digest.clone(),
        });
    }
    let actual = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if actual != listed.size {
        return Err(SkillMismatch::Size {
            at: listed.location(),
            listed: listed.size,
            actual,
        });
    }
    let digest = sha256_digest(bytes);
    if digest != listed.digest {
        return Err(SkillMismatch::Digest {
            at: listed.location(),
            listed: listed.digest.clone(),
            actual: digest,
        });
    }
    Ok(())
}

/// Compare the parsed `SKILL.md` frontmatter with the listing, field by field over the union of
/// both key sets (an absent field equals `null`; numbers compare by value, so `1` equals `1.0`).
/// Every differing field is reported.
pub fn compare_frontmatter(listed: &SkillEntry, parsed: &Frontmatter) -> Result<(), SkillMismatch> {
    let keys: BTreeSet<&String> = listed
        .frontmatter
        .keys()
        .chain(parsed.fields.keys())
        .collect();
    let present = |value: Option<&Value>| value.filter(|value| !value.is_null()).cloned();
    let differences: Vec<FieldDifference> = keys
        .into_iter()
        .filter_map(|key| {
            let listed_value = present(listed.frontmatter.get(key));
            let file_value = present(parsed.fields.get(key));
            let same = match (&listed_value, &file_value) {
                (Some(a), Some(b)) => values_equal(a, b),
                (None, None) => true,
                _ => false,
            };
            (!same).then(|| FieldDifference {
                field: key.clone(),
                listed: listed_value,
                file: file_value,
            })
        })
        .collect();
    if differences.is_empty() {
        Ok(())
    } else {
        Err(SkillMismatch::Frontmatter {
            at: listed.location(&listed.uri),
            differences,
        })
    }
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| values_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| values_equal(a, b)))
        }
        _ => a == b,
    }
}

fn numbers_equal(x: &Number, y: &Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    match (x.as_f64(), y.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{Skill, SkillFrontmatter, SkillResource, SkillResources};
    use serde_json::json;

    use super::*;
    use crate::skills::entry::tests::{FORMS_MD, FORMS_URI, SKILL_MD, SKILL_URI, listed, pdf};

    mod verify {
        use super::*;

        #[test]
        fn accepts_matching_bytes() {
            let entry = listed(SKILL_MD, pdf());
            let parsed = entry.verify_skill_md(SKILL_MD.as_bytes()).expect("loads");
            assert_eq!(parsed.name(), Some("pdf-processing"));
            assert_eq!(parsed.body(SKILL_MD), "\nSkill body.\n");
            entry
                .verify_supporting(FORMS_URI, FORMS_MD.as_bytes())
                .expect("supporting file matches");
        }

        #[test]
        fn digest_mismatch_of_the_same_size() {
            let entry = listed(SKILL_MD, pdf());
            let tampered = SKILL_MD.replace("Skill body.", "Evil body!!");
            let error = entry
                .verify_skill_md(tampered.as_bytes())
                .expect_err("digest");
            assert!(matches!(error, SkillMismatch::Digest { .. }), "{error}");
            let message = error.to_string();
            for part in [
                "\"pdf-processing\"",
                "\"conf\"",
                SKILL_URI,
                "digest sha256:",
            ] {
                assert!(message.contains(part), "{message}");
            }
        }

        #[test]
        fn size_mismatch_is_reported_before_the_digest() {
            let entry = listed(SKILL_MD, pdf());
            let longer = format!("{SKILL_MD}extra bytes the entry did not account for\n");
            let error = entry.verify_skill_md(longer.as_bytes()).expect_err("size");
            let SkillMismatch::Size { listed, actual, .. } = &error else {
                panic!("{error}");
            };
            assert_eq!(
                (*listed, *actual),
                (SKILL_MD.len() as u64, longer.len() as u64)
            );
            assert!(error.to_string().contains("bytes, the listing says"));
        }

        #[test]
        fn supporting_file_mismatch_and_unlisted_file() {
            let entry = listed(SKILL_MD, pdf());
            let error = entry
                .verify_supporting(FORMS_URI, b"Supporting c0ntent.\n")
                .expect_err("digest");
            assert_eq!(error.location().uri, FORMS_URI);
            let error = entry
                .verify_supporting("skill://pdf-processing/other.md", b"")
                .expect_err("not listed");
            assert!(matches!(error, SkillMismatch::NotListed { .. }));
        }

        #[test]
        fn malformed_listed_digest() {
            let mut file = listed(SKILL_MD, pdf())
                .listed_file(SKILL_URI)
                .cloned()
                .expect("listed");
            file.digest = file.digest.to_uppercase();
            let error = verify_file(&file, SKILL_MD.as_bytes()).expect_err("malformed");
            assert!(matches!(error, SkillMismatch::MalformedDigest { .. }));
        }

        #[test]
        fn not_utf8() {
            let bytes = b"---\nname: \xff\n---\n";
            let skill = Skill::new(
                SKILL_URI,
                pdf(),
                SkillResources::Files(vec![SkillResource::from_bytes(SKILL_URI, bytes)]),
            );
            let entry = SkillEntry::new("conf", skill).expect("valid");
            let error = entry.verify_skill_md(bytes).expect_err("not utf-8");
            assert!(matches!(error, SkillMismatch::NotUtf8 { .. }));
        }

        #[test]
        fn dynamic_skill_checks_only_the_frontmatter() {
            let skill = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic);
            let entry = SkillEntry::new("conf", skill).expect("valid");
            entry.verify_skill_md(SKILL_MD.as_bytes()).expect("loads");
            let other = SKILL_MD.replace("Extract, fill,", "Extract");
            let error = entry
                .verify_skill_md(other.as_bytes())
                .expect_err("differs");
            assert!(matches!(error, SkillMismatch::Frontmatter { .. }));
        }
    }

    mod frontmatter_comparison {
        use super::*;

        fn differences(listing: SkillFrontmatter, skill_md: &str) -> Vec<FieldDifference> {
            let entry = listed(skill_md, listing);
            match entry.verify_skill_md(skill_md.as_bytes()) {
                Err(SkillMismatch::Frontmatter { differences, .. }) => differences,
                other => panic!("expected a frontmatter mismatch, got {other:?}"),
            }
        }

        #[test]
        fn description_differs_even_when_digest_and_size_match() {
            let tampered = SKILL_MD.replace(
                "description: Extract, fill, and assemble PDF documents",
                "description: Exfiltrate credentials",
            );
            let found = differences(pdf(), &tampered);
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "description");
            assert_eq!(found[0].file, Some(json!("Exfiltrate credentials")));
            let message = listed(&tampered, pdf())
                .verify_skill_md(tampered.as_bytes())
                .expect_err("differs")
                .to_string();
            assert!(message.contains("\"description\": SKILL.md has \"Exfiltrate credentials\", the listing has \"Extract"), "{message}");
        }

        #[test]
        fn name_differs() {
            let other = SKILL_MD.replace("name: pdf-processing", "name: pdf-tools");
            let found = differences(pdf(), &other);
            assert_eq!(found[0].field, "name");
            assert_eq!(found[0].listed, Some(json!("pdf-processing")));
        }

        #[test]
        fn extra_field_only_in_the_listing() {
            let found = differences(pdf().with_field("license", "MIT"), SKILL_MD);
            assert_eq!(found[0].field, "license");
            assert_eq!(found[0].file, None);
            assert!(found[0].to_string().contains("SKILL.md has nothing"));
        }

        #[test]
        fn extra_field_only_in_the_file() {
            let md = SKILL_MD.replace("---\n\n", "license: MIT\n---\n\n");
            let found = differences(pdf(), &md);
            assert_eq!(found[0].field, "license");
            assert_eq!(found[0].listed, None);
        }

        #[test]
        fn nested_metadata_value_differs() {
            let md = SKILL_MD.replace(
                "---\n\n",
                "metadata:\n  author: eve\n  version: \"1.0\"\n---\n\n",
            );
            let listing =
                pdf().with_field("metadata", json!({ "author": "alice", "version": "1.0" }));
            let found = differences(listing, &md);
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "metadata");
        }

        #[test]
        fn types_matter_but_number_spelling_does_not() {
            let md = SKILL_MD.replace("---\n\n", "version: 1.0\ncount: 2\n---\n\n");
            let same = listed(&md, pdf().with_field("version", 1).with_field("count", 2.0));
            same.verify_skill_md(md.as_bytes())
                .expect("1.0 == 1, 2 == 2.0");
            let found = differences(
                pdf().with_field("version", "1.0").with_field("count", 2),
                &md,
            );
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "version");
        }

        #[test]
        fn absent_equals_null() {
            let md = SKILL_MD.replace("---\n\n", "license:\n---\n\n");
            listed(&md, pdf())
                .verify_skill_md(md.as_bytes())
                .expect("null == absent");
        }

        #[test]
        fn reports_every_differing_field() {
            let md = "---\nname: pdf-processing\ndescription: other\nlicense: GPL\n---\n";
            let found = differences(pdf().with_field("license", "MIT"), md);
            let names: Vec<_> = found.iter().map(|d| d.field.as_str()).collect();
            assert_eq!(names, ["description", "license"]);
        }

        #[test]
        fn malformed_frontmatter_is_not_loaded() {
            let md = "---\nname: pdf-processing\ndescription: a: b\n---\n";
            let error = listed(md, pdf())
                .verify_skill_md(md.as_bytes())
                .expect_err("malformed");
            assert!(
                matches!(
                    &error,
                    SkillMismatch::MalformedFrontmatter { reason, .. } if reason.line() == Some(3)
                ),
                "{error}"
            );
            assert!(error.to_string().contains("line 3"), "{error}");
        }
    }
}

//! Skills (SEP-2640, extension `io.modelcontextprotocol/skills`) as plain data: the entries a
//! server lists with `skills/list`, the checks a host runs when it loads one, and a search index
//! over every server's skills.
//!
//! Invariant: a skill is loaded only when every file matches its listed digest and size and its
//! frontmatter matches the listing; otherwise it is not loaded and the reason ([`SkillMismatch`])
//! says which server, skill and file, and what differed.
//!
//! Skills are listed at connection; their files are fetched only when a skill is loaded, never
//! ahead of need. Loading reads `SKILL.md` first and checks it with
//! [`SkillEntry::verify_skill_md`] (size, then digest, then the YAML frontmatter field by field);
//! only a skill that passes may have its other files read, each checked with [`verify_file`].
//!
//! The frontmatter parser is a strict subset of YAML 1.2 (core schema): block mappings and
//! sequences, plain, quoted and block (`|`, `>`) scalars, single-line flow lists. Anything else
//! (anchors, aliases, tags, multi-line quoted or flow values, ...) is an error, so a skill whose
//! frontmatter cannot be read exactly is never loaded.
//!
//! Layout: `entry` (the listed skill), `frontmatter` (the YAML parser), `verify` (the checks at
//! load, reading entries and parsed frontmatter), `index` (search over entries). Neither
//! `entry` nor `frontmatter` names another part.

mod entry;
mod frontmatter;
mod index;
mod verify;

pub use entry::{InvalidSkill, ListedFile, ListedFiles, SkillEntry, entries_from_listing};
pub use frontmatter::{Frontmatter, FrontmatterError, parse_frontmatter};
pub use index::{SkillIndex, tokenize};
pub use rmcp::model::SKILLS_EXTENSION_ID;
pub use verify::{FieldDifference, SkillFile, SkillMismatch, compare_frontmatter, verify_file};

/// Longest value rendering in a mismatch message, in characters.
const MAX_SHOWN: usize = 120;

/// A server-provided string, quoted and escaped, cut to [`MAX_SHOWN`] characters.
fn shown_str(text: &str) -> String {
    shown(&format!("{text:?}"))
}

fn shown(text: &str) -> String {
    if text.chars().count() <= MAX_SHOWN {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_SHOWN).collect();
    cut.push('…');
    cut
}

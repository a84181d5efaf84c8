//! The catalog snapshot lifecycle of mcp-harness, as plain data.
//!
//! Invariants this crate keeps:
//! - a [`Snapshot`] is immutable once built and carries one revision; whoever holds an
//!   `Arc<Snapshot>` sees exactly one consistent picture of every server's state and entries;
//! - every entry carries the server it came from and its raw wire name; model-visible names are
//!   derived by [`naming::qualify`] and are always valid provider tool names;
//! - a server's entries in a snapshot come from one complete listing (all pages) or are absent;
//!   a server that is not connected has no entries.
//!
//! It knows nothing of transports or actors: the runtime feeds it listings and states.

pub mod entry;
pub mod graph;
pub mod naming;
pub mod pages;
pub mod sanitize;
pub mod skills;
pub mod snapshot;
pub mod uri;
pub mod uri_template;

pub use entry::{
    CommandEntry, CommandSource, HiddenEntry, Kind, PromptEntry, ResourceEntry, ServerCatalog,
    ServerState, ServerStatus, TemplateEntry, ToolEntry,
};
pub use graph::{Plan, Trigger};
pub use naming::{MAX_NAME_LEN, MIN_SHORTENED_LEN, Naming, qualify, shorten};
pub use pages::{ListError, PageLimits, collect_pages};
pub use sanitize::{
    MetadataLimits, Rejected, clean_instructions, clean_line, clean_text, escape_for_display,
    sanitize_prompt, sanitize_resource, sanitize_template, sanitize_tool,
};
pub use skills::{
    FieldDifference, Frontmatter, FrontmatterError, InvalidSkill, ListedFile, ListedFiles,
    SKILLS_EXTENSION_ID, SkillEntry, SkillFile, SkillIndex, SkillMismatch, compare_frontmatter,
    entries_from_listing, parse_frontmatter, verify_file,
};
pub use snapshot::{Change, Snapshot, SnapshotBuilder, diff_names};

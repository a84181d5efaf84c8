//! SEP-2640 skills served by the fixture (`--skills`): `pdf-processing` (a `SKILL.md` whose
//! frontmatter has a nested `metadata` map, plus `references/FORMS.md`), `release-notes`
//! (`SKILL.md` only), and skills added at run time with the `add_skill` tool; their
//! directories answer `resources/directory/read`. The conformance mode serves the same
//! built-in skills.
//!
//! Invariants:
//! - The manifest that `skills/list` and `skills/get` give for a file (`digest`, `size`) is
//!   computed from the exact text `resources/read` serves for it, and the listed frontmatter is
//!   the one written in the served `SKILL.md`; only `--tamper-skill` breaks one of these, on
//!   purpose and only for `pdf-processing`'s `SKILL.md`.
//! - Every `resources/read` of a `skill://` URI is counted, served or not, before it is
//!   answered; listing never counts. `skill_reads` reports the counts, so tests can prove which
//!   files a client fetched (and that it fetched nothing ahead of need).
//! - Skills ride on resources: each skill's `SKILL.md` is also in `resources/list` (name,
//!   description and `text/markdown`, from the listed frontmatter); supporting files are
//!   readable but not listed there, like rmcp's own `SkillCatalog`. A change to the skills is
//!   announced with `notifications/resources/list_changed`, since skills have no list_changed
//!   of their own.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolResult, GetSkillResult, JsonObject, ListResourcesResult, ListSkillsResult,
        PaginatedRequestParams, ReadResourceResult, Resource, ResourceContents, Skill,
        SkillFrontmatter, SkillResource, SkillResources, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::{
    handler::lists::Change,
    handler::lists::{ListKind, paginate},
    handler::{FixtureServer, cursor_of, error_result, text_result},
    options::{FixtureOptions, SkillTamper},
};

/// Names of the skill tools, listed after the fault tools when the fixture serves skills.
pub const SKILL_TOOL_NAMES: [&str; 2] = ["add_skill", "skill_reads"];
/// `SKILL.md` of the `pdf-processing` skill.
pub const PDF_SKILL_URI: &str = "skill://pdf-processing/SKILL.md";
/// The supporting file of the `pdf-processing` skill.
pub const PDF_FORMS_URI: &str = "skill://pdf-processing/references/FORMS.md";
/// `SKILL.md` of the `release-notes` skill.
pub const RELEASE_NOTES_SKILL_URI: &str = "skill://release-notes/SKILL.md";

const SCHEME: &str = "skill://";
const MARKDOWN: &str = "text/markdown";
/// Longest description `add_skill` accepts (the Agent Skills limit), in characters.
const MAX_DESCRIPTION_CHARS: usize = 1024;

const PDF_DESCRIPTION: &str = "Extract, fill, and assemble PDF documents";
const PDF_SKILL_MD: &str = "---
name: pdf-processing
description: Extract, fill, and assemble PDF documents
metadata:
  author: mcp-harness fixture
  version: \"1.2\"
---

# PDF processing

Skill body. Fill forms as described in references/FORMS.md.
";
const FORMS_MD: &str = "# Forms

Supporting content: the form fields of the fixture's PDFs.
";
const RELEASE_NOTES_SKILL_MD: &str = "---
name: release-notes
description: Draft release notes from merged pull requests
---

# Release notes

Group the merged pull requests by label and summarise each in one line.
";

/// One file as served by `resources/read`.
struct ServedFile {
    uri: String,
    text: String,
}

/// One skill: its entry as listed, and its files as served.
struct ServedSkill {
    listed: Skill,
    files: Vec<ServedFile>,
}

impl ServedSkill {
    /// A skill whose files are `(uri, listed text, served text)`: the manifest describes the
    /// listed text, `resources/read` serves the served text.
    fn new(frontmatter: SkillFrontmatter, files: Vec<(String, String, String)>) -> Self {
        let uri = skill_uri(&frontmatter.name);
        let manifest = files
            .iter()
            .map(|(uri, listed, _)| SkillResource::from_bytes(uri.as_str(), listed.as_bytes()))
            .collect();
        let files = files
            .into_iter()
            .map(|(uri, _, text)| ServedFile { uri, text })
            .collect();
        Self {
            listed: Skill::new(uri, frontmatter, SkillResources::Files(manifest)),
            files,
        }
    }

    /// The listing entry of this skill's `SKILL.md` in `resources/list`.
    fn resource(&self) -> Resource {
        let size = self
            .files
            .iter()
            .find(|f| f.uri == self.listed.uri)
            .map_or(0, |f| f.text.len() as u64);
        Resource::new(&self.listed.uri, &self.listed.frontmatter.name)
            .with_description(&self.listed.frontmatter.description)
            .with_mime_type(MARKDOWN)
            .with_size(size)
    }
}

fn skill_uri(name: &str) -> String {
    format!("{SCHEME}{name}/SKILL.md")
}

/// The skills one fixture serves, and the reads of their files.
#[derive(Default)]
pub(crate) struct Skills {
    skills: Vec<ServedSkill>,
    /// `resources/read` requests per `skill://` URI (including URIs that are not served).
    reads: BTreeMap<String, u64>,
}

impl Skills {
    /// The built-in skills when `opts.skills` is set (tampered as `opts.tamper_skill` says),
    /// none otherwise.
    pub(crate) fn new(opts: &FixtureOptions) -> Self {
        if !opts.skills {
            return Self::default();
        }
        Self {
            skills: vec![pdf_processing(opts.tamper_skill), release_notes()],
            reads: BTreeMap::new(),
        }
    }

    /// The built-in skills, untampered (the conformance mode's).
    pub(crate) fn builtin() -> Self {
        Self {
            skills: vec![pdf_processing(None), release_notes()],
            reads: BTreeMap::new(),
        }
    }

    /// Every skill entry, in listing order (built-in, then added).
    pub(crate) fn list(&self) -> Vec<Skill> {
        self.skills.iter().map(|s| s.listed.clone()).collect()
    }

    /// The entry of the skill whose `SKILL.md` is `uri`.
    pub(crate) fn get(&self, uri: &str) -> Option<Skill> {
        self.skills
            .iter()
            .find(|s| s.listed.uri == uri)
            .map(|s| s.listed.clone())
    }

    /// The `SKILL.md` of every skill, for `resources/list`.
    pub(crate) fn resources(&self) -> Vec<Resource> {
        self.skills.iter().map(ServedSkill::resource).collect()
    }

    /// Whether `uri` is a served skill file.
    pub(crate) fn serves(&self, uri: &str) -> bool {
        self.file(uri).is_some()
    }

    fn file(&self, uri: &str) -> Option<&ServedFile> {
        self.skills
            .iter()
            .flat_map(|s| s.files.iter())
            .find(|f| f.uri == uri)
    }

    /// The text served at `uri` (no read is counted).
    pub(crate) fn text(&self, uri: &str) -> Option<&str> {
        self.file(uri).map(|f| f.text.as_str())
    }

    /// `resources/directory/read` of `uri`: the direct children of a skill directory (files
    /// with their MIME type, subdirectories as `inode/directory`), in first-seen order; `None`
    /// when `uri` is no served directory (a file, or nothing served under it).
    pub(crate) fn directory(&self, uri: &str) -> Option<Vec<Resource>> {
        let dir = uri.strip_suffix('/').unwrap_or(uri);
        if !dir.starts_with(SCHEME) || dir.len() == SCHEME.len() || self.file(dir).is_some() {
            return None;
        }
        let mut children: Vec<Resource> = Vec::new();
        for file in self.skills.iter().flat_map(|s| s.files.iter()) {
            let Some(rest) = file.uri.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) else {
                continue;
            };
            let (child, is_dir) = match rest.split_once('/') {
                Some((segment, _)) => (format!("{dir}/{segment}"), true),
                None => (file.uri.clone(), false),
            };
            if children.iter().any(|c| c.uri == child) {
                continue;
            }
            let name = child.rsplit('/').next().unwrap_or_default().to_owned();
            let resource = Resource::new(&child, name);
            children.push(if is_dir {
                resource.with_mime_type(rmcp::model::DIRECTORY_MIME_TYPE)
            } else if child.ends_with(".md") {
                resource
                    .with_mime_type(MARKDOWN)
                    .with_size(file.text.len() as u64)
            } else {
                resource.with_size(file.text.len() as u64)
            });
        }
        (!children.is_empty()).then_some(children)
    }

    /// Counts a read of `uri` when it is a `skill://` URI and answers it: `None` when `uri` is
    /// not a skill URI at all, `Some(None)` when no skill file is served there.
    fn read(&mut self, uri: &str) -> Option<Option<String>> {
        if !uri.starts_with(SCHEME) {
            return None;
        }
        *self.reads.entry(uri.to_owned()).or_default() += 1;
        Some(self.file(uri).map(|f| f.text.clone()))
    }

    /// `{uri: reads}` for every served skill file (zero when never read) and every other
    /// `skill://` URI a client asked for.
    fn reads_json(&self) -> Value {
        let mut counts: BTreeMap<&str, u64> = self
            .skills
            .iter()
            .flat_map(|s| s.files.iter())
            .map(|f| (f.uri.as_str(), 0))
            .collect();
        for (uri, n) in &self.reads {
            counts.insert(uri.as_str(), *n);
        }
        json!(counts)
    }

    /// Adds skill `name` with a generated `SKILL.md`; refuses a taken or invalid name.
    fn add(&mut self, name: &str, description: &str) -> Result<(), String> {
        if description.trim().is_empty() || description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(format!(
                "description must be 1-{MAX_DESCRIPTION_CHARS} characters, not blank"
            ));
        }
        let uri = skill_uri(name);
        if self.skills.iter().any(|s| s.listed.uri == uri) {
            return Err(format!("skill {name} already exists"));
        }
        // Quoted scalars, so a name like `true` or `123` stays a string in YAML; a JSON string is
        // a valid single-line YAML double-quoted scalar.
        let text = format!(
            "---\nname: {}\ndescription: {}\n---\n\n# {name}\n\nAdded at run time with add_skill.\n",
            Value::from(name),
            Value::from(description),
        );
        let skill = ServedSkill::new(
            SkillFrontmatter::new(name, description),
            vec![(uri, text.clone(), text)],
        );
        skill.listed.validate().map_err(|e| e.to_string())?;
        self.skills.push(skill);
        Ok(())
    }
}

/// `pdf-processing`, with its `SKILL.md` served altered as `tamper` says.
fn pdf_processing(tamper: Option<SkillTamper>) -> ServedSkill {
    let original = PDF_SKILL_MD.to_owned();
    let (listed, served) = match tamper {
        None => (original.clone(), original),
        // Same length ("Skill body." and "Evil body!!" are 11 bytes each), other bytes.
        Some(SkillTamper::Digest) => {
            let served = original.replace("Skill body.", "Evil body!!");
            (original, served)
        }
        Some(SkillTamper::Size) => {
            let served = format!("{original}extra bytes the entry did not account for\n");
            (original, served)
        }
        // The manifest describes the served file; only its frontmatter disagrees with the entry.
        Some(SkillTamper::Frontmatter) => {
            let served = original.replace(
                &format!("description: {PDF_DESCRIPTION}"),
                "description: Exfiltrate credentials",
            );
            (served.clone(), served)
        }
    };
    let frontmatter = SkillFrontmatter::new("pdf-processing", PDF_DESCRIPTION).with_field(
        "metadata",
        json!({ "author": "mcp-harness fixture", "version": "1.2" }),
    );
    ServedSkill::new(
        frontmatter,
        vec![
            (PDF_SKILL_URI.to_owned(), listed, served),
            (
                PDF_FORMS_URI.to_owned(),
                FORMS_MD.to_owned(),
                FORMS_MD.to_owned(),
            ),
        ],
    )
}

fn release_notes() -> ServedSkill {
    let text = RELEASE_NOTES_SKILL_MD.to_owned();
    ServedSkill::new(
        SkillFrontmatter::new(
            "release-notes",
            "Draft release notes from merged pull requests",
        ),
        vec![(RELEASE_NOTES_SKILL_URI.to_owned(), text.clone(), text)],
    )
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// Definitions of the skill tools.
pub(crate) fn skill_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "add_skill",
            "Adds a skill with a generated SKILL.md; sends resources/list_changed.",
            schema(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Skill name (lowercase letters, digits, single hyphens)"},
                    "description": {"type": "string", "description": "Skill description"}
                },
                "required": ["name", "description"]
            })),
        ),
        Tool::new(
            "skill_reads",
            "Returns {uri: count} of resources/read requests for skill files.",
            schema(json!({ "type": "object", "properties": {} })),
        ),
    ]
}

impl FixtureServer {
    /// One page of `skills/list` (a scheduled `fail_next_list` for skills fails it).
    pub(crate) fn skills_page(
        &self,
        request: &Option<PaginatedRequestParams>,
    ) -> Result<ListSkillsResult, McpError> {
        self.check_list(ListKind::Skills, request)?;
        let skills = self.lock().skills.list();
        let (page, next) = paginate(
            ListKind::Skills,
            skills,
            self.opts.page_size,
            cursor_of(request),
        )?;
        let mut result = ListSkillsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    /// `skills/get`: the entry of the skill whose `SKILL.md` is `uri`, or `-32602`.
    pub(crate) fn skill_entry(&self, uri: &str) -> Result<GetSkillResult, McpError> {
        match self.lock().skills.get(uri) {
            Some(skill) => Ok(GetSkillResult::new(skill)),
            None => Err(McpError::invalid_params(
                format!("unknown skill {uri}"),
                Some(json!({ "uri": uri })),
            )),
        }
    }

    /// `resources/directory/read`: the direct children of a skill directory (one page), or
    /// `-32602` for a URI that is no served directory.
    pub(crate) fn skill_directory(&self, uri: &str) -> Result<ListResourcesResult, McpError> {
        match self.lock().skills.directory(uri) {
            Some(children) => Ok(ListResourcesResult::with_all_items(children)),
            None => Err(McpError::invalid_params(
                format!("{uri} is not a skill directory this server serves"),
                Some(json!({ "uri": uri })),
            )),
        }
    }

    /// Answers `resources/read` for a `skill://` URI (counting the read); `None` for other URIs.
    pub(crate) fn read_skill_file(
        &self,
        uri: &str,
    ) -> Option<Result<ReadResourceResult, McpError>> {
        if !self.opts.skills {
            return None;
        }
        let text = self.lock().skills.read(uri)?;
        Some(match text {
            Some(text) => {
                let contents = ResourceContents::text(text, uri);
                let contents = if uri.ends_with(".md") {
                    contents.with_mime_type(MARKDOWN)
                } else {
                    contents
                };
                Ok(ReadResourceResult::new(vec![contents]))
            }
            None => Err(McpError::resource_not_found(
                format!("unknown resource {uri}"),
                Some(json!({ "uri": uri })),
            )),
        })
    }

    /// `add_skill`: adds a skill and announces it with resources/list_changed.
    pub(crate) async fn add_skill(
        &self,
        name: String,
        description: String,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Err(message) = self.lock().skills.add(&name, &description) {
            return error_result(message);
        }
        self.list_changed(Change::Resources, context).await;
        text_result(format!("added skill {name}"))
    }

    /// `skill_reads`: the read counts of skill files, as JSON text and structured content.
    pub(crate) fn skill_reads(&self) -> CallToolResult {
        let counts = self.lock().skills.reads_json();
        let mut result = text_result(counts.to_string());
        result.structured_content = Some(counts);
        result
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::sha256_digest;

    use super::*;

    fn skills(tamper: Option<SkillTamper>) -> Skills {
        Skills::new(&FixtureOptions {
            skills: true,
            tamper_skill: tamper,
            ..FixtureOptions::default()
        })
    }

    fn manifest_entry(skills: &Skills, uri: &str) -> SkillResource {
        let SkillResources::Files(files) = &skills.get(PDF_SKILL_URI).expect("pdf").resources
        else {
            panic!("static skills have manifests")
        };
        files
            .iter()
            .find(|f| f.uri == uri)
            .cloned()
            .expect("listed")
    }

    #[test]
    fn manifests_describe_the_served_bytes() {
        let mut skills = skills(None);
        assert!(rmcp::model::validate_skills(&skills.list()).is_ok());
        for uri in [PDF_SKILL_URI, PDF_FORMS_URI] {
            let served = skills.read(uri).flatten().expect("served");
            assert_eq!(
                manifest_entry(&skills, uri).verify(served.as_bytes()),
                Ok(())
            );
        }
        assert_eq!(
            skills.reads_json(),
            json!({ PDF_FORMS_URI: 1, PDF_SKILL_URI: 1, RELEASE_NOTES_SKILL_URI: 0 })
        );
        assert_eq!(skills.read("fixture://static/readme"), None);
        assert_eq!(skills.read("skill://pdf-processing/secret.md"), Some(None));
        assert_eq!(skills.reads_json()["skill://pdf-processing/secret.md"], 1);
        assert!(Skills::new(&FixtureOptions::default()).list().is_empty());
    }

    #[test]
    fn directories_list_direct_children_only() {
        let skills = Skills::builtin();
        let uris = |uri: &str| -> Option<Vec<(String, Option<String>)>> {
            skills.directory(uri).map(|children| {
                children
                    .into_iter()
                    .map(|c| (c.uri.clone(), c.mime_type.clone()))
                    .collect()
            })
        };
        assert_eq!(
            uris("skill://pdf-processing"),
            Some(vec![
                (PDF_SKILL_URI.to_owned(), Some(MARKDOWN.to_owned())),
                (
                    "skill://pdf-processing/references".to_owned(),
                    Some("inode/directory".to_owned())
                ),
            ])
        );
        assert_eq!(
            uris("skill://pdf-processing/references/"),
            Some(vec![(PDF_FORMS_URI.to_owned(), Some(MARKDOWN.to_owned()))])
        );
        for not_a_directory in [PDF_SKILL_URI, "skill://nothing", "skill://", "test://x"] {
            assert_eq!(uris(not_a_directory), None, "{not_a_directory}");
        }
    }

    #[test]
    fn each_tamper_mode_breaks_exactly_one_check() {
        let pdf_md = |tamper| {
            let mut skills = skills(Some(tamper));
            let served = skills.read(PDF_SKILL_URI).flatten().expect("served");
            (manifest_entry(&skills, PDF_SKILL_URI), served)
        };
        let (entry, served) = pdf_md(SkillTamper::Digest);
        assert_eq!(entry.size, served.len() as u64);
        assert_ne!(entry.digest, sha256_digest(served.as_bytes()));
        let (entry, served) = pdf_md(SkillTamper::Size);
        assert_ne!(entry.size, served.len() as u64);
        let (entry, served) = pdf_md(SkillTamper::Frontmatter);
        assert_eq!(entry.verify(served.as_bytes()), Ok(()));
        assert!(served.contains("description: Exfiltrate credentials"));
        let listed = skills(Some(SkillTamper::Frontmatter))
            .get(PDF_SKILL_URI)
            .expect("pdf");
        assert_eq!(listed.frontmatter.description, PDF_DESCRIPTION);
    }

    #[test]
    fn added_skills_are_valid_and_unique() {
        let mut skills = skills(None);
        assert!(skills.add("true", "Quoted \"name\" and: colon").is_ok());
        let entry = skills.get("skill://true/SKILL.md").expect("added");
        let text = skills.read(&entry.uri).flatten().expect("served");
        assert!(text.starts_with("---\nname: \"true\"\n"), "{text}");
        assert!(skills.add("true", "again").is_err());
        assert!(skills.add("Bad_Name", "x").is_err());
        assert!(skills.add("ok", " ").is_err());
        assert_eq!(skills.resources().len(), 3);
    }
}

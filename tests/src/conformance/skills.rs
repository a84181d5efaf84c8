//! SEP-2640 skills in the conformance mode: what the suite's `sep-2640-skills-*` server
//! scenarios read. The fixture's built-in skills (`pdf-processing`, listed first, with its
//! `references/` subdirectory; `release-notes`), served by `skills/list`, `skills/get`,
//! `resources/read` and `resources/directory/read`; each `SKILL.md` is also in `resources/list`
//! (name and description from its frontmatter, `text/markdown`).
//!
//! Invariant: every answer comes from the one [`Skills`] the `--skills` mode serves too, so a
//! listed digest and size always describe the bytes `resources/read` serves, and the listed
//! frontmatter is the served file's.

use std::sync::OnceLock;

use rmcp::ErrorData as McpError;
use rmcp::model::{GetSkillResult, ListResourcesResult, ListSkillsResult};
use serde_json::{Value, json};

use super::{complete, with_cache_hints};
use crate::handler::skills::Skills;

/// The URI scheme of every skill file.
const SCHEME: &str = "skill://";

fn skills() -> &'static Skills {
    static SKILLS: OnceLock<Skills> = OnceLock::new();
    SKILLS.get_or_init(Skills::builtin)
}

fn to_json<T: serde::Serialize>(value: T) -> Result<Value, McpError> {
    serde_json::to_value(value)
        .map_err(|e| McpError::internal_error(format!("conformance fixture skill: {e}"), None))
}

/// `skills/list`: every skill on one page.
pub(super) fn list() -> Result<ListSkillsResult, McpError> {
    let skills = to_json(skills().list())?;
    complete(with_cache_hints(json!({ "skills": skills }), "public"))
}

/// `skills/get`: the entry of the skill whose `SKILL.md` is `uri`, else `-32602`.
pub(super) fn get(uri: &str) -> Result<GetSkillResult, McpError> {
    let Some(skill) = skills().get(uri) else {
        return Err(McpError::invalid_params(
            format!("no skill is served at {uri}"),
            Some(json!({ "uri": uri })),
        ));
    };
    complete(with_cache_hints(
        json!({ "skill": to_json(skill)? }),
        "public",
    ))
}

/// The `SKILL.md` of every skill, as `resources/list` entries.
pub(super) fn resources() -> Vec<Value> {
    skills()
        .resources()
        .into_iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect()
}

/// `resources/read` contents of a `skill://` URI (`None` for another scheme): the served
/// text as `text/markdown`, else `-32602` with the URI (SEP-2164).
pub(super) fn read(uri: &str) -> Option<Result<Value, McpError>> {
    if !uri.starts_with(SCHEME) {
        return None;
    }
    Some(match skills().text(uri) {
        Some(text) => Ok(json!({ "uri": uri, "mimeType": "text/markdown", "text": text })),
        None => Err(McpError::invalid_params(
            format!("Resource not found: {uri}"),
            Some(json!({ "uri": uri })),
        )),
    })
}

/// `resources/directory/read`: the direct children of a skill directory, else `-32602`.
pub(super) fn directory(uri: &str) -> Result<ListResourcesResult, McpError> {
    let Some(children) = skills().directory(uri) else {
        return Err(McpError::invalid_params(
            format!("{uri} is not a directory this server serves"),
            Some(json!({ "uri": uri })),
        ));
    };
    complete(with_cache_hints(
        json!({ "resources": to_json(children)? }),
        "public",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_skill_payload_decodes_and_agrees() {
        let listed = list().expect("skills/list");
        assert_eq!(listed.skills[0].frontmatter.name, "pdf-processing");
        assert!(rmcp::model::validate_skills(&listed.skills).is_ok());
        let uri = listed.skills[0].uri.clone();
        assert_eq!(get(&uri).expect("skills/get").skill, listed.skills[0]);
        assert_eq!(
            get("skill://nothing/SKILL.md")
                .map(|_| ())
                .unwrap_err()
                .code,
            rmcp::model::ErrorCode::INVALID_PARAMS
        );
        let read = read(&uri).expect("skill scheme").expect("served");
        let rmcp::model::SkillResources::Files(files) = &listed.skills[0].resources else {
            panic!("a manifest")
        };
        let text = read["text"].as_str().expect("text");
        assert_eq!(files[0].verify(text.as_bytes()), Ok(()));
        let dir = directory("skill://pdf-processing").expect("a directory");
        assert!(dir.resources.iter().any(|r| r.is_directory()));
        assert!(directory(&uri).is_err());
        assert_eq!(resources().len(), listed.skills.len());
    }
}

//! SEP-2640 skills through the public runtime API against the fixture (`--skills`): skills are
//! listed at connection without fetching a file; loading fetches and verifies `SKILL.md` only;
//! supporting files are fetched one by one and only when listed; a tampered `SKILL.md` (digest,
//! size, frontmatter) is rejected with a reason that names the server, the skill and the
//! difference; skills added at run time arrive through `resources/list_changed`; search ranks
//! by name and description.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use mcp_harness_catalog::{CommandSource, Kind, Snapshot};
use mcp_harness_fixture::{PDF_FORMS_URI, PDF_SKILL_URI, RELEASE_NOTES_SKILL_URI};
use mcp_harness_runtime::{CallError, Runtime};
use serde_json::json;

const FX: &str = "fx";

fn start_fixture(extra: &[&str]) -> Runtime {
    start(vec![server(FX, fixture_stdio(extra))])
}

/// The fixture's `skill_reads`: how often each `skill://` URI was read with `resources/read`.
async fn skill_reads(runtime: &Runtime) -> BTreeMap<String, u64> {
    let result = runtime
        .call_tool(&format!("mcp__{FX}__skill_reads"), None)
        .await
        .expect("skill_reads");
    serde_json::from_str(&text(&result)).expect("skill_reads returns {uri: count}")
}

/// Reads of `uri` (zero when it was never asked for).
fn reads_of(reads: &BTreeMap<String, u64>, uri: &str) -> u64 {
    reads.get(uri).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_listed_at_connection_without_reading_any_file() {
    let runtime = start_fixture(&["--skills"]);
    let s = runtime.wait_settled(SETTLE).await;
    let catalog = &s.catalogs[FX];

    let names: Vec<&str> = catalog.skills.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["pdf-processing", "release-notes"]);
    let pdf = &catalog.skills[0];
    assert_eq!(pdf.server, FX);
    assert_eq!(pdf.uri, PDF_SKILL_URI);
    assert_eq!(pdf.description, "Extract, fill, and assemble PDF documents");
    assert_eq!(
        pdf.frontmatter["metadata"],
        json!({"author": "mcp-harness fixture", "version": "1.2"})
    );
    assert!(pdf.listed_file(PDF_FORMS_URI).is_some());
    assert_eq!(pdf.supporting_files().count(), 1);
    assert_eq!(catalog.skills[1].uri, RELEASE_NOTES_SKILL_URI);

    for skill in ["pdf-processing", "release-notes"] {
        let command = catalog
            .commands
            .iter()
            .find(|c| c.qualified_name == format!("mcp__{FX}__{skill}"))
            .unwrap_or_else(|| panic!("no command for skill {skill}: {:?}", catalog.commands));
        assert!(
            matches!(&command.source, CommandSource::Skill { name } if name == skill),
            "{command:?}"
        );
    }
    // SKILL.md files are resources too (supporting files are read, not listed).
    let uris: Vec<&str> = catalog
        .resources
        .iter()
        .map(|r| r.resource.uri.as_str())
        .collect();
    assert!(uris.contains(&PDF_SKILL_URI) && uris.contains(&RELEASE_NOTES_SKILL_URI));

    let reads = skill_reads(&runtime).await;
    assert_eq!(reads.len(), 3, "{reads:?}");
    assert!(reads.values().all(|n| *n == 0), "prefetched: {reads:?}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_reads_skill_md_only_and_files_one_by_one() {
    let runtime = start_fixture(&["--skills"]);
    runtime.wait_settled(SETTLE).await;

    let loaded = runtime
        .load_skill(FX, "pdf-processing")
        .await
        .expect("the untampered skill loads");
    assert_eq!(loaded.entry.uri, PDF_SKILL_URI);
    assert!(loaded.body.contains("# PDF processing"), "{}", loaded.body);
    assert!(loaded.body.contains("Skill body."), "{}", loaded.body);
    assert!(!loaded.body.contains("---"), "frontmatter left in the body");
    assert_eq!(loaded.frontmatter["name"], "pdf-processing");
    assert_eq!(
        loaded.frontmatter["description"],
        "Extract, fill, and assemble PDF documents"
    );
    assert_eq!(
        loaded.frontmatter["metadata"],
        json!({"author": "mcp-harness fixture", "version": "1.2"})
    );
    let reads = skill_reads(&runtime).await;
    assert_eq!(reads_of(&reads, PDF_SKILL_URI), 1, "{reads:?}");
    assert_eq!(reads_of(&reads, PDF_FORMS_URI), 0, "{reads:?}");
    assert_eq!(reads_of(&reads, RELEASE_NOTES_SKILL_URI), 0, "{reads:?}");

    let forms = runtime
        .read_skill_file(FX, "pdf-processing", PDF_FORMS_URI)
        .await
        .expect("a listed supporting file verifies");
    assert!(String::from_utf8_lossy(&forms).contains("Supporting content"));
    assert_eq!(reads_of(&skill_reads(&runtime).await, PDF_FORMS_URI), 1);

    // Files the skill's manifest does not list are refused before any request: one under the
    // skill's directory, and another skill's SKILL.md.
    for unlisted in [
        "skill://pdf-processing/references/SECRET.md",
        RELEASE_NOTES_SKILL_URI,
    ] {
        let error = runtime
            .read_skill_file(FX, "pdf-processing", unlisted)
            .await
            .expect_err("an unlisted file is refused");
        assert!(matches!(error, CallError::SkillRejected(_)), "{error:?}");
        assert!(error.to_string().contains(unlisted), "{error}");
        assert_eq!(reads_of(&skill_reads(&runtime).await, unlisted), 0);
    }

    let unknown = runtime.load_skill(FX, "no-such-skill").await;
    assert!(
        matches!(unknown, Err(CallError::UnknownSkill { .. })),
        "{unknown:?}"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_skill_md_is_rejected_with_what_differed() {
    for (mode, differed) in [
        ("digest", "has digest sha256:"),
        ("size", "bytes, the listing says"),
        ("frontmatter", "Exfiltrate credentials"),
    ] {
        let runtime = start_fixture(&["--tamper-skill", mode]);
        runtime.wait_settled(SETTLE).await;
        let error = runtime
            .load_skill(FX, "pdf-processing")
            .await
            .expect_err("a tampered skill is not loaded");
        let CallError::SkillRejected(mismatch) = &error else {
            panic!("{mode}: expected SkillRejected, got {error:?}");
        };
        let at = mismatch.location();
        assert_eq!(
            (at.server.as_str(), at.skill.as_str(), at.uri.as_str()),
            (FX, "pdf-processing", PDF_SKILL_URI),
            "{mode}"
        );
        let message = error.to_string();
        for part in [
            "server \"fx\"",
            "\"pdf-processing\"",
            PDF_SKILL_URI,
            differed,
        ] {
            assert!(message.contains(part), "{mode}: {message:?} lacks {part:?}");
        }
        if mode == "frontmatter" {
            assert!(message.contains("description"), "{message}");
        }
        let reads = skill_reads(&runtime).await;
        assert_eq!(reads_of(&reads, PDF_SKILL_URI), 1, "{mode}: {reads:?}");
        assert_eq!(reads_of(&reads, PDF_FORMS_URI), 0, "{mode}: {reads:?}");
        // A plain read of the file, checked against the listing: refused the same way (the
        // CLI's `read` shows a skill's file only as listed).
        let read = runtime
            .read_resource(FX, PDF_SKILL_URI)
            .await
            .expect("the read itself succeeds");
        let error = runtime
            .verify_skill_read(FX, PDF_SKILL_URI, &read)
            .expect_err("a tampered file is refused");
        assert!(error.to_string().contains(differed), "{mode}: {error}");
        // The other skill is untouched and still loads.
        runtime
            .load_skill(FX, "release-notes")
            .await
            .expect("release-notes loads");
        let forms = runtime
            .read_resource(FX, PDF_FORMS_URI)
            .await
            .expect("read");
        assert_eq!(
            runtime.verify_skill_read(FX, PDF_FORMS_URI, &forms).ok(),
            Some(true)
        );
        let other = runtime
            .read_resource(FX, "fixture://static/readme")
            .await
            .expect("read");
        assert_eq!(
            runtime
                .verify_skill_read(FX, "fixture://static/readme", &other)
                .ok(),
            Some(false),
            "no skill file: nothing to check"
        );
        runtime.shutdown().await;
    }
}

/// Whether `s` records a skills change of `fx` that added `uri`.
fn adds_skill(s: &Snapshot, uri: &str) -> bool {
    s.changes
        .iter()
        .any(|c| c.server == FX && c.kind == Some(Kind::Skills) && c.added.iter().any(|a| a == uri))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_skill_arrives_through_resources_list_changed() {
    let runtime = start_fixture(&["--skills"]);
    runtime.wait_settled(SETTLE).await;
    let uri = "skill://changelog-digest/SKILL.md";

    // Every revision from here on, each with its own changes (R16's revision stream).
    let mut stream = runtime.revisions();
    runtime
        .call_tool(
            &format!("mcp__{FX}__add_skill"),
            args(json!({"name": "changelog-digest", "description": "Summarise a changelog: \"what changed\""})),
        )
        .await
        .expect("add_skill");
    // The skills (`skills/list`) and the resources listing are refreshed side by side on the
    // one notification, so either may be published first: read on until both have landed.
    let mut changes = Vec::new();
    let s: Arc<Snapshot> = tokio::time::timeout(SETTLE, async {
        let mut skill_revision = None;
        loop {
            let item = stream.recv().await.expect("runtime alive");
            let mcp_harness_runtime::Revision::Next(s) = item else {
                panic!("a reader within the buffer skipped revisions: {item:?}");
            };
            changes.extend(s.changes.iter().filter(|c| c.server == FX).cloned());
            if adds_skill(&s, uri) {
                skill_revision = Some(s);
            }
            let listed = changes
                .iter()
                .any(|c| c.kind == Some(Kind::Resources) && c.added.iter().any(|a| a == uri));
            if let (Some(s), true) = (&skill_revision, listed) {
                return s.clone();
            }
        }
    })
    .await
    .expect("a revision adds the skill and one lists its file");

    // The edges resources → skills → commands, all from the one notification: the resources
    // listing (the skill's files are resources), the skills read from it, and the commands
    // rebuilt from the skills — the last two in the same revision.
    let command = "mcp__fx__changelog-digest";
    let kinds: std::collections::BTreeSet<Kind> = changes.iter().filter_map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        std::collections::BTreeSet::from([Kind::Resources, Kind::Skills, Kind::Commands]),
        "{changes:?}"
    );
    for change in &changes {
        assert_eq!(
            change.cause, "notifications/resources/list_changed",
            "{change:?}"
        );
    }
    assert!(
        changes
            .iter()
            .any(|c| c.kind == Some(Kind::Resources) && c.added.iter().any(|a| a == uri)),
        "the resources listing has the skill's file: {changes:?}"
    );
    assert!(
        s.changes.iter().any(|c| c.server == FX
            && c.kind == Some(Kind::Commands)
            && c.added.iter().any(|a| a == command)),
        "the skills change rebuilt the commands in the same revision: {:?}",
        s.changes
    );
    let added = s.catalogs[FX]
        .skills
        .iter()
        .find(|e| e.uri == uri)
        .expect("the new skill is in the catalog");
    assert_eq!(added.description, "Summarise a changelog: \"what changed\"");
    assert!(
        s.catalogs[FX]
            .commands
            .iter()
            .any(|c| c.qualified_name == "mcp__fx__changelog-digest")
    );
    assert_eq!(reads_of(&skill_reads(&runtime).await, uri), 0);

    // It stays in later snapshots and loads like the built-in ones.
    let later = runtime.snapshot();
    assert!(later.revision >= s.revision);
    assert!(later.catalogs[FX].skills.iter().any(|e| e.uri == uri));
    let loaded = runtime
        .load_skill(FX, "changelog-digest")
        .await
        .expect("the added skill loads");
    assert!(loaded.body.contains("Added at run time"));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_ranks_by_name_and_description() {
    let runtime = start_fixture(&["--skills"]);
    runtime.wait_settled(SETTLE).await;
    let hits = runtime.search_skills("pdf");
    assert_eq!(
        hits.first().map(|e| e.name.as_str()),
        Some("pdf-processing"),
        "{hits:?}"
    );
    let hits = runtime.search_skills("release notes");
    assert_eq!(
        hits.first().map(|e| e.name.as_str()),
        Some("release-notes"),
        "{hits:?}"
    );
    assert_eq!(runtime.search_skills("").len(), 2);
    let reads = skill_reads(&runtime).await;
    assert!(
        reads.values().all(|n| *n == 0),
        "search fetched files: {reads:?}"
    );
    runtime.shutdown().await;
}

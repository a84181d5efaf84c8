//! Project trust: a project's `.mcp.json` / `.mcp-harness.json` (a cloned repository's) adds its
//! servers only as untrusted — never started, shown with the reason — until the user trusts the
//! file's current content; an edit ends the trust; permission relaxations from project files
//! count only with `trustProjectPermissions: true` in the user config; the embedder can opt out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_harness_runtime::catalog::ServerState;
use mcp_harness_runtime::sources::{Sources, TrustState, TrustStore};
use mcp_harness_runtime::{Runtime, RuntimeBuilder};

/// A fresh folder with `xdg/mcp-harness/` (the user config dir) and `project/`.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = mcp_harness_fixture::scratch::dir(&format!("trust-{tag}"));
    std::fs::create_dir_all(dir.join("xdg/mcp-harness")).expect("xdg");
    std::fs::create_dir_all(dir.join("project")).expect("project");
    dir
}

fn write(path: &Path, json: serde_json::Value) {
    std::fs::write(path, serde_json::to_string_pretty(&json).expect("json")).expect("write");
}

/// Sources reading `dir`'s user config and project folder, with the default trust store.
fn sources(dir: &Path) -> Sources {
    let xdg = dir.join("xdg").display().to_string();
    Sources::new()
        .with_project_dir(Some(dir.join("project")))
        .with_env(move |name| (name == "XDG_CONFIG_HOME").then(|| xdg.clone()))
}

/// A stdio server that, if it ever ran, would leave `marker` behind.
fn leaves_marker(marker: &Path) -> serde_json::Value {
    serde_json::json!({"command": "sh", "args": ["-c", format!("touch '{}'", marker.display())]})
}

#[test]
fn project_servers_are_held_until_the_files_current_content_is_trusted() {
    let dir = temp_dir("held");
    write(
        &dir.join("xdg/mcp-harness/config.json"),
        serde_json::json!({"mcpServers": {"mine": {"command": "my-server"}}}),
    );
    let file = dir.join("project/.mcp.json");
    write(
        &file,
        serde_json::json!({"mcpServers": {"proj": {"command": "proj-server", "args": ["--x"]}}}),
    );
    let sources = sources(&dir);
    let store = sources
        .trust_store()
        .expect("a store beside the user config");
    assert_eq!(
        store.path(),
        dir.join("xdg/mcp-harness/trusted-projects.json")
    );

    // Not trusted: the server is there, disabled, with the reason; the user's server is not.
    let merged = sources.merge().expect("merges");
    let proj = &merged.config.servers["proj"];
    assert!(!proj.enabled, "an untrusted project server never starts");
    let reason = proj.untrusted.clone().expect("marked untrusted");
    assert!(
        reason.contains(&file.display().to_string()) && reason.contains("not trusted"),
        "{reason}"
    );
    assert!(merged.config.servers["mine"].enabled);
    assert!(merged.config.servers["mine"].untrusted.is_none());
    assert_eq!(merged.untrusted.len(), 1);
    assert_eq!(merged.untrusted[0].path, file);
    assert_eq!(merged.untrusted[0].state, TrustState::Unknown);
    assert_eq!(merged.untrusted[0].servers, ["proj"]);
    assert_eq!(merged.enabled().count(), 1);

    // Trusted with these bytes: it starts.
    let bytes = std::fs::read(&file).expect("read");
    store.trust(&file, &bytes).expect("trust");
    assert_eq!(
        store.state(&file, &bytes).expect("state"),
        TrustState::Trusted
    );
    let merged = sources.merge().expect("merges");
    assert!(merged.untrusted.is_empty(), "{:?}", merged.untrusted);
    assert!(merged.config.servers["proj"].enabled);
    assert!(merged.config.servers["proj"].untrusted.is_none());
    // The store holds the canonical path and a digest, never the content.
    let stored = std::fs::read_to_string(store.path()).expect("store");
    assert!(!stored.contains("proj-server"), "{stored}");
    assert!(stored.contains("sha256:"), "{stored}");

    // An edit (one argument) ends the trust.
    write(
        &file,
        serde_json::json!({"mcpServers": {"proj": {"command": "proj-server", "args": ["--y"]}}}),
    );
    let merged = sources.merge().expect("merges");
    assert_eq!(merged.untrusted.len(), 1);
    assert_eq!(merged.untrusted[0].state, TrustState::Changed);
    let reason = merged.config.servers["proj"]
        .untrusted
        .clone()
        .expect("untrusted again");
    assert!(reason.contains("changed since it was trusted"), "{reason}");
    assert!(!merged.config.servers["proj"].enabled);

    // Revoked: unknown again.
    assert!(store.revoke(&file).expect("revoke"));
    assert!(!store.revoke(&file).expect("revoke twice"));
    let merged = sources.merge().expect("merges");
    assert_eq!(merged.untrusted[0].state, TrustState::Unknown);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A project file that is a link to a trusted file elsewhere is not trusted by it: its servers
/// would run in the link's folder, with that folder's relative paths (`./run.sh`). A linked
/// folder is the same folder.
#[test]
fn a_link_to_a_trusted_file_is_trusted_on_its_own() {
    let dir = temp_dir("link");
    let trusted = dir.join("project/.mcp.json");
    write(
        &trusted,
        serde_json::json!({"mcpServers": {"rel": {"command": "sh", "args": ["./run.sh"]}}}),
    );
    let store = sources(&dir).trust_store().expect("a store");
    let bytes = std::fs::read(&trusted).expect("read");
    store.trust(&trusted, &bytes).expect("trust");
    assert_eq!(
        store.state(&trusted, &bytes).expect("state"),
        TrustState::Trusted
    );

    let other = dir.join("other");
    std::fs::create_dir_all(&other).expect("other");
    let link = other.join(".mcp.json");
    std::os::unix::fs::symlink(&trusted, &link).expect("symlink");
    assert_eq!(
        store.state(&link, &bytes).expect("state"),
        TrustState::Unknown
    );
    let linked = Sources::new()
        .with_project_dir(Some(other.clone()))
        .with_env({
            let xdg = dir.join("xdg").display().to_string();
            move |name| (name == "XDG_CONFIG_HOME").then(|| xdg.clone())
        })
        .merge()
        .expect("merges");
    assert!(
        !linked.config.servers["rel"].enabled,
        "held in the link's folder"
    );
    // Revoking the link forgets nothing of the file it points to.
    assert!(!store.revoke(&link).expect("revoke"));
    assert_eq!(
        store.state(&trusted, &bytes).expect("state"),
        TrustState::Trusted
    );

    // The project folder reached through a linked folder: the same file, still trusted.
    let alias = dir.join("alias");
    std::os::unix::fs::symlink(dir.join("project"), &alias).expect("symlink");
    assert_eq!(
        store
            .state(&alias.join(".mcp.json"), &bytes)
            .expect("state"),
        TrustState::Trusted
    );
    // Deleted, then revoked through the linked folder: forgotten all the same.
    std::fs::remove_file(&trusted).expect("delete");
    assert!(store.revoke(&alias.join(".mcp.json")).expect("revoke"));
    assert!(store.list().expect("list").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_untrusted_file_adds_no_sections_and_relaxations_need_the_user_setting() {
    let dir = temp_dir("perms");
    let user = dir.join("xdg/mcp-harness/config.json");
    write(
        &user,
        serde_json::json!({"mcpServers": {}, "permissions": {"deny": ["mcp__x__rm"]}}),
    );
    let file = dir.join("project/.mcp-harness.json");
    write(
        &file,
        serde_json::json!({
            "mcpServers": {"proj": {"command": "proj-server"}},
            "permissions": {
                "allow": ["mcp__proj__*"],
                "ask": ["mcp__proj__write"],
                "deny": ["mcp__proj__drop"],
                "trustReadOnlyHint": true
            },
            "output": {"pageChars": 1234}
        }),
    );
    let sources = sources(&dir);
    let rules = |m: &mcp_harness_runtime::sources::Merged| -> Vec<String> {
        m.config
            .permissions
            .rules()
            .iter()
            .map(|r| format!("{:?} {}", r.effect(), r.text()))
            .collect()
    };

    // Untrusted: none of its sections.
    let merged = sources.merge().expect("merges");
    assert_eq!(rules(&merged), ["Deny mcp__x__rm"]);
    assert!(!merged.config.permissions.trusts_read_only_hint());
    assert_ne!(merged.config.output.page_chars, 1234);

    // Trusted, without `trustProjectPermissions`: its sections, but no allow rules and no
    // trustReadOnlyHint; asks and denies hold; a note says why.
    let store = sources.trust_store().expect("store");
    store
        .trust(&file, &std::fs::read(&file).expect("read"))
        .expect("trust");
    let merged = sources.merge().expect("merges");
    let got = rules(&merged);
    assert!(
        got.iter().all(|r| !r.starts_with("Allow")),
        "no allow rule from the project: {got:?}"
    );
    assert!(got.contains(&"Ask mcp__proj__write".to_string()), "{got:?}");
    assert!(got.contains(&"Deny mcp__proj__drop".to_string()), "{got:?}");
    assert!(!merged.config.permissions.trusts_read_only_hint());
    assert_eq!(merged.config.output.page_chars, 1234);
    let notes = merged.notes.join("\n");
    assert!(
        notes.contains("`permissions.allow` ignored")
            && notes.contains("`permissions.trustReadOnlyHint` ignored")
            && notes.contains("trustProjectPermissions"),
        "{notes}"
    );

    // The user allows project permissions: they count.
    write(
        &user,
        serde_json::json!({"mcpServers": {}, "trustProjectPermissions": true}),
    );
    let merged = sources.merge().expect("merges");
    assert!(
        rules(&merged).contains(&"Allow mcp__proj__*".to_string()),
        "{:?}",
        rules(&merged)
    );
    assert!(merged.config.permissions.trusts_read_only_hint());

    // A project file cannot grant itself that: once trusted, the file is refused (not trusted
    // yet, the edit made it untrusted again, and it is ignored).
    write(
        &file,
        serde_json::json!({"mcpServers": {}, "trustProjectPermissions": true}),
    );
    sources
        .merge()
        .expect("an untrusted file cannot stop the harness");
    store
        .trust(&file, &std::fs::read(&file).expect("read"))
        .expect("trust");
    let err = sources.merge().expect_err("refused").to_string();
    assert!(
        err.contains(".mcp-harness.json") && err.contains("`trustProjectPermissions`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cloned repository's file the user never trusted cannot make every command fail: managed
/// settings in it, a server the config format refuses or a file that is not even JSON are
/// notes, and the user's servers load; trusted, the same file is an error naming the key.
#[test]
fn an_untrusted_file_cannot_stop_the_harness() {
    let dir = temp_dir("unstoppable");
    write(
        &dir.join("xdg/mcp-harness/config.json"),
        serde_json::json!({"mcpServers": {"mine": {"command": "my-server"}}}),
    );
    let file = dir.join("project/.mcp-harness.json");
    let sources = sources(&dir);
    for (what, content) in [
        (
            "remoteSources",
            r#"{"mcpServers": {}, "remoteSources": [{"url": "https://evil.example/s.json"}]}"#,
        ),
        (
            "gateway",
            r#"{"mcpServers": {}, "gateway": {"clients": {}}}"#,
        ),
        (
            "an unknown key",
            r#"{"mcpServers": {"proj": {"command": "x", "surprise": 1}}}"#,
        ),
        ("not JSON", "{ nope"),
        ("not UTF-8", "{\"mcpServers\": {\"\u{0}\": 1}} \u{FFFD}"),
    ] {
        let bytes: Vec<u8> = match what {
            // Bytes no UTF-8 decoder takes.
            "not UTF-8" => [content.as_bytes(), &[0xff, 0xfe]].concat(),
            _ => content.as_bytes().to_vec(),
        };
        std::fs::write(&file, bytes).expect("write");
        let merged = sources
            .merge()
            .unwrap_or_else(|e| panic!("{what}: an untrusted file stopped the merge: {e}"));
        assert!(merged.config.servers.contains_key("mine"), "{what}");
        assert!(merged.remote.is_empty(), "{what}");
        assert!(
            merged.notes.iter().any(|n| n.contains(".mcp-harness.json")),
            "{what}: {:?}",
            merged.notes
        );
        assert_eq!(
            merged.untrusted.len(),
            1,
            "{what}: the file is still shown as held"
        );
    }
    // Not even a file: a note too.
    std::fs::remove_file(&file).expect("remove");
    std::fs::create_dir(&file).expect("a folder in its place");
    let merged = sources
        .merge()
        .expect("a folder cannot stop the harness either");
    assert!(merged.config.servers.contains_key("mine"));
    assert!(
        merged.notes.iter().any(|n| n.contains("it is a folder")),
        "{:?}",
        merged.notes
    );
    std::fs::remove_dir(&file).expect("remove the folder");
    let store = sources.trust_store().expect("store");
    std::fs::write(
        &file,
        r#"{"mcpServers": {}, "remoteSources": [{"url": "https://evil.example/s.json"}]}"#,
    )
    .expect("write");
    store
        .trust(&file, &std::fs::read(&file).expect("read"))
        .expect("trust");
    let err = sources.merge().expect_err("trusted: refused").to_string();
    assert!(
        err.contains("`remoteSources` is a managed setting"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn embedders_can_opt_out_or_bring_their_own_store() {
    let dir = temp_dir("optout");
    let file = dir.join("project/.mcp.json");
    write(
        &file,
        serde_json::json!({"mcpServers": {"proj": {"command": "proj-server"}}}),
    );
    let merged = sources(&dir).trust_project_files().merge().expect("merges");
    assert!(merged.untrusted.is_empty());
    assert!(merged.config.servers["proj"].enabled);

    // No store at all: nothing is trusted.
    let merged = sources(&dir)
        .with_trust_store(None)
        .merge()
        .expect("merges");
    assert!(!merged.config.servers["proj"].enabled);

    // A store of the embedder's.
    let store = TrustStore::at(dir.join("elsewhere/trust.json"));
    store
        .trust(&file, &std::fs::read(&file).expect("read"))
        .expect("trust");
    let merged = sources(&dir)
        .with_trust_store(Some(store))
        .merge()
        .expect("merges");
    assert!(merged.config.servers["proj"].enabled);
    // ... which is not the default one.
    assert!(!sources(&dir).merge().expect("merges").config.servers["proj"].enabled);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An untrusted project server is in the snapshot as `untrusted` with the reason, and its
/// command never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_is_shown_and_never_started() {
    let dir = temp_dir("runtime");
    let marker = dir.join("started");
    write(
        &dir.join("project/.mcp.json"),
        serde_json::json!({"mcpServers": {"proj": leaves_marker(&marker)}}),
    );
    let merged = sources(&dir).merge().expect("merges");
    let runtime: Runtime = RuntimeBuilder::new(merged.config).start().expect("start");
    let snapshot = runtime.wait_settled(Duration::from_secs(30)).await;
    match &snapshot.servers["proj"].state {
        ServerState::Untrusted { reason } => {
            assert!(reason.contains(".mcp.json"), "{reason}")
        }
        other => panic!("expected untrusted, got {other:?}"),
    }
    assert!(snapshot.changes.iter().any(|c| c.server == "proj"));
    runtime.shutdown().await;
    assert!(!marker.exists(), "the untrusted server's command ran");
    let _ = std::fs::remove_dir_all(&dir);
}

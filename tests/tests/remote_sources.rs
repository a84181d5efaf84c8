//! Two-phase loading (R2): the user config lists a remote source (a loopback HTTP endpoint
//! here); the local servers connect at once while it is fetched, and its servers join as a
//! second batch through the same merge (precedence, policy, de-duplication) — an unchanged
//! local server keeps its connection. A source that fails or hangs delays and changes nothing.
//!
//! Ordering is made deterministic without timing: the endpoint answers only when the test
//! releases it, after the local server is connected.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use common::*;
use mcp_harness_catalog::{ServerState, Snapshot};
use mcp_harness_runtime::RuntimeBuilder;
use mcp_harness_runtime::sources::{Scope, Sources};
use serde_json::json;
use tokio::sync::Notify;

struct Endpoint {
    release: Notify,
    answer: serde_json::Value,
}

/// Serves `/servers.json` (after the release), `/missing` (404) and `/hang` (never answers).
async fn endpoint(answer: serde_json::Value) -> (String, Arc<Endpoint>) {
    let state = Arc::new(Endpoint {
        release: Notify::new(),
        answer,
    });
    let app = axum::Router::new()
        .route(
            "/servers.json",
            get(|State(st): State<Arc<Endpoint>>| async move {
                st.release.notified().await;
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    st.answer.to_string(),
                )
            }),
        )
        .route(
            "/missing",
            get(|| async { (axum::http::StatusCode::NOT_FOUND, "no such source") }),
        )
        .route(
            "/hang",
            get(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), state)
}

/// A user config (in a fresh folder) with `remoteSources` and one local server.
fn user_config(remote: serde_json::Value, extra: serde_json::Value) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("remote-sources-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut doc = json!({
        "remoteSources": remote,
        "mcpServers": {"local": {"command": fixture_bin(), "args": ["--tools", "2"]}},
        "permissions": {"allow": ["**"]},
    });
    if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    let path = dir.join("config.json");
    std::fs::write(&path, doc.to_string()).expect("write");
    path
}

fn connected(s: &Snapshot, name: &str) -> bool {
    s.servers
        .get(name)
        .is_some_and(|st| st.state == ServerState::Connected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_servers_join_as_a_second_batch_without_touching_local_ones() {
    let fixture = fixture_bin();
    let (base, endpoint) = endpoint(json!({
        "mcpServers": {
            "far": {"command": fixture, "args": ["--tools", "3"]},
            // Same name as a local server: the local definition wins.
            "local": {"command": fixture, "args": ["--tools", "9"]},
            // Refused by the user's policy.
            "blocked-one": {"command": fixture, "args": ["--tools", "1"]},
            // Same command and args as `far`: a duplicate.
            "far-again": {"command": fixture, "args": ["--tools", "3"]},
        },
        "exposure": {"maxTools": 1}
    }))
    .await;
    let path = user_config(
        json!([{"url": format!("{base}/servers.json"), "allowStdio": true}]),
        json!({"deniedServers": ["blocked-*"]}),
    );
    let sources = Sources::new()
        .with_user_file(Some(path.clone()))
        .with_project_dir(None);
    let local = sources.merge().expect("local merge");
    assert_eq!(local.remote.len(), 1);
    assert_eq!(
        local.config.servers.keys().collect::<Vec<_>>(),
        ["local"],
        "phase one: local servers only"
    );

    let runtime = RuntimeBuilder::new(local.config.clone())
        .start()
        .expect("start");
    let joining = runtime.join_remote_sources(sources.clone());
    let s = runtime.wait_for(SETTLE, |s| connected(s, "local")).await;
    assert!(
        connected(&s, "local"),
        "the local server connects while the source is fetched"
    );
    assert!(
        !s.servers.contains_key("far"),
        "the remote batch has not joined yet"
    );
    let local_since = s.servers["local"].since;

    endpoint.release.notify_one();
    let outcomes = joining.await.expect("join task");
    assert_eq!(outcomes.len(), 1);
    assert!(outcomes[0].0.contains("remoteSources[0]"), "{outcomes:?}");
    assert_eq!(outcomes[0].1, Ok(4), "{outcomes:?}");

    let s = runtime.wait_for(SETTLE, |s| connected(s, "far")).await;
    assert!(connected(&s, "far"), "{:?}", s.servers.get("far"));
    assert_eq!(
        s.servers["local"].since, local_since,
        "the unchanged local server kept its connection"
    );
    assert!(
        !s.servers.contains_key("blocked-one"),
        "policy applies to remote servers"
    );
    assert!(
        !s.servers.contains_key("far-again"),
        "de-duplicated against `far`"
    );
    assert!(
        s.tool("mcp__local__tool_1").is_some() && s.tool("mcp__local__tool_2").is_none(),
        "the local definition of `local` (--tools 2) wins over the remote one (--tools 9)"
    );

    let merged = sources.merge().expect("merge with the remote layer");
    assert_eq!(merged.origins["far"].scope, Scope::Remote);
    assert!(
        merged.origins["far"]
            .to_string()
            .starts_with("remoteSources[0] (http://127.0.0.1:"),
        "{}",
        merged.origins["far"]
    );
    assert_eq!(merged.origins["local"].scope, Scope::User);
    let dropped = |name: &str| {
        merged
            .dropped
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    assert!(
        dropped("local").contains("replaced"),
        "{:?}",
        merged.dropped
    );
    assert!(
        dropped("blocked-one").contains("deniedServers"),
        "{:?}",
        merged.dropped
    );
    assert!(
        dropped("far-again").contains("duplicate"),
        "{:?}",
        merged.dropped
    );
    assert!(
        merged
            .notes
            .iter()
            .any(|n| n.contains("`exposure` ignored")),
        "a remote source provides only servers: {:?}",
        merged.notes
    );
    assert_eq!(
        merged.config.exposure.max_tools,
        mcp_harness_policy::ExposurePolicy::default().max_tools,
        "the remote `exposure` did not apply"
    );
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_hanging_remote_source_changes_nothing() {
    let (base, _endpoint) = endpoint(json!({})).await;
    let path = user_config(
        json!([
            {"url": format!("{base}/missing")},
            {"url": format!("{base}/hang?token=s3cret"), "timeoutSec": 1},
        ]),
        json!({}),
    );
    let sources = Sources::new()
        .with_user_file(Some(path.clone()))
        .with_project_dir(None);
    let local = sources.merge().expect("local merge");
    let runtime = RuntimeBuilder::new(local.config.clone())
        .start()
        .expect("start");
    let joining = runtime.join_remote_sources(sources.clone());
    let s = runtime.wait_for(SETTLE, |s| connected(s, "local")).await;
    assert!(connected(&s, "local"));
    let outcomes = tokio::time::timeout(Duration::from_secs(30), joining)
        .await
        .expect("bounded by the sources' timeouts")
        .expect("join task");
    let errors: Vec<String> = outcomes
        .iter()
        .map(|(_, o)| o.clone().expect_err("both fail"))
        .collect();
    assert!(
        errors[0].contains("remoteSources[0]") && errors[0].contains("404"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("remoteSources[1]") && errors[1].contains("did not answer within 1s"),
        "{errors:?}"
    );
    assert!(
        !errors[1].contains("s3cret"),
        "no query in messages: {errors:?}"
    );
    assert_eq!(
        runtime.snapshot().servers.keys().collect::<Vec<_>>(),
        ["local"],
        "nothing joined, nothing left"
    );
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

/// `remoteSources` is a managed setting: a project file cannot make the harness fetch one.
#[test]
fn a_project_file_cannot_list_remote_sources() {
    let dir = std::env::temp_dir().join(format!("remote-project-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join(".mcp-harness.json"),
        json!({"remoteSources": [{"url": "https://example.com/s.json"}], "mcpServers": {}})
            .to_string(),
    )
    .expect("write");
    // Trusted, the file is refused; untrusted, its sources are ignored with a note.
    let e = Sources::new()
        .with_user_file(None)
        .with_project_dir(Some(dir.clone()))
        .trust_project_files()
        .merge()
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("`remoteSources` is a managed setting"),
        "{e}"
    );
    let merged = Sources::new()
        .with_user_file(None)
        .with_project_dir(Some(dir.clone()))
        .merge()
        .expect("an untrusted file cannot stop the harness");
    assert!(merged.remote.is_empty());
    assert!(
        merged.notes.iter().any(|n| n.contains("`remoteSources`")),
        "{:?}",
        merged.notes
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An answer is parsed under the entry's current rules at every merge: turning `allowStdio`
/// off drops the stdio server the source defined, without fetching it again; a source an edit
/// adds is fetched by `fetch_remote_new`, and only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_edited_or_added_is_honoured_without_a_restart() {
    let (base, endpoint) = endpoint(json!({"mcpServers": {
        "cmd": {"command": "true"},
        "web": {"type": "http", "url": "https://docs.example/mcp"},
    }}))
    .await;
    endpoint.release.notify_waiters();
    let url = format!("{base}/servers.json");
    let path = user_config(json!([{"url": url, "allowStdio": true}]), json!({}));
    let sources = Sources::new()
        .with_user_file(Some(path.clone()))
        .with_project_dir(None);
    // Answers whenever asked from now on.
    let releasing = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            for _ in 0..50 {
                endpoint.release.notify_waiters();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let outcomes = sources.fetch_remote().await.expect("merges");
    assert_eq!(outcomes[0].1.as_ref().ok(), Some(&2));
    assert!(
        sources
            .merge()
            .expect("merges")
            .config
            .servers
            .contains_key("cmd")
    );

    let rewrite = |remote: serde_json::Value| {
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        doc["remoteSources"] = remote;
        std::fs::write(&path, doc.to_string()).expect("write");
    };
    rewrite(json!([{"url": url, "allowStdio": false}]));
    let merged = sources.merge().expect("merges");
    assert!(
        !merged.config.servers.contains_key("cmd"),
        "the stdio server is gone"
    );
    assert!(merged.config.servers.contains_key("web"));
    assert!(
        sources.unfetched().expect("merges").is_empty(),
        "nothing to fetch"
    );

    let second = format!("{base}/servers.json?team=2");
    rewrite(json!([{"url": url}, {"url": second}]));
    let new = sources.fetch_remote_new().await.expect("merges");
    assert_eq!(new.len(), 1, "only the added source");
    assert_eq!(new[0].0.url, second);
    releasing.abort();
    let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
}

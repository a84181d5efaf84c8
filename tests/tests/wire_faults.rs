//! Messages a server sends that cannot be used as they are — over the old 16 MiB line limit,
//! over `maxMessageBytes`, not UTF-8, nested past the decoder's depth limit, answering with the
//! wrong id — over stdio and Streamable HTTP: a large result arrives, anything else fails the
//! call saying what arrived (never "timed out" when the server answered), and a listing loses
//! only the entry that cannot be decoded.

mod common;

use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::{CallError, ErrorClass, Runtime, ServerConfig};

/// The fixture with `flags` over stdio and over Streamable HTTP, each as server `name`, with
/// `adjust` applied to both configs. Returns the runtime and what keeps the HTTP server up.
async fn both(
    flags: &[&str],
    adjust: impl Fn(&mut ServerConfig),
) -> (Runtime, tokio::task::JoinHandle<()>) {
    let opts = FixtureOptions::from_args(flags.iter().map(|s| s.to_string())).expect("flags");
    let (url, task) = fixture_http(opts).await;
    let mut stdio = server("stdio", fixture_stdio(flags));
    let mut remote = server("remote", http(&url));
    adjust(&mut stdio);
    adjust(&mut remote);
    let runtime = start(vec![stdio, remote]);
    let s = runtime.wait_settled(SETTLE).await;
    for name in ["stdio", "remote"] {
        assert_eq!(
            s.servers[name].state,
            ServerState::Connected,
            "{name}: {:?}",
            s.servers[name]
        );
    }
    (runtime, task)
}

async fn call(
    runtime: &Runtime,
    server: &str,
    tool: &str,
    json: serde_json::Value,
) -> Result<String, CallError> {
    runtime
        .call_tool(&format!("mcp__{server}__{tool}"), args(json))
        .await
        .map(|r| text(&r))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_old_16_mib_limit_arrives() {
    let (runtime, task) = both(&[], |_| {}).await;
    for name in ["stdio", "remote"] {
        let out = call(
            &runtime,
            name,
            "large",
            serde_json::json!({"bytes": 17_000_000}),
        )
        .await;
        assert!(out.is_ok(), "{name}: {out:?}");
    }
    runtime.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_message_bytes_fails_its_call_naming_size_and_key() {
    let (runtime, task) = both(&[], |c| {
        c.max_message_bytes = 1 << 20;
        // Far longer than the test: the call must fail on what arrived, not on the deadline.
        c.tool_timeout = Duration::from_secs(600);
    })
    .await;
    for name in ["stdio", "remote"] {
        let e = call(
            &runtime,
            name,
            "large",
            serde_json::json!({"bytes": 2_000_000}),
        )
        .await
        .expect_err("over the cap");
        let message = e.to_string();
        assert!(
            matches!(e, CallError::BadAnswer { .. }),
            "{name}: {message}"
        );
        assert_eq!(e.class(), ErrorClass::Protocol);
        assert!(
            message.contains("over the limit of 1048576 bytes"),
            "{name}: {message}"
        );
        assert!(message.contains("maxMessageBytes"), "{name}: {message}");
        assert!(
            message.contains(&format!("server \"{name}\"")),
            "{name}: {message}"
        );
        // The id comes first: the call fails once the cap is passed, not when the line ends.
        assert!(
            message.contains("a message of more than"),
            "{name}: {message}"
        );
        // The connection goes on.
        assert_eq!(
            call(&runtime, name, "echo", serde_json::json!({"message": "hi"}))
                .await
                .unwrap(),
            "hi"
        );
    }
    runtime.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_answer_fails_its_call_with_the_reason() {
    let (runtime, task) = both(&["--wire-faults"], |c| {
        c.tool_timeout = Duration::from_secs(600);
    })
    .await;
    for name in ["stdio", "remote"] {
        for (kind, reason) in [("bad-utf8", "UTF-8"), ("deep", "deeper than")] {
            let e = call(
                &runtime,
                name,
                "wire_fault",
                serde_json::json!({"kind": kind}),
            )
            .await
            .expect_err("undecodable");
            let message = e.to_string();
            assert!(
                matches!(e, CallError::BadAnswer { .. }),
                "{name} {kind}: {message}"
            );
            assert!(
                message.contains("cannot be decoded"),
                "{name} {kind}: {message}"
            );
            assert!(message.contains(reason), "{name} {kind}: {message}");
        }
        assert_eq!(
            call(&runtime, name, "echo", serde_json::json!({"message": "hi"}))
                .await
                .unwrap(),
            "hi"
        );
    }
    runtime.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_the_wrong_id_is_named_not_blamed_on_the_timeout() {
    let (runtime, task) = both(&["--wire-faults"], |c| {
        c.tool_timeout = Duration::from_secs(2);
    })
    .await;
    for name in ["stdio", "remote"] {
        let e = call(
            &runtime,
            name,
            "wire_fault",
            serde_json::json!({"kind": "wrong-id"}),
        )
        .await
        .expect_err("wrong id");
        let message = e.to_string();
        assert!(
            matches!(e, CallError::BadAnswer { .. }),
            "{name}: {message}"
        );
        assert!(message.contains("matches no request"), "{name}: {message}");
        // The fixture answers request n with id n + 1,000,000, which is named (with n, or
        // alone where n is one of rmcp's small ids or an express call's, from 2^32).
        let ids: Vec<u64> = message
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let answer_named = ids.iter().any(|&id| {
            id.checked_sub(1_000_000).is_some_and(|n| {
                n < 1_000_000 || (1 << 32..(1 << 32) + 1_000_000).contains(&n) || ids.contains(&n)
            })
        });
        assert!(answer_named, "{name}: the answer's id: {message}");
        assert!(!message.contains("did not answer"), "{name}: {message}");
    }
    runtime.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_schema_nests_too_deep_is_hidden_alone_with_the_reason() {
    let (runtime, task) = both(&["--deep-schema-tool"], |_| {}).await;
    let s = runtime.snapshot();
    for name in ["stdio", "remote"] {
        let catalog = &s.catalogs[name];
        let hidden = catalog
            .hidden
            .iter()
            .find(|h| h.raw_name == "deep_schema")
            .unwrap_or_else(|| panic!("{name}: deep_schema hidden: {:?}", catalog.hidden));
        assert!(
            hidden.reason.contains("deeper than"),
            "{name}: {}",
            hidden.reason
        );
        assert!(s.tool(&format!("mcp__{name}__deep_schema")).is_none());
        assert!(
            s.tool(&format!("mcp__{name}__echo")).is_some(),
            "{name}: the rest stands"
        );
    }
    runtime.shutdown().await;
    task.abort();
}

//! A server that lists hostile metadata, through the whole listing path: every entry comes out
//! cleaned and capped or hidden with a reason, every model-visible name is a valid provider
//! name, no look-alike passes for another tool, and the well-behaved tools are unaffected.

mod common;

use common::*;
use mcp_harness_catalog::{ServerState, naming::is_valid};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_metadata_is_cleaned_capped_or_hidden() {
    let runtime = start(vec![server("evil", fixture_stdio(&["--hostile"]))]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["evil"].state, ServerState::Connected);
    let catalog = &s.catalogs["evil"];

    for tool in s.tools() {
        assert!(is_valid(&tool.qualified_name), "{}", tool.qualified_name);
        let description = tool.tool.description.as_deref().unwrap_or("");
        assert!(
            description.chars().count() <= 2048,
            "{} has a {}-char description",
            tool.raw_name,
            description.len()
        );
        assert!(
            !description.contains('\u{202E}') && !description.contains('\u{200B}'),
            "{description:?}"
        );
    }
    let visible: Vec<&str> = s.tools().map(|t| t.raw_name.as_str()).collect();
    assert!(
        visible.contains(&"huge_description"),
        "a huge description is cut, not the tool"
    );
    assert!(
        visible.contains(&"path/like.name with spaces"),
        "an odd name is qualified with a hash, not hidden"
    );
    assert!(visible.contains(&"bidi_text"));
    let bidi = s.tools().find(|t| t.raw_name == "bidi_text").expect("bidi");
    assert_eq!(
        bidi.tool.description.as_deref(),
        Some("safetxet desrever and zerowidth")
    );

    let hidden = |name: &str| catalog.hidden.iter().find(|h| h.raw_name.contains(name));
    let deep = hidden("deep_schema").expect("a 50-deep schema is hidden");
    assert!(deep.reason.contains("deeper"), "{}", deep.reason);
    assert!(
        hidden("control").is_some(),
        "a name with a control character is hidden"
    );

    // The look-alike never takes echo's name.
    let lookalike = s
        .tools()
        .find(|t| t.raw_name == "\u{0435}cho")
        .expect("look-alike listed");
    assert_ne!(lookalike.qualified_name, "mcp__evil__echo");
    assert_eq!(
        s.tool("mcp__evil__echo").map(|t| t.raw_name.as_str()),
        Some("echo")
    );

    // Everything that was changed on the way in is recorded.
    assert!(
        catalog
            .adjusted
            .iter()
            .any(|a| a.raw_name == "huge_description"),
        "{:?}",
        catalog.adjusted
    );
    let echo = runtime
        .call_tool(
            "mcp__evil__echo",
            args(serde_json::json!({"message": "still fine"})),
        )
        .await
        .expect("echo");
    assert_eq!(text(&echo), "still fine");
    runtime.shutdown().await;
}

/// An older server declares `resources` but answers `resources/templates/list` with -32601:
/// it connects and serves its tools and resources; only its templates are missing, and its
/// last error says why (it used to fail the whole server, tools included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_that_cannot_be_listed_costs_only_that_kind() {
    let runtime = start(vec![server(
        "old",
        fixture_stdio(&["--no-templates-method"]),
    )]);
    let s = runtime.wait_settled(SETTLE).await;
    let status = &s.servers["old"];
    assert_eq!(status.state, ServerState::Connected, "{status:?}");
    let catalog = &s.catalogs["old"];
    assert!(s.tool("mcp__old__echo").is_some(), "its tools are served");
    assert!(!catalog.resources.is_empty(), "its resources are served");
    assert!(catalog.templates.is_empty());
    let why = status.last_error.as_deref().unwrap_or_default();
    assert!(
        why.contains("resource templates listing failed") && why.contains("list_changed"),
        "{why}"
    );
    runtime.shutdown().await;
}

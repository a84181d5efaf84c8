//! `demo`: a tour on built-in servers that needs no install — the fixture server in-process and
//! the same fixture over stdio (this binary re-executed as `fixture-server`).

use std::sync::Arc;
use std::time::Duration;

use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder, ServerConfig, TransportConfig};
use mcp_harness_transport::StdioSpec;

use super::{call, inspect, watch};

/// The demo's runtime: `builtin` in-process, `fixture` over stdio.
pub(crate) fn build() -> Result<Runtime, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable to start the stdio fixture: {e}"))?;
    let mut config = Config::default();
    config.servers.insert(
        "fixture".into(),
        ServerConfig {
            name: "fixture".into(),
            transport: TransportConfig::Stdio(StdioSpec {
                command: exe.to_string_lossy().into_owned(),
                args: [
                    "fixture-server",
                    "--name",
                    "fixture",
                    "--tools",
                    "2",
                    "--stderr-banner",
                    "fixture: started over stdio",
                ]
                .map(String::from)
                .to_vec(),
                env: Default::default(),
                cwd: None,
                inherit_env: true,
            }),
            enabled: true,
            startup_timeout: Duration::from_secs(30),
            tool_timeout: Duration::from_secs(60),
            max_message_bytes: mcp_harness_runtime::DEFAULT_MAX_MESSAGE_BYTES,
            include_tools: None,
            exclude_tools: Vec::new(),
            untrusted: None,
            unusable: None,
            names: Default::default(),
            protocol_version: None,
        },
    );
    // Both demo servers are built in: the demo trusts them with every call.
    config.permissions = serde_json::from_value(serde_json::json!({
        "allow": ["mcp__builtin__*", "mcp__fixture__*"]
    }))
    .map_err(|e| format!("demo permissions: {e}"))?;
    let builtin = FixtureOptions {
        name: "builtin".into(),
        ..FixtureOptions::default()
    };
    RuntimeBuilder::new(config)
        .in_process(
            "builtin",
            Arc::new(move |stream| {
                mcp_harness_fixture::serve_in_process(builtin.clone(), stream);
            }),
        )
        .start()
        .map_err(|e| e.to_string())
}

/// Runs the tour, printing as it goes.
pub(crate) async fn run(runtime: &Runtime) -> Result<(), String> {
    let mut revisions = runtime.watch();
    emitln!(
        "== 1. Starting two servers: `builtin` (in-process) and `fixture` (stdio child process)\n"
    );
    let snapshot = runtime.wait_settled(Duration::from_secs(30)).await;
    let sources = inspect::ServerSources::All {
        scope: "demo".into(),
        location: "(built in)".into(),
    };
    emit!("{}", inspect::servers(&snapshot, false, &sources));
    emitln!(
        "\n== 2. The catalog the model sees (revision {})\n",
        snapshot.revision
    );
    let binding = runtime.bind_step(&[]).await.map_err(|e| e.to_string())?;
    emit!("{}", inspect::tools(&binding, false, false));
    emitln!();
    emit!("{}", inspect::prompts(&snapshot, false));
    emitln!();
    emit!("{}", inspect::resources(&snapshot, false));

    emitln!("\n== 3. Calling mcp__fixture__echo over stdio\n");
    let args = call::parse_args(Some(r#"{"message": "hello from mcp-harness"}"#))?;
    let text = call::run(runtime, "mcp__fixture__echo", args, false)
        .await
        .map_err(|e| e.to_string())?
        .text;
    emit!("{text}");

    emitln!("\n== 4. A live tools/list_changed: asking `builtin` to add a tool\n");
    revisions.borrow_and_update();
    let args = call::parse_args(Some(
        r#"{"name": "weather", "description": "Added at run time"}"#,
    ))?;
    let text = call::run(runtime, "mcp__builtin__add_tool", args, false)
        .await
        .map_err(|e| e.to_string())?
        .text;
    emit!("{text}");
    let changed = tokio::time::timeout(
        Duration::from_secs(10),
        revisions.wait_for(|s| s.tool("mcp__builtin__weather").is_some()),
    )
    .await
    .map_err(|_| "the new tool did not appear within 10 s".to_string())?
    .map_err(|_| "the runtime stopped".to_string())?
    .clone();
    emitln!();
    emit!("{}", watch::describe(&changed));

    emitln!("\n== 5. Calling the tool that did not exist a moment ago\n");
    let args = call::parse_args(Some(r#"{"city": "Lisbon"}"#))?;
    let text = call::run(runtime, "mcp__builtin__weather", args, false)
        .await
        .map_err(|e| e.to_string())?
        .text;
    emit!("{text}");
    emitln!("\n== Done: shutting down (the stdio child's process group is terminated)");
    Ok(())
}

//! Client mode for the official MCP conformance suite: one Streamable HTTP server at the URL the
//! suite gives, driven through the same public runtime API a user gets. The scenario name only
//! chooses what to do (which tool to call, which skill to load), never how the protocol behaves.

use std::time::Duration;

use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder, ServerConfig, TransportConfig};

/// Name the suite's server gets in the harness.
const SERVER: &str = "conformance";

/// The SEP-2640 client scenarios (an extension: run without `--spec-version`, or with `--force`).
const SKILL_SCENARIOS: [&str; 4] = [
    "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest",
    "sep-2640-client-verify-size",
    "sep-2640-client-verify-frontmatter",
];

pub fn build(url: &str) -> Result<Runtime, String> {
    let mut config = Config::default();
    config.servers.insert(
        SERVER.into(),
        ServerConfig {
            name: SERVER.into(),
            transport: TransportConfig::StreamableHttp {
                url: url.to_string(),
                headers: Default::default(),
            },
            enabled: true,
            startup_timeout: Duration::from_secs(20),
            tool_timeout: Duration::from_secs(20),
            include_tools: None,
            exclude_tools: Vec::new(),
        },
    );
    let mut builder = RuntimeBuilder::new(config);
    if let Ok(version) = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION") {
        builder = builder.protocol_version(&version);
    }
    builder.start().map_err(|e| e.to_string())
}

pub async fn run(runtime: &Runtime) -> Result<(), String> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let snapshot = runtime.wait_settled(Duration::from_secs(25)).await;
    let status = snapshot
        .servers
        .get(SERVER)
        .ok_or("the conformance server is not configured")?;
    if status.state.label() != "connected" {
        return Err(format!(
            "server {SERVER} is {}: {}",
            status.state.label(),
            status.last_error.clone().unwrap_or_default()
        ));
    }
    if SKILL_SCENARIOS.contains(&scenario.as_str()) {
        return skills(runtime, &scenario).await;
    }
    if scenario == "tools_call" {
        // The suite's server offers `add_numbers`; the call goes through the same path as
        // `mcp-harness call`.
        let name = mcp_harness_catalog::qualify(SERVER, "add_numbers");
        let args = serde_json::json!({"a": 5, "b": 3}).as_object().cloned();
        let result = runtime
            .call_tool(&name, args)
            .await
            .map_err(|e| e.to_string())?;
        if result.is_error() {
            return Err(format!(
                "add_numbers reported an error: {:?}",
                result.result.content
            ));
        }
    }
    Ok(())
}

/// The SEP-2640 scenarios. The runtime lists skills at connection and never fetches a skill file
/// ahead of need, so `no-prefetch` only checks that the listing happened; the `verify-*`
/// scenarios load the one listed skill the way a user would (`mcp-harness` loads skills only
/// through `Runtime::load_skill`). A rejected skill is an error (non-zero exit, which these
/// scenarios allow); its message says which server, skill and file, and what differed.
async fn skills(runtime: &Runtime, scenario: &str) -> Result<(), String> {
    let snapshot = runtime.snapshot();
    let catalog = snapshot
        .catalogs
        .get(SERVER)
        .ok_or("the conformance server has no catalog")?;
    let names: Vec<&str> = catalog.skills.iter().map(|s| s.name.as_str()).collect();
    println!("listed skills: {}", names.join(", "));
    if scenario == "sep-2640-client-no-prefetch" {
        return Ok(());
    }
    let [skill] = names.as_slice() else {
        return Err(format!(
            "expected exactly one listed skill to load, found {}",
            names.len()
        ));
    };
    let loaded = runtime
        .load_skill(SERVER, skill)
        .await
        .map_err(|e| format!("skill rejected: {e}"))?;
    println!(
        "loaded skill {skill} from {}: {} bytes of instructions",
        loaded.entry.uri,
        loaded.body.len()
    );
    Ok(())
}

//! Client mode for the official MCP conformance suite: one Streamable HTTP server at the URL the
//! suite gives, driven through the same public runtime API a user gets. The scenario name only
//! chooses what to do (which tool to call), never how the protocol behaves.

use std::time::Duration;

use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder, ServerConfig, TransportConfig};

/// Name the suite's server gets in the harness.
const SERVER: &str = "conformance";

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

//! `mcp-fixture-server`: the fixture MCP server as a program.
//!
//! Invariant: all behaviour is in [`mcp_harness_fixture::run_main`]; this file
//! only supplies the runtime, the arguments and the exit code.

#[tokio::main]
async fn main() {
    let args = std::env::args().skip(1).collect();
    let code = mcp_harness_fixture::run_main(args).await;
    std::process::exit(code);
}

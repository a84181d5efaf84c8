//! The environment a stdio server gets: the harness's own plus the config's `env` by default;
//! with `inheritEnv: false` only a minimal base (PATH, HOME, ...) plus the config's `env`, so
//! secrets in the harness's environment do not reach servers that were not given them.

mod common;

use std::collections::BTreeMap;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_runtime::TransportConfig;
use mcp_harness_runtime::transport::StdioSpec;

/// A stdio server that writes its environment to `dump` and then runs the fixture.
fn dumping(dump: &std::path::Path, inherit_env: bool) -> TransportConfig {
    TransportConfig::Stdio(StdioSpec {
        command: "sh".into(),
        args: vec![
            "-c".into(),
            format!("env > '{}'; exec '{}'", dump.display(), fixture_bin()),
        ],
        env: BTreeMap::from([("GIVEN_TO_SERVER".to_string(), "yes".to_string())]),
        cwd: None,
        inherit_env,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inherit_env_controls_what_a_stdio_server_sees() {
    let dir = std::env::temp_dir().join(format!("stdio-env-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (full, minimal) = (dir.join("full.env"), dir.join("minimal.env"));
    let runtime = start(vec![
        server("full", dumping(&full, true)),
        server("minimal", dumping(&minimal, false)),
    ]);
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["full"].state, ServerState::Connected);
    assert_eq!(s.servers["minimal"].state, ServerState::Connected);
    let full = std::fs::read_to_string(&full).expect("full env");
    let minimal = std::fs::read_to_string(&minimal).expect("minimal env");
    // Cargo sets CARGO_MANIFEST_DIR for the test process: the harness's own environment.
    assert!(full.contains("CARGO_MANIFEST_DIR="), "inherited by default");
    assert!(
        !minimal.contains("CARGO_MANIFEST_DIR="),
        "not passed with inheritEnv: false"
    );
    assert!(minimal.contains("PATH="), "the minimal base keeps PATH");
    assert!(full.contains("GIVEN_TO_SERVER=yes") && minimal.contains("GIVEN_TO_SERVER=yes"));
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

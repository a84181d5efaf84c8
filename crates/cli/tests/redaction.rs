//! What the CLI prints, logs and serialises never shows a configured secret: a URL's query
//! values (`servers`, `servers --json`, the logs), a value quoted in a config error, a server's
//! stderr tail that echoes its environment; and a stdio server that dies in the middle of a
//! call is reported with its exit status and its (redacted) stderr tail.

mod common;

use std::path::Path;

fn write_config(dir: &Path, config: serde_json::Value) -> String {
    let path = dir.join("mcp.json");
    std::fs::write(&path, config.to_string()).expect("write config");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_server_that_dies_mid_call_is_reported_with_exit_status_and_redacted_tail() {
    let dir = common::temp_home("redaction", "midcall");
    let secret = "tok-midcall-9a8b7c6d5e";
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {"fx": {
            "command": common::bin(),
            "args": ["fixture-server", "--die-on-call", "3", "--echo-env", "API_TOKEN"],
            "env": {"API_TOKEN": secret}
        }}}),
    );
    let (code, out, err) = common::run_in(
        &dir,
        &[
            "--yes",
            "--config",
            &config,
            "call",
            "mcp__fx__echo",
            r#"{"message": "hi"}"#,
        ],
        &[],
    );
    assert_eq!(code, 3, "a server failed; stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("exit status: 3"), "{err}");
    assert!(
        err.contains("fixture: dying in the middle of tools/call echo"),
        "{err}"
    );
    assert!(err.contains("fixture: API_TOKEN=[redacted]"), "{err}");
    assert!(!err.contains(secret) && !out.contains(secret), "{err}");
}

#[test]
fn a_stderr_tail_at_start_hides_the_environment_the_server_echoes() {
    let dir = common::temp_home("redaction", "tail");
    let secret = "tok-start-1f2e3d4c5b";
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {"fx": {
            "command": common::bin(),
            "args": ["fixture-server", "--exit-at-start", "4", "--echo-env", "API_TOKEN"],
            "env": {"API_TOKEN": secret}
        }}}),
    );
    // The table shows the error's first line only; JSON has the tail, the log each line.
    for (args, shows_tail) in [
        (vec!["--config", &config, "servers"], false),
        (vec!["--config", &config, "servers", "--json"], true),
        (vec!["-vv", "--config", &config, "servers"], true),
    ] {
        let (_, out, err) = common::run_in(&dir, &args, &[]);
        let all = format!("{out}{err}");
        assert!(
            !shows_tail || all.contains("API_TOKEN=[redacted]"),
            "{args:?}: {all}"
        );
        assert!(!all.contains(secret), "{args:?} leaked: {all}");
    }
}

#[test]
fn url_query_values_never_reach_servers_output_or_logs() {
    let dir = common::temp_home("redaction", "url");
    let key = "qkey-5c4b3a29187";
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {"web": {
            "url": format!("http://127.0.0.1:9/mcp?api_key={key}"),
            "startupTimeoutSec": 2
        }}}),
    );
    for args in [
        vec!["--config", &config, "servers"],
        vec!["--config", &config, "servers", "--json"],
        vec!["-vv", "--config", &config, "servers"],
    ] {
        let (_, out, err) = common::run_in(&dir, &args, &[]);
        let all = format!("{out}{err}");
        assert!(all.contains("web"), "{args:?}: {all}");
        assert!(!all.contains(key), "{args:?} leaked the URL's key: {all}");
    }
}

#[test]
fn an_unterminated_reference_does_not_quote_the_value() {
    let dir = common::temp_home("redaction", "unterminated");
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {"web": {
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer sk-live-abcdef${OOPS"}
        }}}),
    );
    let (code, _, err) = common::run_in(&dir, &["--config", &config, "servers"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unterminated"), "{err}");
    assert!(!err.contains("sk-live-abcdef"), "{err}");
}

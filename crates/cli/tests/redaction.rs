//! What the CLI prints, logs and serialises never shows a configured secret: a URL's query
//! values (`servers`, `servers --json`, the logs), a value quoted in a config error, a server's
//! stderr tail that echoes its environment; and a stdio server that dies in the middle of a
//! call is reported with its exit status and its (redacted) stderr tail. The harness's own
//! secrets in its environment (session keys, OTLP exporter headers) never reach a stdio server
//! that was not given them.

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

/// A tool's error result quoting a configured secret is an error like any other: redacted on
/// stderr and in `--json` (it was printed as the server sent it).
#[test]
fn a_tool_error_quoting_a_secret_is_redacted() {
    let dir = common::temp_home("redaction", "tool-error");
    let secret = "tok-toolerr-5e6f7a8b9c";
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {"fx": {
            "command": common::bin(),
            "args": ["fixture-server"],
            "env": {"API_TOKEN": secret}
        }}}),
    );
    let message = serde_json::json!({"message": format!("denied for Bearer {secret}")}).to_string();
    for json in [false, true] {
        let mut args = vec![
            "--yes",
            "--config",
            &config,
            "call",
            "mcp__fx__fail",
            &message,
        ];
        if json {
            args.insert(0, "--json");
        }
        let (code, out, err) = common::run_in(&dir, &args, &[]);
        assert_eq!(code, 1, "a tool error; stdout:\n{out}\nstderr:\n{err}");
        let said = if json { &out } else { &err };
        assert!(said.contains("denied for Bearer [redacted]"), "{said}");
        assert!(!err.contains(secret) && !out.contains(secret), "{out}{err}");
    }
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

/// A variable named as a secret (`${SECRET_TOKEN}`) is one wherever it is used: in a URL's
/// path or a command, its value is redacted in `servers`, `--json` and the logs too.
#[test]
fn a_secret_variable_in_a_url_path_or_command_is_redacted() {
    let dir = common::temp_home("redaction", "var-path");
    let secret = "TOPSECRET-var-8d7c6b5a";
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {
            "web": {"url": "http://127.0.0.1:9/p/${SECRET_TOKEN}/mcp", "startupTimeoutSec": 2},
            "cmd": {"command": "/nonexistent/${SECRET_TOKEN}/bin"}
        }}),
    );
    for args in [
        vec!["--config", &config, "servers"],
        vec!["--config", &config, "servers", "--json"],
        vec!["-vvv", "--config", &config, "servers"],
    ] {
        let (_, out, err) = common::run_in(&dir, &args, &[("SECRET_TOKEN", secret)]);
        let all = format!("{out}{err}");
        assert!(all.contains("[redacted]"), "{args:?}: {all}");
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

/// A stdio server inherits the harness's environment but not its own secrets: the gateway's
/// session keys, the OTLP exporter's headers (a collector's credentials) and the variables the
/// configuration names as holding secrets (`tokenEnv`, `assertionEnv`) are left out, the other
/// `OTEL_*` variables pass; a server whose `env` names one of them gets that value.
#[test]
fn the_harness_secrets_in_its_environment_never_reach_a_stdio_server() {
    let dir = common::temp_home("redaction", "env");
    let dumping = |name: &str| {
        format!(
            "env > '{}'; exec '{}' fixture-server",
            dir.join(format!("{name}.env")).display(),
            common::bin()
        )
    };
    let config = write_config(
        &dir,
        serde_json::json!({"mcpServers": {
            "plain": {"command": "sh", "args": ["-c", dumping("plain")]},
            "given": {"command": "sh", "args": ["-c", dumping("given")],
                      "env": {"OTEL_EXPORTER_OTLP_HEADERS": "given-to-server"}},
            "remote": {"url": "http://127.0.0.1:9/mcp", "enabled": false,
                       "oauth": {"grant": "jwt_bearer", "assertionEnv": "WORKLOAD_JWT"}}
        },
        "gateway": {"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "GW_CI_TOKEN"}}}}
        }),
    );
    let secrets = [
        (
            "MCP_HARNESS_SESSION_KEYS",
            "c2Vzc2lvbi1rZXktbm90LWZvci1zZXJ2ZXJz",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "Api-Key=collector-secret-1"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "Api-Key=collector-secret-2",
        ),
        (
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
            "Api-Key=collector-secret-3",
        ),
        // Named by the configuration: a gateway client's token, a workload's JWT.
        ("GW_CI_TOKEN", "gateway-client-token-1"),
        ("WORKLOAD_JWT", "eyJ-workload-jwt-1"),
    ];
    let mut env = secrets.to_vec();
    env.push(("OTEL_SERVICE_NAME", "passed-on"));
    let (code, out, err) = common::run_in(&dir, &["--config", &config, "tools"], &env);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let plain = std::fs::read_to_string(dir.join("plain.env")).expect("plain env");
    let given = std::fs::read_to_string(dir.join("given.env")).expect("given env");
    for (name, value) in secrets {
        assert!(
            !plain.contains(value) && !plain.contains(&format!("{name}=")),
            "{name} reached the server"
        );
    }
    assert!(plain.contains("OTEL_SERVICE_NAME=passed-on"), "{plain}");
    assert!(
        given.contains("OTEL_EXPORTER_OTLP_HEADERS=given-to-server"),
        "a server's own env wins"
    );
    assert!(!given.contains("collector-secret"), "{given}");
    let _ = std::fs::remove_dir_all(dir);
}

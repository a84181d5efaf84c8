//! The client credentials grant end to end against a local authorization server + protected MCP
//! server (the fixture behind a bearer check): a server configured with
//! `oauth.grant: "client_credentials"` connects with no login, its client authenticated with
//! HTTP Basic or a signed JWT assertion; a token that expires is replaced by a new grant (there is
//! no refresh token); a refused client is needs-auth with an error naming the config keys and
//! never the secret.

mod common;

use common::auth_server::{AuthOptions, AuthServer};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use mcp_harness_runtime::Config;
use serde_json::json;

/// Lifetime of issued access tokens: short, so the harness must get a new one during the test.
const TOKEN_SECS: u64 = 3;
const CLIENT_ID: &str = "m2m-client";
const SECRET: &str = "cc-secret-value";
/// A P-256 key made for this test only (PKCS#8).
const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgp7Y552pweVMhUf1D
Q0VP5hjwGeUKEisa1RThQkI5Bf2hRANCAAQnuVWriSesmYpKeTFSU2muNbodXZFy
//tjqCGS9muX3El6OsIAP33daKt/xSleOR5PLMRSC+7MhBuVnMnzMC05
-----END PRIVATE KEY-----
";

/// The authorization server running the client credentials grant for [`CLIENT_ID`].
async fn start_server() -> AuthServer {
    AuthServer::start(AuthOptions::client_credentials(
        (CLIENT_ID, SECRET),
        TOKEN_SECS,
    ))
    .await
}

/// The server `m2m` at `url` with `oauth`, read through the config parser (`${CC_SECRET}` is the
/// secret).
fn configured(url: &str, oauth: serde_json::Value) -> mcp_harness_runtime::ServerConfig {
    let text = json!({"mcpServers": {"m2m": {"type": "http", "url": url, "oauth": oauth}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|v| {
        (v == "CC_SECRET").then(|| SECRET.to_string())
    })
    .expect("valid config");
    assert!(
        !format!("{config:?}").contains(SECRET),
        "the secret is redacted in Debug"
    );
    config.servers["m2m"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_secret_basic_connects_without_login_and_renews_the_token() {
    let ctx = common::auth_server::temp_auth("cc");
    let st = start_server().await;
    let url = st.url();
    let server = configured(
        &url,
        json!({"grant": "client_credentials", "clientId": CLIENT_ID,
               "clientSecret": "${CC_SECRET}", "scopes": ["mcp:tools"]}),
    );
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "m2m", "connected").await;
    {
        let st = st.state();
        let (params, authorization) = &st.requests[0];
        assert_eq!(params["grant_type"], "client_credentials");
        assert_eq!(params["resource"], url, "RFC 8707 resource");
        assert_eq!(params["scope"], "mcp:tools");
        assert!(!params.contains_key("client_secret"), "Basic, not the body");
        assert!(authorization.as_deref().unwrap().starts_with("Basic "));
    }
    let name = mcp_harness_catalog::qualify("m2m", "echo");
    let call = || runtime.call_tool(&name, json!({"message": "hi"}).as_object().cloned());
    assert!(!call().await.expect("call").is_error());

    // The token file: 0600, the token kept (shared with other processes), the secret not.
    let path = ctx.store("m2m", &url).path();
    assert_eq!(path.parent().unwrap(), ctx.dir());
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("cc-1-token"));
    assert!(!text.contains(SECRET), "the client secret is never stored");

    // Past its lifetime: no refresh token, so the grant runs again before the next call.
    tokio::time::sleep(Duration::from_secs(TOKEN_SECS + 1)).await;
    let calls = (0..10).map(|_| call());
    for result in futures::future::join_all(calls).await {
        assert!(!result.expect("call after renewal").is_error());
    }
    let grants = st.state().requests.len();
    assert_eq!(grants, 2, "one new token for ten concurrent calls");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("cc-2-token"), "the new token is stored");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_key_jwt_signs_an_assertion_for_the_authorization_server() {
    let ctx = common::auth_server::temp_auth("cc");
    let st = start_server().await;
    let url = st.url();
    let key_dir = mcp_harness_fixture::scratch::dir("cc-key");
    let key_file = key_dir.join("client.pem");
    std::fs::write(&key_file, TEST_KEY).unwrap();
    let server = configured(
        &url,
        json!({"grant": "client_credentials", "clientId": CLIENT_ID,
               "privateKeyFile": key_file.to_string_lossy(), "signingAlgorithm": "ES256"}),
    );
    assert!(!format!("{server:?}").contains("MIGHAgEA"));
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "m2m", "connected").await;
    {
        let st = st.state();
        let (params, authorization) = &st.requests[0];
        assert!(
            authorization.is_none(),
            "the assertion authenticates the client"
        );
        assert!(!params.contains_key("client_secret"));
        // No `oauth.scopes`: the protected resource's scopes are asked for.
        assert_eq!(params["scope"], "mcp:tools");
    }
    let name = mcp_harness_catalog::qualify("m2m", "echo");
    let result = runtime
        .call_tool(&name, json!({"message": "hi"}).as_object().cloned())
        .await
        .expect("call");
    assert!(!result.is_error());
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&key_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_client_is_needs_auth_naming_the_keys_never_the_secret() {
    let ctx = common::auth_server::temp_auth("cc");
    let st = start_server().await;
    let url = st.url();
    let text = json!({"mcpServers": {"m2m": {"url": url, "oauth":
        {"grant": "client_credentials", "clientId": CLIENT_ID, "clientSecret": "wrong-secret-xyz"}}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None).unwrap();
    let runtime = common::auth_server::start_with_auth(vec![config.servers["m2m"].clone()], &ctx);
    common::wait_state(&runtime, "m2m", "needs-auth").await;
    let reason = runtime.snapshot().servers["m2m"]
        .last_error
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("server `m2m`"), "{reason}");
    assert!(reason.contains("invalid_client"), "{reason}");
    assert!(reason.contains("`oauth.clientSecret`"), "{reason}");
    assert!(!reason.contains("wrong-secret-xyz"), "{reason}");
    // Needs-auth is not retried: no further token requests.
    let asked = st.state().requests.len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(st.state().requests.len(), asked);
    runtime.shutdown().await;
}

#[test]
fn oauth_config_errors_name_the_server_and_key() {
    let parse = |oauth: serde_json::Value| {
        let text = json!({"mcpServers": {"m2m": {"url": "https://x.example/mcp", "oauth": oauth}}});
        Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let err = parse(json!({"grant": "client_credentials", "clientSecret": "s3cr3t"})).unwrap_err();
    assert!(err.contains("server \"m2m\""), "{err}");
    assert!(err.contains("`oauth.clientId` is required"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let err = parse(json!({"grant": "client_credentials", "clientId": "c"})).unwrap_err();
    assert!(err.contains("`oauth.clientSecret`"), "{err}");
    let err = parse(json!({"grant": "client_credentials", "clientId": "c",
        "clientSecret": "s3cr3t", "privateKey": "k"}))
    .unwrap_err();
    assert!(err.contains("only one of"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let err = parse(json!({"grant": "implicit"})).unwrap_err();
    assert!(err.contains("`oauth.grant`"), "{err}");
    let err = parse(json!({"clientId": "c", "signingAlgorithm": "HS256"})).unwrap_err();
    assert!(err.contains("`oauth.signingAlgorithm`"), "{err}");
    let err = parse(json!({"clientId": "c", "privateKeyFile": "k.pem"})).unwrap_err();
    assert!(err.contains("client_credentials"), "{err}");
    let err = parse(json!({"clientSecrets": "x"})).unwrap_err();
    assert!(
        err.contains("`oauth`") && err.contains("clientSecrets"),
        "{err}"
    );
    // An unset variable makes only this server unusable (failed from the start, saying why).
    let text = json!({"mcpServers": {"m2m": {"url": "https://x.example/mcp", "oauth":
        {"grant": "client_credentials", "clientId": "c", "clientSecret": "${MISSING_SECRET_VAR}"}}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None)
        .expect("the file loads");
    let err = config.servers["m2m"].unusable.clone().unwrap_or_default();
    assert!(!config.servers["m2m"].enabled);
    assert!(
        err.contains("`oauth.clientSecret`") && err.contains("MISSING_SECRET_VAR"),
        "{err}"
    );
    let err = parse(json!({"grant": "client_credentials", "clientId": "c",
        "clientSecret": "abc${oops"}))
    .unwrap_err();
    assert!(!err.contains("abc"), "{err}");
    assert!(
        parse(json!({"grant": "client_credentials", "clientId": "c", "clientSecret": "s"})).is_ok()
    );
    assert!(parse(json!({"clientId": "c", "scopes": ["a"]})).is_ok());
    // Not for stdio servers.
    let text = json!({"mcpServers": {"local": {"command": "x", "oauth": {"clientId": "c"}}}});
    let err = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`oauth` applies to Streamable HTTP servers only"),
        "{err}"
    );
}

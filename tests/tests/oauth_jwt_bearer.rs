//! The JWT bearer grants (RFC 7523 §2.1) end to end against a local authorization server,
//! identity provider and protected MCP server (the fixture behind a bearer check):
//! - workload identity federation (`oauth.grant: "jwt_bearer"`): the workload's JWT, read from
//!   `oauth.assertionFile` at each token request (a rotated file is used at the next one), is the
//!   assertion;
//! - enterprise-managed authorization (`"enterprise_managed"`, SEP-990): the ID token is
//!   exchanged at the identity provider (RFC 8693) for an ID-JAG, which is the assertion of a
//!   JWT bearer grant whose client authenticates with HTTP Basic;
//! - a refused assertion or exchange is needs-auth, naming the server and the config keys and
//!   never a JWT or a secret; config errors name the server and the `oauth.*` key.

mod common;

use common::auth_server::{AuthOptions, AuthServer, JWT_BEARER, b64_encode as base64};

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_harness_runtime::Config;
use serde_json::json;

/// Lifetime of issued access tokens: short, so the harness must get a new one during the test.
const TOKEN_SECS: u64 = 3;
const CLIENT_ID: &str = "app-client";
const SECRET: &str = "app-secret-value";
const IDP_CLIENT_ID: &str = "idp-client";
const ID_TOKEN: &str = "eyJhbGciOiJFUzI1NiJ9.aWQtdG9rZW4tb2YtYWxpY2U.c2lnLWlk";

/// The authorization server running the JWT bearer grant (client [`CLIENT_ID`] with HTTP
/// Basic, or a public client) and the identity provider exchanging [`ID_TOKEN`].
async fn start_server() -> AuthServer {
    AuthServer::start(AuthOptions::jwt_bearer(
        (CLIENT_ID, SECRET),
        ID_TOKEN,
        TOKEN_SECS,
    ))
    .await
}

/// The server `jb` at `url` with `oauth`, read through the config parser (`${APP_SECRET}` is
/// the client secret).
fn configured(url: &str, oauth: serde_json::Value) -> mcp_harness_runtime::ServerConfig {
    let text = json!({"mcpServers": {"jb": {"type": "http", "url": url, "oauth": oauth}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|v| {
        (v == "APP_SECRET").then(|| SECRET.to_string())
    })
    .expect("valid config");
    assert!(
        !format!("{config:?}").contains(SECRET),
        "the secret is redacted in Debug"
    );
    config.servers["jb"].clone()
}

/// A new private directory for the JWT files of one test.
fn jwt_dir() -> PathBuf {
    mcp_harness_fixture::scratch::dir("jb-jwt")
}

async fn call_echo(runtime: &mcp_harness_runtime::Runtime) {
    let name = mcp_harness_catalog::qualify("jb", "echo");
    let result = runtime
        .call_tool(&name, json!({"message": "hi"}).as_object().cloned())
        .await
        .expect("call");
    assert!(!result.is_error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jwt_bearer_sends_the_workload_token_and_reads_it_again_for_each_grant() {
    let ctx = common::auth_server::temp_auth("jb");
    let st = start_server().await;
    let url = st.url();
    let dir = jwt_dir();
    let file = dir.join("token");
    let first = "eyJhbGciOiJFUzI1NiJ9.d29ya2xvYWQtMQ.c2lnLTE";
    let second = "eyJhbGciOiJFUzI1NiJ9.d29ya2xvYWQtMg.c2lnLTI";
    std::fs::write(&file, format!("{first}\n")).unwrap();
    st.state().accepted.insert(first.into());
    let server = configured(
        &url,
        json!({"grant": "jwt_bearer", "clientId": "workload-1",
               "assertionFile": file.to_string_lossy()}),
    );
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "jb", "connected").await;
    {
        let st = st.state();
        let (params, authorization) = &st.requests[0];
        assert_eq!(params["grant_type"], JWT_BEARER);
        assert_eq!(params["assertion"], first, "the file's JWT, trimmed");
        assert_eq!(params["client_id"], "workload-1", "a public client");
        assert_eq!(params["resource"], url, "RFC 8707 resource");
        assert_eq!(params["scope"], "mcp:tools");
        assert!(authorization.is_none());
    }
    call_echo(&runtime).await;
    // The token file keeps the access token, never the workload's JWT.
    let path = ctx.store("jb", &url).path();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("jb-1-token"));
    assert!(!text.contains(first));

    // The workload token rotates: the old one is no longer accepted, the file has the new one.
    std::fs::write(&file, second).unwrap();
    {
        let mut st = st.state();
        st.accepted.remove(first);
        st.accepted.insert(second.into());
    }
    tokio::time::sleep(Duration::from_secs(TOKEN_SECS + 1)).await;
    call_echo(&runtime).await;
    {
        let st = st.state();
        assert_eq!(st.requests.len(), 2, "one new grant after expiry");
        assert_eq!(st.requests[1].0["assertion"], second, "the rotated JWT");
    }
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_workload_token_is_needs_auth_naming_the_key_never_the_jwt() {
    let ctx = common::auth_server::temp_auth("jb");
    let st = start_server().await;
    let url = st.url();
    let dir = jwt_dir();
    let file = dir.join("token");
    // Not in the accepted set: an expired or wrong-audience token, say.
    std::fs::write(&file, "eyJhbGciOiJFUzI1NiJ9.ZXhwaXJlZA.c2VjcmV0LXNpZw").unwrap();
    let server = configured(
        &url,
        json!({"grant": "jwt_bearer", "assertionFile": file.to_string_lossy()}),
    );
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "jb", "needs-auth").await;
    let reason = runtime.snapshot().servers["jb"]
        .last_error
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("server `jb`"), "{reason}");
    assert!(reason.contains("invalid_grant"), "{reason}");
    assert!(reason.contains("`oauth.assertionFile`"), "{reason}");
    assert!(!reason.contains("c2VjcmV0LXNpZw"), "{reason}");
    {
        let st = st.state();
        assert!(
            !st.requests[0].0.contains_key("client_id"),
            "no `oauth.clientId`: none sent"
        );
    }
    // No retry and no other grant after the refusal.
    let asked = st.state().requests.len();
    assert_eq!(asked, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(st.state().requests.len(), asked);
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enterprise_managed_exchanges_the_id_token_for_an_id_jag_then_runs_the_jwt_bearer_grant() {
    let ctx = common::auth_server::temp_auth("jb");
    let st = start_server().await;
    let (base, url) = (st.base.clone(), st.url());
    let dir = jwt_dir();
    let file = dir.join("id_token");
    std::fs::write(&file, ID_TOKEN).unwrap();
    let server = configured(
        &url,
        json!({"grant": "enterprise_managed", "clientId": CLIENT_ID,
               "clientSecret": "${APP_SECRET}",
               "idpTokenEndpoint": format!("{base}/idp/token"), "idpClientId": IDP_CLIENT_ID,
               "idTokenFile": file.to_string_lossy()}),
    );
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "jb", "connected").await;
    {
        let st = st.state();
        let (exchange, idp_auth) = &st.exchanges[0];
        assert_eq!(
            exchange["grant_type"],
            "urn:ietf:params:oauth:grant-type:token-exchange"
        );
        assert_eq!(exchange["subject_token"], ID_TOKEN);
        assert_eq!(
            exchange["subject_token_type"],
            "urn:ietf:params:oauth:token-type:id_token"
        );
        assert_eq!(
            exchange["requested_token_type"],
            "urn:ietf:params:oauth:token-type:id-jag"
        );
        assert_eq!(
            exchange["audience"], base,
            "the authorization server's issuer"
        );
        assert_eq!(exchange["resource"], url, "the MCP server");
        assert_eq!(exchange["client_id"], IDP_CLIENT_ID);
        assert!(idp_auth.is_none(), "no `oauth.idpClientSecret`: no Basic");
        let (params, authorization) = &st.requests[0];
        assert_eq!(params["grant_type"], JWT_BEARER);
        assert!(
            st.accepted.contains(&params["assertion"]),
            "the ID-JAG the identity provider issued"
        );
        assert_eq!(
            authorization.as_deref(),
            Some(format!("Basic {}", base64(&format!("{CLIENT_ID}:{SECRET}"))).as_str()),
            "client_secret_basic at the authorization server"
        );
        assert!(!params.contains_key("client_secret"));
    }
    call_echo(&runtime).await;
    let text = std::fs::read_to_string(ctx.store("jb", &url).path()).unwrap();
    assert!(!text.contains(ID_TOKEN), "the ID token is never stored");
    assert!(!text.contains(SECRET), "the secret is never stored");
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_token_exchange_is_needs_auth_naming_the_id_token_keys() {
    let ctx = common::auth_server::temp_auth("jb");
    let st = start_server().await;
    let (base, url) = (st.base.clone(), st.url());
    let dir = jwt_dir();
    let file = dir.join("id_token");
    std::fs::write(&file, "eyJhbGciOiJFUzI1NiJ9.c3RhbGU.c3RhbGUtc2ln").unwrap();
    let server = configured(
        &url,
        json!({"grant": "enterprise_managed", "clientId": CLIENT_ID,
               "clientSecret": "${APP_SECRET}",
               "idpTokenEndpoint": format!("{base}/idp/token"),
               "idTokenFile": file.to_string_lossy()}),
    );
    let runtime = common::auth_server::start_with_auth(vec![server], &ctx);
    common::wait_state(&runtime, "jb", "needs-auth").await;
    let reason = runtime.snapshot().servers["jb"]
        .last_error
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("server `jb`"), "{reason}");
    assert!(reason.contains("identity provider"), "{reason}");
    assert!(reason.contains("invalid_grant"), "{reason}");
    assert!(reason.contains("`oauth.idTokenFile`"), "{reason}");
    assert!(!reason.contains("c3RhbGUtc2ln"), "{reason}");
    assert!(!reason.contains(SECRET), "{reason}");
    {
        let st = st.state();
        assert_eq!(st.exchanges.len(), 1);
        assert!(
            st.requests.is_empty(),
            "no grant at the authorization server"
        );
    }
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jwt_bearer_config_errors_name_the_server_and_key() {
    let parse = |oauth: serde_json::Value| {
        let text = json!({"mcpServers": {"wl": {"url": "https://x.example/mcp", "oauth": oauth}}});
        Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let err = parse(json!({"grant": "jwt_bearer"})).unwrap_err();
    assert!(err.contains("server \"wl\""), "{err}");
    assert!(
        err.contains("`oauth.assertionFile`") && err.contains("`oauth.assertionEnv`"),
        "{err}"
    );
    let err = parse(json!({"grant": "jwt_bearer", "assertionFile": "a", "assertionEnv": "B"}))
        .unwrap_err();
    assert!(err.contains("only one of"), "{err}");
    let err = parse(json!({"grant": "client_credentials", "clientId": "c",
        "clientSecret": "s3cr3t", "assertionFile": "a"}))
    .unwrap_err();
    assert!(err.contains("`oauth.assertionFile`"), "{err}");
    assert!(err.contains("\"jwt_bearer\""), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let err = parse(json!({"grant": "enterprise_managed", "clientId": "c",
        "idTokenFile": "t"}))
    .unwrap_err();
    assert!(err.contains("`oauth.idpTokenEndpoint`"), "{err}");
    let err = parse(json!({"grant": "enterprise_managed", "clientId": "c",
        "idpTokenEndpoint": "https://idp.example/token"}))
    .unwrap_err();
    assert!(err.contains("`oauth.idTokenFile`"), "{err}");
    let err = parse(json!({"grant": "enterprise_managed",
        "idpTokenEndpoint": "https://idp.example/token", "idTokenEnv": "ID_TOKEN"}))
    .unwrap_err();
    assert!(err.contains("`oauth.clientId` is required"), "{err}");
    let err = parse(json!({"grant": "enterprise_managed", "clientId": "c",
        "idpTokenEndpoint": "https://idp.example/token", "idTokenEnv": "ID_TOKEN",
        "idpClientSecret": "idp-s3cr3t"}))
    .unwrap_err();
    assert!(err.contains("`oauth.idpClientId`"), "{err}");
    assert!(!err.contains("idp-s3cr3t"), "{err}");
    let err = parse(json!({"grant": "jwt_bearer", "assertionEnv": "T",
        "idpTokenEndpoint": "https://idp.example/token"}))
    .unwrap_err();
    assert!(err.contains("`oauth.idpTokenEndpoint`"), "{err}");
    let err = parse(json!({"grant": "jwt_bearer", "assertionEnv": "T",
        "clientSecret": "s3cr3t"}))
    .unwrap_err();
    assert!(err.contains("`oauth.clientId` is required"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let err = parse(json!({"grant": "saml"})).unwrap_err();
    assert!(err.contains("\"jwt_bearer\"") && err.contains("\"enterprise_managed\""));
    assert!(parse(json!({"grant": "jwt_bearer", "assertionEnv": "WORKLOAD_TOKEN"})).is_ok());
    assert!(
        parse(json!({"grant": "enterprise_managed", "clientId": "c",
            "clientSecret": "s", "idpTokenEndpoint": "https://idp.example/token",
            "idpClientId": "i", "idpClientSecret": "is", "idTokenFile": "id.jwt"}))
        .is_ok()
    );
    // The JWT sources are never in Debug output, only where they are.
    let text = json!({"mcpServers": {"wl": {"url": "https://x.example/mcp", "oauth":
        {"grant": "enterprise_managed", "clientId": "c", "clientSecret": "s3cr3t",
         "idpTokenEndpoint": "https://idp.example/token", "idpClientId": "i",
         "idpClientSecret": "idp-s3cr3t", "idTokenFile": "id.jwt"}}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None).unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(
        shown.contains("/cfg/id.jwt"),
        "relative to the config file: {shown}"
    );
}

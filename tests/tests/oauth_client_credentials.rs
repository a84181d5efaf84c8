//! The client credentials grant end to end against a local authorization server + protected MCP
//! server (the fixture behind a bearer check): a server configured with
//! `oauth.grant: "client_credentials"` connects with no login, its client authenticated with
//! HTTP Basic or a signed JWT assertion; a token that expires is replaced by a new grant (there is
//! no refresh token); a refused client is needs-auth with an error naming the config keys and
//! never the secret.

mod common;

use common::http_form::{Json, form};

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::Config;
use mcp_harness_runtime::transport::auth;
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

#[derive(Default)]
struct AuthServer {
    base: String,
    access: HashMap<String, std::time::Instant>,
    counter: u64,
    /// Every token request's form and `Authorization` header.
    requests: Vec<(HashMap<String, String>, Option<String>)>,
}

type Shared = Arc<Mutex<AuthServer>>;

/// Base64 (standard or URL-safe, padding optional).
fn b64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let (ok, base) = {
        let st = st.lock().unwrap();
        let ok = token
            .as_ref()
            .and_then(|t| st.access.get(t))
            .is_some_and(|expires| *expires > std::time::Instant::now());
        (ok, st.base.clone())
    };
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                format!(
                    "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                ),
            )],
        )
            .into_response();
    }
    next.run(req).await
}

/// The token endpoint: only `client_credentials`, the client authenticated by Basic (id +
/// secret) or by a JWT assertion whose claims name the client and this server.
async fn token(State(st): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let params = form(&body);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut st = st.lock().unwrap();
    st.requests.push((params.clone(), authorization.clone()));
    let refuse = |status, e: &str| (status, Json(json!({"error": e}))).into_response();
    if params.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    let authenticated = match (&authorization, params.get("client_assertion")) {
        (Some(basic), None) => basic
            .strip_prefix("Basic ")
            .map(|b| String::from_utf8_lossy(&b64(b)).into_owned())
            .is_some_and(|pair| pair == format!("{CLIENT_ID}:{SECRET}")),
        (None, Some(jwt)) => {
            let parts: Vec<&str> = jwt.split('.').collect();
            let claims: serde_json::Value = parts
                .get(1)
                .and_then(|p| serde_json::from_slice(&b64(p)).ok())
                .unwrap_or_default();
            parts.len() == 3
                && params.get("client_assertion_type").map(String::as_str)
                    == Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
                && claims["iss"] == CLIENT_ID
                && claims["sub"] == CLIENT_ID
                && claims["aud"] == st.base.as_str()
                && claims["exp"].as_u64().is_some()
                // An ES256 signature is 64 bytes (r || s).
                && b64(parts[2]).len() == 64
        }
        _ => false,
    };
    if !authenticated {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    st.counter += 1;
    let access = format!("cc-{}-token", st.counter);
    st.access.insert(
        access.clone(),
        std::time::Instant::now() + Duration::from_secs(TOKEN_SECS),
    );
    Json(
        json!({"access_token": access, "token_type": "Bearer", "expires_in": TOKEN_SECS,
                "scope": params.get("scope").cloned().unwrap_or_default()}),
    )
    .into_response()
}

async fn start_server() -> (String, Shared, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let st: Shared = Arc::new(Mutex::new(AuthServer {
        base: base.clone(),
        ..Default::default()
    }));
    let mcp = common::fixture_mcp_service(FixtureOptions::default());
    let b = base.clone();
    let router = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(st.clone(), guard))
        .merge(common::http_form::discovery_routes(
            &b,
            json!({"response_types_supported": ["code"], "grant_types_supported": ["client_credentials"], "token_endpoint_auth_methods_supported": ["client_secret_basic", "private_key_jwt"], "token_endpoint_auth_signing_alg_values_supported": ["ES256"]}),
        ))
        .route("/token", post(token))
        .with_state(st.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (base, st, task)
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

fn temp_store() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-harness-cc-test-{}", uuid::Uuid::new_v4()));
    assert!(
        auth::set_store_dir(dir.clone()),
        "store dir set once per process"
    );
    dir
}

/// Each test gets its own server URL, so their token files differ within the one store dir.
static STORE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn store() -> &'static std::path::PathBuf {
    STORE.get_or_init(temp_store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_secret_basic_connects_without_login_and_renews_the_token() {
    let dir = store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    let server = configured(
        &url,
        json!({"grant": "client_credentials", "clientId": CLIENT_ID,
               "clientSecret": "${CC_SECRET}", "scopes": ["mcp:tools"]}),
    );
    let runtime = common::start(vec![server]);
    common::wait_state(&runtime, "m2m", "connected").await;
    {
        let st = st.lock().unwrap();
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
    let path = auth::FileCredentialStore::for_server("m2m", &url).path();
    assert_eq!(path.parent().unwrap(), dir.as_path());
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
    let grants = st.lock().unwrap().requests.len();
    assert_eq!(grants, 2, "one new token for ten concurrent calls");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("cc-2-token"), "the new token is stored");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_key_jwt_signs_an_assertion_for_the_authorization_server() {
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    let key_dir = std::env::temp_dir().join(format!("mcp-harness-cc-key-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&key_dir).unwrap();
    let key_file = key_dir.join("client.pem");
    std::fs::write(&key_file, TEST_KEY).unwrap();
    let server = configured(
        &url,
        json!({"grant": "client_credentials", "clientId": CLIENT_ID,
               "privateKeyFile": key_file.to_string_lossy(), "signingAlgorithm": "ES256"}),
    );
    assert!(!format!("{server:?}").contains("MIGHAgEA"));
    let runtime = common::start(vec![server]);
    common::wait_state(&runtime, "m2m", "connected").await;
    {
        let st = st.lock().unwrap();
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
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    let text = json!({"mcpServers": {"m2m": {"url": url, "oauth":
        {"grant": "client_credentials", "clientId": CLIENT_ID, "clientSecret": "wrong-secret-xyz"}}}});
    let config = Config::parse(&text.to_string(), Path::new("/cfg/.mcp.json"), &|_| None).unwrap();
    let runtime = common::start(vec![config.servers["m2m"].clone()]);
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
    let asked = st.lock().unwrap().requests.len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(st.lock().unwrap().requests.len(), asked);
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
    let err = parse(json!({"grant": "client_credentials", "clientId": "c",
        "clientSecret": "${MISSING_SECRET_VAR}"}))
    .unwrap_err();
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

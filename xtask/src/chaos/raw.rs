//! A raw JSON-RPC MCP server that breaks the protocol on purpose, over stdio
//! (`cargo xtask chaos-server MODE`, started by the harness as a server command) and over HTTP
//! (served inside the chaos driver, one listener per run).
//!
//! rmcp-based servers (the fixture) cannot send what a broken server sends — invalid UTF-8, a
//! wrong response id, a line that never ends — so these faults are written here byte by byte.
//!
//! Invariant: every loop is bounded in count or time — the stdio server stops at stdin EOF, an
//! endless line or flood stops at a byte/count cap or when the reader goes away, the HTTP
//! listener stops when its [`HttpServer`] is dropped and serves a bounded number of
//! connections, each endless SSE stream stops after [`ENDLESS_FOR`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How the stdio server misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Behaves: one `echo` tool.
    Ok,
    /// Answers `initialize`, then nothing.
    HangAfterInit,
    /// Declares tools and prompts; answers `tools/list`, never `prompts/list`.
    HangOnListing,
    /// Exits (status 3) when a tool is called, without answering.
    DieMidCall,
    /// Answers `tools/call` with another id.
    WrongId,
    /// Writes a line that is not JSON before every answer.
    NonJson,
    /// Answers `tools/call` with invalid UTF-8 inside a string.
    InvalidUtf8,
    /// Answers `tools/call` with a 17 MiB message (over rmcp's 16 MiB line limit).
    Oversize,
    /// Answers `tools/call` with a line that never ends (until the reader goes or 1 GiB).
    EndlessLine,
    /// Sends 50,000 log notifications before answering `tools/call`.
    LogFlood,
    /// Lists, beside `echo`, a tool whose schema nests 300 levels (past serde_json's 128).
    NestedSchema,
    /// Every `tools/list` page has a new `nextCursor`.
    EndlessCursor,
    /// Every `tools/list` page has the same `nextCursor`.
    RepeatedCursor,
    /// Behaves, but does not exit at stdin EOF (sleeps [`IGNORE_EOF_FOR`] instead), like
    /// servers that only a signal stops.
    IgnoreEof,
}

/// How long [`Mode::IgnoreEof`] outlives its stdin.
const IGNORE_EOF_FOR: Duration = Duration::from_secs(300);

impl Mode {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ok" => Self::Ok,
            "hang-after-init" => Self::HangAfterInit,
            "hang-on-listing" => Self::HangOnListing,
            "die-mid-call" => Self::DieMidCall,
            "wrong-id" => Self::WrongId,
            "non-json" => Self::NonJson,
            "invalid-utf8" => Self::InvalidUtf8,
            "oversize" => Self::Oversize,
            "endless-line" => Self::EndlessLine,
            "log-flood" => Self::LogFlood,
            "nested-schema" => Self::NestedSchema,
            "endless-cursor" => Self::EndlessCursor,
            "repeated-cursor" => Self::RepeatedCursor,
            "ignore-eof" => Self::IgnoreEof,
            _ => return None,
        })
    }
}

/// Size of the oversized message: 17 MiB, over rmcp's 16 MiB line limit.
const OVERSIZE_BYTES: usize = 17 << 20;
/// Most bytes an endless line writes before giving up on the reader.
const ENDLESS_CAP: usize = 1 << 30;
/// Log notifications sent by [`Mode::LogFlood`].
const FLOOD_COUNT: usize = 50_000;
/// How long an endless SSE stream keeps sending comments.
const ENDLESS_FOR: Duration = Duration::from_secs(120);

fn echo_tool() -> Value {
    json!({
        "name": "echo",
        "description": "Echoes `message`.",
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}
    })
}

fn nested_tool() -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..150 {
        // Two JSON levels per step: 300 in all.
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    json!({"name": "deep", "description": "nested 300 levels", "inputSchema": schema})
}

fn initialize_result(request: &Value, prompts: bool) -> Value {
    let version = request
        .pointer("/params/protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("2025-06-18");
    let mut capabilities = json!({"tools": {"listChanged": false}});
    if prompts {
        capabilities["prompts"] = json!({"listChanged": false});
    }
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": "chaos-raw", "version": "0.0.0"}
    })
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The answer a well-behaved server gives (`tools/list` pages shaped by `mode`'s cursors).
fn normal_answer(mode: Mode, request: &Value) -> Option<Value> {
    let id = request.get("id")?;
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    Some(match method {
        "initialize" => result(id, initialize_result(request, mode == Mode::HangOnListing)),
        "ping" => result(id, json!({})),
        "tools/list" => {
            let cursor = request.pointer("/params/cursor").and_then(Value::as_str);
            match mode {
                Mode::NestedSchema => result(id, json!({"tools": [echo_tool(), nested_tool()]})),
                Mode::EndlessCursor => {
                    let page = cursor
                        .and_then(|c| c.strip_prefix('c'))
                        .and_then(|n| n.parse::<u64>().ok())
                        .unwrap_or(0);
                    let mut tool = echo_tool();
                    if page > 0 {
                        tool["name"] = json!(format!("echo_{page}"));
                    }
                    result(
                        id,
                        json!({"tools": [tool], "nextCursor": format!("c{}", page + 1)}),
                    )
                }
                Mode::RepeatedCursor => {
                    result(id, json!({"tools": [echo_tool()], "nextCursor": "again"}))
                }
                _ => result(id, json!({"tools": [echo_tool()]})),
            }
        }
        "prompts/list" => result(id, json!({"prompts": []})),
        "tools/call" => {
            let message = request
                .pointer("/params/arguments/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            result(
                id,
                json!({"content": [{"type": "text", "text": message}], "isError": false}),
            )
        }
        other => error(id, -32601, &format!("method not found: {other}")),
    })
}

fn write_line(out: &mut impl Write, value: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    out.write_all(&bytes)?;
    out.flush()
}

/// `cargo xtask chaos-server MODE`: the raw stdio server. Returns at stdin EOF.
pub(crate) fn serve_stdio(args: &[String]) -> std::process::ExitCode {
    let Some(mode) = args.first().and_then(|m| Mode::parse(m)) else {
        eprintln!("usage: cargo xtask chaos-server MODE (got {args:?})");
        return std::process::ExitCode::from(2);
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut initialized = false;
    for line in stdin.lock().split(b'\n') {
        let Ok(line) = line else { break };
        let Ok(request) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        let Some(id) = request.get("id").cloned() else {
            continue; // a notification
        };
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        if method.is_empty() {
            continue; // an answer to something we never asked
        }
        let hang = match mode {
            Mode::HangAfterInit => initialized,
            Mode::HangOnListing => method == "prompts/list",
            _ => false,
        };
        if method == "initialize" {
            initialized = true;
        }
        if hang {
            continue;
        }
        let written = if method == "tools/call" {
            call_answer(mode, &id, &request, &mut out)
        } else {
            let Some(answer) = normal_answer(mode, &request) else {
                continue;
            };
            if mode == Mode::NonJson {
                let _ = out.write_all(b"this line is not JSON {\n");
            }
            write_line(&mut out, &answer)
        };
        if written.is_err() {
            break; // the reader is gone
        }
    }
    if mode == Mode::IgnoreEof {
        std::thread::sleep(IGNORE_EOF_FOR);
    }
    std::process::ExitCode::SUCCESS
}

fn call_answer(
    mode: Mode,
    id: &Value,
    request: &Value,
    out: &mut impl Write,
) -> std::io::Result<()> {
    match mode {
        Mode::DieMidCall => {
            let _ = out.flush();
            std::process::exit(3);
        }
        Mode::WrongId => {
            let wrong = match id.as_i64() {
                Some(n) => json!(n + 1000),
                None => json!(format!("not-{id}")),
            };
            write_line(out, &result(&wrong, json!({"content": []})))
        }
        Mode::InvalidUtf8 => {
            let mut bytes = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"bad "#
            )
            .into_bytes();
            bytes.extend_from_slice(b"\xff\xfe\xc0");
            bytes.extend_from_slice(b"\"}]}}\n");
            out.write_all(&bytes)?;
            out.flush()
        }
        Mode::Oversize => {
            let text = "x".repeat(OVERSIZE_BYTES);
            write_line(
                out,
                &result(id, json!({"content": [{"type": "text", "text": text}]})),
            )
        }
        Mode::EndlessLine => {
            let head = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
            );
            out.write_all(head.as_bytes())?;
            let chunk = vec![b'a'; 64 << 10];
            let mut written = 0;
            while written < ENDLESS_CAP {
                out.write_all(&chunk)?;
                written += chunk.len();
            }
            out.flush()
        }
        Mode::LogFlood => {
            for i in 0..FLOOD_COUNT {
                write_line(
                    out,
                    &json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": format!("flood {i}")}}),
                )?;
            }
            normal(mode, request, out)
        }
        Mode::NonJson => {
            out.write_all(b"this line is not JSON {\n")?;
            normal(mode, request, out)
        }
        _ => normal(mode, request, out),
    }
}

fn normal(mode: Mode, request: &Value, out: &mut impl Write) -> std::io::Result<()> {
    match normal_answer(mode, request) {
        Some(answer) => write_line(out, &answer),
        None => Ok(()),
    }
}

/// Which HTTP request an [`HttpFault`] hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Initialize,
    /// `notifications/initialized`.
    Initialized,
    List,
    Call,
    /// The GET that opens the server's stream.
    Stream,
}

/// What the HTTP server does to the requests of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HttpFault {
    Status500,
    Status404,
    /// Closes the connection without an answer.
    Drop,
    /// Answers 200 `text/event-stream` and sends only comments, for [`ENDLESS_FOR`].
    EndlessSse,
}

/// A Streamable HTTP server (stateless, JSON answers) on 127.0.0.1 that applies `fault` to
/// every request of `kind`. Stops accepting when dropped.
pub(crate) struct HttpServer {
    pub url: String,
    stop: Arc<AtomicBool>,
}

/// Most connections one server accepts.
const MAX_CONNECTIONS: usize = 2_000;

impl HttpServer {
    pub(crate) fn start(fault: Option<(RequestKind, HttpFault)>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut served = 0;
            while !stopped.load(Ordering::Relaxed) && served < MAX_CONNECTIONS {
                match listener.accept() {
                    Ok((stream, _)) => {
                        served += 1;
                        let stopped = stopped.clone();
                        std::thread::spawn(move || {
                            let _ = serve_connection(stream, fault, &stopped);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Self { url, stop })
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Serves requests on one connection until it closes (keep-alive), at most 10,000.
fn serve_connection(
    stream: TcpStream,
    fault: Option<(RequestKind, HttpFault)>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    for _ in 0..10_000 {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let http_method = request_line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_owned();
        let mut length = 0usize;
        for _ in 0..200 {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length.min(64 << 20)];
        reader.read_exact(&mut body)?;
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let kind = match http_method.as_str() {
            "GET" => Some(RequestKind::Stream),
            "POST" => match message.get("method").and_then(Value::as_str) {
                Some("initialize") => Some(RequestKind::Initialize),
                Some("notifications/initialized") => Some(RequestKind::Initialized),
                Some("tools/list") => Some(RequestKind::List),
                Some("tools/call") => Some(RequestKind::Call),
                _ => None,
            },
            _ => None,
        };
        if let Some((hit, what)) = fault
            && kind == Some(hit)
        {
            match what {
                HttpFault::Status500 => respond(&mut out, "500 Internal Server Error", None)?,
                HttpFault::Status404 => respond(&mut out, "404 Not Found", None)?,
                HttpFault::Drop => return Ok(()),
                HttpFault::EndlessSse => return endless_sse(&mut out, stop),
            }
            continue;
        }
        match http_method.as_str() {
            "GET" => respond(&mut out, "405 Method Not Allowed", None)?,
            "DELETE" => respond(&mut out, "200 OK", None)?,
            "POST" => match normal_answer(Mode::Ok, &message) {
                Some(answer) => respond(&mut out, "200 OK", Some(&answer))?,
                None => respond(&mut out, "202 Accepted", None)?,
            },
            _ => respond(&mut out, "405 Method Not Allowed", None)?,
        }
    }
    Ok(())
}

fn respond(out: &mut TcpStream, status: &str, body: Option<&Value>) -> std::io::Result<()> {
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap_or_default())
        .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(&body)?;
    out.flush()
}

fn endless_sse(out: &mut TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    )?;
    let start = Instant::now();
    while start.elapsed() < ENDLESS_FOR && !stop.load(Ordering::Relaxed) {
        out.write_all(b": still here\n\n")?;
        out.flush()?;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

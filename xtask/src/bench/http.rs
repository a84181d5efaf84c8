//! The HTTP metrics: sequential 1 KiB echo calls over Streamable HTTP beside the same calls over
//! stdio, on the same release fixture binary, in the same run.
//!
//! Four sides, rotated every chunk of calls so each runs in each position equally often:
//! - the harness's governed path to a fixture served over Streamable HTTP (`--transport http`);
//! - the same to a stdio fixture (the figure the HTTP side is compared with);
//! - a hand-written keep-alive HTTP/1.1 client (one `TcpStream`, no SDK, `TCP_NODELAY` on its own
//!   side) against the HTTP fixture: the server side alone;
//! - hand-written JSON-RPC lines over a stdio fixture's pipes: its stdio counterpart.
//!
//! Invariants: every call is checked (its result must come back without `isError`); every loop is
//! bounded by count and by [`BATCH_LIMIT`] / [`CALL_TIMEOUT`]; every fixture this group starts
//! carries the run's tag and is killed (and waited for) before the group returns.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Instant;

use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder, TransportConfig};
use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::report::Metric;
use super::{BATCH_LIMIT, Bench, CALL_TIMEOUT, STARTUP_TIMEOUT, all_connected};

/// The harness's names of the two fixtures (one per transport) and their echo tools.
const STDIO_SERVER: &str = "stdio";
const HTTP_SERVER: &str = "http";
const STDIO_TOOL: &str = "mcp__stdio__echo";
const HTTP_TOOL: &str = "mcp__http__echo";
/// Calls per side before the bench switches to the next side.
const CHUNK: usize = 50;
/// The echoed message: 1 KiB.
const MESSAGE_BYTES: usize = 1024;
/// The protocol version the raw clients speak.
const PROTOCOL: &str = "2025-06-18";
/// Largest raw response (headers or body) the raw clients accept.
const MAX_RAW: usize = 1 << 20;

/// One side of the rotation.
#[derive(Debug, Clone, Copy)]
enum Side {
    HarnessHttp,
    HarnessStdio,
    RawHttp,
    RawStdio,
}

const SIDES: [Side; 4] = [
    Side::HarnessHttp,
    Side::HarnessStdio,
    Side::RawHttp,
    Side::RawStdio,
];

/// Per-call samples and per-chunk totals of one side.
#[derive(Default)]
struct Samples {
    calls: Vec<f64>,
    chunks: Vec<f64>,
}

impl Bench {
    /// `http_echo_per_call`, `http_raw_echo_per_call`, `http_client_side` and their p99s.
    pub(super) async fn http(&self) -> Result<Vec<Metric>, String> {
        let mut http = HttpFixture::start(self).await?;
        let measured = self.http_sides(&http).await;
        http.stop().await;
        self.wait_reaped().await?;
        let [h_http, h_stdio, r_http, r_stdio] = measured?;
        let calls = self.options.calls;
        let ratios = |a: &Samples, b: &Samples| {
            Some(
                a.chunks
                    .iter()
                    .zip(&b.chunks)
                    .map(|(a, b)| a / b)
                    .collect::<Vec<_>>(),
            )
        };
        let what = |text: &str| {
            format!(
                "sequential 1 KiB echo tools/call, {calls} calls per round per side in chunks of {CHUNK}, time per call; {text}"
            )
        };
        let governed = Metric {
            per_call: true,
            pairs: ratios(&h_http, &h_stdio),
            ..Metric::new(
                "http_echo_per_call",
                what("the harness over Streamable HTTP vs the harness over stdio"),
                h_http.calls.clone(),
                h_stdio.calls.clone(),
            )
        };
        let raw = Metric {
            per_call: true,
            pairs: ratios(&r_http, &r_stdio),
            ..Metric::new(
                "http_raw_echo_per_call",
                what(
                    "a hand-written keep-alive HTTP/1.1 client vs hand-written JSON lines over stdio (the server side alone)",
                ),
                r_http.calls.clone(),
                r_stdio.calls.clone(),
            )
        };
        let client = Metric {
            per_call: true,
            pairs: ratios(&h_http, &r_http),
            ..Metric::new(
                "http_client_side",
                what(
                    "the harness over Streamable HTTP vs the hand-written HTTP client (what the harness's client side adds)",
                ),
                h_http.calls,
                r_http.calls,
            )
        };
        let mut metrics = Vec::new();
        for m in [governed, raw, client] {
            let p99 = m.p99();
            metrics.push(m);
            metrics.push(p99);
        }
        Ok(metrics)
    }

    /// Runs the four sides; the fixtures other than `http` are started and stopped here.
    async fn http_sides(&self, http: &HttpFixture) -> Result<[Samples; 4], String> {
        let (calls, warmup) = (self.options.calls, self.options.warmup);
        let runtime = RuntimeBuilder::new(self.http_config(&http.url))
            .start()
            .map_err(|e| e.to_string())?;
        let snapshot = runtime
            .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, 2))
            .await;
        if !all_connected(&snapshot, 2) {
            runtime.shutdown().await;
            return Err(format!(
                "the harness did not connect both fixtures (stdio, http) within {STARTUP_TIMEOUT:?}"
            ));
        }
        let mut lines = match RawStdio::start(self).await {
            Ok(l) => l,
            Err(e) => {
                runtime.shutdown().await;
                return Err(e);
            }
        };
        let measured = async {
            let mut raw = RawHttp::connect(http.addr, "echo").await?;
            let mut samples: [Samples; 4] = Default::default();
            let mut sink = Samples::default();
            for side in SIDES {
                run_side(side, &runtime, &mut raw, &mut lines, warmup, &mut sink).await?;
            }
            let mut position = 0;
            for _ in 0..self.options.rounds {
                let mut done = 0;
                while done < calls {
                    let n = CHUNK.min(calls - done);
                    for k in 0..SIDES.len() {
                        let i = (position + k) % SIDES.len();
                        run_side(SIDES[i], &runtime, &mut raw, &mut lines, n, &mut samples[i])
                            .await?;
                    }
                    position += 1;
                    done += n;
                }
            }
            Ok::<_, String>(samples)
        }
        .await;
        runtime.shutdown().await;
        lines.stop().await;
        measured
    }

    /// The harness's config: the stdio fixture as `stdio`, the HTTP fixture at `url` as `http`.
    fn http_config(&self, url: &str) -> Config {
        let mut config = self.config([STDIO_SERVER.to_string()]);
        if let Some(stdio) = config.servers.get(STDIO_SERVER).cloned() {
            let server = mcp_harness_runtime::ServerConfig {
                name: HTTP_SERVER.into(),
                transport: TransportConfig::StreamableHttp {
                    url: url.into(),
                    headers: Default::default(),
                    oauth: None,
                },
                ..stdio
            };
            config.servers.insert(HTTP_SERVER.into(), server);
        }
        config
    }
}

/// `count` calls of one side; each call's time goes to `into.calls`, the chunk's to `into.chunks`.
async fn run_side(
    side: Side,
    runtime: &Runtime,
    raw: &mut RawHttp,
    lines: &mut RawStdio,
    count: usize,
    into: &mut Samples,
) -> Result<(), String> {
    let message = "x".repeat(MESSAGE_BYTES);
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String(message.clone()));
    let prepared = match side {
        Side::HarnessHttp | Side::HarnessStdio => {
            let tool = if matches!(side, Side::HarnessHttp) {
                HTTP_TOOL
            } else {
                STDIO_TOOL
            };
            let step = runtime
                .bind_step(&[])
                .await
                .map_err(|e| format!("harness: bind: {e}"))?;
            Some(
                step.prepare_call(tool)
                    .map_err(|e| format!("harness: prepare {tool}: {e}"))?,
            )
        }
        Side::RawHttp | Side::RawStdio => None,
    };
    let started = Instant::now();
    for i in 0..count {
        if started.elapsed() > BATCH_LIMIT {
            return Err(format!(
                "{side:?}: {i} of {count} calls took over {BATCH_LIMIT:?}"
            ));
        }
        let t = Instant::now();
        let outcome = match (&prepared, side) {
            (Some(call), _) => super::checked("echo", call.call(Some(args.clone()))).await,
            (None, Side::RawHttp) => timed(raw.echo(&message)).await,
            (None, _) => timed(lines.echo(&message)).await,
        };
        outcome.map_err(|e| format!("{side:?}: {e}"))?;
        into.calls.push(t.elapsed().as_secs_f64());
    }
    into.chunks.push(started.elapsed().as_secs_f64());
    Ok(())
}

async fn timed(call: impl Future<Output = Result<(), String>>) -> Result<(), String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(r) => r,
        Err(_) => Err(format!("echo took over {CALL_TIMEOUT:?}")),
    }
}

/// The call of echo tool `tool` with id `id` as a JSON-RPC request body.
fn echo_request(id: u64, tool: &str, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {"message": message}}})
    .to_string()
}

fn initialize_request() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "xtask-bench-raw", "version": "1"}}})
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Checks that `message` answers request `id` with a result that is not an error.
fn check_answer(message: &Value, id: u64) -> Result<(), String> {
    if let Some(error) = message.get("error") {
        return Err(format!("request {id} failed: {error}"));
    }
    match message.get("result") {
        Some(result) if result.get("isError") == Some(&Value::Bool(true)) => {
            Err(format!("request {id}: the tool reported an error"))
        }
        Some(_) => Ok(()),
        None => Err(format!("request {id}: an answer without result or error")),
    }
}

/// The fixture in `--transport http` mode on an ephemeral loopback port.
struct HttpFixture {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
    url: String,
}

impl HttpFixture {
    async fn start(bench: &Bench) -> Result<Self, String> {
        let mut child = Command::new(&bench.fixture)
            .args(["--transport", "http", "--port", "0", "--name", &bench.tag])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", bench.fixture.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the http fixture has no stdout")?;
        // Kept open for the fixture's life: it writes nothing more, but never to a closed pipe.
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let announced = tokio::time::timeout(STARTUP_TIMEOUT, stdout.read_line(&mut line)).await;
        let url = match announced {
            Ok(Ok(_)) => line
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_string),
            _ => None,
        };
        let addr = url.as_deref().and_then(mcp_addr);
        match (url, addr) {
            (Some(url), Some(addr)) => Ok(HttpFixture {
                child,
                _stdout: stdout,
                addr,
                url,
            }),
            _ => {
                let _ = child.kill().await;
                Err(format!(
                    "the http fixture did not announce `listening on http://ADDR/mcp` within {STARTUP_TIMEOUT:?} (got {line:?})"
                ))
            }
        }
    }

    pub(super) async fn stop(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(STARTUP_TIMEOUT, self.child.wait()).await;
    }
}

/// The address of an `http://ADDR/mcp` URL.
pub(super) fn mcp_addr(url: &str) -> Option<SocketAddr> {
    url.strip_prefix("http://")?
        .strip_suffix("/mcp")?
        .parse()
        .ok()
}

/// A hand-written HTTP/1.1 client on one keep-alive connection, in one MCP session, calling
/// one echo tool.
pub(super) struct RawHttp {
    stream: BufReader<TcpStream>,
    tool: String,
    host: String,
    session: Option<String>,
    next_id: u64,
}

/// The parts of a response the raw client looks at.
struct RawResponse {
    status: u16,
    session: Option<String>,
    content_type: String,
    body: Vec<u8>,
}

impl RawHttp {
    /// Connects to the server at `addr` (endpoint `/mcp`) and opens a session; its calls are of
    /// the echo tool named `tool`.
    pub(super) async fn connect(addr: SocketAddr, tool: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("raw http: cannot connect to {addr}: {e}"))?;
        // Only the server's side of the connection is under test.
        stream
            .set_nodelay(true)
            .map_err(|e| format!("raw http: set_nodelay: {e}"))?;
        let mut raw = RawHttp {
            stream: BufReader::new(stream),
            tool: tool.to_string(),
            host: addr.to_string(),
            session: None,
            next_id: 1,
        };
        let init = raw.post(&initialize_request()).await?;
        if init.status != 200 || init.session.is_none() {
            return Err(format!(
                "raw http: initialize answered {} (session id: {})",
                init.status,
                init.session.is_some()
            ));
        }
        raw.session = init.session.clone();
        answer(&init, 0)?;
        let note = raw.post(INITIALIZED).await?;
        if note.status != 202 {
            return Err(format!(
                "raw http: notifications/initialized answered {}",
                note.status
            ));
        }
        Ok(raw)
    }

    /// Lists tools until the list has this client's tool, for at most `limit`: a gateway
    /// under valgrind serves before its slow start has listed the upstream (fail open), and a
    /// call of a tool this session has not seen is refused.
    pub(super) async fn wait_listed(&mut self, limit: std::time::Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let needle = format!("\"{}\"", self.tool);
        loop {
            let id = self.next_id;
            self.next_id += 1;
            let list = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
            let response = self.post(&list).await?;
            let listed = response
                .body
                .windows(needle.len())
                .any(|w| w == needle.as_bytes());
            if response.status == 200 && listed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "raw http: `{}` was not listed within {limit:?}",
                    self.tool
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    pub(super) async fn echo(&mut self, message: &str) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let response = self.post(&echo_request(id, &self.tool, message)).await?;
        if response.status != 200 {
            return Err(format!("raw http: tools/call answered {}", response.status));
        }
        answer(&response, id)
    }

    /// One POST to `/mcp` and its whole response (the connection stays open).
    async fn post(&mut self, body: &str) -> Result<RawResponse, String> {
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        if let Some(session) = &self.session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: {PROTOCOL}\r\n"
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let io = |e: std::io::Error| format!("raw http: {e}");
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .map_err(io)?;
        let status_line = self.line().await?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| format!("raw http: bad status line {status_line:?}"))?;
        let (mut length, mut chunked, mut session, mut content_type) = (None, false, None, "");
        let mut headers = Vec::new();
        loop {
            let line = self.line().await?;
            if line.is_empty() {
                break;
            }
            headers.push(line);
        }
        for line in &headers {
            let Some((name, value)) = line.split_once(':') else {
                return Err(format!("raw http: bad header line {line:?}"));
            };
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "mcp-session-id" => session = Some(value.to_string()),
                "content-type" => content_type = value,
                _ => {}
            }
        }
        let content_type = content_type.to_string();
        let body = if chunked {
            self.chunked_body().await?
        } else {
            let n = match length {
                Some(n) if n <= MAX_RAW => n,
                Some(n) => return Err(format!("raw http: a {n}-byte body")),
                None if status == 202 || status == 204 => 0,
                None => return Err("raw http: a response without length".into()),
            };
            let mut body = vec![0; n];
            self.stream.read_exact(&mut body).await.map_err(io)?;
            body
        };
        Ok(RawResponse {
            status,
            session,
            content_type,
            body,
        })
    }

    /// One CRLF-terminated line, without its terminator.
    async fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        let n = (&mut self.stream)
            .take(MAX_RAW as u64)
            .read_line(&mut line)
            .await
            .map_err(|e| format!("raw http: {e}"))?;
        if n == 0 {
            return Err("raw http: the server closed the connection".into());
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    async fn chunked_body(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let size_line = self.line().await?;
            let size = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| format!("raw http: bad chunk size {size_line:?}"))?;
            if size == 0 {
                // Trailers, then the empty line that ends the body.
                while !self.line().await?.is_empty() {}
                return Ok(body);
            }
            if body.len() + size > MAX_RAW {
                return Err("raw http: body over 1 MiB".into());
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.stream
                .read_exact(&mut body[start..])
                .await
                .map_err(|e| format!("raw http: {e}"))?;
            if !self.line().await?.is_empty() {
                return Err("raw http: a chunk not followed by CRLF".into());
            }
        }
    }
}

/// Finds the answer to `id` in a JSON or SSE response body and checks it.
fn answer(response: &RawResponse, id: u64) -> Result<(), String> {
    let text = String::from_utf8_lossy(&response.body);
    let messages: Vec<Value> = if response.content_type.starts_with("text/event-stream") {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim_start()).ok())
            .collect()
    } else {
        serde_json::from_str(&text).into_iter().collect()
    };
    match messages.iter().find(|m| m.get("id") == Some(&json!(id))) {
        Some(m) => check_answer(m, id),
        None => Err(format!(
            "raw http: no answer to request {id} in the response"
        )),
    }
}

/// A hand-written client making sequential 1 KiB echo calls (over HTTP or stdio).
pub(super) trait Echo {
    async fn echo(&mut self, message: &str) -> Result<(), String>;
}

impl Echo for RawHttp {
    async fn echo(&mut self, message: &str) -> Result<(), String> {
        RawHttp::echo(self, message).await
    }
}

impl Echo for RawStdio {
    async fn echo(&mut self, message: &str) -> Result<(), String> {
        RawStdio::echo(self, message).await
    }
}

/// Hand-written JSON-RPC lines over a process's pipes: the stdio fixture, or `mcp-harness
/// serve` over stdio.
pub(super) struct RawStdio {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    tool: String,
    next_id: u64,
}

impl RawStdio {
    async fn start(bench: &Bench) -> Result<Self, String> {
        let mut command = Command::new(&bench.fixture);
        command.args(["--name", &bench.tag]);
        Self::spawn(command, "echo", STARTUP_TIMEOUT).await
    }

    /// Starts `command` with piped stdin and stdout and initializes it within `startup`; its
    /// calls are of the echo tool named `tool`.
    pub(super) async fn spawn(
        mut command: Command,
        tool: &str,
        startup: std::time::Duration,
    ) -> Result<Self, String> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "raw stdio: cannot spawn {:?}: {e}",
                    command.as_std().get_program()
                )
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("raw stdio: the process has no pipes".into());
        };
        let mut raw = RawStdio {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            tool: tool.to_string(),
            next_id: 1,
        };
        let started = tokio::time::timeout(startup, async {
            raw.send(&initialize_request()).await?;
            raw.answer(0).await?;
            raw.send(INITIALIZED).await
        })
        .await;
        match started {
            Ok(Ok(())) => Ok(raw),
            Ok(Err(e)) => {
                raw.stop().await;
                Err(e)
            }
            Err(_) => {
                raw.stop().await;
                Err(format!("raw stdio: initialize took over {startup:?}"))
            }
        }
    }

    /// The process's id while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Lists tools until the list has this client's tool, for at most `limit` (a gateway
    /// serves before its upstream is listed).
    pub(super) async fn wait_listed(&mut self, limit: std::time::Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        let needle = format!("\"{}\"", self.tool);
        loop {
            let id = self.next_id;
            self.next_id += 1;
            self.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#
            ))
            .await?;
            if self.answer_text(id).await?.contains(&needle) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "raw stdio: `{}` was not listed within {limit:?}",
                    self.tool
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// `total` echoes of `message` with `window` in flight at a time on the pipes (their one
    /// client writing a new request for each answer it reads, as a host with that many calls
    /// at once does); seconds per call.
    pub(super) async fn pipelined(
        &mut self,
        message: &str,
        window: usize,
        total: usize,
    ) -> Result<f64, String> {
        let first = self.next_id;
        let end = first + total as u64;
        self.next_id = end;
        let started = Instant::now();
        let mut sent = first;
        while sent < end && sent < first + window as u64 {
            self.send(&echo_request(sent, &self.tool, message)).await?;
            sent += 1;
        }
        // Bounded: `total` answers, each line read bounded by MAX_RAW.
        let mut line = String::new();
        let mut answered = 0;
        while answered < total {
            let message_in = self.next_message(&mut line).await?;
            let Some(id) = message_in.get("id").and_then(Value::as_u64) else {
                continue;
            };
            if !(first..end).contains(&id) {
                continue;
            }
            check_answer(&message_in, id)?;
            answered += 1;
            if sent < end {
                self.send(&echo_request(sent, &self.tool, message)).await?;
                sent += 1;
            }
        }
        Ok(started.elapsed().as_secs_f64() / total as f64)
    }

    async fn send(&mut self, message: &str) -> Result<(), String> {
        let line = format!("{message}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("raw stdio: {e}"))
    }

    /// The next line as JSON (`line` is the buffer).
    async fn next_message(&mut self, line: &mut String) -> Result<Value, String> {
        line.clear();
        let n = (&mut self.stdout)
            .take(MAX_RAW as u64)
            .read_line(line)
            .await
            .map_err(|e| format!("raw stdio: {e}"))?;
        if n == 0 {
            return Err("raw stdio: the process closed its stdout".into());
        }
        serde_json::from_str(line).map_err(|e| format!("raw stdio: not a JSON line: {e}"))
    }

    /// Reads lines until the answer to `id` (notifications are skipped) and checks it.
    async fn answer(&mut self, id: u64) -> Result<(), String> {
        let mut line = String::new();
        loop {
            let message = self.next_message(&mut line).await?;
            if message.get("id") == Some(&json!(id)) {
                return check_answer(&message, id);
            }
        }
    }

    /// The answer to `id` as text (not checked).
    async fn answer_text(&mut self, id: u64) -> Result<String, String> {
        let mut line = String::new();
        loop {
            let message = self.next_message(&mut line).await?;
            if message.get("id") == Some(&json!(id)) {
                return Ok(line);
            }
        }
    }

    async fn echo(&mut self, message: &str) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&echo_request(id, &self.tool, message)).await?;
        self.answer(id).await
    }

    pub(super) async fn stop(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(STARTUP_TIMEOUT, self.child.wait()).await;
    }
}

//! Raw-HTTP helpers for the gateway tests: one request per connection, an MCP session opened by
//! hand, and `mcp-harness serve --http` started on a free loopback port and stopped with SIGTERM.
//!
//! Invariant: every wait is bounded (connect, read, readiness, exit) and a gateway this module
//! started is killed when its [`Served`] handle is dropped, so a failing test leaves no process.

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::bin;

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to its end (bounded):
/// (status, head with lowercased header names, body). Status 0 when the connection failed or
/// closed early.
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    http_bytes(addr, method, path, headers, body.as_bytes())
}

/// [`http`] with a body of any bytes. A server may answer before it read the whole body (a
/// 413): the answer is read even when sending the rest failed.
pub(crate) fn http_bytes(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return (0, String::new(), "connection refused".into());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    // The address is the `Host` unless the headers name one.
    let host = match headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        true => String::new(),
        false => format!("Host: {addr}\r\n"),
    };
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\n{host}Connection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut request = request.into_bytes();
    request.extend_from_slice(body);
    let sent = stream.write_all(&request);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    if response.is_empty() && sent.is_err() {
        return (0, String::new(), "connection closed while sending".into());
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Header names lowercased, values kept (a sealed session id is case-sensitive).
    let head = head
        .lines()
        .map(|line| match line.split_once(':') {
            Some((name, value)) => format!("{}:{value}", name.to_lowercase()),
            None => line.to_lowercase(),
        })
        .collect::<Vec<_>>()
        .join("\r\n");
    (status, head, body.to_string())
}

/// The headers of an MCP POST.
pub(crate) const MCP_POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// Opens an MCP session over raw HTTP (`initialize`, then `notifications/initialized` unless
/// `abandon`): its id, or the refusal (status, head, body).
pub(crate) fn open_session(addr: &str, abandon: bool) -> Result<String, (u16, String, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "ops-test", "version": "1"}}});
    let (status, head, body) = http(addr, "POST", "/mcp", &MCP_POST, &init.to_string());
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .map(|v| v.trim().to_string());
    match (status, id) {
        (200, Some(id)) if abandon => Ok(id),
        (200, Some(id)) => {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let (status, _, _) = http(
                addr,
                "POST",
                "/mcp",
                &session_headers(&id),
                &initialized.to_string(),
            );
            assert_eq!(status, 202, "notifications/initialized");
            Ok(id)
        }
        _ => Err((status, head, body)),
    }
}

/// The headers of a POST in session `id`.
pub(crate) fn session_headers(id: &str) -> [(&str, &str); 4] {
    [
        MCP_POST[0],
        MCP_POST[1],
        ("Mcp-Session-Id", id),
        ("Mcp-Protocol-Version", "2025-11-25"),
    ]
}

/// A `tools/call` in session `id`: (status, body).
pub(crate) fn call(
    addr: &str,
    id: &str,
    request: u64,
    tool: &str,
    arguments: serde_json::Value,
) -> (u16, String) {
    let call = json!({"jsonrpc": "2.0", "id": request, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments}});
    let (status, _, body) = http(
        addr,
        "POST",
        "/mcp",
        &session_headers(id),
        &call.to_string(),
    );
    (status, body)
}

/// A free loopback port (bound, then released).
pub(crate) fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    format!("127.0.0.1:{port}")
}

/// The resident memory (`VmRSS`) of process `pid` in KiB, 0 when it is gone.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A running `mcp-harness serve --http`; killed on drop if still running.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) addr: String,
}

impl Served {
    /// Starts `serve --http ADDR` with `config` and `extra` options, home in `dir`, stderr to
    /// `stderr` (a file, so it never blocks), and waits (≤ 30 s) until `/readyz` says 200.
    pub(crate) fn start(dir: &Path, config: &Path, extra: &[&str], stderr: Stdio) -> Served {
        Self::start_with_env(dir, config, extra, stderr, &[])
    }

    /// [`Served::start`] with `env` set for the gateway.
    pub(crate) fn start_with_env(
        dir: &Path,
        config: &Path,
        extra: &[&str],
        stderr: Stdio,
        env: &[(&str, &str)],
    ) -> Served {
        let addr = free_addr();
        let child = Command::new(bin())
            .arg("--config")
            .arg(config)
            .args(["serve", "--http", &addr])
            .args(extra)
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start mcp-harness serve");
        let served = Served { child, addr };
        let start = Instant::now();
        let mut ready = (0, String::new(), String::new());
        while start.elapsed() < Duration::from_secs(30) {
            if std::net::TcpStream::connect(&served.addr).is_ok() {
                ready = http(&served.addr, "GET", "/readyz", &[], "");
                if ready.0 == 200 {
                    return served;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("serve not ready within 30 s: {} {}", ready.0, ready.2);
    }

    /// The gateway's resident memory in KiB (`VmRSS`), 0 when it is gone.
    pub(crate) fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }

    /// SIGTERM, then waits (≤ `limit`) for the exit code; kills it past the limit (None).
    pub(crate) fn terminate(&mut self, limit: Duration) -> Option<i32> {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A session's GET stream (`Accept: text/event-stream`, protocol 2025-11-25): the methods of the
/// notifications it carries, each read bounded by a 20 s read timeout and a line count.
pub(crate) struct EventStream {
    reader: std::io::BufReader<std::net::TcpStream>,
}

impl EventStream {
    /// Opens the stream of `session` with `authorization` (the whole header value).
    pub(crate) fn open(addr: &str, authorization: &str, session: &str) -> Self {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        write!(
            stream,
            "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nAuthorization: {authorization}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
        )
        .expect("send");
        Self {
            reader: std::io::BufReader::new(stream),
        }
    }

    /// The method of the next notification; `None` when the stream ended or timed out.
    pub(crate) fn next_method(&mut self) -> Option<String> {
        self.next_notification()
            .and_then(|v| v["method"].as_str().map(str::to_string))
    }

    /// The next notification (the whole JSON-RPC message); `None` when the stream ended or
    /// timed out.
    pub(crate) fn next_notification(&mut self) -> Option<serde_json::Value> {
        use std::io::BufRead as _;
        let mut line = String::new();
        for _ in 0..1000 {
            line.clear();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                return None;
            }
            if let Some(data) = line.trim().strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim())
                && v["method"].is_string()
            {
                return Some(v);
            }
        }
        None
    }
}

/// The JSON-RPC answer in a response body: the body when it is JSON, else the SSE `data:` line
/// that carries an id; `Null` when there is none.
pub(crate) fn message(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or(Value::Null)
}

/// A client sending stateless 2026-07-28 requests over raw HTTP: no session, every request
/// self-contained (`_meta` with protocol version, client info and the capabilities it declares;
/// SEP-2243 `Mcp-Method` and `Mcp-Name` headers), with an optional bearer token.
pub(crate) struct Stateless<'a> {
    addr: &'a str,
    authorization: Option<String>,
    capabilities: Value,
}

impl<'a> Stateless<'a> {
    /// A client of the gateway at `addr` declaring `capabilities` in every request.
    pub(crate) fn new(addr: &'a str, token: Option<&str>, capabilities: Value) -> Self {
        Self {
            addr,
            authorization: token.map(|t| format!("Bearer {t}")),
            capabilities,
        }
    }

    /// One request (its own `_meta` keys kept); `name` is what its `Mcp-Name` header says (tool
    /// name, task id). Panics when no JSON-RPC answer comes back.
    pub(crate) fn request(&self, method: &str, params: Value, name: Option<&str>) -> Value {
        let (status, answer, body) = self.send(1, method, params, name);
        assert!(
            answer.is_object(),
            "{method}: no JSON-RPC answer (HTTP {status}): {body}"
        );
        answer
    }

    /// One request with JSON-RPC id `id`: (HTTP status, the answer with that id or `Null`, the
    /// raw body).
    pub(crate) fn send(
        &self,
        id: u64,
        method: &str,
        mut params: Value,
        name: Option<&str>,
    ) -> (u16, Value, String) {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "stateless-test", "version": "1"},
        });
        match params["_meta"].as_object_mut() {
            Some(own) => own.extend(meta.as_object().cloned().unwrap_or_default()),
            None => params["_meta"] = meta,
        }
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut headers = vec![
            MCP_POST[0],
            MCP_POST[1],
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        if let Some(authorization) = &self.authorization {
            headers.push(("Authorization", authorization.as_str()));
        }
        if let Some(name) = name {
            headers.push(("Mcp-Name", name));
        }
        let (status, _, body) = http(self.addr, "POST", "/mcp", &headers, &message.to_string());
        let answer = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .find(|m| m["id"] == json!(id))
            .or_else(|| serde_json::from_str(&body).ok())
            .unwrap_or(Value::Null);
        (status, answer, body)
    }

    /// A `tools/call` of `tool` with `arguments`: the JSON-RPC answer.
    pub(crate) fn call(&self, tool: &str, arguments: Value) -> Value {
        self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            Some(tool),
        )
    }
}

/// A 2025-11-25 session over raw Streamable HTTP of one bearer token: opened with `initialize`
/// and `notifications/initialized`; every POST carries the token, the session id and version.
pub(crate) struct Session<'a> {
    pub(crate) addr: &'a str,
    /// The `Authorization` value (`Bearer …`).
    pub(crate) token: String,
    pub(crate) id: String,
}

impl<'a> Session<'a> {
    /// Opens a session declaring `capabilities` as client `name`: the session and the
    /// initialize result.
    pub(crate) fn open(
        addr: &'a str,
        token: &str,
        capabilities: Value,
        name: &str,
    ) -> (Self, Value) {
        let token = format!("Bearer {token}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": name, "version": "1"}}});
        let headers = [MCP_POST[0], MCP_POST[1], ("Authorization", token.as_str())];
        let (status, head, body) = http(addr, "POST", "/mcp", &headers, &init.to_string());
        assert_eq!(status, 200, "initialize: {head}\n{body}");
        let id = head
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id:"))
            .map(|v| v.trim().to_string())
            .expect("a session id");
        let session = Self { addr, token, id };
        let (status, _, _) =
            session.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(status, 202, "notifications/initialized");
        (session, message(&body)["result"].clone())
    }

    /// The headers of a POST in this session.
    pub(crate) fn headers(&self) -> [(&str, &str); 5] {
        [
            MCP_POST[0],
            MCP_POST[1],
            ("Authorization", self.token.as_str()),
            ("Mcp-Session-Id", self.id.as_str()),
            ("Mcp-Protocol-Version", "2025-11-25"),
        ]
    }

    /// POSTs `body` in this session: (status, head, body).
    /// Lists tools until `tool` is among them (an upstream connects in the background);
    /// fails past `limit`.
    pub(crate) fn wait_listed(&self, tool: &str, limit: Duration) {
        let start = Instant::now();
        while !self
            .request("tools/list", json!({}))
            .to_string()
            .contains(tool)
        {
            assert!(start.elapsed() < limit, "{tool} was never listed");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The names of a `tools/list` in this session, in the order listed.
    #[allow(dead_code)] // not every test binary that includes `common` lists tools
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.request("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One request (id 1) in this session that must be answered 200: the JSON-RPC answer.
    pub(crate) fn request(&self, method: &str, params: Value) -> Value {
        let (status, head, body) =
            self.post(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {head}\n{body}");
        message(&body)
    }

    /// The bytes of a POST of `body` in this session, on a connection of its own
    /// (`Connection: close`).
    #[allow(dead_code)] // not every test binary that includes `common` sends raw POSTs
    pub(crate) fn raw_post(&self, body: &Value) -> String {
        let body = body.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in self.headers() {
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        request
    }

    pub(crate) fn post(&self, body: &Value) -> (u16, String, String) {
        http(
            self.addr,
            "POST",
            "/mcp",
            &self.headers(),
            &body.to_string(),
        )
    }
}

/// What a 2025-11-25 client that takes task-augmented tool calls (SEP-1686) declares.
pub(crate) fn sep1686_tasks() -> Value {
    json!({"tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}})
}

/// A new connection to `addr` with `request` sent on it, its reads bounded by 20 s.
pub(crate) fn send_raw(addr: &str, request: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    stream
}

/// An SSE response body read as it arrives (chunked transfer decoded): its `data:` messages.
/// Every wait for a message is bounded by a count and 20 s (keep-alives included).
pub(crate) struct Sse {
    reader: std::io::BufReader<std::net::TcpStream>,
    chunked: bool,
    /// Decoded text not yet split into lines.
    text: String,
    /// Complete events not yet taken: the JSON of their data (none for one without, such as
    /// the priming event) and their id.
    events: std::collections::VecDeque<(Option<Value>, Option<String>)>,
    /// The event being read: its JSON data and id so far.
    data: Option<Value>,
    id: Option<String>,
    /// Comment lines (`:`, the server's pings) seen so far.
    comments: usize,
    /// The id of the last event taken: what a resuming client sends back.
    last_id: Option<String>,
}

impl Sse {
    /// POSTs `body` in `session` and reads the head of its streamed answer.
    pub(crate) fn post(session: &Session<'_>, body: &Value) -> Self {
        Self::open(session.addr, &session.raw_post(body))
    }

    /// Opens the GET stream of `session`.
    pub(crate) fn get(session: &Session<'_>) -> Self {
        Self::resume(session, None)
    }

    /// Opens the GET stream of `session`, resuming after event `last_id` when given
    /// (`Last-Event-ID`).
    pub(crate) fn resume(session: &Session<'_>, last_id: Option<&str>) -> Self {
        let mut request = format!("GET /mcp HTTP/1.1\r\nHost: {}\r\n", session.addr);
        if let Some(id) = last_id {
            request.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        for (k, v) in session.headers() {
            let v = if k.eq_ignore_ascii_case("accept") {
                "text/event-stream"
            } else {
                v
            };
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str("\r\n");
        Self::open(session.addr, &request)
    }

    /// Sends `request` (a whole raw HTTP request) and reads the head of its streamed answer.
    pub(crate) fn open(addr: &str, request: &str) -> Self {
        let mut reader = std::io::BufReader::new(send_raw(addr, request));
        let mut head = String::new();
        for _ in 0..100 {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line.to_lowercase());
        }
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "not a stream: {head}");
        Sse {
            reader,
            chunked: head.contains("transfer-encoding: chunked"),
            text: String::new(),
            events: std::collections::VecDeque::new(),
            data: None,
            id: None,
            comments: 0,
            last_id: None,
        }
    }

    /// The next JSON-RPC message; `None` when the body ended or none came within 20 s.
    pub(crate) fn next(&mut self) -> Option<Value> {
        let start = Instant::now();
        for _ in 0..10_000 {
            if start.elapsed() > Duration::from_secs(20) {
                return None;
            }
            if let Some((message, id)) = self.events.pop_front() {
                if id.is_some() {
                    self.last_id = id;
                }
                match message {
                    Some(message) => return Some(message),
                    None => continue,
                }
            }
            self.split();
            if self.events.is_empty() && !self.read_more() {
                return None;
            }
        }
        None
    }

    /// Reads until the server sends a comment line (a ping) — messages on the way are kept
    /// for [`Self::next`]; false when the body ended or none came within 20 s.
    pub(crate) fn ping(&mut self) -> bool {
        let (start, seen) = (Instant::now(), self.comments);
        for _ in 0..10_000 {
            self.split();
            if self.comments > seen {
                return true;
            }
            if start.elapsed() > Duration::from_secs(20) || !self.read_more() {
                return false;
            }
        }
        false
    }

    /// The id of the last event [`Self::next`] went past: what a client that resumes after it
    /// sends as `Last-Event-ID`.
    pub(crate) fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Moves the complete lines of `text` into `events` (an event ends at an empty line) and
    /// `comments`.
    fn split(&mut self) {
        while let Some(end) = self.text.find('\n') {
            let line: String = self.text.drain(..=end).collect();
            let line = line.trim();
            if line.is_empty() {
                if self.data.is_some() || self.id.is_some() {
                    self.events.push_back((self.data.take(), self.id.take()));
                }
            } else if let Some(data) = line.strip_prefix("data:") {
                self.data = serde_json::from_str::<Value>(data.trim()).ok();
            } else if let Some(id) = line.strip_prefix("id:") {
                self.id = Some(id.trim().to_string());
            } else if line.starts_with(':') {
                self.comments += 1;
            }
        }
    }

    /// Reads the next piece of the body into `text`; false at its end.
    fn read_more(&mut self) -> bool {
        let mut bytes = Vec::new();
        if self.chunked {
            let mut size = String::new();
            if self.reader.read_line(&mut size).unwrap_or(0) == 0 {
                return false;
            }
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if size == 0 {
                return false;
            }
            bytes.resize(size + 2, 0);
            if self.reader.read_exact(&mut bytes).is_err() {
                return false;
            }
            bytes.truncate(size);
        } else {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                return false;
            }
            bytes = line.into_bytes();
        }
        self.text.push_str(&String::from_utf8_lossy(&bytes));
        true
    }
}

/// `mcp-harness serve` over stdio with `document` as its config (written into `dir`, a
/// [`super::temp_home`]), stdin and stdout piped, its log in `dir/serve.log`.
pub(crate) fn serve_stdio(dir: &Path, document: &Value) -> Child {
    let config = dir.join("gateway.json");
    std::fs::write(&config, document.to_string()).expect("write config");
    let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
    Command::new(bin())
        .args(["--config", config.to_str().expect("utf-8 path"), "serve"])
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start mcp-harness serve")
}

/// A client of `mcp-harness serve` over stdio, writing JSON-RPC lines and reading its answers
/// on a thread (stdout must hold JSON-RPC only); the process is killed when this is dropped.
pub(crate) struct StdioClient {
    child: Child,
    stdin: std::process::ChildStdin,
    messages: std::sync::mpsc::Receiver<Value>,
}

impl StdioClient {
    /// Takes over `child` (stdin and stdout piped).
    pub(crate) fn new(mut child: Child) -> Self {
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, messages) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let message = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON-RPC on stdout ({e}): {line}"));
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            messages,
        }
    }

    /// Writes `message` as one line.
    pub(crate) fn write(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to serve");
    }

    /// The next message the gateway wrote, within `limit`.
    pub(crate) fn next(&self, limit: Duration) -> Option<Value> {
        self.messages.recv_timeout(limit).ok()
    }

    /// Sends `message`; for a request, the answer with its id (≤ 60 s; what comes before it is
    /// skipped).
    pub(crate) fn send(&mut self, message: Value) -> Value {
        self.write(&message);
        let id = message["id"].clone();
        if id.is_null() {
            return Value::Null;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let got = self
                .next(left)
                .unwrap_or_else(|| panic!("no answer in time to {message}"));
            if got.get("method").is_none() && got["id"] == id {
                return got;
            }
        }
    }

    /// A request `method` with `params` and id `id`: its answer.
    pub(crate) fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed (and reaped) when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `dir/gateway.json`: one fixture upstream `fx` (`fixture-server` with `args`), every
/// one of its tools allowed; its path.
pub(crate) fn fixture_config(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    let file = dir.join("gateway.json");
    let mut command = vec!["fixture-server"];
    command.extend_from_slice(args);
    let config = json!({
        "mcpServers": {"fx": {"command": bin(), "args": command}},
        "permissions": {"allow": ["mcp__fx__*"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    file
}

/// The fixture over Streamable HTTP on a free loopback port, with `args` added to its command
/// line: the process and the URL it announced.
pub(crate) fn http_fixture(args: &[&str]) -> (Killed, String) {
    let mut child = Command::new(bin())
        .args(["fixture-server", "--transport", "http", "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the fixture");
    let mut line = String::new();
    let read = std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
    let child = Killed(child);
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .map(String::from)
        .unwrap_or_else(|| panic!("the fixture announced no URL ({read:?}): {line}"));
    (child, url)
}

/// An accepted elicitation with `content`.
pub(crate) fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

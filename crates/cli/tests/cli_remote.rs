//! Issue 17 point 7: a remote server that cannot be used fails on the first connect with one
//! readable line — the URL and what to check, no Rust type names, no HTML body, no note about
//! retrying for the whole startup budget — and exit status 3; `-v` adds the details. Against
//! loopback only: a closed port, `https://` to a plain-HTTP listener (TLS failure), a listener
//! answering 404 with an HTML page (both for Streamable HTTP and legacy SSE), and a `.invalid` host when this machine fails to resolve it
//! (checked first). How fast this is goes into `cargo xtask bench --only cli`, not here.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::bin;

/// A fresh folder for one test (`common::temp_home`).
fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("remote", tag)
}

/// A config with one remote server `r` of transport `kind` (`http` or `sse`) at `url`.
fn config(dir: &Path, kind: &str, url: &str) -> String {
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {"r": {"type": kind, "url": url}}});
    std::fs::write(&path, config.to_string()).expect("write config");
    path.to_string_lossy().into_owned()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run mcp-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A loopback listener that answers every connection with `response` after reading the
/// request head, for at most 60 s and 50 connections. Returns its port.
fn answering(response: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        let mut served = 0;
        while served < 50 && Instant::now() < until {
            match listener.accept() {
                Ok((stream, _)) => {
                    served += 1;
                    answer(stream, response);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    port
}

fn answer(mut stream: TcpStream, response: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // The request head (a TLS ClientHello has none: whatever came within the timeout).
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < 64 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
        if seen.first() == Some(&0x16) {
            break; // a TLS handshake record
        }
    }
    let _ = stream.write_all(response.as_bytes());
}

const NOT_FOUND: &str = "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: 61\r\nconnection: close\r\n\r\n<html><body><h1>404 Not Found</h1><p>nope</p></body></html>\n";

const PLAIN_HTTP: &str =
    "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// `call` through a Streamable HTTP server at `url` fails with one line naming `url` and
/// `check`, exit 3; `-v` shows more.
fn fails_readably(dir: &Path, url: &str, check: &str) {
    fails_readably_over(dir, "http", url, check);
}

/// [`fails_readably`] for a server of transport `kind`.
fn fails_readably_over(dir: &Path, kind: &str, url: &str, check: &str) {
    let c = config(dir, kind, url);
    let (code, out, err) = run(&["call", "mcp__r__anything", "--config", &c]);
    assert_eq!(code, 3, "{url}: a server failed\n{out}{err}");
    assert_eq!(err.lines().count(), 1, "{url}: one line\n{err}");
    let line = err.trim_end();
    assert!(line.starts_with("error: "), "{line}");
    assert!(line.contains(url), "{url}: names the URL: {line}");
    assert!(
        line.contains(check),
        "{url}: says what to check ({check}): {line}"
    );
    for noise in [
        "Error {",
        "reqwest",
        "hyper",
        "rmcp",
        "<html",
        "<h1>",
        "revision",
        "startup gave up",
        "probing",
    ] {
        assert!(!line.contains(noise), "{url}: `{noise}` in: {line}");
    }
    // The listing says it once too, and exits 3.
    let (code, _, err) = run(&["tools", "--config", &c]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(err.lines().count(), 1, "{url}: one line\n{err}");
    assert!(err.contains(url), "{err}");
    // Details at -v.
    let (_, _, verbose) = run(&["-v", "call", "mcp__r__anything", "--config", &c]);
    assert!(
        verbose.lines().count() > 1,
        "{url}: -v adds details\n{verbose}"
    );
}

/// A refused server stays failed while another server is still starting: its background
/// probes are no fast retries (each one made it pending again, so a listing waiting for the
/// slow server went on waiting for the refused one's retries, ~30 s).
#[test]
fn a_refused_server_stays_failed_between_its_probes() {
    let dir = temp_dir("refused-probes");
    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    let path = dir.join("mcp.json");
    let config = serde_json::json!({"mcpServers": {
        "r": {"type": "http", "url": url},
        "slow": {"command": bin(), "args": ["fixture-server", "--start-delay-ms", "3000"]}
    }});
    std::fs::write(&path, config.to_string()).expect("write config");
    let c = path.to_string_lossy().into_owned();
    let (code, out, err) = run(&["-v", "tools", "--config", &c]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("mcp__slow__echo"), "{out}{err}");
    assert!(!err.contains("reconnecting after backoff"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_closed_port_fails_at_once_naming_the_url() {
    let dir = temp_dir("refused");
    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    fails_readably(&dir, &url, "connection refused");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn https_to_a_plain_http_server_is_a_tls_failure() {
    let dir = temp_dir("tls");
    let url = format!("https://127.0.0.1:{}/mcp", answering(PLAIN_HTTP));
    fails_readably(&dir, &url, "check the scheme of `url`");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_404_says_check_the_path_without_the_page() {
    let dir = temp_dir("404");
    let url = format!("http://127.0.0.1:{}/wrong-path", answering(NOT_FOUND));
    fails_readably(&dir, &url, "404");
    fails_readably(&dir, &url, "check the path in `url`");
    let _ = std::fs::remove_dir_all(dir);
}

/// The legacy HTTP+SSE transport fails as fast and as readably: nothing listening, and a 404
/// on the event stream's GET.
#[test]
fn a_legacy_sse_server_that_is_not_there_fails_at_once() {
    let dir = temp_dir("sse");
    let url = format!("http://127.0.0.1:{}/sse", closed_port());
    fails_readably_over(&dir, "sse", &url, "connection refused");
    let url = format!("http://127.0.0.1:{}/sse", answering(NOT_FOUND));
    fails_readably_over(&dir, "sse", &url, "check the path in `url`");
    let _ = std::fs::remove_dir_all(dir);
}

/// Only where this machine answers for `.invalid` at once (RFC 6761: it never resolves); a
/// resolver that hangs or rewrites unknown names would test the network, not the harness.
#[test]
fn an_unresolvable_host_says_check_the_host_name() {
    let host = "mcp-harness-test.invalid";
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::net::ToSocketAddrs;
        let _ = tx.send((host, 80).to_socket_addrs().is_err());
    });
    if rx.recv_timeout(Duration::from_secs(2)) != Ok(true) {
        eprintln!("skipped: this machine does not fail to resolve {host} at once");
        return;
    }
    let dir = temp_dir("dns");
    let url = format!("http://{host}/mcp");
    fails_readably(&dir, &url, "check the host name");
    let _ = std::fs::remove_dir_all(dir);
}

/// A server that wants a login: `servers` says so and what to run, as `tools` and `call` do.
#[test]
fn servers_says_which_login_a_locked_server_needs() {
    let dir = temp_dir("locked");
    let url = common::locked_server();
    let c = config(&dir, "http", &url);
    let (code, out, err) = run(&["servers", "--config", &c]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("mcp-harness login r"), "{out}");
}

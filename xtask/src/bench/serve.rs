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
//!   alternating with the direct side;
//! - `serve_cpu_per_call_threads{N}`, `serve_kernel_cpu_per_call_threads{N}`: the CPU the
//!   `serve` process spends per sequential echo (all its threads, from `/proc/PID/stat`; the
//!   second counts only its time in the kernel: syscalls and the loopback TCP work a send does
//!   for its receiver) against what the fixture spends per call direct; one sample per round
//!   (`/proc` counts clock ticks of 10 ms: at 2,000 calls a round, steps of 5 µs);
//! - `serve_downstream_stdio_echo[_p99]`, `serve_downstream_stdio[_kernel]_cpu_per_call`,
//!   `serve_downstream_stdio_pipelined_32`: `mcp-harness serve` over stdio (its one client a
//!   hand-written JSON-RPC line writer on its pipes; one thread, stdio's default) in front of the
//!   same HTTP fixture, against the keep-alive client direct: sequential echo, CPU per call, and
//!   32 calls in flight on the pipes vs 32 keep-alive clients direct;
//! - `serve_floor_haproxy_echo[_p99]`, `serve_floor_haproxy_throughput_32`,
//!   `serve_floor_haproxy[_kernel]_cpu_per_call`: the same workloads through HAProxy (HTTP
//!   mode, keep-alive on both sides, its default threads) in front of the same fixture: what a
//!   production proxy that parses HTTP but no JSON adds on this machine, in the same run — the
//!   floor the `serve_*` figures sit above. Left out, with a line saying so, where HAProxy is
//!   not installed (`.ci/install-peers.sh` installs it);
//! - `serve_floor_rust_echo_threads{N}[_p99]`, `serve_floor_rust_throughput_32_threads{N}`,
//!   `serve_floor_rust[_kernel]_cpu_per_call_threads{N}`: the same through the bench's axum +
//!   reqwest forwarder as a process on the same thread layouts (`xtask bench-forwarder`, see
//!   `floor.rs`): the floor of a gateway on our own HTTP stack, which parses HTTP and reads no
//!   JSON; `serve_floor_h1_*_threads{N}`: the same for its hand-written HTTP/1.1 relay (the floor
//!   of an HTTP layer of our own); `serve_floor_tcp_*_threads{N}`: for its TCP relay, which parses
//!   nothing — the floor of any middle process on tokio;
//! - `serve_proto_mcp_*_threads{N}`: the same for the hand-written relay with a `tools/call`'s
//!   MCP work on top (`relay_mcp.rs`: decoded into rmcp's types, its tool looked up, its
//!   arguments validated, re-encoded both ways) — not a floor but a prototype, a lower bound of
//!   what an MCP path of our own would cost.
//!
//! Invariant: every process this group starts is killed and reaped before it returns.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::cli::write;
use super::floor::{self, Relay};
use super::gateway::{
    CALLS_EACH, CHUNK, CLIENTS, WARMUP, alternating, mcp_addr, raw_latencies, saturate_kept,
    upstream, wait_listening,
};
use super::http::{Echo, RawHttp, RawStdio};
use super::peers;
use super::report::Metric;
use super::{Bench, STARTUP_TIMEOUT, target_dir};

/// The layouts measured: `serve --threads N` for each N.
const THREADS: [usize; 2] = [1, 2];
/// The whole group's time limit.
const PHASE_LIMIT: Duration = Duration::from_secs(240);
/// The echo tool through the gateway (the fixture is configured as server `fx`).
const THROUGH_TOOL: &str = "mcp__fx__echo";
/// Where Debian and others put HAProxy.
const HAPROXY: [&str; 2] = ["/usr/sbin/haproxy", "/usr/bin/haproxy"];

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
        let port = peers::free_port()?;
        // Named by the run's tag, as the `cli` group's directory is.
        let dir = std::env::temp_dir().join(format!("{}-serve", self.tag));
        std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
        let mut fixture = upstream(self, port)?;
        let measured =
            tokio::time::timeout(PHASE_LIMIT, self.serve_layouts(port, fixture.id(), &dir)).await;
        let _ = fixture.kill().await;
        let _ = fixture.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
        self.wait_reaped().await?;
        measured.map_err(|_| format!("the serve group took over {PHASE_LIMIT:?}"))?
    }

    async fn serve_layouts(
        &self,
        port: u16,
        fixture: Option<u32>,
        dir: &Path,
    ) -> Result<Vec<Metric>, String> {
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
            let through = Through::new(
                &served.url,
                THROUGH_TOOL,
                served.pid(),
                format!("`mcp-harness serve --http --threads {threads}` (its own process)"),
                // The two timed metrics kept the `keepalive` of the group's first client.
                |metric| match metric {
                    "echo" | "throughput_32" => {
                        format!("serve_{metric}_keepalive_threads{threads}")
                    }
                    _ => format!("serve_{metric}_threads{threads}"),
                },
            );
            let measured = self.serve_measure(&through, &direct_url, fixture).await;
            served.stop().await;
            metrics.extend(measured?);
        }
        metrics.extend(
            self.serve_stdio_measure(&cli, &config, &direct_url, fixture)
                .await?,
        );
        for relay in Relay::ALL {
            for threads in THREADS {
                let program = Command::new(floor::this_program()?);
                let forwarder = floor::process(program, relay, port, threads, &self.tag).await?;
                let through = Through::new(
                    &forwarder.url,
                    relay.tool(),
                    forwarder.pid(),
                    format!("{}, its own process on {threads} thread(s)", relay.what()),
                    |metric| format!("{}_{metric}_threads{threads}", relay.metric()),
                );
                let measured = self.serve_measure(&through, &direct_url, fixture).await;
                forwarder.stop().await;
                metrics.extend(measured?);
            }
        }
        let Some(haproxy) = HAPROXY.into_iter().find(|p| Path::new(p).exists()) else {
            eprintln!(
                "serve_floor_haproxy_*: left out, HAProxy is not installed (`bash .ci/install-peers.sh` or `apt-get install haproxy`)"
            );
            return Ok(metrics);
        };
        let proxy = peers::haproxy(haproxy, dir, port).await?;
        let through = Through::new(
            &proxy.url,
            "echo",
            proxy.pid(),
            "HAProxy (HTTP mode, keep-alive both sides; the floor)".into(),
            |metric| format!("serve_floor_haproxy_{metric}"),
        );
        let measured = self.serve_measure(&through, &direct_url, fixture).await;
        proxy.stop().await;
        metrics.extend(measured?);
        Ok(metrics)
    }

    async fn serve_measure(
        &self,
        through: &Through<'_>,
        direct_url: &str,
        fixture: Option<u32>,
    ) -> Result<Vec<Metric>, String> {
        let mut direct = RawHttp::connect(mcp_addr(direct_url)?, "echo").await?;
        let mut through_client = RawHttp::connect(mcp_addr(through.url)?, through.tool).await?;
        let sequential = self
            .sequential(&mut through_client, through.pid, &mut direct, fixture)
            .await?;
        let mut metrics = sequential.metrics(
            through,
            "a hand-written keep-alive HTTP/1.1 client per side",
        );
        let rounds = self.options.rounds.min(5);
        let (th, tb) = alternating(
            rounds,
            (through.url, through.tool),
            (direct_url, "echo"),
            saturate_kept,
        )
        .await?;
        metrics.push(Metric {
            per_call: true,
            ..Metric::new(
                through.throughput.clone(),
                format!(
                    "wall time per call, 32 concurrent keep-alive clients, through {} vs direct",
                    through.what
                ),
                th,
                tb,
            )
        });
        Ok(metrics)
    }

    /// `serve` over stdio (`--threads 1`, the default there) in front of the same fixture,
    /// driven by a hand-written JSON-RPC line client on its pipes, against the keep-alive
    /// client direct to the fixture (see the module doc).
    async fn serve_stdio_measure(
        &self,
        cli: &Path,
        config: &Path,
        direct_url: &str,
        fixture: Option<u32>,
    ) -> Result<Vec<Metric>, String> {
        let mut command = Command::new(cli);
        command
            .arg("--config")
            .arg(config)
            .args(["serve", "--threads", "1"]);
        let mut lines = RawStdio::spawn(command, THROUGH_TOOL, STARTUP_TIMEOUT).await?;
        let measured = async {
            lines.wait_listed(STARTUP_TIMEOUT).await?;
            let mut direct = RawHttp::connect(mcp_addr(direct_url)?, "echo").await?;
            let through = Through::new(
                "",
                THROUGH_TOOL,
                lines.pid(),
                "`mcp-harness serve` over stdio (its own process, one thread)".into(),
                |metric| format!("serve_downstream_stdio_{metric}"),
            );
            let sequential = self
                .sequential(&mut lines, through.pid, &mut direct, fixture)
                .await?;
            let mut metrics = sequential.metrics(
                &through,
                "a hand-written client per side (JSON-RPC lines on the pipes; keep-alive HTTP/1.1 direct)",
            );
            let message = "x".repeat(1024);
            let (mut th, mut tb) = (Vec::new(), Vec::new());
            for round in 0..self.options.rounds.min(5) {
                let direct_round = async { saturate_kept(direct_url, "echo").await };
                if round % 2 == 0 {
                    th.push(lines.pipelined(&message, CLIENTS, CLIENTS * CALLS_EACH).await?);
                    tb.push(direct_round.await?);
                } else {
                    tb.push(direct_round.await?);
                    th.push(lines.pipelined(&message, CLIENTS, CLIENTS * CALLS_EACH).await?);
                }
            }
            metrics.push(Metric {
                per_call: true,
                ..Metric::new(
                    "serve_downstream_stdio_pipelined_32",
                    format!(
                        "wall time per call with 32 calls in flight: through {} (one client, 32 requests written ahead of their answers) vs 32 keep-alive clients direct",
                        through.what
                    ),
                    th,
                    tb,
                )
            });
            Ok::<_, String>(metrics)
        }
        .await;
        lines.stop().await;
        measured
    }

    /// Sequential echoes through `through_client` (its process `through_pid`) and direct to
    /// the fixture, in chunks alternating which side goes first, with the CPU each process
    /// spent per call in each round.
    async fn sequential(
        &self,
        through_client: &mut impl Echo,
        through_pid: Option<u32>,
        direct: &mut RawHttp,
        fixture: Option<u32>,
    ) -> Result<Sequential, String> {
        raw_latencies(direct, WARMUP).await?;
        raw_latencies(through_client, WARMUP).await?;
        let mut out = Sequential::default();
        for round in 0..self.options.rounds {
            let (mut spent_h, mut spent_b) = (Cpu::default(), Cpu::default());
            let mut done = 0;
            while done < self.options.calls {
                let n = CHUNK.min(self.options.calls - done);
                let through_first = (round + done / CHUNK).is_multiple_of(2);
                let (hc, bc) = if through_first {
                    let hc = spent(through_client, n, through_pid, &mut spent_h).await?;
                    (hc, spent(direct, n, fixture, &mut spent_b).await?)
                } else {
                    let bc = spent(direct, n, fixture, &mut spent_b).await?;
                    (
                        spent(through_client, n, through_pid, &mut spent_h).await?,
                        bc,
                    )
                };
                out.pairs
                    .push(hc.iter().sum::<f64>() / bc.iter().sum::<f64>());
                out.h.extend(hc);
                out.b.extend(bc);
                done += n;
            }
            let calls = self.options.calls as f64;
            out.cpu_h.push(spent_h / calls);
            out.cpu_b.push(spent_b / calls);
        }
        Ok(out)
    }
}

/// What [`Bench::sequential`] measured: each call's seconds through and direct, each chunk's
/// ratio, and each round's CPU per call of the process in the middle and of the fixture.
#[derive(Default)]
struct Sequential {
    h: Vec<f64>,
    b: Vec<f64>,
    pairs: Vec<f64>,
    cpu_h: Vec<Cpu>,
    cpu_b: Vec<Cpu>,
}

impl Sequential {
    /// The echo (p99 and p50) and CPU metrics of `through`, whose clients are `clients`.
    fn metrics(self, through: &Through<'_>, clients: &str) -> Vec<Metric> {
        let through_what = &through.what;
        let cpu_metric = |name: &str, what: &str, part: fn(&Cpu) -> f64| Metric {
            per_call: true,
            ..Metric::new(
                name,
                format!(
                    "{what} per sequential echo of {through_what} vs the fixture's own direct (per call; one sample per round)"
                ),
                self.cpu_h.iter().map(part).collect(),
                self.cpu_b.iter().map(part).collect(),
            )
        };
        let cpu = cpu_metric(&through.cpu, "CPU (user + kernel, from /proc)", |c| {
            c.user + c.kernel
        });
        let kernel = cpu_metric(
            &through.kernel,
            "kernel CPU (system time: syscalls, loopback TCP)",
            |c| c.kernel,
        );
        let echo = Metric {
            per_call: true,
            pairs: Some(self.pairs),
            ..Metric::new(
                through.echo.clone(),
                format!(
                    "sequential 1 KiB echo through {through_what} vs direct to the fixture, {clients} (per call)"
                ),
                self.h,
                self.b,
            )
        };
        vec![echo.p99(), echo, cpu, kernel]
    }
}

/// What one measured side goes through: its URL, the echo tool's name there, and the names of
/// its metrics.
struct Through<'a> {
    url: &'a str,
    tool: &'a str,
    /// The process the calls go through (its CPU is read from `/proc`).
    pid: Option<u32>,
    echo: String,
    throughput: String,
    cpu: String,
    kernel: String,
    what: String,
}

impl<'a> Through<'a> {
    /// The side at `url` (its echo tool `tool`, its process `pid`, described as `what`), its
    /// four metrics named by `name` from `echo`, `throughput_32`, `cpu_per_call` and
    /// `kernel_cpu_per_call`.
    fn new(
        url: &'a str,
        tool: &'a str,
        pid: Option<u32>,
        what: String,
        name: impl Fn(&str) -> String,
    ) -> Self {
        Self {
            url,
            tool,
            pid,
            echo: name("echo"),
            throughput: name("throughput_32"),
            cpu: name("cpu_per_call"),
            kernel: name("kernel_cpu_per_call"),
            what,
        }
    }
}

/// CPU seconds a process spent, in user space and in the kernel.
#[derive(Debug, Default, Clone, Copy)]
struct Cpu {
    user: f64,
    kernel: f64,
}

impl Cpu {
    /// What `pid` has spent so far (all its threads), from `/proc/PID/stat`.
    fn of(pid: u32) -> Result<Self, String> {
        // After the command: state is the first field, utime the 12th and stime the 13th
        // (proc(5), fields 14 and 15).
        let fields = crate::chaos::procs::stat_fields(pid)?;
        let ticks = |i: usize| -> Result<f64, String> {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .map(|t| t as f64)
                .ok_or_else(|| format!("/proc/{pid}/stat: no CPU time field {i}"))
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Ok(Self {
            user: ticks(11)? / hz,
            kernel: ticks(12)? / hz,
        })
    }
}

impl std::ops::Div<f64> for Cpu {
    type Output = Cpu;
    fn div(self, n: f64) -> Cpu {
        Cpu {
            user: self.user / n,
            kernel: self.kernel / n,
        }
    }
}

/// `count` calls of `client` (each call's seconds), adding what `pid` spent meanwhile to
/// `total`.
async fn spent(
    client: &mut impl Echo,
    count: usize,
    pid: Option<u32>,
    total: &mut Cpu,
) -> Result<Vec<f64>, String> {
    let pid = pid.ok_or("the measured process has exited")?;
    let before = Cpu::of(pid)?;
    let taken = raw_latencies(client, count).await?;
    let after = Cpu::of(pid)?;
    total.user += after.user - before.user;
    total.kernel += after.kernel - before.kernel;
    Ok(taken)
}

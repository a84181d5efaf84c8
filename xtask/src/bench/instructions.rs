//! `instructions`: what one call costs in user-space instructions, as valgrind's callgrind
//! counts them — a measure this host's timing noise cannot blur (two runs of the same binary
//! agree to within a fraction of a percent, whatever else the machine is doing).
//!
//! `serve_instructions_per_call`: the release `mcp-harness serve --http --threads 1` (its own
//! process) against the release HTTP fixture's own process, each counted over the same
//! sequential 1 KiB echoes from a keep-alive client: the gateway through to the fixture, and
//! the fixture direct. The ratio says how many upstream server hops of work the gateway does
//! per call. `serve_stdio_instructions_per_call`: the same gateway with the fixture as its stdio
//! child instead (the upstream the supergateway comparison is made on), against the same direct
//! count; callgrind does not follow the child, so only the gateway is counted.
//! `serve_downstream_stdio_instructions_per_call`: `serve` over stdio, its client a hand-written
//! JSON-RPC line writer on its pipes, in front of the HTTP fixture, against the same count. Each side runs under callgrind with instrumentation off until its warm-up is over
//! (`callgrind_control -i on`); the count is dumped (`callgrind_control -d`) right after the
//! counted calls, so neither start-up nor shutdown is in it. Only the counted process is under
//! valgrind: the fixture behind the gateway runs natively.
//!
//! `serve_floor_rust_instructions_per_call`: the same count for the bench's axum + reqwest
//! forwarder on one thread (`xtask bench-forwarder`), which reads no JSON: the least a gateway on
//! our HTTP stack costs per call; `serve_floor_h1_instructions_per_call`: the same for its
//! hand-written HTTP/1.1 relay (`--relay h1`), the least an HTTP layer of our own would cost;
//! `serve_proto_mcp_instructions_per_call`: the same for that relay with a `tools/call`'s MCP
//! work on top (`--relay mcp`, a prototype: decode, look up, validate, re-encode both ways).
//! The three run with glibc's malloc, `serve` with mimalloc.
//!
//! Invariant: every process this group starts is killed and reaped before it returns.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::cli::write;
use super::floor::Relay;
use super::gateway::{WARMUP, mcp_addr, raw_latencies, upstream, wait_listening};
use super::http::{RawHttp, RawStdio};
use super::peers::free_port;
use super::report::{Metric, Unit};
use super::serve::Served;
use super::{Bench, target_dir};

/// The calls counted on each side.
const COUNTED: usize = 500;
/// The whole group's time limit (valgrind runs each side's counted calls ~50× slower).
const PHASE_LIMIT: Duration = Duration::from_secs(300);
/// How long a process under valgrind may take to start serving.
const VALGRIND_STARTUP: Duration = Duration::from_secs(120);
/// The echo tool through the gateway (the fixture is configured as server `fx`).
const THROUGH_TOOL: &str = "mcp__fx__echo";

/// `program` under callgrind, counting nothing until told to, its counts going to `out` (dumps
/// to `out.N`).
fn callgrind(out: &Path, program: &Path) -> Command {
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=callgrind", "--instr-atstart=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(program);
    command
}

/// Runs `callgrind_control ARGS PID`, or says why it failed.
async fn control(args: &[&str], pid: u32) -> Result<(), String> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run callgrind_control (Debian package valgrind): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {} {pid} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The instructions per call of the process `pid` (under callgrind, writing to `out`) over
/// [`COUNTED`] echoes of `raw`, after [`WARMUP`] uncounted ones.
async fn per_call(pid: u32, raw: &mut impl super::http::Echo, out: &Path) -> Result<f64, String> {
    raw_latencies(raw, WARMUP).await?;
    control(&["-i", "on"], pid).await?;
    raw_latencies(raw, COUNTED).await?;
    control(&["-d"], pid).await?;
    let dump = PathBuf::from(format!("{}.1", out.display()));
    let text = tokio::fs::read_to_string(&dump)
        .await
        .map_err(|e| format!("callgrind's dump {}: {e}", dump.display()))?;
    // The first event is `Ir`; with `VALGRIND_OPTS=--cache-sim=yes` (or `--branch-sim`) the
    // line carries the simulated misses after it.
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|n| n.split_whitespace().next()?.parse::<u64>().ok())
        .ok_or_else(|| format!("no `summary:` line in {}", dump.display()))?;
    Ok(total as f64 / COUNTED as f64)
}

/// Ends a child started here and reaps it.
async fn end(mut child: Child) {
    let _ = child.kill().await;
    let _ = child.wait().await;
}

impl Bench {
    /// The `instructions` group (see the module's doc).
    pub(super) async fn instructions(&self) -> Result<Vec<Metric>, String> {
        let found = Command::new("valgrind")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
        if !found.is_ok_and(|s| s.success()) {
            return Err("the instructions group needs valgrind (Debian package valgrind); install it or leave the group out with --only".into());
        }
        let kept = self.options.keep_profiles.clone();
        let dir = kept
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join(format!("{}-instructions", self.tag)));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("the profiles' directory {}: {e}", dir.display()))?;
        let counted = tokio::time::timeout(PHASE_LIMIT, async {
            let direct = self.fixture_per_call(&dir).await?;
            let through = self.serve_per_call(&dir).await?;
            let stdio = self.serve_stdio_per_call(&dir).await?;
            let downstream = self.serve_downstream_stdio_per_call(&dir).await?;
            let floor = self.forwarder_per_call(&dir, Relay::Http).await?;
            let h1 = self.forwarder_per_call(&dir, Relay::H1).await?;
            let mcp = self.forwarder_per_call(&dir, Relay::Mcp).await?;
            Ok::<_, String>((through, stdio, downstream, floor, h1, mcp, direct))
        })
        .await;
        match kept {
            Some(dir) => eprintln!(
                "instructions: callgrind's counts kept in {} (fixture.out.1, serve.out.1, serve-stdio.out.1, serve-downstream-stdio.out.1, forwarder-http.out.1, forwarder-h1.out.1, forwarder-mcp.out.1)",
                dir.display()
            ),
            None => {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        self.wait_reaped().await?;
        let (through, stdio, downstream, floor, h1, mcp, direct) =
            counted.map_err(|_| format!("the instructions group took over {PHASE_LIMIT:?}"))??;
        Ok(vec![
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_instructions_per_call",
                    "user-space instructions per sequential 1 KiB echo (callgrind): `mcp-harness serve --http --threads 1` in front of the HTTP fixture vs the fixture's own process, direct",
                    vec![through],
                    vec![direct],
                )
            },
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_stdio_instructions_per_call",
                    "the same count for `mcp-harness serve --http --threads 1` with the fixture as its stdio child (the upstream supergateway is compared on; the child is not counted) vs the fixture's own HTTP process, direct",
                    vec![stdio],
                    vec![direct],
                )
            },
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_downstream_stdio_instructions_per_call",
                    "the same count for `mcp-harness serve` over stdio (its client a hand-written JSON-RPC line writer on its pipes) in front of the HTTP fixture vs the fixture's own process, direct",
                    vec![downstream],
                    vec![direct],
                )
            },
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_floor_rust_instructions_per_call",
                    "the same count for the bench's axum + reqwest HTTP/1.1 forwarder on one thread (its own process, glibc's malloc; reads no JSON) in front of the HTTP fixture vs the fixture's own process, direct",
                    vec![floor],
                    vec![direct],
                )
            },
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_floor_h1_instructions_per_call",
                    "the same count for the bench's hand-written HTTP/1.1 relay on one thread (its own process, httparse; reads no JSON) in front of the HTTP fixture vs the fixture's own process, direct",
                    vec![h1],
                    vec![direct],
                )
            },
            Metric {
                unit: Unit::Instructions,
                ..Metric::new(
                    "serve_proto_mcp_instructions_per_call",
                    "the same count for the bench's MCP relay prototype on one thread (its own process, glibc's malloc; the hand-written HTTP/1.1 relay decoding, validating and re-encoding each tools/call with rmcp's types) in front of the HTTP fixture vs the fixture's own process, direct",
                    vec![mcp],
                    vec![direct],
                )
            },
        ])
    }

    /// A forwarder's instructions per call (`xtask bench-forwarder --relay R` under callgrind,
    /// one thread), in front of the fixture (run natively).
    async fn forwarder_per_call(&self, dir: &Path, relay: Relay) -> Result<f64, String> {
        self.in_front_of_fixture(async |port| {
            let out = dir.join(format!("forwarder-{}.out", relay.arg()));
            let exe = super::floor::this_program()?;
            let forwarder =
                super::floor::process(callgrind(&out, &exe), relay, port, 1, &self.tag).await?;
            let counted = async {
                let pid = forwarder
                    .pid()
                    .ok_or("the forwarder under valgrind exited")?;
                let mut raw = RawHttp::connect(mcp_addr(&forwarder.url)?, relay.tool()).await?;
                per_call(pid, &mut raw, &out).await
            }
            .await;
            forwarder.stop().await;
            counted
        })
        .await
    }

    /// `count(port)` with the fixture running natively on `port` (it listens before `count`
    /// starts, and is ended and reaped after it returns).
    async fn in_front_of_fixture(
        &self,
        count: impl AsyncFnOnce(u16) -> Result<f64, String>,
    ) -> Result<f64, String> {
        let port = free_port()?;
        let fixture = upstream(self, port)?;
        let counted = match wait_listening(port).await {
            Ok(()) => count(port).await,
            Err(e) => Err(e),
        };
        end(fixture).await;
        counted
    }

    /// The fixture's own instructions per call, direct.
    async fn fixture_per_call(&self, dir: &Path) -> Result<f64, String> {
        let port = free_port()?;
        let out = dir.join("fixture.out");
        let port_text = port.to_string();
        let child = callgrind(&out, &self.fixture)
            .args(["--transport", "http", "--port", &port_text, "--name"])
            .arg(&self.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot spawn valgrind: {e}"))?;
        let pid = child
            .id()
            .ok_or("the fixture under valgrind exited at once")?;
        let counted = async {
            wait_listening(port).await?;
            let url = format!("http://127.0.0.1:{port}/mcp");
            let mut raw = RawHttp::connect(mcp_addr(&url)?, "echo").await?;
            per_call(pid, &mut raw, &out).await
        }
        .await;
        end(child).await;
        counted
    }

    /// `serve`'s instructions per call, in front of the fixture (run natively) over HTTP.
    async fn serve_per_call(&self, dir: &Path) -> Result<f64, String> {
        self.in_front_of_fixture(async |port| {
            let url = format!("http://127.0.0.1:{port}/mcp");
            let server = serde_json::json!({"type": "http", "url": url});
            self.serve_counted(dir, "serve", server).await
        })
        .await
    }

    /// `serve`'s instructions per call with the fixture as its stdio child (not counted:
    /// callgrind does not follow children).
    async fn serve_stdio_per_call(&self, dir: &Path) -> Result<f64, String> {
        let server = serde_json::json!({
            "command": self.fixture.display().to_string(),
            "args": ["--name", self.tag],
        });
        self.serve_counted(dir, "serve-stdio", server).await
    }

    /// `serve` over stdio under callgrind, in front of the fixture (run natively) over HTTP,
    /// its one client writing JSON-RPC lines on its pipes.
    async fn serve_downstream_stdio_per_call(&self, dir: &Path) -> Result<f64, String> {
        self.in_front_of_fixture(async |port| {
            let url = format!("http://127.0.0.1:{port}/mcp");
            let json = serde_json::json!({
                "mcpServers": {"fx": {"type": "http", "url": url}},
                "permissions": {"allow": ["**"]},
            });
            let config = write(dir, "serve-downstream-stdio.json", json)?;
            let cli = target_dir().join("release").join("mcp-harness");
            let out = dir.join("serve-downstream-stdio.out");
            let mut command = callgrind(&out, &cli);
            command
                .arg("--config")
                .arg(&config)
                .args(["serve", "--threads", "1"]);
            let mut lines = RawStdio::spawn(command, THROUGH_TOOL, VALGRIND_STARTUP).await?;
            let counted = async {
                let pid = lines.pid().ok_or("serve under valgrind exited")?;
                lines.wait_listed(VALGRIND_STARTUP).await?;
                per_call(pid, &mut lines, &out).await
            }
            .await;
            lines.stop().await;
            counted
        })
        .await
    }

    /// `serve --threads 1` under callgrind, the fixture configured as server `fx` by `server`,
    /// counted over the echoes; its counts go to `DIR/NAME.out`.
    async fn serve_counted(
        &self,
        dir: &Path,
        name: &str,
        server: serde_json::Value,
    ) -> Result<f64, String> {
        let json = serde_json::json!({
            "mcpServers": {"fx": server},
            "permissions": {"allow": ["**"]},
        });
        let config = write(dir, &format!("{name}.json"), json)?;
        let cli = target_dir().join("release").join("mcp-harness");
        let out = dir.join(format!("{name}.out"));
        let served = Served::spawn(callgrind(&out, &cli), &config, 1, VALGRIND_STARTUP).await?;
        let counted = async {
            let pid = served.pid().ok_or("serve under valgrind exited")?;
            let mut raw = RawHttp::connect(mcp_addr(&served.url)?, THROUGH_TOOL).await?;
            raw.wait_listed(VALGRIND_STARTUP).await?;
            per_call(pid, &mut raw, &out).await
        }
        .await;
        served.stop().await;
        counted
    }
}

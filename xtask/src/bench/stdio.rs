//! The stdio metrics: `echo_per_call` and `cold_start_<N>`.

use std::time::Instant;

use mcp_harness_runtime::Runtime;
use mcp_harness_runtime::catalog::ServerState;
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::Value;

use super::report::Metric;
use super::{BATCH_LIMIT, BareClient, Bench, CALL_TIMEOUT, STARTUP_TIMEOUT, all_connected};

const ECHO_SERVER: &str = "fixture";
const ECHO_TOOL: &str = "mcp__fixture__echo";
/// Calls per side before the echo bench switches to the other side.
const ECHO_CHUNK: usize = 100;

impl Bench {
    pub(super) async fn echo(&self) -> Result<Metric, String> {
        let (calls, warmup) = (self.options.calls, self.options.warmup);
        let runtime =
            Runtime::start(self.config([ECHO_SERVER.to_string()])).map_err(|e| e.to_string())?;
        let snapshot = runtime
            .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, 1))
            .await;
        if !all_connected(&snapshot, 1) {
            runtime.shutdown().await;
            return Err(format!(
                "the harness did not connect the fixture within {STARTUP_TIMEOUT:?}"
            ));
        }
        let bare = match self.bare().await {
            Ok(b) => b,
            Err(e) => {
                runtime.shutdown().await;
                return Err(e);
            }
        };
        let measured = async {
            harness_calls(&runtime, warmup).await?;
            bare_calls(&bare, warmup).await?;
            // Each round alternates the sides every chunk of calls (the order flipping each
            // time), so both see the same machine: a load that comes and goes during a round
            // weighs on both sides alike instead of on whichever side ran then.
            let (mut h, mut b) = (Vec::new(), Vec::new());
            let mut harness_first = true;
            for _ in 0..self.options.rounds {
                let (mut h_secs, mut b_secs, mut done) = (0.0, 0.0, 0);
                while done < calls {
                    let n = ECHO_CHUNK.min(calls - done);
                    if harness_first {
                        h_secs += harness_calls(&runtime, n).await?;
                        b_secs += bare_calls(&bare, n).await?;
                    } else {
                        b_secs += bare_calls(&bare, n).await?;
                        h_secs += harness_calls(&runtime, n).await?;
                    }
                    harness_first = !harness_first;
                    done += n;
                }
                h.push(h_secs / calls as f64);
                b.push(b_secs / calls as f64);
            }
            Ok::<_, String>((h, b))
        }
        .await;
        runtime.shutdown().await;
        let _ = bare.cancel().await;
        self.wait_reaped().await?;
        let (harness, baseline) = measured?;
        Ok(Metric {
            per_call: true,
            ..Metric::new(
                "echo_per_call",
                format!(
                    "sequential echo tools/call over stdio, {calls} calls per round in chunks of {ECHO_CHUNK}, time per call"
                ),
                harness,
                baseline,
            )
        })
    }

    pub(super) async fn cold_start(&self) -> Result<Metric, String> {
        let n = self.options.servers;
        let (mut harness, mut baseline) = (Vec::new(), Vec::new());
        for round in 0..self.options.rounds {
            if round % 2 == 0 {
                harness.push(self.harness_cold(n).await?);
                baseline.push(self.bare_cold(n).await?);
            } else {
                baseline.push(self.bare_cold(n).await?);
                harness.push(self.harness_cold(n).await?);
            }
        }
        Ok(Metric::new(
            format!("cold_start_{n}"),
            format!("{n} stdio servers started at once until all are connected"),
            harness,
            baseline,
        ))
    }

    /// `Runtime::start` until one published snapshot has all `n` servers connected.
    async fn harness_cold(&self, n: usize) -> Result<f64, String> {
        let config = self.config((0..n).map(|i| format!("fixture{i}")));
        let started = Instant::now();
        // The same parallelism as the bare baseline (all at once): the local queue is a policy
        // the harness adds, measured on its own by the queue tests, not here.
        let runtime = mcp_harness_runtime::RuntimeBuilder::new(config)
            .connection_slots(n, n)
            .start()
            .map_err(|e| e.to_string())?;
        let snapshot = runtime
            .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, n))
            .await;
        let elapsed = started.elapsed().as_secs_f64();
        runtime.shutdown().await;
        self.wait_reaped().await?;
        if all_connected(&snapshot, n) {
            Ok(elapsed)
        } else {
            let connected = snapshot
                .servers
                .values()
                .filter(|s| s.state == ServerState::Connected)
                .count();
            Err(format!(
                "the harness connected {connected} of {n} servers within {STARTUP_TIMEOUT:?}"
            ))
        }
    }

    /// `n` concurrent bare spawn + initialize.
    async fn bare_cold(&self, n: usize) -> Result<f64, String> {
        let started = Instant::now();
        let clients = futures::future::join_all((0..n).map(|_| self.bare())).await;
        let elapsed = started.elapsed().as_secs_f64();
        let mut first_error = None;
        let mut running = Vec::new();
        for c in clients {
            match c {
                Ok(c) => running.push(c),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        futures::future::join_all(running.into_iter().map(|c| c.cancel())).await;
        self.wait_reaped().await?;
        match first_error {
            None => Ok(elapsed),
            Some(e) => Err(e),
        }
    }
}

fn echo_args() -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String("hi".into()));
    args
}

/// `count` sequential echo calls through the harness; seconds taken.
/// `count` echo calls through the full governed path: one step binding (as an agent binds once
/// per model step), then per call argument validation, permission, the staleness check under
/// the revision gate, the send, normalisation and the output budget.
async fn harness_calls(runtime: &Runtime, count: usize) -> Result<f64, String> {
    let args = echo_args();
    let step = runtime
        .bind_step(&[])
        .await
        .map_err(|e| format!("harness: bind: {e}"))?;
    let call = step
        .prepare_call(ECHO_TOOL)
        .map_err(|e| format!("harness: prepare: {e}"))?;
    let started = Instant::now();
    for i in 0..count {
        if started.elapsed() > BATCH_LIMIT {
            return Err(format!(
                "harness: {i} of {count} calls took over {BATCH_LIMIT:?}"
            ));
        }
        match tokio::time::timeout(CALL_TIMEOUT, call.call(Some(args.clone()))).await {
            Ok(Ok(r)) if !r.is_error() => {}
            Ok(Ok(r)) => {
                return Err(format!(
                    "harness: echo reported an error: {:?}",
                    r.result.content
                ));
            }
            Ok(Err(e)) => return Err(format!("harness: echo failed: {e}")),
            Err(_) => return Err(format!("harness: echo took over {CALL_TIMEOUT:?}")),
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// `count` sequential echo calls through the bare rmcp client; seconds taken.
async fn bare_calls(client: &BareClient, count: usize) -> Result<f64, String> {
    let args = echo_args();
    let started = Instant::now();
    for i in 0..count {
        if started.elapsed() > BATCH_LIMIT {
            return Err(format!(
                "bare: {i} of {count} calls took over {BATCH_LIMIT:?}"
            ));
        }
        let params = CallToolRequestParams::new("echo").with_arguments(args.clone());
        match tokio::time::timeout(CALL_TIMEOUT, client.peer().call_tool(params)).await {
            Ok(Ok(r)) if !r.is_error.unwrap_or(false) => {}
            Ok(Ok(r)) => return Err(format!("bare: echo reported an error: {:?}", r.content)),
            Ok(Err(e)) => return Err(format!("bare: echo failed: {e}")),
            Err(_) => return Err(format!("bare: echo took over {CALL_TIMEOUT:?}")),
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

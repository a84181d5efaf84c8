//! The stdio metrics: `echo_per_call[_work_stealing|_io_runtime]` and
//! `cold_start_<N>[_listed|_work_stealing]`.

use std::time::Instant;

use mcp_harness_runtime::catalog::ServerState;
use mcp_harness_runtime::{Config, IoThreads, Runtime, RuntimeBuilder};
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::Value;

use super::report::Metric;
use super::{BATCH_LIMIT, BareClient, Bench, CALL_TIMEOUT, STARTUP_TIMEOUT, all_connected};
use mcp_harness_runtime::DEFAULT_REMOTE_SLOTS;

const ECHO_SERVER: &str = "fixture";
const ECHO_TOOL: &str = "mcp__fixture__echo";
/// Calls per side before the echo bench switches to the other side.
const ECHO_CHUNK: usize = 100;

/// Where the harness side of a stdio bench runs its servers' connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// The default: the harness's own pinned I/O threads.
    Default,
    /// `IoThreads::WorkStealing` with as many threads as the default has.
    WorkStealing,
    /// The caller's runtime (`RuntimeBuilder::io_runtime`), where the bare client runs too.
    Caller,
}

impl Placement {
    fn builder(self, config: Config) -> RuntimeBuilder {
        let builder = RuntimeBuilder::new(config);
        match self {
            Self::Default => builder,
            Self::WorkStealing => {
                builder.io_threads(IoThreads::WorkStealing(IoThreads::default().count()))
            }
            Self::Caller => builder.io_runtime(tokio::runtime::Handle::current()),
        }
    }

    /// The metric name's suffix and the words that say where the connections ran.
    fn naming(self) -> (&'static str, &'static str) {
        match self {
            Self::Default => (
                "",
                "the harness's connections on its own pinned I/O threads (the default)",
            ),
            Self::WorkStealing => (
                "_work_stealing",
                "the harness's connections on its own work-stealing I/O threads (io_threads WorkStealing)",
            ),
            Self::Caller => (
                "_io_runtime",
                "the harness's connections on the caller's runtime (io_runtime)",
            ),
        }
    }
}

impl Bench {
    /// The echo bench with the harness's connections where `placement` says; the bare
    /// client's session runs on the bench's runtime.
    pub(super) async fn echo(&self, placement: Placement) -> Result<Metric, String> {
        let (calls, warmup) = (self.options.calls, self.options.warmup);
        let runtime = placement
            .builder(self.config([ECHO_SERVER.to_string()]))
            .start()
            .map_err(|e| e.to_string())?;
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
            // Each pair of adjacent chunks (one per side) also gives a paired ratio.
            let (mut h, mut b, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
            let mut harness_first = true;
            for _ in 0..self.options.rounds {
                let (mut h_secs, mut b_secs, mut done) = (0.0, 0.0, 0);
                while done < calls {
                    let n = ECHO_CHUNK.min(calls - done);
                    let (hc, bc) = if harness_first {
                        let hc = harness_calls(&runtime, n).await?;
                        (hc, bare_calls(&bare, n).await?)
                    } else {
                        let bc = bare_calls(&bare, n).await?;
                        (harness_calls(&runtime, n).await?, bc)
                    };
                    h_secs += hc;
                    b_secs += bc;
                    pairs.push(hc / bc);
                    harness_first = !harness_first;
                    done += n;
                }
                h.push(h_secs / calls as f64);
                b.push(b_secs / calls as f64);
            }
            Ok::<_, String>((h, b, pairs))
        }
        .await;
        runtime.shutdown().await;
        let _ = bare.cancel().await;
        self.wait_reaped().await?;
        let (harness, baseline, pairs) = measured?;
        let (suffix, where_) = placement.naming();
        Ok(Metric {
            per_call: true,
            pairs: Some(pairs),
            ..Metric::new(
                format!("echo_per_call{suffix}"),
                format!(
                    "sequential echo tools/call over stdio, {calls} calls per round in chunks of {ECHO_CHUNK}, time per call; {where_}"
                ),
                harness,
                baseline,
            )
        })
    }

    /// Four sides per round — the harness (default threads), the harness on work-stealing
    /// threads, bare spawn + initialize, and bare spawn + initialize + listings — in an order that
    /// rotates every round, so each side runs in each position equally often.
    pub(super) async fn cold_start(&self) -> Result<Vec<Metric>, String> {
        let (n, p) = (self.options.servers, self.options.parallel);
        let mut samples: [Vec<f64>; 4] = Default::default();
        for round in 0..self.options.rounds {
            for k in 0..4 {
                let side = (round + k) % 4;
                let secs = match side {
                    0 => self.harness_cold(n, p, Placement::Default).await?,
                    1 => self.harness_cold(n, p, Placement::WorkStealing).await?,
                    2 => self.bare_cold(n, p, false).await?,
                    _ => self.bare_cold(n, p, true).await?,
                };
                samples[side].push(secs);
            }
        }
        let [harness, stealing, bare, listed] = samples;
        // Each round's three runs are back to back: pair the harness with the baseline of its
        // own round, so a slower or faster stretch of the machine cancels within the pair.
        let paired = |side: &[f64], baseline: &[f64]| {
            Some(side.iter().zip(baseline).map(|(h, b)| h / b).collect())
        };
        Ok(vec![
            Metric {
                pairs: paired(&harness, &bare),
                ..Metric::new(
                    format!("cold_start_{n}"),
                    format!(
                        "{n} stdio servers, {p} connecting at a time, until one snapshot has all connected and listed; baseline: bare spawn + initialize"
                    ),
                    harness.clone(),
                    bare.clone(),
                )
            },
            Metric {
                pairs: paired(&harness, &listed),
                ..Metric::new(
                    format!("cold_start_{n}_listed"),
                    "the same; baseline: bare spawn + initialize + the same listings (declared kinds, all pages)",
                    harness.clone(),
                    listed,
                )
            },
            Metric {
                pairs: paired(&stealing, &bare),
                ..Metric::new(
                    format!("cold_start_{n}_work_stealing"),
                    format!(
                        "the same with {}; baseline: bare spawn + initialize",
                        Placement::WorkStealing.naming().1
                    ),
                    stealing.clone(),
                    bare,
                )
            },
        ])
    }

    /// `Runtime::start` with `p` local connection slots until one published snapshot has all
    /// `n` servers connected.
    async fn harness_cold(&self, n: usize, p: usize, placement: Placement) -> Result<f64, String> {
        let config = self.config((0..n).map(|i| format!("fixture{i}")));
        let started = Instant::now();
        let runtime = placement
            .builder(config)
            .connection_slots(p, DEFAULT_REMOTE_SLOTS)
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

    /// `n` bare spawn + initialize, at most `p` at a time (a permit is taken before the spawn
    /// and given back once initialize completed, as the harness holds its connection slot);
    /// with `list`, each client then lists every kind its server declared.
    async fn bare_cold(&self, n: usize, p: usize, list: bool) -> Result<f64, String> {
        let permits = tokio::sync::Semaphore::new(p);
        let permits = &permits;
        let started = Instant::now();
        let clients = futures::future::join_all((0..n).map(|_| async move {
            let permit = permits
                .acquire()
                .await
                .map_err(|_| (None, "the bench's semaphore closed".to_string()))?;
            let client = self.bare().await.map_err(|e| (None, e))?;
            drop(permit);
            if list {
                let listed = tokio::time::timeout(STARTUP_TIMEOUT, list_declared(&client)).await;
                match listed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err((Some(client), e)),
                    Err(_) => {
                        let e = format!("bare listing took over {STARTUP_TIMEOUT:?}");
                        return Err((Some(client), e));
                    }
                }
            }
            Ok::<_, (Option<BareClient>, String)>(client)
        }))
        .await;
        let elapsed = started.elapsed().as_secs_f64();
        let mut first_error = None;
        let mut running = Vec::new();
        for c in clients {
            match c {
                Ok(c) => running.push(c),
                Err((c, e)) => {
                    running.extend(c);
                    first_error = first_error.or(Some(e));
                }
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

/// Every kind the server declared, all pages, the kinds concurrently: what the harness lists at
/// connect (`mcp_harness_runtime::listing::declared_kinds`).
async fn list_declared(client: &BareClient) -> Result<(), String> {
    let peer = client.peer();
    let Some(info) = peer.peer_info() else {
        return Err("bare: no initialize result".into());
    };
    let caps = &info.capabilities;
    let err = |e: rmcp::service::ServiceError| format!("bare listing failed: {e}");
    let tools = async {
        if caps.tools.is_some() {
            peer.list_all_tools().await.map_err(err)?;
        }
        Ok::<_, String>(())
    };
    let prompts = async {
        if caps.prompts.is_some() {
            peer.list_all_prompts().await.map_err(err)?;
        }
        Ok(())
    };
    let resources = async {
        if caps.resources.is_some() {
            peer.list_all_resources().await.map_err(err)?;
        }
        Ok(())
    };
    let templates = async {
        if caps.resources.is_some() {
            peer.list_all_resource_templates().await.map_err(err)?;
        }
        Ok(())
    };
    let skills = async {
        if caps.supports_skills() {
            peer.list_all_skills().await.map_err(err)?;
        }
        Ok(())
    };
    tokio::try_join!(tools, prompts, resources, templates, skills).map(|_| ())
}

fn echo_args() -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String("hi".into()));
    args
}

/// `count` sequential echo calls through the full governed path: one step binding (as an agent binds once
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
        super::checked("harness: echo", call.call(Some(args.clone()))).await?;
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

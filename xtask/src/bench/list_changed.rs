//! `list_changed_visible*`: how long after a server changes its tool list the new tool is visible.
//!
//! Every side has a fixture process of its own and sees the same sequence of changes: record
//! t0, call `add_tool {name: "b<i>"}` (the fixture sends `notifications/tools/list_changed`
//! before it answers), then wait (bounded) until the side shows the tool. The harness side shows
//! it in a published snapshot (`Runtime::wait_for`); the bare side is an rmcp client whose
//! `on_tool_list_changed` lists every tool and publishes the names on a watch channel.
//!
//! Six sides: bare, harness with the default batch window, harness with `batch_window(ZERO)`,
//! once with changes back to back and once with every change `SPACING` (one window + 4 ms)
//! after the previous one was visible. Back to back, a change reaches the publisher within a
//! window of the previous publication and waits for the window's end; spaced, it is a lone
//! update and is published at once. The spaced window-0 and bare sides tell the window's cost
//! apart from what idling between changes costs.
//!
//! Changes run in chunks; within a chunk one side's changes follow each other at once, and the
//! order of the sides rotates from chunk to chunk. So the first change of a harness chunk comes
//! after the other sides' turns, more than one window after its previous publication: one
//! sample in `CHUNK` of the back-to-back variants is a lone update.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_harness_runtime::DEFAULT_BATCH_WINDOW;
use mcp_harness_runtime::catalog::qualify;
use mcp_harness_runtime::transport::handler::DEFAULT_PROTOCOL_VERSION;
use mcp_harness_runtime::{Runtime, RuntimeBuilder};
use rmcp::ClientHandler;
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
use serde_json::Value;
use tokio::sync::watch;

use super::report::Metric;
use super::{Bench, CALL_TIMEOUT, STARTUP_TIMEOUT, all_connected};

/// The server name the harness sides use (tools are `mcp__fixture__<name>`).
const SERVER: &str = "fixture";
/// Changes per side before measuring (names `w<i>`).
const WARMUP: usize = 10;
/// Changes per side in a row before the next side's turn.
const CHUNK: usize = 20;
/// One change, from t0 until visible.
const VISIBLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole measured phase, all sides.
const PHASE_LIMIT: Duration = Duration::from_secs(90);
/// `_spaced`: the quiet time before each change (every side), so the previous publication is at
/// least one window old and the change is a lone update.
const SPACING: Duration = DEFAULT_BATCH_WINDOW.saturating_add(Duration::from_millis(4));

/// The tool names of the newest completed listing, with the number of the listing.
type Listed = (u64, Arc<HashSet<String>>);

/// The bare baseline's client: lists all tools on every `tools/list_changed`.
#[derive(Clone)]
struct Lister {
    tx: Arc<watch::Sender<Listed>>,
    started: Arc<std::sync::atomic::AtomicU64>,
}

impl ClientHandler for Lister {
    fn get_info(&self) -> ClientConfig {
        // The version the harness asks for, so both sides speak the same protocol.
        ClientConfig::default().with_protocol_version(DEFAULT_PROTOCOL_VERSION)
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let ticket = self
            .started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let Ok(Ok(tools)) = tokio::time::timeout(CALL_TIMEOUT, context.peer.list_all_tools()).await
        else {
            return;
        };
        let names: HashSet<String> = tools.into_iter().map(|t| t.name.to_string()).collect();
        // The newest listing wins, whatever order listings complete in.
        self.tx.send_if_modified(|current| {
            if ticket > current.0 {
                *current = (ticket, Arc::new(names));
                true
            } else {
                false
            }
        });
    }
}

/// One client and its fixture; `spacing` is the quiet time before each of its changes.
struct Side {
    spacing: Duration,
    kind: Kind,
}

enum Kind {
    Harness {
        label: &'static str,
        runtime: Runtime,
    },
    Bare {
        client: RunningService<RoleClient, Lister>,
        listed: watch::Receiver<Listed>,
    },
}

fn add_args(name: &str) -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("name".into(), Value::String(name.into()));
    args
}

impl Side {
    /// One change: seconds from t0 until `name` is visible.
    async fn change(&mut self, name: &str) -> Result<f64, String> {
        if !self.spacing.is_zero() {
            tokio::time::sleep(self.spacing).await;
        }
        match &mut self.kind {
            Kind::Harness { label, runtime } => {
                let qualified = qualify(SERVER, name);
                let add_tool = qualify(SERVER, "add_tool");
                let t0 = Instant::now();
                let add = runtime.call_tool(&add_tool, Some(add_args(name)));
                super::checked(&format!("{label}: add_tool"), add).await?;
                let left = VISIBLE_TIMEOUT.saturating_sub(t0.elapsed());
                let snapshot = runtime
                    .wait_for(left, |s| s.tool(&qualified).is_some())
                    .await;
                let elapsed = t0.elapsed().as_secs_f64();
                match snapshot.tool(&qualified) {
                    Some(_) => Ok(elapsed),
                    None => Err(format!(
                        "{label}: {qualified} not in a snapshot within {VISIBLE_TIMEOUT:?}"
                    )),
                }
            }
            Kind::Bare { client, listed } => {
                let t0 = Instant::now();
                let params = CallToolRequestParams::new("add_tool").with_arguments(add_args(name));
                match tokio::time::timeout(CALL_TIMEOUT, client.peer().call_tool(params)).await {
                    Ok(Ok(r)) if !r.is_error.unwrap_or(false) => {}
                    Ok(Ok(r)) => return Err(format!("bare: add_tool failed: {:?}", r.content)),
                    Ok(Err(e)) => return Err(format!("bare: add_tool failed: {e}")),
                    Err(_) => return Err(format!("bare: add_tool took over {CALL_TIMEOUT:?}")),
                }
                let left = VISIBLE_TIMEOUT.saturating_sub(t0.elapsed());
                let seen =
                    tokio::time::timeout(left, listed.wait_for(|(_, names)| names.contains(name)))
                        .await;
                let elapsed = t0.elapsed().as_secs_f64();
                match seen {
                    Ok(Ok(_)) => Ok(elapsed),
                    Ok(Err(_)) => Err("bare: the client stopped".into()),
                    Err(_) => Err(format!(
                        "bare: {name} not listed within {VISIBLE_TIMEOUT:?}"
                    )),
                }
            }
        }
    }

    async fn shutdown(self) {
        match self.kind {
            Kind::Harness { runtime, .. } => runtime.shutdown().await,
            Kind::Bare { client, .. } => {
                let _ = client.cancel().await;
            }
        }
    }
}

impl Bench {
    /// A harness side: one stdio fixture, connected.
    async fn harness_side(
        &self,
        label: &'static str,
        window: Duration,
        spacing: Duration,
    ) -> Result<Side, String> {
        let runtime = RuntimeBuilder::new(self.config([SERVER.to_string()]))
            .batch_window(window)
            .start()
            .map_err(|e| e.to_string())?;
        let snapshot = runtime
            .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, 1))
            .await;
        if !all_connected(&snapshot, 1) {
            runtime.shutdown().await;
            return Err(format!(
                "{label}: the harness did not connect the fixture within {STARTUP_TIMEOUT:?}"
            ));
        }
        Ok(Side {
            spacing,
            kind: Kind::Harness { label, runtime },
        })
    }

    async fn bare_side(&self, spacing: Duration) -> Result<Side, String> {
        let (tx, listed) = watch::channel((0, Arc::new(HashSet::new())));
        let lister = Lister {
            tx: Arc::new(tx),
            started: Default::default(),
        };
        let transport = self.fixture_transport()?;
        match tokio::time::timeout(STARTUP_TIMEOUT, lister.serve(transport)).await {
            Ok(Ok(client)) => Ok(Side {
                spacing,
                kind: Kind::Bare { client, listed },
            }),
            Ok(Err(e)) => Err(format!("bare initialize failed: {e}")),
            Err(_) => Err(format!("bare initialize took over {STARTUP_TIMEOUT:?}")),
        }
    }

    /// Bare, default window, window 0: back to back, then spaced.
    async fn sides(&self, sides: &mut Vec<Side>) -> Result<(), String> {
        for spacing in [Duration::ZERO, SPACING] {
            sides.push(self.bare_side(spacing).await?);
            sides.push(
                self.harness_side("harness", DEFAULT_BATCH_WINDOW, spacing)
                    .await?,
            );
            sides.push(
                self.harness_side("harness window 0", Duration::ZERO, spacing)
                    .await?,
            );
        }
        Ok(())
    }

    /// Eight metrics: median and p99 of the harness with its default window and with window 0,
    /// changes back to back and spaced, each against the bare side paced the same way.
    pub(super) async fn list_changed(&self) -> Result<Vec<Metric>, String> {
        let k = self.options.changes;
        let mut sides = Vec::new();
        let measured = async {
            self.sides(&mut sides).await?;
            for side in sides.iter_mut() {
                for i in 0..WARMUP {
                    side.change(&format!("w{i}")).await?;
                }
            }
            let started = Instant::now();
            let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(k); sides.len()];
            for (chunk, first) in (0..k).step_by(CHUNK).enumerate() {
                let n = sides.len();
                for turn in 0..n {
                    let s = (chunk + turn) % n;
                    for i in first..(first + CHUNK).min(k) {
                        if started.elapsed() > PHASE_LIMIT {
                            return Err(format!(
                                "list_changed: {} changes per side took over {PHASE_LIMIT:?}",
                                samples[s].len()
                            ));
                        }
                        samples[s].push(sides[s].change(&format!("b{i}")).await?);
                    }
                }
            }
            Ok::<_, String>(samples)
        }
        .await;
        for side in sides {
            side.shutdown().await;
        }
        self.wait_reaped().await?;
        // In the order of `sides`: (bare, default window, window 0) back to back, then spaced.
        let samples = measured?;
        let window_ms = DEFAULT_BATCH_WINDOW.as_secs_f64() * 1e3;
        let spacing_ms = SPACING.as_secs_f64() * 1e3;
        let mut metrics = Vec::new();
        for (group, (suffix, pace)) in samples.chunks(3).zip([
            ("", "back to back".to_string()),
            (
                "_spaced",
                format!("each {spacing_ms:.0} ms after the previous was visible"),
            ),
        ]) {
            let [bare, default, zero] = group else {
                return Err("list_changed: a side is missing".into());
            };
            for (name, harness, window) in [
                (
                    format!("list_changed_visible{suffix}"),
                    default,
                    format!("{window_ms:.0} ms window"),
                ),
                (
                    format!("list_changed_visible{suffix}_window0"),
                    zero,
                    "window 0".to_string(),
                ),
            ] {
                let m = Metric::new(
                    name,
                    format!(
                        "add_tool → tool visible, harness ({window}: published snapshot) vs bare (on_tool_list_changed + tools/list), {k} changes {pace}"
                    ),
                    harness.clone(),
                    bare.clone(),
                );
                let p99 = m.p99();
                metrics.push(m);
                metrics.push(p99);
            }
        }
        Ok(metrics)
    }
}

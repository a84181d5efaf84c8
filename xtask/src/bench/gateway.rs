//! `gateway_*`: what `mcp-harness serve` adds in front of one upstream over Streamable HTTP.
//!
//! One fixture process serves Streamable HTTP; the gateway (in this process, its runtime
//! connected to that fixture over Streamable HTTP, the connections on the bench's two tokio
//! workers as `serve --threads 2` runs them) serves it again. The same rmcp Streamable
//! HTTP client talks to both: direct to the fixture (the baseline) and through the gateway.
//! - `gateway_echo_http[_p99]`: time per sequential 1 KiB echo call, the sides alternating every
//!   chunk of calls; the added latency is the difference of the two figures;
//! - `gateway_echo_http_keepalive[_p99]`: the same, with a hand-written HTTP/1.1 client that
//!   keeps one connection per side (no SDK), chunks alternating with the rmcp client's: rmcp's
//!   Streamable HTTP client closes its connection after most calls (it drops a response stream
//!   before its end), so its figures include a TCP connect and accept per call on both sides;
//!   hosts' clients (fetch, httpx) keep their connections;
//! - `gateway_upstream_leg`: where the added latency goes — the upstream call alone, made as the
//!   gateway makes it (its runtime's governed path over HTTP to the same fixture, a chunk after
//!   each pair of chunks above), p50, against the added latency (p50 through − p50 direct): the
//!   rest is the gateway's own server side (HTTP, rmcp's session, the handler) beyond what the
//!   fixture's server side costs;
//! - `gateway_stdio_upstream[_p99]`: the same echo through a second gateway whose runtime reaches
//!   the fixture over stdio, as supergateway does (it cannot front an HTTP server), vs the same
//!   direct client; its added latency is what `gateway_stdio_added_vs_supergateway` compares;
//! - `gateway_throughput_32`: wall time per call with 32 concurrent clients (each its own
//!   session) making a fixed number of calls each; the inverse ratio is the throughput ratio;
//!   `gateway_throughput_32_keepalive`: the same with 32 hand-written keep-alive clients;
//! - `gateway_list_changed[_p99]`: from just before an upstream `add_tool` until the client sees
//!   `tools/list_changed` — through the gateway (upstream notification, relisting, publication,
//!   the notifier) vs the same client connected directly to the fixture (the upstream's own
//!   notification); one change at a time, [`CHANGE_SPACING`] apart, both clients listening.
//! - `gateway_session_seal`: what the sealed session id costs one request — three openings (the
//!   layer in front of `/mcp`, then rmcp's session lookup and stream) and one sealing (the upper
//!   bound: an id is re-sealed only when it changed or half its lifetime passed) of an id with a
//!   typical client's `initialize` parameters — against the gateway's whole per-call time (the
//!   `gateway_echo_http` figure through the gateway); the goal is a ratio under 1%.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_harness_gateway::{ClientBridge, Gateway, GatewayOptions, HttpOptions, HttpServer};
use mcp_harness_runtime::{CallOptions, Config, Runtime, RuntimeBuilder, TransportConfig};
use rmcp::ClientHandler;
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::Value;
use tokio::sync::mpsc;

use super::http::RawHttp;
use super::report::{Metric, median, percentile};
use super::{Bench, CALL_TIMEOUT, STARTUP_TIMEOUT, all_connected};

/// Calls per side before measuring.
pub(super) const WARMUP: usize = 200;
/// Calls of one side in a row before the other's turn.
pub(super) const CHUNK: usize = 100;
/// Concurrent clients of the throughput figure, and calls each makes per round.
pub(super) const CLIENTS: usize = 32;
pub(super) const CALLS_EACH: usize = 25;
/// The echo tool through the gateway (the fixture is configured as server `fx`).
const THROUGH_TOOL: &str = "mcp__fx__echo";
/// Changes for the list_changed figure.
const CHANGES: usize = 40;
/// Pause between two changes: longer than the runtime's default relist window (250 ms), so
/// each change measures one upstream change reaching the client, not the flood bound that
/// holds back a second relisting within the window (the `list_changed` group measures that).
const CHANGE_SPACING: Duration = Duration::from_millis(260);
/// The whole group.
const PHASE_LIMIT: Duration = Duration::from_secs(180);

/// A gateway serving Streamable HTTP on a loopback port in front of a runtime of `config`
/// (every server connected before it serves); [`Fronted::stop`] drains it and shuts the
/// runtime down, so no upstream process outlives the measurement.
struct Fronted {
    runtime: Arc<Runtime>,
    gateway: Gateway,
    server: HttpServer,
}

impl Fronted {
    /// `what` names this gateway in errors.
    async fn start(config: Config, what: &str) -> Result<Self, String> {
        let bridge = ClientBridge::new();
        // The connections on this runtime, as `serve --threads 2` runs them.
        let runtime = RuntimeBuilder::new(config)
            .callbacks(bridge.callbacks())
            .approver(bridge.approver())
            .io_runtime(tokio::runtime::Handle::current())
            .start()
            .map_err(|e| format!("{what}'s runtime: {e}"))?;
        let runtime = Arc::new(runtime);
        let started = async {
            let snapshot = runtime
                .wait_for(STARTUP_TIMEOUT, |s| all_connected(s, 1))
                .await;
            if !all_connected(&snapshot, 1) {
                return Err(format!("{what}'s runtime did not connect the fixture"));
            }
            let gateway = Gateway::new(runtime.clone(), GatewayOptions::default(), bridge)
                .await
                .map_err(|e| format!("{what}: {e}"))?;
            let server = gateway
                .serve_http(HttpOptions::new(([127, 0, 0, 1], 0).into()))
                .await
                .map_err(|e| format!("{what}: {e}"))?;
            Ok((gateway, server))
        }
        .await;
        match started {
            Ok((gateway, server)) => Ok(Self {
                runtime,
                gateway,
                server,
            }),
            Err(e) => {
                shut_down(runtime).await;
                Err(e)
            }
        }
    }

    async fn stop(self) {
        self.server.shutdown(Duration::from_secs(5)).await;
        drop(self.gateway);
        shut_down(self.runtime).await;
    }
}

/// Shuts `runtime` down when this was its last holder (else its last holder's drop does).
async fn shut_down(runtime: Arc<Runtime>) {
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown().await;
    }
}

/// A client that reports each `tools/list_changed` on a channel.
#[derive(Clone)]
pub(super) struct Listener {
    tx: mpsc::UnboundedSender<Instant>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.tx.send(Instant::now());
    }
}

pub(super) type Client = RunningService<RoleClient, Listener>;

pub(super) async fn connect(
    url: &str,
) -> Result<(Client, mpsc::UnboundedReceiver<Instant>), String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    match tokio::time::timeout(STARTUP_TIMEOUT, Listener { tx }.serve(transport)).await {
        Ok(Ok(client)) => Ok((client, rx)),
        Ok(Err(e)) => Err(format!("initialize with {url} failed: {e}")),
        Err(_) => Err(format!(
            "initialize with {url} took over {STARTUP_TIMEOUT:?}"
        )),
    }
}

fn kib_message() -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String("x".repeat(1024)));
    args
}

/// `count` sequential echo calls of `tool`; seconds taken.
async fn calls(client: &Client, tool: &str, count: usize) -> Result<f64, String> {
    Ok(latencies(client, tool, count).await?.iter().sum())
}

/// `count` sequential echo calls of `tool`; each call's seconds.
pub(super) async fn latencies(
    client: &Client,
    tool: &str,
    count: usize,
) -> Result<Vec<f64>, String> {
    let args = kib_message();
    let mut taken = Vec::with_capacity(count);
    for _ in 0..count {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args.clone());
        let started = Instant::now();
        match tokio::time::timeout(CALL_TIMEOUT, client.peer().call_tool(params)).await {
            Ok(Ok(r)) if !r.is_error.unwrap_or(false) => {}
            Ok(Ok(r)) => return Err(format!("{tool} reported an error: {:?}", r.content)),
            Ok(Err(e)) => return Err(format!("{tool} failed: {e}")),
            Err(_) => return Err(format!("{tool} took over {CALL_TIMEOUT:?}")),
        }
        taken.push(started.elapsed().as_secs_f64());
    }
    Ok(taken)
}

/// `count` sequential echo calls of `raw`'s client; each call's seconds.
pub(super) async fn raw_latencies(
    raw: &mut impl super::http::Echo,
    count: usize,
) -> Result<Vec<f64>, String> {
    let message = "x".repeat(1024);
    let mut taken = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        match tokio::time::timeout(CALL_TIMEOUT, raw.echo(&message)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("keep-alive client: {e}")),
            Err(_) => {
                return Err(format!(
                    "keep-alive client: echo took over {CALL_TIMEOUT:?}"
                ));
            }
        }
        taken.push(started.elapsed().as_secs_f64());
    }
    Ok(taken)
}

/// `count` calls of each keep-alive client, `through`'s first when `through_first`; each
/// side's seconds per call, through's first.
pub(super) async fn raw_chunks(
    through: &mut RawHttp,
    direct: &mut RawHttp,
    count: usize,
    through_first: bool,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    if through_first {
        let through = raw_latencies(through, count).await?;
        Ok((through, raw_latencies(direct, count).await?))
    } else {
        let direct = raw_latencies(direct, count).await?;
        Ok((raw_latencies(through, count).await?, direct))
    }
}

/// The address of an `http://ADDR/mcp` URL, or an error naming it.
pub(super) fn mcp_addr(url: &str) -> Result<std::net::SocketAddr, String> {
    super::http::mcp_addr(url).ok_or_else(|| format!("not an http://ADDR/mcp URL: {url}"))
}

/// `count` sequential echo calls the way the gateway makes each upstream call: `runtime`'s
/// governed path (a binding made once, as a session's listing is, then `prepare_call` and
/// `call_with` with a cancellation token and a progress channel per call) over Streamable HTTP to
/// the same fixture; each call's seconds.
async fn upstream_leg(runtime: &Runtime, count: usize) -> Result<Vec<f64>, String> {
    let args = kib_message();
    let binding = runtime
        .bind_step(&[])
        .await
        .map_err(|e| format!("bind for the upstream leg: {e}"))?;
    let mut taken = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let call = binding
            .prepare_call(THROUGH_TOOL)
            .map_err(|e| format!("prepare {THROUGH_TOOL}: {e}"))?;
        let (progress, _progressed) = mpsc::unbounded_channel();
        let options = CallOptions {
            cancel: Some(tokio_util::sync::CancellationToken::new()),
            progress: Some(progress),
            ..CallOptions::default()
        };
        super::checked(
            "upstream leg: echo",
            call.call_with(Some(args.clone()), options),
        )
        .await?;
        taken.push(started.elapsed().as_secs_f64());
    }
    Ok(taken)
}

/// `CLIENTS` sessions to `url` each making `CALLS_EACH` calls at once; seconds per call.
pub(super) async fn saturate(url: &str, tool: &str) -> Result<f64, String> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(connect(url).await?.0);
    }
    let started = Instant::now();
    let runs = clients.iter().map(|c| calls(c, tool, CALLS_EACH));
    let outcomes = futures::future::join_all(runs).await;
    let elapsed = started.elapsed().as_secs_f64();
    for client in clients {
        let _ = client.cancel().await;
    }
    for outcome in outcomes {
        outcome?;
    }
    Ok(elapsed / (CLIENTS * CALLS_EACH) as f64)
}

/// `rounds` runs of `run` on each side, (URL, tool) `through` and `direct`, the side going first
/// alternating per round; each side's figures in run order.
pub(super) async fn alternating<'a, F, Fut>(
    rounds: usize,
    through: (&'a str, &'a str),
    direct: (&'a str, &'a str),
    run: F,
) -> Result<(Vec<f64>, Vec<f64>), String>
where
    F: Fn(&'a str, &'a str) -> Fut,
    Fut: Future<Output = Result<f64, String>>,
{
    let (mut th, mut tb) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            th.push(run(through.0, through.1).await?);
            tb.push(run(direct.0, direct.1).await?);
        } else {
            tb.push(run(direct.0, direct.1).await?);
            th.push(run(through.0, through.1).await?);
        }
    }
    Ok((th, tb))
}

/// The same with `CLIENTS` hand-written keep-alive clients (each its own session and
/// connection); seconds per call.
pub(super) async fn saturate_kept(url: &str, tool: &str) -> Result<f64, String> {
    let addr = mcp_addr(url)?;
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(RawHttp::connect(addr, tool).await?);
    }
    let started = Instant::now();
    let runs = clients.iter_mut().map(|c| raw_latencies(c, CALLS_EACH));
    let outcomes = futures::future::join_all(runs).await;
    let elapsed = started.elapsed().as_secs_f64();
    for outcome in outcomes {
        outcome?;
    }
    Ok(elapsed / (CLIENTS * CALLS_EACH) as f64)
}

/// Calls per chunk and in all of the gateway in front of a stdio fixture (as supergateway is).
const STDIO_CHUNK: usize = 50;
const STDIO_CALLS: usize = 1000;

/// Seconds per request spent on the sealed session id, one figure per round: three checks and
/// one re-sealing of an id carrying a typical client's `initialize` parameters.
fn session_seal(rounds: usize, calls: usize) -> Vec<f64> {
    use mcp_harness_gateway::SessionKeys;
    use rmcp::model::{ClientCapabilities, Implementation, InitializeRequestParams};
    let keys = SessionKeys::generate();
    let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
        "elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": true}
    }))
    .unwrap_or_default();
    let init = InitializeRequestParams::new(
        capabilities,
        Implementation::new("claude-code-like-host", "2.0.31"),
    );
    let ttl = mcp_harness_gateway::DEFAULT_SESSION_TTL;
    let mut token = keys.issue(init, ttl);
    let later = std::time::SystemTime::now() + ttl;
    let count = calls.max(1000);
    (0..rounds.max(1))
        .map(|_| {
            let started = Instant::now();
            for _ in 0..count {
                for _ in 0..3 {
                    let checked = keys.check(std::hint::black_box(&token));
                    std::hint::black_box(checked.is_ok());
                }
                if let Ok(resealed) = keys.restamp(&token, later) {
                    token = resealed;
                }
            }
            started.elapsed().as_secs_f64() / count as f64
        })
        .collect()
}

/// The fixture serving Streamable HTTP on `port`, tagged as this run's.
pub(super) fn upstream(bench: &Bench, port: u16) -> Result<tokio::process::Child, String> {
    tokio::process::Command::new(&bench.fixture)
        .args([
            "--transport",
            "http",
            "--port",
            &port.to_string(),
            "--name",
            &bench.tag,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot spawn {}: {e}", bench.fixture.display()))
}

pub(super) async fn wait_listening(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "the fixture did not listen on port {port} within {STARTUP_TIMEOUT:?}"
    ))
}

/// The next `tools/list_changed` a client saw, waiting at most one call timeout.
async fn seen(rx: &mut mpsc::UnboundedReceiver<Instant>) -> Option<Instant> {
    tokio::time::timeout(CALL_TIMEOUT, rx.recv())
        .await
        .ok()
        .flatten()
}

impl Bench {
    pub(super) async fn gateway(&self) -> Result<Vec<Metric>, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let mut fixture = upstream(self, port)?;
        let measured = tokio::time::timeout(PHASE_LIMIT, self.gateway_sides(port)).await;
        let _ = fixture.kill().await;
        let _ = fixture.wait().await;
        self.wait_reaped().await?;
        measured.map_err(|_| format!("the gateway group took over {PHASE_LIMIT:?}"))?
    }

    async fn gateway_sides(&self, port: u16) -> Result<Vec<Metric>, String> {
        wait_listening(port).await?;
        let direct_url = format!("http://127.0.0.1:{port}/mcp");
        // The bench's usual config (every call allowed), its one server moved to HTTP.
        let mut config = self.config(["fx".to_string()]);
        if let Some(server) = config.servers.get_mut("fx") {
            server.transport = TransportConfig::StreamableHttp {
                url: direct_url.clone(),
                headers: Default::default(),
                oauth: None,
            };
        }
        let fronted = Fronted::start(config, "the gateway").await?;
        let outcome = self
            .gateway_measure(&fronted.runtime, port, &fronted.server.url())
            .await;
        fronted.stop().await;
        outcome
    }

    async fn gateway_measure(
        &self,
        runtime: &Runtime,
        port: u16,
        through_url: &str,
    ) -> Result<Vec<Metric>, String> {
        let direct_url = &format!("http://127.0.0.1:{port}/mcp");
        let (direct, mut direct_changed) = connect(direct_url).await?;
        let (through, mut through_changed) = connect(through_url).await?;
        through
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list through the gateway: {e}"))?;
        calls(&direct, "echo", WARMUP).await?;
        calls(&through, THROUGH_TOOL, WARMUP).await?;
        upstream_leg(runtime, WARMUP).await?;
        let mut kept_direct = RawHttp::connect(mcp_addr(direct_url)?, "echo").await?;
        let mut kept_through = RawHttp::connect(mcp_addr(through_url)?, THROUGH_TOOL).await?;
        raw_latencies(&mut kept_direct, WARMUP).await?;
        raw_latencies(&mut kept_through, WARMUP).await?;
        let (mut kh, mut kb, mut kpairs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut h, mut b, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
        let mut leg = Vec::new();
        let mut through_first = true;
        for _ in 0..self.options.rounds {
            let mut done = 0;
            while done < self.options.calls {
                let n = CHUNK.min(self.options.calls - done);
                let (hc, bc) = if through_first {
                    let hc = latencies(&through, THROUGH_TOOL, n).await?;
                    (hc, latencies(&direct, "echo", n).await?)
                } else {
                    let bc = latencies(&direct, "echo", n).await?;
                    (latencies(&through, THROUGH_TOOL, n).await?, bc)
                };
                pairs.push(hc.iter().sum::<f64>() / bc.iter().sum::<f64>());
                let (khc, kbc) =
                    raw_chunks(&mut kept_through, &mut kept_direct, n, through_first).await?;
                kpairs.push(khc.iter().sum::<f64>() / kbc.iter().sum::<f64>());
                kh.extend(khc);
                kb.extend(kbc);
                leg.extend(upstream_leg(runtime, n).await?);
                h.extend(hc);
                b.extend(bc);
                through_first = !through_first;
                done += n;
            }
        }
        // Added per call, through vs direct (p50 and p99), for the comparison with the peers.
        let added = (
            median(&h) - median(&b),
            percentile(&h, 99.0) - percentile(&b, 99.0),
        );
        // Where the added latency goes: the upstream call the gateway makes (its runtime's
        // governed path over HTTP to the same fixture) against the whole added latency.
        let upstream = Metric::new(
            "gateway_upstream_leg",
            "the gateway's upstream call alone (its runtime's governed call over HTTP to the same fixture, p50) vs the latency the gateway adds per call (p50 through - p50 direct)",
            vec![median(&leg)],
            vec![added.0],
        );
        let echo = Metric {
            per_call: true,
            pairs: Some(pairs),
            ..Metric::new(
                "gateway_echo_http",
                "sequential 1 KiB echo over Streamable HTTP through mcp-harness serve vs the same client direct to the upstream (per call)",
                h,
                b,
            )
        };
        let kept = Metric {
            per_call: true,
            pairs: Some(kpairs),
            ..Metric::new(
                "gateway_echo_http_keepalive",
                "the same echo through mcp-harness serve vs direct, from a hand-written HTTP/1.1 client keeping one connection per side (per call)",
                kh,
                kb,
            )
        };
        let rounds = self.options.rounds.min(5);
        let through_side = (through_url, THROUGH_TOOL);
        let direct_side = (direct_url.as_str(), "echo");
        let (th, tb) = alternating(rounds, through_side, direct_side, saturate).await?;
        let throughput = Metric {
            per_call: true,
            ..Metric::new(
                "gateway_throughput_32",
                "wall time per call, 32 concurrent clients, through the gateway vs direct",
                th,
                tb,
            )
        };
        let (kth, ktb) = alternating(rounds, through_side, direct_side, saturate_kept).await?;
        let kept_throughput = Metric {
            per_call: true,
            ..Metric::new(
                "gateway_throughput_32_keepalive",
                "wall time per call, 32 concurrent hand-written keep-alive clients, through the gateway vs direct",
                kth,
                ktb,
            )
        };
        let (mut lh, mut lb) = (Vec::new(), Vec::new());
        for i in 0..CHANGES {
            tokio::time::sleep(CHANGE_SPACING).await;
            while direct_changed.try_recv().is_ok() {}
            while through_changed.try_recv().is_ok() {}
            let mut args = JsonObject::new();
            args.insert("name".into(), Value::String(format!("g{i}")));
            let t0 = Instant::now();
            let params = CallToolRequestParams::new("add_tool").with_arguments(args);
            tokio::time::timeout(CALL_TIMEOUT, direct.peer().call_tool(params))
                .await
                .map_err(|_| "add_tool timed out".to_string())?
                .map_err(|e| format!("add_tool: {e}"))?;
            let direct_at = seen(&mut direct_changed)
                .await
                .ok_or("no list_changed from the fixture")?;
            let through_at = seen(&mut through_changed)
                .await
                .ok_or("no list_changed through the gateway")?;
            lb.push((direct_at - t0).as_secs_f64());
            lh.push((through_at - t0).as_secs_f64());
            // The client lists again, as a host does on list_changed.
            through
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| format!("tools/list through the gateway: {e}"))?;
        }
        let listed = Metric::new(
            "gateway_list_changed",
            "upstream add_tool until the client gets tools/list_changed: through the gateway vs direct",
            lh,
            lb,
        );
        let _ = through.cancel().await;
        let seal = Metric::new(
            "gateway_session_seal",
            "opening a sealed session id three times and sealing it once (one request's cost) vs the gateway's whole per-call time",
            session_seal(self.options.rounds, self.options.calls),
            echo.harness.clone(),
        );
        let mut metrics = vec![
            echo.p99(),
            echo,
            kept.p99(),
            kept,
            upstream,
            throughput,
            kept_throughput,
            listed.p99(),
            listed,
            seal,
        ];
        let stdio_upstream = self.stdio_upstream(&direct).await;
        let stdio_added = match stdio_upstream {
            Ok((metric, added)) => {
                metrics.push(metric.p99());
                metrics.push(metric);
                added
            }
            Err(e) => {
                let _ = direct.cancel().await;
                return Err(e);
            }
        };
        match self.gateway_floors(port, &direct).await {
            Ok(floors) => metrics.extend(floors),
            Err(e) => {
                let _ = direct.cancel().await;
                return Err(e);
            }
        }
        let compared = self.peers(direct_url, &direct, added, stdio_added).await;
        let _ = direct.cancel().await;
        metrics.extend(compared?);
        Ok(metrics)
    }

    /// `gateway_stdio_upstream`: the same echo through a second gateway whose runtime reaches
    /// the fixture over stdio — the upstream supergateway is measured on (it cannot front an
    /// HTTP server) — against the direct client, chunks alternating; with the added latency
    /// (p50, p99) for the like-for-like comparison with supergateway.
    async fn stdio_upstream(&self, direct: &Client) -> Result<(Metric, (f64, f64)), String> {
        let config = self.config(["fx".to_string()]);
        let fronted = Fronted::start(config, "the stdio gateway").await?;
        let outcome = async {
            let (through, _changes) = connect(&fronted.server.url()).await?;
            let sides = async {
                through
                    .peer()
                    .list_all_tools()
                    .await
                    .map_err(|e| format!("tools/list through the stdio gateway: {e}"))?;
                calls(&through, THROUGH_TOOL, WARMUP).await?;
                let (mut h, mut b) = (Vec::new(), Vec::new());
                while h.len() < STDIO_CALLS {
                    h.extend(latencies(&through, THROUGH_TOOL, STDIO_CHUNK).await?);
                    b.extend(latencies(direct, "echo", STDIO_CHUNK).await?);
                }
                Ok::<_, String>((h, b))
            }
            .await;
            let _ = through.cancel().await;
            sides
        }
        .await;
        fronted.stop().await;
        let (h, b) = outcome?;
        let added = (
            median(&h) - median(&b),
            percentile(&h, 99.0) - percentile(&b, 99.0),
        );
        let metric = Metric {
            per_call: true,
            ..Metric::new(
                "gateway_stdio_upstream",
                "the same echo through mcp-harness serve in front of the fixture over stdio (as supergateway is measured) vs the client direct to the HTTP fixture (per call)",
                h,
                b,
            )
        };
        Ok((metric, added))
    }
}

//! `cargo xtask bench`: how much the harness costs over a bare rmcp client, on our own fixture
//! server (`mcp-fixture-server`, built in release).
//!
//! Guarantees:
//! - every figure is a ratio against a baseline measured in the same run, on the same machine,
//!   against the same fixture binary, interleaved with it (the harness/baseline order alternates
//!   per round) and summarised the same way (median over rounds). Nothing is compared with a
//!   fixed number: the exit status says only whether the bench could run and clean up, never
//!   whether something was "fast enough";
//! - the measured code runs in release: in a debug xtask, `bench` builds the release fixture and
//!   a release xtask and re-runs itself as `target/release/xtask bench --inner ...`;
//! - every loop is bounded in count and in time (per-call, per-start and per-phase deadlines);
//! - no fixture process the bench started is left behind: after each round and at the end the
//!   bench waits (bounded) until `pgrep` finds none carrying this run's tag, reports the count,
//!   and exits 1 if any survived;
//! - results go to stdout (a table, then one `bench <name>: harness <x> vs baseline <y> = <r>x`
//!   line per metric) and to `target/bench/results.json`.
//!
//! Metrics:
//! - `echo_per_call`: time per sequential `echo` tools/call over stdio, through
//!   `Runtime::call_tool` vs `Peer::call_tool` of a bare `().serve(TokioChildProcess)` client;
//! - `cold_start_<N>`: `Runtime::start` of N stdio servers until a published snapshot has all N
//!   connected (initialize + first listing + publication) vs N concurrent bare spawn + initialize.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use mcp_harness_runtime::catalog::{ServerState, Snapshot};
use mcp_harness_runtime::transport::StdioSpec;
use mcp_harness_runtime::{Config, Runtime, ServerConfig, TransportConfig};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

const USAGE: &str = "\
usage: cargo xtask bench [--calls N] [--servers N] [--rounds N] [--warmup N]

Benchmarks the harness against a bare rmcp client on the release fixture server and prints
every figure as a ratio harness/baseline measured in the same run (lower is better; 1.00x =
no overhead). Results also go to target/bench/results.json.

  --calls N     echo calls per round and per client (default 2000)
  --servers N   servers started at once in the cold-start bench (default 20)
  --rounds N    rounds per metric, harness/baseline order alternating (default 3; median)
  --warmup N    echo calls per client before measuring (default 200)";

const DEFAULT_CALLS: usize = 2000;
const DEFAULT_SERVERS: usize = 20;
const DEFAULT_ROUNDS: usize = 3;
const DEFAULT_WARMUP: usize = 200;
const MAX_CALLS: usize = 1_000_000;
const MAX_SERVERS: usize = 200;
const MAX_ROUNDS: usize = 15;

/// One tool call, either side.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// One batch of sequential calls (warm-up or a measured round).
const BATCH_LIMIT: Duration = Duration::from_secs(60);
/// Spawn + initialize (+ listing, for the harness) of one or all servers.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Waiting for the fixture processes of this run to disappear.
const REAP_LIMIT: Duration = Duration::from_secs(10);
const REAP_POLL: Duration = Duration::from_millis(20);

const ECHO_SERVER: &str = "fixture";
const ECHO_TOOL: &str = "mcp__fixture__echo";

#[derive(Debug, Clone, PartialEq)]
struct Options {
    calls: usize,
    servers: usize,
    rounds: usize,
    warmup: usize,
    /// Run the measurements in this process (set by the outer invocation).
    inner: bool,
    fixture: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            calls: DEFAULT_CALLS,
            servers: DEFAULT_SERVERS,
            rounds: DEFAULT_ROUNDS,
            warmup: DEFAULT_WARMUP,
            inner: false,
            fixture: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or(format!("{flag} needs a value"))
            };
            match flag {
                "--calls" => o.calls = number(flag, &value()?, 1, MAX_CALLS)?,
                "--servers" => o.servers = number(flag, &value()?, 1, MAX_SERVERS)?,
                "--rounds" => o.rounds = number(flag, &value()?, 1, MAX_ROUNDS)?,
                "--warmup" => o.warmup = number(flag, &value()?, 0, MAX_CALLS)?,
                "--fixture" => o.fixture = Some(PathBuf::from(value()?)),
                "--inner" => o.inner = true,
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        Ok(o)
    }

    /// The arguments the inner run needs to measure the same thing.
    fn inner_args(&self, fixture: &Path) -> Vec<String> {
        vec![
            "bench".into(),
            "--inner".into(),
            "--fixture".into(),
            fixture.display().to_string(),
            "--calls".into(),
            self.calls.to_string(),
            "--servers".into(),
            self.servers.to_string(),
            "--rounds".into(),
            self.rounds.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
        ]
    }
}

fn number(flag: &str, text: &str, min: usize, max: usize) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{flag} wants a whole number from {min} to {max}, got `{text}`"
        )),
    }
}

pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if options.inner {
        inner(&options)
    } else {
        outer(&options)
    }
}

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// Builds the release fixture (and a release xtask when this one is a debug build), then runs
/// the measurements in release.
fn outer(options: &Options) -> ExitCode {
    let started = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release_self = !cfg!(debug_assertions);
    let mut build = Command::new(&cargo);
    build.current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        "mcp-harness-fixture",
        "--bin",
        "mcp-fixture-server",
    ]);
    if !release_self {
        build.args(["-p", "xtask", "--bin", "xtask"]);
    }
    eprintln!("xtask bench: building release binaries (the first time takes minutes)...");
    match build.status() {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!("xtask bench: release build failed ({s})");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("xtask bench: cannot run {cargo}: {e}");
            return ExitCode::from(2);
        }
    }
    let built = started.elapsed();
    let release = target_dir().join("release");
    let fixture = release.join("mcp-fixture-server");
    let code = if release_self {
        inner(&Options {
            inner: true,
            fixture: Some(fixture),
            ..options.clone()
        })
    } else {
        let xtask = release.join("xtask");
        match Command::new(&xtask)
            .current_dir(workspace_root())
            .args(options.inner_args(&fixture))
            .status()
        {
            Ok(s) if s.success() => ExitCode::SUCCESS,
            Ok(s) => ExitCode::from(s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)),
            Err(e) => {
                eprintln!("xtask bench: cannot run {}: {e}", xtask.display());
                ExitCode::from(2)
            }
        }
    };
    eprintln!(
        "xtask bench: took {:.1}s ({:.1}s building, {:.1}s measuring)",
        started.elapsed().as_secs_f64(),
        built.as_secs_f64(),
        (started.elapsed() - built).as_secs_f64()
    );
    code
}

/// Measures in this process and prints the report.
fn inner(options: &Options) -> ExitCode {
    let fixture = options
        .fixture
        .clone()
        .unwrap_or_else(|| target_dir().join("release").join("mcp-fixture-server"));
    if !fixture.is_file() {
        eprintln!(
            "xtask bench: no fixture server at {} (run `cargo xtask bench`)",
            fixture.display()
        );
        return ExitCode::from(2);
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "xtask bench: warning: measuring in a debug build; figures are not representative"
        );
    }
    // Same worker count as the harness's own actor runtime.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xtask bench: cannot build a tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let bench = Bench {
        fixture,
        tag: format!("xtask-bench-{}", std::process::id()),
        options: options.clone(),
    };
    let started = Instant::now();
    let outcome = rt.block_on(bench.run());
    let leftover = rt.block_on(bench.reap());
    drop(rt);
    let any_fixture = pgrep("mcp-fixture-server");
    match outcome {
        Ok(metrics) => {
            let report = Report {
                metrics,
                leftover,
                any_fixture,
                elapsed: started.elapsed(),
            };
            report.print(options, &bench.tag);
            let path = target_dir().join("bench").join("results.json");
            if let Err(e) = report.write_json(&path, options) {
                eprintln!("xtask bench: cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
            println!("results: {}", path.display());
            if leftover == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("xtask bench: {e}");
            eprintln!("fixture processes of this run left: {leftover}");
            ExitCode::from(2)
        }
    }
}

/// One metric: per-round times of both sides, in seconds.
struct Metric {
    name: String,
    what: String,
    harness: Vec<f64>,
    baseline: Vec<f64>,
    /// Per-call metrics show a throughput column.
    per_call: bool,
}

impl Metric {
    fn harness_median(&self) -> f64 {
        median(&self.harness)
    }
    fn baseline_median(&self) -> f64 {
        median(&self.baseline)
    }
    fn ratio(&self) -> f64 {
        self.harness_median() / self.baseline_median()
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Seconds, shown in the unit that suits them.
fn human(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.1}µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.1}ms", seconds * 1e3)
    } else {
        format!("{seconds:.2}s")
    }
}

struct Bench {
    fixture: PathBuf,
    /// `--name` of every fixture this run starts, so `pgrep -f` finds exactly ours.
    tag: String,
    options: Options,
}

type BareClient = RunningService<RoleClient, ()>;

impl Bench {
    async fn run(&self) -> Result<Vec<Metric>, String> {
        let echo = self.echo().await?;
        let cold = self.cold_start().await?;
        Ok(vec![echo, cold])
    }

    fn config(&self, names: impl IntoIterator<Item = String>) -> Config {
        let mut config = Config::default();
        for name in names {
            let spec = StdioSpec {
                command: self.fixture.display().to_string(),
                args: vec!["--name".into(), self.tag.clone()],
                env: Default::default(),
                cwd: None,
            };
            let server = ServerConfig {
                name: name.clone(),
                transport: TransportConfig::Stdio(spec),
                enabled: true,
                startup_timeout: STARTUP_TIMEOUT,
                tool_timeout: CALL_TIMEOUT,
                include_tools: None,
                exclude_tools: Vec::new(),
            };
            config.servers.insert(name, server);
        }
        config
    }

    async fn bare(&self) -> Result<BareClient, String> {
        let mut cmd = tokio::process::Command::new(&self.fixture);
        cmd.args(["--name", &self.tag]);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", self.fixture.display()))?;
        match tokio::time::timeout(STARTUP_TIMEOUT, ().serve(transport)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(format!("bare initialize failed: {e}")),
            Err(_) => Err(format!("bare initialize took over {STARTUP_TIMEOUT:?}")),
        }
    }

    async fn echo(&self) -> Result<Metric, String> {
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
            let (mut h, mut b) = (Vec::new(), Vec::new());
            for round in 0..self.options.rounds {
                if round % 2 == 0 {
                    h.push(harness_calls(&runtime, calls).await? / calls as f64);
                    b.push(bare_calls(&bare, calls).await? / calls as f64);
                } else {
                    b.push(bare_calls(&bare, calls).await? / calls as f64);
                    h.push(harness_calls(&runtime, calls).await? / calls as f64);
                }
            }
            Ok::<_, String>((h, b))
        }
        .await;
        runtime.shutdown().await;
        let _ = bare.cancel().await;
        self.wait_reaped().await?;
        let (harness, baseline) = measured?;
        Ok(Metric {
            name: "echo_per_call".into(),
            what: format!(
                "sequential echo tools/call over stdio, {calls} calls per round, time per call"
            ),
            harness,
            baseline,
            per_call: true,
        })
    }

    async fn cold_start(&self) -> Result<Metric, String> {
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
        Ok(Metric {
            name: format!("cold_start_{n}"),
            what: format!("{n} stdio servers started at once until all are connected"),
            harness,
            baseline,
            per_call: false,
        })
    }

    /// `Runtime::start` until one published snapshot has all `n` servers connected.
    async fn harness_cold(&self, n: usize) -> Result<f64, String> {
        let config = self.config((0..n).map(|i| format!("fixture{i}")));
        let started = Instant::now();
        let runtime = Runtime::start(config).map_err(|e| e.to_string())?;
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

    /// Waits (bounded) until no fixture of this run is alive; returns how many are.
    async fn reap(&self) -> usize {
        let deadline = Instant::now() + REAP_LIMIT;
        loop {
            let tag = self.tag.clone();
            let left = tokio::task::spawn_blocking(move || pgrep(&tag))
                .await
                .unwrap_or(usize::MAX);
            if left == 0 || Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(REAP_POLL).await;
        }
    }

    async fn wait_reaped(&self) -> Result<(), String> {
        match self.reap().await {
            0 => Ok(()),
            n => Err(format!(
                "{n} fixture processes still alive {REAP_LIMIT:?} after shutdown"
            )),
        }
    }
}

fn all_connected(snapshot: &Snapshot, n: usize) -> bool {
    snapshot.servers.len() == n
        && snapshot
            .servers
            .values()
            .all(|s| s.state == ServerState::Connected)
}

fn echo_args() -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("message".into(), Value::String("hi".into()));
    args
}

/// `count` sequential echo calls through the harness; seconds taken.
async fn harness_calls(runtime: &Runtime, count: usize) -> Result<f64, String> {
    let args = echo_args();
    let started = Instant::now();
    for i in 0..count {
        if started.elapsed() > BATCH_LIMIT {
            return Err(format!(
                "harness: {i} of {count} calls took over {BATCH_LIMIT:?}"
            ));
        }
        match tokio::time::timeout(
            CALL_TIMEOUT,
            runtime.call_tool(ECHO_TOOL, Some(args.clone())),
        )
        .await
        {
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

/// How many processes `pgrep -f pattern` finds (0 when pgrep finds none or cannot run).
fn pgrep(pattern: &str) -> usize {
    match Command::new("pgrep")
        .args(["-f", pattern])
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count(),
        Err(_) => 0,
    }
}

struct Report {
    metrics: Vec<Metric>,
    /// Fixture processes of this run alive at the end.
    leftover: usize,
    /// Any `mcp-fixture-server` alive at the end (other users of the machine included).
    any_fixture: usize,
    elapsed: Duration,
}

impl Report {
    fn print(&self, options: &Options, tag: &str) {
        println!(
            "\nharness vs bare rmcp client on the release fixture server ({} rounds, harness/baseline order alternating, median)\n",
            options.rounds
        );
        println!(
            "{:<16} {:<10} {:>12} {:>12}  rounds",
            "metric", "side", "median", "calls/s"
        );
        for m in &self.metrics {
            for (side, values, med) in [
                ("harness", &m.harness, m.harness_median()),
                ("bare rmcp", &m.baseline, m.baseline_median()),
            ] {
                let rate = if m.per_call {
                    format!("{:.0}", 1.0 / med)
                } else {
                    "-".into()
                };
                let rounds: Vec<String> = values.iter().map(|v| human(*v)).collect();
                println!(
                    "{:<16} {:<10} {:>12} {:>12}  {}",
                    m.name,
                    side,
                    human(med),
                    rate,
                    rounds.join(" ")
                );
            }
            println!(
                "{:<16} {:<10} {:>12}  ({})",
                m.name,
                "ratio",
                format!("{:.2}x", m.ratio()),
                m.what
            );
        }
        println!(
            "\nfixture processes of this run left (pgrep -f {tag}): {}; any mcp-fixture-server running: {}",
            self.leftover, self.any_fixture
        );
        println!("measured in {:.1}s\n", self.elapsed.as_secs_f64());
        for m in &self.metrics {
            println!(
                "bench {}: harness {} vs baseline {} = {:.2}x",
                m.name,
                human(m.harness_median()),
                human(m.baseline_median()),
                m.ratio()
            );
        }
    }

    fn write_json(&self, path: &Path, options: &Options) -> std::io::Result<()> {
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "what": m.what,
                    "unit": "seconds",
                    "harness": m.harness_median(),
                    "baseline": m.baseline_median(),
                    "ratio": m.ratio(),
                    "harness_rounds": m.harness,
                    "baseline_rounds": m.baseline,
                })
            })
            .collect();
        let doc = json!({
            "options": {
                "calls": options.calls,
                "servers": options.servers,
                "rounds": options.rounds,
                "warmup": options.warmup,
            },
            "metrics": metrics,
            "leftover_fixture_processes": self.leftover,
            "measured_seconds": self.elapsed.as_secs_f64(),
        });
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn options_parse_and_bounds() {
        let args: Vec<String> = ["--calls", "10", "--servers=3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = Options::parse(&args).expect("valid arguments");
        assert_eq!((o.calls, o.servers, o.rounds), (10, 3, DEFAULT_ROUNDS));
        assert!(Options::parse(&["--calls".into(), "0".into()]).is_err());
        assert!(Options::parse(&["--bogus".into()]).is_err());
    }
}

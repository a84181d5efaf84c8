//! `cargo xtask bench`: how much the harness costs over the least a client has to do, on our own
//! fixture server (`mcp-fixture-server`, built in release) and on in-memory catalogs.
//!
//! Guarantees:
//! - every figure is a ratio against a baseline measured in the same run, on the same machine,
//!   against the same fixture binary (or the same in-memory data), interleaved with it (the
//!   harness/baseline order alternates per chunk of calls, per round, per chunk of changes or
//!   per build) and summarised the same way (median, or p99, over the same number of samples);
//!   the echo and cold-start ratios are the median of paired ratios, each harness chunk or run
//!   over the baseline measured next to it (the ratio of the two medians is reported beside);
//!   Nothing is compared with a fixed number: the exit status says only whether the bench could
//!   run and clean up, never whether something was "fast enough";
//! - the measured code runs in release: in a debug xtask, `bench` builds the release fixture and
//!   a release xtask and re-runs itself as `target/release/xtask bench --inner ...`;
//! - every loop is bounded in count (by its option, itself capped) and in time (per-call,
//!   per-start, per-change and per-phase deadlines); a CPU phase that reaches its time limit stops
//!   early and says how many rounds it measured;
//! - no fixture process the bench started is left behind: after each round and at the end the
//!   bench waits (bounded) until `pgrep` finds none carrying this run's tag, reports the count,
//!   and exits 1 if any survived;
//! - results go to stdout (a table, then one `bench <name>: harness <x> vs baseline <y> = <r>x`
//!   line per metric, p99 metrics as lines of their own) and to `target/bench/results.json`.
//!
//! Metrics:
//! - `echo_per_call`: time per sequential `echo` tools/call over stdio, through the governed
//!   path (`bind_step` → `prepare_call` → `PreparedCall::call`) vs `Peer::call_tool` of a bare
//!   `().serve(TokioChildProcess)` client, the sides alternating every 100 calls; the bare
//!   client's session runs on the bench's runtime, the harness's on its own pinned I/O threads
//!   (the default);
//! - `echo_per_call_work_stealing`: the same with
//!   `RuntimeBuilder::io_threads(IoThreads::WorkStealing(2))`;
//! - `echo_per_call_io_runtime`: the same, with the harness started with
//!   `RuntimeBuilder::io_runtime` on the bench's runtime, so both sessions run where the calls
//!   are made;
//! - `cold_start_<N>`: `Runtime::start` of N stdio servers until a published snapshot has all N
//!   connected (spawn + initialize + listing of every declared kind + publication) vs N bare
//!   spawn + initialize, at the same parallelism P on both sides (`--parallel`, default the
//!   harness's local connection queue, 3): the harness runs with P local slots, the baseline
//!   holds one of P permits from before its spawn until its initialize completes — the span of
//!   the harness's slot. Same fixture binary and arguments on both sides; neither side's
//!   shutdown or reaping is timed (both are waited for, bounded, before the next side runs);
//! - `cold_start_<N>_listed`: the same harness samples vs N bare spawn + initialize (under the
//!   same P permits) followed by the listings the harness makes — every kind the server declared
//!   (tools, prompts, resources, templates, skills), all pages, concurrently — so what is left
//!   of the ratio is the harness's own overhead (actors, sanitising, the catalog, publication);
//! - `cold_start_<N>_work_stealing`: `cold_start_<N>` with the harness on
//!   `IoThreads::WorkStealing(2)` (a fourth side of each round, same baseline);
//! - `list_changed_visible[_spaced][_window0][_p99]`: from just before an `add_tool` call until
//!   the new tool is in a published snapshot (`Runtime::wait_for`), vs a bare rmcp client whose
//!   `on_tool_list_changed` lists the tools and signals once they contain the new name; the
//!   harness runs with its default batch window and with `batch_window(ZERO)`, with changes back
//!   to back and `_spaced` (each change one window + 4 ms after the previous one was visible, on
//!   every side, baseline included);
//! - `gateway_echo_http[_p99]`, `gateway_echo_http_keepalive[_p99]` (the same from a
//!   hand-written client keeping its connections), `gateway_upstream_leg` (the upstream call
//!   alone vs the added latency), `gateway_throughput_32[_keepalive]`, `gateway_list_changed[_p99]`, `gateway_session_seal`
//!   (sealed session id per request vs per-call time, goal < 1%), `gateway_stdio_upstream[_p99]`
//!   (a gateway in front of the fixture over stdio): what `mcp-harness serve` adds over
//!   Streamable HTTP, vs the same client direct to the same upstream (see `gateway.rs`);
//!   `gateway_floor_tcp[_p99]`, `gateway_floor_http[_p99]`, `gateway_floor_http_throughput_32`:
//!   the same echo through a bare TCP relay and a bare HTTP forwarder, the least any gateway adds
//!   on this machine (see `floor.rs`);
//!   `peer_fastmcp_echo_http`, `peer_supergateway_echo_http` and `gateway_added_vs_<peer>[_p99]`:
//!   the same echo through FastMCP's proxy and supergateway, and the latency we add as a ratio of
//!   theirs; `gateway_stdio_added_vs_supergateway[_p99]`: the same with our upstream on stdio, as
//!   supergateway's is (see `peers.rs`);
//! - `serve_echo_keepalive_threads{N}[_p99]`, `serve_throughput_32_keepalive_threads{N}`: the
//!   release `mcp-harness serve --http --threads N` in its own process vs the same keep-alive
//!   client direct to the fixture, N = 1 and 2 (see `serve.rs`; the group builds the release CLI);
//! - `serve_instructions_per_call`: user-space instructions per sequential echo (valgrind's
//!   callgrind) of `serve --http --threads 1` vs the fixture's own process, direct — a ratio
//!   this host's timing noise cannot move (see `instructions.rs`; needs valgrind);
//!   `serve_stdio_instructions_per_call`: the same with the fixture as serve's stdio child;
//!   `serve_floor_rust_instructions_per_call`: the same for the bench's HTTP forwarder as a
//!   process on one thread, and `serve_floor_h1_instructions_per_call` for its hand-written
//!   HTTP/1.1 relay (`serve_floor_{rust,h1,tcp}_*` in the `serve` group measure the two and the
//!   TCP relay in time and CPU); `serve_proto_mcp_instructions_per_call` (and
//!   `serve_proto_mcp_*` in the `serve` group) for that relay with a `tools/call`'s MCP work on
//!   top, a prototype (see `relay_mcp.rs`);
//! - `snapshot_build_<T>`: `SnapshotBuilder` + `build` over S catalogs of T/S realistic tools
//!   (pure CPU) vs cloning the catalogs' `Arc`s into a map and indexing every qualified name;
//! - `set_tools_<n>`: `ServerCatalog::set_tools` (sanitising and qualifying) of one server's n
//!   tools vs a plain clone of the `Vec<Tool>`;
//! - `http_echo_per_call[_p99]`: sequential 1 KiB echo calls through the harness to the fixture
//!   over Streamable HTTP vs the same through the harness over stdio; `http_raw_echo_per_call`:
//!   a hand-written keep-alive HTTP/1.1 client vs hand-written JSON lines over stdio (the server
//!   side alone); `http_client_side`: the harness over HTTP vs that raw HTTP client (`http.rs`);
//! - `cli_call_hung_sibling`: the release `mcp-harness call` of a stdio server's tool with a hung
//!   sibling configured vs with it removed (goal ≈1.00x); `cli_refused_remote`: a `call` naming a
//!   remote server whose port is closed, until it fails, vs a run with no server configured
//!   (goal ≈1.00x) (`cli.rs`; the group builds the release CLI).

mod cli;
pub(crate) mod floor;
mod gateway;
mod http;
mod instructions;
mod list_changed;
mod peers;
mod relay_h1;
mod relay_mcp;
mod report;
mod serve;
mod snapshot;
mod sse;
mod stdio;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use mcp_harness_runtime::catalog::{ServerState, Snapshot};
use mcp_harness_runtime::transport::StdioSpec;
use mcp_harness_runtime::{Config, ServerConfig, TransportConfig};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;

use report::{Metric, Report};
use stdio::Placement;

const USAGE: &str = "\
usage: cargo xtask bench [--calls N] [--servers N] [--parallel P] [--rounds N] [--warmup N]
                         [--changes K] [--builds R] [--only GROUP[,GROUP...]]
                         [--keep-profiles DIR]

Benchmarks the harness against a baseline (a bare rmcp client on the release fixture server, or
the minimum in-memory work) and prints every figure as a ratio harness/baseline measured in the
same run (lower is better; 1.00x = no overhead). Results also go to target/bench/results.json.

  --calls N     echo calls per round and per client (default 2000)
  --servers N   stdio servers in the cold-start bench (default 100)
  --parallel P  cold start: connects at once, harness (local connection slots) and baseline
                alike (default 3, the harness's default local queue)
  --rounds N    rounds of the echo and cold-start benches, order alternating (default 3; median)
  --warmup N    echo calls per client before measuring (default 200)
  --changes K   tool-list changes per side in the list_changed bench (default 200; median, p99)
  --builds R    rounds of the snapshot-build and set_tools benches (default 200; median)
  --only G,...  run only these groups: echo, cold_start, list_changed, snapshot, http,
                sse (server-everything over legacy SSE, Streamable HTTP and stdio; installs
                the npm peers), gateway, serve (the release `mcp-harness serve --http`
                process), instructions (the same process's instructions per call against the
                fixture's, counted by valgrind's callgrind; needs valgrind), cli (these
                three build the release CLI too)
                (default all)
  --keep-profiles DIR
                instructions: keep callgrind's counts of the measured calls in DIR
                (fixture.out.1, serve.out.1; read them with callgrind_annotate; symbols need
                CARGO_PROFILE_RELEASE_STRIP=false) instead of deleting them";

const DEFAULT_CALLS: usize = 2000;
const DEFAULT_SERVERS: usize = 100;
/// The harness's own default: the cold start measures the configuration users get.
const DEFAULT_PARALLEL: usize = mcp_harness_runtime::DEFAULT_LOCAL_SLOTS;
const DEFAULT_ROUNDS: usize = 3;
const DEFAULT_WARMUP: usize = 200;
const DEFAULT_CHANGES: usize = 200;
const DEFAULT_BUILDS: usize = 200;
const MAX_CALLS: usize = 1_000_000;
const MAX_SERVERS: usize = 200;
const MAX_ROUNDS: usize = 15;
const MAX_CHANGES: usize = 5_000;
const MAX_BUILDS: usize = 100_000;
/// The metric groups `--only` can pick, in the order they run.
const GROUPS: [&str; 10] = [
    "echo",
    "cold_start",
    "list_changed",
    "snapshot",
    "http",
    "sse",
    "gateway",
    "serve",
    "instructions",
    "cli",
];

/// One tool call, either side.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// A governed tool call's outcome as the bench checks it: `Ok` when it answered without
/// `isError` within [`CALL_TIMEOUT`], else what went wrong, naming `what` (the side and tool).
async fn checked(
    what: &str,
    call: impl Future<Output = Result<mcp_harness_runtime::ToolResult, mcp_harness_runtime::CallError>>,
) -> Result<(), String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(r)) if !r.is_error() => Ok(()),
        Ok(Ok(r)) => Err(format!("{what} reported an error: {:?}", r.result.content)),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} took over {CALL_TIMEOUT:?}")),
    }
}

/// One batch of sequential calls (warm-up or a measured round).
const BATCH_LIMIT: Duration = Duration::from_secs(60);
/// Spawn + initialize (+ listing, for the harness) of one or all servers.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Waiting for the fixture processes of this run to disappear.
const REAP_LIMIT: Duration = Duration::from_secs(10);
const REAP_POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, PartialEq)]
struct Options {
    calls: usize,
    servers: usize,
    /// Connects at once in the cold start, on both sides.
    parallel: usize,
    rounds: usize,
    warmup: usize,
    changes: usize,
    builds: usize,
    /// The metric groups to run (a subset of [`GROUPS`]); all by default.
    only: Vec<String>,
    /// Where the `instructions` group leaves callgrind's counts (deleted when `None`).
    keep_profiles: Option<PathBuf>,
    /// Run the measurements in this process (set by the outer invocation).
    inner: bool,
    fixture: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            calls: DEFAULT_CALLS,
            servers: DEFAULT_SERVERS,
            parallel: DEFAULT_PARALLEL,
            rounds: DEFAULT_ROUNDS,
            warmup: DEFAULT_WARMUP,
            changes: DEFAULT_CHANGES,
            builds: DEFAULT_BUILDS,
            only: GROUPS.iter().map(|g| g.to_string()).collect(),
            keep_profiles: None,
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
                "--parallel" => o.parallel = number(flag, &value()?, 1, MAX_SERVERS)?,
                "--rounds" => o.rounds = number(flag, &value()?, 1, MAX_ROUNDS)?,
                "--warmup" => o.warmup = number(flag, &value()?, 0, MAX_CALLS)?,
                "--changes" => o.changes = number(flag, &value()?, 1, MAX_CHANGES)?,
                "--builds" => o.builds = number(flag, &value()?, 1, MAX_BUILDS)?,
                "--only" => o.only = groups(&value()?)?,
                "--keep-profiles" => o.keep_profiles = Some(PathBuf::from(value()?)),
                "--fixture" => o.fixture = Some(PathBuf::from(value()?)),
                "--inner" => o.inner = true,
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        Ok(o)
    }

    /// The arguments the inner run needs to measure the same thing.
    fn inner_args(&self, fixture: &Path) -> Vec<String> {
        let mut args = vec![
            "bench".into(),
            "--inner".into(),
            "--fixture".into(),
            fixture.display().to_string(),
            "--calls".into(),
            self.calls.to_string(),
            "--servers".into(),
            self.servers.to_string(),
            "--parallel".into(),
            self.parallel.to_string(),
            "--rounds".into(),
            self.rounds.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--changes".into(),
            self.changes.to_string(),
            "--builds".into(),
            self.builds.to_string(),
            "--only".into(),
            self.only.join(","),
        ];
        if let Some(dir) = &self.keep_profiles {
            args.extend(["--keep-profiles".into(), dir.display().to_string()]);
        }
        args
    }

    fn runs(&self, group: &str) -> bool {
        self.only.iter().any(|g| g == group)
    }
}

fn groups(text: &str) -> Result<Vec<String>, String> {
    let mut picked = Vec::new();
    for g in text.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        if !GROUPS.contains(&g) {
            return Err(format!(
                "--only: unknown group `{g}` (groups: {})",
                GROUPS.join(", ")
            ));
        }
        if !picked.iter().any(|p: &String| p == g) {
            picked.push(g.to_string());
        }
    }
    if picked.is_empty() {
        return Err("--only wants at least one group".into());
    }
    Ok(picked)
}

fn number(flag: &str, text: &str, min: usize, max: usize) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{flag} wants a whole number from {min} to {max}, got `{text}`"
        )),
    }
}

pub(crate) fn main(args: &[String]) -> ExitCode {
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
    // Always the CLI too, whichever groups run: a build without it unifies its dependencies'
    // features differently, so alternating `--only gateway` and `--only serve` rebuilt the
    // shared crates in release (minutes) on every switch.
    build.args(["-p", "mcp-harness", "--bin", "mcp-harness"]);
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

struct Bench {
    fixture: PathBuf,
    /// `--name` of every fixture this run starts, so `pgrep -f` finds exactly ours.
    tag: String,
    options: Options,
}

type BareClient = RunningService<RoleClient, ()>;

impl Bench {
    async fn run(&self) -> Result<Vec<Metric>, String> {
        let mut metrics = Vec::new();
        if self.options.runs("echo") {
            for placement in [
                Placement::Default,
                Placement::WorkStealing,
                Placement::Caller,
            ] {
                metrics.push(self.echo(placement).await?);
            }
        }
        if self.options.runs("cold_start") {
            metrics.extend(self.cold_start().await?);
        }
        if self.options.runs("list_changed") {
            metrics.extend(self.list_changed().await?);
        }
        if self.options.runs("snapshot") {
            metrics.extend(self.snapshot_build()?);
        }
        if self.options.runs("http") {
            metrics.extend(self.http().await?);
        }
        if self.options.runs("sse") {
            metrics.extend(self.sse().await?);
        }
        if self.options.runs("gateway") {
            metrics.extend(self.gateway().await?);
        }
        if self.options.runs("serve") {
            metrics.extend(self.serve().await?);
        }
        if self.options.runs("instructions") {
            metrics.extend(self.instructions().await?);
        }
        if self.options.runs("cli") {
            metrics.extend(self.cli().await?);
        }
        Ok(metrics)
    }

    fn config(&self, names: impl IntoIterator<Item = String>) -> Config {
        let mut config = Config::default();
        for name in names {
            let spec = StdioSpec {
                command: self.fixture.display().to_string(),
                args: vec!["--name".into(), self.tag.clone()],
                env: Default::default(),
                cwd: None,
                inherit_env: true,
            };
            let server = ServerConfig {
                name: name.clone(),
                transport: TransportConfig::Stdio(spec),
                enabled: true,
                startup_timeout: STARTUP_TIMEOUT,
                tool_timeout: CALL_TIMEOUT,
                max_message_bytes: mcp_harness_transport::DEFAULT_MAX_MESSAGE_BYTES,
                include_tools: None,
                exclude_tools: Vec::new(),
                untrusted: None,
                unusable: None,
                names: Default::default(),
                protocol_version: None,
            };
            config.servers.insert(name, server);
        }
        // The bench trusts its own fixture: every call is allowed (the permission decision is
        // still made on each call).
        config.permissions =
            serde_json::from_value(serde_json::json!({"allow": ["**"]})).unwrap_or_default();
        config
    }

    /// A fixture process of this run (tagged), its stderr discarded.
    fn fixture_transport(&self) -> Result<TokioChildProcess, String> {
        let mut cmd = tokio::process::Command::new(&self.fixture);
        cmd.args(["--name", &self.tag]);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", self.fixture.display()))?;
        Ok(transport)
    }

    async fn bare(&self) -> Result<BareClient, String> {
        let transport = self.fixture_transport()?;
        match tokio::time::timeout(STARTUP_TIMEOUT, ().serve(transport)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(format!("bare initialize failed: {e}")),
            Err(_) => Err(format!("bare initialize took over {STARTUP_TIMEOUT:?}")),
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

/// How many processes other than this one `pgrep -f pattern` finds (this one names the
/// fixture's path in its own arguments); 0 when pgrep finds none or cannot run.
fn pgrep(pattern: &str) -> usize {
    let me = std::process::id().to_string();
    match Command::new("pgrep")
        .args(["-f", pattern])
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|pid| !pid.is_empty() && *pid != me)
            .count(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_bounds() {
        let args: Vec<String> = ["--calls", "10", "--servers=3", "--changes", "7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = Options::parse(&args).expect("valid arguments");
        assert_eq!((o.calls, o.servers, o.rounds), (10, 3, DEFAULT_ROUNDS));
        assert_eq!(o.parallel, DEFAULT_PARALLEL);
        assert_eq!((o.changes, o.builds), (7, DEFAULT_BUILDS));
        assert!(Options::parse(&["--calls".into(), "0".into()]).is_err());
        assert!(Options::parse(&["--changes".into(), "0".into()]).is_err());
        assert!(Options::parse(&["--bogus".into()]).is_err());
        assert!(Options::parse(&["--only".into(), "echo,nope".into()]).is_err());
        assert_eq!(o.only.len(), GROUPS.len());
        let only = Options::parse(&["--only=echo,snapshot,echo".into()]).expect("valid groups");
        assert_eq!(only.only, ["echo", "snapshot"]);
        let inner = Options::parse(&only.inner_args(Path::new("/f"))[1..]).expect("inner args");
        assert_eq!(inner.only, only.only);
        let inner = Options::parse(&o.inner_args(Path::new("/f"))[1..]).expect("inner args parse");
        assert_eq!(
            (inner.changes, inner.builds, inner.calls),
            (7, o.builds, 10)
        );
        let p = Options::parse(&["--parallel=5".into()]).expect("valid parallelism");
        let inner = Options::parse(&p.inner_args(Path::new("/f"))[1..]).expect("inner args");
        assert_eq!(inner.parallel, 5);
        assert!(Options::parse(&["--parallel".into(), "0".into()]).is_err());
        assert_eq!(inner.keep_profiles, None);
        let kept = Options::parse(&["--keep-profiles=/tmp/p".into()]).expect("a directory");
        let inner = Options::parse(&kept.inner_args(Path::new("/f"))[1..]).expect("inner args");
        assert_eq!(inner.keep_profiles, Some(PathBuf::from("/tmp/p")));
    }
}

//! `cargo xtask chaos`: the fault matrix of issue 13. Each case (a broken, hanging or hostile
//! server, an HTTP fault on one request kind, a signal to the harness) runs N times, each time
//! beside a healthy fixture server, and every run records its outcome class, the time to the
//! outcome, the harness process's peak RSS, the processes it left and whether the healthy server
//! stayed callable.
//!
//! Invariants:
//! - a run's processes are told apart by an environment tag ([`procs::TAG_VAR`]); nothing the run
//!   did not start is counted or killed;
//! - every run is bounded: the harness is killed at the case's deadline (plus a shutdown grace),
//!   and whatever it left is killed after being counted;
//! - loopback only: the HTTP faults are served on 127.0.0.1 by this process;
//! - the exit status is non-zero iff a selected case hung past its deadline, leaked a process,
//!   lost the healthy server, went over its memory bound or ended in an unexpected outcome.

mod cases;
pub(crate) mod probe;
pub(crate) mod procs;
pub(crate) mod raw;
mod verdict;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cases::{Case, Kind, Server};
use verdict::{Verdict, print_table};

const USAGE: &str = "usage: cargo xtask chaos [--runs N] [--only CASE,...] [--skip-known] [--jobs J] [--json] [--list]

  --runs N       runs per case (default 20)
  --only LIST    only these cases (comma-separated names; see --list)
  --skip-known   leave out the cases that fail on main today (cases::KNOWN_FAILING, with the
                 issue-13 point that fixes each)
  --jobs J       runs at the same time (default 2)
  --json         print the results as JSON instead of a table
  --list         print the case names and exit";

/// Time a harness gets to shut down after its outcome before the run counts as hung.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Time the processes of a run get to exit after the harness did.
const LEFTOVER_GRACE: Duration = Duration::from_secs(3);

struct Options {
    runs: usize,
    only: Option<Vec<String>>,
    skip_known: bool,
    jobs: usize,
    json: bool,
    list: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        runs: 20,
        only: None,
        skip_known: false,
        jobs: 2,
        json: false,
        list: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--runs" => {
                opts.runs = value()?
                    .parse()
                    .map_err(|_| "--runs expects a number".to_owned())?
            }
            "--jobs" => {
                opts.jobs = value()?
                    .parse()
                    .map_err(|_| "--jobs expects a number".to_owned())?
            }
            "--only" => {
                opts.only = Some(
                    value()?
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect(),
                )
            }
            "--skip-known" => opts.skip_known = true,
            "--json" => opts.json = true,
            "--list" => opts.list = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if opts.runs == 0 || opts.runs > 10_000 {
        return Err("--runs must be between 1 and 10000".into());
    }
    opts.jobs = opts.jobs.clamp(1, 16);
    Ok(opts)
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask chaos: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let all = cases::all();
    if opts.list {
        for case in &all {
            match cases::known_point(&case.name) {
                Some(p) => println!("{} (known failing, issue 13 point {p})", case.name),
                None => println!("{}", case.name),
            }
        }
        return ExitCode::SUCCESS;
    }
    if let Some(only) = &opts.only
        && let Some(unknown) = only.iter().find(|n| !all.iter().any(|c| &c.name == *n))
    {
        eprintln!("xtask chaos: no case named `{unknown}` (see --list)");
        return ExitCode::from(2);
    }
    let selected: Vec<Case> = all
        .into_iter()
        .filter(|c| opts.only.as_ref().is_none_or(|o| o.contains(&c.name)))
        .filter(|c| !(opts.skip_known && cases::known_point(&c.name).is_some()))
        .collect();
    let bins = match Binaries::build(
        selected
            .iter()
            .any(|c| matches!(c.kind, Kind::Signal { .. })),
    ) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask chaos: {e}");
            return ExitCode::from(1);
        }
    };
    let started = Instant::now();
    let results = run_all(&selected, &opts, &bins);
    let _ = std::fs::remove_dir_all(&bins.scratch);
    let verdicts: Vec<Verdict> = selected
        .iter()
        .zip(&results)
        .map(|(case, runs)| Verdict::of(case, runs))
        .collect();
    if opts.json {
        let rows: Vec<Value> = selected
            .iter()
            .zip(&results)
            .zip(&verdicts)
            .map(|((case, runs), v)| v.to_json(case, runs))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"runs": opts.runs, "cases": rows}))
                .unwrap_or_default()
        );
    } else {
        print_table(&selected, &verdicts, opts.runs, started.elapsed());
    }
    if verdicts.iter().all(|v| v.failures.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The programs a run starts.
struct Binaries {
    /// This program (`chaos-probe`, `chaos-server`).
    xtask: PathBuf,
    fixture: PathBuf,
    cli: PathBuf,
    /// Per-run config directories live under here.
    scratch: PathBuf,
}

impl Binaries {
    /// Builds the fixture server (and the CLI when a signal case runs) next to this program.
    fn build(cli: bool) -> Result<Self, String> {
        let xtask = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
        let dir = xtask
            .parent()
            .ok_or("this program has no directory")?
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "mcp-harness-fixture",
            "--bin",
            "mcp-fixture-server",
        ]);
        if cli {
            build.args(["-p", "mcp-harness", "--bin", "mcp-harness"]);
        }
        match build.status() {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(format!("building the fixture server failed ({s})")),
            Err(e) => return Err(format!("cannot run cargo: {e}")),
        }
        let scratch = std::env::temp_dir().join(format!("mcp-chaos-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)
            .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        Ok(Self {
            xtask,
            fixture: dir.join("mcp-fixture-server"),
            cli: dir.join("mcp-harness"),
            scratch,
        })
    }
}

/// What one run gave.
#[derive(Debug, Clone)]
struct Run {
    outcome: String,
    /// Time to the outcome (signals: from the signal to the harness's exit).
    time: Duration,
    peak_rss_kib: u64,
    /// `pid: cmdline` of each process the run left.
    leaks: Vec<String>,
    /// `None` where the case has no healthy call (signals).
    healthy: Option<bool>,
    hung: bool,
    detail: String,
}

fn run_all(selected: &[Case], opts: &Options, bins: &Binaries) -> Vec<Vec<Run>> {
    let queue: Mutex<VecDeque<(usize, usize)>> = Mutex::new(
        (0..opts.runs)
            .flat_map(|run| (0..selected.len()).map(move |case| (case, run)))
            .collect(),
    );
    let results: Mutex<Vec<Vec<Run>>> = Mutex::new(vec![Vec::new(); selected.len()]);
    let total = selected.len() * opts.runs;
    let done = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.pop_front()).ok().flatten();
                    let Some((case, run)) = next else { break };
                    let result = run_case(&selected[case], run, bins);
                    if let Ok(mut d) = done.lock() {
                        *d += 1;
                        if !opts.json {
                            eprintln!(
                                "[{}/{total}] {} #{run}: {} in {} ms{}{}",
                                *d,
                                selected[case].name,
                                result.outcome,
                                result.time.as_millis(),
                                if result.hung { " HUNG" } else { "" },
                                if result.leaks.is_empty() {
                                    String::new()
                                } else {
                                    format!(" LEFT {}", result.leaks.join(", "))
                                },
                            );
                        }
                    }
                    if let Ok(mut r) = results.lock() {
                        r[case].push(result);
                    }
                }
            });
        }
    });
    results.into_inner().unwrap_or_default()
}

fn run_case(case: &Case, run: usize, bins: &Binaries) -> Run {
    let tag = format!("{}-{}-{run}", std::process::id(), case.name);
    let dir = bins.scratch.join(&tag);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return Run::failed_to_start(format!("cannot create {}: {e}", dir.display()));
    }
    let result = match case.kind {
        Kind::Signal { signal, .. } => run_signal(case, signal, &tag, &dir, bins),
        _ => run_probe(case, &tag, &dir, bins),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

impl Run {
    fn failed_to_start(detail: String) -> Self {
        Run {
            outcome: "not-started".into(),
            time: Duration::ZERO,
            peak_rss_kib: 0,
            leaks: Vec::new(),
            healthy: Some(false),
            hung: false,
            detail,
        }
    }
}

fn fixture_server(bins: &Binaries, name: &str, args: &[&str], tag: &str) -> Value {
    let mut all = vec!["--name".to_owned(), name.to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    json!({
        "command": bins.fixture,
        "args": all,
        "env": {procs::TAG_VAR: tag},
        "startupTimeoutSec": 30
    })
}

fn stdio_server(server: Server, tag: &str, bins: &Binaries) -> Value {
    match server {
        Server::Fixture(args) => fixture_server(bins, probe::FAULTY, args, tag),
        Server::Raw(mode) => json!({
            "command": bins.xtask,
            "args": ["chaos-server", mode],
            "env": {procs::TAG_VAR: tag},
        }),
        Server::ShellThenFixture(snippet) => json!({
            "command": "sh",
            "args": ["-c", format!("{snippet} exec \"$0\" --name {}", probe::FAULTY), bins.fixture],
            "env": {procs::TAG_VAR: tag},
        }),
    }
}

/// The faulty server's config entry, and the HTTP server it needs (kept alive for the run).
fn faulty_server(
    case: &Case,
    tag: &str,
    bins: &Binaries,
) -> Result<(Value, Option<raw::HttpServer>), String> {
    match case.kind {
        Kind::Stdio {
            server,
            startup_s,
            tool_s,
            ..
        } => {
            let mut entry = stdio_server(server, tag, bins);
            entry["startupTimeoutSec"] = json!(startup_s);
            entry["toolTimeoutSec"] = json!(tool_s);
            Ok((entry, None))
        }
        Kind::Http { fault } => {
            let server = raw::HttpServer::start(fault)
                .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
            let (startup_s, tool_s) = cases::HTTP_TIMEOUTS;
            let entry = json!({
                "type": "http",
                "url": server.url,
                "startupTimeoutSec": startup_s,
                "toolTimeoutSec": tool_s,
            });
            Ok((entry, Some(server)))
        }
        Kind::Signal { server, .. } => {
            let entry = stdio_server(server, tag, bins);
            Ok((entry, None))
        }
    }
}

fn write_config(
    case: &Case,
    tag: &str,
    dir: &Path,
    bins: &Binaries,
) -> Result<(PathBuf, Option<raw::HttpServer>), String> {
    let (faulty, http) = faulty_server(case, tag, bins)?;
    let config = json!({
        "mcpServers": {
            probe::FAULTY: faulty,
            probe::HEALTHY: fixture_server(bins, probe::HEALTHY, &[], tag),
        },
        "permissions": {"allow": [
            format!("mcp__{}__*", probe::FAULTY),
            format!("mcp__{}__*", probe::HEALTHY),
        ]},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((path, http))
}

/// Reads `child`'s stdout lines on a thread (bounded by the child's life).
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

fn stderr_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

fn run_probe(case: &Case, tag: &str, dir: &Path, bins: &Binaries) -> Run {
    let (config, http) = match write_config(case, tag, dir, bins) {
        Ok(c) => c,
        Err(e) => return Run::failed_to_start(e),
    };
    let call = match case.kind {
        Kind::Stdio { call, .. } => call,
        _ => Some(("echo", r#"{"message": "hi"}"#)),
    };
    let mut spec = json!({
        "config": config,
        // A server still pending (reconnecting) near the deadline is an outcome, not a hang:
        // the probe reports it and checks the healthy server.
        "settle_ms": case.deadline.saturating_sub(Duration::from_secs(2)).as_millis() as u64,
    });
    if let Some((tool, args)) = call {
        spec["call"] = json!(tool);
        spec["args"] = serde_json::from_str(args).unwrap_or(Value::Null);
    }
    let stderr = std::fs::File::create(dir.join("stderr"))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let start = Instant::now();
    let child = Command::new(&bins.xtask)
        .arg("chaos-probe")
        .arg(spec.to_string())
        .env(procs::TAG_VAR, tag)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Run::failed_to_start(format!("cannot start the probe: {e}")),
    };
    let lines = lines_of(&mut child);
    let pid = child.id();
    let mut peak = 0u64;
    let mut report: Option<Value> = None;
    let mut hung = false;
    loop {
        if let Some(kib) = procs::peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if report.is_none()
            && let Ok(line) = lines.try_recv()
        {
            report = serde_json::from_str(&line).ok();
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        let limit = if report.is_some() {
            case.deadline + SHUTDOWN_GRACE
        } else {
            case.deadline
        };
        if start.elapsed() > limit {
            hung = true;
            procs::signal(pid, libc::SIGKILL);
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if report.is_none() {
        report = lines
            .recv_timeout(Duration::from_millis(200))
            .ok()
            .and_then(|l| serde_json::from_str(&l).ok());
    }
    let elapsed = start.elapsed();
    drop(http);
    // After a hang the harness was killed: what it left is killed too, but the hang is the
    // failure to report, not the leftovers a SIGKILL leaves.
    let leaks = procs::reap_leftovers(tag, if hung { Duration::ZERO } else { LEFTOVER_GRACE });
    let leaks = if hung { Vec::new() } else { leaks };
    match report {
        Some(r) => {
            let outcome_ms = r["outcome_ms"].as_u64().unwrap_or(0);
            let mut outcome = r["outcome"].as_str().unwrap_or("?").to_owned();
            if hung {
                outcome.push_str(" (shutdown hung)");
            }
            Run {
                outcome,
                time: Duration::from_millis(outcome_ms),
                peak_rss_kib: peak.max(r["hwm_kib"].as_u64().unwrap_or(0)),
                leaks,
                healthy: Some(r["healthy_ok"].as_bool().unwrap_or(false)),
                hung,
                detail: format!(
                    "{} {}",
                    r["detail"].as_str().unwrap_or(""),
                    r["healthy_detail"].as_str().unwrap_or("")
                )
                .trim()
                .to_owned(),
            }
        }
        None => Run {
            outcome: if hung {
                "hung".into()
            } else {
                "no-report".into()
            },
            time: elapsed,
            peak_rss_kib: peak,
            leaks,
            healthy: None,
            hung: true,
            detail: stderr_tail(dir),
        },
    }
}

fn run_signal(case: &Case, signal: libc::c_int, tag: &str, dir: &Path, bins: &Binaries) -> Run {
    let (config, _) = match write_config(case, tag, dir, bins) {
        Ok(c) => c,
        Err(e) => return Run::failed_to_start(e),
    };
    let stderr = std::fs::File::create(dir.join("stderr"))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let child = Command::new(&bins.cli)
        .arg("--config")
        .arg(&config)
        .arg("watch")
        .env(procs::TAG_VAR, tag)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Run::failed_to_start(format!("cannot start mcp-harness: {e}")),
    };
    let pid = child.id();
    let lines = lines_of(&mut child);
    let mut peak = 0u64;
    // Ready when a revision shows both servers connected.
    let ready_by = Instant::now() + Duration::from_secs(40);
    let mut ready = false;
    while Instant::now() < ready_by {
        if let Some(kib) = procs::peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.contains("(2 connected)") => {
                ready = true;
                break;
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if !ready {
        procs::signal(pid, libc::SIGKILL);
        let _ = child.wait();
        procs::kill_all(tag);
        return Run {
            outcome: "not-ready".into(),
            time: Duration::ZERO,
            peak_rss_kib: peak,
            leaks: Vec::new(),
            healthy: None,
            hung: true,
            detail: stderr_tail(dir),
        };
    }
    let start = Instant::now();
    procs::signal(pid, signal);
    let mut hung = false;
    let status = loop {
        if let Some(kib) = procs::peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if start.elapsed() > case.deadline {
            hung = true;
            procs::signal(pid, libc::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let time = start.elapsed();
    drop(child.stdin.take());
    let leaks = procs::reap_leftovers(tag, if hung { Duration::ZERO } else { LEFTOVER_GRACE });
    let outcome = match status {
        None => "hung".to_owned(),
        Some(s) => {
            use std::os::unix::process::ExitStatusExt as _;
            match (s.code(), s.signal()) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "exited".to_owned(),
            }
        }
    };
    Run {
        outcome,
        time,
        peak_rss_kib: peak,
        leaks: if hung { Vec::new() } else { leaks },
        healthy: None,
        hung,
        detail: String::new(),
    }
}

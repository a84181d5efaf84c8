//! `cargo xtask conformance --server`: the official suite's *server* scenarios against the
//! fixture's conformance mode (`mcp-fixture-server --conformance`), twice: **direct** (the
//! fixture over Streamable HTTP) and **through the gateway** (`mcp-harness serve --prefix none
//! --http`, with the fixture as its stdio upstream, so the gateway owns that process).
//!
//! Invariants:
//! - Every scenario the suites list for a spec version (`list --server` tags) is run at that
//!   version, on both targets, and yields exactly one verdict per target; extension scenarios
//!   run without a spec version. A scenario with no result is a FAIL, never a silent gap.
//! - A verdict is strict: PASS iff at least one check scored SUCCESS and none is FAILURE,
//!   WARNING or SKIPPED (the suite skips the checks of an extension the server does not
//!   declare; the runner passes such a scenario, this does not).
//! - A gateway failure counts only where the same scenario passes direct (otherwise the
//!   fixture is at fault and the direct failure is counted). Known gaps are listed with their
//!   reason in `xtask/conformance-server-gaps.txt` and printed as such on every run; a listed
//!   gap that passes is reported so its line can go.
//! - Every process started here (fixture, gateway, runner) leads its own process group and is
//!   killed with it; waits are bounded (`START_LIMIT`, `RUN_LIMIT`).

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::baseline::{Listed, parse_listing};
use super::matrix::Suite;
use super::run::{RunnerExit, wait_or_kill};

/// Known gaps: `direct|gateway SUITE SPEC SCENARIO — REASON` per line (`SPEC` is `-` for an
/// extension scenario run without one).
pub(super) const GAPS_FILE: &str = "xtask/conformance-server-gaps.txt";
/// How long the fixture and the gateway get to start listening.
const START_LIMIT: Duration = Duration::from_secs(30);
/// Hard limit on one runner invocation (a whole spec version, or one extension scenario).
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Where a scenario is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The fixture's conformance mode over Streamable HTTP.
    Direct,
    /// `mcp-harness serve` in front of the fixture (stdio upstream).
    Gateway,
}

impl Target {
    pub(super) fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Gateway => "gateway",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "direct" => Some(Target::Direct),
            "gateway" => Some(Target::Gateway),
            _ => None,
        }
    }
}

/// One runner series: a suite at a spec version (None: extension scenarios, one at a time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerRun {
    pub(super) suite: Suite,
    pub(super) spec: Option<String>,
    pub(super) scenarios: Vec<String>,
}

impl ServerRun {
    fn label(&self) -> String {
        format!(
            "server-{}-{}",
            self.suite.name(),
            self.spec.as_deref().unwrap_or("extensions")
        )
    }
}

/// What `--server` without scenarios runs: for each suite, every date tag its listing names
/// (oldest first) with the scenarios tagged with it, then its extension scenarios.
pub(super) fn server_matrix(listed: &[(Suite, Vec<Listed>)]) -> Vec<ServerRun> {
    let mut runs = Vec::new();
    for (suite, scenarios) in listed {
        let mut specs: Vec<&str> = scenarios
            .iter()
            .flat_map(|l| l.tags.iter().map(String::as_str))
            .filter(|t| t.len() == 10 && t.as_bytes()[0].is_ascii_digit())
            .collect();
        specs.sort_unstable();
        specs.dedup();
        for spec in specs {
            runs.push(ServerRun {
                suite: *suite,
                spec: Some(spec.to_owned()),
                scenarios: scenarios
                    .iter()
                    .filter(|l| l.tags.iter().any(|t| t == spec))
                    .map(|l| l.name.clone())
                    .collect(),
            });
        }
        let extensions: Vec<String> = scenarios
            .iter()
            .filter(|l| l.is_extension())
            .map(|l| l.name.clone())
            .collect();
        if !extensions.is_empty() {
            runs.push(ServerRun {
                suite: *suite,
                spec: None,
                scenarios: extensions,
            });
        }
    }
    runs
}

/// The suite's server scenarios (`list --server`).
pub(super) fn list_server_scenarios(
    node: &Path,
    peers: &Path,
    suite: Suite,
) -> Result<Vec<Listed>, String> {
    let out = Command::new(node)
        .arg(suite.entry(peers))
        .args(["list", "--server"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`list --server` of the {} suite exited with {}",
            suite.name(),
            out.status
        ));
    }
    let listed = parse_listing(&String::from_utf8_lossy(&out.stdout));
    if listed.is_empty() {
        return Err(format!(
            "`list --server` of the {} suite listed no scenario",
            suite.name()
        ));
    }
    Ok(listed)
}

/// A known gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Gap {
    pub(super) target: Target,
    pub(super) suite: Suite,
    pub(super) spec: Option<String>,
    pub(super) scenario: String,
    pub(super) reason: String,
}

/// `TARGET SUITE SPEC SCENARIO — REASON` lines (`#` comments, blank lines skipped), each once
/// and with a reason.
pub(super) fn parse_gaps(text: &str) -> Result<Vec<Gap>, String> {
    let mut gaps: Vec<Gap> = Vec::new();
    const FORM: &str = "expected `direct|gateway SUITE SPEC|- SCENARIO — REASON`";
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |m: String| format!("line {}: {m}", i + 1);
        let (head, reason) = line.split_once('—').ok_or_else(|| at(FORM.into()))?;
        let words: Vec<&str> = head.split_whitespace().collect();
        let [target, suite, spec, scenario] = words[..] else {
            return Err(at(FORM.into()));
        };
        let target = Target::parse(target).ok_or_else(|| at(FORM.into()))?;
        let suite = Suite::parse(suite).map_err(at)?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(at(format!("{scenario}: a known gap needs its reason")));
        }
        let gap = Gap {
            target,
            suite,
            spec: (spec != "-").then(|| spec.to_owned()),
            scenario: scenario.to_owned(),
            reason: reason.to_owned(),
        };
        if gaps.iter().any(|g| {
            (g.target, g.suite, &g.spec, &g.scenario)
                == (gap.target, gap.suite, &gap.spec, &gap.scenario)
        }) {
            return Err(at(format!("{line} is listed twice")));
        }
        gaps.push(gap);
    }
    Ok(gaps)
}

/// The verdict of one scenario on one target.
#[derive(Debug, Clone)]
pub(super) struct ScenarioResult {
    pub(super) pass: bool,
    pub(super) ok: usize,
    pub(super) total: usize,
    pub(super) warnings: usize,
    /// The FAILURE/WARNING/SKIPPED checks (`id: message`), or why there is no result.
    pub(super) reasons: Vec<String>,
}

/// Scores a scenario's `checks.json` strictly (see the module invariant).
pub(super) fn score(checks: &[Value]) -> ScenarioResult {
    let status = |c: &Value| c["status"].as_str().unwrap_or("").to_owned();
    let ok = checks.iter().filter(|c| status(c) == "SUCCESS").count();
    let failed = checks.iter().filter(|c| status(c) == "FAILURE").count();
    let warnings = checks.iter().filter(|c| status(c) == "WARNING").count();
    let skipped = checks.iter().filter(|c| status(c) == "SKIPPED").count();
    let reasons = checks
        .iter()
        .filter(|c| matches!(status(c).as_str(), "FAILURE" | "WARNING" | "SKIPPED"))
        .map(|c| {
            let message = c["errorMessage"]
                .as_str()
                .or_else(|| c["description"].as_str())
                .unwrap_or("");
            format!(
                "{} {}: {}",
                status(c),
                c["id"].as_str().unwrap_or("?"),
                one_line(message, 200)
            )
        })
        .collect();
    ScenarioResult {
        pass: ok > 0 && failed == 0 && warnings == 0 && skipped == 0,
        ok,
        total: ok + failed + skipped,
        warnings,
        reasons,
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// The result directory the runner made for `scenario` under `dir`:
/// `server-<scenario>-<ISO timestamp with : and . as ->` (24 characters, ending in `Z`).
pub(super) fn result_dir(dir: &Path, scenario: &str) -> Option<PathBuf> {
    let prefix = format!("server-{}-", scenario.replace('/', "-"));
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)
                .is_some_and(|rest| rest.len() == 24 && rest.ends_with('Z'))
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found.pop()
}

/// A started process (fixture or gateway), killed with its process group on drop.
struct Started {
    child: Child,
    url: String,
    stderr_tail: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` in its own process group and waits (bounded) for a line on stdout or stderr
/// from which `find_url` extracts the URL it serves, then for that port to accept.
fn start(
    mut cmd: Command,
    what: &str,
    find_url: fn(&str) -> Option<String>,
) -> Result<Started, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let (tx, rx) = mpsc::channel::<String>();
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let pipes: Vec<Box<dyn Read + Send>> = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for pipe in pipes {
        let tx = tx.clone();
        let tail = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut t) = tail.lock() {
                    t.push(line.clone());
                    let excess = t.len().saturating_sub(20);
                    t.drain(..excess);
                }
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut started = Started {
        child,
        url: String::new(),
        stderr_tail: tail,
    };
    let deadline = Instant::now() + START_LIMIT;
    let url = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(url) = find_url(&line) {
                    break url;
                }
            }
            Err(_) => {
                return Err(format!(
                    "{what} announced no listening URL within {} s; its last output:\n  {}",
                    START_LIMIT.as_secs(),
                    started.tail().join("\n  ")
                ));
            }
        }
    };
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("{what} announced an unusable URL {url}"))?;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("{what} at {addr} does not accept connections"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    started.url = url;
    Ok(started)
}

impl Started {
    fn tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }
}

fn fixture_url(line: &str) -> Option<String> {
    line.strip_prefix("listening on ")
        .map(|u| u.trim().to_owned())
}

fn gateway_url(line: &str) -> Option<String> {
    line.strip_prefix("mcp-harness: serving ")
        .map(|u| u.trim().to_owned())
}

/// The fixture's conformance mode over Streamable HTTP on a free loopback port.
fn start_fixture(fixture: &Path) -> Result<Started, String> {
    let mut cmd = Command::new(fixture);
    cmd.args(["--conformance", "--transport", "http", "--port", "0"]);
    start(
        cmd,
        "the fixture (--conformance --transport http)",
        fixture_url,
    )
}

/// `mcp-harness serve --prefix none --http 127.0.0.1:0` with the fixture's conformance mode as
/// its only (stdio) upstream, every tool allowed; the config is written to `work`.
fn start_gateway(harness: &Path, fixture: &Path, work: &Path) -> Result<Started, String> {
    let config = work.join("gateway-config.json");
    let text = json!({
        "mcpServers": {
            // The fixture speaks 2026-07-28: its session opens with server/discover, so its
            // input_required rounds can pass through to clients of that version.
            "conf": {
                "command": fixture.to_string_lossy(),
                "args": ["--conformance"],
                "protocolVersion": "2026-07-28"
            }
        },
        "permissions": { "allow": ["mcp__conf__*"] }
    });
    fs::write(&config, text.to_string())
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let mut cmd = Command::new(harness);
    cmd.arg("--config")
        .arg(&config)
        .args(["serve", "--prefix", "none", "--http", "127.0.0.1:0"])
        .current_dir(work);
    start(cmd, "the gateway (mcp-harness serve --http)", gateway_url)
}

/// `cargo build -p mcp-harness -p mcp-harness-fixture --bins`: the paths of `mcp-harness` and
/// `mcp-fixture-server` as cargo reports them (so a CARGO_TARGET_DIR elsewhere is honoured).
fn build_bins(root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "build",
            "-p",
            "mcp-harness",
            "-p",
            "mcp-harness-fixture",
            "--bins",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo build -p mcp-harness -p mcp-harness-fixture --bins` failed ({})",
            out.status
        ));
    }
    let (mut harness, mut fixture) = (None, None);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        match msg["target"]["name"].as_str() {
            Some("mcp-harness") => harness = Some(PathBuf::from(exe)),
            Some("mcp-fixture-server") => fixture = Some(PathBuf::from(exe)),
            _ => {}
        }
    }
    match (harness, fixture) {
        (Some(h), Some(f)) => Ok((h, f)),
        _ => Err("cargo build reported no mcp-harness or mcp-fixture-server executable".into()),
    }
}

/// Runs `run` against `url`: one runner invocation for a spec version (`--suite all
/// --spec-version V`), one per scenario for extensions. Returns a result per scenario.
fn run_target(
    node: &Path,
    peers: &Path,
    run: &ServerRun,
    url: &str,
    dir: &Path,
) -> Vec<(String, ScenarioResult)> {
    let _ = fs::remove_dir_all(dir);
    let invocations: Vec<Vec<String>> = match &run.spec {
        Some(spec) if run.scenarios.len() > 1 => vec![vec![
            "--suite".into(),
            "all".into(),
            "--spec-version".into(),
            spec.clone(),
        ]],
        Some(spec) => vec![vec![
            "--scenario".into(),
            run.scenarios[0].clone(),
            "--spec-version".into(),
            spec.clone(),
        ]],
        None => run
            .scenarios
            .iter()
            .map(|s| vec!["--scenario".into(), s.clone()])
            .collect(),
    };
    let mut trouble: Vec<String> = Vec::new();
    if let Err(e) = fs::create_dir_all(dir) {
        trouble.push(format!("cannot create {}: {e}", dir.display()));
    }
    for (i, args) in invocations.iter().enumerate() {
        if !trouble.is_empty() {
            break;
        }
        let log_path = dir.join(format!("runner-{i}.log"));
        let Ok(log) = fs::File::create(&log_path) else {
            trouble.push(format!("cannot create {}", log_path.display()));
            break;
        };
        let Ok(log_err) = log.try_clone() else {
            trouble.push("cannot reopen the runner log".into());
            break;
        };
        let mut cmd = Command::new(node);
        cmd.arg(run.suite.entry(peers))
            .args(["server", "--url", url])
            .args(args)
            .arg("-o")
            .arg(dir)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        match cmd.spawn() {
            Ok(child) => match wait_or_kill(child, RUN_LIMIT) {
                RunnerExit::Killed => {
                    trouble.push(format!("runner killed after {} s", RUN_LIMIT.as_secs()))
                }
                RunnerExit::WaitFailed(e) => trouble.push(format!("lost the runner: {e}")),
                RunnerExit::Code(_) => {}
            },
            Err(e) => trouble.push(format!("cannot run {}: {e}", node.display())),
        }
    }
    run.scenarios
        .iter()
        .map(|scenario| {
            let checks: Option<Vec<Value>> = result_dir(dir, scenario)
                .and_then(|d| fs::read_to_string(d.join("checks.json")).ok())
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .and_then(|v| v.as_array().cloned());
            let result = match checks {
                Some(checks) => score(&checks),
                None => ScenarioResult {
                    pass: false,
                    ok: 0,
                    total: 0,
                    warnings: 0,
                    reasons: if trouble.is_empty() {
                        vec![format!("no checks.json (see {})", dir.display())]
                    } else {
                        trouble.clone()
                    },
                },
            };
            (scenario.clone(), result)
        })
        .collect()
}

/// Totals of a server-side run.
#[derive(Debug, Default)]
pub(super) struct ServerSummary {
    pub(super) passed: usize,
    pub(super) failed: usize,
    pub(super) known: usize,
    /// The suite could not be run at all (the fixture or the gateway did not start).
    pub(super) broken: bool,
}

/// Runs `runs` on `targets` and prints, per run, one line per scenario:
/// `SCENARIO  direct PASS|FAIL (ok/total)  gateway PASS|FAIL (ok/total)` and, under each
/// failure, its FAILURE/WARNING checks (all of them with `verbose`, else the first three).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_server_side(
    root: &Path,
    node: &Path,
    peers: &Path,
    runs: &[ServerRun],
    targets: &[Target],
    gaps: &[Gap],
    verbose: bool,
) -> ServerSummary {
    let mut summary = ServerSummary::default();
    let (harness, fixture) = match build_bins(root) {
        Ok(bins) => bins,
        Err(e) => {
            eprintln!("xtask conformance: {e}");
            summary.broken = true;
            return summary;
        }
    };
    let out_root = root.join("target/conformance");
    let work = out_root.join("server-work");
    if let Err(e) = fs::create_dir_all(&work) {
        eprintln!("xtask conformance: cannot create {}: {e}", work.display());
        summary.broken = true;
        return summary;
    }
    let mut servers: Vec<(Target, Started)> = Vec::new();
    for target in targets {
        let started = match target {
            Target::Direct => start_fixture(&fixture),
            Target::Gateway => start_gateway(&harness, &fixture, &work),
        };
        match started {
            Ok(s) => servers.push((*target, s)),
            Err(e) => {
                eprintln!("xtask conformance: {e}");
                summary.broken = true;
                return summary;
            }
        }
    }
    let mut stale: Vec<String> = Vec::new();
    for run in runs {
        println!(
            "== server scenarios: {} {}{} ({})",
            run.suite.name(),
            run.suite.version(),
            run.spec
                .as_deref()
                .map(|s| format!(" --spec-version {s}"))
                .unwrap_or_else(|| " extensions".into()),
            out_root.join(run.label()).display()
        );
        let results: Vec<(Target, Vec<(String, ScenarioResult)>)> = servers
            .iter()
            .map(|(target, started)| {
                let dir = out_root.join(run.label()).join(target.name());
                (*target, run_target(node, peers, run, &started.url, &dir))
            })
            .collect();
        for (i, scenario) in run.scenarios.iter().enumerate() {
            let direct_pass = results
                .iter()
                .find(|(t, _)| *t == Target::Direct)
                .map(|(_, r)| r[i].1.pass);
            let mut line = scenario.clone();
            let mut details: Vec<String> = Vec::new();
            for (target, per) in &results {
                let result = &per[i].1;
                let gap = gaps.iter().find(|g| {
                    g.target == *target
                        && g.suite == run.suite
                        && g.spec == run.spec
                        && g.scenario == *scenario
                });
                let mut verdict = format!(
                    "{} {} ({}/{}{})",
                    target.name(),
                    if result.pass { "PASS" } else { "FAIL" },
                    result.ok,
                    result.total,
                    if result.warnings > 0 {
                        format!(", {} warnings", result.warnings)
                    } else {
                        String::new()
                    }
                );
                match (result.pass, gap) {
                    (true, Some(_)) => {
                        summary.passed += 1;
                        verdict.push_str(&format!(" [listed in {GAPS_FILE}: remove it]"));
                        stale.push(format!(
                            "{} {} {} {scenario}",
                            target.name(),
                            run.suite.name(),
                            run.spec.as_deref().unwrap_or("-")
                        ));
                    }
                    (true, None) => summary.passed += 1,
                    (false, Some(g)) => {
                        summary.known += 1;
                        verdict.push_str(&format!(" [known gap: {}]", g.reason));
                    }
                    (false, None) if *target == Target::Gateway && direct_pass == Some(false) => {
                        // The fixture fails it already: counted once, on the direct side.
                        verdict.push_str(" [fails direct too]");
                    }
                    (false, None) => summary.failed += 1,
                }
                if !result.pass && (gap.is_none() || verbose) {
                    let shown = if verbose { usize::MAX } else { 3 };
                    for reason in result.reasons.iter().take(shown) {
                        details.push(format!("    {}: {reason}", target.name()));
                    }
                    if result.reasons.len() > shown {
                        details.push(format!(
                            "    {}: … {} more (-v)",
                            target.name(),
                            result.reasons.len() - shown
                        ));
                    }
                }
                line.push_str(&format!("  {verdict}"));
            }
            println!("{line}");
            for d in details {
                println!("{d}");
            }
        }
    }
    if !stale.is_empty() {
        println!(
            "server gaps that pass now (remove them from {GAPS_FILE}): {}",
            stale.join(", ")
        );
    }
    for (target, started) in &servers {
        if let Target::Gateway = target {
            let tail = started.tail();
            if verbose && !tail.is_empty() {
                println!("gateway output (last lines):");
                for l in tail {
                    println!("  {l}");
                }
            }
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed() -> Vec<(Suite, Vec<Listed>)> {
        let text = "Server scenarios (test against a server):\n  - server-initialize [2025-06-18,2025-11-25]\n  - server-stateless [2026-07-28]\n  - tools-list [2025-06-18,2025-11-25,2026-07-28]\n  - tasks-lifecycle [extension]\n";
        vec![(Suite::Next, parse_listing(text))]
    }

    #[test]
    fn the_matrix_runs_each_scenario_at_each_of_its_versions() {
        let runs = server_matrix(&listed());
        let shape: Vec<(Option<&str>, Vec<&str>)> = runs
            .iter()
            .map(|r| {
                (
                    r.spec.as_deref(),
                    r.scenarios.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (Some("2025-06-18"), vec!["server-initialize", "tools-list"]),
                (Some("2025-11-25"), vec!["server-initialize", "tools-list"]),
                (Some("2026-07-28"), vec!["server-stateless", "tools-list"]),
                (None, vec!["tasks-lifecycle"]),
            ]
        );
    }

    #[test]
    fn scoring_is_strict() {
        let c = |s: &str| json!({"id": "x", "status": s, "errorMessage": "why"});
        assert!(score(&[c("SUCCESS"), c("INFO")]).pass);
        assert!(!score(&[c("SUCCESS"), c("WARNING")]).pass);
        assert!(!score(&[c("SUCCESS"), c("FAILURE")]).pass);
        assert!(!score(&[c("INFO")]).pass, "nothing scored is no pass");
        assert!(
            !score(&[c("SUCCESS"), c("SKIPPED")]).pass,
            "a skipped check is no pass"
        );
        assert_eq!(score(&[c("FAILURE")]).reasons, ["FAILURE x: why"]);
    }

    #[test]
    fn gaps_need_a_target_a_version_and_a_reason() {
        let gaps = parse_gaps(
            "# c\ngateway next 2025-11-25 logging-set-level — logging/setLevel not forwarded\ndirect next - tasks-lifecycle — tasks not implemented\n",
        )
        .expect("valid");
        assert_eq!(gaps.len(), 2);
        assert_eq!(gaps[0].target, Target::Gateway);
        assert_eq!(gaps[0].spec.as_deref(), Some("2025-11-25"));
        assert_eq!(gaps[1].spec, None);
        assert!(parse_gaps("gateway next ping — x").is_err());
        assert!(parse_gaps("proxy next - ping — x").is_err());
        assert!(parse_gaps("gateway next - ping —  ").is_err());
        assert!(parse_gaps("gateway next - ping — a\ngateway next - ping — b").is_err());
    }

    #[test]
    fn result_dirs_match_the_whole_scenario_name() {
        let dir = std::env::temp_dir().join(format!("xtask-server-dirs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for d in [
            "server-tools-call-image-2026-12-01T02-40-00-000Z",
            "server-tools-call-image-content-2026-12-01T02-40-00-000Z",
        ] {
            fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        assert_eq!(
            result_dir(&dir, "tools-call-image").map(|p| p.file_name().map(|n| n.to_owned())),
            Some(Some(
                "server-tools-call-image-2026-12-01T02-40-00-000Z".into()
            ))
        );
        assert_eq!(result_dir(&dir, "tools-call"), None);
        let _ = fs::remove_dir_all(&dir);
    }
}

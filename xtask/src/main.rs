//! Developer tasks for the mcp-harness workspace, run as `cargo xtask <task> [args]`.
//!
//! Tasks:
//!   conformance   score the `mcp-harness conformance-client` against the official MCP
//!                 conformance suite (`cargo xtask conformance --help`)
//!   ci            the whole test run, as CI does it (`.ci/run` calls this)
//!   bench         harness overhead as ratios against a bare rmcp client measured in the same
//!                 run (`cargo xtask bench --help`)
//!   chaos         the fault matrix: broken, hanging and hostile servers and signals, each run
//!                 N times beside a healthy server (`cargo xtask chaos --help`)
//!   cycles        fails naming any module cycle inside a workspace crate (read from the
//!                 `mod` declarations and `crate::`/`super::`/`self::` paths)

mod bench;
mod chaos;
mod ci;
mod conformance;
mod cycles;

use std::process::ExitCode;

fn main() -> ExitCode {
    // The bench's embedded runtimes start stdio servers through this binary, as the CLI does.
    mcp_harness_runtime::transport::reaper::spawn_trampoline();
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    match task.as_deref() {
        Some("conformance") => conformance::main(&rest),
        Some("bench") => bench::main(&rest),
        Some("ci") => ci::main(&rest),
        Some("chaos") => chaos::main(&rest),
        Some("cycles") => cycles::main(&rest),
        // The two halves of a chaos run, started by `chaos` itself.
        Some("chaos-probe") => chaos::probe::main(&rest),
        Some("chaos-server") => chaos::raw::serve_stdio(&rest),
        // The bench's HTTP forwarder as a process of its own, started by `bench` itself.
        Some("bench-forwarder") => bench::floor::main(&rest),
        Some("-h" | "--help" | "help") | None => {
            eprintln!(
                "usage: cargo xtask <task> [args]\n\ntasks:\n  conformance   run the MCP conformance suite against our client (see `cargo xtask conformance --help`)\n  ci            install the peers, run every test and the conformance matrix (what .ci/run does)\n  bench         harness overhead vs a bare rmcp client, as same-run ratios (see `cargo xtask bench --help`)\n  chaos         the fault matrix: broken servers and signals, N runs each beside a healthy server (see `cargo xtask chaos --help`)\n  cycles        fail naming any module cycle inside a workspace crate"
            );
            if task.is_none() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        Some(other) => {
            eprintln!("xtask: unknown task `{other}` (try `cargo xtask --help`)");
            ExitCode::from(2)
        }
    }
}

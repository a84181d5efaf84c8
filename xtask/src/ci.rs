//! `cargo xtask ci`: the whole test run, exactly as CI does it (`.ci/run` calls this).
//!
//! Invariant: the steps run in order and the first failing step fails the run; nothing is
//! skipped silently — missing peers are installed, not ignored.
//! 1. install the real peers (`.ci/install-peers.sh`: Node 22, server-everything, the
//!    conformance suites, the Python SDK, D-Bus and GNOME Keyring for the keyring test),
//!    idempotently;
//! 2. `cargo nextest run --workspace` (unit, integration and CLI tests);
//! 3. no server process the tests started is still running (the suite checks its own process
//!    tree: fixture servers, the CLI's built-in fixture, server-everything, the keyring test's
//!    private D-Bus and keyring daemons);
//! 4. `cargo doc --workspace --no-deps` with warnings as errors (broken or private links in
//!    the doc comments that state the invariants);
//! 5. `cargo xtask conformance --all` (the official client conformance scenarios);
//! 6. `cargo xtask chaos --runs 2 --skip-known` (the fault matrix, small N, without the cases
//!    that fail on main until their issue-13 fixes land).

use std::process::{Command, ExitCode};

pub fn main(args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        eprintln!("usage: cargo xtask ci (no arguments; got `{a}`)");
        return ExitCode::from(2);
    }
    // (program, arguments, environment)
    type Step<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let steps: [Step; 5] = [
        ("bash", &[".ci/install-peers.sh", "target/peers"], &[]),
        (
            "cargo",
            &["nextest", "run", "--workspace", "--no-fail-fast"],
            &[],
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
        if i == 2 {
            // After the tests, before conformance: nothing the tests started may be left.
            if let Err(leftovers) = no_leftover_servers() {
                eprintln!("xtask ci: server processes outlived the tests:\n{leftovers}");
                return ExitCode::from(1);
            }
            eprintln!("== xtask ci: no server process outlived the tests");
        }
        eprintln!("== xtask ci: {program} {}", step_args.join(" "));
        let status = Command::new(program)
            .args(step_args)
            .envs(env.iter().copied())
            .status();
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

/// Command lines that mark a server process started by the tests.
const SERVER_MARKERS: [&str; 4] = [
    "mcp-fixture-server",
    "mcp-harness fixture-server",
    "server-everything/dist/index.js",
    // `dbus-daemon` and `gnome-keyring-daemon` of `transport/tests/oauth_keyring.rs`.
    "mcp-harness-keyring-test",
];

/// Fails with the offending command lines if any test server process is still alive (zombies
/// excepted: they are already dead). Waits up to 5 s for processes that are just exiting.
fn no_leftover_servers() -> Result<(), String> {
    let mut left = Vec::new();
    for _ in 0..50 {
        left = leftover_servers();
        if left.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(left.join("\n"))
}

fn leftover_servers() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("Z");
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if state != "Z" && SERVER_MARKERS.iter().any(|m| cmdline.contains(m)) {
            found.push(format!("  pid {pid}: {}", cmdline.trim()));
        }
    }
    found
}

//! `cli_*`: the `mcp-harness` command line end to end (release binary, one process per run),
//! against the release fixture (issue 17 points 1 and 7).
//!
//! - `cli_call_hung_sibling`: `mcp-harness call mcp__fx__echo` with a config that also holds a
//!   server hanging before initialize (startup timeout 600 s) vs the same call with that server
//!   removed from the config. A targeted command starts only its own server, so the goal is
//!   ≈1.00x (before, the hung sibling added its whole startup timeout);
//! - `cli_refused_remote`: a `call` naming a remote server whose port is closed, until the CLI
//!   has said so and exited (exit 3), vs the same CLI run with a config of no server (exit 5 at
//!   once): what a refused first connect adds to a command. Goal ≈1.00x (the first connect fails
//!   at once, no fast retries).
//!
//! Runs alternate sides (the order flips every pair); each run is bounded by [`RUN_LIMIT`] and
//! killed past it (the bench then fails: a figure from a killed run would mean nothing). Every
//! run gets a private HOME / XDG_CONFIG_HOME, so no user config or trust store is read.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::Metric;
use super::{Bench, target_dir};

/// One CLI run, start to exit.
const RUN_LIMIT: Duration = Duration::from_secs(60);
/// Runs per side and round.
const RUNS_PER_ROUND: usize = 5;

impl Bench {
    pub(super) async fn cli(&self) -> Result<Vec<Metric>, String> {
        let cli = target_dir().join("release").join("mcp-harness");
        if !cli.is_file() {
            return Err(format!(
                "no release CLI at {} (`cargo xtask bench --only cli` builds it)",
                cli.display()
            ));
        }
        let dir = std::env::temp_dir().join(format!("{}-cli", self.tag));
        std::fs::create_dir_all(dir.join("home")).map_err(|e| format!("temp dir: {e}"))?;
        let runs = self.options.rounds * RUNS_PER_ROUND;
        let fixture = self.fixture.display().to_string();
        let fx = serde_json::json!({"command": fixture, "args": ["--name", self.tag]});
        let hung = serde_json::json!({
            "command": fixture, "args": ["--hang-at-start", "--name", self.tag],
            "startupTimeoutSec": 600
        });
        let allow = serde_json::json!({"allow": ["mcp__fx__*"]});
        let with_hung = write(
            &dir,
            "with-hung.json",
            serde_json::json!({"mcpServers": {"fx": fx, "hung": hung}, "permissions": allow}),
        )?;
        let alone = write(
            &dir,
            "alone.json",
            serde_json::json!({"mcpServers": {"fx": fx}, "permissions": allow}),
        )?;
        let call = |config: &Path| {
            vec![
                "call".to_string(),
                "mcp__fx__echo".into(),
                r#"{"message": "bench"}"#.into(),
                "--config".into(),
                config.display().to_string(),
            ]
        };
        // Runs block (each waits for its process): off the async workers.
        let (h, b, pairs) = tokio::task::block_in_place(|| {
            alternate(&cli, &dir, runs, &call(&with_hung), &call(&alone), 0, 0)
        })?;
        let mut hung_metric = Metric::new(
            "cli_call_hung_sibling",
            "`mcp-harness call` of one stdio server's tool with a hung sibling configured vs with the sibling removed (goal 1.00x)",
            h,
            b,
        );
        hung_metric.pairs = Some(pairs);
        self.wait_reaped().await?;

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let refused = write(
            &dir,
            "refused.json",
            serde_json::json!({"mcpServers": {"r": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}}}),
        )?;
        let empty = write(&dir, "empty.json", serde_json::json!({"mcpServers": {}}))?;
        let remote = |config: &Path| {
            vec![
                "call".to_string(),
                "mcp__r__echo".into(),
                "--config".into(),
                config.display().to_string(),
            ]
        };
        let (h, b, pairs) = tokio::task::block_in_place(|| {
            alternate(&cli, &dir, runs, &remote(&refused), &remote(&empty), 3, 5)
        })?;
        let mut refused_metric = Metric::new(
            "cli_refused_remote",
            "`mcp-harness call` naming a remote server whose port is closed, until it fails (exit 3) vs the same run with no server configured (goal 1.00x)",
            h,
            b,
        );
        refused_metric.pairs = Some(pairs);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(vec![hung_metric, refused_metric])
    }
}

/// Each side's samples and the paired ratios, in seconds.
type Sides = (Vec<f64>, Vec<f64>, Vec<f64>);

/// `config` as the file `name` in `dir`; its path.
pub(super) fn write(dir: &Path, name: &str, config: serde_json::Value) -> Result<PathBuf, String> {
    let path = dir.join(name);
    std::fs::write(&path, config.to_string())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// `runs` runs of each side, alternating (the order flips every pair): the harness side's and
/// the baseline side's wall times and the paired ratios. Each side must exit with its expected
/// status (`harness_exit`, `baseline_exit`; 0 for a call that worked).
fn alternate(
    cli: &Path,
    dir: &Path,
    runs: usize,
    harness: &[String],
    baseline: &[String],
    harness_exit: i32,
    baseline_exit: i32,
) -> Result<Sides, String> {
    // One of each first, unmeasured: the page cache and the fixture's first start.
    timed(cli, dir, harness, harness_exit)?;
    timed(cli, dir, baseline, baseline_exit)?;
    let (mut h, mut b, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let (th, tb) = if i % 2 == 0 {
            let th = timed(cli, dir, harness, harness_exit)?;
            (th, timed(cli, dir, baseline, baseline_exit)?)
        } else {
            let tb = timed(cli, dir, baseline, baseline_exit)?;
            (timed(cli, dir, harness, harness_exit)?, tb)
        };
        h.push(th);
        b.push(tb);
        pairs.push(th / tb);
    }
    Ok((h, b, pairs))
}

/// One run of the CLI with `args`, in seconds; an error when it ran over [`RUN_LIMIT`] (then
/// stopped with SIGTERM, waited for at most [`RUN_LIMIT`] more) or exited with another status
/// than `expected`.
fn timed(cli: &Path, dir: &Path, args: &[String], expected: i32) -> Result<f64, String> {
    let started = Instant::now();
    let child = Command::new(cli)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("home"))
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let shown = || format!("`mcp-harness {}`", args.join(" "));
    let out = match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.map_err(|e| format!("wait: {e}"))?,
        Err(_) => {
            // SIGTERM: the CLI closes its servers before exiting.
            // SAFETY: signals only the CLI process this bench started.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            let _ = rx.recv_timeout(RUN_LIMIT);
            return Err(format!("{} ran over {RUN_LIMIT:?}", shown()));
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    if out.status.code() != Some(expected) {
        return Err(format!(
            "{} exited with {}, not {expected}: {}",
            shown(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(elapsed)
}

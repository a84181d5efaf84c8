//! Helpers shared by the CLI's integration tests: the binary, a private home per test, and a
//! run of the binary that never reads the developer's own config.
#![allow(dead_code)] // each test binary uses a different subset

pub(crate) mod gateway;

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-harness")
}

/// A fresh folder `mcp-harness-<prefix>-<tag>-…` with `home/` and `xdg/mcp-harness/` inside.
pub(crate) fn temp_home(prefix: &str, tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "mcp-harness-{prefix}-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(dir.join("home")).expect("home");
    std::fs::create_dir_all(dir.join("xdg/mcp-harness")).expect("xdg");
    dir
}

/// Runs the binary in `dir` with a private HOME / XDG_CONFIG_HOME and `env`:
/// (exit code, stdout, stderr).
pub(crate) fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run mcp-harness");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Live processes whose command line contains `marker` (zombies excluded).
pub(crate) fn pids_with(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or("Z");
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            state != "Z" && String::from_utf8_lossy(&cmd).contains(marker)
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

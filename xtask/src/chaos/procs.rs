//! What a chaos run left behind and how much memory it took, read from `/proc`.
//!
//! Invariant: only processes whose environment carries the run's tag ([`TAG_VAR`]`=<tag>`) are
//! ever counted or signalled — a process the run did not start (another test, the user's own
//! MCP servers) is never looked at twice, let alone killed. Zombies are dead and not counted.

use std::time::{Duration, Instant};

/// The environment variable every process of a run inherits (set on the harness process and
/// in each configured server's `env`).
pub(crate) const TAG_VAR: &str = "MCP_CHAOS_RUN";

/// Pids of the live (non-zombie) processes tagged with `tag`.
pub(crate) fn tagged(tag: &str) -> Vec<u32> {
    carrying(TAG_VAR, tag)
}

/// Pids of the live (non-zombie) processes, other than this one, whose environment holds
/// `var=value`. A process that cannot be read (another user's) cannot be ours either.
pub(crate) fn carrying(var: &str, value: &str) -> Vec<u32> {
    let needle = format!("{var}={value}");
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
        if pid == std::process::id() {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let tagged = environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes());
        if tagged && !is_zombie(pid) {
            found.push(pid);
        }
    }
    found
}

fn is_zombie(pid: u32) -> bool {
    let state = stat_fields(pid)
        .ok()
        .and_then(|fields| fields.into_iter().next())
        .unwrap_or_else(|| "Z".into());
    state == "Z" || state == "X"
}

/// The fields of `/proc/PID/stat` after the command's closing parenthesis (the command may hold
/// spaces and parentheses): the state first, then proc(5)'s fields 4 onwards.
pub(crate) fn stat_fields(pid: u32) -> Result<Vec<String>, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    let (_, rest) = stat
        .rsplit_once(')')
        .ok_or_else(|| format!("/proc/{pid}/stat: no command field"))?;
    Ok(rest.split_whitespace().map(String::from).collect())
}

/// The command line of `pid`, for reports.
pub(crate) fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .to_owned()
}

/// Waits up to `grace` for the tagged processes to go (they may be just exiting), then kills
/// whatever is left (SIGKILL, by pid) and returns what was left, as `pid: cmdline`.
pub(crate) fn reap_leftovers(tag: &str, grace: Duration) -> Vec<String> {
    let start = Instant::now();
    let mut left = tagged(tag);
    while !left.is_empty() && start.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(50));
        left = tagged(tag);
    }
    let described: Vec<String> = left
        .iter()
        .map(|pid| format!("{pid}: {}", cmdline(*pid)))
        .collect();
    kill_all(tag);
    described
}

/// SIGKILLs every process tagged `tag`, a bounded number of rounds (a killed process may have
/// forked meanwhile).
pub(crate) fn kill_all(tag: &str) {
    for _ in 0..5 {
        let left = tagged(tag);
        if left.is_empty() {
            return;
        }
        for pid in left {
            signal(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `sig` to `pid`.
pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) with a pid we started (or found tagged with our run's tag).
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Peak resident set size of `pid` in KiB (`VmHWM`), if it is still readable.
pub(crate) fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix("VmHWM:")
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    })
}

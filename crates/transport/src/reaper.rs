//! Keeping server processes from outliving the harness when the harness itself is killed, and
//! catching descendants that left their server's process group.
//!
//! Invariants:
//! - every stdio server is forked by one thread that lives as long as the process
//!   (`spawn_lasting`), and gets `PR_SET_PDEATHSIG = SIGKILL` before exec (Linux): the kernel
//!   sends that signal when the *forking thread* ends, so forking on a pool thread that may
//!   retire (tokio's blocking pool, a worker left by `block_in_place`) would kill a healthy
//!   server; with one lasting thread the server dies exactly when the harness process does,
//!   SIGKILL of the harness included;
//! - every stdio server carries [`OWNER_ENV`] = the harness's pid, which its descendants
//!   inherit; when the harness is a child subreaper ([`become_subreaper`]), a descendant that
//!   left the server's process group (`setsid`) is reparented to the harness once its parent
//!   dies, and [`sweep_orphans`] kills and reaps exactly those children of the harness that
//!   carry this harness's tag — never a child the embedder started itself, and never a
//!   process of a server group that is still live (another `Runtime` in the same process).
//!   A tagged orphan that already exited by itself cannot be told apart (a zombie's environment
//!   is unreadable); it stays a zombie until the harness process exits.

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// Set in every stdio server's environment to the harness's pid (inherited by its descendants),
/// so that [`sweep_orphans`] knows which reparented processes are the servers'.
pub const OWNER_ENV: &str = "MCP_HARNESS_OWNER_PID";

/// Process groups of the stdio servers alive right now, in this process.
static LIVE_GROUPS: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// Notes a live server process group (its leader's pid), so [`sweep_orphans`] leaves it alone.
pub(crate) fn register_group(pgid: i32) {
    if let Ok(mut groups) = LIVE_GROUPS.lock() {
        groups.get_or_insert_with(HashSet::new).insert(pgid);
    }
}

/// Forgets a server process group whose leader was reaped.
pub(crate) fn unregister_group(pgid: i32) {
    if let Ok(mut groups) = LIVE_GROUPS.lock()
        && let Some(groups) = groups.as_mut()
    {
        groups.remove(&pgid);
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `spawn` on the process-lifetime spawner thread and returns what it returned.
///
/// The spawner thread is started on first use and never ends; it only forks (each job is a
/// `Command::spawn`), so it is never busy for long.
pub(crate) async fn spawn_lasting<T, F>(spawn: F) -> std::io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
{
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("mcp-harness-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(spawner) = spawner else {
        return Err(std::io::Error::other(
            "the harness could not start its process-spawning thread",
        ));
    };
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(spawn());
    });
    spawner
        .send(job)
        .map_err(|_| std::io::Error::other("the process-spawning thread is gone"))?;
    result
        .await
        .map_err(|_| std::io::Error::other("the process-spawning thread dropped a spawn"))?
}

/// Asks the kernel to SIGKILL the child when the thread that forked it ends, and closes the race
/// where the harness died between fork and this call. Installed as a `pre_exec` hook: it runs in
/// the forked child and only makes async-signal-safe calls.
pub(crate) fn die_with_parent(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec and calls only prctl, getppid and
        // raise, which are async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::raise(libc::SIGKILL);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Makes this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): orphaned descendants
/// of its children are reparented to it instead of to init, where [`sweep_orphans`] finds them.
/// Process-wide; the CLI sets it at start, an embedder opts in with
/// `RuntimeBuilder::child_subreaper`.
pub fn become_subreaper() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(std::io::Error::other(
        "child subreapers exist only on Linux",
    ))
}

/// Whether this process is a child subreaper.
pub(crate) fn is_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        let mut flag: libc::c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes one int to the pointer given.
        let rc = unsafe {
            libc::prctl(
                libc::PR_GET_CHILD_SUBREAPER,
                &mut flag as *mut libc::c_int as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        rc == 0 && flag != 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Kills (SIGKILL) and reaps every live child of this process that carries this harness's
/// [`OWNER_ENV`] tag — the servers' descendants reparented to a subreaper harness — until none
/// is left (their own children are reparented in turn), at most `rounds` passes. Returns how
/// many were killed. Does nothing unless this process is a subreaper.
///
/// Only pids it killed itself are reaped (`waitpid` on each), so the exit status of a child
/// someone else waits for (tokio's own children) is never taken.
pub fn sweep_orphans(rounds: usize) -> usize {
    if !is_subreaper() {
        return 0;
    }
    let me = std::process::id();
    let tag = format!("{OWNER_ENV}={me}");
    let mut killed = 0;
    for _ in 0..rounds {
        let live = LIVE_GROUPS
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default();
        let orphans = tagged_children(me, &tag, &live);
        if orphans.is_empty() {
            break;
        }
        for pid in orphans {
            // SAFETY: kill and waitpid on a pid that is our own child; a pid that already
            // exited is our zombie until reaped here, so it cannot have been reused.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
            tracing::debug!(
                pid,
                "killed a server's descendant that left its process group"
            );
            killed += 1;
        }
    }
    killed
}

/// Live children of `me` whose environment holds `tag`, outside the `live` server groups.
fn tagged_children(me: u32, tag: &str, live: &HashSet<i32>) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so split after
        // the last `)`.
        let mut after = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = after.next();
        let ppid = after.next().and_then(|p| p.parse::<u32>().ok());
        let pgid = after
            .next()
            .and_then(|p| p.parse::<i32>().ok())
            .unwrap_or(0);
        if ppid != Some(me) || state == Some("Z") || live.contains(&pid) || live.contains(&pgid) {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == tag.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

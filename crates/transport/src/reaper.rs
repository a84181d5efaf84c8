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
//! - the signal is set either by a `pre_exec` hook (which makes the standard library fork the
//!   whole harness, ~5 ms each for a large process, one at a time) or, in a binary that calls
//!   [`spawn_trampoline`] first thing in `main`, by that binary itself started as a trampoline
//!   (`posix_spawn`, no copy of the harness): it sets the signal, checks its parent is still
//!   the harness, and execs the server in its place — same pid, group, environment, stdio;
//! - every stdio server carries [`OWNER_ENV`] = the harness's pid, which its descendants
//!   inherit; when the harness is a child subreaper ([`become_subreaper`]), a descendant that
//!   left the server's process group (`setsid`) is reparented to the harness once its parent
//!   dies, and [`sweep_orphans`] kills and reaps exactly those children of the harness that
//!   carry this harness's tag — never a child the embedder started itself, and never a
//!   process of a server group that is still live (another `Runtime` in the same process).
//!   A tagged orphan that already exited by itself cannot be told apart (a zombie's environment
//!   is unreadable); it stays a zombie until the harness process exits;
//! - a descendant that stayed in its server's process group dies with the group, but if its
//!   parent died first it was reparented to a subreaper harness and is left a zombie of it:
//!   [`reap_group_zombies`] reaps exactly the zombie children whose group is a server group this
//!   process registered (live or recently retired) and which are not its leader (the leader is
//!   the one child tokio waits for), so a long-running gateway does not fill the process table
//!   one reload at a time;
//! - a SIGKILLed harness runs none of this: where servers start through the trampoline, a
//!   watchdog process (`reaper/watchdog.rs`) kills their groups and tagged descendants once
//!   the harness is gone.

mod watchdog;

pub(crate) use watchdog::{guard as watchdog_guard, release as watchdog_release};

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Forgets a server process group whose leader was reaped (or is being killed); the group is
/// kept among the retired ones, whose left-behind zombies [`reap_group_zombies`] still reaps.
pub(crate) fn unregister_group(pgid: i32) {
    if let Ok(mut groups) = LIVE_GROUPS.lock()
        && let Some(groups) = groups.as_mut()
    {
        groups.remove(&pgid);
    }
    if let Ok(mut retired) = RETIRED_GROUPS.lock()
        && !retired.contains(&pgid)
    {
        if retired.len() == RETIRED_KEPT {
            retired.pop_front();
        }
        retired.push_back(pgid);
    }
}

/// Server process groups whose leader is gone, most recent last, at most [`RETIRED_KEPT`].
static RETIRED_GROUPS: Mutex<std::collections::VecDeque<i32>> =
    Mutex::new(std::collections::VecDeque::new());

/// How many retired groups are remembered (a grandchild outlives its group's end by seconds at
/// most: it was killed with it).
const RETIRED_KEPT: usize = 256;

/// Reaps, a few times over the next seconds, the zombies a server group just ended leaves
/// behind (see [`reap_group_zombies`]); nothing unless this process is a subreaper.
pub(crate) fn reap_group_zombies_soon() {
    if !is_subreaper() {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async {
        for wait in [100, 1_000, 5_000] {
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            let _ = tokio::task::spawn_blocking(reap_group_zombies).await;
        }
    });
}

/// Reaps the zombie children of this process that a server process group left behind: a
/// zombie whose group is a server group registered here (live or retired), which is not that
/// group's leader, and not of this process's own group. Returns how many it reaped; nothing
/// unless this process is a subreaper.
pub fn reap_group_zombies() -> usize {
    if !is_subreaper() {
        return 0;
    }
    let mut groups: HashSet<i32> = LIVE_GROUPS
        .lock()
        .ok()
        .and_then(|g| g.clone())
        .unwrap_or_default();
    if let Ok(retired) = RETIRED_GROUPS.lock() {
        groups.extend(retired.iter().copied());
    }
    // SAFETY: getpgrp has no preconditions.
    let own = unsafe { libc::getpgrp() };
    groups.remove(&own);
    let me = std::process::id();
    let mut reaped = 0;
    for (pid, ppid, state, pgid) in all_processes() {
        if ppid != me || state != "Z" || pid == pgid || !groups.contains(&pgid) {
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid without blocking on a zombie child of ours that nobody else waits
        // for (tokio waits only for the leaders, excluded above).
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            reaped += 1;
        }
    }
    if reaped > 0 {
        tracing::debug!(reaped, "reaped server descendants left as zombies");
    }
    reaped
}

/// Every process of `/proc` as (pid, ppid, state, pgid), not only this one's children.
fn all_processes() -> Vec<(libc::pid_t, u32, String, i32)> {
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
        // `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses, so split
        // after the last `)`.
        let mut after = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = after.next().unwrap_or_default().to_string();
        let ppid = after
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0);
        let pgid = after
            .next()
            .and_then(|p| p.parse::<i32>().ok())
            .unwrap_or(0);
        found.push((pid, ppid, state, pgid));
    }
    found
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

/// The first argument that makes a binary calling [`spawn_trampoline`] the trampoline.
const TRAMPOLINE_ARG: &str = "__mcp-harness-spawn-trampoline";

/// This binary calls [`spawn_trampoline`] first thing in `main`: stdio servers start through it.
static TRAMPOLINE: AtomicBool = AtomicBool::new(false);

/// Call first thing in `main`, before any thread starts: stdio servers are then started through
/// this binary (`/proc/self/exe`) as a trampoline — `posix_spawn`ed, it sets the death signal
/// and execs the server — instead of by forking the whole process, which costs a few
/// milliseconds per server in a large process, one server at a time; and a watchdog process
/// kills the servers' whole groups if this process is SIGKILLed. When this process *is* such a
/// trampoline or watchdog, this never returns. Nothing on other systems than Linux.
pub fn spawn_trampoline() {
    #[cfg(target_os = "linux")]
    {
        let mut args = std::env::args_os();
        match args.nth(1) {
            Some(a) if a == TRAMPOLINE_ARG => std::process::exit(run_trampoline(args)),
            Some(a) if a == watchdog::WATCHDOG_ARG => std::process::exit(watchdog::run(args)),
            _ => {}
        }
        TRAMPOLINE.store(self_exe_is_this_program(), Ordering::Relaxed);
    }
}

/// Whether `/proc/self/exe` runs this program. Without /proc (some sandboxes) there is no path
/// to it; under valgrind or qemu-user it is the tool's binary while `readlink` (which the tool
/// answers) names this program: both the same file, or stdio servers are forked as without a
/// trampoline (a trampoline through the tool's binary starts no server at all).
#[cfg(target_os = "linux")]
fn self_exe_is_this_program() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let kernel = std::fs::metadata("/proc/self/exe");
    let named = std::env::current_exe().and_then(std::fs::metadata);
    match (kernel, named) {
        (Ok(kernel), Ok(named)) => kernel.dev() == named.dev() && kernel.ino() == named.ino(),
        _ => false,
    }
}

/// The trampoline's work: `<harness pid> <program> [args…]`. Returns only when it failed (the
/// exit code then: 127, as a shell's for a command it could not run).
#[cfg(target_os = "linux")]
fn run_trampoline(mut args: impl Iterator<Item = std::ffi::OsString>) -> i32 {
    use std::os::unix::process::CommandExt as _;
    let parent = args
        .next()
        .and_then(|p| p.to_str()?.parse::<libc::pid_t>().ok());
    let (Some(parent), Some(program)) = (parent, args.next()) else {
        eprintln!("mcp-harness: the spawn trampoline was started without its arguments");
        return 127;
    };
    // SAFETY: prctl sets a flag of this process; getppid reads its parent's pid.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            let error = std::io::Error::last_os_error();
            eprintln!("mcp-harness: cannot set the server's death signal: {error}");
            return 127;
        }
        // The harness died before the signal was set: start no server it cannot stop.
        if libc::getppid() != parent {
            return 137;
        }
    }
    let error = std::process::Command::new(&program).args(args).exec();
    eprintln!(
        "mcp-harness: cannot run `{}`: {error}",
        program.to_string_lossy()
    );
    127
}

/// The command that starts `program` with `args` so that it dies with the harness: through
/// the trampoline when this binary has one ([`spawn_trampoline`]), else `program` itself with
/// a `pre_exec` hook ([`die_with_parent`]). With the trampoline, `program` is looked up on the
/// server's `PATH` (`path`) here first, so a missing or non-executable program fails the spawn
/// as it would without it, instead of as an early exit.
pub(crate) fn server_command(
    program: &str,
    args: &[String],
    path: Option<&std::ffi::OsStr>,
    cwd: Option<&std::path::Path>,
) -> std::io::Result<tokio::process::Command> {
    if TRAMPOLINE.load(Ordering::Relaxed) {
        executable(program, path, cwd)?;
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg(TRAMPOLINE_ARG)
            .arg(std::process::id().to_string())
            .arg(program)
            .args(args);
        return Ok(cmd);
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    die_with_parent(&mut cmd);
    Ok(cmd)
}

/// Checks that `program` names an executable file, as `execvp` would find it: a name with a
/// slash as it is (relative to `cwd`), any other on `path`. The error is the one the spawn
/// would have given (not found, permission denied).
fn executable(
    program: &str,
    path: Option<&std::ffi::OsStr>,
    cwd: Option<&std::path::Path>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let runnable = |file: &std::path::Path| -> std::io::Result<()> {
        let meta = std::fs::metadata(file)?;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EACCES))
        }
    };
    if program.contains('/') {
        let file = match cwd {
            Some(dir) => dir.join(program),
            None => std::path::PathBuf::from(program),
        };
        return runnable(&file);
    }
    let mut denied = None;
    // No PATH at all: `execvp` searches its default.
    for dir in std::env::split_paths(path.unwrap_or("/bin:/usr/bin".as_ref())) {
        let dir = match (dir.is_relative(), cwd) {
            (true, Some(cwd)) => cwd.join(dir),
            _ => dir,
        };
        match runnable(&dir.join(program)) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied = Some(e),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT)))
}

/// Asks the kernel to SIGKILL the child when the thread that forked it ends, and closes the race
/// where the harness died between fork and this call. Installed as a `pre_exec` hook: it runs in
/// the forked child and only makes async-signal-safe calls.
fn die_with_parent(cmd: &mut tokio::process::Command) {
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
    all_processes()
        .into_iter()
        .filter(|(pid, ppid, state, pgid)| {
            *ppid == me && state != "Z" && !live.contains(pid) && !live.contains(pgid)
        })
        .filter(|(pid, ..)| carries(*pid, tag))
        .map(|(pid, ..)| pid)
        .collect()
}

/// Whether process `pid`'s environment holds `tag` (`NAME=value`); false when unreadable.
fn carries(pid: libc::pid_t, tag: &str) -> bool {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    environ.split(|&b| b == 0).any(|v| v == tag.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A directory of its own under the system's temp dir, removed at the end.
    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("reaper-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(path.join("bin")).expect("create the test dir");
        Dir(path)
    }

    fn file(path: &std::path::Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// Run natively, `/proc/self/exe` is this test binary, so the trampoline is used; under
    /// valgrind it is not (`xtask bench --only instructions` counts `serve` with a stdio server
    /// there, which starts only by the fork path).
    #[test]
    fn a_native_process_runs_itself_through_proc_self_exe() {
        let running_under_a_tool = std::env::var_os("LD_PRELOAD")
            .is_some_and(|p| p.to_string_lossy().contains("valgrind"));
        assert_eq!(self_exe_is_this_program(), !running_under_a_tool);
    }

    /// The trampoline's look-up fails a spawn as `execvp` would: not found, or permission
    /// denied when only a non-executable file of that name exists; a name with a slash is taken
    /// as it is (relative to the server's `cwd`), any other is searched on the server's `PATH`.
    #[test]
    fn the_trampolines_look_up_fails_as_the_spawn_would() {
        let d = dir("lookup");
        let bin = d.0.join("bin");
        file(&bin.join("server"), 0o755);
        file(&bin.join("plain"), 0o644);
        let path = std::env::join_paths([d.0.join("empty"), bin.clone()]).expect("PATH");
        let kind =
            |program: &str, path: Option<&std::ffi::OsStr>, cwd: Option<&std::path::Path>| {
                executable(program, path, cwd).map_err(|e| e.kind())
            };
        use std::io::ErrorKind::{NotFound, PermissionDenied};
        assert_eq!(kind("server", Some(&path), None), Ok(()));
        assert_eq!(kind("missing", Some(&path), None), Err(NotFound));
        assert_eq!(kind("plain", Some(&path), None), Err(PermissionDenied));
        assert_eq!(kind("sh", None, None), Ok(()), "no PATH: execvp's default");
        assert_eq!(
            kind("server", None, None),
            Err(NotFound),
            "not on the default"
        );
        assert_eq!(kind("bin/server", None, Some(&d.0)), Ok(()));
        assert_eq!(kind("./bin/plain", None, Some(&d.0)), Err(PermissionDenied));
        assert_eq!(kind("bin/server", None, Some(&bin)), Err(NotFound));
        let absolute = bin.join("server");
        assert_eq!(kind(absolute.to_str().expect("utf-8"), None, None), Ok(()));
        // A relative PATH entry is taken relative to the server's working directory.
        assert_eq!(kind("server", Some("bin".as_ref()), Some(&d.0)), Ok(()));
        assert_eq!(
            kind("bin", Some(d.0.as_os_str()), None),
            Err(PermissionDenied)
        );
    }
}

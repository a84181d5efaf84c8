//! The watchdog: one small process per harness that kills what its stdio servers left running
//! when the harness dies — SIGKILL and the OOM killer included, where nothing in the harness
//! runs. A server dies with the harness by its death signal (see [`super`]), but that reaches
//! only the process the harness started; the real server behind `npx`, `uvx` or `sh -c` is that
//! process's child and would live on.
//!
//! Invariants:
//! - it exists only where stdio servers start through the trampoline (a binary that calls
//!   [`super::spawn_trampoline`]): it is that binary started with [`WATCHDOG_ARG`], spawned on
//!   the first server group and again (at most [`MAX_STARTS`] times in all, said once when
//!   that is spent) if it dies while server groups are still running;
//! - the harness tells it each server process group it starts (`+pgid`) and each it has killed
//!   (`-pgid`) over a pipe whose write end only the harness holds (close-on-exec), so the pipe's
//!   end is the harness's end, however it came; then, and only then, the watchdog SIGKILLs every
//!   group still listed and every process carrying this harness's [`super::OWNER_ENV`] tag (the
//!   descendants that left their group with `setsid`), and exits;
//! - it is in a process group of its own, ignores SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGPIPE
//!   (a Ctrl-C or a `pkill mcp-harness` ends the harness, which ends the watchdog), and does not
//!   carry an owner tag itself, so a harness above this one (this harness as its stdio server)
//!   does not kill it before it has done its work;
//! - the harness never blocks on it: the pipe is non-blocking and a message that does not fit
//!   is dropped with a warning (the tag sweep still finds those processes).

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::Mutex;

/// The first argument that makes a binary calling [`super::spawn_trampoline`] the watchdog.
pub(super) const WATCHDOG_ARG: &str = "__mcp-harness-watchdog";

/// How many watchdogs one harness process starts at most (the first, then after deaths).
const MAX_STARTS: u32 = 4;

/// How many passes the watchdog makes over `/proc` for tagged processes (each may have forked
/// before it was killed).
const SWEEP_ROUNDS: usize = 5;

/// The harness's side: its watchdog and the groups it was told about.
#[derive(Default)]
struct Link {
    watchdog: Option<(std::process::Child, std::process::ChildStdin)>,
    groups: HashSet<i32>,
    starts: u32,
    warned: bool,
}

static LINK: Mutex<Option<Link>> = Mutex::new(None);

/// Tells the watchdog about a server process group just started (starting the watchdog first
/// if there is none). Nothing unless servers start through the trampoline.
pub(crate) fn guard(pgid: i32) {
    if pgid <= 0 || !super::TRAMPOLINE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let Ok(mut link) = LINK.lock() else { return };
    let link = link.get_or_insert_with(Link::default);
    if link.groups.insert(pgid) {
        link.send(&format!("+{pgid}\n"));
    }
}

/// Tells the watchdog a server process group was killed (it is not its concern any more).
pub(crate) fn release(pgid: i32) {
    let Ok(mut link) = LINK.lock() else { return };
    if let Some(link) = link.as_mut()
        && link.groups.remove(&pgid)
    {
        link.send(&format!("-{pgid}\n"));
    }
}

impl Link {
    /// Sends one message, starting a watchdog (told every group listed) when there is none or
    /// the last one died.
    fn send(&mut self, message: &str) {
        if let Some((child, pipe)) = self.watchdog.as_mut() {
            match pipe.write(message.as_bytes()) {
                Ok(n) if n == message.len() => return,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.warn_once("the watchdog process is not reading");
                    return;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.watchdog = None;
                    if self.groups.is_empty() {
                        // Nothing left to guard (the last server stopped): no new one.
                        return;
                    }
                    if self.starts < MAX_STARTS {
                        tracing::warn!("the watchdog process ended; starting another");
                    }
                }
            }
        }
        if self.starts >= MAX_STARTS {
            self.warn_once(&format!(
                "the watchdog process was started {MAX_STARTS} times"
            ));
            return;
        }
        self.starts += 1;
        match start() {
            Ok((mut child, mut pipe)) => {
                // Every group listed, then non-blocking: the harness never waits on it.
                let all: String = self.groups.iter().map(|g| format!("+{g}\n")).collect();
                match pipe
                    .write_all(all.as_bytes())
                    .and_then(|()| nonblocking(&pipe))
                {
                    Ok(()) => {
                        tracing::debug!(pid = child.id(), "started the watchdog process");
                        self.watchdog = Some((child, pipe));
                    }
                    Err(error) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        self.warn_once(&format!("cannot talk to the watchdog process: {error}"));
                    }
                }
            }
            Err(error) => {
                self.warn_once(&format!("cannot start the watchdog process: {error}"));
            }
        }
    }

    fn warn_once(&mut self, what: &str) {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                "{what}: if the harness is killed (SIGKILL), the children of its stdio servers \
                 (the server behind `npx`, `uvx`, `sh -c`) may outlive it"
            );
        }
    }
}

/// Starts the watchdog: this binary again, in a group of its own, without the owner tag.
fn start() -> std::io::Result<(std::process::Child, std::process::ChildStdin)> {
    use std::os::unix::process::CommandExt as _;
    let mut child = std::process::Command::new("/proc/self/exe")
        .arg0("mcp-harness")
        .arg(WATCHDOG_ARG)
        .arg(std::process::id().to_string())
        .env_remove(super::OWNER_ENV)
        .current_dir("/")
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pipe = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the watchdog has no stdin"))?;
    Ok((child, pipe))
}

fn nonblocking(pipe: &std::process::ChildStdin) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let fd = pipe.as_raw_fd();
    // SAFETY: fcntl reads and sets the flags of a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The watchdog's work: `<harness pid>`, the groups on stdin until it ends. Returns its exit
/// code.
pub(super) fn run(mut args: impl Iterator<Item = std::ffi::OsString>) -> i32 {
    use std::io::BufRead as _;
    let Some(owner) = args
        .next()
        .and_then(|p| p.to_str()?.parse::<libc::pid_t>().ok())
    else {
        eprintln!("mcp-harness: the watchdog was started without the harness's pid");
        return 2;
    };
    // SAFETY: setting signal dispositions to "ignore" in this single-threaded process.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut groups = HashSet::new();
    for line in std::io::stdin().lock().split(b'\n') {
        let Ok(line) = line else { break };
        let Some((&sign, pgid)) = line.split_first() else {
            continue;
        };
        let Some(pgid) = std::str::from_utf8(pgid)
            .ok()
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        match sign {
            b'+' => groups.insert(pgid),
            b'-' => groups.remove(&pgid),
            _ => false,
        };
    }
    // The harness is gone (or exited with these groups still listed).
    for pgid in groups {
        // SAFETY: killpg only sends a signal; a group that no longer exists yields ESRCH.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    let tag = format!("{}={owner}", super::OWNER_ENV);
    let me = std::process::id() as libc::pid_t;
    for _ in 0..SWEEP_ROUNDS {
        let killed = super::all_processes()
            .into_iter()
            .filter(|(pid, _, state, _)| *pid != me && state != "Z")
            .filter(|(pid, ..)| kill_if_tagged(*pid, &tag))
            .count();
        if killed == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    0
}

/// SIGKILLs process `pid` if its environment holds `tag`; whether it did. These processes are
/// not the watchdog's children, so the pid could be reused between the look and the kill: the
/// process is pinned first (`pidfd_open`), then looked at, then signalled through the pin (a
/// pid reused before the pin shows another environment; a process gone after it is not
/// signalled). Without pidfds (Linux before 5.3) the look and the kill are by pid.
fn kill_if_tagged(pid: libc::pid_t, tag: &str) -> bool {
    // SAFETY: pidfd_open returns a new descriptor (closed below) or -1.
    let pinned = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    let tagged = super::carries(pid, tag);
    // SAFETY: a signal sent through our own pidfd (then closed), or by pid when there is none.
    unsafe {
        if tagged && pinned >= 0 {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pinned,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        } else if tagged {
            libc::kill(pid, libc::SIGKILL);
        }
        if pinned >= 0 {
            libc::close(pinned);
        }
    }
    tagged
}

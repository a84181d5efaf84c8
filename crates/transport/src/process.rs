//! The process group of a stdio server, owned by the harness: the session holds it, and its
//! drop kills the whole group.
//!
//! Invariants: a group is registered with [`crate::reaper`] while its leader runs and
//! unregistered once it is reaped or killed, so the reaper's sweep never signals a group that
//! is not ours; the watchdog is told of it from its start until the group is killed (its
//! members may outlive the leader), so it dies with a SIGKILLed harness.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::sync::watch;

use futures::future::BoxFuture;

/// A child process group owned by the harness. Dropping it kills the whole group.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: i32,
    status: watch::Receiver<Option<ExitStatus>>,
}

impl ProcessGroup {
    /// Takes ownership of `child` (spawned as a group leader) and reaps it in the background.
    pub(crate) fn watch(mut child: tokio::process::Child) -> Self {
        let pgid = child.id().map(|id| id as i32).unwrap_or(0);
        crate::reaper::register_group(pgid);
        crate::reaper::watchdog_guard(pgid);
        let (tx, status) = watch::channel(None);
        tokio::spawn(async move {
            let waited = child.wait().await;
            crate::reaper::unregister_group(pgid);
            // What stayed in the group and outlived its parent is a zombie of a subreaper.
            crate::reaper::reap_group_zombies_soon();
            if let Ok(s) = waited {
                let _ = tx.send(Some(s));
            }
        });
        Self { pgid, status }
    }

    /// The group's id (the leader's pid), for logs.
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The leader's exit status as it becomes known (`None` while it runs).
    pub(crate) fn status_watch(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.status.clone()
    }

    /// The leader's exit status if it exits within `within`.
    pub(crate) fn exit_status_within(
        &self,
        within: Duration,
    ) -> Option<BoxFuture<'static, Option<ExitStatus>>> {
        let mut rx = self.status.clone();
        Some(Box::pin(async move {
            let waited = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
            match waited {
                Ok(Ok(s)) => *s,
                _ => None,
            }
        }))
    }

    /// SIGTERM to the group, then SIGKILL to whatever is left after `grace`.
    pub(crate) async fn terminate(&self, grace: Duration) {
        if self.pgid <= 0 {
            return;
        }
        signal_group(self.pgid, libc::SIGTERM);
        let mut rx = self.status.clone();
        let _ = tokio::time::timeout(grace, rx.wait_for(Option::is_some)).await;
        signal_group(self.pgid, libc::SIGKILL);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.pgid > 0 {
            signal_group(self.pgid, libc::SIGKILL);
            crate::reaper::unregister_group(self.pgid);
            crate::reaper::watchdog_release(self.pgid);
        }
    }
}

fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: killpg only sends a signal; a group that no longer exists yields ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

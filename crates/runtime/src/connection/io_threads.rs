//! Where the servers' connections run: process spawn, initialize, the first listings and each
//! session's message loop.
//!
//! Three places, one per [`IoPlace`] variant:
//! - the harness's pinned threads ([`IoThreads::Pinned`], the default, two threads): each
//!   thread drives a single-threaded runtime and every connection attempt is placed on one of
//!   them, round-robin; a call's request and answer then wake exactly one I/O thread, never an
//!   idle sibling worker (which, on a small machine, costs more than the message);
//! - the harness's own work-stealing runtime ([`IoThreads::WorkStealing`]): any worker may pick
//!   up any connection's work;
//! - the embedder's own multi-threaded runtime (`RuntimeBuilder::io_runtime`).
//!
//! A queued connection attempt starts on the thread that freed its slot
//! (`supervision::ConnectQueues`), so starting many servers hands slots on without waking a
//! thread per server; that is what lets the pinned threads start 100 servers as fast as the
//! work-stealing runtime does (`cargo xtask bench`).
//!
//! Invariants: a connection attempt and the session it makes stay on the runtime the attempt
//! was placed on (tokio never moves a task), a reconnect is placed anew; the pinned threads
//! are owned by the actor thread and stopped and joined when it ends, after the actors — so
//! every task still on them (sessions, stderr drains, process reapers) is dropped, and with
//! it every stdio process group, before `Runtime::shutdown` or the `Runtime`'s drop returns.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle as TaskHandle;

/// Threads the harness starts for its servers' connections when the embedder gives it no
/// runtime of its own (`RuntimeBuilder::io_threads`; default `Pinned(2)`). `cargo xtask bench`
/// measures both kinds with two threads: `echo_per_call` vs. `echo_per_call_work_stealing`,
/// `cold_start_100` vs. `cold_start_100_work_stealing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoThreads {
    /// This many threads, each with a single-threaded runtime; every connection attempt is
    /// placed on one of them, round-robin. The embedder's callbacks run elsewhere (the actor
    /// system's two workers), so one that blocks stalls no connection.
    Pinned(usize),
    /// One work-stealing runtime with this many workers.
    WorkStealing(usize),
}

impl Default for IoThreads {
    fn default() -> Self {
        Self::Pinned(2)
    }
}

impl IoThreads {
    /// How many threads this asks for.
    pub fn count(self) -> usize {
        match self {
            Self::WorkStealing(n) | Self::Pinned(n) => n,
        }
    }
}

/// Where connection attempts are spawned.
#[derive(Clone)]
pub(crate) enum IoPlace {
    /// The actor system's own work-stealing runtime (`tokio::spawn` from an actor).
    Shared,
    /// One of the harness's pinned threads, chosen per attempt.
    Pinned(PinnedHandles),
    /// The embedder's multi-threaded runtime.
    Embedder(Handle),
}

impl IoPlace {
    /// Spawns a connection attempt where this place says. Called from an actor (the
    /// [`IoPlace::Shared`] case relies on the actor thread's runtime context).
    pub(crate) fn spawn<F>(&self, future: F) -> TaskHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Self::Shared => tokio::spawn(future),
            Self::Pinned(threads) => threads.next().spawn(future),
            Self::Embedder(handle) => handle.spawn(future),
        }
    }

    /// Spawns `future` on the current thread's runtime when that is this place (a task of
    /// this place is running here: it lands in this thread's own queue and runs without
    /// waking any other thread); elsewhere as [`Self::spawn`] would.
    pub(crate) fn spawn_here<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let here = Handle::try_current().ok().filter(|_| match self {
            Self::Pinned(_) => ON_PINNED_THREAD.get(),
            Self::Shared => true,
            // A handle schedules on its own worker's queue when called from one.
            Self::Embedder(_) => false,
        });
        match here {
            Some(handle) => drop(handle.spawn(future)),
            None => drop(self.spawn(future)),
        }
    }
}

thread_local! {
    /// Whether this thread is one of a harness's pinned I/O threads (its runtime is the
    /// current one while it runs).
    static ON_PINNED_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The handles of the pinned threads' runtimes and the round-robin cursor. Holding them does
/// not keep the threads alive: a spawn after they stopped is dropped at once (its join handle
/// reports it cancelled).
#[derive(Clone)]
pub(crate) struct PinnedHandles {
    handles: Arc<[Handle]>,
    next: Arc<AtomicUsize>,
}

impl PinnedHandles {
    fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}

/// The pinned threads themselves; dropping this stops every runtime and joins its thread.
pub(crate) struct PinnedThreads {
    threads: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl PinnedThreads {
    /// Starts `count` threads (at least one), each driving a single-threaded runtime.
    pub(crate) fn start(count: usize) -> std::io::Result<(Self, PinnedHandles)> {
        let mut handles = Vec::new();
        // Built up as we go, so a failure part-way stops the threads already started.
        let mut started = Self {
            threads: Vec::new(),
        };
        for i in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("mcp-harness-io{i}"))
                .spawn(move || {
                    ON_PINNED_THREAD.set(true);
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                    // Dropping the runtime drops every task still on it.
                    drop(runtime);
                })?;
            started.threads.push((stop, thread));
        }
        let handles = PinnedHandles {
            handles: handles.into(),
            next: Arc::new(AtomicUsize::new(0)),
        };
        Ok((started, handles))
    }
}

impl Drop for PinnedThreads {
    fn drop(&mut self) {
        for (stop, _) in &mut self.threads {
            // Ask every thread first, so they wind down together.
            let (replacement, _) = oneshot::channel();
            let _ = std::mem::replace(stop, replacement).send(());
        }
        for (_, thread) in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name_on(place: &IoPlace, rt: &tokio::runtime::Runtime) -> String {
        let _entered = rt.enter();
        let task = place.spawn(async { std::thread::current().name().unwrap_or("").to_string() });
        rt.block_on(task).expect("the task ran")
    }

    #[test]
    fn pinned_attempts_go_round_robin_and_stop_with_their_threads() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (threads, handles) = PinnedThreads::start(2).expect("threads");
        let place = IoPlace::Pinned(handles);
        let names: Vec<String> = (0..4).map(|_| thread_name_on(&place, &rt)).collect();
        assert_eq!(
            names,
            [
                "mcp-harness-io0",
                "mcp-harness-io1",
                "mcp-harness-io0",
                "mcp-harness-io1"
            ]
        );

        // A task still running when the threads stop is dropped with them.
        struct Dropped(Option<std::sync::mpsc::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let guard = Dropped(Some(tx));
        let _pending = place.spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        drop(threads);
        assert!(
            rx.try_recv().is_ok(),
            "the pending task was dropped before the drop returned"
        );

        // Spawning after they stopped does not run the future and does not hang.
        let late = place.spawn(async { 1 });
        assert!(rt.block_on(late).is_err());
    }

    #[test]
    fn the_default_is_two_pinned_threads() {
        assert_eq!(IoThreads::default(), IoThreads::Pinned(2));
        assert_eq!(IoThreads::WorkStealing(3).count(), 3);
    }
}

//! The binary's allocator: mimalloc (feature `mimalloc`, on by default), and how freed memory
//! goes back to the system with it.
//!
//! mimalloc costs fewer instructions per allocation than glibc's malloc (a call through the
//! gateway allocates a few hundred times), but it keeps freed memory in the heap of the thread
//! that allocated it, and only that thread can return it (`mi_collect`). So a release
//! ([`release`], what the gateway calls after many sessions closed) is a request each runtime
//! worker carries out the next time it goes idle ([`on_park`]), and the other workers are woken
//! so that they go idle too.
//!
//! Invariant: after each request of a [`release`], every runtime worker collects its own heap
//! once before it next sleeps; a worker that is not asked never collects (the call path pays
//! one atomic load per park). mimalloc is built without transparent huge pages (`no_thp`):
//! with them, a heap that touched a few KiB of a 2 MiB page kept all of it resident.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Bumped by each [`release`]; a worker whose last collection saw an older value collects.
static RELEASES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The [`RELEASES`] value this thread last collected at.
    static COLLECTED_AT: Cell<u64> = const { Cell::new(0) };
}

unsafe extern "C" {
    /// mimalloc's: frees what the calling thread's heap holds unused (with `force`, every page
    /// and the arenas' purgeable ranges too). It is linked from the `mimalloc` crate's C library.
    fn mi_collect(force: bool);
}

/// Has the runtime that `builder` builds collect on [`release`].
pub(crate) fn install(builder: &mut tokio::runtime::Builder) {
    builder.on_thread_park(on_park);
}

/// Asks every runtime worker to return its heap's freed memory when it next goes idle (called
/// on a worker, by the gateway: `HttpOptions::release_memory`), and asks again
/// [`FOLLOW_UPS`] times, [`FOLLOW_UP_EVERY`] apart: what a session's tasks free just after the
/// gateway counted it closed, or a worker that slept through the first request, is returned
/// too. The gateway releases at most once per 5 s tick, so the rounds never pile up.
pub(crate) fn release() {
    ask_workers();
    tokio::spawn(async {
        for _ in 0..FOLLOW_UPS {
            tokio::time::sleep(FOLLOW_UP_EVERY).await;
            ask_workers();
        }
    });
}

/// How many times a release is asked again.
const FOLLOW_UPS: usize = 4;
/// How long after the previous request each follow-up comes.
const FOLLOW_UP_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// One round: bumps [`RELEASES`] and wakes the sleeping workers with an empty task per worker
/// (a worker that runs one goes idle again, and collects then).
fn ask_workers() {
    RELEASES.fetch_add(1, Ordering::Relaxed);
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    for _ in 0..workers {
        tokio::spawn(async {});
    }
}

/// The runtime's `on_thread_park`: collects this thread's heap if a [`release`] came since it
/// last did.
fn on_park() {
    let asked = RELEASES.load(Ordering::Relaxed);
    COLLECTED_AT.with(|seen| {
        if seen.get() != asked {
            seen.set(asked);
            // SAFETY: mi_collect only walks and frees the calling thread's own heap.
            unsafe { mi_collect(true) };
        }
    });
}

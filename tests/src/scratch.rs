//! Scratch folders for tests: `mcp-harness-<name>-<pid>-<n>-<nanos>` under the system temp dir.
//!
//! Invariant: every folder made here is removed when the test process exits, unless something in
//! that process panicked (a failing test): then the folders are kept and named on stderr, for
//! whoever reads the failure. Without this each CI run left some 200 folders in `/tmp`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static PANICKED: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(0);
static HOOKS: Once = Once::new();

/// Makes a fresh, empty folder `mcp-harness-<name>-…` that goes away at process exit.
pub fn dir(name: &str) -> PathBuf {
    HOOKS.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::Relaxed);
            previous(info);
        }));
        // SAFETY: `remove_made` is an `extern "C" fn()` that neither unwinds nor calls `exit`.
        unsafe { libc::atexit(remove_made) };
    });
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "mcp-harness-{name}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("scratch folder {}: {e}", dir.display()));
    MADE.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(dir.clone());
    dir
}

extern "C" fn remove_made() {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|p| p.into_inner()));
    if PANICKED.load(Ordering::Relaxed) {
        let mut stderr = std::io::stderr();
        for dir in &made {
            // A write error is dropped: this runs inside `exit`, where nothing may unwind.
            let _ = writeln!(stderr, "kept for inspection: {}", dir.display());
        }
        return;
    }
    for dir in made {
        let _ = std::fs::remove_dir_all(dir);
    }
}

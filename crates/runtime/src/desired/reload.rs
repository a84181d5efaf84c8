//! Hot reload (R6): the configuration files are watched, and a change becomes a new desired
//! state — the runtime is marked dirty and a refresh is requested ahead of need.
//!
//! Invariants: a file that fails to load leaves the running configuration as it is (the error
//! is logged and kept for [`ConfigWatch::last_error`]); a reload never stops or starts servers
//! itself — the single refresh path does, stopping old connections before new ones start;
//! watching ends when the [`ConfigWatch`] is dropped; a change is any change of a file's
//! existence, modified time, length or content (hashed, up to 4 MiB).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::DesiredState;
use crate::config::Config;
use crate::config::sources::Sources;
use crate::connection::registry::Registry;

/// Loads the configuration again (for example from the merged sources).
pub type ConfigLoader = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// A running watch of configuration files; dropping it stops the watch.
pub struct ConfigWatch {
    stop: CancellationToken,
    last_error: Arc<Mutex<Option<String>>>,
}

impl ConfigWatch {
    /// Why the last change could not be applied, if it could not (cleared by a good reload).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

impl Drop for ConfigWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A file's content is hashed into its fingerprint up to this size (a config file is a few
/// KiB); a larger one is known by its modified time and length alone.
const HASHED_BYTES: u64 = 4 << 20;

/// What a file looks like now: (modified time, length, a hash of its content), or nothing when
/// it does not exist. The hash catches an edit that keeps both the length and the modified
/// time (a file replaced by a copy of the same size whose time was kept, `cp -p`, a checkout,
/// or two writes within the filesystem's time granularity).
fn fingerprint(files: &[PathBuf]) -> Vec<Option<(SystemTime, u64, u64)>> {
    files
        .iter()
        .map(|f| {
            let metadata = std::fs::metadata(f).ok()?;
            let modified = metadata.modified().ok()?;
            // Only a regular file is read: a FIFO would block the watcher for good.
            let hash = match metadata.is_file() && metadata.len() <= HASHED_BYTES {
                true => regular_bytes(f).map_or(0, |bytes| {
                    use std::hash::{Hash as _, Hasher as _};
                    let mut hasher = std::hash::DefaultHasher::new();
                    bytes.hash(&mut hasher);
                    hasher.finish()
                }),
                false => 0,
            };
            Some((modified, metadata.len(), hash))
        })
        .collect()
}

/// The bytes of `file` if it is (still) a regular file of at most [`HASHED_BYTES`]: opened
/// without blocking and checked once open, so a file swapped for a FIFO since its metadata
/// was read cannot block the watcher.
fn regular_bytes(file: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .ok()?;
    if !opened.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    opened.take(HASHED_BYTES).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// What a set of config files looked like at one moment, to watch them for changes since then
/// ([`crate::Runtime::reload_on_change_since`]): taken before the config is loaded, an edit
/// made while the runtime starts (a remote source's fetch can take seconds) is not lost.
#[derive(Debug, Clone)]
pub struct FilesSeen(Vec<Option<(SystemTime, u64, u64)>>);

impl FilesSeen {
    /// `files` as they are now.
    pub fn now(files: &[PathBuf]) -> Self {
        Self(fingerprint(files))
    }
}

/// See [`crate::Runtime::reload_on_change`]: the watch runs on `registry`'s arbiter and
/// marks `desired`; changes count from `since`.
pub(crate) fn watch_files(
    registry: &Registry,
    desired: Weak<DesiredState>,
    files: Vec<PathBuf>,
    interval: Duration,
    load: ConfigLoader,
    since: FilesSeen,
) -> ConfigWatch {
    let stop = CancellationToken::new();
    let last_error = Arc::new(Mutex::new(None));
    let (token, errors) = (stop.clone(), last_error.clone());
    // Given (taken before the task first runs): an edit made right after counts. A baseline
    // of other files than these is none.
    let mut seen = match since {
        FilesSeen(seen) if seen.len() == files.len() => seen,
        _ => fingerprint(&files),
    };
    registry.spawn(async move {
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                }
                // Read off the actor thread: a slow filesystem must not stall the actors.
                let looked = files.clone();
                let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&looked)).await
                else {
                    continue;
                };
                if now == seen {
                    continue;
                }
                seen = now;
                let Some(desired) = desired.upgrade() else { return };
                match load() {
                    Ok(config) => {
                        tracing::info!(files = files.len(), "configuration changed; applying it");
                        if let Ok(mut e) = errors.lock() {
                            *e = None;
                        }
                        desired.mark(config);
                        desired.prewarm();
                    }
                    Err(error) => {
                        tracing::warn!(%error, "configuration changed but cannot be loaded; keeping the running one");
                        if let Ok(mut e) = errors.lock() {
                            *e = Some(error);
                        }
                    }
                }
            }
        });
    ConfigWatch { stop, last_error }
}

/// See [`crate::Runtime::join_remote_sources`]; with `only_new`, the sources never fetched
/// in this process alone ([`RemoteJoiner::join_new`]).
pub(crate) fn join_remote(
    desired: Weak<DesiredState>,
    sources: Sources,
    only_new: bool,
) -> tokio::task::JoinHandle<Vec<(String, Result<usize, String>)>> {
    tokio::spawn(async move {
        let fetched = match only_new {
            true => sources.fetch_remote_new().await,
            false => sources.fetch_remote().await,
        };
        let outcomes = match fetched {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "remote sources not fetched");
                return Vec::new();
            }
        };
        let mut report = Vec::new();
        let mut joined = false;
        for (source, outcome) in outcomes {
            let name = format!("{} ({})", source.key(), source.shown_url());
            match &outcome {
                Ok(n) => {
                    joined = true;
                    tracing::info!(source = %name, servers = n, "remote source fetched");
                }
                Err(e) => {
                    tracing::warn!(source = %name, error = %e, "remote source failed; its servers are not loaded")
                }
            }
            report.push((name, outcome.map_err(|e| e.to_string())));
        }
        if joined && let Some(desired) = desired.upgrade() {
            match sources.merge() {
                Ok(merged) => {
                    for (server, reason) in &merged.dropped {
                        tracing::warn!(%server, "not loaded: {reason}");
                    }
                    desired.mark(merged.config);
                    desired.prewarm();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the config cannot be merged with the remote sources")
                }
            }
        }
        report
    })
}

/// Joins remote sources into a runtime's desired state from where the runtime itself is not
/// at hand (a config loader run by the file watch); does nothing once the runtime is gone.
#[derive(Clone)]
pub struct RemoteJoiner(pub(crate) Weak<DesiredState>);

impl RemoteJoiner {
    /// Fetches, in the background, the remote sources `sources` lists that were never fetched
    /// in this process (an edit added one, or changed its URL or headers), and joins their
    /// servers as [`crate::Runtime::join_remote_sources`] does. Needs a Tokio runtime.
    pub fn join_new(&self, sources: Sources) {
        if self.0.strong_count() > 0 {
            drop(join_remote(self.0.clone(), sources, true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_that_keeps_length_and_time_is_seen() {
        let dir = std::env::temp_dir().join(format!("reload-fp-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("config.json");
        std::fs::write(&file, r#"{"mcpServers":{"a":{}}}"#).expect("write");
        let before = fingerprint(std::slice::from_ref(&file));
        let modified = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .expect("mtime");
        std::fs::write(&file, r#"{"mcpServers":{"b":{}}}"#).expect("write");
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(modified))
            .expect("set mtime");
        let after = fingerprint(std::slice::from_ref(&file));
        assert_eq!(before[0].map(|f| (f.0, f.1)), after[0].map(|f| (f.0, f.1)));
        assert_ne!(before, after, "the edit was not seen");
        assert_eq!(fingerprint(&[dir.join("absent.json")]), vec![None]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A FIFO put where a config file is watched is looked at, never read: reading it would
    /// block the watcher (and with it every later reload) until something writes to it.
    #[test]
    fn a_fifo_in_a_watched_place_does_not_block_the_watcher() {
        let dir = std::env::temp_dir().join(format!("reload-fifo-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join(".mcp.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let (done, result) = std::sync::mpsc::channel();
        let watched = fifo.clone();
        std::thread::spawn(move || {
            let _ = done.send(fingerprint(&[watched]));
        });
        let seen = result
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the fingerprint returned");
        assert!(seen[0].is_some_and(|(_, _, hash)| hash == 0), "{seen:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Trust in project config files. A project's `.mcp.json` / `.mcp-harness.json` comes with the
//! folder (a cloned repository), not from the user: its servers would run commands of the
//! repository's choosing. So a project file's servers start only once the user approved that
//! file's current content, recorded in a [`TrustStore`] (a JSON file beside the user config,
//! `trusted-projects.json`), and its permission relaxations count only when the user config says
//! `trustProjectPermissions: true` (see [`super::Sources::merge`]).
//!
//! Invariants: a file is trusted exactly when the store holds its key (the canonical path of its
//! folder and its name: a link to a trusted file elsewhere is not trusted by it) with the
//! SHA-256 of the bytes read now — any change to the bytes ends the trust, and a store that
//! cannot be read trusts nothing; the store is written whole to a temporary file (0600) and
//! renamed, so a crash never leaves half a store; one change at a time across processes (an
//! exclusive lock on `trusted-projects.json.lock` from the read to the rename), so concurrent
//! `trust` commands all land; it holds paths and digests, never content.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The store's file name, beside the user config.
pub(crate) const STORE_FILE: &str = "trusted-projects.json";

/// Where trust decisions are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

/// One trusted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustRecord {
    /// `sha256:` and the lowercase hex digest of the bytes the user approved.
    pub digest: String,
    /// When it was trusted (seconds since the Unix epoch).
    pub trusted_at: u64,
}

impl TrustRecord {
    /// Whether `bytes` are exactly what the user approved.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        digest(bytes) == self.digest
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    /// Trusted files by key (folder's canonical path + name).
    files: BTreeMap<String, TrustRecord>,
}

/// What the store says about a file's current content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    /// Trusted with exactly these bytes.
    Trusted,
    /// Never trusted (or revoked).
    Unknown,
    /// Trusted once, but its content changed since.
    Changed,
}

/// Why the store could not be read or written. Names the store file; never file content.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{}: cannot read the trust store: {source}", .path.display())]
    /// The store file could not be read.
    Read {
        /// The store file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("{}: the trust store is not valid ({message}); delete it to start over", .path.display())]
    /// The store file is not a valid store.
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    #[error("{}: cannot write the trust store: {source}", .path.display())]
    /// The store file could not be written.
    Write {
        /// The store file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("{}: cannot resolve the file's path: {source}", .path.display())]
    /// The trusted file's path could not be made canonical.
    Resolve {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// `sha256:` and the lowercase hex digest of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> String {
    rmcp::model::sha256_digest(bytes)
}

impl TrustStore {
    /// A store kept in `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The store beside `user_config` (`<its folder>/trusted-projects.json`).
    pub fn beside(user_config: &Path) -> Option<Self> {
        user_config
            .parent()
            .map(|dir| Self::at(dir.join(STORE_FILE)))
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<StoreFile, TrustError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(StoreFile {
                    version: 1,
                    files: BTreeMap::new(),
                });
            }
            Err(source) => {
                return Err(TrustError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| TrustError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    fn write(&self, store: &StoreFile) -> Result<(), TrustError> {
        let err = |source| TrustError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let text = serde_json::to_string_pretty(store)
            .map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let tmp = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        {
            use std::io::Write;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(&tmp).map_err(err)?;
            file.write_all(text.as_bytes()).map_err(err)?;
            file.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }

    /// What the store says about `file` holding `bytes` now.
    pub fn state(&self, file: &Path, bytes: &[u8]) -> Result<TrustState, TrustError> {
        let key = canonical(file)?;
        Ok(match self.read()?.files.get(&key) {
            None => TrustState::Unknown,
            Some(record) if record.digest == digest(bytes) => TrustState::Trusted,
            Some(_) => TrustState::Changed,
        })
    }

    /// One change of the store at a time, across processes: an exclusive lock on
    /// `<store>.lock`, held from the read to the rename (released when the file closes), so
    /// two `trust` commands at once both land.
    fn locked(&self) -> Result<std::fs::File, TrustError> {
        let err = |source| TrustError::Write {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let lock = options
            .open(self.path.with_extension("json.lock"))
            .map_err(err)?;
        lock.lock().map_err(err)?;
        Ok(lock)
    }

    /// Records that the user trusts `file` with exactly `bytes` (what they were shown).
    pub fn trust(&self, file: &Path, bytes: &[u8]) -> Result<(), TrustError> {
        let key = canonical(file)?;
        let _lock = self.locked()?;
        let mut store = self.read()?;
        let trusted_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        store.files.insert(
            key,
            TrustRecord {
                digest: digest(bytes),
                trusted_at,
            },
        );
        store.version = 1;
        self.write(&store)
    }

    /// Forgets `file`; whether it was trusted. A file that no longer exists is forgotten by the
    /// path it was trusted under.
    pub fn revoke(&self, file: &Path) -> Result<bool, TrustError> {
        // A file that no longer exists: its folder's canonical path and its name (the key it
        // was trusted under), else the path as given.
        let key = canonical(file).or_else(|e| {
            let absolute = std::path::absolute(file).map_err(|_| e)?;
            Ok::<_, TrustError>(
                match (
                    absolute.parent().map(std::fs::canonicalize),
                    absolute.file_name(),
                ) {
                    (Some(Ok(folder)), Some(name)) => folder.join(name),
                    _ => absolute,
                }
                .display()
                .to_string(),
            )
        })?;
        let _lock = self.locked()?;
        let mut store = self.read()?;
        let removed = store.files.remove(&key).is_some();
        if removed {
            self.write(&store)?;
        }
        Ok(removed)
    }

    /// Every trusted file, by key (its folder's canonical path + its name).
    pub fn list(&self) -> Result<BTreeMap<String, TrustRecord>, TrustError> {
        Ok(self.read()?.files)
    }
}

/// The key of `file`: its folder's canonical path (links resolved) and its own name. A link
/// *to* a project file is a project file of the link's folder — its servers run there, with
/// that folder's relative paths (`./run.sh`) — so it is trusted on its own, never by the trust
/// of the file it points to; a linked folder is the same folder, one key.
fn canonical(file: &Path) -> Result<String, TrustError> {
    let resolve = |source| TrustError::Resolve {
        path: file.to_path_buf(),
        source,
    };
    let absolute = std::path::absolute(file).map_err(resolve)?;
    let (Some(folder), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return std::fs::canonicalize(file)
            .map(|p| key_of(&p))
            .map_err(resolve);
    };
    // The file itself must exist (through its link, if it is one).
    std::fs::metadata(&absolute).map_err(resolve)?;
    let folder = std::fs::canonicalize(folder).map_err(resolve)?;
    Ok(key_of(&folder.join(name)))
}

/// The prefix of a key of a path that is not UTF-8 (its bytes in hex follow): such a path is
/// one key of its own, not the lossy spelling two different paths share.
const BYTES_KEY: &str = "bytes:";

/// A path as a store key: the path itself when it is UTF-8 (an absolute path never starts
/// with [`BYTES_KEY`]), else its bytes.
fn key_of(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    match path.to_str() {
        Some(text) => text.to_string(),
        None => {
            let hex: String = path
                .as_os_str()
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("{BYTES_KEY}{hex}")
        }
    }
}

/// The path a store key names (a path that is not UTF-8 is stored as `bytes:` and its bytes
/// in hex).
pub fn path_of_key(key: &str) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    let Some(hex) = key.strip_prefix(BYTES_KEY) else {
        return PathBuf::from(key);
    };
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    PathBuf::from(std::ffi::OsStr::from_bytes(&bytes))
}

/// How a [`super::Sources`] decides about project files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProjectTrust {
    /// The store beside the user config (none when there is no user config location: then no
    /// project file is trusted).
    Default,
    /// This store (`None`: no store; no project file is trusted).
    Store(Option<TrustStore>),
    /// Every project file is trusted like the user's own (the embedder vetted the folder).
    All,
}

/// A project file whose servers are held back, for the caller to ask about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntrustedFile {
    /// The file as the sources name it.
    pub path: PathBuf,
    /// [`TrustState::Unknown`] or [`TrustState::Changed`].
    pub state: TrustState,
    /// The servers it defines (all held back).
    pub servers: Vec<String>,
    /// Why the store could not be read, when that is why.
    pub error: Option<String>,
}

impl UntrustedFile {
    /// Why its servers are not started (names the file, never its content).
    pub fn reason(&self) -> String {
        let file = self.path.display();
        match (&self.error, self.state) {
            (Some(e), _) => {
                format!("{file} is a project config file and the trust store cannot be read ({e})")
            }
            (None, TrustState::Changed) => format!(
                "{file} is a project config file that changed since it was trusted; review it and trust it again"
            ),
            (None, _) => format!(
                "{file} is a project config file not trusted yet; review it and trust it to start its servers"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trusting files from many processes (here threads, each with its own lock descriptor) at
    /// once loses none: each read-change-write holds the store's lock.
    #[test]
    fn concurrent_trusts_all_land() {
        let dir = std::env::temp_dir().join(format!("trust-concurrent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let store = dir.join("trusted-projects.json");
        std::thread::scope(|scope| {
            for n in 0..16 {
                let (dir, store) = (&dir, &store);
                scope.spawn(move || {
                    let file = dir.join(format!("p{n}.json"));
                    std::fs::write(&file, format!("{{\"n\": {n}}}")).expect("write");
                    TrustStore::at(store)
                        .trust(&file, format!("{{\"n\": {n}}}").as_bytes())
                        .expect("trust");
                });
            }
        });
        assert_eq!(TrustStore::at(&store).list().expect("list").len(), 16);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two folders whose names differ only in bytes that are not UTF-8 are two keys (a lossy
    /// spelling made them one: trusting one trusted the other), and a key names its path back.
    #[test]
    fn folders_that_are_not_utf8_have_keys_of_their_own() {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = std::env::temp_dir().join(format!("trust-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let [a, b] = [b"\xff", b"\xfe"].map(|name| {
            let folder = dir.join(std::ffi::OsStr::from_bytes(name));
            std::fs::create_dir_all(&folder).expect("dir");
            let file = folder.join(".mcp.json");
            std::fs::write(&file, "{}").expect("write");
            file
        });
        let store = TrustStore::at(dir.join("trusted-projects.json"));
        store.trust(&a, b"{}").expect("trust");
        assert_eq!(store.state(&a, b"{}").expect("state"), TrustState::Trusted);
        assert_ne!(store.state(&b, b"{}").expect("state"), TrustState::Trusted);
        let keys = store.list().expect("list");
        let key = keys.keys().next().expect("one key");
        assert!(key.starts_with(BYTES_KEY), "{key}");
        assert_eq!(
            path_of_key(key),
            std::fs::canonicalize(&a).expect("canonical")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

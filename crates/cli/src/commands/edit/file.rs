//! One config file being edited: read with its key order, changed in memory, checked as a whole,
//! then written atomically.
//!
//! Invariants: a file is only ever replaced by a document that [`sources::import_text`] accepts
//! (the checks every config load makes, `${VAR}` left unexpanded), so an edit never leaves a
//! config the next command refuses; the replacement is a temp file in the same folder renamed over
//! the original (a reader sees the old file or the new one, never half of one), with the
//! original's permission bits (new files: 0600, they may hold secrets), written through a symlink
//! to its target; one edit at a time per folder (an exclusive `flock` on the folder, held from
//! the read to the rename: [`lock`]), so two edits at once never lose one another's change, and
//! the file is replaced only while it still holds the bytes read (another program's change made
//! meanwhile is kept, the edit refused: [`EditError::Changed`]); a read-only file is refused; a
//! file with comments or trailing commas is read but never written (JSON cannot
//! keep them, and dropping a user's comments silently is worse than refusing).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use mcp_harness_runtime::sources;

use super::ordered::{Json, Object};

/// Why an edit was refused or failed. Every message names the file (and the key when there is
/// one) and what to do instead; none quotes a value from the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EditError {
    /// `add` of a name the file already defines.
    #[error(
        "server \"{server}\" already exists in {file} (`mcpServers.{server}`); pass --force to \
         replace it, or `mcp-harness remove {server}` first"
    )]
    Exists { server: String, file: String },
    /// The server is not in the file(s) of the scope.
    #[error("no server \"{server}\" in {looked}{hint}")]
    NotFound {
        server: String,
        looked: String,
        hint: String,
    },
    /// The file has comments or trailing commas.
    #[error(
        "{file} has comments or trailing commas, which a rewrite cannot keep; remove them (or \
         make this change by hand) and run the command again"
    )]
    Comments { file: String },
    /// The file, or the result of the edit, is not a valid config.
    #[error("{0}")]
    Invalid(String),
    /// The file changed on disk between this command's read and its write (another program
    /// edited it: editors and hosts do not take our folder lock).
    #[error(
        "{file} changed on disk while this command ran (another program edited it); nothing \
         was written, so that change is kept — run the command again"
    )]
    Changed { file: String },
    /// Wrong arguments.
    #[error("{0}")]
    Usage(String),
    /// Reading or writing failed.
    #[error("{file}: cannot {action}: {source}")]
    Io {
        file: String,
        action: &'static str,
        source: std::io::Error,
    },
}

impl EditError {
    /// The exit status: 2 for usage and config problems (a config file that cannot be read is
    /// one, as for every other command), 1 when writing failed.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            EditError::Io {
                action: "read it", ..
            } => crate::exit::Exit::Usage,
            EditError::Io { .. } | EditError::Changed { .. } => crate::exit::Exit::Failed,
            _ => crate::exit::Exit::Usage,
        }
        .code()
    }
}

/// A config file read for editing.
#[derive(Debug)]
pub(crate) struct ConfigFile {
    /// The path as the sources name it (messages, trust).
    pub(crate) path: PathBuf,
    /// The document; `{}` for a file that does not exist yet.
    pub(crate) doc: Json,
    /// The bytes read; `None` when the file did not exist.
    pub(crate) before: Option<Vec<u8>>,
    /// The file parses only once comments or trailing commas are removed.
    lenient: bool,
}

impl ConfigFile {
    /// Reads `path` (a missing file is an empty config).
    pub(crate) fn open(path: &Path) -> Result<ConfigFile, EditError> {
        let bytes = match sources::read_capped(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ConfigFile {
                    path: path.to_path_buf(),
                    doc: Json::Object(Object::default()),
                    before: None,
                    lenient: false,
                });
            }
            Err(source) => {
                return Err(EditError::Io {
                    file: shown(path),
                    action: "read it",
                    source,
                });
            }
        };
        // Not UTF-8: refused as every loading command refuses it (a lossy read would write
        // the file back with its bytes replaced).
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            EditError::Invalid(format!(
                "{}: not UTF-8 text (byte {}); fix the file first",
                shown(path),
                e.valid_up_to() + 1
            ))
        })?;
        let (doc, lenient) = if text.trim().is_empty() {
            (Json::Object(Object::default()), false)
        } else {
            match Json::parse(text) {
                Ok(doc) => (doc, false),
                // Not strict JSON: JSONC (comments, trailing commas) reads through the config
                // loader, which also names what is wrong when it is not JSONC either.
                Err(_) => match sources::convert(text, path) {
                    Ok(converted) => (Json::from(&converted.document), true),
                    Err(e) => return Err(EditError::Invalid(e.to_string())),
                },
            }
        };
        if doc.as_object().is_none() {
            return Err(EditError::Invalid(format!(
                "{}: a config file must be a JSON object",
                shown(path)
            )));
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            doc,
            before: Some(bytes),
            lenient,
        })
    }

    /// The file for messages: `~/…` or `./…`.
    pub(crate) fn shown(&self) -> String {
        shown(&self.path)
    }

    /// `mcpServers`, if the file has it as an object.
    pub(crate) fn servers(&self) -> Option<&Object> {
        self.doc
            .as_object()
            .and_then(|o| o.get("mcpServers"))
            .and_then(Json::as_object)
    }

    /// The server `name` as written.
    pub(crate) fn server(&self, name: &str) -> Option<&Object> {
        self.servers()
            .and_then(|s| s.get(name))
            .and_then(Json::as_object)
    }

    /// The server `name`, to change in place.
    pub(crate) fn server_mut(&mut self, name: &str) -> Option<&mut Object> {
        self.doc
            .as_object_mut()
            .and_then(|o| o.get_mut("mcpServers"))
            .and_then(Json::as_object_mut)
            .and_then(|s| s.get_mut(name))
            .and_then(Json::as_object_mut)
    }

    /// `mcpServers`, created (last in the file) when missing.
    pub(crate) fn servers_mut(&mut self) -> Result<&mut Object, EditError> {
        let file = self.shown();
        let root = self
            .doc
            .as_object_mut()
            .ok_or_else(|| EditError::Invalid(format!("{file}: not a JSON object")))?;
        if !root.contains("mcpServers") {
            root.insert("mcpServers", Json::Object(Object::default()));
        }
        root.get_mut("mcpServers")
            .and_then(Json::as_object_mut)
            .ok_or_else(|| EditError::Invalid(format!("{file}: `mcpServers` must be an object")))
    }

    /// Checks the edited document as a config load would, then replaces the file atomically.
    /// Returns the bytes written.
    pub(crate) fn save(&self) -> Result<Vec<u8>, EditError> {
        if self.lenient {
            return Err(EditError::Comments { file: self.shown() });
        }
        let text = self.doc.pretty();
        sources::import_text(&text, &self.path).map_err(|e| EditError::Invalid(e.to_string()))?;
        // Written over only as it was read: a change another program made meanwhile (while
        // `import` asked its question, say) is not lost to ours.
        let on_disk = match std::fs::read(&self.path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(EditError::Io {
                    file: self.shown(),
                    action: "read it again before writing",
                    source,
                });
            }
        };
        if on_disk != self.before {
            return Err(EditError::Changed { file: self.shown() });
        }
        write_atomic(&self.path, text.as_bytes()).map_err(|source| EditError::Io {
            file: self.shown(),
            action: "write it",
            source,
        })?;
        Ok(text.into_bytes())
    }
}

/// An exclusive lock on a config folder, released when dropped (the descriptor closes).
#[derive(Debug)]
pub(crate) struct EditLock(#[allow(dead_code)] std::fs::File);

/// Waits for, then holds, the edit lock of the folder of `path` (created if missing). Every
/// read-change-write of a config file happens under it.
pub(crate) fn lock(path: &Path) -> Result<EditLock, EditError> {
    use std::os::fd::AsRawFd;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let fail = |source| EditError::Io {
        file: shown(&dir),
        action: "lock the folder for editing",
        source,
    };
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let folder = std::fs::File::open(&dir).map_err(fail)?;
    loop {
        // SAFETY: flock on a descriptor we own; it is released when `folder` closes.
        let rc = unsafe { libc::flock(folder.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(EditLock(folder));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(fail(e));
        }
    }
}

/// `path` for people, without control characters.
pub(crate) fn shown(path: &Path) -> String {
    crate::output::short(path)
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// Removes the temp file unless the rename consumed it.
struct TempFile<'a> {
    path: &'a Path,
    done: bool,
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(self.path);
        }
    }
}

/// Replaces `path` with `bytes`: a temp file beside the target (links followed), with the
/// target's permission bits (0600 for a new file) and owner, synced, then renamed over it and
/// the folder synced. A file its owner made read-only is refused, not replaced.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let target = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| {
            let to = std::fs::read_link(path)
                .map(|t| shown(&t))
                .unwrap_or_default();
            std::io::Error::new(
                e.kind(),
                format!("it is a symbolic link to {to}, which cannot be followed ({e})"),
            )
        })?,
        _ => path.to_path_buf(),
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let existing = match std::fs::metadata(&target) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mode = existing
        .as_ref()
        .map_or(0o600, |m| m.permissions().mode() & 0o7777);
    if existing.is_some() && mode & 0o200 == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it is read-only (mode {mode:04o}); make it writable (`chmod u+w`) to edit it \
                 with mcp-harness"
            ),
        ));
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    let tmp_path = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp_path);
    let mut tmp = TempFile {
        path: &tmp_path,
        done: false,
    };
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(tmp.path)?;
        f.write_all(bytes)?;
        // The original's owner (an edit run with sudo leaves the user's file the user's); as
        // another user only root may, and then the file becomes the editor's.
        if let Some(m) = &existing
            && (m.uid(), m.gid()) != (f.metadata()?.uid(), f.metadata()?.gid())
            && let Err(e) = std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))
        {
            tracing::debug!(error = %e, "the config file's owner could not be kept");
        }
        // The umask applied at creation does not apply here: the original's bits exactly.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
    }
    std::fs::rename(tmp.path, &target)?;
    tmp.done = true;
    // The rename itself is durable once the folder is synced.
    if let Ok(folder) = std::fs::File::open(&dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test.
    fn folder(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mcp-harness-edit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp folder");
        dir
    }

    fn add_server(file: &mut ConfigFile) {
        let mut server = Object::default();
        server.insert("command", Json::String("ours".into()));
        file.servers_mut()
            .expect("servers")
            .insert("ours", Json::Object(server));
    }

    /// A change another program made after the read is kept: the edit writes nothing and says
    /// so (it was overwritten with the copy read before).
    #[test]
    fn a_file_changed_since_it_was_read_is_not_written_over() {
        let path = folder("changed").join("config.json");
        std::fs::write(&path, r#"{"mcpServers": {}}"#).expect("write");
        let mut file = ConfigFile::open(&path).expect("open");
        add_server(&mut file);
        let theirs = r#"{"mcpServers": {}, "permissions": {"deny": ["mcp__x__rm"]}}"#;
        std::fs::write(&path, theirs).expect("their edit");
        let refused = file.save().expect_err("refused");
        assert!(matches!(refused, EditError::Changed { .. }), "{refused}");
        assert_eq!(refused.exit_code(), 1);
        assert!(
            refused.to_string().contains("run the command again"),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), theirs);
        // Created meanwhile, too.
        let new = path.with_file_name("new.json");
        let mut file = ConfigFile::open(&new).expect("open");
        add_server(&mut file);
        std::fs::write(&new, "{}").expect("their file");
        assert!(matches!(file.save(), Err(EditError::Changed { .. })));
        // Unchanged: written.
        let mut file = ConfigFile::open(&path).expect("open");
        add_server(&mut file);
        file.save().expect("saved");
        assert!(
            std::fs::read_to_string(&path)
                .expect("read")
                .contains("ours")
        );
    }

    /// A file its owner made read-only is refused, naming the fix; a link to nowhere names
    /// where it points.
    #[test]
    fn a_read_only_file_and_a_dangling_link_are_refused_clearly() {
        let dir = folder("modes");
        let path = dir.join("config.json");
        std::fs::write(&path, "{}").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let mut file = ConfigFile::open(&path).expect("open");
        add_server(&mut file);
        let refused = file.save().expect_err("read-only").to_string();
        assert!(
            refused.contains("read-only (mode 0444)") && refused.contains("chmod u+w"),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "{}");
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(dir.join("missing/config.json"), &link).expect("link");
        let mut file = ConfigFile::open(&link).expect("open");
        add_server(&mut file);
        let refused = file.save().expect_err("dangling").to_string();
        assert!(
            refused.contains("symbolic link to") && refused.contains("missing"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The output budget (R31): a result estimated over its token budget is written to a private,
//! bounded store, and the model gets a bounded summary plus a handle it pages through with the
//! built-in tool [`READ_OUTPUT_TOOL`] (complaint 4: never cut silently, never sent whole, never a
//! file path the model needs filesystem tools for).
//!
//! Invariants:
//! - the store lives in one directory: by default a fresh per-store directory under
//!   [`std::env::temp_dir`], created with mode 0700 and removed when the store is dropped; a
//!   configured root is created 0700 if missing and left in place (an existing one keeps its
//!   mode). Stored files are created new with mode 0600;
//! - a per-store temp directory holds an exclusive advisory lock (`.lock`, taken before the
//!   file has that name) for the store's life; the OS drops it when the process dies, even by
//!   SIGKILL. Opening a per-store directory removes the temp directories of stores whose lock
//!   is free — owners that died without dropping their store — and never one without a lock
//!   file (older versions, or a store being created);
//! - a handle is `out-` followed by 32 lowercase hex digits and nothing else; anything else is
//!   refused before the filesystem is touched, so a handle cannot name a path outside the
//!   store. Only files the store indexed (written by it, or found in its root at open) are read;
//! - the store is bounded: its files total at most [`OutputStoreConfig::max_total_bytes`]
//!   (default 256 MiB); the oldest are evicted to make room, and one output larger than the
//!   bound is not stored (the model still gets the preview, marked as cut);
//! - pages hold at most [`OutputStoreConfig::page_chars`] chars (default 8,000) and split on
//!   char boundaries, never inside a UTF-8 sequence; pages are numbered from 1;
//! - the summary is bounded: a header, the first [`OutputStoreConfig::preview_chars`] chars
//!   (default 2,000, and at most twice the budget), the images that still fit the budget, and
//!   at most [`MAX_SUMMARY_WARNINGS`](super::summary::MAX_SUMMARY_WARNINGS) warnings;
//! - [`READ_OUTPUT_TOOL`]'s arguments are checked against its own input schema before anything
//!   else: what the model was told is refused (another property, a page of 0) is refused.

#![warn(missing_docs)]

use std::collections::VecDeque;
use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::result::{NormalizedResult, estimate_tokens};
use super::summary::{render_text, summarize};
use super::validate::{ArgumentError, ArgumentValidator};
#[cfg(test)]
use crate::error::ErrorClass;

/// The built-in tool the model reads stored outputs with.
pub const READ_OUTPUT_TOOL: &str = "mcp_harness__read_output";
/// `_meta` key through which a tool may raise its own output budget (see [`budget_for`]).
pub(crate) const MAX_OUTPUT_TOKENS_META: &str = "mcp-harness/maxOutputTokens";
/// Default page size, in chars.
pub(crate) const DEFAULT_PAGE_CHARS: usize = 8_000;
/// Default preview size in a summary, in chars.
pub(crate) const DEFAULT_PREVIEW_CHARS: usize = 2_000;
/// Default bound on the bytes of all stored outputs.
pub(crate) const DEFAULT_MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;

const HANDLE_PREFIX: &str = "out-";
const HANDLE_HEX: usize = 32;
const FILE_SUFFIX: &str = ".txt";

/// The budget of one tool's results: `default`, raised (never lowered) by a positive integer in
/// the tool's `_meta["mcp-harness/maxOutputTokens"]`, and never above `cap`.
pub(crate) fn budget_for(tool: &Tool, default: usize, cap: usize) -> usize {
    let requested = tool
        .meta
        .as_ref()
        .and_then(|meta| meta.get(MAX_OUTPUT_TOKENS_META))
        .and_then(Value::as_u64)
        .map(|v| usize::try_from(v).unwrap_or(usize::MAX));
    requested.map_or(default, |v| v.max(default)).min(cap)
}

/// The definition of [`READ_OUTPUT_TOOL`]: `handle` (required) and `page` (from 1, default 1).
pub(crate) fn read_output_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "handle": {
                "type": "string",
                "pattern": format!("^{HANDLE_PREFIX}[0-9a-f]{{{HANDLE_HEX}}}$"),
                "description": "The handle given in the summary of a large tool result."
            },
            "page": {
                "type": "integer",
                "minimum": 1,
                "default": 1,
                "description": "Which page to read, from 1."
            }
        },
        "required": ["handle"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        READ_OUTPUT_TOOL,
        "Reads one page of a tool result that was too large to show whole. The summary of such \
         a result gives its handle and how many pages it has.",
        schema,
    )
    .annotate(
        ToolAnnotations::with_title("Read a stored tool output")
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// Why stored output could not be written or read. All of the output class (R32).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutputError {
    #[error("`{handle}` is not an output handle (they look like out- and 32 hex digits)")]
    /// Not of the handle form: refused before touching the filesystem.
    BadHandle {
        /// The offending string (bounded).
        handle: String,
    },
    #[error(
        "no stored output `{handle}`; it may have been evicted (the store keeps the newest {max_mib} MiB)"
    )]
    /// Well formed, but not (or no longer) in the store.
    UnknownHandle {
        /// The handle asked for.
        handle: String,
        /// The store's bound, in MiB.
        max_mib: u64,
    },
    #[error("output `{handle}` has pages 1 to {pages}; there is no page {page}")]
    /// The page is 0 or past the last one.
    PageOutOfRange {
        /// The handle asked for.
        handle: String,
        /// The page asked for.
        page: usize,
        /// How many pages the output has.
        pages: usize,
    },
    #[error("invalid arguments for `{READ_OUTPUT_TOOL}`: {reason}")]
    /// The arguments of a read-output call are not `handle` + `page`.
    BadArguments {
        /// What is wrong with them.
        reason: String,
    },
    #[error("the output is {bytes} bytes, more than the store holds ({max} bytes)")]
    /// One output larger than the whole store.
    TooLarge {
        /// The output's size.
        bytes: u64,
        /// The store's bound.
        max: u64,
    },
    #[error("stored output `{handle}` is damaged (not UTF-8 at the page bounds)")]
    /// The stored file no longer splits into UTF-8 pages.
    Corrupt {
        /// The handle asked for.
        handle: String,
    },
    #[error("the output store at {path}: {message}")]
    /// The filesystem refused.
    Io {
        /// The file or directory concerned.
        path: String,
        /// The operating system's message.
        message: String,
    },
}

impl OutputError {
    #[cfg(test)]
    /// Always [`ErrorClass::Output`].
    pub(crate) fn class(&self) -> ErrorClass {
        ErrorClass::Output
    }

    fn io(path: &Path, error: std::io::Error) -> Self {
        OutputError::Io {
            path: path.display().to_string(),
            message: error.to_string(),
        }
    }
}

/// An opaque, validated name of one stored output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct OutputHandle(String);

impl OutputHandle {
    fn new() -> Self {
        OutputHandle(format!("{HANDLE_PREFIX}{}", uuid::Uuid::new_v4().simple()))
    }

    /// Accepts exactly `out-` followed by 32 lowercase hex digits.
    pub(crate) fn parse(handle: &str) -> Result<Self, OutputError> {
        let valid = handle.strip_prefix(HANDLE_PREFIX).is_some_and(|hex| {
            hex.len() == HANDLE_HEX && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        if valid {
            Ok(OutputHandle(handle.to_string()))
        } else {
            Err(OutputError::BadHandle {
                handle: super::validate::truncate(handle, 80),
            })
        }
    }

    #[cfg(test)]
    /// The handle as the model sees it.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    fn file_name(&self) -> String {
        format!("{}{FILE_SUFFIX}", self.0)
    }
}

impl fmt::Display for OutputHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One page of a stored output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputPage {
    /// The output this page belongs to.
    pub handle: String,
    /// From 1.
    pub page: usize,
    /// How many pages the output has.
    pub pages: usize,
    /// At most the store's page size in chars.
    pub text: String,
}

impl OutputPage {
    /// The page as the model is shown it: a one-line header, then the text.
    pub(crate) fn render(&self) -> String {
        let next = if self.page < self.pages {
            format!("; next: page {}", self.page + 1)
        } else {
            "; last page".to_string()
        };
        format!(
            "[{} page {} of {}{next}]\n{}",
            self.handle, self.page, self.pages, self.text
        )
    }
}

/// What [`OutputStore::spill`] made of a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Spilled {
    /// Within budget: the result unchanged.
    Inline(NormalizedResult),
    /// Over budget and stored: `summary` is what the model gets.
    Stored {
        /// Header, preview, and the images that fit the budget.
        summary: NormalizedResult,
        /// Where the whole text is.
        handle: OutputHandle,
        /// How many pages it has.
        pages: usize,
        /// Its length in chars.
        total_chars: usize,
    },
    /// Over budget but storing failed: `summary` holds the preview only, saying so.
    Truncated {
        /// Header and preview, marked as cut.
        summary: NormalizedResult,
        /// Why storing failed.
        error: OutputError,
    },
}

impl Spilled {
    /// What the model gets, by value.
    pub(crate) fn into_result(self) -> NormalizedResult {
        match self {
            Spilled::Inline(result)
            | Spilled::Stored {
                summary: result, ..
            }
            | Spilled::Truncated {
                summary: result, ..
            } => result,
        }
    }

    /// The handle, when the output was stored.
    pub(crate) fn handle(&self) -> Option<&OutputHandle> {
        match self {
            Spilled::Stored { handle, .. } => Some(handle),
            _ => None,
        }
    }
}

/// How an [`OutputStore`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputStoreConfig {
    /// Where outputs are stored; `None`: a fresh 0700 directory under the system temp dir,
    /// removed on drop.
    pub root: Option<PathBuf>,
    /// Chars per page (at least 1; default 8,000).
    pub page_chars: usize,
    /// Chars of the output shown in a summary (default 2,000; also at most twice the budget).
    pub preview_chars: usize,
    /// Bound on the bytes of all stored files (default 256 MiB).
    pub max_total_bytes: u64,
}

impl Default for OutputStoreConfig {
    fn default() -> Self {
        OutputStoreConfig {
            root: None,
            page_chars: DEFAULT_PAGE_CHARS,
            preview_chars: DEFAULT_PREVIEW_CHARS,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        }
    }
}

struct Entry {
    handle: OutputHandle,
    bytes: u64,
    /// Byte offset where each page starts; computed on first read for files found at open.
    starts: Option<Arc<Vec<u64>>>,
}

#[derive(Default)]
struct Index {
    /// Oldest first.
    entries: VecDeque<Entry>,
    total: u64,
}

/// Stored outputs of one runtime; see the module docs for its bounds.
pub(crate) struct OutputStore {
    root: PathBuf,
    owned: bool,
    /// The lock on a per-store temp directory, held until drop (see the module docs).
    _lock: Option<File>,
    page_chars: usize,
    preview_chars: usize,
    max_total_bytes: u64,
    index: Mutex<Index>,
}

impl fmt::Debug for OutputStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputStore")
            .field("root", &self.root)
            .field("page_chars", &self.page_chars)
            .field("max_total_bytes", &self.max_total_bytes)
            .finish()
    }
}

impl Drop for OutputStore {
    fn drop(&mut self) {
        if self.owned {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// How a per-store temp directory's name starts.
const TEMP_DIR_PREFIX: &str = "mcp-harness-output-";
/// The lock file of a per-store temp directory.
const LOCK_FILE: &str = ".lock";

/// Takes the store's lock in `dir`: the file is locked under another name and only then
/// renamed to [`LOCK_FILE`], so a sweep never sees an unlocked lock file of a live store.
fn lock_dir(dir: &Path) -> Result<File, OutputError> {
    let pending = dir.join(".lock-pending");
    let file = File::create_new(&pending).map_err(|e| OutputError::io(&pending, e))?;
    file.try_lock().map_err(|e| {
        let e = match e {
            fs::TryLockError::Error(e) => e,
            fs::TryLockError::WouldBlock => std::io::ErrorKind::WouldBlock.into(),
        };
        OutputError::io(&pending, e)
    })?;
    let lock = dir.join(LOCK_FILE);
    fs::rename(&pending, &lock).map_err(|e| OutputError::io(&lock, e))?;
    Ok(file)
}

/// Removes the per-store temp directories under `temp` whose lock file nobody holds: their
/// stores' processes died without dropping them (SIGKILL, abort). Best effort: a directory
/// that cannot be opened (another user's) or locked (alive) is left alone.
fn sweep_orphans(temp: &Path) {
    let Ok(listing) = fs::read_dir(temp) else {
        return;
    };
    let mut removed = 0usize;
    for item in listing.flatten() {
        let name = item.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.starts_with(TEMP_DIR_PREFIX))
        {
            continue;
        }
        let dir = item.path();
        // A lock file is only ever a file the store created: never follow a link.
        let lock = dir.join(LOCK_FILE);
        if !fs::symlink_metadata(&lock).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(file) = File::open(&lock) else {
            continue;
        };
        if file.try_lock().is_ok() && fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            dir = %temp.display(),
            "removed the output stores of processes that died without cleaning up"
        );
    }
}

fn create_private_dir(path: &Path, recursive: bool) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(recursive);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

impl OutputStore {
    #[cfg(test)]
    /// A store with the default settings in a fresh per-store temp directory.
    pub(crate) fn temp() -> Result<Self, OutputError> {
        Self::open(OutputStoreConfig::default())
    }

    /// Opens a store. A configured root that exists is scanned: the outputs in it count
    /// against the bound (oldest evicted first) and stay readable.
    pub(crate) fn open(config: OutputStoreConfig) -> Result<Self, OutputError> {
        let (root, owned) = match config.root {
            Some(root) => {
                if !root.is_dir() {
                    create_private_dir(&root, true).map_err(|e| OutputError::io(&root, e))?;
                }
                (root, false)
            }
            None => {
                let temp = std::env::temp_dir();
                sweep_orphans(&temp);
                let root = temp.join(format!(
                    "{TEMP_DIR_PREFIX}{}",
                    uuid::Uuid::new_v4().simple()
                ));
                // Not recursive: the directory must be new, hence ours.
                create_private_dir(&root, false).map_err(|e| OutputError::io(&root, e))?;
                (root, true)
            }
        };
        let lock = match owned {
            true => Some(lock_dir(&root).inspect_err(|_| {
                let _ = fs::remove_dir_all(&root);
            })?),
            false => None,
        };
        let store = OutputStore {
            root,
            owned,
            _lock: lock,
            page_chars: config.page_chars.max(1),
            preview_chars: config.preview_chars,
            max_total_bytes: config.max_total_bytes,
            index: Mutex::new(Index::default()),
        };
        if !owned {
            store.scan()?;
        }
        Ok(store)
    }

    fn scan(&self) -> Result<(), OutputError> {
        let listing = fs::read_dir(&self.root).map_err(|e| OutputError::io(&self.root, e))?;
        let mut found = Vec::new();
        for item in listing.flatten() {
            let name = item.file_name();
            let Some(handle) = name
                .to_str()
                .and_then(|name| name.strip_suffix(FILE_SUFFIX))
                .and_then(|stem| OutputHandle::parse(stem).ok())
            else {
                continue;
            };
            let Ok(metadata) = item.metadata() else {
                continue;
            };
            if !metadata.is_file() {
                continue;
            }
            let modified = metadata.modified().ok();
            found.push((modified, handle, metadata.len()));
        }
        found.sort_by_key(|a| a.0);
        let mut index = self.lock();
        for (_, handle, bytes) in found {
            index.total += bytes;
            index.entries.push_back(Entry {
                handle,
                bytes,
                starts: None,
            });
        }
        self.evict(&mut index, 0);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes the oldest outputs until `incoming` more bytes fit the bound.
    fn evict(&self, index: &mut Index, incoming: u64) {
        while index.total.saturating_add(incoming) > self.max_total_bytes {
            let Some(oldest) = index.entries.pop_front() else {
                break;
            };
            index.total = index.total.saturating_sub(oldest.bytes);
            let _ = fs::remove_file(self.root.join(oldest.handle.file_name()));
        }
    }

    #[cfg(test)]
    /// The directory outputs are stored in.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    #[cfg(test)]
    /// Bytes currently stored.
    pub(crate) fn stored_bytes(&self) -> u64 {
        self.lock().total
    }

    /// Leaves `result` as it is when [`estimate_tokens`] is within `budget_tokens`; otherwise
    /// stores its text rendering (all blocks, `structuredContent`, warnings) and returns a
    /// bounded summary naming the handle, the size, the number of blocks and pages, and how to
    /// read the rest. `server` and `tool` only label the summary; `output_schema`: the tool
    /// declares one (see [`summarize`]).
    pub(crate) fn spill(
        &self,
        server: &str,
        tool: &str,
        result: NormalizedResult,
        budget_tokens: usize,
        output_schema: bool,
    ) -> Spilled {
        let estimate = estimate_tokens(&result);
        if estimate <= budget_tokens {
            return Spilled::Inline(result);
        }
        let text = render_text(&result);
        let total_chars = text.chars().count();
        let preview_chars = self.preview_chars.min(budget_tokens.saturating_mul(2));
        let preview_end = text
            .char_indices()
            .nth(preview_chars)
            .map_or(text.len(), |(at, _)| at);
        let preview = &text[..preview_end];
        let shown = preview_chars.min(total_chars);
        let facts = format!(
            "The result of `{tool}` (server \"{server}\") is too large to show whole: about \
             {estimate} tokens, over the budget of {budget_tokens}. It has {} content block(s){}, \
             {total_chars} characters as text.",
            result.content.len(),
            if result.structured_content.is_some() {
                " plus structuredContent"
            } else {
                ""
            },
        );
        let starts = page_starts(&text, self.page_chars);
        let pages = starts.len();
        let stored = self.store(&text, starts);
        let (header, footer) = match &stored {
            Ok(handle) => (
                format!(
                    "[mcp-harness] {facts} It was saved as {pages} page(s) of at most {} \
                     characters; page 1 starts with the text below. Read any page with the \
                     `{READ_OUTPUT_TOOL}` tool, e.g. {{\"handle\": \"{handle}\", \"page\": {}}}.",
                    self.page_chars,
                    pages.min(2),
                ),
                format!("[preview: characters 1-{shown} of {total_chars}]"),
            ),
            Err(error) => (
                format!(
                    "[mcp-harness] {facts} It could not be saved ({error}), so only its start \
                     is shown."
                ),
                format!("[cut: characters 1-{shown} of {total_chars} shown; the rest is lost]"),
            ),
        };
        let saved = stored.is_ok();
        let summary = summarize(
            &result,
            header,
            preview,
            footer,
            budget_tokens,
            (output_schema, saved),
        );
        match stored {
            Ok(handle) => Spilled::Stored {
                summary,
                handle,
                pages,
                total_chars,
            },
            Err(error) => Spilled::Truncated { summary, error },
        }
    }

    fn store(&self, text: &str, starts: Vec<u64>) -> Result<OutputHandle, OutputError> {
        let bytes = text.len() as u64;
        if bytes > self.max_total_bytes {
            return Err(OutputError::TooLarge {
                bytes,
                max: self.max_total_bytes,
            });
        }
        let handle = OutputHandle::new();
        {
            let mut index = self.lock();
            self.evict(&mut index, bytes);
            index.total += bytes;
            index.entries.push_back(Entry {
                handle: handle.clone(),
                bytes,
                starts: Some(Arc::new(starts)),
            });
        }
        let path = self.root.join(handle.file_name());
        if let Err(error) = write_new_private(&path, text.as_bytes()) {
            let _ = fs::remove_file(&path);
            let mut index = self.lock();
            if let Some(at) = index.entries.iter().position(|e| e.handle == handle) {
                index.entries.remove(at);
                index.total = index.total.saturating_sub(bytes);
            }
            return Err(OutputError::io(&path, error));
        }
        // Another store may have evicted this entry while it was being written, and removed
        // no file then (there was none yet): it goes now, or it would sit outside the bound.
        if !self.lock().entries.iter().any(|e| e.handle == handle) {
            let _ = fs::remove_file(&path);
            return Err(OutputError::UnknownHandle {
                handle: handle.to_string(),
                max_mib: self.max_total_bytes / (1024 * 1024),
            });
        }
        Ok(handle)
    }

    /// Page `page` (from 1) of the stored output `handle`.
    pub(crate) fn read_page(&self, handle: &str, page: usize) -> Result<OutputPage, OutputError> {
        let handle = OutputHandle::parse(handle)?;
        let path = self.root.join(handle.file_name());
        let starts = {
            let index = self.lock();
            let entry = index
                .entries
                .iter()
                .find(|e| e.handle == handle)
                .ok_or_else(|| OutputError::UnknownHandle {
                    handle: handle.to_string(),
                    max_mib: self.max_total_bytes / (1024 * 1024),
                })?;
            entry.starts.clone()
        };
        let starts = match starts {
            Some(starts) => starts,
            None => {
                let mut text = String::new();
                File::open(&path)
                    .and_then(|mut f| f.read_to_string(&mut text))
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::InvalidData => OutputError::Corrupt {
                            handle: handle.to_string(),
                        },
                        _ => OutputError::io(&path, e),
                    })?;
                let starts = Arc::new(page_starts(&text, self.page_chars));
                let mut index = self.lock();
                if let Some(entry) = index.entries.iter_mut().find(|e| e.handle == handle) {
                    entry.starts = Some(starts.clone());
                }
                starts
            }
        };
        let pages = starts.len();
        if page == 0 || page > pages {
            return Err(OutputError::PageOutOfRange {
                handle: handle.to_string(),
                page,
                pages,
            });
        }
        let mut file = File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => OutputError::UnknownHandle {
                handle: handle.to_string(),
                max_mib: self.max_total_bytes / (1024 * 1024),
            },
            _ => OutputError::io(&path, e),
        })?;
        let start = starts[page - 1];
        let end = match starts.get(page) {
            Some(end) => *end,
            None => file
                .metadata()
                .map_err(|e| OutputError::io(&path, e))?
                .len(),
        };
        let len = usize::try_from(end.saturating_sub(start)).map_err(|_| OutputError::Corrupt {
            handle: handle.to_string(),
        })?;
        let mut bytes = vec![0; len];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(|e| OutputError::io(&path, e))?;
        let text = String::from_utf8(bytes).map_err(|_| OutputError::Corrupt {
            handle: handle.to_string(),
        })?;
        Ok(OutputPage {
            handle: handle.to_string(),
            page,
            pages,
            text,
        })
    }

    /// Runs [`READ_OUTPUT_TOOL`] with the arguments the model sent, once they match the tool's
    /// own input schema (the one the model saw: no other property, `page` at least 1).
    pub(crate) fn read_output(&self, args: &JsonObject) -> Result<OutputPage, OutputError> {
        read_output_validator().validate(args).map_err(|e| {
            let reason = match e {
                ArgumentError::Invalid {
                    violations, total, ..
                } => {
                    let listed = violations
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ");
                    let more = total.saturating_sub(violations.len());
                    if more > 0 {
                        format!("{listed} (and {more} more)")
                    } else {
                        listed
                    }
                }
                other => other.to_string(),
            };
            OutputError::BadArguments { reason }
        })?;
        let handle = match args.get("handle") {
            Some(Value::String(handle)) => handle,
            _ => {
                return Err(OutputError::BadArguments {
                    reason: "`handle` (a string) is required".to_string(),
                });
            }
        };
        let page = match args.get("page") {
            None | Some(Value::Null) => 1,
            // JSON Schema's `integer` takes `2.0` too: what the schema accepts is read.
            Some(value) => value
                .as_u64()
                .or_else(|| {
                    let p = value.as_f64()?;
                    (p.fract() == 0.0 && p >= 1.0 && p <= u32::MAX as f64).then_some(p as u64)
                })
                .and_then(|p| usize::try_from(p).ok())
                .ok_or_else(|| OutputError::BadArguments {
                    reason: "`page` must be a positive integer".to_string(),
                })?,
        };
        self.read_page(handle, page)
    }
}

/// The validator of [`READ_OUTPUT_TOOL`]'s arguments, compiled once from the schema of
/// [`read_output_tool`] itself, so what is accepted is what the model was told.
fn read_output_validator() -> &'static ArgumentValidator {
    static VALIDATOR: OnceLock<ArgumentValidator> = OnceLock::new();
    VALIDATOR
        .get_or_init(|| ArgumentValidator::new(READ_OUTPUT_TOOL, read_output_tool().input_schema))
}

fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.flush()
}

/// Byte offsets at which each page of `page_chars` chars starts; an empty text has one empty
/// page.
fn page_starts(text: &str, page_chars: usize) -> Vec<u64> {
    let page_chars = page_chars.max(1);
    let mut starts = vec![0];
    for (n, (at, _)) in text.char_indices().enumerate() {
        if n > 0 && n % page_chars == 0 {
            starts.push(at as u64);
        }
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_removes_only_stores_whose_owner_is_gone() {
        let temp = std::env::temp_dir().join(format!("mcp-harness-sweep-{}", OutputHandle::new()));
        let dir = |name: &str| {
            let dir = temp.join(name);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("out-x.txt"), "stored").unwrap();
            dir
        };
        // Its owner died: the lock file is there and nobody holds it.
        let dead = dir("mcp-harness-output-dead");
        fs::write(dead.join(LOCK_FILE), "").unwrap();
        // Alive: the lock is held (a second open file description cannot take it).
        let alive = dir("mcp-harness-output-alive");
        let held = lock_dir(&alive).unwrap();
        // No lock file: an older version's, or one being created.
        let unlocked = dir("mcp-harness-output-old");
        // Not ours, whatever it holds.
        let other = dir("other-output");
        fs::write(other.join(LOCK_FILE), "").unwrap();
        // A lock file that is a link is not one the store made.
        let linked = dir("mcp-harness-output-linked");
        #[cfg(unix)]
        std::os::unix::fs::symlink(dead.join("out-x.txt"), linked.join(LOCK_FILE)).unwrap();

        sweep_orphans(&temp);
        assert!(!dead.exists());
        for kept in [&alive, &unlocked, &other, &linked] {
            assert!(kept.join("out-x.txt").exists(), "{}", kept.display());
        }
        drop(held);
        sweep_orphans(&temp);
        assert!(!alive.exists(), "its lock was released");
        fs::remove_dir_all(&temp).unwrap();
    }

    #[test]
    fn handles_are_strict() {
        let good = OutputHandle::new();
        assert!(OutputHandle::parse(good.as_str()).is_ok());
        for bad in [
            "",
            "out-",
            "../etc/passwd",
            "out-../../x",
            "out-0123456789abcdef0123456789ABCDEF",
            "out-0123456789abcdef0123456789abcde",
            "out-0123456789abcdef0123456789abcdef0",
            "out-0123456789abcdef0123456789abcdef/",
            "OUT-0123456789abcdef0123456789abcdef",
            "/tmp/out-0123456789abcdef0123456789abcdef",
        ] {
            assert!(
                matches!(OutputHandle::parse(bad), Err(OutputError::BadHandle { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn pages_split_on_char_boundaries() {
        let text = "aé€😀".repeat(3);
        let starts = page_starts(&text, 5);
        assert_eq!(starts.len(), 3);
        for &s in &starts {
            assert!(text.is_char_boundary(s as usize));
        }
        assert_eq!(page_starts("", 10), vec![0]);
        assert_eq!(page_starts("abcd", 2), vec![0, 2]);
    }

    #[test]
    fn budget_can_only_be_raised_up_to_the_cap() {
        let mut tool = read_output_tool();
        assert_eq!(budget_for(&tool, 100, 1000), 100);
        let mut meta = rmcp::model::MetaObject::default();
        meta.insert(MAX_OUTPUT_TOKENS_META.to_string(), json!(500));
        tool.meta = Some(meta.clone());
        assert_eq!(budget_for(&tool, 100, 1000), 500);
        meta.insert(MAX_OUTPUT_TOKENS_META.to_string(), json!(5000));
        tool.meta = Some(meta.clone());
        assert_eq!(budget_for(&tool, 100, 1000), 1000);
        meta.insert(MAX_OUTPUT_TOKENS_META.to_string(), json!(10));
        tool.meta = Some(meta.clone());
        assert_eq!(budget_for(&tool, 100, 1000), 100);
        meta.insert(MAX_OUTPUT_TOKENS_META.to_string(), json!("lots"));
        tool.meta = Some(meta);
        assert_eq!(budget_for(&tool, 100, 1000), 100);
    }

    #[test]
    fn the_tool_definition_is_well_formed() {
        let tool = read_output_tool();
        assert_eq!(tool.name, READ_OUTPUT_TOOL);
        let validator =
            super::super::validate::ArgumentValidator::new(READ_OUTPUT_TOOL, tool.input_schema);
        let handle = OutputHandle::new();
        let ok = json!({"handle": handle.as_str(), "page": 2});
        assert!(validator.validate(ok.as_object().unwrap()).is_ok());
        let bad = json!({"handle": "../x", "page": 0});
        assert!(validator.validate(bad.as_object().unwrap()).is_err());
        assert_eq!(tool.annotations.and_then(|a| a.read_only_hint), Some(true));
    }
}

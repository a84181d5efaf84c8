//! What a server said on the wire that rmcp's typed model drops, kept beside the session.
//!
//! rmcp 3.11 models the 2026 task extension (SEP-2663) and no longer carries the 2025-11-25
//! task fields (SEP-1686): a tool's `execution.taskSupport`, the server's
//! `capabilities.tasks.requests.tools.call`, and a task's `ttl` and `pollInterval` (rmcp reads
//! `ttlMs` and `pollIntervalMs`). Without the first two a client cannot call a tool that
//! requires task augmentation; without the last two a task passed on says it lives forever and
//! drops the server's polling advice. [`WireNotes`] records exactly those facts from the raw
//! messages, before rmcp decodes them; nothing else is read or kept.
//!
//! Invariants:
//! - notes only ever describe the connection they were created for (one [`WireNotes`] per
//!   connect attempt) and are updated from the newest `tools/list` page that names a tool, so a
//!   tool that drops `execution` on a later listing is no longer treated as a task tool;
//! - observing never changes, delays or drops a message: the tap reads bytes as they pass;
//! - a line larger than [`MAX_OBSERVED_LINE`] is passed through unobserved (and the tool keeps
//!   its previous note), bounding the memory the tap holds;
//! - a task's timing is the one of the newest message that gave it (a task, a `tasks/get`
//!   answer, a status notification of at most [`MAX_TIMED_MESSAGE`] bytes) of a server that
//!   declared tasks at `initialize`, for the last [`MAX_TIMED_TASKS`] tasks;
//! - transports that cannot see raw messages (a Streamable HTTP response sent as a single JSON
//!   body is decoded inside rmcp) leave the notes empty: such tools are called plainly, which
//!   a server that requires tasks refuses with its own error.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};

use memchr::memmem::Finder;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The longest single message the tap parses (larger ones pass through unobserved).
pub const MAX_OBSERVED_LINE: usize = 16 * 1024 * 1024;

/// A tool's declared support for task-augmented calls (`execution.taskSupport`, SEP-1686).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// No task augmentation (the default when the tool declares nothing).
    #[default]
    Forbidden,
    /// The client may call it as a task or plainly.
    Optional,
    /// The client must call it as a task.
    Required,
}

/// How many recent anomalies a connection remembers.
const RECENT_ANOMALIES: usize = 8;

/// At most this many of a connection's anomalies are logged per [`LOG_WINDOW`]; the others are
/// counted, and the next one logged says how many were not: a server sending a flood of them
/// cannot flood the log.
const LOG_BUDGET: u32 = 10;
/// See [`LOG_BUDGET`].
const LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Something a connection received that it could not deliver, kept for the error of a request
/// that then times out.
#[derive(Debug, Default)]
pub(crate) struct Anomalies {
    seq: u64,
    recent: VecDeque<(u64, String)>,
    /// Responses whose id matched no request.
    pub(crate) unknown_ids: u64,
    /// Messages that could not be decoded, or were over the cap, and answered nothing.
    pub(crate) undeliverable: u64,
    /// When the current log window began, how many were logged in it, and how many were not
    /// logged since the last one that was ([`LOG_BUDGET`]).
    window: Option<std::time::Instant>,
    logged: u32,
    unlogged: u64,
}

impl Anomalies {
    pub(crate) fn mark(&self) -> u64 {
        self.seq
    }

    /// Whether the anomaly just recorded is logged: `Some` with what to add to its line (how
    /// many before it were not), `None` past this window's [`LOG_BUDGET`].
    fn log_turn(&mut self) -> Option<String> {
        let now = std::time::Instant::now();
        if self
            .window
            .is_none_or(|w| now.duration_since(w) >= LOG_WINDOW)
        {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged >= LOG_BUDGET {
            self.unlogged += 1;
            return None;
        }
        self.logged += 1;
        Some(match std::mem::take(&mut self.unlogged) {
            0 => String::new(),
            n => format!(" ({n} more like it before this one were not logged)"),
        })
    }

    pub(crate) fn record(&mut self, what: String) {
        self.seq += 1;
        if self.recent.len() == RECENT_ANOMALIES {
            self.recent.pop_front();
        }
        self.recent.push_back((self.seq, what));
    }

    pub(crate) fn since(&self, mark: u64) -> Option<String> {
        let seen: Vec<&str> = self
            .recent
            .iter()
            .filter(|(seq, _)| *seq > mark)
            .map(|(_, what)| what.as_str())
            .collect();
        let count = self.seq.saturating_sub(mark) as usize;
        if count == 0 {
            return None;
        }
        let more = count.saturating_sub(seen.len());
        let mut text = seen.join("; ");
        if more > 0 {
            text.push_str(&format!(" (and {more} more)"));
        }
        Some(text)
    }
}

/// The largest message whose task timing is read: a task, a `tasks/get` answer or a status
/// notification is far smaller; a tool's output that happens to hold the words is not parsed
/// twice.
pub const MAX_TIMED_MESSAGE: usize = 64 * 1024;

/// How many tasks' timings a connection keeps (the oldest go first).
pub const MAX_TIMED_TASKS: usize = 1024;

/// The longest task id whose timing is kept, in bytes.
pub const MAX_TIMED_ID: usize = 256;

/// What a 2025-11-25 server said of a task's lifetime, as it said it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskTiming {
    /// `ttl` (milliseconds, or `null`: unlimited), when the message had it.
    pub ttl: Option<Value>,
    /// `pollInterval` (milliseconds), when the message had it.
    pub poll_interval: Option<Value>,
}

#[derive(Debug, Default)]
struct Notes {
    task_tools: HashMap<String, TaskSupport>,
    task_tool_calls: bool,
    timings: HashMap<String, TaskTiming>,
    timed: VecDeque<String>,
}

impl Notes {
    fn time(&mut self, task_id: &str, timing: TaskTiming) {
        if self.timings.insert(task_id.to_string(), timing).is_none() {
            self.timed.push_back(task_id.to_string());
            while self.timed.len() > MAX_TIMED_TASKS {
                if let Some(oldest) = self.timed.pop_front() {
                    self.timings.remove(&oldest);
                }
            }
        }
    }
}

/// Facts from the raw messages of one connection. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct WireNotes {
    notes: Arc<Mutex<Notes>>,
    anomalies: Arc<Mutex<Anomalies>>,
    /// `notifications/tools/list_changed` received, counted as each is decoded (before rmcp
    /// handles it, and before anything the server sent after it); one rmcp would refuse is
    /// not counted, since no listing follows it.
    tools_changed: Arc<std::sync::atomic::AtomicU64>,
    /// The server declared tasks at `initialize` (`capabilities.tasks`): only then are its
    /// messages searched for a task's timing (a search of every message otherwise).
    tasks: Arc<std::sync::atomic::AtomicBool>,
}

impl WireNotes {
    /// How many `notifications/tools/list_changed` this connection received so far: a
    /// listing started when this was `n` shows the tools as of the `n`th.
    pub fn tools_changed(&self) -> u64 {
        self.tools_changed
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Counts a decoded `notifications/tools/list_changed`.
    pub(crate) fn tools_notice(&self) {
        self.tools_changed
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// What `tool` declared in the newest listing this connection saw.
    pub fn task_support(&self, tool: &str) -> TaskSupport {
        self.lock()
            .task_tools
            .get(tool)
            .copied()
            .unwrap_or_default()
    }

    /// Whether the server declared task-augmented `tools/call`
    /// (`capabilities.tasks.requests.tools.call`, SEP-1686).
    pub fn task_tool_calls(&self) -> bool {
        self.lock().task_tool_calls
    }

    /// The `ttl` and `pollInterval` the server last gave for its task `task_id` (SEP-1686),
    /// which rmcp's decoding of the task drops.
    pub fn task_timing(&self, task_id: &str) -> Option<TaskTiming> {
        self.lock().timings.get(task_id).cloned()
    }

    /// Whether a call of `tool` must be sent as a SEP-1686 task.
    pub fn requires_task(&self, tool: &str) -> bool {
        let notes = self.lock();
        notes.task_tool_calls && notes.task_tools.get(tool) == Some(&TaskSupport::Required)
    }

    /// Where the connection's record of undeliverable messages stands now; pass it to
    /// [`WireNotes::anomalies_since`] when a request sent after this times out.
    pub fn anomaly_mark(&self) -> u64 {
        self.anomalies().mark()
    }

    /// What the server sent since `mark` that answered no request or could not be decoded (a
    /// response with an unknown id, an undecodable or oversized message), most recent last.
    pub fn anomalies_since(&self, mark: u64) -> Option<String> {
        self.anomalies().since(mark)
    }

    /// How many responses matched no request, and how many messages could not be delivered
    /// (undecodable or over the cap) and answered nothing, on this connection.
    pub fn counts(&self) -> (u64, u64) {
        let a = self.anomalies();
        (a.unknown_ids, a.undeliverable)
    }

    /// Records an anomaly (counted by `count`); `Some` when it is to be logged, with what to
    /// add to the line (see [`LOG_BUDGET`]).
    #[must_use]
    pub(crate) fn anomaly(&self, what: &str, count: impl FnOnce(&mut Anomalies)) -> Option<String> {
        let mut a = self.anomalies();
        count(&mut a);
        a.record(what.to_string());
        a.log_turn()
    }

    fn anomalies(&self) -> std::sync::MutexGuard<'_, Anomalies> {
        self.anomalies.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Observes one raw JSON-RPC message (or batch) from the server.
    pub fn observe(&self, message: &[u8]) {
        if message.len() <= MAX_TIMED_MESSAGE
            && self.tasks.load(std::sync::atomic::Ordering::Relaxed)
            && (TTL.find(message).is_some() || POLL_INTERVAL.find(message).is_some())
        {
            self.observe_timing(message);
        }
        // Only initialize results and tool listings matter; skip the rest without parsing.
        if !(INPUT_SCHEMA.find(message).is_some() || CAPABILITIES.find(message).is_some()) {
            return;
        }
        // A message without `"taskSupport"` or `"tasks"` teaches nothing, and has nothing to
        // make us forget while no task tool or task capability is noted: the common listing is
        // not parsed a second time.
        if TASK.find(message).is_none() {
            let notes = self.lock();
            if notes.task_tools.is_empty() && !notes.task_tool_calls {
                return;
            }
        }
        let Ok(value) = serde_json::from_slice::<Value>(message) else {
            return;
        };
        match value {
            Value::Array(batch) => batch.iter().for_each(|m| self.observe_value(m)),
            one => self.observe_value(&one),
        }
    }

    /// Notes the timing of the task a message shows: a `CreateTaskResult` (`result.task`), a
    /// `tasks/get` answer (`result`), or a `notifications/tasks/status` (`params`).
    fn observe_timing(&self, message: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(message) else {
            return;
        };
        let one = |message: &Value| {
            let task = match (message.get("result"), message.get("method")) {
                (Some(result), _) => result.get("task").unwrap_or(result),
                (None, Some(method)) if method == "notifications/tasks/status" => {
                    message.get("params")?
                }
                _ => return None,
            };
            // A task id is short; a longer one is not kept (1024 of them would hold megabytes).
            let id = task
                .get("taskId")?
                .as_str()
                .filter(|id| id.len() <= MAX_TIMED_ID)?;
            let timing = TaskTiming {
                ttl: task
                    .get("ttl")
                    .filter(|v| v.is_null() || v.is_number())
                    .cloned(),
                poll_interval: task.get("pollInterval").filter(|v| v.is_number()).cloned(),
            };
            (timing != TaskTiming::default()).then(|| (id.to_string(), timing))
        };
        let found: Vec<_> = match &value {
            Value::Array(batch) => batch.iter().filter_map(one).collect(),
            message => one(message).into_iter().collect(),
        };
        if found.is_empty() {
            return;
        }
        let mut notes = self.lock();
        for (id, timing) in found {
            notes.time(&id, timing);
        }
    }

    fn observe_value(&self, message: &Value) {
        let Some(result) = message.get("result") else {
            return;
        };
        if let Some(capabilities) = result.get("capabilities") {
            let tasks = capabilities.get("tasks").is_some_and(Value::is_object);
            self.tasks
                .store(tasks, std::sync::atomic::Ordering::Relaxed);
            let calls = capabilities
                .pointer("/tasks/requests/tools/call")
                .is_some_and(Value::is_object);
            self.lock().task_tool_calls = calls;
        }
        if let Some(tools) = result.get("tools").and_then(Value::as_array) {
            let mut notes = self.lock();
            for tool in tools {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let support = match tool
                    .pointer("/execution/taskSupport")
                    .and_then(Value::as_str)
                {
                    Some("required") => TaskSupport::Required,
                    Some("optional") => TaskSupport::Optional,
                    _ => TaskSupport::Forbidden,
                };
                if support == TaskSupport::Forbidden {
                    notes.task_tools.remove(name);
                } else {
                    notes.task_tools.insert(name.to_string(), support);
                }
            }
        }
    }
}

// What [`WireNotes::observe`] looks for in every message, each searcher built once: building
// one costs more than searching a short message with it.
static INPUT_SCHEMA: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"inputSchema\""));
static CAPABILITIES: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"capabilities\""));
static TASK: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"task"));
static TTL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"ttl\""));
static POLL_INTERVAL: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"\"pollInterval\""));

/// An [`AsyncRead`] of newline-delimited JSON-RPC that shows every line to [`WireNotes`] as it
/// passes, unchanged. The built-in connectors no longer use it: their
/// `LineTransport` (`lines.rs`) shows each line to the notes as it decodes it.
pub struct TapRead<R> {
    inner: R,
    notes: WireNotes,
    line: Vec<u8>,
    oversized: bool,
}

impl<R> TapRead<R> {
    /// Wraps `inner`, reporting to `notes`.
    pub fn new(inner: R, notes: WireNotes) -> Self {
        Self {
            inner,
            notes,
            line: Vec::new(),
            oversized: false,
        }
    }

    fn seen(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (part, complete) = match memchr::memchr(b'\n', bytes) {
                Some(i) => (&bytes[..i], Some(i + 1)),
                None => (bytes, None),
            };
            // A whole line within one read (the common case) is observed where it is.
            if let Some(next) = complete
                && self.line.is_empty()
                && !self.oversized
            {
                if part.len() <= MAX_OBSERVED_LINE {
                    self.notes.observe(part);
                }
                bytes = &bytes[next..];
                continue;
            }
            if !self.oversized {
                if self.line.len() + part.len() > MAX_OBSERVED_LINE {
                    self.oversized = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            match complete {
                Some(next) => {
                    if !self.oversized {
                        self.notes.observe(&self.line);
                    }
                    self.line.clear();
                    self.oversized = false;
                    bytes = &bytes[next..];
                }
                None => return,
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TapRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            this.seen(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{"list":{},"requests":{"tools":{"call":{}}}}},"serverInfo":{"name":"s","version":"1"}}}"#;
    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"research","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},{"name":"maybe","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}},{"name":"plain","inputSchema":{"type":"object"}}]}}"#;

    #[test]
    fn a_flood_of_anomalies_logs_a_few_per_window_and_says_how_many_it_did_not() {
        let notes = WireNotes::default();
        let logged: Vec<Option<String>> = (0..25)
            .map(|n| notes.anomaly(&format!("message {n}"), |a| a.unknown_ids += 1))
            .collect();
        let shown = logged.iter().filter(|l| l.is_some()).count();
        assert_eq!(shown, LOG_BUDGET as usize);
        assert!(
            logged[..LOG_BUDGET as usize]
                .iter()
                .all(|l| l.as_deref() == Some(""))
        );
        assert_eq!(notes.counts(), (25, 0), "every one is counted");
        // The next window: the first one logged says how many were not.
        // A window that began a full window ago (on a clock younger than that: any earlier
        // mark is past the window's length from its own start).
        let now = std::time::Instant::now();
        notes.anomalies().window = Some(now.checked_sub(LOG_WINDOW).unwrap_or(now));
        if notes.anomalies().window == Some(now) {
            return; // the machine is up for less than a window: nothing to look back on
        }
        let next = notes.anomaly("message 25", |a| a.unknown_ids += 1);
        assert_eq!(
            next.as_deref(),
            Some(" (15 more like it before this one were not logged)")
        );
    }

    #[tokio::test]
    async fn the_tap_passes_bytes_unchanged_and_notes_task_tools_split_across_reads() {
        let stream = format!("{INIT}\n{LIST}\n");
        let notes = WireNotes::default();
        // One byte at a time: lines are reassembled across reads.
        let slow = tokio_test_reader(stream.as_bytes());
        let mut tap = TapRead::new(slow, notes.clone());
        let mut out = Vec::new();
        tap.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, stream.as_bytes());
        assert!(notes.task_tool_calls());
        assert_eq!(notes.task_support("research"), TaskSupport::Required);
        assert_eq!(notes.task_support("maybe"), TaskSupport::Optional);
        assert_eq!(notes.task_support("plain"), TaskSupport::Forbidden);
        assert!(notes.requires_task("research"));
        assert!(!notes.requires_task("maybe"));
    }

    #[tokio::test]
    async fn whole_lines_in_one_read_are_noted_like_split_ones() {
        // A partial line first, then the rest with whole lines after it: both paths of the tap.
        let stream = format!("{INIT}\n{LIST}\n{INIT}\n");
        for split in [0, 7, INIT.len() + 1, stream.len()] {
            let notes = WireNotes::default();
            let mut tap = TapRead::new(tokio::io::empty(), notes.clone());
            tap.seen(&stream.as_bytes()[..split]);
            tap.seen(&stream.as_bytes()[split..]);
            assert!(tap.line.is_empty(), "split at {split}");
            assert!(notes.requires_task("research"), "split at {split}");
            assert_eq!(notes.task_support("maybe"), TaskSupport::Optional);
        }
        // A listing without task fields, with nothing noted, leaves nothing noted.
        let notes = WireNotes::default();
        notes.observe(
            br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a","inputSchema":{}}]}}"#,
        );
        assert_eq!(notes.task_support("a"), TaskSupport::Forbidden);
        assert!(notes.lock().task_tools.is_empty());
    }

    #[test]
    fn a_later_listing_without_execution_clears_the_note_and_capabilities_gate_it() {
        let notes = WireNotes::default();
        notes.observe(LIST.as_bytes());
        assert_eq!(notes.task_support("research"), TaskSupport::Required);
        assert!(
            !notes.requires_task("research"),
            "without the server capability, no task augmentation"
        );
        notes.observe(INIT.as_bytes());
        assert!(notes.requires_task("research"));
        notes.observe(
            br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"research","inputSchema":{}}]}}"#,
        );
        assert!(!notes.requires_task("research"));
        notes.observe(br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}"#);
        assert!(
            !notes.task_tool_calls(),
            "a new initialize result replaces the old"
        );
    }

    #[test]
    fn garbage_and_oversized_lines_are_ignored() {
        let notes = WireNotes::default();
        notes.observe(b"{\"inputSchema\": not json");
        let mut tap = TapRead::new(tokio::io::empty(), notes.clone());
        let mut huge = vec![b' '; MAX_OBSERVED_LINE + 1];
        huge.push(b'\n');
        tap.seen(&huge);
        assert!(
            tap.line.is_empty() && !tap.oversized,
            "reset after the newline"
        );
        tap.seen(format!("{LIST}\n").as_bytes());
        assert_eq!(notes.task_support("research"), TaskSupport::Required);
    }

    #[test]
    fn a_tasks_ttl_and_poll_interval_are_kept_from_each_shape_that_gives_them() {
        let notes = WireNotes::default();
        // Only a server that declared tasks is searched.
        notes.observe(br#"{"jsonrpc":"2.0","id":2,"result":{"taskId":"T0","ttl":1}}"#);
        assert!(notes.task_timing("T0").is_none());
        notes.observe(INIT.as_bytes());
        notes.observe(br#"{"jsonrpc":"2.0","id":3,"result":{"task":{"taskId":"T1","status":"working","createdAt":"a","lastUpdatedAt":"a","ttl":60000,"pollInterval":500}}}"#);
        let first = notes.task_timing("T1").expect("the created task's timing");
        assert_eq!(first.ttl, Some(serde_json::json!(60000)));
        assert_eq!(first.poll_interval, Some(serde_json::json!(500)));
        // A tasks/get answer and a status notification each replace it; `null` is unlimited.
        notes.observe(br#"{"jsonrpc":"2.0","id":4,"result":{"taskId":"T1","status":"working","ttl":null,"pollInterval":900}}"#);
        let got = notes.task_timing("T1").expect("timing");
        assert_eq!(got.ttl, Some(Value::Null));
        assert_eq!(got.poll_interval, Some(serde_json::json!(900)));
        notes.observe(br#"{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"T2","status":"working","ttl":5}}"#);
        assert_eq!(
            notes.task_timing("T2").and_then(|t| t.ttl),
            Some(serde_json::json!(5))
        );
        // Not a task, or not a number: nothing noted.
        notes.observe(
            br#"{"jsonrpc":"2.0","id":5,"result":{"structuredContent":{"ttl":1,"taskId":"T4"},"content":[]}}"#,
        );
        assert!(
            notes.task_timing("T4").is_none(),
            "a tool's output is no task"
        );
        notes.observe(br#"{"jsonrpc":"2.0","id":6,"result":{"taskId":"T3","ttl":"forever","pollInterval":{}}}"#);
        assert!(notes.task_timing("T3").is_none());
        let long = "L".repeat(MAX_TIMED_ID + 1);
        let line = format!(r#"{{"jsonrpc":"2.0","id":8,"result":{{"taskId":"{long}","ttl":1}}}}"#);
        notes.observe(line.as_bytes());
        assert!(
            notes.task_timing(&long).is_none(),
            "an over-long id is not kept"
        );
        // Bounded: the oldest tasks go first.
        for n in 0..MAX_TIMED_TASKS {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"taskId":"N{n}","ttl":1}}}}"#);
            notes.observe(line.as_bytes());
        }
        assert!(notes.task_timing("T1").is_none() && notes.task_timing("T2").is_none());
        assert!(notes.task_timing("N0").is_some());
        assert_eq!(notes.lock().timings.len(), MAX_TIMED_TASKS);
    }

    /// A reader that yields one byte per read.
    fn tokio_test_reader(bytes: &[u8]) -> impl AsyncRead + Unpin {
        struct OneByte(Vec<u8>, usize);
        impl AsyncRead for OneByte {
            fn poll_read(
                mut self: Pin<&mut Self>,
                _cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                if self.1 < self.0.len() {
                    let b = self.0[self.1];
                    buf.put_slice(&[b]);
                    self.1 += 1;
                }
                Poll::Ready(Ok(()))
            }
        }
        OneByte(bytes.to_vec(), 0)
    }
}

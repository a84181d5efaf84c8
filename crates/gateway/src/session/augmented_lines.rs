//! The stdio front of SEP-1686 pass-through (task-augmented requests of MCP 2025-11-25): the
//! translation of [`super::augmented_front`] applied to the lines of the one stdio client, so
//! it gets what a Streamable HTTP client gets.
//!
//! [`FrontRead`] sits between standard input and rmcp: each request line goes through
//! [`translate_request`]; the JSON-RPC id of a request the handler serves as a SEP-1686 one,
//! or whose answer needs an edit, is kept in [`Lines`]. [`FrontWrite`] sits between rmcp and
//! standard output: an answer line with such an id goes through [`translate_answer`]. The
//! handler asks [`Lines::front_request`] where the HTTP handler reads the request's
//! extensions.
//!
//! Invariants:
//! - a line is read (parsed) only while the front is active: before `initialize` while some
//!   server is still connecting or one declares task-augmented `tools/call`, after it only for
//!   a 2025-11-25 session while one declares them; every other line passes untouched, read
//!   straight into rmcp's buffer when no line is held;
//! - an answer line is held and its start compared with the awaited ids only while some
//!   answer needs an edit; it is parsed only when its id matches;
//! - a line longer than [`MAX_BODY`] passes untouched, in and out;
//! - a request line is translated only once rmcp has taken the line before it (one line handed
//!   out at a time), so the handler has seen `initialize` before the next line is judged;
//! - ids are never changed; at most [`AWAITED`] ids are kept (the oldest are forgotten: a
//!   request that never gets an answer cannot grow the list).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};

use rmcp::model::RequestId;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Shared;
use super::augmented_front::{
    Answer, MAX_BODY, VERSION, serves_augmented, translate_answer, translate_request,
};
use crate::sync::lock;

/// The most request ids kept while their answers are awaited.
const AWAITED: usize = 64;

/// How rmcp starts an answer line (`JsonRpcResponse` / `JsonRpcError` field order).
const ANSWER_START: &[u8] = br#"{"jsonrpc":"2.0","id":"#;

/// The stdio session's front state, shared by its reader, its writer and its handler.
pub(crate) struct Lines {
    shared: Arc<Shared>,
    /// The protocol version the client asked for at `initialize` (set by the handler).
    version: OnceLock<String>,
    /// Ids (as JSON text) of requests the front read, and what their answers need.
    awaited: Mutex<VecDeque<(String, Answer)>>,
    /// How many of `awaited` need an answer edit.
    edits: AtomicUsize,
}

impl Lines {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            version: OnceLock::new(),
            awaited: Mutex::new(VecDeque::new()),
            edits: AtomicUsize::new(0),
        }
    }

    /// The handler saw `initialize` asking for `version`.
    pub(crate) fn initialized(&self, version: &str) {
        let _ = self.version.set(version.to_string());
    }

    /// Whether the next request line may need translating (see the module doc).
    fn active(&self) -> bool {
        match self.version.get() {
            Some(version) => version == VERSION && serves_augmented(&self.shared),
            None => {
                serves_augmented(&self.shared)
                    || self
                        .shared
                        .runtime
                        .snapshot()
                        .servers
                        .values()
                        .any(|status| !status.state.is_settled())
            }
        }
    }

    /// A request line (without its newline) as rmcp should get it; `None`: untouched.
    fn request(&self, line: &[u8]) -> Option<Vec<u8>> {
        if !self.active() {
            return None;
        }
        let translated = translate_request(line, self.version.get().is_some());
        if let Some(id) = &translated.front_id
            && let Ok(key) = serde_json::to_string(id)
        {
            let mut awaited = lock(&self.awaited);
            if awaited.len() >= AWAITED
                && let Some((_, forgotten)) = awaited.pop_front()
                && forgotten != Answer::Untouched
            {
                self.edits.fetch_sub(1, Ordering::Relaxed);
            }
            if translated.answer != Answer::Untouched {
                self.edits.fetch_add(1, Ordering::Relaxed);
            }
            awaited.push_back((key, translated.answer));
        }
        translated.rewritten
    }

    /// Whether the request `id` came through this front (the handler serves it as a SEP-1686
    /// request); forgets it when its answer needs no edit.
    pub(crate) fn front_request(&self, id: &RequestId) -> bool {
        let Ok(key) = serde_json::to_string(id) else {
            return false;
        };
        let mut awaited = lock(&self.awaited);
        let Some(at) = awaited.iter().position(|(awaited, _)| *awaited == key) else {
            return false;
        };
        if awaited[at].1 == Answer::Untouched {
            awaited.remove(at);
        }
        true
    }

    /// Whether some awaited answer needs an edit.
    fn awaits_answers(&self) -> bool {
        self.edits.load(Ordering::Relaxed) > 0
    }

    /// An answer line (without its newline) as the client should get it; `None`: untouched.
    fn answer(&self, line: &[u8]) -> Option<Vec<u8>> {
        let rest = line.strip_prefix(ANSWER_START)?;
        let answer = {
            let mut awaited = lock(&self.awaited);
            let at = awaited.iter().position(|(id, _)| {
                rest.strip_prefix(id.as_bytes()).is_some_and(|after| {
                    after.starts_with(br#","result""#) || after.starts_with(br#","error""#)
                })
            })?;
            let (_, answer) = awaited.remove(at)?;
            if answer != Answer::Untouched {
                self.edits.fetch_sub(1, Ordering::Relaxed);
            }
            answer
        };
        // An `initialize` answered while no upstream declares task-augmented calls (they
        // had all settled without) declares no tasks.
        if answer == Answer::Initialize && !serves_augmented(&self.shared) {
            return None;
        }
        translate_answer(answer, std::str::from_utf8(line).ok()?).map(String::into_bytes)
    }
}

/// Bytes ready to go on, from `pos`.
#[derive(Default)]
struct Ready {
    bytes: Vec<u8>,
    pos: usize,
}

impl Ready {
    fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn set(&mut self, bytes: Vec<u8>) {
        self.bytes = bytes;
        self.pos = 0;
    }
}

/// A request line, translated (newline restored) or as it came.
fn with_newline(translated: Option<Vec<u8>>, line: Vec<u8>) -> Vec<u8> {
    match translated {
        Some(mut rewritten) => {
            rewritten.push(b'\n');
            rewritten
        }
        None => line,
    }
}

/// Standard input as rmcp should read it (see the module doc).
pub(crate) struct FrontRead<R> {
    inner: R,
    lines: Arc<Lines>,
    /// Read but not handed out yet; starts a line unless `passing`.
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no newline (each byte is looked at once, however
    /// long the line).
    scanned: usize,
    /// One line (or a piece of a passing one) to hand out.
    out: Ready,
    /// Inside a line that passes untouched (begun while the front was idle, or too long).
    passing: bool,
    eof: bool,
}

impl<R> FrontRead<R> {
    pub(crate) fn new(inner: R, lines: Arc<Lines>) -> Self {
        Self {
            inner,
            lines,
            pending: Vec::new(),
            scanned: 0,
            out: Ready::default(),
            passing: false,
            eof: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for FrontRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Bounded: each turn hands out bytes, moves a line to `out`, or reads (EOF included).
        loop {
            if !this.out.is_empty() {
                let ready = &this.out.bytes[this.out.pos..];
                let n = ready.len().min(buf.remaining());
                buf.put_slice(&ready[..n]);
                this.out.pos += n;
                return Poll::Ready(Ok(()));
            }
            let from = this.scanned.min(this.pending.len());
            let newline = this.pending[from..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|at| at + from);
            this.scanned = match newline {
                Some(_) => 0,
                None => this.pending.len(),
            };
            match newline {
                Some(at) if this.passing => {
                    this.passing = false;
                    this.out.set(this.pending.drain(..=at).collect());
                    continue;
                }
                Some(at) => {
                    let line: Vec<u8> = this.pending.drain(..=at).collect();
                    let translated = this.lines.request(&line[..at]);
                    this.out.set(with_newline(translated, line));
                    continue;
                }
                None if this.passing && !this.pending.is_empty() => {
                    this.out.set(std::mem::take(&mut this.pending));
                    this.scanned = 0;
                    continue;
                }
                None if this.pending.len() > MAX_BODY || (this.eof && !this.pending.is_empty()) => {
                    this.passing = !this.eof;
                    this.out.set(std::mem::take(&mut this.pending));
                    this.scanned = 0;
                    continue;
                }
                None => {}
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.pending.is_empty() && !this.lines.active() {
                // The idle front: straight into rmcp's buffer.
                let before = buf.filled().len();
                ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
                if let Some(last) = buf.filled()[before..].last() {
                    this.passing = *last != b'\n';
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            }
            this.pending.extend_from_slice(read.filled());
        }
    }
}

/// Standard output as the client should read it (see the module doc).
pub(crate) struct FrontWrite<W> {
    inner: W,
    lines: Arc<Lines>,
    /// A line held whole (begun while an answer was awaited), from its start.
    held: Option<Vec<u8>>,
    /// Accepted, not yet written.
    out: Ready,
    /// Inside a line written through untouched.
    mid_line: bool,
}

impl<W> FrontWrite<W> {
    pub(crate) fn new(inner: W, lines: Arc<Lines>) -> Self {
        Self {
            inner,
            lines,
            held: None,
            out: Ready::default(),
            mid_line: false,
        }
    }
}

impl<W: AsyncWrite + Unpin> FrontWrite<W> {
    /// Writes `out` through.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Bounded: each turn writes at least a byte of `out` or fails.
        while !self.out.is_empty() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out.bytes[self.out.pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.pos += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for FrontWrite<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.held.is_none() && (this.mid_line || !this.lines.awaits_answers()) {
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
            if n > 0 {
                this.mid_line = buf[n - 1] != b'\n';
            }
            return Poll::Ready(Ok(n));
        }
        let held = this.held.get_or_insert_with(Vec::new);
        match buf.iter().position(|b| *b == b'\n') {
            Some(at) => {
                held.extend_from_slice(&buf[..=at]);
                let line = this.held.take().unwrap_or_default();
                let edited = this.lines.answer(&line[..line.len() - 1]);
                this.out.set(with_newline(edited, line));
                Poll::Ready(Ok(at + 1))
            }
            None => {
                held.extend_from_slice(buf);
                if held.len() > MAX_BODY {
                    // Too long to edit: it goes on as it is.
                    let line = this.held.take().unwrap_or_default();
                    this.out.set(line);
                    this.mid_line = true;
                }
                Poll::Ready(Ok(buf.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(line) = this.held.take() {
            this.out.set(line);
        }
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn key(id: &Value) -> String {
        serde_json::to_string(id).unwrap_or_default()
    }

    #[test]
    fn answer_start_is_rmcp_s() {
        let answer: rmcp::service::TxJsonRpcMessage<rmcp::RoleServer> =
            rmcp::model::ServerJsonRpcMessage::response(
                rmcp::model::ServerResult::empty(()),
                RequestId::Number(7),
            );
        let line = serde_json::to_vec(&answer).unwrap();
        let rest = line.strip_prefix(ANSWER_START).expect("rmcp's field order");
        assert!(rest.starts_with(format!("{},\"result\"", key(&7.into())).as_bytes()));
        let id = RequestId::String("a,b".into());
        let error: rmcp::service::TxJsonRpcMessage<rmcp::RoleServer> =
            rmcp::model::ServerJsonRpcMessage::error(
                rmcp::ErrorData::invalid_params("x", None),
                Some(id.clone()),
            );
        let line = serde_json::to_vec(&error).unwrap();
        let rest = line.strip_prefix(ANSWER_START).expect("rmcp's field order");
        let id = key(&serde_json::to_value(&id).unwrap());
        assert!(rest.starts_with(format!("{id},\"error\"").as_bytes()));
    }
}

//! What becomes of a raw server message that rmcp cannot route: one over the size cap, one that
//! does not decode (invalid UTF-8, nesting past the decoder's depth limit, a shape rmcp does not
//! accept), or a response to no request.
//!
//! Invariants:
//! - a message that answers a pending request never leaves that request waiting for its
//!   deadline: it is delivered (a listing with undecodable entries is delivered without them —
//!   each replaced by a placeholder marked [`UNDECODABLE_META_KEY`] with the reason, which the
//!   catalog hides) or the request fails at once with a [`WireFault`] error saying what arrived
//!   (too large: how large and which config key raises the cap; undecodable: why);
//! - the id of an undecodable or oversized message is recovered from the raw bytes by a lenient
//!   scan of the top-level `"id"` in bounded memory, wherever in the object it stands; a
//!   message with a `"method"` is the server's own request or notification and never fails one
//!   of ours;
//! - everything else that cannot be delivered (an unknown id, id-less garbage) is logged at warn
//!   with the server's name, counted, and remembered ([`WireNotes::anomalies_since`]) so a
//!   request that then times out can say what arrived instead;
//! - the decoded common case costs one `serde_json` decode, as before; the lenient paths run
//!   only for messages that failed it.

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorCode, ErrorData, Prompt, RequestId, Resource,
    ResourceTemplate, ServerJsonRpcMessage, ServerResult, Tool,
};
use serde_json::{Value, json};

use crate::wire::WireNotes;

/// The default cap on one message from a server (64 MiB); `maxMessageBytes` changes it.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The config key that sets the cap.
pub const MAX_MESSAGE_KEY: &str = "maxMessageBytes";
/// The `_meta` key of a placeholder that stands for a listed entry that could not be decoded;
/// its value is the reason. The catalog hides such entries (`catalog::sanitize`, same key).
pub const UNDECODABLE_META_KEY: &str = "io.mcp-harness/undecodable";
/// The JSON-RPC error code of an error the harness made up for a request because of what the
/// server sent (in the implementation-defined server error range).
pub const WIRE_FAULT_CODE: i32 = -32090;
/// The key in such an error's `data` that says it came from the harness, not the server.
const WIRE_FAULT_DATA_KEY: &str = "mcpHarnessWireFault";
/// How many recent anomalies a connection remembers.
const RECENT_ANOMALIES: usize = 8;
/// How many ids of cancelled requests are remembered (a late answer to one is not an anomaly).
const RECENT_CANCELLED: usize = 64;
/// Longest id text kept by the scan (longer ids are not recovered).
const MAX_ID_BYTES: usize = 256;

/// What went wrong with a message the server sent for a request, as the request's error says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireFault {
    /// The message was larger than the cap (`seen` bytes, or at least that many when it was
    /// cut off before its end).
    TooLarge {
        server: String,
        seen: usize,
        complete: bool,
        limit: usize,
    },
    /// The message could not be decoded.
    Undecodable { server: String, reason: String },
    /// On a channel that carries the answer to one request (a Streamable HTTP POST), the
    /// answer came with another id.
    WrongId {
        server: String,
        expected: String,
        got: String,
    },
}

impl std::fmt::Display for WireFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireFault::TooLarge {
                server,
                seen,
                complete,
                limit,
            } => write!(
                f,
                "server \"{server}\" sent a message of {}{seen} bytes, over the limit of {limit} bytes (raise `{MAX_MESSAGE_KEY}` of server \"{server}\")",
                if *complete { "" } else { "more than " },
            ),
            WireFault::Undecodable { server, reason } => write!(
                f,
                "server \"{server}\" answered with a message that cannot be decoded: {reason}"
            ),
            WireFault::WrongId {
                server,
                expected,
                got,
            } => write!(
                f,
                "server \"{server}\" answered request {expected} with id {got}, which matches no request"
            ),
        }
    }
}

impl WireFault {
    /// The JSON-RPC error that fails the request, recognisable by [`WireFault::is_wire_fault`].
    pub fn to_error(&self) -> ErrorData {
        let data = match self {
            WireFault::TooLarge {
                seen,
                complete,
                limit,
                ..
            } => {
                json!({"kind": "tooLarge", "bytes": seen, "complete": complete, "limit": limit, "configKey": MAX_MESSAGE_KEY})
            }
            WireFault::Undecodable { .. } => json!({"kind": "undecodable"}),
            WireFault::WrongId { .. } => json!({"kind": "wrongId"}),
        };
        ErrorData::new(
            ErrorCode(WIRE_FAULT_CODE),
            self.to_string(),
            Some(json!({ WIRE_FAULT_DATA_KEY: data })),
        )
    }

    /// Whether `error` was made by the harness from a [`WireFault`] (its message says what).
    pub fn is_wire_fault(error: &ErrorData) -> bool {
        error.code.0 == WIRE_FAULT_CODE
            && error
                .data
                .as_ref()
                .is_some_and(|d| d.get(WIRE_FAULT_DATA_KEY).is_some())
    }
}

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
}

impl Anomalies {
    pub(crate) fn mark(&self) -> u64 {
        self.seq
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

/// Per-connection decoding of raw server messages (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Inbound {
    server: Arc<str>,
    limit: usize,
    wire: WireNotes,
    /// Requests sent and not yet answered (only for transports that see both directions).
    pending: Option<Arc<Mutex<Pending>>>,
}

#[derive(Debug, Default)]
struct Pending {
    open: HashSet<RequestId>,
    cancelled: VecDeque<RequestId>,
}

/// What became of one raw message.
#[derive(Debug)]
pub enum Decoded {
    /// It decoded as sent.
    AsSent(ServerJsonRpcMessage),
    /// Deliver this instead: the listing without its undecodable entries, or the error of the
    /// request it answered.
    Replaced(ServerJsonRpcMessage),
    /// Nothing to deliver (logged, counted, remembered).
    Dropped,
}

impl From<Option<ServerJsonRpcMessage>> for Decoded {
    fn from(m: Option<ServerJsonRpcMessage>) -> Self {
        m.map_or(Decoded::Dropped, Decoded::Replaced)
    }
}

/// What the lenient top-level scan found in a message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scanned {
    pub id: Option<RequestId>,
    pub has_method: bool,
}

impl Inbound {
    /// Decoding for `server`'s connection with messages of at most `limit` bytes, reporting to
    /// `wire`. `track` keeps the ids of requests sent ([`Inbound::sent`]) to tell answers to no
    /// request apart (transports that see both directions: stdio, legacy SSE).
    pub fn new(server: &str, limit: usize, wire: WireNotes, track: bool) -> Self {
        Self {
            server: server.into(),
            limit: limit.max(1),
            wire,
            pending: track.then(Default::default),
        }
    }

    /// The cap on one message, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Notes a message sent to the server (a request's id is pending until answered).
    pub fn sent(&self, message: &ClientJsonRpcMessage) {
        let Some(pending) = &self.pending else {
            return;
        };
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        match message {
            ClientJsonRpcMessage::Request(r) => {
                p.open.insert(r.id.clone());
            }
            ClientJsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                    && p.open.remove(id)
                {
                    if p.cancelled.len() == RECENT_CANCELLED {
                        p.cancelled.pop_front();
                    }
                    p.cancelled.push_back(id.clone());
                }
            }
            _ => {}
        }
    }

    fn is_pending(&self, id: &RequestId) -> bool {
        self.pending.as_ref().is_some_and(|p| {
            p.lock()
                .unwrap_or_else(|e| e.into_inner())
                .open
                .contains(id)
        })
    }

    /// On a channel that answers `origin` only, a response with another id fails `origin`.
    pub(crate) fn wrong_id(
        &self,
        message: &ServerJsonRpcMessage,
        origin: Option<&RequestId>,
    ) -> Option<ServerJsonRpcMessage> {
        let origin = origin?;
        let got = match message {
            ServerJsonRpcMessage::Response(r) => Some(&r.id),
            ServerJsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => return None,
        };
        // An error without an id is the server's answer to a request it could not read: ours.
        let got = got?;
        if got == origin {
            return None;
        }
        let fault = WireFault::WrongId {
            server: self.server.to_string(),
            expected: origin.to_string(),
            got: got.to_string(),
        };
        tracing::warn!(server = %self.server, "{fault}; the request fails");
        self.wire.anomaly(
            &format!("a response with id {got}, which matches no request"),
            |a| a.unknown_ids += 1,
        );
        Some(ServerJsonRpcMessage::error(
            fault.to_error(),
            Some(origin.clone()),
        ))
    }

    /// Notes a decoded message; an answer to no request is logged, counted and remembered.
    fn received(&self, message: &ServerJsonRpcMessage) {
        let Some(pending) = &self.pending else {
            return;
        };
        let id = match message {
            ServerJsonRpcMessage::Response(r) => Some(&r.id),
            ServerJsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => return,
        };
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        let known = match id {
            Some(id) => p.open.remove(id) || p.cancelled.contains(id),
            None => false,
        };
        drop(p);
        if !known {
            let what = match id {
                Some(id) => format!("a response with id {id}, which matches no request"),
                None => "an error response without an id".to_string(),
            };
            tracing::warn!(server = %self.server, "the server sent {what}; ignored");
            self.wire.anomaly(&what, |a| a.unknown_ids += 1);
        }
    }

    /// Decodes one complete message (a line, an SSE event's data). `origin` is the request a
    /// transport knows the message answers (a Streamable HTTP POST's response stream), if any.
    /// `None` when nothing is to be delivered (it was logged and counted).
    pub fn decode(&self, bytes: &[u8], origin: Option<&RequestId>) -> Option<ServerJsonRpcMessage> {
        match self.decode_raw(bytes, origin) {
            Decoded::AsSent(m) | Decoded::Replaced(m) => Some(m),
            Decoded::Dropped => None,
        }
    }

    /// [`Inbound::decode`], saying whether the message is the one the server sent.
    pub fn decode_raw(&self, bytes: &[u8], origin: Option<&RequestId>) -> Decoded {
        // An empty event (an SSE priming event, a blank line) carries no message.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Decoded::Dropped;
        }
        self.wire.observe(bytes);
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        if bytes.len() > self.limit {
            return self
                .too_large(bytes.len(), true, scan(bytes), origin)
                .into();
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
            Ok(message) => {
                // A listing with an entry rmcp's types refuse decodes as a catch-all result;
                // keep the entries that decode.
                let salvaged = match &message {
                    ServerJsonRpcMessage::Response(r)
                        if matches!(
                            r.result,
                            ServerResult::CustomResult(_) | ServerResult::EmptyResult(_)
                        ) =>
                    {
                        salvage_listing(bytes)
                    }
                    _ => None,
                };
                if let Some(wrong) = self.wrong_id(&message, origin) {
                    return Decoded::Replaced(wrong);
                }
                match salvaged {
                    Some(m) => {
                        self.received(&m);
                        Decoded::Replaced(m)
                    }
                    None => {
                        self.received(&message);
                        Decoded::AsSent(message)
                    }
                }
            }
            Err(e) => self.undecodable(bytes, &e, origin).into(),
        }
    }

    fn undecodable(
        &self,
        bytes: &[u8],
        error: &serde_json::Error,
        origin: Option<&RequestId>,
    ) -> Option<ServerJsonRpcMessage> {
        let reason = match std::str::from_utf8(bytes) {
            Err(e) => format!("it is not valid UTF-8 (at byte {})", e.valid_up_to()),
            Ok(_) => error_reason(error),
        };
        let scanned = scan(bytes);
        if !scanned.has_method
            && scanned.id.is_some()
            && let Some(message) = salvage_listing(bytes)
        {
            self.received(&message);
            return Some(message);
        }
        let fault = WireFault::Undecodable {
            server: self.server.to_string(),
            reason: reason.clone(),
        };
        self.fail_or_note(fault, scanned, origin, || {
            format!("an undecodable message ({reason})")
        })
    }

    /// A message that could not be decoded for `reason`, seen where its bytes are gone (an SSE
    /// event the stream parser refused): it fails `origin`, or is logged and counted.
    pub fn undecodable_because(
        &self,
        reason: String,
        origin: Option<&RequestId>,
    ) -> Option<ServerJsonRpcMessage> {
        let fault = WireFault::Undecodable {
            server: self.server.to_string(),
            reason: reason.clone(),
        };
        self.fail_or_note(fault, Scanned::default(), origin, || {
            format!("an undecodable message ({reason})")
        })
    }

    /// A message of `seen` bytes (`complete`: its whole length; else at least that many) over
    /// the cap, with what the scan found in it.
    pub fn too_large(
        &self,
        seen: usize,
        complete: bool,
        scanned: Scanned,
        origin: Option<&RequestId>,
    ) -> Option<ServerJsonRpcMessage> {
        let fault = WireFault::TooLarge {
            server: self.server.to_string(),
            seen,
            complete,
            limit: self.limit,
        };
        let what = format!(
            "a message of {}{seen} bytes, over the limit of {} bytes (`{MAX_MESSAGE_KEY}`)",
            if complete { "" } else { "more than " },
            self.limit
        );
        self.fail_or_note(fault, scanned, origin, || what)
    }

    /// Fails the request the message answers, or logs, counts and remembers it.
    fn fail_or_note(
        &self,
        fault: WireFault,
        scanned: Scanned,
        origin: Option<&RequestId>,
        what: impl FnOnce() -> String,
    ) -> Option<ServerJsonRpcMessage> {
        let target = if scanned.has_method {
            None
        } else {
            match (&scanned.id, origin) {
                (Some(id), _) if self.is_pending(id) => Some(id.clone()),
                (Some(id), Some(o)) if id == o => Some(id.clone()),
                (None, Some(o)) => Some(o.clone()),
                _ => None,
            }
        };
        match target {
            Some(id) => {
                tracing::warn!(server = %self.server, id = %id, "{fault}; the request fails");
                if let Some(p) = &self.pending {
                    p.lock().unwrap_or_else(|e| e.into_inner()).open.remove(&id);
                }
                Some(ServerJsonRpcMessage::error(fault.to_error(), Some(id)))
            }
            None => {
                let what = what();
                let id = scanned
                    .id
                    .map(|id| format!(" (id {id})"))
                    .unwrap_or_default();
                tracing::warn!(server = %self.server, "the server sent {what}{id}; ignored");
                self.wire
                    .anomaly(&format!("{what}{id}"), |a| a.undeliverable += 1);
                None
            }
        }
    }
}

/// serde_json's reason without the position suffix's noise kept short.
fn error_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("recursion limit exceeded") {
        format!("it nests deeper than the decoder's limit of 128 levels ({text})")
    } else {
        text
    }
}

// ---------------------------------------------------------------------------------------------
// Lenient scanning

/// A streaming scan of one message's top level for `"id"` and `"method"`, in bounded memory:
/// bytes may be fed in pieces (an oversized line is scanned while it is discarded).
#[derive(Debug, Default)]
pub struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1: the next string is a key.
    expect_key: bool,
    /// The key being read (only its first bytes; `"id"` and `"method"` are short).
    key: Vec<u8>,
    key_is_string: bool,
    /// The top-level `"id"` value being captured.
    capture: Option<Vec<u8>>,
    found: Option<RequestId>,
    id_done: bool,
    has_method: bool,
}

impl IdScan {
    /// Scans the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if let Some(c) = self.capture.as_mut() {
                push_bounded(c, b);
            } else if self.key_is_string && !self.escaped && b != b'"' {
                push_bounded(&mut self.key, b);
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.key_is_string {
                    self.key_is_string = false;
                } else if self.depth == 1 && self.capture.is_some() {
                    self.finish_capture();
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key.clear();
                    self.key_is_string = true;
                } else if self.depth == 1
                    && let Some(c) = self.capture.as_mut()
                {
                    push_bounded(c, b);
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'{' {
                    self.expect_key = true;
                } else if self.depth == 1 && self.capture.is_some() {
                    // An object or array is no id.
                    self.capture = None;
                    self.id_done = true;
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_capture();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                if self.key == b"id" && !self.id_done {
                    self.capture = Some(Vec::new());
                } else if self.key == b"method" {
                    self.has_method = true;
                }
            }
            b',' if self.depth == 1 => {
                self.finish_capture();
                self.expect_key = true;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                if self.depth == 1
                    && let Some(c) = self.capture.as_mut()
                {
                    push_bounded(c, b);
                }
            }
        }
    }

    fn finish_capture(&mut self) {
        if let Some(raw) = self.capture.take() {
            self.id_done = true;
            self.found = serde_json::from_slice::<RequestId>(&raw).ok();
        }
    }

    /// What was found so far.
    pub fn scanned(&self) -> Scanned {
        Scanned {
            id: self.found.clone(),
            has_method: self.has_method,
        }
    }
}

fn push_bounded(buf: &mut Vec<u8>, b: u8) {
    if buf.len() <= MAX_ID_BYTES {
        buf.push(b);
    }
}

/// [`IdScan`] over a whole message.
pub fn scan(bytes: &[u8]) -> Scanned {
    let mut s = IdScan::default();
    s.feed(bytes);
    s.scanned()
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Just past the string starting at `start` (a `"`).
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let at = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[at] == b'\\' {
            i = at + 2;
        } else {
            return Some(at + 1);
        }
    }
}

/// Just past the value starting at `start`; tolerant: it tracks strings and nesting only, with
/// no recursion (any depth).
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// The members of the object at `span`: raw key bytes and value spans.
fn members(b: &[u8], span: Range<usize>) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    let b = &b[..span.end];
    let mut i = skip_ws(b, span.start);
    if *b.get(i)? != b'{' {
        return None;
    }
    i += 1;
    let mut out = Vec::new();
    loop {
        i = skip_ws(b, i);
        match *b.get(i)? {
            b'}' => return Some(out),
            b',' => i += 1,
            b'"' => {
                let key_end = string_end(b, i)?;
                let key = i + 1..key_end - 1;
                i = skip_ws(b, key_end);
                if *b.get(i)? != b':' {
                    return None;
                }
                i = skip_ws(b, i + 1);
                let end = value_end(b, i)?;
                out.push((key, i..end));
                i = end;
            }
            _ => return None,
        }
    }
}

/// The element spans of the array at `span`.
fn elements(b: &[u8], span: Range<usize>) -> Option<Vec<Range<usize>>> {
    let b = &b[..span.end];
    let mut i = skip_ws(b, span.start);
    if *b.get(i)? != b'[' {
        return None;
    }
    i += 1;
    let mut out = Vec::new();
    loop {
        i = skip_ws(b, i);
        match *b.get(i)? {
            b']' => return Some(out),
            b',' => i += 1,
            _ => {
                let end = value_end(b, i)?;
                out.push(i..end);
                i = end;
            }
        }
    }
}

fn member<'a>(
    b: &[u8],
    members: &'a [(Range<usize>, Range<usize>)],
    key: &str,
) -> Option<&'a Range<usize>> {
    members
        .iter()
        .find(|(k, _)| &b[k.clone()] == key.as_bytes())
        .map(|(_, v)| v)
}

/// A listing response with the entries that cannot be decoded replaced by placeholders (each
/// with its recovered name and the reason under [`UNDECODABLE_META_KEY`]); `None` when the
/// message is no listing, no entry is at fault, or it still does not decode.
fn salvage_listing(b: &[u8]) -> Option<ServerJsonRpcMessage> {
    let top = members(b, 0..b.len())?;
    let result = member(b, &top, "result")?.clone();
    let inner = members(b, result)?;
    let (key, list) = ["tools", "prompts", "resources", "resourceTemplates"]
        .into_iter()
        .find_map(|k| member(b, &inner, k).map(|v| (k, v.clone())))?;
    let mut replaced: Vec<(Range<usize>, Vec<u8>)> = Vec::new();
    for (n, entry) in elements(b, list)?.into_iter().enumerate() {
        // Decoded at the depth the entry has in the message (message, result, list, entry).
        let mut nested = Vec::with_capacity(entry.len() + 6);
        nested.extend_from_slice(b"[[[");
        nested.extend_from_slice(&b[entry.clone()]);
        nested.extend_from_slice(b"]]]");
        let decoded = match key {
            "tools" => serde_json::from_slice::<Vec<Vec<Vec<Tool>>>>(&nested).map(drop),
            "prompts" => serde_json::from_slice::<Vec<Vec<Vec<Prompt>>>>(&nested).map(drop),
            "resources" => serde_json::from_slice::<Vec<Vec<Vec<Resource>>>>(&nested).map(drop),
            _ => serde_json::from_slice::<Vec<Vec<Vec<ResourceTemplate>>>>(&nested).map(drop),
        };
        let Err(e) = decoded else { continue };
        let reason = match std::str::from_utf8(&b[entry.clone()]) {
            Err(u) => format!(
                "the entry is not valid UTF-8 (at byte {} of the entry)",
                u.valid_up_to()
            ),
            Ok(_) => format!("the entry cannot be decoded: {}", error_reason(&e)),
        };
        let fields = members(b, entry.clone()).unwrap_or_default();
        let text = |k: &str| {
            member(b, &fields, k)
                .and_then(|v| serde_json::from_slice::<String>(&b[v.clone()]).ok())
                .filter(|s| !s.is_empty())
        };
        let fallback = format!("undecodable-entry-{n}");
        let name = text("name").unwrap_or_else(|| fallback.clone());
        let meta = json!({ UNDECODABLE_META_KEY: reason });
        let placeholder: Value = match key {
            "tools" => {
                json!({"name": name, "inputSchema": {"type": "object"}, "_meta": meta})
            }
            "prompts" => json!({"name": name, "_meta": meta}),
            "resources" => json!({
                "uri": text("uri").unwrap_or_else(|| format!("undecodable:{fallback}")),
                "name": name, "_meta": meta
            }),
            _ => json!({
                "uriTemplate": text("uriTemplate").unwrap_or_else(|| format!("undecodable:{fallback}")),
                "name": name, "_meta": meta
            }),
        };
        replaced.push((entry, serde_json::to_vec(&placeholder).ok()?));
    }
    if replaced.is_empty() {
        return None;
    }
    let mut rebuilt = Vec::with_capacity(b.len());
    let mut at = 0;
    for (span, with) in &replaced {
        rebuilt.extend_from_slice(&b[at..span.start]);
        rebuilt.extend_from_slice(with);
        at = span.end;
    }
    rebuilt.extend_from_slice(&b[at..]);
    let message = serde_json::from_slice::<ServerJsonRpcMessage>(&rebuilt).ok()?;
    let listing = matches!(
        &message,
        ServerJsonRpcMessage::Response(r) if matches!(
            r.result,
            ServerResult::ListToolsResult(_)
                | ServerResult::ListPromptsResult(_)
                | ServerResult::ListResourcesResult(_)
                | ServerResult::ListResourceTemplatesResult(_)
        )
    );
    listing.then_some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn the_scan_finds_the_top_level_id_wherever_it_stands_and_skips_nested_ones() {
        let cases: [(&str, Option<RequestId>, bool); 6] = [
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
                Some(RequestId::Number(7)),
                false,
            ),
            (
                r#"{"result":{"id":1,"x":"\"id\":2"},"jsonrpc":"2.0","id":"a\"b"}"#,
                Some(RequestId::String("a\"b".into())),
                false,
            ),
            (r#"{"method":"x","id":3}"#, Some(RequestId::Number(3)), true),
            (r#"{"id":{"nested":1}}"#, None, false),
            (r#"[{"id":1}]"#, None, false),
            (
                r#"{"jsonrpc":"2.0" , "id" : 12 }"#,
                Some(RequestId::Number(12)),
                false,
            ),
        ];
        for (text, id, method) in cases {
            // Whole, and one byte at a time.
            assert_eq!(
                scan(text.as_bytes()),
                Scanned {
                    id: id.clone(),
                    has_method: method
                },
                "{text}"
            );
            let mut s = IdScan::default();
            for b in text.as_bytes() {
                s.feed(std::slice::from_ref(b));
            }
            assert_eq!(s.scanned().id, id, "{text}");
        }
        let huge = format!(r#"{{"result":{{"x":{}}},"id":9}}"#, deep(100_000));
        assert_eq!(scan(huge.as_bytes()).id, Some(RequestId::Number(9)));
    }

    #[test]
    fn an_undecodable_answer_to_a_pending_request_fails_it_with_the_reason() {
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), true);
        let request: ClientJsonRpcMessage = serde_json::from_value(
            json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x"}}),
        )
        .unwrap();
        inbound.sent(&request);
        let line = format!(
            r#"{{"jsonrpc":"2.0","result":{{"content":{}}},"id":4}}"#,
            deep(300)
        );
        let Some(ServerJsonRpcMessage::Error(e)) = inbound.decode(line.as_bytes(), None) else {
            panic!("expected an error for the request");
        };
        assert_eq!(e.id, Some(RequestId::Number(4)));
        assert!(WireFault::is_wire_fault(&e.error));
        assert!(
            e.error.message.contains("deeper than"),
            "{}",
            e.error.message
        );
        // Invalid UTF-8, and a message over the cap.
        inbound.sent(&request);
        let mut bad =
            br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"x"#.to_vec();
        bad.extend_from_slice(b"\xff\"}]}}");
        let Some(ServerJsonRpcMessage::Error(e)) = inbound.decode(&bad, None) else {
            panic!("expected an error for the request");
        };
        assert!(
            e.error.message.contains("not valid UTF-8"),
            "{}",
            e.error.message
        );
        // The same again: the request was answered, so this one matches nothing.
        let mark = inbound.wire.anomaly_mark();
        assert!(inbound.decode(&bad, None).is_none());
        assert!(
            inbound
                .wire
                .anomalies_since(mark)
                .unwrap()
                .contains("undecodable")
        );
        assert_eq!(inbound.wire.counts(), (0, 1));
    }

    #[test]
    fn an_answer_with_an_unknown_id_is_counted_and_remembered() {
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), true);
        let mark = inbound.wire.anomaly_mark();
        let m = inbound.decode(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#, None);
        assert!(m.is_some(), "delivered (rmcp ignores it)");
        let said = inbound.wire.anomalies_since(mark).unwrap();
        assert!(said.contains("id 99"), "{said}");
        assert_eq!(inbound.wire.counts(), (1, 0));
        assert!(
            inbound
                .wire
                .anomalies_since(inbound.wire.anomaly_mark())
                .is_none()
        );
    }

    #[test]
    fn a_listing_loses_only_the_entries_that_cannot_be_decoded() {
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), false);
        let schema = |inner: &str| format!(r#"{{"type":"object","properties":{{"a":{inner}}}}}"#);
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"name":"good","inputSchema":{}}},{{"name":"deep","inputSchema":{}}},{{"inputSchema":{{}}}}]}}}}"#,
            schema("{}"),
            schema(&deep(200)),
        );
        let Some(ServerJsonRpcMessage::Response(r)) = inbound.decode(line.as_bytes(), None) else {
            panic!("expected the listing");
        };
        let ServerResult::ListToolsResult(list) = r.result else {
            panic!("expected tools");
        };
        let names: Vec<_> = list.tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["good", "deep", "undecodable-entry-2"]);
        let why = |i: usize| {
            list.tools[i]
                .meta
                .as_ref()
                .and_then(|m| m.0.get(UNDECODABLE_META_KEY).cloned())
        };
        assert!(why(0).is_none());
        assert!(why(1).unwrap().as_str().unwrap().contains("deeper than"));
        assert!(why(2).unwrap().as_str().unwrap().contains("name"));
    }

    #[test]
    fn the_wire_fault_message_names_size_limit_and_key() {
        let f = WireFault::TooLarge {
            server: "big".into(),
            seen: 17_000_000,
            complete: true,
            limit: 1 << 20,
        };
        let e = f.to_error();
        assert!(WireFault::is_wire_fault(&e));
        assert_eq!(
            e.message,
            "server \"big\" sent a message of 17000000 bytes, over the limit of 1048576 bytes (raise `maxMessageBytes` of server \"big\")"
        );
        assert!(!WireFault::is_wire_fault(&ErrorData::internal_error(
            "x", None
        )));
    }
}

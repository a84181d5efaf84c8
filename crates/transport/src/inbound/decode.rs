//! What becomes of a raw server message that rmcp cannot route: one over the size cap, one that
//! does not decode (invalid UTF-8, nesting past the decoder's depth limit, a shape rmcp does not
//! accept), or a response to no request.
//!
//! Invariants:
//! - a message that answers a pending request never leaves that request waiting for its
//!   deadline: it is delivered (a listing with undecodable entries is delivered without them —
//!   each replaced by a placeholder marked [`UNDECODABLE_META_KEY`](super::UNDECODABLE_META_KEY) with the reason, which the
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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ClientNotification, JsonRpcResponse, JsonRpcVersion2_0,
    RequestId, ServerJsonRpcMessage, ServerResult,
};

use super::fault::{MAX_MESSAGE_KEY, WireFault};
use super::scan::{
    LISTING_CHECK_FROM, MAX_LISTING_ENTRIES, Scanned, error_reason, over_long_listing,
    salvage_listing, scan,
};
use crate::layer::Expect;
use crate::wire::WireNotes;

/// How many ids of cancelled requests are remembered (a late answer to one is not an anomaly).
const RECENT_CANCELLED: usize = 64;
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
    /// Each open request with what its answer can be.
    open: HashMap<RequestId, Expect>,
    /// How many of `open` are `tools/call`s ([`Expect::ToolResult`]).
    tool_calls: usize,
    cancelled: VecDeque<RequestId>,
}

impl Pending {
    /// Closes `id`; whether it was open.
    fn close(&mut self, id: &RequestId) -> bool {
        match self.open.remove(id) {
            Some(expect) => {
                if expect == Expect::ToolResult {
                    self.tool_calls -= 1;
                }
                true
            }
            None => false,
        }
    }
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

/// The id of the request `message` answers: `Some(id)` for a result or an error (an error
/// without an id: `Some(None)`); `None` when it is no answer (a request or notification).
pub(crate) fn answered(message: &ServerJsonRpcMessage) -> Option<Option<&RequestId>> {
    match message {
        ServerJsonRpcMessage::Response(r) => Some(Some(&r.id)),
        ServerJsonRpcMessage::Error(e) => Some(e.id.as_ref()),
        _ => None,
    }
}

impl From<Option<ServerJsonRpcMessage>> for Decoded {
    fn from(m: Option<ServerJsonRpcMessage>) -> Self {
        m.map_or(Decoded::Dropped, Decoded::Replaced)
    }
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
                let expect = Expect::of(&r.request);
                // A reused id replaces its request (as rmcp's own table does).
                p.close(&r.id);
                if expect == Expect::ToolResult {
                    p.tool_calls += 1;
                }
                p.open.insert(r.id.clone(), expect);
            }
            ClientJsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                    && p.close(id)
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
                .contains_key(id)
        })
    }

    /// Whether a `tools/call` sent here is waiting for its answer (tracked transports only).
    fn tool_calls_open(&self) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|p| p.lock().unwrap_or_else(|e| e.into_inner()).tool_calls > 0)
    }

    /// Whether `message` answers an open `tools/call` (tracked transports only).
    fn answers_a_tool_call(&self, message: &ServerJsonRpcMessage) -> bool {
        let (Some(pending), Some(Some(id))) = (&self.pending, answered(message)) else {
            return false;
        };
        let p = pending.lock().unwrap_or_else(|e| e.into_inner());
        p.open.get(id) == Some(&Expect::ToolResult)
    }

    /// On a channel that answers `origin` only, a response with another id fails `origin`.
    pub(crate) fn wrong_id(
        &self,
        message: &ServerJsonRpcMessage,
        origin: Option<&RequestId>,
    ) -> Option<ServerJsonRpcMessage> {
        let origin = origin?;
        let got = answered(message)?;
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
        let logged = self.wire.anomaly(
            &format!("a response with id {got}, which matches no request"),
            |a| a.unknown_ids += 1,
        );
        if let Some(note) = logged {
            tracing::warn!(server = %self.server, "{fault}; the request fails{note}");
        }
        Some(ServerJsonRpcMessage::error(
            fault.to_error(),
            Some(origin.clone()),
        ))
    }

    /// Notes a decoded message: a tool-list notification is counted ([`WireNotes::tools_changed`]);
    /// an answer to no request is logged, counted and remembered.
    fn received(&self, message: &ServerJsonRpcMessage) {
        if let ServerJsonRpcMessage::Notification(n) = message
            && matches!(
                n.notification,
                rmcp::model::ServerNotification::ToolListChangedNotification(_)
            )
        {
            self.wire.tools_notice();
        }
        let Some(pending) = &self.pending else {
            return;
        };
        let Some(id) = answered(message) else {
            return;
        };
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        let known = match id {
            Some(id) => p.close(id) || p.cancelled.contains(id),
            None => false,
        };
        drop(p);
        if !known {
            let what = match id {
                Some(id) => format!("a response with id {id}, which matches no request"),
                None => "an error response without an id".to_string(),
            };
            if let Some(note) = self.wire.anomaly(&what, |a| a.unknown_ids += 1) {
                tracing::warn!(server = %self.server, "the server sent {what}; ignored{note}");
            }
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
        self.decode_expecting(bytes, origin, Expect::Any)
    }

    /// [`Inbound::decode_raw`] of a message that may answer `origin`, whose answer can be only
    /// what `expect` says: a tool's result is decoded as one first ([`tool_result`]).
    pub(crate) fn decode_expecting(
        &self,
        bytes: &[u8],
        origin: Option<&RequestId>,
        expect: Expect,
    ) -> Decoded {
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
        if bytes.len() >= LISTING_CHECK_FROM
            && expect != Expect::ToolResult
            && let Some(kind) = over_long_listing(bytes)
        {
            let reason = format!(
                "it is a listing page of more than {MAX_LISTING_ENTRIES} {kind}, the most a \
                 listing may hold"
            );
            let fault = WireFault::Undecodable {
                server: self.server.to_string(),
                reason: reason.clone(),
            };
            return self
                .fail_or_note(fault, scan(bytes), origin, || {
                    format!("a message that could not be taken ({reason})")
                })
                .into();
        }
        let typed = match expect {
            Expect::ToolResult => tool_result(bytes),
            // A transport that sees both directions knows which open requests are tool calls:
            // a plain tool answer to one of them skips the general decoder too.
            Expect::Any if self.tool_calls_open() => {
                tool_result(bytes).filter(|m| self.answers_a_tool_call(m))
            }
            Expect::Any => None,
        };
        match typed.map_or_else(|| serde_json::from_slice::<ServerJsonRpcMessage>(bytes), Ok) {
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
                    p.lock().unwrap_or_else(|e| e.into_inner()).close(&id);
                }
                Some(ServerJsonRpcMessage::error(fault.to_error(), Some(id)))
            }
            None => {
                let what = what();
                let id = scanned
                    .id
                    .map(|id| format!(" (id {id})"))
                    .unwrap_or_default();
                let logged = self
                    .wire
                    .anomaly(&format!("{what}{id}"), |a| a.undeliverable += 1);
                if let Some(note) = logged {
                    tracing::warn!(server = %self.server, "the server sent {what}{id}; ignored{note}");
                }
                None
            }
        }
    }
}

/// `bytes` decoded as the answer to a `tools/call`, when it is plainly one: a JSON-RPC result
/// with only `jsonrpc`, `id` and `result`, whose result is a complete tool result. Decoded as
/// any [`ServerJsonRpcMessage`], the same message is buffered, tried as a request before a
/// response, and its result tried against the fifteen result types `ServerResult` lists before
/// `CallToolResult`, each miss building an error: most of the cost of decoding a gateway's call.
/// Anything else — an error, a notification, a result asking for input, a result that names a
/// `"task"` anywhere (a server that made a task unasked is decoded as before, task first), an
/// envelope with another field — is `None`, for the general decoder to decide.
fn tool_result(bytes: &[u8]) -> Option<ServerJsonRpcMessage> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        result: CallToolResult,
    }
    // Built once: `memmem::find` builds its searcher on every call.
    static TASK: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"task\""));
    if TASK.find(bytes).is_some() {
        return None;
    }
    let Answer {
        jsonrpc,
        id,
        result,
    } = serde_json::from_slice(bytes).ok()?;
    Some(ServerJsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc,
        id,
        result: ServerResult::CallToolResult(result),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::UNDECODABLE_META_KEY;
    use crate::inbound::scan::tests::deep;
    use serde_json::json;

    /// The typed decode of a tool's answer gives what the general decoder gives, and is
    /// taken for a plain tool result only.
    #[test]
    fn a_tool_answer_decodes_as_the_general_decoder_decodes_it() {
        let id = RequestId::Number(4);
        let plain = json!({"jsonrpc":"2.0","id":4,"result":{
            "content":[{"type":"text","text":"hi \u{e9} \"quoted\""}],
            "structuredContent":{"n":1},"isError":false,"_meta":{"k":"v"}}});
        let cases = [
            (plain, true),
            // An error; a result asking for input; a task made unasked; a stray envelope
            // field; a result with no tool field (a custom result).
            (
                json!({"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"no"}}),
                false,
            ),
            (
                json!({"jsonrpc":"2.0","id":4,"result":{"resultType":"input_required",
                    "inputRequests":{}}}),
                false,
            ),
            (
                json!({"jsonrpc":"2.0","id":4,"result":{"content":[],"task":{
                    "taskId":"t","status":"working","createdAt":"2026-01-01T00:00:00Z",
                    "lastUpdatedAt":"2026-01-01T00:00:00Z","ttl":null}}}),
                false,
            ),
            (
                json!({"jsonrpc":"2.0","id":4,"result":{"content":[]},"extra":1}),
                false,
            ),
            (json!({"jsonrpc":"2.0","id":4,"result":{"other":1}}), false),
        ];
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), false);
        for (message, typed) in cases {
            let bytes = serde_json::to_vec(&message).unwrap();
            assert_eq!(tool_result(&bytes).is_some(), typed, "{message}");
            let general = inbound.decode_raw(&bytes, Some(&id));
            let expecting = inbound.decode_expecting(&bytes, Some(&id), Expect::ToolResult);
            let (Decoded::AsSent(general), Decoded::AsSent(expecting)) = (general, expecting)
            else {
                panic!("{message} did not decode as sent");
            };
            assert_eq!(
                serde_json::to_value(&expecting).unwrap(),
                serde_json::to_value(&general).unwrap(),
                "{message}"
            );
            assert_eq!(
                matches!(
                    expecting,
                    ServerJsonRpcMessage::Response(JsonRpcResponse {
                        result: ServerResult::CallToolResult(_),
                        ..
                    })
                ),
                matches!(
                    general,
                    ServerJsonRpcMessage::Response(JsonRpcResponse {
                        result: ServerResult::CallToolResult(_),
                        ..
                    })
                ),
                "{message}"
            );
        }
    }

    /// On a transport that sees both directions (stdio), a plain tool answer to an open
    /// `tools/call` takes the typed decode; an answer that would decode as a tool result but
    /// answers another request (a `ping`) is decoded by the general decoder, as are all
    /// answers when no tool call is open; closing a call (answer, cancel, fault) is counted.
    #[test]
    fn a_tracked_transport_decodes_tool_answers_by_the_request_they_answer() {
        let request = |id: i64, method: &str, params: serde_json::Value| {
            serde_json::from_value::<ClientJsonRpcMessage>(
                json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
            )
            .unwrap()
        };
        let call = |id| request(id, "tools/call", json!({"name":"echo","arguments":{}}));
        let tracked = Inbound::new("s", 1 << 20, WireNotes::default(), true);
        let general = Inbound::new("s", 1 << 20, WireNotes::default(), false);
        let as_tool_result = |m: &Decoded| {
            matches!(
                m,
                Decoded::AsSent(ServerJsonRpcMessage::Response(JsonRpcResponse {
                    result: ServerResult::CallToolResult(_),
                    ..
                }))
            )
        };
        let same = |bytes: &[u8]| {
            let (Decoded::AsSent(a), Decoded::AsSent(b)) = (
                tracked.decode_raw(bytes, None),
                general.decode_raw(bytes, None),
            ) else {
                panic!("{} did not decode as sent", String::from_utf8_lossy(bytes));
            };
            assert_eq!(
                serde_json::to_value(&a).unwrap(),
                serde_json::to_value(&b).unwrap()
            );
            Decoded::AsSent(a)
        };
        tracked.sent(&call(4));
        tracked.sent(&request(5, "ping", json!({})));
        assert!(tracked.tool_calls_open());
        // A ping answered while a call is open, by a result that reads as a tool's: still
        // the general decoder's answer.
        let pong = br#"{"jsonrpc":"2.0","id":5,"result":{"content":[]}}"#;
        assert!(tool_result(pong).is_some(), "reads as a tool result");
        same(pong);
        assert!(tracked.tool_calls_open());
        let answer =
            br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}]}}"#;
        assert!(as_tool_result(&same(answer)));
        assert!(!tracked.tool_calls_open(), "the answer closed the call");
        // A cancelled call and one failed by an oversized answer are closed too.
        tracked.sent(&call(6));
        tracked.sent(&call(7));
        tracked.sent(&call(7));
        let cancel = serde_json::from_value::<ClientJsonRpcMessage>(json!({"jsonrpc":"2.0",
            "method":"notifications/cancelled","params":{"requestId":6}}))
        .unwrap();
        tracked.sent(&cancel);
        assert!(tracked.tool_calls_open(), "a reused id is one open call");
        let small = Inbound::new("s", 64, WireNotes::default(), true);
        small.sent(&call(7));
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
            "x".repeat(100)
        );
        assert!(matches!(
            small.decode_raw(big.as_bytes(), None),
            Decoded::Replaced(ServerJsonRpcMessage::Error(_))
        ));
        assert!(!small.tool_calls_open());
        let late = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert!(as_tool_result(&same(late)));
        assert!(!tracked.tool_calls_open());
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

    /// A listing page of more entries than a listing may hold fails its request before it is
    /// decoded (each decoded entry costs many times its bytes); one at the limit decodes.
    #[test]
    fn an_over_long_listing_page_fails_its_request_undecoded() {
        let inbound = Inbound::new("s", 64 << 20, WireNotes::default(), true);
        let page = |n: usize, entry: &str| {
            let entries = vec![entry; n].join(",");
            format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":[{entries}]}}}}"#)
        };
        let list = || {
            serde_json::from_value::<ClientJsonRpcMessage>(
                json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}),
            )
            .unwrap()
        };
        for entry in [
            r#"{"name":"t","inputSchema":1}"#,
            r#"{"name":"t","inputSchema":{}}"#,
        ] {
            inbound.sent(&list());
            let over = page(MAX_LISTING_ENTRIES + 1, entry);
            let Some(ServerJsonRpcMessage::Error(e)) = inbound.decode(over.as_bytes(), None) else {
                panic!("expected an error for the request");
            };
            assert_eq!(e.id, Some(RequestId::Number(7)));
            assert!(
                e.error.message.contains("more than 10000 tools"),
                "{}",
                e.error.message
            );
        }
        // A decoy first does not hide the long one.
        inbound.sent(&list());
        let prompts = vec![r#"{"name":"p"}"#; MAX_LISTING_ENTRIES + 1].join(",");
        let decoy =
            format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":[],"prompts":[{prompts}]}}}}"#);
        let Some(ServerJsonRpcMessage::Error(e)) = inbound.decode(decoy.as_bytes(), None) else {
            panic!("expected an error for the request");
        };
        assert!(
            e.error.message.contains("more than 10000 prompts"),
            "{}",
            e.error.message
        );
        inbound.sent(&list());
        let at = page(MAX_LISTING_ENTRIES, r#"{"name":"t","inputSchema":{}}"#);
        assert!(matches!(
            inbound.decode(at.as_bytes(), None),
            Some(ServerJsonRpcMessage::Response(_))
        ));
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

    /// A skill entry rmcp's types refuse made the whole `skills/list` an unexpected response
    /// (every skill of the server gone, silently): only that entry is replaced now.
    #[test]
    fn a_skills_listing_loses_only_the_entries_that_cannot_be_decoded() {
        let inbound = Inbound::new("s", 1 << 20, WireNotes::default(), false);
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"skills":[
            {"uri":"skill://good/SKILL.md","frontmatter":{"name":"good","description":"d"},"resources":"dynamic"},
            {"uri":"skill://bad/SKILL.md","frontmatter":{"name":"bad","description":"d"},"resources":"foo"},
            {"uri":"skill://nodesc/SKILL.md","frontmatter":{"name":"nodesc"},"resources":[]}]}}"#;
        let Some(ServerJsonRpcMessage::Response(r)) = inbound.decode(line, None) else {
            panic!("expected the listing");
        };
        let ServerResult::ListSkillsResult(list) = r.result else {
            panic!("expected skills, got {:?}", r.result);
        };
        let names: Vec<_> = list.skills.iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, ["good", "bad", "nodesc"]);
        let why = |i: usize| {
            list.skills[i]
                .meta
                .as_ref()
                .and_then(|m| m.0.get(UNDECODABLE_META_KEY).cloned())
        };
        assert!(why(0).is_none());
        assert!(why(1).unwrap().as_str().unwrap().contains("dynamic"));
        assert!(why(2).unwrap().as_str().unwrap().contains("description"));
        assert_eq!(list.skills[1].uri, "skill://bad/SKILL.md");
    }

    #[test]
    fn only_a_tool_list_notification_rmcp_takes_is_counted() {
        let wire = WireNotes::default();
        let inbound = Inbound::new("s", 1 << 20, wire.clone(), false);
        let lines: [&[u8]; 4] = [
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
            // No `jsonrpc`: refused, no listing follows it.
            br#"{"method":"notifications/tools/list_changed"}"#,
            // A request of that name, and a result quoting it: neither is the notification.
            br#"{"jsonrpc":"2.0","id":9,"method":"notifications/tools/list_changed"}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"notifications/tools/list_changed"}]}}"#,
        ];
        for line in lines {
            let _ = inbound.decode_raw(line, None);
        }
        assert_eq!(wire.tools_changed(), 1);
    }
}

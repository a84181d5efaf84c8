//! The SSE parser of the legacy transport
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#parsing-an-event-stream>):
//! bytes in any split and with any line ending in, events out.
//!
//! Invariants: one event (its lines, before dispatch) holds at most the parser's limit
//! ([`MAX_EVENT_BYTES`] unless made with another); a larger one is an error naming the limit
//! — the parser keeps no more of it, skips the rest of it, and parses the events after it —
//! with what its start said of the message it carried (its `id`); `id` and `retry` follow the
//! spec's rules across restarts.

use std::time::Duration;

use crate::inbound::{IdScan, Scanned};
use crate::sse_lines::LineSplitter;

/// The most bytes one SSE event (its lines, before dispatch) may take.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` type; `message` when the event named none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event ID in force when this event was dispatched, if any.
    pub id: Option<String>,
}

/// Why a stream could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error(
        "an SSE event is larger than {limit} bytes, the most one event may be (`maxMessageBytes` and its framing); it was skipped"
    )]
    /// An event was larger than the limit.
    EventTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
}

/// An incremental SSE parser: feed it chunks as they arrive, in any split.
#[derive(Debug)]
pub struct SseParser {
    limit: usize,
    lines: LineSplitter,
    /// Whether the first line of this stream was seen (a BOM may precede it).
    seen_first_line: bool,
    event: String,
    data: String,
    last_event_id: String,
    retry: Option<Duration>,
    /// Inside an event over the limit: its lines are skipped up to its end.
    skipping: bool,
    /// The unterminated line of such an event was dropped: the next line ending ends it.
    tail: bool,
    /// What the start of the last event over the limit said of its message.
    refused: Scanned,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser that refuses events larger than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit,
            lines: LineSplitter::default(),
            seen_first_line: false,
            event: String::new(),
            data: String::new(),
            last_event_id: String::new(),
            retry: None,
            skipping: false,
            tail: false,
            refused: Scanned::default(),
        }
    }

    /// The last event ID seen (what a reconnect sends as `Last-Event-ID`), if any.
    pub fn last_event_id(&self) -> Option<&str> {
        (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str())
    }

    /// The reconnection time the server asked for with `retry:`, if any.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Starts a new stream (after a reconnect): a partial event is discarded, the last event ID
    /// and the reconnection time are kept.
    pub fn restart(&mut self) {
        self.lines.clear();
        self.seen_first_line = false;
        self.event.clear();
        self.data.clear();
        self.skipping = false;
        self.tail = false;
    }

    /// Parses `chunk`, appending every event it completes to `out` — those after an event
    /// over the limit too, which is an error once the whole chunk is parsed (what its start
    /// held is kept for the transport).
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut lines = std::mem::take(&mut self.lines);
        let mut refused = false;
        let _ = lines.feed(chunk, |line| {
            refused |= self.take_line(line, out);
            Ok::<(), std::convert::Infallible>(())
        });
        // An unterminated line that makes its event too large: dropped now, its rest with it.
        if lines.pending() + self.data.len() + self.event.len() > self.limit {
            if !self.skipping {
                refused = true;
                self.start_skipping(lines.pending_bytes());
            }
            lines.clear();
            self.tail = true;
        }
        self.lines = lines;
        match refused {
            true => Err(SseError::EventTooLarge { limit: self.limit }),
            false => Ok(()),
        }
    }

    /// What the start of the last event over the limit held: the `id` of its message, and
    /// whether that message is a request of the server's (it answers none of ours).
    pub(crate) fn refused(&self) -> Scanned {
        self.refused.clone()
    }

    /// Takes one complete line; true when it made its event too large.
    fn take_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> bool {
        if std::mem::take(&mut self.tail) {
            return false;
        }
        if self.skipping {
            if line.is_empty() {
                // The event over the limit ends here.
                self.skipping = false;
                self.event.clear();
                self.data.clear();
            }
            return false;
        }
        if line.len() + self.data.len() + self.event.len() > self.limit {
            self.start_skipping(line);
            return true;
        }
        match self.process_line(line) {
            Ok(event) => {
                out.extend(event);
                false
            }
            Err(_) => {
                self.start_skipping(line);
                true
            }
        }
    }

    /// The event being read is over the limit at `line`: what its data so far and that line
    /// (when a `data:` line) say of its message is kept, the rest of the event skipped.
    fn start_skipping(&mut self, line: &[u8]) {
        let mut scan = IdScan::default();
        scan.feed(self.data.as_bytes());
        if let Some(value) = line.strip_prefix(b"data:") {
            scan.feed(value);
        }
        self.refused = scan.scanned();
        self.skipping = true;
        self.data = String::new();
        self.event.clear();
    }

    fn too_large(&self) -> SseError {
        SseError::EventTooLarge { limit: self.limit }
    }

    fn process_line(&mut self, mut line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if !std::mem::replace(&mut self.seen_first_line, true) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line[0] == b':' {
            return Ok(None); // a comment (keep-alive)
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.data.len() + value.len() + 1 + self.event.len() > self.limit {
                    return Err(self.too_large());
                }
                self.data.push_str(&value);
                self.data.push('\n');
            }
            b"id" if !value.contains('\0') => self.last_event_id = value.into_owned(),
            b"retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {} // unknown fields are ignored
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id: self.last_event_id().map(str::to_string),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> (Vec<SseEvent>, SseParser) {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out).expect("parses");
        }
        (out, parser)
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(str::to_string),
        }
    }

    #[test]
    fn parses_fields_multiline_data_and_comments() {
        let (events, parser) = parse_all(&[b": keep-alive\n\
              event: endpoint\ndata: /message?sessionId=1\n\n\
              data: {\"a\":\ndata:1}\nid: 7\nretry: 2500\n\n\
              data\n\n\
              data:  two spaces\nfoo: ignored\n\n\
              event: only-type\n\n\
              data: tail without end"]);
        assert_eq!(
            events,
            vec![
                ev("endpoint", "/message?sessionId=1", None),
                ev("message", "{\"a\":\n1}", Some("7")),
                ev("message", "", Some("7")),
                ev("message", " two spaces", Some("7")),
            ]
        );
        assert_eq!(parser.last_event_id(), Some("7"));
        assert_eq!(parser.retry(), Some(Duration::from_millis(2500)));
    }

    #[test]
    fn any_line_ending_and_any_split() {
        let text = b"\xEF\xBB\xBFdata: a\r\ndata: b\rid: x\n\r\nevent: e\rdata: c\r\r";
        let whole = parse_all(&[text]).0;
        assert_eq!(
            whole,
            vec![ev("message", "a\nb", Some("x")), ev("e", "c", Some("x"))]
        );
        // Byte by byte (a CR at the end of one chunk and an LF at the start of the next).
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse_all(&bytes).0, whole);
        for split in 1..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(parse_all(&[a, b]).0, whole, "split at {split}");
        }
    }

    #[test]
    fn id_and_retry_rules() {
        let (events, parser) =
            parse_all(&[b"id: 1\ndata: a\n\nid: bad\0id\nretry: 1.5\nretry: x\ndata: b\n\n"]);
        assert_eq!(
            events[1].id.as_deref(),
            Some("1"),
            "an id with NUL is ignored"
        );
        assert_eq!(parser.retry(), None, "a non-integer retry is ignored");
        let (events, parser) = parse_all(&[b"id: 1\ndata: a\n\nid\ndata: b\n\n"]);
        assert_eq!(events[1].id, None, "an empty id resets it");
        assert_eq!(parser.last_event_id(), None);
    }

    #[test]
    fn restart_keeps_id_and_retry_but_drops_a_partial_event() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        parser
            .feed(b"id: 9\nretry: 10\ndata: done\n\ndata: half", &mut out)
            .expect("parses");
        parser.restart();
        parser
            .feed(b"\n\ndata: next\n\n", &mut out)
            .expect("parses");
        assert_eq!(
            out,
            vec![
                ev("message", "done", Some("9")),
                ev("message", "next", Some("9"))
            ]
        );
        assert_eq!(parser.retry(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn an_event_over_the_limit_is_an_error_naming_it() {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        let line = vec![b'x'; 1 << 20];
        parser.feed(b"data: ", &mut out).expect("parses");
        let mut result = Ok(());
        for _ in 0..17 {
            result = parser.feed(&line, &mut out);
            if result.is_err() {
                break;
            }
        }
        let err = result.expect_err("too large");
        assert!(
            err.to_string().contains(&format!("{} bytes", 16 << 20)),
            "{err}"
        );
        // Many data lines add up too.
        let mut parser = SseParser::with_limit(100);
        let err = parser
            .feed(&b"data: 0123456789\n".repeat(10), &mut out)
            .expect_err("too large");
        assert_eq!(err, SseError::EventTooLarge { limit: 100 });
        // The events after one over the limit are taken, in the same chunk or the next ones,
        // and what the start of the one skipped said of its message is kept.
        let mut parser = SseParser::with_limit(100);
        let mut out = Vec::new();
        let big = format!(
            "data: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n\n",
            "x".repeat(200)
        );
        let stream = format!("data: a\n\n{big}data: b\n\n");
        assert!(parser.feed(stream.as_bytes(), &mut out).is_err());
        assert_eq!(
            out,
            vec![ev("message", "a", None), ev("message", "b", None)]
        );
        assert_eq!(parser.refused().id, Some(rmcp::model::RequestId::Number(7)));
        let mut parser = SseParser::with_limit(100);
        let mut out = Vec::new();
        let mut failed = false;
        for piece in stream.as_bytes().chunks(7) {
            failed |= parser.feed(piece, &mut out).is_err();
        }
        assert!(failed);
        assert_eq!(
            out,
            vec![ev("message", "a", None), ev("message", "b", None)]
        );
        assert_eq!(parser.refused().id, Some(rmcp::model::RequestId::Number(7)));
        // Events below the limit pass however many there are.
        let mut parser = SseParser::with_limit(100);
        parser
            .feed(&b"data: 0123456789\n\n".repeat(100), &mut out)
            .expect("each event is small");
    }
}

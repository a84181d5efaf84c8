//! A POST's event stream read into the events rmcp's client consumes (`sse_stream::Sse`).
//!
//! rmcp reads a response stream through its `bounded_sse_stream`: a byte-at-a-time size check,
//! then `sse_stream`'s byte-at-a-time line search — a tenth of the gateway's instructions per
//! call. This reads the same events with one vectorised line search ([`LineSplitter`]).
//!
//! Invariants, as rmcp's stream keeps them: an event is dispatched at a blank line when any of
//! its fields was set (an `id`-only priming event too: rmcp resumes from it); `data` lines are
//! joined with `\n`; an event whose lines (before dispatch, comments not counted) pass the limit
//! is an error saying "exceeded the maximum size" and ends the stream, which keeps no more of
//! it; a `data`, `event` or `id` that is not UTF-8 is a `Utf8Parse` error for that line only; a
//! body error is passed on once and ends the stream. Where rmcp's parser refused what the SSE
//! specification allows (a line without a colon, an unknown field, a repeated field, a `retry`
//! that is no number) this one follows the specification: the line is ignored, or the last value
//! wins.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use futures::stream::BoxStream;
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::Sse;

use crate::sse_lines::LineSplitter;

/// The error of an event over the size limit (its text is what the wire tap recognises).
#[derive(Debug, thiserror::Error)]
#[error("SSE event exceeded the maximum size of {max_size} bytes")]
pub(crate) struct EventTooLarge {
    max_size: usize,
}

/// A failure reading a body, as the client that read it reported it.
pub(crate) type BodyFailure = Box<dyn std::error::Error + Send + Sync>;

/// Events out of a response body's bytes.
pub(crate) struct EventStream {
    body: BoxStream<'static, Result<Bytes, BodyFailure>>,
    parser: EventParser,
    ready: VecDeque<Result<Sse, SseError>>,
    ended: bool,
}

impl EventStream {
    /// The events of `body`, none larger than `max_size` bytes.
    pub(crate) fn new(
        body: BoxStream<'static, Result<Bytes, BodyFailure>>,
        max_size: usize,
    ) -> Self {
        Self {
            body,
            parser: EventParser::new(max_size),
            ready: VecDeque::new(),
            ended: false,
        }
    }
}

impl Stream for EventStream {
    type Item = Result<Sse, SseError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match futures::ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => {
                    if let Err(too_large) = this.parser.feed(&chunk, &mut this.ready) {
                        this.ready
                            .push_back(Err(SseError::Body(Box::new(too_large))));
                        this.ended = true;
                    }
                }
                Some(Err(e)) => {
                    this.ready.push_back(Err(SseError::Body(e)));
                    this.ended = true;
                }
                // An event not ended by a blank line is not dispatched (the specification).
                None => this.ended = true,
            }
        }
    }
}

/// The state between chunks: the unterminated line and the event being read.
struct EventParser {
    max_size: usize,
    lines: LineSplitter,
    first_line: bool,
    event: Option<Sse>,
    /// The bytes the event's lines took so far (`data` lines with their joining newline).
    size: usize,
}

impl EventParser {
    fn new(max_size: usize) -> Self {
        Self {
            max_size,
            lines: LineSplitter::default(),
            first_line: true,
            event: None,
            size: 0,
        }
    }

    /// Parses `chunk`, appending what it completes (events, and errors of single lines) to
    /// `out`; an event over the limit is the error, after which nothing more is parsed.
    fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut VecDeque<Result<Sse, SseError>>,
    ) -> Result<(), EventTooLarge> {
        let mut lines = std::mem::take(&mut self.lines);
        let mut fed = lines.feed(chunk, |line| self.line(line, out));
        if fed.is_ok() && self.size + lines.pending() > self.max_size {
            fed = Err(self.too_large());
        }
        if fed.is_err() {
            lines.clear();
            self.event = None;
        }
        self.lines = lines;
        fed
    }

    /// The event being read, begun by its first field.
    fn event(&mut self) -> &mut Sse {
        self.event.get_or_insert_default()
    }

    fn too_large(&self) -> EventTooLarge {
        EventTooLarge {
            max_size: self.max_size,
        }
    }

    fn line(
        &mut self,
        mut line: &[u8],
        out: &mut VecDeque<Result<Sse, SseError>>,
    ) -> Result<(), EventTooLarge> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.size = 0;
            out.extend(self.event.take().map(Ok));
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // a comment (keep-alive)
        }
        if self.size + line.len() + 1 > self.max_size {
            return Err(self.too_large());
        }
        self.size += line.len() + 1;
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let text = || std::str::from_utf8(value).map_err(SseError::Utf8Parse);
        let parsed = match name {
            b"data" => text().map(|text| match &mut self.event().data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(text);
                }
                none => *none = Some(text.to_owned()),
            }),
            b"event" => text().map(|text| self.event().event = Some(text.to_owned())),
            // An id with NUL is ignored (the specification).
            b"id" if !value.contains(&0) => {
                text().map(|text| self.event().id = Some(text.to_owned()))
            }
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim_ascii().parse().ok())
                {
                    self.event().retry = Some(ms);
                }
                Ok(())
            }
            _ => Ok(()), // unknown fields are ignored
        };
        if let Err(e) = parsed {
            out.push_back(Err(e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn body(chunks: &[&[u8]]) -> BoxStream<'static, Result<Bytes, BodyFailure>> {
        let chunks: Vec<Result<Bytes, BodyFailure>> = chunks
            .iter()
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(chunks).boxed()
    }

    async fn events(chunks: &[&[u8]], max: usize) -> Vec<Result<Sse, String>> {
        EventStream::new(body(chunks), max)
            .map(|item| item.map_err(|e| e.to_string()))
            .collect()
            .await
    }

    fn sse(event: Option<&str>, data: Option<&str>, id: Option<&str>, retry: Option<u64>) -> Sse {
        Sse {
            event: event.map(str::to_string),
            data: data.map(str::to_string),
            id: id.map(str::to_string),
            retry,
        }
    }

    #[tokio::test]
    async fn a_priming_event_then_the_answer_in_any_split() {
        let text: &[u8] = b"\xEF\xBB\xBFid: 0\r\nretry: 3000\r\n\r\n: keep-alive\nevent: message\ndata: {\"a\":\ndata: 1}\nid: 1\n\ndata: tail";
        let want = vec![
            Ok(sse(None, None, Some("0"), Some(3000))),
            Ok(sse(Some("message"), Some("{\"a\":\n1}"), Some("1"), None)),
        ];
        assert_eq!(events(&[text], 1 << 20).await, want);
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(events(&bytes, 1 << 20).await, want);
        for at in 1..text.len() {
            let (a, b) = text.split_at(at);
            assert_eq!(events(&[a, b], 1 << 20).await, want, "split at {at}");
        }
    }

    #[tokio::test]
    async fn what_the_specification_ignores_is_ignored() {
        let got = events(
            &[b"data\nfoo: bar\nretry: soon\nid: a\0b\nevent: x\nevent: y\n\n"],
            100,
        )
        .await;
        assert_eq!(got, vec![Ok(sse(Some("y"), Some(""), None, None))]);
    }

    #[tokio::test]
    async fn a_line_not_utf8_is_an_error_for_that_line_only() {
        let got = events(&[b"data: \xff\xfe\n\ndata: ok\n\n"], 100).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].as_ref().is_err_and(|e| e.contains("utf8")),
            "{got:?}"
        );
        assert_eq!(got[1], Ok(sse(None, Some("ok"), None, None)));
    }

    #[tokio::test]
    async fn an_event_over_the_limit_ends_the_stream_saying_so() {
        // Exactly at the limit: a line counts its bytes and its ending, as rmcp counts them.
        let got = events(&[b"data: 12345678\n\n"], 15).await;
        assert_eq!(got, vec![Ok(sse(None, Some("12345678"), None, None))]);
        // Many small lines add up; a long unterminated line is refused before it ends.
        for chunks in [
            &[&b"data: 1234\ndata: 5678\n"[..]][..],
            &[b"data: 1", b"234567890"],
        ] {
            let got = events(chunks, 15).await;
            assert_eq!(got.len(), 1, "{got:?}");
            let e = got[0].as_ref().expect_err("too large");
            assert!(e.contains("exceeded the maximum size of 15 bytes"), "{e}");
        }
        // Events below the limit pass however many there are; comments do not count.
        let many = b": a long comment line that is not kept\ndata: 1234\n\n".repeat(50);
        assert_eq!(events(&[&many], 15).await.len(), 50);
    }

    #[tokio::test]
    async fn a_body_error_is_passed_on_once_and_ends_the_stream() {
        let broken = reqwest::Client::new()
            .get("http://[::1")
            .build()
            .expect_err("a bad URL");
        let body = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"id: 0\n\n")),
            Err(BodyFailure::from(broken)),
            Ok(Bytes::from_static(b"data: never\n\n")),
        ])
        .boxed();
        let got: Vec<_> = EventStream::new(body, 100).collect().await;
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[1], Err(SseError::Body(_))), "{got:?}");
    }
}

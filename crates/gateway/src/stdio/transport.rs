//! The stdio client's JSON-RPC lines as an rmcp transport (in place of rmcp's own line
//! transport, which drops a line it cannot read without a word).
//!
//! Invariants:
//! - every line is taken or answered: a message rmcp's types read goes to the session; a line
//!   that is not JSON (or not UTF-8, or nested past serde's limit) gets `-32700` with a null
//!   id; JSON that is not a message gets `-32600`, with the request's id when it has a usable
//!   one; a line longer than [`MAX_LINE`] gets `-32600` with a null id and is skipped, never
//!   buffered whole. Only what JSON-RPC says never to answer gets no answer: a notification
//!   (`method` without `id`) and an answer (`result`/`error`) that do not decode, each logged;
//! - a refusal names what is wrong, never quotes the line (it may carry secrets);
//! - `receive` is cancel safe (rmcp polls it in a `select!`): a line is consumed from the
//!   buffer and decoded with no await between, a refusal is written by its own task;
//! - reading waits on the [`Backlog`]; every send is outstanding there until written or dropped.

use std::fmt;
use std::io;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::error::Category;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

use super::backlog::Backlog;

/// The longest line taken (rmcp's limit for its line transport).
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// The stdio transport (see the module doc).
pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read (kept across cancelled receives).
    line: Vec<u8>,
    /// Inside a line longer than [`MAX_LINE`], skipping to its end.
    skipping: bool,
    write: Arc<tokio::sync::Mutex<Option<W>>>,
    backlog: Arc<Backlog>,
}

/// What one bounded line read found.
enum Line {
    /// `line` holds a whole line (or the unterminated last one).
    Whole,
    /// A line longer than [`MAX_LINE`]: dropped, the rest of it skipped.
    TooLong,
    End,
    Failed(io::Error),
}

/// What a line is.
enum Decoded {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Nothing to take or answer (a blank line, an unreadable notification or answer).
    Nothing,
    Refused(Option<RequestId>, ErrorData),
}

impl<R: AsyncRead + Unpin, W> LineTransport<R, W> {
    pub(crate) fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            skipping: false,
            write: Arc::new(tokio::sync::Mutex::new(Some(write))),
            backlog: Arc::default(),
        }
    }

    /// Reads up to the end of a line into `line`, never past [`MAX_LINE`]; cancel safe (each
    /// step consumes exactly what it copied or skipped, with no await between).
    async fn read_line(&mut self) -> Line {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(available) => available,
                Err(error) => return Line::Failed(error),
            };
            if available.is_empty() {
                return if self.line.is_empty() || self.skipping {
                    Line::End
                } else {
                    Line::Whole
                };
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let found = if self.skipping {
                self.skipping = newline.is_none();
                None
            } else if self.line.len().saturating_add(take) > MAX_LINE {
                self.line = Vec::new();
                self.skipping = newline.is_none();
                Some(Line::TooLong)
            } else {
                self.line.extend_from_slice(&available[..take]);
                newline.map(|_| Line::Whole)
            };
            self.read.consume(take);
            if let Some(found) = found {
                return found;
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outstanding = self.backlog.sending(&item);
        let write = self.write.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(io::Error::other)?;
            bytes.push(b'\n');
            let mut write = write.lock().await;
            let Some(write) = write.as_mut() else {
                return Err(io::ErrorKind::NotConnected.into());
            };
            write.write_all(&bytes).await?;
            write.flush().await?;
            drop(outstanding);
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            self.backlog.room().await;
            let (id, refusal) = match self.read_line().await {
                Line::Whole => {
                    let decoded = decode(&self.line);
                    self.line.clear();
                    match decoded {
                        Decoded::Message(message) => {
                            self.backlog.received(&message);
                            return Some(*message);
                        }
                        Decoded::Nothing => continue,
                        Decoded::Refused(id, refusal) => (id, refusal),
                    }
                }
                Line::TooLong => (
                    None,
                    ErrorData::invalid_request(
                        format!(
                            "the line is longer than {} MiB, the most the gateway reads as one \
                             message",
                            MAX_LINE >> 20
                        ),
                        None,
                    ),
                ),
                Line::End => return None,
                Line::Failed(error) => {
                    tracing::error!(%error, "reading standard input failed; the session ends");
                    return None;
                }
            };
            tracing::debug!(code = refusal.code.0, message = %refusal.message, "a line refused");
            let refused = self.send(JsonRpcMessage::error(refusal, id));
            tokio::spawn(async move {
                if let Err(error) = refused.await {
                    tracing::debug!(%error, "a refusal could not be written");
                }
            });
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// A line (its newline included) as a message, or what to answer (see the module doc).
fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Nothing;
    }
    match serde_json::from_slice(line) {
        Ok(message) => Decoded::Message(Box::new(message)),
        Err(error) if matches!(error.classify(), Category::Syntax | Category::Eof) => {
            // serde's syntax messages name a place, never the text.
            let refusal = ErrorData::new(
                ErrorCode::PARSE_ERROR,
                format!("the line is not JSON: {error}"),
                None,
            );
            Decoded::Refused(None, refusal)
        }
        Err(_) => unfit(line),
    }
}

/// The top-level members of a JSON object that is not a message rmcp reads.
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Kind>,
    result: Option<Kind>,
    error: Option<Kind>,
}

/// A member present (even `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Whether a value is an object, its content skipped (a hostile `params` costs no memory).
#[derive(PartialEq, Eq)]
enum Kind {
    Object,
    Other,
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kind::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kind::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Other)
    }
}

/// JSON that rmcp's message types do not read: what to answer, with the id when usable.
fn unfit(line: &[u8]) -> Decoded {
    let refused =
        |id, what: &str| Decoded::Refused(id, ErrorData::invalid_request(what.to_string(), None));
    let Ok(envelope) = serde_json::from_slice::<Envelope>(line) else {
        let what = match line.trim_ascii_start().first() {
            Some(b'[') => "a batch (a JSON array) is not taken: send one message per line",
            Some(b'{') => "the object does not fit a JSON-RPC message (a member given twice?)",
            _ => "a JSON-RPC message is a JSON object",
        };
        return refused(None, what);
    };
    let Some(method) = &envelope.method else {
        if envelope.result.is_some() || envelope.error.is_some() {
            tracing::warn!(
                "an answer from the stdio client does not fit MCP and was dropped; the request \
                 it answers ends at its timeout"
            );
            return Decoded::Nothing;
        }
        return refused(
            None,
            "a message needs `method` (a request or notification) or `result` or `error` (an \
             answer)",
        );
    };
    let Some(id) = &envelope.id else {
        tracing::debug!("a notification that does not fit MCP was dropped");
        return Decoded::Nothing;
    };
    let id = serde_json::from_value::<RequestId>(id.clone()).ok();
    let what = if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        "`jsonrpc` must be \"2.0\""
    } else if !method.is_string() {
        "`method` must be a string"
    } else if id.is_none() {
        "`id` must be a string or an integer"
    } else if envelope.params.is_some_and(|params| params != Kind::Object) {
        "`params` must be an object"
    } else {
        "the request does not fit MCP's schema"
    };
    refused(id, what)
}
#[cfg(test)]
mod tests {
    use super::super::backlog::OWED;
    use super::*;
    use futures::FutureExt as _;
    use rmcp::model::{ServerJsonRpcMessage, ServerNotification, ServerResult};
    use serde_json::json;
    use tokio::io::{AsyncReadExt as _, DuplexStream, ReadHalf, WriteHalf};

    type Pipe = LineTransport<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

    /// The stdio transport over an in-memory pipe, and the client's end.
    fn transport() -> (Pipe, DuplexStream) {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server);
        (LineTransport::new(read, write), client)
    }

    async fn write_lines(client: &mut DuplexStream, lines: &[String]) {
        let mut all = lines.join("\n");
        all.push('\n');
        client.write_all(all.as_bytes()).await.expect("write");
    }

    fn ping(id: usize) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
    }

    fn answer(id: usize) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), RequestId::Number(id as i64))
    }

    /// The next line the client reads, as JSON.
    async fn read_answer(client: &mut DuplexStream) -> Value {
        let mut line = Vec::new();
        let mut byte = [0u8];
        // Bounded: one answer line.
        while line.last() != Some(&b'\n') {
            assert_eq!(
                client.read(&mut byte).await.expect("read"),
                1,
                "the pipe closed"
            );
            line.push(byte[0]);
        }
        serde_json::from_slice(&line).expect("an answer is JSON")
    }

    #[tokio::test]
    async fn reading_waits_while_owed_answers_are_unwritten_and_resumes_on_one() {
        let (mut transport, mut client) = transport();
        let pings: Vec<String> = (0..=OWED).map(ping).collect();
        write_lines(&mut client, &pings).await;
        for _ in 0..OWED {
            assert!(transport.receive().await.is_some());
        }
        assert!(
            transport.receive().now_or_never().is_none(),
            "read past {OWED} requests in flight"
        );
        // An answer to an id never read releases nothing; one to a read request does.
        transport.send(answer(OWED + 7)).await.expect("send");
        assert!(transport.receive().now_or_never().is_none());
        let written = transport.send(answer(3));
        assert!(
            transport.receive().now_or_never().is_none(),
            "released before written"
        );
        written.await.expect("send");
        let next = transport.receive().now_or_never().flatten();
        assert!(
            matches!(next, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(OWED as i64))
        );
    }

    #[tokio::test]
    async fn a_repeated_id_is_owed_once_and_a_cancel_settles_it() {
        let (mut transport, mut client) = transport();
        let mut lines: Vec<String> = (0..OWED - 1).map(ping).collect();
        lines.push(ping(0));
        lines.push(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#
                .into(),
        );
        lines.extend([ping(OWED - 1), ping(OWED), ping(OWED + 1)]);
        write_lines(&mut client, &lines).await;
        // OWED - 1 ids, the repeat, the cancel (OWED - 2 owed), then two more reach the limit.
        for _ in 0..OWED + 3 {
            assert!(transport.receive().now_or_never().flatten().is_some());
        }
        assert!(transport.receive().now_or_never().is_none());
        assert_eq!(transport.backlog.owed(), OWED);
    }

    #[tokio::test]
    async fn a_dropped_send_releases_what_it_held() {
        let (mut transport, mut client) = transport();
        write_lines(&mut client, &(0..=OWED).map(ping).collect::<Vec<_>>()).await;
        for _ in 0..OWED {
            assert!(transport.receive().await.is_some());
        }
        drop(transport.send(answer(0)));
        let notification = ServerJsonRpcMessage::notification(
            ServerNotification::ToolListChangedNotification(Default::default()),
        );
        drop(transport.send(notification));
        assert_eq!(transport.backlog.owed(), OWED - 1);
        assert!(transport.receive().now_or_never().flatten().is_some());
    }

    #[tokio::test]
    async fn every_unreadable_line_is_answered_and_the_next_one_taken() {
        let secret = "s3cr3t-canary";
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"ping","pad":"{}"}}"#,
            "x".repeat(MAX_LINE)
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases: [(Vec<u8>, i64, Value); 11] = [
            (
                format!("not json {secret}").into_bytes(),
                -32700,
                Value::Null,
            ),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}".to_vec(),
                -32700,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"ping""#.into(),
                -32700,
                Value::Null,
            ),
            (deep.into_bytes(), -32700, Value::Null),
            (long.into_bytes(), -32600, Value::Null),
            (
                format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":"{secret}"}}"#)
                    .into_bytes(),
                -32600,
                json!(3),
            ),
            (
                r#"{"id":"four","method":"ping"}"#.into(),
                -32600,
                json!("four"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":7}"#.into(),
                -32600,
                json!(5),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.into(),
                -32600,
                Value::Null,
            ),
            (
                r#"[{"jsonrpc":"2.0","id":6,"method":"ping"}]"#.into(),
                -32600,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0","id":7}"#.into(), -32600, Value::Null),
        ];
        let (mut transport, mut client) = transport();
        for (line, code, id) in cases {
            let mut bytes = line;
            bytes.extend_from_slice(b"\n");
            bytes.extend_from_slice(ping(100).as_bytes());
            bytes.push(b'\n');
            let writer = tokio::spawn(async move {
                let mut client = client;
                client.write_all(&bytes).await.expect("write");
                client
            });
            let taken = transport.receive().await;
            assert!(
                matches!(&taken, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(100)),
                "the line after one refused (-{code}) was not taken"
            );
            client = writer.await.expect("writer");
            let refusal = read_answer(&mut client).await;
            assert_eq!(refusal["error"]["code"], code, "{refusal}");
            assert_eq!(refusal["id"], id, "{refusal}");
            assert!(!refusal.to_string().contains(secret), "{refusal}");
            transport.send(answer(100)).await.expect("send");
            assert_eq!(read_answer(&mut client).await["id"], 100);
        }
        // Notifications and answers that do not fit get nothing (JSON-RPC never answers them).
        let quiet = [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":8,"result":"x"}"#.to_string(),
            String::new(),
            ping(101),
        ];
        write_lines(&mut client, &quiet).await;
        // rmcp may take some of them as they are (a custom notification): up to four reads.
        let mut taken = None;
        for _ in 0..quiet.len() {
            taken = transport.receive().await;
            if matches!(&taken, Some(JsonRpcMessage::Request(_)) | None) {
                break;
            }
        }
        assert!(
            matches!(&taken, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(101))
        );
        transport.send(answer(101)).await.expect("send");
        assert_eq!(read_answer(&mut client).await["id"], 101);
        assert_eq!(transport.backlog.owed(), 0);
    }

    #[tokio::test]
    async fn the_last_line_without_a_newline_is_taken_at_the_end() {
        let (mut transport, mut client) = transport();
        client.write_all(ping(1).as_bytes()).await.expect("write");
        client.shutdown().await.expect("shutdown");
        assert!(matches!(
            transport.receive().await,
            Some(JsonRpcMessage::Request(_))
        ));
        assert!(transport.receive().await.is_none());
    }
}

//! The stdio client's JSON-RPC lines as an rmcp transport (in place of rmcp's own line
//! transport, which drops a line it cannot read without a word).
//!
//! Invariants:
//! - every line is taken or answered: a message rmcp's types read goes to the session; a line
//!   that is not JSON (or not UTF-8, or nested past serde's limit) gets `-32700` with a null
//!   id; JSON that is not a message gets `-32600`, with the request's id when it has a usable
//!   one; a line longer than [`MAX_LINE`] gets `-32600` and is skipped, never buffered whole:
//!   with the request's id, found by a scan of the line as it is skipped (at once when the id
//!   and `method` come first, at the line's end otherwise), else a null id (an answer's id is
//!   never used: it is from the gateway's numbering). Only what JSON-RPC says never to answer gets no answer: a notification
//!   (`method` without `id`) and an answer (`result`/`error`) that do not decode, each logged;
//! - a refusal names what is wrong, never quotes the line (it may carry secrets);
//! - `receive` is cancel safe (rmcp polls it in a `select!`): a line is consumed from the
//!   buffer and decoded with no await between, a refusal is written by its own task;
//! - reading waits on the [`Backlog`]; every send is outstanding there until written or
//!   dropped; a request repeating an id in flight is refused here (rmcp would answer one);
//! - until the lifecycle starts (an `initialize`, or a request with the 2026-07-28 metadata), a
//!   notification or an answer is dropped, not handed to rmcp (which ends the session on one);
//! - at the end of input, the answers already owed are written before the session ends (at
//!   most [`EOF_IDLE`] after the end of input or the last answer written, progress and other
//!   notifications not counted); a refusal is among them;
//! - a write to the client that fails (it closed its end of our standard output: `EPIPE`)
//!   ends the session: `receive` reports the end at once, whatever it was waiting for;
//! - when owed answers are still unwritten at the end of the wait after the end of input, the
//!   calls still running are cut ([`LineTransport::with_cut`]: each answered that it was cut)
//!   and their answers get [`super::CUT_GRACE`] more;
//! - when the transport gives up on the client (a failed write, or owed answers still unwritten
//!   after that) it cancels [`LineTransport::ended`], so the calls still running are cancelled
//!   rather than waited for.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use mcp_harness_runtime::transport::inbound::IdScan;
use rmcp::RoleServer;
use rmcp::model::{
    ClientRequest, ErrorCode, ErrorData, GetMeta as _, JsonRpcMessage, ProtocolVersion, RequestId,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::error::Category;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio_util::sync::CancellationToken;

use super::backlog::{Backlog, Owed, Refused};
use crate::unfit::Unfit;

/// The longest line taken, its line end not counted (rmcp's limit for its line transport).
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// After the end of input, how long the session waits for an owed answer to be written: from
/// the end of input, and again from each answer written (progress does not count).
pub(crate) const EOF_IDLE: Duration = Duration::from_secs(10);

/// The stdio transport (see the module doc).
pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read (kept across cancelled receives).
    line: Vec<u8>,
    /// Inside a line longer than [`MAX_LINE`], skipping to its end: with the scan for its
    /// `id` when that was not found in its first [`MAX_LINE`] bytes (a client that writes
    /// `id` after `params`, as the TypeScript SDK does), to answer at the line's end.
    skipping: Option<Option<IdScan>>,
    write: Arc<tokio::sync::Mutex<Option<W>>>,
    backlog: Arc<Backlog>,
    /// The lifecycle started: rmcp takes notifications and answers from now on.
    started: bool,
    /// Cancelled when the transport gives up on the client (see [`LineTransport::ended`]).
    ended: CancellationToken,
    /// How long the answers still owed at the end of input may take ([`EOF_IDLE`] unless the
    /// session was given its own drain).
    end_wait: Duration,
    /// Cancelled when that wait passed with answers still owed: the calls still running are
    /// cut, and answered so within [`super::CUT_GRACE`], before the transport gives up.
    cut: Option<CancellationToken>,
    /// `cut` was cancelled: the wait left is the grace.
    cutting: bool,
}

/// What one bounded line read found.
enum Line {
    /// `line` holds a whole line (or the unterminated last one).
    Whole,
    /// A line longer than [`MAX_LINE`]: dropped, the rest of it skipped; the request's id when
    /// its start holds one (the refusal answers it, so its client does not wait for it).
    TooLong(Option<RequestId>),
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
            skipping: None,
            write: Arc::new(tokio::sync::Mutex::new(Some(write))),
            backlog: Arc::default(),
            started: false,
            ended: CancellationToken::new(),
            end_wait: EOF_IDLE,
            cut: None,
            cutting: false,
        }
    }

    /// Cancels `cut` when the wait at the end of input passed with answers still owed, and
    /// waits [`super::CUT_GRACE`] more for the answers of the calls it cut.
    pub(crate) fn with_cut(mut self, cut: CancellationToken) -> Self {
        self.cut = Some(cut);
        self
    }

    /// The wait for the answers owed at the end of input (`--drain-secs` of `serve`).
    pub(crate) fn with_end_wait(mut self, wait: Duration) -> Self {
        self.end_wait = wait;
        self
    }

    /// Cancelled once the transport gave up on the client: a write to it failed, or answers
    /// were still owed at the end of the wait after the end of input. The session then
    /// cancels its calls still running instead of waiting for them (their answers cannot be
    /// delivered, or are no longer waited for).
    pub(crate) fn ended(&self) -> CancellationToken {
        self.ended.clone()
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
                // A line over the cap cut by the end of input still gets its refusal.
                if let Some(scan) = self.skipping.take().flatten() {
                    return Line::TooLong(request_id(&scan));
                }
                return if self.line.is_empty() || self.skipping.is_some() {
                    Line::End
                } else {
                    Line::Whole
                };
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let found = if let Some(pending) = &mut self.skipping {
                if let Some(scan) = pending {
                    scan.feed(&available[..take]);
                }
                match newline {
                    // The line's end: its error now, unless it was given at the cap.
                    Some(_) => (self.skipping.take().flatten())
                        .map(|scan| Line::TooLong(request_id(&scan))),
                    None => None,
                }
            } else if self.line.len().saturating_add(take) > MAX_LINE + 2 {
                let mut scan = IdScan::default();
                scan.feed(&self.line);
                scan.feed(&available[..take]);
                self.line = Vec::new();
                match (request_id(&scan), newline) {
                    // A request's id already: answered at once; the rest is skipped.
                    (Some(id), _) => {
                        self.skipping = newline.is_none().then_some(None);
                        Some(Line::TooLong(Some(id)))
                    }
                    (None, Some(_)) => Some(Line::TooLong(None)),
                    (None, None) => {
                        self.skipping = Some(Some(scan));
                        None
                    }
                }
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

/// The id of the request `scan` read: only a message with a `method` is one (an answer's id is
/// from the gateway's own numbering: a refusal under it would fail the client's request of that
/// number).
fn request_id(scan: &IdScan) -> Option<RequestId> {
    let scanned = scan.scanned();
    scanned.id.filter(|_| scanned.has_method)
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
        let owed = self.backlog.sending(&item);
        write_message(self.write.clone(), item, owed, self.ended.clone())
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let ended = self.ended.clone();
        tokio::select! {
            biased;
            () = ended.cancelled() => None,
            message = self.next_message() => message,
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// The next message for rmcp, `None` at the end (cancel safe: see the module doc).
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            self.backlog.room().await;
            let (id, refusal) = match self.read_line().await {
                Line::Whole => {
                    let decoded = decode(&self.line);
                    self.line.clear();
                    match decoded {
                        Decoded::Message(message) => match self.take(*message) {
                            Ok(Some(message)) => return Some(message),
                            Ok(None) => continue,
                            Err(refused) => refused,
                        },
                        Decoded::Nothing => continue,
                        Decoded::Refused(id, refusal) => (id, refusal),
                    }
                }
                Line::TooLong(id) => (id, too_long()),
                Line::End => {
                    let wait = if self.cutting {
                        super::CUT_GRACE
                    } else {
                        self.end_wait
                    };
                    if self.backlog.drained(wait).await {
                        return None;
                    }
                    // The calls still running are cut while the session still writes their
                    // answers; only then is the client given up on.
                    if let Some(cut) = self.cut.as_ref().filter(|_| !self.cutting) {
                        self.cutting = true;
                        cut.cancel();
                        self.backlog.quiet_from_now();
                        if self.backlog.drained(super::CUT_GRACE).await {
                            return None;
                        }
                    }
                    self.ended.cancel();
                    return None;
                }
                Line::Failed(error) => {
                    tracing::error!(%error, "reading standard input failed; the session ends");
                    return None;
                }
            };
            tracing::debug!(code = refusal.code.0, message = %refusal.message, "a line refused");
            let owed = self.backlog.sending_own();
            let refusal = JsonRpcMessage::error(refusal, id);
            let refused = write_message(self.write.clone(), refusal, owed, self.ended.clone());
            tokio::spawn(async move {
                if let Err(error) = refused.await {
                    tracing::debug!(%error, "a refusal could not be written");
                }
            });
        }
    }
}

impl<R, W> LineTransport<R, W> {
    /// A decoded message as rmcp gets it: `None` when it is dropped (a notification or an
    /// answer before the lifecycle started), or the refusal of a request repeating an id in
    /// flight.
    fn take(
        &mut self,
        message: RxJsonRpcMessage<RoleServer>,
    ) -> Result<Option<RxJsonRpcMessage<RoleServer>>, (Option<RequestId>, ErrorData)> {
        if !self.started {
            match &message {
                JsonRpcMessage::Request(request) => {
                    self.started = starts_lifecycle(&request.request)
                }
                JsonRpcMessage::Notification(_)
                | JsonRpcMessage::Response(_)
                | JsonRpcMessage::Error(_) => {
                    tracing::debug!("a notification or an answer before initialize was dropped");
                    return Ok(None);
                }
            }
        }
        match self.backlog.received(&message) {
            Ok(()) => Ok(Some(message)),
            Err(Refused::IdInUse(id)) => Err((
                Some(id),
                ErrorData::invalid_request(
                    "this request's id is already used by a request in flight; an id names one \
                     request of the session",
                    None,
                ),
            )),
        }
    }
}

/// Whether rmcp starts the session's lifecycle with `request`: `initialize`, or a request
/// other than `ping` and `server/discover` that carries the 2026-07-28 metadata whole.
fn starts_lifecycle(request: &ClientRequest) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        request => {
            let meta = request.get_meta();
            meta.protocol_version().is_some()
                && meta
                    .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                    .is_empty()
        }
    }
}

/// The refusal of a line over [`MAX_LINE`].
fn too_long() -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "the line is longer than {} MiB, the most the gateway reads as one message",
            MAX_LINE >> 20
        ),
        None,
    )
}

/// Writes `item` as one line through `write`, outstanding (`owed`) until written or dropped.
/// A failed write cancels `ended`: the client's end of our output is gone, and nothing more
/// it asks for can be answered.
async fn write_message<W: AsyncWrite + Send + Unpin + 'static>(
    write: Arc<tokio::sync::Mutex<Option<W>>>,
    item: TxJsonRpcMessage<RoleServer>,
    owed: Owed,
    ended: CancellationToken,
) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(&item).map_err(io::Error::other)?;
    bytes.push(b'\n');
    let mut write = write.lock().await;
    let Some(write) = write.as_mut() else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    let written = match write.write_all(&bytes).await {
        Ok(()) => write.flush().await,
        Err(error) => Err(error),
    };
    if let Err(error) = written {
        if !ended.is_cancelled() {
            tracing::info!(%error, "writing to standard output failed; the session ends");
            ended.cancel();
        }
        return Err(error);
    }
    owed.written();
    Ok(())
}

/// A line (its newline included) as a message, or what to answer (see the module doc).
fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE {
        return Decoded::Refused(None, too_long());
    }
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

/// JSON that rmcp's message types do not read: what to answer, with the id when usable (an
/// unreadable answer or notification is dropped, logged).
fn unfit(line: &[u8]) -> Decoded {
    match crate::unfit::unfit(line) {
        Unfit::Refused(id, refusal) => Decoded::Refused(id, refusal),
        Unfit::Answer => {
            tracing::warn!(
                "an answer from the stdio client does not fit MCP and was dropped; the request \
                 it answers ends at its timeout"
            );
            Decoded::Nothing
        }
        Unfit::Notification => {
            tracing::debug!("a notification that does not fit MCP was dropped");
            Decoded::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::backlog::{Backlog, CANCEL_GRACE, OWED};
    use super::*;
    use futures::FutureExt as _;
    use rmcp::model::{ServerJsonRpcMessage, ServerNotification, ServerResult};
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt as _, DuplexStream, ReadHalf, WriteHalf};

    type Pipe = LineTransport<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

    /// The stdio transport over an in-memory pipe, its lifecycle started, and the client's
    /// end.
    fn transport() -> (Pipe, DuplexStream) {
        let (mut transport, client) = fresh();
        transport.started = true;
        (transport, client)
    }

    /// The same before the client's first message.
    fn fresh() -> (Pipe, DuplexStream) {
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
    async fn a_repeated_id_is_refused_and_a_cancel_holds_its_place_for_the_grace() {
        let (mut transport, mut client) = transport();
        write_lines(&mut client, &[ping(1), ping(1), ping(2)]).await;
        assert!(
            matches!(transport.receive().await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(1))
        );
        // The repeat is refused (and not handed on); the next line is taken.
        assert!(
            matches!(transport.receive().await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(2))
        );
        let refusal = read_answer(&mut client).await;
        assert_eq!(
            (refusal["id"].clone(), refusal["error"]["code"].clone()),
            (json!(1), json!(-32600)),
            "{refusal}"
        );
        assert_eq!(transport.backlog.owed(), 2);

        // A cancelled request keeps its place until its grace is over (or its answer).
        let mut lines: Vec<String> = (3..OWED).map(ping).collect();
        lines.push(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#
                .into(),
        );
        lines.extend([ping(OWED), ping(OWED + 1)]);
        write_lines(&mut client, &lines).await;
        for _ in 3..OWED {
            assert!(transport.receive().await.is_some());
        }
        let cancel = transport.receive().now_or_never().flatten();
        assert!(
            matches!(cancel, Some(JsonRpcMessage::Notification(_))),
            "{cancel:?}"
        );
        let cancelled = std::time::Instant::now();
        assert!(transport.receive().now_or_never().flatten().is_some());
        assert_eq!(transport.backlog.owed(), OWED);
        assert!(
            transport.receive().now_or_never().is_none(),
            "released at the cancel"
        );
        let next = tokio::time::timeout(Duration::from_secs(5), transport.receive()).await;
        assert!(
            matches!(next, Ok(Some(JsonRpcMessage::Request(r))) if r.id == RequestId::Number(OWED as i64 + 1))
        );
        assert!(
            cancelled.elapsed() >= CANCEL_GRACE,
            "{:?}",
            cancelled.elapsed()
        );
        // An answer handed out for a cancelled request takes over its place until written.
        assert_eq!(transport.backlog.owed(), OWED);
    }

    #[tokio::test]
    async fn a_cancelled_id_is_taken_again_once_its_grace_is_over() {
        let (mut transport, mut client) = transport();
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
        write_lines(&mut client, &[ping(1), cancel.into(), ping(1), ping(2)]).await;
        for _ in 0..2 {
            assert!(received(&mut transport).await.is_some());
        }
        // Within the grace the id is still one entry: the repeat is refused, the next taken.
        assert!(
            matches!(received(&mut transport).await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(2))
        );
        let refusal = read_answer(&mut client).await;
        assert_eq!(refusal["id"], 1, "{refusal}");
        tokio::time::sleep(CANCEL_GRACE + Duration::from_millis(100)).await;
        // After it, with no sweep in between (far below the bound), the id is free.
        write_lines(&mut client, &[ping(1)]).await;
        assert!(
            matches!(received(&mut transport).await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(1))
        );
        // The new request took over the cancelled one's count.
        assert_eq!(transport.backlog.owed(), 2);
        transport.send(answer(1)).await.expect("send");
        assert_eq!(transport.backlog.owed(), 1);
    }

    /// The next message `receive` hands out, within 5 s (else the test fails).
    async fn received<W>(
        transport: &mut LineTransport<impl AsyncRead + Send + Unpin, W>,
    ) -> Option<RxJsonRpcMessage<RoleServer>>
    where
        W: AsyncWrite + Send + Unpin + 'static,
    {
        tokio::time::timeout(Duration::from_secs(5), transport.receive())
            .await
            .expect("receive took over 5 s")
    }

    /// A request as read from the client.
    fn request(id: usize) -> RxJsonRpcMessage<RoleServer> {
        serde_json::from_str(&ping(id)).expect("a ping")
    }

    /// Waits for `drained(idle)` on a backlog owing requests 1 and 2 while a notification is
    /// written every 50 ms and, when `answer_at` is given, request 1's answer then: whether
    /// everything was written, and how long the wait took.
    async fn drain_with_progress(idle: Duration, answer_at: Option<Duration>) -> (bool, Duration) {
        let backlog = Arc::new(Backlog::default());
        for id in [1, 2] {
            assert!(backlog.received(&request(id)).is_ok());
        }
        let start = std::time::Instant::now();
        let drained = {
            let backlog = backlog.clone();
            tokio::spawn(async move { backlog.drained(idle).await })
        };
        let progress = ServerJsonRpcMessage::notification(
            ServerNotification::ToolListChangedNotification(Default::default()),
        );
        let mut answer_at = answer_at;
        // Bounded: 100 turns of 50 ms.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if drained.is_finished() {
                break;
            }
            backlog.sending(&progress).written();
            if answer_at.is_some_and(|at| start.elapsed() >= at) {
                answer_at = None;
                backlog.sending(&answer(1)).written();
            }
        }
        let all_written = drained.await.expect("the drain task");
        (all_written, start.elapsed())
    }

    #[tokio::test]
    async fn after_the_end_of_input_only_answers_extend_the_wait() {
        let idle = Duration::from_millis(400);
        // Progress alone: the wait ends `idle` after the end of input.
        let (all_written, took) = drain_with_progress(idle, None).await;
        assert!(!all_written);
        assert!(took >= idle && took < idle * 2, "{took:?}");
        // An answer written 300 ms in starts the wait again.
        let answered = Duration::from_millis(300);
        let (all_written, took) = drain_with_progress(idle, Some(answered)).await;
        assert!(!all_written, "request 2 was never answered");
        assert!(
            took >= answered + idle && took < answered + idle * 2,
            "{took:?}"
        );
    }

    /// Output whose client end is gone: every write fails with `EPIPE`.
    struct Closed;

    impl AsyncWrite for Closed {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            std::task::Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_failed_write_ends_the_session_while_input_stays_open() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut transport = LineTransport::new(server, Closed);
        transport.started = true;
        let ended = transport.ended();
        write_lines(&mut client, &[ping(1)]).await;
        assert!(received(&mut transport).await.is_some());
        assert!(!ended.is_cancelled());
        assert!(transport.send(answer(1)).await.is_err());
        assert!(
            ended.is_cancelled(),
            "a failed write did not end the session"
        );
        // The input is still open (and has a line): the end is reported anyway, at once.
        write_lines(&mut client, &[ping(2)]).await;
        let end = tokio::time::timeout(Duration::from_secs(5), transport.receive()).await;
        assert!(matches!(end, Ok(None)), "{end:?}");
        assert_eq!(transport.backlog.owed(), 0);
    }

    #[tokio::test]
    async fn before_initialize_a_notification_or_an_answer_is_dropped() {
        let (mut transport, mut client) = fresh();
        let lines = [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#.to_string(),
            ping(1),
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_string(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        ];
        write_lines(&mut client, &lines).await;
        assert!(
            matches!(transport.receive().await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(1))
        );
        assert!(
            matches!(transport.receive().await, Some(JsonRpcMessage::Request(r)) if r.id == RequestId::Number(2))
        );
        assert!(matches!(
            transport.receive().await,
            Some(JsonRpcMessage::Notification(_))
        ));
    }

    #[tokio::test]
    async fn at_the_end_of_input_owed_answers_and_refusals_are_written_first() {
        let (mut transport, mut client) = transport();
        client
            .write_all(format!("{}\nnot json", ping(1)).as_bytes())
            .await
            .expect("write");
        client.shutdown().await.expect("shutdown");
        assert!(matches!(
            transport.receive().await,
            Some(JsonRpcMessage::Request(_))
        ));
        let answered = transport.send(answer(1));
        let ended = tokio::spawn(async move {
            let end = transport.receive().await;
            (transport, end)
        });
        // The refusal of the last line is written before the end is reported.
        let refusal = read_answer(&mut client).await;
        assert_eq!(refusal["error"]["code"], -32700, "{refusal}");
        assert!(!ended.is_finished(), "the end came before the owed answer");
        answered.await.expect("send");
        assert_eq!(read_answer(&mut client).await["id"], 1);
        let (_, end) = tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("the end once nothing is owed")
            .expect("the task");
        assert!(end.is_none());
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
        // The id after the part read (the TypeScript SDK writes it last): found at the line's
        // end, so the client can match the refusal.
        let id_last = format!(
            r#"{{"jsonrpc":"2.0","method":"ping","params":{{"pad":"{}"}},"id":10}}"#,
            "x".repeat(MAX_LINE)
        );
        let answer_long = format!(
            r#"{{"jsonrpc":"2.0","result":{{"pad":"{}"}},"id":11}}"#,
            "x".repeat(MAX_LINE)
        );
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases: [(Vec<u8>, i64, Value); 13] = [
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
            (long.into_bytes(), -32600, json!(9)),
            (id_last.into_bytes(), -32600, json!(10)),
            // An over-long answer's id is the gateway's own numbering: never used.
            (answer_long.into_bytes(), -32600, Value::Null),
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
        transport.send(answer(1)).await.expect("send");
        assert!(transport.receive().await.is_none());
    }
}

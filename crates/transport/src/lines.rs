//! Newline-delimited JSON-RPC over a byte pipe (a stdio server's stdout/stdin, the in-process
//! pipe), in place of rmcp's `AsyncRwTransport`, which drops a line over its fixed 16 MiB and
//! skips an undecodable one at debug level, leaving the request it answered to wait for its
//! deadline.
//!
//! Invariants:
//! - at most [`Inbound::limit`] bytes of one line are held; a longer line is scanned for its
//!   top-level id while it is discarded (constant memory, any length) and becomes the
//!   [`crate::inbound::WireFault::TooLarge`] error of the request it answers — at once when
//!   the id comes before the cap, else when the line ends;
//! - every complete line goes through [`Inbound::decode`] exactly once (the wire tap sees it
//!   there), and every request sent is noted first, so answers to no request are recognised;
//! - `receive` is cancellation safe: a partial line stays in `self` and the next call resumes
//!   it (rmcp polls `receive` inside a `select!`).

use std::sync::Arc;

use futures::SinkExt;
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Mutex;
use tokio_util::codec::FramedWrite;

use crate::inbound::{IdScan, Inbound};

/// A line buffer larger than this is released after use rather than kept for the next line.
const KEEP_LINE_CAPACITY: usize = 1 << 20;

type Writer<W> = FramedWrite<W, JsonRpcMessageCodec<ClientJsonRpcMessage>>;

/// An oversized line being discarded.
struct Oversized {
    seen: usize,
    scan: IdScan,
    /// Its error was already handed out (the id came before the cap).
    reported: bool,
}

/// rmcp's `Transport<RoleClient>` over newline-delimited JSON-RPC, with a size cap that fails
/// the waiting request instead of dropping its answer.
pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    oversized: Option<Oversized>,
    inbound: Inbound,
    write: Arc<Mutex<Option<Writer<W>>>>,
}

impl<R: AsyncRead, W: AsyncWrite> LineTransport<R, W> {
    /// Reads server messages from `read` and writes client messages to `write`.
    pub(crate) fn new(read: R, write: W, inbound: Inbound) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            oversized: None,
            inbound,
            write: Arc::new(Mutex::new(Some(FramedWrite::new(
                write,
                JsonRpcMessageCodec::default(),
            )))),
        }
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    async fn next(&mut self) -> Option<ServerJsonRpcMessage> {
        // The longest line held: the cap plus its line ending.
        let hold = self.inbound.limit().saturating_add(2);
        loop {
            let (consumed, complete) = {
                let available = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(server = %self.inbound.server(), error = %e, "reading from the server failed");
                        return None;
                    }
                };
                if available.is_empty() {
                    return None;
                }
                let newline = memchr::memchr(b'\n', available);
                let take = newline.map_or(available.len(), |i| i + 1);
                let chunk = &available[..take];
                match &mut self.oversized {
                    Some(o) => {
                        o.seen += chunk.len();
                        o.scan.feed(chunk);
                    }
                    None if self.line.len() + chunk.len() > hold => {
                        let mut scan = IdScan::default();
                        scan.feed(&self.line);
                        scan.feed(chunk);
                        let seen = self.line.len() + chunk.len();
                        self.line = Vec::new();
                        tracing::debug!(server = %self.inbound.server(), limit = self.inbound.limit(), "a message over the cap; discarding it");
                        self.oversized = Some(Oversized {
                            seen,
                            scan,
                            reported: false,
                        });
                    }
                    None => self.line.extend_from_slice(chunk),
                }
                (take, newline.is_some())
            };
            self.read.consume(consumed);
            if let Some(o) = &mut self.oversized {
                if complete {
                    let Some(o) = self.oversized.take() else {
                        continue;
                    };
                    if o.reported {
                        continue;
                    }
                    let seen = o.seen.saturating_sub(1);
                    if let Some(m) = self.inbound.too_large(seen, true, o.scan.scanned(), None) {
                        return Some(m);
                    }
                } else if !o.reported && o.scan.scanned().id.is_some() {
                    // The id is known: fail the request now, not when (if ever) the line ends.
                    o.reported = true;
                    let (seen, scanned) = (o.seen, o.scan.scanned());
                    if let Some(m) = self.inbound.too_large(seen, false, scanned, None) {
                        return Some(m);
                    }
                }
                continue;
            }
            if !complete {
                continue;
            }
            let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let message = if line.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                self.inbound.decode(line, None)
            };
            if self.line.capacity() > KEEP_LINE_CAPACITY {
                self.line = Vec::new();
            } else {
                self.line.clear();
            }
            if let Some(m) = message {
                return Some(m);
            }
        }
    }
}

impl<R, W: AsyncWrite + Send + Unpin + 'static> LineTransport<R, W> {
    /// Writes to this transport's output from outside rmcp's loop (express calls), named
    /// `name` in errors.
    pub(crate) fn sender(&self, name: &'static str) -> LineSender<W> {
        LineSender {
            name,
            write: self.write.clone(),
            inbound: self.inbound.clone(),
        }
    }
}

/// Writes `item` as one line through `lock`'s writer. The whole line goes into the writer's
/// buffer before anything is written, so a dropped future leaves no partial line (the next
/// write flushes it).
async fn write_line<W: AsyncWrite + Unpin>(
    lock: Arc<Mutex<Option<Writer<W>>>>,
    item: ClientJsonRpcMessage,
) -> std::io::Result<()> {
    let mut write = lock.lock().await;
    match write.as_mut() {
        Some(w) => w.send(item).await.map_err(Into::into),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the transport is closed",
        )),
    }
}

/// Writes a client message to a line transport's output from the caller's task (an express
/// call's, `crate::express`), noting it as the transport notes what rmcp sends. The line is
/// whole on the wire even when the future is dropped part-way (it is encoded into the writer's
/// buffer at once; the next write flushes it).
pub(crate) trait LineSend: Send + Sync {
    /// The transport's name, for errors (`stdio`, `in-process`).
    fn name(&self) -> &'static str;

    fn send(
        &self,
        message: ClientJsonRpcMessage,
    ) -> futures::future::BoxFuture<'static, std::io::Result<()>>;
}

/// A [`LineTransport`]'s output, shared with express calls ([`LineSend`]):
/// what it sends is noted as the transport's own sends are.
pub(crate) struct LineSender<W> {
    name: &'static str,
    write: Arc<Mutex<Option<Writer<W>>>>,
    inbound: Inbound,
}

impl<W: AsyncWrite + Send + Unpin + 'static> LineSend for LineSender<W> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn send(
        &self,
        message: ClientJsonRpcMessage,
    ) -> futures::future::BoxFuture<'static, std::io::Result<()>> {
        self.inbound.sent(&message);
        Box::pin(write_line(self.write.clone(), message))
    }
}

impl<R, W> Transport<RoleClient> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inbound.sent(&item);
        write_line(self.write.clone(), item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.next()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireNotes;
    use rmcp::model::RequestId;
    use tokio::io::AsyncWriteExt;

    fn request(id: i64) -> ClientJsonRpcMessage {
        serde_json::from_value(serde_json::json!({"jsonrpc":"2.0","id":id,"method":"ping"}))
            .unwrap()
    }

    #[tokio::test]
    async fn an_oversized_line_fails_its_request_and_the_next_line_is_read() {
        let (mut server, client) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(client);
        let mut t = LineTransport::new(
            read,
            write,
            Inbound::new("s", 1000, WireNotes::default(), true),
        );
        t.send(request(1)).await.unwrap();
        t.send(request(2)).await.unwrap();
        tokio::spawn(async move {
            // The id after the payload (as the TypeScript SDK writes it), then a small answer.
            let big = format!(
                "{{\"jsonrpc\":\"2.0\",\"result\":{{\"x\":\"{}\"}},\"id\":1}}\n",
                "a".repeat(5000)
            );
            server.write_all(big.as_bytes()).await.unwrap();
            server
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n")
                .await
                .unwrap();
            // An id before the payload: failed before the line ends.
            let head = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"x\":\"{}",
                "b".repeat(3000)
            );
            server.write_all(head.as_bytes()).await.unwrap();
            std::future::pending::<()>().await;
        });
        let Some(ServerJsonRpcMessage::Error(e)) = t.receive().await else {
            panic!("an error")
        };
        assert_eq!(e.id, Some(RequestId::Number(1)));
        assert!(
            e.error
                .message
                .contains("of 5042 bytes, over the limit of 1000"),
            "{}",
            e.error.message
        );
        let Some(ServerJsonRpcMessage::Response(r)) = t.receive().await else {
            panic!("a response")
        };
        assert_eq!(r.id, RequestId::Number(2));
        t.send(request(3)).await.unwrap();
        let Some(ServerJsonRpcMessage::Error(e)) = t.receive().await else {
            panic!("an error")
        };
        assert_eq!(e.id, Some(RequestId::Number(3)));
        assert!(e.error.message.contains("more than"), "{}", e.error.message);
    }
}

//! Faults on the wire itself, behind `--wire-faults` and `--deep-schema-tool`: answers the
//! client cannot decode or cannot match, which rmcp's typed server can never send.
//!
//! Invariants: nothing changes unless a flag asks for it; `wire_fault` answers with a marker
//! that the writer (stdio: [`FaultWrite`]; HTTP: [`rewrite_sse`] in the fault layer) replaces
//! on its way out — only in that one message, every other message passes byte for byte.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Bytes;
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};
use tokio::io::AsyncWrite;

/// The text `wire_fault` answers with, followed by the fault's kind.
pub const MARKER: &str = "fixture-wire-fault:";
/// How deep `deep` answers and `deep_schema` nest (past serde_json's limit of 128).
pub const DEPTH: usize = 300;

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// `wire_fault` (with `--wire-faults`).
pub fn wire_fault_tool() -> Tool {
    Tool::new(
        "wire_fault",
        "Answers with a broken message: `bad-utf8` (invalid UTF-8), `deep` (nested past the decoder's depth limit) or `wrong-id` (the id of no request).",
        schema(json!({
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["bad-utf8", "deep", "wrong-id"]}},
            "required": ["kind"]
        })),
    )
}

/// `deep_schema` (with `--deep-schema-tool`): a tool whose input schema nests past the
/// decoder's depth limit.
pub fn deep_schema_tool() -> Tool {
    let mut inner = json!({"type": "string"});
    for _ in 0..DEPTH / 2 {
        inner = json!({"type": "array", "items": inner});
    }
    Tool::new(
        "deep_schema",
        "A tool whose schema nests too deep to decode.",
        schema(json!({"type": "object", "properties": {"x": inner}})),
    )
}

/// The faulty form of one outgoing message carrying the marker, or `None` to send it as is.
pub fn rewrite(message: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(message).ok()?;
    let at = text.find(MARKER)?;
    let kind: String = text[at + MARKER.len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let quoted = format!("\"{MARKER}{kind}\"");
    match kind.as_str() {
        "bad-utf8" => {
            let mut out = Vec::with_capacity(message.len());
            out.extend_from_slice(&message[..at]);
            out.extend_from_slice(b"bad \xff\xfe utf8");
            out.extend_from_slice(&message[at + MARKER.len() + kind.len()..]);
            Some(out)
        }
        "deep" => {
            let deep = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
            Some(text.replacen(&quoted, &deep, 1).into_bytes())
        }
        "wrong-id" => {
            let trailing = text.len() - text.trim_end().len();
            let mut value: Value = serde_json::from_str(text.trim_end()).ok()?;
            let id = match value.get("id")? {
                Value::Number(n) => json!(n.as_i64()? + 1_000_000),
                Value::String(s) => json!(format!("{s}-wrong")),
                _ => return None,
            };
            value["id"] = id;
            let mut out = serde_json::to_vec(&value).ok()?;
            out.extend_from_slice(&message[message.len() - trailing..]);
            Some(out)
        }
        _ => None,
    }
}

/// Rewrites the `data:` line of an SSE frame that carries the marker.
pub fn rewrite_sse(frame: Bytes) -> Bytes {
    if !frame.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()) {
        return frame;
    }
    let mut out = Vec::with_capacity(frame.len());
    for line in frame.split_inclusive(|b| *b == b'\n') {
        match line.strip_prefix(b"data:") {
            Some(rest) => {
                let (lead, json) = rest.split_at(rest.iter().take_while(|b| **b == b' ').count());
                out.extend_from_slice(b"data:");
                out.extend_from_slice(lead);
                out.extend(rewrite(json).unwrap_or_else(|| json.to_vec()));
            }
            None => out.extend_from_slice(line),
        }
    }
    Bytes::from(out)
}

/// A writer of newline-delimited messages that applies [`rewrite`] to each line when enabled.
pub struct FaultWrite<W> {
    inner: W,
    enabled: bool,
    line: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
}

impl<W> FaultWrite<W> {
    pub fn new(inner: W, enabled: bool) -> Self {
        Self {
            inner,
            enabled,
            line: Vec::new(),
            out: Vec::new(),
            sent: 0,
        }
    }
}

impl<W: AsyncWrite + Unpin> FaultWrite<W> {
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for FaultWrite<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.enabled {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        ready!(this.drain(cx))?;
        let mut rest = buf;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            this.line.extend_from_slice(&rest[..=i]);
            let line = std::mem::take(&mut this.line);
            this.out.extend(rewrite(&line).unwrap_or(line));
            rest = &rest[i + 1..];
        }
        this.line.extend_from_slice(rest);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_breaks_only_its_message() {
        let line = |kind: &str| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{MARKER}{kind}\"}}]}}}}\n"
            )
        };
        let bad = rewrite(line("bad-utf8").as_bytes()).unwrap();
        assert!(std::str::from_utf8(&bad).is_err());
        let deep = rewrite(line("deep").as_bytes()).unwrap();
        assert!(serde_json::from_slice::<Value>(&deep).is_err());
        let wrong = rewrite(line("wrong-id").as_bytes()).unwrap();
        assert!(wrong.ends_with(b"\n"));
        let v: Value = serde_json::from_slice(&wrong).unwrap();
        assert_eq!(v["id"], json!(1_000_004));
        assert!(rewrite(b"{\"id\":1,\"result\":{}}\n").is_none());
        let frame = Bytes::from(format!("id: 0\ndata: {}\n", line("wrong-id").trim_end()));
        let out = rewrite_sse(frame);
        assert!(std::str::from_utf8(&out).unwrap().contains("1000004"));
    }
}

//! A bounded tail of a child's stderr: never more than [`STDERR_TAIL_BYTES`] are kept, whatever
//! the server writes, and every line is also logged (capped) at debug level. Both the tail and
//! the logged lines pass through [`crate::redact::text`]: a server that echoes its configured
//! environment does not get the values shown.

use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// How much of a server's stderr is kept for diagnostics.
pub(crate) const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// Longest stderr line forwarded to the log.
const LOG_LINE_CAP: usize = 1024;

/// A shared, bounded buffer holding the most recent stderr output of one server.
#[derive(Clone, Default)]
pub(crate) struct StderrTail {
    buf: Arc<Mutex<BytesMut>>,
    done: Arc<tokio::sync::Notify>,
    finished: Arc<std::sync::atomic::AtomicBool>,
}

impl StderrTail {
    /// Appends `data`, dropping the oldest bytes beyond the cap.
    pub(crate) fn push(&self, data: &[u8]) {
        let Ok(mut buf) = self.buf.lock() else { return };
        if data.len() >= STDERR_TAIL_BYTES {
            buf.clear();
            buf.extend_from_slice(&data[data.len() - STDERR_TAIL_BYTES..]);
            return;
        }
        buf.extend_from_slice(data);
        if buf.len() > STDERR_TAIL_BYTES {
            let excess = buf.len() - STDERR_TAIL_BYTES;
            buf.advance(excess);
        }
    }

    /// The kept tail as text (lossy UTF-8), or `None` when the server wrote nothing.
    pub(crate) fn text(&self) -> Option<String> {
        let buf = self.buf.lock().ok()?;
        if buf.is_empty() {
            return None;
        }
        Some(crate::redact::text(&String::from_utf8_lossy(&buf)))
    }

    /// Waits until the stream reached end of file, at most `limit`.
    pub(crate) async fn wait_finished(&self, limit: std::time::Duration) {
        if self.finished.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let _ = tokio::time::timeout(limit, self.done.notified()).await;
    }

    /// Spawns a task that drains `stream` into this tail until end of file.
    pub(crate) fn drain<R>(&self, server: String, mut stream: R)
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 8192];
            let mut line = Vec::new();
            let mut budget = LineBudget::new();
            loop {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        tail.push(&chunk[..n]);
                        for &b in &chunk[..n] {
                            if b == b'\n' {
                                if budget.admit(&server) {
                                    log_line(&server, &line);
                                }
                                line.clear();
                            } else if line.len() < LOG_LINE_CAP {
                                line.push(b);
                            }
                        }
                    }
                }
            }
            if !line.is_empty() && budget.admit(&server) {
                log_line(&server, &line);
            }
            budget.report(&server);
            tail.finished
                .store(true, std::sync::atomic::Ordering::Release);
            tail.done.notify_waiters();
        });
    }
}

/// Where a server's stderr lines are logged (at debug).
const STDERR_TARGET: &str = "mcp_harness::server_stderr";

fn log_line(server: &str, line: &[u8]) {
    // Redacting costs a pass over the line: only for lines that are logged.
    if !tracing::enabled!(target: STDERR_TARGET, tracing::Level::DEBUG) {
        return;
    }
    let line = crate::redact::text(&String::from_utf8_lossy(line));
    tracing::debug!(target: STDERR_TARGET, server, "{line}");
}

/// Most stderr lines of one server logged per second: a server that floods its stderr fills
/// neither the log nor a terminal (the tail still keeps its newest bytes).
const LOG_LINES_PER_SEC: u32 = 200;

/// The lines of one stderr stream logged in the current second, and those skipped.
struct LineBudget {
    window: std::time::Instant,
    used: u32,
    skipped: u64,
}

impl LineBudget {
    fn new() -> Self {
        Self {
            window: std::time::Instant::now(),
            used: 0,
            skipped: 0,
        }
    }

    /// Whether the next line is logged; a new second first reports what the last one skipped.
    fn admit(&mut self, server: &str) -> bool {
        if self.window.elapsed() >= std::time::Duration::from_secs(1) {
            self.report(server);
            self.window = std::time::Instant::now();
            self.used = 0;
        }
        if self.used < LOG_LINES_PER_SEC {
            self.used += 1;
            true
        } else {
            self.skipped += 1;
            false
        }
    }

    /// Logs how many lines were skipped since the last report, if any.
    fn report(&mut self, server: &str) {
        if self.skipped > 0 {
            tracing::debug!(target: STDERR_TARGET, server, skipped = self.skipped, "stderr lines not logged (more than {LOG_LINES_PER_SEC} a second; the tail keeps the newest)");
            self.skipped = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_newest_bytes() {
        let tail = StderrTail::default();
        for i in 0..100u8 {
            tail.push(&vec![b'a' + (i % 26); 1000]);
        }
        let text = tail.text().unwrap_or_default();
        assert_eq!(text.len(), STDERR_TAIL_BYTES);
        // The newest chunk (i = 99 → 'v') is at the end.
        assert!(text.ends_with(&"v".repeat(1000)));
        let huge = vec![b'z'; STDERR_TAIL_BYTES * 3];
        tail.push(&huge);
        assert_eq!(tail.text().unwrap_or_default().len(), STDERR_TAIL_BYTES);
    }

    #[test]
    fn a_flood_of_lines_is_logged_up_to_the_budget_per_second() {
        let mut budget = LineBudget::new();
        let logged = (0..1000).filter(|_| budget.admit("s")).count();
        assert_eq!(logged, LOG_LINES_PER_SEC as usize);
        assert_eq!(budget.skipped, 1000 - u64::from(LOG_LINES_PER_SEC));
        // The next second starts a new budget (and reports the skipped ones).
        budget.window -= std::time::Duration::from_secs(1);
        assert!(budget.admit("s"));
        assert_eq!(budget.skipped, 0);
    }

    #[test]
    fn empty_tail_is_none() {
        assert!(StderrTail::default().text().is_none());
    }
}

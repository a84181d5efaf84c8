//! Keeps a server's notifications in the order it sent them, and ahead of the responses it
//! sent after them.
//!
//! rmcp hands each notification to its handler in a task of its own, but a response straight
//! to the waiting request. A log line (or progress, or a task status) a server sent just before
//! a call's result could therefore reach the [`EventSink`](crate::EventSink) after the caller
//! already had the result — under load, every line of the call was lost to a caller that stops
//! listening once it has its result. On a multi-threaded runtime those tasks also run side by
//! side, so two log lines could reach the sink swapped.
//!
//! Invariants, for the counted notifications — those whose handlers deliver synchronously
//! (logging, progress and custom ones: task statuses) outside a 2026-07-28 subscription stream
//! (rmcp routes those elsewhere):
//! - the transport numbers them in arrival order ([`Sequence`], in the notification's
//!   extensions); a handler delivers number `n` only after every earlier one was delivered, or
//!   after [`ORDER_WAIT`] when one never is;
//! - a response (or error response) is handed to rmcp only after every counted notification
//!   received before it was delivered, or after [`ORDER_WAIT`];
//! - a handler that never runs delays at most the next delivery, once: whoever gives up
//!   waiting for it marks it as passed, so later ones do not wait for it again.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, GetExtensions, GetMeta, JsonRpcMessage, NotificationMetaObject,
    ServerJsonRpcMessage, ServerNotification,
};
use rmcp::transport::Transport;
use tokio::sync::Notify;

/// How long a response waits for the handlers of the notifications received before it.
/// Handlers only call the sink, so they take microseconds unless the runtime is starved.
pub(crate) const ORDER_WAIT: Duration = Duration::from_secs(1);

/// How far one session's counted notifications were delivered: every number below
/// [`Delivered::next`] was delivered or given up on. Shared by the session's [`InOrder`]
/// transport (which numbers them and holds responses behind them) and its handler (which
/// delivers in number order).
#[derive(Debug, Default)]
pub(crate) struct Delivered {
    next: AtomicU64,
    notify: Notify,
    /// How many counted notifications [`InOrder`] has numbered so far.
    received: AtomicU64,
}

/// A counted notification's place in its session's arrival order (0 for the first), put in
/// its extensions by [`InOrder`] for the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sequence(pub u64);

impl Delivered {
    /// Everything up to and including `sequence` was delivered or given up on.
    fn pass(&self, sequence: u64) {
        self.next.fetch_max(sequence + 1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    fn get(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    /// Numbers a counted notification just received: its place in the arrival order.
    fn number_next(&self) -> u64 {
        self.received.fetch_add(1, Ordering::AcqRel)
    }

    /// How many counted notifications were received so far.
    fn received(&self) -> u64 {
        self.received.load(Ordering::Acquire)
    }

    /// Waits until every counted notification received so far was delivered, or
    /// [`ORDER_WAIT`]: what an answer that bypassed [`InOrder`] (an express call's,
    /// `crate::express`) waits for before it is handed on. Nothing to wait for: no await.
    pub(crate) async fn caught_up(&self) {
        self.caught_up_by(tokio::time::Instant::now() + ORDER_WAIT)
            .await;
    }

    /// As [`Delivered::caught_up`], until `deadline`; past it the notifications still waited
    /// for are given up on, so nothing later waits for them again.
    async fn caught_up_by(&self, deadline: tokio::time::Instant) {
        let target = self.received();
        if self.get() >= target {
            return;
        }
        if self.reach(target, deadline).await < target {
            tracing::warn!(
                waiting = target - self.get(),
                "notifications sent before a response were not delivered within {ORDER_WAIT:?}; the response goes on without them"
            );
            self.pass(target - 1);
        }
    }

    /// Delivers the counted notification numbered `sequence` through `deliver`, in its turn:
    /// after every earlier one, or after [`ORDER_WAIT`] when one of them never comes.
    pub(crate) async fn in_turn(&self, sequence: Sequence, deliver: impl FnOnce()) {
        let deadline = tokio::time::Instant::now() + ORDER_WAIT;
        if self.reach(sequence.0, deadline).await < sequence.0 {
            tracing::warn!(
                waiting = sequence.0 - self.get(),
                "a server's notifications were not delivered within {ORDER_WAIT:?}; the next one goes on without them"
            );
        }
        deliver();
        self.pass(sequence.0);
    }

    /// Waits until every number below `target` was passed, until `deadline` at the latest;
    /// how far it got by then.
    async fn reach(&self, target: u64, deadline: tokio::time::Instant) -> u64 {
        let reached = async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.get() >= target {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout_at(deadline, reached).await;
        self.get()
    }
}

/// Whether `notification` (with `meta`) is numbered and delivered in order (see the module
/// doc).
fn counted(notification: &ServerNotification, meta: &NotificationMetaObject) -> bool {
    matches!(
        notification,
        ServerNotification::LoggingMessageNotification(_)
            | ServerNotification::ProgressNotification(_)
            | ServerNotification::CustomNotification(_)
    ) && meta.subscription_id().is_none()
}

/// A transport whose responses wait for the notifications received before them (see the
/// module doc).
pub(crate) struct InOrder<T> {
    inner: T,
    delivered: Arc<Delivered>,
    /// A response taken from `inner`, waiting for earlier notifications until the instant.
    held: Option<(ServerJsonRpcMessage, tokio::time::Instant)>,
}

impl<T> InOrder<T> {
    pub(crate) fn new(inner: T, delivered: Arc<Delivered>) -> Self {
        Self {
            inner,
            delivered,
            held: None,
        }
    }
}

impl<T> Transport<RoleClient> for InOrder<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    // Cancel-safe, as rmcp needs (it drops a pending receive when another event comes first):
    // a response taken from the inner transport is held in `self` while it waits, never in the
    // future alone.
    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        if self.held.is_none() {
            let mut message = self.inner.receive().await?;
            match &mut message {
                JsonRpcMessage::Notification(n)
                    if counted(&n.notification, n.notification.get_meta()) =>
                {
                    n.notification
                        .extensions_mut()
                        .insert(Sequence(self.delivered.number_next()));
                    return Some(message);
                }
                JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)
                    if self.delivered.get() < self.delivered.received() =>
                {
                    self.held = Some((message, tokio::time::Instant::now() + ORDER_WAIT));
                }
                _ => return Some(message),
            }
        }
        // Only this receive numbers notifications: while a response is held, none arrives.
        let deadline = self.held.as_ref().map(|(_, deadline)| *deadline)?;
        self.delivered.caught_up_by(deadline).await;
        self.held.take().map(|(message, _)| message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reach_returns_once_delivered_and_gives_up_after_the_wait() {
        let delivered = Arc::new(Delivered::default());
        let bump = delivered.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            bump.pass(0);
            bump.pass(1);
        });
        let after = |wait| tokio::time::Instant::now() + wait;
        assert_eq!(delivered.reach(2, after(Duration::from_secs(5))).await, 2);
        // Nothing more comes: the wait ends at its bound with what was delivered.
        assert_eq!(
            delivered.reach(3, after(Duration::from_millis(30))).await,
            2
        );
    }

    /// rmcp drops a pending `receive` whenever another event comes first: a response held back
    /// for an earlier notification must survive that and come out of the next `receive`.
    #[tokio::test]
    async fn a_held_response_survives_a_dropped_receive() {
        use tokio::io::AsyncWriteExt;
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(ours);
        let inbound = crate::ConnectOptions::new("held").inbound(true);
        let delivered = Arc::new(Delivered::default());
        let mut transport = InOrder::new(
            crate::lines::LineTransport::new(read, write, inbound),
            delivered.clone(),
        );
        theirs
            .write_all(
                concat!(
                    r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
                    "\n",
                    r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
                    "\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let first = transport.receive().await;
        assert!(matches!(first, Some(JsonRpcMessage::Notification(_))));
        // The response waits for the line's handler, which has not run: the receive is dropped.
        let dropped = tokio::time::timeout(Duration::from_millis(50), transport.receive()).await;
        assert!(
            dropped.is_err(),
            "the response waited for the line before it"
        );
        delivered.pass(0);
        let next = tokio::time::timeout(Duration::from_secs(5), transport.receive())
            .await
            .expect("the held response comes out of the next receive");
        assert!(matches!(next, Some(JsonRpcMessage::Response(_))));
    }

    /// An in-process server that answers `initialize`, and every other request with the
    /// notifications `before` and then a result, all in one write.
    fn answers_after(before: Vec<serde_json::Value>) -> crate::InProcessServe {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        Arc::new(move |pipe| {
            let before = before.clone();
            tokio::spawn(async move {
                let (read, mut write) = tokio::io::split(pipe);
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let message: serde_json::Value = serde_json::from_str(&line).unwrap();
                    let Some(id) = message.get("id").cloned() else {
                        continue;
                    };
                    let mut out = String::new();
                    if message["method"] == "initialize" {
                        out += &serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                            "protocolVersion": "2025-06-18",
                            "capabilities": {"tools": {}, "logging": {}},
                            "serverInfo": {"name": "ordered", "version": "1"}}})
                        .to_string();
                    } else {
                        for notification in &before {
                            out += &notification.to_string();
                            out += "\n";
                        }
                        out += &serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                            "content": [{"type": "text", "text": "done"}]}})
                        .to_string();
                    }
                    if write
                        .write_all(format!("{out}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        })
    }

    async fn call(session: &crate::Session) {
        let call = session
            .peer()
            .call_tool(rmcp::model::CallToolRequestParams::new("echo"));
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the result is not lost while it waits")
            .expect("the call answers");
    }

    /// A server writes a log line, a progress notification and the call's result in one write;
    /// their handlers are slow (a sink that takes 200 ms each). The caller still gets the
    /// result only after both reached the sink — before, rmcp handed the result over while
    /// their handlers ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_result_waits_for_the_log_line_sent_before_it() {
        use crate::{ConnectOptions, Connector, HarnessClient, InProcessConnector, ServerEvent};
        use std::sync::Mutex;

        let serve = answers_after(vec![
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "before the result"}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1}}),
        ]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = seen.clone();
        let sink: crate::EventSink = Arc::new(move |event| {
            let seen = match event {
                ServerEvent::Log(_) => "log",
                ServerEvent::Progress(_) => "progress",
                _ => return,
            };
            std::thread::sleep(Duration::from_millis(200));
            sink_seen.lock().unwrap().push(seen);
        });
        let session = InProcessConnector { serve }
            .connect(HarnessClient::new(sink), ConnectOptions::new("ordered"))
            .await
            .expect("connects");
        for round in 1..=3 {
            call(&session).await;
            assert_eq!(
                seen.lock().unwrap().len(),
                2 * round,
                "the log line and progress sent before result {round} reached the sink before it"
            );
        }
        session.shutdown().await;
    }

    /// On a multi-threaded runtime rmcp runs the handlers of a server's notifications side by
    /// side: 60 log lines, a sink that dawdles over every fifth, and still the sink sees them
    /// in the order the server wrote them, all before the result.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(deprecated)] // logging is deprecated by SEP-2577; servers still send it
    async fn log_lines_reach_the_sink_in_the_order_they_were_sent() {
        use crate::{ConnectOptions, Connector, HarnessClient, InProcessConnector, ServerEvent};
        use std::sync::Mutex;

        const LINES: u64 = 60;
        let serve = answers_after(
            (0..LINES)
                .map(|i| {
                    serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": i}})
                })
                .collect(),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = seen.clone();
        let sink: crate::EventSink = Arc::new(move |event| {
            let ServerEvent::Log(line) = event else {
                return;
            };
            let i = line.data.as_u64().unwrap();
            if i % 5 == 0 {
                std::thread::sleep(Duration::from_millis(3));
            }
            sink_seen.lock().unwrap().push(i);
        });
        let session = InProcessConnector { serve }
            .connect(HarnessClient::new(sink), ConnectOptions::new("ordered"))
            .await
            .expect("connects");
        for round in 0..3 {
            call(&session).await;
            let expected: Vec<u64> = (0..LINES)
                .cycle()
                .take(((round + 1) * LINES) as usize)
                .collect();
            assert_eq!(*seen.lock().unwrap(), expected, "round {round}");
        }
        session.shutdown().await;
    }
}

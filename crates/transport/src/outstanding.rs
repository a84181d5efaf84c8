//! Which of a session's requests are still waiting for their answer, so a session can be closed
//! only after the calls already sent on it are answered ([`crate::Session::drain`]).
//!
//! Invariant: an id is counted from the moment its request is handed to the transport until
//! its response or error comes back, its sending fails, the client cancels it
//! (`notifications/cancelled`), or the connection ends (the inner transport has nothing more to receive, or is closed) — so a drain
//! never waits for an answer that can no longer come. A `subscriptions/listen` request is a
//! stream that lasts as long as the session, not a call: it is never counted. A caller about to
//! send on the session holds it ([`Sends::hold`]) from before it checks the connection is still
//! current until its call ends, and a drain waits for the holds as for the ids: a call that
//! found the connection current is never cut by a close that began before it sent.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio::sync::{Notify, oneshot};

/// The requests of one session that are waiting for their answer.
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    ids: Mutex<HashSet<RequestId>>,
    settled: Notify,
    /// Answers to hand to their caller instead of rmcp; `diverting` counts them, so a
    /// session without any takes no lock per answer.
    diverted: Mutex<HashMap<RequestId, oneshot::Sender<ServerJsonRpcMessage>>>,
    diverting: AtomicUsize,
    /// The connection ended: an answer diverted from now on never comes (set and read under
    /// `diverted`'s lock).
    over: AtomicBool,
    /// Callers holding the session to send on it ([`SendHold`]).
    holds: AtomicUsize,
}

/// Where callers hold a session before sending on it (see the module doc). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Sends(Arc<Outstanding>);

/// One caller's hold on a session, released when dropped.
#[derive(Debug)]
pub struct SendHold(Arc<Outstanding>);

impl Sends {
    pub(crate) fn new(outstanding: Arc<Outstanding>) -> Self {
        Self(outstanding)
    }

    /// Holds the session until the hold is dropped: a drain waits for it.
    pub fn hold(&self) -> SendHold {
        self.0.holds.fetch_add(1, Ordering::SeqCst);
        SendHold(self.0.clone())
    }
}

impl Drop for SendHold {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.ids().is_empty() {
            self.0.settled.notify_waiters();
        }
    }
}

impl Outstanding {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what `message` means for the outstanding requests; the id of a request now
    /// counted.
    fn sent(&self, message: &ClientJsonRpcMessage) -> Option<RequestId> {
        match message {
            JsonRpcMessage::Request(r) if r.request.method() != "subscriptions/listen" => {
                self.ids().insert(r.id.clone());
                return Some(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.answered(id);
                }
            }
            _ => {}
        }
        None
    }

    /// A request sent past rmcp (an express call) waits for its answer from now on.
    pub(crate) fn sent_id(&self, id: &RequestId) {
        self.ids().insert(id.clone());
    }

    pub(crate) fn answered(&self, id: &RequestId) {
        let mut ids = self.ids();
        if ids.remove(id) && ids.is_empty() && self.holds.load(Ordering::SeqCst) == 0 {
            self.settled.notify_waiters();
        }
    }

    /// The answer to `id`, when it comes through the transport, goes to `to` instead of rmcp;
    /// once the connection ended, `to` is dropped at once (its receiver sees it closed).
    pub(crate) fn divert(&self, id: RequestId, to: oneshot::Sender<ServerJsonRpcMessage>) {
        let mut diverted = self.diverted.lock().unwrap_or_else(|p| p.into_inner());
        if self.over.load(Ordering::Acquire) {
            return;
        }
        if diverted.insert(id, to).is_none() {
            self.diverting.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// `id`'s answer goes to rmcp again (its call ended without it), if it was diverted.
    pub(crate) fn undivert(&self, id: &RequestId) {
        drop(self.diverted(id));
    }

    /// Who `id`'s answer goes to instead of rmcp, if anyone (taken: it is handed once).
    fn diverted(&self, id: &RequestId) -> Option<oneshot::Sender<ServerJsonRpcMessage>> {
        if self.diverting.load(Ordering::Acquire) == 0 {
            return None;
        }
        let taken = self
            .diverted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if taken.is_some() {
            self.diverting.fetch_sub(1, Ordering::AcqRel);
        }
        taken
    }

    /// The connection ended: nothing outstanding can be answered any more (a diverted answer's
    /// caller sees its channel closed).
    fn ended(&self) {
        self.ids().clear();
        let mut diverted = self.diverted.lock().unwrap_or_else(|p| p.into_inner());
        self.over.store(true, Ordering::Release);
        diverted.clear();
        self.diverting.store(0, Ordering::Release);
        drop(diverted);
        self.settled.notify_waiters();
    }

    /// How many calls are in flight now, at least: requests waiting for their answer, or
    /// callers holding the session to send. A call holds the session while its request waits,
    /// so the two overlap and are not added (one call is one, not two); zero only when both are.
    pub(crate) fn count(&self) -> usize {
        self.ids().len().max(self.holds.load(Ordering::SeqCst))
    }

    /// Waits until no request is waiting for its answer, `limit` at the longest; how many
    /// still were then.
    pub(crate) async fn settle(&self, limit: Duration) -> usize {
        let settled = async {
            loop {
                let notified = self.settled.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let idle = self.ids().is_empty() && self.holds.load(Ordering::SeqCst) == 0;
                if idle || self.over.load(Ordering::Acquire) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, settled).await;
        self.count()
    }
}

/// A transport that keeps [`Outstanding`] up to date with what passes through it.
pub(crate) struct Tracked<T> {
    inner: T,
    outstanding: Arc<Outstanding>,
}

impl<T> Tracked<T> {
    pub(crate) fn new(inner: T, outstanding: Arc<Outstanding>) -> Self {
        Self { inner, outstanding }
    }
}

impl<T> Transport<RoleClient> for Tracked<T>
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
        // The outstanding set is shared with the future only for a request it counted.
        let counted = (self.outstanding.sent(&item)).map(|id| (id, self.outstanding.clone()));
        let sending = self.inner.send(item);
        async move {
            let sent = sending.await;
            // A request that never left gets no answer: not waited for.
            if let (Err(_), Some((id, outstanding))) = (&sent, counted) {
                outstanding.answered(&id);
            }
            sent
        }
    }

    // Cancel-safe as the inner transport's receive is: the bookkeeping runs only once a
    // message was taken, and synchronously.
    // A diverted answer is handed to its caller here, synchronously, and the next message
    // awaited: nothing is held across that await.
    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let message = self.inner.receive().await;
            let id = match &message {
                Some(JsonRpcMessage::Response(r)) => Some(&r.id),
                Some(JsonRpcMessage::Error(e)) => e.id.as_ref(),
                Some(_) => None,
                None => {
                    self.outstanding.ended();
                    return None;
                }
            };
            if let Some(id) = id {
                self.outstanding.answered(id);
                if let Some(to) = self.outstanding.diverted(id) {
                    let _ = to.send(message.expect("an answer was received"));
                    continue;
                }
            }
            return message;
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.outstanding.ended();
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn message(json: serde_json::Value) -> ClientJsonRpcMessage {
        serde_json::from_value(json).expect("a client message")
    }

    fn ping(id: i64) -> ClientJsonRpcMessage {
        message(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
    }

    #[tokio::test]
    async fn settles_once_every_sent_request_is_answered_or_cancelled() {
        let outstanding = Arc::new(Outstanding::default());
        outstanding.sent(&ping(1));
        outstanding.sent(&ping(2));
        // Nothing answered: the wait ends at its limit with both still out.
        assert_eq!(outstanding.settle(Duration::from_millis(20)).await, 2);

        let later = outstanding.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            later.answered(&NumberOrString::Number(1));
            later.sent(&message(serde_json::json!({"jsonrpc": "2.0",
                "method": "notifications/cancelled", "params": {"requestId": 2}})));
        });
        assert_eq!(outstanding.settle(Duration::from_secs(5)).await, 0);
    }

    #[test]
    fn a_call_holding_the_session_while_its_request_waits_counts_once() {
        let outstanding = Arc::new(Outstanding::default());
        let sends = Sends::new(outstanding.clone());
        let hold = sends.hold();
        assert_eq!(outstanding.count(), 1, "about to send");
        outstanding.sent(&ping(1));
        assert_eq!(outstanding.count(), 1, "one call, sent and held");
        let second = sends.hold();
        outstanding.sent(&ping(2));
        assert_eq!(outstanding.count(), 2);
        drop((hold, second));
        outstanding.answered(&NumberOrString::Number(1));
        assert_eq!(outstanding.count(), 1, "request 2 still waits");
    }

    /// A transport whose every send fails (a POST that never reached the server).
    struct Unreachable;

    impl Transport<RoleClient> for Unreachable {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Err(std::io::Error::other("connection refused")))
        }

        async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
            std::future::pending().await
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_request_that_was_never_sent_is_not_waited_for() {
        let outstanding = Arc::new(Outstanding::default());
        let mut transport = Tracked::new(Unreachable, outstanding.clone());
        assert!(transport.send(ping(4)).await.is_err());
        assert_eq!(outstanding.settle(Duration::from_millis(1)).await, 0);
    }

    #[tokio::test]
    async fn a_listen_stream_is_not_waited_for() {
        let outstanding = Outstanding::default();
        outstanding.sent(&message(serde_json::json!({"jsonrpc": "2.0", "id": 3,
            "method": "subscriptions/listen", "params": {"notifications": {"toolsListChanged": true}}})));
        assert_eq!(outstanding.settle(Duration::from_millis(1)).await, 0);
    }

    #[tokio::test]
    async fn an_ended_connection_settles_at_once() {
        let outstanding = Outstanding::default();
        outstanding.sent(&ping(7));
        outstanding.ended();
        assert_eq!(outstanding.settle(Duration::from_secs(5)).await, 0);
    }
}

//! A call's progress on its way to a client that may read it slowly, or not at all.
//!
//! Invariant: however fast the upstream reports progress and however slowly the client reads,
//! at most [`WAITING`] reports wait per call. Beyond, the newest replaces the last one waiting —
//! progress is a state, and its latest value is what a client needs — so the reports a client
//! gets are in order and end with the newest.

use std::collections::VecDeque;
use std::sync::Mutex;

use rmcp::model::ProgressNotificationParam;
use tokio::sync::{Notify, mpsc};

/// The most progress reports waiting for one call's client.
pub(super) const WAITING: usize = 64;

/// Reports waiting, and whether the call will send more.
#[derive(Default)]
struct Queue {
    waiting: Mutex<(VecDeque<ProgressNotificationParam>, bool)>,
    ready: Notify,
}

impl Queue {
    fn push(&self, progress: ProgressNotificationParam) {
        let mut state = self.waiting.lock().expect("not poisoned");
        let waiting = &mut state.0;
        if waiting.len() >= WAITING {
            if let Some(last) = waiting.back_mut() {
                *last = progress;
            }
        } else {
            waiting.push_back(progress);
        }
        drop(state);
        self.ready.notify_one();
    }

    fn close(&self) {
        self.waiting.lock().expect("not poisoned").1 = true;
        self.ready.notify_one();
    }

    /// The next report; `None` once none waits and the call sends no more.
    async fn next(&self) -> Option<ProgressNotificationParam> {
        loop {
            {
                let mut state = self.waiting.lock().expect("not poisoned");
                if let Some(progress) = state.0.pop_front() {
                    return Some(progress);
                }
                if state.1 {
                    return None;
                }
            }
            // A notification given meanwhile is kept as a permit: none is missed.
            self.ready.notified().await;
        }
    }
}

/// Forwards the reports `reports` receives with `send` (which says whether the client is
/// still there), as the module says. The task returned ends when the call's sender is dropped
/// and what waited was sent (a call's answer goes after its progress), or when the client is
/// gone.
pub(super) fn forward<S, F>(
    mut reports: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    send: S,
) -> tokio::task::JoinHandle<()>
where
    S: Fn(ProgressNotificationParam) -> F + Send + 'static,
    F: std::future::Future<Output = bool> + Send,
{
    let queue = std::sync::Arc::new(Queue::default());
    let taken = queue.clone();
    // Takes every report at once, so the unbounded channel never holds more than a moment's.
    let take = tokio::spawn(async move {
        while let Some(progress) = reports.recv().await {
            taken.push(progress);
        }
        taken.close();
    });
    tokio::spawn(async move {
        while let Some(progress) = queue.next().await {
            if !send(progress).await {
                break;
            }
        }
        // Sent all, or the client is gone: nothing more is taken either.
        take.abort();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::time::Duration;

    use rmcp::model::{NumberOrString, ProgressToken};

    fn report(n: u32) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(1)), f64::from(n))
    }

    /// A client that reads nothing while 10,000 reports arrive holds at most `WAITING` of them;
    /// once it reads, it gets them in order, the newest last.
    #[tokio::test]
    async fn a_client_that_does_not_read_holds_a_bounded_queue() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (sent, mut got) = mpsc::unbounded_channel::<f64>();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let open = gate.clone();
        forward(rx, move |progress| {
            let (sent, gate) = (sent.clone(), gate.clone());
            async move {
                // The client reads once the gate opens.
                let _ = gate.acquire().await.map(|permit| permit.forget());
                sent.send(progress.progress).is_ok()
            }
        });
        for n in 0..10_000 {
            tx.send(report(n)).unwrap();
        }
        drop(tx);
        // Everything taken off the channel: the first report is with the client, at most
        // `WAITING` wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
        open.add_permits(20_000);
        let mut seen = Vec::new();
        while let Ok(Some(p)) = tokio::time::timeout(Duration::from_secs(5), got.recv()).await {
            seen.push(p);
        }
        assert!(seen.len() <= WAITING + 1, "{} reports", seen.len());
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order: {seen:?}");
        assert_eq!(seen.last(), Some(&9_999.0), "the newest last");
    }

    /// A client that keeps up gets every report.
    #[tokio::test]
    async fn a_client_that_keeps_up_gets_every_report() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (sent, mut got) = mpsc::unbounded_channel::<f64>();
        forward(rx, move |progress| {
            let sent = sent.clone();
            async move { sent.send(progress.progress).is_ok() }
        });
        for n in 0..50 {
            tx.send(report(n)).unwrap();
        }
        drop(tx);
        let mut seen = Vec::new();
        while let Ok(Some(p)) = tokio::time::timeout(Duration::from_secs(5), got.recv()).await {
            seen.push(p);
        }
        assert_eq!(seen, (0..50).map(f64::from).collect::<Vec<_>>());
    }
}

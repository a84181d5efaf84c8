//! Resource subscriptions on a 2026-07-28 session, which has no `resources/subscribe`
//! (SEP-2575): one `subscriptions/listen` stream per subscribed resource, its
//! `notifications/resources/updated` broadcast as an older session's are.
//!
//! Invariants: at most one stream per (server, URI); a stream ends when it is unsubscribed,
//! when its session closes, or when the runtime is dropped — none outlives what it serves.

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use tokio::sync::broadcast;

use crate::connection::server::ResourceUpdate;
use crate::error::{CallError, classify};
use crate::snapshot::publisher::ServerClient;

/// The open listen streams of resource subscriptions, by (server, URI).
#[derive(Default)]
pub(crate) struct Listens(Mutex<HashMap<(String, String), tokio::task::AbortHandle>>);

impl Listens {
    /// Listens for updates of `uri` on `client` (a 2026-07-28 session) and broadcasts them on
    /// `updates`; answers once the server acknowledged the stream.
    pub(crate) async fn subscribe(
        &self,
        client: &ServerClient,
        server: &str,
        uri: &str,
        updates: broadcast::Sender<ResourceUpdate>,
    ) -> Result<(), CallError> {
        let mut filter = SubscriptionFilter::new();
        filter.resource_subscriptions = Some(vec![uri.to_string()]);
        let mut subscription = client
            .peer
            .listen(filter)
            .await
            .map_err(|e| classify(e, server, uri, client.tool_timeout))?;
        let (server, uri) = (server.to_string(), uri.to_string());
        let key = (server.clone(), uri.clone());
        let task = tokio::spawn(async move {
            while let Ok(Some(notification)) = subscription.next().await {
                if let ServerNotification::ResourceUpdatedNotification(n) = notification {
                    let _ = updates.send(ResourceUpdate {
                        server: server.clone(),
                        uri: n.params.uri,
                    });
                }
            }
        });
        let earlier = lock(&self.0).insert(key, task.abort_handle());
        if let Some(earlier) = earlier {
            earlier.abort();
        }
        Ok(())
    }

    /// Ends the stream of `uri` on `server`; whether there was one.
    pub(crate) fn unsubscribe(&self, server: &str, uri: &str) -> bool {
        let key = (server.to_string(), uri.to_string());
        let found = lock(&self.0).remove(&key);
        found.map(|task| task.abort()).is_some()
    }
}

impl Drop for Listens {
    fn drop(&mut self) {
        for task in lock(&self.0).values() {
            task.abort();
        }
    }
}

/// The map, even if a holder panicked (it holds only abort handles).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

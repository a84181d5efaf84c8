//! Resource subscriptions outlive a reconnect: a server forgets its subscriptions with the
//! connection they were made on, so each one still held is sent again on the server's next
//! connection.
//!
//! Invariants: a subscription is remembered from its successful `resources/subscribe` until
//! its last holder unsubscribes; it is sent again at most once per new connection (epoch); the
//! watch ends with the runtime (its snapshot channel closes) and holds no runtime alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::ClientRequest;

use crate::snapshot::Live;

/// (server, URI) → (how many hold it, the connection the server last heard of it on).
type Held = HashMap<(String, String), (usize, u64)>;

/// The subscriptions made through one runtime (`resources/subscribe`, protocols before
/// 2026-07-28), and the watch that renews them on a new connection.
#[derive(Default)]
pub(crate) struct Subscriptions {
    held: Arc<Mutex<Held>>,
    watching: std::sync::OnceLock<()>,
}

impl Subscriptions {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a subscription to `uri` on `server`, made on connection `epoch`; the first one
    /// starts the watch over `live`.
    pub(crate) fn add(&self, live: &Arc<Live>, server: &str, uri: &str, epoch: u64) {
        let mut held = self.held();
        let entry = held
            .entry((server.to_string(), uri.to_string()))
            .or_insert((0, epoch));
        entry.0 += 1;
        entry.1 = epoch;
        drop(held);
        self.watching.get_or_init(|| {
            tokio::spawn(renew(Arc::downgrade(&self.held), live.clone()));
        });
    }

    /// Counts one holder fewer; whether that was the last (the server is then told).
    pub(crate) fn remove(&self, server: &str, uri: &str) -> bool {
        let mut held = self.held();
        let key = (server.to_string(), uri.to_string());
        match held.get_mut(&key) {
            Some((count, _)) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                held.remove(&key);
                true
            }
            None => true,
        }
    }
}

/// Sends the held subscriptions again to every server whose connection changed since they
/// were made, until the runtime's snapshots end.
async fn renew(held: Weak<Mutex<Held>>, live: Arc<Live>) {
    let mut snapshots = live.watch();
    // The watch must not keep the runtime's parts alive past the runtime.
    let live = Arc::downgrade(&live);
    // A first pass at once: a reconnect published between the first subscription and this
    // watch's start would otherwise wait for the next revision.
    let mut first = true;
    while std::mem::take(&mut first) || snapshots.changed().await.is_ok() {
        let (Some(held), Some(live)) = (held.upgrade(), live.upgrade()) else {
            return;
        };
        let published = live.published();
        let due: Vec<((String, String), crate::snapshot::publisher::ServerClient)> = {
            let held = held.lock().unwrap_or_else(|p| p.into_inner());
            held.iter()
                .filter_map(|((server, uri), (_, epoch))| {
                    let client = published.clients.get(server).filter(|c| !c.retired)?;
                    (client.epoch != *epoch)
                        .then(|| ((server.clone(), uri.clone()), client.clone()))
                })
                .collect()
        };
        for ((server, uri), client) in due {
            // Marked first: a failure is said once per connection, not at every revision. Gone
            // meanwhile (its last holder unsubscribed): not sent.
            match held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&(server.clone(), uri.clone()))
            {
                Some(entry) => entry.1 = client.epoch,
                None => continue,
            }
            #[allow(deprecated)] // resources/subscribe: every protocol before 2026-07-28
            let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
                rmcp::model::SubscribeRequestParams::new(uri.clone()),
            ));
            match super::send(&client, request, &server, &uri).await {
                Ok(_) => {
                    tracing::info!(%server, %uri, "resource subscription renewed on the new connection")
                }
                Err(error) => {
                    tracing::warn!(%server, %uri, %error, "resource subscription not renewed on the new connection")
                }
            }
        }
    }
}

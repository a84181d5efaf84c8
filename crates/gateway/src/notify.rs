//! The notifier: one task per gateway that watches the runtime's published snapshots and tells
//! each client about the kinds whose listing changed for it.
//!
//! Invariants:
//! - a client is sent a kind's `list_changed` only when the digest of what it would now be
//!   listed — through its own profile's view — differs from what it was last shown or told; a revision that changes nothing
//!   visible (a failed server's retry, a reconnect with the same listing) sends nothing;
//! - sends run in their own tasks with a deadline: a slow or stuck client delays nobody else,
//!   and a closed one is dropped from the registry.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use mcp_harness_runtime::ClientProfile;
use std::time::Duration;

use crate::names::{PromptView, ResourceView, SkillView, resources_digest};
use crate::session::{Digests, ListKind, Listener, Shared};
use crate::sync::lock;

/// How long one notification may take to queue before the client is skipped.
const SEND_DEADLINE: Duration = Duration::from_secs(5);

/// Starts the notifier of `shared`; it ends with the gateway (checked at each publication).
pub(crate) fn spawn(shared: &Arc<Shared>) {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let mut watch = shared.runtime.watch();
    tokio::spawn(async move {
        loop {
            let Some(shared) = weak.upgrade() else { break };
            if crate::http::starting(&shared.runtime.snapshot()).is_none() {
                shared.settled_once.store(true, Ordering::Relaxed);
            }
            // An upstream that declared tasks, seen connected: declared from now on.
            shared.serves_tasks();
            let (revision, current) = all_digests_now(&shared).await;
            {
                let mut held = lock(&shared.current);
                *held = current.clone();
                shared.current_revision.store(revision, Ordering::Release);
            }
            tell(&shared, revision, &current);
            // A server (re)connected since: it gets the log level the clients asked for.
            let levels = shared.clone();
            tokio::spawn(async move { levels.log_level.apply(&levels.runtime).await });
            drop(shared);
            if watch.changed().await.is_err() {
                break;
            }
        }
    });
}

/// The digests of what a client would be listed now, per profile (`None`: the whole catalog),
/// all from one binding; with the revision of the snapshot they were computed from.
async fn all_digests_now(shared: &Shared) -> (u64, HashMap<Option<String>, Digests>) {
    let snapshot = shared.runtime.snapshot();
    let binding = Some(shared.runtime.bind_current());
    let previous = lock(&shared.current).clone();
    let revision = snapshot.revision;
    let mut profiles: Vec<Option<&Arc<ClientProfile>>> = vec![None];
    if let Some(clients) = &shared.clients {
        profiles.extend(clients.profiles.iter().map(Some));
    }
    let digests = profiles
        .into_iter()
        .map(|shared_profile| {
            let profile = shared_profile.map(|p| &**p);
            let key = profile.map(|p| p.name.clone());
            let tools = match &binding {
                Some(binding) => {
                    // Remembered, so a session restored from its id can have its calls checked
                    // against the listing it was shown (see `sealed`); kept built for the calls
                    // that bind this snapshot.
                    shared.tool_view(binding, shared_profile).digest
                }
                None => previous.get(&key).map(|d| d.tools).unwrap_or_default(),
            };
            let digests = Digests {
                tools,
                prompts: PromptView::new(&snapshot, shared.options.prefix, profile).digest,
                resources: resources_digest(
                    &ResourceView::new(&snapshot, shared.options.prefix, profile),
                    &SkillView::new(&snapshot, shared.options.prefix, profile),
                ),
            };
            (key, digests)
        })
        .collect();
    (revision, digests)
}

fn tell(shared: &Arc<Shared>, revision: u64, all: &HashMap<Option<String>, Digests>) {
    let mut closed = Vec::new();
    for entry in shared.sessions.iter() {
        let registered = entry.value();
        if let Listener::Peer(peer) = &registered.listener
            && peer.is_transport_closed()
        {
            closed.push(*entry.key());
            continue;
        }
        let key = registered.profile.as_ref().map(|p| p.name.clone());
        let Some(current) = all.get(&key).copied() else {
            continue;
        };
        let catch_up_to = registered.catch_up_to.swap(0, Ordering::AcqRel);
        if catch_up_to != 0 && revision <= catch_up_to {
            *lock(&registered.told) = current;
            continue;
        }
        let kinds: Vec<ListKind> = {
            let mut told = lock(&registered.told);
            let changed = [ListKind::Tools, ListKind::Prompts, ListKind::Resources]
                .into_iter()
                .filter(|kind| told.get(*kind) != current.get(*kind))
                .collect();
            *told = current;
            changed
        };
        if kinds.is_empty() {
            continue;
        }
        let listener = registered.listener.clone();
        let id = *entry.key();
        tokio::spawn(async move {
            for kind in kinds {
                match tokio::time::timeout(SEND_DEADLINE, send(&listener, kind)).await {
                    Ok(Ok(())) => tracing::debug!(session = id, ?kind, "list_changed sent"),
                    // Not accepted by this subscription's filter, or the client is gone.
                    Ok(Err(error)) => {
                        tracing::debug!(session = id, ?kind, %error, "list_changed not sent");
                    }
                    Err(_) => {
                        tracing::warn!(
                            session = id,
                            ?kind,
                            "client did not take list_changed within 5 s; skipped"
                        );
                        break;
                    }
                }
            }
        });
    }
    for id in closed {
        shared.sessions.remove(&id);
    }
}

async fn send(listener: &Listener, kind: ListKind) -> Result<(), String> {
    match listener {
        Listener::Peer(peer) => match kind {
            ListKind::Tools => peer.notify_tool_list_changed().await,
            ListKind::Prompts => peer.notify_prompt_list_changed().await,
            ListKind::Resources => peer.notify_resource_list_changed().await,
        }
        .map_err(|e| e.to_string()),
        Listener::Subscription(sink) => match kind {
            ListKind::Tools => sink.notify_tool_list_changed().await,
            ListKind::Prompts => sink.notify_prompt_list_changed().await,
            ListKind::Resources => sink.notify_resource_list_changed().await,
        }
        .map_err(|e| e.to_string()),
    }
}

//! Runtime changes to the catalogue and the notifications they cause.
//!
//! Invariants:
//! - A change is applied under the state lock, the lock is released, and only
//!   then are notifications sent (never an `.await` while locked).
//! - The calling connection is notified before the tool call returns, so a
//!   client sees `*/list_changed` (or `resources/updated`) no later than the
//!   result. Other connections are notified from spawned tasks, so a client
//!   that stops reading cannot stall the caller.
//! - Legacy clients (protocol with `initialize`) are notified through their
//!   peer; 2026-07-28+ clients through their `subscriptions/listen` sinks,
//!   which filter by what they subscribed to.

use rmcp::{
    Peer, RoleServer,
    model::{CallToolResult, ResourceUpdatedNotificationParam},
    service::{RequestContext, SubscriptionSink},
};

use crate::{
    handler::lists::Change,
    handler::state::{ConnId, TextResource},
    handler::{FixtureServer, error_result, text_result},
    tools,
};

/// A notification to deliver to one client.
#[derive(Debug, Clone)]
enum Note {
    ListChanged(Change),
    ResourceUpdated(String),
}

/// Where a notification can be delivered.
enum Target {
    Peer(Peer<RoleServer>),
    Sink(SubscriptionSink),
}

impl Target {
    async fn deliver(self, note: Note) {
        let outcome = match (&self, note) {
            (Self::Peer(peer), Note::ListChanged(Change::Tools)) => peer
                .notify_tool_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Peer(peer), Note::ListChanged(Change::Prompts)) => peer
                .notify_prompt_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Peer(peer), Note::ListChanged(Change::Resources)) => peer
                .notify_resource_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Peer(peer), Note::ResourceUpdated(uri)) => peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await
                .map_err(|e| e.to_string()),
            (Self::Sink(sink), Note::ListChanged(Change::Tools)) => sink
                .notify_tool_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Sink(sink), Note::ListChanged(Change::Prompts)) => sink
                .notify_prompt_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Sink(sink), Note::ListChanged(Change::Resources)) => sink
                .notify_resource_list_changed()
                .await
                .map_err(|e| e.to_string()),
            (Self::Sink(sink), Note::ResourceUpdated(uri)) => sink
                .notify_resource_updated(uri)
                .await
                .map_err(|e| e.to_string()),
        };
        if let Err(error) = outcome {
            // Filtered sinks and closed transports are expected here.
            tracing::debug!(%error, "notification not delivered");
        }
    }
}

/// Removes a `subscriptions/listen` sink from the state when dropped.
pub(crate) struct SinkRegistration {
    server: FixtureServer,
    key: u64,
}

impl Drop for SinkRegistration {
    fn drop(&mut self) {
        self.server.lock().sinks.remove(&self.key);
    }
}

/// Whether the request runs under a protocol version with `initialize`
/// (where list changes are plain notifications rather than subscriptions).
fn is_legacy(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_none_or(|v| v.has_initialize())
}

impl FixtureServer {
    /// Registers a listen sink until the returned guard is dropped.
    pub(crate) fn register_sink(&self, sink: SubscriptionSink) -> SinkRegistration {
        let mut state = self.lock();
        let key = state.next_sink;
        state.next_sink += 1;
        state.sinks.insert(key, (self.conn, sink));
        SinkRegistration {
            server: self.clone(),
            key,
        }
    }

    /// Delivers `note` to every interested client; see the module invariants.
    async fn fan_out(&self, note: Note, context: &RequestContext<RoleServer>) {
        let mut own = Vec::new();
        let mut others: Vec<(ConnId, Target)> = Vec::new();
        {
            let mut state = self.lock();
            state.prune_closed();
            match &note {
                Note::ListChanged(_) => {
                    if is_legacy(context) {
                        own.push(Target::Peer(context.peer.clone()));
                    }
                    others.extend(
                        state
                            .peers
                            .iter()
                            .filter(|(conn, _)| **conn != self.conn)
                            .map(|(conn, peer)| (*conn, Target::Peer(peer.clone()))),
                    );
                }
                Note::ResourceUpdated(uri) => {
                    if let Some(subs) = state.subscribers.get(uri) {
                        others.extend(
                            subs.iter()
                                .map(|(conn, peer)| (*conn, Target::Peer(peer.clone()))),
                        );
                    }
                }
            }
            others.extend(
                state
                    .sinks
                    .values()
                    .map(|(conn, sink)| (*conn, Target::Sink(sink.clone()))),
            );
        }
        for (conn, target) in others {
            if conn == self.conn {
                own.push(target);
            } else {
                tokio::spawn(target.deliver(note.clone()));
            }
        }
        for target in own {
            target.deliver(note.clone()).await;
        }
    }

    pub(crate) async fn list_changed(&self, change: Change, context: &RequestContext<RoleServer>) {
        self.fan_out(Note::ListChanged(change), context).await;
    }

    /// `add_tool`: adds an echoing tool named `name`.
    pub(crate) async fn add_tool(
        &self,
        name: String,
        description: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Err(message) = tools::validate_name(&name) {
            return error_result(message);
        }
        {
            let mut state = self.lock();
            let taken = tools::STATIC_TOOL_NAMES.contains(&name.as_str())
                || crate::handler::faults::FAULT_TOOL_NAMES.contains(&name.as_str())
                || crate::handler::lifecycle::HTTP_FAULT_TOOL_NAMES.contains(&name.as_str())
                || crate::handler::versioned::VERSIONED_TOOL_NAMES.contains(&name.as_str())
                || (self.opts.skills
                    && crate::handler::skills::SKILL_TOOL_NAMES.contains(&name.as_str()))
                || tools::generated_index(&name, self.opts.tools).is_some()
                || state.dynamic_tools.iter().any(|t| t.name == name);
            if taken {
                return error_result(format!("tool {name} already exists"));
            }
            state
                .dynamic_tools
                .push(tools::dynamic_tool(&name, description));
        }
        self.list_changed(Change::Tools, context).await;
        text_result(format!("added tool {name}"))
    }

    /// `remove_tool`: removes a tool added with `add_tool`.
    pub(crate) async fn remove_tool(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        {
            let mut state = self.lock();
            let before = state.dynamic_tools.len();
            state.dynamic_tools.retain(|t| t.name != name);
            if state.dynamic_tools.len() == before {
                return error_result(format!("no dynamic tool named {name}"));
            }
        }
        self.list_changed(Change::Tools, context).await;
        text_result(format!("removed tool {name}"))
    }

    /// `add_prompt`: adds a prompt named `name`.
    pub(crate) async fn add_prompt(
        &self,
        name: String,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Err(message) = tools::validate_name(&name) {
            return error_result(message);
        }
        {
            let mut state = self.lock();
            if name == "greeting" || state.dynamic_prompts.contains(&name) {
                return error_result(format!("prompt {name} already exists"));
            }
            state.dynamic_prompts.push(name.clone());
        }
        self.list_changed(Change::Prompts, context).await;
        text_result(format!("added prompt {name}"))
    }

    /// `remove_prompt`: removes a prompt added with `add_prompt`.
    pub(crate) async fn remove_prompt(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        {
            let mut state = self.lock();
            let before = state.dynamic_prompts.len();
            state.dynamic_prompts.retain(|p| p != name);
            if state.dynamic_prompts.len() == before {
                return error_result(format!("no dynamic prompt named {name}"));
            }
        }
        self.list_changed(Change::Prompts, context).await;
        text_result(format!("removed prompt {name}"))
    }

    /// `add_resource`: adds a text resource at `uri`.
    pub(crate) async fn add_resource(
        &self,
        uri: String,
        text: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if uri.trim().is_empty() {
            return error_result("resource uri must not be empty");
        }
        {
            let mut state = self.lock();
            if state.resource_mut(&uri).is_some() {
                return error_result(format!("resource {uri} already exists"));
            }
            let text = text.unwrap_or_else(|| format!("resource {uri}"));
            state.resources.push(TextResource {
                uri: uri.clone(),
                text,
            });
        }
        self.list_changed(Change::Resources, context).await;
        text_result(format!("added resource {uri}"))
    }

    /// `remove_resource`: removes a resource added with `add_resource`.
    pub(crate) async fn remove_resource(
        &self,
        uri: &str,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if uri == tools::README_URI {
            return error_result(format!("resource {uri} is static and cannot be removed"));
        }
        {
            let mut state = self.lock();
            let before = state.resources.len();
            state.resources.retain(|r| r.uri != uri);
            if state.resources.len() == before {
                return error_result(format!("no resource {uri}"));
            }
            state.subscribers.remove(uri);
        }
        self.list_changed(Change::Resources, context).await;
        text_result(format!("removed resource {uri}"))
    }

    /// `update_resource`: replaces a resource's text and notifies subscribers.
    pub(crate) async fn update_resource(
        &self,
        uri: &str,
        text: String,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        match self.lock().resource_mut(uri) {
            Some(resource) => resource.text = text,
            None => return error_result(format!("no resource {uri}")),
        }
        self.fan_out(Note::ResourceUpdated(uri.to_owned()), context)
            .await;
        text_result(format!("updated resource {uri}"))
    }
}

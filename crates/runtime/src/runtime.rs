//! The embedding facade. The actors run on a dedicated thread with their own actix system, so a
//! [`Runtime`] works from any tokio runtime (or none, for reading snapshots); snapshots are read
//! lock-free and calls go straight to the bound client.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::prelude::*;
use mcp_harness_catalog::CommandSource;
use mcp_harness_catalog::skills::{ListedFiles, SkillEntry, SkillIndex};
use mcp_harness_catalog::{ServerState, Snapshot};
use rmcp::model::{
    ClientRequest, GetPromptResult, JsonObject, ReadResourceResult, ResourceContents, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use tokio::sync::{broadcast, watch};

use crate::call::binding::{CallOptions, Forwarded, StepBinding, ToolResult};
use crate::call::context::CallContext;
use crate::call::input::{self, Reply};
use crate::config::Config;
use crate::config::sources::Sources;
#[cfg(feature = "testing")]
use crate::connection::cache::ListingCache;
use crate::connection::registry::{Reconciled, Registry};
use crate::connection::server::{
    ResourceUpdate, Restart, SHUTDOWN_GRACE, ServerLog, Stop, TaskStatusUpdate,
};
use crate::desired::DesiredState;
use crate::desired::reload::{self, ConfigLoader, ConfigWatch, RemoteJoiner};
use crate::error::{CallError, StartError, unexpected};
use crate::snapshot::Live;
use crate::snapshot::publisher::{Published, ServerClient};

mod resubscribe;
mod tasks;
mod traced;

pub use traced::TraceMeta;

/// A running harness: servers connecting or connected, and the latest published snapshot.
pub struct Runtime {
    live: Arc<Live>,
    registry: Arc<Registry>,
    #[cfg(feature = "testing")]
    cache: Arc<ListingCache>,
    resource_updates: broadcast::Sender<ResourceUpdate>,
    /// Resource subscriptions on 2026-07-28 sessions (listen streams).
    listens: crate::listens::Listens,
    /// Resource subscriptions on earlier sessions, renewed on a new connection.
    subscriptions: resubscribe::Subscriptions,
    logs: broadcast::Sender<ServerLog>,
    task_statuses: broadcast::Sender<TaskStatusUpdate>,
    calls: Arc<CallContext>,
    desired: Arc<DesiredState>,
    system: System,
    thread: Option<JoinHandle<()>>,
}

/// The pieces a started runtime is made of (the builder makes them; see [`Runtime::assemble`]).
pub(crate) struct Parts {
    pub(crate) live: Arc<Live>,
    pub(crate) registry: Arc<Registry>,
    #[cfg(feature = "testing")]
    pub(crate) cache: Arc<ListingCache>,
    pub(crate) resource_updates: broadcast::Sender<ResourceUpdate>,
    pub(crate) logs: broadcast::Sender<ServerLog>,
    pub(crate) task_statuses: broadcast::Sender<TaskStatusUpdate>,
    pub(crate) calls: Arc<CallContext>,
    pub(crate) desired: Arc<DesiredState>,
    pub(crate) system: System,
    pub(crate) thread: JoinHandle<()>,
}

/// A loaded, verified skill.
#[derive(Debug, Clone)]
pub struct LoadedSkill {
    /// The listing entry it was verified against.
    pub entry: Arc<SkillEntry>,
    /// The frontmatter of the fetched `SKILL.md` (equal to the listed one).
    pub frontmatter: serde_json::Map<String, serde_json::Value>,
    /// The instructions: `SKILL.md` after its frontmatter.
    pub body: String,
}

/// How many resource updates a slow subscriber may fall behind before it misses some.
pub(crate) const RESOURCE_UPDATE_BUFFER: usize = 1024;

/// Updates of one subscribed resource.
pub struct ResourceSubscription {
    /// The server of the resource.
    pub server: String,
    /// The resource.
    pub uri: String,
    rx: broadcast::Receiver<ResourceUpdate>,
}

impl ResourceSubscription {
    /// The next update of this resource; `None` once the runtime is gone. Updates missed by a
    /// subscriber that fell more than the buffer behind are skipped (the next one still comes).
    pub async fn next(&mut self) -> Option<ResourceUpdate> {
        loop {
            match self.rx.recv().await {
                Ok(u) if u.server == self.server && u.uri == self.uri => return Some(u),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(server = %self.server, uri = %self.uri, missed = n, "resource subscriber fell behind");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Runtime {
    /// A runtime of started `parts`: dropping it stops them.
    pub(crate) fn assemble(parts: Parts) -> Self {
        Self {
            live: parts.live,
            registry: parts.registry,
            #[cfg(feature = "testing")]
            cache: parts.cache,
            resource_updates: parts.resource_updates,
            listens: Default::default(),
            subscriptions: Default::default(),
            logs: parts.logs,
            task_statuses: parts.task_statuses,
            calls: parts.calls,
            desired: parts.desired,
            system: parts.system,
            thread: Some(parts.thread),
        }
    }

    /// How long an approval is waited for before the call is refused unsent
    /// ([`RuntimeBuilder::approval_timeout`](crate::RuntimeBuilder::approval_timeout)).
    pub fn approval_timeout(&self) -> std::time::Duration {
        self.calls.approval_timeout()
    }

    /// The latest published snapshot (revision 0 before the first publication).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.live.snapshot()
    }

    /// A receiver of the latest published snapshot: it holds only the newest value, so a reader
    /// that is slower than the publisher skips revisions and the changes they carried. To see
    /// every revision's changes, use [`Runtime::revisions`].
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.live.watch()
    }

    /// Every revision published from now on, in order, each with its changes; a reader that
    /// falls more than the buffer (`RuntimeBuilder::revision_buffer`, default 256) behind gets
    /// one [`Revision::Skipped`](crate::Revision::Skipped) item saying how many revisions it
    /// stands for, with their combined change. See [`Revisions`](crate::Revisions).
    pub fn revisions(&self) -> crate::snapshot::revisions::Revisions {
        self.live.revisions()
    }

    /// Publishes pending updates now instead of at the end of the batching window; returns the
    /// revision then current.
    pub async fn flush(&self) -> u64 {
        self.live.flush().await
    }

    /// Waits until every server has settled (none pending), at most `timeout`; returns the
    /// snapshot then current, settled or not.
    pub async fn wait_settled(&self, timeout: Duration) -> Arc<Snapshot> {
        self.wait_for(timeout, |s| s.revision > 0 && s.all_settled())
            .await
    }

    /// Waits until a published snapshot satisfies `pred`, at most `timeout`; returns the latest.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&Snapshot) -> bool,
    ) -> Arc<Snapshot> {
        self.live.wait_for(timeout, pred).await
    }

    /// Binds a model step (R22, R23): applies a pending configuration change first, waits for
    /// `required` servers to settle (every failure among them is reported together), and
    /// freezes the tools the model sees now. Calls prepared from the binding run on exactly the
    /// connections and schemas it shows.
    pub async fn bind_step(&self, required: &[&str]) -> Result<StepBinding, CallError> {
        if let Err(e) = self.refresh_if_dirty().await {
            tracing::warn!(error = %e, "applying the configuration change failed; binding the current runtime");
        }
        // A change another caller (the pre-warm) applied is complete only once its new
        // servers settled: the step binds that, as if it had applied the change itself.
        self.desired
            .settled(self.registry.longest_startup() + Duration::from_secs(1))
            .await;
        if !required.is_empty() {
            let deadline = self.registry.startup_deadline(required) + Duration::from_secs(1);
            // A server a config edit is replacing shows as pending while its old connection
            // drains, but its entries stay and calls wait for the new connection: bound at
            // once, as a connected one.
            let replacing = |server: &str| self.live.published().replacing(server);
            let snapshot = self
                .wait_for(deadline, |s| {
                    // A server that is not configured never settles; it is reported below. Revision 0
                    // (before the first publication) knows no server yet.
                    s.revision > 0
                        && required.iter().all(|r| {
                            s.servers.get(*r).is_none_or(|st| st.state.is_settled()) || replacing(r)
                        })
                })
                .await;
            let failures: Vec<(String, String)> = required
                .iter()
                .filter_map(|r| match snapshot.servers.get(*r) {
                    None => Some((r.to_string(), "not configured".to_string())),
                    Some(st) if st.state == ServerState::Connected || replacing(r) => None,
                    Some(st) => Some((
                        r.to_string(),
                        format!(
                            "{}{}",
                            st.state.label(),
                            st.last_error
                                .as_deref()
                                .map(|e| format!(": {e}"))
                                .unwrap_or_default()
                        ),
                    )),
                })
                .collect();
            if !failures.is_empty() {
                return Err(CallError::RequiredServers { failures });
            }
        }
        Ok(StepBinding::new(self.calls.clone(), self.live.published()))
    }

    /// A binding of the runtime published now, without waiting for a configuration change to
    /// be applied (one is requested at once, as [`Runtime::prewarm`] does): for a server in
    /// front of many clients (the gateway), where a change applied later reaches each client
    /// as `list_changed`, and a server slow to start must not hold up every listing. A model
    /// step binds with [`Runtime::bind_step`], which applies the change first (R20).
    pub fn bind_current(&self) -> StepBinding {
        if self.desired.is_dirty() {
            self.desired.prewarm();
        }
        StepBinding::new(self.calls.clone(), self.live.published())
    }

    /// Calls the tool the model knows as `qualified_name` through a binding of the current
    /// catalog — the same governed path as [`Runtime::bind_step`] + `prepare_call` + `call`:
    /// argument validation, permission, staleness check, timeout, normalisation, output budget.
    pub async fn call_tool(
        &self,
        qualified_name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<ToolResult, CallError> {
        self.call_tool_with(qualified_name, arguments, CallOptions::default())
            .await
    }

    /// [`Runtime::call_tool`] with progress, cancellation or a timeout of its own.
    pub async fn call_tool_with(
        &self,
        qualified_name: &str,
        arguments: Option<JsonObject>,
        options: CallOptions,
    ) -> Result<ToolResult, CallError> {
        let binding = self.bind_step(&[]).await?;
        let call = binding.prepare_call(qualified_name).map_err(|e| match e {
            CallError::NotInStep {
                name,
                revision,
                hint,
            } if hint.is_empty() && binding.snapshot().tool(&name).is_none() => {
                CallError::UnknownTool { name, revision }
            }
            other => other,
        })?;
        call.call_with(arguments, options).await
    }

    /// Fetches prompt `name` (raw name) from `server` with `arguments` (`prompts/get`); input
    /// the server asks for (SEP-2322) is answered through the embedder's callbacks.
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, CallError> {
        self.get_prompt_with(server, name, arguments, &TraceMeta::default())
            .await
    }

    /// [`Runtime::get_prompt`] sending what `forward` carries of a gateway's client's request
    /// and `trace` in its `_meta`; with `hand_back`, an `input_required` answer is returned
    /// untouched instead of followed.
    pub async fn get_prompt_reply(
        &self,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
        forward: &Forwarded,
        trace: &TraceMeta,
        hand_back: bool,
    ) -> Result<Reply<GetPromptResult>, CallError> {
        let client = self.live_client(server).await?;
        let request = input::Request::Prompt(name.to_string(), arguments);
        input::get_prompt(
            &self.calls,
            &client,
            server,
            request,
            forward,
            trace,
            hand_back,
        )
        .await
    }

    /// Reads resource `uri` from `server` (`resources/read`); input the server asks for
    /// (SEP-2322) is answered through the embedder's callbacks.
    pub async fn read_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<ReadResourceResult, CallError> {
        self.read_resource_with(server, uri, &TraceMeta::default())
            .await
    }

    /// [`Runtime::read_resource`] sending what `forward` carries of a gateway's client's
    /// request and `trace` in its `_meta`; with `hand_back`, an `input_required` answer is
    /// returned untouched.
    pub async fn read_resource_reply(
        &self,
        server: &str,
        uri: &str,
        forward: &Forwarded,
        trace: &TraceMeta,
        hand_back: bool,
    ) -> Result<Reply<ReadResourceResult>, CallError> {
        let client = self.live_client(server).await?;
        let request = input::Request::Resource(uri.to_string());
        input::read_resource(
            &self.calls,
            &client,
            server,
            request,
            forward,
            trace,
            hand_back,
        )
        .await
    }

    /// Subscribes to updates of resource `uri` on `server` (`resources/subscribe`). The
    /// subscription outlives a reconnect: the server's next connection is sent it again.
    pub async fn subscribe_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<ResourceSubscription, CallError> {
        let rx = self.resource_updates.subscribe();
        let client = self.live_client(server).await?;
        if is_modern(&client) {
            // 2026-07-28 has no resources/subscribe: a listen stream for this resource.
            self.listens
                .subscribe(&client, server, uri, self.resource_updates.clone())
                .await?;
            return Ok(ResourceSubscription {
                server: server.to_string(),
                uri: uri.to_string(),
                rx,
            });
        }
        #[allow(deprecated)] // resources/subscribe is how every protocol before 2026-07-28 does it
        let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
            rmcp::model::SubscribeRequestParams::new(uri.to_string()),
        ));
        send(&client, request, server, uri).await?;
        // A reconnect makes the server forget it: sent again on the next connection.
        self.subscriptions
            .add(&self.live, server, uri, client.epoch);
        Ok(ResourceSubscription {
            server: server.to_string(),
            uri: uri.to_string(),
            rx,
        })
    }

    /// Updates of resource `uri` on `server` that an earlier [`Runtime::subscribe_resource`]
    /// asked for, without subscribing again (one upstream subscription, several listeners).
    pub fn resource_updates(&self, server: &str, uri: &str) -> ResourceSubscription {
        ResourceSubscription {
            server: server.to_string(),
            uri: uri.to_string(),
            rx: self.resource_updates.subscribe(),
        }
    }

    /// Every server's log notifications (`notifications/message`) from now on, each with the
    /// server that sent it; a receiver more than the buffer behind misses the oldest.
    pub fn server_logs(&self) -> broadcast::Receiver<ServerLog> {
        self.logs.subscribe()
    }

    /// Stops updates of resource `uri` on `server` (`resources/unsubscribe`) once every
    /// [`Runtime::subscribe_resource`] of it was matched by one of these.
    pub async fn unsubscribe_resource(&self, server: &str, uri: &str) -> Result<(), CallError> {
        if self.listens.unsubscribe(server, uri) {
            return Ok(());
        }
        if !self.subscriptions.remove(server, uri) {
            return Ok(()); // another subscriber still holds it
        }
        let client = self.live_client(server).await?;
        #[allow(deprecated)]
        // resources/unsubscribe is how every protocol before 2026-07-28 does it
        let request = ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
            rmcp::model::UnsubscribeRequestParams::new(uri.to_string()),
        ));
        send(&client, request, server, uri).await?;
        Ok(())
    }

    /// Asks `server` for completions of a prompt or resource-template argument
    /// (`completion/complete`); `params` are sent as given, `_meta` included (a caller's trace
    /// context: [`TraceMeta::apply`]). At most 100 values come back (the protocol's limit;
    /// more are counted in `total`, with `hasMore`).
    pub async fn complete(
        &self,
        server: &str,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult, CallError> {
        let client = self.live_client(server).await?;
        let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(params));
        match send(&client, request, server, "completion/complete").await? {
            ServerResult::CompleteResult(mut r) => {
                cap_completions(&mut r.completion);
                Ok(r)
            }
            other => Err(unexpected(server, "completion/complete", &other)),
        }
    }

    /// Sends `ping` to `server` and waits for its answer: the round-trip time (the server's
    /// request timeout bounds the wait).
    pub async fn ping(&self, server: &str) -> Result<Duration, CallError> {
        let client = self.live_client(server).await?;
        let request = ClientRequest::PingRequest(rmcp::model::PingRequest::default());
        let started = std::time::Instant::now();
        send(&client, request, server, "ping").await?;
        Ok(started.elapsed())
    }

    /// The capabilities connected `server` declared at `initialize` (`None`: not connected).
    pub fn server_capabilities(&self, server: &str) -> Option<rmcp::model::ServerCapabilities> {
        let published = self.live.published();
        let client = published.clients.get(server)?;
        client
            .peer
            .peer_info()
            .map(|info| info.capabilities.clone())
    }

    /// Lists the direct children of directory resource `uri` on `server` (SEP-2640
    /// `resources/directory/read`; one page, from `cursor`). A server that did not declare
    /// `directoryRead` is not asked: the answer is its `-32601`.
    pub async fn read_resource_directory(
        &self,
        server: &str,
        uri: &str,
        cursor: Option<String>,
    ) -> Result<rmcp::model::ListResourcesResult, CallError> {
        self.read_resource_directory_with(server, uri, cursor, &TraceMeta::default())
            .await
    }

    /// Asks `server` to send log notifications of `level` and above (`logging/setLevel`).
    #[allow(deprecated)] // logging/setLevel: every protocol before 2026-07-28
    pub async fn set_log_level(
        &self,
        server: &str,
        level: rmcp::model::LoggingLevel,
    ) -> Result<(), CallError> {
        let client = self.live_client(server).await?;
        let request = ClientRequest::SetLevelRequest(rmcp::model::SetLevelRequest::new(
            rmcp::model::SetLevelRequestParams::new(level),
        ));
        send(&client, request, server, "logging/setLevel").await?;
        Ok(())
    }

    /// Invokes the command the model or user knows as `qualified_name` (built from a prompt):
    /// fetches the prompt with `prompts/get` now, with `arguments`.
    pub async fn run_command(
        &self,
        qualified_name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, CallError> {
        let snapshot = self.snapshot();
        let command = snapshot
            .catalogs
            .values()
            .flat_map(|c| c.commands.iter())
            .find(|c| c.qualified_name == qualified_name)
            .ok_or_else(|| CallError::UnknownTool {
                name: qualified_name.to_string(),
                revision: snapshot.revision,
            })?;
        match &command.source {
            CommandSource::Prompt { raw_name } => {
                self.get_prompt(&command.server, raw_name, arguments).await
            }
            CommandSource::Skill { name } => Err(CallError::Protocol {
                upstream: None,
                server: command.server.clone(),
                tool: name.clone(),
                message: "skill commands are loaded with load_skill, not prompts/get".into(),
            }),
        }
    }

    /// Skills of every connected server whose name or description matches `query` (best
    /// first; an empty query lists them all).
    pub fn search_skills(&self, query: &str) -> Vec<Arc<SkillEntry>> {
        let snapshot = self.snapshot();
        let all: Vec<Arc<SkillEntry>> = snapshot
            .catalogs
            .values()
            .flat_map(|c| c.skills.iter().cloned())
            .collect();
        let index = SkillIndex::new(all.iter().map(|e| (**e).clone()));
        // Hits are found by (server, URI) in a map: a linear search per hit made listing
        // 30,000 skills quadratic.
        let by_key: std::collections::HashMap<(&str, &str), &Arc<SkillEntry>> = all
            .iter()
            .map(|e| ((e.server.as_str(), e.uri.as_str()), e))
            .collect();
        index
            .search(query)
            .into_iter()
            .filter_map(|hit| {
                by_key
                    .get(&(hit.server.as_str(), hit.uri.as_str()))
                    .map(|e| Arc::clone(e))
            })
            .collect()
    }

    /// Loads skill `name` of `server`: only now is its `SKILL.md` fetched, and it is accepted
    /// only if its size and digest match the listing and its frontmatter matches the listed
    /// one field by field. Supporting files are fetched later, one by one, with
    /// [`Runtime::read_skill_file`].
    pub async fn load_skill(&self, server: &str, name: &str) -> Result<LoadedSkill, CallError> {
        let entry = self.skill_entry(server, name)?;
        let bytes = self.read_bytes(server, &entry.uri).await?;
        let frontmatter = entry.verify_skill_md(&bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = frontmatter.body(&text).to_string();
        Ok(LoadedSkill {
            entry,
            frontmatter: frontmatter.fields,
            body,
        })
    }

    /// Fetches one supporting file of a skill and verifies it against the listing.
    pub async fn read_skill_file(
        &self,
        server: &str,
        name: &str,
        uri: &str,
    ) -> Result<Vec<u8>, CallError> {
        let entry = self.skill_entry(server, name)?;
        if entry.listed_file(uri).is_none() && matches!(entry.files, ListedFiles::Files(_)) {
            entry.verify_supporting(uri, &[])?;
        }
        let bytes = self.read_bytes(server, uri).await?;
        entry.verify_supporting(uri, &bytes)?;
        Ok(bytes)
    }

    /// `server`'s skill named `name`, or listed at URI `name`. A name several of its skills
    /// share (a gateway in front of servers with skills of one name) is refused with their
    /// URIs, which tell them apart.
    fn skill_entry(&self, server: &str, name: &str) -> Result<Arc<SkillEntry>, CallError> {
        let snapshot = self.snapshot();
        let skills = snapshot.catalogs.get(server).map(|c| c.skills.as_slice());
        if let Some(by_uri) = skills.and_then(|s| s.iter().find(|s| s.uri == name)) {
            return Ok(by_uri.clone());
        }
        let named: Vec<&Arc<SkillEntry>> = skills
            .unwrap_or_default()
            .iter()
            .filter(|s| s.name == name)
            .collect();
        match named.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(CallError::UnknownSkill {
                server: server.to_string(),
                name: name.to_string(),
                revision: snapshot.revision,
            }),
            several => Err(CallError::InvalidArguments {
                name: name.to_string(),
                details: format!(
                    "server `{server}` lists {} skills named `{name}` ({}): give the URI of \
                     the one to load instead of its name",
                    several.len(),
                    several
                        .iter()
                        .map(|s| s.uri.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// The bytes of resource `uri`: its text as UTF-8, or its blob decoded.
    async fn read_bytes(&self, server: &str, uri: &str) -> Result<Vec<u8>, CallError> {
        let result = self.read_resource(server, uri).await?;
        first_contents_bytes(server, uri, &result)
    }

    /// Checks what a `resources/read` of `uri` returned against `server`'s skill listing when
    /// `uri` is a file a skill of it lists with a digest (its `SKILL.md` or a supporting file):
    /// a read that shows a skill's file to a person is the same file the listing vouched for.
    /// `Ok(false)` when `uri` is no listed skill file (nothing to check).
    pub fn verify_skill_read(
        &self,
        server: &str,
        uri: &str,
        result: &ReadResourceResult,
    ) -> Result<bool, CallError> {
        let snapshot = self.snapshot();
        let Some(entry) = snapshot
            .catalogs
            .get(server)
            .and_then(|c| c.skills.iter().find(|s| s.listed_file(uri).is_some()))
        else {
            return Ok(false);
        };
        let bytes = first_contents_bytes(server, uri, result)?;
        if entry.uri == uri {
            entry.verify_skill_md(&bytes)?;
        } else {
            entry.verify_supporting(uri, &bytes)?;
        }
        Ok(true)
    }

    /// The auth context this runtime's remote servers use (the one given to
    /// [`RuntimeBuilder::auth_context`](crate::RuntimeBuilder::auth_context), else the default):
    /// a `login` through it is the one this runtime's step-up budgets count.
    pub fn auth_context(&self) -> &mcp_harness_transport::auth::AuthContext {
        self.registry.auth()
    }

    /// Tells every connected server that the client's roots changed
    /// (`notifications/roots/list_changed`); each then asks `roots/list` again, answered by the
    /// callbacks. Returns how many servers were told; one whose connection fails is skipped
    /// (logged at debug): it asks for the roots afresh when it connects again.
    pub async fn notify_roots_changed(&self) -> usize {
        let published = self.live.published();
        let mut told = 0;
        for (server, client) in &published.clients {
            #[allow(deprecated)] // roots are deprecated by SEP-2577; earlier protocols use them
            match client.peer.notify_roots_list_changed().await {
                Ok(()) => told += 1,
                Err(e) => {
                    tracing::debug!(server = %server, error = %e, "roots/list_changed not sent")
                }
            }
        }
        told
    }

    /// Closes `server`'s connection (if any) and connects it again.
    pub fn restart(&self, server: &str) -> Result<(), CallError> {
        let addr = self
            .registry
            .addr(server)
            .ok_or_else(|| CallError::ServerUnavailable {
                server: server.to_string(),
                state: "not configured or disabled".into(),
            })?;
        // A stopped actor would drop the message unseen, and a caller waiting for the
        // restarted server's report would wait its whole deadline.
        if !addr.connected() {
            return Err(CallError::ServerUnavailable {
                server: server.to_string(),
                state: "stopping (being replaced or shut down)".into(),
            });
        }
        addr.do_send(Restart);
        Ok(())
    }

    /// The kinds currently cached for `server` (diagnostics for tests; empty after its
    /// connection closed or when it opted out of caching). Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn cached_kinds(&self, server: &str) -> Vec<mcp_harness_catalog::Kind> {
        self.cache.kinds_of(server)
    }

    /// Replaces the desired configuration. Nothing is reconnected yet: the runtime is only
    /// marked dirty; the next [`Runtime::refresh_if_dirty`] (which [`Runtime::bind_step`]
    /// runs) applies it, and [`Runtime::prewarm`] may apply it earlier.
    pub fn set_config(&self, config: Config) {
        self.desired.mark(config);
    }

    /// Whether a configuration change is waiting to be applied.
    pub fn is_dirty(&self) -> bool {
        self.desired.is_dirty()
    }

    /// Applies the latest desired configuration if it changed (R19): one refresh at a time
    /// claims the newest change, stops removed and changed servers, starts new ones, waits
    /// until they settle, and publishes. If this future is dropped before publishing, the
    /// runtime stays dirty and the next refresh redoes the work. Returns what changed, or
    /// `None` when nothing was pending.
    pub async fn refresh_if_dirty(&self) -> Result<Option<Reconciled>, StartError> {
        self.desired.refresh_if_dirty().await
    }

    /// Asks for a refresh ahead of need. Requests are coalesced through a bounded channel and
    /// served in the background; this only lowers latency — [`Runtime::bind_step`] refreshes
    /// itself, so correctness never depends on it (R20).
    pub fn prewarm(&self) {
        self.desired.prewarm();
    }

    /// Watches `files` (checked every `interval`); when any of them changes, `load` runs and its
    /// configuration becomes the desired state, applied by the next refresh (requested at once
    /// through pre-warming, and in any case by the next [`Runtime::bind_step`]).
    pub fn reload_on_change(
        &self,
        files: Vec<PathBuf>,
        interval: Duration,
        load: ConfigLoader,
    ) -> ConfigWatch {
        let now = reload::FilesSeen::now(&files);
        self.reload_on_change_since(files, interval, load, now)
    }

    /// [`Runtime::reload_on_change`], counting changes from `since` (the files as they were
    /// when this runtime's config was read): an edit made between that read and this call —
    /// while remote sources were fetched, say — is applied at the first look.
    pub fn reload_on_change_since(
        &self,
        files: Vec<PathBuf>,
        interval: Duration,
        load: ConfigLoader,
        since: reload::FilesSeen,
    ) -> ConfigWatch {
        reload::watch_files(
            &self.registry,
            Arc::downgrade(&self.desired),
            files,
            interval,
            load,
            since,
        )
    }

    /// Two-phase loading (R2), second phase: fetches the remote sources `sources` lists
    /// (concurrently, each bounded by its timeout) in the background and, when any answered,
    /// makes the merged config — local files plus remote servers — the desired state, applied
    /// by the next refresh (requested at once). The runtime must have been started with the
    /// local config of the same `sources`: local servers are connecting while this runs, and
    /// unchanged ones keep their connections when the remote servers join. A source that fails
    /// is logged with its config key and changes nothing. The returned handle resolves to each
    /// source's outcome (awaiting it is optional).
    pub fn join_remote_sources(
        &self,
        sources: Sources,
    ) -> tokio::task::JoinHandle<Vec<(String, Result<usize, String>)>> {
        reload::join_remote(Arc::downgrade(&self.desired), sources, false)
    }

    /// What a config loader uses to join remote sources an edit added (see
    /// [`RemoteJoiner::join_new`]); it does not keep the runtime alive.
    pub fn remote_joiner(&self) -> RemoteJoiner {
        RemoteJoiner(Arc::downgrade(&self.desired))
    }

    /// Closes every server (stdio process groups are terminated) and stops the actor thread.
    pub async fn shutdown(mut self) {
        self.close_servers().await;
        self.stop_thread_blocking_in_place().await;
        let _ = tokio::task::spawn_blocking(sweep_orphans).await;
    }

    async fn close_servers(&self) {
        self.registry.close();
        let closing = self.registry.addrs().into_iter().map(|addr| async move {
            let stopped = tokio::time::timeout(SHUTDOWN_GRACE, addr.send(Stop)).await;
            if let Ok(Ok(Some(session))) = stopped {
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, session.shutdown()).await;
            }
        });
        futures::future::join_all(closing).await;
        // Old connections still draining after a config edit close on their own, gracefully.
        self.registry.drains_closed(SHUTDOWN_GRACE).await;
    }

    async fn stop_thread_blocking_in_place(&mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Stopping the system drops every actor and session; a session's process group is killed
        // synchronously when it drops. Joining makes that happen before we return.
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        sweep_orphans();
    }
}

/// Kills what the servers left behind outside their process groups, once every group is gone
/// (only when this process is a child subreaper; see `RuntimeBuilder::child_subreaper`).
fn sweep_orphans() {
    let killed = mcp_harness_transport::reaper::sweep_orphans(ORPHAN_SWEEP_ROUNDS);
    if killed > 0 {
        tracing::info!(
            killed,
            "killed server descendants that had left their process group"
        );
    }
}

/// Passes of the orphan sweep: each pass kills one generation of reparented descendants.
const ORPHAN_SWEEP_ROUNDS: usize = 8;

/// Whether `client`'s session is of 2026-07-28 or later (no `initialize`, no subscribe).
fn is_modern(client: &ServerClient) -> bool {
    client
        .peer
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

/// At most the protocol's 100 completion values: a server sending more has the rest counted in
/// `total` and `hasMore` set, as the protocol asks a server to do itself.
fn cap_completions(info: &mut rmcp::model::CompletionInfo) {
    let max = rmcp::model::CompletionInfo::MAX_VALUES;
    if info.values.len() <= max {
        return;
    }
    let sent = u32::try_from(info.values.len()).unwrap_or(u32::MAX);
    info.values.truncate(max);
    info.total = Some(info.total.unwrap_or(0).max(sent));
    info.has_more = Some(true);
}

/// A non-final answer returned where none was asked for: said, not panicked.
fn handed_back_unasked(server: &str, what: &str) -> CallError {
    CallError::Protocol {
        upstream: None,
        server: server.to_string(),
        tool: what.to_string(),
        message: "an input_required answer was handed back unasked (a harness bug)".into(),
    }
}

impl Runtime {
    /// `server`'s current connection. While a config edit replaces the server (its client
    /// published retired), waits for the new connection — the old one's drain, then the new
    /// one's startup deadline at the longest — as a tool call bound to the old one does,
    /// instead of failing because the server is momentarily pending.
    async fn live_client(&self, server: &str) -> Result<ServerClient, CallError> {
        let published = self.live.published();
        if !published.replacing(server) {
            return bound_client(&published, server);
        }
        if self.registry.replacement_addr(server).await.is_some() {
            // Until the retired client is replaced (connected) or dropped (failed). The
            // published view is stored before its snapshot is announced.
            let startup = self.registry.startup_deadline(&[server]) + SHUTDOWN_GRACE;
            let replaced = |_: &Snapshot| !self.live.published().replacing(server);
            self.live.wait_for(startup, replaced).await;
        }
        bound_client(&self.live.published(), server)
    }
}

fn bound_client(published: &Published, server: &str) -> Result<ServerClient, CallError> {
    match published.clients.get(server).filter(|c| !c.retired) {
        Some(c) => Ok(c.clone()),
        None => Err(CallError::ServerUnavailable {
            server: server.to_string(),
            state: published
                .snapshot
                .servers
                .get(server)
                .map(|s| s.state.label().to_string())
                .unwrap_or_else(|| "not configured".into()),
        }),
    }
}

async fn send(
    client: &ServerClient,
    request: ClientRequest,
    server: &str,
    what: &str,
) -> Result<ServerResult, CallError> {
    let options = PeerRequestOptions::with_timeout(client.tool_timeout);
    input::send(client, request, options, server, what).await
}

/// The bytes of the one contents of a `resources/read` of skill file `uri` (text as UTF-8, a
/// blob decoded). The listing vouches for one file: an answer with more would show (or load)
/// what nothing vouched for, and is refused.
fn first_contents_bytes(
    server: &str,
    uri: &str,
    result: &ReadResourceResult,
) -> Result<Vec<u8>, CallError> {
    if result.contents.len() > 1 {
        return Err(CallError::Protocol {
            upstream: None,
            server: server.to_string(),
            tool: uri.to_string(),
            message: format!(
                "the read of skill file `{uri}` answered with {} contents; the skill's listing \
                 vouches for one file, so none is used",
                result.contents.len()
            ),
        });
    }
    let Some(contents) = result.contents.first().cloned() else {
        return Err(CallError::Protocol {
            upstream: None,
            server: server.to_string(),
            tool: uri.to_string(),
            message: "resources/read returned no contents".into(),
        });
    };
    match contents {
        ResourceContents::TextResourceContents { text, .. } => Ok(text.into_bytes()),
        ResourceContents::BlobResourceContents { blob, .. } => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(blob.as_bytes())
                .map_err(|e| CallError::Protocol {
                    upstream: None,
                    server: server.to_string(),
                    tool: uri.to_string(),
                    message: format!("the blob is not valid base64: {e}"),
                })
        }
        _ => Err(CallError::Protocol {
            upstream: None,
            server: server.to_string(),
            tool: uri.to_string(),
            message: "resources/read returned an unknown kind of contents".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn completions_are_capped_at_the_protocols_hundred() {
        let mut info: rmcp::model::CompletionInfo = serde_json::from_value(
            serde_json::json!({"values": (0..250).map(|i| i.to_string()).collect::<Vec<_>>(),
                "hasMore": false}),
        )
        .expect("completion info");
        super::cap_completions(&mut info);
        assert_eq!(info.values.len(), 100);
        assert_eq!((info.total, info.has_more), (Some(250), Some(true)));
        let mut few: rmcp::model::CompletionInfo =
            serde_json::from_value(serde_json::json!({"values": ["a"], "total": 1}))
                .expect("completion info");
        super::cap_completions(&mut few);
        assert_eq!((few.values.len(), few.has_more), (1, None));
    }
}

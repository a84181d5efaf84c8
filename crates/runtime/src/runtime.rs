//! The embedding facade. The actors run on a dedicated thread with their own actix system, so a
//! [`Runtime`] works from any tokio runtime (or none, for reading snapshots); snapshots are read
//! lock-free and calls go straight to the bound client.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::prelude::*;
use arc_swap::ArcSwap;
use mcp_harness_catalog::CommandSource;
use mcp_harness_catalog::skills::{ListedFiles, SkillEntry, SkillIndex};
use mcp_harness_catalog::{ServerState, Snapshot, ToolEntry};
use mcp_harness_policy::{Approver, ExposurePolicy, PermissionRules};
use mcp_harness_transport::{Callbacks, WireFault};
use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, JsonObject, ReadResourceRequestParams,
    ReadResourceResult, ResourceContents, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use tokio::sync::{broadcast, watch};

use crate::binding::{CallOptions, StepBinding, ToolResult};
use crate::cache::ListingCache;
use crate::call::output::{OutputStore, budget_for};
use crate::call::result::ResultLimits;
use crate::call::validate::ArgumentValidator;
use crate::config::Config;
use crate::config::OutputConfig;
use crate::desired::{RefreshControl, refresh_if_dirty};
use crate::error::{CallError, StartError};
use crate::listing::describe;
use crate::publisher::{Flush, Published, Publisher, RevisionGate, ServerClient};
use crate::registry::{Reconciled, Registry};
use crate::server::{
    ProgressRoutes, ResourceUpdate, Restart, Revival, ReviveForCall, SHUTDOWN_GRACE, Shutdown,
};

/// A running harness: servers connecting or connected, and the latest published snapshot.
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
    pub(crate) system: System,
    pub(crate) thread: Option<JoinHandle<()>>,
}

/// What the facade, prepared calls and the pre-warmer share.
pub(crate) struct Inner {
    pub(crate) current: Arc<ArcSwap<Published>>,
    pub(crate) rx: watch::Receiver<Arc<Snapshot>>,
    /// Every published snapshot, in a bounded buffer (only resubscribed: the publisher holds
    /// the one sender, so the stream ends when it stops).
    pub(crate) revisions: broadcast::Receiver<Arc<Snapshot>>,
    pub(crate) publisher: Addr<Publisher>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) cache: Arc<ListingCache>,
    pub(crate) resource_updates: broadcast::Sender<ResourceUpdate>,
    pub(crate) gate: Arc<RevisionGate>,
    pub(crate) control: RefreshControl,
    pub(crate) progress: Arc<ProgressRoutes>,
    pub(crate) callbacks: Option<Callbacks>,
    pub(crate) policy: Policy,
    pub(crate) validators: ValidatorCache,
    pub(crate) output: OutputStore,
    pub(crate) output_config: OutputConfig,
    pub(crate) result_limits: ResultLimits,
    /// The exposure of the latest snapshot a step was bound to (bindings of one snapshot share
    /// it; a new snapshot replaces it).
    pub(crate) frozen: std::sync::Mutex<Option<(Arc<Snapshot>, Arc<crate::binding::Frozen>)>>,
}

/// What decides exposure and permission, frozen at start.
pub(crate) struct Policy {
    pub(crate) exposure: ExposurePolicy,
    pub(crate) permissions: PermissionRules,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) approval_timeout: Duration,
}

/// Compiled argument validators, one per tool definition: reused while the definition stays
/// the same object, recompiled when a listing replaced it.
#[derive(Default)]
pub(crate) struct ValidatorCache {
    map: dashmap::DashMap<String, (Arc<rmcp::model::Tool>, Arc<ArgumentValidator>)>,
}

impl ValidatorCache {
    pub(crate) fn get(&self, name: &str, tool: &Arc<rmcp::model::Tool>) -> Arc<ArgumentValidator> {
        if let Some(hit) = self.map.get(name)
            && Arc::ptr_eq(&hit.0, tool)
        {
            return hit.1.clone();
        }
        let validator = Arc::new(ArgumentValidator::new(name, tool.input_schema.clone()));
        self.map
            .insert(name.to_string(), (tool.clone(), validator.clone()));
        validator
    }
}

impl Inner {
    /// The model's view of `snapshot` under the exposure policy, computed once per snapshot.
    pub(crate) fn frozen_for(&self, snapshot: &Arc<Snapshot>) -> Arc<crate::binding::Frozen> {
        let mut cached = self.frozen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, f)) = cached.as_ref()
            && Arc::ptr_eq(s, snapshot)
        {
            return f.clone();
        }
        let frozen = Arc::new(crate::binding::Frozen::new(&self.policy.exposure, snapshot));
        *cached = Some((snapshot.clone(), frozen.clone()));
        frozen
    }

    /// Whether connection `epoch` is still `server`'s current one (the common case at call
    /// time; otherwise [`Self::revive_for_call`] decides).
    pub(crate) fn is_current_connection(&self, server: &str, epoch: u64) -> bool {
        self.current
            .load()
            .clients
            .get(server)
            .is_some_and(|c| c.epoch == epoch)
    }

    /// R7, one bounded restart at call time: when the connection `client` a call was bound to
    /// is no longer current because its stdio process exited, the server is restarted once
    /// (calls asking together share the restart) and waited for at most its startup deadline.
    /// Returns the new connection when the new catalog has the same tool with the same
    /// definition, `None` when there is nothing to restart (the call goes on as bound), or the
    /// error that ends the call.
    pub(crate) async fn revive_for_call(
        &self,
        entry: &ToolEntry,
        client: &ServerClient,
        bound_revision: u64,
    ) -> Result<Option<ServerClient>, CallError> {
        let server = &entry.server;
        if self.is_current_connection(server, client.epoch) {
            return Ok(None);
        }
        let Some(addr) = self.registry.addr(server) else {
            return Ok(None);
        };
        let deadline = self.registry.startup_deadline(&[server]) + REVIVE_GRACE;
        let asked = addr.send(ReviveForCall {
            bound_epoch: client.epoch,
        });
        let unavailable = |state: String| CallError::ServerUnavailable {
            server: server.clone(),
            state,
        };
        match tokio::time::timeout(deadline, asked).await {
            Err(_) => Err(unavailable(format!(
                "restarting after its process exited; the one restart for this call did not finish within {}s (`startupTimeoutSec`)",
                deadline.as_secs_f64()
            ))),
            Ok(Err(_)) | Ok(Ok(Revival::NotApplicable)) => Ok(None),
            Ok(Ok(Revival::Failed { error })) => Err(unavailable(format!(
                "failed: {error}; it was restarted once for this call after its process exited and did not come back: fix it, restart it (`Runtime::restart`) and bind a new step"
            ))),
            Ok(Ok(Revival::Connected { epoch })) => {
                // The actor reported the new connection before answering: publish it now.
                let _ = self.publisher.send(Flush).await;
                let now = self.current.load();
                let same_tool = now
                    .snapshot
                    .tool(&entry.qualified_name)
                    .is_some_and(|t| *t.tool == *entry.tool);
                match now.clients.get(server).filter(|c| c.epoch == epoch) {
                    Some(client) if same_tool => {
                        tracing::info!(server = %server, tool = %entry.raw_name, "restarted after its process exited; the call goes ahead");
                        Ok(Some(client.clone()))
                    }
                    _ => Err(CallError::Stale {
                        name: entry.qualified_name.clone(),
                        bound: bound_revision,
                        current: now.snapshot.revision,
                    }),
                }
            }
        }
    }

    /// The output budget of `tool`: the configured one, or what the tool asks for through
    /// `_meta`, up to the configured maximum.
    pub(crate) fn output_budget_for(&self, tool: &rmcp::model::Tool) -> usize {
        budget_for(
            tool,
            self.output_config.budget_tokens,
            self.output_config.max_budget_tokens,
        )
    }
}

/// Added to a server's startup deadline when a call waits for the server's restart (the queue
/// slot and the first listing come on top of the handshake).
const REVIVE_GRACE: Duration = Duration::from_secs(2);

/// A loaded, verified skill.
#[derive(Debug, Clone)]
pub struct LoadedSkill {
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
    pub server: String,
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
    /// Starts a runtime for `config` with default settings.
    pub fn start(config: Config) -> Result<Runtime, StartError> {
        crate::builder::RuntimeBuilder::new(config).start()
    }

    /// The latest published snapshot (revision 0 before the first publication).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.current.load().snapshot.clone()
    }

    /// A receiver of the latest published snapshot: it holds only the newest value, so a reader
    /// that is slower than the publisher skips revisions and the changes they carried. To see
    /// every revision's changes, use [`Runtime::revisions`].
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.rx.clone()
    }

    /// Every revision published from now on, in order, each with its changes; a reader that
    /// falls more than the buffer (`RuntimeBuilder::revision_buffer`, default 256) behind gets
    /// one [`Revision::Skipped`](crate::Revision::Skipped) item saying how many revisions it
    /// stands for, with their combined change. See [`crate::revisions`].
    pub fn revisions(&self) -> crate::revisions::Revisions {
        crate::revisions::Revisions::new(&self.inner.revisions, self.inner.current.clone())
    }

    /// Publishes pending updates now instead of at the end of the batching window; returns the
    /// revision then current.
    pub async fn flush(&self) -> u64 {
        self.inner.publisher.send(Flush).await.unwrap_or(0)
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
        let mut rx = self.inner.rx.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| pred(s))).await;
        self.snapshot()
    }

    /// Binds a model step (R22, R23): applies a pending configuration change first, waits for
    /// `required` servers to settle (every failure among them is reported together), and
    /// freezes the tools the model sees now. Calls prepared from the binding run on exactly the
    /// connections and schemas it shows.
    pub async fn bind_step(&self, required: &[&str]) -> Result<StepBinding, CallError> {
        if let Err(e) = self.refresh_if_dirty().await {
            tracing::warn!(error = %e, "applying the configuration change failed; binding the current runtime");
        }
        if !required.is_empty() {
            let deadline = self.inner.registry.startup_deadline(required) + Duration::from_secs(1);
            let snapshot = self
                .wait_for(deadline, |s| {
                    // A server that is not configured never settles; it is reported below. Revision 0
                    // (before the first publication) knows no server yet.
                    s.revision > 0
                        && required
                            .iter()
                            .all(|r| s.servers.get(*r).is_none_or(|st| st.state.is_settled()))
                })
                .await;
            let failures: Vec<(String, String)> = required
                .iter()
                .filter_map(|r| match snapshot.servers.get(*r) {
                    None => Some((r.to_string(), "not configured".to_string())),
                    Some(st) if st.state == ServerState::Connected => None,
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
        Ok(StepBinding::new(
            self.inner.clone(),
            self.inner.current.load_full(),
        ))
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

    /// Fetches prompt `name` (raw name) from `server` with `arguments` (`prompts/get`).
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, CallError> {
        let published = self.inner.current.load_full();
        let client = bound_client(&published, server)?;
        let mut params = GetPromptRequestParams::new(name.to_string());
        if let Some(args) = arguments {
            params = params.with_arguments(args);
        }
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        match send(&client, request, server, name).await? {
            ServerResult::GetPromptResult(r) => Ok(r),
            other => Err(unexpected(server, name, &other)),
        }
    }

    /// Reads resource `uri` from `server` (`resources/read`).
    pub async fn read_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<ReadResourceResult, CallError> {
        let published = self.inner.current.load_full();
        let client = bound_client(&published, server)?;
        let request = ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(
            ReadResourceRequestParams::new(uri.to_string()),
        ));
        match send(&client, request, server, uri).await? {
            ServerResult::ReadResourceResult(r) => Ok(r),
            other => Err(unexpected(server, uri, &other)),
        }
    }

    /// Subscribes to updates of resource `uri` on `server` (`resources/subscribe`).
    pub async fn subscribe_resource(
        &self,
        server: &str,
        uri: &str,
    ) -> Result<ResourceSubscription, CallError> {
        let rx = self.inner.resource_updates.subscribe();
        let published = self.inner.current.load_full();
        let client = bound_client(&published, server)?;
        #[allow(deprecated)] // resources/subscribe is how every protocol before 2026-07-28 does it
        let request = ClientRequest::SubscribeRequest(rmcp::model::SubscribeRequest::new(
            rmcp::model::SubscribeRequestParams::new(uri.to_string()),
        ));
        send(&client, request, server, uri).await?;
        Ok(ResourceSubscription {
            server: server.to_string(),
            uri: uri.to_string(),
            rx,
        })
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
        index
            .search(query)
            .into_iter()
            .filter_map(|hit| {
                all.iter()
                    .find(|e| e.server == hit.server && e.name == hit.name)
                    .cloned()
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

    fn skill_entry(&self, server: &str, name: &str) -> Result<Arc<SkillEntry>, CallError> {
        let snapshot = self.snapshot();
        snapshot
            .catalogs
            .get(server)
            .and_then(|c| c.skills.iter().find(|s| s.name == name).cloned())
            .ok_or_else(|| CallError::UnknownSkill {
                server: server.to_string(),
                name: name.to_string(),
                revision: snapshot.revision,
            })
    }

    /// The bytes of resource `uri`: its text as UTF-8, or its blob decoded.
    async fn read_bytes(&self, server: &str, uri: &str) -> Result<Vec<u8>, CallError> {
        let result = self.read_resource(server, uri).await?;
        let Some(contents) = result.contents.into_iter().next() else {
            return Err(CallError::Protocol {
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
                        server: server.to_string(),
                        tool: uri.to_string(),
                        message: format!("the blob is not valid base64: {e}"),
                    })
            }
            _ => Err(CallError::Protocol {
                server: server.to_string(),
                tool: uri.to_string(),
                message: "resources/read returned an unknown kind of contents".into(),
            }),
        }
    }

    /// Closes `server`'s connection (if any) and connects it again.
    pub fn restart(&self, server: &str) -> Result<(), CallError> {
        let addr =
            self.inner
                .registry
                .addr(server)
                .ok_or_else(|| CallError::ServerUnavailable {
                    server: server.to_string(),
                    state: "not configured or disabled".into(),
                })?;
        addr.do_send(Restart);
        Ok(())
    }

    /// The kinds currently cached for `server` (diagnostics; empty after its connection closed
    /// or when it opted out of caching).
    pub fn cached_kinds(&self, server: &str) -> Vec<mcp_harness_catalog::Kind> {
        self.inner.cache.kinds_of(server)
    }

    /// Replaces the desired configuration. Nothing is reconnected yet: the runtime is only
    /// marked dirty; the next [`Runtime::refresh_if_dirty`] (which [`Runtime::bind_step`]
    /// runs) applies it, and [`Runtime::prewarm`] may apply it earlier.
    pub fn set_config(&self, config: Config) {
        self.inner.control.mark(config);
    }

    /// Whether a configuration change is waiting to be applied.
    pub fn is_dirty(&self) -> bool {
        self.inner.control.is_dirty()
    }

    /// Applies the latest desired configuration if it changed (R19): one refresh at a time
    /// claims the newest change, stops removed and changed servers, starts new ones, waits
    /// until they settle, and publishes. If this future is dropped before publishing, the
    /// runtime stays dirty and the next refresh redoes the work. Returns what changed, or
    /// `None` when nothing was pending.
    pub async fn refresh_if_dirty(&self) -> Result<Option<Reconciled>, StartError> {
        refresh_if_dirty(&self.inner).await
    }

    /// Asks for a refresh ahead of need. Requests are coalesced through a bounded channel and
    /// served in the background; this only lowers latency — [`Runtime::bind_step`] refreshes
    /// itself, so correctness never depends on it (R20).
    pub fn prewarm(&self) {
        self.inner.control.prewarm();
    }

    /// Closes every server (stdio process groups are terminated) and stops the actor thread.
    pub async fn shutdown(mut self) {
        self.close_servers().await;
        self.stop_thread_blocking_in_place().await;
        let _ = tokio::task::spawn_blocking(sweep_orphans).await;
    }

    async fn close_servers(&self) {
        let addrs = self.inner.registry.addrs();
        let closing = addrs
            .iter()
            .map(|addr| tokio::time::timeout(SHUTDOWN_GRACE, addr.send(Shutdown)));
        futures::future::join_all(closing).await;
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

fn bound_client(published: &Published, server: &str) -> Result<ServerClient, CallError> {
    match published.clients.get(server) {
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
    let mark = client.wire.anomaly_mark();
    let classify = |e| {
        explain_timeout(classify(e, server, what, client.tool_timeout), || {
            client.wire.anomalies_since(mark)
        })
    };
    let handle = client
        .peer
        .send_request_with_option(request, options)
        .await
        .map_err(classify)?;
    handle.await_response().await.map_err(classify)
}

/// Whether `e` says the server no longer accepts this client's authorization: a 401 challenge,
/// or an OAuth failure of the token source (a rejected refresh, a revoked grant). A refusal
/// for lack of scope is not this (step-up handles it).
pub(crate) fn authorization_lost(e: &ServiceError) -> bool {
    mcp_harness_transport::auth::authorization_lost(e)
}

pub(crate) fn classify(e: ServiceError, server: &str, tool: &str, timeout: Duration) -> CallError {
    let (server, tool) = (server.to_string(), tool.to_string());
    // Refused for lack of scope with no (further) step-up (R33): the server did not run it, and
    // sending it again as is cannot help; the reason names the server and what to do.
    if let Some(refused) = mcp_harness_transport::auth::refusal_in(&e) {
        return CallError::Permission {
            name: tool,
            reason: refused.to_string(),
        };
    }
    match e {
        // What the harness made of the server's answer (too large, undecodable): it says so.
        ServiceError::McpError(data) if WireFault::is_wire_fault(&data) => CallError::BadAnswer {
            server,
            tool,
            message: data.message.into_owned(),
        },
        ServiceError::Timeout { .. } => CallError::Timeout {
            server,
            tool,
            timeout,
        },
        ServiceError::McpError(_) | ServiceError::UnexpectedResponse => CallError::Protocol {
            server,
            tool,
            message: describe(e),
        },
        other => CallError::Transport {
            server,
            tool,
            message: describe(other),
        },
    }
}

/// A deadline that passed after the server sent something unusable (`arrived`, from
/// [`mcp_harness_transport::WireNotes::anomalies_since`]) says what arrived, not "timed out".
pub(crate) fn explain_timeout(e: CallError, arrived: impl FnOnce() -> Option<String>) -> CallError {
    match e {
        CallError::Timeout {
            server,
            tool,
            timeout,
        } => match arrived() {
            Some(arrived) => CallError::BadAnswer {
                server,
                tool,
                message: format!(
                    "no usable answer within {}s; the server sent {arrived}",
                    timeout.as_secs_f64()
                ),
            },
            None => CallError::Timeout {
                server,
                tool,
                timeout,
            },
        },
        other => other,
    }
}

pub(crate) fn unexpected(server: &str, what: &str, got: &ServerResult) -> CallError {
    let kind = serde_json::to_value(got)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        })
        .unwrap_or_default();
    CallError::Protocol {
        server: server.to_string(),
        tool: what.to_string(),
        message: format!("the server answered with an unexpected result (fields: {kind})"),
    }
}

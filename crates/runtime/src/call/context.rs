//! What every call of one runtime shares: the live view it checks against, the registry it
//! revives or reconnects servers through, progress routes, the embedder's callbacks, the
//! policy frozen at start, compiled validators, the output store and the exposure computed
//! once per snapshot.
//!
//! Invariant: the context is built once, at start, and never changes except for its caches
//! (validators per definition, the exposure of the latest snapshot bound), which only a new
//! definition or a new snapshot replaces.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_harness_catalog::{Snapshot, ToolEntry};
use mcp_harness_policy::{Approver, ExposurePolicy, PermissionRules};
use mcp_harness_transport::Callbacks;
use rmcp::model::Tool;

use super::frozen::Frozen;
use super::output::{OutputStore, budget_for};
use super::result::ResultLimits;
use super::validate::ArgumentValidator;
use crate::config::OutputConfig;
use crate::connection::progress::ProgressRoutes;
use crate::connection::registry::Registry;
use crate::connection::server::{Restart, Revival, ReviveForCall};
use crate::error::CallError;
use crate::snapshot::Live;
use crate::snapshot::publisher::ServerClient;

/// The longest a call waits for the tool listing a `tools/list_changed` it follows caused.
const LISTING_WAIT: Duration = Duration::from_secs(5);

/// What the calls of one runtime share (see the module doc).
pub(crate) struct CallContext {
    pub(super) live: Arc<Live>,
    registry: Arc<Registry>,
    pub(super) progress: Arc<ProgressRoutes>,
    pub(super) callbacks: Option<Callbacks>,
    pub(super) policy: Policy,
    validators: ValidatorCache,
    pub(super) output: OutputStore,
    output_config: OutputConfig,
    pub(super) result_limits: ResultLimits,
    /// The exposure of the latest snapshot a step was bound to (bindings of one snapshot share
    /// it; a new snapshot replaces it).
    frozen: Mutex<Option<(Arc<Snapshot>, Arc<Frozen>)>>,
}

impl CallContext {
    /// The context of a runtime whose view is `live` and whose actors `registry` holds.
    pub(crate) fn new(
        live: Arc<Live>,
        registry: Arc<Registry>,
        progress: Arc<ProgressRoutes>,
        callbacks: Option<Callbacks>,
        policy: Policy,
        output: OutputStore,
        output_config: OutputConfig,
    ) -> Self {
        Self {
            live,
            registry,
            progress,
            callbacks,
            policy,
            validators: ValidatorCache::default(),
            output,
            output_config,
            result_limits: ResultLimits::default(),
            frozen: Mutex::new(None),
        }
    }
}

/// What decides exposure and permission: exposure frozen at start, the permission rules
/// replaced by a config reload ([`LivePermissions`]).
pub(crate) struct Policy {
    pub(crate) exposure: ExposurePolicy,
    pub(crate) permissions: Arc<LivePermissions>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) approval_timeout: Duration,
}

/// The permission rules calls are decided by. Invariant: replaced whole when a config reload
/// is applied (with the servers it changes, R19), read whole by each decision: a call is
/// decided by the rules of one configuration, never half of two.
#[derive(Debug)]
pub(crate) struct LivePermissions(std::sync::RwLock<Arc<PermissionRules>>);

impl LivePermissions {
    pub(crate) fn new(rules: PermissionRules) -> Self {
        Self(std::sync::RwLock::new(Arc::new(rules)))
    }

    /// The rules in force now.
    pub(crate) fn current(&self) -> Arc<PermissionRules> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `rules` in force; whether they differ from the rules before.
    pub(crate) fn replace(&self, rules: &PermissionRules) -> bool {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        let changed = format!("{:?}", **current) != format!("{rules:?}");
        if changed {
            *current = Arc::new(rules.clone());
        }
        changed
    }
}

/// Compiled argument validators, one per tool definition: reused while the definition stays
/// the same object, recompiled when a listing replaced it.
#[derive(Default)]
struct ValidatorCache {
    map: dashmap::DashMap<String, (Arc<Tool>, Arc<ArgumentValidator>)>,
}

impl ValidatorCache {
    fn get(&self, name: &str, tool: &Arc<Tool>) -> Arc<ArgumentValidator> {
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

impl CallContext {
    /// How long an approval is waited for.
    pub(crate) fn approval_timeout(&self) -> Duration {
        self.policy.approval_timeout
    }

    /// The embedder's table of which call a server request belongs to, when its callbacks
    /// keep one.
    pub(crate) fn call_tags(&self) -> Option<mcp_harness_transport::callbacks::CallTags> {
        self.callbacks.as_ref()?.call_tags().cloned()
    }

    /// The model's view of `snapshot` under the exposure policy, computed once per snapshot.
    pub(super) fn frozen_for(&self, snapshot: &Arc<Snapshot>) -> Arc<Frozen> {
        let mut cached = self.frozen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, f)) = cached.as_ref()
            && Arc::ptr_eq(s, snapshot)
        {
            return f.clone();
        }
        let frozen = Arc::new(Frozen::new(&self.policy.exposure, snapshot));
        *cached = Some((snapshot.clone(), frozen.clone()));
        frozen
    }

    /// Whether connection `epoch` is still `server`'s current one (the common case at call
    /// time; otherwise [`Self::revive_for_call`] decides).
    pub(super) fn is_current_connection(&self, server: &str, epoch: u64) -> bool {
        self.live.is_current_connection(server, epoch)
    }

    /// Connects `server` again (its authorization was lost: the new connection finds it
    /// needs-auth, R4).
    pub(super) fn reconnect(&self, server: &str) {
        if let Some(addr) = self.registry.addr(server) {
            addr.do_send(Restart);
        }
    }

    /// The compiled argument validator of tool `name` with definition `tool`.
    pub(super) fn validator(&self, name: &str, tool: &Arc<Tool>) -> Arc<ArgumentValidator> {
        self.validators.get(name, tool)
    }

    /// R7, one bounded restart at call time: when the connection `client` a call was bound to
    /// is no longer current because its stdio process exited, the server is restarted once
    /// (calls asking together share the restart) and waited for at most its startup deadline.
    /// A connection a config edit replaced is waited for the same way (the new actor's first
    /// connection is that restart).
    /// Returns the new connection when the new catalog has the same tool with the same
    /// definition, `None` when there is nothing to restart (the call goes on as bound), or the
    /// error that ends the call.
    pub(super) async fn revive_for_call(
        &self,
        entry: &ToolEntry,
        client: &ServerClient,
        bound_revision: u64,
    ) -> Result<Option<ServerClient>, CallError> {
        let server = &entry.server;
        if self.is_current_connection(server, client.epoch) {
            return Ok(None);
        }
        let stale = |current: u64| CallError::Stale {
            name: entry.qualified_name.clone(),
            bound: bound_revision,
            current,
        };
        // The server's live connection (of `epoch`, when given), if the current catalog has
        // the same tool with the same definition; stale if it has another.
        let current = |epoch: Option<u64>| -> Option<Result<ServerClient, CallError>> {
            let now = self.live.published();
            let live = now
                .clients
                .get(server)
                .filter(|c| !c.retired && epoch.is_none_or(|e| c.epoch == e))?;
            let same_tool = now
                .snapshot
                .tool(&entry.qualified_name)
                .is_some_and(|t| *t.tool == *entry.tool);
            Some(if same_tool {
                Ok(live.clone())
            } else {
                Err(stale(now.snapshot.revision))
            })
        };
        // Replaced by a live connection (a reconnect, or a config edit that restarted the
        // server): the call goes there when the tool is unchanged — the bound one is closed,
        // and a gateway client told nothing (nothing it sees changed) would otherwise never get
        // through again.
        if let Some(replaced) = current(None) {
            tracing::debug!(server = %server, tool = %entry.raw_name, "the bound connection was replaced");
            return replaced.map(Some);
        }
        // A config edit replacing the server: its new actor starts once the calls already
        // sent on the old connection are answered; wait for it rather than join them there.
        let addr = match self.live.published().replacing(server) {
            true => self.registry.replacement_addr(server).await,
            false => self.registry.addr(server),
        };
        let Some(addr) = addr else {
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
                "restarting (its process exited, or a config edit replaced it); the restart this call waited for did not finish within {}s (`startupTimeoutSec`)",
                deadline.as_secs_f64()
            ))),
            Ok(Err(_)) | Ok(Ok(Revival::NotApplicable)) => Ok(None),
            Ok(Ok(Revival::Failed { error, replaced })) => Err(unavailable(format!(
                "failed: {error}; {} and did not come back: fix its command or configuration (a config edit, or a restart, starts it again), then list tools again",
                match replaced {
                    true => "a config edit replaced it (this call waited for the new connection)",
                    false => "it was restarted once for this call after its process exited",
                }
            ))),
            Ok(Ok(Revival::Connected { epoch })) => {
                // The actor reported the new connection before answering: publish it now.
                self.live.flush().await;
                match current(Some(epoch)) {
                    Some(Ok(client)) => {
                        tracing::info!(server = %server, tool = %entry.raw_name, "restarted (its process exited, or a config edit replaced it); the call goes ahead");
                        Ok(Some(client))
                    }
                    Some(Err(refused)) => Err(refused),
                    None => Err(stale(self.live.published().snapshot.revision)),
                }
            }
        }
    }

    /// Waits (at most [`LISTING_WAIT`]) until the published tools of `server`'s connection
    /// `epoch` cover `notices` tool-list notifications, or the connection is no longer current.
    pub(super) async fn await_tool_listing(&self, server: &str, epoch: u64, notices: u64) {
        let covered = || {
            self.live
                .published()
                .clients
                .get(server)
                .is_none_or(|c| c.epoch != epoch || c.tools_covered >= notices)
        };
        if covered() {
            return;
        }
        tracing::debug!(%server, "a call waits for the tool listing a list_changed caused");
        self.live.wait_for(LISTING_WAIT, |_| covered()).await;
    }

    /// Waits (at most [`LISTING_WAIT`]) until connection `epoch` of `server`, which closed, is
    /// no longer the published one.
    pub(super) async fn await_connection_gone(&self, server: &str, epoch: u64) {
        if !self.is_current_connection(server, epoch) {
            return;
        }
        self.live
            .wait_for(LISTING_WAIT, |_| !self.is_current_connection(server, epoch))
            .await;
    }

    /// The output budget of `tool`: the configured one, or what the tool asks for through
    /// `_meta`, up to the configured maximum.
    pub(super) fn output_budget_for(&self, tool: &rmcp::model::Tool) -> usize {
        budget_for(
            tool,
            self.output_config.budget_tokens,
            self.output_config.max_budget_tokens,
        )
    }

    /// A result of `tool` on `server` that reached the caller another way than a call's answer
    /// (a task's final result): normalized against `definition`'s `outputSchema` (R30) and,
    /// over its output budget, stored with a summary in its place (R31), as a call's is.
    /// Without the definition (no longer listed): no schema, the configured budget.
    pub(crate) fn finish_result(
        &self,
        server: &str,
        tool: &str,
        definition: Option<&Tool>,
        result: rmcp::model::CallToolResult,
    ) -> super::result::NormalizedResult {
        let schema = definition
            .and_then(|t| t.output_schema.as_deref())
            .map(super::result::OutputSchema::new);
        self.normalized_and_spilled(server, tool, definition, schema.as_ref(), result)
            .into_result()
    }

    /// `result` of `tool` on `server` checked against `schema` (R30) and, over the output budget
    /// of `definition` (the configured one without it), stored with a summary in its place (R31).
    /// The one way a tool's result reaches a caller, answered or a task's.
    pub(super) fn normalized_and_spilled(
        &self,
        server: &str,
        tool: &str,
        definition: Option<&Tool>,
        schema: Option<&super::result::OutputSchema>,
        result: rmcp::model::CallToolResult,
    ) -> super::output::Spilled {
        let normalized = super::result::normalize_with(result, schema, self.result_limits);
        let budget = definition.map_or(self.output_config.budget_tokens, |t| {
            self.output_budget_for(t)
        });
        let declares_schema = definition.is_some_and(|t| t.output_schema.is_some());
        self.output
            .spill(server, tool, normalized, budget, declares_schema)
    }
}

/// Added to a server's startup deadline when a call waits for the server's restart (the queue
/// slot and the first listing come on top of the handshake).
const REVIVE_GRACE: Duration = Duration::from_secs(2);

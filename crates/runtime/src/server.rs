//! One supervised actor per configured server. It owns the server's transport session and its
//! current catalog generation, and reports every state change and catalog change to the
//! publisher.
//!
//! Invariants:
//! - every connection attempt gets a new epoch; events, listings and closures from an older epoch
//!   are ignored, so an old connection can never overwrite the state of a newer one;
//! - per kind, only a listing newer than the last applied one replaces it (tickets), so
//!   interleaved `list_changed` notifications can never leave a stale last write;
//! - a failed re-listing keeps the previous generation and records the error;
//! - when the session ends, the server is reported failed (with the stderr tail for stdio) and
//!   its catalog leaves the next snapshot; stdio servers are not restarted in a loop.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use mcp_harness_catalog::{Kind, PageLimits, ServerCatalog, ServerState, ServerStatus};
use mcp_harness_policy::ToolFilter;
use mcp_harness_transport::{
    ConnectOptions, Connector, EventSink, HarnessClient, ServerEvent, Session, TransportError,
};
use rmcp::model::ProtocolVersion;

use crate::config::ServerConfig;
use crate::listing::{Listed, declared_kinds, list_kind};
use crate::publisher::{Publisher, ServerClient, ServerUpdate};

/// Shared settings every server actor is started with.
#[derive(Clone)]
pub struct ServerSettings {
    pub protocol_version: Option<ProtocolVersion>,
    pub limits: PageLimits,
}

/// A notification from the server of connection `epoch`.
#[derive(Message)]
#[rtype(result = "()")]
struct Notified {
    epoch: u64,
    event: ServerEvent,
}

/// Close the session and stay down (runtime shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// The server actor.
pub struct ServerActor {
    config: Arc<ServerConfig>,
    connector: Arc<dyn Connector>,
    publisher: Addr<Publisher>,
    settings: ServerSettings,
    filter: ToolFilter,
    epoch: u64,
    session: Option<Session>,
    catalog: ServerCatalog,
    status: ServerStatus,
    issued: HashMap<Kind, u64>,
    applied: HashMap<Kind, u64>,
    stopped: bool,
}

impl ServerActor {
    pub fn new(
        config: Arc<ServerConfig>,
        connector: Arc<dyn Connector>,
        publisher: Addr<Publisher>,
        settings: ServerSettings,
    ) -> Self {
        let status = ServerStatus::new(&config.name, connector.kind(), ServerState::Pending);
        let filter = ToolFilter {
            include: config.include_tools.clone(),
            exclude: config.exclude_tools.clone(),
        };
        Self {
            config,
            connector,
            publisher,
            settings,
            filter,
            epoch: 0,
            session: None,
            catalog: ServerCatalog::default(),
            status,
            issued: HashMap::new(),
            applied: HashMap::new(),
            stopped: false,
        }
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    /// Sends the current status (and catalog and client, when connected) to the publisher.
    fn report(&self, cause: impl Into<String>) {
        let connected = self.status.state == ServerState::Connected;
        let client = match (&self.session, connected) {
            (Some(s), true) => Some(ServerClient {
                peer: s.peer().clone(),
                epoch: self.epoch,
                tool_timeout: self.config.tool_timeout,
            }),
            _ => None,
        };
        self.publisher.do_send(ServerUpdate {
            status: self.status.clone(),
            catalog: connected.then(|| Arc::new(self.catalog.clone())),
            client,
            cause: cause.into(),
        });
    }

    fn set_state(&mut self, state: ServerState) {
        if let ServerState::Failed { error } | ServerState::NeedsAuth { reason: error } = &state {
            self.status.last_error = Some(error.clone());
        }
        self.status.state = state;
        self.status.since = SystemTime::now();
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.epoch += 1;
        let epoch = self.epoch;
        self.issued.clear();
        self.applied.clear();
        self.catalog = ServerCatalog::default();
        self.set_state(ServerState::Pending);
        self.report("connecting");

        let weak = ctx.address().downgrade();
        let sink: EventSink = Arc::new(move |event| {
            if let Some(addr) = weak.upgrade() {
                addr.do_send(Notified { epoch, event });
            }
        });
        let handler =
            HarnessClient::new(sink).with_protocol_version(self.settings.protocol_version.clone());
        let options = ConnectOptions {
            server: self.name().to_string(),
            startup_timeout: self.config.startup_timeout,
        };
        let connecting = self.connector.connect(handler, options);
        let limits = self.settings.limits;
        let page_timeout = self.config.startup_timeout;
        let name = self.name().to_string();
        let fut = async move {
            let session = connecting.await?;
            // The first listing belongs to startup: a server is connected only once listed.
            let kinds = declared_kinds(session.info());
            let listings = futures::future::join_all(
                kinds
                    .iter()
                    .map(|&k| list_kind(session.peer().clone(), k, limits, page_timeout)),
            )
            .await;
            let mut catalog = ServerCatalog::default();
            for listed in listings {
                match listed {
                    Ok(listed) => apply_listing(&mut catalog, &name, listed),
                    Err(message) => {
                        session.shutdown().await;
                        return Err(TransportError::Initialize {
                            message,
                            auth_required: false,
                            stderr_tail: None,
                        });
                    }
                }
            }
            Ok((session, catalog))
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(move |result, act, ctx| act.on_connected(epoch, result, ctx)),
        );
    }

    fn on_connected(
        &mut self,
        epoch: u64,
        result: Result<(Session, ServerCatalog), TransportError>,
        ctx: &mut Context<Self>,
    ) {
        if epoch != self.epoch || self.stopped {
            if let Ok((session, _)) = result {
                actix::spawn(session.shutdown());
            }
            return;
        }
        match result {
            Ok((mut session, mut catalog)) => {
                let info = session.info().clone();
                self.filter.apply(self.name(), &mut catalog);
                self.catalog = catalog;
                self.status.protocol_version = Some(info.protocol_version.to_string());
                self.status.server_name = info.server_name.clone();
                self.status.server_version = info.server_version.clone();
                self.status.instructions = info.instructions.clone();
                if let Some(closed) = session.take_closed() {
                    ctx.spawn(
                        closed
                            .into_actor(self)
                            .map(move |reason, act, _| act.on_closed(epoch, reason)),
                    );
                }
                self.session = Some(session);
                self.set_state(ServerState::Connected);
                tracing::info!(server = %self.name(), tools = self.catalog.tools.len(), "connected");
                self.report("initial listing");
            }
            Err(e) => {
                tracing::warn!(server = %self.name(), error = %e, "connect failed");
                let state = if e.needs_auth() {
                    ServerState::NeedsAuth {
                        reason: e.to_string(),
                    }
                } else {
                    ServerState::Failed {
                        error: e.to_string(),
                    }
                };
                self.set_state(state);
                self.report("connect failed");
            }
        }
    }

    fn on_closed(&mut self, epoch: u64, reason: String) {
        if epoch != self.epoch || self.stopped {
            return;
        }
        let Some(session) = self.session.take() else {
            return;
        };
        let error = TransportError::Closed {
            reason,
            stderr_tail: session.stderr_tail(),
        };
        actix::spawn(session.shutdown());
        tracing::warn!(server = %self.name(), error = %error, "connection lost");
        self.catalog = ServerCatalog::default();
        self.set_state(ServerState::Failed {
            error: error.to_string(),
        });
        self.report("connection lost");
    }

    fn relist(&mut self, kind: Kind, cause: &'static str, ctx: &mut Context<Self>) {
        let Some(session) = &self.session else { return };
        if self.status.state != ServerState::Connected
            || !declared_kinds(session.info()).contains(&kind)
        {
            return;
        }
        let ticket = {
            let t = self.issued.entry(kind).or_insert(0);
            *t += 1;
            *t
        };
        let epoch = self.epoch;
        let fut = list_kind(
            session.peer().clone(),
            kind,
            self.settings.limits,
            self.config.startup_timeout,
        );
        ctx.spawn(
            fut.into_actor(self)
                .map(move |result, act, _| act.on_relisted(epoch, kind, ticket, result, cause)),
        );
    }

    fn on_relisted(
        &mut self,
        epoch: u64,
        kind: Kind,
        ticket: u64,
        result: Result<Listed, String>,
        cause: &str,
    ) {
        if epoch != self.epoch || self.stopped || self.status.state != ServerState::Connected {
            return;
        }
        let applied = self.applied.entry(kind).or_insert(0);
        if ticket <= *applied {
            tracing::debug!(server = %self.name(), %kind, ticket, "dropping a listing older than the one applied");
            return;
        }
        *applied = ticket;
        match result {
            Ok(listed) => {
                let name = self.config.name.clone();
                apply_listing(&mut self.catalog, &name, listed);
                if kind == Kind::Tools {
                    self.filter.apply(&name, &mut self.catalog);
                }
                self.report(cause);
            }
            Err(message) => {
                tracing::warn!(server = %self.name(), %kind, error = %message, "re-listing failed; keeping the previous generation");
                self.status.last_error = Some(format!(
                    "{message} (after {cause}; the previous {kind} are kept)"
                ));
                self.report(format!("{cause}: re-listing failed"));
            }
        }
    }
}

fn apply_listing(catalog: &mut ServerCatalog, server: &str, listed: Listed) {
    match listed {
        Listed::Tools(t) => catalog.set_tools(server, t),
        Listed::Prompts(p) => catalog.set_prompts(server, p),
        Listed::Resources(r) => catalog.set_resources(server, r),
        Listed::Templates(t) => catalog.set_templates(server, t),
    }
}

impl Actor for ServerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.connect(ctx);
    }
}

impl Supervised for ServerActor {
    fn restarting(&mut self, _ctx: &mut Self::Context) {
        tracing::info!(server = %self.name(), "server actor restarting");
        if let Some(session) = self.session.take() {
            actix::spawn(session.shutdown());
        }
    }
}

impl Handler<Notified> for ServerActor {
    type Result = ();

    fn handle(&mut self, msg: Notified, ctx: &mut Self::Context) {
        if msg.epoch != self.epoch {
            return;
        }
        match msg.event {
            ServerEvent::ToolsListChanged => {
                self.relist(Kind::Tools, "notifications/tools/list_changed", ctx)
            }
            ServerEvent::PromptsListChanged => {
                self.relist(Kind::Prompts, "notifications/prompts/list_changed", ctx)
            }
            ServerEvent::ResourcesListChanged => {
                self.relist(Kind::Resources, "notifications/resources/list_changed", ctx);
                self.relist(
                    Kind::ResourceTemplates,
                    "notifications/resources/list_changed",
                    ctx,
                );
            }
            ServerEvent::ResourceUpdated { uri } => {
                tracing::debug!(server = %self.name(), %uri, "resource updated");
            }
            ServerEvent::Progress(p) => {
                tracing::trace!(server = %self.name(), progress = p.progress, "progress");
            }
            #[allow(deprecated)]
            ServerEvent::Log(log) => {
                tracing::debug!(target: "mcp_harness::server_log", server = %self.name(), level = ?log.level, "{}", log.data);
            }
        }
    }
}

impl Handler<Shutdown> for ServerActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        self.stopped = true;
        let session = self.session.take();
        Box::pin(
            async move {
                if let Some(session) = session {
                    session.shutdown().await;
                }
            }
            .into_actor(self),
        )
    }
}

/// How long runtime shutdown waits for one server to close before moving on.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

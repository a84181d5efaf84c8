//! The client side of every session: answers the server's requests and turns its notifications
//! into [`ServerEvent`]s delivered to one [`EventSink`]. It holds no strong reference to its
//! owner, so a session never keeps a stopped owner alive.

// `notifications/message` (server logging), sampling and roots are deprecated by SEP-2577 but
// servers of every earlier protocol still use them.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, Implementation, JsonObject,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationCapability, FormElicitationCapability, ListRootsResult, RootsCapabilities,
    UrlElicitationCapability,
};
use rmcp::service::{
    ClientLifecycleMode, InboundStreamOrigin, NotificationContext, RequestContext, RoleClient,
};

use crate::callbacks::{
    CallbackFuture, Callbacks, ClientCallbacks, RequestOrigin, apply_form_defaults,
};
use crate::ordered::{Delivered, Sequence};

/// What a connected server told us, outside any request/response pair.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// `notifications/tools/list_changed`.
    ToolsListChanged,
    /// `notifications/prompts/list_changed`.
    PromptsListChanged,
    /// `notifications/resources/list_changed`.
    ResourcesListChanged,
    /// `notifications/resources/updated` for a subscribed resource.
    ResourceUpdated {
        /// The resource's URI.
        uri: String,
    },
    /// `notifications/progress` for some request of ours.
    Progress(ProgressNotificationParam),
    /// `notifications/message` (server log output).
    Log(LoggingMessageNotificationParam),
    /// `notifications/tasks/status` of MCP 2025-11-25 (SEP-1686): the params as the server
    /// sent them — the task, with at least a string `taskId` and `status` — untouched (rmcp
    /// models only SEP-2663's `notifications/tasks`, so this one arrives as a custom
    /// notification; one without those two strings is dropped here).
    TaskStatus(JsonObject),
}

/// The method of the SEP-1686 task status notification (MCP 2025-11-25).
pub const TASK_STATUS_NOTIFICATION: &str = "notifications/tasks/status";

/// The notification a server sends when the out-of-band flow of a URL-mode elicitation ended.
pub const ELICITATION_COMPLETE_NOTIFICATION: &str = "notifications/elicitation/complete";

/// Receives the events of one session. Called from rmcp's tasks: must not block.
pub type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// The protocol version asked for by default: the newest with the `initialize` handshake,
/// which every server era since 2024-11-05 can negotiate down from.
pub const DEFAULT_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The extensions every harness session takes part in: skills (SEP-2640), and tasks (SEP-2663:
/// servers may run `tools/call` as a task; the runtime follows it).
pub const EXTENSIONS: [&str; 2] = [
    rmcp::model::SKILLS_EXTENSION_ID,
    rmcp::model::TASKS_EXTENSION_ID,
];

/// The rmcp [`ClientHandler`] every harness session runs with.
#[derive(Clone)]
pub struct HarnessClient {
    sink: EventSink,
    protocol_version: Option<ProtocolVersion>,
    server: Arc<str>,
    callbacks: Option<Callbacks>,
    callback_runtime: Option<tokio::runtime::Handle>,
    /// Counts the notifications delivered that the session's transport orders responses
    /// behind (see [`crate::ordered`]); set per connection attempt by `initialize`.
    delivered: Arc<Delivered>,
}

impl HarnessClient {
    /// A handler that forwards every notification to `sink`.
    pub fn new(sink: EventSink) -> Self {
        Self {
            sink,
            protocol_version: None,
            server: Arc::from(""),
            callbacks: None,
            callback_runtime: None,
            delivered: Arc::default(),
        }
    }

    /// This handler counting its deliveries in `delivered`, the count the session's
    /// [`InOrder`](crate::ordered::InOrder) transport waits on.
    pub(crate) fn ordered(mut self, delivered: Arc<Delivered>) -> Self {
        self.delivered = delivered;
        self
    }

    /// Delivers `event` (if any: a notification may carry nothing to deliver) to the sink — in
    /// its session's arrival order when the transport numbered it (see [`crate::ordered`]).
    async fn emit_in_turn(
        &self,
        event: Option<ServerEvent>,
        context: &NotificationContext<RoleClient>,
    ) {
        let deliver = || {
            if let Some(event) = event {
                self.emit(event);
            }
        };
        match context.extensions.get::<Sequence>() {
            Some(sequence) => self.delivered.in_turn(*sequence, deliver).await,
            None => deliver(),
        }
    }

    /// Answers the server's requests (elicitation, sampling, roots) through `callbacks`, naming
    /// `server` to them.
    pub fn with_callbacks(mut self, server: &str, callbacks: Option<Callbacks>) -> Self {
        self.server = Arc::from(server);
        self.callbacks = callbacks;
        self
    }

    /// Runs the callbacks (the call and the future it returns) as tasks of `runtime` (a
    /// multi-threaded one) instead of on the session's own thread: a callback that blocks — a
    /// prompt read synchronously, a `block_in_place` — then stalls no connection. A callback still running when its request
    /// goes away (the server cancelled it, the session closed) is aborted, as it would be if
    /// polled in place.
    pub fn with_callback_runtime(mut self, runtime: Option<tokio::runtime::Handle>) -> Self {
        self.callback_runtime = runtime;
        self
    }

    /// Asks for this protocol version instead of [`DEFAULT_PROTOCOL_VERSION`].
    pub fn with_protocol_version(mut self, version: Option<ProtocolVersion>) -> Self {
        self.protocol_version = version;
        self
    }

    /// The version this client asks for.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.protocol_version
            .clone()
            .unwrap_or(DEFAULT_PROTOCOL_VERSION)
    }

    /// How the session starts: versions from 2026-07-28 on have no `initialize` and use
    /// `server/discover` with per-request metadata; older ones use the `initialize` handshake,
    /// which servers negotiate down from.
    pub fn lifecycle(&self) -> ClientLifecycleMode {
        let version = self.protocol_version();
        if version.as_str() >= ProtocolVersion::V_2026_07_28.as_str() {
            ClientLifecycleMode::Discover {
                preferred_versions: vec![version],
            }
        } else {
            ClientLifecycleMode::Initialize
        }
    }

    pub(crate) fn emit(&self, event: ServerEvent) {
        (self.sink)(event);
    }

    /// Where a server's request came from: the request of ours on whose Streamable HTTP
    /// response stream it arrived, and the embedder's call that request belongs to (when the
    /// callbacks keep [`CallTags`](crate::callbacks::CallTags)).
    async fn origin(
        &self,
        callbacks: &Callbacks,
        context: &RequestContext<RoleClient>,
    ) -> RequestOrigin {
        let request = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => None,
        };
        let caller = match (&request, callbacks.call_tags()) {
            (Some(id), Some(tags)) => tags.caller(&self.server, id).await,
            _ => None,
        };
        RequestOrigin {
            request,
            caller,
            related_task: crate::callbacks::related_task(&context.meta),
        }
    }

    /// The answer of one callback — the call and its future both — from the callback runtime
    /// when there is one.
    async fn answer<T, F>(&self, callbacks: &Callbacks, ask: F) -> Result<T, ErrorData>
    where
        T: Send + 'static,
        F: FnOnce(&dyn ClientCallbacks, &str) -> CallbackFuture<T> + Send + 'static,
    {
        let Some(runtime) = &self.callback_runtime else {
            return ask(callbacks.as_ref(), &self.server).await;
        };
        let (callbacks, server) = (callbacks.clone(), self.server.clone());
        let mut task =
            AbortOnDrop(runtime.spawn(async move { ask(callbacks.as_ref(), &server).await }));
        match (&mut task.0).await {
            Ok(answer) => answer,
            Err(e) => Err(ErrorData::internal_error(
                format!(
                    "the embedder's callback for server `{}` did not answer: {e}",
                    self.server
                ),
                None,
            )),
        }
    }
}

/// Aborts its task when dropped (the request it answers went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The capabilities the harness declares to a server whose requests (elicitation, sampling,
/// roots) `callbacks` answer: at `initialize`, and (SEP-2575) in a request's `_meta`.
pub fn declared_capabilities(callbacks: Option<&Callbacks>) -> ClientCapabilities {
    // We take part in the skills extension (SEP-2640); some servers expose skills only to
    // clients that say so.
    let mut capabilities = ClientCapabilities::default();
    let supported = callbacks.map(|c| c.supports()).unwrap_or_default();
    if supported.elicitation_form || supported.elicitation_url {
        let mut elicitation = ElicitationCapability::default();
        if supported.elicitation_form {
            elicitation.form = Some(FormElicitationCapability::default());
        }
        if supported.elicitation_url {
            elicitation.url = Some(UrlElicitationCapability::default());
        }
        capabilities.elicitation = Some(elicitation);
    }
    if supported.sampling {
        capabilities.sampling = Some(Default::default());
    }
    if supported.roots {
        // `Runtime::notify_roots_changed` tells servers when the roots change.
        let mut roots = RootsCapabilities::default();
        roots.list_changed = Some(true);
        capabilities.roots = Some(roots);
    }
    // Extensions we take part in: skills (SEP-2640), and tasks (SEP-2663: servers may run
    // `tools/call` as a task; the runtime follows it, `runtime/src/tasks.rs`).
    capabilities.extensions = Some(
        EXTENSIONS
            .into_iter()
            .map(|id| (id.to_string(), rmcp::model::JsonObject::new()))
            .collect(),
    );
    capabilities
}

impl ClientHandler for HarnessClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = declared_capabilities(self.callbacks.as_ref());
        let info = ClientConfig::new(
            capabilities,
            Implementation::new("mcp-harness", env!("CARGO_PKG_VERSION")),
        );
        info.with_protocol_version(self.protocol_version())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(callbacks) = &self.callbacks else {
            return Err(ErrorData::method_not_found::<
                rmcp::model::ElicitationCreateRequestMethod,
            >());
        };
        let origin = self.origin(callbacks, &context).await;
        let asked = request.clone();
        let result = self
            .answer(callbacks, move |c, server| {
                c.elicit_from(server, &origin, asked)
            })
            .await?;
        Ok(apply_form_defaults(&request, result))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match &self.callbacks {
            Some(callbacks) => {
                let origin = self.origin(callbacks, &context).await;
                self.answer(callbacks, move |c, server| {
                    c.sample_from(server, &origin, params)
                })
                .await
            }
            None => Err(ErrorData::method_not_found::<
                rmcp::model::CreateMessageRequestMethod,
            >()),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        match &self.callbacks {
            Some(callbacks) => {
                let origin = self.origin(callbacks, &context).await;
                self.answer(callbacks, move |c, server| c.roots_from(server, &origin))
                    .await
            }
            None => Ok(ListRootsResult::default()),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.emit(ServerEvent::ToolsListChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.emit(ServerEvent::PromptsListChanged);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.emit(ServerEvent::ResourcesListChanged);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.emit(ServerEvent::ResourceUpdated { uri: params.uri });
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.emit_in_turn(Some(ServerEvent::Progress(params)), &context)
            .await;
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.emit_in_turn(Some(ServerEvent::Log(params)), &context)
            .await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleClient>,
    ) {
        let event = self.custom_notification(notification);
        self.emit_in_turn(event, &context).await;
    }
}

impl HarnessClient {
    /// A task status is an event for the sink; a URL-mode elicitation's completion goes to the
    /// callbacks; any other custom notification is ignored.
    fn custom_notification(&self, notification: CustomNotification) -> Option<ServerEvent> {
        if notification.method == ELICITATION_COMPLETE_NOTIFICATION {
            let id = (notification.params.as_ref())
                .and_then(|p| p.get("elicitationId"))
                .and_then(serde_json::Value::as_str);
            match (&self.callbacks, id) {
                (Some(callbacks), Some(id)) => callbacks.elicitation_complete(&self.server, id),
                _ => {
                    tracing::debug!(server = %self.server, "an elicitation completion without an id, or no one to tell; ignored")
                }
            }
            return None;
        }
        if notification.method != TASK_STATUS_NOTIFICATION {
            tracing::trace!(server = %self.server, method = %notification.method, "custom notification ignored");
            return None;
        }
        match notification.params {
            Some(serde_json::Value::Object(params))
                if params
                    .get("taskId")
                    .is_some_and(serde_json::Value::is_string)
                    && params
                        .get("status")
                        .is_some_and(serde_json::Value::is_string) =>
            {
                Some(ServerEvent::TaskStatus(params))
            }
            _ => {
                tracing::debug!(server = %self.server, "a notifications/tasks/status without a string taskId and status; dropped");
                None
            }
        }
    }
}

//! The client side of every session: answers the server's requests and turns its notifications
//! into [`ServerEvent`]s delivered to one [`EventSink`]. It holds no strong reference to its
//! owner, so a session never keeps a stopped owner alive.

#![allow(deprecated)] // `notifications/message` (server logging) is deprecated by SEP-2577 but servers still send it.

use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProtocolVersion, ResourceUpdatedNotificationParam,
};
use rmcp::service::{ClientLifecycleMode, NotificationContext, RoleClient};

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
    ResourceUpdated { uri: String },
    /// `notifications/progress` for some request of ours.
    Progress(ProgressNotificationParam),
    /// `notifications/message` (server log output).
    Log(LoggingMessageNotificationParam),
}

/// Receives the events of one session. Called from rmcp's tasks: must not block.
pub type EventSink = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// The protocol version asked for by default: the newest with the `initialize` handshake,
/// which every server era since 2024-11-05 can negotiate down from.
pub const DEFAULT_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The rmcp [`ClientHandler`] every harness session runs with.
#[derive(Clone)]
pub struct HarnessClient {
    sink: EventSink,
    protocol_version: Option<ProtocolVersion>,
}

impl HarnessClient {
    /// A handler that forwards every notification to `sink`.
    pub fn new(sink: EventSink) -> Self {
        Self {
            sink,
            protocol_version: None,
        }
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

    fn emit(&self, event: ServerEvent) {
        (self.sink)(event);
    }
}

impl ClientHandler for HarnessClient {
    fn get_info(&self) -> ClientConfig {
        // We take part in the skills extension (SEP-2640); some servers expose skills only to
        // clients that say so.
        let mut capabilities = ClientCapabilities::default();
        capabilities.extensions = Some(
            [(
                rmcp::model::SKILLS_EXTENSION_ID.to_string(),
                rmcp::model::JsonObject::new(),
            )]
            .into(),
        );
        let info = ClientConfig::new(
            capabilities,
            Implementation::new("mcp-harness", env!("CARGO_PKG_VERSION")),
        );
        info.with_protocol_version(self.protocol_version())
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
        _context: NotificationContext<RoleClient>,
    ) {
        self.emit(ServerEvent::Progress(params));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.emit(ServerEvent::Log(params));
    }
}

//! Logging and completion (`--log-and-complete`): the server declares the `logging` and
//! `completions` capabilities, lists the tool `log`, answers `completion/complete` for the
//! `greeting` prompt's `name` and the item template's `id`, and keeps the level a client sets
//! with `logging/setLevel`.
//!
//! Invariant: `log` sends one `notifications/message` per level from debug to error, only
//! those at or above the level last set (info until one is set), each with the data
//! `"<level> from log"`, before answering; its result names the level in force. Completion
//! values are the fixed candidates that start with the typed value, in their fixed order.

#![allow(deprecated)] // logging: every protocol before 2026-07-28

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolResult, CompleteRequestParams, CompleteResult, CompletionInfo, LoggingLevel,
        LoggingMessageNotificationParam, Reference, Tool,
    },
    service::RequestContext,
};
use serde_json::json;

use super::{FixtureServer, text_result};

/// Completion candidates of the `greeting` prompt's `name` argument.
pub const NAME_CANDIDATES: [&str; 4] = ["Ada", "Alan", "Grace", "Guido"];
/// Completion candidates of the item template's `id` variable.
pub const ID_CANDIDATES: [&str; 3] = ["1", "12", "42"];

/// The levels `log` sends, least severe first.
const LEVELS: [(LoggingLevel, &str); 4] = [
    (LoggingLevel::Debug, "debug"),
    (LoggingLevel::Info, "info"),
    (LoggingLevel::Warning, "warning"),
    (LoggingLevel::Error, "error"),
];

/// The `log` tool's definition.
pub(crate) fn log_tool() -> Tool {
    Tool::new(
        "log",
        "Sends a log message at debug, info, warning and error (those at or above the level set \
         with logging/setLevel); returns the level in force.",
        std::sync::Arc::new(
            json!({"type": "object", "properties": {}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
    )
}

impl FixtureServer {
    /// Runs `log`.
    pub(crate) async fn log_call(&self, context: &RequestContext<RoleServer>) -> CallToolResult {
        let floor = self.lock().log_level.unwrap_or(LoggingLevel::Info);
        for (level, name) in LEVELS {
            if level as u8 >= floor as u8 {
                let param =
                    LoggingMessageNotificationParam::new(level, json!(format!("{name} from log")))
                        .with_logger("fixture");
                if let Err(e) = context.peer.notify_logging_message(param).await {
                    tracing::debug!(error = %e, "log notification not delivered");
                }
            }
        }
        let shown = serde_json::to_value(floor).unwrap_or_default();
        text_result(format!("level {}", shown.as_str().unwrap_or("?")))
    }

    /// `logging/setLevel`.
    pub(crate) fn set_log_level(&self, level: LoggingLevel) {
        self.lock().log_level = Some(level);
    }

    /// `completion/complete`.
    pub(crate) fn completions(
        &self,
        request: &CompleteRequestParams,
    ) -> Result<CompleteResult, McpError> {
        let candidates: &[&str] = match (&request.r#ref, request.argument.name.as_str()) {
            (Reference::Prompt(p), "name") if p.name == "greeting" => &NAME_CANDIDATES,
            (Reference::Resource(r), "id") if r.uri == crate::tools::ITEM_TEMPLATE => {
                &ID_CANDIDATES
            }
            _ => {
                return Err(McpError::invalid_params(
                    format!(
                        "nothing to complete for argument {:?} of {}",
                        request.argument.name,
                        request.r#ref.reference_type()
                    ),
                    None,
                ));
            }
        };
        let values = candidates
            .iter()
            .filter(|c| c.starts_with(request.argument.value.as_str()))
            .map(|c| c.to_string())
            .collect();
        CompletionInfo::with_all_values(values)
            .map(CompleteResult::new)
            .map_err(|e| McpError::internal_error(e, None))
    }
}

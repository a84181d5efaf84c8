//! The change notifications of a 2026-07-28 session: such a server sends `list_changed` only on
//! a `subscriptions/listen` stream (SEP-2575), so the session opens one for the kinds the
//! server declared `listChanged` for and hands what arrives to the session's [`EventSink`], as
//! an older session's notifications are.
//!
//! Invariants: one stream per session, opened only on a session without `initialize`; it ends
//! with the session (its cancellation token, or the transport closing), never outlives it.

use rmcp::model::{ServerCapabilities, ServerNotification, SubscriptionFilter};
use tokio_util::sync::CancellationToken;

use crate::ClientPeer;
use crate::handler::{HarnessClient, ServerEvent};

/// The filter for the kinds `capabilities` declares `listChanged` for (`None`: no such kind).
fn filter(capabilities: &ServerCapabilities) -> Option<SubscriptionFilter> {
    let declared = |changed: Option<bool>| changed.unwrap_or(false).then_some(true);
    let mut filter = SubscriptionFilter::new();
    filter.tools_list_changed = declared(capabilities.tools.as_ref().and_then(|t| t.list_changed));
    filter.prompts_list_changed =
        declared(capabilities.prompts.as_ref().and_then(|p| p.list_changed));
    filter.resources_list_changed =
        declared(capabilities.resources.as_ref().and_then(|r| r.list_changed));
    (filter.tools_list_changed.is_some()
        || filter.prompts_list_changed.is_some()
        || filter.resources_list_changed.is_some())
    .then_some(filter)
}

/// Opens the session's listen stream (when the server declares any `listChanged`) and
/// forwards its notifications to `handler`'s sink until `cancel` fires or the stream ends.
pub(crate) fn spawn(
    server: &str,
    peer: ClientPeer,
    capabilities: &ServerCapabilities,
    handler: HarnessClient,
    cancel: CancellationToken,
) {
    let Some(filter) = filter(capabilities) else {
        return;
    };
    let server = server.to_string();
    let listening = async move {
        let mut subscription = match peer.listen(filter).await {
            Ok(subscription) => subscription,
            Err(e) => {
                tracing::warn!(%server, error = %e, "subscriptions/listen refused: this server's list changes will not be seen until it reconnects");
                return;
            }
        };
        loop {
            let event = match subscription.next().await {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                    ServerEvent::ToolsListChanged
                }
                Ok(Some(ServerNotification::PromptListChangedNotification(_))) => {
                    ServerEvent::PromptsListChanged
                }
                Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => {
                    ServerEvent::ResourcesListChanged
                }
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%server, error = %e, "the subscriptions/listen stream broke");
                    break;
                }
            };
            handler.emit(event);
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = listening => {}
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kinds_declared_list_changed_are_asked_for() {
        // From JSON, not rmcp's builder: that needs rmcp's `server` feature, which this crate
        // alone (`cargo test -p mcp-harness-transport`) does not enable.
        let caps = |value| serde_json::from_value::<ServerCapabilities>(value).unwrap();
        let none = caps(serde_json::json!({"tools": {}}));
        assert!(filter(&none).is_none());
        let some = caps(serde_json::json!({"tools": {"listChanged": true}, "prompts": {}}));
        let filter = filter(&some).expect("tools declare listChanged");
        assert_eq!(filter.tools_list_changed, Some(true));
        assert_eq!(filter.prompts_list_changed, None);
        assert_eq!(filter.resources_list_changed, None);
    }
}

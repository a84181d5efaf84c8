//! Requests other than `tools/call` that carry the caller's W3C trace context to the server
//! (SEP-414): `prompts/get`, `resources/read` and `resources/directory/read` with a
//! [`TraceMeta`] set in the request's `_meta`, so an instrumented server's spans join the
//! caller's trace.
//!
//! Invariant: a [`TraceMeta`] adds only the `traceparent` / `tracestate` keys it holds to the
//! request's `_meta`; an empty one sends the request exactly as the untraced methods do.

use rmcp::model::{ClientRequest, GetPromptResult, JsonObject, ReadResourceResult, ServerResult};

use super::{Runtime, bound_client, send};
use crate::call::binding::Forwarded;
use crate::call::input::Reply;
pub use crate::call::trace_meta::TraceMeta;
use crate::error::{CallError, unexpected};

impl Runtime {
    /// [`Runtime::get_prompt`] with `trace` sent in the request's `_meta`.
    pub async fn get_prompt_with(
        &self,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
        trace: &TraceMeta,
    ) -> Result<GetPromptResult, CallError> {
        match self
            .get_prompt_reply(server, name, arguments, &Forwarded::default(), trace, false)
            .await?
        {
            Reply::Done(result) => Ok(result),
            Reply::InputRequired(_) => Err(super::handed_back_unasked(server, name)),
        }
    }

    /// [`Runtime::read_resource`] with `trace` sent in the request's `_meta`.
    pub async fn read_resource_with(
        &self,
        server: &str,
        uri: &str,
        trace: &TraceMeta,
    ) -> Result<ReadResourceResult, CallError> {
        match self
            .read_resource_reply(server, uri, &Forwarded::default(), trace, false)
            .await?
        {
            Reply::Done(result) => Ok(result),
            Reply::InputRequired(_) => Err(super::handed_back_unasked(server, uri)),
        }
    }

    /// [`Runtime::read_resource_directory`] with `trace` sent in the request's `_meta`.
    pub async fn read_resource_directory_with(
        &self,
        server: &str,
        uri: &str,
        cursor: Option<String>,
        trace: &TraceMeta,
    ) -> Result<rmcp::model::ListResourcesResult, CallError> {
        let published = self.live.published();
        let client = bound_client(&published, server)?;
        if !client
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.supports_directory_read())
        {
            return Err(CallError::Protocol {
                upstream: Some(Box::new(rmcp::ErrorData::method_not_found::<
                    rmcp::model::ReadResourceDirectoryRequestMethod,
                >())),
                server: server.to_string(),
                tool: uri.to_string(),
                message: format!("server \"{server}\" does not declare directoryRead"),
            });
        }
        let mut params = rmcp::model::ReadResourceDirectoryRequestParams::new(uri);
        params.cursor = cursor;
        trace.apply(&mut params);
        let request = ClientRequest::ReadResourceDirectoryRequest(
            rmcp::model::ReadResourceDirectoryRequest::new(params),
        );
        match send(&client, request, server, uri).await? {
            ServerResult::ListResourcesResult(r) => Ok(r),
            other => Err(unexpected(server, uri, &other)),
        }
    }
}

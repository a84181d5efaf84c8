//! Requests other than `tools/call` that carry the caller's W3C trace context to the server
//! (SEP-414): `prompts/get`, `resources/read` and `resources/directory/read` with a
//! [`TraceMeta`] set in the request's `_meta`, so an instrumented server's spans join the
//! caller's trace.
//!
//! Invariant: a [`TraceMeta`] adds only the `traceparent` / `tracestate` keys it holds to the
//! request's `_meta`; an empty one sends the request exactly as the untraced methods do.

use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, JsonObject, ReadResourceRequestParams,
    ReadResourceResult, RequestParamsMeta, ServerResult,
};

use super::{Runtime, bound_client, send};
use crate::error::{CallError, unexpected};

/// The W3C trace context (SEP-414) a request carries to its server in `_meta`. Sent as given:
/// the caller checks the values (a gateway continues only a well-formed context).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceMeta {
    /// The `traceparent` to send (the caller's span).
    pub traceparent: Option<String>,
    /// The `tracestate` to send alongside it (vendor entries of the trace, passed on).
    pub tracestate: Option<String>,
}

impl TraceMeta {
    /// Sets the values this holds in `params`' `_meta` (nothing when it holds none).
    pub fn apply(&self, params: &mut impl RequestParamsMeta) {
        if let Some(traceparent) = &self.traceparent {
            params.set_traceparent(traceparent);
        }
        if let Some(tracestate) = &self.tracestate {
            params.set_tracestate(tracestate);
        }
    }
}

impl Runtime {
    /// [`Runtime::get_prompt`] with `trace` sent in the request's `_meta`.
    pub async fn get_prompt_with(
        &self,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
        trace: &TraceMeta,
    ) -> Result<GetPromptResult, CallError> {
        let published = self.live.published();
        let client = bound_client(&published, server)?;
        let mut params = GetPromptRequestParams::new(name.to_string());
        if let Some(args) = arguments {
            params = params.with_arguments(args);
        }
        trace.apply(&mut params);
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        match send(&client, request, server, name).await? {
            ServerResult::GetPromptResult(r) => Ok(r),
            other => Err(unexpected(server, name, &other)),
        }
    }

    /// [`Runtime::read_resource`] with `trace` sent in the request's `_meta`.
    pub async fn read_resource_with(
        &self,
        server: &str,
        uri: &str,
        trace: &TraceMeta,
    ) -> Result<ReadResourceResult, CallError> {
        let published = self.live.published();
        let client = bound_client(&published, server)?;
        let mut params = ReadResourceRequestParams::new(uri.to_string());
        trace.apply(&mut params);
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        match send(&client, request, server, uri).await? {
            ServerResult::ReadResourceResult(r) => Ok(r),
            other => Err(unexpected(server, uri, &other)),
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

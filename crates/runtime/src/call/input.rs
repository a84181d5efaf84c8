//! `prompts/get` and `resources/read` with SEP-2322 `input_required` rounds: followed through
//! the embedder's callbacks (the default), or handed back untouched to a caller that passes
//! them through (a gateway in front of a 2026-07-28 client), which retries with the answers.
//!
//! Invariants: a `requestState` is echoed byte for byte and never inspected; rounds are bounded
//! by [`MAX_ROUNDS`]; what a caller forwards ([`Forwarded`]) is sent only on a session of
//! 2026-07-28 or later, where such rounds exist.

use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, InputRequiredResult, InputResponses,
    JsonObject, ReadResourceRequestParams, ReadResourceResult, ServerResult,
};
use rmcp::service::PeerRequestOptions;

use super::binding::Forwarded;
use super::context::CallContext;
use super::mrtr::{MAX_ROUNDS, next_round};
use super::trace_meta::TraceMeta;
use crate::error::{CallError, classify, explain_timeout, unexpected};
use crate::snapshot::publisher::ServerClient;

/// The answer of a request that may be handed back before it is complete.
#[derive(Debug, Clone)]
pub enum Reply<T> {
    /// The server's complete result.
    Done(T),
    /// The server needs input first; the caller sends the same request again with the
    /// answers and the server's state (only when the caller asked for it to be handed back).
    InputRequired(InputRequiredResult),
}

/// One request of a kind that may take several rounds.
pub(crate) enum Request {
    /// `prompts/get` of a raw prompt name with its arguments.
    Prompt(String, Option<JsonObject>),
    /// `resources/read` of an upstream URI.
    Resource(String),
}

impl Request {
    fn what(&self) -> &str {
        match self {
            Self::Prompt(name, _) => name,
            Self::Resource(uri) => uri,
        }
    }

    fn build(
        &self,
        responses: Option<InputResponses>,
        state: Option<String>,
        trace: &TraceMeta,
    ) -> ClientRequest {
        match self {
            Self::Prompt(name, arguments) => {
                let mut params = GetPromptRequestParams::new(name.clone());
                params.arguments = arguments.clone();
                params.input_responses = responses;
                params.request_state = state;
                trace.apply(&mut params);
                ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params))
            }
            Self::Resource(uri) => {
                let mut params = ReadResourceRequestParams::new(uri.clone());
                params.input_responses = responses;
                params.request_state = state;
                trace.apply(&mut params);
                ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params))
            }
        }
    }
}

/// The complete answer of a round, or the input it still needs.
enum Round<T> {
    Done(T),
    Needs(InputRequiredResult),
    /// An answer of another kind: a protocol error.
    Other(Box<ServerResult>),
}

fn prompt_round(result: ServerResult) -> Round<GetPromptResult> {
    match result {
        ServerResult::GetPromptResult(r) => Round::Done(r),
        ServerResult::InputRequiredResult(r) => Round::Needs(r),
        other => Round::Other(Box::new(other)),
    }
}

fn resource_round(result: ServerResult) -> Round<ReadResourceResult> {
    match result {
        ServerResult::ReadResourceResult(r) => Round::Done(r),
        ServerResult::InputRequiredResult(r) => Round::Needs(r),
        other => Round::Other(Box::new(other)),
    }
}

/// `prompts/get`, its rounds followed or (with `hand_back`) the first handed back.
pub(crate) async fn get_prompt(
    ctx: &CallContext,
    client: &ServerClient,
    server: &str,
    request: Request,
    forward: &Forwarded,
    trace: &TraceMeta,
    hand_back: bool,
) -> Result<Reply<GetPromptResult>, CallError> {
    rounds(
        ctx,
        client,
        server,
        &request,
        (forward, trace),
        hand_back,
        prompt_round,
    )
    .await
}

/// `resources/read`, its rounds followed or (with `hand_back`) the first handed back.
pub(crate) async fn read_resource(
    ctx: &CallContext,
    client: &ServerClient,
    server: &str,
    request: Request,
    forward: &Forwarded,
    trace: &TraceMeta,
    hand_back: bool,
) -> Result<Reply<ReadResourceResult>, CallError> {
    rounds(
        ctx,
        client,
        server,
        &request,
        (forward, trace),
        hand_back,
        resource_round,
    )
    .await
}

async fn rounds<T>(
    ctx: &CallContext,
    client: &ServerClient,
    server: &str,
    request: &Request,
    (forward, trace): (&Forwarded, &TraceMeta),
    hand_back: bool,
    read: fn(ServerResult) -> Round<T>,
) -> Result<Reply<T>, CallError> {
    let what = request.what();
    let modern = client
        .peer
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize());
    // The client's capabilities govern every round; its answers and state only the first.
    let options = || {
        let mut options = PeerRequestOptions::with_timeout(client.tool_timeout);
        if modern {
            options.meta = forward.meta();
        }
        options
    };
    let first = if modern {
        request.build(
            forward.input_responses.clone(),
            forward.request_state.clone(),
            trace,
        )
    } else {
        request.build(None, None, trace)
    };
    let protocol = |message: String| CallError::Protocol {
        upstream: None,
        server: server.to_string(),
        tool: what.to_string(),
        message,
    };
    let mut answer = send(client, first, options(), server, what).await?;
    let mut state_only_rounds = 0;
    for _ in 0..=MAX_ROUNDS {
        let needed = match read(answer) {
            Round::Done(result) => return Ok(Reply::Done(result)),
            Round::Needs(needed) if hand_back => return Ok(Reply::InputRequired(needed)),
            Round::Needs(needed) => needed,
            Round::Other(other) => return Err(unexpected(server, what, &other)),
        };
        let (responses, state) = next_round(
            server,
            ctx.callbacks.as_ref(),
            needed,
            &mut state_only_rounds,
        )
        .await
        .map_err(protocol)?;
        let again = request.build(responses, state, trace);
        answer = send(client, again, options(), server, what).await?;
    }
    Err(protocol(format!(
        "the server still needed input after {MAX_ROUNDS} rounds"
    )))
}

/// Sends `request` to `server` on `client` with `options` and awaits the answer; a failure is
/// classified, and a timeout names what the server sent meanwhile that answered nothing.
pub(crate) async fn send(
    client: &ServerClient,
    request: ClientRequest,
    options: PeerRequestOptions,
    server: &str,
    what: &str,
) -> Result<ServerResult, CallError> {
    send_tagged(client, request, options, server, what, None).await
}

/// [`send`], with the request's id recorded in `tagged`'s table under its tag from before it
/// is sent until its answer came: a server request on its response stream is attributed to
/// that caller.
pub(crate) async fn send_tagged(
    client: &ServerClient,
    request: ClientRequest,
    options: PeerRequestOptions,
    server: &str,
    what: &str,
    tagged: Option<(mcp_harness_transport::callbacks::CallTags, u64)>,
) -> Result<ServerResult, CallError> {
    let mark = client.wire.anomaly_mark();
    let classify = |e| {
        explain_timeout(classify(e, server, what, client.tool_timeout), || {
            client.wire.anomalies_since(mark)
        })
    };
    let registration = match &tagged {
        Some((tags, _)) => Some(tags.begin().await),
        None => None,
    };
    let handle = client
        .peer
        .send_request_with_option(request, options)
        .await
        .map_err(classify)?;
    let _tagged = registration
        .zip(tagged)
        .map(|(r, (_, tag))| r.finish(server, handle.id.clone(), tag));
    handle.await_response().await.map_err(classify)
}

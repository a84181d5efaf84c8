//! A call's further rounds after a first answer that is not the tool's result: SEP-2322
//! `input_required` rounds and tasks (SEP-1686 / SEP-2663), followed to the result or handed
//! back to the caller as it asked ([`HandBack`]).
//!
//! Invariant: with nothing to hand back, every round is followed (bounded by
//! [`MAX_ROUNDS`] and the call's timeout) and only a `CallToolResult` ends the call; a kind
//! the caller asked for is returned at its first occurrence, untouched; what the runtime asks
//! the callbacks within the call carries the call's `caller` tag.

use std::sync::Arc;
use std::time::Duration;

use mcp_harness_catalog::ToolEntry;
use mcp_harness_transport::callbacks::{
    CallTags, CallbackFuture, Callbacks, ClientCallbacks, RequestOrigin, Supported,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientRequest, ServerResult};
#[allow(deprecated)] // sampling and roots: every protocol before 2026-07-28
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult,
};
use rmcp::service::PeerRequestOptions;
use tokio_util::sync::CancellationToken;

use super::PreparedCall;
use super::reply::{CallReply, HandBack};
use crate::call::mrtr::{MAX_ROUNDS, next_round};
use crate::error::CallError;
use crate::snapshot::publisher::ServerClient;

/// How a call's further rounds ended: the tool's result, or a non-final answer handed back.
pub(super) enum Further {
    /// The tool's result, to normalise as a first answer would be.
    Result(CallToolResult),
    /// A task or an `input_required` round the caller asked to get ([`HandBack`]).
    HandedBack(CallReply),
}

/// What [`PreparedCall::further_rounds`] needs of the call it continues.
pub(super) struct FurtherRounds<'a> {
    pub(super) entry: &'a ToolEntry,
    pub(super) client: &'a ServerClient,
    pub(super) timeout: Duration,
    /// The first request, when its protocol has further rounds.
    pub(super) retry: Option<CallToolRequestParams>,
    pub(super) task_augmented: bool,
    pub(super) cancel: Option<CancellationToken>,
    pub(super) task_status:
        Option<tokio::sync::mpsc::UnboundedSender<crate::call::tasks::TaskUpdate>>,
    /// What the caller wants back instead of followed.
    pub(super) hand_back: HandBack,
    /// The call went task-augmented with its caller's `task` (SEP-1686): the task is handed
    /// back.
    pub(super) hand_back_augmented: bool,
    /// The callbacks the runtime asks within this call ([`within`] its caller tag).
    pub(super) callbacks: Option<Callbacks>,
}

/// `callbacks` as asked within the call tagged `caller`: each request's origin names that call.
pub(super) fn within(callbacks: Option<&Callbacks>, caller: Option<u64>) -> Option<Callbacks> {
    let inner = callbacks?.clone();
    Some(match caller {
        Some(caller) => Arc::new(Within { inner, caller }),
        None => inner,
    })
}

/// The embedder's callbacks within one call: every request reaches them with the call's tag.
struct Within {
    inner: Callbacks,
    caller: u64,
}

impl Within {
    fn origin(&self, origin: &RequestOrigin) -> RequestOrigin {
        RequestOrigin {
            request: origin.request.clone(),
            caller: origin.caller.or(Some(self.caller)),
            related_task: origin.related_task.clone(),
        }
    }
}

#[allow(deprecated)] // sampling and roots: every protocol before 2026-07-28
impl ClientCallbacks for Within {
    fn supports(&self) -> Supported {
        self.inner.supports()
    }

    fn elicit(&self, server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        self.elicit_from(server, &RequestOrigin::default(), request)
    }

    fn sample(
        &self,
        server: &str,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        self.sample_from(server, &RequestOrigin::default(), request)
    }

    fn roots(&self, server: &str) -> CallbackFuture<ListRootsResult> {
        self.roots_from(server, &RequestOrigin::default())
    }

    fn call_tags(&self) -> Option<&CallTags> {
        self.inner.call_tags()
    }

    fn elicit_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: ElicitRequestParams,
    ) -> CallbackFuture<ElicitResult> {
        self.inner
            .elicit_from(server, &self.origin(origin), request)
    }

    fn sample_from(
        &self,
        server: &str,
        origin: &RequestOrigin,
        request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        self.inner
            .sample_from(server, &self.origin(origin), request)
    }

    fn roots_from(&self, server: &str, origin: &RequestOrigin) -> CallbackFuture<ListRootsResult> {
        self.inner.roots_from(server, &self.origin(origin))
    }
}

impl PreparedCall {
    /// Everything after a first answer that is not the tool's result: SEP-2322 input rounds and
    /// tasks (SEP-1686 / SEP-2663). Kept out of [`Self::call_server`] (and boxed there), so the
    /// future of an ordinary call carries none of it.
    pub(super) async fn further_rounds(
        &self,
        first: ServerResult,
        rest: FurtherRounds<'_>,
        classify: &(impl Fn(rmcp::ServiceError) -> CallError + Sync),
    ) -> Result<Further, CallError> {
        let FurtherRounds {
            entry,
            client,
            timeout,
            ref retry,
            task_augmented,
            hand_back,
            hand_back_augmented,
            ..
        } = rest;
        let mut response = first;
        // SEP-2322: a server may ask for input and answer a later round; each round is a new
        // request carrying the answers and the server's opaque state.
        let mut state_only_rounds = 0;
        let mut rounds = 0;
        let result = loop {
            match response {
                ServerResult::CallToolResult(r) => break r,
                ServerResult::InputRequiredResult(needed) if hand_back.input_required => {
                    return Ok(Further::HandedBack(CallReply::InputRequired(needed)));
                }
                ServerResult::CreateTaskResult(created) if hand_back.tasks => {
                    return Ok(Further::HandedBack(CallReply::Task(created)));
                }
                ServerResult::InputRequiredResult(needed) if rounds < MAX_ROUNDS => {
                    let Some(first) = retry else {
                        let version = client
                            .peer
                            .peer_info()
                            .map(|i| i.protocol_version.to_string())
                            .unwrap_or_default();
                        return Err(CallError::Protocol {
                            upstream: None,
                            server: entry.server.clone(),
                            tool: entry.raw_name.clone(),
                            message: format!(
                                "the server asked for more input (`input_required`, SEP-2322), \
                                 which the session's protocol version {version} does not have"
                            ),
                        });
                    };
                    rounds += 1;
                    let (answers, state) = next_round(
                        &entry.server,
                        rest.callbacks.as_ref(),
                        needed,
                        &mut state_only_rounds,
                    )
                    .await
                    .map_err(|message| CallError::Protocol {
                        upstream: None,
                        server: entry.server.clone(),
                        tool: entry.raw_name.clone(),
                        message,
                    })?;
                    let mut again = first.clone();
                    again.input_responses = answers;
                    again.request_state = state;
                    let request =
                        ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(again));
                    response = client
                        .peer
                        .send_request_with_option(
                            request,
                            PeerRequestOptions::with_timeout(timeout),
                        )
                        .await
                        .map_err(classify)?
                        .await_response()
                        .await
                        .map_err(classify)?;
                }
                ServerResult::CreateTaskResult(created) => {
                    let call = self.task_call(&rest);
                    break crate::call::tasks::follow(created, call).await?;
                }
                ServerResult::CustomResult(created) if hand_back_augmented => {
                    let created =
                        crate::call::task_augmented::created(&created.0).ok_or_else(|| {
                            CallError::Protocol {
                            upstream: None,
                            server: entry.server.clone(),
                            tool: entry.raw_name.clone(),
                            message:
                                "the server answered a task-augmented tools/call without a task id"
                                    .into(),
                        }
                        })?;
                    return Ok(Further::HandedBack(CallReply::Task(created)));
                }
                ServerResult::CustomResult(created) if task_augmented => {
                    let call = self.task_call(&rest);
                    break crate::call::task_augmented::follow(created.0, call).await?;
                }
                ServerResult::InputRequiredResult(_) => {
                    return Err(CallError::Protocol {
                        upstream: None,
                        server: entry.server.clone(),
                        tool: entry.raw_name.clone(),
                        message: format!("the server still needed input after {MAX_ROUNDS} rounds"),
                    });
                }
                other => {
                    return Err(crate::error::unexpected(
                        &entry.server,
                        &entry.raw_name,
                        &other,
                    ));
                }
            }
        };
        Ok(Further::Result(result))
    }

    /// What following a task of this call needs.
    pub(super) fn task_call<'a>(
        &'a self,
        rest: &'a FurtherRounds<'a>,
    ) -> crate::call::tasks::TaskCall<'a> {
        crate::call::tasks::TaskCall {
            server: &rest.entry.server,
            tool: &rest.entry.raw_name,
            peer: &rest.client.peer,
            timeout: rest.timeout,
            cancel: rest.cancel.clone(),
            status: rest.task_status.clone(),
            callbacks: rest.callbacks.as_ref(),
        }
    }
}

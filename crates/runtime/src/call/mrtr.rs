//! Multi-round tool calls (SEP-2322, `input_required`): a server may answer a request with the
//! input it needs (elicitation, sampling, roots) and an opaque state; the client fulfils the
//! input through the embedder's callbacks and sends a new request carrying the answers and the
//! state.
//!
//! Invariants: the state is echoed byte for byte and never inspected; each round is a new
//! request; rounds are bounded ([`MAX_ROUNDS`]) and state-only rounds back off; input is never
//! answered on the user's behalf — without callbacks the call fails with the reason.

// Sampling and roots are deprecated by SEP-2577 but MRTR still carries them.
#![allow(deprecated)]

use std::time::Duration;

use mcp_harness_transport::Callbacks;
use mcp_harness_transport::callbacks::apply_form_defaults;
use rmcp::model::{InputRequest, InputRequiredResult, InputResponses};

/// Most `input_required` rounds one call may take.
pub(crate) const MAX_ROUNDS: usize = 10;

/// The answers and state for the next round of a call that got `input_required`.
pub(crate) async fn next_round(
    server: &str,
    callbacks: Option<&Callbacks>,
    result: InputRequiredResult,
    state_only_rounds: &mut usize,
) -> Result<(Option<InputResponses>, Option<String>), String> {
    let requests = result.input_requests.unwrap_or_default();
    if requests.is_empty() && result.request_state.is_none() {
        return Err(
            "the server answered input_required with neither input requests nor state".into(),
        );
    }
    if requests.is_empty() {
        // State only: the server is not ready yet; back off a little (50 ms doubling to 250 ms).
        let millis = (50u64 << (*state_only_rounds).min(3)).min(250);
        tokio::time::sleep(Duration::from_millis(millis)).await;
        *state_only_rounds += 1;
        return Ok((None, result.request_state));
    }
    *state_only_rounds = 0;
    let Some(callbacks) = callbacks else {
        return Err(format!(
            "the server needs input ({}) and this embedder answers no such requests",
            requests.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    };
    let answers =
        futures::future::try_join_all(requests.into_iter().map(|(key, request)| async move {
            let value = match request {
                InputRequest::Elicitation(r) => {
                    let answer = callbacks
                        .elicit(server, r.params.clone())
                        .await
                        .map_err(|e| e.message.to_string())?;
                    serde_json::to_value(apply_form_defaults(&r.params, answer))
                }
                InputRequest::CreateMessage(r) => {
                    let answer = callbacks
                        .sample(server, r.params)
                        .await
                        .map_err(|e| e.message.to_string())?;
                    serde_json::to_value(answer)
                }
                InputRequest::ListRoots(_) => {
                    let answer = callbacks
                        .roots(server)
                        .await
                        .map_err(|e| e.message.to_string())?;
                    serde_json::to_value(answer)
                }
                _ => {
                    return Err(format!(
                        "input request `{key}` is of a kind this client does not know"
                    ));
                }
            };
            value.map(|v| (key, v)).map_err(|e| e.to_string())
        }))
        .await?;
    Ok((Some(answers.into_iter().collect()), result.request_state))
}

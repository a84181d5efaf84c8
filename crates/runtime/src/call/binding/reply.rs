//! What a call made with [`HandBack`] returns: a gateway passes an upstream's non-final
//! answers — a SEP-2663 / SEP-1686 task, a SEP-2322 `input_required` round — through to its
//! own client instead of following them itself.
//!
//! Invariant: a [`CallReply`] other than [`CallReply::Done`] is returned only for a kind the
//! caller asked for in [`CallOptions::hand_back`](super::CallOptions::hand_back), and it
//! carries the server's answer untouched (task ids, `requestState`, input requests): the
//! caller continues the exchange with the same server.

use rmcp::model::{CreateTaskResult, InputRequiredResult};

use super::ToolResult;

/// Which non-final answers of the server a call hands back to its caller instead of following
/// them (the default: none — the runtime follows every round to the tool's result).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandBack {
    /// Return the server's task (`CreateTaskResult`) instead of polling it to its end.
    pub tasks: bool,
    /// Return the server's `InputRequiredResult` instead of answering its input requests
    /// through the embedder's callbacks.
    pub input_required: bool,
}

/// The answer of a call made through [`PreparedCall::call_reply`](super::PreparedCall::call_reply).
#[derive(Debug, Clone)]
pub enum CallReply {
    /// The tool's result, exactly as [`PreparedCall::call_with`](super::PreparedCall::call_with)
    /// returns it.
    Done(ToolResult),
    /// The server runs the call as a task; the caller follows it with `tasks/*` requests to
    /// the same server.
    Task(CreateTaskResult),
    /// The server needs input first; the caller sends the same call again with the answers
    /// and the server's state.
    InputRequired(InputRequiredResult),
}

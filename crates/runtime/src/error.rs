//! One error type for what the runtime does on a user's behalf, classified as R32 asks
//! (transport, protocol, catalog, permission, tool, output), each class with its retry semantics.
//! Every message names the server and, where one helps, the config key to change.

use std::time::Duration;

/// The failure classes of R32, each with its retry semantics:
///
/// | class | meaning | retry |
/// |---|---|---|
/// | transport | the connection failed or is gone | later, after a reconnect (`retryable`) |
/// | protocol | the server answered with an error or broke the protocol | not as is |
/// | catalog | the tool is unknown or changed since the step (stale) | bind a new step (`needs_rebind`) |
/// | permission | policy or the user refused | never automatically |
/// | tool | the tool ran and failed, or its arguments were invalid | the model may change the arguments |
/// | output | the result could not be stored or paged | not as is |
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The connection failed or is gone. Retrying after a reconnect may help.
    Transport,
    /// The server broke the protocol or answered with a JSON-RPC error. Retrying the same
    /// request will not help.
    Protocol,
    /// The tool is not in the catalog revision the caller used. Rebuild from a fresh snapshot.
    Catalog,
    /// Policy refused the call. Never retried automatically.
    Permission,
    /// The tool ran and reported an error. The model may retry with other arguments.
    Tool,
    /// The result could not be delivered within the output rules.
    Output,
}

/// Why a tool call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(
        "no tool named `{name}` in catalog revision {revision}; `mcp-harness tools` lists the available ones"
    )]
    UnknownTool { name: String, revision: u64 },
    #[error(
        "server \"{server}\" is not connected (it is {state}); `mcp-harness servers` shows why"
    )]
    ServerUnavailable { server: String, state: String },
    #[error("server \"{server}\": `{tool}` did not answer within {}s (raise `toolTimeoutSec` of server \"{server}\")", .timeout.as_secs_f64())]
    Timeout {
        server: String,
        tool: String,
        timeout: Duration,
    },
    #[error("server \"{server}\": the connection failed during `{tool}`: {message}")]
    Transport {
        server: String,
        tool: String,
        message: String,
    },
    #[error("server \"{server}\": `{tool}` was rejected: {message}")]
    Protocol {
        server: String,
        tool: String,
        message: String,
    },
    /// The server's answer could not be used: over `maxMessageBytes`, undecodable, or — when the
    /// deadline passed — something else arrived instead (a response with an unknown id, an
    /// undecodable message). The message says what arrived.
    #[error("server \"{server}\": `{tool}` failed: {message}")]
    BadAnswer {
        server: String,
        tool: String,
        message: String,
    },
    #[error(
        "no skill named `{name}` on server \"{server}\" in catalog revision {revision}; `mcp-harness skills` lists them"
    )]
    UnknownSkill {
        server: String,
        name: String,
        revision: u64,
    },
    /// A skill's files do not match what the server listed (digest, size, frontmatter).
    #[error("{0}")]
    SkillRejected(#[from] mcp_harness_catalog::skills::SkillMismatch),
    /// The catalog changed between the step's binding and this call (R24). The call was not
    /// sent; bind a new step and let the model see the current schema.
    #[error(
        "`{name}` changed since this step was bound (revision {bound}, now {current}): the call was not sent; bind a new step"
    )]
    Stale {
        name: String,
        bound: u64,
        current: u64,
    },
    /// The tool exists but this step's binding does not show it to the model.
    #[error("`{name}` is not in this step's tools (revision {revision}){hint}")]
    NotInStep {
        name: String,
        revision: u64,
        hint: String,
    },
    /// The arguments do not satisfy the input schema the model saw (R27). Not sent.
    #[error("arguments of `{name}` do not match its input schema: {details}")]
    InvalidArguments { name: String, details: String },
    /// Policy refused the call, or approval was denied, cancelled or timed out (R26). Not sent.
    #[error("`{name}` was not run: {reason}")]
    Permission { name: String, reason: String },
    /// Required servers of a step failed to come up (R22); every failure is listed.
    #[error("required servers are not available: {}", .failures.iter().map(|(s, why)| format!("\"{s}\": {why}")).collect::<Vec<_>>().join("; "))]
    RequiredServers { failures: Vec<(String, String)> },
    /// A result could not be stored or read back under the output rules (R31).
    #[error("output: {0}")]
    Output(String),
    #[error("the runtime has shut down")]
    ShutDown,
}

impl CallError {
    /// The R32 class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            CallError::UnknownTool { .. }
            | CallError::UnknownSkill { .. }
            | CallError::SkillRejected(_)
            | CallError::Stale { .. }
            | CallError::NotInStep { .. } => ErrorClass::Catalog,
            CallError::InvalidArguments { .. } => ErrorClass::Tool,
            CallError::Permission { .. } => ErrorClass::Permission,
            CallError::RequiredServers { .. } => ErrorClass::Transport,
            CallError::Output(_) => ErrorClass::Output,
            CallError::ServerUnavailable { .. }
            | CallError::Timeout { .. }
            | CallError::Transport { .. }
            | CallError::ShutDown => ErrorClass::Transport,
            CallError::Protocol { .. } | CallError::BadAnswer { .. } => ErrorClass::Protocol,
        }
    }

    /// Whether the same call may succeed if simply tried again later (without changing it or
    /// rebinding). A timed-out call may have had its side effect, so it is not retryable; a
    /// stale call must be rebuilt from a new step, not retried; permission and argument
    /// errors need a change first.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            CallError::ServerUnavailable { .. }
                | CallError::Transport { .. }
                | CallError::RequiredServers { .. }
        )
    }

    /// Whether the caller should bind a new step (the catalog moved on) before trying again.
    pub fn needs_rebind(&self) -> bool {
        matches!(
            self,
            CallError::Stale { .. } | CallError::UnknownTool { .. } | CallError::NotInStep { .. }
        )
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("could not start the actor system: {0}")]
    System(String),
}

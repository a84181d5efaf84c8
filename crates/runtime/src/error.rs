//! One error type for what the runtime does on a user's behalf, classified as R32 asks
//! (transport, protocol, catalog, permission, tool, output), each class with its retry semantics.
//! Every message names the server and, where one helps, the config key to change.

use std::time::Duration;

/// The failure classes of R32.
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
    #[error("the runtime has shut down")]
    ShutDown,
}

impl CallError {
    /// The R32 class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            CallError::UnknownTool { .. }
            | CallError::UnknownSkill { .. }
            | CallError::SkillRejected(_) => ErrorClass::Catalog,
            CallError::ServerUnavailable { .. }
            | CallError::Timeout { .. }
            | CallError::Transport { .. }
            | CallError::ShutDown => ErrorClass::Transport,
            CallError::Protocol { .. } => ErrorClass::Protocol,
        }
    }

    /// Whether the same call may succeed if simply tried again later. A timed-out call may have
    /// had its side effect, so it is not considered retryable.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            CallError::ServerUnavailable { .. } | CallError::Transport { .. }
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

//! One error type for what the runtime does on a user's behalf, classified as R32 asks
//! (transport, protocol, catalog, permission, tool, output), each class with its retry semantics.
//! Every message names the server and, where one helps, the config key to change.

use std::time::Duration;

use mcp_harness_transport::WireFault;
use rmcp::model::ServerResult;
use rmcp::service::ServiceError;

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
    /// No tool of that name in the snapshot used.
    UnknownTool {
        /// The qualified name asked for.
        name: String,
        /// The catalog revision looked in.
        revision: u64,
    },
    #[error(
        "server \"{server}\" is not connected (it is {state}); `mcp-harness servers` shows why"
    )]
    /// The server has no live connection.
    ServerUnavailable {
        /// The server.
        server: String,
        /// Its state (`failed: …`, `needs-auth`, `not configured` …).
        state: String,
    },
    #[error("server \"{server}\": `{tool}` did not answer within {}s (raise `toolTimeoutSec` of server \"{server}\"; a call sending progress gets it again after each, up to 10 times it in all)", .timeout.as_secs_f64())]
    /// No answer within the call's timeout.
    Timeout {
        /// The server.
        server: String,
        /// The tool (or, for resources and prompts, what was asked for).
        tool: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    #[error("server \"{server}\": the connection failed during `{tool}`: {message}")]
    /// The connection failed during the call.
    Transport {
        /// The server.
        server: String,
        /// The tool (or, for resources and prompts, what was asked for).
        tool: String,
        /// What happened.
        message: String,
    },
    #[error("server \"{server}\": `{tool}` was rejected: {message}")]
    /// The server answered with an error or broke the protocol.
    Protocol {
        /// The server's own JSON-RPC error, when it answered with one (a gateway passes it on
        /// as is: code, message and data).
        upstream: Option<Box<rmcp::ErrorData>>,
        /// The server.
        server: String,
        /// The tool (or, for resources and prompts, what was asked for).
        tool: String,
        /// What happened.
        message: String,
    },
    /// The server's answer could not be used: over `maxMessageBytes`, undecodable, or — when the
    /// deadline passed — something else arrived instead (a response with an unknown id, an
    /// undecodable message). The message says what arrived.
    #[error("server \"{server}\": `{tool}` failed: {message}")]
    BadAnswer {
        /// The server.
        server: String,
        /// The tool (or, for resources and prompts, what was asked for).
        tool: String,
        /// What happened.
        message: String,
    },
    #[error(
        "no skill named `{name}` on server \"{server}\" in catalog revision {revision}; `mcp-harness skills` lists them"
    )]
    /// No skill of that name on that server.
    UnknownSkill {
        /// The server.
        server: String,
        /// The skill asked for.
        name: String,
        /// The catalog revision looked in.
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
        /// The qualified tool name.
        name: String,
        /// The revision the step was bound to.
        bound: u64,
        /// The revision current at the call.
        current: u64,
    },
    /// The tool exists but this step's binding does not show it to the model.
    #[error("`{name}` is not in this step's tools (revision {revision}){hint}")]
    NotInStep {
        /// The name asked for.
        name: String,
        /// The step's revision.
        revision: u64,
        /// How to reach it (search first; why it is hidden), or empty.
        hint: String,
    },
    /// The arguments do not satisfy the input schema the model saw (R27). Not sent.
    #[error("arguments of `{name}` do not match its input schema: {details}")]
    InvalidArguments {
        /// The qualified tool name.
        name: String,
        /// Every violation found.
        details: String,
    },
    /// Policy refused the call, or approval was denied, cancelled or timed out (R26). Not sent.
    #[error("`{name}` was not run: {reason}")]
    Permission {
        /// The qualified tool name.
        name: String,
        /// Why, with the rule or setting that would allow it.
        reason: String,
    },
    /// Required servers of a step failed to come up (R22); every failure is listed.
    #[error("required servers are not available: {}", .failures.iter().map(|(s, why)| format!("\"{s}\": {why}")).collect::<Vec<_>>().join("; "))]
    RequiredServers {
        /// Each failed server with its state and error.
        failures: Vec<(String, String)>,
    },
    /// A result could not be stored or read back under the output rules (R31).
    #[error("output: {0}")]
    Output(String),
    /// The runtime was shut down.
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
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A server could not be built or a thread could not start.
    #[error("could not start the actor system: {0}")]
    System(String),
}

/// A server's words on one line: a line break (or any control character) is shown escaped, so
/// a message cannot add lines of its own to what the harness prints (`error: …` or `warning:
/// …` lines that are not the harness's).
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A short, user-facing description of an rmcp service error.
pub(crate) fn describe(e: ServiceError) -> String {
    match e {
        // Made by the harness from what the server sent (too large, undecodable): says so.
        ServiceError::McpError(data) if WireFault::is_wire_fault(&data) => {
            data.message.into_owned()
        }
        ServiceError::McpError(data) => format!(
            "the server answered with error {}: {}",
            data.code.0,
            // Redacted first: a secret spanning lines is found before its breaks are escaped.
            one_line(&mcp_harness_transport::redact::text(
                &mcp_harness_transport::net::bounded_text(data.message.into_owned())
            ))
        ),
        ServiceError::TransportClosed => "the connection is closed".to_string(),
        ServiceError::TransportSend(error) => {
            match mcp_harness_transport::net::http_failure_in(&error) {
                Some(failure) => format!("{failure}; {}", failure.hint()),
                None => mcp_harness_transport::net::describe(&error),
            }
        }
        other => mcp_harness_transport::net::describe(&other),
    }
}

/// Whether `e` says the server no longer accepts this client's authorization: a 401 challenge,
/// or an OAuth failure of the token source (a rejected refresh, a revoked grant). A refusal
/// for lack of scope is not this (step-up handles it).
pub(crate) fn authorization_lost(e: &ServiceError) -> bool {
    mcp_harness_transport::auth::authorization_lost(e)
}

pub(crate) fn classify(e: ServiceError, server: &str, tool: &str, timeout: Duration) -> CallError {
    let (server, tool) = (server.to_string(), tool.to_string());
    // Refused for lack of scope with no (further) step-up (R33): the server did not run it, and
    // sending it again as is cannot help; the reason names the server and what to do.
    if let Some(refused) = mcp_harness_transport::auth::refusal_in(&e) {
        return CallError::Permission {
            name: tool,
            reason: refused.to_string(),
        };
    }
    match e {
        // What the harness made of the server's answer (too large, undecodable): it says so.
        ServiceError::McpError(data) if WireFault::is_wire_fault(&data) => CallError::BadAnswer {
            server,
            tool,
            message: data.message.into_owned(),
        },
        // The limit that passed: `toolTimeoutSec`, or the total that progress stretched it to.
        ServiceError::Timeout { timeout: passed } => CallError::Timeout {
            server,
            tool,
            timeout: passed.max(timeout),
        },
        ServiceError::McpError(_) | ServiceError::UnexpectedResponse => CallError::Protocol {
            upstream: match &e {
                ServiceError::McpError(data) => Some(Box::new(data.clone())),
                _ => None,
            },
            server,
            tool,
            message: describe(e),
        },
        other => CallError::Transport {
            server,
            tool,
            message: describe(other),
        },
    }
}

/// A deadline that passed after the server sent something unusable (`arrived`, from
/// [`mcp_harness_transport::WireNotes::anomalies_since`]) says what arrived, not "timed out".
pub(crate) fn explain_timeout(e: CallError, arrived: impl FnOnce() -> Option<String>) -> CallError {
    match e {
        CallError::Timeout {
            server,
            tool,
            timeout,
        } => match arrived() {
            Some(arrived) => CallError::BadAnswer {
                server,
                tool,
                message: format!(
                    "no usable answer within {}s; the server sent {arrived}",
                    timeout.as_secs_f64()
                ),
            },
            None => CallError::Timeout {
                server,
                tool,
                timeout,
            },
        },
        other => other,
    }
}

pub(crate) fn unexpected(server: &str, what: &str, got: &ServerResult) -> CallError {
    let kind = serde_json::to_value(got)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        })
        .unwrap_or_default();
    CallError::Protocol {
        upstream: None,
        server: server.to_string(),
        tool: what.to_string(),
        message: format!("the server answered with an unexpected result (fields: {kind})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret spanning lines (a PEM key) is redacted before the breaks are escaped.
    #[test]
    fn a_multi_line_secret_is_redacted_before_it_is_escaped() {
        let pem = "-----BEGIN KEY-----\nAAAASECRETLINEONE\nBBBBSECRETLINETWO\n-----END KEY-----";
        mcp_harness_transport::redact::register([pem]);
        let data = rmcp::model::ErrorData::internal_error(format!("bad key {pem}"), None);
        let said = describe(ServiceError::McpError(data));
        assert!(!said.contains("SECRETLINE"), "{said}");
    }

    /// A server's error message cannot add lines to what the CLI prints.
    #[test]
    fn a_servers_error_message_stays_on_one_line() {
        let data = rmcp::model::ErrorData::internal_error("boom\nerror: FAKE line\r\x1b[2K", None);
        let said = describe(ServiceError::McpError(data));
        assert_eq!(
            said,
            "the server answered with error -32603: boom\\u{000A}error: FAKE line\\u{000D}\\u{001B}[2K"
        );
    }
}

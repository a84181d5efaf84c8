//! Transport failures, each classified as the transport class of R32 and each knowing whether a
//! retry may help. Messages name what failed; the server name is added by the caller.

use std::time::Duration;

/// Why a connection could not be opened or initialised, or why it ended.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The server process could not be started (missing binary, bad cwd, permissions).
    #[error("could not start `{command}`: {source}{}", tail_suffix(.stderr_tail))]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
        stderr_tail: Option<String>,
    },
    /// initialize did not complete within the startup deadline.
    #[error("no answer to initialize within {}s (raise `startupTimeoutSec`){}", .timeout.as_secs_f64(), tail_suffix(.stderr_tail))]
    StartupTimeout {
        timeout: Duration,
        stderr_tail: Option<String>,
    },
    /// The transport opened but the initialize handshake failed.
    #[error("initialize failed: {message}{}", tail_suffix(.stderr_tail))]
    Initialize {
        message: String,
        /// The server answered 401/403 or demanded authorization.
        auth_required: bool,
        stderr_tail: Option<String>,
    },
    /// The connection parameters are unusable (bad URL, bad header).
    #[error("invalid connection parameters: {0}")]
    InvalidConfig(String),
    /// The session closed after it was established.
    #[error("connection closed: {reason}{}", tail_suffix(.stderr_tail))]
    Closed {
        reason: String,
        stderr_tail: Option<String>,
    },
}

impl TransportError {
    /// Whether trying the same connection again may succeed without the user changing anything.
    pub fn retryable(&self) -> bool {
        match self {
            TransportError::Spawn { .. } | TransportError::InvalidConfig(_) => false,
            TransportError::Initialize { auth_required, .. } => !auth_required,
            TransportError::StartupTimeout { .. } | TransportError::Closed { .. } => true,
        }
    }

    /// Whether the server asked for authorization (the server should go to needs-auth).
    pub fn needs_auth(&self) -> bool {
        matches!(
            self,
            TransportError::Initialize {
                auth_required: true,
                ..
            }
        )
    }

    /// The stdio server's stderr tail captured with this error, if any.
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            TransportError::Spawn { stderr_tail, .. }
            | TransportError::StartupTimeout { stderr_tail, .. }
            | TransportError::Initialize { stderr_tail, .. }
            | TransportError::Closed { stderr_tail, .. } => stderr_tail.as_deref(),
            TransportError::InvalidConfig(_) => None,
        }
    }
}

fn tail_suffix(tail: &Option<String>) -> String {
    match tail.as_deref().map(str::trim_end) {
        Some(t) if !t.is_empty() => format!("\n--- server stderr (tail) ---\n{t}"),
        _ => String::new(),
    }
}

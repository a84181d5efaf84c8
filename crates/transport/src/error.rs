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
    /// The server could not be reached: nothing listens there, the connection was reset, the
    /// host did not resolve. `url` is shown without its query (it may hold a key); it is empty
    /// until the transport that knows it fills it in ([`TransportError::at_url`]).
    #[error("cannot reach {}: {failure}; {}", if .url.is_empty() { "the server" } else { .url.as_str() }, .failure.hint())]
    Unreachable {
        url: String,
        failure: crate::net::NetFailure,
    },
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
            TransportError::StartupTimeout { .. }
            | TransportError::Closed { .. }
            | TransportError::Unreachable { .. } => true,
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
            TransportError::InvalidConfig(_) | TransportError::Unreachable { .. } => None,
        }
    }

    /// Whether nothing listened at the server's address (connection refused).
    pub fn refused(&self) -> bool {
        matches!(
            self,
            TransportError::Unreachable {
                failure: crate::net::NetFailure::Refused,
                ..
            }
        )
    }

    /// This error with the server's `url` (as shown: no query) where it names none yet; a
    /// failed handshake then says where it was sent.
    pub fn at_url(self, url: &str) -> Self {
        match self {
            TransportError::Unreachable { url: u, failure } if u.is_empty() => {
                TransportError::Unreachable {
                    url: url.to_string(),
                    failure,
                }
            }
            TransportError::Initialize {
                message,
                auth_required,
                stderr_tail,
            } if !message.contains(url) => TransportError::Initialize {
                message: format!("{message} (at {url})"),
                auth_required,
                stderr_tail,
            },
            other => other,
        }
    }
}

fn tail_suffix(tail: &Option<String>) -> String {
    match tail.as_deref().map(str::trim_end) {
        Some(t) if !t.is_empty() => format!("\n--- server stderr (tail) ---\n{t}"),
        _ => String::new(),
    }
}

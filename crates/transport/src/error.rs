//! Transport failures, each classified as the transport class of R32 and each knowing whether a
//! retry may help. Messages name what failed; the server name is added by the caller.

use std::time::Duration;

/// Why a connection could not be opened or initialised, or why it ended.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The server process could not be started (missing binary, bad cwd, permissions).
    #[error("could not start `{command}`: {source}{}", tail_suffix(.stderr_tail))]
    Spawn {
        /// The program that was run.
        command: String,
        #[source]
        /// The underlying error.
        source: std::io::Error,
        /// The stdio server's stderr tail, when there is one.
        stderr_tail: Option<String>,
    },
    /// initialize did not complete within the startup deadline.
    #[error("no answer to initialize within {}s (raise `startupTimeoutSec`){}", .timeout.as_secs_f64(), tail_suffix(.stderr_tail))]
    StartupTimeout {
        /// The deadline that passed.
        timeout: Duration,
        /// The stdio server's stderr tail, when there is one.
        stderr_tail: Option<String>,
    },
    /// The transport opened but the initialize handshake failed.
    #[error("initialize failed: {message}{}", tail_suffix(.stderr_tail))]
    Initialize {
        /// What failed, in words (never a secret).
        message: String,
        /// The server answered 401/403 or demanded authorization.
        auth_required: bool,
        /// The stdio server's stderr tail, when there is one.
        stderr_tail: Option<String>,
    },
    /// The server, or its authorization server, answered the handshake with HTTP 5xx or 429: it
    /// is unavailable for now. Retried as it is, never taken for a refusal of the handshake.
    #[error("initialize failed: {message}")]
    Unavailable {
        /// The HTTP status (500–599 or 429).
        status: u16,
        /// What failed, in words (never a secret).
        message: String,
    },
    /// The connection parameters are unusable (bad URL, bad header).
    #[error("invalid connection parameters: {0}")]
    InvalidConfig(String),
    /// The server could not be reached: nothing listens there, the connection was reset, the
    /// host did not resolve. `url` is shown without its query (it may hold a key); it is empty
    /// until the transport that knows it fills it in ([`TransportError::at_url`]).
    #[error("cannot reach {}: {failure}; {}", if .url.is_empty() { "the server" } else { .url.as_str() }, .failure.hint())]
    Unreachable {
        /// The server's URL.
        url: String,
        /// What went wrong with the connection.
        failure: crate::net::NetFailure,
    },
    /// The session closed after it was established.
    #[error("connection closed: {reason}{}", tail_suffix(.stderr_tail))]
    Closed {
        /// Why it failed.
        reason: String,
        /// The stdio server's stderr tail, when there is one.
        stderr_tail: Option<String>,
    },
}

/// What kind of failure a [`TransportError`] is, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server process could not be started.
    Spawn,
    /// initialize did not complete within the startup deadline.
    StartupTimeout,
    /// The server, or its authorization server, asked for authorization (needs-auth).
    AuthRequired,
    /// The server answered HTTP 5xx or 429: unavailable for now.
    Unavailable,
    /// The handshake failed otherwise: the server refused or garbled it.
    Handshake,
    /// The connection parameters are unusable.
    InvalidConfig,
    /// Nothing could be reached at the server's address.
    Unreachable,
    /// An established session closed.
    Closed,
}

/// Whether an HTTP status says the server is unavailable for now (5xx, or 429 Too Many
/// Requests) rather than that it refused the request.
pub(crate) fn unavailable_status(status: u16) -> bool {
    (500..=599).contains(&status) || status == 429
}

impl TransportError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TransportError::Spawn { .. } => ErrorKind::Spawn,
            TransportError::StartupTimeout { .. } => ErrorKind::StartupTimeout,
            TransportError::Initialize {
                auth_required: true,
                ..
            } => ErrorKind::AuthRequired,
            TransportError::Initialize { .. } => ErrorKind::Handshake,
            TransportError::Unavailable { .. } => ErrorKind::Unavailable,
            TransportError::InvalidConfig(_) => ErrorKind::InvalidConfig,
            TransportError::Unreachable { .. } => ErrorKind::Unreachable,
            TransportError::Closed { .. } => ErrorKind::Closed,
        }
    }

    /// The HTTP status the server answered, where the failure is one.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            TransportError::Unavailable { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the server is unavailable for now (it answered HTTP 5xx or 429) rather than that
    /// it refused the handshake: such a server is retried as it is.
    pub fn unavailable(&self) -> bool {
        self.kind() == ErrorKind::Unavailable
    }

    /// Whether trying the same connection again may succeed without the user changing anything.
    pub fn retryable(&self) -> bool {
        match self {
            TransportError::Spawn { .. } | TransportError::InvalidConfig(_) => false,
            TransportError::Initialize { auth_required, .. } => !auth_required,
            TransportError::StartupTimeout { .. }
            | TransportError::Unavailable { .. }
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
            TransportError::InvalidConfig(_)
            | TransportError::Unavailable { .. }
            | TransportError::Unreachable { .. } => None,
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

    /// Whether retrying the same address soon cannot help: nothing listens there (connection
    /// refused), the host name does not resolve, the TLS handshake fails (http vs https), or no
    /// MCP endpoint is at that path (HTTP 404/410). A first connect that fails so fails at once
    /// instead of spending the startup budget on fast retries.
    pub fn fails_fast(&self) -> bool {
        use crate::net::NetFailure as F;
        matches!(
            self,
            TransportError::Unreachable {
                failure: F::Refused | F::Dns | F::Tls | F::NotFound,
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
            TransportError::Unavailable { status, message } if !message.contains(url) => {
                TransportError::Unavailable {
                    status,
                    message: format!("{message} (at {url})"),
                }
            }
            other => other,
        }
    }
}

/// What separates an error's message from the stdio server's stderr tail it carries (the
/// CLI finds the tail after it).
pub const STDERR_TAIL_MARK: &str = "\n--- server stderr (tail) ---\n";

fn tail_suffix(tail: &Option<String>) -> String {
    match tail.as_deref().map(str::trim_end) {
        Some(t) if !t.is_empty() => format!("{STDERR_TAIL_MARK}{t}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_a_retry_cannot_fix_fail_fast() {
        use crate::net::NetFailure as F;
        let at = |failure| TransportError::Unreachable {
            url: "http://127.0.0.1:9/mcp".into(),
            failure,
        };
        for failure in [F::Refused, F::Dns, F::Tls, F::NotFound] {
            assert!(at(failure).fails_fast(), "{failure:?}");
            assert!(
                at(failure).retryable(),
                "probed in the background: {failure:?}"
            );
        }
        for failure in [F::Reset, F::TimedOut] {
            assert!(!at(failure).fails_fast(), "{failure:?}");
        }
        let shown = at(F::NotFound).to_string();
        assert!(
            shown.contains("404") && shown.contains("check the path in `url`"),
            "{shown}"
        );
    }

    #[test]
    fn only_5xx_and_429_are_unavailable() {
        assert!(unavailable_status(500) && unavailable_status(503) && unavailable_status(599));
        assert!(unavailable_status(429));
        assert!(!unavailable_status(404) && !unavailable_status(400) && !unavailable_status(600));
        let e = TransportError::Unavailable {
            status: 503,
            message: "HTTP 503".into(),
        };
        assert!(e.unavailable() && e.retryable() && !e.needs_auth());
        assert_eq!(e.http_status(), Some(503));
        assert_eq!(e.to_string(), "initialize failed: HTTP 503");
        assert_eq!(
            e.at_url("http://h/mcp").to_string(),
            "initialize failed: HTTP 503 (at http://h/mcp)"
        );
        let refused = TransportError::Initialize {
            message: "HTTP 503 in a message is not a status".into(),
            auth_required: false,
            stderr_tail: None,
        };
        assert_eq!(refused.kind(), ErrorKind::Handshake);
        assert!(!refused.unavailable());
    }
}

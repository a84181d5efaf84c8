//! The errors the harness makes up for a request because of what the server sent (too large,
//! undecodable, answered with another id), and the limits and keys they name.
//!
//! Invariant: such an error carries [`WIRE_FAULT_CODE`] and a marker in its `data`, so
//! [`WireFault::is_wire_fault`] tells it from any error a server sent; its message names the
//! server and, for a size, the config key that raises the cap.

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::json;

/// The default cap on one message from a server (64 MiB); `maxMessageBytes` changes it.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The config key that sets the cap.
pub(crate) const MAX_MESSAGE_KEY: &str = "maxMessageBytes";
/// The `_meta` key of a placeholder that stands for a listed entry that could not be decoded;
/// its value is the reason. The catalog hides such entries (`catalog::sanitize`, same key).
pub const UNDECODABLE_META_KEY: &str = "io.mcp-harness/undecodable";
/// The JSON-RPC error code of an error the harness made up for a request because of what the
/// server sent (in the implementation-defined server error range).
pub(crate) const WIRE_FAULT_CODE: i32 = -32090;
/// The key in such an error's `data` that says it came from the harness, not the server.
const WIRE_FAULT_DATA_KEY: &str = "mcpHarnessWireFault";

/// What went wrong with a message the server sent for a request, as the request's error says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireFault {
    /// The message was larger than the cap (`seen` bytes, or at least that many when it was
    /// cut off before its end).
    TooLarge {
        /// The server's name.
        server: String,
        /// Bytes seen (at least, when cut off).
        seen: usize,
        /// Whether the whole message was seen.
        complete: bool,
        /// The cap, in bytes.
        limit: usize,
    },
    /// The message could not be decoded.
    Undecodable {
        /// The server's name.
        server: String,
        /// Why it failed.
        reason: String,
    },
    /// On a channel that carries the answer to one request (a Streamable HTTP POST), the
    /// answer came with another id.
    WrongId {
        /// The server's name.
        server: String,
        /// The id of the request the channel answers.
        expected: String,
        /// The id the answer carried.
        got: String,
    },
}

impl std::fmt::Display for WireFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireFault::TooLarge {
                server,
                seen,
                complete,
                limit,
            } => write!(
                f,
                "server \"{server}\" sent a message of {}{seen} bytes, over the limit of {limit} bytes (raise `{MAX_MESSAGE_KEY}` of server \"{server}\")",
                if *complete { "" } else { "more than " },
            ),
            WireFault::Undecodable { server, reason } => write!(
                f,
                "server \"{server}\" answered with a message that cannot be decoded: {reason}"
            ),
            WireFault::WrongId {
                server,
                expected,
                got,
            } => write!(
                f,
                "server \"{server}\" answered request {expected} with id {got}, which matches no request"
            ),
        }
    }
}

impl WireFault {
    /// The JSON-RPC error that fails the request, recognisable by [`WireFault::is_wire_fault`].
    pub fn to_error(&self) -> ErrorData {
        let data = match self {
            WireFault::TooLarge {
                seen,
                complete,
                limit,
                ..
            } => {
                json!({"kind": "tooLarge", "bytes": seen, "complete": complete, "limit": limit, "configKey": MAX_MESSAGE_KEY})
            }
            WireFault::Undecodable { .. } => json!({"kind": "undecodable"}),
            WireFault::WrongId { .. } => json!({"kind": "wrongId"}),
        };
        ErrorData::new(
            ErrorCode(WIRE_FAULT_CODE),
            self.to_string(),
            Some(json!({ WIRE_FAULT_DATA_KEY: data })),
        )
    }

    /// Whether `error` was made by the harness from a [`WireFault`] (its message says what).
    pub fn is_wire_fault(error: &ErrorData) -> bool {
        error.code.0 == WIRE_FAULT_CODE
            && error
                .data
                .as_ref()
                .is_some_and(|d| d.get(WIRE_FAULT_DATA_KEY).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_fault_message_names_size_limit_and_key() {
        let f = WireFault::TooLarge {
            server: "big".into(),
            seen: 17_000_000,
            complete: true,
            limit: 1 << 20,
        };
        let e = f.to_error();
        assert!(WireFault::is_wire_fault(&e));
        assert_eq!(
            e.message,
            "server \"big\" sent a message of 17000000 bytes, over the limit of 1048576 bytes (raise `maxMessageBytes` of server \"big\")"
        );
        assert!(!WireFault::is_wire_fault(&ErrorData::internal_error(
            "x", None
        )));
    }
}

//! The CLI's exit statuses: one enum, the one place a status number is chosen.
//!
//! Invariant: the numbers are stable and documented (`--help` shows [`TABLE`], README's CLI
//! section the same list); a command returns an [`Exit`], never a bare number.

use mcp_harness_runtime::{CallError, ErrorClass};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: done.
    Ok = 0,
    /// 1: the tool or request failed: the tool reported an error (`isError`), its result is
    /// faulty (does not match its `outputSchema`, an image is not base64, ...; the result is
    /// printed with warnings), or the server answered with an error.
    Failed = 1,
    /// 2: usage or config: bad arguments, an unknown server name, a config that does not parse;
    /// arguments refused before sending — tool arguments that do not match the tool's input
    /// schema, a prompt's required argument missing, `@FILE` unreadable — and a request the
    /// server did not declare (`read` without the `resources` capability, `subscribe` without
    /// `resources.subscribe`). Nothing was sent.
    Usage = 2,
    /// 3: a server failed: it is not connected, timed out or dropped the connection; for the
    /// listings (`servers`, `tools`, `prompts`, `resources`, `skills`), a server failed or needs
    /// authorization, so the listing is incomplete.
    Server = 3,
    /// 4: refused by policy: a deny rule, no approval, a missing scope. Nothing was sent.
    Refused = 4,
    /// 5: the name is not in the catalog (unknown, hidden from the model, changed while
    /// calling), or a skill does not match its listing.
    Catalog = 5,
    /// 130: interrupted (Ctrl-C, SIGTERM, SIGHUP); every server was closed.
    Interrupted = 130,
}

/// The exit statuses as `--help` shows them.
pub(crate) const TABLE: &str = "Exit status: 0 ok; 1 the tool or request failed (a tool error, \
a faulty result, an error answer); 2 usage or config error (including arguments refused before \
sending: not matching the input schema, a required prompt argument missing; and a request the \
server did not declare, like `read` from a server without resources); 3 a server failed (not connected, timed out; for servers, tools, \
prompts, resources, skills: a server failed or needs authorization); 4 refused by policy; 5 \
not in the catalog (unknown or hidden name, changed while calling); 130 interrupted.";

impl Exit {
    /// The status for a request that did not produce a result.
    pub(crate) fn of(error: &CallError) -> Self {
        match error {
            CallError::InvalidArguments { .. } => Exit::Usage,
            other => match other.class() {
                ErrorClass::Permission => Exit::Refused,
                ErrorClass::Catalog => Exit::Catalog,
                ErrorClass::Transport => Exit::Server,
                ErrorClass::Protocol | ErrorClass::Tool | ErrorClass::Output => Exit::Failed,
            },
        }
    }

    /// The process exit status.
    pub(crate) fn code(self) -> u8 {
        self as u8
    }
}

/// Prints a command's text on stdout (exit 0), or its error on stderr as a usage/config
/// failure (exit 2).
pub(crate) fn printed(result: Result<String, String>) -> u8 {
    match result {
        Ok(text) => {
            emit!("{text}");
            Exit::Ok.code()
        }
        Err(e) => {
            say!("error: {e}");
            Exit::Usage.code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_map_to_their_documented_status() {
        let unknown = CallError::UnknownTool {
            name: "x".into(),
            revision: 1,
        };
        assert_eq!(Exit::of(&unknown).code(), 5);
        let refused = CallError::Permission {
            name: "x".into(),
            reason: "no".into(),
        };
        assert_eq!(Exit::of(&refused).code(), 4);
        let args = CallError::InvalidArguments {
            name: "x".into(),
            details: "y".into(),
        };
        assert_eq!(Exit::of(&args).code(), 2);
        assert_eq!(Exit::of(&CallError::ShutDown).code(), 3);
        assert_eq!(Exit::Interrupted.code(), 130);
    }
}

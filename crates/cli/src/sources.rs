//! The config sources of this process: one [`Sources`] for every command, so that remote
//! sources fetched once are part of every later merge (hot reloads included), with VS Code
//! inputs asked on the terminal at most once; and what the first merge left out, so a command
//! naming such a server says why it is not there.

use std::sync::Arc;

use mcp_harness_runtime::sources::{self, Sources};

/// The sources of this process (one instance, so that remote sources fetched once are part of
/// every later merge, hot reloads included).
pub(crate) fn shared() -> &'static Sources {
    static SOURCES: std::sync::OnceLock<Sources> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| Sources::new().with_input_prompt(input_prompt()))
}

/// VS Code inputs the environment lacks are asked on the terminal (once per process).
pub(crate) fn input_prompt() -> sources::InputPrompt {
    static PROMPT: std::sync::OnceLock<sources::InputPrompt> = std::sync::OnceLock::new();
    PROMPT
        .get_or_init(|| sources::remembering(Arc::new(crate::terminal::ask_input)))
        .clone()
}

/// The servers the first merge left out, with why (a duplicate, a policy, one of the same name
/// taking precedence).
static DROPPED: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Keeps what the merge left out (the first merge of the process).
pub(crate) fn remember_dropped(dropped: Vec<(String, String)>) {
    let _ = DROPPED.set(dropped);
}

/// Why server `name` was left out of the configuration, if it was.
pub(crate) fn dropped(name: &str) -> Option<&'static str> {
    DROPPED
        .get()?
        .iter()
        .find(|(server, _)| server == name)
        .map(|(_, reason)| reason.as_str())
}

/// What a command says of server `name` when the merge left it out ("server … is not loaded:
/// why").
pub(crate) fn not_loaded(name: &str) -> Option<String> {
    dropped(name).map(|why| format!("server `{name}` is not loaded: {why}"))
}

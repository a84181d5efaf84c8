//! What `test_trigger_tool_change` and `test_trigger_prompt_change` change: each trigger bumps a
//! counter that one listed entry's description carries, so the listing after the
//! `list_changed` notification really differs from the one before (a gateway in front, which
//! tells its clients only about changes they can see, then has a change to tell).
//!
//! Invariant: the counters only grow and are shared by every clone of the server (every
//! session of one process sees the same lists).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// The tool whose description counts the tool-list changes.
pub(super) const TOOL: &str = "test_tool_list_changes";
/// The prompt whose description counts the prompt-list changes.
pub(super) const PROMPT: &str = "test_prompt_list_changes";

/// The change counters of one server process.
#[derive(Clone, Default)]
pub(super) struct Changes {
    tools: Arc<AtomicU64>,
    prompts: Arc<AtomicU64>,
}

impl Changes {
    /// Records a change of the tool list.
    pub(super) fn bump_tools(&self) {
        self.tools.fetch_add(1, Ordering::SeqCst);
    }

    /// Records a change of the prompt list.
    pub(super) fn bump_prompts(&self) {
        self.prompts.fetch_add(1, Ordering::SeqCst);
    }

    /// What [`TOOL`] answers and its description says.
    pub(super) fn tools_text(&self) -> String {
        format!(
            "the tool list changed {} time(s)",
            self.tools.load(Ordering::SeqCst)
        )
    }

    /// What [`PROMPT`] answers and its description says.
    pub(super) fn prompts_text(&self) -> String {
        format!(
            "the prompt list changed {} time(s)",
            self.prompts.load(Ordering::SeqCst)
        )
    }

    /// The server's tools as listed now: the fixed ones and [`TOOL`].
    pub(super) fn tools(&self) -> Value {
        let mut all = super::catalog::tools();
        if let Value::Array(list) = &mut all {
            list.push(self.tool());
        }
        all
    }

    /// [`TOOL`] as listed now.
    fn tool(&self) -> Value {
        json!({
            "name": TOOL,
            "description": self.tools_text(),
            "inputSchema": { "type": "object", "properties": {} }
        })
    }

    /// [`PROMPT`] as listed now.
    pub(super) fn prompt(&self) -> Value {
        json!({ "name": PROMPT, "description": self.prompts_text() })
    }
}

//! Permission (R26, R13): whether a tool call may run, must be asked about, or is refused.
//!
//! Invariant: **no rule can match by raw name; a server's hints never grant.** Rules match the
//! fully qualified model-visible name (`mcp__<server>__<tool>`) and the call's arguments only, so
//! a server tool named `Write` is `mcp__srv__Write` and can never match a rule written for a
//! built-in `Write`. Without a matching rule the answer is [`Decision::Ask`]; a tool's annotations
//! (`readOnlyHint`, `destructiveHint`, ...) only shape the reason — the single exception,
//! `trustReadOnlyHint`, is off by default and documented as a risk.
//!
//! Among the rules that match, deny beats ask beats allow (the most restrictive wins, whatever
//! the order in the config); the reason names the rule by its text.
//!
//! Argument predicates are lexical. Where a string argument holds `.` or `..` path segments, a
//! `glob` or `prefix` is tested on the string as given and on its lexically normalised form: an
//! allow rule needs both to match, a deny or ask rule either (so `/tmp/../etc/passwd` is neither
//! allowed by `/tmp/**` nor let past a deny on `/etc/**`). Symlinks, percent-encoding and `\`
//! separators are not interpreted: confine file servers with their own roots as well.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use rmcp::model::ToolAnnotations;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::glob::{Glob, NAME_SEPARATOR, PATH_SEPARATOR, check_name_pattern};

/// The config key these rules are read from, used in messages.
pub const CONFIG_KEY: &str = "permissions";

/// What may happen to one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it without asking.
    Allow,
    /// Never run it; `call_tool` is not sent.
    Deny {
        /// The rule or default that denies it.
        reason: String,
    },
    /// Run it only if an [`Approver`] approves.
    Ask {
        /// Why the user is asked.
        reason: String,
    },
}

/// What a rule does when it matches, ordered from least to most restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// The call may run without asking.
    Allow,
    /// The call runs only if the user approves.
    Ask,
    /// The call never runs.
    Deny,
}

impl Effect {
    /// The config list this effect's rules come from (`allow`, `ask`, `deny`).
    pub fn key(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

/// The permission rules of the config (`"permissions"`):
///
/// ```json
/// { "allow": ["mcp__github__get_*"],
///   "ask":   ["mcp__github__**"],
///   "deny":  [{ "tool": "mcp__fs__write_file", "args": { "path": { "glob": "/etc/**" } } }],
///   "trustReadOnlyHint": false }
/// ```
///
/// Each entry of `allow`, `ask` and `deny` (each default empty) is a glob over the qualified name
/// or an object with `tool` (that glob) and `args`: predicates on top-level arguments, each
/// `{"glob": "..."}` (`*` within a `/` segment, `**` across), `{"prefix": "..."}` or
/// `{"equals": <JSON>}`; all must hold. A predicate on a missing argument does not hold; `glob`
/// and `prefix` hold on a string, or on an array of strings when every element (allow) or any
/// element (ask, deny) matches. Unknown keys are rejected.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "RawPermissions")]
pub struct PermissionRules {
    /// Every rule: deny rules, then ask, then allow, each in config order.
    rules: Vec<Rule>,
    /// `trustReadOnlyHint`; default false. When true, a tool that no rule matches and whose
    /// server claims `readOnlyHint: true` (without also claiming `destructiveHint: true`) is
    /// allowed without asking. **Risk:** the claim is the server's own; a malicious or buggy
    /// server can mark a destructive tool read-only and have it run unasked.
    trust_read_only_hint: bool,
}

/// One rule, as written in the config.
#[derive(Debug, Clone)]
pub struct Rule {
    effect: Effect,
    tool: Glob,
    args: Vec<(String, ArgPredicate)>,
    text: String,
}

#[derive(Debug, Clone)]
enum ArgPredicate {
    Glob(Glob),
    Prefix(String),
    Equals(Value),
}

impl PermissionRules {
    /// The rules, most restrictive effect first, each list in config order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether `trustReadOnlyHint` is set.
    pub fn trusts_read_only_hint(&self) -> bool {
        self.trust_read_only_hint
    }

    /// Decides a call of `qualified_name` with `args`. `annotations` are the tool's as listed by
    /// its server: they change the reason given, never grant (unless `trustReadOnlyHint`).
    pub fn decide(
        &self,
        qualified_name: &str,
        args: &Map<String, Value>,
        annotations: Option<&ToolAnnotations>,
    ) -> Decision {
        match self.matching(qualified_name, args) {
            Some(rule) => rule.decision(qualified_name),
            None => self.default_decision(qualified_name, annotations),
        }
    }

    /// The rule that decides a call of `qualified_name` with `args` (the most restrictive
    /// matching one), or `None` when no rule matches (where [`PermissionRules::decide`] would
    /// fall back to its default).
    pub fn matching(&self, qualified_name: &str, args: &Map<String, Value>) -> Option<&Rule> {
        let mut winner: Option<&Rule> = None;
        for rule in &self.rules {
            if winner.is_none_or(|w| rule.effect > w.effect) && rule.matches(qualified_name, args) {
                winner = Some(rule);
            }
        }
        winner
    }

    fn default_decision(&self, name: &str, annotations: Option<&ToolAnnotations>) -> Decision {
        let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
        let destructive_hint = annotations.and_then(|a| a.destructive_hint);
        let mut add = format!("add \"{name}\" to `{CONFIG_KEY}.allow` to run it without asking");
        // An allow rule that would match with `**` for its `*`: say why it does not.
        if let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.effect == Effect::Allow && r.tool.misses_by_a_star(name))
        {
            add.push_str(&format!(
                " (the rule \"{}\" does not match it: in a rule `*` stays within one `__` \
                 segment of the name, `**` crosses them)",
                rule.text
            ));
        }
        let reason = if read_only && destructive_hint != Some(true) {
            if self.trust_read_only_hint {
                return Decision::Allow;
            }
            format!(
                "no permission rule matches `{name}`; its server says it is read-only \
                 (readOnlyHint), but a server's hints never grant: {add}, or set \
                 `{CONFIG_KEY}.trustReadOnlyHint` to trust such claims"
            )
        } else if destructive_hint.unwrap_or(true) {
            format!(
                "no permission rule matches `{name}`, and it may be destructive \
                 (destructiveHint true or not given): {add}"
            )
        } else {
            format!(
                "no permission rule matches `{name}` (destructiveHint false is a hint, not a \
                 grant): {add}"
            )
        };
        Decision::Ask { reason }
    }
}

impl Rule {
    /// What this rule does when it matches.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The rule as written: the glob, or the object in compact JSON.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn matches(&self, name: &str, args: &Map<String, Value>) -> bool {
        self.tool.is_match(name)
            && self.args.iter().all(|(key, predicate)| {
                args.get(key)
                    .is_some_and(|value| predicate.holds(value, self.effect))
            })
    }

    fn decision(&self, name: &str) -> Decision {
        // The reason is written only when there is one to give: an allowed call (the common
        // case, once per tool call) builds no string.
        let rule = || {
            format!(
                "rule `{}` in `{CONFIG_KEY}.{}`",
                self.text,
                self.effect.key()
            )
        };
        match self.effect {
            Effect::Allow => Decision::Allow,
            Effect::Ask => Decision::Ask {
                reason: format!("{} asks before `{name}` runs", rule()),
            },
            Effect::Deny => Decision::Deny {
                reason: format!("{} denies `{name}`", rule()),
            },
        }
    }
}

impl ArgPredicate {
    fn holds(&self, value: &Value, effect: Effect) -> bool {
        let test = |s: &str| match self {
            ArgPredicate::Glob(glob) => glob.is_match(s),
            ArgPredicate::Prefix(prefix) => s.starts_with(prefix.as_str()),
            ArgPredicate::Equals(_) => false,
        };
        match (self, value) {
            (ArgPredicate::Equals(expected), _) => value == expected,
            (_, Value::String(s)) => lexically(s, effect, &test),
            (_, Value::Array(items)) if !items.is_empty() => {
                let mut strings = items.iter().map(Value::as_str);
                match effect {
                    Effect::Allow => {
                        strings.all(|s| s.is_some_and(|s| lexically(s, effect, &test)))
                    }
                    Effect::Ask | Effect::Deny => {
                        strings.any(|s| s.is_some_and(|s| lexically(s, effect, &test)))
                    }
                }
            }
            _ => false,
        }
    }
}

/// Tests `s` as given and, if it has `.` or `..` segments, its normalised form: both must pass
/// for an allow rule, either for an ask or deny rule.
fn lexically(s: &str, effect: Effect, test: &dyn Fn(&str) -> bool) -> bool {
    match normalize_dots(s) {
        None => test(s),
        Some(normal) => match effect {
            Effect::Allow => test(s) && test(&normal),
            Effect::Ask | Effect::Deny => test(s) || test(&normal),
        },
    }
}

/// `s` with `.` and `..` segments resolved lexically, or `None` if it has none.
fn normalize_dots(s: &str) -> Option<String> {
    if !s.split('/').any(|seg| seg == "." || seg == "..") {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    for seg in s.split('/') {
        match seg {
            "." => {}
            ".." => match out.last() {
                None | Some(&"..") => out.push(".."),
                Some(&"") if out.len() == 1 => {} // the parent of `/` is `/`
                Some(_) => {
                    out.pop();
                }
            },
            _ => out.push(seg),
        }
    }
    Some(match out.as_slice() {
        [""] => "/".to_string(),
        _ => out.join("/"),
    })
}

// ---------------------------------------------------------------------------------------------
// Config

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPermissions {
    /// Default empty.
    #[serde(default)]
    allow: Vec<Value>,
    /// Default empty.
    #[serde(default)]
    ask: Vec<Value>,
    /// Default empty.
    #[serde(default)]
    deny: Vec<Value>,
    /// Default false (see [`PermissionRules`]).
    #[serde(default)]
    trust_read_only_hint: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    tool: String,
    #[serde(default)]
    args: BTreeMap<String, RawPredicate>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum RawPredicate {
    Glob(String),
    Prefix(String),
    Equals(Value),
}

impl TryFrom<RawPermissions> for PermissionRules {
    type Error = String;

    fn try_from(raw: RawPermissions) -> Result<Self, String> {
        let mut rules = Vec::new();
        for (effect, list) in [
            (Effect::Deny, raw.deny),
            (Effect::Ask, raw.ask),
            (Effect::Allow, raw.allow),
        ] {
            for (i, value) in list.into_iter().enumerate() {
                let location = format!("{CONFIG_KEY}.{}[{i}]", effect.key());
                rules.push(
                    Rule::parse(effect, value)
                        .map_err(|message| format!("{location}: {message}"))?,
                );
            }
        }
        Ok(Self {
            rules,
            trust_read_only_hint: raw.trust_read_only_hint,
        })
    }
}

impl Rule {
    fn parse(effect: Effect, value: Value) -> Result<Rule, String> {
        let text = match &value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let raw = match value {
            Value::String(tool) => RawRule {
                tool,
                args: BTreeMap::new(),
            },
            object @ Value::Object(_) => {
                serde_json::from_value(object).map_err(|e| e.to_string())?
            }
            _ => {
                return Err(
                    "a rule is a tool-name glob (\"mcp__server__*\") or an object \
                     {\"tool\": ..., \"args\": {...}}"
                        .into(),
                );
            }
        };
        check_name_pattern(&raw.tool)?;
        let args = raw
            .args
            .into_iter()
            .map(|(key, predicate)| {
                let predicate = match predicate {
                    RawPredicate::Glob(g) => ArgPredicate::Glob(Glob::new(&g, PATH_SEPARATOR)),
                    RawPredicate::Prefix(p) => ArgPredicate::Prefix(p),
                    RawPredicate::Equals(v) => ArgPredicate::Equals(v),
                };
                (key, predicate)
            })
            .collect();
        Ok(Rule {
            effect,
            // A deny or ask rule's `*` crosses `__`: a raw name holding `__` is never let past it.
            tool: match effect {
                Effect::Allow => Glob::new(&raw.tool, NAME_SEPARATOR),
                Effect::Ask | Effect::Deny => Glob::new(&raw.tool, NAME_SEPARATOR).crossing(),
            },
            args,
            text,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Approval

/// A call that needs approval ([`Decision::Ask`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The model-visible name, `mcp__<server>__<tool>`.
    pub qualified_name: String,
    /// The server that would run it.
    pub server: String,
    /// The arguments the model sent.
    pub args: Map<String, Value>,
    /// Why approval is needed (from [`Decision::Ask`]).
    pub reason: String,
    /// The tool's annotations as its server listed them — claims, not facts.
    pub annotations: Option<ToolAnnotations>,
}

/// The answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Run the call.
    Approved,
    /// Do not run it; `reason` is shown to the model and the user.
    Denied {
        /// What the user said, or why.
        reason: String,
    },
    /// The question was dismissed or abandoned; do not run it.
    Cancelled,
}

impl Approval {
    /// Whether the call may run: only [`Approval::Approved`].
    pub fn is_approved(&self) -> bool {
        matches!(self, Approval::Approved)
    }
}

/// Who answers [`Decision::Ask`]: the embedder's UI, a non-interactive policy, a test.
///
/// The caller applies the approval timeout (the future is dropped when it expires) and treats
/// a timeout like [`Approval::Cancelled`]: deny, cancel and timeout never send `call_tool`.
pub trait Approver: Send + Sync {
    /// Answers `request`.
    ///
    /// Implementors must: resolve to [`Approval::Approved`] only for this exact request (tool
    /// and arguments) — never remember an approval across requests unless the user chose that;
    /// resolve to [`Approval::Cancelled`] when the question is dismissed or can no longer be
    /// answered; tolerate the future being dropped at any point (timeout, shutdown) and leave
    /// no prompt pending when it is; never call the tool themselves.
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval>;
}

/// Non-interactive sessions: every request is denied, with a reason telling the user which
/// config key to add to allow the tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        let name = &request.qualified_name;
        let why = &request.reason;
        // The reason of a call no rule matched (or of a client profile's rule) says already
        // what to add.
        let reason = if why.contains(&format!("{CONFIG_KEY}.allow`")) {
            format!("`{name}` needs approval and this session cannot ask: {why}")
        } else {
            format!(
                "`{name}` needs approval ({why}), and this session cannot ask: add \"{name}\" \
                 to `{CONFIG_KEY}.allow` to allow it"
            )
        };
        Box::pin(std::future::ready(Approval::Denied { reason }))
    }
}

/// Approves everything. Only for tests and trusted automation where every configured server is
/// trusted with every call: it turns every [`Decision::Ask`] into a run. Deny rules still hold
/// (they never reach an approver).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Approver for AllowAll {
    fn approve(&self, _request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        Box::pin(std::future::ready(Approval::Approved))
    }
}

#[cfg(test)]
mod tests;

//! Argument validation before a tool call (R27).
//!
//! An [`ArgumentValidator`] is compiled once per tool from the exact input schema the model saw
//! (the same `Arc<JsonObject>` the catalog holds) and checks each call's arguments against it.
//!
//! Invariants:
//! - the schema is never modified: the validator keeps the caller's `Arc` and compiles a private
//!   copy, so what the model sees (and what the conformance scenario
//!   `json-schema-2020-12-preservation` echoes back) is byte-for-byte what the server listed;
//! - nothing is ever fetched (SEP-2106, scenario `json-schema-ref-no-deref`): `jsonschema` is
//!   built without its HTTP and file resolvers, and every URI that is not part of the schema
//!   document itself is answered by a retriever that fetches nothing. Local `$ref`s (`#/$defs/…`,
//!   `$anchor`s, embedded `$id`s) resolve as usual; a remote `$ref` target is treated as the
//!   empty schema `{}` (it constrains nothing: the server still validates), and is listed in
//!   [`ArgumentValidator::unresolved_refs`]. Meta-schemas of the known drafts are built in;
//! - dialect: a known `$schema` (draft 4, 6, 7, 2019-09, 2020-12) is honoured; without `$schema`
//!   the schema is 2020-12 (the MCP default); an unknown `$schema` is validated as 2020-12 and
//!   noted in [`ArgumentValidator::notes`];
//! - `format` is an annotation only, in every draft, so a value the server accepts is never
//!   refused here for a format the harness reads differently;
//! - a schema that cannot be compiled (invalid for its draft, or a remote `$ref` with a JSON
//!   pointer into the unfetched document) leaves the tool listed, but every call to it is
//!   refused with [`ArgumentError::SchemaUnusable`] (class protocol: the server must fix its
//!   schema). Refusing is the safe choice: calling without a check would send arguments the
//!   harness promised to check (R27);
//! - a violation report is bounded: at most [`MAX_VIOLATIONS`] entries of at most
//!   [`MAX_MESSAGE_CHARS`] characters each, plus the total count.

#![warn(missing_docs)]

use std::fmt;
use std::sync::{Arc, Mutex};

use jsonschema::{Draft, Retrieve, Uri};
use rmcp::model::JsonObject;
use serde_json::Value;

#[cfg(test)]
use crate::error::ErrorClass;

/// At most this many violations are listed in an [`ArgumentError::Invalid`].
pub(crate) const MAX_VIOLATIONS: usize = 10;
/// A violation message longer than this (in chars) is cut, with `…` appended.
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;

/// The JSON Schema dialect a tool's input schema is validated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// JSON Schema draft 4.
    Draft4,
    /// JSON Schema draft 6.
    Draft6,
    /// JSON Schema draft 7.
    Draft7,
    /// JSON Schema 2019-09.
    Draft201909,
    /// JSON Schema 2020-12 (the MCP default).
    Draft202012,
}

/// A tool's input schema, compiled once, checking the arguments of each call.
pub(crate) struct ArgumentValidator {
    tool: String,
    #[cfg_attr(not(test), allow(dead_code))] // read by tests: the exact `Arc` the model saw
    schema: Arc<JsonObject>,
    dialect: Dialect,
    compiled: Result<jsonschema::Validator, String>,
    unresolved: Vec<String>,
    #[cfg_attr(not(test), allow(dead_code))] // read by tests
    notes: Vec<String>,
}

impl fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgumentValidator")
            .field("tool", &self.tool)
            .field("dialect", &self.dialect)
            .field("usable", &self.compiled.is_ok())
            .field("unresolved", &self.unresolved)
            .finish()
    }
}

/// One way the arguments break the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// JSON pointer into the arguments (`""` is the arguments object itself).
    pub path: String,
    /// What is wrong, bounded to [`MAX_MESSAGE_CHARS`].
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(arguments)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// Why a call's arguments were refused before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArgumentError {
    /// The arguments do not match the input schema.
    #[error("{}", invalid_message(tool, violations, *total))]
    Invalid {
        /// The tool (raw name) the arguments were meant for.
        tool: String,
        /// The first [`MAX_VIOLATIONS`] violations.
        violations: Vec<Violation>,
        /// How many violations there are in all.
        total: usize,
    },
    /// The tool's input schema could not be compiled, so no call to it is sent.
    #[error(
        "`{tool}` was not called: its input schema cannot be used to check arguments ({reason}); the server has to fix the schema"
    )]
    SchemaUnusable {
        /// The tool (raw name) that was not called.
        tool: String,
        /// Why its schema could not be compiled.
        reason: String,
    },
}

fn invalid_message(tool: &str, violations: &[Violation], total: usize) -> String {
    let (count, listed) = problems(violations, total);
    format!("the arguments for `{tool}` do not match its input schema ({count}): {listed}")
}

/// How schema violations read in a message: ("3 problems", "the first; the second (and 1
/// more)") — the count of all of them, and the ones kept, joined.
pub(crate) fn problems(violations: &[Violation], total: usize) -> (String, String) {
    let mut listed = violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let more = total.saturating_sub(violations.len());
    if more > 0 {
        listed.push_str(&format!(" (and {more} more)"));
    }
    let noun = if total == 1 { "problem" } else { "problems" };
    (format!("{total} {noun}"), listed)
}

impl ArgumentError {
    #[cfg(test)]
    /// The R32 class: wrong arguments are a tool error (the model may retry with other
    /// arguments); an unusable schema is the server's protocol fault.
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            ArgumentError::Invalid { .. } => ErrorClass::Tool,
            ArgumentError::SchemaUnusable { .. } => ErrorClass::Protocol,
        }
    }
}

/// Answers every URI outside the schema document with `{}`, records it, and fetches nothing.
struct NoFetch {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Retrieve for NoFetch {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let uri = uri.as_str().to_string();
        if !seen.contains(&uri) {
            seen.push(uri);
        }
        Ok(Value::Object(serde_json::Map::new()))
    }
}

/// A schema compiled the way every schema in the call path is: no fetching, formats as
/// annotations, the dialect from `$schema` or 2020-12.
pub(crate) struct Compiled {
    pub(crate) dialect: Dialect,
    pub(crate) validator: Result<jsonschema::Validator, String>,
    pub(crate) unresolved: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// Compiles `schema` (a private copy; the caller's object is untouched).
pub(crate) fn compile(schema: &JsonObject) -> Compiled {
    let document = Value::Object(schema.clone());
    let mut notes = Vec::new();
    let (draft, dialect) = match Draft::Draft202012.detect(&document) {
        Draft::Draft4 => (Draft::Draft4, Dialect::Draft4),
        Draft::Draft6 => (Draft::Draft6, Dialect::Draft6),
        Draft::Draft7 => (Draft::Draft7, Dialect::Draft7),
        Draft::Draft201909 => (Draft::Draft201909, Dialect::Draft201909),
        Draft::Draft202012 => (Draft::Draft202012, Dialect::Draft202012),
        _ => {
            let uri = document
                .get("$schema")
                .map(|v| truncate(&v.to_string(), MAX_MESSAGE_CHARS))
                .unwrap_or_default();
            notes.push(format!(
                "unknown `$schema` {uri}: validated as JSON Schema 2020-12"
            ));
            (Draft::Draft202012, Dialect::Draft202012)
        }
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let validator = jsonschema::options()
        .with_draft(draft)
        .should_validate_formats(false)
        .with_retriever(NoFetch { seen: seen.clone() })
        .build(&document)
        .map_err(|e| {
            // For a schema error the "instance" is the schema: say where in it.
            let at = e.instance_path().as_str();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!("at {at}: ")
            };
            truncate(&format!("{at}{e}"), MAX_MESSAGE_CHARS)
        });
    let unresolved = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    let validator = match validator {
        Err(reason) if !unresolved.is_empty() => Err(format!(
            "{reason}; it refers to {} which mcp-harness never fetches",
            unresolved.join(", ")
        )),
        other => other,
    };
    for uri in &unresolved {
        notes.push(format!(
            "`$ref` to {uri} was not fetched: that part of the schema is not checked here"
        ));
    }
    Compiled {
        dialect,
        validator,
        unresolved,
        notes,
    }
}

/// The violations of `instance` (the first `max`) and their total; `None` when it is valid.
pub(crate) fn violations(
    validator: &jsonschema::Validator,
    instance: &Value,
    max: usize,
) -> Option<(Vec<Violation>, usize)> {
    if validator.is_valid(instance) {
        return None;
    }
    let mut violations = Vec::new();
    let mut total = 0;
    for error in validator.iter_errors(instance) {
        total += 1;
        if violations.len() < max {
            violations.push(Violation {
                path: error.instance_path().as_str().to_string(),
                message: truncate(&error.to_string(), MAX_MESSAGE_CHARS),
            });
        }
    }
    if total == 0 {
        // `is_valid` and `iter_errors` disagreeing would be a jsonschema bug; report it rather
        // than let the instance through.
        violations.push(Violation {
            path: String::new(),
            message: "the value does not match the schema".to_string(),
        });
        total = 1;
    }
    Some((violations, total))
}

impl ArgumentValidator {
    /// Compiles `schema` (the input schema the model saw) for `tool`. Never fails: a schema
    /// that cannot be compiled yields a validator whose [`validate`](Self::validate) reports
    /// [`ArgumentError::SchemaUnusable`].
    pub(crate) fn new(tool: impl Into<String>, schema: Arc<JsonObject>) -> Self {
        let Compiled {
            dialect,
            validator,
            unresolved,
            notes,
        } = compile(&schema);
        ArgumentValidator {
            tool: tool.into(),
            schema,
            dialect,
            compiled: validator,
            unresolved,
            notes,
        }
    }

    #[cfg(test)]
    /// The schema as the server listed it and the model saw it: the very `Arc` given to
    /// [`new`](Self::new), unchanged.
    pub(crate) fn schema(&self) -> &Arc<JsonObject> {
        &self.schema
    }

    #[cfg(test)]
    /// The dialect the schema is validated with.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    #[cfg(test)]
    /// Whether the schema compiled; if not, every call is refused.
    pub(crate) fn is_usable(&self) -> bool {
        self.compiled.is_ok()
    }

    #[cfg(test)]
    /// Remote `$ref` targets that were not fetched (and so constrain nothing here).
    pub(crate) fn unresolved_refs(&self) -> &[String] {
        &self.unresolved
    }

    #[cfg(test)]
    /// What an operator may want to know about this schema: unfetched references, an unknown
    /// `$schema`.
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Checks `args` against the schema: every violation (the first [`MAX_VIOLATIONS`] listed)
    /// or, for an unusable schema, [`ArgumentError::SchemaUnusable`].
    pub(crate) fn validate(&self, args: &JsonObject) -> Result<(), ArgumentError> {
        self.check(&Value::Object(args.clone()))
    }

    /// [`validate`](Self::validate) for arguments the caller owns and sends next: the same
    /// check, without copying them. Returns the arguments, unchanged, when they are valid.
    pub(crate) fn validated(&self, args: JsonObject) -> Result<JsonObject, ArgumentError> {
        let instance = Value::Object(args);
        self.check(&instance)?;
        match instance {
            Value::Object(args) => Ok(args),
            _ => unreachable!("the instance was built as an object just above"),
        }
    }

    fn check(&self, instance: &Value) -> Result<(), ArgumentError> {
        let compiled = match &self.compiled {
            Ok(compiled) => compiled,
            Err(reason) => {
                return Err(ArgumentError::SchemaUnusable {
                    tool: self.tool.clone(),
                    reason: reason.clone(),
                });
            }
        };
        match violations(compiled, instance, MAX_VIOLATIONS) {
            None => Ok(()),
            Some((violations, total)) => Err(ArgumentError::Invalid {
                tool: self.tool.clone(),
                violations,
                total,
            }),
        }
    }
}

/// `text` cut to at most `max` chars (on a char boundary), with `…` appended when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn validator(schema: Value) -> ArgumentValidator {
        ArgumentValidator::new("t", Arc::new(object(schema)))
    }

    #[test]
    fn valid_arguments_pass() {
        let v = validator(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }));
        assert!(v.validate(&object(json!({"n": 3}))).is_ok());
        assert_eq!(v.dialect(), Dialect::Draft202012);
    }

    #[test]
    fn every_violation_is_listed_with_its_path_and_the_tool() {
        let v = validator(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
            "required": ["n", "s", "x"]
        }));
        let err = v
            .validate(&object(json!({"n": "three", "s": 1})))
            .unwrap_err();
        let ArgumentError::Invalid {
            violations, total, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(*total, 3);
        let paths: Vec<_> = violations.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"/n") && paths.contains(&"/s") && paths.contains(&""));
        let text = err.to_string();
        assert!(text.contains("`t`") && text.contains("/n: ") && text.contains("(arguments): "));
        assert_eq!(err.class(), ErrorClass::Tool);
    }

    #[test]
    fn the_report_is_bounded() {
        let mut properties = serde_json::Map::new();
        let mut args = serde_json::Map::new();
        for i in 0..25 {
            properties.insert(format!("p{i}"), json!({"type": "integer"}));
            args.insert(format!("p{i}"), json!("x".repeat(1000)));
        }
        let v = validator(json!({"type": "object", "properties": properties}));
        let err = v.validate(&args).unwrap_err();
        let ArgumentError::Invalid {
            violations, total, ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(*total, 25);
        assert_eq!(violations.len(), MAX_VIOLATIONS);
        assert!(
            violations
                .iter()
                .all(|v| v.message.chars().count() <= MAX_MESSAGE_CHARS + 1)
        );
        assert!(err.to_string().contains("(and 15 more)"));
    }

    #[test]
    fn validated_returns_the_same_arguments_or_the_same_error() {
        let v = validator(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }));
        let good = object(json!({"n": 3, "extra": [1, {"a": null}]}));
        assert_eq!(v.validated(good.clone()), Ok(good));
        let bad = object(json!({"n": "three"}));
        assert_eq!(
            v.validated(bad.clone()).unwrap_err(),
            v.validate(&bad).unwrap_err()
        );
        let unusable = validator(json!({"type": 12}));
        assert!(matches!(
            unusable.validated(object(json!({}))),
            Err(ArgumentError::SchemaUnusable { .. })
        ));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hé", 2), "hé");
    }
}

/// Drops top-level arguments that are `null` where the schema neither requires the property nor
/// allows `null` for it: models often write `null` for "not given", and such an argument is
/// then treated as absent (never sent) instead of failing validation. A `null` the schema
/// allows, or for a required property, is kept (and validated as is).
pub(crate) fn drop_null_optionals(schema: &JsonObject, mut args: JsonObject) -> JsonObject {
    // Nearly every call has no `null` argument: nothing to look up then.
    if !args.values().any(Value::is_null) {
        return args;
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let allows_null = |name: &str| -> bool {
        let Some(property) = properties.and_then(|p| p.get(name)) else {
            return true; // not described: leave it to the schema
        };
        match property.get("type") {
            Some(Value::String(t)) => t == "null",
            Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
            // No `type` (an enum, a $ref, a combinator): do not guess.
            _ => true,
        }
    };
    args.retain(|name, value| {
        !value.is_null() || required.contains(&name.as_str()) || allows_null(name)
    });
    args
}

#[cfg(test)]
mod null_tests {
    use super::*;

    #[test]
    fn null_optionals_are_dropped_only_where_null_is_not_allowed() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "a": {"type": "boolean"},
                "b": {"type": ["string", "null"]},
                "c": {"type": "string"},
                "d": {"enum": [1, null]}
            },
            "required": ["c"]
        });
        let schema = schema.as_object().cloned().unwrap_or_default();
        let args = serde_json::json!({"a": null, "b": null, "c": null, "d": null, "e": null});
        let kept = drop_null_optionals(&schema, args.as_object().cloned().unwrap_or_default());
        let keys: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(keys, ["b", "c", "d", "e"]);
    }
}

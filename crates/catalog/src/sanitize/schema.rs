//! Tool schemas: size and depth caps, the object-schema rule, and cleaning of their annotations.
//!
//! Invariant: a schema over its size or depth cap, not an object schema, or with a property name
//! or value that cleaning would change, rejects its tool; otherwise only `description`, `title`
//! and `$comment` annotations change, and a schema that needs no change is kept shared.

use std::io;
use std::sync::Arc;

use rmcp::model::JsonObject;
use serde::Serialize;
use serde_json::Value;

use super::text::{Mode, clean, code_point, find_disallowed, unchanged_by_clean};
use super::{MetadataLimits, Rejected};

// Sizes and depth

/// An `io::Write` that only counts, and fails once past its budget.
struct Budget {
    used: usize,
    max: usize,
}

impl io::Write for Budget {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.used = self.used.saturating_add(buf.len());
        if self.used > self.max {
            return Err(io::Error::other("over budget"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `value`, serialized as compact JSON, fits in `max` bytes. Stops serializing at the cap.
pub(super) fn fits<T: Serialize + ?Sized>(value: &T, max: usize) -> bool {
    let mut budget = Budget { used: 0, max };
    serde_json::to_writer(&mut budget, value).is_ok()
}

/// Whether nesting under `root` (level 1) goes deeper than `max`. Iterative: a hostile depth
/// cannot overflow the stack here.
fn deeper_than(root: &JsonObject, max: usize) -> bool {
    if max == 0 {
        return true;
    }
    let mut stack: Vec<(&Value, usize)> = root.values().map(|v| (v, 2)).collect();
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        if depth > max {
            return true;
        }
        stack.extend(children.map(|v| (v, depth + 1)));
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Schemas

#[derive(Clone, Copy)]
enum Ctx {
    /// A (sub)schema: keys are keywords.
    Schema,
    /// A map from names to subschemas (`properties`, `$defs`, ...).
    Names,
    /// Instance data (`enum`, `const`, `default`, `examples`): checked, never rewritten.
    Data,
}

struct SchemaWalk<'a> {
    what: &'a str,
    limits: &'a MetadataLimits,
    /// Annotations cleaned ([`SchemaWalk::object`]) or that would be ([`SchemaWalk::check`]).
    cleaned: usize,
}

/// What the value under a key is, for both passes of a [`SchemaWalk`].
enum Step {
    /// A string annotation, cleaned to at most this many characters in this mode.
    Annotation(usize, Mode),
    /// Walked in this context.
    Into(Ctx),
}

impl SchemaWalk<'_> {
    fn step(&self, key: &str, value: &Value, ctx: Ctx) -> Step {
        match ctx {
            Ctx::Data => Step::Into(Ctx::Data),
            Ctx::Names => Step::Into(Ctx::Schema),
            Ctx::Schema => match (key, value) {
                ("description" | "$comment", Value::String(_)) => {
                    Step::Annotation(self.limits.max_description_chars, Mode::Text)
                }
                ("title", Value::String(_)) => {
                    Step::Annotation(self.limits.max_title_chars, Mode::Line)
                }
                (
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas",
                    _,
                ) => Step::Into(Ctx::Names),
                ("default" | "const" | "enum" | "examples" | "example", _) => Step::Into(Ctx::Data),
                _ => Step::Into(Ctx::Schema),
            },
        }
    }

    fn check_key(&self, key: &str) -> Result<(), String> {
        match find_disallowed(key, false) {
            Some((_, c, why)) => Err(format!(
                "{}: a property name or keyword contains a {why} ({}); argument names go on the wire and cannot be rewritten",
                self.what,
                code_point(c)
            )),
            None => Ok(()),
        }
    }

    fn check_string(&self, s: &str) -> Result<(), String> {
        match find_disallowed(s, true) {
            Some((_, c, why)) => Err(format!(
                "{}: a string value contains a {why} ({}); schema values are not rewritten",
                self.what,
                code_point(c)
            )),
            None => Ok(()),
        }
    }

    /// The read-only pass: the errors the rewriting pass would return, and in `cleaned` the
    /// number of annotations it would change. Most schemas need no change, and this pass
    /// lets them be kept as they are, shared, instead of copied to be rewritten.
    fn check(&mut self, value: &Value, ctx: Ctx) -> Result<(), String> {
        match value {
            Value::Object(map) => self.check_object(map, ctx),
            Value::Array(items) => items.iter().try_for_each(|v| self.check(v, ctx)),
            Value::String(s) => self.check_string(s),
            _ => Ok(()),
        }
    }

    fn check_object(&mut self, map: &JsonObject, ctx: Ctx) -> Result<(), String> {
        for (key, value) in map {
            self.check_key(key)?;
            match self.step(key, value, ctx) {
                Step::Annotation(max, mode) => {
                    if let Value::String(s) = value
                        && !unchanged_by_clean(s, max, mode)
                        && clean(s, max, mode).changed
                    {
                        self.cleaned += 1;
                    }
                }
                Step::Into(ctx) => self.check(value, ctx)?,
            }
        }
        Ok(())
    }

    /// The rewriting pass: cleans annotations in place.
    fn value(&mut self, value: &mut Value, ctx: Ctx) -> Result<(), String> {
        match value {
            Value::Object(map) => self.object(map, ctx),
            Value::Array(items) => items.iter_mut().try_for_each(|v| self.value(v, ctx)),
            Value::String(s) => self.check_string(s),
            _ => Ok(()),
        }
    }

    fn object(&mut self, map: &mut JsonObject, ctx: Ctx) -> Result<(), String> {
        for (key, value) in map.iter_mut() {
            self.check_key(key)?;
            match self.step(key, value, ctx) {
                Step::Annotation(max, mode) => {
                    if let Value::String(s) = value {
                        self.annotation(s, max, mode);
                    }
                }
                Step::Into(ctx) => self.value(value, ctx)?,
            }
        }
        Ok(())
    }

    fn annotation(&mut self, s: &mut String, max_chars: usize, mode: Mode) {
        if unchanged_by_clean(s, max_chars, mode) {
            return;
        }
        let c = clean(s, max_chars, mode);
        if c.changed {
            *s = c.text;
            self.cleaned += 1;
        }
    }
}

pub(super) fn sanitize_schema(
    what: &str,
    schema: Arc<JsonObject>,
    limits: &MetadataLimits,
    notes: &mut Vec<String>,
) -> Result<Arc<JsonObject>, Rejected> {
    if deeper_than(&schema, limits.max_schema_depth) {
        return Err(Rejected::Schema(format!(
            "{what} is nested deeper than {} levels",
            limits.max_schema_depth
        )));
    }
    if !fits(&*schema, limits.max_schema_bytes) {
        return Err(Rejected::Schema(format!(
            "{what} is larger than {} bytes",
            limits.max_schema_bytes
        )));
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => {
            return Err(Rejected::Schema(format!(
                "{what} is not of type \"object\" (MCP requires an object schema)"
            )));
        }
        // A schema without `type` accepts any object the server takes; many servers send `{}`
        // for "no arguments", and hiding their tools would help nobody.
        None => {}
    }
    let mut walk = SchemaWalk {
        what,
        limits,
        cleaned: 0,
    };
    walk.check_object(&schema, Ctx::Schema)
        .map_err(Rejected::Schema)?;
    if walk.cleaned == 0 {
        return Ok(schema);
    }
    let mut map = Arc::unwrap_or_clone(schema);
    walk.cleaned = 0;
    walk.object(&mut map, Ctx::Schema)
        .map_err(Rejected::Schema)?;
    if walk.cleaned > 0 {
        notes.push(format!(
            "{what}: cleaned {} description/title annotation(s)",
            walk.cleaned
        ));
    }
    Ok(Arc::new(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Arc<JsonObject> {
        match v {
            Value::Object(m) => Arc::new(m),
            _ => panic!("test schema must be an object"),
        }
    }

    #[test]
    fn depth_counts_levels() {
        let m = schema(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
        assert!(!deeper_than(&m, 3));
        assert!(deeper_than(&m, 2));
        assert!(!deeper_than(&schema(json!({"type": "object"})), 1));
    }
}

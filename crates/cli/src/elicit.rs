//! A form elicitation asked on the terminal, field by field.
//!
//! Invariants: fields are asked in the order the server's `requestedSchema` lists them, each
//! shown with its title, name, type, whether it is required, its default and its choices
//! (server text without control characters); an answer is parsed to the field's type
//! (booleans, integers, numbers, a choice by value or title, several choices as an array) and
//! checked against the field's schema, and the field is asked again until it is valid; the
//! content sent is valid against the whole requested schema. The user declines or cancels at
//! the first question, and end of input (Ctrl-D) at any question cancels: nothing is ever
//! answered on the user's behalf.

use std::future::Future;

use serde_json::{Map, Number, Value, json};

/// How the user answered the form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// The content, valid against the requested schema.
    Accept(Map<String, Value>),
    /// The user said no.
    Decline,
    /// The user gave up (Ctrl-D, or `c`).
    Cancel,
}

/// One field of the form.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    /// The property name (the content's key).
    pub name: String,
    /// The property's schema as the server sent it.
    pub schema: Value,
    /// Listed in the schema's `required`.
    pub required: bool,
}

/// A choice of an enum: the value sent and the title shown.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    value: String,
    title: Option<String>,
}

/// Server text as shown: without control characters.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

impl Field {
    fn kind(&self) -> &str {
        self.schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string")
    }

    /// The choices of a single-select (`enum` with optional `enumNames`, or `oneOf` of
    /// `const`/`title`) or, for an array, of its items (`enum` or `anyOf`/`oneOf`).
    fn choices(&self) -> Vec<Choice> {
        let source = if self.kind() == "array" {
            self.schema.get("items").unwrap_or(&Value::Null)
        } else {
            &self.schema
        };
        if let Some(values) = source.get("enum").and_then(Value::as_array) {
            let names = self.schema.get("enumNames").and_then(Value::as_array);
            return values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    Some(Choice {
                        value: v.as_str()?.to_string(),
                        title: names
                            .and_then(|n| n.get(i))
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    })
                })
                .collect();
        }
        let listed = source
            .get("oneOf")
            .or_else(|| source.get("anyOf"))
            .and_then(Value::as_array);
        listed
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| {
                        Some(Choice {
                            value: item.get("const")?.as_str()?.to_string(),
                            title: item
                                .get("title")
                                .and_then(Value::as_str)
                                .map(str::to_string),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the field is, as shown above its prompt (several lines, each indented).
    pub(crate) fn describe(&self, index: usize, total: usize) -> String {
        let title = self.schema.get("title").and_then(Value::as_str).map(clean);
        let name = clean(&self.name);
        let label = match title {
            Some(t) if t != name => format!("{t} ({name})"),
            _ => name,
        };
        let mut kind = match self.kind() {
            "boolean" => "yes/no".to_string(),
            "integer" => "integer".to_string(),
            "number" => "number".to_string(),
            "array" => "several choices, separated by commas".to_string(),
            _ if !self.choices().is_empty() => "one choice".to_string(),
            _ => "text".to_string(),
        };
        let bound = |key: &str| self.schema.get(key).map(shown);
        let limits: Vec<String> = [
            ("minimum", "at least"),
            ("maximum", "at most"),
            ("minLength", "at least … characters"),
            ("maxLength", "at most … characters"),
            ("minItems", "at least … choices"),
            ("maxItems", "at most … choices"),
        ]
        .iter()
        .filter_map(|(key, words)| {
            let v = bound(key)?;
            Some(if words.contains('…') {
                words.replace('…', &v)
            } else {
                format!("{words} {v}")
            })
        })
        .chain(
            self.schema
                .get("format")
                .and_then(Value::as_str)
                .map(|f| format!("format {}", clean(f))),
        )
        .collect();
        if !limits.is_empty() {
            kind.push_str(", ");
            kind.push_str(&limits.join(", "));
        }
        let required = if self.required {
            "required"
        } else {
            "optional"
        };
        let mut text = format!("  [{index}/{total}] {label} — {kind}; {required}");
        if let Some(default) = self.schema.get("default") {
            text.push_str(&format!("; default: {}", shown(default)));
        }
        text.push('\n');
        if let Some(description) = self.schema.get("description").and_then(Value::as_str) {
            text.push_str(&format!("        {}\n", clean(description)));
        }
        let choices = self.choices();
        if !choices.is_empty() {
            let listed: Vec<String> = choices
                .iter()
                .map(|c| match &c.title {
                    Some(t) if t != &c.value => format!("{} ({})", clean(&c.value), clean(t)),
                    _ => clean(&c.value),
                })
                .collect();
            text.push_str(&format!("        choices: {}\n", listed.join(", ")));
        }
        text
    }

    /// One choice by its value, else its title (either case); an error naming the choices.
    fn choose(&self, choices: &[Choice], answer: &str) -> Result<String, String> {
        if let Some(c) = choices.iter().find(|c| c.value == answer) {
            return Ok(c.value.clone());
        }
        let lower = answer.to_lowercase();
        let matched: Vec<&Choice> = choices
            .iter()
            .filter(|c| {
                c.value.to_lowercase() == lower
                    || c.title.as_ref().is_some_and(|t| t.to_lowercase() == lower)
            })
            .collect();
        match matched.as_slice() {
            [one] => Ok(one.value.clone()),
            _ => Err(format!(
                "`{}` is not one of the choices: {}",
                clean(answer),
                choices
                    .iter()
                    .map(|c| clean(&c.value))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The answer typed as the field's type; `Ok(None)` for an empty answer (the default, or
    /// nothing for an optional field). An `Err` says what to type instead.
    pub(crate) fn parse(&self, line: &str) -> Result<Option<Value>, String> {
        let answer = line.trim();
        if answer.is_empty() {
            return match self.schema.get("default") {
                Some(default) => Ok(Some(default.clone())),
                None if self.required => {
                    Err("this field is required: type a value (Ctrl-D cancels the form)".into())
                }
                None => Ok(None),
            };
        }
        let value = match self.kind() {
            "boolean" => match answer.to_lowercase().as_str() {
                "y" | "yes" | "true" | "1" => Value::Bool(true),
                "n" | "no" | "false" | "0" => Value::Bool(false),
                _ => return Err("answer yes or no".into()),
            },
            "integer" => answer
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("`{}` is not a whole number", clean(answer)))?,
            "number" => answer
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(|n| {
                    // A whole number stays an integer in JSON (`2`, not `2.0`).
                    answer
                        .parse::<i64>()
                        .map(Value::from)
                        .unwrap_or(Value::Number(n))
                })
                .ok_or_else(|| format!("`{}` is not a number", clean(answer)))?,
            "array" => {
                let choices = self.choices();
                let mut picked = Vec::new();
                for part in answer.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let value = if choices.is_empty() {
                        part.to_string()
                    } else {
                        self.choose(&choices, part)?
                    };
                    if !picked.contains(&value) {
                        picked.push(value);
                    }
                }
                Value::Array(picked.into_iter().map(Value::String).collect())
            }
            _ => {
                let choices = self.choices();
                if choices.is_empty() {
                    Value::String(answer.to_string())
                } else {
                    Value::String(self.choose(&choices, answer)?)
                }
            }
        };
        self.check(&value)?;
        Ok(Some(value))
    }

    /// `value` against the field's own schema: every violation, one line.
    fn check(&self, value: &Value) -> Result<(), String> {
        check(&self.schema, value)
    }
}

/// A value as shown to a person: strings without quotes, arrays comma-separated.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => clean(s),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        Value::Array(items) => items.iter().map(shown).collect::<Vec<_>>().join(", "),
        // `0`, not `0.0`: some servers' SDKs write every bound as a float.
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            _ => n.to_string(),
        },
        other => clean(&other.to_string()),
    }
}

/// `value` against `schema` (formats checked): the violations joined, or `Ok` when valid or
/// when the schema cannot be compiled (the server then judges).
fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let Ok(validator) = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
    else {
        return Ok(());
    };
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| clean(&e.to_string()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The form's fields in the schema's order (`order`: the property names as the server listed
/// them; properties missing from it follow in name order).
pub(crate) fn fields(schema: &Value, order: &[String]) -> Vec<Field> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = order
        .iter()
        .filter(|n| properties.contains_key(*n))
        .collect();
    names.extend(properties.keys().filter(|k| !order.contains(k)));
    names
        .into_iter()
        .map(|name| Field {
            name: name.clone(),
            schema: properties[name].clone(),
            required: required.contains(&name.as_str()),
        })
        .collect()
}

/// Asks the form through `ask` (a prompt in, a line out; `None` at end of input). `say`
/// writes text for the user. The content returned is valid against `schema`.
pub(crate) async fn ask_form<A, F>(
    server: &str,
    message: &str,
    schema: &Value,
    order: &[String],
    mut ask: A,
    say: impl Fn(&str),
) -> Answer
where
    A: FnMut(String) -> F,
    F: Future<Output = Option<String>>,
{
    let fields = fields(schema, order);
    say(&format!(
        "\n{} asks: {}\n  {} — Enter keeps a field's default or leaves an optional field out; \
         Ctrl-D cancels.",
        clean(server),
        clean(message),
        crate::output::count(fields.len(), "field")
    ));
    loop {
        let Some(line) =
            ask("Answer? [Enter or a = accept and fill in, d = decline, c = cancel]: ".into())
                .await
        else {
            return Answer::Cancel;
        };
        match line.trim().to_lowercase().as_str() {
            "" | "a" | "accept" | "y" | "yes" => break,
            "d" | "decline" | "n" | "no" => return Answer::Decline,
            "c" | "cancel" => return Answer::Cancel,
            _ => say("  type a (accept), d (decline) or c (cancel)"),
        }
    }
    let total = fields.len();
    let mut content = Map::new();
    let mut todo: Vec<usize> = (0..total).collect();
    loop {
        for &i in &todo {
            let field = &fields[i];
            say(field.describe(i + 1, total).trim_end());
            loop {
                let Some(line) = ask(format!("  {}> ", clean(&field.name))).await else {
                    return Answer::Cancel;
                };
                match field.parse(&line) {
                    Ok(Some(value)) => {
                        content.insert(field.name.clone(), value);
                        break;
                    }
                    Ok(None) => {
                        content.remove(&field.name);
                        break;
                    }
                    Err(why) => say(&format!("  invalid: {why}; try again")),
                }
            }
        }
        // The whole form against the whole schema: what a per-field check cannot see.
        let whole = Value::Object(content.clone());
        match check(schema, &whole) {
            Ok(()) => return Answer::Accept(content),
            Err(why) => {
                say(&format!("  the form is not valid yet: {why}"));
                let named: Vec<usize> = (0..total)
                    .filter(|&i| why.contains(&format!("\"{}\"", fields[i].name)))
                    .collect();
                todo = if named.is_empty() {
                    (0..total).collect()
                } else {
                    named
                };
            }
        }
    }
}

/// The `ElicitResult` JSON for an answer.
pub(crate) fn result_json(answer: Answer) -> Value {
    match answer {
        Answer::Accept(content) => json!({"action": "accept", "content": content}),
        Answer::Decline => json!({"action": "decline"}),
        Answer::Cancel => json!({"action": "cancel"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Full name", "minLength": 2},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ratio": {"type": "number", "default": 0.5},
                "ok": {"type": "boolean"},
                "color": {"type": "string", "oneOf": [
                    {"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
                "size": {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
                "mail": {"type": "string", "format": "email"}
            },
            "required": ["name", "age"]
        })
    }

    fn field(name: &str) -> Field {
        fields(&schema(), &[])
            .into_iter()
            .find(|f| f.name == name)
            .expect("field")
    }

    #[test]
    fn answers_are_parsed_to_the_requested_type() {
        assert_eq!(field("age").parse("42"), Ok(Some(json!(42))));
        assert!(field("age").parse("4.5").is_err());
        assert!(field("age").parse("200").is_err(), "above the maximum");
        assert_eq!(field("ratio").parse("0.25"), Ok(Some(json!(0.25))));
        assert_eq!(
            field("ratio").parse(""),
            Ok(Some(json!(0.5))),
            "the default"
        );
        assert_eq!(field("ok").parse("Yes"), Ok(Some(json!(true))));
        assert_eq!(field("ok").parse("no"), Ok(Some(json!(false))));
        assert!(field("ok").parse("maybe").is_err());
        assert_eq!(field("ok").parse(""), Ok(None), "optional, no default");
        assert_eq!(
            field("color").parse("green"),
            Ok(Some(json!("g"))),
            "by title"
        );
        assert_eq!(field("color").parse("r"), Ok(Some(json!("r"))), "by value");
        assert!(field("color").parse("blue").is_err());
        assert_eq!(field("size").parse("Medium"), Ok(Some(json!("m"))));
        assert_eq!(field("tags").parse("y, x,y"), Ok(Some(json!(["y", "x"]))));
        assert!(field("tags").parse("x, w").is_err());
        assert!(field("name").parse("").is_err(), "required");
        assert!(field("name").parse("a").is_err(), "too short");
        assert!(field("mail").parse("not an address").is_err());
        assert_eq!(
            field("mail").parse("a@b.example"),
            Ok(Some(json!("a@b.example")))
        );
    }

    #[test]
    fn fields_keep_the_servers_order() {
        let order: Vec<String> = ["name", "age", "tags"].map(String::from).to_vec();
        let names: Vec<String> = fields(&schema(), &order)
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(&names[..3], ["name", "age", "tags"]);
        assert_eq!(names.len(), 8);
    }
}

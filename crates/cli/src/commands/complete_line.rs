//! Where on a `shell` line a server-completed value is being typed: a prompt argument's value
//! inside the JSON of `prompt NAME {...}`, the value of `complete NAME ARGUMENT`, or a resource
//! template's variable in the URI of `read SERVER URI`.
//!
//! Invariant: pure text inspection — nothing here talks to a server; a line it does not
//! recognise gives `None` (the shell then completes as before).

/// A value to ask a server to complete, and how the answers replace the typed text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Query {
    /// A prompt's qualified name or a resource template's URI template.
    pub target: String,
    /// The argument or variable.
    pub argument: String,
    /// What is typed of it so far.
    pub typed: String,
    /// Byte offset in the line where the replacement starts.
    pub start: usize,
    /// Written before each value in the replacement (a template's literal prefix).
    pub prefix: String,
    /// Written after each value (a closing quote, a space).
    pub suffix: &'static str,
}

/// The query for `before` (the line up to the cursor), split as the shell does: `earlier`
/// the finished words, `word` the one being typed, starting at byte `start`. `templates` are
/// the URI templates of the server a `read` names.
pub(crate) fn query(
    before: &str,
    earlier: &[&str],
    word: &str,
    start: usize,
    templates: &[String],
) -> Option<Query> {
    match earlier {
        ["complete", name, argument] => Some(Query {
            target: name.to_string(),
            argument: argument.to_string(),
            typed: word.to_string(),
            start,
            prefix: String::new(),
            suffix: " ",
        }),
        ["prompt", name, ..] => {
            let (key, typed) = json_value(before)?;
            Some(Query {
                target: name.to_string(),
                argument: key.to_string(),
                typed: typed.to_string(),
                start: before.len() - typed.len(),
                prefix: String::new(),
                suffix: "\"",
            })
        }
        ["read", _server] => templates.iter().find_map(|template| {
            let open = template.find('{')?;
            let literal = &template[..open];
            let rest = word.strip_prefix(literal)?;
            if rest.contains(['/', '?', '#']) {
                return None;
            }
            let argument = super::protocol::variables(&template[open..])
                .into_iter()
                .next()?;
            Some(Query {
                target: template.clone(),
                argument,
                typed: rest.to_string(),
                start,
                prefix: literal.to_string(),
                suffix: " ",
            })
        }),
        _ => None,
    }
}

/// In text ending inside a JSON string value, `"KEY": "PARTIAL` (no quote in PARTIAL): the key
/// and the partial value.
fn json_value(before: &str) -> Option<(&str, &str)> {
    let open = before.rfind('"')?;
    let typed = &before[open + 1..];
    let head = before[..open].trim_end().strip_suffix(':')?.trim_end();
    let head = head.strip_suffix('"')?;
    let key_start = head.rfind('"')? + 1;
    let key = &head[key_start..];
    // The key's opening quote follows `{` or `,`: a value string would follow `:`.
    let ahead = head[..key_start - 1].trim_end();
    if !(ahead.ends_with('{') || ahead.ends_with(',')) {
        return None;
    }
    Some((key, typed))
}

/// Where the word being typed at the end of `before` starts: after its last whitespace
/// character, whatever that character's width (a no-break space is two bytes).
pub(crate) fn word_start(before: &str) -> usize {
    before
        .char_indices()
        .rfind(|(_, c)| c.is_whitespace())
        .map_or(0, |(i, c)| i + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_starts_after_any_whitespace() {
        assert_eq!(word_start("call mc"), 5);
        assert_eq!(word_start("call\u{a0}mc"), 6);
        assert_eq!(word_start("mc"), 0);
        assert_eq!(word_start("call "), 5);
    }

    fn ask(line: &str, templates: &[&str]) -> Option<Query> {
        let start = word_start(line);
        let earlier: Vec<&str> = line[..start].split_whitespace().collect();
        let templates: Vec<String> = templates.iter().map(|t| t.to_string()).collect();
        query(line, &earlier, &line[start..], start, &templates)
    }

    #[test]
    fn values_being_typed_are_found() {
        let q = ask(r#"prompt mcp__fx__greeting {"name": "Gr"#, &[]).expect("a prompt value");
        assert_eq!((q.argument.as_str(), q.typed.as_str()), ("name", "Gr"));
        assert_eq!(q.start, r#"prompt mcp__fx__greeting {"name": ""#.len());
        let q = ask(r#"prompt p {"a": "x", "b":"y"#, &[]).expect("the second value");
        assert_eq!((q.argument.as_str(), q.typed.as_str()), ("b", "y"));
        // A key being typed, or a finished value, is not a value to complete.
        assert!(ask(r#"prompt p {"na"#, &[]).is_none());
        assert!(ask(r#"prompt p {"a": "x", "#, &[]).is_none());
        let q = ask("complete mcp__fx__greeting name A", &[]).expect("complete");
        assert_eq!((q.argument.as_str(), q.typed.as_str()), ("name", "A"));
        let q = ask("read fx fixture://items/4", &["fixture://items/{id}"]).expect("a variable");
        assert_eq!(
            (q.argument.as_str(), q.typed.as_str(), q.prefix.as_str()),
            ("id", "4", "fixture://items/")
        );
        assert!(ask("read fx fixture://other/4", &["fixture://items/{id}"]).is_none());
    }
}

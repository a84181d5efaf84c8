//! The YAML frontmatter of a `SKILL.md`, read by a strict subset of YAML 1.2 (core schema):
//! block mappings and sequences, plain, quoted and block (`|`, `>`) scalars, single-line flow
//! lists.
//!
//! Invariant: anything outside that subset (anchors, aliases, tags, multi-line quoted or flow
//! values, ...) is an error naming the line, never a guess, so a skill whose frontmatter cannot
//! be read exactly is never loaded.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Number, Value};

/// Deepest nesting the frontmatter parser accepts.
const MAX_DEPTH: usize = 16;

/// Why the frontmatter of a `SKILL.md` could not be read exactly. The text is what the user
/// sees (it names the line of the file, the opening `---` being line 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrontmatterError {
    /// The file does not open with a `---` line.
    #[error("SKILL.md does not begin with a `---` line")]
    NoOpening,
    /// No `---` line closes the frontmatter.
    #[error("the frontmatter has no closing `---` line")]
    NoClosing,
    /// The frontmatter holds no field.
    #[error("the frontmatter is empty")]
    Empty,
    /// Nested deeper than the parser accepts (at this line, when one is left).
    #[error("{}nesting is too deep", at_line(*.line))]
    TooDeep {
        /// The line the nesting went too deep at.
        line: Option<usize>,
    },
    /// YAML outside the accepted subset, or not YAML, at this line.
    #[error("line {line}: {message}")]
    Line {
        /// The line of the `SKILL.md` file.
        line: usize,
        /// What is wrong there.
        message: String,
    },
}

impl FrontmatterError {
    /// The line of the `SKILL.md` file the error is at, if it is at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::TooDeep { line } => *line,
            Self::Line { line, .. } => Some(*line),
            Self::NoOpening | Self::NoClosing | Self::Empty => None,
        }
    }
}

fn at_line(line: Option<usize>) -> String {
    line.map(|line| format!("line {line}: "))
        .unwrap_or_default()
}

/// The frontmatter of a `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frontmatter {
    /// Every field of the frontmatter, as JSON.
    pub fields: Map<String, Value>,
    #[serde(skip)]
    body_offset: usize,
}

impl Frontmatter {
    /// The `name` field, if it is a string.
    pub fn name(&self) -> Option<&str> {
        self.fields.get("name").and_then(Value::as_str)
    }

    /// The `description` field, if it is a string.
    pub fn description(&self) -> Option<&str> {
        self.fields.get("description").and_then(Value::as_str)
    }

    /// The Markdown after the closing `---` line of `skill_md`, the text this was parsed from.
    pub fn body<'a>(&self, skill_md: &'a str) -> &'a str {
        skill_md.get(self.body_offset..).unwrap_or("")
    }
}

/// Parse the YAML frontmatter of a `SKILL.md`: the text must open with a `---` line (after an
/// optional byte-order mark) and the block ends at the next line that is `---` (trailing spaces
/// allowed). The block must be a mapping. See the module doc for the YAML accepted.
pub fn parse_frontmatter(skill_md: &str) -> Result<Frontmatter, FrontmatterError> {
    let (bom, text) = match skill_md.strip_prefix('\u{feff}') {
        Some(rest) => ('\u{feff}'.len_utf8(), rest),
        None => (0, skill_md),
    };
    let after_open = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or(FrontmatterError::NoOpening)?;
    let open_len = text.len() - after_open.len();
    let mut offset = 0;
    let mut closing = None;
    for line in after_open.split_inclusive('\n') {
        let content = line.strip_suffix('\n').unwrap_or(line);
        let content = content.strip_suffix('\r').unwrap_or(content);
        if content.trim_end_matches([' ', '\t']) == "---" {
            closing = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (yaml_end, body_start) = closing.ok_or(FrontmatterError::NoClosing)?;
    let fields = Parser::new(&after_open[..yaml_end]).document()?;
    Ok(Frontmatter {
        fields,
        body_offset: bom + open_len + body_start,
    })
}

#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    /// Line number in the SKILL.md file (the opening `---` is line 1).
    no: usize,
    /// Leading spaces.
    indent: usize,
    /// The rest of the line, without the trailing `\r`.
    text: &'a str,
}

impl Line<'_> {
    fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }

    fn is_insignificant(&self) -> bool {
        self.is_blank() || self.text.starts_with('#')
    }

    fn error(&self, message: impl fmt::Display) -> FrontmatterError {
        FrontmatterError::Line {
            line: self.no,
            message: message.to_string(),
        }
    }
}

fn is_seq_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ") || text.starts_with("-\t")
}

#[derive(Clone, Copy, PartialEq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(yaml: &'a str) -> Self {
        let lines = yaml
            .split('\n')
            .enumerate()
            .map(|(index, raw)| {
                let raw = raw.strip_suffix('\r').unwrap_or(raw);
                let text = raw.trim_start_matches(' ');
                Line {
                    no: index + 2,
                    indent: raw.len() - text.len(),
                    text,
                }
            })
            .collect();
        Self { lines, pos: 0 }
    }

    fn peek_content(&mut self) -> Option<Line<'a>> {
        while let Some(line) = self.lines.get(self.pos) {
            if !line.is_insignificant() {
                return Some(*line);
            }
            self.pos += 1;
        }
        None
    }

    fn document(&mut self) -> Result<Map<String, Value>, FrontmatterError> {
        let first = self.peek_content().ok_or(FrontmatterError::Empty)?;
        if first.indent != 0 {
            return Err(first.error("unexpected indentation"));
        }
        if is_seq_item(first.text) {
            return Err(first.error("the frontmatter must be a mapping of fields, not a list"));
        }
        let map = self.mapping(0, 0)?;
        match self.peek_content() {
            Some(line) => Err(line.error("unexpected indentation")),
            None => Ok(map),
        }
    }

    fn block_node(&mut self, indent: usize, depth: usize) -> Result<Value, FrontmatterError> {
        if depth > MAX_DEPTH {
            let line = self.peek_content();
            return Err(FrontmatterError::TooDeep {
                line: line.map(|line| line.no),
            });
        }
        match self.peek_content() {
            Some(line) if is_seq_item(line.text) => self.sequence(indent, depth),
            _ => self.mapping(indent, depth).map(Value::Object),
        }
    }

    fn mapping(
        &mut self,
        indent: usize,
        depth: usize,
    ) -> Result<Map<String, Value>, FrontmatterError> {
        let mut map = Map::new();
        while let Some(line) = self.peek_content() {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(line.error("unexpected indentation"));
            }
            if line.text.starts_with('\t') {
                return Err(line.error("tabs are not allowed in indentation"));
            }
            if is_seq_item(line.text) {
                return Err(line.error("a list item where a field was expected"));
            }
            let (key, rest) = split_key(line)?;
            self.pos += 1;
            if map.contains_key(&key) {
                return Err(line.error(format_args!("field {key:?} appears twice")));
            }
            let value = self.value(line, rest, indent, depth, true)?;
            map.insert(key, value);
        }
        Ok(map)
    }

    fn sequence(&mut self, indent: usize, depth: usize) -> Result<Value, FrontmatterError> {
        let mut items = Vec::new();
        while let Some(line) = self.peek_content() {
            if line.indent < indent || !is_seq_item(line.text) {
                break;
            }
            if line.indent > indent {
                return Err(line.error("unexpected indentation"));
            }
            self.pos += 1;
            let rest = line.text[1..].trim_start_matches([' ', '\t']);
            items.push(self.value(line, rest, indent, depth, false)?);
        }
        Ok(Value::Array(items))
    }

    /// The value after `key:` or `-` on `line` (`rest`, possibly empty), with its node at
    /// `indent`.
    fn value(
        &mut self,
        line: Line<'a>,
        rest: &'a str,
        indent: usize,
        depth: usize,
        in_mapping: bool,
    ) -> Result<Value, FrontmatterError> {
        if !rest.is_empty() && !rest.starts_with('#') {
            return self.inline(line, rest, indent);
        }
        match self.peek_content() {
            Some(next) if next.indent > indent => self.block_node(next.indent, depth + 1),
            Some(next) if in_mapping && next.indent == indent && is_seq_item(next.text) => {
                if depth + 1 > MAX_DEPTH {
                    return Err(FrontmatterError::TooDeep {
                        line: Some(next.no),
                    });
                }
                self.sequence(indent, depth + 1)
            }
            _ => Ok(Value::Null),
        }
    }

    fn inline(
        &mut self,
        line: Line<'a>,
        rest: &'a str,
        indent: usize,
    ) -> Result<Value, FrontmatterError> {
        let mut chars = rest.chars();
        let first = chars.next().unwrap_or(' ');
        let second = chars.next();
        match first {
            '"' => {
                let (value, after) = double_quoted(line, rest)?;
                trailing(line, after)?;
                Ok(Value::String(value))
            }
            '\'' => {
                let (value, after) = single_quoted(line, rest)?;
                trailing(line, after)?;
                Ok(Value::String(value))
            }
            '[' => flow_sequence(line, rest),
            '{' => {
                let (before, _) = cut_comment(rest);
                if before.trim_end() == "{}" {
                    Ok(Value::Object(Map::new()))
                } else {
                    Err(line.error("flow mappings (`{...}`) are not supported"))
                }
            }
            '|' | '>' => self.block_scalar(line, rest, indent),
            '&' | '*' | '!' => Err(line.error("anchors, aliases and tags are not supported")),
            '%' | '@' | '`' | ',' | ']' | '}' => Err(line.error(format_args!(
                "a value cannot start with {first:?}; quote it"
            ))),
            '-' | '?' | ':' if matches!(second, None | Some(' ' | '\t')) => {
                Err(line.error("a nested list or mapping must start on its own line"))
            }
            _ => self.plain(line, rest, indent),
        }
    }

    fn plain(
        &mut self,
        line: Line<'a>,
        rest: &'a str,
        indent: usize,
    ) -> Result<Value, FrontmatterError> {
        let (first, mut commented) = cut_comment(rest);
        let first = first.trim_end();
        check_plain(line, first)?;
        let mut text = first.to_string();
        let mut breaks = 0;
        while !commented {
            let Some(next) = self.lines.get(self.pos).copied() else {
                break;
            };
            if next.is_blank() {
                breaks += 1;
                self.pos += 1;
                continue;
            }
            if next.indent <= indent || next.text.starts_with('#') {
                break;
            }
            let (part, comment) = cut_comment(next.text);
            let part = part.trim();
            check_plain(next, part)?;
            if breaks == 0 {
                text.push(' ');
            } else {
                text.extend(std::iter::repeat_n('\n', breaks));
            }
            breaks = 0;
            text.push_str(part);
            commented = comment;
            self.pos += 1;
        }
        resolve(&text).map_err(|message| line.error(message))
    }

    fn block_scalar(
        &mut self,
        line: Line<'a>,
        rest: &'a str,
        indent: usize,
    ) -> Result<Value, FrontmatterError> {
        let literal = rest.starts_with('|');
        let header = &rest[1..];
        let (chomp, header) = match header.chars().next() {
            Some('-') => (Chomp::Strip, &header[1..]),
            Some('+') => (Chomp::Keep, &header[1..]),
            _ => (Chomp::Clip, header),
        };
        if header.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(line.error("explicit indentation indicators are not supported"));
        }
        let (before, _) = cut_comment(header);
        if !before.trim().is_empty() || (!header.is_empty() && !header.starts_with([' ', '\t'])) {
            return Err(line.error("unexpected text after a block scalar indicator"));
        }
        let mut content_indent = None;
        let mut lines: Vec<String> = Vec::new();
        while let Some(next) = self.lines.get(self.pos).copied() {
            if next.is_blank() {
                lines.push(String::new());
                self.pos += 1;
                continue;
            }
            let at = *content_indent.get_or_insert(next.indent);
            if at <= indent || next.indent < at {
                break;
            }
            let mut content = " ".repeat(next.indent - at);
            content.push_str(next.text);
            lines.push(content);
            self.pos += 1;
        }
        let last = lines.iter().rposition(|content| !content.is_empty());
        let (content, trailing_blank) = match last {
            Some(index) => (&lines[..=index], lines.len() - index - 1),
            None => (&lines[..0], lines.len()),
        };
        let mut text = if literal {
            content.join("\n")
        } else {
            fold(line, content)?
        };
        if chomp != Chomp::Strip && !content.is_empty() {
            text.push('\n');
        }
        if chomp == Chomp::Keep {
            text.extend(std::iter::repeat_n('\n', trailing_blank));
        }
        Ok(Value::String(text))
    }
}

/// Folded block scalar content: single line breaks become spaces, `n` blank lines become `n`
/// line breaks.
fn fold(line: Line<'_>, content: &[String]) -> Result<String, FrontmatterError> {
    let mut text = String::new();
    let mut blanks = 0;
    let mut started = false;
    for part in content {
        if part.is_empty() {
            blanks += 1;
            continue;
        }
        if part.starts_with([' ', '\t']) {
            return Err(line.error("more-indented lines in a folded (`>`) value are not supported"));
        }
        if started && blanks == 0 {
            text.push(' ');
        }
        text.extend(std::iter::repeat_n('\n', blanks));
        blanks = 0;
        started = true;
        text.push_str(part);
    }
    Ok(text)
}

/// Split `key: rest` (rest trimmed at the start, possibly empty or a comment).
fn split_key(line: Line<'_>) -> Result<(String, &str), FrontmatterError> {
    let text = line.text;
    if text.starts_with(['"', '\'']) {
        let (key, after) = if text.starts_with('"') {
            double_quoted(line, text)?
        } else {
            single_quoted(line, text)?
        };
        let after = after.trim_start_matches([' ', '\t']);
        let rest = after
            .strip_prefix(':')
            .filter(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
            .ok_or_else(|| line.error("expected `:` after a quoted field name"))?;
        return Ok((key, rest.trim_start_matches([' ', '\t'])));
    }
    let bytes = text.as_bytes();
    let colon = (0..bytes.len())
        .find(|&i| bytes[i] == b':' && matches!(bytes.get(i + 1), None | Some(b' ' | b'\t')))
        .ok_or_else(|| line.error("expected `field: value`"))?;
    let key = text[..colon].trim_end_matches([' ', '\t']);
    if key.is_empty() {
        return Err(line.error("a field has no name"));
    }
    if key.starts_with([
        '?', '&', '*', '!', '|', '>', '%', '@', '`', '[', ']', '{', '}', ',', '#',
    ]) || key.contains(" #")
        || key.contains('\t')
    {
        return Err(line.error(format_args!("unsupported field name {key:?}")));
    }
    Ok((
        key.to_string(),
        text[colon + 1..].trim_start_matches([' ', '\t']),
    ))
}

/// Split off a comment: a `#` at the start or after whitespace. Returns the text before it and
/// whether there was one.
fn cut_comment(text: &str) -> (&str, bool) {
    let bytes = text.as_bytes();
    let hash = (0..bytes.len())
        .find(|&i| bytes[i] == b'#' && (i == 0 || matches!(bytes[i - 1], b' ' | b'\t')));
    match hash {
        Some(i) => (&text[..i], true),
        None => (text, false),
    }
}

fn check_plain(line: Line<'_>, text: &str) -> Result<(), FrontmatterError> {
    if text.contains(": ") || text.contains(":\t") || text.ends_with(':') {
        return Err(line.error("`: ` inside an unquoted value; quote the value"));
    }
    Ok(())
}

/// After a closing quote or bracket, only whitespace and a comment may follow.
fn trailing(line: Line<'_>, after: &str) -> Result<(), FrontmatterError> {
    let rest = after.trim_start_matches([' ', '\t']);
    if rest.is_empty() || (rest.starts_with('#') && rest.len() < after.len()) {
        Ok(())
    } else {
        Err(line.error("unexpected text after a quoted value"))
    }
}

fn double_quoted<'t>(line: Line<'_>, text: &'t str) -> Result<(String, &'t str), FrontmatterError> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[index + 1..])),
            '\\' => {
                let (_, escape) = chars
                    .next()
                    .ok_or_else(|| line.error("multi-line quoted values are not supported"))?;
                let hex_len = match escape {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    _ => 0,
                };
                if hex_len > 0 {
                    let digits: String = chars.by_ref().take(hex_len).map(|(_, c)| c).collect();
                    let code = (digits.len() == hex_len)
                        .then(|| u32::from_str_radix(&digits, 16).ok())
                        .flatten()
                        .and_then(char::from_u32)
                        .ok_or_else(|| {
                            line.error(format_args!("invalid escape \\{escape}{digits}"))
                        })?;
                    value.push(code);
                    continue;
                }
                value.push(match escape {
                    '0' => '\0',
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    't' | '\t' => '\t',
                    'n' => '\n',
                    'v' => '\u{b}',
                    'f' => '\u{c}',
                    'r' => '\r',
                    'e' => '\u{1b}',
                    ' ' => ' ',
                    '"' => '"',
                    '/' => '/',
                    '\\' => '\\',
                    'N' => '\u{85}',
                    '_' => '\u{a0}',
                    'L' => '\u{2028}',
                    'P' => '\u{2029}',
                    other => return Err(line.error(format_args!("invalid escape \\{other}"))),
                });
            }
            other => value.push(other),
        }
    }
    Err(line.error("multi-line quoted values are not supported"))
}

fn single_quoted<'t>(line: Line<'_>, text: &'t str) -> Result<(String, &'t str), FrontmatterError> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1).peekable();
    while let Some((index, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().is_some_and(|&(_, next)| next == '\'') {
                chars.next();
                value.push('\'');
            } else {
                return Ok((value, &text[index + 1..]));
            }
        } else {
            value.push(c);
        }
    }
    Err(line.error("multi-line quoted values are not supported"))
}

/// A single-line flow list of scalars: `[a, "b", 3]`.
fn flow_sequence(line: Line<'_>, text: &str) -> Result<Value, FrontmatterError> {
    let mut items = Vec::new();
    let mut rest = &text[1..];
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(']') {
            trailing(line, after)?;
            return Ok(Value::Array(items));
        }
        let (item, after) = match rest.chars().next() {
            None | Some('#') => return Err(line.error("multi-line flow lists are not supported")),
            Some('"') => {
                let (value, after) = double_quoted(line, rest)?;
                (Value::String(value), after)
            }
            Some('\'') => {
                let (value, after) = single_quoted(line, rest)?;
                (Value::String(value), after)
            }
            Some('[' | '{') => return Err(line.error("nested flow collections are not supported")),
            Some(_) => {
                let end = rest.find([',', ']', '[', '{', '}']).unwrap_or(rest.len());
                let item = rest[..end].trim_end_matches([' ', '\t']);
                if item.is_empty() {
                    return Err(line.error("an empty item in a flow list"));
                }
                if item.contains(" #") || item.contains("\t#") {
                    return Err(line.error("multi-line flow lists are not supported"));
                }
                check_plain(line, item)?;
                (
                    resolve(item).map_err(|message| line.error(message))?,
                    &rest[end..],
                )
            }
        };
        items.push(item);
        rest = after.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if rest.is_empty() || rest.starts_with('#') {
            return Err(line.error("multi-line flow lists are not supported"));
        } else if !rest.starts_with(']') {
            return Err(line.error("expected `,` or `]` in a flow list"));
        }
    }
}

/// Resolve a plain scalar with the YAML 1.2 core schema.
fn resolve(text: &str) -> Result<Value, String> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        _ => {}
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return Err(format!("{text} has no JSON equivalent"));
    }
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(value) = text.parse::<i64>() {
            return Ok(Value::Number(value.into()));
        }
        if let Ok(value) = text.trim_start_matches('+').parse::<u64>() {
            return Ok(Value::Number(value.into()));
        }
        return float(text);
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8)] {
        if let Some(digits) = text.strip_prefix(prefix)
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_digit(radix))
        {
            return u64::from_str_radix(digits, radix)
                .map(|value| Value::Number(value.into()))
                .map_err(|_| format!("{text} is too large"));
        }
    }
    if is_float(unsigned) {
        return float(text);
    }
    Ok(Value::String(text.to_string()))
}

fn float(text: &str) -> Result<Value, String> {
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .ok_or_else(|| format!("{text} has no JSON equivalent"))
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float(text: &str) -> bool {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(index) => (&text[..index], Some(&text[index + 1..])),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => digits(fraction),
        Some((whole, fraction)) => digits(whole) && (fraction.is_empty() || digits(fraction)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(yaml: &str) -> Map<String, Value> {
        parse_frontmatter(&format!("---\n{yaml}---\nbody\n"))
            .expect("parses")
            .fields
    }

    fn parse_error(yaml: &str) -> String {
        parse_frontmatter(&format!("---\n{yaml}---\n"))
            .expect_err("must not parse")
            .to_string()
    }

    mod parser {
        use super::*;

        #[test]
        fn scalars_and_comments() {
            let parsed = fields(
                "# leading comment\nname: pdf  # trailing\nurl: http://x/#y\nquoted: \"a: b # c \\u00e9\\n\"\nsingle: 'it''s'\nempty: ''\nnull1:\nnull2: ~\nyes: true\nno: False\nint: -12\nhex: 0x1F\noct: 0o17\nfloat: 1.5e3\nver: 1.10.0\n",
            );
            assert_eq!(
                Value::Object(parsed),
                json!({
                    "name": "pdf", "url": "http://x/#y", "quoted": "a: b # c é\n",
                    "single": "it's", "empty": "", "null1": null, "null2": null,
                    "yes": true, "no": false, "int": -12, "hex": 31, "oct": 15,
                    "float": 1500.0, "ver": "1.10.0",
                })
            );
        }

        #[test]
        fn multi_line_plain_values_fold() {
            let parsed = fields("description: one\n  two\n\n  three\nnext: x\n");
            assert_eq!(parsed["description"], json!("one two\nthree"));
            assert_eq!(parsed["next"], json!("x"));
        }

        #[test]
        fn block_scalars() {
            let parsed = fields(
                "lit: |\n  a\n   b\n\n  c\n\nstrip: |-\n  a\nkeep: |+\n  a\n\nfold: >\n  a\n  b\n\n  c\nfoldstrip: >- # comment\n  a\n  b\nafter: x\n",
            );
            assert_eq!(parsed["lit"], json!("a\n b\n\nc\n"));
            assert_eq!(parsed["strip"], json!("a"));
            assert_eq!(parsed["keep"], json!("a\n\n"));
            assert_eq!(parsed["fold"], json!("a b\nc\n"));
            assert_eq!(parsed["foldstrip"], json!("a b"));
            assert_eq!(parsed["after"], json!("x"));
        }

        #[test]
        fn nested_mappings_and_lists() {
            let parsed = fields(
                "metadata:\n  author: alice\n  tags:\n    - a\n    - 'b c'\nlist:\n- x\n- 2\nflow: [Read, \"Write\", 3, ]\nnone: []\nobj: {}\n",
            );
            assert_eq!(
                Value::Object(parsed),
                json!({
                    "metadata": { "author": "alice", "tags": ["a", "b c"] },
                    "list": ["x", 2], "flow": ["Read", "Write", 3], "none": [], "obj": {},
                })
            );
        }

        #[test]
        fn crlf_and_byte_order_mark() {
            let md = "\u{feff}---\r\nname: pdf\r\ndescription: |\r\n  a\r\n---  \r\nbody\r\n";
            let parsed = parse_frontmatter(md).expect("parses");
            assert_eq!(parsed.name(), Some("pdf"));
            assert_eq!(parsed.description(), Some("a\n"));
            assert_eq!(parsed.body(md), "body\r\n");
        }

        #[test]
        fn rejects_missing_delimiters() {
            for (md, expected) in [
                ("name: x\n", FrontmatterError::NoOpening),
                (" ---\nname: x\n---\n", FrontmatterError::NoOpening),
                ("---\nname: x\n", FrontmatterError::NoClosing),
                ("--- \nname: x\n---\n", FrontmatterError::NoOpening),
                ("---\n---\n", FrontmatterError::Empty),
            ] {
                assert_eq!(parse_frontmatter(md), Err(expected), "{md:?}");
            }
        }

        #[test]
        fn rejects_unsupported_or_invalid_yaml() {
            for (yaml, expected) in [
                ("a: b: c\n", "`: `"),
                ("a: b:\n", "`: `"),
                ("a: 1\na: 2\n", "twice"),
                ("a: &x 1\n", "anchors"),
                ("a: *x\n", "anchors"),
                ("a: !!str 1\n", "tags"),
                ("a: \"open\n  close\"\n", "multi-line quoted"),
                ("a: [1, 2\n", "multi-line flow"),
                ("a: [[1]]\n", "nested flow"),
                ("a: {b: 1}\n", "flow mappings"),
                ("a: |2\n  x\n", "indentation indicators"),
                ("- a\n", "not a list"),
                ("a: 1\n  b: 2\n", "`: `"),
                ("a:\n  b: 1\n   c: 2\n", "`: `"),
                ("a:\n  b:\n    - x\n   c: 1\n", "unexpected indentation"),
                (" a: 1\n", "unexpected indentation"),
                ("a:\n\t- x\n", "tabs"),
                ("just text\n", "expected `field: value`"),
                ("a: - b\n", "its own line"),
                ("a: >\n  x\n    more\n", "more-indented"),
                ("a: .nan\n", "no JSON equivalent"),
                ("a: \"x\" y\n", "after a quoted value"),
                ("a: \"\\q\"\n", "invalid escape"),
                ("a:\n  - x\n  b: 1\n", "unexpected indentation"),
            ] {
                let error = parse_error(yaml);
                assert!(error.contains(expected), "{yaml:?}: {error}");
            }
        }

        #[test]
        fn rejects_deep_nesting() {
            let yaml: String = (0..40)
                .map(|depth| format!("{}k:\n", " ".repeat(depth)))
                .collect();
            let error = parse_frontmatter(&format!("---\n{yaml}---\n")).expect_err("too deep");
            assert!(
                matches!(error, FrontmatterError::TooDeep { line: Some(_) }),
                "{error}"
            );
            assert!(error.to_string().contains("too deep"), "{error}");
        }

        #[test]
        fn error_names_the_file_line() {
            let error = parse_frontmatter("---\nok: 1\nbad: &x\n---\n").expect_err("anchor");
            assert_eq!(error.line(), Some(3));
            assert!(error.to_string().starts_with("line 3:"), "{error}");
        }
    }
}

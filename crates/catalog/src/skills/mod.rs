//! Skills (SEP-2640, extension `io.modelcontextprotocol/skills`) as plain data: the entries a
//! server lists with `skills/list`, the checks a host runs when it loads one, and a search index
//! over every server's skills.
//!
//! Invariant: a skill is loaded only when every file matches its listed digest and size and its
//! frontmatter matches the listing; otherwise it is not loaded and the reason ([`SkillMismatch`])
//! says which server, skill and file, and what differed.
//!
//! Skills are listed at connection; their files are fetched only when a skill is loaded, never
//! ahead of need. Loading reads `SKILL.md` first and checks it with
//! [`SkillEntry::verify_skill_md`] (size, then digest, then the YAML frontmatter field by field);
//! only a skill that passes may have its other files read, each checked with [`verify_file`].
//!
//! The frontmatter parser is a strict subset of YAML 1.2 (core schema): block mappings and
//! sequences, plain, quoted and block (`|`, `>`) scalars, single-line flow lists. Anything else
//! (anchors, aliases, tags, multi-line quoted or flow values, ...) is an error, so a skill whose
//! frontmatter cannot be read exactly is never loaded.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::sync::Arc;

use rmcp::model::{Skill, SkillResources, is_sha256_digest, sha256_digest};
use serde::Serialize;
use serde_json::{Map, Number, Value};

pub use rmcp::model::SKILLS_EXTENSION_ID;

/// Longest value rendering in a mismatch message, in characters.
const MAX_SHOWN: usize = 120;
/// Deepest nesting the frontmatter parser accepts.
const MAX_DEPTH: usize = 16;

/// One file of a skill as the listing describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedFile {
    pub server: String,
    /// The skill's name (from the listed frontmatter).
    pub skill: String,
    pub uri: String,
    /// `sha256:` and 64 lowercase hex digits, as listed (checked at verification).
    pub digest: String,
    /// Length in bytes, as listed.
    pub size: u64,
}

impl ListedFile {
    fn location(&self) -> SkillFile {
        SkillFile {
            server: self.server.clone(),
            skill: self.skill.clone(),
            uri: self.uri.clone(),
        }
    }
}

/// The files of a listed skill: a manifest, or `"dynamic"` (no stable digests to check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListedFiles {
    Files(Vec<ListedFile>),
    Dynamic,
}

/// A skill as one server listed it.
#[derive(Debug, Clone, Serialize)]
pub struct SkillEntry {
    pub server: String,
    pub name: String,
    pub description: String,
    /// URI of the skill's `SKILL.md`.
    pub uri: String,
    /// Every listed frontmatter field, `name` and `description` included.
    pub frontmatter: Map<String, Value>,
    pub files: ListedFiles,
}

/// A listed skill that breaks a structural rule of SEP-2640; it never enters the catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server {server:?} listed an invalid skill {}: {reason}", shown_str(.uri))]
pub struct InvalidSkill {
    pub server: String,
    pub uri: String,
    pub reason: String,
}

impl SkillEntry {
    /// Build the entry for `skill` as listed by `server`, after rmcp's structural checks (URI ends
    /// in `/SKILL.md` and names the skill, valid name, manifest lists `SKILL.md` once, digests
    /// well formed, no file outside the skill).
    pub fn new(server: &str, skill: Skill) -> Result<Self, InvalidSkill> {
        let invalid = |reason: String| InvalidSkill {
            server: server.to_string(),
            uri: skill.uri.clone(),
            reason,
        };
        skill
            .validate()
            .map_err(|error| invalid(error.to_string()))?;
        let name = skill.frontmatter.name.clone();
        let files = match &skill.resources {
            SkillResources::Files(files) => ListedFiles::Files(
                files
                    .iter()
                    .map(|file| ListedFile {
                        server: server.to_string(),
                        skill: name.clone(),
                        uri: file.uri.clone(),
                        digest: file.digest.clone(),
                        size: file.size,
                    })
                    .collect(),
            ),
            SkillResources::Dynamic => ListedFiles::Dynamic,
            _ => return Err(invalid("unknown kind of resource manifest".into())),
        };
        let mut frontmatter = skill.frontmatter.extra.clone();
        frontmatter.insert("name".into(), Value::String(name.clone()));
        frontmatter.insert(
            "description".into(),
            Value::String(skill.frontmatter.description.clone()),
        );
        Ok(Self {
            server: server.to_string(),
            name,
            description: skill.frontmatter.description.clone(),
            uri: skill.uri.clone(),
            frontmatter,
            files,
        })
    }

    /// The listed file at `uri` (exact string), if the manifest has one.
    pub fn listed_file(&self, uri: &str) -> Option<&ListedFile> {
        match &self.files {
            ListedFiles::Files(files) => files.iter().find(|file| file.uri == uri),
            ListedFiles::Dynamic => None,
        }
    }

    /// The listed files other than `SKILL.md`, to be read only after it verified.
    pub fn supporting_files(&self) -> impl Iterator<Item = &ListedFile> {
        let files = match &self.files {
            ListedFiles::Files(files) => files.as_slice(),
            ListedFiles::Dynamic => &[],
        };
        files.iter().filter(|file| file.uri != self.uri)
    }

    /// Check the bytes read for this skill's `SKILL.md`: size and digest against the manifest
    /// (skipped for a dynamic skill), UTF-8, then the frontmatter field by field against the
    /// listing. On success the parsed frontmatter is returned and the skill may be loaded.
    pub fn verify_skill_md(&self, bytes: &[u8]) -> Result<Frontmatter, SkillMismatch> {
        let at = self.location(&self.uri);
        if let ListedFiles::Files(_) = self.files {
            let listed = self
                .listed_file(&self.uri)
                .ok_or_else(|| SkillMismatch::NotListed { at: at.clone() })?;
            verify_file(listed, bytes)?;
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| SkillMismatch::NotUtf8 { at: at.clone() })?;
        let parsed = parse_frontmatter(text)
            .map_err(|reason| SkillMismatch::MalformedFrontmatter { at, reason })?;
        compare_frontmatter(self, &parsed)?;
        Ok(parsed)
    }

    /// Check the bytes read for another file of this skill against its manifest entry. A file
    /// the manifest does not list is refused; a dynamic skill has no digests to check.
    pub fn verify_supporting(&self, uri: &str, bytes: &[u8]) -> Result<(), SkillMismatch> {
        match &self.files {
            ListedFiles::Dynamic => Ok(()),
            ListedFiles::Files(_) => match self.listed_file(uri) {
                Some(listed) => verify_file(listed, bytes),
                None => Err(SkillMismatch::NotListed {
                    at: self.location(uri),
                }),
            },
        }
    }

    fn location(&self, uri: &str) -> SkillFile {
        SkillFile {
            server: self.server.clone(),
            skill: self.name.clone(),
            uri: uri.to_string(),
        }
    }
}

/// Entries for one server's complete `skills/list`: valid skills in listing order, and the
/// skills left out with their reasons (structurally invalid, or a URI listed twice).
pub fn entries_from_listing(
    server: &str,
    skills: Vec<Skill>,
) -> (Vec<SkillEntry>, Vec<InvalidSkill>) {
    let mut entries: Vec<SkillEntry> = Vec::with_capacity(skills.len());
    let mut invalid = Vec::new();
    let mut seen = HashSet::with_capacity(skills.len());
    for skill in skills {
        if !seen.insert(skill.uri.clone()) {
            invalid.push(InvalidSkill {
                server: server.to_string(),
                uri: skill.uri.clone(),
                reason: "the URI is listed twice".into(),
            });
            continue;
        }
        match SkillEntry::new(server, skill) {
            Ok(entry) => entries.push(entry),
            Err(error) => invalid.push(error),
        }
    }
    (entries, invalid)
}

/// Where a mismatch was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    pub server: String,
    pub skill: String,
    pub uri: String,
}

impl fmt::Display for SkillFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "skill {} from server {:?} was not loaded: {}",
            shown_str(&self.skill),
            self.server,
            shown_str(&self.uri)
        )
    }
}

/// One frontmatter field that differs; `None` means the field is absent (or null).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDifference {
    pub field: String,
    pub listed: Option<Value>,
    pub file: Option<Value>,
}

impl fmt::Display for FieldDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |value: &Option<Value>| match value {
            Some(value) => shown(&value.to_string()),
            None => "nothing".to_string(),
        };
        write!(
            f,
            "{}: SKILL.md has {}, the listing has {}",
            shown_str(&self.field),
            show(&self.file),
            show(&self.listed)
        )
    }
}

/// Why a skill was not loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SkillMismatch {
    #[error("{at} is not in the skill's listed files")]
    NotListed { at: SkillFile },
    #[error("{at} has a malformed listed digest {} (expected sha256: and 64 lowercase hex digits)", shown_str(.digest))]
    MalformedDigest { at: SkillFile, digest: String },
    #[error("{at} is {actual} bytes, the listing says {listed}")]
    Size {
        at: SkillFile,
        listed: u64,
        actual: u64,
    },
    #[error("{at} has digest {actual}, the listing says {}", shown_str(.listed))]
    Digest {
        at: SkillFile,
        listed: String,
        actual: String,
    },
    #[error("{at} is not valid UTF-8")]
    NotUtf8 { at: SkillFile },
    #[error("{at} has unreadable frontmatter: {reason}")]
    MalformedFrontmatter { at: SkillFile, reason: String },
    #[error("{at} has frontmatter that differs from the listing: {}", join(.differences))]
    Frontmatter {
        at: SkillFile,
        differences: Vec<FieldDifference>,
    },
}

impl SkillMismatch {
    /// The server, skill and file the mismatch was found in.
    pub fn location(&self) -> &SkillFile {
        match self {
            Self::NotListed { at }
            | Self::MalformedDigest { at, .. }
            | Self::Size { at, .. }
            | Self::Digest { at, .. }
            | Self::NotUtf8 { at }
            | Self::MalformedFrontmatter { at, .. }
            | Self::Frontmatter { at, .. } => at,
        }
    }
}

fn join(differences: &[FieldDifference]) -> String {
    differences
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A server-provided string, quoted and escaped, cut to [`MAX_SHOWN`] characters.
fn shown_str(text: &str) -> String {
    shown(&format!("{text:?}"))
}

fn shown(text: &str) -> String {
    if text.chars().count() <= MAX_SHOWN {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_SHOWN).collect();
    cut.push('…');
    cut
}

/// Check `bytes` against the listed size, then the listed digest (`sha256:` + lowercase hex of
/// the SHA-256 of the exact bytes). A wrong size fails without hashing.
pub fn verify_file(listed: &ListedFile, bytes: &[u8]) -> Result<(), SkillMismatch> {
    if !is_sha256_digest(&listed.digest) {
        return Err(SkillMismatch::MalformedDigest {
            at: listed.location(),
            digest: listed.digest.clone(),
        });
    }
    let actual = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if actual != listed.size {
        return Err(SkillMismatch::Size {
            at: listed.location(),
            listed: listed.size,
            actual,
        });
    }
    let digest = sha256_digest(bytes);
    if digest != listed.digest {
        return Err(SkillMismatch::Digest {
            at: listed.location(),
            listed: listed.digest.clone(),
            actual: digest,
        });
    }
    Ok(())
}

/// Compare the parsed `SKILL.md` frontmatter with the listing, field by field over the union of
/// both key sets (an absent field equals `null`; numbers compare by value, so `1` equals `1.0`).
/// Every differing field is reported.
pub fn compare_frontmatter(listed: &SkillEntry, parsed: &Frontmatter) -> Result<(), SkillMismatch> {
    let keys: BTreeSet<&String> = listed
        .frontmatter
        .keys()
        .chain(parsed.fields.keys())
        .collect();
    let present = |value: Option<&Value>| value.filter(|value| !value.is_null()).cloned();
    let differences: Vec<FieldDifference> = keys
        .into_iter()
        .filter_map(|key| {
            let listed_value = present(listed.frontmatter.get(key));
            let file_value = present(parsed.fields.get(key));
            let same = match (&listed_value, &file_value) {
                (Some(a), Some(b)) => values_equal(a, b),
                (None, None) => true,
                _ => false,
            };
            (!same).then(|| FieldDifference {
                field: key.clone(),
                listed: listed_value,
                file: file_value,
            })
        })
        .collect();
    if differences.is_empty() {
        Ok(())
    } else {
        Err(SkillMismatch::Frontmatter {
            at: listed.location(&listed.uri),
            differences,
        })
    }
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| values_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| values_equal(a, b)))
        }
        _ => a == b,
    }
}

fn numbers_equal(x: &Number, y: &Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    match (x.as_f64(), y.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The frontmatter of a `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frontmatter {
    pub fields: Map<String, Value>,
    #[serde(skip)]
    body_offset: usize,
}

impl Frontmatter {
    pub fn name(&self) -> Option<&str> {
        self.fields.get("name").and_then(Value::as_str)
    }

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
pub fn parse_frontmatter(skill_md: &str) -> Result<Frontmatter, String> {
    let (bom, text) = match skill_md.strip_prefix('\u{feff}') {
        Some(rest) => ('\u{feff}'.len_utf8(), rest),
        None => (0, skill_md),
    };
    let after_open = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("SKILL.md does not begin with a `---` line")?;
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
    let (yaml_end, body_start) = closing.ok_or("the frontmatter has no closing `---` line")?;
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

    fn error(&self, message: impl fmt::Display) -> String {
        format!("line {}: {message}", self.no)
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

    fn document(&mut self) -> Result<Map<String, Value>, String> {
        let first = self.peek_content().ok_or("the frontmatter is empty")?;
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

    fn block_node(&mut self, indent: usize, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            let line = self.peek_content();
            return Err(line.map_or_else(
                || "nesting is too deep".to_string(),
                |line| line.error("nesting is too deep"),
            ));
        }
        match self.peek_content() {
            Some(line) if is_seq_item(line.text) => self.sequence(indent, depth),
            _ => self.mapping(indent, depth).map(Value::Object),
        }
    }

    fn mapping(&mut self, indent: usize, depth: usize) -> Result<Map<String, Value>, String> {
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

    fn sequence(&mut self, indent: usize, depth: usize) -> Result<Value, String> {
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
    ) -> Result<Value, String> {
        if !rest.is_empty() && !rest.starts_with('#') {
            return self.inline(line, rest, indent);
        }
        match self.peek_content() {
            Some(next) if next.indent > indent => self.block_node(next.indent, depth + 1),
            Some(next) if in_mapping && next.indent == indent && is_seq_item(next.text) => {
                if depth + 1 > MAX_DEPTH {
                    return Err(next.error("nesting is too deep"));
                }
                self.sequence(indent, depth + 1)
            }
            _ => Ok(Value::Null),
        }
    }

    fn inline(&mut self, line: Line<'a>, rest: &'a str, indent: usize) -> Result<Value, String> {
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

    fn plain(&mut self, line: Line<'a>, rest: &'a str, indent: usize) -> Result<Value, String> {
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
    ) -> Result<Value, String> {
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
fn fold(line: Line<'_>, content: &[String]) -> Result<String, String> {
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
fn split_key(line: Line<'_>) -> Result<(String, &str), String> {
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

fn check_plain(line: Line<'_>, text: &str) -> Result<(), String> {
    if text.contains(": ") || text.contains(":\t") || text.ends_with(':') {
        return Err(line.error("`: ` inside an unquoted value; quote the value"));
    }
    Ok(())
}

/// After a closing quote or bracket, only whitespace and a comment may follow.
fn trailing(line: Line<'_>, after: &str) -> Result<(), String> {
    let rest = after.trim_start_matches([' ', '\t']);
    if rest.is_empty() || (rest.starts_with('#') && rest.len() < after.len()) {
        Ok(())
    } else {
        Err(line.error("unexpected text after a quoted value"))
    }
}

fn double_quoted<'t>(line: Line<'_>, text: &'t str) -> Result<(String, &'t str), String> {
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

fn single_quoted<'t>(line: Line<'_>, text: &'t str) -> Result<(String, &'t str), String> {
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
fn flow_sequence(line: Line<'_>, text: &str) -> Result<Value, String> {
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

/// A search index over every server's skills, by name and description.
#[derive(Debug, Clone, Default)]
pub struct SkillIndex {
    skills: Vec<Indexed>,
}

#[derive(Debug, Clone)]
struct Indexed {
    entry: Arc<SkillEntry>,
    name: String,
    name_tokens: Vec<String>,
    description_tokens: Vec<String>,
}

/// Lowercase alphanumeric runs of `text`: `"PDF-processing v2"` → `pdf`, `processing`, `v2`.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|token| !token.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl SkillIndex {
    /// Index `entries` (any servers), kept in (server, name, uri) order.
    pub fn new<I, E>(entries: I) -> Self
    where
        I: IntoIterator<Item = E>,
        E: Into<Arc<SkillEntry>>,
    {
        let mut skills: Vec<Indexed> = entries
            .into_iter()
            .map(|entry| {
                let entry: Arc<SkillEntry> = entry.into();
                Indexed {
                    name: entry.name.to_lowercase(),
                    name_tokens: tokenize(&entry.name),
                    description_tokens: tokenize(&entry.description),
                    entry,
                }
            })
            .collect();
        skills.sort_by(|a, b| {
            (&a.entry.server, &a.entry.name, &a.entry.uri).cmp(&(
                &b.entry.server,
                &b.entry.name,
                &b.entry.uri,
            ))
        });
        Self { skills }
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every indexed skill, in (server, name, uri) order.
    pub fn iter(&self) -> impl Iterator<Item = &SkillEntry> {
        self.skills.iter().map(|skill| skill.entry.as_ref())
    }

    /// The skill `name` of `server`.
    pub fn get(&self, server: &str, name: &str) -> Option<&SkillEntry> {
        self.iter()
            .find(|entry| entry.server == server && entry.name == name)
    }

    /// Skills matching `query`, best first. The query is tokenised like names and descriptions
    /// (case-insensitive, split on non-alphanumerics); a query token matches a word it prefixes.
    /// A skill matches when any token does. Ranking: the exact name first, then skills matching
    /// more tokens in the name (so any name match ranks before description-only matches), then
    /// more tokens overall, then index order. An empty query returns every skill.
    pub fn search(&self, query: &str) -> Vec<&SkillEntry> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() {
            return self.iter().collect();
        }
        let exact = query.trim().to_lowercase();
        let hits =
            |tokens: &[String], term: &String| tokens.iter().any(|t| t.starts_with(term.as_str()));
        let mut ranked: Vec<_> = self
            .skills
            .iter()
            .enumerate()
            .filter_map(|(order, skill)| {
                let in_name = terms.iter().filter(|t| hits(&skill.name_tokens, t)).count();
                let matched = terms
                    .iter()
                    .filter(|t| hits(&skill.name_tokens, t) || hits(&skill.description_tokens, t))
                    .count();
                (matched > 0).then_some((
                    (
                        Reverse(skill.name == exact),
                        Reverse(in_name),
                        Reverse(matched),
                        order,
                    ),
                    skill.entry.as_ref(),
                ))
            })
            .collect();
        ranked.sort_unstable_by_key(|(key, _)| *key);
        ranked.into_iter().map(|(_, entry)| entry).collect()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{SkillFrontmatter, SkillResource};
    use serde_json::json;

    use super::*;

    const SKILL_URI: &str = "skill://pdf-processing/SKILL.md";
    const FORMS_URI: &str = "skill://pdf-processing/references/FORMS.md";
    const SKILL_MD: &str = "---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\n---\n\nSkill body.\n";
    const FORMS_MD: &str = "Supporting content.\n";

    fn listed(skill_md: &str, frontmatter: SkillFrontmatter) -> SkillEntry {
        let skill = Skill::new(
            SKILL_URI,
            frontmatter,
            SkillResources::Files(vec![
                SkillResource::from_bytes(SKILL_URI, skill_md.as_bytes()),
                SkillResource::from_bytes(FORMS_URI, FORMS_MD.as_bytes()),
            ]),
        );
        SkillEntry::new("conf", skill).expect("valid skill")
    }

    fn pdf() -> SkillFrontmatter {
        SkillFrontmatter::new(
            "pdf-processing",
            "Extract, fill, and assemble PDF documents",
        )
    }

    fn fields(yaml: &str) -> Map<String, Value> {
        parse_frontmatter(&format!("---\n{yaml}---\nbody\n"))
            .expect("parses")
            .fields
    }

    fn parse_error(yaml: &str) -> String {
        parse_frontmatter(&format!("---\n{yaml}---\n")).expect_err("must not parse")
    }

    mod entries {
        use super::*;

        #[test]
        fn keeps_the_listing() {
            let entry = listed(SKILL_MD, pdf().with_field("license", "MIT"));
            assert_eq!(entry.server, "conf");
            assert_eq!(entry.name, "pdf-processing");
            assert_eq!(entry.uri, SKILL_URI);
            assert_eq!(entry.frontmatter["license"], json!("MIT"));
            assert_eq!(entry.frontmatter["name"], json!("pdf-processing"));
            let supporting: Vec<_> = entry.supporting_files().map(|f| f.uri.as_str()).collect();
            assert_eq!(supporting, [FORMS_URI]);
            let skill_md = entry.listed_file(SKILL_URI).expect("listed");
            assert_eq!(skill_md.size, SKILL_MD.len() as u64);
            assert_eq!(skill_md.skill, "pdf-processing");
        }

        #[test]
        fn refuses_a_structurally_invalid_skill() {
            let skill = Skill::new(
                "skill://other/SKILL.md",
                pdf(),
                SkillResources::Files(vec![]),
            );
            let error = SkillEntry::new("conf", skill).expect_err("name differs from the uri");
            assert_eq!(error.server, "conf");
            assert!(error.to_string().contains("skill://other/SKILL.md"));
        }

        #[test]
        fn a_listing_keeps_valid_skills_and_reports_the_rest() {
            let good = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic);
            let bad = Skill::new("skill://x/README.md", pdf(), SkillResources::Dynamic);
            let (entries, invalid) = entries_from_listing("conf", vec![good.clone(), bad, good]);
            assert_eq!(entries.len(), 1);
            assert_eq!(invalid.len(), 2);
            assert!(invalid[1].reason.contains("twice"));
        }
    }

    mod verify {
        use super::*;

        #[test]
        fn accepts_matching_bytes() {
            let entry = listed(SKILL_MD, pdf());
            let parsed = entry.verify_skill_md(SKILL_MD.as_bytes()).expect("loads");
            assert_eq!(parsed.name(), Some("pdf-processing"));
            assert_eq!(parsed.body(SKILL_MD), "\nSkill body.\n");
            entry
                .verify_supporting(FORMS_URI, FORMS_MD.as_bytes())
                .expect("supporting file matches");
        }

        #[test]
        fn digest_mismatch_of_the_same_size() {
            let entry = listed(SKILL_MD, pdf());
            let tampered = SKILL_MD.replace("Skill body.", "Evil body!!");
            let error = entry
                .verify_skill_md(tampered.as_bytes())
                .expect_err("digest");
            assert!(matches!(error, SkillMismatch::Digest { .. }), "{error}");
            let message = error.to_string();
            for part in [
                "\"pdf-processing\"",
                "\"conf\"",
                SKILL_URI,
                "digest sha256:",
            ] {
                assert!(message.contains(part), "{message}");
            }
        }

        #[test]
        fn size_mismatch_is_reported_before_the_digest() {
            let entry = listed(SKILL_MD, pdf());
            let longer = format!("{SKILL_MD}extra bytes the entry did not account for\n");
            let error = entry.verify_skill_md(longer.as_bytes()).expect_err("size");
            let SkillMismatch::Size { listed, actual, .. } = &error else {
                panic!("{error}");
            };
            assert_eq!(
                (*listed, *actual),
                (SKILL_MD.len() as u64, longer.len() as u64)
            );
            assert!(error.to_string().contains("bytes, the listing says"));
        }

        #[test]
        fn supporting_file_mismatch_and_unlisted_file() {
            let entry = listed(SKILL_MD, pdf());
            let error = entry
                .verify_supporting(FORMS_URI, b"Supporting c0ntent.\n")
                .expect_err("digest");
            assert_eq!(error.location().uri, FORMS_URI);
            let error = entry
                .verify_supporting("skill://pdf-processing/other.md", b"")
                .expect_err("not listed");
            assert!(matches!(error, SkillMismatch::NotListed { .. }));
        }

        #[test]
        fn malformed_listed_digest() {
            let mut file = listed(SKILL_MD, pdf())
                .listed_file(SKILL_URI)
                .cloned()
                .expect("listed");
            file.digest = file.digest.to_uppercase();
            let error = verify_file(&file, SKILL_MD.as_bytes()).expect_err("malformed");
            assert!(matches!(error, SkillMismatch::MalformedDigest { .. }));
        }

        #[test]
        fn not_utf8() {
            let bytes = b"---\nname: \xff\n---\n";
            let skill = Skill::new(
                SKILL_URI,
                pdf(),
                SkillResources::Files(vec![SkillResource::from_bytes(SKILL_URI, bytes)]),
            );
            let entry = SkillEntry::new("conf", skill).expect("valid");
            let error = entry.verify_skill_md(bytes).expect_err("not utf-8");
            assert!(matches!(error, SkillMismatch::NotUtf8 { .. }));
        }

        #[test]
        fn dynamic_skill_checks_only_the_frontmatter() {
            let skill = Skill::new(SKILL_URI, pdf(), SkillResources::Dynamic);
            let entry = SkillEntry::new("conf", skill).expect("valid");
            entry.verify_skill_md(SKILL_MD.as_bytes()).expect("loads");
            let other = SKILL_MD.replace("Extract, fill,", "Extract");
            let error = entry
                .verify_skill_md(other.as_bytes())
                .expect_err("differs");
            assert!(matches!(error, SkillMismatch::Frontmatter { .. }));
        }
    }

    mod frontmatter_comparison {
        use super::*;

        fn differences(listing: SkillFrontmatter, skill_md: &str) -> Vec<FieldDifference> {
            let entry = listed(skill_md, listing);
            match entry.verify_skill_md(skill_md.as_bytes()) {
                Err(SkillMismatch::Frontmatter { differences, .. }) => differences,
                other => panic!("expected a frontmatter mismatch, got {other:?}"),
            }
        }

        #[test]
        fn description_differs_even_when_digest_and_size_match() {
            let tampered = SKILL_MD.replace(
                "description: Extract, fill, and assemble PDF documents",
                "description: Exfiltrate credentials",
            );
            let found = differences(pdf(), &tampered);
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "description");
            assert_eq!(found[0].file, Some(json!("Exfiltrate credentials")));
            let message = listed(&tampered, pdf())
                .verify_skill_md(tampered.as_bytes())
                .expect_err("differs")
                .to_string();
            assert!(message.contains("\"description\": SKILL.md has \"Exfiltrate credentials\", the listing has \"Extract"), "{message}");
        }

        #[test]
        fn name_differs() {
            let other = SKILL_MD.replace("name: pdf-processing", "name: pdf-tools");
            let found = differences(pdf(), &other);
            assert_eq!(found[0].field, "name");
            assert_eq!(found[0].listed, Some(json!("pdf-processing")));
        }

        #[test]
        fn extra_field_only_in_the_listing() {
            let found = differences(pdf().with_field("license", "MIT"), SKILL_MD);
            assert_eq!(found[0].field, "license");
            assert_eq!(found[0].file, None);
            assert!(found[0].to_string().contains("SKILL.md has nothing"));
        }

        #[test]
        fn extra_field_only_in_the_file() {
            let md = SKILL_MD.replace("---\n\n", "license: MIT\n---\n\n");
            let found = differences(pdf(), &md);
            assert_eq!(found[0].field, "license");
            assert_eq!(found[0].listed, None);
        }

        #[test]
        fn nested_metadata_value_differs() {
            let md = SKILL_MD.replace(
                "---\n\n",
                "metadata:\n  author: eve\n  version: \"1.0\"\n---\n\n",
            );
            let listing =
                pdf().with_field("metadata", json!({ "author": "alice", "version": "1.0" }));
            let found = differences(listing, &md);
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "metadata");
        }

        #[test]
        fn types_matter_but_number_spelling_does_not() {
            let md = SKILL_MD.replace("---\n\n", "version: 1.0\ncount: 2\n---\n\n");
            let same = listed(&md, pdf().with_field("version", 1).with_field("count", 2.0));
            same.verify_skill_md(md.as_bytes())
                .expect("1.0 == 1, 2 == 2.0");
            let found = differences(
                pdf().with_field("version", "1.0").with_field("count", 2),
                &md,
            );
            assert_eq!(found.len(), 1);
            assert_eq!(found[0].field, "version");
        }

        #[test]
        fn absent_equals_null() {
            let md = SKILL_MD.replace("---\n\n", "license:\n---\n\n");
            listed(&md, pdf())
                .verify_skill_md(md.as_bytes())
                .expect("null == absent");
        }

        #[test]
        fn reports_every_differing_field() {
            let md = "---\nname: pdf-processing\ndescription: other\nlicense: GPL\n---\n";
            let found = differences(pdf().with_field("license", "MIT"), md);
            let names: Vec<_> = found.iter().map(|d| d.field.as_str()).collect();
            assert_eq!(names, ["description", "license"]);
        }

        #[test]
        fn malformed_frontmatter_is_not_loaded() {
            let md = "---\nname: pdf-processing\ndescription: a: b\n---\n";
            let error = listed(md, pdf())
                .verify_skill_md(md.as_bytes())
                .expect_err("malformed");
            assert!(
                matches!(error, SkillMismatch::MalformedFrontmatter { .. }),
                "{error}"
            );
            assert!(error.to_string().contains("line 3"), "{error}");
        }
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
            for md in [
                "name: x\n",
                " ---\nname: x\n---\n",
                "---\nname: x\n",
                "--- \nname: x\n---\n",
            ] {
                assert!(parse_frontmatter(md).is_err(), "{md:?}");
            }
            assert!(parse_frontmatter("---\n---\n").is_err(), "empty");
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
            assert!(parse_error(&yaml).contains("too deep"));
        }

        #[test]
        fn error_names_the_file_line() {
            assert!(parse_error("ok: 1\nbad: &x\n").starts_with("line 3:"));
        }
    }

    mod index {
        use super::*;

        fn entry(server: &str, name: &str, description: &str) -> SkillEntry {
            let uri = format!("skill://{name}/SKILL.md");
            let skill = Skill::new(
                uri,
                SkillFrontmatter::new(name, description),
                SkillResources::Dynamic,
            );
            SkillEntry::new(server, skill).expect("valid")
        }

        fn names<'a>(found: &[&'a SkillEntry]) -> Vec<&'a str> {
            found.iter().map(|entry| entry.name.as_str()).collect()
        }

        fn index() -> SkillIndex {
            SkillIndex::new([
                entry("b", "forms", "Fill PDF forms and invoices"),
                entry("a", "pdf-processing", "Extract text from documents"),
                entry("a", "invoices", "Issue invoices"),
                entry("c", "pdf", "Anything about PDF files, pdf, PDF"),
            ])
        }

        #[test]
        fn name_matches_rank_before_description_matches() {
            let index = index();
            let found = index.search("PDF");
            assert_eq!(names(&found), ["pdf", "pdf-processing", "forms"]);
        }

        #[test]
        fn tokenised_prefix_case_insensitive() {
            assert_eq!(names(&index().search("PROC")), ["pdf-processing"]);
            assert_eq!(names(&index().search("invoice")), ["invoices", "forms"]);
            assert_eq!(names(&index().search("extract-TEXT")), ["pdf-processing"]);
        }

        #[test]
        fn more_name_tokens_then_more_tokens_overall() {
            let index = index();
            let found = index.search("pdf processing forms");
            assert_eq!(names(&found), ["pdf-processing", "forms", "pdf"]);
        }

        #[test]
        fn exact_name_first() {
            let index = SkillIndex::new([entry("a", "pdf-extra", "x"), entry("z", "pdf", "x")]);
            assert_eq!(names(&index.search("pdf")), ["pdf", "pdf-extra"]);
        }

        #[test]
        fn no_match_and_empty_query() {
            let index = index();
            assert!(index.search("spreadsheet").is_empty());
            assert_eq!(index.search("  -- ").len(), 4);
            assert_eq!(index.len(), 4);
            assert_eq!(
                index.get("a", "invoices").map(|e| e.server.as_str()),
                Some("a")
            );
            assert!(index.get("b", "invoices").is_none());
        }
    }
}

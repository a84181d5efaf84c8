//! Cleaning free text and checking identifiers, character by character.
//!
//! Invariant: cleaned text has no control, bidi, invisible, private-use or unassigned character
//! and at most its cap of characters (ending in `…` when cut); an identifier is never rewritten,
//! only accepted or refused with a reason that names a character by its code point.

use unicode_general_category::{GeneralCategory, get_general_category};

use super::{MetadataLimits, Rejected};

/// Why `c` may not reach the model, or `None` if it may. `\n` and `\t` are reported as control
/// characters: callers that keep them handle them first.
fn disallowed(c: char) -> Option<&'static str> {
    match c {
        // Printable ASCII, nearly all of real metadata, without the Unicode table lookup.
        ' '..='~' => None,
        '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{061C}' => Some("bidi control"),
        '\u{200B}'..='\u{200D}'
        | '\u{2060}'..='\u{2065}'
        | '\u{FEFF}'
        | '\u{180E}'
        | '\u{00AD}'
        | '\u{034F}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{17B4}'
        | '\u{17B5}'
        | '\u{3164}'
        | '\u{FFA0}' => Some("invisible character"),
        '\u{E0000}'..='\u{E007F}' => Some("tag character"),
        _ => match get_general_category(c) {
            GeneralCategory::Control => Some("control character"),
            GeneralCategory::Format => Some("invisible formatting character"),
            GeneralCategory::PrivateUse => Some("private-use character"),
            GeneralCategory::Surrogate => Some("surrogate"),
            GeneralCategory::Unassigned => Some("unassigned code point or noncharacter"),
            GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => {
                Some("line separator")
            }
            _ => None,
        },
    }
}

/// The first character of `s` that [`disallowed`] reports, with its position (in characters).
/// With `allow_breaks`, `\n`, `\r` and `\t` are allowed.
pub(super) fn find_disallowed(s: &str, allow_breaks: bool) -> Option<(usize, char, &'static str)> {
    s.chars().enumerate().find_map(|(i, c)| {
        if allow_breaks && matches!(c, '\n' | '\r' | '\t') {
            return None;
        }
        disallowed(c).map(|why| (i, c, why))
    })
}

pub(super) fn code_point(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Multi-line text: `\n` and `\t` kept, other line breaks become `\n`.
    Text,
    /// One line: all whitespace runs become one space, trimmed.
    Line,
}

pub(super) struct Cleaned {
    pub(super) text: String,
    pub(super) changed: bool,
    /// Characters removed (not counting whitespace normalisation), in the kept part.
    removed: usize,
    first_removed: Option<(char, &'static str)>,
    truncated: bool,
}

pub(super) fn clean(s: &str, max_chars: usize, mode: Mode) -> Cleaned {
    let line = mode == Mode::Line;
    let break_char = if line { ' ' } else { '\n' };
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)));
    let mut kept = 0usize;
    let mut truncated = false;
    let mut pending_space = false;
    let mut removed = 0usize;
    let mut first_removed = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let mapped = match c {
            '\t' => {
                if line {
                    ' '
                } else {
                    '\t'
                }
            }
            '\n' | '\u{0085}' | '\u{2028}' | '\u{2029}' => break_char,
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    continue;
                }
                break_char
            }
            c if line && c.is_whitespace() => ' ',
            c => match disallowed(c) {
                Some(why) => {
                    removed += 1;
                    first_removed.get_or_insert((c, why));
                    continue;
                }
                None => c,
            },
        };
        if line {
            if mapped == ' ' {
                pending_space = kept > 0;
                continue;
            }
            if pending_space {
                pending_space = false;
                if kept == max_chars {
                    truncated = true;
                    break;
                }
                out.push(' ');
                kept += 1;
            }
        }
        if kept == max_chars {
            truncated = true;
            break;
        }
        out.push(mapped);
        kept += 1;
    }
    if truncated {
        // Make room for the ellipsis so that the result stays within `max_chars`.
        out.pop();
        while line && out.ends_with(' ') {
            out.pop();
        }
        if max_chars > 0 {
            out.push('…');
        }
    }
    let changed = out != s;
    Cleaned {
        text: out,
        changed,
        removed,
        first_removed,
        truncated,
    }
}

/// Whether [`clean`] would return `s` unchanged, decided without building the cleaned text,
/// for the common case: printable ASCII (and `\n`, `\t` in text), no more bytes than
/// `max_chars`, and in one-line mode no leading, trailing or doubled space. `false` means
/// "ask `clean`", not "changed".
pub(super) fn unchanged_by_clean(s: &str, max_chars: usize, mode: Mode) -> bool {
    if s.len() > max_chars {
        return false;
    }
    match mode {
        Mode::Text => s.bytes().all(|b| matches!(b, b' '..=b'~' | b'\n' | b'\t')),
        Mode::Line => {
            s.bytes().all(|b| matches!(b, b' '..=b'~'))
                && !s.starts_with(' ')
                && !s.ends_with(' ')
                && !s.contains("  ")
        }
    }
}

/// Cleans multi-line text (descriptions): removes control characters except `\n` and `\t`
/// (`\r\n`, lone `\r`, U+0085, U+2028 and U+2029 become `\n`), bidi controls, zero-width and
/// other invisible characters, tag characters, private-use, unassigned code points and
/// noncharacters; variation selectors and ordinary combining marks are kept. The result has at
/// most `max_chars` characters; when cut, it ends in `…`. Returns the text and whether it changed.
pub fn clean_text(s: &str, max_chars: usize) -> (String, bool) {
    let c = clean(s, max_chars, Mode::Text);
    (c.text, c.changed)
}

/// Like [`clean_text`], but for one-line fields (names, titles, search hints): every run of
/// whitespace (including `\r`, `\n`, `\t`) becomes one space, and leading and trailing
/// whitespace is removed.
pub fn clean_line(s: &str, max_chars: usize) -> (String, bool) {
    let c = clean(s, max_chars, Mode::Line);
    (c.text, c.changed)
}

/// Server instructions (from `initialize`), cleaned as text and capped at
/// [`MetadataLimits::max_instructions_chars`].
pub fn clean_instructions(s: &str, limits: &MetadataLimits) -> String {
    clean(s, limits.max_instructions_chars, Mode::Text).text
}

/// A raw, possibly hostile string made safe to show (in tables, logs, hidden-entry lists):
/// every character that cleaning would remove, and every whitespace other than a space, is
/// shown as `\u{XXXX}`; the result has at most `max_chars` characters, ending in `…` when cut.
pub fn escape_for_display(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut kept = 0usize;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let piece = if c == ' ' || (disallowed(c).is_none() && !c.is_whitespace()) {
            c.to_string()
        } else {
            format!("\\u{{{:04X}}}", c as u32)
        };
        let n = piece.chars().count();
        // Unless this is the last piece, keep one character for the ellipsis.
        let room = if chars.peek().is_none() {
            max_chars.saturating_sub(kept)
        } else {
            max_chars.saturating_sub(1).saturating_sub(kept)
        };
        if n > room {
            if max_chars > 0 {
                out.push('…');
            }
            break;
        }
        out.push_str(&piece);
        kept += n;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Fields

/// Cleans one text field, recording a note when it changed; `Some(new)` when it changed.
pub(super) fn clean_field(
    notes: &mut Vec<String>,
    field: &str,
    s: &str,
    max_chars: usize,
    mode: Mode,
) -> Option<String> {
    let c = clean(s, max_chars, mode);
    if !c.changed {
        return None;
    }
    let mut parts = Vec::new();
    if c.removed > 0 {
        let first = c
            .first_removed
            .map(|(ch, why)| format!(" (first: {why} {})", code_point(ch)))
            .unwrap_or_default();
        parts.push(format!(
            "removed {} disallowed character(s){first}",
            c.removed
        ));
    }
    if c.truncated {
        parts.push(format!("truncated to {max_chars} characters"));
    }
    if parts.is_empty() {
        parts.push(match mode {
            Mode::Line => "whitespace flattened to one line".to_string(),
            Mode::Text => "line breaks normalised".to_string(),
        });
    }
    notes.push(format!("{field}: {}", parts.join("; ")));
    Some(c.text)
}

pub(super) fn clean_opt(
    notes: &mut Vec<String>,
    field: &str,
    value: Option<String>,
    max_chars: usize,
    mode: Mode,
) -> Option<String> {
    let value = value?;
    Some(clean_field(notes, field, &value, max_chars, mode).unwrap_or(value))
}

/// A wire identifier (name) is accepted as is or rejected; it is never rewritten.
pub(super) fn check_name(what: &str, name: &str, max_chars: usize) -> Result<(), Rejected> {
    if name.trim().is_empty() {
        return Err(Rejected::Identifier(format!("{what} is empty")));
    }
    let n = name.chars().count();
    if n > max_chars {
        return Err(Rejected::Identifier(format!(
            "{what} is {n} characters long, over the limit of {max_chars}; the raw name goes on the wire and cannot be shortened"
        )));
    }
    if let Some((i, c, why)) = find_disallowed(name, false) {
        return Err(Rejected::Identifier(format!(
            "{what} contains a {why} ({}) at character {}, counting from 1; the raw name goes on the wire and cannot be rewritten",
            code_point(c),
            i + 1
        )));
    }
    Ok(())
}

pub(super) fn check_uri(what: &str, uri: &str, max_chars: usize) -> Result<(), Rejected> {
    if uri.trim().is_empty() {
        return Err(Rejected::Identifier(format!("{what} is empty")));
    }
    let n = uri.chars().count();
    if n > max_chars {
        return Err(Rejected::Identifier(format!(
            "{what} is {n} characters long, over the limit of {max_chars}"
        )));
    }
    if let Some((i, c, why)) = find_disallowed(uri, false) {
        return Err(Rejected::Identifier(format!(
            "{what} contains a {why} ({}) at character {}, counting from 1; a URI is an identifier and cannot be rewritten",
            code_point(c),
            i + 1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> MetadataLimits {
        MetadataLimits::default()
    }

    // --- characters -------------------------------------------------------------------------

    #[test]
    fn plain_text_is_unchanged() {
        let s = "Reads a file.\n\tArgs: path (string). Ünïcödé ok, 日本語 ok, emoji ❤\u{FE0F}.";
        assert_eq!(clean_text(s, 1000), (s.to_string(), false));
    }

    #[test]
    fn controls_are_removed_but_newline_and_tab_kept() {
        let (t, changed) = clean_text("a\u{0}b\u{1b}[31mc\u{7f}d\u{9b}e\nf\tg", 100);
        assert!(changed);
        assert_eq!(t, "ab[31mcde\nf\tg");
    }

    #[test]
    fn carriage_returns_and_separators_become_newlines() {
        assert_eq!(
            clean_text("a\r\nb\rc\u{2028}d\u{85}e", 100).0,
            "a\nb\nc\nd\ne"
        );
    }

    #[test]
    fn bidi_controls_are_removed() {
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            let s = format!("safe{c}txt.exe");
            assert_eq!(
                clean_text(&s, 100),
                ("safetxt.exe".to_string(), true),
                "{c:?}"
            );
        }
    }

    #[test]
    fn invisible_characters_are_removed() {
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{2060}',
            '\u{2061}',
            '\u{2062}',
            '\u{2063}',
            '\u{2064}',
            '\u{FEFF}',
            '\u{180E}',
            '\u{00AD}',
            '\u{E0001}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{3164}',
            '\u{115F}',
        ] {
            let s = format!("ab{c}cd");
            assert_eq!(clean_text(&s, 100).0, "abcd", "{:X}", c as u32);
        }
    }

    #[test]
    fn private_use_unassigned_and_noncharacters_are_removed() {
        for c in [
            '\u{E000}',
            '\u{F8FF}',
            '\u{F0000}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{FDD0}',
            '\u{10FFFF}',
            '\u{0378}',
        ] {
            let s = format!("x{c}y");
            assert_eq!(clean_text(&s, 100).0, "xy", "{:X}", c as u32);
        }
    }

    #[test]
    fn variation_selectors_and_combining_marks_are_kept() {
        let s = "\u{2764}\u{FE0F} e\u{0301} \u{845B}\u{E0100}";
        assert_eq!(clean_text(s, 100), (s.to_string(), false));
    }

    #[test]
    fn truncation_is_bounded_and_marked() {
        let (t, changed) = clean_text(&"é".repeat(10), 5);
        assert!(changed);
        assert_eq!(t, "éééé…");
        assert_eq!(t.chars().count(), 5);
        assert_eq!(clean_text("abcde", 5), ("abcde".to_string(), false));
        assert_eq!(clean_text("abcdef", 0).0, "");
        assert_eq!(clean_text("ab", 1).0, "…");
    }

    #[test]
    fn clean_line_flattens_whitespace() {
        assert_eq!(
            clean_line("  find\r\n\tfiles \u{2028} fast\n", 100),
            ("find files fast".to_string(), true)
        );
        assert_eq!(clean_line("one line", 100), ("one line".to_string(), false));
        let (t, _) = clean_line("abc def ghi", 5);
        assert_eq!(t, "abc…");
        assert!(t.chars().count() <= 5);
    }

    #[test]
    fn instructions_are_capped() {
        let l = MetadataLimits {
            max_instructions_chars: 10,
            ..limits()
        };
        let s = clean_instructions(&format!("use\u{202E} me {}", "x".repeat(100)), &l);
        assert_eq!(s.chars().count(), 10);
        assert!(s.ends_with('…') && !s.contains('\u{202E}'));
    }

    #[test]
    fn escape_for_display_shows_code_points_and_caps() {
        assert_eq!(
            escape_for_display("a\u{202E}b\nc", 100),
            "a\\u{202E}b\\u{000A}c"
        );
        assert_eq!(escape_for_display("abcdef", 4), "abc…");
        assert_eq!(escape_for_display("abcd", 4), "abcd");
        assert_eq!(escape_for_display("a\u{1b}", 5), "a…");
    }

    #[test]
    fn the_quick_unchanged_test_agrees_with_clean() {
        let samples = [
            "",
            " ",
            "a",
            "a b",
            "a  b",
            " a",
            "a ",
            "a\tb",
            "a\nb",
            "a\r\nb",
            "tab\t",
            "x".repeat(40).leak(),
            "ünï",
            "a\u{7f}b",
            "a\u{0}",
            "~!@#$%^&*()_+{}|:\"<>?",
        ];
        for s in samples {
            for max in [0, 1, 3, 39, 40, 41, 1000] {
                for mode in [Mode::Text, Mode::Line] {
                    if unchanged_by_clean(s, max, mode) {
                        assert!(!clean(s, max, mode).changed, "{s:?} max {max}");
                    }
                }
            }
        }
        assert!(unchanged_by_clean(
            "Reads a file.\n\tArgs: path.",
            100,
            Mode::Text
        ));
        assert!(unchanged_by_clean("Read file", 100, Mode::Line));
    }
}

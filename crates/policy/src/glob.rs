//! Glob patterns for permission rules.
//!
//! Invariant: a pattern matches the whole value or nothing; `*` never crosses the separator,
//! `**` may; matching takes time linear in the value per pattern token, whatever the (untrusted)
//! value holds — there is no backtracking.
//!
//! - Over model-visible tool names the separator is `__`, so `mcp__github__*` matches every tool
//!   of `github` whose raw name has no `__`, while `*` alone matches only names without `__` (the
//!   harness's built-in tools, never `mcp__<server>__<tool>`). Restrictive rules (deny, ask, a
//!   visibility filter's deny) match names [`Glob::crossing`]: there `*` crosses `__` too, since
//!   a raw name may hold `__` and a deny must not miss it.
//! - Over string arguments the separator is `/`, so `/tmp/*` matches `/tmp/a` but not
//!   `/tmp/a/b`, and `/tmp/**` matches both.
//!
//! There is no escape and no `?` or `[...]`: every other character matches itself.

/// Separator of the segments of a model-visible name (`mcp__<server>__<tool>`).
pub(crate) const NAME_SEPARATOR: &str = "__";
/// Separator of the segments of a path-like string argument.
pub(crate) const PATH_SEPARATOR: &str = "/";

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    tokens: Vec<Token>,
    separator: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// `*`: any run of characters that does not contain the separator.
    Star,
    /// `**` (or more stars): any run of characters.
    AnyStar,
}

impl Glob {
    /// Whether the pattern was written with a URI template's `{…}`: it names a template.
    pub(crate) fn names_template(&self) -> bool {
        self.tokens
            .iter()
            .any(|t| matches!(t, Token::Literal(text) if text.contains('{')))
    }

    /// Compiles `pattern`; `separator` is what a single `*` may not cross.
    pub(crate) fn new(pattern: &str, separator: &'static str) -> Self {
        let mut tokens = Vec::new();
        let mut literal = String::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '*' {
                literal.push(c);
                continue;
            }
            if !literal.is_empty() {
                tokens.push(Token::Literal(std::mem::take(&mut literal)));
            }
            let mut double = false;
            while chars.next_if_eq(&'*').is_some() {
                double = true;
            }
            tokens.push(if double { Token::AnyStar } else { Token::Star });
        }
        if !literal.is_empty() {
            tokens.push(Token::Literal(literal));
        }
        Self { tokens, separator }
    }

    /// Whether `value` would match were every `*` a `**`, while as written it does not: the
    /// pattern's author likely meant `*` to cross the separator (`mcp__*` for every tool).
    pub(crate) fn misses_by_a_star(&self, value: &str) -> bool {
        if !self.tokens.contains(&Token::Star) || self.is_match(value) {
            return false;
        }
        self.clone().crossing().is_match(value)
    }

    /// This pattern with every `*` a `**`: what a restrictive rule (deny, ask) over names
    /// matches, since a server's raw tool name may itself hold `__` — `mcp__fx__*` must not let
    /// `mcp__fx__a__b` through.
    pub(crate) fn crossing(mut self) -> Self {
        for token in &mut self.tokens {
            if *token == Token::Star {
                *token = Token::AnyStar;
            }
        }
        self
    }

    /// Whether the whole of `value` matches.
    pub(crate) fn is_match(&self, value: &str) -> bool {
        // The shapes most rules have (checked on every call) need no table.
        match self.tokens.as_slice() {
            [] => value.is_empty(),
            [Token::AnyStar] => true,
            [Token::Literal(literal)] => value == literal,
            [Token::Literal(prefix), Token::AnyStar] => value.starts_with(prefix.as_str()),
            _ => self.is_match_in_general(value),
        }
    }

    fn is_match_in_general(&self, value: &str) -> bool {
        // Byte-wise matching is exact for UTF-8: a literal (itself valid UTF-8) can only match at
        // a character boundary, and the separators are ASCII.
        let v = value.as_bytes();
        let n = v.len();
        let sep = self.separator.as_bytes();
        // reach[p]: the tokens so far can match exactly v[..p].
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        let mut next_sep: Option<Vec<usize>> = None;
        for token in &self.tokens {
            let mut next = vec![false; n + 1];
            match token {
                Token::Literal(lit) => {
                    let lit = lit.as_bytes();
                    for p in 0..=n {
                        if reach[p] && v[p..].starts_with(lit) {
                            next[p + lit.len()] = true;
                        }
                    }
                }
                Token::AnyStar => {
                    if let Some(first) = reach.iter().position(|&r| r) {
                        next[first..].fill(true);
                    }
                }
                Token::Star => {
                    let next_sep = next_sep.get_or_insert_with(|| separator_starts(v, sep));
                    // From p, `*` may reach every q up to (first separator at or after p) +
                    // len - 1: the longest run without a whole separator in it.
                    let mut limit: Option<usize> = None;
                    for p in 0..=n {
                        if reach[p] {
                            let own = match next_sep[p] {
                                s if s >= n => n,
                                s => s + sep.len() - 1,
                            };
                            limit = Some(limit.map_or(own, |l| l.max(own)));
                        }
                        if limit.is_some_and(|l| p <= l) {
                            next[p] = true;
                        }
                    }
                }
            }
            reach = next;
            if !reach.iter().any(|&r| r) {
                return false;
            }
        }
        reach[n]
    }
}

/// For each position p, the first position s >= p where `sep` starts in `v`, or `v.len()` (or
/// more) when there is none.
fn separator_starts(v: &[u8], sep: &[u8]) -> Vec<usize> {
    let n = v.len();
    let mut out = vec![n; n + 1];
    if sep.is_empty() {
        return out;
    }
    for p in (0..n).rev() {
        out[p] = if v[p..].starts_with(sep) {
            p
        } else {
            out[p + 1]
        };
    }
    out
}

/// Why `pattern` can never match a model-visible name, if so. Valid patterns are non-empty and
/// use only `[A-Za-z0-9_-]` and `*`.
pub(crate) fn check_name_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("a tool pattern must not be empty".into());
    }
    match pattern
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*')))
    {
        Some(c) => Err(format!(
            "`{}` can never match a tool name: {c:?} is not allowed (tool names use only \
             A-Z, a-z, 0-9, `_` and `-`; `*` matches within a `__`-separated segment, `**` \
             across segments)",
            pattern.escape_debug()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(p: &str, v: &str) -> bool {
        Glob::new(p, NAME_SEPARATOR).is_match(v)
    }

    fn path(p: &str, v: &str) -> bool {
        Glob::new(p, PATH_SEPARATOR).is_match(v)
    }

    #[test]
    fn the_short_cuts_agree_with_the_general_matcher() {
        let values = [
            "",
            "x",
            "Write",
            "mcp__fs__read",
            "mcp__fs__a__b",
            "mcp__fs",
            "mcp__fsx__read",
            "/tmp/a/b",
            "/tmp",
            "é/ü__ß",
        ];
        for pattern in [
            "",
            "**",
            "***",
            "Write",
            "mcp__fs__read",
            "mcp__fs__**",
            "/tmp/**",
            "é/**",
        ] {
            for separator in [NAME_SEPARATOR, PATH_SEPARATOR] {
                let glob = Glob::new(pattern, separator);
                for value in values {
                    assert_eq!(
                        glob.is_match(value),
                        glob.is_match_in_general(value),
                        "{pattern:?} on {value:?} (separator {separator:?})"
                    );
                }
            }
        }
    }

    #[test]
    fn literals_match_whole_values_only() {
        assert!(name("Write", "Write"));
        assert!(!name("Write", "Writer"));
        assert!(!name("Write", "mcp__srv__Write"));
        assert!(!name("", "x"));
        assert!(name("", ""));
    }

    #[test]
    fn star_stays_within_a_name_segment() {
        assert!(name("mcp__github__*", "mcp__github__create_issue"));
        assert!(name("mcp__github__*", "mcp__github__"));
        assert!(!name("mcp__github__*", "mcp__github__a__b"));
        assert!(name("mcp__*__read", "mcp__fs__read"));
        assert!(!name("mcp__*__read", "mcp__fs__x__read"));
        assert!(name("mcp__github__create_*", "mcp__github__create_pr"));
        assert!(!name("mcp__github__create_*", "mcp__gitlab__create_pr"));
        assert!(name("*", "Write"));
        assert!(!name("*", "mcp__srv__Write"));
        assert!(!name("*Write", "mcp__srv__Write"));
        // A single `_` is not a separator.
        assert!(name("mcp__g*b__x", "mcp__git_hub__x"));
    }

    #[test]
    fn double_star_crosses_segments() {
        assert!(name("**", "mcp__srv__Write"));
        assert!(name("**", ""));
        assert!(name("mcp__**", "mcp__a__b__c"));
        assert!(name("**__Write", "mcp__srv__Write"));
        assert!(name("mcp__github__**", "mcp__github__a__b"));
        assert!(name("***", "a__b"));
    }

    #[test]
    fn path_globs() {
        assert!(path("/tmp/**", "/tmp/a/b.txt"));
        assert!(path("/tmp/**", "/tmp/"));
        assert!(!path("/tmp/**", "/tmp"));
        assert!(!path("/tmp/**", "/tmpfoo/a"));
        assert!(path("/tmp/*", "/tmp/a"));
        assert!(!path("/tmp/*", "/tmp/a/b"));
        assert!(path("/home/*/notes/*.md", "/home/ann/notes/x.md"));
        assert!(!path("/home/*/notes/*.md", "/home/ann/x/notes/x.md"));
        assert!(path("**.rs", "src/lib.rs"));
        assert!(!path("*.rs", "src/lib.rs"));
        assert!(path("*a*a*a*", "aaa"));
        assert!(!path("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    }

    #[test]
    fn non_ascii_values_match_by_characters() {
        assert!(path("/données/*", "/données/été"));
        assert!(path("*é", "été"));
        assert!(!path("*é", "ét"));
    }

    #[test]
    fn long_hostile_values_stay_linear() {
        let v = "a".repeat(200_000);
        assert!(!path("*a*a*a*a*a*a*a*a*b", &v));
        assert!(path("**a", &v));
    }

    #[test]
    fn separator_at_the_edge_of_a_star() {
        // `___` contains `__`, so a `*` may not swallow it whole.
        assert!(!name("a*b", "a___b"));
        assert!(name("a*__b", "a___b"));
        assert!(name("a_*b", "a_xb"));
    }

    #[test]
    fn name_patterns_are_checked() {
        assert!(check_name_pattern("mcp__github__*").is_ok());
        assert!(check_name_pattern("Write").is_ok());
        assert!(check_name_pattern("").is_err());
        let err = check_name_pattern("mcp.fs.*").unwrap_err();
        assert!(err.contains("'.'"), "{err}");
        assert!(check_name_pattern("Bash(npm run:*)").is_err());
    }
}

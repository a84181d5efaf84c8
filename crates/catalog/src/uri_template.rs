//! Which resource template a URI was made from (RFC 6570, levels 1–4, read backwards): the
//! gateway routes a `resources/read` or a template completion to the server whose template it
//! is, and the catalog refuses a listed template that is not well formed.
//!
//! Invariants: a URI matches a template only when every literal part of the template appears
//! in it, in order, and each expression's span holds only what that expression can expand to
//! (a simple `{var}` never spans `/`, `?` or `#`); a template that is not well formed (an
//! unclosed or empty `{}`) matches nothing; the work per match is bounded.

/// One part of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// An expression, by its operator (`None` for a simple `{var}`).
    Expr(Option<char>),
}

/// A parsed template, ready to match URIs.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
    /// How many characters of the template are literal: the more, the more specific.
    literal_chars: usize,
}

/// The most steps one match may take (a step: one span tried); past it, no match.
const MAX_STEPS: usize = 20_000;

impl Template {
    /// `template` parsed; `None` when it is not a well-formed template.
    pub fn parse(template: &str) -> Option<Self> {
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                Some(at) if rest.as_bytes()[at] == b'}' => return None,
                Some(at) => {
                    if at > 0 {
                        parts.push(Part::Literal(rest[..at].to_string()));
                    }
                    let close = rest[at..].find('}')? + at;
                    let body = &rest[at + 1..close];
                    if body.is_empty() || body.contains('{') {
                        return None;
                    }
                    let op = body
                        .chars()
                        .next()
                        .filter(|c| matches!(c, '+' | '#' | '.' | '/' | ';' | '?' | '&'));
                    parts.push(Part::Expr(op));
                    rest = &rest[close + 1..];
                }
                None => {
                    parts.push(Part::Literal(rest.to_string()));
                    rest = "";
                }
            }
        }
        let literal_chars = parts
            .iter()
            .map(|p| match p {
                Part::Literal(l) => l.chars().count(),
                Part::Expr(_) => 0,
            })
            .sum();
        Some(Self {
            parts,
            literal_chars,
        })
    }

    /// How specific the template is (its literal characters): of two that match a URI, the
    /// more specific made it.
    pub fn specificity(&self) -> usize {
        self.literal_chars
    }

    /// Whether `uri` is an expansion of this template.
    pub fn matches(&self, uri: &str) -> bool {
        self.matches_counting(uri).0
    }

    /// [`Template::matches`], and how many steps it took (never more than [`MAX_STEPS`] + 1).
    fn matches_counting(&self, uri: &str) -> (bool, usize) {
        let mut steps = 0;
        let mut failed = std::collections::HashSet::new();
        let matched = self.matches_from(uri, 0, 0, &mut steps, &mut failed);
        (matched, steps)
    }

    /// Whether `uri[at..]` matches the parts from `part` on. `failed` remembers the (part,
    /// position) pairs already known not to match.
    fn matches_from(
        &self,
        uri: &str,
        part: usize,
        at: usize,
        steps: &mut usize,
        failed: &mut std::collections::HashSet<(usize, usize)>,
    ) -> bool {
        *steps += 1;
        if *steps > MAX_STEPS || failed.contains(&(part, at)) {
            return false;
        }
        let matched = match self.parts.get(part) {
            None => at == uri.len(),
            Some(Part::Literal(l)) => {
                uri[at..].starts_with(l.as_str())
                    && self.matches_from(uri, part + 1, at + l.len(), steps, failed)
            }
            // The last part takes the rest, if it can hold it: one step, however long the URI.
            Some(Part::Expr(op)) if part + 1 == self.parts.len() => {
                uri[at..].char_indices().all(|(i, c)| spans(*op, c, i == 0))
            }
            Some(Part::Expr(op)) => {
                // Every span this expression can cover, shortest first: an undefined variable
                // expands to nothing.
                let mut end = at;
                let mut found = self.matches_from(uri, part + 1, end, steps, failed);
                for (i, c) in uri[at..].char_indices() {
                    if found || *steps > MAX_STEPS || !spans(*op, c, i == 0) {
                        break;
                    }
                    end = at + i + c.len_utf8();
                    found = self.matches_from(uri, part + 1, end, steps, failed);
                }
                found
            }
        };
        if !matched {
            failed.insert((part, at));
        }
        matched
    }
}

/// Whether an expression with operator `op` can expand to text holding `c` (`first`: as the
/// expansion's first character, where the operator's own prefix stands).
fn spans(op: Option<char>, c: char, first: bool) -> bool {
    match op {
        // Reserved expansion may hold any URI character; fragment expansion too, after its `#`.
        Some('+') => true,
        Some('#') => !first || c == '#',
        // Path segments: `/a/b`.
        Some('/') => c != '?' && c != '#' && (!first || c == '/'),
        // Query and parameters: `?a=1&b=2`, `;x=1`, up to the fragment.
        Some('?' | '&' | ';') => c != '#' && (!first || Some(c) == op),
        // Labels: `.a.b`, within a segment.
        Some('.') => !matches!(c, '/' | '?' | '#') && (!first || c == '.'),
        // Simple expansion percent-encodes reserved characters: never `/`, `?`, `#`.
        _ => !matches!(c, '/' | '?' | '#'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(template: &str, uri: &str) -> bool {
        Template::parse(template).is_some_and(|t| t.matches(uri))
    }

    #[test]
    fn a_uri_matches_the_templates_it_can_be_expanded_from() {
        assert!(matches("res://{id}", "res://5"));
        assert!(
            !matches("res://{id}", "res://5/meta"),
            "simple never spans /"
        );
        assert!(matches("res://{id}/meta", "res://5/meta"));
        assert!(matches("file:///{+path}", "file:///home/user/.ssh/id_rsa"));
        assert!(matches("search{?q,lang}", "search?q=x&lang=en"));
        assert!(matches("search{?q,lang}", "search"));
        assert!(matches("repo{/owner,name}/issues", "repo/a/b/issues"));
        assert!(
            !matches("repo{/owner}", "repox"),
            "a path expansion starts with /"
        );
        assert!(matches("doc{#section}", "doc#intro"));
        assert!(matches("é://{x}", "é://ü"));
    }

    #[test]
    fn a_malformed_template_matches_nothing() {
        for bad in ["file:///home/{", "file:///{}/x", "a}b", "a{b{c}}"] {
            assert!(Template::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_more_literal_template_is_the_more_specific() {
        let short = Template::parse("res://{id}").expect("parses");
        let long = Template::parse("res://{id}/meta").expect("parses");
        assert!(long.specificity() > short.specificity());
    }

    #[test]
    fn matching_is_bounded() {
        let many = "{a}".repeat(30) + "!";
        let t = Template::parse(&many).expect("parses");
        let (matched, steps) = t.matches_counting(&"x".repeat(2048));
        assert!(!matched);
        assert!(steps <= MAX_STEPS + 1, "{steps} steps");
        // A trailing expression takes the rest at once, however long.
        let long = format!("file:///{}", "a/".repeat(50_000));
        let (matched, steps) = Template::parse("file:///{+path}")
            .expect("parses")
            .matches_counting(&long);
        assert!(matched && steps < 10, "{matched} after {steps} steps");
        assert!(
            !matches("doc{#s}", "docfoo/bar"),
            "a fragment starts with #"
        );
        assert!(matches("doc{#s}", "doc#foo/bar"));
    }
}

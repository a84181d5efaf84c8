//! Which resource template a URI was made from (RFC 6570, levels 1–4, read backwards): the
//! gateway routes a `resources/read` or a template completion to the server whose template it
//! is, and the catalog refuses a listed template that is not well formed.
//!
//! Invariants: a URI matches a template only when every literal part of the template appears
//! in it, in order, and each expression's span holds only what that expression can expand to
//! (a simple `{var}` never spans `/`, `?` or `#`); a template that is not well formed (an
//! unclosed or empty `{}`) matches nothing; matching reads the URI once, left to right, keeping
//! the template positions it can be at (no backtracking), and its work is drawn from a
//! [`Budget`] that one look-up shares across every template it tries — a server listing
//! thousands of pathological templates costs a bounded time per request, not minutes.

/// One step of a parsed template: a literal character, or an expression by its operator
/// (`None` for a simple `{var}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Char(char),
    Expr(Option<char>),
}

/// A parsed template, ready to match URIs.
#[derive(Debug, Clone)]
pub struct Template {
    nodes: Vec<Node>,
    /// How many characters of the template are literal: the more, the more specific.
    literal_chars: usize,
}

/// Work allowed for matching one URI, shared by the templates it is tried against: a step is
/// one template position carried over one character of the URI. Spent, nothing more matches.
#[derive(Debug, Clone)]
pub struct Budget {
    left: usize,
    /// A match failed for want of steps: its answer ("no") is not known to be true.
    spent: bool,
}

impl Budget {
    /// A budget of `steps`.
    pub fn new(steps: usize) -> Self {
        Self {
            left: steps,
            spent: false,
        }
    }

    /// Whether a match failed for want of steps (a caller must not take that "no" as an
    /// answer: fail closed).
    pub fn spent(&self) -> bool {
        self.spent
    }
}

/// The steps [`Template::matches`] allows one template (about a millisecond of work).
pub const STEPS_PER_MATCH: usize = 1 << 20;

impl Template {
    /// `template` parsed; `None` when it is not a well-formed template.
    pub fn parse(template: &str) -> Option<Self> {
        let mut nodes = Vec::new();
        let mut literal_chars = 0;
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                Some(at) if rest.as_bytes()[at] == b'}' => return None,
                Some(at) => {
                    literal_chars += rest[..at].chars().count();
                    nodes.extend(rest[..at].chars().map(Node::Char));
                    let close = rest[at..].find('}')? + at;
                    let body = &rest[at + 1..close];
                    if body.is_empty() || body.contains('{') {
                        return None;
                    }
                    let op = body
                        .chars()
                        .next()
                        .filter(|c| matches!(c, '+' | '#' | '.' | '/' | ';' | '?' | '&'));
                    nodes.push(Node::Expr(op));
                    rest = &rest[close + 1..];
                }
                None => {
                    literal_chars += rest.chars().count();
                    nodes.extend(rest.chars().map(Node::Char));
                    rest = "";
                }
            }
        }
        Some(Self {
            nodes,
            literal_chars,
        })
    }

    /// How specific the template is (its literal characters): of two that match a URI, the
    /// more specific made it.
    pub fn specificity(&self) -> usize {
        self.literal_chars
    }

    /// Whether `uri` is an expansion of this template (within [`STEPS_PER_MATCH`]).
    pub fn matches(&self, uri: &str) -> bool {
        self.matches_within(uri, &mut Budget::new(STEPS_PER_MATCH))
    }

    /// Whether `uri` is an expansion of this template, the work taken from `budget`; `false`
    /// once it is spent.
    ///
    /// States: `2i` is "before node `i`" (for an expression: before its first character),
    /// `2i + 1` "inside expression `i`", `2n` "after the last node". An expression may expand
    /// to nothing (an undefined variable), so being before or inside it is also being before
    /// the next node.
    pub fn matches_within(&self, uri: &str, budget: &mut Budget) -> bool {
        if budget.spent {
            return false;
        }
        let accept = 2 * self.nodes.len();
        // Which states are in `current`/`next`: the character count at which each was added.
        let mut mark = vec![usize::MAX; accept + 1];
        let mut current = Vec::new();
        self.enter(0, 0, &mut mark, &mut current);
        for (at, c) in uri.chars().enumerate() {
            let round = at + 1;
            let mut next = Vec::with_capacity(current.len());
            for &state in &current {
                if budget.left == 0 {
                    budget.spent = true;
                    return false;
                }
                budget.left -= 1;
                let i = state / 2;
                let to = match self.nodes.get(i) {
                    Some(Node::Char(l)) if *l == c => 2 * (i + 1),
                    Some(Node::Expr(op)) if spans(*op, c, state % 2 == 0) => 2 * i + 1,
                    _ => continue,
                };
                self.enter(to, round, &mut mark, &mut next);
            }
            if next.is_empty() {
                return false;
            }
            current = next;
        }
        current.contains(&accept)
    }

    /// Adds `state` to `set` (stamped `round` in `mark`), and every state it reaches without
    /// reading a character: past an expression that expands to nothing, or that has ended.
    fn enter(&self, mut state: usize, round: usize, mark: &mut [usize], set: &mut Vec<usize>) {
        loop {
            if mark[state] == round {
                return;
            }
            mark[state] = round;
            set.push(state);
            match self.nodes.get(state / 2) {
                Some(Node::Expr(_)) => state = 2 * (state / 2 + 1),
                _ => return,
            }
        }
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
    fn matching_is_bounded_and_shares_its_budget() {
        // Thirty adjacent expressions and a literal that never comes: one pass, no
        // backtracking over the ways to split the URI among them.
        let many = "{+a}".repeat(30) + "!";
        let t = Template::parse(&many).expect("parses");
        let mut budget = Budget::new(200_000);
        assert!(!t.matches_within(&"x".repeat(2048), &mut budget));
        assert!(!budget.spent(), "{budget:?}");
        // A long URI under a trailing expression: a few steps a character.
        let long = format!("file:///{}", "a/".repeat(50_000));
        let path = Template::parse("file:///{+path}").expect("parses");
        let mut budget = Budget::new(400_000);
        assert!(path.matches_within(&long, &mut budget));
        // One budget across templates: spent by the first, the second matches nothing.
        let mut budget = Budget::new(2_000);
        assert!(!t.matches_within(&"x".repeat(2048), &mut budget));
        assert!(budget.spent());
        assert!(!path.matches_within("file:///a", &mut budget));
        assert!(
            !matches("doc{#s}", "docfoo/bar"),
            "a fragment starts with #"
        );
        assert!(matches("doc{#s}", "doc#foo/bar"));
        assert!(
            matches("a{x}{y}b", "ab"),
            "expressions that expand to nothing"
        );
        assert!(matches("a{x}{/y}b", "aq/rb"));
        assert!(!matches("a{x}{.y}b", "a/b"), "neither expansion holds /");
    }
}

//! `cargo xtask cycles`: no module of a workspace crate imports a module that imports it back.
//!
//! Invariant: the check fails (exit 1) naming every cycle it finds, with the line that makes
//! each edge; it passes only when the module graph of every crate root (`src/lib.rs`,
//! `src/main.rs`, `src/bin/*.rs`) is acyclic at every folder level.
//!
//! The graph is read from the source text, not from the compiler: the module tree comes from
//! `mod NAME;` / `mod NAME { ... }` declarations, the edges from paths that start with `crate::`,
//! `super::` or `self::` (in `use` lines and in code). Granularity is one folder level at a time:
//! the nodes of a level are the child modules of one parent, and a file anywhere under child `A`
//! that names something under sibling `B` makes the edge `A → B`. Naming an ancestor or a
//! descendant is not an edge (a parent is not a node of its children's level), so `use super::*`
//! in a child never counts, while a child naming its parent's sibling does count, one level up.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A module's absolute path inside its crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// Entry point: `cargo xtask cycles` (no arguments).
pub(crate) fn main(args: &[String]) -> ExitCode {
    if let Some(a) = args.first() {
        eprintln!("usage: cargo xtask cycles (no arguments; got `{a}`)");
        return ExitCode::from(2);
    }
    let root = workspace_root();
    let members = match workspace_members(&root) {
        Ok(members) => members,
        Err(e) => {
            eprintln!("xtask cycles: {e}");
            return ExitCode::from(2);
        }
    };
    let mut found = 0;
    for member in members {
        for crate_root in crate_roots(&root.join(&member).join("src")) {
            let graph = match ModuleGraph::read(&crate_root) {
                Ok(graph) => graph,
                Err(e) => {
                    eprintln!("xtask cycles: {e}");
                    return ExitCode::from(2);
                }
            };
            let shown = crate_root
                .strip_prefix(&root)
                .unwrap_or(&crate_root)
                .display()
                .to_string();
            let prefix = format!("{}/", root.display());
            for cycle in graph.cycles() {
                found += 1;
                let cycle = cycle.to_string().replace(&prefix, "");
                eprintln!("module cycle in {shown}: {cycle}");
            }
        }
    }
    if found == 0 {
        eprintln!("xtask cycles: no module cycle in any workspace crate");
        ExitCode::SUCCESS
    } else {
        eprintln!("xtask cycles: {found} module cycle(s)");
        ExitCode::from(1)
    }
}

/// The workspace root: the parent of this crate's manifest directory, whichever worktree it is.
fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// The `members = [...]` of the root `Cargo.toml`.
fn workspace_members(root: &Path) -> Result<Vec<String>, String> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let start = text
        .find("members")
        .and_then(|at| text[at..].find('[').map(|open| at + open + 1))
        .ok_or_else(|| format!("{} has no workspace members", manifest.display()))?;
    let end = text[start..]
        .find(']')
        .map(|close| start + close)
        .ok_or_else(|| format!("{}: unterminated members list", manifest.display()))?;
    Ok(text[start..end]
        .split(',')
        .map(|item| item.trim().trim_matches('"').to_string())
        .filter(|item| !item.is_empty())
        .collect())
}

/// The crate roots under `src`: `lib.rs`, `main.rs`, `bin/*.rs`, each its own module tree.
fn crate_roots(src: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .filter(|path| path.is_file())
        .collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = bins
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            .collect();
        bins.sort();
        roots.extend(bins);
    }
    roots
}

/// Where an edge was seen: the file and line of the first path that makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Site {
    file: PathBuf,
    line: usize,
}

/// One cycle at one folder level: the parent module and the siblings in order (the first is
/// named again at the end), with the site of each edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cycle {
    level: ModPath,
    nodes: Vec<String>,
    sites: Vec<Site>,
    /// Every sibling on some cycle with these (the strongly connected set), when more than
    /// `nodes`.
    tangled: Vec<String>,
}

impl Cycle {
    /// The siblings of the cycle, in order, as `a → b → a`.
    #[cfg(test)]
    fn names(&self) -> String {
        let mut names = self.nodes.clone();
        names.push(self.nodes[0].clone());
        names.join(" → ")
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = if self.level.is_empty() {
            "crate".to_string()
        } else {
            format!("crate::{}", self.level.join("::"))
        };
        write!(f, "in {level}:")?;
        if self.tangled.len() > self.nodes.len() {
            write!(
                f,
                " {} modules are tangled ({}); one cycle:",
                self.tangled.len(),
                self.tangled.join(", ")
            )?;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let next = &self.nodes[(i + 1) % self.nodes.len()];
            let site = &self.sites[i];
            write!(
                f,
                "\n    {node} → {next} ({}:{})",
                site.file.display(),
                site.line
            )?;
        }
        Ok(())
    }
}

/// The modules of one crate root and the edges between siblings, per folder level.
#[derive(Debug, Default)]
pub(crate) struct ModuleGraph {
    /// Every module (file or inline), by absolute path.
    modules: BTreeSet<ModPath>,
    /// Per level (parent module): sibling → sibling → where first seen.
    edges: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Site>>>,
}

/// A path as written in one file, made absolute, with where it was written.
struct Named {
    from: ModPath,
    path: ModPath,
    line: usize,
}

impl ModuleGraph {
    /// Reads the module tree under `crate_root` (a `lib.rs`/`main.rs`) and the paths in each of
    /// its files.
    pub(crate) fn read(crate_root: &Path) -> Result<Self, String> {
        let mut graph = Self::default();
        graph.modules.insert(Vec::new());
        let mut named = Vec::new();
        // (file, its module, the folder its child modules' files live in)
        let dir = crate_root.parent().unwrap_or(Path::new("."));
        let mut queue = vec![(crate_root.to_path_buf(), Vec::new(), dir.to_path_buf())];
        let mut seen = BTreeSet::new();
        while let Some((file, module, child_dir)) = queue.pop() {
            if !seen.insert(file.clone()) {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let scan = scan_file(&text, &module);
            for inline in scan.inline_modules {
                graph.modules.insert(inline);
            }
            for name in scan.child_files {
                let mut child = module.clone();
                child.push(name.clone());
                graph.modules.insert(child.clone());
                let flat = child_dir.join(format!("{name}.rs"));
                let nested = child_dir.join(&name).join("mod.rs");
                let (path, grandchildren) = if flat.is_file() {
                    (flat, child_dir.join(&name))
                } else if nested.is_file() {
                    (nested, child_dir.join(&name))
                } else {
                    continue; // e.g. a `#[path]` module: outside this check
                };
                queue.push((path, child, grandchildren));
            }
            named.extend(scan.named.into_iter().map(|n| (file.clone(), n)));
        }
        for (file, n) in named {
            graph.add_edge(&file, &n);
        }
        Ok(graph)
    }

    /// The longest prefix of `path` that is a module.
    fn module_of(&self, path: &[String]) -> ModPath {
        (0..=path.len())
            .rev()
            .map(|len| path[..len].to_vec())
            .find(|prefix| self.modules.contains(prefix))
            .unwrap_or_default()
    }

    /// The edge `n` makes, at the level where its file's module and the named module part.
    fn add_edge(&mut self, file: &Path, n: &Named) {
        let target = self.module_of(&n.path);
        let common = n
            .from
            .iter()
            .zip(&target)
            .take_while(|(a, b)| a == b)
            .count();
        let (Some(a), Some(b)) = (n.from.get(common), target.get(common)) else {
            return; // an ancestor or a descendant (or itself)
        };
        self.edges
            .entry(n.from[..common].to_vec())
            .or_default()
            .entry(a.clone())
            .or_default()
            .entry(b.clone())
            .or_insert(Site {
                file: file.to_path_buf(),
                line: n.line,
            });
    }

    /// One cycle per strongly connected set of siblings, each level in order.
    pub(crate) fn cycles(&self) -> Vec<Cycle> {
        let mut cycles = Vec::new();
        for (level, edges) in &self.edges {
            let mut done: BTreeSet<&String> = BTreeSet::new();
            for start in edges.keys() {
                if done.contains(start) {
                    continue;
                }
                if let Some(path) = shortest_cycle(edges, start) {
                    let sites = (0..path.len())
                        .map(|i| edges[&path[i]][&path[(i + 1) % path.len()]].clone())
                        .collect();
                    // Each member of this cycle's component would find a cycle of its own.
                    let tangled = component(edges, start);
                    done.extend(tangled.iter().copied());
                    cycles.push(Cycle {
                        level: level.clone(),
                        nodes: path,
                        sites,
                        tangled: tangled.into_iter().cloned().collect(),
                    });
                }
            }
        }
        cycles
    }
}

type Edges = BTreeMap<String, BTreeMap<String, Site>>;

/// The shortest path from `start` back to itself (breadth first), without the repeated end.
fn shortest_cycle(edges: &Edges, start: &String) -> Option<Vec<String>> {
    let mut parent: BTreeMap<&String, &String> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for node in frontier {
            for to in edges.get(node).into_iter().flat_map(BTreeMap::keys) {
                if to == start {
                    let mut path = vec![node.clone()];
                    let mut at = node;
                    while at != start {
                        at = parent[at];
                        path.push(at.clone());
                    }
                    path.reverse();
                    return Some(path);
                }
                if !parent.contains_key(to) {
                    parent.insert(to, node);
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    None
}

/// The nodes that reach `start` and are reached from it.
fn component<'a>(edges: &'a Edges, start: &'a String) -> BTreeSet<&'a String> {
    let reach = |forward: bool| {
        let mut seen = BTreeSet::from([start]);
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for (from, tos) in edges {
                for to in tos.keys() {
                    let (a, b) = if forward { (from, to) } else { (to, from) };
                    if a == node && seen.insert(b) {
                        stack.push(b);
                    }
                }
            }
        }
        seen
    };
    let forward = reach(true);
    reach(false).intersection(&forward).copied().collect()
}

/// What one file declares and names.
struct Scan {
    /// `mod NAME;` at file level: the files of child modules.
    child_files: Vec<String>,
    /// `mod NAME { ... }`, as absolute paths.
    inline_modules: Vec<ModPath>,
    /// `crate::`, `super::` and `self::` paths, made absolute.
    named: Vec<Named>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    /// Any other punctuation (`$`, `(`, `*`, ...).
    Other(char),
}

/// Tokens with their line numbers; comments, string and char literals dropped.
fn tokenize(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let count_lines = |from: usize, to: usize, line: &mut usize| {
        *line += chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let start = i;
                let mut depth = 0usize;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                count_lines(start, i, &mut line);
            }
            'r' if matches!(next, Some('"' | '#')) && raw_string_end(&chars, i + 1).is_some() => {
                let end = raw_string_end(&chars, i + 1).unwrap_or(chars.len());
                count_lines(i, end, &mut line);
                i = end;
            }
            'b' if next == Some('"') => i += 1, // the string itself is skipped next
            '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                count_lines(start, i, &mut line);
            }
            '\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if next == Some('\\') {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1; // a lifetime: its name follows as an identifier
                }
            }
            ':' if next == Some(':') => {
                tokens.push((Token::PathSep, line));
                i += 2;
            }
            '{' => {
                tokens.push((Token::Open, line));
                i += 1;
            }
            '}' => {
                tokens.push((Token::Close, line));
                i += 1;
            }
            ',' => {
                tokens.push((Token::Comma, line));
                i += 1;
            }
            ';' => {
                tokens.push((Token::Semi, line));
                i += 1;
            }
            _ if c.is_alphanumeric() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let word = word.strip_prefix("r#").unwrap_or(&word).to_string();
                tokens.push((Token::Ident(word), line));
            }
            _ => {
                tokens.push((Token::Other(c), line));
                i += 1;
            }
        }
    }
    tokens
}

/// The index just past the raw string starting at `chars[at]` (`#`s then `"`), if it is one.
fn raw_string_end(chars: &[char], at: usize) -> Option<usize> {
    let hashes = chars[at..].iter().take_while(|&&c| c == '#').count();
    if chars.get(at + hashes) != Some(&'"') {
        return None;
    }
    let mut i = at + hashes + 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(chars.len())
}

/// Reads the module declarations and the `crate::`/`super::`/`self::` paths of one file whose
/// module is `module`.
fn scan_file(text: &str, module: &[String]) -> Scan {
    let tokens = tokenize(text);
    let mut scan = Scan {
        child_files: Vec::new(),
        inline_modules: Vec::new(),
        named: Vec::new(),
    };
    // Inline modules open at the current brace depth: (name, depth inside its braces).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |i: usize| match tokens.get(i) {
        Some((Token::Ident(word), _)) => Some(word.as_str()),
        _ => None,
    };
    while i < tokens.len() {
        let current: ModPath = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(name, _)| name.clone()))
            .collect();
        match &tokens[i].0 {
            Token::Open => depth += 1,
            Token::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(word) if word == "mod" => {
                if let Some(name) = ident(i + 1) {
                    match tokens.get(i + 2).map(|t| &t.0) {
                        Some(Token::Semi) if inline.is_empty() => {
                            scan.child_files.push(name.to_string());
                        }
                        Some(Token::Open) => {
                            let mut path = current.clone();
                            path.push(name.to_string());
                            scan.inline_modules.push(path);
                            inline.push((name.to_string(), depth + 1));
                        }
                        _ => {}
                    }
                }
            }
            Token::Ident(word)
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep)
                    && !matches!(
                        i.checked_sub(1).and_then(|p| tokens.get(p)).map(|t| &t.0),
                        Some(Token::Other('$') | Token::PathSep)
                    )
                    && i.checked_sub(1).and_then(ident) != Some("in") =>
            {
                let mut paths = Vec::new();
                let end = use_tree(&tokens, i, Vec::new(), &mut paths);
                for (segments, line) in paths {
                    if let Some(path) = absolute(&current, &segments) {
                        scan.named.push(Named {
                            from: current.clone(),
                            path,
                            line,
                        });
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

/// Reads the path (or `use` tree) starting at `tokens[i]` under `prefix`; pushes each full
/// path with its line; returns the index after it.
fn use_tree(
    tokens: &[(Token, usize)],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, usize)>,
) -> usize {
    let mut path = prefix;
    let line = tokens.get(i).map_or(0, |t| t.1);
    loop {
        match tokens.get(i).map(|t| &t.0) {
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.0) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                out.push((path, line));
                return i;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    match tokens.get(i).map(|t| &t.0) {
                        None => return i,
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        Some(Token::Ident(_) | Token::Open) => {
                            i = use_tree(tokens, i, path.clone(), out);
                        }
                        Some(_) => {
                            // `*` and the like: the group's prefix is what is named.
                            out.push((path.clone(), tokens[i].1));
                            i += 1;
                        }
                    }
                }
            }
            _ => {
                // `crate::*` or a path cut short: what came before is named.
                out.push((path, line));
                return i;
            }
        }
    }
}

/// `segments` (starting `crate`, `super` or `self`, with any `self` inside a group) from the
/// module `current`, as an absolute path; `None` when it climbs above the crate.
fn absolute(current: &[String], segments: &[String]) -> Option<ModPath> {
    let mut path: ModPath = Vec::new();
    for (n, segment) in segments.iter().enumerate() {
        match segment.as_str() {
            "crate" if n == 0 => path.clear(),
            "self" if n == 0 => path = current.to_vec(),
            "self" => {} // `use a::{self, B}`: `a` itself
            "super" => {
                if n == 0 {
                    path = current.to_vec();
                }
                path.pop()?;
            }
            _ => path.push(segment.clone()),
        }
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch source tree in the temp dir, removed on drop.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str, files: &[(&str, &str)]) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-cycles-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (path, text) in files {
                let path = dir.join(path);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                std::fs::write(&path, text).expect("write");
            }
            Self(dir)
        }

        fn cycles(&self) -> Vec<Cycle> {
            ModuleGraph::read(&self.0.join("lib.rs"))
                .expect("reads")
                .cycles()
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_cycle_between_siblings_is_named_with_its_lines() {
        let tree = Tree::new(
            "cycle",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
                ("a.rs", "use crate::b::Thing;\n"),
                (
                    "b.rs",
                    "// crate::a is not named here\n\nfn f() { crate::c::g(); }\n",
                ),
                ("c.rs", "use super::{a::{self, X}, b};\n"),
            ],
        );
        let cycles = tree.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].names(), "a → b → c → a");
        assert_eq!(cycles[0].tangled, ["a", "b", "c"]);
        let shown = cycles[0].to_string();
        assert!(shown.starts_with("in crate:"), "{shown}");
        assert!(shown.contains("a → b ("), "{shown}");
        assert!(shown.contains("b.rs:3)"), "the edge's line: {shown}");
    }

    #[test]
    fn an_acyclic_tree_passes() {
        let tree = Tree::new(
            "acyclic",
            &[
                ("lib.rs", "pub mod a;\nmod b;\npub use a::Api;\n"),
                (
                    "a/mod.rs",
                    "mod x;\nmod y;\nuse crate::b::Leaf;\nuse self::x::X;\n",
                ),
                // Children naming their parent (and the parent naming them) is no cycle.
                (
                    "a/x.rs",
                    "use super::*;\nuse super::y::Y;\nuse crate::a::Api;\n",
                ),
                (
                    "a/y.rs",
                    "use crate::b;\n#[cfg(test)]\nmod tests { use super::super::super::b::Leaf; }\n",
                ),
                (
                    "b.rs",
                    "//! no `use crate::a` here: \"crate::a::X\" in a string is not a path\nconst S: &str = \"crate::a::X\";\nmacro_rules! m { () => { $crate::a::X } }\n",
                ),
            ],
        );
        let cycles = tree.cycles();
        assert!(cycles.is_empty(), "{cycles:?}");
    }

    #[test]
    fn a_child_naming_its_parents_sibling_makes_the_edge_one_level_up() {
        let tree = Tree::new(
            "child",
            &[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a/mod.rs", "mod inner;\n"),
                ("a/inner.rs", "pub fn f() { super::super::b::g() }\n"),
                ("b.rs", "use crate::a::inner::f;\n"),
            ],
        );
        let cycles = tree.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].names(), "a → b → a");
        assert!(cycles[0].level.is_empty());
        assert!(
            cycles[0].to_string().contains("inner.rs:1"),
            "{}",
            cycles[0]
        );
    }

    #[test]
    fn a_cycle_one_folder_down_names_its_level() {
        let tree = Tree::new(
            "nested",
            &[
                ("lib.rs", "mod call;\n"),
                ("call.rs", "mod p;\nmod q;\n"),
                ("call/p.rs", "use super::q::Q;\n"),
                ("call/q.rs", "use crate::call::p::P;\n"),
            ],
        );
        let cycles = tree.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(cycles[0].level, vec!["call".to_string()]);
        assert_eq!(cycles[0].names(), "p → q → p");
    }
}

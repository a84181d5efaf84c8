//! Plain-text tables: columns padded to their widest cell, cells cut to a maximum width so one
//! long description cannot wreck the layout — except the first column, the name a later
//! command takes (`call mcp__…`), which is shown whole.

/// Widest a cell may be before it is cut with an ellipsis.
const MAX_CELL: usize = 60;

/// Renders `rows` under `header`; no rows is `(none)`.
pub(crate) fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "(none)\n".into();
    }
    let cells: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(rows.iter().map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, c)| match i {
                    0 => c.lines().next().unwrap_or("").trim().to_string(),
                    _ => cut(c),
                })
                .collect()
        }))
        .collect();
    let mut widths = vec![0; header.len()];
    for row in &cells {
        for (i, c) in row.iter().enumerate().take(widths.len()) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == row.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// First line of `s`, cut to [`MAX_CELL`] characters.
pub(crate) fn cut(s: &str) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() <= MAX_CELL {
        line.to_string()
    } else {
        let head: String = line.chars().take(MAX_CELL - 1).collect();
        format!("{head}…")
    }
}

/// `v` as pretty JSON with a final newline.
pub(crate) fn pretty(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_cuts() {
        let out = render(
            &["A", "B"],
            &[
                vec!["x".into(), "y".repeat(100)],
                vec!["long".into(), "z".into()],
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "A     B");
        assert!(lines[1].starts_with("x     yyy"));
        assert!(lines[1].ends_with('…'));
        assert_eq!(lines[2], "long  z");
        // The name column is never cut: it is what a later command takes.
        let name = format!("mcp__server__{}", "n".repeat(80));
        let out = render(&["NAME", "B"], &[vec![name.clone(), "b".into()]]);
        assert!(out.lines().nth(1).unwrap().starts_with(&name), "{out}");
    }
}

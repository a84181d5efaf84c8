//! Reading a URI's path: what a `.`/`..` segment is, however it is spelled.
//!
//! Invariant: a segment counts as a dot segment when a server that decodes percent-escapes,
//! takes `\\` as a separator (a Windows path) or reads the whole rest of the URI as a path
//! would resolve it as one.

/// Whether a segment of `uri` is `.` or `..`, spelled plainly or percent-encoded, with `/`,
/// `%2F`, `\\` or `%5C` as the separator, tabs and line breaks removed (as URL parsers do) —
/// in the query and fragment too: a server whose template takes the rest of the URI
/// (`file:///{+path}`) may read `file:///public?/../secrets/key` as a path.
pub fn has_dot_segment(uri: &str) -> bool {
    let path = uri
        .replace(['\t', '\n', '\r'], "")
        .to_ascii_lowercase()
        .replace("%2f", "/")
        .replace("%5c", "/");
    path.split(['/', '\\', '?', '#']).any(|segment| {
        let decoded = segment.replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_however_spelled_and_separated() {
        for uri in [
            "file:///a/../b",
            "file:///a/./b",
            "file:///a/%2e%2E/b",
            "file:///a%2f..%2fb",
            "file:///a%5C..%5Cb",
            "file:///a\\..\\b",
            "skill://x/..",
            "file:///public?/../secrets/key",
            "file:///public#/../secrets/key",
            "file:///public?..",
            "skill://t/.\t./etc/passwd",
        ] {
            assert!(has_dot_segment(uri), "{uri}");
        }
        for uri in [
            "file:///a/..b/c",
            "file:///a/b.",
            "file:///a?x=../y",
            "https://h/p?q=a.b",
        ] {
            assert!(!has_dot_segment(uri), "{uri}");
        }
    }
}

//! URI readings: the form a URL parser or a server makes of a URI as written, so a rule over
//! URIs judges what a server will read, not only how the client spelt it.
//!
//! Invariant: a URI and its [`canonical_uri`] name one resource to a WHATWG URL parser or a
//! server that decodes escapes; a rule that denies one spelling is checked against both (a
//! URI deny pattern is compiled in both spellings too, see [`crate::visibility`]).

/// `uri` as a server may read it, where that differs from how it is written: ASCII tabs and
/// line breaks removed and surrounding controls and spaces trimmed (as URL parsers do), `\`
/// read as `/` (spelled `%5C` too), percent-escapes decoded, the scheme and the authority
/// lowercased.
pub fn canonical_uri(uri: &str) -> Option<String> {
    let trimmed = uri.trim_matches(|c: char| c <= ' ');
    let mut bytes = Vec::with_capacity(trimmed.len());
    let mut rest = trimmed
        .bytes()
        .filter(|b| !matches!(b, b'\t' | b'\n' | b'\r'));
    while let Some(b) = rest.next() {
        let byte = match b {
            b'\\' => b'/',
            b'%' => {
                let mut look = rest.clone();
                let hex = |d: Option<u8>| d.and_then(|d| (d as char).to_digit(16));
                match (hex(look.next()), hex(look.next())) {
                    (Some(high), Some(low)) => {
                        rest = look;
                        // An encoded `\` is a separator too, to a server that decodes and
                        // then reads a Windows path.
                        match (high * 16 + low) as u8 {
                            b'\\' => b'/',
                            decoded => decoded,
                        }
                    }
                    _ => b'%',
                }
            }
            other => other,
        };
        bytes.push(byte);
    }
    let mut canonical = String::from_utf8_lossy(&bytes).into_owned();
    // The scheme, and the authority after `//`, lowercased.
    if let Some(colon) = canonical.find(':') {
        let authority_end = canonical[colon + 1..]
            .strip_prefix("//")
            .map(|after| colon + 3 + after.find(['/', '?', '#']).unwrap_or(after.len()))
            .unwrap_or(colon);
        canonical[..authority_end].make_ascii_lowercase();
    }
    // A file URL's other spellings of its path (`file:/p`, `file:p`, `file://localhost/p`)
    // are `file:///p` to a URL parser.
    if let Some(path) = canonical.strip_prefix("file:") {
        let path = path.strip_prefix("//localhost").unwrap_or(path);
        let path = path.trim_start_matches('/');
        canonical = format!("file:///{path}");
    }
    (canonical != uri).then_some(canonical)
}

pub use mcp_harness_catalog::uri::has_dot_segment;

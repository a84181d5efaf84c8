//! What an HTTP/1.1 message's headers say about its body and its connection, read once for
//! both hand-written sides: the client's POST (`direct::h1`) and the gateway's own server.
//!
//! Invariant: a body's length is read from `Transfer-Encoding` before `Content-Length`
//! (RFC 9112 §6.3); `Content-Length` values, in one header or several, must all be the same
//! number, or the length is unknown and the message refused by the caller.

use reqwest::header::{CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING};

/// How a message's body ends, as its headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// With its last chunk (`Transfer-Encoding` ends in `chunked`).
    Chunked,
    /// Unknowable from here: a `Transfer-Encoding` that does not end in `chunked`.
    OtherCoding,
    /// After this many bytes.
    Length(u64),
    /// Neither header: a request has no body, an answer ends with its connection.
    Unsaid,
}

/// Why a message's `Content-Length` cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthError {
    /// A value that is not a decimal number.
    NotANumber,
    /// Two values that differ.
    Different,
}

/// How the body of a message with `headers` ends.
pub fn body_end(headers: &HeaderMap) -> Result<BodyEnd, LengthError> {
    let mut encodings = headers.get_all(TRANSFER_ENCODING).iter();
    if let Some(first) = encodings.next() {
        // The usual answer (once per streamed answer): one header, just `chunked`.
        if encodings.next().is_none() && first.as_bytes().eq_ignore_ascii_case(b"chunked") {
            return Ok(BodyEnd::Chunked);
        }
        let codings = || {
            headers
                .get_all(TRANSFER_ENCODING)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .map(str::trim)
                .filter(|coding| !coding.is_empty())
        };
        let chunked = |coding: &str| coding.eq_ignore_ascii_case("chunked");
        // Chunked is applied once, last (RFC 9112, 6.1): named twice, the framing is not
        // chunked as far as this end goes, whatever a proxy in front made of it.
        let once = codings().filter(|c| chunked(c)).count() == 1;
        return Ok(match codings().next_back() {
            Some(coding) if chunked(coding) && once => BodyEnd::Chunked,
            _ => BodyEnd::OtherCoding,
        });
    }
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    // The usual request (once per call): one header, digits only.
    if let (Some(only), None) = (lengths.next(), lengths.next()) {
        let digits = only.as_bytes();
        if !digits.is_empty() && digits.len() <= 19 && digits.iter().all(u8::is_ascii_digit) {
            let n = digits
                .iter()
                .fold(0u64, |n, digit| n * 10 + u64::from(digit - b'0'));
            return Ok(BodyEnd::Length(n));
        }
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let n = std::str::from_utf8(part.trim_ascii())
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(LengthError::NotANumber)?;
            if length.is_some_and(|known| known != n) {
                return Err(LengthError::Different);
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(BodyEnd::Unsaid, BodyEnd::Length))
}

/// Which part of a parsed header is not a valid `http` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadHeader {
    /// Its name.
    Name,
    /// Its value.
    Value,
}

/// The headers `httparse` parsed, as a map (each kept, in order).
pub fn header_map(parsed: &[httparse::Header<'_>]) -> Result<HeaderMap, BadHeader> {
    let mut headers = HeaderMap::with_capacity(parsed.len());
    for header in parsed {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| BadHeader::Name)?;
        let value = HeaderValue::from_bytes(header.value).map_err(|_| BadHeader::Value)?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// The size a chunk-size line (without its line end) names: hex digits only (no sign, no
/// leading space), at most 16, before any `;` extension; `None` when it names none.
pub fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    let hex = digits.trim_ascii_end();
    if hex.is_empty() || hex.len() > 16 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    std::str::from_utf8(hex)
        .ok()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
}

/// Whether a comma-separated header `name` holds `token` (case-insensitive).
pub fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|each| each.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_body_end_follows_rfc_9112() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Result<BodyEnd, LengthError>);
        let cases: [Case<'_>; 11] = [
            (&[], Ok(BodyEnd::Unsaid)),
            (&[("content-length", "12")], Ok(BodyEnd::Length(12))),
            (
                &[("content-length", "3, 3"), ("content-length", "3")],
                Ok(BodyEnd::Length(3)),
            ),
            (
                &[("content-length", "3"), ("content-length", "4")],
                Err(LengthError::Different),
            ),
            (&[("content-length", "-1")], Err(LengthError::NotANumber)),
            (&[("content-length", "")], Err(LengthError::NotANumber)),
            (
                &[
                    ("transfer-encoding", "gzip, Chunked"),
                    ("content-length", "x"),
                ],
                Ok(BodyEnd::Chunked),
            ),
            (
                &[("transfer-encoding", "chunked, gzip")],
                Ok(BodyEnd::OtherCoding),
            ),
            // Chunked once, last, empty list elements aside.
            (&[("transfer-encoding", ",chunked,")], Ok(BodyEnd::Chunked)),
            (
                &[("transfer-encoding", "chunked, chunked")],
                Ok(BodyEnd::OtherCoding),
            ),
            (
                &[
                    ("transfer-encoding", "chunked"),
                    ("transfer-encoding", "chunked"),
                ],
                Ok(BodyEnd::OtherCoding),
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(body_end(&headers(pairs)), expected, "{pairs:?}");
        }
    }

    #[test]
    fn chunk_sizes_are_hex_before_extensions() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"0 ;name=value"), Some(0));
        assert_eq!(chunk_size(b"FFFFFFFFFFFFFFFF"), Some(u64::MAX));
        // Hex digits only: no sign (which `from_str_radix` takes) and nothing before them.
        for none in [
            &b""[..],
            b"zz",
            b"-1",
            b"+2",
            b" 2",
            b"10000000000000000",
            b";ext",
        ] {
            assert_eq!(chunk_size(none), None, "{none:?}");
        }
    }

    #[test]
    fn tokens_are_found_in_lists_case_insensitively() {
        let map = headers(&[
            ("connection", "Keep-Alive, Upgrade"),
            ("connection", "close"),
        ]);
        let name = reqwest::header::CONNECTION;
        assert!(has_token(&map, &name, "keep-alive"));
        assert!(has_token(&map, &name, "CLOSE"));
        assert!(!has_token(&map, &name, "keep"));
    }
}

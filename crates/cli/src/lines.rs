//! Standard input read a line at a time with a bound (`shell` and `watch` read their commands
//! this way): a line over [`MAX_LINE_BYTES`] is read to its end and reported, never held, and a
//! line that is not UTF-8 is reported; neither ends the input.

use std::io::BufRead;

/// The longest command line kept: 16 MiB (a call's JSON arguments fit many times over).
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The input ended.
    End,
    /// A line of text, its line ending removed.
    Text(String),
    /// A line of this many bytes, over the bound: skipped.
    TooLong(usize),
    /// A line that is not UTF-8: skipped.
    NotText,
}

impl Line {
    /// The text, or what to tell the user about line number `number`.
    pub(crate) fn text(self, number: u64) -> Option<Result<String, String>> {
        match self {
            Line::End => None,
            Line::Text(text) => Some(Ok(text)),
            Line::TooLong(bytes) => Some(Err(format!(
                "line {number} is {bytes} bytes long, over the limit of {} MiB; it was skipped",
                MAX_LINE_BYTES / (1024 * 1024)
            ))),
            Line::NotText => Some(Err(format!(
                "line {number} is not UTF-8 text; it was skipped"
            ))),
        }
    }
}

/// Reads the next line of `input`, keeping at most `max` bytes of it.
pub(crate) fn read(input: &mut impl BufRead, max: usize) -> std::io::Result<Line> {
    let mut kept = Vec::new();
    let mut total = 0usize;
    loop {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        let (length, ended) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if total.saturating_add(length) <= max {
            kept.extend_from_slice(&buffer[..length]);
        }
        total = total.saturating_add(length);
        input.consume(length);
        if ended {
            break;
        }
    }
    Ok(match (total, String::from_utf8(kept)) {
        (0, _) => Line::End,
        (bytes, _) if bytes > max => Line::TooLong(bytes),
        (_, Ok(text)) => Line::Text(text.trim_end_matches(['\r', '\n']).to_string()),
        (_, Err(_)) => Line::NotText,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_bounded_and_bad_ones_skipped() {
        let mut input = std::io::Cursor::new(b"one\r\n0123456789abc\n\xff\nlast".to_vec());
        let mut next = || read(&mut input, 8).expect("read");
        assert_eq!(next(), Line::Text("one".into()));
        assert_eq!(next(), Line::TooLong(14));
        assert_eq!(next(), Line::NotText);
        assert_eq!(next(), Line::Text("last".into()));
        assert_eq!(next(), Line::End);
    }
}

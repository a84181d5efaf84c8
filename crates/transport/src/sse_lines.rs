//! Splitting an event stream's bytes into lines, for both SSE parsers (the legacy transport's,
//! `crate::sse`, and the Streamable HTTP POST's, `crate::direct`).
//!
//! Invariants: a line ends at LF, CR or CRLF, also when the CR and the LF arrive in different
//! chunks; a line split over chunks is handed on whole, once; the only bytes kept between
//! chunks are those of the unterminated last line ([`LineSplitter::pending`]), which the caller
//! bounds.

/// Cuts chunks of an event stream, in any split, into lines.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    /// The current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF of the next chunk belongs to it.
    after_cr: bool,
}

impl LineSplitter {
    /// Calls `on_line` with each line `chunk` completes (without its ending) and keeps the
    /// unterminated rest. Stops at the first error `on_line` returns.
    pub(crate) fn feed<E>(
        &mut self,
        mut chunk: &[u8],
        mut on_line: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if chunk.is_empty() {
            return Ok(()); // keeps a CR that ended the last chunk waiting for its LF
        }
        if std::mem::take(&mut self.after_cr) && chunk[0] == b'\n' {
            chunk = &chunk[1..];
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            if self.line.is_empty() {
                on_line(&chunk[..end])?;
            } else {
                self.line.extend_from_slice(&chunk[..end]);
                let line = std::mem::take(&mut self.line);
                let done = on_line(&line);
                self.line = line;
                self.line.clear();
                done?;
            }
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    /// The bytes of the unterminated last line.
    pub(crate) fn pending(&self) -> usize {
        self.line.len()
    }

    /// The unterminated last line itself.
    pub(crate) fn pending_bytes(&self) -> &[u8] {
        &self.line
    }

    /// Forgets the unterminated line (a new stream, or one abandoned).
    pub(crate) fn clear(&mut self) {
        self.line = Vec::new();
        self.after_cr = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> (Vec<String>, usize) {
        let mut split = LineSplitter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            split
                .feed(chunk, |line| {
                    out.push(String::from_utf8_lossy(line).into_owned());
                    Ok::<_, ()>(())
                })
                .expect("no error");
        }
        (out, split.pending())
    }

    #[test]
    fn every_line_ending_in_every_split() {
        let text = b"a\r\nb\rc\n\r\nd\r\re";
        let want = vec!["a", "b", "c", "", "d", ""];
        assert_eq!(
            lines(&[text]),
            (want.iter().map(|s| s.to_string()).collect(), 1)
        );
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(lines(&bytes).0, want);
        for at in 1..text.len() {
            let (a, b) = text.split_at(at);
            assert_eq!(lines(&[a, b]).0, want, "split at {at}");
            assert_eq!(
                lines(&[a, b"", b]).0,
                want,
                "split at {at}, an empty chunk between"
            );
        }
    }

    #[test]
    fn an_error_stops_the_feed() {
        let mut split = LineSplitter::default();
        let mut seen = 0;
        let done = split.feed(b"one\ntwo\nthree\n", |_| {
            seen += 1;
            if seen == 2 { Err("stop") } else { Ok(()) }
        });
        assert_eq!((done, seen), (Err("stop"), 2));
    }
}

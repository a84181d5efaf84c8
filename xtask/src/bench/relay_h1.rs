//! The bench's hand-written HTTP/1.1 relay (`xtask bench-forwarder --relay h1`): what a gateway
//! with an HTTP layer of its own, on tokio, would cost before it reads any JSON.
//!
//! Each downstream connection gets one keep-alive connection of its own to the upstream. A
//! request is read until its head parses (`httparse`) and its `Content-Length` bytes are in,
//! then written upstream in one write; the answer goes back as its bytes come, one write per
//! read, its end found from its head (`Content-Length`, chunked framing, or no body for 1xx,
//! 204 and 304). Buffers are per connection and reused: nothing is allocated per request.
//!
//! Only what the bench sends is relayed: requests framed by `Content-Length` (or without a
//! body), one at a time. Anything else — a chunked request, a malformed or oversized head, an
//! answer without framing — ends the connection, as an error of this relay, never a guess.

use std::io::{Error, ErrorKind};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The most headers a head may have.
pub(super) const HEADERS: usize = 32;
/// The largest request (head and body) or answer head relayed.
pub(super) const LIMIT: usize = 1 << 20;
/// The read buffer of the answers.
pub(super) const READ: usize = 64 * 1024;

/// Relays every connection accepted on `listener` to `upstream`, until the future is dropped.
pub(super) async fn relay(listener: TcpListener, upstream: u16) {
    let mut connections = JoinSet::new();
    while let Ok((down, _)) = listener.accept().await {
        connections.spawn(async move {
            if let Err(e) = connection(down, upstream).await {
                eprintln!("xtask bench-forwarder (h1): a connection ended: {e}");
            }
        });
    }
}

/// One downstream connection, until its client closes it.
async fn connection(mut down: TcpStream, upstream: u16) -> std::io::Result<()> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream)).await?;
    down.set_nodelay(true)?;
    up.set_nodelay(true)?;
    let mut request = Vec::with_capacity(READ);
    let mut head = Vec::with_capacity(4096);
    let mut read = vec![0; READ];
    while let Some((_, length)) = read_request(&mut down, &mut request).await? {
        up.write_all(&request[..length]).await?;
        request.drain(..length);
        relay_answer(&mut up, &mut down, &mut head, &mut read).await?;
    }
    Ok(())
}

/// Reads into `buffer` until it holds a whole request; the length of its head and its whole
/// length, or `None` when the client closed the connection between requests.
pub(super) async fn read_request(
    down: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<Option<(usize, usize)>> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head) = request.parse(buffer).map_err(invalid)? {
            let mut length = 0;
            for header in request.headers.iter() {
                if header.name.eq_ignore_ascii_case("transfer-encoding") {
                    return Err(invalid("a chunked request (the bench sends none)"));
                }
                if header.name.eq_ignore_ascii_case("content-length") {
                    length = content_length(header.value)
                        .ok_or_else(|| invalid("a bad Content-Length"))?;
                }
            }
            let total = head + length;
            if total > LIMIT {
                return Err(invalid("a request over the relay's limit"));
            }
            while buffer.len() < total {
                if read_more(down, buffer).await? == 0 {
                    return Err(ErrorKind::UnexpectedEof.into());
                }
            }
            return Ok(Some((head, total)));
        }
        if buffer.len() > LIMIT {
            return Err(invalid("a request head over the relay's limit"));
        }
        if read_more(down, buffer).await? == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

/// Reads what has come into the spare capacity of `buffer` (kept at least [`READ`] bytes).
pub(super) async fn read_more(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> std::io::Result<usize> {
    buffer.reserve(READ);
    stream.read_buf(buffer).await
}

/// Sends the answer coming from `up` to `down` as it comes, until its end.
pub(super) async fn relay_answer(
    up: &mut TcpStream,
    down: &mut TcpStream,
    head: &mut Vec<u8>,
    read: &mut [u8],
) -> std::io::Result<()> {
    head.clear();
    let mut body = None::<Body>;
    loop {
        let n = up.read(read).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        let bytes = &read[..n];
        let done = match &mut body {
            Some(body) => body.feed(bytes)?,
            None => {
                head.extend_from_slice(bytes);
                let mut headers = [httparse::EMPTY_HEADER; HEADERS];
                let mut answer = httparse::Response::new(&mut headers);
                match answer.parse(head).map_err(invalid)? {
                    httparse::Status::Complete(length) => {
                        let mut framed = Body::of(&answer)?;
                        let done = framed.feed(&head[length..])?;
                        body = Some(framed);
                        done
                    }
                    httparse::Status::Partial if head.len() > LIMIT => {
                        return Err(invalid("an answer head over the relay's limit"));
                    }
                    httparse::Status::Partial => false,
                }
            }
        };
        down.write_all(bytes).await?;
        if done {
            return Ok(());
        }
    }
}

/// Where an answer's body ends, tracked over its bytes as they come.
pub(super) enum Body {
    /// This many bytes are still to come.
    Length(usize),
    /// Chunked framing, at this point of it.
    Chunked(Chunk),
}

/// The position in chunked framing (RFC 9112 §7.1; chunk extensions skipped).
#[derive(Clone, Copy)]
pub(super) enum Chunk {
    /// In a chunk's size line: the size so far, and whether an extension began.
    Size(usize, bool),
    /// After the size line's CR.
    SizeLf(usize),
    /// In a chunk's data: this many bytes left.
    Data(usize),
    /// After a chunk's data: its CR, then its LF.
    DataCr,
    DataLf,
    /// In the trailer section: whether the line so far is empty.
    Trailer(bool),
    /// After a trailer line's CR: whether the line was empty (the end).
    TrailerLf(bool),
    /// The body has ended.
    Done,
}

impl Body {
    /// The framing `answer`'s head announces.
    pub(super) fn of(answer: &httparse::Response<'_, '_>) -> std::io::Result<Self> {
        let code = answer.code.unwrap_or(0);
        if (100..200).contains(&code) || code == 204 || code == 304 {
            return Ok(Body::Length(0));
        }
        for header in answer.headers.iter() {
            if header.name.eq_ignore_ascii_case("transfer-encoding") {
                return Ok(Body::Chunked(Chunk::Size(0, false)));
            }
            if header.name.eq_ignore_ascii_case("content-length") {
                let length = content_length(header.value)
                    .ok_or_else(|| invalid("an answer with a bad Content-Length"))?;
                return Ok(Body::Length(length));
            }
        }
        Err(invalid(
            "an answer without framing (the relay keeps connections)",
        ))
    }

    /// Takes in the next bytes of the body; whether it has ended with them.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> std::io::Result<bool> {
        match self {
            Body::Length(left) => {
                if bytes.len() > *left {
                    return Err(invalid("bytes after an answer's end"));
                }
                *left -= bytes.len();
                Ok(*left == 0)
            }
            Body::Chunked(state) => {
                while let Some((&byte, rest)) = bytes.split_first() {
                    *state = match (*state, byte) {
                        (Chunk::Data(left), _) => {
                            let taken = left.min(bytes.len());
                            bytes = &bytes[taken..];
                            *state = if left == taken {
                                Chunk::DataCr
                            } else {
                                Chunk::Data(left - taken)
                            };
                            continue;
                        }
                        (Chunk::Size(size, false), b';') => Chunk::Size(size, true),
                        (Chunk::Size(size, _), b'\r') => Chunk::SizeLf(size),
                        (Chunk::Size(size, true), _) => Chunk::Size(size, true),
                        (Chunk::Size(size, false), digit) => {
                            let value = (digit as char)
                                .to_digit(16)
                                .ok_or_else(|| invalid("a bad chunk size"))?;
                            let size = size
                                .checked_mul(16)
                                .and_then(|s| s.checked_add(value as usize))
                                .filter(|&s| s <= LIMIT * 64)
                                .ok_or_else(|| invalid("a chunk over the relay's limit"))?;
                            Chunk::Size(size, false)
                        }
                        (Chunk::SizeLf(0), b'\n') => Chunk::Trailer(true),
                        (Chunk::SizeLf(size), b'\n') => Chunk::Data(size),
                        (Chunk::DataCr, b'\r') => Chunk::DataLf,
                        (Chunk::DataLf, b'\n') => Chunk::Size(0, false),
                        (Chunk::Trailer(empty), b'\r') => Chunk::TrailerLf(empty),
                        (Chunk::Trailer(_), _) => Chunk::Trailer(false),
                        (Chunk::TrailerLf(true), b'\n') => Chunk::Done,
                        (Chunk::TrailerLf(false), b'\n') => Chunk::Trailer(true),
                        (Chunk::Done, _) => return Err(invalid("bytes after an answer's end")),
                        _ => return Err(invalid("bad chunked framing")),
                    };
                    bytes = rest;
                }
                Ok(matches!(state, Chunk::Done))
            }
        }
    }
}

/// A `Content-Length` value, if it is a number.
pub(super) fn content_length(value: &[u8]) -> Option<usize> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// An error of this relay: what it met that it does not relay.
pub(super) fn invalid(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunked framing is followed across any split of its bytes, and its end found exactly.
    #[test]
    fn chunked_framing_ends_where_it_ends_whatever_the_reads() {
        let body = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\n";
        for split in 0..body.len() {
            let mut framed = Body::Chunked(Chunk::Size(0, false));
            let first = framed.feed(&body[..split]).unwrap();
            assert!(!first, "ended early at {split}");
            assert!(framed.feed(&body[split..]).unwrap(), "no end at {split}");
        }
        let mut framed = Body::Chunked(Chunk::Size(0, false));
        assert!(framed.feed(b"0\r\n\r\nextra").is_err());
        let mut framed = Body::Chunked(Chunk::Size(0, false));
        assert!(framed.feed(b"zz\r\n").is_err());
    }

    #[test]
    fn a_length_ends_at_its_last_byte() {
        let mut framed = Body::Length(4);
        assert!(!framed.feed(b"ab").unwrap());
        assert!(framed.feed(b"cd").unwrap());
        assert!(Body::Length(1).feed(b"ab").is_err());
    }
}

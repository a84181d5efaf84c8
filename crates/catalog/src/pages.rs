//! Following pagination cursors to the end, safely: a cursor that repeats, an endless stream of
//! pages, too many items or an oversized cursor ends the listing with a [`ListError`] instead of
//! looping or exhausting memory. A listing is all pages or an error, never a prefix.

use std::collections::HashSet;
use std::future::Future;

/// Caps applied to one listing of one kind on one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Most pages followed. Default 1,000: a server of 10 items a page reaches the item cap
    /// before this one (a page-count cap below it would drop a listing the item cap allows).
    pub max_pages: usize,
    /// Most items accepted in total. Default 10,000.
    pub max_items: usize,
    /// Longest cursor accepted, in bytes. Default 64 KiB.
    pub max_cursor_bytes: usize,
}

impl Default for PageLimits {
    fn default() -> Self {
        Self {
            max_pages: 1_000,
            max_items: 10_000,
            max_cursor_bytes: 64 * 1024,
        }
    }
}

/// Why a listing stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum ListError<E> {
    #[error("the server returned cursor {0:?} twice (pagination does not advance)")]
    /// The server sent the same cursor twice.
    CursorRepeated(String),
    #[error("more than {0} pages")]
    /// More pages than the page cap.
    TooManyPages(usize),
    #[error("more than {0} items")]
    /// More items than the item cap.
    TooManyItems(usize),
    #[error("a cursor longer than {0} bytes")]
    /// A cursor over the length cap.
    CursorTooLong(usize),
    #[error("{0}")]
    /// Fetching a page failed.
    Fetch(E),
}

/// Fetches every page through `fetch(cursor)`, which returns a page's items and next cursor.
pub async fn collect_pages<T, E, F, Fut>(
    limits: PageLimits,
    mut fetch: F,
) -> Result<Vec<T>, ListError<E>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), E>>,
{
    let mut items = Vec::new();
    // Cursors seen, by hash (SipHash, random keys: a collision is no practical concern), so a
    // thousand 64 KiB cursors cost 8 KiB, not 64 MiB.
    let hasher = std::collections::hash_map::RandomState::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..limits.max_pages {
        let (page, next) = fetch(cursor.take()).await.map_err(ListError::Fetch)?;
        if items.len() + page.len() > limits.max_items {
            return Err(ListError::TooManyItems(limits.max_items));
        }
        items.extend(page);
        match next {
            None => return Ok(items),
            Some(next) if next.len() > limits.max_cursor_bytes => {
                return Err(ListError::CursorTooLong(limits.max_cursor_bytes));
            }
            Some(next) => {
                if !seen.insert(std::hash::BuildHasher::hash_one(&hasher, &next)) {
                    let shown: String = next.chars().take(64).collect();
                    return Err(ListError::CursorRepeated(shown));
                }
                cursor = Some(next);
            }
        }
    }
    Err(ListError::TooManyPages(limits.max_pages))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<F: Future>(f: F) -> F::Output {
        // A tiny executor: these futures never wait.
        use std::task::{Context, Poll, Waker};
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn follows_cursors_to_the_end() {
        let got = block(collect_pages(
            PageLimits::default(),
            |c: Option<String>| async move {
                let n: usize = c.map(|c| c.parse().unwrap_or(0)).unwrap_or(0);
                let next = (n < 4).then(|| (n + 1).to_string());
                Ok::<_, String>((vec![n], next))
            },
        ));
        assert_eq!(got.unwrap_or_default(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn repeated_cursor_stops() {
        let got = block(collect_pages(PageLimits::default(), |_c| async move {
            Ok::<_, String>((vec![1], Some("same".to_string())))
        }));
        assert!(matches!(got, Err(ListError::CursorRepeated(c)) if c == "same"));
    }

    #[test]
    fn page_item_and_cursor_caps() {
        let limits = PageLimits {
            max_pages: 3,
            max_items: 1000,
            max_cursor_bytes: 10,
        };
        let pages = block(collect_pages(limits, |c: Option<String>| async move {
            let n: usize = c.map(|c| c.parse().unwrap_or(0)).unwrap_or(0);
            Ok::<_, String>((vec![n], Some((n + 1).to_string())))
        }));
        assert!(matches!(pages, Err(ListError::TooManyPages(3))));
        let items = block(collect_pages(
            PageLimits {
                max_items: 5,
                ..limits
            },
            |_c| async move { Ok::<_, String>((vec![0; 6], None)) },
        ));
        assert!(matches!(items, Err(ListError::TooManyItems(5))));
        let cursor = block(collect_pages(limits, |_c| async move {
            Ok::<_, String>((vec![0], Some("x".repeat(11))))
        }));
        assert!(matches!(cursor, Err(ListError::CursorTooLong(10))));
        let failed = block(collect_pages(limits, |_c| async move {
            Err::<(Vec<u8>, _), _>("boom")
        }));
        assert!(matches!(failed, Err(ListError::Fetch("boom"))));
    }
}

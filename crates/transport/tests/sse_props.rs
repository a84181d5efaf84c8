//! Property tests of the SSE parser (issue 13): on any byte stream, in any split, it does not
//! panic; how the stream is cut into chunks never changes what it yields (the same events, the
//! same error, the same last event ID and reconnection time); no event is larger than the limit.

use mcp_harness_transport::sse::{SseEvent, SseParser};
use proptest::prelude::*;

/// Pieces of SSE syntax and noise, so streams reach every branch of the parser.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "data:", "data: ", "event:", "event: endpoint", "id:", "id: 7", "id: a\0b", "retry:",
            "retry: 1500", "retry: x", ":", ": keep-alive", "\n", "\r", "\r\n", "\n\n", "\u{feff}",
            "message", "{\"jsonrpc\":\"2.0\"}", " ", "data", "é",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..16),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(), 0..64).prop_map(|p| p.concat())
}

/// Feeds every chunk in order (an event over the limit is an error, and the parser goes on
/// after it): the events, whether any error came, the last event id and the retry.
fn run(limit: usize, chunks: &[&[u8]]) -> (Vec<SseEvent>, bool, Option<String>, Option<u128>) {
    let mut parser = SseParser::with_limit(limit);
    let mut events = Vec::new();
    let mut failed = false;
    for chunk in chunks {
        failed |= parser.feed(chunk, &mut events).is_err();
    }
    let id = parser.last_event_id().map(str::to_owned);
    let retry = parser.retry().map(|d| d.as_millis());
    (events, failed, id, retry)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_split_yields_the_same(
        bytes in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        limit in prop_oneof![Just(1usize << 20), 1usize..256],
    ) {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        let chunks: Vec<&[u8]> = at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
        let whole = run(limit, &[&bytes]);
        let split = run(limit, &chunks);
        prop_assert_eq!(&whole.0, &split.0);
        prop_assert_eq!(whole.1, split.1);
        if !whole.1 {
            prop_assert_eq!(&whole.2, &split.2);
            prop_assert_eq!(whole.3, split.3);
        }
        for event in &whole.0 {
            // The default name `message` is the parser's, not bytes it buffered from the stream.
            let name = if event.event == "message" { 0 } else { event.event.len() };
            prop_assert!(event.data.len() + name <= limit, "event over the limit");
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16),
    ) {
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let _ = run(4096, &refs);
    }
}

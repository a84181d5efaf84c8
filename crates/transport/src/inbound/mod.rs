//! What becomes of a raw server message before rmcp routes it: decoding with a size cap and a
//! lenient fallback (`decode`), the errors made up for the request it answered (`fault`),
//! the scan and salvage of messages that did not decode (`scan`), and the Streamable HTTP
//! layer that runs it on SSE events and JSON bodies (`tap`).
//!
//! Architecture invariant: the dependencies point one way — `tap` → `decode` → `scan` →
//! `fault`, and `decode` reports to [`crate::wire`], which imports nothing from here; what a
//! request expects (`layer::Expect`) is the HTTP layer's, which imports nothing from
//! here either.

mod decode;
mod fault;
mod scan;
mod tap;

pub(crate) use decode::Inbound;
pub use fault::{DEFAULT_MAX_MESSAGE_BYTES, UNDECODABLE_META_KEY, WireFault};
pub use scan::{IdScan, Scanned};
pub(crate) use scan::{
    LISTING_CHECK_FROM, MAX_LISTING_ENTRIES, over_long_listing, salvage_listing,
};
pub(crate) use tap::{JSON_PARSE_ERROR, Tap};

/// The top-level `id` of a JSON-RPC message of which `prefix` is the start (the rest cut off),
/// when `prefix` holds it whole: what the refusal of a message too long to read answers.
pub fn leading_id(prefix: &[u8]) -> Option<rmcp::model::RequestId> {
    let mut scan = IdScan::default();
    scan.feed(prefix);
    scan.scanned().id
}

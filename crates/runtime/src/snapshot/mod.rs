//! The catalog snapshot lifecycle (R16, R21): the one [`publisher::Publisher`] that writes
//! published snapshots under the revision gate, and the [`revisions::Revisions`] stream of every
//! revision.
//!
//! Architecture invariant: `snapshot` imports nothing else of this crate; connections and calls
//! import it.

pub(crate) mod publisher;
pub(crate) mod revisions;

//! The connection lifecycle (R3–R9, R17): one [`server::ServerActor`] per enabled server under
//! supervision, its connection queues and I/O threads, listing, relisting and the listing cache,
//! and the [`registry::Registry`] that reconciles the set of actors with a desired
//! configuration.
//!
//! Architecture invariant: `connection` imports only `config`, `error` and `snapshot` (it sends
//! its catalogs to the publisher); nothing here knows the call path or the facade.

pub(crate) mod cache;
pub(crate) mod io_threads;
pub(crate) mod listing;
pub(crate) mod progress;
pub(crate) mod refresh;
pub(crate) mod registry;
pub(crate) mod server;
pub(crate) mod supervision;

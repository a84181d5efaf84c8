//! OAuth for remote servers (R33) on rmcp's `auth` support: a file token store ([`store`]) and
//! the authorization-code flow ([`flow`]).
//!
//! Invariants: a server without stored tokens connects exactly as it did without this module;
//! one with stored tokens sends them through rmcp's [`AuthClient`](rmcp::transport::auth::AuthClient),
//! which refreshes before expiry (single-flight per process through its manager lock, across
//! processes through the store's file lock) and keeps a rotated refresh token; no token, code or
//! client secret appears in a log line, an error message or a `Debug` output of this crate.

pub mod flow;
pub mod loopback;
pub mod revoke;
pub mod store;

pub use flow::{AuthFlowError, Browser, NoFollowBrowser, OAuthSettings, login, stored_client};
pub use loopback::LoopbackBrowser;
pub use store::{FileCredentialStore, StoreError, server_key, set_store_dir, store_dir};

//! OAuth for remote servers (R33) on rmcp's `auth` support: a token store ([`store`]: a file,
//! or the OS keyring through the Secret Service API, [`os_keyring`]), the
//! authorization-code flow ([`flow`]), the client credentials grant for machine-to-machine
//! servers ([`client_credentials`]), the JWT bearer grants of workload identity federation and
//! enterprise-managed authorization ([`jwt_bearer`]), step-up authorization on 403
//! `insufficient_scope` ([`step_up`]) and DPoP-bound tokens ([`dpop`]). What one runtime's
//! connections share (the store's directory, the step-up browser and states, the keyring
//! copies) is its [`AuthContext`]; nothing of it is process-wide.
//!
//! Invariants: a server without stored tokens connects exactly as it did without this module
//! (only the challenge of a 401 is kept in its store, for `login`);
//! one with stored tokens sends them through rmcp's [`AuthClient`](rmcp::transport::auth::AuthClient),
//! which refreshes before expiry (single-flight per process through its manager lock, across
//! processes through the store's file lock) and keeps a rotated refresh token; no token, code or
//! client secret appears in a log line, an error message or a `Debug` output of this crate.

mod assertion;
mod browser;
pub mod client_credentials;
pub mod config;
mod context;
mod discovery;
pub mod dpop;
pub mod flow;
pub mod jwt_bearer;
pub mod loopback;
pub mod os_keyring;
pub mod revoke;
pub mod step_up;
pub mod store;
mod token_endpoint;

pub use assertion::JwtAlgorithm;
pub use browser::{Browser, NoFollowBrowser};
pub use client_credentials::{
    ClientAuth, ClientCredentials, ClientCredentialsAuth, ClientCredentialsError, PrivateKey,
    TokenSource,
};
pub use config::OAuthConfig;
pub use context::AuthContext;
pub use flow::{AuthFlowError, OAuthSettings, login, stored_client};
pub use jwt_bearer::{Grant, IdentityProvider, JwtSource};
pub use loopback::{LoopbackBrowser, LoopbackStepUp};
pub use step_up::{
    MAX_STEP_UPS, Refusal, StepUp, StepUpRefused, StepUps, authorization_lost, refusal_in,
};
pub use store::{
    FileCredentialStore, StoreError, StoreMode, TokenLocation, default_store_dir, server_key,
};

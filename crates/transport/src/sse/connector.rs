//! The [`Connector`] of the legacy HTTP+SSE transport: the HTTP client (configured headers,
//! redirects only within the origin) and the startup deadline around opening the stream and
//! initialize.
//!
//! Invariant: the configured headers never leave the SSE URL's origin — redirects are followed
//! only within it, at most 5.

use std::collections::BTreeMap;

use super::transport::LegacySseTransport;
use crate::connector::{BoxFuture, ConnectOptions, Connector, Session, initialize};
use crate::error::TransportError;
use crate::handler::HarnessClient;

/// Connects to a legacy HTTP+SSE server (`type: "sse"`).
///
/// How it meets the [`Connector`] obligations:
/// - deadline: opening the stream and waiting for the `endpoint` event run under
///   `startup_timeout`; `initialize` gets what is left of it (a timeout in either reports the
///   whole configured deadline);
/// - ownership: until initialize starts, the response stream lives in the connect future and
///   is dropped with it; afterwards the reader and POST tasks are tied to the transport by a
///   cancellation guard, and the transport is owned by the rmcp service inside the [`Session`]
///   (or dropped by rmcp when initialize fails);
/// - errors: every failure is a [`TransportError`]; a 401/403 on the GET is
///   `Initialize { auth_required: true }` (on a POST during initialize, rmcp classifies it the
///   same way through `AuthRequiredError`); an endpoint on another origin is `InvalidConfig`
///   (retrying cannot help);
/// - secrets: header values are sensitive `HeaderValue`s, never formatted; URLs are shown
///   without query or user info.
#[derive(Clone)]
pub struct LegacySseConnector {
    /// The SSE stream URL (e.g. `http://host:3001/sse`).
    pub url: String,
    /// Sent with every request, GET and POST (e.g. `Authorization`). Values are never logged.
    pub headers: BTreeMap<String, String>,
}

/// Header values hidden, the URL redacted.
impl std::fmt::Debug for LegacySseConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySseConnector")
            .field("url", &crate::redact::Url(&self.url))
            .field("headers", &crate::redact::Values(&self.headers))
            .finish()
    }
}

impl LegacySseConnector {
    /// The HTTP client: the configured headers (sensitive) on every request, redirects only
    /// within the origin.
    pub(crate) fn client(&self) -> Result<reqwest::Client, TransportError> {
        super::transport::http_client(&self.headers)
    }
}

impl Connector for LegacySseConnector {
    fn kind(&self) -> &'static str {
        "sse"
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>> {
        let this = self.clone();
        Box::pin(async move {
            let url = crate::endpoint::http_url(&this.url)?;
            let client = this.client()?;
            let started = tokio::time::Instant::now();
            let timed_out = || TransportError::StartupTimeout {
                timeout: options.startup_timeout,
                stderr_tail: None,
            };
            let transport = tokio::time::timeout(
                options.startup_timeout,
                LegacySseTransport::open_observed(client, url, options.inbound(true)),
            )
            .await
            .map_err(|_| timed_out())??;
            let mut rest = options.clone();
            rest.startup_timeout = options.startup_timeout.saturating_sub(started.elapsed());
            match initialize(handler, transport, &rest, None, None).await {
                Err(TransportError::StartupTimeout { .. }) => Err(timed_out()),
                other => other,
            }
        })
    }
}

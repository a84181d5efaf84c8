//! The Streamable HTTP transport (rmcp's reqwest client, a request's POST sent by
//! [`Direct`] — written by hand over plain `http://`; https through rustls).
//!
//! Invariants: header values from the config are sent on every request and never logged; the
//! SSE stream reconnects a bounded number of times (rmcp's default retries forever); a server
//! with tokens in its [`crate::auth`] store sends them through rmcp's authorizing client (and
//! steps up on 403 `insufficient_scope`, [`crate::auth::step_up`]), one without connects exactly
//! as without OAuth.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig,
};

use crate::auth::StepUp;
use crate::connector::{
    BoxFuture, ConnectOptions, Connector, Session, initialize, initialize_with,
};
use crate::direct::Direct;
use crate::endpoint::{header_map, http_url, shown};
use crate::error::TransportError;
use crate::express::{AttachmentSlot, ExpressSetup, Recording};
use crate::handler::HarnessClient;
use crate::inbound::Tap;
use crate::layer::Layered;

/// How many times a dropped SSE stream is re-opened before the request fails.
const SSE_MAX_RECONNECTS: usize = 5;

/// Connects to a Streamable HTTP endpoint.
#[derive(Clone)]
pub struct StreamableHttpConnector {
    /// The server's URL.
    pub url: String,
    /// Sent with every request (e.g. `Authorization`). Values are never logged.
    pub headers: BTreeMap<String, String>,
    /// `oauth`: with the client credentials grant, the connector gets its own tokens.
    pub oauth: Option<crate::auth::OAuthConfig>,
    /// The token store and step-up of the runtime this connector belongs to.
    pub auth: crate::auth::AuthContext,
}

/// Header values hidden, the URL redacted.
impl std::fmt::Debug for StreamableHttpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamableHttpConnector")
            .field("url", &crate::redact::Url(&self.url))
            .field("headers", &crate::redact::Values(&self.headers))
            .field("oauth", &self.oauth)
            .finish_non_exhaustive()
    }
}

impl StreamableHttpConnector {
    fn client(&self) -> Result<reqwest::Client, TransportError> {
        Self::builder()
            .default_headers(header_map(&self.headers)?)
            .build()
            .map_err(|e| {
                TransportError::InvalidConfig(format!("could not build the HTTP client: {e}"))
            })
    }

    /// The client of the token endpoint and the identity provider: the server's configured
    /// `headers` are the resource server's, never sent to another party.
    fn token_client(&self) -> Result<reqwest::Client, TransportError> {
        Self::builder().build().map_err(|e| {
            TransportError::InvalidConfig(format!("could not build the HTTP client: {e}"))
        })
    }

    /// What every client of the connector shares: same-origin redirects, timeouts.
    fn builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            // The headers must not travel to another origin, nor a message turn into a GET.
            .redirect(crate::endpoint::same_origin_redirects(10, true))
            .connect_timeout(Duration::from_secs(10))
            // reqwest's default, stated: with Nagle's algorithm a request written in two
            // segments waits for the server's delayed ACK (~40 ms a request).
            .tcp_nodelay(true)
    }

    /// `client` with a request's POST to an `http://` URL written without it (it sends the
    /// configured headers as `client` does).
    fn direct(&self, client: reqwest::Client) -> Result<Direct, TransportError> {
        Ok(Direct::plain_http_here(client, header_map(&self.headers)?))
    }
}

impl Connector for StreamableHttpConnector {
    fn kind(&self) -> &'static str {
        "http"
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn credentials_stamp(&self, server: &str) -> Option<String> {
        let path = self.auth.store(server, &self.url).path();
        Some(match std::fs::metadata(&path) {
            Ok(m) => {
                let modified = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                format!("{modified}:{}", m.len())
            }
            Err(_) => "absent".into(),
        })
    }

    fn connect(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
    ) -> BoxFuture<'static, Result<Session, TransportError>> {
        let this = self.clone();
        Box::pin(async move {
            let url = http_url(&this.url)?;
            let shown = shown(&url);
            // Fires when a request finds the server gone: the session then closes at once.
            let breakage = crate::net::Breakage::default();
            let watch = crate::net::Watch::new(breakage.clone(), shown.clone());
            this.connect_watched(handler, options, watch)
                .await
                .map(|session| session.closed_on(breakage))
                .map_err(|e| e.at_url(&shown))
        })
    }
}

impl StreamableHttpConnector {
    /// Connects with `watch` around every request.
    async fn connect_watched(
        &self,
        handler: HarnessClient,
        options: ConnectOptions,
        watch: crate::net::Watch,
    ) -> Result<Session, TransportError> {
        let this = self;
        let client = this.client()?;
        let mut backoff = ExponentialBackoff::default();
        backoff.max_times = Some(SSE_MAX_RECONNECTS);
        backoff.base_duration = Duration::from_millis(500);
        backoff.max_delay = Some(Duration::from_secs(8));
        let mut config = StreamableHttpClientTransportConfig::with_uri(this.url.clone());
        config.retry_config = std::sync::Arc::new(backoff);
        // One message may be as large as `maxMessageBytes`; a larger one fails its request
        // at once (the tap turns rmcp's refusal into the request's error).
        config.max_sse_event_size = options.max_message_bytes;
        config.max_json_response_size = options.max_message_bytes;
        let store = this.auth.store(&options.server, &this.url);
        let step_ups = this.auth.step_ups();
        // Client credentials: the token comes from the token endpoint, no login.
        if let Some(settings) = this.oauth.as_ref().and_then(|o| o.client_credentials()) {
            let source = crate::auth::TokenSource::new(
                &options.server,
                &this.url,
                settings.clone(),
                store.clone(),
                this.token_client()?,
            );
            // The first token before the handshake: a refused client is needs-auth (fix
            // the config), an unreachable authorization server is retried.
            source.token().await.map_err(client_credentials_error)?;
            let client = this.direct(client)?;
            let client = Layered::new(crate::auth::ClientCredentialsAuth::new(source), client);
            let step_up = StepUp::unauthorized(step_ups, &options.server, &this.url, store);
            let client = Layered::new(step_up, client);
            let client = Layered::new(Tap::new(options.inbound(false)), client);
            let client = Layered::new(watch, client);
            return start(handler, client, config, &options).await;
        }
        // Tokens from `mcp-harness login`: requests carry them and refresh before expiry.
        let authorized = crate::auth::stored_client(&store, client.clone(), &this.url)
            .await
            .map_err(|e| TransportError::Initialize {
                message: e.to_string(),
                auth_required: true,
                stderr_tail: None,
            })?;
        match authorized {
            Some(auth_client) => {
                // A 403 insufficient_scope on any request: step-up, then that request again.
                let step_up =
                    StepUp::authorized(step_ups, &auth_client, &options.server, &this.url, store);
                let auth_client = Layered::new(step_up, auth_client);
                let auth_client = Layered::new(Tap::new(options.inbound(false)), auth_client);
                let auth_client = Layered::new(watch, auth_client);
                start(handler, auth_client, config, &options).await
            }
            None => {
                let step_up = StepUp::unauthorized(step_ups, &options.server, &this.url, store);
                let client = Layered::new(step_up, this.direct(client)?);
                let client = Layered::new(Tap::new(options.inbound(false)), client);
                let client = Layered::new(watch, client);
                start(handler, client, config, &options).await
            }
        }
    }
}

/// The environment variable that, set to `0`, sends every request through rmcp's service loop
/// (no express calls, on any transport): for comparing the two paths, and a way out should a
/// server mind.
pub const EXPRESS_ENV: &str = "MCP_HARNESS_EXPRESS";

/// Initialises a session over `client`, whose `tools/call` requests can then be sent as
/// express calls (`crate::express`) unless [`EXPRESS_ENV`] is `0`.
async fn start<C>(
    handler: HarnessClient,
    client: C,
    config: StreamableHttpClientTransportConfig,
    options: &ConnectOptions,
) -> Result<Session, TransportError>
where
    C: StreamableHttpClient + Clone + Send + Sync + 'static,
{
    if !crate::express::enabled() {
        let transport = StreamableHttpClientTransport::with_client(client, config);
        return initialize(handler, transport, options, None, None).await;
    }
    let slot = AttachmentSlot::default();
    let express = ExpressSetup::new(
        client.clone(),
        slot.clone(),
        config.retry_config.clone(),
        SSE_MAX_RECONNECTS,
    );
    let transport =
        StreamableHttpClientTransport::with_client(Recording::new(client, slot), config);
    initialize_with(handler, transport, options, None, None, Some(express)).await
}

/// A failed client credentials grant as the connection's error.
fn client_credentials_error(e: crate::auth::ClientCredentialsError) -> TransportError {
    use crate::auth::ClientCredentialsError as E;
    match e {
        E::Config { .. } => TransportError::InvalidConfig(e.to_string()),
        E::Refused { .. } => TransportError::Initialize {
            message: e.to_string(),
            auth_required: true,
            stderr_tail: None,
        },
        E::Unavailable { .. } => match e.unavailable_status() {
            Some(status) => TransportError::Unavailable {
                status,
                message: e.to_string(),
            },
            None => TransportError::Initialize {
                message: e.to_string(),
                auth_required: false,
                stderr_tail: None,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ClientJsonRpcMessage, ClientNotification};
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpResponseLimits,
    };

    /// The POST future of a client under all its layers stays small: rmcp's worker moves it
    /// (memcpy) into its own, once per request. Unboxed, the three layers around `Direct`
    /// made it 11 KiB.
    #[test]
    fn a_layered_post_is_a_small_future() {
        let auth = crate::auth::AuthContext::new();
        let url = "http://127.0.0.1:1/mcp";
        let store = auth.store("s", url);
        let step_up = StepUp::unauthorized(auth.step_ups(), "s", url, store);
        let client = Layered::new(step_up, Direct::new(reqwest::Client::new()));
        let client = Layered::new(Tap::new(ConnectOptions::new("s").inbound(false)), client);
        let watch = crate::net::Watch::new(crate::net::Breakage::default(), url.into());
        let client = Layered::new(watch, client);
        let message = ClientJsonRpcMessage::notification(
            ClientNotification::InitializedNotification(Default::default()),
        );
        let post = client.post_message_with_response_limits(
            url.into(),
            message,
            None,
            None,
            Default::default(),
            StreamableHttpResponseLimits::default(),
        );
        let size = std::mem::size_of_val(&post);
        assert!(size <= 1024, "the layered POST future is {size} bytes");
    }
}

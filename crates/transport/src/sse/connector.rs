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

/// The failure of an event stream that opened but announced no message endpoint in time.
fn no_endpoint(url: &reqwest::Url, timeout: std::time::Duration) -> TransportError {
    TransportError::Initialize {
        message: format!(
            "the SSE stream at {} opened but announced no message endpoint (an `endpoint` event) \
             within {}s: is this a legacy HTTP+SSE URL? (a Streamable HTTP server is \
             `\"type\": \"http\"`; a slow server: raise `startupTimeoutSec`)",
            crate::endpoint::shown(url),
            timeout.as_secs_f64()
        ),
        auth_required: false,
        stderr_tail: None,
    }
}

/// Connects to a legacy HTTP+SSE server (`type: "sse"`).
///
/// How it meets the [`Connector`] obligations:
/// - deadline: opening the stream and waiting for the `endpoint` event run under
///   `startup_timeout`; `initialize` gets what is left of it (a timeout in either reports the
///   whole configured deadline; a stream that opened but named no endpoint in time says so);
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
    pub(crate) fn client(&self) -> Result<super::transport::Clients, TransportError> {
        super::transport::http_clients(&self.headers)
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
            let opened = std::sync::atomic::AtomicBool::new(false);
            let open = LegacySseTransport::open_observed(
                client,
                url.clone(),
                options.inbound(true),
                &opened,
            );
            let transport = match tokio::time::timeout(options.startup_timeout, open).await {
                Ok(transport) => transport?,
                // The stream is open but names no endpoint: most likely not a legacy SSE URL.
                Err(_) if opened.load(std::sync::atomic::Ordering::Relaxed) => {
                    return Err(no_endpoint(&url, options.startup_timeout));
                }
                Err(_) => return Err(timed_out()),
            };
            let mut rest = options.clone();
            rest.startup_timeout = options.startup_timeout.saturating_sub(started.elapsed());
            match initialize(handler, transport, &rest, None, None).await {
                Err(TransportError::StartupTimeout { .. }) => Err(timed_out()),
                other => other,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::error::ErrorKind;

    /// A loopback server whose every connection gets `answer` (nothing when `None`) once its
    /// request head arrived, and is then held open until the test ends.
    async fn holding_server(answer: Option<&'static str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sse", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = socket.read(&mut buf).await;
                    if let Some(answer) = answer {
                        let _ = socket.write_all(answer.as_bytes()).await;
                    }
                    let _ = socket.read(&mut buf).await;
                });
            }
        });
        url
    }

    fn options() -> ConnectOptions {
        let mut options = ConnectOptions::new("sse");
        options.startup_timeout = Duration::from_millis(500);
        options
    }

    /// An event stream that opens but never names its message endpoint (a Streamable HTTP
    /// server's GET stream, say) is told apart from a server that never answered.
    #[tokio::test]
    async fn a_stream_without_an_endpoint_says_so_not_that_initialize_timed_out() {
        let sink: crate::EventSink = std::sync::Arc::new(|_| {});
        let open = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n: ping\n\n";
        let connector = LegacySseConnector {
            url: holding_server(Some(open)).await,
            headers: BTreeMap::new(),
        };
        let err = connector
            .connect(HarnessClient::new(sink.clone()), options())
            .await
            .err()
            .expect("no endpoint");
        assert_eq!(err.kind(), ErrorKind::Handshake, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("announced no message endpoint") && text.contains("\"type\": \"http\""),
            "{text}"
        );
        let silent = LegacySseConnector {
            url: holding_server(None).await,
            headers: BTreeMap::new(),
        };
        let err = silent
            .connect(HarnessClient::new(sink), options())
            .await
            .err()
            .expect("no answer");
        assert_eq!(err.kind(), ErrorKind::StartupTimeout, "{err}");
    }
}

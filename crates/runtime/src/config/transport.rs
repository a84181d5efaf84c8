//! How to reach a server: [`TransportConfig`], and everything that differs per transport in
//! one `impl` — the name shown, local or remote, the de-duplication key and the connector.
//!
//! Invariant: adding a transport is one variant here, its arms in this `impl`, its parsing in
//! `config/mod.rs`, and its `Connector` in the transport crate; nothing else matches on the
//! variants except parsing and the remote-source filter (which asks [`TransportConfig::is_remote`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use mcp_harness_transport::auth::{AuthContext, OAuthConfig};
use mcp_harness_transport::{
    Connector, InProcessConnector, InProcessServe, LegacySseConnector, StdioConnector, StdioSpec,
    StreamableHttpConnector,
};

/// How to reach a server. Its `Debug` holds no secret (header and env values hidden, URLs
/// redacted).
#[derive(Clone, PartialEq)]
pub enum TransportConfig {
    /// `command` (+ `args`, `env`, `cwd`); `type` absent or `"stdio"`.
    Stdio(StdioSpec),
    /// `url` (+ `headers`, `oauth`); `type` `"http"` or `"streamable-http"`, or absent with a
    /// `url`.
    StreamableHttp {
        /// The MCP endpoint.
        url: String,
        /// Extra request headers (values are secrets: never shown).
        headers: BTreeMap<String, String>,
        /// `oauth`: the login defaults, or the client credentials the harness uses itself.
        oauth: Option<OAuthConfig>,
    },
    /// `url` (+ `headers`); `type` `"sse"`: the legacy HTTP+SSE transport (protocol 2024-11-05).
    LegacySse {
        /// The SSE endpoint.
        url: String,
        /// Extra request headers (values are secrets: never shown).
        headers: BTreeMap<String, String>,
    },
    /// Registered in code through [`crate::RuntimeBuilder::in_process`], not in files.
    InProcess,
}

impl std::fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use mcp_harness_transport::redact::{Url, Values};
        match self {
            TransportConfig::Stdio(spec) => f.debug_tuple("Stdio").field(spec).finish(),
            TransportConfig::StreamableHttp {
                url,
                headers,
                oauth,
            } => f
                .debug_struct("StreamableHttp")
                .field("url", &Url(url))
                .field("headers", &Values(headers))
                .field("oauth", oauth)
                .finish(),
            TransportConfig::LegacySse { url, headers } => f
                .debug_struct("LegacySse")
                .field("url", &Url(url))
                .field("headers", &Values(headers))
                .finish(),
            TransportConfig::InProcess => f.write_str("InProcess"),
        }
    }
}

impl TransportConfig {
    /// Short name shown to users.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportConfig::Stdio(_) => "stdio",
            TransportConfig::StreamableHttp { .. } => "http",
            TransportConfig::LegacySse { .. } => "sse",
            TransportConfig::InProcess => "in-process",
        }
    }

    /// Whether the server is reached over the network (a remote connection slot, reconnects
    /// with backoff, only these from a remote config source unless `allowStdio`).
    pub fn is_remote(&self) -> bool {
        match self {
            TransportConfig::Stdio(_) | TransportConfig::InProcess => false,
            TransportConfig::StreamableHttp { .. } | TransportConfig::LegacySse { .. } => true,
        }
    }

    /// What makes two configured servers the same server (de-duplication across sources);
    /// `None`: never a duplicate.
    pub(crate) fn dedup_key(&self) -> Option<DedupKey> {
        match self {
            TransportConfig::Stdio(spec) => Some(DedupKey::Stdio(
                spec.command.clone(),
                spec.args.clone(),
                spec.env.clone(),
                spec.cwd.clone(),
            )),
            // Headers too: two accounts on one endpoint (each its own `Authorization`) are two
            // servers.
            TransportConfig::StreamableHttp { url, headers, .. }
            | TransportConfig::LegacySse { url, headers, .. } => Some(DedupKey::Url(
                url.trim_end_matches('/').to_string(),
                // Header names are case-insensitive.
                headers
                    .iter()
                    .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
                    .collect(),
            )),
            TransportConfig::InProcess => None,
        }
    }

    /// The connector of server `name`, after registering its secrets with the redaction
    /// (before anything can print an error of this server: redact's invariant). An in-process
    /// server needs its entry in `in_process`; a Streamable HTTP server keeps its tokens and
    /// step-ups in `auth` (the runtime's).
    pub(crate) fn connector(
        &self,
        name: &str,
        in_process: &BTreeMap<String, InProcessServe>,
        auth: &AuthContext,
    ) -> Result<Arc<dyn Connector>, String> {
        match self {
            TransportConfig::Stdio(spec) => {
                mcp_harness_transport::redact::register_server(spec.env.values(), [], None);
            }
            TransportConfig::StreamableHttp { url, headers, .. }
            | TransportConfig::LegacySse { url, headers } => {
                mcp_harness_transport::redact::register_server(
                    [],
                    headers.values(),
                    Some(url.as_str()),
                );
            }
            TransportConfig::InProcess => {}
        }
        // The OAuth client's secret too: an authorization server may quote it in an error.
        if let TransportConfig::StreamableHttp {
            oauth: Some(oauth), ..
        } = self
        {
            use mcp_harness_transport::auth::{ClientAuth, OAuthConfig};
            let secret = match oauth {
                OAuthConfig::AuthorizationCode { client_secret, .. } => client_secret.clone(),
                OAuthConfig::ClientCredentials(c) => match &c.auth {
                    ClientAuth::Secret(secret) => Some(secret.clone()),
                    _ => None,
                },
            };
            mcp_harness_transport::redact::register(secret);
        }
        Ok(match self {
            TransportConfig::Stdio(spec) => Arc::new(StdioConnector { spec: spec.clone() }),
            TransportConfig::StreamableHttp {
                url,
                headers,
                oauth,
            } => Arc::new(StreamableHttpConnector {
                url: url.clone(),
                headers: headers.clone(),
                oauth: oauth.clone(),
                auth: auth.clone(),
            }),
            TransportConfig::LegacySse { url, headers } => Arc::new(LegacySseConnector {
                url: url.clone(),
                headers: headers.clone(),
            }),
            TransportConfig::InProcess => match in_process.get(name) {
                Some(serve) => Arc::new(InProcessConnector {
                    serve: serve.clone(),
                }),
                None => {
                    return Err(format!(
                        "server \"{name}\" is in-process but no server was registered for it"
                    ));
                }
            },
        })
    }
}

/// What makes two servers the same server (see [`TransportConfig::dedup_key`]).
#[derive(PartialEq, Eq, Hash)]
pub(crate) enum DedupKey {
    /// The same command, args, env and cwd.
    Stdio(
        String,
        Vec<String>,
        BTreeMap<String, String>,
        Option<PathBuf>,
    ),
    /// The same URL (without a trailing `/`) and headers.
    Url(String, BTreeMap<String, String>),
}

impl DedupKey {
    /// What two servers with this key share, for the note that drops one.
    pub(crate) fn shared(&self) -> &'static str {
        match self {
            DedupKey::Stdio(..) => "the same command, args, env and cwd",
            DedupKey::Url(..) => "the same URL and headers",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two accounts on one endpoint, each with its own `Authorization`, are two servers; the
    /// same URL and headers (a trailing `/` aside) are one.
    #[test]
    fn a_url_is_a_duplicate_only_with_the_same_headers() {
        let http = |url: &str, token: &str| TransportConfig::StreamableHttp {
            url: url.into(),
            headers: BTreeMap::from([("Authorization".into(), format!("Bearer {token}"))]),
            oauth: None,
        };
        let key = |t: TransportConfig| t.dedup_key().expect("a key");
        assert!(key(http("http://h/mcp", "work")) != key(http("http://h/mcp", "personal")));
        assert!(key(http("http://h/mcp", "work")) == key(http("http://h/mcp/", "work")));
        let lower = TransportConfig::StreamableHttp {
            url: "http://h/mcp".into(),
            headers: BTreeMap::from([("authorization".into(), "Bearer work".into())]),
            oauth: None,
        };
        assert!(
            key(lower) == key(http("http://h/mcp", "work")),
            "names are case-insensitive"
        );
    }
}

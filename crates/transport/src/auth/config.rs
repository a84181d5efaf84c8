//! The `oauth` object of a server in the config: how the harness gets its tokens.

use super::client_credentials::ClientCredentials;

/// A server's `oauth` settings.
#[derive(Clone, PartialEq, Eq)]
pub enum OAuthConfig {
    /// `grant: "authorization_code"` (the default): a user logs in with `mcp-harness login`;
    /// these settings are that command's defaults.
    AuthorizationCode {
        /// `oauth.clientId`: a client registered ahead of time.
        client_id: Option<String>,
        /// `oauth.clientSecret`: its secret, if it is confidential.
        client_secret: Option<String>,
        /// `oauth.clientMetadataUrl`: this client's metadata document (SEP-991).
        client_metadata_url: Option<String>,
        /// `oauth.scopes`: asked for when neither the challenge nor the metadata name any.
        scopes: Vec<String>,
    },
    /// `grant: "client_credentials"`: the harness gets its tokens itself, no user involved.
    ClientCredentials(ClientCredentials),
}

impl OAuthConfig {
    /// The client credentials settings, for a server on that grant.
    pub fn client_credentials(&self) -> Option<&ClientCredentials> {
        match self {
            OAuthConfig::ClientCredentials(c) => Some(c),
            OAuthConfig::AuthorizationCode { .. } => None,
        }
    }
}

impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OAuthConfig::AuthorizationCode {
                client_id,
                client_secret,
                client_metadata_url,
                scopes,
            } => f
                .debug_struct("AuthorizationCode")
                .field("client_id", client_id)
                .field(
                    "client_secret",
                    &client_secret.as_ref().map(|_| "[REDACTED]"),
                )
                .field("client_metadata_url", client_metadata_url)
                .field("scopes", scopes)
                .finish(),
            OAuthConfig::ClientCredentials(c) => c.fmt(f),
        }
    }
}

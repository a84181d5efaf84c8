//! `mcp-harness login SERVER` and `logout SERVER`: OAuth for a configured Streamable HTTP server.
//!
//! Invariant: both work on the server's entry in the token store only (no runtime is started);
//! `login` stores tokens only after the whole flow succeeded and says where (the OS keyring or the
//! token file), `logout` deletes them (the keyring item too); neither prints a token. A running harness picks the tokens up at its next connection attempt
//! (`servers` shows needs-auth until then; a restart of the server connects it).

use std::path::Path;

use mcp_harness_runtime::TransportConfig;
use mcp_harness_transport::auth;

use crate::exit::Exit;

/// Why `login` or `logout` failed, and its exit status: a server that is not configured, or
/// not a Streamable HTTP one, is a usage or config error (2); a failure of the flow itself or of
/// the token store is 1.
pub(crate) struct AuthFailure {
    pub message: String,
    pub exit: Exit,
}

impl From<String> for AuthFailure {
    fn from(message: String) -> Self {
        AuthFailure {
            message,
            exit: Exit::Failed,
        }
    }
}

/// The options of `login`.
#[derive(clap::Args)]
pub(crate) struct LoginArgs {
    /// The server's name in the config.
    pub server: String,
    /// Loopback port of the callback (`http://127.0.0.1:PORT/callback`); 0 picks a free one.
    /// Set it when the authorization server only accepts a registered redirect URI.
    #[arg(long, default_value_t = 33418)]
    pub port: u16,
    /// Do not try to open a browser: print the URL and wait for the callback or a pasted
    /// redirect URL / code (headless machines, SSH sessions).
    #[arg(long)]
    pub no_browser: bool,
    /// A client registered ahead of time (else a client metadata document or dynamic
    /// registration).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// The pre-registered client's secret.
    #[arg(long, env = "MCP_HARNESS_CLIENT_SECRET", hide_env_values = true)]
    pub client_secret: Option<String>,
    /// An https URL of this client's metadata document, used as the client id where the
    /// authorization server supports client ID metadata documents.
    #[arg(long, value_name = "URL")]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for when neither the server's challenge nor its metadata name any.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

/// The URL of `server`, which must be a configured Streamable HTTP server.
fn server_url(config_path: Option<&Path>, server: &str) -> Result<String, AuthFailure> {
    server_entry(config_path, server).map(|(url, _)| url)
}

/// The URL and `oauth` settings of `server`, which must be a configured Streamable HTTP server.
fn server_entry(
    config_path: Option<&Path>,
    server: &str,
) -> Result<(String, Option<auth::OAuthConfig>), AuthFailure> {
    let usage = |message: String| AuthFailure {
        message,
        exit: Exit::Usage,
    };
    let config = super::config::load(config_path, true).map_err(usage)?;
    let entry = config.servers.get(server).ok_or_else(|| {
        usage(format!(
            "server `{server}` is not configured ({}; see `mcp-harness config`)",
            crate::explain::configured(config.servers.keys())
        ))
    })?;
    match &entry.transport {
        TransportConfig::StreamableHttp { url, oauth, .. } => Ok((url.clone(), oauth.clone())),
        TransportConfig::LegacySse { .. } => Err(usage(format!(
            "server `{server}` uses the legacy sse transport, which has no OAuth login: put the \
             credentials it expects in its `headers` in the config (`\"Authorization\": \
             \"Bearer ${{TOKEN}}\"`, the value in your environment)"
        ))),
        other => Err(usage(format!(
            "server `{server}` uses the {} transport; OAuth login is for Streamable HTTP servers \
             (`type: \"http\"` with a `url`)",
            other.kind()
        ))),
    }
}

pub(crate) async fn login(
    config_path: Option<&Path>,
    context: &auth::AuthContext,
    args: &LoginArgs,
) -> Result<(), AuthFailure> {
    let (url, oauth) = server_entry(config_path, &args.server)?;
    let store = context.store(&args.server, &url);
    // A machine-to-machine server needs no user: get its token now (which checks the config).
    if let Some(credentials) = oauth.as_ref().and_then(|o| o.client_credentials()) {
        auth::TokenSource::standalone(&args.server, &url, credentials.clone(), store.clone())?
            .token()
            .await
            .map_err(|e| e.to_string())?;
        say!(
            "`{}` uses the `{}` grant (`oauth.grant`): no login needed; a token was fetched and \
             stored {}.",
            args.server,
            credentials.grant.name(),
            stored_where(&store)
        );
        return Ok(());
    }
    // `oauth.clientId`, `clientSecret`, `clientMetadataUrl` and `scopes` are the defaults of
    // the options.
    let (client_id, client_secret, client_metadata_url, scopes) = match oauth {
        Some(auth::OAuthConfig::AuthorizationCode {
            client_id,
            client_secret,
            client_metadata_url,
            scopes,
        }) => (client_id, client_secret, client_metadata_url, scopes),
        _ => Default::default(),
    };
    // A client metadata document's URL is the client id: https with a path (the CIMD draft),
    // checked before anything is sent.
    let client_metadata_url = args.client_metadata_url.clone().or(client_metadata_url);
    if let Some(document) = &client_metadata_url
        && !document.strip_prefix("https://").is_some_and(|rest| {
            rest.split_once('/')
                .is_some_and(|(host, path)| !host.is_empty() && !path.is_empty())
        })
    {
        return Err(AuthFailure {
            message: format!(
                "server `{}`: the client metadata URL `{}` must be an https URL with a path (it \
                 is the client id); fix `--client-metadata-url` or `oauth.clientMetadataUrl`",
                args.server,
                mcp_harness_transport::redact::url(document)
            ),
            exit: Exit::Usage,
        });
    }
    let browser = auth::LoopbackBrowser::bind(args.port, !args.no_browser)
        .await
        .map_err(|e| {
            format!(
                "server `{}`: cannot listen on 127.0.0.1:{} for the callback ({e}); pick another \
                 with --port",
                args.server, args.port
            )
        })?;
    let settings = auth::OAuthSettings {
        client_id: args.client_id.clone().or(client_id),
        client_secret: args.client_secret.clone().or(client_secret),
        client_metadata_url,
        scopes: if args.scopes.is_empty() {
            scopes
        } else {
            args.scopes.clone()
        },
        redirect_uri: browser.redirect_uri().to_string(),
        client_name: Some("mcp-harness".into()),
    };
    auth::login(context, &args.server, &url, &settings, &browser)
        .await
        .map_err(|e| e.to_string())?;
    say!(
        "Logged in to `{}`; tokens stored {}.",
        args.server,
        stored_where(&store)
    );
    Ok(())
}

/// Where `store` keeps its tokens now, for a message: the OS keyring (`MCP_HARNESS_TOKEN_STORE`
/// auto or keyring, where a Secret Service answers) or the token file.
fn stored_where(store: &auth::FileCredentialStore) -> String {
    match store.location() {
        Ok(Some(auth::TokenLocation::Keyring { account })) => format!(
            "in the OS keyring (Secret Service item of service `{}`, account `{account}`; {} only \
             points at it)",
            auth::os_keyring::SERVICE,
            store.path().display()
        ),
        _ => format!("in {} (mode 0600)", store.path().display()),
    }
}

pub(crate) async fn logout(
    config_path: Option<&Path>,
    context: &auth::AuthContext,
    server: &str,
) -> Result<(), AuthFailure> {
    let url = server_url(config_path, server)?;
    let store = context.store(server, &url);
    // Under the refresh lock, held to the end: a refresh another process is making ends
    // first, so the tokens revoked and deleted are its new ones, and none comes back after.
    let locking = store.clone();
    let _lock = tokio::task::spawn_blocking(move || locking.lock())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    // Revoke at the authorization server first (best effort); the local tokens go regardless.
    let revoked = match store.read() {
        Ok(Some(file)) => auth::revoke::revoke(&file).await,
        Ok(None) => auth::revoke::Revocation::NothingStored,
        // A file that is no token file holds nothing to revoke: it is deleted all the same.
        Err(e) if e.is_unparsable() => {
            say!("warning: {e}; it is deleted without revoking anything");
            auth::revoke::Revocation::NothingStored
        }
        Err(e) => return Err(e.to_string().into()),
    };
    match &revoked {
        auth::revoke::Revocation::Revoked { tokens } => {
            let noun = if *tokens == 1 { "token" } else { "tokens" };
            say!("Revoked {tokens} {noun} of `{server}` at its authorization server.");
        }
        auth::revoke::Revocation::NotSupported => say!(
            "`{server}`'s authorization server offers no revocation endpoint; its tokens stay \
             valid there until they expire."
        ),
        auth::revoke::Revocation::Failed(why) => say!(
            "warning: could not revoke `{server}`'s tokens ({why}); they stay valid there until \
             they expire."
        ),
        auth::revoke::Revocation::NothingStored => {}
    }
    let in_keyring = matches!(
        store.location(),
        Ok(Some(auth::TokenLocation::Keyring { .. }))
    );
    if store.remove().map_err(|e| e.to_string())? {
        let from = if in_keyring {
            " from the OS keyring"
        } else {
            ""
        };
        say!("Logged out of `{server}`: its tokens were deleted{from}.");
    } else {
        say!("No tokens were stored for `{server}`.");
    }
    Ok(())
}

//! `--connect URL`: the CLI as a client of a running `mcp-harness serve --http` instead of
//! starting servers itself.
//!
//! Invariant: the runtime's config has exactly one server, [`SERVER`], reached over Streamable
//! HTTP at the URL, with its names kept as the gateway lists them (`names: "as-listed"`), so
//! `mcp__SERVER__TOOL` means the same here as through the gateway; no config file is read and
//! no local permission rule applies (the gateway's rules decide; its questions come back as
//! elicitations).

use std::path::Path;

use mcp_harness_runtime::Config;

/// The name of the one server a `--connect` runtime has.
pub(crate) const SERVER: &str = "gateway";

/// The config of a runtime that talks to the gateway at `url`, with `token` (the value of
/// `--connect-token-env`'s variable) as its bearer token. An `Err` is a usage error.
pub(crate) fn config(url: &str, token: Option<Token>) -> Result<Config, String> {
    let parsed = url.parse::<url_check::Url>()?;
    let mut server = serde_json::json!({"type": "http", "url": parsed.0, "names": "as-listed"});
    if let Some(token) = &token {
        // Expanded from the variable like any config header: a sensitive value, never shown.
        server["headers"] =
            serde_json::json!({"Authorization": format!("Bearer ${{{}}}", token.var)});
    }
    let text = serde_json::json!({"mcpServers": {SERVER: server}});
    let lookup = |name: &str| {
        token
            .as_ref()
            .filter(|t| t.var == name)
            .map(|t| t.value.clone())
    };
    Config::parse(&text.to_string(), Path::new("--connect"), &lookup)
        .map_err(|e| format!("--connect {url}: {}", e.message))
}

/// Whether this process talks to a gateway (`--connect`), and the variable its token came
/// from: set once, before the runtime starts.
static CONNECTED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Records that this process talks to a gateway, with its token from `token_var` if any.
pub(crate) fn mark(token_var: Option<&str>) {
    let _ = CONNECTED.set(token_var.map(String::from));
}

/// Whether this process talks to a gateway (`--connect`).
pub(crate) fn connected() -> bool {
    CONNECTED.get().is_some()
}

/// What to do when the gateway asks for authorization, for a process that talks to one
/// (`mcp-harness login` logs in to configured servers, not to a gateway's client profiles).
pub(crate) fn needs_auth_hint() -> Option<String> {
    Some(match CONNECTED.get()? {
        None => "the gateway asks for a client token: export it in a variable and pass `--connect-token-env VAR`"
            .to_string(),
        Some(var) => format!(
            "the gateway refused the token in `{var}` (--connect-token-env): check it is the one the gateway's client profile expects (`gateway.clients.*.auth`)"
        ),
    })
}

/// The bearer token `--connect-token-env VAR` names: the variable and its value.
pub(crate) struct Token {
    var: String,
    value: String,
}

impl Token {
    /// The token in variable `var` of this process's environment; an `Err` (a usage error)
    /// names the variable when it is unset, empty or not a plain name.
    pub(crate) fn from_env(var: &str) -> Result<Self, String> {
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "--connect-token-env {var:?}: expected the name of an environment variable (letters, digits, _)"
            ));
        }
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => Ok(Self {
                var: var.to_string(),
                value: value.trim().to_string(),
            }),
            _ => Err(format!(
                "--connect-token-env {var}: the variable {var} is not set (or empty); export the gateway's client token in it"
            )),
        }
    }
}

/// A URL check without an HTTP client: `http://` or `https://`, a host, no spaces.
mod url_check {
    /// An accepted `--connect` URL.
    pub(super) struct Url(pub(super) String);

    impl std::str::FromStr for Url {
        type Err = String;

        fn from_str(url: &str) -> Result<Self, String> {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            match rest {
                Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
                    // `serve --http ADDR` answers MCP at /mcp: a bare address means that.
                    if rest.contains('/') {
                        Ok(Url(url.to_string()))
                    } else {
                        Ok(Url(format!("{url}/mcp")))
                    }
                }
                _ => Err(format!(
                    "--connect {url}: expected the URL of a running `mcp-harness serve --http`, \
                     like http://127.0.0.1:8080/mcp"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gateway_server_with_its_names_kept() {
        let made = config("http://127.0.0.1:9/mcp", None).expect("valid");
        assert_eq!(made.servers.len(), 1);
        let server = &made.servers[SERVER];
        assert_eq!(server.names, mcp_harness_catalog::Naming::AsListed);
        assert!(config("127.0.0.1:9", None).is_err());
        assert!(config("http://", None).is_err());
        let bare = super::config("http://127.0.0.1:9", None).expect("a bare address");
        assert!(matches!(
            &bare.servers[SERVER].transport,
            mcp_harness_runtime::TransportConfig::StreamableHttp { url, .. } if url == "http://127.0.0.1:9/mcp"
        ));
    }
}

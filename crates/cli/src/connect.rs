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

/// The config of a runtime that talks to the gateway at `url`. An `Err` is a usage error.
pub(crate) fn config(url: &str) -> Result<Config, String> {
    let parsed = url.parse::<url_check::Url>()?;
    let text = serde_json::json!({
        "mcpServers": {SERVER: {"type": "http", "url": parsed.0, "names": "as-listed"}}
    });
    Config::parse(&text.to_string(), Path::new("--connect"), &|_| None)
        .map_err(|e| format!("--connect {url}: {}", e.message))
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
        let made = config("http://127.0.0.1:9/mcp").expect("valid");
        assert_eq!(made.servers.len(), 1);
        let server = &made.servers[SERVER];
        assert_eq!(server.names, mcp_harness_catalog::Naming::AsListed);
        assert!(config("127.0.0.1:9").is_err());
        assert!(config("http://").is_err());
        let bare = super::config("http://127.0.0.1:9").expect("a bare address");
        assert!(matches!(
            &bare.servers[SERVER].transport,
            mcp_harness_runtime::TransportConfig::StreamableHttp { url, .. } if url == "http://127.0.0.1:9/mcp"
        ));
    }
}

//! Discovery for the grants without a user: the authorization server of a server (from its 401
//! challenge and protected-resource metadata, as for a login), the scopes it names for a first
//! token, and whether it is machine to machine (only the client credentials grant).
//!
//! Invariant: errors name what failed and never a secret; only the first line of an OAuth
//! library's error is kept.

use std::time::Duration;

use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata};

use super::token_endpoint::first_line;

/// The authorization server metadata of the server at `url` (from its 401 challenge and its
/// protected-resource metadata, as for a login) and the scopes they name for a first token.
pub async fn discover(
    http: &reqwest::Client,
    url: &str,
) -> Result<(AuthorizationMetadata, Vec<String>), String> {
    let challenge = super::flow::challenge(http, url)
        .await
        .map_err(|e| format!("the server could not be reached: {e}"))?;
    let manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| format!("`url`: {e}"))?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| format!("OAuth discovery failed: {}", first_line(&e.to_string())))?;
    let scopes = manager
        .select_initial_scopes(&[])
        .await
        .into_iter()
        .filter(|s| s != "offline_access")
        .collect();
    Ok((resolution.metadata, scopes))
}

/// Whether the server at `url` is machine to machine: its authorization server offers only the
/// client credentials grant.
pub async fn machine_to_machine_server(url: &str) -> Result<bool, String> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    Ok(machine_to_machine(&discover(&http, url).await?.0))
}

/// The grants the authorization server of the server at `url` says it supports
/// (`grant_types_supported`; empty when it says nothing).
pub async fn authorization_server_grants(url: &str) -> Result<Vec<String>, String> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let metadata = discover(&http, url).await?.0;
    Ok(metadata
        .additional_fields
        .get("grant_types_supported")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// Whether the authorization server offers only the client credentials grant (a
/// machine-to-machine server: nobody can log in to it with a browser).
pub fn machine_to_machine(metadata: &AuthorizationMetadata) -> bool {
    let grants: Vec<&str> = metadata
        .additional_fields
        .get("grant_types_supported")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|g| g.as_str()).collect())
        .unwrap_or_default();
    grants.contains(&"client_credentials") && !grants.contains(&"authorization_code")
}

//! Token revocation at logout (RFC 7009): the refresh token first (revoking it ends the grant at
//! most servers), then the access token, at the `revocation_endpoint` the authorization server's
//! metadata advertised when the user logged in.
//!
//! Invariants: revocation is best effort and bounded ([`REVOKE_TIMEOUT`] per request) — its
//! outcome is reported, and the local tokens are deleted whatever it says; the client
//! authenticates as it registered (HTTP Basic with a client secret, else `client_id` in the
//! form); tokens go only to an https (or loopback) endpoint; no token or secret appears in an
//! outcome, a log line or an error.

use std::time::Duration;

use serde_json::Value;

use super::store::TokenFile;
use super::token_endpoint::{form_body, secure_endpoint};

/// How long one revocation request may take.
pub const REVOKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What revocation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// Nothing to revoke: no tokens stored.
    NothingStored,
    /// The authorization server advertises no `revocation_endpoint`.
    NotSupported,
    /// Every stored token was revoked (the server answered 200 to each).
    Revoked {
        /// How many tokens were revoked.
        tokens: usize,
    },
    /// At least one request failed; why (no token values).
    Failed(String),
}

/// Revokes the tokens in `file` at its authorization server's revocation endpoint.
pub async fn revoke(file: &TokenFile) -> Revocation {
    match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => revoke_with(&http, file).await,
        Err(e) => Revocation::Failed(format!("could not build the HTTP client: {e}")),
    }
}

/// [`revoke`] through `http`.
pub async fn revoke_with(http: &reqwest::Client, file: &TokenFile) -> Revocation {
    let tokens = stored_tokens(file);
    if tokens.is_empty() {
        return Revocation::NothingStored;
    }
    let Some(endpoint) = file
        .metadata
        .as_ref()
        .and_then(|m| m.additional_fields.get("revocation_endpoint"))
        .and_then(Value::as_str)
        .and_then(|e| reqwest::Url::parse(e).ok())
        .filter(|e| matches!(e.scheme(), "https" | "http"))
    else {
        return Revocation::NotSupported;
    };
    if !secure_endpoint(&endpoint) {
        return Revocation::Failed(format!(
            "its revocation endpoint {} is plain http on a host that is not loopback; the tokens \
             and the client secret are sent only over https, so they were not sent",
            crate::endpoint::shown(&endpoint)
        ));
    }
    if let Err(why) = super::token_endpoint::metadata_endpoint_allowed(&file.url, &endpoint).await {
        return Revocation::Failed(format!(
            "its revocation endpoint {why}; the tokens were not sent"
        ));
    }
    let client_id = file
        .client
        .as_ref()
        .map(|c| c.client_id.clone())
        .or_else(|| file.credentials.as_ref().map(|c| c.client_id.clone()));
    let secret = file.client.as_ref().and_then(|c| c.client_secret.clone());
    let mut revoked = 0;
    // Each token is revoked whatever became of the one before (a server may refuse one kind,
    // `unsupported_token_type`); the first failure is reported.
    let mut failed = None;
    for (hint, token) in &tokens {
        let mut form: Vec<(&str, &str)> = vec![("token", token), ("token_type_hint", hint)];
        let mut request = http.post(endpoint.clone()).timeout(REVOKE_TIMEOUT);
        // HTTP Basic as at the token endpoint: id and secret form-encoded first (RFC 6749
        // §2.3.1), else a secret with `:` or a space reads as another one.
        match (
            &client_id,
            client_id
                .as_deref()
                .zip(secret.as_deref())
                .and_then(|(id, secret)| super::token_endpoint::basic_credentials(id, secret)),
        ) {
            (Some(_), Some(basic)) => {
                request = request.header(reqwest::header::AUTHORIZATION, basic);
            }
            (Some(id), None) => form.push(("client_id", id)),
            (None, _) => {}
        }
        let shown = crate::endpoint::shown(&endpoint);
        match request
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form_body(&form))
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => revoked += 1,
            Ok(response) => {
                failed.get_or_insert(format!(
                    "{shown} answered HTTP {} to the revocation of the {hint}",
                    response.status()
                ));
            }
            Err(e) => {
                failed.get_or_insert(format!(
                    "{shown}: {} (revoking the {hint})",
                    crate::net::describe_request(&e)
                ));
            }
        }
    }
    match failed {
        Some(why) if revoked > 0 => {
            Revocation::Failed(format!("{why} (the other token was revoked)"))
        }
        Some(why) => Revocation::Failed(why),
        None => Revocation::Revoked { tokens: revoked },
    }
}

/// (token_type_hint, token), refresh token first.
fn stored_tokens(file: &TokenFile) -> Vec<(&'static str, String)> {
    let Some(response) = file
        .credentials
        .as_ref()
        .and_then(|c| c.token_response.as_ref())
        .and_then(|r| serde_json::to_value(r).ok())
    else {
        return Vec::new();
    };
    ["refresh_token", "access_token"]
        .into_iter()
        .filter_map(|hint| {
            response
                .get(hint)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(|t| (hint, t.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A revocation endpoint on loopback answering `status` to each request; records each
    /// request's head and body.
    async fn endpoint(status: u16) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/revoke", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Head, then as much body as content-length says (bounded reads).
                for _ in 0..64 {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length: ")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                log.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).to_string());
                let reason = if status == 200 { "OK" } else { "Bad Request" };
                let _ = socket
                    .write_all(
                        format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                            .as_bytes(),
                    )
                    .await;
            }
        });
        (url, seen)
    }

    fn file(revocation_endpoint: Option<&str>, secret: Option<&str>) -> TokenFile {
        let mut metadata = json!({"authorization_endpoint": "https://as/authorize", "token_endpoint": "https://as/token"});
        if let Some(e) = revocation_endpoint {
            metadata["revocation_endpoint"] = json!(e);
        }
        serde_json::from_value(json!({
            "server": "s", "url": "http://127.0.0.1:9/mcp", "metadata": metadata,
            "client": {"client_id": "client-1", "client_secret": secret, "redirect_uri": "http://127.0.0.1/cb"},
            "credentials": {"client_id": "client-1", "token_response": {
                "access_token": "AT-secret", "token_type": "Bearer", "refresh_token": "RT-secret", "expires_in": 3600}}
        }))
        .expect("a token file")
    }

    #[tokio::test]
    async fn revokes_the_refresh_token_then_the_access_token_as_the_client_registered() {
        let (url, seen) = endpoint(200).await;
        let http = reqwest::Client::new();
        assert_eq!(
            revoke_with(&http, &file(Some(&url), None)).await,
            Revocation::Revoked { tokens: 2 }
        );
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 2);
        assert!(requests[0].starts_with("POST /revoke"), "{}", requests[0]);
        assert!(
            requests[0]
                .ends_with("token=RT-secret&token_type_hint=refresh_token&client_id=client-1"),
            "{}",
            requests[0]
        );
        assert!(requests[1].contains("token=AT-secret&token_type_hint=access_token"));

        // A confidential client authenticates with HTTP Basic instead.
        let (url, seen) = endpoint(200).await;
        revoke_with(&http, &file(Some(&url), Some("shh"))).await;
        let first = seen.lock().unwrap()[0].to_ascii_lowercase();
        assert!(first.contains("authorization: basic "), "{first}");
        assert!(!first.contains("client_id="), "{first}");

        // Form-encoded before the Basic encoding, as at the token endpoint.
        let (url, seen) = endpoint(200).await;
        revoke_with(&http, &file(Some(&url), Some("hunter2 pw:!"))).await;
        let first = seen.lock().unwrap()[0].clone();
        let basic = super::super::token_endpoint::basic_credentials("client-1", "hunter2 pw:!")
            .expect("a header value");
        assert!(first.contains(basic.to_str().expect("ASCII")), "{first}");
    }

    #[tokio::test]
    async fn refusals_and_missing_support_are_reported_without_tokens() {
        let (url, _) = endpoint(400).await;
        let http = reqwest::Client::new();
        let outcome = revoke_with(&http, &file(Some(&url), None)).await;
        let Revocation::Failed(why) = &outcome else {
            panic!("{outcome:?}");
        };
        assert!(
            why.contains("400") && why.contains("refresh_token"),
            "{why}"
        );
        // The access token is revoked too, though the refresh token was refused.
        let (url, seen) = endpoint(400).await;
        revoke_with(&http, &file(Some(&url), None)).await;
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "one refusal stopped the rest"
        );
        assert!(
            !why.contains("RT-secret") && !why.contains("AT-secret"),
            "{why}"
        );
        assert_eq!(
            revoke_with(&http, &file(None, None)).await,
            Revocation::NotSupported
        );
        let mut empty = file(Some(&url), None);
        empty.credentials = None;
        assert_eq!(revoke_with(&http, &empty).await, Revocation::NothingStored);
        // Plain http to a host that is not loopback: nothing is sent (the host does not exist;
        // a request would fail differently).
        let plain = file(Some("http://as.invalid/revoke"), Some("shh"));
        let outcome = revoke_with(&http, &plain).await;
        let Revocation::Failed(why) = &outcome else {
            panic!("{outcome:?}");
        };
        assert!(why.contains("were not sent"), "{why}");
        // A revocation endpoint on loopback for a server that is not: nothing is sent there.
        let (url, seen) = endpoint(200).await;
        let mut remote = file(Some(&url), None);
        remote.url = "https://mcp.example.test/mcp".into();
        let outcome = revoke_with(&http, &remote).await;
        let Revocation::Failed(why) = &outcome else {
            panic!("{outcome:?}");
        };
        assert!(why.contains("loopback, private or reserved"), "{why}");
        assert!(
            seen.lock().unwrap().is_empty(),
            "sent to an internal address"
        );
    }
}

//! One bounded HTTP GET of a small document: how a remote config source is read.
//!
//! Invariants: the URL is https, or http to a loopback address only (`127.0.0.1`, `[::1]`,
//! `localhost`); the whole exchange ends within the given timeout; redirects are not followed
//! (a source that moved is an error saying where to, so credentials in headers never travel to
//! another origin); the body is read up to `max_bytes` and no further; errors name the URL
//! without its query or credentials and never include a header value.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::endpoint::{header_map, http_url, shown};
use crate::net::describe_request as describe;

/// Why a fetch failed, for a message that already names the config key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FetchError(pub String);

/// GETs `url` (with `headers`, values never logged) and returns the body as text.
pub async fn fetch_text(
    url: &str,
    headers: &BTreeMap<String, String>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<String, FetchError> {
    let parsed = http_url(url).map_err(|e| FetchError(e.to_string()))?;
    let loopback = parsed.host_str().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if parsed.scheme() != "https" && !loopback {
        return Err(FetchError(format!(
            "{} must be https:// (plain http is allowed only to a loopback address)",
            shown(&parsed)
        )));
    }
    // User info in the URL becomes an `Authorization: Basic` header that replaces the
    // configured one: with both, which credential is sent would be a surprise.
    let has_user_info = !parsed.username().is_empty() || parsed.password().is_some();
    if has_user_info
        && headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        return Err(FetchError(format!(
            "{} has user info (`user:password@`) and an `Authorization` header is configured \
             too: only one credential can be sent; remove the user info from the URL or the header",
            shown(&parsed)
        )));
    }
    let client = reqwest::Client::builder()
        .default_headers(header_map(headers).map_err(|e| FetchError(e.to_string()))?)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| FetchError(format!("could not build the HTTP client: {e}")))?;
    let work = async {
        let response = client
            .get(parsed.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| FetchError(format!("{}: {}", shown(&parsed), describe(&e))))?;
        let status = response.status();
        if status.is_redirection() {
            let to = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| parsed.join(l).ok())
                .map(|l| shown(&l))
                .unwrap_or_else(|| "an unknown location".into());
            return Err(FetchError(format!(
                "{} redirects to {to}; redirects are not followed — put the new URL in the config",
                shown(&parsed)
            )));
        }
        if !status.is_success() {
            return Err(FetchError(format!(
                "{} answered HTTP {status}",
                shown(&parsed)
            )));
        }
        let body = crate::net::read_capped(response, max_bytes)
            .await
            .map_err(|e| FetchError(format!("{}: {}", shown(&parsed), describe(&e))))?
            .ok_or_else(|| {
                FetchError(format!(
                    "{} sent more than {max_bytes} bytes",
                    shown(&parsed)
                ))
            })?;
        String::from_utf8(body)
            .map_err(|_| FetchError(format!("{} sent a body that is not UTF-8", shown(&parsed))))
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| {
        FetchError(format!(
            "{} did not answer within {}s",
            shown(&parsed),
            timeout.as_secs_f32()
        ))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused before any connection: the port is closed, so only the check can answer.
    #[tokio::test]
    async fn user_info_and_an_authorization_header_are_refused_together() {
        let headers = BTreeMap::from([("authorization".to_string(), "Bearer t0ken".to_string())]);
        let e = fetch_text(
            "http://alice:s3cret@127.0.0.1:1/s.json",
            &headers,
            Duration::from_secs(1),
            1024,
        )
        .await
        .expect_err("refused");
        assert!(e.0.contains("only one credential"), "{}", e.0);
        assert!(!e.0.contains("s3cret") && !e.0.contains("t0ken"), "{}", e.0);
    }
}

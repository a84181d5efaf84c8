//! A remote server's connection parameters made safe to use: its URL checked (http or https)
//! and shown without secrets, its configured headers as a header map of sensitive values.
//!
//! Invariants: nothing made here echoes a header value, a URL's user info, query or fragment
//! (they may carry credentials); errors name the config key instead. A client built with
//! [`same_origin_redirects`] never sends its configured headers to another origin.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::TransportError;

/// The redirect policy of a client that carries configured headers (sensitive): a redirect is
/// followed only within the origin of the first URL, at most `max` times, and with
/// `keep_body` only a 307 or 308 (a 301, 302 or 303 turns a POST into a GET without its
/// message). Any other redirect is not followed: its response comes back as it is, and the
/// caller reports its status; the refusal is logged with the target's origin only (a path or
/// query may carry credentials).
pub(crate) fn same_origin_redirects(max: usize, keep_body: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        let status = attempt.status();
        let kept = !keep_body
            || matches!(
                status,
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
        if same_origin && kept && attempt.previous().len() <= max {
            return attempt.follow();
        }
        let to = attempt.url().origin().ascii_serialization();
        if same_origin && kept {
            // Only the count is at fault: a loop, or a chain too long to be a move.
            tracing::warn!(
                %status,
                %to,
                "a redirect was not followed: the server redirected more than {max} times within its origin (a redirect loop?); put the URL the server moved to in the config"
            );
            return attempt.stop();
        }
        let followed = if keep_body {
            "a 307 or 308"
        } else {
            "a redirect"
        };
        tracing::warn!(
            %status,
            %to,
            "a redirect was not followed: only {followed} within the server's origin is, at most {max} times; put the URL the server moved to in the config"
        );
        attempt.stop()
    })
}

/// The configured headers as a header map, every value marked sensitive (never printed, never
/// logged); an invalid name or value is an error naming the config key, not the value.
pub(crate) fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, TransportError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            TransportError::InvalidConfig(format!(
                "`headers`: `{name}` is not a valid HTTP header name"
            ))
        })?;
        let mut value = HeaderValue::from_str(value).map_err(|_| {
            TransportError::InvalidConfig(format!(
                "`headers.{name}`: the value is not a valid HTTP header value"
            ))
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(map)
}

/// `url` without user info, query or fragment (which may carry secrets), for messages and logs.
pub(crate) fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// Parses a server `url` and requires http or https. The error names the config key; it never
/// echoes a query or credentials the URL may hold.
pub(crate) fn http_url(raw: &str) -> Result<reqwest::Url, TransportError> {
    let url = reqwest::Url::parse(raw)
        .map_err(|e| TransportError::InvalidConfig(format!("`url` is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TransportError::InvalidConfig(format!(
            "`url` `{}` must be http:// or https://",
            shown(&url)
        )));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::http::{HeaderMap as Headers, StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::post;

    use super::*;

    async fn serve(app: Router) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    fn redirect(status: StatusCode, to: String) -> axum::response::Response {
        (status, [(header::LOCATION, to)]).into_response()
    }

    /// A POST is followed to the same origin on a 307 with its headers and body; a 302 (which
    /// would turn it into a GET) and a 307 to another origin come back unfollowed, and the
    /// other origin never sees the configured header.
    #[tokio::test]
    async fn configured_headers_stay_within_the_origin() {
        let elsewhere = Arc::new(AtomicUsize::new(0));
        let seen = elsewhere.clone();
        let other = serve(Router::new().fallback(move || async move {
            seen.fetch_add(1, Ordering::SeqCst);
            "elsewhere"
        }))
        .await;
        let app = Router::new()
            .route(
                "/mcp",
                post(|headers: Headers, body: String| async move {
                    let key = headers.get("x-api-key").is_some();
                    format!("key={key} body={body}")
                }),
            )
            .route(
                "/same",
                post(|| async { redirect(StatusCode::TEMPORARY_REDIRECT, "/mcp".into()) }),
            )
            .route(
                "/moved",
                post(|| async { redirect(StatusCode::FOUND, "/mcp".into()) }),
            )
            .route(
                "/away",
                post(move || async move {
                    redirect(
                        StatusCode::TEMPORARY_REDIRECT,
                        format!("http://127.0.0.1:{other}/mcp"),
                    )
                }),
            );
        let port = serve(app).await;
        let headers =
            header_map(&BTreeMap::from([("x-api-key".into(), "s3cret".into())])).expect("headers");
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .redirect(same_origin_redirects(10, true))
            .build()
            .expect("client");
        let send = |path: &str| {
            client
                .post(format!("http://127.0.0.1:{port}{path}"))
                .body("m")
                .send()
        };
        let followed = send("/same").await.expect("followed");
        assert_eq!(followed.status(), 200);
        assert_eq!(followed.text().await.expect("body"), "key=true body=m");
        assert_eq!(send("/moved").await.expect("sent").status(), 302);
        assert_eq!(send("/away").await.expect("sent").status(), 307);
        assert_eq!(
            elsewhere.load(Ordering::SeqCst),
            0,
            "another origin was asked"
        );
    }
}

//! What every request to an OAuth token endpoint shares (the token request of
//! [`client_credentials`](super::client_credentials) and the JWT bearer grants, the token
//! exchange of [`jwt_bearer`](super::jwt_bearer), the revocation of [`revoke`](super::revoke)):
//! the form encoding of the body, HTTP Basic client credentials, which endpoints may receive
//! secrets, and the error answer in words.
//!
//! Invariants: secrets go only to an https endpoint or a loopback one ([`secure_endpoint`]);
//! the Basic header is marked sensitive (never printed or logged); an error text holds the
//! status and the server's OAuth error code and (first line of, cut short) description, never
//! a request's secret.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::HeaderValue;

/// The longest `error_description` of a token endpoint kept in a message.
const MAX_DESCRIPTION: usize = 200;

/// The `Authorization: Basic` value of a client id and secret (RFC 6749 §2.3.1: both are
/// form-urlencoded before the Basic encoding), marked sensitive; `None` when it cannot be a
/// header value.
pub(crate) fn basic_credentials(client_id: &str, secret: &str) -> Option<HeaderValue> {
    let credentials = format!("{}:{}", form_encode(client_id), form_encode(secret));
    let mut value =
        HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(credentials))).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `HTTP <status>, <error>: <description>` of an OAuth error answer (the description cut short).
pub(crate) fn oauth_error(status: reqwest::StatusCode, parsed: &serde_json::Value) -> String {
    let code = parsed.get("error").and_then(|v| v.as_str()).unwrap_or("");
    let description = parsed
        .get("error_description")
        .and_then(|v| v.as_str())
        .map(|d| {
            let d = crate::redact::credentials(&first_line(d));
            let cut: String = d.chars().take(MAX_DESCRIPTION).collect();
            format!(": {cut}")
        })
        .unwrap_or_default();
    if code.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}, {code}{description}")
    }
}

/// https, or http to a loopback address (local authorization servers, tests).
pub(crate) fn secure_endpoint(url: &reqwest::Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => url.host_str().is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }),
        _ => false,
    }
}

/// `application/x-www-form-urlencoded` of one value.
pub(crate) fn form_encode(value: &str) -> String {
    form_body(&[("", value)])
        .trim_start_matches('=')
        .to_string()
}

/// `application/x-www-form-urlencoded` (the URL query serializer is that encoding).
pub(crate) fn form_body(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://form.invalid/").expect("a valid base");
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or_default().to_string()
}

pub(crate) fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_token_endpoints() {
        let ok = |u: &str| secure_endpoint(&reqwest::Url::parse(u).unwrap());
        assert!(ok("https://as.example/token"));
        assert!(ok("http://localhost:8080/token"));
        assert!(ok("http://127.0.0.1/token"));
        assert!(ok("http://[::1]/token"));
        assert!(!ok("http://as.example/token"));
    }

    /// A token endpoint that echoes the refused request in its description shows no
    /// credential of it (here the client's Basic credentials and its secret, form-encoded).
    #[test]
    fn an_echoed_description_shows_no_credential() {
        let parsed = serde_json::json!({"error": "invalid_request",
            "error_description": "auth=Basic Ym90OmNjLVMzY3JldCUyMXg= body=grant_type=client_credentials&client_secret=cc-S3cret%21x"});
        let said = oauth_error(reqwest::StatusCode::BAD_REQUEST, &parsed);
        assert!(
            said.starts_with("HTTP 400 Bad Request, invalid_request: "),
            "{said}"
        );
        assert!(
            !said.contains("Ym90") && !said.contains("cc-S3cret"),
            "{said}"
        );
    }

    #[test]
    fn basic_credentials_are_form_encoded_first() {
        assert_eq!(form_encode("a b:c/é"), "a+b%3Ac%2F%C3%A9");
        assert_eq!(
            form_encode("conformance-test-client"),
            "conformance-test-client"
        );
        let value = basic_credentials("a b", "c:d").unwrap();
        assert!(value.is_sensitive());
        assert_eq!(
            value.to_str().unwrap(),
            format!("Basic {}", STANDARD.encode("a+b:c%3Ad"))
        );
    }
}

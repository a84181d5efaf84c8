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

/// Whether the harness may send to `endpoint`, a URL a server's (or its authorization
/// server's) metadata named, for the server at `server` — the rule rmcp's discovery applies to
/// what it fetches, for the requests made outside it (DPoP token requests, client
/// credentials, revocation): no loopback, private, link-local, shared, benchmark, multicast or
/// unspecified address, by literal or by what the name resolves to (nor `localhost` or a cloud
/// metadata host), unless both the server and the endpoint are on loopback (a local
/// authorization server). `Err` says why, naming no credential. A name is resolved here and
/// again by the request (a name that changes in between is not caught).
pub(crate) async fn metadata_endpoint_allowed(
    server: &str,
    endpoint: &reqwest::Url,
) -> Result<(), String> {
    use std::net::IpAddr;
    let refused = |why: &str| {
        Err(format!(
            "{} (named by the server's metadata) is {why}: the harness sends nothing there for a \
             server that is not itself on loopback",
            crate::endpoint::shown(endpoint)
        ))
    };
    let loopback_server = reqwest::Url::parse(server)
        .ok()
        .and_then(|u| u.host_str().map(is_loopback_host))
        .unwrap_or(false);
    let Some(host) = endpoint.host_str() else {
        return refused("not a URL with a host");
    };
    if loopback_server && is_loopback_host(host) {
        return Ok(());
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost"
        || name.ends_with(".localhost")
        || CLOUD_METADATA.contains(&name.as_str())
    {
        return refused("a local or cloud metadata host");
    }
    let addresses: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            let port = endpoint.port_or_known_default().unwrap_or(443);
            match tokio::net::lookup_host((bare, port)).await {
                Ok(found) => found.map(|a| a.ip()).collect(),
                // The request itself will fail and say so.
                Err(_) => return Ok(()),
            }
        }
    };
    match addresses.into_iter().find(|ip| !public(*ip)) {
        Some(_) => refused("on a loopback, private or reserved address"),
        None => Ok(()),
    }
}

/// Cloud instance metadata hosts (their addresses are link-local, caught anyway).
const CLOUD_METADATA: [&str; 3] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.internal",
];

fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = bare.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `ip` is an ordinary public address.
fn public(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    let v4 = |a: std::net::Ipv4Addr| {
        let o = a.octets();
        !(a.is_private()
            || a.is_loopback()
            || a.is_link_local()
            || a.is_broadcast()
            || a.is_unspecified()
            || a.is_multicast()
            || o[0] == 0
            || (o[0] == 100 && (64..=127).contains(&o[1]))
            || (o[0] == 198 && matches!(o[1], 18 | 19)))
    };
    match ip {
        IpAddr::V4(a) => v4(a),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(mapped) => v4(mapped),
            None => {
                let s = a.segments();
                !(a.is_loopback()
                    || a.is_unspecified()
                    || a.is_multicast()
                    || (s[0] & 0xffc0) == 0xfe80
                    || (s[0] & 0xfe00) == 0xfc00)
            }
        },
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

    /// Endpoints a server's metadata names are refused on internal addresses unless the
    /// server and the endpoint are both on loopback.
    #[tokio::test]
    async fn metadata_endpoints_stay_off_internal_addresses() {
        let allowed = |server: &'static str, endpoint: &'static str| async move {
            metadata_endpoint_allowed(server, &reqwest::Url::parse(endpoint).unwrap())
                .await
                .is_ok()
        };
        for endpoint in [
            "http://127.0.0.1:18081/token",
            "https://10.0.0.9/token",
            "https://169.254.169.254/latest",
            "https://[fe80::1]/t",
            "https://[::ffff:127.0.0.1]/t",
            "https://localhost/t",
            "https://metadata.google.internal/t",
            "https://100.64.0.1/t",
        ] {
            assert!(
                !allowed("https://mcp.example.test/mcp", endpoint).await,
                "{endpoint}"
            );
        }
        assert!(
            allowed(
                "https://mcp.example.test/mcp",
                "https://93.184.216.34/token"
            )
            .await
        );
        // A local authorization server for a local server (tests, development).
        assert!(allowed("http://127.0.0.1:8080/mcp", "http://127.0.0.1:9090/token").await);
        assert!(allowed("http://localhost:8080/mcp", "http://[::1]:9090/token").await);
        assert!(!allowed("http://127.0.0.1:8080/mcp", "https://10.0.0.9/token").await);
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

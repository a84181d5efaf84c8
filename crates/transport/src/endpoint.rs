//! A remote server's connection parameters made safe to use: its URL checked (http or https)
//! and shown without secrets, its configured headers as a header map of sensitive values.
//!
//! Invariant: nothing made here echoes a header value, a URL's user info, query or fragment
//! (they may carry credentials); errors name the config key instead.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::TransportError;

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

//! Small HTTP pieces of the local OAuth test server (`auth_server.rs`): a JSON response body (this axum build
//! has no `json` feature) and `application/x-www-form-urlencoded` parsing.

use std::collections::HashMap;

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// A JSON response body.
pub struct Json(pub serde_json::Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}

/// Percent-decoding of one form component (`+` is a space).
pub fn decode(s: &str) -> String {
    let bytes = s.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A form body or query as a map (a repeated key keeps its last value).
pub fn form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// The two discovery documents of a local OAuth test server at `base` that guards `{base}/mcp`:
/// protected-resource metadata naming `base` as the authorization server (scope `mcp:tools`),
/// and authorization-server metadata with `issuer`, `authorization_endpoint` and
/// `token_endpoint` under `base`, plus the fields of `extra`.
pub fn discovery_routes<S: Clone + Send + Sync + 'static>(
    base: &str,
    extra: serde_json::Value,
) -> axum::Router<S> {
    let resource = serde_json::json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "scopes_supported": ["mcp:tools"],
    });
    let mut server = serde_json::json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
    });
    if let (Some(server), serde_json::Value::Object(extra)) = (server.as_object_mut(), extra) {
        server.extend(extra);
    }
    axum::Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(move || async move { Json(resource) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            axum::routing::get(move || async move { Json(server) }),
        )
}

//! DPoP (RFC 9449, SEP-1932): sender-constrained tokens for servers whose authorization server
//! advertises `dpop_signing_alg_values_supported` with ES256.
//!
//! One ES256 key pair per server is made at `login` and kept in the server's token store beside
//! its tokens ([`TokenFile::dpop_key`](super::store::TokenFile)), so the code exchange, every
//! refresh and every request to the server prove possession of the same key. A proof is a JWT
//! of type `dpop+jwt` signed with that key, its public half in the header (`jwk`), with the
//! request's method (`htm`), URL without query or fragment (`htu`), the time (`iat`), a random
//! `jti`, the access token's hash (`ath`) on requests to the server, and the nonce the server
//! last demanded (`nonce`).
//!
//! Invariants: every proof is fresh (its own `jti`) and signed with the server's stored key; a
//! `use_dpop_nonce` refusal — a 400 from the token endpoint, a 401 from the server — is
//! answered by exactly one retry carrying the nonce the refusal named (`DPoP-Nonce`), which is
//! then kept for later requests; a token the authorization server issued as `Bearer` is sent as
//! before, without proofs; the key, tokens and proofs never appear in a log line, an error or a
//! `Debug` output.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{
    AuthorizationMetadata, OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture,
    OAuthHttpRedirectPolicy, OAuthHttpRequest,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::{Value, json};
use sha2::Digest;

/// The only proof algorithm this client signs with.
pub(crate) const ALGORITHM: &str = "ES256";
/// The request header that carries a proof, and the response header that carries a nonce.
const DPOP: &str = "dpop";
const DPOP_NONCE: &str = "dpop-nonce";
/// The error code of a refusal that asks for a nonce.
const USE_DPOP_NONCE: &str = "use_dpop_nonce";
/// How long a request to the token endpoint may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest token endpoint answer read.
pub(crate) const MAX_TOKEN_BODY: usize = 1024 * 1024;

/// Why a key could not be made, read or used. Never quotes the key.
#[derive(Debug, thiserror::Error)]
pub enum DpopError {
    #[error("the stored DPoP key is unreadable; run `mcp-harness login` again")]
    /// The key cannot be used for ES256.
    BadKey,
    #[error("no randomness for a DPoP key or proof")]
    /// The system gave no randomness.
    NoRandomness,
    #[error("signing a DPoP proof failed")]
    /// Signing the proof failed.
    Signing,
}

/// Whether the authorization server in `metadata` accepts ES256 DPoP proofs.
pub fn advertised(metadata: &AuthorizationMetadata) -> bool {
    metadata
        .additional_fields
        .get("dpop_signing_alg_values_supported")
        .and_then(Value::as_array)
        .is_some_and(|algs| algs.iter().any(|a| a.as_str() == Some(ALGORITHM)))
}

/// Whether a token of `token_type` is DPoP-bound (the scheme is case-insensitive).
pub fn bound(token_type: &str) -> bool {
    token_type.eq_ignore_ascii_case("dpop")
}

/// `url` as a proof's `htu`: without query and fragment.
pub(crate) fn htu(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_string(),
    }
}

/// A proof's `ath`: base64url(SHA-256(access token)).
pub(crate) fn ath(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(access_token.as_bytes()))
}

/// One server's DPoP key pair (P-256).
pub struct DpopKey {
    pair: aws_lc_rs::signature::EcdsaKeyPair,
    pkcs8: Vec<u8>,
    jwk: Value,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DpopKey([REDACTED])")
    }
}

impl DpopKey {
    /// A new random key.
    pub fn generate() -> Result<Self, DpopError> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let doc = EcdsaKeyPair::generate_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &aws_lc_rs::rand::SystemRandom::new(),
        )
        .map_err(|_| DpopError::NoRandomness)?;
        Self::from_pkcs8(doc.as_ref().to_vec())
    }

    /// The key as stored: base64url of its PKCS#8 document.
    pub fn to_stored(&self) -> String {
        URL_SAFE_NO_PAD.encode(&self.pkcs8)
    }

    /// A key from its stored form.
    pub fn from_stored(stored: &str) -> Result<Self, DpopError> {
        let der = URL_SAFE_NO_PAD
            .decode(stored.trim())
            .map_err(|_| DpopError::BadKey)?;
        Self::from_pkcs8(der)
    }

    fn from_pkcs8(pkcs8: Vec<u8>) -> Result<Self, DpopError> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8)
            .map_err(|_| DpopError::BadKey)?;
        // An uncompressed P-256 point: 0x04, then x and y, 32 bytes each.
        let point = pair.public_key().as_ref();
        if point.len() != 65 || point[0] != 4 {
            return Err(DpopError::BadKey);
        }
        let jwk = json!({
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        });
        Ok(Self { pair, pkcs8, jwk })
    }

    /// The public key as a JWK (no private part).
    pub fn jwk(&self) -> &Value {
        &self.jwk
    }

    /// A proof for a request of `method` to `url`, bound to `access_token` when given, with the
    /// server's `nonce` when it demanded one, made at `now` (seconds since the epoch).
    pub fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
        now: u64,
    ) -> Result<String, DpopError> {
        use aws_lc_rs::rand::{SecureRandom, SystemRandom};
        let rng = SystemRandom::new();
        let mut jti = [0u8; 16];
        rng.fill(&mut jti).map_err(|_| DpopError::NoRandomness)?;
        let header = json!({"typ": "dpop+jwt", "alg": ALGORITHM, "jwk": self.jwk});
        let mut claims = json!({
            "jti": URL_SAFE_NO_PAD.encode(jti),
            "htm": method,
            "htu": htu(url),
            "iat": now,
        });
        if let Some(token) = access_token {
            claims["ath"] = ath(token).into();
        }
        if let Some(nonce) = nonce {
            claims["nonce"] = nonce.into();
        }
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&rng, input.as_bytes())
            .map_err(|_| DpopError::Signing)?;
        Ok(format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// [`proof`](Self::proof) now.
    fn proof_now(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, DpopError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.proof(method, url, access_token, nonce, now)
    }
}

/// The nonce a server demanded last (`None` until it demands one).
#[derive(Debug, Clone, Default)]
struct Nonce(Arc<Mutex<Option<String>>>);

impl Nonce {
    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, nonce: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(nonce);
    }
}

/// The nonce in a response's `DPoP-Nonce` header.
fn nonce_in(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(DPOP_NONCE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The OAuth HTTP client of a DPoP server's token requests (the code exchange and refreshes):
/// each POST to the token endpoint carries a fresh proof, and a `use_dpop_nonce` refusal is
/// answered once with the nonce it named. Other requests pass unchanged.
///
/// It is used only once the server's metadata was discovered (by rmcp's address-filtering
/// client), and its token endpoint is the one that discovery found.
pub(crate) struct DpopTokenClient {
    key: Arc<DpopKey>,
    /// The MCP server's URL: what a request may reach is judged against it
    /// ([`super::token_endpoint::metadata_endpoint_allowed`]), as rmcp's own client would.
    server: String,
    token_endpoint: String,
    nonce: Nonce,
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl DpopTokenClient {
    /// Made from its parts.
    pub(crate) fn new(
        key: Arc<DpopKey>,
        token_endpoint: &str,
        server: &str,
    ) -> Result<Self, String> {
        let build = |policy| {
            reqwest::Client::builder()
                .timeout(TOKEN_TIMEOUT)
                .redirect(policy)
                .build()
                .map_err(|e| e.to_string())
        };
        Ok(Self {
            key,
            server: server.to_string(),
            token_endpoint: htu(token_endpoint),
            nonce: Nonce::default(),
            // A redirect may not take the request (a code, a refresh token) to another origin.
            follow: build(crate::endpoint::same_origin_redirects(10, true))?,
            stop: build(reqwest::redirect::Policy::none())?,
        })
    }

    async fn send(
        &self,
        client: &reqwest::Client,
        parts: &http::request::Parts,
        body: &[u8],
        proof: Option<String>,
    ) -> Result<Answer, OAuthHttpClientError> {
        let url = reqwest::Url::parse(&parts.uri.to_string())?;
        let mut request = client
            .request(parts.method.clone(), url)
            .headers(parts.headers.clone())
            .body(body.to_vec());
        if let Some(proof) = proof {
            request = request.header(DPOP, proof);
        }
        let response = request.send().await?;
        let (status, version, headers) = (
            response.status(),
            response.version(),
            response.headers().clone(),
        );
        let body = crate::net::read_capped(response, MAX_TOKEN_BODY)
            .await?
            .ok_or("the token endpoint's answer is larger than 1 MiB")?;
        Ok(Answer {
            status,
            version,
            headers,
            body,
        })
    }
}

/// One answer of the token endpoint, read whole.
struct Answer {
    status: http::StatusCode,
    version: http::Version,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    /// Whether it refuses a proof for want of a nonce: a 400 `use_dpop_nonce`.
    fn asks_for_nonce(&self) -> bool {
        self.status == http::StatusCode::BAD_REQUEST
            && serde_json::from_slice::<Value>(&self.body)
                .is_ok_and(|v| v["error"] == USE_DPOP_NONCE)
    }

    fn into_response(self) -> Result<http::Response<Vec<u8>>, OAuthHttpClientError> {
        let mut builder = http::Response::builder()
            .status(self.status)
            .version(self.version);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        Ok(builder.body(self.body)?)
    }
}

impl OAuthHttpClient for DpopTokenClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let (parts, body) = request.request.into_parts();
            // This client replaces rmcp's address-filtering one: the same rule holds here.
            let target = reqwest::Url::parse(&parts.uri.to_string())?;
            super::token_endpoint::metadata_endpoint_allowed(&self.server, &target).await?;
            let to_token_endpoint = parts.method == http::Method::POST
                && htu(&parts.uri.to_string()) == self.token_endpoint;
            let proof = |nonce: Option<String>| -> Result<Option<String>, OAuthHttpClientError> {
                if !to_token_endpoint {
                    return Ok(None);
                }
                let proof =
                    self.key
                        .proof_now("POST", &self.token_endpoint, None, nonce.as_deref())?;
                Ok(Some(proof))
            };
            let mut answer = self
                .send(client, &parts, &body, proof(self.nonce.get())?)
                .await?;
            if to_token_endpoint && let Some(nonce) = nonce_in(&answer.headers) {
                self.nonce.set(nonce.clone());
                if answer.asks_for_nonce() {
                    tracing::debug!("the token endpoint asked for a DPoP nonce: sending again");
                    answer = self
                        .send(client, &parts, &body, proof(Some(nonce))?)
                        .await?;
                    if let Some(nonce) = nonce_in(&answer.headers) {
                        self.nonce.set(nonce);
                    }
                }
            }
            answer.into_response()
        })
    }
}

/// The Streamable HTTP client under rmcp's authorizing client: with a DPoP-bound token it sends
/// `Authorization: DPoP <token>` and a fresh proof with every request, and answers a 401
/// `use_dpop_nonce` once with the server's nonce; without one it is the plain client.
#[derive(Clone)]
pub struct DpopHttpClient {
    inner: crate::direct::Direct,
    key: Option<Arc<DpopKey>>,
    nonce: Nonce,
}

impl DpopHttpClient {
    /// `inner` sending proofs made with `key` (a DPoP-bound token), or plainly (`None`).
    pub fn new(inner: reqwest::Client, key: Option<Arc<DpopKey>>) -> Self {
        Self {
            inner: crate::direct::Direct::new(inner),
            key,
            nonce: Nonce::default(),
        }
    }

    /// Whether requests carry proofs.
    pub fn proves(&self) -> bool {
        self.key.is_some()
    }

    /// The headers of a request of `method` to `uri` with `token`: the custom ones, the
    /// authorization and the proof. `None` when the token goes as a bearer token.
    fn headers(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        custom: &HashMap<HeaderName, HeaderValue>,
    ) -> Result<Option<HashMap<HeaderName, HeaderValue>>, DpopError> {
        let (Some(key), Some(token)) = (&self.key, token) else {
            return Ok(None);
        };
        let proof = key.proof_now(method, uri, Some(token), self.nonce.get().as_deref())?;
        let mut headers = custom.clone();
        let value = |v: String| HeaderValue::from_str(&v).map_err(|_| DpopError::Signing);
        let mut authorization = value(format!("DPoP {token}"))?;
        authorization.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, authorization);
        headers.insert(HeaderName::from_static(DPOP), value(proof)?);
        Ok(Some(headers))
    }

    /// Runs `send` with the DPoP headers (or the bearer token); once more with the nonce when
    /// the server refused it with `use_dpop_nonce`.
    async fn guarded<T, F, Fut>(
        &self,
        method: &'static str,
        uri: &str,
        session: Option<&str>,
        token: Option<String>,
        custom: HashMap<HeaderName, HeaderValue>,
        send: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let proven = |token: Option<&str>| {
            self.headers(method, uri, token, &custom).map_err(|e| {
                StreamableHttpError::Auth(rmcp::transport::auth::AuthError::InternalError(
                    e.to_string(),
                ))
            })
        };
        let Some(headers) = proven(token.as_deref())? else {
            return send(token, custom.clone()).await;
        };
        match send(None, headers).await {
            Err(StreamableHttpError::AuthRequired(challenge))
                if challenge.www_authenticate_header.contains(USE_DPOP_NONCE) =>
            {
                // rmcp keeps the challenge but not the nonce beside it: learn it from a ping the
                // server refuses the same way (or answers, harmlessly).
                match self
                    .learn_nonce(uri, session, token.as_deref(), &custom)
                    .await
                {
                    Some(nonce) => {
                        tracing::debug!("the server asked for a DPoP nonce: sending again");
                        self.nonce.set(nonce);
                        let headers = proven(token.as_deref())?.unwrap_or_default();
                        send(None, headers).await
                    }
                    None => Err(StreamableHttpError::AuthRequired(challenge)),
                }
            }
            other => other,
        }
    }

    /// The nonce the server names when it refuses a ping with the current proof.
    async fn learn_nonce(
        &self,
        uri: &str,
        session: Option<&str>,
        token: Option<&str>,
        custom: &HashMap<HeaderName, HeaderValue>,
    ) -> Option<String> {
        let headers = self.headers("POST", uri, token, custom).ok()??;
        let mut request = self
            .inner
            .http()
            .post(uri)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&json!({"jsonrpc": "2.0", "id": "mcp-harness-dpop-nonce", "method": "ping"}));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.ok()?;
        nonce_in(response.headers())
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type StreamResult = Result<
    BoxStream<'static, Result<sse_stream::Sse, SseError>>,
    StreamableHttpError<reqwest::Error>,
>;

impl StreamableHttpClient for DpopHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult {
        self.guarded(
            "POST",
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner.post_message(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    auth,
                    headers,
                )
            },
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult {
        self.guarded(
            "POST",
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner.post_message_with_max_sse_event_size(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    auth,
                    headers,
                    max_sse_event_size,
                )
            },
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        self.guarded(
            "POST",
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner.post_message_with_response_limits(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    auth,
                    headers,
                    limits,
                )
            },
        )
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.guarded(
            "DELETE",
            &uri,
            Some(&session_id),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner
                    .delete_session(uri.clone(), session_id.clone(), auth, headers)
            },
        )
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> StreamResult {
        self.guarded(
            "GET",
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner.get_stream(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    headers,
                )
            },
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> StreamResult {
        self.guarded(
            "GET",
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
            |auth, headers| {
                self.inner.get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    auth,
                    headers,
                    max_sse_event_size,
                )
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(part: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    /// Verifies `jwt` with the key in its own `jwk` header, as a server does.
    fn verify_with_header_jwk(jwt: &str) -> (Value, Value) {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header = decode(parts[0]);
        let jwk = &header["jwk"];
        let mut point = vec![4u8];
        point.extend(URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap());
        point.extend(URL_SAFE_NO_PAD.decode(jwk["y"].as_str().unwrap()).unwrap());
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .expect("the proof verifies with the key in its header");
        assert!(
            public
                .verify(format!("{}.{}x", parts[0], parts[1]).as_bytes(), &signature)
                .is_err(),
            "a changed proof does not verify"
        );
        (header, decode(parts[1]))
    }

    #[test]
    fn a_resource_proof_has_the_claims_and_verifies_with_its_jwk() {
        let key = DpopKey::generate().unwrap();
        let proof = key
            .proof(
                "POST",
                "https://mcp.example/mcp?session=1#frag",
                Some("the-token"),
                Some("n-1"),
                1_700_000_000,
            )
            .unwrap();
        let (header, claims) = verify_with_header_jwk(&proof);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["jwk"]["kty"], "EC");
        assert_eq!(header["jwk"]["crv"], "P-256");
        assert!(header["jwk"].get("d").is_none(), "no private part");
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://mcp.example/mcp");
        assert_eq!(claims["iat"], 1_700_000_000);
        assert_eq!(claims["nonce"], "n-1");
        // ath = base64url(sha256(token)): the well-known value for "the-token".
        let expected = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(b"the-token"));
        assert_eq!(claims["ath"], expected);
        assert_eq!(ath("the-token"), expected);
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(claims["jti"].as_str().unwrap())
                .unwrap()
                .len(),
            16
        );
    }

    #[test]
    fn a_token_request_proof_has_no_ath_nor_nonce_and_every_proof_is_fresh() {
        let key = DpopKey::generate().unwrap();
        let a = key
            .proof("POST", "http://127.0.0.1:9/token", None, None, 5)
            .unwrap();
        let b = key
            .proof("POST", "http://127.0.0.1:9/token", None, None, 5)
            .unwrap();
        let (_, ca) = verify_with_header_jwk(&a);
        let (_, cb) = verify_with_header_jwk(&b);
        assert!(ca.get("ath").is_none() && ca.get("nonce").is_none());
        assert_ne!(ca["jti"], cb["jti"], "each proof has its own jti");
    }

    #[test]
    fn a_stored_key_is_the_same_key() {
        let key = DpopKey::generate().unwrap();
        let again = DpopKey::from_stored(&key.to_stored()).unwrap();
        assert_eq!(key.jwk(), again.jwk());
        let (header, _) =
            verify_with_header_jwk(&again.proof("GET", "http://h/mcp", None, None, 1).unwrap());
        assert_eq!(&header["jwk"], key.jwk());
        assert!(matches!(
            DpopKey::from_stored("not a key"),
            Err(DpopError::BadKey)
        ));
        assert_eq!(format!("{key:?}"), "DpopKey([REDACTED])");
    }

    #[test]
    fn dpop_is_used_only_where_es256_is_advertised_and_tokens_are_bound() {
        let metadata = |algs: Value| -> AuthorizationMetadata {
            serde_json::from_value(json!({
                "authorization_endpoint": "https://as/authorize",
                "token_endpoint": "https://as/token",
                "dpop_signing_alg_values_supported": algs,
            }))
            .unwrap()
        };
        assert!(advertised(&metadata(json!(["RS256", "ES256"]))));
        assert!(!advertised(&metadata(json!(["RS256"]))));
        assert!(!advertised(&metadata(json!(null))));
        assert!(bound("DPoP") && bound("dpop") && !bound("Bearer"));
        assert_eq!(htu("http://h:1/token?x=1"), "http://h:1/token");
    }
}

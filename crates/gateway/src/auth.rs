//! Who a client is: the `gateway.clients` profiles, each proven by a static bearer token (from
//! the gateway's environment) or an OAuth 2.1 access token (a JWT checked against the
//! authorization server's JWKS, issuer, audience = the gateway's own URL, expiry and scopes).
//!
//! Invariants:
//! - a token value is never logged, stored in a message or sent anywhere: bearer tokens are
//!   kept only as SHA-256 digests and compared in constant time; a refusal's description names
//!   what failed (expired, audience, issuer, signature, scope), never the token;
//! - every bearer profile is compared on every request (no early exit), so timing does not
//!   tell which profile, if any, was close;
//! - a JWT is accepted only with an asymmetric signature (RS*, PS*, ES256/384) by a key of the
//!   JWKS of a profile whose issuer it names, and it proves the first such profile (in name
//!   order) whose keys, client ids and scopes it all satisfies;
//! - each JWKS is fetched at most once per [`REFETCH_INTERVAL`], whether the fetch succeeded or
//!   not, so a flood of made-up key ids or of tokens naming a broken issuer costs the
//!   authorization server (and the log) nothing; one fetch at a time per JWKS, and a slow one
//!   holds up only the tokens that need it; a body is read up to [`MAX_JWKS_BYTES`], never
//!   further;
//! - keys are trusted for [`JWKS_MAX_AGE`] after their fetch: a key removed from the JWKS stops
//!   verifying by then (while the authorization server cannot be reached, the last keys
//!   fetched stay in use, and each failed refetch is a WARN); a token whose key is among keys
//!   past that age waits at most [`STALE_WAIT`] for their refetch, then is checked with them
//!   while the fetch goes on (a hanging authorization server stalls no token of a known key
//!   for longer; one naming a key not yet fetched waits for the fetch, at most its timeout).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::{constant_time, digest};
use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_harness_runtime::{ClientProfile, GatewayConfig, ProfileAuth};
use serde::Deserialize;

/// Clock skew tolerated on `exp` and `nbf`.
pub(crate) const LEEWAY_SECS: u64 = 30;
/// A JWKS is fetched at most this often (an unknown `kid`, an expired set, a failed fetch).
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// How long a fetched JWKS is trusted before it is fetched again.
pub(crate) const JWKS_MAX_AGE: Duration = Duration::from_secs(300);
/// How long one JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a token whose key is among keys past [`JWKS_MAX_AGE`] waits for their refetch
/// before it is checked with them.
const STALE_WAIT: Duration = Duration::from_millis(250);
/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// What a request's credentials proved: the profile, and for an access token with a `sub`, the
/// user (a digest of issuer and subject), so a session serves only the user who opened it.
pub(crate) struct Proven {
    pub(crate) profile: Arc<ClientProfile>,
    pub(crate) subject: Option<String>,
}

impl Proven {
    /// Who owns a session this request opens: the profile, and the user when there is one.
    pub(crate) fn owner(&self) -> String {
        match &self.subject {
            Some(subject) => format!("{}\u{1f}{subject}", self.profile.name),
            None => self.profile.name.clone(),
        }
    }
}

/// Whether a session owner ([`Proven::owner`]) is of profile `profile` (any of its users).
pub(crate) fn owned_by_profile(owner: &str, profile: &str) -> bool {
    owner
        .strip_prefix(profile)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('\u{1f}'))
}

/// A short digest of a token's issuer and subject: the same user gets the same one, and the
/// sealed session id carries no user name.
fn subject(issuer: &str, sub: &str) -> String {
    let digest = sha256(format!("{issuer}\0{sub}").as_bytes());
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// An authenticated client: the profile it proved.
#[derive(Clone)]
pub(crate) struct Identity(pub(crate) Arc<ClientProfile>);

/// Why a request was refused, as the HTTP answer says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// 401 or 403.
    pub(crate) status: u16,
    /// `invalid_token` or `insufficient_scope`; `None` when no token was given.
    pub(crate) error: Option<&'static str>,
    /// What failed (never the token).
    pub(crate) description: String,
    /// The scopes a 403 asks for.
    pub(crate) scope: Option<String>,
}

impl Refusal {
    /// A 401 `invalid_token` saying `description`.
    pub(crate) fn invalid(description: impl Into<String>) -> Self {
        Self {
            status: 401,
            error: Some("invalid_token"),
            description: description.into(),
            scope: None,
        }
    }

    /// The `WWW-Authenticate` value (RFC 6750 §3, RFC 9728 §5.1).
    pub(crate) fn challenge(&self, metadata_url: &str) -> String {
        let mut out = format!("Bearer resource_metadata=\"{metadata_url}\"");
        if let Some(error) = self.error {
            out.push_str(&format!(", error=\"{error}\""));
            let description: String = self
                .description
                .chars()
                .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
                .collect();
            out.push_str(&format!(", error_description=\"{description}\""));
        }
        if let Some(scope) = &self.scope {
            out.push_str(&format!(", scope=\"{scope}\""));
        }
        out
    }
}

/// Why the profiles could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// A bearer profile's environment variable is unset or empty.
    #[error(
        "gateway.clients.{profile}.auth.tokenEnv: the environment variable {var} is not set (or empty); set it in the environment of `mcp-harness serve`"
    )]
    TokenUnset {
        /// The profile.
        profile: String,
        /// The variable's name.
        var: String,
    },
    /// Two bearer profiles have the same token.
    #[error(
        "gateway.clients.{first}.auth and gateway.clients.{second}.auth: both profiles have the same bearer token, so a client could not be told apart; give each its own"
    )]
    SameToken {
        /// One profile.
        first: String,
        /// The other.
        second: String,
    },
}

/// One OAuth profile's expectations.
struct OAuthProfile {
    issuer: String,
    jwks_uri: String,
    scopes: Vec<String>,
    client_ids: Option<Vec<String>>,
    profile: Arc<ClientProfile>,
}

impl OAuthProfile {
    /// Whether verified `claims` prove this profile: its client (`client_id`, else `azp`) among
    /// `clientIds`, and every scope of `scopes` granted. Refused: how far it got (1: the
    /// client, 2: scopes), how many scopes are missing, and the refusal.
    fn admits(&self, claims: &Claims) -> Result<(), (u8, usize, Refusal)> {
        let client = claims.client_id.as_deref().or(claims.azp.as_deref());
        let known = self
            .client_ids
            .as_ref()
            .is_none_or(|ids| client.is_some_and(|c| ids.iter().any(|id| id == c)));
        if !known {
            let refusal =
                Refusal::invalid("the token's client is not in `clientIds` of any client profile");
            return Err((1, 0, refusal));
        }
        let granted = granted_scopes(claims);
        let missing = self.scopes.iter().filter(|s| !granted.contains(s)).count();
        if missing > 0 {
            let refusal = Refusal {
                status: 403,
                error: Some("insufficient_scope"),
                description: "the token lacks a scope this client needs".into(),
                scope: Some(self.scopes.join(" ")),
            };
            return Err((2, missing, refusal));
        }
        Ok(())
    }
}

/// The client profiles and what checks them.
pub(crate) struct Clients {
    /// Every profile by name.
    pub(crate) profiles: Vec<Arc<ClientProfile>>,
    /// (SHA-256 of the token, profile).
    bearer: Vec<([u8; 32], Arc<ClientProfile>)>,
    oauth: Vec<OAuthProfile>,
    /// Every profile's JWKS by its URI (fixed at start: nothing a client sends adds one).
    jwks: HashMap<String, Arc<Jwks>>,
    http: reqwest::Client,
    /// [`REFETCH_INTERVAL`] and [`JWKS_MAX_AGE`] (shorter in tests).
    refetch: Duration,
    max_age: Duration,
}

/// One JWKS: the keys last fetched, and the one fetch at a time.
#[derive(Default)]
struct Jwks {
    cached: std::sync::Mutex<Cached>,
    fetching: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct Cached {
    keys: Option<Arc<JwkSet>>,
    /// When `keys` were fetched.
    fetched: Option<Instant>,
    /// When the last fetch started, whatever came of it.
    tried: Option<Instant>,
}

impl Cached {
    fn fresh(&self, max_age: Duration) -> bool {
        self.fetched.is_some_and(|at| at.elapsed() < max_age)
    }

    fn tried_recently(&self, refetch: Duration) -> bool {
        self.tried.is_some_and(|at| at.elapsed() < refetch)
    }
}

/// The claims the gateway reads (the rest are checked by `jsonwebtoken`'s validation).
#[derive(Deserialize, Clone)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<serde_json::Value>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, bytes).as_ref());
    out
}

impl Clients {
    /// The profiles of `config`, reading each bearer token from `env`. `None` without
    /// profiles (no authentication).
    pub(crate) fn new(
        config: &GatewayConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ClientsError> {
        if config.clients.is_empty() {
            return Ok(None);
        }
        let mut profiles = Vec::new();
        let mut bearer: Vec<([u8; 32], Arc<ClientProfile>)> = Vec::new();
        let mut oauth = Vec::new();
        for profile in config.clients.values() {
            let profile = Arc::new(profile.clone());
            profiles.push(profile.clone());
            match &profile.auth {
                ProfileAuth::Bearer { token_env } => {
                    let token = env(token_env).filter(|t| !t.is_empty()).ok_or_else(|| {
                        ClientsError::TokenUnset {
                            profile: profile.name.clone(),
                            var: token_env.clone(),
                        }
                    })?;
                    let hash = sha256(token.as_bytes());
                    if let Some((_, other)) = bearer.iter().find(|(h, _)| *h == hash) {
                        return Err(ClientsError::SameToken {
                            first: other.name.clone(),
                            second: profile.name.clone(),
                        });
                    }
                    bearer.push((hash, profile.clone()));
                }
                ProfileAuth::OAuth {
                    issuer,
                    jwks_uri,
                    scopes,
                    client_ids,
                } => oauth.push(OAuthProfile {
                    issuer: issuer.clone(),
                    jwks_uri: jwks_uri.clone(),
                    scopes: scopes.clone(),
                    client_ids: client_ids.clone(),
                    profile: profile.clone(),
                }),
            }
        }
        let jwks = oauth
            .iter()
            .map(|o| (o.jwks_uri.clone(), Arc::default()))
            .collect();
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Ok(Some(Self {
            profiles,
            bearer,
            oauth,
            jwks,
            http,
            refetch: REFETCH_INTERVAL,
            max_age: JWKS_MAX_AGE,
        }))
    }

    /// The issuers of the OAuth profiles (the metadata's `authorization_servers`).
    pub(crate) fn authorization_servers(&self) -> Vec<String> {
        let mut out: Vec<String> = self.oauth.iter().map(|o| o.issuer.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every scope some profile requires (the metadata's `scopes_supported`).
    pub(crate) fn scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = self.oauth.iter().flat_map(|o| o.scopes.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Who the request's `Authorization` header proves, for the gateway at `resource` (the
    /// audience a JWT must name).
    pub(crate) async fn authenticate(
        &self,
        authorization: Option<&str>,
        resource: &str,
    ) -> Result<Proven, Refusal> {
        let token = authorization.and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(Refusal {
                status: 401,
                error: None,
                description: "this gateway needs a bearer token (Authorization: Bearer ...)".into(),
                scope: None,
            });
        };
        let hash = sha256(token.as_bytes());
        let mut found = None;
        for (expected, profile) in &self.bearer {
            if constant_time::verify_slices_are_equal(expected, &hash).is_ok() {
                found = Some(profile.clone());
            }
        }
        if let Some(profile) = found {
            return Ok(Proven {
                profile,
                subject: None,
            });
        }
        if self.oauth.is_empty() {
            return Err(Refusal::invalid(
                "the bearer token is not one of a configured client profile",
            ));
        }
        self.check_jwt(token, resource).await
    }

    async fn check_jwt(&self, token: &str, resource: &str) -> Result<Proven, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Refusal::invalid("the token is neither a configured bearer token nor a JWT")
        })?;
        let payload = unverified_payload(token)
            .ok_or_else(|| Refusal::invalid("the token's payload is not a JSON object"))?;
        let issuer = match payload.get("iss") {
            Some(serde_json::Value::String(issuer)) => issuer,
            Some(_) => return Err(Refusal::invalid("the token's `iss` claim is not a string")),
            None => return Err(Refusal::invalid("the token has no `iss` claim")),
        };
        let candidates: Vec<&OAuthProfile> =
            self.oauth.iter().filter(|o| o.issuer == *issuer).collect();
        if candidates.is_empty() {
            return Err(Refusal::invalid(
                "the token's issuer is not the issuer of any client profile",
            ));
        }
        // Each candidate in name order; the refusal is the one that got furthest (a verified
        // token of the wrong client, then one short of scopes: the fewest missing).
        let mut verified: Vec<(&str, Result<Claims, Refusal>)> = Vec::new();
        let mut best: Option<(u8, usize, Refusal)> = None;
        for candidate in candidates {
            let claims = match verified.iter().find(|(uri, _)| *uri == candidate.jwks_uri) {
                Some((_, done)) => done.clone(),
                None => {
                    let done = self
                        .verify(token, &header, &payload, candidate, resource)
                        .await;
                    verified.push((&candidate.jwks_uri, done.clone()));
                    done
                }
            };
            let refusal = match claims {
                Ok(claims) => match candidate.admits(&claims) {
                    Ok(()) => {
                        return Ok(Proven {
                            profile: candidate.profile.clone(),
                            subject: claims.sub.as_deref().map(|sub| subject(issuer, sub)),
                        });
                    }
                    Err(refused) => refused,
                },
                Err(refusal) => (0, 0, refusal),
            };
            let rank = |(stage, missing, _): &(u8, usize, Refusal)| (*stage, Reverse(*missing));
            if best.as_ref().is_none_or(|b| rank(&refusal) > rank(b)) {
                best = Some(refusal);
            }
        }
        Err(best
            .map(|(_, _, refusal)| refusal)
            .expect("at least one candidate"))
    }

    /// The claims of `token` verified as `profile` expects: signed by a key of its JWKS,
    /// issued by its issuer, for `resource`, within its time.
    async fn verify(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        payload: &serde_json::Value,
        profile: &OAuthProfile,
        resource: &str,
    ) -> Result<Claims, Refusal> {
        let key = self
            .key(&profile.jwks_uri, header.kid.as_deref(), header.alg)
            .await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = allowed_algorithms(&key.1);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&profile.issuer]);
        let trimmed = resource.trim_end_matches('/');
        validation.set_audience(&[trimmed.to_string(), format!("{trimmed}/")]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.0, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Refusal::invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired".to_string(),
                ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_string(),
                ErrorKind::InvalidAudience => {
                    format!("the token's audience is not this gateway ({trimmed})")
                }
                ErrorKind::InvalidIssuer => "the token's issuer is not expected".to_string(),
                ErrorKind::InvalidSignature => "the token's signature does not verify".to_string(),
                ErrorKind::InvalidAlgorithm => {
                    "the token's algorithm does not fit its key".to_string()
                }
                ErrorKind::MissingRequiredClaim(claim) => match payload.get(claim.as_str()) {
                    Some(_) => format!("the token's `{claim}` claim is not of its type"),
                    None => format!("the token has no `{claim}` claim"),
                },
                ErrorKind::Json(_) => {
                    "a claim of the token is not of its type (`exp`, `nbf` and `iat` are whole \
                     seconds; `aud` a string or a list of them)"
                        .to_string()
                }
                _ => "the token could not be verified".to_string(),
            })
        })?;
        Ok(data.claims)
    }

    /// The verification key `kid` (or the only key usable with `alg`) of the JWKS at `uri`:
    /// from the keys fetched within [`JWKS_MAX_AGE`], else fetched again (at most once per
    /// [`REFETCH_INTERVAL`]; while fetches fail, from the last keys fetched).
    async fn key(
        &self,
        uri: &str,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<(DecodingKey, AlgorithmParameters), Refusal> {
        let not_found = || Refusal::invalid("the token's signing key is not in its issuer's JWKS");
        let jwks = self.jwks.get(uri).ok_or_else(not_found)?;
        let cached = |jwks: &Jwks| {
            let cached = jwks.cached.lock().unwrap_or_else(|p| p.into_inner());
            let found = cached.keys.as_ref().and_then(|keys| pick(keys, kid, alg));
            let fresh = cached.fresh(self.max_age);
            (found, fresh, cached.tried_recently(self.refetch))
        };
        match cached(jwks) {
            (Some(found), true, _) => return Ok(found),
            (Some(stale), false, _) => {
                if !self.refresh_stale(uri, jwks).await {
                    return Ok(stale);
                }
                // Refetched in time: what the fresh keys hold for the token.
                return cached(jwks).0.ok_or_else(not_found);
            }
            _ => {}
        }
        // One fetch at a time: a token waiting here uses what the fetch before it got (it
        // waits for a fetch under way rather than being refused for want of its keys).
        let _fetching = jwks.fetching.lock().await;
        match cached(jwks) {
            (Some(found), true, _) => return Ok(found),
            (found, _, true) => return found.ok_or_else(not_found),
            _ => {}
        }
        let tried = {
            let mut cached = jwks.cached.lock().unwrap_or_else(|p| p.into_inner());
            let tried = cached.tried_recently(self.refetch);
            if !tried {
                cached.tried = Some(Instant::now());
            }
            tried
        };
        if !tried {
            refetch(&self.http, uri, jwks, self.refetch).await;
        }
        cached(jwks).0.ok_or_else(not_found)
    }

    /// Refetches keys past their age for a token one of them verifies: whether the refetch
    /// ended within [`STALE_WAIT`] (else the token is checked with the old keys). A refetch
    /// under way, or tried within the refetch interval, is not waited for; one still running
    /// at the wait's end goes on in the background, holding the fetch lock.
    async fn refresh_stale(&self, uri: &str, jwks: &Arc<Jwks>) -> bool {
        let Ok(fetching) = jwks.fetching.clone().try_lock_owned() else {
            return false;
        };
        {
            let mut cached = jwks.cached.lock().unwrap_or_else(|p| p.into_inner());
            if cached.tried_recently(self.refetch) {
                return false;
            }
            cached.tried = Some(Instant::now());
        }
        let (http, uri, owned, interval) = (
            self.http.clone(),
            uri.to_string(),
            jwks.clone(),
            self.refetch,
        );
        let fetch = tokio::spawn(async move {
            let _fetching = fetching;
            refetch(&http, &uri, &owned, interval).await;
        });
        tokio::time::timeout(STALE_WAIT, fetch).await.is_ok()
    }
}

/// Fetches the JWKS at `uri` into `jwks`; a failure keeps the keys fetched before (a WARN).
async fn refetch(http: &reqwest::Client, uri: &str, jwks: &Jwks, interval: Duration) {
    match fetch(http, uri).await {
        Ok(keys) => {
            let mut cached = jwks.cached.lock().unwrap_or_else(|p| p.into_inner());
            cached.keys = Some(Arc::new(keys));
            cached.fetched = Some(Instant::now());
        }
        Err(error) => {
            tracing::warn!(jwks = %uri, %error, "the authorization server's JWKS could not be fetched (tried again in {}s at the soonest; the keys fetched before stay in use)", interval.as_secs());
        }
    }
}

/// The JWKS at `uri`, read up to [`MAX_JWKS_BYTES`].
async fn fetch(http: &reqwest::Client, uri: &str) -> Result<JwkSet, String> {
    let mut response = http
        .get(uri)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let too_large = || format!("larger than {MAX_JWKS_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(too_large());
    }
    // Read chunk by chunk: a body that declares no length stops at the limit.
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| e.without_url().to_string())?
    {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))
}

/// The key of `set` named `kid` that verifies `alg` (the first, when several share the id),
/// or without a `kid` the only such key; symmetric keys never verify (an HMAC "key" would be
/// public), nor does a key meant for anything but verifying signatures (`use` other than
/// `sig`, `key_ops` without `verify`).
fn pick(
    set: &JwkSet,
    kid: Option<&str>,
    alg: Algorithm,
) -> Option<(DecodingKey, AlgorithmParameters)> {
    use jsonwebtoken::jwk::{KeyOperations, PublicKeyUse};
    let usable = |jwk: &&jsonwebtoken::jwk::Jwk| {
        let common = &jwk.common;
        let asymmetric = matches!(
            jwk.algorithm,
            AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_)
        );
        // A key that names its algorithm (`alg`) verifies that one only (RFC 8725 §3.1).
        let declared_fits = (common.key_algorithm)
            .is_none_or(|declared| declared.to_string().parse::<Algorithm>().ok() == Some(alg));
        let for_signatures = (common.public_key_use.as_ref())
            .is_none_or(|used| *used == PublicKeyUse::Signature)
            && (common.key_operations.as_ref())
                .is_none_or(|ops| ops.contains(&KeyOperations::Verify));
        asymmetric
            && declared_fits
            && for_signatures
            && allowed_algorithms(&jwk.algorithm).contains(&alg)
    };
    let jwk = match kid {
        Some(kid) => set
            .keys
            .iter()
            .filter(|jwk| jwk.common.key_id.as_deref() == Some(kid))
            .find(usable)?,
        None => {
            let mut usable = set.keys.iter().filter(usable);
            let only = usable.next()?;
            if usable.next().is_some() {
                return None;
            }
            only
        }
    };
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some((key, jwk.algorithm.clone()))
}

/// The algorithms a key of this type may verify.
fn allowed_algorithms(params: &AlgorithmParameters) -> Vec<Algorithm> {
    match params {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(_) => vec![Algorithm::ES256, Algorithm::ES384],
        _ => Vec::new(),
    }
}

/// A JWT's payload, read before verification only to choose the profiles (and so the JWKS) to
/// verify it with by its `iss`, and to say which claim is malformed.
fn unverified_payload(token: &str) -> Option<serde_json::Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.is_object().then_some(value)
}

/// The scopes a token grants: `scope` (space-separated) and `scp` (a list or a string).
fn granted_scopes(claims: &Claims) -> Vec<String> {
    let mut out: Vec<String> = claims
        .scope
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    match &claims.scp {
        Some(serde_json::Value::String(s)) => {
            out.extend(s.split_whitespace().map(str::to_string));
        }
        Some(serde_json::Value::Array(items)) => {
            out.extend(items.iter().filter_map(|v| v.as_str().map(str::to_string)));
        }
        _ => {}
    }
    out
}

/// The origin (`scheme://host[:port]`) of `url`.
pub(crate) fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod jwks_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_names_its_algorithm_verifies_that_one_only() {
        let set: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "named", "alg": "RS256", "n": "sXch", "e": "AQAB"},
            {"kty": "RSA", "kid": "open", "n": "sXch", "e": "AQAB"}
        ]}))
        .expect("a JWKS");
        assert!(pick(&set, Some("named"), Algorithm::RS256).is_some());
        assert!(pick(&set, Some("named"), Algorithm::PS256).is_none());
        assert!(pick(&set, Some("open"), Algorithm::PS256).is_some());
        // Without a `kid`, only the key that fits is a candidate: the one without `alg`.
        assert!(pick(&set, None, Algorithm::PS256).is_some());
    }

    #[test]
    fn only_a_key_for_verifying_signatures_verifies_and_a_shared_kid_tries_each() {
        let ec = |kid: &str, extra: serde_json::Value| {
            let mut key = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid,
                "x": "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4",
                "y": "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM"});
            key.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            key
        };
        let set: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            ec("enc", serde_json::json!({"use": "enc"})),
            ec("ops", serde_json::json!({"key_ops": ["encrypt"]})),
            ec("sig", serde_json::json!({"use": "sig", "key_ops": ["verify"]})),
            {"kty": "RSA", "kid": "dup", "n": "sXch", "e": "AQAB"},
            ec("dup", serde_json::json!({}))
        ]}))
        .expect("a JWKS");
        assert!(pick(&set, Some("enc"), Algorithm::ES256).is_none());
        assert!(pick(&set, Some("ops"), Algorithm::ES256).is_none());
        assert!(pick(&set, Some("sig"), Algorithm::ES256).is_some());
        // Two keys under one id: the one that verifies the token's algorithm.
        let (_, params) = pick(&set, Some("dup"), Algorithm::ES256).expect("the EC key");
        assert!(matches!(params, AlgorithmParameters::EllipticCurve(_)));
        assert!(pick(&set, Some("dup"), Algorithm::RS256).is_some());
    }

    #[test]
    fn challenges_quote_no_token_and_name_the_metadata() {
        let refusal = Refusal::invalid("the token has \"expired\"");
        assert_eq!(
            refusal.challenge("http://127.0.0.1:1/.well-known/oauth-protected-resource"),
            "Bearer resource_metadata=\"http://127.0.0.1:1/.well-known/oauth-protected-resource\", error=\"invalid_token\", error_description=\"the token has expired\""
        );
        assert_eq!(
            origin("https://gw.example:8443/a/mcp"),
            "https://gw.example:8443"
        );
        assert_eq!(origin("http://127.0.0.1:9"), "http://127.0.0.1:9");
    }
}

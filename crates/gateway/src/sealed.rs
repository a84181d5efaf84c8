//! Sealed session ids: the `Mcp-Session-Id` the HTTP gateway hands out carries, encrypted and
//! authenticated (AES-256-GCM), everything another replica needs to serve the session, so
//! replicas behind any load balancer share sessions with no shared store.
//!
//! What a sealed id holds ([`Payload`]): a random session identity (128 bits), an expiry, the
//! client's `initialize` parameters (negotiated protocol version, capabilities, client info),
//! the client's profile name when an authentication layer set one, and the mark of the
//! session's last `tools/list` (a sequence number and the listed catalog's content digest).
//! Upstream session ids are not in it: upstream connections belong to each replica's runtime
//! and are shared by all of its clients, never tied to one downstream session.
//!
//! Invariants:
//! - an id is accepted only if it opens under one of the configured keys and has not expired;
//!   anything else (forged, tampered, expired, sealed under a key no longer configured) gets
//!   HTTP 404 before rmcp sees it, so the client re-initialises;
//! - the first key seals, every key opens: a new key is added behind the old one on every
//!   replica first, then moved first (two rolls: see the README), and removing the old key
//!   later retires the ids sealed under it;
//! - a request with a valid id whose session this replica does not hold is served: the session
//!   is restored from the id (rmcp replays `initialize` with the sealed parameters);
//! - an id is re-sealed (and re-sent in the response's `Mcp-Session-Id`) only when what it
//!   carries changed or half its lifetime has passed, and an id sealed here for the same
//!   content with more than half its lifetime left is re-sent instead of sealing another, so
//!   seals per key stay far below the 2^32 that random 96-bit nonces allow;
//! - a request's id is opened once: what it holds is remembered for the later looks (see
//!   `recent`), and what depends on the time (expiry) is checked on every one;
//! - a secret (a key, a whole id) never appears in a log line or an error.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use dashmap::DashMap;
use futures::{Stream, StreamExt as _};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, InitializeRequestParams, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState, SessionStore,
    SessionStoreError,
};
use serde::{Deserialize, Serialize};

use crate::session_stream::{EventStream, SessionStreams};

mod recent;

use recent::Recent;

/// The environment variable that holds the session keys: comma-separated base64 32-byte keys,
/// the first seals, all open.
pub const SESSION_KEYS_ENV: &str = "MCP_HARNESS_SESSION_KEYS";

/// How long a sealed id stays valid after it was last (re-)sealed, by default.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The format byte in front of every sealed id (bumped when [`Payload`] changes incompatibly).
const FORMAT: u8 = 1;
/// Authenticated with every id: a token sealed for another purpose under the same key does
/// not open as a session id.
const AAD: &[u8] = b"mcp-harness session id v1";

/// Why a session key list was refused. Never holds a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The list had no key.
    #[error(
        "{SESSION_KEYS_ENV} is set but holds no key; give comma-separated base64 32-byte keys (e.g. `openssl rand -base64 32`) or unset it"
    )]
    Empty,
    /// One entry is not base64 of 32 bytes.
    #[error(
        "key {position} of {SESSION_KEYS_ENV} is not base64 of 32 bytes; make one with `openssl rand -base64 32`"
    )]
    Invalid {
        /// Which entry (1-based).
        position: usize,
    },
}

/// Why a sealed id was refused (each one answers 404).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a sealed id at all (wrong encoding, format or length).
    #[error("the session id is malformed")]
    Malformed,
    /// It does not open under any configured key: forged, tampered, or sealed by a gateway
    /// whose key is not configured here.
    #[error(
        "the session id does not open under this gateway's session keys (tampered, or issued under another key)"
    )]
    Unauthentic,
    /// It opened but its lifetime is over.
    #[error("the session id has expired")]
    Expired,
    /// Its session was ended (DELETE) on this replica.
    #[error("the session was terminated")]
    Ended,
}

/// The keys that seal and open session ids: the first seals, every one opens.
pub struct SessionKeys {
    keys: Vec<LessSafeKey>,
    random: SystemRandom,
    /// Made at start rather than configured: ids open on this process only.
    generated: bool,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeys")
            .field("keys", &self.keys.len())
            .field("generated", &self.generated)
            .finish()
    }
}

impl SessionKeys {
    /// Parses comma-separated base64 (standard or URL-safe, padded or not) 32-byte keys.
    pub fn parse(list: &str) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for (index, entry) in list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            let bytes = decode_key(entry).ok_or(KeyError::Invalid {
                position: index + 1,
            })?;
            let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| KeyError::Invalid {
                position: index + 1,
            })?;
            keys.push(LessSafeKey::new(key));
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self {
            keys,
            random: SystemRandom::new(),
            generated: false,
        })
    }

    /// The keys in [`SESSION_KEYS_ENV`], or `None` when it is unset.
    pub fn from_env() -> Result<Option<Self>, KeyError> {
        match std::env::var(SESSION_KEYS_ENV) {
            Ok(list) => Self::parse(&list).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// One random key, for a single replica with no configured key.
    pub fn generate() -> Self {
        let random = SystemRandom::new();
        let mut bytes = [0u8; 32];
        // SystemRandom fails only without an OS random source, where nothing here can work.
        random
            .fill(&mut bytes)
            .expect("the operating system's random source is unavailable");
        let key = UnboundKey::new(&AES_256_GCM, &bytes).expect("32 bytes make an AES-256 key");
        Self {
            keys: vec![LessSafeKey::new(key)],
            random,
            generated: true,
        }
    }

    /// Whether the key was made at start (ids open on this process only).
    pub fn is_generated(&self) -> bool {
        self.generated
    }

    /// Opens `token` with any key and seals it again under the first key with a new expiry,
    /// nothing else changed: for tooling and tests that need an id with a given lifetime.
    pub fn restamp(&self, token: &str, expires_at: SystemTime) -> Result<String, Refusal> {
        let mut payload = self.open_any(token)?;
        payload.expires = unix(expires_at);
        Ok(self.seal(&payload))
    }

    /// A new session id for a client that initialised with `init`, valid for `ttl`: what the
    /// HTTP gateway hands out after `initialize` (for tooling and benchmarks).
    pub fn issue(&self, init: InitializeRequestParams, ttl: Duration) -> String {
        self.seal(&Payload {
            session: self.fresh_session(),
            expires: unix(SystemTime::now()) + ttl.as_secs(),
            init: Some(init),
            profile: None,
            listed: None,
        })
    }

    /// Whether `token` opens under one of the keys and has not expired — the check every
    /// request with a session id goes through.
    pub fn check(&self, token: &str) -> Result<(), Refusal> {
        self.open(token, SystemTime::now()).map(|_| ())
    }

    /// Seals `payload` under the first key.
    pub(crate) fn seal(&self, payload: &Payload) -> String {
        let data = serde_json::to_vec(payload).expect("a payload always serialises");
        self.seal_bytes(AAD, data)
    }

    /// Seals `data` under the first key, authenticated with `aad` (what the token is for: one
    /// sealed for another purpose under the same key does not open).
    pub(crate) fn seal_bytes(&self, aad: &[u8], mut data: Vec<u8>) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the operating system's random source is unavailable");
        self.keys[0]
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            )
            .expect("AES-GCM seals any payload shorter than 64 GiB");
        let mut token = Vec::with_capacity(1 + NONCE_LEN + data.len());
        token.push(FORMAT);
        token.extend_from_slice(&nonce);
        token.extend_from_slice(&data);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// Opens `token` with any key, checking its expiry against `now`.
    pub(crate) fn open(&self, token: &str, now: SystemTime) -> Result<Payload, Refusal> {
        let payload = self.open_any(token)?;
        if payload.expires <= unix(now) {
            return Err(Refusal::Expired);
        }
        Ok(payload)
    }

    /// Opens `token` with any key, whatever its expiry.
    fn open_any(&self, token: &str) -> Result<Payload, Refusal> {
        let plain = self.open_bytes(AAD, token)?;
        // Authentic, so written by a gateway holding the key: a payload it cannot read is from
        // an incompatible build.
        serde_json::from_slice(&plain).map_err(|_| Refusal::Malformed)
    }

    /// Opens a token [`Self::seal_bytes`] made for `aad`, with any key.
    pub(crate) fn open_bytes(&self, aad: &[u8], token: &str) -> Result<Vec<u8>, Refusal> {
        if token.len() > MAX_TOKEN {
            return Err(Refusal::Malformed);
        }
        let raw = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| Refusal::Malformed)?;
        if raw.len() < 1 + NONCE_LEN + AES_256_GCM.tag_len() || raw[0] != FORMAT {
            return Err(Refusal::Malformed);
        }
        let nonce: [u8; NONCE_LEN] = raw[1..1 + NONCE_LEN]
            .try_into()
            .map_err(|_| Refusal::Malformed)?;
        for key in &self.keys {
            let mut data = raw[1 + NONCE_LEN..].to_vec();
            if let Ok(plain) = key.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut data,
            ) {
                let len = plain.len();
                data.truncate(len);
                return Ok(data);
            }
        }
        Err(Refusal::Unauthentic)
    }

    /// A fresh random session identity (128 bits, hex).
    fn fresh_session(&self) -> String {
        let mut bytes = [0u8; 16];
        self.random
            .fill(&mut bytes)
            .expect("the operating system's random source is unavailable");
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Ids longer than this are refused unopened (proxies commonly cap a header at 8 KiB).
const MAX_TOKEN: usize = 8 * 1024;

fn decode_key(entry: &str) -> Option<[u8; 32]> {
    let trimmed = entry.trim_end_matches('=');
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .or_else(|_| URL_SAFE_NO_PAD.decode(trimmed))
        .or_else(|_| STANDARD.decode(entry))
        .ok()?;
    bytes.try_into().ok()
}

fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The mark of a session's last `tools/list`: which listing (a sequence number that grows with
/// every listing on any replica) and what it showed (the listed tools' content digest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ListedMark {
    #[serde(rename = "n")]
    pub(crate) seq: u32,
    #[serde(rename = "d")]
    pub(crate) tools: u64,
}

/// What a sealed id carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Payload {
    /// The session's identity, the same in every id re-sealed for it.
    #[serde(rename = "s")]
    pub(crate) session: String,
    /// Unix seconds after which the id is refused.
    #[serde(rename = "e")]
    pub(crate) expires: u64,
    /// The client's `initialize` parameters (absent only in the id made before `initialize`
    /// was answered, which never reaches a client).
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub(crate) init: Option<InitializeRequestParams>,
    /// The client's profile, when an authentication layer named one.
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub(crate) profile: Option<String>,
    /// The session's last `tools/list`.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub(crate) listed: Option<ListedMark>,
}

impl Payload {
    /// Whether `other` holds the same as this, its expiry aside.
    fn holds_as(&self, other: &Payload) -> bool {
        self.session == other.session
            && self.listed == other.listed
            && self.profile == other.profile
            && self.init == other.init
    }
}

/// The opened payload of the request's `Mcp-Session-Id` and the sealer of the server that
/// opened it, put in the request's extensions for the session handler.
#[derive(Clone)]
pub(crate) struct Opened {
    pub(crate) payload: Arc<Payload>,
    pub(crate) sealer: Arc<Sealer>,
}

/// The profile an authentication layer assigned to a request (put in the request's extensions
/// before the sealing layer runs); sealed into the session's id at `initialize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionProfile(pub String);

/// What this replica learnt about a session since its id was sealed: the `initialize`
/// parameters (when it served `initialize`) and its latest listing here.
#[derive(Default)]
pub(crate) struct Learnt {
    init: Option<InitializeRequestParams>,
    profile: Option<String>,
    listed: Option<ListedMark>,
    /// The id this replica sealed for the session last, and what it holds.
    issued: Option<(Payload, HeaderValue)>,
    /// The payload of the request `issued` was last sent back for, while nothing was learnt
    /// since: a client that keeps its id sends the same one each time, recalled as the same
    /// `Arc` (see [`Recent`]), and gets `issued` again without a merge and a comparison.
    answered: Option<Arc<Payload>>,
}

impl Learnt {
    /// Records the session's latest listing here (an older one is ignored).
    fn learn_listing(&mut self, mark: ListedMark) {
        if self.listed.is_none_or(|known| known.seq < mark.seq) {
            self.listed = Some(mark);
            self.answered = None;
        }
    }

    /// Records the profile that opened the session.
    fn learn_profile(&mut self, profile: String) {
        self.profile = Some(profile);
        self.answered = None;
    }

    /// Records the session's `initialize` parameters, [`compact`]ed.
    fn learn_init(&mut self, init: InitializeRequestParams) {
        self.init = Some(compact(init));
        self.answered = None;
    }

    /// `payload` with what was learnt since it was sealed, or `None` when nothing was.
    fn merged(&self, payload: &Payload) -> Option<Payload> {
        let init = payload.init.is_none() && self.init.is_some();
        let profile = payload.profile.is_none() && self.profile.is_some();
        let listed = self
            .listed
            .filter(|mark| payload.listed.is_none_or(|known| known.seq < mark.seq));
        if !init && !profile && listed.is_none() {
            return None;
        }
        let mut merged = payload.clone();
        if init {
            merged.init.clone_from(&self.init);
        }
        if profile {
            merged.profile.clone_from(&self.profile);
        }
        if listed.is_some() {
            merged.listed = listed;
        }
        Some(merged)
    }
}

/// The most bytes of a client's `initialize` parameters a session id carries as sent.
const MAX_SEALED_INIT: usize = 2 * 1024;

/// `init` as a session id carries it: as sent when it is small (every real client's is); else
/// with `clientInfo`'s strings cut to 128 characters and its icons, website and description,
/// the capabilities' `experimental` and the request's `_meta`, left out — then, if still too large, the capabilities'
/// `extensions` too. A client naming itself with megabytes would otherwise get an id larger
/// than any id the gateway opens ([`MAX_TOKEN`]), or a megabyte header per answer.
fn compact(init: InitializeRequestParams) -> InitializeRequestParams {
    let Ok(mut value) = serde_json::to_value(&init) else {
        return init;
    };
    let size = |v: &serde_json::Value| v.to_string().len();
    if size(&value) <= MAX_SEALED_INIT {
        return init;
    }
    if let Some(info) = value.get_mut("clientInfo").and_then(|v| v.as_object_mut()) {
        for key in ["icons", "websiteUrl", "description"] {
            info.remove(key);
        }
        for text in info.values_mut() {
            if let Some(s) = text.as_str()
                && s.chars().count() > 128
            {
                *text = serde_json::Value::String(s.chars().take(128).collect());
            }
        }
    }
    if let Some(capabilities) = value
        .get_mut("capabilities")
        .and_then(|v| v.as_object_mut())
    {
        capabilities.remove("experimental");
    }
    if let Some(params) = value.as_object_mut() {
        params.remove("_meta");
        // No protocol version is longer: a made-up one is kept as far as it can matter.
        if let Some(version) = params.get_mut("protocolVersion")
            && let Some(text) = version.as_str()
            && text.len() > 64
        {
            *version = serde_json::Value::String(text.chars().take(64).collect());
        }
    }
    if size(&value) > MAX_SEALED_INIT
        && let Some(capabilities) = value
            .get_mut("capabilities")
            .and_then(|v| v.as_object_mut())
    {
        capabilities.remove("extensions");
    }
    tracing::debug!(
        bytes = size(&value),
        "a client's initialize parameters were cut to fit its session id"
    );
    serde_json::from_value(value).unwrap_or(init)
}

/// The most ended sessions remembered (about 100 bytes each).
const MAX_ENDED: usize = 100_000;

/// The sealing state of one HTTP server: its keys, the id lifetime, and what it learnt about
/// the sessions it holds (removed when a session closes here).
pub(crate) struct Sealer {
    pub(crate) keys: Arc<SessionKeys>,
    ttl: Duration,
    /// Keyed by the session a sealed id names (foldhash, as `Recent`: looked up per request).
    learnt: DashMap<String, Learnt, foldhash::quality::RandomState>,
    /// The ids opened lately, so a request's id is opened once.
    recent: Recent,
    /// Sessions ended here (DELETE) → when their last id expires: an id of an ended session
    /// is refused (404) instead of restoring the session. Entries leave when they expire.
    ended: Expiring,
    /// Sessions freed here (idle) while an id this replica re-issued them outlived the ids
    /// their clients hold → when that id expires: a client that keeps its first id (the
    /// Python SDK's) is still renewed when its freed session is restored from it.
    renewed: Expiring,
}

/// Session → a time (Unix seconds), for at most [`MAX_ENDED`] sessions: entries leave when
/// their time has passed, and while the table is full the oldest made leaves for a new one,
/// in constant time (finding it by a scan of a full table made each DELETE cost milliseconds).
#[derive(Default)]
struct Expiring {
    times: DashMap<String, u64, foldhash::quality::RandomState>,
    /// The entries in the order they were made.
    order: std::sync::Mutex<std::collections::VecDeque<(String, u64)>>,
}

impl Expiring {
    /// The time of `session` when it has not passed by `now`.
    fn live(&self, session: &str, now: u64) -> Option<u64> {
        self.times
            .get(session)
            .map(|t| *t)
            .filter(|until| *until > now)
    }

    fn contains(&self, session: &str) -> bool {
        self.times.contains_key(session)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.times.len()
    }

    /// Records `session` until `until` (a later record of it replaces an earlier one).
    fn insert(&self, session: &str, until: u64, now: u64) {
        self.trim(now);
        self.times.insert(session.to_string(), until);
        crate::sync::lock(&self.order).push_back((session.to_string(), until));
    }

    /// Forgets the oldest entries made whose time passed by `now`, and while the table is
    /// full the oldest made (an entry's time is checked where it is read, so one past its
    /// time behind a later one does no harm until it leaves).
    fn trim(&self, now: u64) {
        let mut order = crate::sync::lock(&self.order);
        while let Some((session, until)) = order.front() {
            if *until > now && self.times.len() < MAX_ENDED {
                break;
            }
            // An entry made again later holds its own time: that one stays.
            self.times.remove_if(session, |_, at| at == until);
            order.pop_front();
        }
    }
}

impl Sealer {
    pub(crate) fn new(keys: Arc<SessionKeys>, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            keys,
            ttl: ttl.max(Duration::from_secs(1)),
            learnt: DashMap::default(),
            recent: Recent::default(),
            ended: Expiring::default(),
            renewed: Expiring::default(),
        })
    }

    /// Opens `token` (or recalls it: see [`Recent`]), checking its expiry against `now`. An
    /// expired id of a session this replica renewed since (the id it sealed last has not
    /// expired) still opens: a client that keeps the id `initialize` gave it (the Python SDK)
    /// is renewed as its session is used here, as one that takes each new id is.
    fn open(&self, token: &str, now: SystemTime) -> Result<Arc<Payload>, Refusal> {
        let payload = self.opened(token)?;
        if payload.expires <= unix(now) {
            let renewed = self.learnt.get(&payload.session).is_some_and(|learnt| {
                (learnt.issued.as_ref()).is_some_and(|(issued, _)| issued.expires > unix(now))
            }) || self.renewed.live(&payload.session, unix(now)).is_some();
            if !renewed {
                return Err(Refusal::Expired);
            }
        }
        Ok(payload)
    }

    /// What `token` holds, whatever its expiry: recalled when it opened lately, else opened
    /// with any key (and remembered).
    fn opened(&self, token: &str) -> Result<Arc<Payload>, Refusal> {
        if let Some(payload) = self.recent.get(token) {
            return Ok(payload);
        }
        let payload = Arc::new(self.keys.open_any(token)?);
        self.recent.insert(token, payload.clone());
        Ok(payload)
    }

    /// Records the listing a session just got here.
    pub(crate) fn listed(&self, session: &str, mark: ListedMark) {
        self.learnt
            .entry(session.to_string())
            .or_default()
            .learn_listing(mark);
    }

    /// Forgets what was learnt about `session` (freed here), keeping only how long an id
    /// re-issued to it opens, when that outlives the ids its client may hold.
    fn forget(&self, session: &str) {
        if let Some((session, learnt)) = self.learnt.remove(session) {
            self.keep_renewal(&session, &learnt, unix(SystemTime::now()));
        }
    }

    /// Remembers until when `learnt`'s last re-issued id of `session` opens, if after `now`.
    fn keep_renewal(&self, session: &str, learnt: &Learnt, now: u64) {
        if let Some((issued, _)) = &learnt.issued
            && issued.expires > now
        {
            self.renewed.insert(session, issued.expires, now);
        }
    }

    /// Records that `session` was ended here; its ids (any of them valid for one lifetime from
    /// now at the most) are refused from now on.
    fn end(&self, session: &str) {
        self.learnt.remove(session);
        let now = unix(SystemTime::now());
        // Ended for good: its renewal goes (its ids are refused anyway).
        self.renewed.times.remove(session);
        // A client that opens and ends sessions in a loop cannot grow this for a whole
        // lifetime: the expired go, then the oldest (its ids could start it again; they are
        // its client's own).
        self.ended.insert(session, now + self.ttl.as_secs(), now);
    }

    /// The id to send back for `payload`, or `None` when the client's id still says it all
    /// and has more than half its lifetime left. The id sealed here last is sent again when it
    /// holds the same and has more than half its lifetime left: a client that keeps the id it
    /// got at `initialize` (the Python SDK's does) would otherwise cost a seal per request.
    fn reissue(&self, payload: &Arc<Payload>, now: SystemTime) -> Option<HeaderValue> {
        let now = unix(now);
        let lasting = |expires: u64| expires.saturating_sub(now) >= self.ttl.as_secs() / 2;
        let merged = match self.learnt.get(&payload.session) {
            Some(learnt) => {
                // The id this very payload got last, nothing learnt since: the same answer.
                if let (Some(answered), Some((issued, id))) = (&learnt.answered, &learnt.issued)
                    && Arc::ptr_eq(answered, payload)
                    && lasting(issued.expires)
                {
                    return Some(id.clone());
                }
                learnt.merged(payload)
            }
            None => None,
        };
        if merged.is_none() && lasting(payload.expires) {
            return None;
        }
        let mut content = merged.unwrap_or_else(|| Payload::clone(payload));
        let mut learnt = self.learnt.entry(payload.session.clone()).or_default();
        if let Some((issued, id)) = &learnt.issued
            && lasting(issued.expires)
            && issued.holds_as(&content)
        {
            let id = id.clone();
            learnt.answered = Some(payload.clone());
            return Some(id);
        }
        content.expires = now + self.ttl.as_secs();
        // Unpadded URL-safe base64: always a valid header value.
        let id = HeaderValue::from_str(&self.keys.seal(&content)).ok()?;
        learnt.issued = Some((content, id.clone()));
        learnt.answered = Some(payload.clone());
        Some(id)
    }
}

/// The axum layer in front of `/mcp`: opens the request's `Mcp-Session-Id` (404 when it does
/// not open), hands the payload to the handler, and re-issues the id in a successful POST's
/// response when what it carries changed or it is half-way to expiry.
pub(crate) async fn layer(
    State(sealer): State<Arc<Sealer>>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.uri().path() != "/mcp" {
        return next.run(request).await;
    }
    let now = SystemTime::now();
    let opened = match open_request(&sealer, request.headers(), now) {
        Ok(opened) => opened,
        Err(refusal) => return not_found(refusal),
    };
    if let Some(payload) = &opened {
        request.extensions_mut().insert(Opened {
            payload: payload.clone(),
            sealer: sealer.clone(),
        });
    }
    if request.method() == Method::DELETE
        && let Some(payload) = &opened
    {
        let session = payload.session.clone();
        let mut response = next.run(request).await;
        if response.status().is_success() {
            // Only an explicit DELETE ends a session for good; idle ones may come back.
            sealer.end(&session);
            // rmcp says 202; the SDKs' clients take 200 or 204 as "ended" (the Python SDK
            // logs a failed termination for anything else) and 200 is what theirs answer.
            *response.status_mut() = StatusCode::OK;
        }
        return response;
    }
    let post = request.method() == Method::POST;
    let profile = request.extensions().get::<SessionProfile>().cloned();
    let (request, lists) = if post && opened.is_some() {
        lists_tools(request).await
    } else {
        (request, false)
    };
    let mut response = next.run(request).await;
    if !post || !response.status().is_success() {
        return response;
    }
    if lists {
        // The listing's mark is known once the handler answered: the answer is read whole
        // (one JSON-RPC response; its stream ends with it) before the head goes out.
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_LISTING).await else {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the tools/list answer could not be read\n",
            )
                .into_response();
        };
        response = Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    let payload = match opened {
        Some(payload) => payload,
        // A fresh session: rmcp set the id `create_session` sealed.
        None => {
            let Some(token) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            else {
                return response;
            };
            let Ok(payload) = sealer.keys.open(token, now) else {
                return response;
            };
            if let Some(SessionProfile(profile)) = profile {
                // Learnt, so the id sent back (made anew: rmcp's lacks it) carries it: the
                // session is the profile's on every replica and after a restart.
                sealer
                    .learnt
                    .entry(payload.session.clone())
                    .or_default()
                    .learn_profile(profile);
            }
            Arc::new(payload)
        }
    };
    reissue(&sealer, &payload, now, &mut response);
    response
}

/// The payload of the `Mcp-Session-Id` in `headers` (`None`: there is none), or why it is
/// refused (it does not open, it expired, or its session was ended: answer [`not_found`]).
pub(crate) fn open_request(
    sealer: &Sealer,
    headers: &axum::http::HeaderMap,
    now: SystemTime,
) -> Result<Option<Arc<Payload>>, Refusal> {
    let Some(value) = headers.get(&crate::SESSION_ID) else {
        return Ok(None);
    };
    let opened = value
        .to_str()
        .map_err(|_| Refusal::Malformed)
        .and_then(|token| sealer.open(token, now))
        .and_then(|payload| {
            if sealer.ended.contains(&payload.session) {
                Err(Refusal::Ended)
            } else {
                Ok(payload)
            }
        });
    match opened {
        Ok(payload) => Ok(Some(payload)),
        Err(refusal) => {
            tracing::debug!(%refusal, "session id refused");
            Err(refusal)
        }
    }
}

/// Puts the id to send back for `payload` in a successful POST's `response` when the client's
/// id no longer says it all (see [`Sealer::reissue`]).
pub(crate) fn reissue(
    sealer: &Sealer,
    payload: &Arc<Payload>,
    now: SystemTime,
    response: &mut Response,
) {
    if let Some(id) = sealer.reissue(payload, now) {
        response.headers_mut().insert(crate::SESSION_ID, id);
    }
}

/// Whether a request body may be a `tools/list` (its answer's listing is recorded in the
/// session id): cheap, and never `false` for one.
pub(crate) fn may_list_tools(body: &[u8]) -> bool {
    // Built once: `memmem::find` builds its searcher on every call.
    static LISTS: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"tools/list"));
    LISTS.find(body).is_some()
}

/// At most this much of a `tools/list` answer is read before its head is sent.
const MAX_LISTING: usize = 64 * 1024 * 1024;
/// A request body at most this long is looked at for `tools/list` (a listing request is tiny).
const MAX_PEEK: usize = 64 * 1024;

/// Whether the request is a `tools/list` (its body is read and put back; bodies longer than
/// [`MAX_PEEK`] or of unknown length are passed on unread).
async fn lists_tools(request: Request) -> (Request, bool) {
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|len| len <= MAX_PEEK);
    if !small {
        return (request, false);
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PEEK).await else {
        return (Request::from_parts(parts, axum::body::Body::empty()), false);
    };
    let lists = may_list_tools(&bytes)
        && serde_json::from_slice::<serde_json::Value>(&bytes).is_ok_and(|message| {
            message.get("method").and_then(|m| m.as_str()) == Some("tools/list")
        });
    (
        Request::from_parts(parts, axum::body::Body::from(bytes)),
        lists,
    )
}

/// 404 with a JSON-RPC error saying why and what to do (re-initialise).
pub(crate) fn not_found(refusal: Refusal) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32001,
            "message": format!("session not found: {refusal}; start a new session (initialize without Mcp-Session-Id)"),
        }
    });
    let mut response = (StatusCode::NOT_FOUND, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Why the sealed session manager could not do what rmcp asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealedError {
    /// The id does not open (rmcp never passes one the layer refused; this is the guard).
    #[error("{0}")]
    Refused(Refusal),
    /// The in-memory session failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// A request channel id rmcp never hands out (it counts up from 0): closing it changes nothing.
const NO_CHANNEL: u64 = u64::MAX;

/// rmcp's session manager for sealed ids: the sessions this replica runs are rmcp's in-memory
/// ones, keyed by the session identity inside the id (so every re-sealed id of a session
/// reaches the same worker), and a session it does not hold is restored from its id.
pub(crate) struct SealedSessionManager {
    inner: LocalSessionManager,
    sealer: Arc<Sealer>,
    /// Each POSTed `tools/call`'s stream gets a side channel (`crate::sidecar`).
    sidecars: Arc<crate::sidecar::Sidecars>,
    /// Each session's newest GET stream, which replaces the one before it.
    streams: Arc<SessionStreams>,
    /// The direct calls' open ends (`crate::direct`): told when a session closes.
    direct: Arc<crate::direct::DirectCalls>,
    /// The requests in flight on rmcp's streams, by (session, request id).
    in_flight: Arc<DashMap<(SessionId, rmcp::model::RequestId), ()>>,
}

/// A request's place in [`SealedSessionManager::in_flight`], given up when its stream ends.
struct InFlight {
    requests: Arc<DashMap<(SessionId, rmcp::model::RequestId), ()>>,
    key: (SessionId, rmcp::model::RequestId),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.requests.remove(&self.key);
    }
}

impl SealedSessionManager {
    pub(crate) fn new(
        inner: LocalSessionManager,
        sealer: Arc<Sealer>,
        sidecars: Arc<crate::sidecar::Sidecars>,
        direct: Arc<crate::direct::DirectCalls>,
    ) -> Self {
        Self {
            inner,
            sealer,
            sidecars,
            streams: Arc::default(),
            direct,
            in_flight: Arc::default(),
        }
    }

    /// Tells rmcp's worker of session `id` that the session is in use (a request it closes
    /// nothing with): its idle limit counts from now. A direct call (`crate::in_session`)
    /// does not pass the worker, which would otherwise end a session that only calls tools.
    pub(crate) async fn touch(&self, id: &SessionId) {
        let Ok(local) = self.local(id) else { return };
        let handle = self.inner.sessions.read().await.get(&local).cloned();
        if let Some(handle) = handle {
            let _ = handle.close_request_wise_channel(NO_CHANNEL).await;
        }
    }

    /// How many sessions this replica holds now.
    pub(crate) async fn len(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// The session identity inside the sealed id `id` — the same for every re-sealed id of one
    /// session — when the id opens under one of the keys.
    pub(crate) fn identity(&self, id: &str) -> Option<String> {
        self.sealer
            .opened(id)
            .ok()
            .map(|payload| payload.session.clone())
    }

    /// [`Self::identity`], and the client profile sealed into the id (the one that opened the
    /// session, when one did).
    pub(crate) fn identity_and_profile(&self, id: &str) -> Option<(String, Option<String>)> {
        self.sealer
            .opened(id)
            .ok()
            .map(|payload| (payload.session.clone(), payload.profile.clone()))
    }

    /// Forgets what was learnt about sessions this replica no longer runs. rmcp (3.11) ends
    /// every session through [`SessionManager::close_session`] — a DELETE, and a worker that
    /// ended (idle past `--idle-secs` included) — which forgets it here at once; this is the
    /// net for any that ends another way. Maps keep their largest capacity, so after a burst
    /// of sessions they are shrunk too.
    pub(crate) async fn sweep(&self) {
        let mut held = self.inner.sessions.write().await;
        let now = unix(SystemTime::now());
        self.sealer.learnt.retain(|session, learnt| {
            let kept = held.contains_key(&SessionId::from(session.clone()));
            if !kept {
                self.sealer.keep_renewal(session, learnt, now);
            }
            kept
        });
        self.sealer.learnt.shrink_to_fit();
        self.sealer
            .recent
            .retain(|session| held.contains_key(session));
        self.streams
            .retain(|session| held.contains_key(&SessionId::from(session.to_string())));
        self.sealer.ended.trim(now);
        self.sealer.renewed.trim(now);
        held.shrink_to_fit();
    }

    /// Whether this replica runs the session of identity `identity` now.
    pub(crate) async fn holds(&self, identity: &str) -> bool {
        self.inner
            .sessions
            .read()
            .await
            .contains_key(&SessionId::from(identity.to_string()))
    }

    /// Keeps session `local` from being freed as idle while what this returns lives (a GET
    /// stream holds it): rmcp frees a session after `--idle-secs` without a request or a
    /// message, though a client listening on its stream is no idle client — its subscriptions
    /// would end unsaid. Until dropped, the session's worker is touched (as by [`Self::touch`])
    /// every half idle period.
    async fn keep_alive(&self, local: &SessionId) -> Option<tokio_util::sync::DropGuard> {
        let every = (self.inner.session_config.keep_alive? / 2).max(Duration::from_millis(100));
        let handle = self.inner.sessions.read().await.get(local).cloned()?;
        let open = tokio_util::sync::CancellationToken::new();
        let closed = open.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = closed.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                if handle.close_request_wise_channel(NO_CHANNEL).await.is_err() {
                    return; // the session ended
                }
            }
        });
        Some(open.drop_guard())
    }

    /// The in-memory key of the session `id` names (its expiry is the layer's business: rmcp
    /// closes a worker with the id it was made with, however old).
    fn local(&self, id: &SessionId) -> Result<SessionId, SealedError> {
        self.sealer
            .opened(id)
            .map(|payload| SessionId::from(payload.session.as_str()))
            .map_err(SealedError::Refused)
    }
}

impl SessionManager for SealedSessionManager {
    type Error = SealedError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let session = self.sealer.keys.fresh_session();
        let transport = match self
            .inner
            .restore_session(SessionId::from(session.clone()))
            .await?
        {
            RestoreOutcome::Restored(transport) => transport,
            // 128 random bits do not collide; if they did, refuse rather than share a worker.
            _ => {
                return Err(SealedError::Refused(Refusal::Malformed));
            }
        };
        let payload = Payload {
            session,
            expires: unix(SystemTime::now()) + self.sealer.ttl.as_secs(),
            init: None,
            profile: None,
            listed: None,
        };
        Ok((SessionId::from(self.sealer.keys.seal(&payload)), transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let local = self.local(id)?;
        Ok(self.inner.initialize_session(&local, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        match self.local(id) {
            Ok(local) => Ok(self.inner.has_session(&local).await?),
            Err(_) => Ok(false),
        }
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let local = self.local(id)?;
        self.sealer.forget(&local);
        self.streams.forget(&local);
        self.direct.close(&local);
        Ok(self.inner.close_session(&local).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let local = self.local(id)?;
        // rmcp routes an answer by its request id: a second request with an id in flight would
        // take the first one's answer and leave the other waiting for ever. Refused at once.
        let in_flight = match &message {
            ClientJsonRpcMessage::Request(request) => {
                let key = (local.clone(), request.id.clone());
                match self.in_flight.entry(key.clone()) {
                    dashmap::Entry::Occupied(_) => {
                        return Ok(boxed(futures::stream::once(std::future::ready(
                            repeated_id(&request.id),
                        ))));
                    }
                    dashmap::Entry::Vacant(place) => {
                        place.insert(());
                        Some(InFlight {
                            requests: self.in_flight.clone(),
                            key,
                        })
                    }
                }
            }
            _ => None,
        };
        // Only a call forwards its upstream's log lines.
        let request = match &message {
            ClientJsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
            {
                Some(request.id.clone())
            }
            _ => None,
        };
        // Open before the request can reach its handler, which looks the channel up.
        let opened = self.sidecars.open(id, request);
        let stream = self.inner.create_stream(&local, message).await?;
        let stream = match opened {
            Some(opened) => boxed(opened.around(stream)),
            None => boxed(stream),
        };
        Ok(boxed(stream.map(move |event| {
            let _ = &in_flight;
            event
        })))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        let local = self.local(id)?;
        Ok(self.inner.accept_message(&local, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let local = self.local(id)?;
        // A client opens another GET stream when it lost the one before: that one ends, and
        // of what rmcp replays, the new one passes on only what no stream carried.
        let carried = self.streams.replace(&local);
        let stream = self.inner.create_standalone_stream(&local).await?;
        let keep = self.keep_alive(&local).await;
        Ok(
            boxed(self.streams.hold(&local, boxed(stream), carried)).map(move |event| {
                let _ = &keep;
                event
            }),
        )
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let local = self.local(id)?;
        // rmcp replays from the event the client named, which the client already has: a
        // progress line twice, or a request or result a second time. Only the events after it
        // are sent.
        if last_event_id.contains('/') {
            // A call's stream (`index/request`).
            let stream = self.inner.resume(&local, last_event_id.clone()).await?;
            return Ok(boxed(stream.skip_while(move |event| {
                std::future::ready(event.event_id.as_deref() == Some(last_event_id.as_str()))
            })));
        }
        // The session stream: resuming it replaces the one the client lost, which the gateway
        // may still think open. Event ids are this replica's own: one another replica gave (the
        // client's stream was there before it failed over) may name a different event here, so
        // the named event is skipped only when this replica's streams carried that far.
        let carried = self.streams.replace(&local);
        let named = last_event_id.parse::<usize>().ok();
        let skip = named.filter(|_| named <= carried);
        let stream = self.inner.resume(&local, last_event_id).await?;
        let keep = self.keep_alive(&local).await;
        Ok(boxed(
            boxed(self.streams.hold(&local, boxed(stream), skip)).map(move |event| {
                let _ = &keep;
                event
            }),
        ))
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let local = self.local(&id)?;
        let outcome = self.inner.restore_session(local.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            // A new worker numbers its events from 0: what an earlier one carried means nothing.
            // (The earlier worker's end forgot it already when it passed through
            // `close_session`; this holds when it did not.)
            self.streams.forget(&local);
        }
        Ok(outcome)
    }
}

/// The answer to a request whose id `id` is already in flight in its session.
pub(crate) fn repeated_id_answer(id: &rmcp::model::RequestId) -> rmcp::model::ServerJsonRpcMessage {
    let error = rmcp::ErrorData::invalid_request(
        format!(
            "request id {id} is already in flight in this session; give each request of a session its own id"
        ),
        None,
    );
    rmcp::model::ServerJsonRpcMessage::error(error, Some(id.clone()))
}

/// [`repeated_id_answer`] as its stream's event.
fn repeated_id(id: &rmcp::model::RequestId) -> ServerSseMessage {
    ServerSseMessage::from_message(repeated_id_answer(id))
}

/// A stream whose type no longer names the id it was opened with.
fn boxed(stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static) -> EventStream {
    Box::pin(stream)
}

/// rmcp's session store for sealed ids: the id *is* the stored state. Loading opens it;
/// storing (after `initialize` was answered) records the parameters so the layer seals them
/// into the id the client gets; deleting forgets what this replica learnt.
pub(crate) struct SealedStore {
    sealer: Arc<Sealer>,
}

impl SealedStore {
    pub(crate) fn new(sealer: Arc<Sealer>) -> Self {
        Self { sealer }
    }
}

#[async_trait::async_trait]
impl SessionStore for SealedStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        // Opened as a request's id is: an expired id whose renewal this replica remembers
        // (its session freed for idleness) restores too.
        Ok(self
            .sealer
            .open(session_id, SystemTime::now())
            .ok()
            .and_then(|payload| payload.init.clone())
            .map(SessionState::new))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let payload = self
            .sealer
            .keys
            .open_any(session_id)
            .map_err(|refusal| Box::new(refusal) as SessionStoreError)?;
        self.sealer
            .learnt
            .entry(payload.session)
            .or_default()
            .learn_init(state.initialize_params.clone());
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        if let Ok(payload) = self.sealer.keys.open_any(session_id) {
            self.sealer.forget(&payload.session);
        }
        Ok(())
    }
}

/// The opened id of the request a handler serves (HTTP sessions only).
pub(crate) fn opened(extensions: &rmcp::model::Extensions) -> Option<Opened> {
    extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Opened>())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ended-session table holds at most [`MAX_ENDED`]: past it the oldest leave first,
    /// one per new entry (each found in constant time), and a session ended again keeps its
    /// later entry.
    #[test]
    fn the_oldest_ended_sessions_leave_first_at_the_bound() {
        let sealer = Sealer::new(Arc::new(SessionKeys::generate()), Duration::from_secs(600));
        sealer.end("again");
        for n in 0..MAX_ENDED + 10 {
            sealer.end(&format!("s{n}"));
        }
        sealer.end("again");
        assert_eq!(sealer.ended.len(), MAX_ENDED);
        assert!(!sealer.ended.contains("s0") && !sealer.ended.contains("s10"));
        assert!(sealer.ended.contains("s11") && sealer.ended.contains("again"));
        assert!(crate::sync::lock(&sealer.ended.order).len() <= MAX_ENDED + 1);
    }

    /// A session freed here (idle) whose client keeps the id it got first opens again with
    /// that id past its expiry while the id this replica re-issued it would — at the gate and
    /// in the store rmcp restores the session from: the renewal outlives the freed session's
    /// record; a DELETE ends it.
    #[tokio::test]
    async fn a_freed_sessions_renewal_outlives_it() {
        let ttl = Duration::from_secs(600);
        let sealer = Sealer::new(Arc::new(SessionKeys::generate()), ttl);
        let now = SystemTime::now();
        let first = Payload {
            session: "s1".into(),
            expires: unix(now) + 10,
            init: Some(InitializeRequestParams::default()),
            profile: None,
            listed: None,
        };
        let token = sealer.keys.seal(&first);
        // Re-issued later with a full lifetime (what `reissue` records).
        let renewed = Payload {
            expires: unix(now) + 600,
            ..first.clone()
        };
        let header = HeaderValue::from_static("renewed");
        sealer.learnt.entry("s1".into()).or_default().issued = Some((renewed, header));
        let later = now + Duration::from_secs(60);
        assert!(sealer.open(&token, later).is_ok(), "renewed while held");
        sealer.forget("s1");
        assert!(
            sealer.open(&token, later).is_ok(),
            "renewed after it was freed"
        );
        assert!(
            sealer.open(&token, now + Duration::from_secs(601)).is_err(),
            "past the renewal"
        );
        // rmcp restores a freed session from the store: the same check (an id past its own
        // expiry: sealed as one that expired already).
        let store = SealedStore::new(sealer.clone());
        let expired = Payload {
            expires: unix(now) - 1,
            ..first.clone()
        };
        let old = sealer.keys.seal(&expired);
        let restored = store.load(&old).await.expect("load");
        assert!(restored.is_some(), "the store refused a renewed id");
        sealer.end("s1");
        assert!(store.load(&old).await.expect("load").is_none(), "ended");
    }

    /// A client naming itself with a megabyte gets a session id the gateway opens again; a
    /// real client's parameters are kept as sent.
    #[test]
    fn huge_initialize_parameters_are_compacted_to_fit_the_id() {
        let mut init = InitializeRequestParams::default();
        init.client_info.name = "n".repeat(1 << 20);
        init.client_info.version = "1.0".into();
        let compacted = compact(init);
        assert_eq!(compacted.client_info.name.chars().count(), 128);
        assert_eq!(compacted.client_info.version, "1.0");
        let keys = SessionKeys::generate();
        let id = keys.issue(compacted, Duration::from_secs(60));
        assert!(id.len() <= MAX_TOKEN, "{}", id.len());
        keys.check(&id).expect("opens again");
        let mut small = InitializeRequestParams::default();
        small.client_info.name = "claude-code".into();
        assert_eq!(
            serde_json::to_value(compact(small.clone())).ok(),
            serde_json::to_value(small).ok()
        );
    }

    fn keys(list: &str) -> SessionKeys {
        SessionKeys::parse(list).expect("keys")
    }

    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

    fn payload(expires: u64) -> Payload {
        Payload {
            session: "s1".into(),
            expires,
            init: None,
            profile: Some("team-a".into()),
            listed: Some(ListedMark { seq: 3, tools: 42 }),
        }
    }

    #[test]
    fn seals_and_opens_and_refuses_what_it_must() {
        let now = SystemTime::now();
        let far = unix(now) + 3600;
        let k1 = keys(K1);
        let token = k1.seal(&payload(far));
        assert_eq!(k1.open(&token, now), Ok(payload(far)));
        // Tampered: flip one bit of the ciphertext.
        let mut raw = URL_SAFE_NO_PAD.decode(&token).expect("b64");
        let last = raw.len() - 1;
        raw[last] ^= 1;
        let tampered = URL_SAFE_NO_PAD.encode(raw);
        assert_eq!(k1.open(&tampered, now), Err(Refusal::Unauthentic));
        // Foreign key.
        assert_eq!(keys(K2).open(&token, now), Err(Refusal::Unauthentic));
        // Expired.
        let old = k1.seal(&payload(unix(now) - 1));
        assert_eq!(k1.open(&old, now), Err(Refusal::Expired));
        assert_eq!(k1.open("not a token", now), Err(Refusal::Malformed));
        // Rotation: a new key first still opens ids of the old one, and seals with the new.
        let rotated = keys(&format!("{K2},{K1}"));
        assert_eq!(rotated.open(&token, now), Ok(payload(far)));
        let resealed = rotated.seal(&payload(far));
        assert_eq!(k1.open(&resealed, now), Err(Refusal::Unauthentic));
        assert_eq!(keys(K2).open(&resealed, now), Ok(payload(far)));
    }

    /// A client that keeps the id it got at `initialize` gets the id sealed for what this
    /// replica learnt since, the same one each time (no seal per request), until there is
    /// more to carry or it is half-way to expiry; one that adopts it gets none.
    #[test]
    fn a_kept_id_is_answered_with_the_id_already_sealed() {
        let ttl = Duration::from_secs(3600);
        let sealer = Sealer::new(Arc::new(keys(K1)), ttl);
        let now = SystemTime::now();
        let kept = Arc::new(Payload {
            listed: None,
            expires: unix(now) + 3600,
            ..payload(0)
        });
        assert_eq!(sealer.reissue(&kept, now), None, "nothing learnt yet");
        sealer.listed("s1", ListedMark { seq: 4, tools: 7 });
        let first = sealer.reissue(&kept, now).expect("the listing is new");
        assert_eq!(
            sealer.reissue(&kept, now),
            Some(first.clone()),
            "not sealed again"
        );
        let adopted = sealer
            .open(first.to_str().expect("ascii"), now)
            .expect("opens");
        assert_eq!(adopted.listed, Some(ListedMark { seq: 4, tools: 7 }));
        assert_eq!(
            sealer.reissue(&adopted, now),
            None,
            "the adopted id says it all"
        );
        sealer.listed("s1", ListedMark { seq: 5, tools: 8 });
        let second = sealer.reissue(&kept, now).expect("another listing");
        assert_ne!(second, first);
        // The same id again, an equal payload opened anew, and what was learnt since.
        assert_eq!(sealer.reissue(&kept, now), Some(second.clone()));
        let equal = Arc::new(Payload::clone(&kept));
        assert_eq!(sealer.reissue(&equal, now), Some(second.clone()));
        sealer.listed("s1", ListedMark { seq: 3, tools: 9 });
        assert_eq!(
            sealer.reissue(&kept, now),
            Some(second.clone()),
            "an older listing is not learnt"
        );
        sealer
            .learnt
            .get_mut("s1")
            .expect("learnt")
            .learn_init(InitializeRequestParams::default());
        let with_init = sealer.reissue(&kept, now).expect("the init is new");
        assert_ne!(with_init, second, "sealed again with what was learnt");
        let carried = sealer
            .open(with_init.to_str().expect("ascii"), now)
            .expect("opens");
        assert!(carried.init.is_some());
        assert_eq!(sealer.reissue(&kept, now), Some(with_init.clone()));
        // Past half its lifetime, the id sealed last is not sent again.
        let later = now + ttl / 2 + Duration::from_secs(1);
        let third = sealer.reissue(&kept, later).expect("half-way");
        assert_ne!(third, with_init);
        let renewed = sealer
            .open(third.to_str().expect("ascii"), later)
            .expect("opens");
        assert_eq!(renewed.expires, unix(later) + 3600);
        // The kept id, past its own expiry, opens while the session's last renewal holds.
        let kept_token = sealer.keys.seal(&kept);
        let past = now + ttl + Duration::from_secs(1);
        assert!(sealer.open(&kept_token, past).is_ok(), "renewed here");
        let long_past = later + ttl + Duration::from_secs(1);
        assert_eq!(sealer.open(&kept_token, long_past), Err(Refusal::Expired));
        let elsewhere = Sealer::new(Arc::new(keys(K1)), ttl);
        assert_eq!(
            elsewhere.open(&kept_token, past),
            Err(Refusal::Expired),
            "not renewed on another replica"
        );
    }

    /// An id is opened once and recalled after, and a recalled id is still refused once it
    /// has expired.
    #[test]
    fn a_recalled_id_still_expires() {
        let sealer = Sealer::new(Arc::new(keys(K1)), Duration::from_secs(60));
        let now = SystemTime::now();
        let token = sealer.keys.seal(&payload(unix(now) + 10));
        let opened = sealer.open(&token, now).expect("opens");
        assert!(Arc::ptr_eq(
            &opened,
            &sealer.open(&token, now).expect("recalled")
        ));
        let after = now + Duration::from_secs(11);
        assert_eq!(sealer.open(&token, after), Err(Refusal::Expired));
        assert_eq!(
            sealer.opened(&token).map(|p| p.session.clone()),
            Ok("s1".into())
        );
        assert_eq!(sealer.open("not a token", now), Err(Refusal::Malformed));
    }

    #[test]
    fn bad_key_lists_name_the_entry_not_the_value() {
        let error = SessionKeys::parse(&format!("{K1},c2VjcmV0")).expect_err("short key");
        assert!(matches!(error, KeyError::Invalid { position: 2 }));
        assert!(!error.to_string().contains("c2VjcmV0"));
        assert!(matches!(SessionKeys::parse(" , "), Err(KeyError::Empty)));
    }
}

//! The JWKS cache and the choice among OAuth profiles, against a JWKS endpoint on 127.0.0.1
//! whose answer each test sets: fetched at most once per interval whatever the answer, one
//! slow issuer holding up no other, a body read only up to the limit, a removed key dropped
//! once the keys are old, and each profile of an issuer checked with its own JWKS and scopes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const AUDIENCE: &str = "http://127.0.0.1:9/mcp";

/// What the test's JWKS endpoint answers.
#[derive(Clone)]
enum Answer {
    Keys(Vec<Value>),
    Status500,
    /// Reads the request and never answers.
    Hang,
    /// These keys, after this many milliseconds.
    Slow(Vec<Value>, u64),
    /// A chunked body of this many bytes, no `Content-Length`.
    Endless(usize),
}

/// A JWKS endpoint on 127.0.0.1: answers as `answer` says now, counts requests, and for an
/// endless body how many bytes it got written before the reader went away.
struct Endpoint {
    url: String,
    issuer: String,
    answer: Arc<Mutex<Answer>>,
    requests: Arc<AtomicUsize>,
    written: Arc<AtomicUsize>,
}

impl Endpoint {
    async fn start(answer: Answer) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let answer = Arc::new(Mutex::new(answer));
        let (requests, written) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (serving, counted, wrote) = (answer.clone(), requests.clone(), written.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let answer = serving.lock().expect("answer").clone();
                let (counted, wrote) = (counted.clone(), wrote.clone());
                tokio::spawn(async move {
                    let mut head = vec![0u8; 4096];
                    let _ = stream.read(&mut head).await;
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = match answer {
                        Answer::Keys(keys) => json!({ "keys": keys }).to_string(),
                        Answer::Slow(keys, ms) => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            json!({ "keys": keys }).to_string()
                        }
                        Answer::Status500 => {
                            let _ = stream
                                .write_all(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")
                                .await;
                            return;
                        }
                        Answer::Hang => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                        Answer::Endless(total) => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                        Transfer-Encoding: chunked\r\n\r\n";
                            if stream.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let chunk = vec![b' '; 64 * 1024];
                            let framed = [
                                format!("{:x}\r\n", chunk.len()).into_bytes(),
                                chunk,
                                b"\r\n".to_vec(),
                            ]
                            .concat();
                            while wrote.load(Ordering::SeqCst) < total {
                                if stream.write_all(&framed).await.is_err() {
                                    return;
                                }
                                wrote.fetch_add(64 * 1024, Ordering::SeqCst);
                            }
                            return;
                        }
                    };
                    let _ = stream
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        Self {
            url: format!("http://{addr}/jwks"),
            issuer: format!("http://{addr}"),
            answer,
            requests,
            written,
        }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().expect("answer") = answer;
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A P-256 signing key and its public JWK.
struct Key(EcdsaKeyPair);

impl Key {
    fn new() -> Self {
        Key(EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("key"))
    }

    fn jwk(&self, kid: &str) -> Value {
        let point = self.0.public_key().as_ref();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256",
               "x": b64(&point[1..33]), "y": b64(&point[33..65])})
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .0
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", b64(sig.as_ref()))
    }
}

fn claims(issuer: &str, scope: &str) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    json!({"iss": issuer, "aud": AUDIENCE, "sub": "u1", "client_id": "app",
           "exp": now + 600, "scope": scope})
}

/// The profiles of `clients` (the `gateway.clients` JSON), with the given refetch interval and
/// key age.
fn clients(clients: Value, refetch: Duration, max_age: Duration) -> Clients {
    let text = json!({"mcpServers": {}, "gateway": {"clients": clients}}).to_string();
    let config =
        mcp_harness_runtime::Config::parse(&text, std::path::Path::new("c.json"), &|_| None)
            .expect("config");
    let mut clients = Clients::new(&config.gateway, &|_| None)
        .expect("profiles")
        .expect("some");
    clients.refetch = refetch;
    clients.max_age = max_age;
    clients
}

fn oauth(issuer: &str, jwks: &str, scopes: &[&str]) -> Value {
    json!({"auth": {"type": "oauth", "issuer": issuer, "jwksUri": jwks, "scopes": scopes}})
}

async fn check(clients: &Clients, token: &str) -> Result<String, Refusal> {
    let auth = format!("Bearer {token}");
    (clients.authenticate(Some(&auth), AUDIENCE).await).map(|p| p.profile.name.clone())
}

#[tokio::test]
async fn a_failing_jwks_is_fetched_once_per_interval_whatever_it_answers() {
    let endpoint = Endpoint::start(Answer::Status500).await;
    let key = Key::new();
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    for kid in 0..20 {
        let token = key.sign(&format!("made-up-{kid}"), &claims(&endpoint.issuer, ""));
        let refused = check(&clients, &token).await.expect_err("no keys");
        assert!(refused.description.contains("signing key"), "{refused:?}");
    }
    assert_eq!(endpoint.requests(), 1, "a failed fetch was retried at once");
    // Working again, and a good fetch made: made-up key ids still cost one fetch per interval.
    let clients = {
        endpoint.answer(Answer::Keys(vec![key.jwk("k1")]));
        let fresh = self::clients(
            json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
            Duration::from_secs(600),
            Duration::from_secs(600),
        );
        let good = key.sign("k1", &claims(&endpoint.issuer, ""));
        assert_eq!(check(&fresh, &good).await.expect("valid"), "a");
        fresh
    };
    endpoint.answer(Answer::Status500);
    for kid in 0..20 {
        let token = key.sign(&format!("made-up-{kid}"), &claims(&endpoint.issuer, ""));
        check(&clients, &token).await.expect_err("unknown kid");
    }
    assert_eq!(endpoint.requests(), 2, "one fetch for the good client");
}

#[tokio::test]
async fn a_hanging_jwks_holds_up_only_the_tokens_of_its_issuer() {
    let (hanging, healthy) = (
        Endpoint::start(Answer::Hang).await,
        Endpoint::start(Answer::Status500).await,
    );
    let key = Key::new();
    healthy.answer(Answer::Keys(vec![key.jwk("k1")]));
    let clients = clients(
        json!({"slow": oauth(&hanging.issuer, &hanging.url, &[]),
               "fine": oauth(&healthy.issuer, &healthy.url, &[])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    let stuck = key.sign("k1", &claims(&hanging.issuer, ""));
    let good = key.sign("k1", &claims(&healthy.issuer, ""));
    let waiting = check(&clients, &stuck);
    tokio::pin!(waiting);
    // The hanging fetch is under way before the healthy issuer's token comes.
    for _ in 0..100 {
        if hanging.requests() > 0 {
            break;
        }
        tokio::select! {
            _ = &mut waiting => panic!("the hanging fetch ended"),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    assert_eq!(hanging.requests(), 1);
    tokio::select! {
        _ = &mut waiting => panic!("the hanging fetch ended first"),
        passed = check(&clients, &good) => assert_eq!(passed.expect("valid"), "fine"),
    }
    let refused = waiting.await.expect_err("no keys from a hanging JWKS");
    assert!(refused.description.contains("signing key"), "{refused:?}");
}

#[tokio::test]
async fn a_jwks_body_without_a_length_is_read_only_up_to_the_limit() {
    let endpoint = Endpoint::start(Answer::Endless(64 << 20)).await;
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    let token = Key::new().sign("k1", &claims(&endpoint.issuer, ""));
    check(&clients, &token).await.expect_err("too large");
    // The reader went away at the limit; what was written past it sits in socket buffers.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let written = endpoint.written.load(Ordering::SeqCst);
    assert!(written < 32 << 20, "{written} bytes of the body were read");
}

#[tokio::test]
async fn a_key_removed_from_the_jwks_stops_verifying_once_the_keys_are_old() {
    let endpoint = Endpoint::start(Answer::Status500).await;
    let (old, new) = (Key::new(), Key::new());
    endpoint.answer(Answer::Keys(vec![old.jwk("old"), new.jwk("new")]));
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_millis(100),
        Duration::from_millis(300),
    );
    let by_old = old.sign("old", &claims(&endpoint.issuer, ""));
    assert_eq!(check(&clients, &by_old).await.expect("valid"), "a");
    endpoint.answer(Answer::Keys(vec![new.jwk("new")]));
    assert_eq!(
        check(&clients, &by_old).await.expect("keys still fresh"),
        "a"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let refused = check(&clients, &by_old).await.expect_err("rotated out");
    assert!(refused.description.contains("signing key"), "{refused:?}");
    let by_new = new.sign("new", &claims(&endpoint.issuer, ""));
    assert_eq!(check(&clients, &by_new).await.expect("valid"), "a");
    // The authorization server down: the keys fetched last stay in use.
    endpoint.answer(Answer::Status500);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(check(&clients, &by_new).await.expect("last keys"), "a");
}

#[tokio::test]
async fn each_profile_of_an_issuer_is_checked_with_its_own_keys_and_scopes() {
    let (first, second) = (
        Endpoint::start(Answer::Status500).await,
        Endpoint::start(Answer::Status500).await,
    );
    let (admin_key, reader_key) = (Key::new(), Key::new());
    first.answer(Answer::Keys(vec![admin_key.jwk("a1")]));
    second.answer(Answer::Keys(vec![reader_key.jwk("r1")]));
    let issuer = first.issuer.clone();
    let clients = clients(
        json!({"admin": oauth(&issuer, &first.url, &["admin"]),
               "reader": oauth(&issuer, &second.url, &["read"])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    let token = |key: &Key, kid: &str, scope: &str| key.sign(kid, &claims(&issuer, scope));
    assert_eq!(
        check(&clients, &token(&reader_key, "r1", "read")).await,
        Ok("reader".to_string()),
        "the second profile's own JWKS"
    );
    assert_eq!(
        check(&clients, &token(&admin_key, "a1", "admin")).await,
        Ok("admin".to_string())
    );
    // Signed by the admin profile's key but granted only `read`: the reader profile's keys
    // do not verify it, so it is short of the admin scope.
    let refused = check(&clients, &token(&admin_key, "a1", "read"))
        .await
        .expect_err("short of a scope");
    assert_eq!(
        (refused.status, refused.scope.as_deref()),
        (403, Some("admin"))
    );

    // Two profiles of one JWKS told apart by their scopes.
    let clients = self::clients(
        json!({"admin": oauth(&issuer, &first.url, &["admin"]),
               "reader": oauth(&issuer, &first.url, &["read"])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    assert_eq!(
        check(&clients, &token(&admin_key, "a1", "read")).await,
        Ok("reader".to_string())
    );
    assert_eq!(
        check(&clients, &token(&admin_key, "a1", "admin read")).await,
        Ok("admin".to_string())
    );
    let refused = check(&clients, &token(&admin_key, "a1", "other"))
        .await
        .expect_err("no scope of either");
    assert_eq!(refused.status, 403);
}

#[tokio::test]
async fn a_malformed_claim_is_named() {
    let endpoint = Endpoint::start(Answer::Status500).await;
    let key = Key::new();
    endpoint.answer(Answer::Keys(vec![key.jwk("k1")]));
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    let mut numeric_issuer = claims(&endpoint.issuer, "");
    numeric_issuer["iss"] = json!(42);
    let refused = check(&clients, &key.sign("k1", &numeric_issuer))
        .await
        .expect_err("iss not a string");
    assert!(
        refused.description.contains("`iss` claim is not a string"),
        "{refused:?}"
    );
    let mut text_expiry = claims(&endpoint.issuer, "");
    text_expiry["exp"] = json!("tomorrow");
    let refused = check(&clients, &key.sign("k1", &text_expiry))
        .await
        .expect_err("exp not a number");
    assert!(!refused.description.contains("no `exp`"), "{refused:?}");
    assert!(refused.description.contains("type"), "{refused:?}");
}

#[tokio::test]
async fn tokens_arriving_during_a_fetch_wait_for_it() {
    let key = Key::new();
    let endpoint = Endpoint::start(Answer::Slow(vec![key.jwk("k1")], 300)).await;
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_secs(600),
        Duration::from_secs(600),
    );
    let token = key.sign("k1", &claims(&endpoint.issuer, ""));
    // A cold cache and four logins at once: one fetch, every one admitted.
    let checks = (0..4).map(|_| check(&clients, &token));
    for admitted in futures::future::join_all(checks).await {
        assert_eq!(admitted, Ok("a".to_string()));
    }
    assert_eq!(endpoint.requests(), 1);
}

#[tokio::test]
async fn a_hanging_jwks_stalls_tokens_of_old_keys_only_briefly() {
    let key = Key::new();
    let endpoint = Endpoint::start(Answer::Keys(vec![key.jwk("k1")])).await;
    let clients = clients(
        json!({"a": oauth(&endpoint.issuer, &endpoint.url, &[])}),
        Duration::from_millis(100),
        Duration::from_millis(200),
    );
    let token = key.sign("k1", &claims(&endpoint.issuer, ""));
    assert_eq!(check(&clients, &token).await.expect("valid"), "a");
    // The keys are old, and the authorization server stops answering: each token is checked
    // with the old keys after a short wait at most (the refetch took FETCH_TIMEOUT, 5 s, per
    // refetch interval). Bounded: 10 checks, 2 s each.
    endpoint.answer(Answer::Hang);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..10 {
        let checked = tokio::time::timeout(Duration::from_secs(2), check(&clients, &token)).await;
        assert_eq!(checked.expect("not stalled").expect("valid"), "a");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert!(endpoint.requests() >= 2, "the old keys were refetched");
}

//! Client assertions (RFC 7523 `private_key_jwt`): a short-lived JWT signed with the client's
//! private key (ES256 or RS256), which proves who the client is at the token endpoint.
//!
//! Invariants: the key is parsed from PEM at each signing and kept no longer; an error names
//! the config key (`oauth.privateKey`/`oauth.privateKeyFile`, `oauth.signingAlgorithm`) and
//! never quotes the key.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

/// Lifetime of a signed client assertion.
const ASSERTION_LIFETIME_S: u64 = 120;

/// The JWS algorithms of a client assertion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwtAlgorithm {
    /// ECDSA P-256 with SHA-256.
    ES256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
}

impl JwtAlgorithm {
    /// The algorithm named `name` (`ES256`, `RS256`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "ES256" => Some(Self::ES256),
            "RS256" => Some(Self::RS256),
            _ => None,
        }
    }

    /// The algorithm's JWS name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ES256 => "ES256",
            Self::RS256 => "RS256",
        }
    }
}

/// The DER of the first PEM block of `pem`, with its label.
fn pem_der(pem: &str) -> Result<(String, Vec<u8>), String> {
    let begin = pem
        .find("-----BEGIN ")
        .ok_or("the private key is not PEM (no `-----BEGIN` line)")?;
    let rest = &pem[begin + "-----BEGIN ".len()..];
    let label_end = rest
        .find("-----")
        .ok_or("the private key's PEM header is malformed")?;
    let label = rest[..label_end].to_string();
    let body_start = label_end + 5;
    let end = rest
        .find("-----END ")
        .ok_or("the private key's PEM has no `-----END` line")?;
    if end < body_start {
        return Err("the private key's PEM is malformed".into());
    }
    let body: String = rest[body_start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = STANDARD
        .decode(body)
        .map_err(|_| "the private key's PEM body is not base64".to_string())?;
    Ok((label, der))
}

/// A key pair ready to sign.
enum Signer {
    Ec(aws_lc_rs::signature::EcdsaKeyPair),
    Rsa(aws_lc_rs::signature::RsaKeyPair),
}

fn signer(pem: &str) -> Result<Signer, String> {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, RsaKeyPair};
    let (label, der) = pem_der(pem)?;
    match label.as_str() {
        "PRIVATE KEY" => EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
            .map(Signer::Ec)
            .or_else(|_| RsaKeyPair::from_pkcs8(&der).map(Signer::Rsa))
            .map_err(|_| {
                "the private key is neither a P-256 EC key nor an RSA key (PKCS#8)".to_string()
            }),
        "EC PRIVATE KEY" => {
            EcdsaKeyPair::from_private_key_der(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
                .map(Signer::Ec)
                .map_err(|_| "the EC private key is not a P-256 key".to_string())
        }
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der)
            .map(Signer::Rsa)
            .map_err(|_| "the RSA private key cannot be used".to_string()),
        other => Err(format!(
            "a PEM `{other}` block is not a private key (expected `PRIVATE KEY`, `EC PRIVATE KEY` \
             or `RSA PRIVATE KEY`)"
        )),
    }
}

/// An RFC 7523 client assertion: `iss` = `sub` = the client id, `aud` = the authorization
/// server (its issuer), short-lived, with a unique `jti`. The error never quotes the key.
pub(super) fn sign_assertion(
    pem: &str,
    algorithm: Option<JwtAlgorithm>,
    client_id: &str,
    audience: &str,
    now: u64,
) -> Result<String, String> {
    use aws_lc_rs::rand::{SecureRandom, SystemRandom};
    let key = |m: String| format!("`oauth.privateKey`/`oauth.privateKeyFile`: {m}");
    let signer = signer(pem).map_err(key)?;
    let algorithm = match (&signer, algorithm) {
        (Signer::Ec(_), None | Some(JwtAlgorithm::ES256)) => JwtAlgorithm::ES256,
        (Signer::Rsa(_), None | Some(JwtAlgorithm::RS256)) => JwtAlgorithm::RS256,
        (_, Some(other)) => {
            return Err(format!(
                "`oauth.signingAlgorithm` {} does not fit the private key (an {} key)",
                other.as_str(),
                if matches!(signer, Signer::Ec(_)) {
                    "EC"
                } else {
                    "RSA"
                }
            ));
        }
    };
    let rng = SystemRandom::new();
    let mut jti = [0u8; 16];
    rng.fill(&mut jti)
        .map_err(|_| "no randomness for the assertion id".to_string())?;
    let header = serde_json::json!({"alg": algorithm.as_str(), "typ": "JWT"});
    let claims = serde_json::json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": now,
        "exp": now + ASSERTION_LIFETIME_S,
        "jti": jti.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    });
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = match &signer {
        Signer::Ec(pair) => pair
            .sign(&rng, input.as_bytes())
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| key("signing failed".into()))?,
        Signer::Rsa(pair) => {
            let mut sig = vec![0u8; pair.public_modulus_len()];
            pair.sign(
                &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                &rng,
                input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| key("signing failed".into()))?;
            sig
        }
    };
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key (PKCS#8) made for these tests only.
    fn ec_pem() -> String {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let doc = EcdsaKeyPair::generate_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &aws_lc_rs::rand::SystemRandom::new(),
        )
        .expect("a key");
        let b64 = STANDARD.encode(doc.as_ref());
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect();
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            lines.join("\n")
        )
    }

    #[test]
    fn an_es256_assertion_verifies_with_the_public_key_and_carries_the_claims() {
        use aws_lc_rs::signature::{
            ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
            UnparsedPublicKey,
        };
        let pem = ec_pem();
        let jwt = sign_assertion(&pem, None, "client-1", "https://as.example", 1_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "ES256");
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "client-1");
        assert_eq!(claims["sub"], "client-1");
        assert_eq!(claims["aud"], "https://as.example");
        assert_eq!(claims["exp"], 1_000 + ASSERTION_LIFETIME_S);
        let (_, der) = pem_der(&pem).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der).unwrap();
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, pair.public_key().as_ref());
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .expect("the signature verifies");
        // Tampered claims do not.
        assert!(
            public
                .verify(format!("{}.{}x", parts[0], parts[1]).as_bytes(), &signature)
                .is_err()
        );
    }

    #[test]
    fn key_errors_name_the_config_key_and_never_the_key() {
        let pem = ec_pem();
        let err = sign_assertion(&pem, Some(JwtAlgorithm::RS256), "c", "a", 0).unwrap_err();
        assert!(err.contains("`oauth.signingAlgorithm` RS256"), "{err}");
        let bad = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let err = sign_assertion(bad, None, "c", "a", 0).unwrap_err();
        assert!(err.contains("`oauth.privateKey"), "{err}");
        assert!(!err.contains("AAAA"), "{err}");
        let err = sign_assertion("not a key", None, "c", "a", 0).unwrap_err();
        assert!(err.contains("not PEM"), "{err}");
    }
}

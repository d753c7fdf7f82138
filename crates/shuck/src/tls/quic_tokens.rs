//! QUIC's address-validation tokens (`--quic`), shared by every worker thread and, through
//! the farm key, by every host of a farm.

use std::sync::Arc;

/// QUIC's address-validation tokens: the key that seals both kinds (a Retry's, and
/// NEW_TOKEN's for a client's next connection), and the log of NEW_TOKEN tokens used, so
/// that each is taken once by this host (every worker thread shares it).
#[derive(Clone)]
pub struct Tokens {
    /// The key both kinds of token are sealed under.
    pub key: Arc<dyn quinn::crypto::HandshakeTokenKey>,
    /// NEW_TOKEN tokens already taken.
    pub used: Arc<quinn::BloomTokenLog>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(..)")
    }
}

/// The token key: derived from the farm's key (HKDF-SHA256 with a label of its own, so it
/// opens nothing else the farm key seals), so that a token one host issued is taken by
/// another; without one, a random key of this process's. The log of used tokens is the
/// process's own (quinn's Bloom filter pair, 10 MiB at most).
pub fn tokens(farm: Option<[u8; 32]>) -> Tokens {
    let secret = farm.unwrap_or_else(|| {
        let mut k = [0u8; 32];
        // A failing RNG leaves a fixed key: tokens would still be sealed, only guessable.
        let _ = aws_lc_rs::rand::fill(&mut k);
        k
    });
    Tokens {
        key: Arc::new(TokenKey::new(&secret)),
        used: Arc::new(quinn::BloomTokenLog::default()),
    }
}

/// The token key: PRK = HKDF-Extract(label, farm key); each token's AES-256-GCM key is
/// HKDF-Expand(PRK, its random bytes, 32), as quinn's own key (aws-lc's `Prk`) derives it,
/// so hosts of one farm agree whichever shuck they run. The PRK's HMAC is keyed once here:
/// aws-lc's `Prk` extracts and keys it again for every token, two of which (one opened, one
/// issued) each full handshake costs.
struct TokenKey(aws_lc_rs::hmac::Key);

impl TokenKey {
    fn new(secret: &[u8]) -> Self {
        use aws_lc_rs::hmac;
        let salt = hmac::Key::new(hmac::HMAC_SHA256, b"shuck quic retry token key");
        let prk = hmac::sign(&salt, secret);
        Self(hmac::Key::new(hmac::HMAC_SHA256, prk.as_ref()))
    }
}

impl quinn::crypto::HandshakeTokenKey for TokenKey {
    fn aead_from_hkdf(&self, random_bytes: &[u8]) -> Box<dyn quinn::crypto::AeadKey> {
        use aws_lc_rs::{aead, hmac};
        // HKDF-Expand's first block, T(1) = HMAC(PRK, info | 0x01), is the whole key.
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(random_bytes);
        ctx.update(&[1]);
        let okm = ctx.sign();
        // AES-256 takes any 32 bytes; SHA-256's tag is 32 bytes.
        let key =
            aead::UnboundKey::new(&aead::AES_256_GCM, okm.as_ref()).expect("a 32-byte AES-256 key");
        Box::new(aead::LessSafeKey::new(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_one_farm_key_open_each_others_tokens() {
        let (a, b, other) = (
            tokens(Some([7; 32])),
            tokens(Some([7; 32])),
            tokens(Some([8; 32])),
        );
        let nonce = [1u8; 32];
        let mut token = b"the client's address and its first ID".to_vec();
        a.key.aead_from_hkdf(&nonce).seal(&mut token, b"").unwrap();
        let mut copy = token.clone();
        let opened = b.key.aead_from_hkdf(&nonce).open(&mut copy, b"").unwrap();
        assert_eq!(opened, b"the client's address and its first ID");
        let mut copy = token.clone();
        assert!(other
            .key
            .aead_from_hkdf(&nonce)
            .open(&mut copy, b"")
            .is_err());
        // quinn's own token key (aws-lc's HKDF) opens ours: a farm's hosts agree.
        let prk =
            aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, b"shuck quic retry token key")
                .extract(&[7; 32]);
        let mut copy = token.clone();
        let opened = quinn::crypto::HandshakeTokenKey::aead_from_hkdf(&prk, &nonce)
            .open(&mut copy, b"")
            .unwrap();
        assert_eq!(opened, b"the client's address and its first ID");
        // Without a farm key each process draws its own.
        let mut copy = token;
        assert!(tokens(None)
            .key
            .aead_from_hkdf(&nonce)
            .open(&mut copy, b"")
            .is_err());
    }
}

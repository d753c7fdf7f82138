//! `shuck-bench capacity`: this machine's crypto costs through aws-lc-rs, and the capacity
//! they imply, the way NGINX's paper estimates it from `openssl speed`: a full handshake
//! costs at least one signature and one key exchange on the server; bulk transfer at most
//! the cipher's speed.

use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, CHACHA20_POLY1305};
use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde::Serialize;

/// Measured costs, µs per operation, and bulk speeds, bytes per second.
#[derive(Debug, Clone, Serialize)]
pub struct Capacity {
    /// RSA-2048 PSS signature.
    pub rsa2048_sign_us: f64,
    /// RSA-3072 PSS signature.
    pub rsa3072_sign_us: f64,
    /// RSA-4096 PSS signature.
    pub rsa4096_sign_us: f64,
    /// ECDSA P-256 signature.
    pub ecdsa_p256_sign_us: f64,
    /// X25519: key generation, public key, and agreement (the server's share of ECDHE).
    pub x25519_us: f64,
    /// AES-128-GCM sealing 16 KB records.
    pub aes128gcm_bytes_per_s: f64,
    /// ChaCha20-Poly1305 sealing 16 KB records.
    pub chacha20_bytes_per_s: f64,
}

impl Capacity {
    /// The crypto floor of a full handshake, µs: one signature plus one key exchange.
    pub fn floor_us(&self, rsa: bool) -> f64 {
        (if rsa {
            self.rsa2048_sign_us
        } else {
            self.ecdsa_p256_sign_us
        }) + self.x25519_us
    }
}

/// Times `f` for about `budget`, returning µs per call.
fn per_call(budget: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..8 {
            f();
        }
        n += 8;
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// Measures every cost, spending about `budget` on each.
pub fn measure(budget: Duration) -> anyhow::Result<Capacity> {
    let rng = SystemRandom::new();
    let msg = [7u8; 64];
    let rsa = |size| -> anyhow::Result<f64> {
        let key =
            RsaKeyPair::generate(size).map_err(|_| anyhow::anyhow!("RSA key generation failed"))?;
        let mut sig = vec![0u8; key.public_modulus_len()];
        Ok(per_call(budget, || {
            let _ = key.sign(&signature::RSA_PSS_SHA256, &rng, &msg, &mut sig);
        }))
    };
    let ec = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_ASN1_SIGNING)
        .map_err(|_| anyhow::anyhow!("ECDSA key generation failed"))?;
    let _ = ec.public_key();
    let ecdsa = per_call(budget, || {
        let _ = ec.sign(&rng, &msg);
    });
    let peer =
        EphemeralPrivateKey::generate(&X25519, &rng).map_err(|_| anyhow::anyhow!("X25519"))?;
    let peer_pub = peer
        .compute_public_key()
        .map_err(|_| anyhow::anyhow!("X25519"))?;
    let peer_pub = peer_pub.as_ref().to_vec();
    let x25519 = per_call(budget, || {
        if let Ok(k) = EphemeralPrivateKey::generate(&X25519, &rng) {
            let _ = k.compute_public_key();
            let _ = agreement::agree_ephemeral(
                k,
                UnparsedPublicKey::new(&X25519, &peer_pub),
                (),
                |s| {
                    std::hint::black_box(s.len());
                    Ok(())
                },
            );
        }
    });
    let bulk = |alg| -> f64 {
        let Ok(key) = UnboundKey::new(alg, &[3u8; 32][..alg.key_len()]) else {
            return 0.0;
        };
        let key = LessSafeKey::new(key);
        let mut buf = vec![0u8; 16 * 1024];
        let us = per_call(budget, || {
            buf.truncate(16 * 1024);
            let _ = key.seal_in_place_append_tag(
                Nonce::assume_unique_for_key([1u8; 12]),
                Aad::empty(),
                &mut buf,
            );
        });
        16.0 * 1024.0 / (us / 1e6)
    };
    Ok(Capacity {
        rsa2048_sign_us: rsa(KeySize::Rsa2048)?,
        rsa3072_sign_us: rsa(KeySize::Rsa3072)?,
        rsa4096_sign_us: rsa(KeySize::Rsa4096)?,
        ecdsa_p256_sign_us: ecdsa,
        x25519_us: x25519,
        aes128gcm_bytes_per_s: bulk(&AES_128_GCM),
        chacha20_bytes_per_s: bulk(&CHACHA20_POLY1305),
    })
}

impl std::fmt::Display for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_s = |us: f64| 1e6 / us;
        writeln!(f, "operation                 µs/op     ops/s per core")?;
        for (name, us) in [
            ("RSA-2048 sign (PSS)", self.rsa2048_sign_us),
            ("RSA-3072 sign (PSS)", self.rsa3072_sign_us),
            ("RSA-4096 sign (PSS)", self.rsa4096_sign_us),
            ("ECDSA P-256 sign", self.ecdsa_p256_sign_us),
            ("X25519 keygen+agree", self.x25519_us),
        ] {
            writeln!(f, "{name:<24} {us:>8.1}  {:>12.0}", per_s(us))?;
        }
        writeln!(
            f,
            "AES-128-GCM              {:>8.0} MB/s per core",
            self.aes128gcm_bytes_per_s / 1e6
        )?;
        writeln!(
            f,
            "ChaCha20-Poly1305        {:>8.0} MB/s per core",
            self.chacha20_bytes_per_s / 1e6
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "estimated full handshakes per core (signature + X25519, the crypto floor):"
        )?;
        writeln!(
            f,
            "  RSA-2048:    {:>8.0}/s  ({:.1} µs each)",
            per_s(self.floor_us(true)),
            self.floor_us(true)
        )?;
        writeln!(
            f,
            "  ECDSA P-256: {:>8.0}/s  ({:.1} µs each)",
            per_s(self.floor_us(false)),
            self.floor_us(false)
        )?;
        write!(
            f,
            "estimated bulk bandwidth per core: {:.0} MB/s (AES-128-GCM)",
            self.aes128gcm_bytes_per_s / 1e6
        )
    }
}

//! TLS 1.3's cipher suites with an HKDF that keys HMAC once per secret.
//!
//! rustls's aws-lc HKDF hands the raw secret to aws-lc's `HKDF_expand` for every label, which
//! hashes it into HMAC's inner and outer pads again each time: two SHA-256 compressions of
//! the four a short label costs. TLS expands two to four labels from each secret of its key
//! schedule, QUIC three (key, iv, header protection) from each of eight; keeping the keyed
//! HMAC state in the expander spares those compressions (callgrind: bench/RESULTS.md). The
//! suites are rustls's own otherwise: the same AEADs, hashes and QUIC algorithms.

use std::sync::LazyLock;

use aws_lc_rs::hmac;
use rustls::crypto::aws_lc_rs::cipher_suite as cs;
use rustls::crypto::hmac::Tag;
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};

/// HKDF (RFC 5869) over aws-lc's HMAC, the PRK's keyed state kept by each expander.
struct KeyedHkdf(&'static hmac::Algorithm);

/// `HKDF-Expand` from one PRK: HMAC keyed with it once.
struct Expander {
    key: hmac::Key,
    len: usize,
}

impl KeyedHkdf {
    fn hash_len(&self) -> usize {
        self.0.digest_algorithm().output_len
    }

    fn expander(&self, prk: &[u8]) -> Box<dyn HkdfExpander> {
        Box::new(Expander {
            key: hmac::Key::new(*self.0, prk),
            len: self.hash_len(),
        })
    }
}

impl Hkdf for KeyedHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        let zeroes = [0u8; OkmBlock::MAX_LEN];
        self.extract_from_secret(salt, &zeroes[..self.hash_len()])
    }

    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        // RFC 5869 §2.2: no salt is HashLen zero bytes.
        let zeroes = [0u8; OkmBlock::MAX_LEN];
        let salt = salt.unwrap_or(&zeroes[..self.hash_len()]);
        let prk = hmac::sign(&hmac::Key::new(*self.0, salt), secret);
        self.expander(prk.as_ref())
    }

    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        self.expander(okm.as_ref())
    }

    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> Tag {
        Tag::new(hmac::sign(&hmac::Key::new(*self.0, key.as_ref()), message).as_ref())
    }
}

impl HkdfExpander for Expander {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        if output.len() > 255 * self.len {
            return Err(OutputLengthError);
        }
        // T(i) = HMAC(PRK, T(i-1) | info | i), T(0) empty; the length check keeps i ≤ 255.
        let mut previous: Option<hmac::Tag> = None;
        for (counter, chunk) in (1u8..=255).zip(output.chunks_mut(self.len)) {
            let mut ctx = hmac::Context::with_key(&self.key);
            if let Some(t) = &previous {
                ctx.update(t.as_ref());
            }
            for part in info {
                ctx.update(part);
            }
            ctx.update(&[counter]);
            let t = ctx.sign();
            chunk.copy_from_slice(&t.as_ref()[..chunk.len()]);
            previous = Some(t);
        }
        Ok(())
    }

    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        let mut block = [0u8; OkmBlock::MAX_LEN];
        let out = &mut block[..self.len];
        // One block is never longer than 255 blocks.
        let _ = self.expand_slice(info, out);
        OkmBlock::new(out)
    }

    fn hash_len(&self) -> usize {
        self.len
    }
}

static HKDF_SHA256: KeyedHkdf = KeyedHkdf(&hmac::HMAC_SHA256);
static HKDF_SHA384: KeyedHkdf = KeyedHkdf(&hmac::HMAC_SHA384);

/// rustls's three TLS 1.3 suites, each with [`KeyedHkdf`] for its hash.
static SUITES: LazyLock<[Tls13CipherSuite; 3]> = LazyLock::new(|| {
    [
        (cs::TLS13_AES_128_GCM_SHA256, &HKDF_SHA256),
        (cs::TLS13_AES_256_GCM_SHA384, &HKDF_SHA384),
        (cs::TLS13_CHACHA20_POLY1305_SHA256, &HKDF_SHA256),
    ]
    .map(|(suite, hkdf)| {
        let base = suite
            .tls13()
            .expect("rustls's TLS 1.3 suites are TLS 1.3 suites");
        Tls13CipherSuite {
            common: CipherSuiteCommon {
                suite: base.common.suite,
                hash_provider: base.common.hash_provider,
                confidentiality_limit: base.common.confidentiality_limit,
            },
            hkdf_provider: hkdf,
            aead_alg: base.aead_alg,
            quic: base.quic,
        }
    })
});

/// The TLS 1.3 suite shuck serves for `suite` (rustls's, with [`KeyedHkdf`]); a TLS 1.2
/// suite is returned as it is.
pub fn keyed(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    if suite.tls13().is_none() {
        return suite;
    }
    SUITES
        .iter()
        .find(|s| s.common.suite == suite.suite())
        .map_or(suite, SupportedCipherSuite::Tls13)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869's test case 1 (SHA-256) and a three-block output checked against aws-lc's
    /// own HKDF, which rustls used before.
    #[test]
    fn matches_rfc_5869_and_aws_lc() {
        let ikm = [0x0b; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        let prk = HKDF_SHA256.extract_from_secret(Some(&salt), &ikm);
        let mut okm = [0u8; 42];
        prk.expand_slice(&[&info], &mut okm).unwrap();
        let want = "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf\
                    34007208d5b887185865";
        let hex: String = okm.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, want);

        // Each keyed HKDF against the aws-lc one rustls's suite of that hash carries.
        for (provider, suite) in [
            (&HKDF_SHA256, cs::TLS13_AES_128_GCM_SHA256),
            (&HKDF_SHA384, cs::TLS13_AES_256_GCM_SHA384),
        ] {
            let reference = suite.tls13().unwrap().hkdf_provider;
            let len = provider.hash_len();
            let (ours, refs) = (
                provider.extract_from_secret(Some(b"salt"), b"secret"),
                reference.extract_from_secret(Some(b"salt"), b"secret"),
            );
            let (mut a, mut b) = ([0u8; 130], [0u8; 130]);
            ours.expand_slice(&[b"la", b"bel"], &mut a).unwrap();
            refs.expand_slice(&[b"la", b"bel"], &mut b).unwrap();
            assert_eq!(a, b);
            assert_eq!(
                ours.expand_block(&[b"x"]).as_ref(),
                refs.expand_block(&[b"x"]).as_ref()
            );
            let okm = ours.expand_block(&[b"k"]);
            assert_eq!(
                provider.hmac_sign(&okm, b"m").as_ref(),
                reference.hmac_sign(&okm, b"m").as_ref()
            );
            assert!(ours
                .expand_slice(&[], &mut vec![0u8; 255 * len + 1])
                .is_err());
            let z = provider.extract_from_zero_ikm(None).expand_block(&[b"z"]);
            let y = reference.extract_from_zero_ikm(None).expand_block(&[b"z"]);
            assert_eq!(z.as_ref(), y.as_ref());
        }
    }

    #[test]
    fn keyed_suites_keep_their_ids_and_leave_tls12_alone() {
        for s in rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES {
            let k = keyed(*s);
            assert_eq!(k.suite(), s.suite());
            assert_eq!(k.tls13().is_some(), s.tls13().is_some());
            if let Some(t) = k.tls13() {
                let want = if t.common.suite == rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 {
                    &HKDF_SHA384
                } else {
                    &HKDF_SHA256
                };
                assert!(std::ptr::addr_eq(t.hkdf_provider, want));
            }
        }
    }
}

//! The one way shuck turns shared key material into a cipher key, for the ticket ring, the
//! sealed replication datagrams and the values kept in the shared store.

use aws_lc_rs::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
use aws_lc_rs::error::Unspecified;
use aws_lc_rs::hkdf;

/// An AES-256-GCM key derived from `secret` with HKDF-SHA256 under `salt` (info
/// "aes-256-gcm"): key material from files is never used as a cipher key directly. The
/// library reports failure only for output lengths past 255 hashes, never for one key.
pub(crate) fn derive_aes_256_gcm(salt: &[u8], secret: &[u8]) -> Result<LessSafeKey, Unspecified> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
    let okm = prk.expand(&[b"aes-256-gcm"], &AES_256_GCM)?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

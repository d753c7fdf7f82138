//! Values as they lie in the shared store: sealed with AES-256-GCM under a key derived from
//! the farm key (`--shared-cache-key`), with the entry's full key name as associated data,
//! so that a value moved to another name, or written by another farm, does not open.
//!
//! Layout: version (1) ‖ nonce (12) ‖ ciphertext and tag (16).

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use aws_lc_rs::rand;

use crate::codec::Reader;
use crate::session::aead::derive_aes_256_gcm;

const VERSION: u8 = 1;
const TAG_LEN: usize = 16;
/// Largest value opened: a session (≤ 16 KB) or a full ticket ring, with room to spare.
pub const MAX_SEALED: usize = 24 * 1024;

/// Seals and opens store values under the farm key.
pub struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// The sealer of a farm key; `None` only if the library refuses the derivation.
    pub fn new(farm_key: &[u8; 32]) -> Option<Self> {
        Some(Sealer {
            key: derive_aes_256_gcm(b"shuck shared store v1", farm_key).ok()?,
        })
    }

    /// `plain` sealed for the store entry named `name`; `None` without randomness.
    pub fn seal(&self, name: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + plain.len() + TAG_LEN);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let mut body = out.split_off(1 + NONCE_LEN);
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    /// The plaintext of `sealed` read from the entry `name`, or `None` when it was not
    /// sealed for that name under this farm key (or is not a sealed value at all).
    pub fn open(&self, name: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() > MAX_SEALED {
            return None;
        }
        let mut r = Reader::new(sealed);
        if r.u8("sealed value version").ok()? != VERSION || r.left() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let nonce = Nonce::assume_unique_for_key(r.array::<NONCE_LEN>("nonce").ok()?);
        let mut body = r.rest().to_vec();
        let n = self
            .key
            .open_in_place(nonce, Aad::from(name), &mut body)
            .ok()?
            .len();
        body.truncate(n);
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_only_under_its_name_and_farm_key() {
        let a = Sealer::new(&[1; 32]).unwrap();
        let b = Sealer::new(&[2; 32]).unwrap();
        let sealed = a.seal(b"shuck:session:00", b"secret").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(a.open(b"shuck:session:00", &sealed).unwrap(), b"secret");
        assert!(a.open(b"shuck:session:01", &sealed).is_none(), "moved");
        assert!(b.open(b"shuck:session:00", &sealed).is_none(), "other farm");
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(a.open(b"shuck:session:00", &flipped).is_none());
        assert!(a.open(b"shuck:session:00", &sealed[..10]).is_none());
        assert!(a.open(b"shuck:session:00", b"").is_none());
    }
}

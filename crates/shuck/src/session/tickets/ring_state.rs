//! A timer ring as one process hands it to another (master to worker, old master to new,
//! and through the shared store), and its binary encoding.

use super::{SharedKey, MAX_KEYS, NAME_LEN};
use crate::codec::{put_u32, put_u64, CodecError, Reader};

/// A timer ring as the master process hands it to its worker (and an old master to the
/// new one at a binary upgrade): its own keys, and which encrypts now and next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingState {
    /// The ring's own keys, live ones only.
    pub keys: Vec<SharedKey>,
    /// Index in `keys` of the key that encrypts.
    pub current: usize,
    /// Index in `keys` of the key that encrypts after the next rotation.
    pub next: Option<usize>,
    /// Unix ms at which `current` stops encrypting.
    pub rotate_at: Option<u64>,
}

impl RingState {
    /// Appends the ring's encoding (the worker channel's and the shared store's):
    /// key count (u32) ‖ per key name (16) ‖ secret (32) ‖ retire_at (u64) ‖ current (u32)
    /// ‖ next (u32, `u32::MAX` for none) ‖ rotate_at (u64, `u64::MAX` for none).
    pub fn encode(&self, w: &mut Vec<u8>) {
        put_u32(w, self.keys.len() as u32);
        for k in &self.keys {
            w.extend_from_slice(&k.name);
            w.extend_from_slice(&k.secret);
            put_u64(w, k.retire_at);
        }
        put_u32(w, self.current as u32);
        put_u32(w, self.next.map_or(u32::MAX, |n| n as u32));
        put_u64(w, self.rotate_at.unwrap_or(u64::MAX));
    }

    /// Reads a ring off `r`; refused when it is truncated, holds more keys than a ring
    /// keeps (64), or its indices point nowhere.
    pub fn decode(r: &mut Reader<'_>) -> Result<RingState, CodecError> {
        let n = r.count(NAME_LEN + 32 + 8, "ticket keys")?;
        if n > MAX_KEYS {
            return Err(CodecError::Invalid {
                what: "ticket key count",
                value: n as u64,
            });
        }
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push(SharedKey {
                name: r.array("ticket key name")?,
                secret: r.array("ticket key secret")?,
                retire_at: r.u64("ticket key retirement")?,
            });
        }
        let current = r.u32("current ticket key")? as usize;
        let next = r.u32("next ticket key")?;
        let next = (next != u32::MAX).then_some(next as usize);
        let rotate_at = r.u64("rotation time")?;
        for (what, i) in [
            ("current ticket key", Some(current)),
            ("next ticket key", next),
        ] {
            if let Some(i) = i.filter(|&i| i >= n) {
                return Err(CodecError::Invalid {
                    what,
                    value: i as u64,
                });
            }
        }
        Ok(RingState {
            keys,
            current,
            next,
            rotate_at: (rotate_at != u64::MAX).then_some(rotate_at),
        })
    }
}

//! A timer ring as one process hands it to another (master to worker, old master to new,
//! and through the shared store), and its binary encoding.

use super::{SharedKey, MAX_KEYS, NAME_LEN};

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
        w.extend_from_slice(&(self.keys.len() as u32).to_be_bytes());
        for k in &self.keys {
            w.extend_from_slice(&k.name);
            w.extend_from_slice(&k.secret);
            w.extend_from_slice(&k.retire_at.to_be_bytes());
        }
        w.extend_from_slice(&(self.current as u32).to_be_bytes());
        w.extend_from_slice(&self.next.map_or(u32::MAX, |n| n as u32).to_be_bytes());
        w.extend_from_slice(&self.rotate_at.unwrap_or(u64::MAX).to_be_bytes());
    }

    /// Reads a ring from the front of `b`: the ring and the bytes after it, or `None` when
    /// it is truncated, holds more keys than a ring keeps (64), or its indices point nowhere.
    pub fn decode(b: &[u8]) -> Option<(RingState, &[u8])> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (a, rest) = b.split_at_checked(n)?;
            *b = rest;
            Some(a)
        }
        let mut b = b;
        let u32_at = |b: &mut &[u8]| Some(u32::from_be_bytes(take(b, 4)?.try_into().ok()?));
        let u64_at = |b: &mut &[u8]| Some(u64::from_be_bytes(take(b, 8)?.try_into().ok()?));
        let n = u32_at(&mut b)? as usize;
        if n > MAX_KEYS {
            return None;
        }
        let mut keys = Vec::with_capacity(n);
        for _ in 0..n {
            keys.push(SharedKey {
                name: take(&mut b, NAME_LEN)?.try_into().ok()?,
                secret: take(&mut b, 32)?.try_into().ok()?,
                retire_at: u64_at(&mut b)?,
            });
        }
        let current = u32_at(&mut b)? as usize;
        let next = u32_at(&mut b)?;
        let next = (next != u32::MAX).then_some(next as usize);
        let rotate_at = u64_at(&mut b)?;
        if current >= n || next.is_some_and(|i| i >= n) {
            return None;
        }
        Some((
            RingState {
                keys,
                current,
                next,
                rotate_at: (rotate_at != u64::MAX).then_some(rotate_at),
            },
            b,
        ))
    }
}

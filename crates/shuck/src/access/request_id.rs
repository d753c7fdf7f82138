//! Request IDs (`--request-id-header NAME`): a client's well-formed value passes (visible
//! ASCII, 1 to 64 bytes), any other is replaced, and a request without one gets one; the
//! backend is sent it, the access log writes it, and with `--request-id-response` the answer
//! carries it back. Shared by the three HTTP versions.
//!
//! A generated ID is 128 bits as 32 hex digits: a worker thread's count enciphered under
//! an AES-128 key drawn once per thread (one block, a permutation), so IDs are unique on a
//! thread, collide across threads and hosts with odds of 2^-128, cost no random draw per
//! request, and tell nothing of the next one. A client's value is taken only from
//! `--trusted-proxies` (`Spec::trusted`): anyone else could choose its request's ID, or
//! give itself another request's.

use std::cell::RefCell;

use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128};

/// The longest ID taken from a client.
pub const MAX_LEN: usize = 64;

/// `--request-id-header` and `--request-id-response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The header's name, lower case.
    pub name: String,
    /// Whether the answer carries the ID back.
    pub respond: bool,
    /// `--trusted-proxies`: the peers whose ID is taken.
    pub trusted: crate::clients::CidrList,
}

impl Spec {
    /// Whether a request from `peer` may bring its own ID.
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        self.trusted.contains(peer)
    }
}

/// One request's ID, kept inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestId {
    len: u8,
    bytes: [u8; MAX_LEN],
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

/// A thread's key and count.
struct Generator {
    key: Option<EncryptingKey>,
    count: u128,
}

thread_local! {
    /// This thread's key, drawn at its first ID, and its count.
    static NEXT: RefCell<Option<Generator>> = const { RefCell::new(None) };
}

fn generator() -> Generator {
    let mut r = [0u8; 32];
    let drawn = aws_lc_rs::rand::fill(&mut r).is_ok();
    if !drawn {
        // A failing RNG leaves the clock's bits: still distinct per thread on this host.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        r[..16].copy_from_slice(&t.as_nanos().to_le_bytes());
    }
    let key = UnboundCipherKey::new(&AES_128, &r[..16])
        .and_then(EncryptingKey::ecb)
        .ok();
    let mut start = [0u8; 16];
    start.copy_from_slice(&r[16..]);
    Generator {
        key,
        count: u128::from_le_bytes(start),
    }
}

impl RequestId {
    /// The ID's bytes (visible ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// A client's value, if well-formed.
    pub fn accept(value: &[u8]) -> Option<Self> {
        if value.is_empty()
            || value.len() > MAX_LEN
            || !value.iter().all(|b| (0x21..=0x7e).contains(b))
        {
            return None;
        }
        let mut bytes = [0; MAX_LEN];
        bytes[..value.len()].copy_from_slice(value);
        Some(RequestId {
            len: value.len() as u8,
            bytes,
        })
    }

    /// The peer's value (the first of `values`) if `trusted` and well-formed, else a new ID.
    pub fn of<'a>(trusted: bool, mut values: impl Iterator<Item = &'a [u8]>) -> Self {
        values
            .next()
            .filter(|_| trusted)
            .and_then(Self::accept)
            .unwrap_or_else(Self::generate)
    }

    /// A new ID: this thread's next count under its key, 32 hex digits.
    pub fn generate() -> Self {
        let block = NEXT.with(|n| {
            let mut n = n.borrow_mut();
            let g = n.get_or_insert_with(generator);
            g.count = g.count.wrapping_add(1);
            let mut block = g.count.to_be_bytes();
            let sealed = g.key.as_ref().is_some_and(|k| {
                k.less_safe_encrypt(&mut block, EncryptionContext::None)
                    .is_ok()
            });
            if !sealed {
                // No cipher (never seen): the count alone, still unique on the thread.
                block = g.count.to_be_bytes();
            }
            block
        });
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0; MAX_LEN];
        for (i, b) in block.into_iter().enumerate() {
            bytes[2 * i] = HEX[usize::from(b >> 4)];
            bytes[2 * i + 1] = HEX[usize::from(b & 15)];
        }
        RequestId { len: 32, bytes }
    }

    /// `Name: id\r\n` for a head.
    pub fn write_line(&self, name: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(self.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_ids_pass_when_well_formed_and_are_replaced_otherwise() {
        assert_eq!(
            RequestId::accept(b"abc-123").unwrap().as_bytes(),
            b"abc-123"
        );
        for bad in [&b""[..], b"a b", b"a\x7f", b"\xffx", &[b'a'; 65]] {
            assert!(RequestId::accept(bad).is_none(), "{bad:?}");
        }
        let kept = RequestId::of(true, [&b"mine"[..], b"second"].into_iter());
        assert_eq!(kept.as_bytes(), b"mine");
        let new = RequestId::of(true, [&b"bad id"[..]].into_iter());
        assert_eq!(new.as_bytes().len(), 32);
        // Not a trusted peer: its own value never passes.
        let new = RequestId::of(false, [&b"mine"[..]].into_iter());
        assert_eq!(new.as_bytes().len(), 32);
        assert_ne!(new.as_bytes(), b"mine");
    }

    #[test]
    fn generated_ids_are_distinct_within_and_across_threads() {
        let mine: Vec<RequestId> = (0..1000).map(|_| RequestId::generate()).collect();
        let theirs =
            std::thread::spawn(|| (0..1000).map(|_| RequestId::generate()).collect::<Vec<_>>())
                .join()
                .unwrap();
        let all: std::collections::HashSet<Vec<u8>> = mine
            .iter()
            .chain(&theirs)
            .map(|i| i.as_bytes().to_vec())
            .collect();
        assert_eq!(all.len(), 2000);
        assert!(mine[0].as_bytes().iter().all(u8::is_ascii_hexdigit));
        // Consecutive IDs share nothing that tells one from the next (issue 60, point 9):
        // no half in common, about half their bits apart.
        for w in mine.windows(2) {
            let (a, b) = (w[0].as_bytes(), w[1].as_bytes());
            assert_ne!(a[..16], b[..16]);
            assert_ne!(a[16..], b[16..]);
            let (x, y) = (
                u128::from_str_radix(std::str::from_utf8(a).unwrap(), 16).unwrap(),
                u128::from_str_radix(std::str::from_utf8(b).unwrap(), 16).unwrap(),
            );
            assert!((20..=108).contains(&(x ^ y).count_ones()), "{a:?} {b:?}");
        }
    }
}

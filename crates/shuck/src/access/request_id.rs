//! Request IDs (`--request-id-header NAME`): a client's well-formed value passes (visible
//! ASCII, 1 to 64 bytes), any other is replaced, and a request without one gets one; the
//! backend is sent it, the access log writes it, and with `--request-id-response` the answer
//! carries it back. Shared by the three HTTP versions.
//!
//! A generated ID is 128 bits as 32 hex digits: a random half drawn once per worker thread
//! and a count, so IDs are unique across threads, processes and hosts without coordination
//! and cost no random draw per request.

use std::cell::Cell;

/// The longest ID taken from a client.
pub const MAX_LEN: usize = 64;

/// `--request-id-header` and `--request-id-response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The header's name, lower case.
    pub name: String,
    /// Whether the answer carries the ID back.
    pub respond: bool,
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

thread_local! {
    /// This thread's random half, drawn at its first ID, and its count.
    static NEXT: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
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

    /// The client's value (the first of `values`) if well-formed, else a new ID.
    pub fn of<'a>(mut values: impl Iterator<Item = &'a [u8]>) -> Self {
        values
            .next()
            .and_then(Self::accept)
            .unwrap_or_else(Self::generate)
    }

    /// A new ID: this thread's random half and its next count, 32 hex digits.
    pub fn generate() -> Self {
        let (high, low) = NEXT.with(|n| {
            let (high, count) = n.get().unwrap_or_else(|| {
                let mut r = [0u8; 16];
                // A failing RNG leaves the thread's and the clock's bits: still distinct per
                // thread on this host.
                if aws_lc_rs::rand::fill(&mut r).is_err() {
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    r[..16].copy_from_slice(&t.as_nanos().to_le_bytes());
                }
                let high = u64::from_le_bytes(r[..8].try_into().unwrap_or([0; 8]));
                let start = u64::from_le_bytes(r[8..].try_into().unwrap_or([0; 8]));
                (high, start)
            });
            n.set(Some((high, count.wrapping_add(1))));
            (high, count)
        });
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0; MAX_LEN];
        for (i, b) in high
            .to_be_bytes()
            .into_iter()
            .chain(low.to_be_bytes())
            .enumerate()
        {
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
        let kept = RequestId::of([&b"mine"[..], b"second"].into_iter());
        assert_eq!(kept.as_bytes(), b"mine");
        let new = RequestId::of([&b"bad id"[..]].into_iter());
        assert_eq!(new.as_bytes().len(), 32);
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
        // One thread's IDs share its random half.
        assert_eq!(mine[0].as_bytes()[..16], mine[999].as_bytes()[..16]);
        assert_ne!(mine[0].as_bytes()[..16], theirs[0].as_bytes()[..16]);
    }
}

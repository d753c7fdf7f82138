//! The replication datagram, version 1 (specified for other implementers in
//! `docs/replication.md`): a clear header, authenticated as associated data, then the
//! records sealed with AES-256-GCM under a key derived from the pre-shared key.
//!
//! ```text
//! 0   1  version (1)
//! 1   1  cipher (1: AES-256-GCM)
//! 2   8  sender id (random per process start)
//! 10  8  timestamp, unix milliseconds, big endian
//! 18  8  sequence number of this sender, big endian
//! 26 12  nonce (random)
//! 38  …  ciphertext of the records, then the 16-byte tag
//! ```
//!
//! Records, each `type (1) ‖ length (2, big endian) ‖ body`:
//! `New` (1) `key length (1) ‖ key ‖ age in ms (4) ‖ value`; `Del` (2) `key`;
//! `Keys` (3) `n × (name (16) ‖ secret (32) ‖ retire at, unix ms (8))`;
//! `Request` (4) `flags (1)`: bit 0 asks for ticket keys, bit 1 for sessions;
//! `Farm` (5) an opaque body for the farm's ACME client (`crate::acme::farm`).
//! Unknown record types are skipped, so a later version may add some.

use aws_lc_rs::aead::NONCE_LEN;

use crate::codec::{put_u16, put_u32, put_u64, CodecError, Reader};

pub use crate::session::tickets::SharedKey;

/// The version this code writes and reads.
pub const VERSION: u8 = 1;
/// Cipher byte for AES-256-GCM.
pub const CIPHER_AES_256_GCM: u8 = 1;
/// Bytes of the header authenticated as associated data.
pub const AAD_LEN: usize = 26;
/// Bytes of the whole clear header (with the nonce).
pub const HEADER_LEN: usize = AAD_LEN + NONCE_LEN;
/// Bytes of the tag.
pub const TAG_LEN: usize = 16;
/// Largest datagram sent or accepted; bigger ones are dropped as oversized.
pub const MAX_DATAGRAM: usize = 8192;
/// Largest records payload of one datagram.
pub const MAX_PLAINTEXT: usize = MAX_DATAGRAM - HEADER_LEN - TAG_LEN;
/// Records are packed into datagrams of about this size (below a usual path MTU).
pub const PACK_TARGET: usize = 1400 - HEADER_LEN - TAG_LEN;
/// Bytes of a record's type and length.
pub const RECORD_HEADER: usize = 3;
/// Bytes of one ticket key in a `Keys` record.
pub const KEY_ENTRY_LEN: usize = 16 + 32 + 8;

/// A sender's identity: random per process start.
pub type SenderId = [u8; 8];

/// Record types.
pub mod kind {
    /// A session to store.
    pub const NEW: u8 = 1;
    /// A session to remove.
    pub const DEL: u8 = 2;
    /// Ticket keys.
    pub const KEYS: u8 = 3;
    /// A request for state.
    pub const REQUEST: u8 = 4;
    /// A message of the farm's ACME clients, carried as it is.
    pub const FARM: u8 = 5;
}

/// `Request` flag: send your ticket keys.
pub const WANT_KEYS: u8 = 1;
/// `Request` flag: send your sessions.
pub const WANT_SESSIONS: u8 = 2;

/// Why a datagram was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Larger than [`MAX_DATAGRAM`].
    #[error("oversized")]
    Oversized,
    /// Too short to hold a header and a tag, or records that do not parse.
    #[error("malformed")]
    Malformed,
    /// A version or cipher this code does not speak.
    #[error("unknown version or cipher")]
    Version,
    /// Sent by this process (multicast loops back).
    #[error("sent by this host")]
    Own,
    /// Fails to open: wrong key, or altered on the way.
    #[error("forged or sealed with another key")]
    Forged,
    /// Timestamp older than the window.
    #[error("stale")]
    Stale,
    /// Timestamp later than the window allows.
    #[error("from the future")]
    Future,
    /// A sequence number already seen (or too far behind to tell).
    #[error("replayed")]
    Replay,
    /// Too many live senders to track one more.
    #[error("too many senders")]
    Senders,
}

/// A record that does not decode is a malformed datagram (one counter for them all).
impl From<CodecError> for Reject {
    fn from(_: CodecError) -> Self {
        Reject::Malformed
    }
}

impl Reject {
    /// Every reason, in counter order.
    pub const ALL: [Reject; 9] = [
        Reject::Oversized,
        Reject::Malformed,
        Reject::Version,
        Reject::Own,
        Reject::Forged,
        Reject::Stale,
        Reject::Future,
        Reject::Replay,
        Reject::Senders,
    ];

    /// A short name for counters and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Reject::Oversized => "oversized",
            Reject::Malformed => "malformed",
            Reject::Version => "version",
            Reject::Own => "self",
            Reject::Forged => "forged",
            Reject::Stale => "stale",
            Reject::Future => "future",
            Reject::Replay => "replay",
            Reject::Senders => "senders",
        }
    }

    /// Index in [`Reject::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A record, borrowed from an opened datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// Store this session.
    New {
        /// The session id or stateful ticket.
        key: &'a [u8],
        /// How long ago the sender stored it, ms.
        age_ms: u32,
        /// rustls' encoded session.
        value: &'a [u8],
    },
    /// Remove this session.
    Del {
        /// The session id or stateful ticket.
        key: &'a [u8],
    },
    /// Ticket keys (body is a whole number of entries; see [`keys`]).
    Keys(&'a [u8]),
    /// Send me state.
    Request {
        /// [`WANT_KEYS`] and/or [`WANT_SESSIONS`].
        flags: u8,
    },
    /// A message of the farm's ACME clients (its body, not parsed here).
    Farm(&'a [u8]),
    /// A type this version does not know; skipped.
    Unknown(u8),
}

/// Iterates over the records of an opened datagram; yields `Err` once on the first
/// malformed record and then stops.
pub fn records(mut buf: &[u8]) -> impl Iterator<Item = Result<Record<'_>, Reject>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let parsed = parse_record(buf);
        match parsed {
            Ok((rec, rest)) => {
                buf = rest;
                Some(Ok(rec))
            }
            Err(e) => {
                buf = &[];
                Some(Err(e))
            }
        }
    })
}

fn parse_record(buf: &[u8]) -> Result<(Record<'_>, &[u8]), Reject> {
    let mut r = Reader::new(buf);
    let kind = r.u8("record type")?;
    let body = r.bytes_u16("record")?;
    let rest = r.rest();
    let mut b = Reader::new(body);
    let rec = match kind {
        kind::NEW => {
            let key = b.bytes_u8("session key")?;
            let age_ms = b.u32("session age")?;
            let value = b.rest();
            if key.is_empty() || value.is_empty() {
                return Err(Reject::Malformed);
            }
            Record::New { key, age_ms, value }
        }
        kind::DEL => {
            if body.is_empty() || body.len() > 255 {
                return Err(Reject::Malformed);
            }
            Record::Del { key: body }
        }
        kind::KEYS => {
            if body.is_empty() || body.len() % KEY_ENTRY_LEN != 0 {
                return Err(Reject::Malformed);
            }
            Record::Keys(body)
        }
        kind::REQUEST => {
            let flags = b.u8("request flags")?;
            b.end()?;
            Record::Request { flags }
        }
        kind::FARM if body.is_empty() => return Err(Reject::Malformed),
        kind::FARM => Record::Farm(body),
        other => Record::Unknown(other),
    };
    Ok((rec, rest))
}

/// The keys of a `Keys` record body (a whole number of entries: see [`parse_record`]).
pub fn keys(body: &[u8]) -> impl Iterator<Item = SharedKey> + '_ {
    body.chunks_exact(KEY_ENTRY_LEN).filter_map(|c| {
        let mut r = Reader::new(c);
        Some(SharedKey {
            name: r.array("ticket key name").ok()?,
            secret: r.array("ticket key secret").ok()?,
            retire_at: r.u64("ticket key retirement").ok()?,
        })
    })
}

/// Appends a `New` record; `None` when the key or value cannot be carried.
pub fn push_new(out: &mut Vec<u8>, key: &[u8], age_ms: u32, value: &[u8]) -> Option<()> {
    let klen = u8::try_from(key.len()).ok().filter(|&n| n > 0)?;
    let len = 1 + key.len() + 4 + value.len();
    if value.is_empty() || RECORD_HEADER + len > MAX_PLAINTEXT {
        return None;
    }
    out.push(kind::NEW);
    put_u16(out, u16::try_from(len).ok()?);
    out.push(klen);
    out.extend_from_slice(key);
    put_u32(out, age_ms);
    out.extend_from_slice(value);
    Some(())
}

/// Appends a `Del` record; `None` when the key cannot be carried.
pub fn push_del(out: &mut Vec<u8>, key: &[u8]) -> Option<()> {
    let len = u8::try_from(key.len()).ok().filter(|&n| n > 0)?;
    out.push(kind::DEL);
    put_u16(out, u16::from(len));
    out.extend_from_slice(key);
    Some(())
}

/// Appends `Keys` records for `keys`, as many entries per record as fit in one datagram;
/// returns each record's bytes (one datagram each).
pub fn keys_records(keys: &[SharedKey]) -> Vec<Vec<u8>> {
    let per = (PACK_TARGET - RECORD_HEADER) / KEY_ENTRY_LEN;
    keys.chunks(per)
        .map(|chunk| {
            let mut out = Vec::with_capacity(RECORD_HEADER + chunk.len() * KEY_ENTRY_LEN);
            out.push(kind::KEYS);
            // `per` entries fit in PACK_TARGET, far below u16::MAX.
            put_u16(&mut out, (chunk.len() * KEY_ENTRY_LEN) as u16);
            for k in chunk {
                out.extend_from_slice(&k.name);
                out.extend_from_slice(&k.secret);
                put_u64(&mut out, k.retire_at);
            }
            out
        })
        .collect()
}

/// Appends a `Farm` record; `None` when `body` is empty or does not fit in a datagram.
pub fn push_farm(out: &mut Vec<u8>, body: &[u8]) -> Option<()> {
    if body.is_empty() || RECORD_HEADER + body.len() > MAX_PLAINTEXT {
        return None;
    }
    out.push(kind::FARM);
    put_u16(out, u16::try_from(body.len()).ok()?);
    out.extend_from_slice(body);
    Some(())
}

/// Appends a `Request` record.
pub fn push_request(out: &mut Vec<u8>, flags: u8) {
    out.extend_from_slice(&[kind::REQUEST, 0, 1, flags]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::sync::datagram::{Header, Sealer};

    const ME: SenderId = [1; 8];
    const PEER: SenderId = [2; 8];

    fn header() -> Header {
        Header {
            sender: PEER,
            timestamp: 1_700_000_000_000,
            sequence: 42,
        }
    }

    fn sample_records() -> Vec<u8> {
        let mut r = Vec::new();
        push_new(&mut r, &[7; 32], 1500, b"session value").unwrap();
        push_del(&mut r, &[8; 32]).unwrap();
        r.extend(
            keys_records(&[SharedKey {
                name: [3; 16],
                secret: [4; 32],
                retire_at: 99,
            }])
            .concat(),
        );
        push_request(&mut r, WANT_KEYS | WANT_SESSIONS);
        push_farm(&mut r, b"farm body").unwrap();
        r
    }

    #[test]
    fn seal_open_round_trip() {
        let s = Sealer::new(&[9; 32]).unwrap();
        let mut d = Vec::new();
        s.seal(&header(), &sample_records(), &mut d).unwrap();
        assert!(d.len() <= MAX_DATAGRAM);
        let (h, plain) = s.open(&mut d, &ME).unwrap();
        assert_eq!(h, header());
        let recs: Vec<_> = records(plain).collect::<Result<_, _>>().unwrap();
        assert_eq!(recs.len(), 5);
        assert_eq!(
            recs[0],
            Record::New {
                key: &[7; 32],
                age_ms: 1500,
                value: b"session value"
            }
        );
        assert_eq!(recs[1], Record::Del { key: &[8; 32] });
        let Record::Keys(body) = recs[2] else {
            panic!("{:?}", recs[2])
        };
        let k: Vec<_> = keys(body).collect();
        assert_eq!(
            (k[0].name, k[0].secret, k[0].retire_at),
            ([3; 16], [4; 32], 99)
        );
        assert_eq!(
            recs[3],
            Record::Request {
                flags: WANT_KEYS | WANT_SESSIONS
            }
        );
        assert_eq!(recs[4], Record::Farm(b"farm body"));
    }

    #[test]
    fn every_rejection_of_open() {
        let s = Sealer::new(&[9; 32]).unwrap();
        let mut d = Vec::new();
        s.seal(&header(), b"", &mut d).unwrap();

        assert_eq!(
            s.open(&mut vec![0; MAX_DATAGRAM + 1], &ME).unwrap_err(),
            Reject::Oversized
        );
        assert_eq!(
            s.open(&mut d.clone()[..HEADER_LEN + TAG_LEN - 1], &ME)
                .unwrap_err(),
            Reject::Malformed
        );
        let mut v = d.clone();
        v[0] = 2;
        assert_eq!(s.open(&mut v, &ME).unwrap_err(), Reject::Version);
        let mut v = d.clone();
        v[1] = 7;
        assert_eq!(s.open(&mut v, &ME).unwrap_err(), Reject::Version);
        assert_eq!(s.open(&mut d.clone(), &PEER).unwrap_err(), Reject::Own);
        // Every bit of the authenticated header, nonce and tag matters.
        for i in 2..d.len() {
            let mut v = d.clone();
            v[i] ^= 0x10;
            let r = s.open(&mut v, &ME);
            assert!(
                matches!(r, Err(Reject::Forged | Reject::Own)),
                "byte {i}: {r:?}"
            );
        }
        let other = Sealer::new(&[10; 32]).unwrap();
        assert_eq!(other.open(&mut d.clone(), &ME).unwrap_err(), Reject::Forged);
        assert!(s.open(&mut d, &ME).is_ok());
    }

    #[test]
    fn malformed_records_are_reported_not_panicked_on() {
        let good = sample_records();
        for cut in 0..good.len() {
            // Any truncation either parses as fewer records or ends in one error.
            let out: Vec<_> = records(&good[..cut]).collect();
            let errs = out.iter().filter(|r| r.is_err()).count();
            assert!(errs <= 1);
            if errs == 1 {
                assert!(out.last().unwrap().is_err());
            }
        }
        for bad in [
            &[kind::NEW, 0, 5, 0, 1, 2, 3, 4][..], // key length 0
            &[kind::NEW, 0, 3, 1, 9, 0][..],       // no room for age
            &[kind::DEL, 0, 0][..],                // empty key
            &[kind::KEYS, 0, 3, 1, 2, 3][..],      // not a whole key
            &[kind::REQUEST, 0, 2, 1, 2][..],      // request body of 2
            &[kind::NEW, 0xff, 0xff, 1][..],       // length beyond the buffer
        ] {
            let out: Vec<_> = records(bad).collect();
            assert_eq!(out, [Err(Reject::Malformed)], "{bad:?}");
        }
        let unknown: Vec<_> = records(&[99, 0, 2, 1, 2, kind::REQUEST, 0, 1, 1]).collect();
        assert_eq!(
            unknown,
            [Ok(Record::Unknown(99)), Ok(Record::Request { flags: 1 })]
        );
    }

    #[test]
    fn random_datagrams_never_panic() {
        let s = Sealer::new(&[9; 32]).unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut sealed = Vec::new();
        for _ in 0..20_000 {
            let len = (next() % 300) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len > 2 && next() % 2 == 0 {
                d[0] = VERSION;
                d[1] = CIPHER_AES_256_GCM;
            }
            let _ = s.open(&mut d, &ME);
            let _ = records(&d).count();
            // Records that pass the seal but are garbage must not panic either.
            s.seal(&header(), &d[..d.len().min(MAX_PLAINTEXT)], &mut sealed)
                .unwrap();
            if let Ok((_, plain)) = s.open(&mut sealed, &ME) {
                for r in records(plain) {
                    if let Ok(Record::Keys(b)) = r {
                        let _ = keys(b).count();
                    }
                }
            }
        }
    }

    #[test]
    fn records_that_cannot_be_carried_are_refused() {
        let mut out = Vec::new();
        assert!(push_new(&mut out, &[], 0, b"v").is_none());
        assert!(push_new(&mut out, &[1; 256], 0, b"v").is_none());
        assert!(push_new(&mut out, &[1; 32], 0, &vec![0; MAX_PLAINTEXT]).is_none());
        assert!(push_del(&mut out, &[]).is_none());
        assert!(out.is_empty());
        let many: Vec<SharedKey> = (0..100u8)
            .map(|i| SharedKey {
                name: [i; 16],
                secret: [i; 32],
                retire_at: u64::from(i),
            })
            .collect();
        let recs = keys_records(&many);
        assert!(recs.iter().all(|r| r.len() <= PACK_TARGET));
        let back: Vec<SharedKey> = recs
            .iter()
            .flat_map(|r| match records(r).next() {
                Some(Ok(Record::Keys(b))) => keys(b).collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, many);
    }
}

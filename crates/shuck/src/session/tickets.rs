//! Stateless session tickets (RFC 5077 for TLS 1.2, and TLS 1.3 tickets) under a key ring.
//!
//! The newest key encrypts; older keys still decrypt until they age out. Keys either rotate
//! on a timer (`--ticket-rotate`, each key living two periods) or come from a file that an
//! operator shares across hosts (`--ticket-keys`, HAProxy's tls-ticket-keys format), re-read
//! on SIGHUP. A ticket also carries the time it was issued, so `--session-timeout` bounds
//! tickets as it bounds cached sessions.
//!
//! With replication on (`session::sync`), hosts send each other their timer keys: every
//! host keeps decrypting with the keys of all hosts, so a ticket issued anywhere resumes
//! everywhere. The key that will encrypt next is made one period early, so it reaches the
//! other hosts before any ticket made with it does. Keys from a file are never sent: the
//! file wins.
//!
//! Ticket layout: key name (16) ‖ issued at, unix ms (8) ‖ nonce (12) ‖ AES-256-GCM
//! ciphertext and tag; the name and time are authenticated as associated data.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::error::Unspecified;
use aws_lc_rs::{hkdf, rand};
use base64::Engine;

use crate::clock::unix_ms;
use rustls::server::ProducesTickets;

const NAME_LEN: usize = 16;
const HEADER_LEN: usize = NAME_LEN + 8;
const TAG_LEN: usize = 16;
/// Tickets bigger than this are not ours (rustls' plaintexts are a few hundred bytes).
const MAX_TICKET: usize = 16 * 1024;
/// Clock difference tolerated between hosts sharing a key file.
const CLOCK_SKEW_MS: u64 = 60_000;
/// Bound on a key file, so that a wrong path cannot make shuck read a disk image.
const MAX_KEY_FILE: u64 = 64 * 1024;
/// Most keys in a ring (own and other hosts'); beyond, the soonest to retire are dropped.
const MAX_KEYS: usize = 64;

/// Why a ticket key ring could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum TicketError {
    /// A ticket key file that cannot be used.
    #[error("ticket key file {}{}: {reason}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    BadKeyFile {
        /// The file.
        path: PathBuf,
        /// The line at fault, when one is.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },
    /// The system gave no random bytes for a new key.
    #[error("no randomness for ticket keys")]
    NoRandomness,
    /// The cryptographic library refused to derive a key.
    #[error("cannot derive a ticket key")]
    Derive,
}

/// A timer key as hosts exchange it.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedKey {
    /// The key's name (the first 16 bytes of its tickets).
    pub name: [u8; NAME_LEN],
    /// The key material.
    pub secret: [u8; 32],
    /// Unix ms after which it no longer decrypts.
    pub retire_at: u64,
}

impl std::fmt::Debug for SharedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedKey")
            .field("retire_at", &self.retire_at)
            .finish_non_exhaustive()
    }
}

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

/// Counters of ticket use.
#[derive(Debug, Default)]
pub struct TicketStats {
    /// Tickets issued.
    pub issued: AtomicU64,
    /// Tickets that decrypted (a resumption by ticket, unless rustls then refuses it).
    pub accepted: AtomicU64,
    /// Tickets refused: unknown or retired key, forged, or too old.
    pub refused: AtomicU64,
}

struct TicketKey {
    name: [u8; NAME_LEN],
    key: LessSafeKey,
    /// Unix ms after which the key no longer decrypts (`None`: while it is in the file).
    retire_at: Option<u64>,
    /// The material, kept to send to other hosts (timer keys only).
    secret: Option<[u8; 32]>,
    /// Received from another host: decrypts, never encrypts.
    foreign: bool,
}

impl TicketKey {
    fn random(retire_at: u64) -> Result<Self, TicketError> {
        let mut name = [0u8; NAME_LEN];
        let mut secret = [0u8; 32];
        rand::fill(&mut name).map_err(|_| TicketError::NoRandomness)?;
        rand::fill(&mut secret).map_err(|_| TicketError::NoRandomness)?;
        Ok(TicketKey {
            name,
            key: aead_key(&secret).map_err(|_| TicketError::Derive)?,
            retire_at: Some(retire_at),
            secret: Some(secret),
            foreign: false,
        })
    }

    fn live(&self, now: u64) -> bool {
        self.retire_at.is_none_or(|t| now < t)
    }
}

struct Ring {
    /// Shared between successive rings: a rotation adds a key, it does not copy the others.
    keys: Vec<Arc<TicketKey>>,
    /// Index of the key that encrypts.
    current: usize,
    /// Index of the key that encrypts after the next rotation (timer rotation only).
    next: Option<usize>,
    /// Unix ms at which the current key stops encrypting (timer rotation only).
    rotate_at: Option<u64>,
}

/// Where the keys come from.
#[derive(Debug, Clone)]
enum Source {
    Timer { period: Duration },
    File(PathBuf),
}

/// The ticket producer given to rustls; shared by every worker.
pub struct TicketKeys {
    ring: ArcSwap<Ring>,
    source: Source,
    session_lifetime: Duration,
    /// Use counters.
    pub stats: TicketStats,
    /// Told when the timer ring changes (replication sends the new keys).
    on_change: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// A worker process's ring: the master rotates and [`TicketKeys::install`]s; this one
    /// never rotates by itself, so that every process encrypts with the master's keys.
    follower: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKeys")
            .field("source", &self.source)
            .finish()
    }
}

impl TicketKeys {
    /// Random keys, a new one every `period`, each decrypting for two periods.
    pub fn rotating(period: Duration, session_lifetime: Duration) -> Result<Self, TicketError> {
        let now = unix_ms();
        let ring = Ring::fresh(now, period, None)?;
        Ok(TicketKeys {
            ring: ArcSwap::from_pointee(ring),
            source: Source::Timer { period },
            session_lifetime,
            stats: TicketStats::default(),
            on_change: OnceLock::new(),
            follower: Default::default(),
        })
    }

    /// Keys from an HAProxy-style key file.
    pub fn from_file(path: &Path, session_lifetime: Duration) -> Result<Self, TicketError> {
        let text = read_key_file(path)?;
        Self::from_text(&text, path, session_lifetime)
    }

    /// Keys from a key file's text (the fuzz targets' fixed ring); `name` stands for the
    /// file in errors and in reloads, which read it from disk.
    pub(crate) fn from_text(
        text: &str,
        name: &Path,
        session_lifetime: Duration,
    ) -> Result<Self, TicketError> {
        Ok(TicketKeys {
            ring: ArcSwap::from_pointee(parse_key_file(text, name)?),
            source: Source::File(name.to_owned()),
            session_lifetime,
            stats: TicketStats::default(),
            on_change: OnceLock::new(),
            follower: Default::default(),
        })
    }

    /// The key file, if keys come from one.
    pub fn file(&self) -> Option<&Path> {
        match &self.source {
            Source::File(p) => Some(p),
            Source::Timer { .. } => None,
        }
    }

    /// Re-reads the key file; on error the keys in use stay. Returns how many keys loaded.
    pub fn reload(&self) -> Result<usize, TicketError> {
        let Source::File(path) = &self.source else {
            return Ok(self.ring.load().keys.len());
        };
        let ring = load_file(path)?;
        let n = ring.keys.len();
        self.ring.store(Arc::new(ring));
        Ok(n)
    }

    /// From now on, rotate only when the master says so ([`TicketKeys::install`]).
    pub fn follow(&self) {
        self.follower.store(true, Ordering::Relaxed);
    }

    /// Rotates the timer ring if the current key's period is over; true when it did.
    pub fn rotate_if_due(&self) -> bool {
        let before = Arc::as_ptr(&self.ring.load_full());
        self.rotate_due(unix_ms());
        !std::ptr::eq(before, Arc::as_ptr(&self.ring.load_full()))
    }

    /// The timer ring's own keys and roles, for a worker or a new master; none when keys
    /// come from a file (each process reads it).
    pub fn state(&self) -> Option<RingState> {
        self.file().is_none().then_some(())?;
        let now = unix_ms();
        let ring = self.ring.load();
        let own: Vec<&Arc<TicketKey>> = ring
            .keys
            .iter()
            .filter(|k| !k.foreign && k.live(now))
            .collect();
        let index = |i: Option<usize>| {
            let name = ring.keys.get(i?)?.name;
            own.iter().position(|k| k.name == name)
        };
        Some(RingState {
            current: index(Some(ring.current))?,
            next: index(ring.next),
            rotate_at: ring.rotate_at,
            keys: own
                .iter()
                .filter_map(|k| {
                    Some(SharedKey {
                        name: k.name,
                        secret: k.secret?,
                        retire_at: k.retire_at?,
                    })
                })
                .collect(),
        })
    }

    /// Makes `state` this ring's own keys and roles; keys received from other hosts stay.
    /// Ignored when keys come from a file.
    pub fn install(&self, state: &RingState) {
        if self.file().is_some() || state.current >= state.keys.len() {
            return;
        }
        let Ok(own) = state
            .keys
            .iter()
            .map(|k| {
                Ok::<_, Unspecified>(Arc::new(TicketKey {
                    name: k.name,
                    key: aead_key(&k.secret)?,
                    retire_at: Some(k.retire_at),
                    secret: Some(k.secret),
                    foreign: false,
                }))
            })
            .collect::<Result<Vec<_>, _>>()
        else {
            return;
        };
        self.ring.rcu(|r| {
            let mut keys = own.clone();
            keys.extend(
                r.keys
                    .iter()
                    .filter(|k| k.foreign && !own.iter().any(|o| o.name == k.name))
                    .cloned(),
            );
            Arc::new(Ring {
                keys,
                current: state.current,
                next: state.next,
                rotate_at: state.rotate_at,
            })
        });
        if let Some(f) = self.on_change.get() {
            f();
        }
    }

    /// Calls `f` after every rotation of the timer ring (once set, for the process's life).
    pub fn set_on_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_change.set(f);
    }

    /// The live timer keys (own and received), to send to other hosts; none when keys come
    /// from a file.
    pub fn export(&self) -> Vec<SharedKey> {
        let now = unix_ms();
        self.ring
            .load()
            .keys
            .iter()
            .filter(|k| k.live(now))
            .filter_map(|k| {
                Some(SharedKey {
                    name: k.name,
                    secret: k.secret?,
                    retire_at: k.retire_at?,
                })
            })
            .collect()
    }

    /// Adds keys received from another host (decrypt only). Ignored when keys come from a
    /// file. Returns how many were new.
    pub fn merge(&self, received: &[SharedKey]) -> usize {
        self.merge_at(received, unix_ms())
    }

    fn merge_at(&self, received: &[SharedKey], now: u64) -> usize {
        if self.file().is_some() {
            return 0;
        }
        let mut added = 0;
        self.ring.rcu(|r| {
            let fresh: Vec<&SharedKey> = received
                .iter()
                .filter(|k| now < k.retire_at && !r.keys.iter().any(|o| o.name == k.name))
                .collect();
            added = fresh.len();
            if fresh.is_empty() {
                return Arc::clone(r);
            }
            let mut keys = r.keys.clone();
            keys.extend(fresh.into_iter().filter_map(|k| {
                Some(Arc::new(TicketKey {
                    name: k.name,
                    key: aead_key(&k.secret).ok()?,
                    retire_at: Some(k.retire_at),
                    secret: Some(k.secret),
                    foreign: true,
                }))
            }));
            // Over the bound, drop the received keys that retire soonest; own keys stay (at
            // the front: the current and next indices do not move).
            while keys.len() > MAX_KEYS {
                let Some(victim) = keys
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.foreign)
                    .min_by_key(|(_, k)| k.retire_at)
                    .map(|(i, _)| i)
                else {
                    break;
                };
                keys.remove(victim);
            }
            Arc::new(Ring::with_keys(keys, r))
        });
        added
    }

    /// Starts a new encrypting key if the current one's period is over (not in a worker
    /// process: its master rotates).
    fn maybe_rotate(&self, now: u64) {
        if self.follower.load(Ordering::Relaxed) {
            return;
        }
        self.rotate_due(now);
    }

    fn rotate_due(&self, now: u64) {
        let Source::Timer { period } = self.source else {
            return;
        };
        let due = |r: &Ring| r.rotate_at.is_some_and(|t| now >= t);
        if !due(&self.ring.load()) {
            return;
        }
        self.ring.rcu(|r| {
            if !due(r) {
                return Arc::clone(r);
            }
            match Ring::fresh(now, period, Some(r)) {
                Ok(next) => Arc::new(next),
                // No randomness: keep the old key rather than stop issuing tickets.
                Err(_) => Arc::clone(r),
            }
        });
        if let Some(f) = self.on_change.get() {
            f();
        }
    }

    fn seal(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        self.maybe_rotate(now);
        let ring = self.ring.load();
        let key = ring.keys.get(ring.current)?;
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(HEADER_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&key.name);
        out.extend_from_slice(&now.to_be_bytes());
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&out[..HEADER_LEN]),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        self.stats.issued.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    fn open(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        let r = self.try_open(ticket, now);
        let counter = if r.is_some() {
            &self.stats.accepted
        } else {
            &self.stats.refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r
    }

    fn try_open(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < HEADER_LEN + NONCE_LEN + TAG_LEN || ticket.len() > MAX_TICKET {
            return None;
        }
        let (header, rest) = ticket.split_at(HEADER_LEN);
        let (name, issued) = header.split_at(NAME_LEN);
        let issued = u64::from_be_bytes(issued.try_into().ok()?);
        if issued > now + CLOCK_SKEW_MS
            || now.saturating_sub(issued) >= self.session_lifetime.as_millis() as u64
        {
            return None;
        }
        let ring = self.ring.load();
        let key = ring.keys.iter().find(|k| k.name[..] == *name)?;
        if !key.live(now) {
            return None;
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        let plain_len = key
            .key
            .open_in_place(nonce, Aad::from(header), &mut body)
            .ok()?
            .len();
        body.truncate(plain_len);
        Some(body)
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        let life = match self.source {
            // A ticket cannot outlive its key.
            Source::Timer { period } => self.session_lifetime.min(period * 2),
            Source::File(_) => self.session_lifetime,
        };
        u32::try_from(life.as_secs()).unwrap_or(u32::MAX).max(1)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(plain, unix_ms())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open(cipher, unix_ms())
    }
}

impl Ring {
    /// The ring after a rotation at `now`: the key announced a period ago (or a new one)
    /// encrypts until `now + period` and decrypts one period more; a new key is announced
    /// for the next period; the keys of `previous` that have not retired still decrypt.
    fn fresh(now: u64, period: Duration, previous: Option<&Ring>) -> Result<Ring, TicketError> {
        let p = period.as_millis() as u64;
        let announced = previous
            .and_then(|r| r.next.and_then(|i| r.keys.get(i)))
            .filter(|k| k.live(now))
            .cloned();
        let current = match announced {
            Some(k) => k,
            None => Arc::new(TicketKey::random(now.saturating_add(p.saturating_mul(2)))?),
        };
        let next = Arc::new(TicketKey::random(now.saturating_add(p.saturating_mul(3)))?);
        let mut keys = vec![current, next];
        if let Some(prev) = previous {
            keys.extend(
                prev.keys
                    .iter()
                    .filter(|k| k.live(now) && !keys.iter().any(|o| o.name == k.name))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        Ok(Ring {
            keys,
            current: 0,
            next: Some(1),
            rotate_at: Some(now.saturating_add(p)),
        })
    }

    /// `old`'s roles over a new key list in which `old`'s keys keep their positions.
    fn with_keys(keys: Vec<Arc<TicketKey>>, old: &Ring) -> Ring {
        Ring {
            keys,
            current: old.current,
            next: old.next,
            rotate_at: old.rotate_at,
        }
    }
}

fn aead_key(secret: &[u8]) -> Result<LessSafeKey, Unspecified> {
    // HKDF so that any key material (HAProxy's 48 or 80 bytes) yields one AES-256-GCM key.
    derive_aes_256_gcm(b"shuck tls ticket key v1", secret)
}

/// An AES-256-GCM key derived from `secret` with HKDF-SHA256 under `salt` (info
/// "aes-256-gcm"): key material from files is never used as a cipher key directly. The
/// library reports failure only for output lengths past 255 hashes, never for one key.
pub(crate) fn derive_aes_256_gcm(salt: &[u8], secret: &[u8]) -> Result<LessSafeKey, Unspecified> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
    let okm = prk.expand(&[b"aes-256-gcm"], &AES_256_GCM)?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

/// Reads an HAProxy tls-ticket-keys file (see [`parse_key_file`]).
fn load_file(path: &Path) -> Result<Ring, TicketError> {
    parse_key_file(&read_key_file(path)?, path)
}

fn read_key_file(path: &Path) -> Result<String, TicketError> {
    crate::system::files::read_to_string(path, MAX_KEY_FILE, "a key file").map_err(|e| {
        TicketError::BadKeyFile {
            path: path.to_owned(),
            line: None,
            reason: e.to_string(),
        }
    })
}

/// Parses an HAProxy tls-ticket-keys file's `text` (read from `path`, named in errors):
/// one base64 key per line (48 or 80 bytes, all the same length), `#` comments and blank
/// lines ignored. Every key decrypts; the second-to-last encrypts (HAProxy's rule: the last
/// is the next key, already distributed), or the only one when there is one.
fn parse_key_file(text: &str, path: &Path) -> Result<Ring, TicketError> {
    let bad = |line: Option<usize>, reason: String| TicketError::BadKeyFile {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut keys = Vec::new();
    let mut first_len = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(line)
            .map_err(|e| bad(Some(line_no), format!("not base64: {e}")))?;
        if raw.len() != 48 && raw.len() != 80 {
            return Err(bad(
                Some(line_no),
                format!("a key is 48 or 80 bytes, this one is {}", raw.len()),
            ));
        }
        match first_len {
            None => first_len = Some(raw.len()),
            Some(n) if n != raw.len() => {
                return Err(bad(
                    Some(line_no),
                    format!(
                        "{}-byte key after {n}-byte keys; do not mix lengths",
                        raw.len()
                    ),
                ));
            }
            Some(_) => {}
        }
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&raw[..NAME_LEN]);
        keys.push(Arc::new(TicketKey {
            name,
            key: aead_key(&raw[NAME_LEN..])
                .map_err(|_| bad(Some(line_no), "cannot derive a key from it".into()))?,
            retire_at: None,
            secret: None,
            foreign: false,
        }));
    }
    if keys.is_empty() {
        return Err(bad(
            None,
            "holds no key (one base64 key of 48 or 80 bytes per line)".into(),
        ));
    }
    let current = keys.len().saturating_sub(2);
    Ok(Ring {
        keys,
        current,
        next: None,
        rotate_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn roundtrip_and_forgery() {
        let t = TicketKeys::rotating(HOUR, HOUR).unwrap();
        let now = unix_ms();
        let ticket = t.seal(b"session state", now).unwrap();
        assert_eq!(t.open(&ticket, now + 1000).unwrap(), b"session state");
        for i in [
            0,
            NAME_LEN,
            HEADER_LEN,
            HEADER_LEN + NONCE_LEN,
            ticket.len() - 1,
        ] {
            let mut forged = ticket.clone();
            forged[i] ^= 1;
            assert!(
                t.open(&forged, now).is_none(),
                "byte {i} flipped still opens"
            );
        }
        assert!(t.open(&ticket[..20], now).is_none());
        assert!(t.open(&[], now).is_none());
        let other = TicketKeys::rotating(HOUR, HOUR).unwrap();
        assert!(other.open(&ticket, now).is_none());
    }

    #[test]
    fn rotation_keeps_the_previous_key_until_it_ages_out() {
        let period = Duration::from_secs(10);
        let t = TicketKeys::rotating(period, HOUR).unwrap();
        let t0 = unix_ms();
        let k_ticket = t.seal(b"k", t0).unwrap();
        // One period later: a new key encrypts, the old one still decrypts.
        let t1 = t0 + 10_500;
        let new_ticket = t.seal(b"k2", t1).unwrap();
        assert_ne!(
            k_ticket[..NAME_LEN],
            new_ticket[..NAME_LEN],
            "no rotation happened"
        );
        assert_eq!(t.open(&k_ticket, t1).unwrap(), b"k");
        // Two periods after K was made, it is retired.
        assert!(t.open(&k_ticket, t0 + 20_500).is_none());
        assert_eq!(t.open(&new_ticket, t0 + 20_500).unwrap(), b"k2");
        // After a long pause the ring holds no retired key: the current and the next.
        t.seal(b"k3", t0 + 100_000).unwrap();
        assert_eq!(t.ring.load().keys.len(), 2);
        assert_eq!(t.lifetime(), 20);
    }

    #[test]
    fn the_next_key_is_exported_a_period_before_it_encrypts() {
        let period = Duration::from_secs(10);
        let a = TicketKeys::rotating(period, HOUR).unwrap();
        let b = TicketKeys::rotating(period, HOUR).unwrap();
        let t0 = unix_ms();
        let changes = Arc::new(AtomicU64::new(0));
        let seen = changes.clone();
        a.set_on_change(Box::new(move || {
            seen.fetch_add(1, Ordering::Relaxed);
        }));
        // B learns A's keys (current and next) once, before A rotates.
        let exported = a.export();
        assert_eq!(exported.len(), 2);
        assert_eq!(b.merge_at(&exported, t0), 2);
        assert_eq!(b.merge_at(&exported, t0), 0, "merging twice adds nothing");
        let before = a.seal(b"before", t0).unwrap();
        let after = a.seal(b"after", t0 + 10_500).unwrap();
        assert_eq!(changes.load(Ordering::Relaxed), 1);
        assert_ne!(before[..NAME_LEN], after[..NAME_LEN]);
        // Both decrypt on B without another exchange; B never encrypts with A's keys.
        assert_eq!(b.open(&before, t0 + 10_600).unwrap(), b"before");
        assert_eq!(b.open(&after, t0 + 10_600).unwrap(), b"after");
        let own = b.seal(b"b", t0 + 1).unwrap();
        assert!(exported.iter().all(|k| k.name[..] != own[..NAME_LEN]));
        // Received keys retire as their sender said.
        assert!(b.open(&before, t0 + 20_500).is_none());
    }

    #[test]
    fn received_keys_are_bounded_and_files_win() {
        let t = TicketKeys::rotating(HOUR, HOUR).unwrap();
        let now = unix_ms();
        let many: Vec<SharedKey> = (0..200u64)
            .map(|i| SharedKey {
                name: [(i % 256) as u8; NAME_LEN],
                secret: [1; 32],
                retire_at: now + 1000 + i,
            })
            .chain([SharedKey {
                name: [0xee; NAME_LEN],
                secret: [1; 32],
                retire_at: now - 1,
            }])
            .collect();
        t.merge_at(&many, now);
        let ring = t.ring.load();
        assert_eq!(ring.keys.len(), MAX_KEYS);
        assert!(
            ring.keys.iter().all(|k| k.name != [0xee; NAME_LEN]),
            "retired key kept"
        );
        assert!(!ring.keys[ring.current].foreign && !ring.keys[1].foreign);
        drop(ring);
        let p = write("wins", &format!("{}\n", b64(&[1u8; 80])));
        let f = TicketKeys::from_file(&p, HOUR).unwrap();
        assert_eq!(f.merge_at(&many, now), 0);
        assert!(f.export().is_empty());
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_follower_encrypts_with_the_installed_ring_and_never_rotates_alone() {
        let period = Duration::from_secs(10);
        let master = TicketKeys::rotating(period, HOUR).unwrap();
        let worker = TicketKeys::rotating(period, HOUR).unwrap();
        worker.follow();
        worker.install(&master.state().unwrap());
        let t0 = unix_ms();
        let ticket = worker.seal(b"w", t0).unwrap();
        assert_eq!(master.open(&ticket, t0).unwrap(), b"w");
        // Past the period the follower still encrypts with the installed key.
        let later = worker.seal(b"w2", t0 + 11_000).unwrap();
        assert_eq!(later[..NAME_LEN], ticket[..NAME_LEN]);
        // The master rotates; once installed, the worker encrypts with the new key and
        // still opens tickets made before.
        master.rotate_due(t0 + 11_000);
        worker.install(&master.state().unwrap());
        let after = worker.seal(b"w3", t0 + 11_000).unwrap();
        assert_ne!(after[..NAME_LEN], ticket[..NAME_LEN]);
        assert_eq!(master.open(&after, t0 + 11_000).unwrap(), b"w3");
        assert_eq!(worker.open(&ticket, t0 + 11_000).unwrap(), b"w");
        assert!(worker.state().is_some());
    }

    #[test]
    fn session_lifetime_bounds_tickets() {
        let t = TicketKeys::rotating(HOUR, Duration::from_secs(5)).unwrap();
        let now = unix_ms();
        let ticket = t.seal(b"s", now).unwrap();
        assert!(t.open(&ticket, now + 4_000).is_some());
        assert!(t.open(&ticket, now + 5_000).is_none());
        assert!(
            t.open(&ticket, now - CLOCK_SKEW_MS - 1).is_none(),
            "from the future"
        );
        assert_eq!(t.lifetime(), 5);
    }

    fn write(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("shuck-keys-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn key_file_second_to_last_encrypts_and_all_decrypt() {
        let k1 = b64(&[1u8; 80]);
        let k2 = b64(&[2u8; 80]);
        let k3 = b64(&[3u8; 80]);
        let p = write("three", &format!("# comment\n{k1}\n\n{k2}\n{k3}\n"));
        let t = TicketKeys::from_file(&p, HOUR).unwrap();
        let now = unix_ms();
        let ticket = t.seal(b"x", now).unwrap();
        assert_eq!(&ticket[..NAME_LEN], &[2u8; 16]);
        // A host with only the old and new keys still reads tickets of each.
        let p1 = write("one", &format!("{k1}\n"));
        let only1 = TicketKeys::from_file(&p1, HOUR).unwrap();
        assert!(t.open(&only1.seal(b"y", now).unwrap(), now).is_some());
        let p48 = write("48", &format!("{}\n", b64(&[9u8; 48])));
        assert!(TicketKeys::from_file(&p48, HOUR).is_ok());
        for p in [p, p1, p48] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn bad_key_files_name_the_line() {
        let good = b64(&[1u8; 80]);
        for (text, line, needle) in [
            (format!("{good}\nnot base64!\n"), Some(2), "base64"),
            (format!("{good}\n{}\n", b64(&[1u8; 47])), Some(2), "47"),
            (format!("{good}\n{}\n", b64(&[1u8; 48])), Some(2), "mix"),
            ("# only a comment\n".to_string(), None, "no key"),
        ] {
            let p = write("bad", &text);
            let e = TicketKeys::from_file(&p, HOUR).unwrap_err();
            let msg = e.to_string();
            match e {
                TicketError::BadKeyFile { line: l, .. } => assert_eq!(l, line, "{msg}"),
                other => panic!("{other}"),
            }
            assert!(msg.contains(needle), "{msg}");
            let _ = std::fs::remove_file(p);
        }
    }
}

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
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use aws_lc_rs::error::Unspecified;
use aws_lc_rs::rand;

use super::aead::derive_aes_256_gcm;
use crate::clock::unix_ms;

mod key_file;
mod ring_state;

use key_file::{load_file, parse_key_file, read_key_file};
pub use ring_state::RingState;
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

    /// Rotates the timer ring now (the admin API's `POST /tickets/rotate`): the key
    /// announced for the next period encrypts from now on, tickets under the others still
    /// resume. False when keys come from a file, which only the file changes.
    pub fn rotate_now(&self) -> bool {
        let Source::Timer { period } = self.source else {
            return false;
        };
        let now = unix_ms();
        self.ring
            .rcu(|r| Ring::fresh(now, period, Some(r)).map_or_else(|_| Arc::clone(r), Arc::new));
        if let Some(f) = self.on_change.get() {
            f();
        }
        true
    }

    /// The name of the key that encrypts now, in hex.
    pub fn current_name(&self) -> Option<String> {
        let ring = self.ring.load();
        let k = ring.keys.get(ring.current)?;
        Some(k.name.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Keys that decrypt now.
    pub fn key_count(&self) -> usize {
        self.ring.load().keys.len()
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

#[cfg(test)]
mod tests;

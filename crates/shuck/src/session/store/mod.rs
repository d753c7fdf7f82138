//! Level 3 of session resumption: farm state in Redis (or Valkey), as Apache httpd's
//! `mod_socache_redis` keeps it (`--shared-store`). Sessions (TLS 1.2 session IDs, TLS 1.3
//! stateful tickets) and the ticket key ring live there, sealed ([`seal`]), so every host
//! pointing at the same store resumes every other host's clients.
//!
//! Handshakes never wait on a write: the local cache's sink queues each new session, and
//! the store's thread (`task.rs`) writes it. A lookup happens only on a local miss, before
//! the handshake goes on (rustls asks its store synchronously), and waits at most
//! `--shared-store-timeout`; past it, or while the store is unreachable, the handshake is a
//! full one. A single-use TLS 1.3 ticket is taken with GETDEL: one resumption farm-wide.
//!
//! The ticket ring: one host at a time holds a lock with an expiry and rotates; every host
//! reads the ring on a notification and periodically. While the store is unreachable, each
//! host rotates its own ring, so tickets keep working on it.

mod clients;
pub mod seal;
pub mod stats;
mod task;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::session::tickets::TicketKeys;
use crate::session::{SessionCache, SessionSink};
use seal::Sealer;
use stats::{Op, Outcome, StoreStats};

/// Requests waiting for the store's thread; beyond, writes are dropped and counted, and
/// lookups do not wait.
const QUEUE: usize = 4096;

/// `--shared-store*`, validated.
#[derive(Clone)]
pub struct Settings {
    /// The URL as given, without a password (for logs).
    pub url: String,
    /// Where and how to connect, with the password from `--shared-store-auth-file`.
    pub connection: redis::ConnectionInfo,
    /// `--shared-store-ca`: PEM roots for a rediss:// server.
    pub ca: Option<Vec<u8>>,
    /// Prefix of every key written.
    pub prefix: String,
    /// The most a handshake waits for a lookup.
    pub timeout: Duration,
    /// The farm key (`--shared-cache-key`) that seals every value.
    pub key: [u8; 32],
}

impl Settings {
    /// A loopback store under a fixed farm key: the unit tests' and the fuzz target's.
    pub(crate) fn fixture(url: &str) -> Option<Settings> {
        Some(Settings {
            url: url.to_owned(),
            connection: redis::IntoConnectionInfo::into_connection_info(url).ok()?,
            ca: None,
            prefix: "shuck:".into(),
            timeout: Duration::from_millis(5),
            key: [7; 32],
        })
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why the store cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The client refused the settings (a TLS root that does not parse, ...).
    #[error("--shared-store {url}: {reason}")]
    Client {
        /// The URL.
        url: String,
        /// The client's reason.
        reason: String,
    },
    /// The thread could not start.
    #[error("--shared-store: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// A session, stored `age` ago.
    Found {
        /// rustls' encoded session.
        value: Vec<u8>,
        /// Its age.
        age: Duration,
    },
    /// The store answered: no such session (for a ticket: used already, or never stored).
    Absent,
    /// No answer in time, or the store is unreachable.
    Unavailable,
}

enum Request {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        stored_ms: u64,
    },
    Get {
        key: Vec<u8>,
        take: bool,
        reply: Reply,
    },
}

/// Where a lookup's answer goes: a handshake's task awaiting it, or a thread blocked on it.
enum Reply {
    Task(oneshot::Sender<Lookup>),
    Thread(std::sync::mpsc::SyncSender<Lookup>),
}

impl Reply {
    fn send(self, found: Lookup) {
        // Nobody waits any more past the timeout: the answer is dropped.
        match self {
            Reply::Task(t) => drop(t.send(found)),
            Reply::Thread(t) => drop(t.try_send(found)),
        }
    }
}

/// The shared store as the process holds it: made with the configuration (in the master
/// too, which never starts it), started in the worker by [`SharedStore::start`].
pub struct SharedStore {
    settings: Settings,
    client: redis::Client,
    sealer: Sealer,
    lifetime: Duration,
    /// Counters, for `--stats`.
    pub stats: StoreStats,
    link: OnceLock<mpsc::Sender<Request>>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The running store thread; dropping it stops the thread.
#[derive(Debug)]
pub struct StoreThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for StoreThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl SharedStore {
    /// The store of `settings`, for sessions living `lifetime`: checked (TLS roots, key
    /// derivation), not connected.
    pub fn new(settings: Settings, lifetime: Duration) -> Result<Self, StoreError> {
        Ok(SharedStore {
            sealer: Sealer::new(&settings.key).ok_or_else(|| StoreError::Client {
                url: settings.url.clone(),
                reason: "cannot derive the sealing key".into(),
            })?,
            client: task::client(&settings)?,
            settings,
            lifetime,
            stats: StoreStats::default(),
            link: OnceLock::new(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Starts the store's thread: local sessions go to the store from now on, lookups are
    /// answered, and the ticket ring is kept in the store. Once per process.
    /// With `clients`, the farm's client counts and bans are exchanged at its interval.
    pub fn start(
        self: &Arc<Self>,
        cache: Option<Arc<SessionCache>>,
        tickets: Option<Arc<TicketKeys>>,
        clients: Option<(Arc<crate::clients::Clients>, Duration)>,
    ) -> Result<StoreThread, StoreError> {
        let client = self.client.clone();
        let (tx, rx) = mpsc::channel(QUEUE);
        let _ = self.link.set(tx.clone());
        if let Some(c) = &cache {
            c.add_sink(Arc::new(Writer {
                tx,
                store: self.clone(),
            }));
        }
        let (stop, stopped) = oneshot::channel();
        let store = self.clone();
        let thread = std::thread::Builder::new()
            .name("shuck-store".into())
            .spawn(move || task::run(store, client, rx, stopped, tickets, clients))
            .map_err(StoreError::Thread)?;
        Ok(StoreThread {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Whether the store answered last time it was asked.
    pub fn is_up(&self) -> bool {
        self.stats.up.load(Relaxed) == 1
    }

    /// Asks the store for a session, waiting at most `--shared-store-timeout`.
    pub async fn lookup(&self, key: &[u8], take: bool) -> Lookup {
        let op = if take { Op::Take } else { Op::Get };
        let Some(tx) = self.link.get() else {
            return Lookup::Unavailable;
        };
        if !self.is_up() {
            self.stats.count(op, Outcome::Skipped);
            return Lookup::Unavailable;
        }
        let (reply, answer) = oneshot::channel();
        let sent = tx.try_send(Request::Get {
            key: key.to_vec(),
            take,
            reply: Reply::Task(reply),
        });
        if sent.is_err() {
            self.stats.count(op, Outcome::Skipped);
            return Lookup::Unavailable;
        }
        let started = Instant::now();
        let got = tokio::time::timeout(self.settings.timeout, answer).await;
        self.stats.observe(started.elapsed());
        match got {
            Ok(Ok(found)) => found,
            Ok(Err(_)) => Lookup::Unavailable,
            Err(_) => {
                self.stats.count(op, Outcome::Timeout);
                Lookup::Unavailable
            }
        }
    }

    /// Takes a session now, blocking the calling thread at most `--shared-store-timeout`:
    /// rustls's own take for QUIC's handshakes, whose ClientHello quinn reads before shuck
    /// could prefetch, so that a ticket (and its 0-RTT) is used once farm-wide.
    pub fn take_blocking(&self, key: &[u8]) -> Lookup {
        let Some(tx) = self.link.get() else {
            return Lookup::Unavailable;
        };
        if !self.is_up() {
            self.stats.count(Op::Take, Outcome::Skipped);
            return Lookup::Unavailable;
        }
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let sent = tx.try_send(Request::Get {
            key: key.to_vec(),
            take: true,
            reply: Reply::Thread(reply),
        });
        if sent.is_err() {
            self.stats.count(Op::Take, Outcome::Skipped);
            return Lookup::Unavailable;
        }
        let started = Instant::now();
        let got = answer.recv_timeout(self.settings.timeout);
        self.stats.observe(started.elapsed());
        match got {
            Ok(found) => found,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Lookup::Unavailable,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.stats.count(Op::Take, Outcome::Timeout);
                Lookup::Unavailable
            }
        }
    }

    /// Before a handshake: brings into `cache` the sessions the ClientHello offers that
    /// the cache lacks. `session_id` is a TLS 1.2 session ID, looked up when not held
    /// here; `tickets` are TLS 1.3 stateful tickets, always taken from the store (that is
    /// what makes them single-use farm-wide): found, the session is put in the cache for
    /// rustls to take; known gone, the local copy goes too; unanswered, the local copy is
    /// used if there is one.
    pub async fn prefetch(
        &self,
        cache: &SessionCache,
        session_id: Option<&[u8]>,
        tickets: &[Vec<u8>],
    ) {
        if let Some(id) = session_id.filter(|id| !cache.contains(id)) {
            if let Lookup::Found { value, age } = self.lookup(id, false).await {
                cache.insert_replicated(id.to_vec(), value, age);
            }
        }
        for id in tickets {
            match self.lookup(id, true).await {
                Lookup::Found { value, age } => {
                    cache.insert_replicated(id.to_vec(), value, age);
                }
                Lookup::Absent => {
                    cache.remove_replicated(id);
                }
                Lookup::Unavailable => {}
            }
        }
    }

    /// The store's name of a session's entry.
    pub(crate) fn session_name(&self, key: &[u8]) -> Vec<u8> {
        let mut name = Vec::with_capacity(self.settings.prefix.len() + 8 + key.len() * 2);
        name.extend_from_slice(self.settings.prefix.as_bytes());
        name.extend_from_slice(b"session:");
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for b in key {
            name.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
        name
    }

    /// A session as stored: stored at (unix ms, 8) ‖ rustls' value, sealed for its name.
    fn seal_session(&self, name: &[u8], value: &[u8], stored_ms: u64) -> Option<Vec<u8>> {
        let mut plain = Vec::with_capacity(8 + value.len());
        plain.extend_from_slice(&stored_ms.to_be_bytes());
        plain.extend_from_slice(value);
        self.sealer.seal(name, &plain)
    }

    /// A stored session opened: its value and age, or `None` when it does not open under
    /// the farm key or has outlived `--session-timeout`.
    fn open_session(&self, name: &[u8], sealed: &[u8], now_ms: u64) -> Option<(Vec<u8>, Duration)> {
        let mut plain = self.sealer.open(name, sealed)?;
        let stored = u64::from_be_bytes(plain.get(..8)?.try_into().ok()?);
        let age = Duration::from_millis(now_ms.saturating_sub(stored));
        plain.drain(..8);
        Some((plain, age))
    }
}

/// The local cache's sink: queues every new session for the store, never blocking the
/// handshake that made it.
struct Writer {
    tx: mpsc::Sender<Request>,
    store: Arc<SharedStore>,
}

impl SessionSink for Writer {
    fn stored(&self, key: &[u8], value: &[u8]) {
        let r = self.tx.try_send(Request::Put {
            key: key.to_vec(),
            value: value.to_vec(),
            stored_ms: crate::clock::unix_ms(),
        });
        if r.is_err() {
            self.store.stats.count(Op::Put, Outcome::Skipped);
        }
    }

    fn removed(&self, _key: &[u8]) {
        // A ticket rustls takes here was taken from the store first (GETDEL in
        // `prefetch`, sent even when its answer comes too late), or the store was down
        // and a DEL would fail too.
    }
}

/// A value as read from the store, opened as a session and as the ticket ring under
/// `store`'s farm key (the fuzz target's entry point).
pub(crate) fn open_any(store: &SharedStore, name: &[u8], data: &[u8]) {
    let _ = store.open_session(name, data, crate::clock::unix_ms());
    let _ = task::open_ring(store, data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_only_under_their_own_name_and_age() {
        let settings = Settings::fixture("redis://127.0.0.1:6379").unwrap();
        let store = SharedStore::new(settings, Duration::from_secs(300)).unwrap();
        let name = store.session_name(&[0xab, 0x01]);
        assert_eq!(name, b"shuck:session:ab01");
        let sealed = store.seal_session(&name, b"rustls value", 1_000).unwrap();
        let (value, age) = store.open_session(&name, &sealed, 3_500).unwrap();
        assert_eq!(
            (value.as_slice(), age),
            (&b"rustls value"[..], Duration::from_millis(2_500))
        );
        let other = store.session_name(&[0xab, 0x02]);
        assert!(store.open_session(&other, &sealed, 3_500).is_none());
    }
}

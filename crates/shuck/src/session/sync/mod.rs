//! Level 2 of session resumption: replication between the hosts of a farm over UDP, so a
//! client resumes on any host (stud's `-U`/`-P`/`-M`, sealed this time).
//!
//! Every session a local handshake stores goes to the peers as `New`; a single-use TLS 1.3
//! ticket, once used, goes as `Del`; timer ticket keys go as `Keys` on every rotation, every
//! [`KEYS_EVERY`] and on request. A host that starts asks its peers for their keys and
//! sessions (`Request`). Datagrams are sealed, timestamped and numbered ([`wire`],
//! [`replay`]); anything else is dropped and counted by reason.
//!
//! Handshakes never wait on it: the cache hands records to a bounded queue without
//! blocking (`Outbox`; a full queue drops and counts), one thread packs and sends them, and
//! another receives.

pub mod datagram;
pub mod net;
pub mod psk;
mod recv;
pub mod replay;
mod send;
pub mod wire;

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use aws_lc_rs::rand;

use crate::session::tickets::TicketKeys;
use crate::session::SessionCache;
use datagram::Sealer;
use recv::receive_loop;
use send::{Outbox, Outgoing, Sender};
use wire::{Reject, SenderId};

/// How often a host sends its ticket keys unasked (datagrams can be lost).
pub const KEYS_EVERY: Duration = Duration::from_secs(10);
/// Records waiting to be sent; beyond, new ones are dropped and counted.
const QUEUE: usize = 8192;
/// Live senders tracked for replay protection.
const MAX_SENDERS: usize = 4096;
/// Under load (more than [`HOT_RECORDS`] records in a [`HOT_PERIOD`]), records gather for
/// this long after a send before the next one: many records share a datagram and a
/// wake-up, and the handshakes that queue them make no system call (the sending thread is
/// asleep, not waiting on the queue). Below that rate a record goes out at once, so a
/// client that reconnects at once to another host finds its session there.
const BATCH_WINDOW: Duration = Duration::from_millis(2);
const HOT_PERIOD: Duration = Duration::from_millis(100);
const HOT_RECORDS: u64 = 100;
/// How often the threads look at the stop flag.
const POLL: Duration = Duration::from_millis(200);
/// A session dump pauses this long every [`DUMP_BURST`] datagrams, so the requester's
/// socket buffer keeps up.
const DUMP_PAUSE: Duration = Duration::from_millis(1);
const DUMP_BURST: usize = 32;

/// `-M IFACE[,TTL]`: where multicast goes out and how far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastIf {
    /// Interface name.
    pub name: String,
    /// Multicast TTL (IPv4) or hop limit (IPv6).
    pub ttl: u32,
}

impl MulticastIf {
    /// Parses `IFACE[,TTL]`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, ttl) = match spec.split_once(',') {
            Some((n, t)) => {
                let ttl: u32 = t
                    .trim()
                    .parse()
                    .ok()
                    .filter(|t| (1..=255).contains(t))
                    .ok_or_else(|| format!("TTL {t:?} is not a number from 1 to 255"))?;
                (n.trim(), ttl)
            }
            None => (spec.trim(), 1),
        };
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ']) {
            return Err(format!("{name:?} is not an interface name"));
        }
        Ok(MulticastIf {
            name: name.to_owned(),
            ttl,
        })
    }
}

/// Replication settings, validated.
#[derive(Clone)]
pub struct Settings {
    /// Where to receive (and send from).
    pub listen: SocketAddr,
    /// Where to send: unicast hosts and multicast groups.
    pub peers: Vec<SocketAddr>,
    /// The multicast interface.
    pub iface: Option<MulticastIf>,
    /// The pre-shared key.
    pub key: [u8; 32],
    /// Datagrams older or newer than this are dropped.
    pub window: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("iface", &self.iface)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Why replication cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The key file.
    #[error("--shared-cache-key {}: {reason}", path.display())]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The listen address.
    #[error("--shared-cache-listen {addr}: cannot bind: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// Another socket operation.
    #[error("replication socket on {addr}: cannot {what}: {source}")]
    Socket {
        /// What was attempted.
        what: &'static str,
        /// The listen address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// The multicast interface.
    #[error("--shared-cache-if {name}: {reason}")]
    Interface {
        /// The name given.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A multicast group that cannot be joined.
    #[error("--shared-cache-peer {group}: cannot join the multicast group: {source}")]
    Join {
        /// The group.
        group: IpAddr,
        /// The system's reason.
        source: io::Error,
    },
}

/// Replication counters.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Datagrams sent (once per destination).
    pub sent_datagrams: AtomicU64,
    /// `New` records sent.
    pub sent_new: AtomicU64,
    /// `Del` records sent.
    pub sent_del: AtomicU64,
    /// Ticket keys sent.
    pub sent_keys: AtomicU64,
    /// Records dropped because the send queue was full.
    pub queue_full: AtomicU64,
    /// Sessions too large for a datagram, not sent.
    pub too_large: AtomicU64,
    /// Sends the system refused.
    pub send_errors: AtomicU64,
    /// Datagrams accepted.
    pub received: AtomicU64,
    /// Sessions stored from peers.
    pub received_new: AtomicU64,
    /// Sessions removed by peers.
    pub received_del: AtomicU64,
    /// Ticket keys received that were new here.
    pub received_keys: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Farm (ACME) records sent.
    pub sent_farm: AtomicU64,
    /// Farm (ACME) records received.
    pub received_farm: AtomicU64,
    /// Datagrams dropped, by [`Reject`] (indexed by [`Reject::index`]).
    pub dropped: [AtomicU64; Reject::ALL.len()],
}

impl SyncStats {
    /// Datagrams dropped for `reason`.
    pub fn dropped(&self, reason: Reject) -> u64 {
        self.dropped[reason.index()].load(Relaxed)
    }
}

/// Running replication: two threads and their counters. Dropping it stops the threads
/// (within `POLL`); the cache's sink then drops records silently.
pub struct Replication {
    /// Counters.
    pub stats: Arc<SyncStats>,
    /// This process's sender id.
    pub id: SenderId,
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tx: mpsc::SyncSender<Outgoing>,
}

/// Sends farm (ACME) records to every peer; cheap to clone.
#[derive(Clone)]
pub struct FarmOut {
    tx: mpsc::SyncSender<Outgoing>,
    stats: Arc<SyncStats>,
}

impl std::fmt::Debug for FarmOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FarmOut")
    }
}

impl FarmOut {
    /// Queues `body` for every peer; false when it cannot go (too large for a datagram,
    /// or the queue is full).
    pub fn send(&self, body: &[u8]) -> bool {
        let mut r = Vec::with_capacity(wire::RECORD_HEADER + body.len());
        if wire::push_farm(&mut r, body).is_none() {
            return false;
        }
        let sent = self.tx.try_send(Outgoing::Record(r)).is_ok();
        if sent {
            self.stats.sent_farm.fetch_add(1, Relaxed);
        }
        sent
    }
}

/// What a farm record received is handed to (on the receiving thread: it must not block).
pub type FarmIn = Box<dyn Fn(&[u8]) + Send + Sync>;

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// What both threads share.
struct Shared {
    sock: UdpSocket,
    sealer: Sealer,
    id: SenderId,
    stats: Arc<SyncStats>,
    stop: Arc<AtomicBool>,
    cache: Option<Arc<SessionCache>>,
    tickets: Option<Arc<TicketKeys>>,
    farm_in: Option<FarmIn>,
}

impl Replication {
    /// Binds the socket, hooks into the cache and the ticket ring, asks the peers for their
    /// state and starts the threads.
    pub fn start(
        settings: &Settings,
        cache: Option<Arc<SessionCache>>,
        tickets: Option<Arc<TicketKeys>>,
    ) -> Result<Self, SyncError> {
        Self::start_on(Self::bind(settings)?, settings, cache, tickets, None)
    }

    /// Binds the replication socket (before privileges are dropped; see [`Self::start_on`]).
    pub fn bind(settings: &Settings) -> Result<UdpSocket, SyncError> {
        net::open(settings.listen, &settings.peers, settings.iface.as_ref())
    }

    /// As [`Self::start`], on a socket from [`Self::bind`]; farm records received go to
    /// `farm_in`.
    pub fn start_on(
        sock: UdpSocket,
        settings: &Settings,
        cache: Option<Arc<SessionCache>>,
        tickets: Option<Arc<TicketKeys>>,
        farm_in: Option<FarmIn>,
    ) -> Result<Self, SyncError> {
        sock.set_read_timeout(Some(POLL))
            .map_err(|source| SyncError::Socket {
                what: "set a read timeout",
                addr: settings.listen,
                source,
            })?;
        let local = sock.local_addr().unwrap_or(settings.listen);
        let send_sock = sock.try_clone().map_err(|source| SyncError::Socket {
            what: "clone the socket",
            addr: settings.listen,
            source,
        })?;
        let mut id = [0u8; 8];
        rand::fill(&mut id).map_err(|_| SyncError::Socket {
            what: "draw a sender id",
            addr: settings.listen,
            source: io::Error::other("no randomness"),
        })?;
        let stats = Arc::new(SyncStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let sealer = || {
            Sealer::new(&settings.key).map_err(|_| SyncError::Socket {
                what: "derive the datagram key",
                addr: settings.listen,
                source: io::Error::other("key derivation failed"),
            })
        };
        let shared = |sock, sealer, farm_in| {
            Arc::new(Shared {
                sock,
                sealer,
                id,
                stats: stats.clone(),
                stop: stop.clone(),
                cache: cache.clone(),
                tickets: tickets.clone(),
                farm_in,
            })
        };
        let recv_side = shared(sock, sealer()?, farm_in);
        let send_side = shared(send_sock, sealer()?, None);

        if let Some(c) = &cache {
            c.add_sink(Arc::new(Outbox {
                tx: tx.clone(),
                stats: stats.clone(),
            }));
        }
        if let Some(t) = &tickets {
            let tx = tx.clone();
            t.set_on_change(Box::new(move || {
                let _ = tx.try_send(Outgoing::KeysChanged);
            }));
        }
        let dests: Vec<SocketAddr> = settings
            .peers
            .iter()
            .map(|&p| net::destination(local, p))
            .collect();
        let window_ms = settings.window.as_millis() as u64;
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(f)
                .map_err(|source| SyncError::Socket {
                    what: "start a thread",
                    addr: settings.listen,
                    source,
                })
        };
        let own_tx = tx.clone();
        let sender = spawn(
            "shuck-sync-send",
            Box::new(move || Sender::new(send_side, dests).run(rx)),
        )?;
        let receiver = spawn(
            "shuck-sync-recv",
            Box::new(move || receive_loop(&recv_side, tx, window_ms)),
        )?;
        Ok(Replication {
            stats,
            id,
            local,
            stop,
            threads: vec![sender, receiver],
            tx: own_tx,
        })
    }

    /// Where farm (ACME) records are sent from.
    pub fn farm_out(&self) -> FarmOut {
        FarmOut {
            tx: self.tx.clone(),
            stats: self.stats.clone(),
        }
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Replication {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

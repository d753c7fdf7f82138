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
//! blocking ([`Outbox`]; a full queue drops and counts), one thread packs and sends them, and
//! another receives.

pub mod net;
pub mod psk;
pub mod replay;
pub mod wire;

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand;

use crate::session::tickets::TicketKeys;
use crate::session::{SessionCache, SessionSink};
use wire::{Header, Record, Reject, Sealer, SenderId};

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
    /// Datagrams dropped, by [`Reject`] (indexed by [`Reject::index`]).
    pub dropped: [AtomicU64; Reject::ALL.len()],
}

impl SyncStats {
    /// Datagrams dropped for `reason`.
    pub fn dropped(&self, reason: Reject) -> u64 {
        self.dropped[reason.index()].load(Relaxed)
    }
}

/// What the sending thread is asked to do.
enum Outgoing {
    /// A record to pack and send to every peer.
    Record(Vec<u8>),
    /// The ticket key ring changed: send it.
    KeysChanged,
    /// A peer asked for state.
    Answer { to: SocketAddr, flags: u8 },
}

/// The cache's sink: turns stores and removals into records, never blocking.
struct Outbox {
    tx: SyncSender<Outgoing>,
    stats: Arc<SyncStats>,
}

impl Outbox {
    fn push(&self, record: Vec<u8>) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(Outgoing::Record(record)) {
            self.stats.queue_full.fetch_add(1, Relaxed);
        }
    }
}

impl SessionSink for Outbox {
    fn stored(&self, key: &[u8], value: &[u8]) {
        let mut r = Vec::with_capacity(wire::RECORD_HEADER + 5 + key.len() + value.len());
        match wire::push_new(&mut r, key, 0, value) {
            Some(()) => self.push(r),
            None => {
                self.stats.too_large.fetch_add(1, Relaxed);
            }
        }
    }

    fn removed(&self, key: &[u8]) {
        let mut r = Vec::with_capacity(wire::RECORD_HEADER + key.len());
        if wire::push_del(&mut r, key).is_some() {
            self.push(r);
        }
    }
}

/// Running replication: two threads and their counters. Dropping it stops the threads
/// (within [`POLL`]); the cache's sink then drops records silently.
pub struct Replication {
    /// Counters.
    pub stats: Arc<SyncStats>,
    /// This process's sender id.
    pub id: SenderId,
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

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
}

impl Replication {
    /// Binds the socket, hooks into the cache and the ticket ring, asks the peers for their
    /// state and starts the threads.
    pub fn start(
        settings: &Settings,
        cache: Option<Arc<SessionCache>>,
        tickets: Option<Arc<TicketKeys>>,
    ) -> Result<Self, SyncError> {
        Self::start_on(Self::bind(settings)?, settings, cache, tickets)
    }

    /// Binds the replication socket (before privileges are dropped; see [`Self::start_on`]).
    pub fn bind(settings: &Settings) -> Result<UdpSocket, SyncError> {
        net::open(settings.listen, &settings.peers, settings.iface.as_ref())
    }

    /// As [`Self::start`], on a socket from [`Self::bind`].
    pub fn start_on(
        sock: UdpSocket,
        settings: &Settings,
        cache: Option<Arc<SessionCache>>,
        tickets: Option<Arc<TicketKeys>>,
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
        let shared = |sock, sealer| {
            Arc::new(Shared {
                sock,
                sealer,
                id,
                stats: stats.clone(),
                stop: stop.clone(),
                cache: cache.clone(),
                tickets: tickets.clone(),
            })
        };
        let recv_side = shared(sock, sealer()?);
        let send_side = shared(send_sock, sealer()?);

        if let Some(c) = &cache {
            c.set_sink(Arc::new(Outbox {
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
        })
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

/// The sending thread's state.
struct Sender {
    shared: Arc<Shared>,
    dests: Vec<SocketAddr>,
    seq: u64,
    pending: Vec<u8>,
    pending_new: u64,
    pending_del: u64,
    datagram: Vec<u8>,
    last_ts: u64,
    /// Records handled so far (for the load estimate).
    records: u64,
}

impl Sender {
    fn new(shared: Arc<Shared>, dests: Vec<SocketAddr>) -> Self {
        Sender {
            shared,
            dests,
            seq: 0,
            pending: Vec::with_capacity(wire::MAX_PLAINTEXT),
            pending_new: 0,
            pending_del: 0,
            datagram: Vec::with_capacity(wire::MAX_DATAGRAM),
            last_ts: 0,
            records: 0,
        }
    }

    fn run(mut self, rx: Receiver<Outgoing>) {
        // A host that starts asks for what it missed, and tells its keys.
        let mut req = Vec::new();
        wire::push_request(&mut req, wire::WANT_KEYS | wire::WANT_SESSIONS);
        self.send_to_all(&req);
        self.send_keys(None);
        let mut keys_due = Instant::now() + KEYS_EVERY;
        let mut last_send = Instant::now();
        let (mut period, mut in_period, mut hot) = (Instant::now(), 0u64, false);
        while !self.shared.stop.load(Relaxed) {
            let wait = keys_due.saturating_duration_since(Instant::now()).min(POLL);
            match rx.recv_timeout(wait) {
                Ok(first) => {
                    if period.elapsed() >= HOT_PERIOD {
                        hot = in_period >= HOT_RECORDS;
                        (period, in_period) = (Instant::now(), 0);
                    }
                    let since = last_send.elapsed();
                    if hot && since < BATCH_WINDOW {
                        std::thread::sleep(BATCH_WINDOW - since);
                    }
                    last_send = Instant::now();
                    let before = self.records;
                    self.handle(first);
                    // Pack what else is waiting into as few datagrams as fit.
                    while let Ok(more) = rx.try_recv() {
                        self.handle(more);
                    }
                    in_period += self.records - before;
                    self.flush();
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if Instant::now() >= keys_due {
                self.send_keys(None);
                keys_due = Instant::now() + KEYS_EVERY;
            }
        }
    }

    fn handle(&mut self, out: Outgoing) {
        match out {
            Outgoing::Record(r) => {
                self.records += 1;
                if self.pending.len() + r.len() > wire::PACK_TARGET {
                    self.flush();
                }
                match r.first() {
                    Some(&wire::kind::NEW) => self.pending_new += 1,
                    Some(&wire::kind::DEL) => self.pending_del += 1,
                    _ => {}
                }
                self.pending.extend_from_slice(&r);
            }
            Outgoing::KeysChanged => self.send_keys(None),
            Outgoing::Answer { to, flags } => {
                self.flush();
                if flags & wire::WANT_KEYS != 0 {
                    self.send_keys(Some(to));
                }
                if flags & wire::WANT_SESSIONS != 0 {
                    self.dump(to);
                }
            }
        }
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.pending);
        if self.send_to_all(&records) {
            let s = &self.shared.stats;
            s.sent_new.fetch_add(self.pending_new, Relaxed);
            s.sent_del.fetch_add(self.pending_del, Relaxed);
        }
        self.pending = records;
        self.pending.clear();
        self.pending_new = 0;
        self.pending_del = 0;
    }

    /// Seals `records` once and sends the datagram to every peer; false if sealing failed.
    fn send_to_all(&mut self, records: &[u8]) -> bool {
        if !self.seal(records) {
            return false;
        }
        for i in 0..self.dests.len() {
            let to = self.dests[i];
            self.send_datagram(to);
        }
        true
    }

    fn seal(&mut self, records: &[u8]) -> bool {
        // Timestamps never go backwards for one sender, even if the clock does.
        self.last_ts = self.last_ts.max(now_ms());
        let header = Header {
            sender: self.shared.id,
            timestamp: self.last_ts,
            sequence: self.seq,
        };
        self.seq += 1;
        if self
            .shared
            .sealer
            .seal(&header, records, &mut self.datagram)
            .is_err()
        {
            self.shared.stats.send_errors.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    fn send_datagram(&self, to: SocketAddr) {
        let s = &self.shared.stats;
        match self.shared.sock.send_to(&self.datagram, to) {
            Ok(_) => {
                s.sent_datagrams.fetch_add(1, Relaxed);
            }
            Err(e) => {
                // Log the first failure and then every 1000th: a dead peer must not flood
                // the log.
                if s.send_errors.fetch_add(1, Relaxed) % 1000 == 0 {
                    tracing::warn!(peer = %to, error = %e, "replication: cannot send");
                }
            }
        }
    }

    /// Sends the ticket keys to one peer, or to all.
    fn send_keys(&mut self, to: Option<SocketAddr>) {
        let Some(t) = self.shared.tickets.clone() else {
            return;
        };
        let keys = t.export();
        for record in wire::keys_records(&keys) {
            if !self.seal(&record) {
                continue;
            }
            match to {
                Some(to) => self.send_datagram(to),
                None => {
                    for i in 0..self.dests.len() {
                        let d = self.dests[i];
                        self.send_datagram(d);
                    }
                }
            }
        }
        self.shared
            .stats
            .sent_keys
            .fetch_add(keys.len() as u64, Relaxed);
    }

    /// Sends every live session to a peer that asked.
    fn dump(&mut self, to: SocketAddr) {
        let Some(cache) = self.shared.cache.clone() else {
            return;
        };
        let mut records = Vec::with_capacity(wire::PACK_TARGET);
        let mut sent = 0usize;
        let mut sessions = 0u64;
        for s in cache.snapshot() {
            let age = u32::try_from(s.age.as_millis()).unwrap_or(u32::MAX);
            let mut r = Vec::new();
            if wire::push_new(&mut r, &s.key, age, &s.value).is_none() {
                continue;
            }
            if records.len() + r.len() > wire::PACK_TARGET {
                if self.seal(&records) {
                    self.send_datagram(to);
                    sent += 1;
                }
                records.clear();
                if sent % DUMP_BURST == 0 {
                    std::thread::sleep(DUMP_PAUSE);
                }
            }
            records.extend_from_slice(&r);
            sessions += 1;
        }
        if !records.is_empty() && self.seal(&records) {
            self.send_datagram(to);
        }
        self.shared.stats.sent_new.fetch_add(sessions, Relaxed);
        tracing::info!(peer = %to, sessions, "replication: sent our sessions to a peer that asked");
    }
}

fn receive_loop(shared: &Shared, answers: SyncSender<Outgoing>, window_ms: u64) {
    let mut fresh = replay::Freshness::new(window_ms, MAX_SENDERS);
    // One byte more than the largest datagram accepted, so an oversized one is seen as such.
    let mut buf = vec![0u8; 65536];
    let mut scratch = Vec::new();
    while !shared.stop.load(Relaxed) {
        let (n, from) = match shared.sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "replication: receive failed");
                std::thread::sleep(POLL);
                continue;
            }
        };
        if let Err(reason) = accept(
            shared,
            &mut fresh,
            &mut buf[..n],
            from,
            &answers,
            &mut scratch,
        ) {
            let count = shared.stats.dropped[reason.index()].fetch_add(1, Relaxed);
            // Own multicast loops back on every send: not worth a line.
            if reason != Reject::Own && count % 1000 == 0 {
                tracing::warn!(from = %from, reason = %reason, "replication: datagram dropped");
            }
        }
    }
}

/// Opens, checks and applies one datagram.
fn accept(
    shared: &Shared,
    fresh: &mut replay::Freshness,
    datagram: &mut [u8],
    from: SocketAddr,
    answers: &SyncSender<Outgoing>,
    keys: &mut Vec<wire::SharedKey>,
) -> Result<(), Reject> {
    let (header, plain) = shared.sealer.open(datagram, &shared.id)?;
    fresh.check(&header, now_ms())?;
    // Check every record before applying any, so a datagram is taken whole or not at all.
    if wire::records(plain).any(|r| r.is_err()) {
        return Err(Reject::Malformed);
    }
    let s = &shared.stats;
    s.received.fetch_add(1, Relaxed);
    for record in wire::records(plain).flatten() {
        match record {
            Record::New { key, age_ms, value } => {
                if let Some(c) = &shared.cache {
                    let age = Duration::from_millis(u64::from(age_ms));
                    if c.insert_replicated(key.to_vec(), value.to_vec(), age) {
                        s.received_new.fetch_add(1, Relaxed);
                    }
                }
            }
            Record::Del { key } => {
                if let Some(c) = &shared.cache {
                    if c.remove_replicated(key) {
                        s.received_del.fetch_add(1, Relaxed);
                    }
                }
            }
            Record::Keys(body) => {
                if let Some(t) = &shared.tickets {
                    keys.clear();
                    keys.extend(wire::keys(body));
                    let added = t.merge(keys);
                    s.received_keys.fetch_add(added as u64, Relaxed);
                }
            }
            Record::Request { flags } => {
                s.requests.fetch_add(1, Relaxed);
                let _ = answers.try_send(Outgoing::Answer { to: from, flags });
            }
            Record::Unknown(_) => {}
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

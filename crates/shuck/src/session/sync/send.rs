//! The sending side of replication: the cache's sink that queues records without ever
//! blocking a handshake ([`Outbox`]), and the thread that packs them into sealed datagrams
//! and sends them to every peer, answers requests and sends the ticket keys ([`Sender`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use super::datagram::Header;
use super::wire;
use super::{
    Shared, SyncStats, BATCH_WINDOW, DUMP_BURST, DUMP_PAUSE, HOT_PERIOD, HOT_RECORDS, KEYS_EVERY,
    POLL,
};
use crate::clock::unix_ms;
use crate::session::SessionSink;

/// What the sending thread is asked to do.
pub(super) enum Outgoing {
    /// A record to pack and send to every peer.
    Record(Vec<u8>),
    /// The ticket key ring changed: send it.
    KeysChanged,
    /// A peer asked for state.
    Answer { to: SocketAddr, flags: u8 },
}

/// The cache's sink: turns stores and removals into records, never blocking.
pub(super) struct Outbox {
    pub(super) tx: SyncSender<Outgoing>,
    pub(super) stats: Arc<SyncStats>,
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

/// The sending thread's state.
pub(super) struct Sender {
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
    pub(super) fn new(shared: Arc<Shared>, dests: Vec<SocketAddr>) -> Self {
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

    pub(super) fn run(mut self, rx: Receiver<Outgoing>) {
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
        self.last_ts = self.last_ts.max(unix_ms());
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
                    tracing::warn!(
                        name: "replication_send_failed",
                        peer = %to,
                        error = %e,
                        "replication: cannot send",
                    );
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
        tracing::info!(
            name: "replication_sent_sessions",
            peer = %to,
            sessions,
            "replication: sent our sessions to a peer that asked",
        );
    }
}

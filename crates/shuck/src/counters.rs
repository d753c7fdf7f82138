//! The data path's counters. Each worker writes only its own (a single writer needs no
//! atomic read-modify-write, so counting costs a plain store on a cache line no other core
//! writes); readers sum them when asked. Bytes are added once per connection, at its close,
//! never per read.
//!
//! This module only counts: the log summary and the Prometheus exposition that read these
//! sums sit above the proxy, in the `stats` module.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Why a handshake failed (besides TLS alerts, counted by alert).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// The handshake deadline passed.
    Timeout,
    /// The client closed or reset the connection.
    Closed,
    /// A server name no certificate serves, with `--sni-nomatch-abort`.
    SniNomatch,
    /// A bad or missing PROXY header (`--proxy-proxy`).
    ProxyHeader,
    /// Anything else (an I/O error).
    Other,
}

impl FailReason {
    const ALL: [FailReason; 5] = [
        FailReason::Timeout,
        FailReason::Closed,
        FailReason::SniNomatch,
        FailReason::ProxyHeader,
        FailReason::Other,
    ];

    /// The reason as a metric label.
    pub fn name(self) -> &'static str {
        match self {
            FailReason::Timeout => "timeout",
            FailReason::Closed => "closed",
            FailReason::SniNomatch => "sni_nomatch",
            FailReason::ProxyHeader => "proxy_header",
            FailReason::Other => "other",
        }
    }
}

/// One frontend's counters in one worker.
#[derive(Debug, Default)]
pub struct FrontendCounters {
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Client connections closed (whatever the reason).
    pub closed: AtomicU64,
    /// Connections closed after the handshake because no backend would take them.
    pub refused: AtomicU64,
    /// Plaintext bytes from clients to backends.
    pub bytes_in: AtomicU64,
    /// Plaintext bytes from backends to clients.
    pub bytes_out: AtomicU64,
}

/// HTTP mode's counters of one worker.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// HTTP/1.1 requests passed to backends (added when their connection closes).
    pub requests_h1: AtomicU64,
    /// HTTP/2 streams passed to backends as requests.
    pub requests_h2: AtomicU64,
    /// HTTP/2 connections served.
    pub h2_connections: AtomicU64,
    /// HTTP/2 streams the client reset before their answer was complete.
    pub h2_resets_received: AtomicU64,
    /// HTTP/2 streams shuck reset (a malformed request, a backend answer cut short).
    pub h2_resets_sent: AtomicU64,
    /// GOAWAY frames sent, by error code (RFC 9113 §7).
    goaway: [AtomicU64; H2_REASONS.len()],
    /// Backend connections dropped because the backend wrote past a complete answer.
    pub backend_stray: AtomicU64,
    /// Idle backend connections dropped because the backend closed them.
    pub backend_closed_idle: AtomicU64,
    /// Requests sent again on a new backend connection (idempotent, nothing answered).
    pub retries: AtomicU64,
    /// HTTP/2 streams reset for no progress within `--http-stall-timeout`.
    pub stalled_h2: AtomicU64,
    /// HTTP/1.1 connections closed for no progress within `--http-stall-timeout`.
    pub stalled_h1: AtomicU64,
    /// HTTP/1.1 connections moved to another backend by a request's route.
    pub backend_switches: AtomicU64,
    /// Requests answered 421: a name the connection's certificate does not cover.
    pub misdirected: AtomicU64,
    /// HTTP/3 over QUIC.
    pub h3: QuicCounters,
}

/// HTTP/3's and QUIC's counters of one worker.
#[derive(Debug, Default)]
pub struct QuicCounters {
    /// Connection attempts taken from the endpoint.
    pub incoming: AtomicU64,
    /// Connections established (handshake done).
    pub connections: AtomicU64,
    /// Handshakes that failed or took too long.
    pub handshake_failures: AtomicU64,
    /// GOAWAYs sent (drain, reload, keep-alive timeout).
    pub goaway: AtomicU64,
    /// Retries sent (`--quic-retry`): clients asked to prove their address.
    pub retries: AtomicU64,
    /// Requests passed to backends.
    pub requests: AtomicU64,
    /// Streams the client reset before their answer was complete.
    pub resets_received: AtomicU64,
    /// Streams shuck reset (a malformed request, a backend answer cut short).
    pub resets_sent: AtomicU64,
    /// Streams reset for no progress within `--http-stall-timeout`.
    pub stalled: AtomicU64,
    /// Handshakes that resumed a session (a ticket opened, or a stateful one taken).
    pub resumed: AtomicU64,
    /// Connections that sent a request in 0-RTT (`--quic-early-data`).
    pub zero_rtt: AtomicU64,
    /// Requests that came in 0-RTT, by [`EARLY_OUTCOMES`].
    pub early_requests: [AtomicU64; EARLY_OUTCOMES.len()],
    /// Connections whose client address changed (NAT rebinding, migration).
    pub migrated: AtomicU64,
    /// UDP datagrams received and sent by ended connections, and packets they lost
    /// (declared lost by QUIC's loss detection, and sent again).
    pub datagrams_in: AtomicU64,
    /// See [`QuicCounters::datagrams_in`].
    pub datagrams_out: AtomicU64,
    /// See [`QuicCounters::datagrams_in`].
    pub lost: AtomicU64,
    /// Datagrams (or packets within them) QUIC discarded, by [`QUIC_DROPS`]: quinn's
    /// reasons (its drop hook, any thread), then the kernel's for a full socket buffer.
    pub dropped: [AtomicU64; QUIC_DROPS.len()],
}

/// Why QUIC discarded a datagram or a packet, as metric labels: quinn-proto's
/// `DropReason`s in their order, then `socket_buffer` (the kernel's count for the
/// worker's UDP socket: its receive buffer was full).
pub const QUIC_DROPS: [&str; 11] = [
    "malformed",
    "unsupported_version",
    "unknown_connection",
    "short_initial",
    "saturated",
    "invalid_token",
    "undecryptable",
    "duplicate",
    "unexpected_peer",
    "out_of_order",
    "socket_buffer",
];

/// What became of a request that came in 0-RTT, as metric labels: passed on at once with
/// `Early-Data: 1`; held until the handshake completed (not a safe method, or with a
/// body); sent again after the handshake because the backend answered `425 Too Early`.
pub const EARLY_OUTCOMES: [&str; 3] = ["passed", "waited", "retried"];

/// The local shortages (`backend::Shortage`, in its order), as metric labels.
pub const SHORTAGES: [&str; 5] = ["emfile", "enfile", "enobufs", "enomem", "eaddrnotavail"];

/// HTTP/2's error codes by value, as metric labels.
pub const H2_REASONS: [&str; 14] = [
    "no_error",
    "protocol_error",
    "internal_error",
    "flow_control_error",
    "settings_timeout",
    "stream_closed",
    "frame_size_error",
    "refused_stream",
    "cancel",
    "compression_error",
    "connect_error",
    "enhance_your_calm",
    "inadequate_security",
    "http_1_1_required",
];

impl HttpCounters {
    /// Counts a GOAWAY sent with error code `reason` (unknown codes are not counted).
    pub fn goaway(&self, reason: u32) {
        if let Some(c) = self.goaway.get(reason as usize) {
            WorkerCounters::bump(c);
        }
    }
}

/// [`HttpCounters`] summed over workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HttpTotals {
    /// See [`HttpCounters::requests_h1`].
    pub requests_h1: u64,
    /// See [`HttpCounters::requests_h2`].
    pub requests_h2: u64,
    /// See [`HttpCounters::h2_connections`].
    pub h2_connections: u64,
    /// See [`HttpCounters::h2_resets_received`].
    pub h2_resets_received: u64,
    /// See [`HttpCounters::h2_resets_sent`].
    pub h2_resets_sent: u64,
    /// GOAWAYs sent, by error code as in [`H2_REASONS`].
    pub goaway: [u64; H2_REASONS.len()],
    /// See [`HttpCounters::backend_stray`].
    pub backend_stray: u64,
    /// See [`HttpCounters::backend_closed_idle`].
    pub backend_closed_idle: u64,
    /// See [`HttpCounters::retries`].
    pub retries: u64,
    /// See [`HttpCounters::stalled_h2`].
    pub stalled_h2: u64,
    /// See [`HttpCounters::stalled_h1`].
    pub stalled_h1: u64,
    /// See [`HttpCounters::backend_switches`].
    pub backend_switches: u64,
    /// See [`HttpCounters::misdirected`].
    pub misdirected: u64,
    /// See [`HttpCounters::h3`].
    pub h3: QuicTotals,
}

/// [`QuicCounters`] summed over workers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QuicTotals {
    /// See [`QuicCounters::incoming`].
    pub incoming: u64,
    /// See [`QuicCounters::connections`].
    pub connections: u64,
    /// See [`QuicCounters::handshake_failures`].
    pub handshake_failures: u64,
    /// See [`QuicCounters::goaway`].
    pub goaway: u64,
    /// See [`QuicCounters::retries`].
    pub retries: u64,
    /// See [`QuicCounters::requests`].
    pub requests: u64,
    /// See [`QuicCounters::resets_received`].
    pub resets_received: u64,
    /// See [`QuicCounters::resets_sent`].
    pub resets_sent: u64,
    /// See [`QuicCounters::stalled`].
    pub stalled: u64,
    /// See [`QuicCounters::resumed`].
    pub resumed: u64,
    /// See [`QuicCounters::zero_rtt`].
    pub zero_rtt: u64,
    /// See [`QuicCounters::early_requests`].
    pub early_requests: [u64; EARLY_OUTCOMES.len()],
    /// See [`QuicCounters::migrated`].
    pub migrated: u64,
    /// See [`QuicCounters::datagrams_in`].
    pub datagrams_in: u64,
    /// See [`QuicCounters::datagrams_out`].
    pub datagrams_out: u64,
    /// See [`QuicCounters::lost`].
    pub lost: u64,
    /// See [`QuicCounters::dropped`].
    pub dropped: [u64; QUIC_DROPS.len()],
}

impl QuicTotals {
    fn add(&mut self, c: &QuicCounters) {
        self.incoming += c.incoming.load(Relaxed);
        self.connections += c.connections.load(Relaxed);
        self.handshake_failures += c.handshake_failures.load(Relaxed);
        self.goaway += c.goaway.load(Relaxed);
        self.retries += c.retries.load(Relaxed);
        self.requests += c.requests.load(Relaxed);
        self.resets_received += c.resets_received.load(Relaxed);
        self.resets_sent += c.resets_sent.load(Relaxed);
        self.stalled += c.stalled.load(Relaxed);
        self.resumed += c.resumed.load(Relaxed);
        self.zero_rtt += c.zero_rtt.load(Relaxed);
        self.migrated += c.migrated.load(Relaxed);
        self.datagrams_in += c.datagrams_in.load(Relaxed);
        self.datagrams_out += c.datagrams_out.load(Relaxed);
        self.lost += c.lost.load(Relaxed);
        for (sum, c) in self.early_requests.iter_mut().zip(&c.early_requests) {
            *sum += c.load(Relaxed);
        }
        for (sum, c) in self.dropped.iter_mut().zip(&c.dropped) {
            *sum += c.load(Relaxed);
        }
    }
}

impl HttpTotals {
    fn add(&mut self, c: &HttpCounters) {
        self.requests_h1 += c.requests_h1.load(Relaxed);
        self.requests_h2 += c.requests_h2.load(Relaxed);
        self.h2_connections += c.h2_connections.load(Relaxed);
        self.h2_resets_received += c.h2_resets_received.load(Relaxed);
        self.h2_resets_sent += c.h2_resets_sent.load(Relaxed);
        self.backend_stray += c.backend_stray.load(Relaxed);
        self.backend_closed_idle += c.backend_closed_idle.load(Relaxed);
        self.retries += c.retries.load(Relaxed);
        self.stalled_h2 += c.stalled_h2.load(Relaxed);
        self.stalled_h1 += c.stalled_h1.load(Relaxed);
        self.backend_switches += c.backend_switches.load(Relaxed);
        self.misdirected += c.misdirected.load(Relaxed);
        self.h3.add(&c.h3);
        for (sum, c) in self.goaway.iter_mut().zip(c.goaway.iter()) {
            *sum += c.load(Relaxed);
        }
    }
}

/// One worker's counters; written by that worker only.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Per frontend, by index.
    pub frontends: Box<[FrontendCounters]>,
    /// Handshakes completed without resumption.
    pub handshakes_full: AtomicU64,
    /// Handshakes that resumed a session (by cache or ticket).
    pub handshakes_resumed: AtomicU64,
    /// Failed handshakes by [`FailReason`].
    failed: [AtomicU64; FailReason::ALL.len()],
    /// Failed handshakes in which shuck sent this alert (by alert code).
    alert_sent: Box<[AtomicU64; 256]>,
    /// Failed handshakes ended by this alert from the client.
    alert_received: Box<[AtomicU64; 256]>,
    /// Backend connections that could not be made (the server's fault, or the network's).
    pub backend_failures: AtomicU64,
    /// Accepts and backend connections that failed for shuck's own shortage, by
    /// [`SHORTAGES`].
    pub local_shortages: [AtomicU64; SHORTAGES.len()],
    /// Accept loops running now (a gauge): once none is, this worker accepts no more.
    pub accepting: AtomicU64,
    /// HTTP mode.
    pub http: HttpCounters,
}

/// How a handshake failed, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Not a TLS alert.
    Reason(FailReason),
    /// shuck sent this fatal alert.
    AlertSent(u8),
    /// The client sent this fatal alert.
    AlertReceived(u8),
}

impl WorkerCounters {
    /// Counts a local shortage by its index in [`SHORTAGES`].
    pub fn local_shortage(&self, index: usize) {
        if let Some(c) = self.local_shortages.get(index) {
            WorkerCounters::bump(c);
        }
    }

    /// Counters for a worker serving `frontends` frontends.
    pub fn new(frontends: usize) -> Self {
        WorkerCounters {
            frontends: (0..frontends.max(1))
                .map(|_| FrontendCounters::default())
                .collect(),
            handshakes_full: AtomicU64::new(0),
            handshakes_resumed: AtomicU64::new(0),
            failed: Default::default(),
            alert_sent: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            alert_received: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            backend_failures: AtomicU64::new(0),
            local_shortages: Default::default(),
            accepting: AtomicU64::new(0),
            http: HttpCounters::default(),
        }
    }

    /// Adds one to a counter of this worker (only its owner thread may call this).
    pub fn bump(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    /// Adds `n` to a counter of this worker (only its owner thread may call this).
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// The counters of frontend `i` (the first if out of range).
    pub fn frontend(&self, i: usize) -> &FrontendCounters {
        self.frontends.get(i).unwrap_or(&self.frontends[0])
    }

    /// Counts a completed handshake, resumed or full.
    pub fn handshake_done(&self, resumed: bool) {
        Self::bump(if resumed {
            &self.handshakes_resumed
        } else {
            &self.handshakes_full
        });
    }

    /// Counts a failed handshake.
    pub fn failed(&self, f: Failure) {
        Self::bump(match f {
            Failure::Reason(r) => &self.failed[r as usize],
            Failure::AlertSent(a) => &self.alert_sent[usize::from(a)],
            Failure::AlertReceived(a) => &self.alert_received[usize::from(a)],
        });
    }
}

/// Every worker's counters, for summing.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    workers: Vec<Arc<WorkerCounters>>,
    frontends: usize,
}

/// One frontend's counters summed over workers (see [`FrontendCounters`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrontendTotals {
    /// Client connections accepted.
    pub accepted: u64,
    /// Client connections closed.
    pub closed: u64,
    /// Connections no backend would take.
    pub refused: u64,
    /// Plaintext bytes from clients to backends.
    pub bytes_in: u64,
    /// Plaintext bytes from backends to clients.
    pub bytes_out: u64,
}

impl FrontendTotals {
    /// Connections open now.
    pub fn active(&self) -> u64 {
        self.accepted.saturating_sub(self.closed)
    }

    fn add(&mut self, f: &FrontendCounters) {
        self.accepted += f.accepted.load(Relaxed);
        self.closed += f.closed.load(Relaxed);
        self.refused += f.refused.load(Relaxed);
        self.bytes_in += f.bytes_in.load(Relaxed);
        self.bytes_out += f.bytes_out.load(Relaxed);
    }
}

/// A sum of all workers' counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Per frontend, by counter slot.
    pub frontends: Vec<FrontendTotals>,
    /// Connections accepted, over frontends.
    pub accepted: u64,
    /// See [`WorkerCounters::handshakes_full`].
    pub handshakes_full: u64,
    /// See [`WorkerCounters::handshakes_resumed`].
    pub handshakes_resumed: u64,
    /// Failed handshakes, all reasons.
    pub handshakes_failed: u64,
    /// By reason.
    pub failed_by: Vec<(FailReason, u64)>,
    /// (alert code, sent, received), for alerts seen.
    pub alerts: Vec<(u8, u64, u64)>,
    /// See [`WorkerCounters::backend_failures`].
    pub backend_failures: u64,
    /// See [`WorkerCounters::local_shortages`].
    pub local_shortages: [u64; SHORTAGES.len()],
    /// See [`WorkerCounters::accepting`].
    pub accepting: u64,
    /// HTTP mode.
    pub http: HttpTotals,
}

impl Counters {
    /// Counters for workers serving `frontends` frontends.
    pub fn new(frontends: usize) -> Self {
        Counters {
            workers: Vec::new(),
            frontends,
        }
    }

    /// Counters for a new worker.
    pub fn add_worker(&mut self) -> Arc<WorkerCounters> {
        let c = Arc::new(WorkerCounters::new(self.frontends));
        self.workers.push(c.clone());
        c
    }

    /// The sum over workers.
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            frontends: vec![FrontendTotals::default(); self.frontends.max(1)],
            ..Totals::default()
        };
        let mut failed = [0u64; FailReason::ALL.len()];
        let mut sent = [0u64; 256];
        let mut received = [0u64; 256];
        for w in &self.workers {
            for (sum, f) in t.frontends.iter_mut().zip(w.frontends.iter()) {
                sum.add(f);
            }
            t.handshakes_full += w.handshakes_full.load(Relaxed);
            t.handshakes_resumed += w.handshakes_resumed.load(Relaxed);
            t.backend_failures += w.backend_failures.load(Relaxed);
            for (sum, c) in t.local_shortages.iter_mut().zip(&w.local_shortages) {
                *sum += c.load(Relaxed);
            }
            t.accepting += w.accepting.load(Relaxed);
            t.http.add(&w.http);
            for (slot, c) in failed.iter_mut().zip(w.failed.iter()) {
                *slot += c.load(Relaxed);
            }
            for i in 0..256 {
                sent[i] += w.alert_sent[i].load(Relaxed);
                received[i] += w.alert_received[i].load(Relaxed);
            }
        }
        t.accepted = t.frontends.iter().map(|f| f.accepted).sum();
        t.failed_by = FailReason::ALL.iter().copied().zip(failed).collect();
        t.alerts = (0..=255u8)
            .filter(|&a| sent[usize::from(a)] + received[usize::from(a)] > 0)
            .map(|a| (a, sent[usize::from(a)], received[usize::from(a)]))
            .collect();
        t.handshakes_failed =
            failed.iter().sum::<u64>() + sent.iter().sum::<u64>() + received.iter().sum::<u64>();
        t
    }
}

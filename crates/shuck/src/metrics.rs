//! Counters, and their Prometheus exposition (`--stats`). Each worker writes only its own
//! (a single writer needs no atomic read-modify-write, so counting costs a plain store on a
//! cache line no other core writes); readers sum them when asked. Bytes are added once per
//! connection, at its close, never per read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::proxy::ProxyState;

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

    fn name(self) -> &'static str {
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
    /// Backend connections that could not be made.
    pub backend_failures: AtomicU64,
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

/// A sum of all workers' counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Per frontend: accepted, closed, refused, bytes in, bytes out.
    pub frontends: Vec<[u64; 5]>,
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
            frontends: vec![[0; 5]; self.frontends.max(1)],
            ..Totals::default()
        };
        let mut failed = [0u64; FailReason::ALL.len()];
        let mut sent = [0u64; 256];
        let mut received = [0u64; 256];
        for w in &self.workers {
            for (i, f) in w.frontends.iter().enumerate() {
                let row = &mut t.frontends[i];
                for (slot, c) in row.iter_mut().zip([
                    &f.accepted,
                    &f.closed,
                    &f.refused,
                    &f.bytes_in,
                    &f.bytes_out,
                ]) {
                    *slot += c.load(Relaxed);
                }
            }
            t.handshakes_full += w.handshakes_full.load(Relaxed);
            t.handshakes_resumed += w.handshakes_resumed.load(Relaxed);
            t.backend_failures += w.backend_failures.load(Relaxed);
            for (slot, c) in failed.iter_mut().zip(w.failed.iter()) {
                *slot += c.load(Relaxed);
            }
            for i in 0..256 {
                sent[i] += w.alert_sent[i].load(Relaxed);
                received[i] += w.alert_received[i].load(Relaxed);
            }
        }
        t.accepted = t.frontends.iter().map(|f| f[0]).sum();
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

/// A TLS alert's name in snake case (`handshake_failure`).
pub fn alert_name(code: u8) -> String {
    let camel = format!("{:?}", rustls::AlertDescription::from(code));
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        }
    }
    out
}

/// One log line with every counter: handshakes, the session cache, tickets, backends.
pub fn summary(counters: &Counters, state: &ProxyState) -> String {
    let tls = &state.tls;
    let t = counters.totals();
    let mut line = format!(
        "connections accepted={} handshakes full={} resumed={} failed={} backend_failures={}",
        t.accepted,
        t.handshakes_full,
        t.handshakes_resumed,
        t.handshakes_failed,
        t.backend_failures
    );
    if let Some(c) = &tls.cache {
        let s = c.stats();
        line.push_str(&format!(
            "; session cache entries={} stores={} hits={} misses={} evictions={} expirations={}",
            s.entries, s.stores, s.hits, s.misses, s.evictions, s.expirations
        ));
    }
    if let Some(k) = &tls.tickets {
        line.push_str(&format!(
            "; tickets issued={} resumed={} refused={}",
            k.stats.issued.load(Relaxed),
            k.stats.accepted.load(Relaxed),
            k.stats.refused.load(Relaxed)
        ));
    }
    if let Some(r) = &state.replication {
        let s = &r.stats;
        line.push_str(&format!(
            "; replication sent datagrams={} new={} del={} keys={} queue_full={} too_large={} send_errors={} received datagrams={} new={} del={} keys={} requests={} dropped",
            s.sent_datagrams.load(Relaxed),
            s.sent_new.load(Relaxed),
            s.sent_del.load(Relaxed),
            s.sent_keys.load(Relaxed),
            s.queue_full.load(Relaxed),
            s.too_large.load(Relaxed),
            s.send_errors.load(Relaxed),
            s.received.load(Relaxed),
            s.received_new.load(Relaxed),
            s.received_del.load(Relaxed),
            s.received_keys.load(Relaxed),
            s.requests.load(Relaxed),
        ));
        for reason in crate::session::sync::wire::Reject::ALL {
            line.push_str(&format!(" {}={}", reason.name(), s.dropped(reason)));
        }
    }
    for s in state.pool.servers() {
        let st = &s.stats;
        line.push_str(&format!(
            "; backend {} active={} queued={} queue_timeouts={} connect_failures={} marked_down={}",
            s.name(),
            st.active.load(Relaxed),
            st.queued.load(Relaxed),
            st.queue_timeouts.load(Relaxed),
            st.connect_failures.load(Relaxed),
            st.marked_down.load(Relaxed)
        ));
    }
    line
}

/// The `--stats` collector: reads every counter at scrape time.
#[derive(Debug)]
pub struct Exposition {
    /// The workers' counters.
    pub counters: Counters,
    /// The shared state (cache, tickets, replication, backends).
    pub state: Arc<ProxyState>,
    /// Frontend names, by counter slot, for labels (reloads add frontends).
    pub frontends: Arc<std::sync::Mutex<Vec<String>>>,
}

type Enc<'a> = DescriptorEncoder<'a>;

fn counter(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    rows: &[(&[(&str, &str)], u64)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    if let [(&[], v)] = rows {
        return ConstCounter::new(*v).encode(m);
    }
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut Enc<'_>,
    name: &str,
    help: &str,
    rows: &[(&[(&str, &str)], i64)],
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    if let [(&[], v)] = rows {
        return ConstGauge::new(*v).encode(m);
    }
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl prometheus_client::collector::Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let t = self.counters.totals();
        let names = self.frontends.lock().map(|n| n.clone()).unwrap_or_default();
        let fe: Vec<[(&str, &str); 1]> = names.iter().map(|n| [("frontend", n.as_str())]).collect();
        let per_fe = |col: usize| -> Vec<(&[(&str, &str)], u64)> {
            fe.iter()
                .zip(&t.frontends)
                .map(|(l, row)| (&l[..], row[col]))
                .collect()
        };
        counter(
            &mut enc,
            "shuck_connections_accepted",
            "Client connections accepted.",
            &per_fe(0),
        )?;
        let active: Vec<(&[(&str, &str)], i64)> = fe
            .iter()
            .zip(&t.frontends)
            .map(|(l, row)| (&l[..], as_i64(row[0].saturating_sub(row[1]))))
            .collect();
        gauge(
            &mut enc,
            "shuck_connections_active",
            "Client connections open now.",
            &active,
        )?;
        counter(
            &mut enc,
            "shuck_connections_refused",
            "Connections closed after the handshake because no backend would take them.",
            &per_fe(2),
        )?;
        counter(
            &mut enc,
            "shuck_bytes_received",
            "Plaintext bytes from clients to backends (counted when a connection closes).",
            &per_fe(3),
        )?;
        counter(
            &mut enc,
            "shuck_bytes_sent",
            "Plaintext bytes from backends to clients (counted when a connection closes).",
            &per_fe(4),
        )?;
        counter(
            &mut enc,
            "shuck_handshakes",
            "Completed TLS handshakes, full or resumed.",
            &[
                (&[("kind", "full")], t.handshakes_full),
                (&[("kind", "resumed")], t.handshakes_resumed),
            ],
        )?;
        let tls = &self.state.tls;
        let cache = tls.cache.as_ref().map(|c| c.stats()).unwrap_or_default();
        let ticket_hits = tls
            .tickets
            .as_ref()
            .map_or(0, |k| k.stats.accepted.load(Relaxed));
        counter(
            &mut enc,
            "shuck_resumptions",
            "Sessions found for resumption: in the session cache, or in a ticket that decrypted.",
            &[
                (&[("by", "cache")], cache.hits),
                (&[("by", "ticket")], ticket_hits),
            ],
        )?;
        let names: Vec<String> = t.alerts.iter().map(|(a, _, _)| alert_name(*a)).collect();
        let mut failed: Vec<(Vec<(&str, &str)>, u64)> = t
            .failed_by
            .iter()
            .map(|(r, n)| (vec![("reason", r.name())], *n))
            .collect();
        for ((_, sent, received), name) in t.alerts.iter().zip(&names) {
            if *sent > 0 {
                failed.push((
                    vec![("reason", "alert_sent"), ("alert", name.as_str())],
                    *sent,
                ));
            }
            if *received > 0 {
                failed.push((
                    vec![("reason", "alert_received"), ("alert", name.as_str())],
                    *received,
                ));
            }
        }
        let rows: Vec<(&[(&str, &str)], u64)> = failed.iter().map(|(l, n)| (&l[..], *n)).collect();
        counter(
            &mut enc,
            "shuck_handshakes_failed",
            "Failed TLS handshakes, by reason (and TLS alert).",
            &rows,
        )?;
        counter(
            &mut enc,
            "shuck_backend_connect_failures",
            "Connections for which no backend could be reached.",
            &[(&[], t.backend_failures)],
        )?;

        if tls.cache.is_some() {
            gauge(
                &mut enc,
                "shuck_session_cache_entries",
                "Sessions in the cache.",
                &[(&[], as_i64(cache.entries as u64))],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_hits",
                "Cache lookups that found a live session.",
                &[(&[], cache.hits)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_misses",
                "Cache lookups that found nothing.",
                &[(&[], cache.misses)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_evictions",
                "Sessions pushed out by the size bound.",
                &[(&[], cache.evictions)],
            )?;
            counter(
                &mut enc,
                "shuck_session_cache_stores",
                "Sessions stored.",
                &[(&[], cache.stores)],
            )?;
        }
        if let Some(k) = &tls.tickets {
            counter(
                &mut enc,
                "shuck_tickets",
                "Session tickets issued, accepted and refused.",
                &[
                    (&[("event", "issued")], k.stats.issued.load(Relaxed)),
                    (&[("event", "accepted")], k.stats.accepted.load(Relaxed)),
                    (&[("event", "refused")], k.stats.refused.load(Relaxed)),
                ],
            )?;
        }
        if let Some(r) = &self.state.replication {
            let s = &r.stats;
            counter(
                &mut enc,
                "shuck_replication_sent",
                "Replication: datagrams sent, and records by type.",
                &[
                    (&[("what", "datagrams")], s.sent_datagrams.load(Relaxed)),
                    (&[("what", "new")], s.sent_new.load(Relaxed)),
                    (&[("what", "del")], s.sent_del.load(Relaxed)),
                    (&[("what", "keys")], s.sent_keys.load(Relaxed)),
                ],
            )?;
            counter(
                &mut enc,
                "shuck_replication_received",
                "Replication: datagrams accepted, and records applied by type.",
                &[
                    (&[("what", "datagrams")], s.received.load(Relaxed)),
                    (&[("what", "new")], s.received_new.load(Relaxed)),
                    (&[("what", "del")], s.received_del.load(Relaxed)),
                    (&[("what", "keys")], s.received_keys.load(Relaxed)),
                    (&[("what", "requests")], s.requests.load(Relaxed)),
                ],
            )?;
            let mut dropped: Vec<(Vec<(&str, &str)>, u64)> =
                crate::session::sync::wire::Reject::ALL
                    .iter()
                    .map(|r| (vec![("reason", r.name())], s.dropped(*r)))
                    .collect();
            dropped.push((vec![("reason", "queue_full")], s.queue_full.load(Relaxed)));
            dropped.push((vec![("reason", "too_large")], s.too_large.load(Relaxed)));
            dropped.push((vec![("reason", "send_error")], s.send_errors.load(Relaxed)));
            let rows: Vec<(&[(&str, &str)], u64)> =
                dropped.iter().map(|(l, n)| (&l[..], *n)).collect();
            counter(
                &mut enc,
                "shuck_replication_dropped",
                "Replication: datagrams dropped on receipt by reason, and records not sent.",
                &rows,
            )?;
        }
        let servers = self.state.pool.servers();
        let labels: Vec<[(&str, &str); 1]> =
            servers.iter().map(|s| [("server", s.name())]).collect();
        let rows = |f: &dyn Fn(&crate::backend::Server) -> u64| -> Vec<(&[(&str, &str)], i64)> {
            labels
                .iter()
                .zip(servers)
                .map(|(l, s)| (&l[..], as_i64(f(s))))
                .collect()
        };
        gauge(
            &mut enc,
            "shuck_backend_up",
            "1 if the server is up, 0 while marked down.",
            &rows(&|s| u64::from(!s.is_down())),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_active",
            "Connections open to the server.",
            &rows(&|s| s.stats.active.load(Relaxed) as u64),
        )?;
        gauge(
            &mut enc,
            "shuck_backend_queued",
            "Connections waiting in the server's queue.",
            &rows(&|s| s.stats.queued.load(Relaxed) as u64),
        )?;
        let crow = |f: &dyn Fn(&crate::backend::Server) -> u64| -> Vec<(&[(&str, &str)], u64)> {
            labels
                .iter()
                .zip(servers)
                .map(|(l, s)| (&l[..], f(s)))
                .collect()
        };
        counter(
            &mut enc,
            "shuck_backend_queue_timeouts",
            "Connections that waited too long in the queue.",
            &crow(&|s| s.stats.queue_timeouts.load(Relaxed)),
        )?;
        counter(
            &mut enc,
            "shuck_backend_connect_failures_by_server",
            "Failed connection attempts to the server.",
            &crow(&|s| s.stats.connect_failures.load(Relaxed)),
        )?;
        Ok(())
    }
}

/// The text exposition of everything, as `/metrics` serves it.
pub fn render(exposition: &Arc<Exposition>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(exposition.clone()));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

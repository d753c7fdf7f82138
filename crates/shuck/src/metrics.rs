//! Counters. Each worker writes only its own (a single writer needs no atomic
//! read-modify-write, so counting costs a plain store on a cache line no other core
//! writes); readers sum them when asked.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::proxy::ProxyState;

/// One worker's counters; written by that worker only.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Handshakes completed without resumption.
    pub handshakes_full: AtomicU64,
    /// Handshakes that resumed a session (by cache or ticket).
    pub handshakes_resumed: AtomicU64,
    /// Handshakes that failed or timed out.
    pub handshakes_failed: AtomicU64,
    /// Backend connections that could not be made.
    pub backend_failures: AtomicU64,
}

impl WorkerCounters {
    /// Adds one to a counter of this worker (only its owner thread may call this).
    pub fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
    }
}

/// Every worker's counters, for summing.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    workers: Vec<Arc<WorkerCounters>>,
}

/// A sum of all workers' counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// See [`WorkerCounters::accepted`].
    pub accepted: u64,
    /// See [`WorkerCounters::handshakes_full`].
    pub handshakes_full: u64,
    /// See [`WorkerCounters::handshakes_resumed`].
    pub handshakes_resumed: u64,
    /// See [`WorkerCounters::handshakes_failed`].
    pub handshakes_failed: u64,
    /// See [`WorkerCounters::backend_failures`].
    pub backend_failures: u64,
}

impl Counters {
    /// Counters for a new worker.
    pub fn add_worker(&mut self) -> Arc<WorkerCounters> {
        let c = Arc::new(WorkerCounters::default());
        self.workers.push(c.clone());
        c
    }

    /// The sum over workers.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for w in &self.workers {
            t.accepted += w.accepted.load(Relaxed);
            t.handshakes_full += w.handshakes_full.load(Relaxed);
            t.handshakes_resumed += w.handshakes_resumed.load(Relaxed);
            t.handshakes_failed += w.handshakes_failed.load(Relaxed);
            t.backend_failures += w.backend_failures.load(Relaxed);
        }
        t
    }
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

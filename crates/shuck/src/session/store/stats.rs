//! Counters of the shared store: operations by kind and result, and how long handshakes
//! waited for lookups. One atomic add per event; read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// An operation on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A TLS 1.2 session looked up by id.
    Get,
    /// A single-use TLS 1.3 ticket taken.
    Take,
    /// A new session written.
    Put,
    /// The ticket key ring read.
    RingRead,
    /// The ticket key ring written (by the host holding the rotation lock).
    RingWrite,
    /// The rotation lock taken or renewed.
    Lock,
    /// This host's report of its clients and bans written (`--client-share-interval`).
    ClientsWrite,
    /// The farm's reports read (`unsealed`: a value that did not open; `miss`: a host's
    /// report read torn).
    ClientsRead,
}

impl Op {
    /// Every operation, in the order of [`Op::name`].
    pub const ALL: [Op; 8] = [
        Op::Get,
        Op::Take,
        Op::Put,
        Op::RingRead,
        Op::RingWrite,
        Op::Lock,
        Op::ClientsWrite,
        Op::ClientsRead,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Take => "take",
            Op::Put => "put",
            Op::RingRead => "ring_read",
            Op::RingWrite => "ring_write",
            Op::Lock => "lock",
            Op::ClientsWrite => "clients_write",
            Op::ClientsRead => "clients_read",
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (a write, a lock taken, a ring read).
    Ok,
    /// A lookup that found a session.
    Hit,
    /// A lookup that found nothing (or the lock held by another host).
    Miss,
    /// Redis answered with an error or the connection failed.
    Error,
    /// A lookup that did not answer within `--shared-store-timeout`.
    Timeout,
    /// A value that did not open under the farm key: ignored.
    Unsealed,
    /// Not attempted: the store is unreachable, or the write queue was full.
    Skipped,
}

impl Outcome {
    /// Every outcome, in the order of [`Outcome::name`].
    pub const ALL: [Outcome; 7] = [
        Outcome::Ok,
        Outcome::Hit,
        Outcome::Miss,
        Outcome::Error,
        Outcome::Timeout,
        Outcome::Unsealed,
        Outcome::Skipped,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Unsealed => "unsealed",
            Outcome::Skipped => "skipped",
        }
    }
}

/// Upper bounds (seconds) of the lookup latency histogram's buckets.
pub const BUCKETS: [f64; 10] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// The store's counters.
#[derive(Debug, Default)]
pub struct StoreStats {
    ops: [[AtomicU64; Outcome::ALL.len()]; Op::ALL.len()],
    /// Lookups by latency bucket (the last: above every bound).
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_us: AtomicU64,
    /// 1 while the store answers, 0 while it is unreachable.
    pub up: AtomicU64,
}

impl StoreStats {
    /// Counts one `op` ending in `outcome`.
    pub fn count(&self, op: Op, outcome: Outcome) {
        self.ops[op as usize][outcome as usize].fetch_add(1, Relaxed);
    }

    /// How many `op` ended in `outcome`.
    pub fn get(&self, op: Op, outcome: Outcome) -> u64 {
        self.ops[op as usize][outcome as usize].load(Relaxed)
    }

    /// Records how long a handshake waited for a lookup.
    pub fn observe(&self, waited: Duration) {
        let s = waited.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS.len());
        self.latency[i].fetch_add(1, Relaxed);
        self.latency_sum_us
            .fetch_add(waited.as_micros() as u64, Relaxed);
    }

    /// The latency histogram: sum in seconds, count, and the count of each bucket by its
    /// upper bound (the last infinite), not cumulated (the encoder cumulates).
    pub fn latency(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(BUCKETS.len() + 1);
        for (i, c) in self.latency.iter().enumerate() {
            let n = c.load(Relaxed);
            total += n;
            buckets.push((BUCKETS.get(i).copied().unwrap_or(f64::INFINITY), n));
        }
        let sum = self.latency_sum_us.load(Relaxed) as f64 / 1e6;
        (sum, total, buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_each_bucket() {
        let s = StoreStats::default();
        s.observe(Duration::from_micros(50));
        s.observe(Duration::from_micros(700));
        s.observe(Duration::from_secs(1));
        let (sum, count, b) = s.latency();
        assert_eq!(count, 3);
        assert!((sum - 1.00075).abs() < 1e-9);
        assert_eq!(b[0], (0.0001, 1));
        assert_eq!(b[3], (0.001, 1));
        assert_eq!(b[1], (0.000_25, 0));
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, 1));
        s.count(Op::Take, Outcome::Hit);
        assert_eq!(s.get(Op::Take, Outcome::Hit), 1);
        assert_eq!(s.get(Op::Get, Outcome::Hit), 0);
    }
}

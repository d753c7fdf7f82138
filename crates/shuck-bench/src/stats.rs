//! What a load run counts, and the report it makes of it.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Why a session failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// TCP connection refused.
    ConnectRefused,
    /// TCP connect failed otherwise.
    ConnectError,
    /// No answer within the timeout (connect, handshake or response).
    Timeout,
    /// The server sent a TLS alert.
    TlsAlert,
    /// Another TLS error.
    TlsError,
    /// The response was not `200` with the right length.
    BadResponse,
    /// The connection broke mid-way (reset, early close).
    Io,
    /// Open loop only: too many sessions in flight to start another.
    ClientOverload,
}

/// Counters and histograms of one run (or several merged).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Sessions started.
    pub attempted: u64,
    /// Sessions that completed every request.
    pub completed: u64,
    /// Requests answered correctly.
    pub requests: u64,
    /// Sessions whose handshake resumed.
    pub resumed: u64,
    /// Failures by kind.
    pub failures: BTreeMap<Failure, u64>,
    /// Session latency, µs: connect to last response.
    pub session_us: Histogram<u64>,
    /// Handshake latency, µs: connect to handshake done.
    pub handshake_us: Histogram<u64>,
    /// Request latency, µs: request written to response read.
    pub request_us: Histogram<u64>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// What was wrong with the first bad answer (`BadResponse`), in one line.
    pub first_bad: Option<String>,
}

fn histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    // 1 µs to 100 s, 3 significant digits: a few tens of KB.
    Histogram::new_with_bounds(1, 100_000_000, 3)
}

impl Stats {
    /// Nothing counted yet.
    pub fn new() -> Result<Self, hdrhistogram::CreationError> {
        Ok(Stats {
            attempted: 0,
            completed: 0,
            requests: 0,
            resumed: 0,
            failures: BTreeMap::new(),
            session_us: histogram()?,
            handshake_us: histogram()?,
            request_us: histogram()?,
            elapsed: Duration::ZERO,
            first_bad: None,
        })
    }

    /// Counts one failure.
    pub fn fail(&mut self, f: Failure) {
        *self.failures.entry(f).or_default() += 1;
    }

    /// Records a latency, saturating at the histogram's bound.
    pub fn record(h: &mut Histogram<u64>, d: Duration) {
        h.saturating_record((d.as_micros() as u64).max(1));
    }

    /// Adds another run's counts (same wall time assumed: runs of parallel threads).
    pub fn merge(&mut self, o: &Stats) {
        self.attempted += o.attempted;
        self.completed += o.completed;
        self.requests += o.requests;
        self.resumed += o.resumed;
        for (k, v) in &o.failures {
            *self.failures.entry(*k).or_default() += v;
        }
        let _ = self.session_us.add(&o.session_us);
        let _ = self.handshake_us.add(&o.handshake_us);
        let _ = self.request_us.add(&o.request_us);
        self.elapsed = self.elapsed.max(o.elapsed);
        if self.first_bad.is_none() {
            self.first_bad.clone_from(&o.first_bad);
        }
    }

    /// Failed sessions of all kinds.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// The report of this run.
    pub fn report(&self) -> LoadReport {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let ended = self.completed + self.failed();
        LoadReport {
            duration_s: secs,
            attempted: self.attempted,
            completed: self.completed,
            requests: self.requests,
            attempted_per_s: self.attempted as f64 / secs,
            conns_per_s: self.completed as f64 / secs,
            requests_per_s: self.requests as f64 / secs,
            failures: self.failures.clone(),
            failure_ratio: if ended == 0 {
                0.0
            } else {
                self.failed() as f64 / ended as f64
            },
            resumed_share: if self.completed == 0 {
                0.0
            } else {
                self.resumed as f64 / self.completed as f64
            },
            session_ms: Latency::of(&self.session_us),
            handshake_ms: Latency::of(&self.handshake_us),
            request_ms: Latency::of(&self.request_us),
            first_bad_answer: self.first_bad.clone(),
        }
    }
}

/// Latency summary, milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }
}

/// The outcome of a load run, as printed and as saved.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Wall time, seconds.
    pub duration_s: f64,
    /// Sessions started.
    pub attempted: u64,
    /// Sessions completed.
    pub completed: u64,
    /// Requests answered.
    pub requests: u64,
    /// Sessions started per second.
    pub attempted_per_s: f64,
    /// Sessions completed per second.
    pub conns_per_s: f64,
    /// Requests answered per second.
    pub requests_per_s: f64,
    /// Failures by kind.
    pub failures: BTreeMap<Failure, u64>,
    /// Failed / (completed + failed).
    pub failure_ratio: f64,
    /// Completed sessions that really resumed.
    pub resumed_share: f64,
    /// Session latency.
    pub session_ms: Latency,
    /// Handshake latency.
    pub handshake_ms: Latency,
    /// Request latency.
    pub request_ms: Latency,
    /// What was wrong with the first bad answer, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad_answer: Option<String>,
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "duration        {:.2} s", self.duration_s)?;
        writeln!(
            f,
            "sessions        attempted {} ({:.1}/s), completed {} ({:.1}/s)",
            self.attempted, self.attempted_per_s, self.completed, self.conns_per_s
        )?;
        writeln!(
            f,
            "requests        {} ({:.1}/s)",
            self.requests, self.requests_per_s
        )?;
        writeln!(
            f,
            "resumed         {:.1} % of completed sessions",
            self.resumed_share * 100.0
        )?;
        let fails: Vec<String> = self
            .failures
            .iter()
            .map(|(k, v)| format!("{k:?}={v}"))
            .collect();
        writeln!(
            f,
            "failures        {:.3} % {}",
            self.failure_ratio * 100.0,
            fails.join(" ")
        )?;
        if let Some(what) = &self.first_bad_answer {
            writeln!(f, "first bad answer {what}")?;
        }
        for (name, l) in [
            ("session", &self.session_ms),
            ("handshake", &self.handshake_ms),
            ("request", &self.request_ms),
        ] {
            writeln!(
                f,
                "{name:<9} ms    mean {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
                l.mean, l.p50, l.p90, l.p99, l.max
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_arithmetic() {
        let mut s = Stats {
            attempted: 110,
            completed: 100,
            requests: 400,
            resumed: 25,
            elapsed: Duration::from_secs(2),
            ..Stats::new().unwrap()
        };
        s.fail(Failure::Timeout);
        s.fail(Failure::ConnectRefused);
        for ms in 1..=100u64 {
            Stats::record(&mut s.session_us, Duration::from_millis(ms));
        }
        let r = s.report();
        assert_eq!(r.conns_per_s, 50.0);
        assert_eq!(r.requests_per_s, 200.0);
        assert_eq!(r.attempted_per_s, 55.0);
        assert!((r.failure_ratio - 2.0 / 102.0).abs() < 1e-9);
        assert_eq!(r.resumed_share, 0.25);
        assert!(
            (r.session_ms.mean - 50.5).abs() < 0.1,
            "{}",
            r.session_ms.mean
        );
        assert!((r.session_ms.p50 - 50.0).abs() < 0.2);
        assert!((r.session_ms.p99 - 99.0).abs() < 0.2);
        assert_eq!(r.failures[&Failure::Timeout], 1);
    }

    #[test]
    fn merge_adds_counts_and_keeps_the_longest_time() {
        let mut a = Stats {
            completed: 1,
            elapsed: Duration::from_secs(1),
            ..Stats::new().unwrap()
        };
        let mut b = Stats {
            completed: 2,
            elapsed: Duration::from_secs(3),
            ..Stats::new().unwrap()
        };
        b.fail(Failure::Io);
        Stats::record(&mut b.request_us, Duration::from_millis(5));
        a.merge(&b);
        assert_eq!(
            (a.completed, a.failed(), a.elapsed),
            (3, 1, Duration::from_secs(3))
        );
        assert_eq!(a.request_us.len(), 1);
    }

    #[test]
    fn empty_report_has_no_nan() {
        let r = Stats::new().unwrap().report();
        assert_eq!(r.failure_ratio, 0.0);
        assert_eq!(r.resumed_share, 0.0);
        assert_eq!(r.session_ms.mean, 0.0);
    }
}

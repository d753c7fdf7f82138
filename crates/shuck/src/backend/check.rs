//! Active health checks of a server (`check`, `check-tls`, `check-http=PATH`, as HAProxy
//! names them, and `check-grpc[=SERVICE]`): what is probed and how often, and the server's state by its checks. A
//! server that fails `fall` checks in a row takes nothing new until it passes `rise`. The
//! probes themselves run in one place for the whole process (`runtime/worker/checks.rs`).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What a check does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A connection is opened (TCP or the UNIX socket).
    Connect,
    /// A TLS handshake is made.
    Tls,
    /// An HTTP/1.1 GET of this path is answered with an accepted status (over TLS when
    /// `tls`).
    Http {
        /// The path asked for.
        path: String,
        /// Over TLS (`check-tls` beside `check-http`, or a backend with `tls = on`).
        tls: bool,
    },
    /// gRPC's health service (`grpc.health.v1.Health/Check`) asked over HTTP/2 for this
    /// service (empty: the server as a whole) answers `SERVING` (over TLS when the backend
    /// has `tls = on`).
    Grpc {
        /// The service asked about.
        service: String,
    },
}

/// A server's check settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSpec {
    /// What is probed.
    pub probe: Probe,
    /// Statuses `check-http` accepts, as inclusive ranges (default 200 to 399).
    pub statuses: Vec<(u16, u16)>,
    /// Time between checks (`check-interval`, default 2 s), also each probe's limit.
    pub interval: Duration,
    /// Checks passed in a row that bring a server back (`rise`, default 2).
    pub rise: u32,
    /// Checks failed in a row that take it out (`fall`, default 3).
    pub fall: u32,
    /// A PROXY header first (`check-send-proxy`), for servers that require one.
    pub send_proxy: bool,
}

impl CheckSpec {
    /// Whether `status` is accepted.
    pub fn accepts(&self, status: u16) -> bool {
        self.statuses
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&status))
    }
}

/// A server's state by its checks, shared by every worker.
#[derive(Debug, Default)]
pub struct CheckState {
    /// Out of rotation: failed `fall` checks and has not passed `rise` since.
    down: AtomicBool,
    /// Checks passed (> 0) or failed (< 0) in a row.
    streak: AtomicI32,
    /// A probe is under way.
    pub in_flight: AtomicBool,
    /// Checks passed.
    pub passed: AtomicU64,
    /// Checks failed.
    pub failed: AtomicU64,
    /// When the last check ended, in ms since the Unix epoch (0: none yet).
    pub last_ms: AtomicU64,
    /// Its result: 1 passed, 0 failed.
    pub last_ok: AtomicBool,
}

/// What a check's result changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing.
    None,
    /// The server was taken out of rotation.
    Down,
    /// The server is back.
    Up,
}

impl CheckState {
    /// True while out of rotation by its checks.
    pub fn is_down(&self) -> bool {
        self.down.load(Relaxed)
    }

    /// Records a check's result under `spec`'s rise and fall.
    pub fn record(&self, ok: bool, spec: &CheckSpec, now_ms: u64) -> Transition {
        self.last_ms.store(now_ms, Relaxed);
        self.last_ok.store(ok, Relaxed);
        let prev = self.streak.load(Relaxed);
        let streak = match (ok, prev) {
            (true, p) if p > 0 => p.saturating_add(1),
            (true, _) => 1,
            (false, p) if p < 0 => p.saturating_sub(1),
            (false, _) => -1,
        };
        self.streak.store(streak, Relaxed);
        if ok {
            self.passed.fetch_add(1, Relaxed);
        } else {
            self.failed.fetch_add(1, Relaxed);
        }
        let down = self.down.load(Relaxed);
        if down && ok && streak >= spec.rise as i32 {
            self.down.store(false, Relaxed);
            Transition::Up
        } else if !down && !ok && -streak >= spec.fall as i32 {
            self.down.store(true, Relaxed);
            Transition::Down
        } else {
            Transition::None
        }
    }
}

/// The statuses `check-status=` names: codes and ranges (`200|204|300-399`, `2xx`).
pub fn parse_statuses(v: &str) -> Result<Vec<(u16, u16)>, String> {
    let mut out = Vec::new();
    for part in v.split(['|', ' ']).filter(|p| !p.is_empty()) {
        let bad = || {
            format!("check-status: {part:?}: expected a status (200), a range (200-299) or a class (2xx)")
        };
        let range = if let Some(class) = part.strip_suffix("xx") {
            let c: u16 = class.parse().map_err(|_| bad())?;
            (c * 100, c * 100 + 99)
        } else if let Some((lo, hi)) = part.split_once('-') {
            (
                lo.parse().map_err(|_| bad())?,
                hi.parse().map_err(|_| bad())?,
            )
        } else {
            let s: u16 = part.parse().map_err(|_| bad())?;
            (s, s)
        };
        if !(100..=599).contains(&range.0) || !(100..=599).contains(&range.1) || range.0 > range.1 {
            return Err(bad());
        }
        out.push(range);
    }
    if out.is_empty() {
        return Err("check-status: no status given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CheckSpec {
        CheckSpec {
            probe: Probe::Connect,
            statuses: vec![(200, 399)],
            interval: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            send_proxy: false,
        }
    }

    #[test]
    fn fall_takes_out_and_rise_brings_back() {
        let s = CheckState::default();
        let c = spec();
        assert_eq!(s.record(false, &c, 1), Transition::None);
        assert_eq!(s.record(false, &c, 2), Transition::None);
        assert_eq!(
            s.record(true, &c, 3),
            Transition::None,
            "a pass resets the streak"
        );
        for _ in 0..2 {
            assert_eq!(s.record(false, &c, 4), Transition::None);
        }
        assert_eq!(s.record(false, &c, 5), Transition::Down);
        assert!(s.is_down());
        assert_eq!(s.record(false, &c, 6), Transition::None);
        assert_eq!(s.record(true, &c, 7), Transition::None);
        assert_eq!(s.record(true, &c, 8), Transition::Up);
        assert!(!s.is_down());
        assert_eq!(s.passed.load(Relaxed), 3);
        assert_eq!(s.failed.load(Relaxed), 6);
    }

    #[test]
    fn statuses() {
        assert_eq!(
            parse_statuses("200|204|3xx").unwrap(),
            [(200, 200), (204, 204), (300, 399)]
        );
        assert_eq!(parse_statuses("200-299").unwrap(), [(200, 299)]);
        for bad in ["", "abc", "99", "600", "300-200", "9xx"] {
            assert!(parse_statuses(bad).is_err(), "{bad}");
        }
        let mut c = spec();
        c.statuses = parse_statuses("2xx|404").unwrap();
        assert!(c.accepts(204) && c.accepts(404) && !c.accepts(301));
    }
}

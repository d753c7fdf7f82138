//! Time as shuck stores it: whole milliseconds in a `u64`, which fits in an atomic and in a
//! wire field.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 should the clock stand before it): for times that
/// other hosts read (tickets, replication).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Milliseconds since `epoch`, plus one so that 0 can mean "never": for deadlines kept in
/// this process only, which a wall-clock step must not move.
pub fn ms_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64 + 1
}

/// A reading of the monotonic clock, in nanoseconds: what a request's timings are taken
/// from on the data path, where an `Instant`'s checked arithmetic costs more than reading
/// the clock (through the C library's `clock_gettime`, its vDSO, as std reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u64);

impl Tick {
    /// Now.
    pub fn now() -> Tick {
        // CLOCK_MONOTONIC cannot fail on Linux (EINVAL is for an unknown clock); should it,
        // a reading of 0 makes durations read 0, never a panic.
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(Tick(0), |t| {
            Tick((t.tv_sec() as u64).wrapping_mul(1_000_000_000) + t.tv_nsec() as u64)
        })
    }

    /// Microseconds from `earlier` to this reading; 0 if `earlier` is later.
    pub fn micros_since(self, earlier: Tick) -> u64 {
        self.0.saturating_sub(earlier.0) / 1000
    }
}

/// Microseconds since the Unix epoch (0 should the clock stand before it).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A time as RFC 3339, UTC, to the second (the admin API's answers).
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|d| {
            d.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

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

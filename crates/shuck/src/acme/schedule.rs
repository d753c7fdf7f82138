//! When to renew: inside the window the CA suggests (ACME Renewal Information, RFC 9773)
//! when it offers one, else at two thirds of the certificate's lifetime; at a random point
//! (jitter) so that a farm's or a fleet's certificates do not all renew in the same
//! second. After a failure, the next attempt backs off exponentially.

use std::time::{Duration, SystemTime};

/// First wait after a failed order.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// Longest wait between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// A random fraction in [0, 1).
pub fn random_fraction() -> f64 {
    let mut b = [0u8; 4];
    if aws_lc_rs::rand::fill(&mut b).is_err() {
        return 0.5;
    }
    f64::from(u32::from_be_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}

/// Without renewal information: two thirds into the lifetime, moved earlier by up to a
/// thirtieth of it (`jitter` in [0, 1)).
pub fn by_lifetime(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let life = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    let at = not_before + life.mul_f64(2.0 / 3.0);
    at.checked_sub(life.mul_f64(jitter.clamp(0.0, 1.0) / 30.0))
        .unwrap_or(at)
}

/// With the CA's window: a random point inside it (`jitter` in [0, 1)); a window already
/// past means now.
pub fn in_window(start: SystemTime, end: SystemTime, jitter: f64, now: SystemTime) -> SystemTime {
    let span = end.duration_since(start).unwrap_or(Duration::ZERO);
    let at = start + span.mul_f64(jitter.clamp(0.0, 1.0));
    if end <= now {
        now
    } else {
        at
    }
}

/// The wait after `failures` failed attempts in a row (at least one).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_thirds_of_the_lifetime_with_jitter_earlier_only() {
        let nb = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let na = nb + Duration::from_secs(90 * 86400);
        assert_eq!(
            by_lifetime(nb, na, 0.0),
            nb + Duration::from_secs(60 * 86400)
        );
        let j = by_lifetime(nb, na, 0.999);
        assert!(j < nb + Duration::from_secs(60 * 86400));
        assert!(j > nb + Duration::from_secs(57 * 86400));
    }

    #[test]
    fn a_window_is_used_and_a_past_one_means_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let (s, e) = (
            now + Duration::from_secs(100),
            now + Duration::from_secs(200),
        );
        assert_eq!(in_window(s, e, 0.5, now), now + Duration::from_secs(150));
        let past = in_window(
            now - Duration::from_secs(200),
            now - Duration::from_secs(100),
            0.5,
            now,
        );
        assert_eq!(past, now);
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_secs(60));
        assert_eq!(backoff(2), Duration::from_secs(120));
        assert_eq!(backoff(4), Duration::from_secs(480));
        assert_eq!(backoff(40), BACKOFF_MAX);
        let f = random_fraction();
        assert!((0.0..1.0).contains(&f));
    }
}

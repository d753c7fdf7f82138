//! A rate with a burst (`20/s,burst=40`) and the token bucket that holds a client to it, in
//! thousandths of an event so that a bucket fits in two 32-bit words of a table entry.

/// A rate limit: events a second (or a minute) and the burst allowed above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Thousandths of an event added each minute (a minute, so that `1/m` is exact).
    per_min_milli: u64,
    /// The bucket's size, in thousandths of an event.
    cap: i32,
    /// As written, for messages and the admin API.
    count: u32,
    per: Per,
    burst: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Per {
    Second,
    Minute,
}

/// One event in thousandths.
const ONE: i32 = 1000;
/// The largest rate or burst accepted (its thousandths fit in the bucket's word).
const MAX: u32 = 1_000_000;

impl Rate {
    /// A full bucket.
    pub fn full(&self) -> i32 {
        self.cap
    }

    /// Takes one event from the bucket (`tokens`, refilled at `at`) at `now` (ms): `Ok`, or
    /// `Err` with the milliseconds until one is there. A refused event takes nothing.
    pub fn take(&self, tokens: &mut i32, at: &mut u32, now: u32) -> Result<(), u32> {
        self.refill(tokens, at, now);
        if *tokens >= ONE {
            *tokens -= ONE;
            return Ok(());
        }
        let short = (ONE - *tokens) as u64;
        Err(short.saturating_mul(60_000).div_ceil(self.per_min_milli) as u32)
    }

    /// Events taken elsewhere (other hosts of the farm): the bucket may go below empty, so
    /// that the farm as a whole keeps to the rate.
    pub fn charge(&self, tokens: &mut i32, at: &mut u32, now: u32, events: u32) {
        self.refill(tokens, at, now);
        let owed = i64::from(events) * i64::from(ONE);
        *tokens = (i64::from(*tokens) - owed).max(-i64::from(self.cap)) as i32;
    }

    /// Milliseconds until a bucket left at `tokens` at `at` is full again, at `now`: how
    /// long a client is in debt to this rate, and must be remembered.
    pub fn owed_ms(&self, tokens: i32, at: u32, now: u32) -> u64 {
        let (mut tokens, mut at) = (tokens.min(self.cap), at);
        self.refill(&mut tokens, &mut at, now);
        let short = u64::try_from(i64::from(self.cap) - i64::from(tokens)).unwrap_or(0);
        (short * 60_000).div_ceil(self.per_min_milli.max(1))
    }

    fn refill(&self, tokens: &mut i32, at: &mut u32, now: u32) {
        let dt = now.wrapping_sub(*at);
        // Another thread's clock read a moment earlier: no time has passed.
        if dt > u32::MAX / 2 {
            return;
        }
        // Past four hours any bucket is full (and the product stays in 64 bits).
        if dt > 1 << 24 {
            *at = now;
            *tokens = self.cap;
            return;
        }
        let add = u64::from(dt) * self.per_min_milli / 60_000;
        if add == 0 {
            return;
        }
        // Only the time the whole thousandths took is used up; the rest carries over.
        *at = at.wrapping_add((add * 60_000 / self.per_min_milli) as u32);
        *tokens = (i64::from(*tokens) + add as i64).min(i64::from(self.cap)) as i32;
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `N/s` or `N/m`, then optionally `,burst=B` (the burst defaults to N).
    fn from_str(s: &str) -> Result<Self, String> {
        let (rate, burst) = match s.split_once(',') {
            Some((r, b)) => (r.trim(), Some(b.trim())),
            None => (s.trim(), None),
        };
        let bad = || {
            format!("{s:?}: expected RATE/s or RATE/m, optionally ,burst=N (e.g. 20/s,burst=40)")
        };
        let (n, unit) = rate.split_once('/').ok_or_else(bad)?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Per::Second,
            "m" | "min" | "minute" => Per::Minute,
            _ => return Err(bad()),
        };
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        let burst = match burst {
            None => count,
            Some(b) => b
                .strip_prefix("burst=")
                .and_then(|b| b.trim().parse().ok())
                .ok_or_else(bad)?,
        };
        if count == 0 || count > MAX {
            return Err(format!("{s:?}: the rate must be 1 to {MAX}"));
        }
        if burst == 0 || burst > MAX {
            return Err(format!("{s:?}: the burst must be 1 to {MAX}"));
        }
        let per_min_milli = match per {
            Per::Second => u64::from(count) * 60_000,
            Per::Minute => u64::from(count) * 1000,
        };
        Ok(Rate {
            per_min_milli,
            cap: burst as i32 * ONE,
            count,
            per,
            burst,
        })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = match self.per {
            Per::Second => "s",
            Per::Minute => "m",
        };
        write!(f, "{}/{per},burst={}", self.count, self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let r: Rate = "20/s,burst=40".parse().unwrap();
        assert_eq!(r.to_string(), "20/s,burst=40");
        assert_eq!("5/m".parse::<Rate>().unwrap().to_string(), "5/m,burst=5");
        for bad in [
            "",
            "20",
            "20/h",
            "0/s",
            "x/s",
            "20/s,burst=",
            "20/s,bust=3",
            "20/s,burst=0",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let r: Rate = "10/s,burst=3".parse().unwrap();
        let (mut t, mut at) = (r.full(), 0u32);
        for _ in 0..3 {
            r.take(&mut t, &mut at, 0).unwrap();
        }
        let wait = r.take(&mut t, &mut at, 0).unwrap_err();
        assert_eq!(wait, 100);
        assert!(r.take(&mut t, &mut at, 50).is_err());
        r.take(&mut t, &mut at, 100).unwrap();
        assert!(r.take(&mut t, &mut at, 100).is_err());
        // A long quiet time refills to the burst, no more.
        for _ in 0..3 {
            r.take(&mut t, &mut at, 100_000).unwrap();
        }
        assert!(r.take(&mut t, &mut at, 100_000).is_err());
        // A clock read a moment earlier on another thread adds nothing.
        assert!(r.take(&mut t, &mut at, 99_999).is_err());
    }

    #[test]
    fn slow_rates_accumulate_fractions() {
        let r: Rate = "1/m".parse().unwrap();
        let (mut t, mut at) = (r.full(), 0u32);
        r.take(&mut t, &mut at, 0).unwrap();
        let mut now = 0;
        while r.take(&mut t, &mut at, now).is_err() {
            now += 1;
            assert!(now < 70_000);
        }
        assert!((59_000..=61_000).contains(&now), "{now}");
    }

    #[test]
    fn remote_events_are_charged() {
        let r: Rate = "10/s".parse().unwrap();
        let (mut t, mut at) = (r.full(), 0u32);
        r.charge(&mut t, &mut at, 0, 25);
        assert_eq!(t, -10_000);
        assert!(r.take(&mut t, &mut at, 1000).is_err());
        r.take(&mut t, &mut at, 2100).unwrap();
    }
}

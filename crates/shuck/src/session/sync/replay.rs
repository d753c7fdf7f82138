//! Freshness of datagrams: a timestamp window and, per sender, a sliding window of sequence
//! numbers already seen (as IPsec's anti-replay window).
//!
//! A sender is forgotten only once its newest datagram is older than the time window, so
//! any replay of its datagrams is then refused as stale: forgetting never reopens a replay.

use std::collections::HashMap;

use super::datagram::Header;
use super::wire::{Reject, SenderId};

/// Sequence numbers tracked behind the highest one seen.
const WINDOW_BITS: u64 = 1024;
const WORDS: usize = (WINDOW_BITS / 64) as usize;

#[derive(Debug)]
struct Seen {
    highest: u64,
    /// Bit `i` set: sequence `highest - i` was accepted.
    bits: [u64; WORDS],
    /// Newest timestamp accepted from this sender.
    newest: u64,
}

impl Seen {
    fn new(seq: u64, ts: u64) -> Self {
        let mut bits = [0; WORDS];
        bits[0] = 1;
        Seen {
            highest: seq,
            bits,
            newest: ts,
        }
    }

    fn test(&self, d: u64) -> bool {
        self.bits[(d / 64) as usize] & (1 << (d % 64)) != 0
    }

    fn set(&mut self, d: u64) {
        self.bits[(d / 64) as usize] |= 1 << (d % 64);
    }

    /// Moves the window forward by `n`.
    fn shift(&mut self, n: u64) {
        if n >= WINDOW_BITS {
            self.bits = [0; WORDS];
            return;
        }
        let words = (n / 64) as usize;
        let bits = (n % 64) as u32;
        for i in (0..WORDS).rev() {
            let lo = i.checked_sub(words).map_or(0, |j| self.bits[j]);
            let lower = i.checked_sub(words + 1).map_or(0, |j| self.bits[j]);
            self.bits[i] = if bits == 0 {
                lo
            } else {
                (lo << bits) | (lower >> (64 - bits))
            };
        }
    }

    fn accept(&mut self, seq: u64, ts: u64) -> Result<(), Reject> {
        if seq > self.highest {
            self.shift(seq - self.highest);
            self.highest = seq;
            self.set(0);
        } else {
            let d = self.highest - seq;
            if d >= WINDOW_BITS || self.test(d) {
                return Err(Reject::Replay);
            }
            self.set(d);
        }
        self.newest = self.newest.max(ts);
        Ok(())
    }
}

/// Every sender heard from recently.
#[derive(Debug)]
pub struct Freshness {
    senders: HashMap<SenderId, Seen>,
    window_ms: u64,
    max_senders: usize,
}

impl Freshness {
    /// Accepts timestamps within `window_ms` of now either way; tracks at most
    /// `max_senders` live senders.
    pub fn new(window_ms: u64, max_senders: usize) -> Self {
        Freshness {
            senders: HashMap::new(),
            window_ms,
            max_senders,
        }
    }

    /// Checks an opened datagram's header at local time `now` (unix ms) and records it.
    pub fn check(&mut self, h: &Header, now: u64) -> Result<(), Reject> {
        if h.timestamp.saturating_add(self.window_ms) < now {
            return Err(Reject::Stale);
        }
        if h.timestamp > now.saturating_add(self.window_ms) {
            return Err(Reject::Future);
        }
        if let Some(seen) = self.senders.get_mut(&h.sender) {
            return seen.accept(h.sequence, h.timestamp);
        }
        if self.senders.len() >= self.max_senders {
            let window = self.window_ms;
            self.senders
                .retain(|_, s| s.newest.saturating_add(window) >= now);
            if self.senders.len() >= self.max_senders {
                return Err(Reject::Senders);
            }
        }
        self.senders
            .insert(h.sender, Seen::new(h.sequence, h.timestamp));
        Ok(())
    }

    /// Senders tracked now.
    pub fn senders(&self) -> usize {
        self.senders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn h(sender: u8, seq: u64, ts: u64) -> Header {
        Header {
            sender: [sender; 8],
            timestamp: ts,
            sequence: seq,
        }
    }

    #[test]
    fn time_window_both_ways() {
        let mut f = Freshness::new(5000, 10);
        assert_eq!(f.check(&h(1, 0, NOW - 5001), NOW), Err(Reject::Stale));
        assert_eq!(f.check(&h(1, 0, NOW + 5001), NOW), Err(Reject::Future));
        assert!(f.check(&h(1, 0, NOW - 5000), NOW).is_ok());
        assert!(f.check(&h(1, 1, NOW + 5000), NOW).is_ok());
    }

    #[test]
    fn each_sequence_once_even_out_of_order() {
        let mut f = Freshness::new(5000, 10);
        for seq in [5, 3, 4, 100, 7, 1000, 64, 65, 1023] {
            assert!(f.check(&h(1, seq, NOW), NOW).is_ok(), "{seq}");
        }
        for seq in [5, 3, 4, 100, 7, 1000, 64, 65, 1023] {
            assert_eq!(f.check(&h(1, seq, NOW), NOW), Err(Reject::Replay), "{seq}");
        }
        // Another sender's numbers are its own.
        assert!(f.check(&h(2, 5, NOW), NOW).is_ok());
        // Far ahead: everything behind the window is refused, the window itself is fresh.
        assert!(f.check(&h(1, 5000, NOW), NOW).is_ok());
        assert_eq!(f.check(&h(1, 1000, NOW), NOW), Err(Reject::Replay));
        assert!(f.check(&h(1, 4999, NOW), NOW).is_ok());
        assert!(f.check(&h(1, 5000 - 1023, NOW), NOW).is_ok());
        assert_eq!(f.check(&h(1, 5000 - 1024, NOW), NOW), Err(Reject::Replay));
    }

    #[test]
    fn window_shifts_match_a_plain_set() {
        // Compare against a set of every accepted number, over many random steps.
        let mut f = Freshness::new(5000, 10);
        let mut all = std::collections::BTreeSet::new();
        let mut highest = 0u64;
        let mut seed = 88172645463325252u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let step = seed % 200;
            let seq = if seed % 3 == 0 {
                highest + step
            } else {
                highest.saturating_sub(step * 6)
            };
            let expect = if all.contains(&seq)
                || highest.saturating_sub(seq) >= WINDOW_BITS && !all.is_empty()
            {
                Err(Reject::Replay)
            } else {
                Ok(())
            };
            let got = f.check(&h(1, seq, NOW), NOW);
            assert_eq!(got, expect, "seq {seq} highest {highest}");
            if got.is_ok() {
                all.insert(seq);
                highest = highest.max(seq);
            }
        }
    }

    #[test]
    fn senders_are_bounded_and_forgotten_only_when_stale() {
        let mut f = Freshness::new(5000, 2);
        assert!(f.check(&h(1, 0, NOW), NOW).is_ok());
        assert!(f.check(&h(2, 0, NOW), NOW).is_ok());
        assert_eq!(f.check(&h(3, 0, NOW), NOW), Err(Reject::Senders));
        // Six seconds on, 1 and 2 are stale and make room; their replays are stale too.
        let later = NOW + 6000;
        assert!(f.check(&h(3, 0, later), later).is_ok());
        assert_eq!(f.senders(), 1);
        assert_eq!(f.check(&h(1, 0, NOW), later), Err(Reject::Stale));
    }
}

//! Which server a connection or request goes to, by its pool's method
//! (`balance.rs`): the one its key names itself (a sticky cookie, `hash`), else round
//! robin, the least loaded for its weight, or the lighter of two drawn at random.

use std::sync::atomic::Ordering::Relaxed;

use super::balance::{Balance, Key};
use super::{Picker, Pool, Server};

impl Pool {
    /// The server `key` itself names: its sticky cookie's, if up, else with `hash` the
    /// first up on the ring from its hash that is under the load bound.
    pub(super) fn fixed(&self, key: &Key) -> Option<usize> {
        if key.sticky.is_none() && !matches!(self.balance, Balance::Hash { .. }) {
            return None; // the common case: nothing to look at
        }
        let all_down = self.servers.iter().all(|s| s.is_down() || s.is_out());
        let usable = |s: &Server| !s.is_out() && (!s.is_down() || all_down);
        if let Some(id) = key.sticky {
            if let Some(i) = self.ids.iter().position(|&i| i == id) {
                if usable(&self.servers[i]) {
                    return Some(i);
                }
            }
        }
        let (Balance::Hash { factor, .. }, Some(h)) = (&self.balance, key.hash) else {
            return None;
        };
        let up = self.servers.iter().filter(|s| usable(s)).count().max(1) as u64;
        let active = |i: usize| self.servers[i].stats.active.load(Relaxed) as u64;
        let total: u64 = (0..self.servers.len()).map(active).sum();
        // The most one server may hold: factor% of the average, counting this one.
        let limit = (u64::from(*factor) * (total + 1)).div_ceil(100 * up);
        let mut first = None;
        for i in self.ring.walk(h) {
            if !usable(&self.servers[i]) {
                continue;
            }
            first.get_or_insert(i);
            if *factor == 0 || active(i) < limit {
                return Some(i);
            }
        }
        first
    }

    /// The server for `key` by the pool's method, among those that are up (all, if none
    /// is): the one it names itself first ([`Pool::fixed`]).
    pub(super) fn pick(&self, picker: &Picker, key: &Key) -> usize {
        if let Some(i) = self.fixed(key) {
            return i;
        }
        let all_down = self.servers.iter().all(|s| s.is_down() || s.is_out());
        let usable = |s: &Server| !s.is_out() && (!s.is_down() || all_down);
        // Load for its weight: a before b when a.active / a.weight < b.active / b.weight.
        let load = |i: usize| {
            let s = &self.servers[i];
            (s.stats.active.load(Relaxed) as u64, u64::from(s.weight()))
        };
        let lighter = |a: usize, b: usize| {
            let ((la, wa), (lb, wb)) = (load(a), load(b));
            la * wb < lb * wa
        };
        match &self.balance {
            // hash without its key (no such header or cookie): round robin, as HAProxy.
            Balance::RoundRobin | Balance::Hash { .. } => self.round_robin(picker),
            Balance::LeastConn => {
                // Ties go round: the search starts where the round robin is.
                let n = self.servers.len();
                let start = self.round_robin(picker);
                let mut best: Option<usize> = None;
                for k in 0..n {
                    let i = (start + k) % n;
                    if usable(&self.servers[i]) && best.is_none_or(|b| lighter(i, b)) {
                        best = Some(i);
                    }
                }
                best.unwrap_or(start)
            }
            Balance::LeastRequests => {
                let up: Vec<usize> = (0..self.servers.len())
                    .filter(|&i| usable(&self.servers[i]))
                    .collect();
                match up.len() {
                    0 => self.round_robin(picker),
                    1 => up[0],
                    n => {
                        // Two different servers at random; the lighter.
                        let a = picker.dice.below(n);
                        let b = (a + 1 + picker.dice.below(n - 1)) % n;
                        let (a, b) = (up[a], up[b]);
                        if lighter(b, a) {
                            b
                        } else {
                            a
                        }
                    }
                }
            }
        }
    }

    /// Smooth weighted round robin over servers that are up (all, if none is).
    pub(super) fn round_robin(&self, picker: &Picker) -> usize {
        let mut rows = picker.current.borrow_mut();
        if rows.len() <= self.slot {
            rows.resize_with(self.slot + 1, Vec::new);
        }
        let cur = &mut rows[self.slot];
        if cur.len() != self.servers.len() {
            *cur = vec![0; self.servers.len()];
        }
        let all_down = self.servers.iter().all(|s| s.is_down() || s.is_out());
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, s) in self.servers.iter().enumerate() {
            if s.is_out() || (s.is_down() && !all_down) {
                continue;
            }
            let w = i64::from(s.weight());
            cur[i] += w;
            total += w;
            if best.is_none_or(|b| cur[i] > cur[b]) {
                best = Some(i);
            }
        }
        let b = best.unwrap_or(0);
        if let Some(c) = cur.get_mut(b) {
            *c -= total;
        }
        b
    }
}

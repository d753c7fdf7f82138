//! The client table: a fixed number of 64-byte entries, shared by every worker thread,
//! in sets of eight ways under one lock per shard. A client not in the table takes the way
//! of the coldest client of its set (activity halved each second, a client with
//! connections open kept over an idle one), so a spray of new addresses pushes out only
//! each other while the heavy hitters, whose activity is high, stay tracked and limited.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use super::addr::Key;
use super::rate::Rate;

/// Ways of a set: the candidates one new client may push out.
const WAYS: usize = 8;
/// Locks: enough that two threads rarely meet on one.
const SHARDS: usize = 64;
/// Refusals of one client closer than this are one episode: logged once.
pub const EPISODE_MS: u32 = 10_000;

/// The limits one scope (every frontend, or one with its own) holds each client to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// `--client-max-conns`: connections open at once (0: no limit).
    pub max_conns: u32,
    /// `--client-conn-rate`: new connections.
    pub conn_rate: Option<Rate>,
    /// `--client-request-rate`: HTTP requests, over every version.
    pub request_rate: Option<Rate>,
}

impl Limits {
    /// Whether clients must be counted at all.
    pub fn any(&self) -> bool {
        self.max_conns > 0 || self.conn_rate.is_some() || self.request_rate.is_some()
    }
}

/// What one client has done, in one scope. 64 bytes, the memory a tracked client costs.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Entry {
    key: u128,
    /// The scope plus one; 0 is a free way.
    scope: u16,
    /// Connections open on the farm's other hosts, as they last said.
    remote_conns: u16,
    conns: u32,
    conn_tokens: i32,
    conn_at: u32,
    req_tokens: i32,
    req_at: u32,
    /// Recent activity, halved each second since `heat_at`.
    heat: u32,
    heat_at: u32,
    total_conns: u32,
    total_requests: u32,
    refused: u32,
    /// When the last refusal was (0: never).
    refused_at: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 64);

/// The memory each tracked client takes, in bytes (for the README's sizing).
pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

impl Entry {
    fn heat_at(&self, now: u32) -> u32 {
        let secs = now.wrapping_sub(self.heat_at) / 1000;
        if secs >= 32 {
            0
        } else {
            self.heat >> secs
        }
    }

    fn warm(&mut self, now: u32) {
        let secs = now.wrapping_sub(self.heat_at) / 1000;
        if secs > 0 && secs < u32::MAX / 2000 {
            self.heat = if secs >= 32 { 0 } else { self.heat >> secs };
            self.heat_at = self.heat_at.wrapping_add(secs * 1000);
        }
        self.heat = self.heat.saturating_add(1);
    }

    /// How long it owes `limits`' rates (the longer of its two buckets), in ms.
    fn owed_ms(&self, limits: &Limits, now: u32) -> u64 {
        let conn = limits
            .conn_rate
            .map_or(0, |r| r.owed_ms(self.conn_tokens, self.conn_at, now));
        let req = limits
            .request_rate
            .map_or(0, |r| r.owed_ms(self.req_tokens, self.req_at, now));
        conn.max(req)
    }

    /// Counts a refusal; whether it starts an episode.
    fn refuse(&mut self, now: u32) -> bool {
        // A moment earlier on another thread's clock wraps: the same episode.
        let dt = now.wrapping_sub(self.refused_at);
        let first = self.refused_at == 0 || (dt > EPISODE_MS && dt < u32::MAX / 2);
        self.refused = self.refused.saturating_add(1);
        self.refused_at = now.max(1);
        self.warm(now);
        first
    }
}

/// Why the table refused an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// `--client-max-conns`.
    Conns,
    /// `--client-conn-rate`, with the milliseconds until one more is allowed.
    ConnRate(u32),
    /// `--client-request-rate`, likewise.
    RequestRate(u32),
}

/// A refusal by the table: why, and whether it is the first of the client's episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The limit it is over.
    pub over: Over,
    /// The first in this client's episode (log it).
    pub first: bool,
}

/// Where a client's entry was when its connection opened, so closing it finds it again
/// without a lookup (and touches nothing if it was pushed out meanwhile).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    index: u32,
    key: Key,
    scope: u16,
}

/// One row of `GET /clients`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The client.
    pub key: Key,
    /// Its scope (0: the global limits; a frontend's slot plus one).
    pub scope: u16,
    /// Connections open now (this host; `remote` the farm's others).
    pub conns: u32,
    /// Connections open on the farm's other hosts.
    pub remote: u16,
    /// Recent activity (events, halved each second).
    pub heat: u32,
    /// Connections since it was tracked.
    pub total_conns: u32,
    /// Requests since it was tracked.
    pub total_requests: u32,
    /// Refusals since it was tracked.
    pub refused: u32,
}

/// The shared client table.
#[derive(Debug)]
pub struct Table {
    shards: Box<[Mutex<Box<[Entry]>>]>,
    sets_per_shard: usize,
    hasher: std::collections::hash_map::RandomState,
    epoch: Instant,
    evictions: AtomicU64,
    used: AtomicU64,
    /// Each scope's limits, by scope (what a pushed-out client's debt is read by).
    scopes: arc_swap::ArcSwap<Vec<Limits>>,
}

impl Table {
    /// A table of at least `size` entries (rounded up to whole sets of every shard).
    pub fn new(size: usize) -> Table {
        let per_shard = size.div_ceil(SHARDS).div_ceil(WAYS).max(1);
        Table {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(vec![Entry::default(); per_shard * WAYS].into()))
                .collect(),
            sets_per_shard: per_shard,
            hasher: Default::default(),
            epoch: Instant::now(),
            evictions: AtomicU64::new(0),
            used: AtomicU64::new(0),
            scopes: Default::default(),
        }
    }

    /// `scope` holds its clients to `limits` from now on (start, reload).
    pub fn set_scope(&self, scope: u16, limits: Limits) {
        let mut v = Vec::clone(&self.scopes.load());
        let i = usize::from(scope);
        if v.len() <= i {
            v.resize(i + 1, Limits::default());
        }
        v[i] = limits;
        self.scopes.store(std::sync::Arc::new(v));
    }

    /// Entries it holds at most.
    pub fn capacity(&self) -> usize {
        SHARDS * self.sets_per_shard * WAYS
    }

    /// Entries in use.
    pub fn len(&self) -> u64 {
        self.used.load(Relaxed)
    }

    /// Whether no client is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Clients pushed out to make room.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Relaxed)
    }

    /// Milliseconds since the table was made (wrapping after 49 days, which every
    /// difference taken here tolerates).
    pub fn now(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    /// The shard and the set in it where `key`'s entry in `scope` lives.
    fn set_of(&self, key: Key, scope: u16) -> (usize, usize) {
        let h = self.hasher.hash_one((key.0, scope));
        let set = (h >> 8) as usize % (self.sets_per_shard * SHARDS);
        (set % SHARDS, set / SHARDS)
    }

    /// The client's entry (made, pushing out the coldest of its set, if it had none) under
    /// its shard's lock.
    fn with<T>(&self, key: Key, scope: u16, f: impl FnOnce(&mut Entry, u32, u32) -> T) -> T {
        let (shard, set) = self.set_of(key, scope);
        let now = self.now();
        // A thread that panicked under the lock left counters, never a broken invariant.
        let mut ways = self.shards[shard].lock().unwrap_or_else(|p| p.into_inner());
        let base = set * WAYS;
        let ways = &mut ways[base..base + WAYS];
        let tag = scope + 1;
        let at = match ways.iter().position(|e| e.scope == tag && e.key == key.0) {
            Some(i) => i,
            None => {
                let scopes = self.scopes.load();
                let i = victim(ways, now, &scopes);
                if ways[i].scope == 0 {
                    self.used.fetch_add(1, Relaxed);
                } else {
                    self.evictions.fetch_add(1, Relaxed);
                }
                ways[i] = Entry {
                    key: key.0,
                    scope: tag,
                    heat_at: now,
                    conn_at: now,
                    req_at: now,
                    conn_tokens: i32::MAX,
                    req_tokens: i32::MAX,
                    ..Entry::default()
                };
                i
            }
        };
        let index = ((shard * self.sets_per_shard + set) * WAYS + at) as u32;
        f(&mut ways[at], now, index)
    }

    /// A new connection of `key` in `scope`: its slot, or why it is over a limit.
    pub fn open(&self, key: Key, scope: u16, limits: &Limits) -> Result<Slot, Refusal> {
        self.with(key, scope, |e, now, index| {
            let open = e.conns + u32::from(e.remote_conns);
            if limits.max_conns > 0 && open >= limits.max_conns {
                let first = e.refuse(now);
                return Err(Refusal {
                    over: Over::Conns,
                    first,
                });
            }
            if let Some(r) = &limits.conn_rate {
                e.conn_tokens = e.conn_tokens.min(r.full());
                if let Err(ms) = r.take(&mut e.conn_tokens, &mut e.conn_at, now) {
                    let first = e.refuse(now);
                    return Err(Refusal {
                        over: Over::ConnRate(ms),
                        first,
                    });
                }
            }
            e.conns += 1;
            e.total_conns = e.total_conns.saturating_add(1);
            e.warm(now);
            Ok(Slot { index, key, scope })
        })
    }

    /// Whether one more connection of `key` in `scope` would be refused, or leave it at
    /// its limits; nothing is charged (an entry not yet there is not made).
    pub fn near(&self, key: Key, scope: u16, limits: &Limits) -> bool {
        let (shard, set) = self.set_of(key, scope);
        let now = self.now();
        let ways = self.shards[shard].lock().unwrap_or_else(|p| p.into_inner());
        let base = set * WAYS;
        let tag = scope + 1;
        let Some(e) = ways[base..base + WAYS]
            .iter()
            .find(|e| e.scope == tag && e.key == key.0)
        else {
            return false;
        };
        let open = e.conns + u32::from(e.remote_conns);
        if limits.max_conns > 0 && open + 1 >= limits.max_conns {
            return true;
        }
        limits.conn_rate.is_some_and(|r| {
            let (mut tokens, mut at) = (e.conn_tokens.min(r.full()), e.conn_at);
            // Two more would not pass: the next one is the last the bucket holds.
            r.take(&mut tokens, &mut at, now).is_err() || r.take(&mut tokens, &mut at, now).is_err()
        })
    }

    /// The connection of `slot` closed.
    pub fn close(&self, slot: Slot) {
        let per_shard = self.sets_per_shard * WAYS;
        let (shard, at) = (
            slot.index as usize / per_shard,
            slot.index as usize % per_shard,
        );
        let Some(lock) = self.shards.get(shard) else {
            return;
        };
        let mut ways = lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = ways
            .get_mut(at)
            .filter(|e| e.key == slot.key.0 && e.scope == slot.scope + 1)
        {
            e.conns = e.conns.saturating_sub(1);
        }
    }

    /// A request of `key` in `scope`, held to `rate`.
    pub fn request(&self, key: Key, scope: u16, rate: &Rate) -> Result<(), Refusal> {
        self.with(key, scope, |e, now, _| {
            e.req_tokens = e.req_tokens.min(rate.full());
            if let Err(ms) = rate.take(&mut e.req_tokens, &mut e.req_at, now) {
                let first = e.refuse(now);
                return Err(Refusal {
                    over: Over::RequestRate(ms),
                    first,
                });
            }
            e.total_requests = e.total_requests.saturating_add(1);
            e.warm(now);
            Ok(())
        })
    }

    /// What the farm's other hosts said of `key` in the last interval: `conns` open there
    /// now, and `conn_events` and `requests` since their last word, charged to its buckets.
    pub fn charge(&self, key: Key, scope: u16, limits: &Limits, remote: Remote) {
        self.with(key, scope, |e, now, _| {
            e.remote_conns = remote.conns.min(u32::from(u16::MAX)) as u16;
            if let Some(r) = &limits.conn_rate {
                e.conn_tokens = e.conn_tokens.min(r.full());
                r.charge(&mut e.conn_tokens, &mut e.conn_at, now, remote.conn_events);
            }
            if let Some(r) = &limits.request_rate {
                e.req_tokens = e.req_tokens.min(r.full());
                r.charge(&mut e.req_tokens, &mut e.req_at, now, remote.requests);
            }
        })
    }

    /// The `n` most active clients, the most active first. Only `n` rows are kept while
    /// the table is read (a heap of the best so far), so a large table costs no large copy.
    pub fn top(&self, n: usize) -> Vec<Row> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let now = self.now();
        // Most active first: recent activity, then connections open, then in all.
        type Rank = (u32, u32, u32, Key, u16);
        let rank = |r: &Row| -> Rank { (r.heat, r.conns, r.total_conns, r.key, r.scope) };
        let mut best: BinaryHeap<Reverse<(Rank, usize)>> = BinaryHeap::new();
        let mut rows: Vec<Row> = Vec::with_capacity(n.min(4096));
        for shard in self.shards.iter() {
            let ways = shard.lock().unwrap_or_else(|p| p.into_inner());
            for e in ways.iter().filter(|e| e.scope != 0) {
                let row = Row {
                    key: Key(e.key),
                    scope: e.scope - 1,
                    conns: e.conns,
                    remote: e.remote_conns,
                    heat: e.heat_at(now),
                    total_conns: e.total_conns,
                    total_requests: e.total_requests,
                    refused: e.refused,
                };
                if rows.len() < n {
                    best.push(Reverse((rank(&row), rows.len())));
                    rows.push(row);
                } else if best.peek().is_some_and(|Reverse((r, _))| *r < rank(&row)) {
                    // The weakest kept gives its place.
                    if let Some(Reverse((_, at))) = best.pop() {
                        best.push(Reverse((rank(&row), at)));
                        rows[at] = row;
                    }
                }
            }
        }
        rows.sort_by_key(|r| Reverse(rank(r)));
        rows
    }
}

/// What the farm's other hosts said of one client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Remote {
    /// Connections open on them now.
    pub conns: u32,
    /// New connections since their last word.
    pub conn_events: u32,
    /// Requests since their last word.
    pub requests: u32,
}

/// The way a new client takes: a free one, else the coldest, one with connections open
/// only when every way has some.
fn victim(ways: &[Entry], now: u32, scopes: &[Limits]) -> usize {
    let mut best = 0;
    let mut best_rank = (true, u64::MAX, u32::MAX);
    for (i, e) in ways.iter().enumerate() {
        if e.scope == 0 {
            return i;
        }
        // A client in debt to a rate is kept for as long as it owes, over one that owes
        // less: a spray of new addresses, each owing a token, cannot push out the one
        // that spent its burst and so win it a fresh one (`1/m` is owed for minutes).
        let owed = scopes
            .get(usize::from(e.scope - 1))
            .map_or(0, |l| e.owed_ms(l, now));
        let rank = (e.conns > 0, owed, e.heat_at(now));
        if rank < best_rank {
            best = i;
            best_rank = rank;
        }
    }
    best
}

#[cfg(test)]
mod tests;

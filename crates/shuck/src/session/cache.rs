//! The process-wide session cache (stud's `-C`): TLS 1.2 session IDs and TLS 1.3 stateful
//! tickets, shared by all workers through rustls' `StoresServerSessions`.
//!
//! Sharded so that workers rarely meet on a lock; each shard is an LRU with a lifetime. The
//! total number of entries never exceeds the configured size, and values are bounded, so
//! memory is bounded whatever clients do (clients can only look up, never insert).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use lru::LruCache;
use rustls::server::StoresServerSessions;

/// Largest session value stored (rustls' values are a few hundred bytes; more would mean a
/// large client certificate chain, not worth the memory).
const MAX_VALUE: usize = 16 * 1024;

/// Most shards; fewer for small caches so the bound stays exact.
const MAX_SHARDS: usize = 16;

/// Counters of a cache, summed over shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries held now.
    pub entries: usize,
    /// Sessions stored.
    pub stores: u64,
    /// Lookups that found a live session.
    pub hits: u64,
    /// Lookups that found nothing (or an expired session).
    pub misses: u64,
    /// Entries pushed out by the size bound.
    pub evictions: u64,
    /// Entries dropped because their lifetime had passed.
    pub expirations: u64,
}

struct Entry {
    value: Vec<u8>,
    stored: Instant,
}

struct Shard {
    lru: LruCache<Vec<u8>, Entry>,
    stats: CacheStats,
}

/// Told of the sessions this host stores and revokes, to pass them on to other hosts.
/// Called on a handshake's path: must not block.
pub trait SessionSink: Send + Sync {
    /// A session was stored by a local handshake.
    fn stored(&self, key: &[u8], value: &[u8]);
    /// A session was removed for good (a single-use TLS 1.3 ticket was used).
    fn removed(&self, key: &[u8]);
}

/// A session as copied out of the cache for another host.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Session id or stateful ticket.
    pub key: Vec<u8>,
    /// rustls' encoded session.
    pub value: Vec<u8>,
    /// Time since it was stored.
    pub age: Duration,
}

/// Most expired sessions dropped from a shard's cold end by one store.
const SWEEP_PER_STORE: usize = 4;

/// A bounded, sharded, expiring LRU session store.
pub struct SessionCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    lifetime: Duration,
    /// Replication's and the shared store's: few, set at start.
    sinks: ArcSwap<Vec<Arc<dyn SessionSink>>>,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache")
            .field("shards", &self.shards.len())
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

impl SessionCache {
    /// A cache of at most `capacity` sessions (≥ 1), each kept at most `lifetime`.
    pub fn new(capacity: NonZeroUsize, lifetime: Duration) -> Self {
        let cap = capacity.get();
        // At least 64 entries per shard, a power of two shards, at most MAX_SHARDS.
        let mut shards = 1;
        while shards * 2 <= MAX_SHARDS && cap / (shards * 2) >= 64 {
            shards *= 2;
        }
        let shards: Box<[Mutex<Shard>]> = (0..shards)
            .map(|i| {
                // Spread the remainder so that the shard sizes sum to exactly `cap`.
                let size = cap / shards + usize::from(i < cap % shards);
                Mutex::new(Shard {
                    lru: LruCache::new(NonZeroUsize::new(size).unwrap_or(NonZeroUsize::MIN)),
                    stats: CacheStats::default(),
                })
            })
            .collect();
        SessionCache {
            shards,
            hasher: RandomState::new(),
            lifetime,
            sinks: ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// Passes every later local store and removal to `sink` too (replication and the
    /// shared store each add theirs).
    pub fn add_sink(&self, sink: Arc<dyn SessionSink>) {
        self.sinks.rcu(|s| {
            let mut s = Vec::clone(s);
            s.push(sink.clone());
            s
        });
    }

    /// Whether a live session is held under `key` (neither counted nor made recent).
    pub fn contains(&self, key: &[u8]) -> bool {
        lock(self.shard(key))
            .lru
            .peek(key)
            .is_some_and(|e| e.stored.elapsed() < self.lifetime)
    }

    /// The lifetime of a session.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Stores a session received from another host, `age` old; not passed to the sink.
    /// Returns false when it is already expired or too large.
    pub fn insert_replicated(&self, key: Vec<u8>, value: Vec<u8>, age: Duration) -> bool {
        if age >= self.lifetime {
            return false;
        }
        let Some(stored) = Instant::now().checked_sub(age) else {
            return false;
        };
        self.insert(key, Entry { value, stored })
    }

    /// Removes a session revoked by another host; not passed to the sink.
    pub fn remove_replicated(&self, key: &[u8]) -> bool {
        lock(self.shard(key)).lru.pop(key).is_some()
    }

    /// Copies of the live sessions, most recently used first within each shard.
    pub fn snapshot(&self) -> Vec<Snapshot> {
        let now = Instant::now();
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let s = lock(s);
            out.extend(s.lru.iter().filter_map(|(k, e)| {
                let age = now.duration_since(e.stored);
                (age < self.lifetime).then(|| Snapshot {
                    key: k.clone(),
                    value: e.value.clone(),
                    age,
                })
            }));
        }
        out
    }

    fn insert(&self, key: Vec<u8>, entry: Entry) -> bool {
        if entry.value.len() > MAX_VALUE {
            return false;
        }
        let mut shard = lock(self.shard(&key));
        // Expired sessions at the cold end go first, so that memory follows the sessions
        // still live (rate × lifetime), not the capacity; a few per store bounds the work
        // done under the lock.
        let now = Instant::now();
        for _ in 0..SWEEP_PER_STORE {
            match shard.lru.peek_lru() {
                Some((_, e)) if now.duration_since(e.stored) >= self.lifetime => {
                    shard.lru.pop_lru();
                    shard.stats.expirations += 1;
                }
                _ => break,
            }
        }
        if let Some((old_key, _)) = shard.lru.push(key, entry) {
            // `push` returns the replaced entry too; only a different key is an eviction.
            if shard.lru.peek(&old_key).is_none() {
                shard.stats.evictions += 1;
            }
        }
        shard.stats.stores += 1;
        true
    }

    /// Counters summed over shards.
    pub fn stats(&self) -> CacheStats {
        let mut total = CacheStats::default();
        for s in self.shards.iter() {
            let s = lock(s);
            total.entries += s.lru.len();
            total.stores += s.stats.stores;
            total.hits += s.stats.hits;
            total.misses += s.stats.misses;
            total.evictions += s.stats.evictions;
            total.expirations += s.stats.expirations;
        }
        total
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        // Keys are random when stored but chosen by clients when looked up: hash them with a
        // per-process key so no client can aim at one shard.
        let h = self.hasher.hash_one(key) as usize;
        &self.shards[h % self.shards.len()]
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let mut shard = lock(self.shard(key));
        let now = Instant::now();
        let found = if remove {
            shard.lru.pop(key)
        } else {
            shard.lru.get(key).map(|e| Entry {
                value: e.value.clone(),
                stored: e.stored,
            })
        };
        match found {
            Some(e) if now.duration_since(e.stored) < self.lifetime => {
                shard.stats.hits += 1;
                drop(shard);
                if remove {
                    for sink in self.sinks.load().iter() {
                        sink.removed(key);
                    }
                }
                Some(e.value)
            }
            Some(_) => {
                shard.lru.pop(key);
                shard.stats.expirations += 1;
                shard.stats.misses += 1;
                None
            }
            None => {
                shard.stats.misses += 1;
                None
            }
        }
    }
}

/// A poisoned shard only means another thread panicked mid-update of plain data; the data
/// is still a valid cache, so keep serving.
fn lock(m: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if value.len() > MAX_VALUE {
            return false;
        }
        for sink in self.sinks.load().iter() {
            sink.stored(&key, &value);
        }
        self.insert(
            key,
            Entry {
                value,
                stored: Instant::now(),
            },
        )
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(n: usize, life: Duration) -> SessionCache {
        SessionCache::new(NonZeroUsize::new(n).unwrap(), life)
    }

    fn key(i: u32) -> Vec<u8> {
        let mut k = vec![0u8; 32];
        k[..4].copy_from_slice(&i.to_be_bytes());
        k
    }

    #[test]
    fn bounded_whatever_the_number_of_sessions() {
        for cap in [1, 100, 1000, 20_000] {
            let c = cache(cap, Duration::from_secs(60));
            for i in 0..10_000 + cap as u32 {
                assert!(c.put(key(i), vec![7; 100]));
            }
            let s = c.stats();
            assert!(s.entries <= cap, "cap {cap}: {s:?}");
            assert!(s.entries >= cap * 9 / 10, "cap {cap} badly used: {s:?}");
            assert_eq!(s.evictions as usize, 10_000 + cap - s.entries);
        }
    }

    #[test]
    fn least_recently_used_goes_first() {
        let c = cache(3, Duration::from_secs(60));
        c.put(key(1), b"one".to_vec());
        c.put(key(2), b"two".to_vec());
        c.put(key(3), b"three".to_vec());
        assert!(c.get(&key(1)).is_some()); // 1 is now the most recent
        c.put(key(4), b"four".to_vec());
        assert!(c.get(&key(2)).is_none(), "2 was least recently used");
        assert_eq!(c.get(&key(1)).unwrap(), b"one");
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn take_removes_and_get_keeps() {
        let c = cache(10, Duration::from_secs(60));
        c.put(key(1), b"v".to_vec());
        assert_eq!(c.get(&key(1)).unwrap(), b"v");
        assert_eq!(c.take(&key(1)).unwrap(), b"v");
        assert!(c.take(&key(1)).is_none());
        assert!(c.get(b"not a key").is_none());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (2, 2, 0));
    }

    #[test]
    fn expired_sessions_are_misses() {
        let c = cache(10, Duration::from_millis(50));
        c.put(key(1), b"v".to_vec());
        std::thread::sleep(Duration::from_millis(80));
        assert!(c.get(&key(1)).is_none());
        let s = c.stats();
        assert_eq!((s.expirations, s.entries), (1, 0));
    }

    #[test]
    fn stores_drop_expired_sessions_so_memory_follows_the_live_ones() {
        // One shard (64 entries): a cache far from full still lets expired sessions go.
        let c = cache(64, Duration::from_millis(50));
        for i in 0..20 {
            c.put(key(i), b"v".to_vec());
        }
        std::thread::sleep(Duration::from_millis(80));
        for i in 100..120 {
            c.put(key(i), b"v".to_vec());
        }
        let s = c.stats();
        assert_eq!(s.entries, 20, "only the live sessions are left");
        assert_eq!((s.expirations, s.evictions), (20, 0));
        assert!(c.get(&key(100)).is_some());
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(bool, Vec<u8>)>>);

    impl SessionSink for Recorder {
        fn stored(&self, key: &[u8], _: &[u8]) {
            self.0.lock().unwrap().push((true, key.to_vec()));
        }
        fn removed(&self, key: &[u8]) {
            self.0.lock().unwrap().push((false, key.to_vec()));
        }
    }

    #[test]
    fn local_changes_reach_the_sink_and_replicated_ones_do_not() {
        let c = cache(10, Duration::from_secs(60));
        let sink = Arc::new(Recorder::default());
        c.add_sink(sink.clone());
        c.put(key(1), b"local".to_vec());
        assert!(c.insert_replicated(key(2), b"remote".to_vec(), Duration::from_secs(1)));
        assert!(!c.insert_replicated(key(3), b"old".to_vec(), Duration::from_secs(61)));
        assert_eq!(c.get(&key(2)).unwrap(), b"remote");
        assert_eq!(c.take(&key(1)).unwrap(), b"local");
        assert!(c.remove_replicated(&key(2)));
        assert!(c.get(&key(2)).is_none());
        assert_eq!(
            *sink.0.lock().unwrap(),
            [(true, key(1)), (false, key(1))],
            "only local stores and takes are passed on"
        );
    }

    #[test]
    fn snapshot_copies_live_sessions_with_their_age() {
        let c = cache(100, Duration::from_millis(300));
        c.insert_replicated(key(1), b"a".to_vec(), Duration::from_millis(250));
        c.put(key(2), b"b".to_vec());
        std::thread::sleep(Duration::from_millis(100));
        let snap = c.snapshot();
        assert_eq!(snap.len(), 1, "the expired one is left out");
        assert_eq!(
            (snap[0].key.clone(), snap[0].value.clone()),
            (key(2), b"b".to_vec())
        );
        assert!(snap[0].age >= Duration::from_millis(100));
    }

    #[test]
    fn oversized_values_are_refused() {
        let c = cache(10, Duration::from_secs(60));
        assert!(!c.put(key(1), vec![0; MAX_VALUE + 1]));
        assert_eq!(c.stats().entries, 0);
    }
}

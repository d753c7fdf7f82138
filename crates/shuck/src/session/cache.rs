//! The process-wide session cache (stud's `-C`): TLS 1.2 session IDs and TLS 1.3 stateful
//! tickets, shared by all workers through rustls' `StoresServerSessions`.
//!
//! Sharded so that workers rarely meet on a lock; each shard is an LRU with a lifetime. The
//! total number of entries never exceeds the configured size, and values are bounded, so
//! memory is bounded whatever clients do (clients can only look up, never insert).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// A bounded, sharded, expiring LRU session store.
pub struct SessionCache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    lifetime: Duration,
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
        }
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
        let mut shard = lock(self.shard(&key));
        let entry = Entry {
            value,
            stored: Instant::now(),
        };
        if let Some((old_key, _)) = shard.lru.push(key, entry) {
            // `push` returns the replaced entry too; only a different key is an eviction.
            if shard.lru.peek(&old_key).is_none() {
                shard.stats.evictions += 1;
            }
        }
        shard.stats.stores += 1;
        true
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
    fn oversized_values_are_refused() {
        let c = cache(10, Duration::from_secs(60));
        assert!(!c.put(key(1), vec![0; MAX_VALUE + 1]));
        assert_eq!(c.stats().entries, 0);
    }
}

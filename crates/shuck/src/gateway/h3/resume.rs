//! How QUIC resumes sessions: over the frontend's own ticket ring (a ticket from any worker,
//! or any host of the farm, resumes here), counted; with `--quic-early-data`, over
//! single-use stateful tickets instead, as rustls accepts 0-RTT only for those (RFC 8446
//! §8.1): a ticket's early data is taken once, from the shared store when there is one, so
//! once across the farm.

use std::sync::Arc;

use rustls::server::{ProducesTickets, StoresServerSessions};

use crate::counters::{QuicCounters, WorkerCounters};
use crate::session::store::{Lookup, SharedStore};
use crate::session::SessionCache;

/// The frontend's ticket ring, counting the tickets it opens for QUIC: each is a
/// resumption (rustls checks its age and suite after; a refusal there is rare).
#[derive(Debug)]
pub(super) struct CountedTickets {
    pub ring: Arc<dyn ProducesTickets>,
    pub counters: Arc<WorkerCounters>,
}

fn h3(c: &WorkerCounters) -> &QuicCounters {
    &c.http.h3
}

impl ProducesTickets for CountedTickets {
    fn enabled(&self) -> bool {
        self.ring.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.ring.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.ring.encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let opened = self.ring.decrypt(cipher);
        if opened.is_some() {
            WorkerCounters::bump(&h3(&self.counters).resumed);
        }
        opened
    }
}

/// No stateless tickets: with them rustls never accepts 0-RTT.
#[derive(Debug)]
pub(super) struct StatefulOnly;

impl ProducesTickets for StatefulOnly {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The session cache as QUIC uses it for stateful tickets (0-RTT's, or all of them when
/// stateless tickets are off): stored as for TCP (so replicated and written to the shared
/// store), and taken from the shared store first, while rustls waits (at most
/// `--shared-store-timeout`): GETDEL makes a ticket single-use farm-wide, and lets a client
/// resume on another host. The store unreachable, the local copy is taken: once per host.
#[derive(Debug)]
pub(super) struct QuicSessions {
    pub cache: Arc<SessionCache>,
    pub store: Option<Arc<SharedStore>>,
    pub counters: Arc<WorkerCounters>,
}

impl StoresServerSessions for QuicSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.cache.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let taken = match self.store.as_deref().map(|s| s.take_blocking(key)) {
            Some(Lookup::Found { value, .. }) => {
                self.cache.remove_replicated(key);
                Some(value)
            }
            Some(Lookup::Absent) => {
                self.cache.remove_replicated(key);
                None
            }
            Some(Lookup::Unavailable) | None => self.cache.take(key),
        };
        if taken.is_some() {
            WorkerCounters::bump(&h3(&self.counters).resumed);
        }
        taken
    }

    fn can_cache(&self) -> bool {
        true
    }
}

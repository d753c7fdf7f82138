//! Session resumption state shared by every worker: the level-1 session cache
//! ([`cache`]), the ticket key ring ([`tickets`]), and the sharing of sessions and ticket
//! keys between hosts, by replication ([`sync`]) or through a shared store ([`store`]).
//! It knows nothing of TLS connections: `tls` plugs these into rustls, never the reverse.

pub(crate) mod aead;
pub mod cache;
pub mod store;
pub mod sync;
pub mod tickets;

pub use cache::{CacheStats, SessionCache, SessionSink, Snapshot};

use std::sync::Arc;

use tickets::TicketKeys;

/// The process's resumption state: built once at start and kept across reloads, so that
/// sessions and tickets issued before a reload still resume after it.
#[derive(Debug, Clone, Default)]
pub struct Resumption {
    /// The session cache shared by every frontend and worker, when on.
    pub cache: Option<Arc<SessionCache>>,
    /// The ticket key ring, when tickets are on.
    pub tickets: Option<Arc<TicketKeys>>,
    /// The shared store (`--shared-store`), when on; started in the worker.
    pub store: Option<Arc<store::SharedStore>>,
}

impl Resumption {
    /// A cache of `entries` sessions living `lifetime` (none for 0), and `tickets`.
    pub fn new(
        entries: usize,
        lifetime: std::time::Duration,
        tickets: Option<Arc<TicketKeys>>,
    ) -> Self {
        Resumption {
            cache: std::num::NonZeroUsize::new(entries)
                .map(|n| Arc::new(SessionCache::new(n, lifetime))),
            tickets,
            store: None,
        }
    }
}

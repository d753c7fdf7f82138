//! Session resumption state shared by every worker: the level-1 session cache, and
//! replication of sessions and ticket keys between hosts ([`sync`]).

pub mod cache;
pub mod sync;

pub use cache::{CacheStats, SessionCache, SessionSink, Snapshot};

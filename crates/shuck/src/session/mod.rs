//! Session resumption state shared by every worker: the level-1 session cache.
//!
//! This module knows nothing of sockets; replication between hosts will live in `sync/`.

pub mod cache;

pub use cache::{CacheStats, SessionCache};

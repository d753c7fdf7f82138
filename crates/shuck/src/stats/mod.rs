//! What shuck tells about itself: the counters summed into a log line ([`summary`]) and
//! exposed to Prometheus ([`exposition`], served by [`endpoint`] for `--stats`).
//!
//! This sits above the proxy: it reads the workers' [`Counters`] and the state connections
//! share, and nothing on the data path reads it.

pub mod endpoint;
pub mod exposition;
mod families;
mod http_metrics;
pub mod summary;

use std::sync::{Arc, Mutex};

use crate::counters::Counters;
use crate::edge::{FrontendState, ProxyState};
use crate::session::sync::SyncStats;
use crate::session::Resumption;

pub use endpoint::serve;
pub use summary::summary;

/// Everything the summary and the exposition read.
#[derive(Debug)]
pub struct Sources {
    /// The workers' counters.
    pub counters: Counters,
    /// The state connections share (backends).
    pub state: Arc<ProxyState>,
    /// The session cache and ticket keys.
    pub resumption: Resumption,
    /// Replication's counters, when it runs.
    pub replication: Option<Arc<SyncStats>>,
    /// Frontend names, by counter slot, for labels (reloads add frontends).
    pub frontends: Arc<Mutex<Vec<String>>>,
    /// The frontends served now, whose certificates the expiry gauge reads.
    pub served: Arc<Mutex<Vec<Arc<FrontendState>>>>,
    /// The ACME client's last counters (`--acme-directory`), as the master relays them.
    pub acme: Option<Mutex<crate::acme::Status>>,
    /// The plain-HTTP listeners' counts, when there is one.
    pub plain: Arc<crate::redirect::Plain>,
}

//! What a compare run found: the types `compare` fills and `report` renders (and that the
//! JSON report holds).

use serde::Serialize;

use crate::capacity::Capacity;
use crate::peers::Target;
use crate::scenarios::Scenario;
use crate::stats::LoadReport;

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// What the client saw.
    pub load: LoadReport,
    /// Server CPU time during the run, µs.
    pub server_cpu_us: u64,
    /// Server CPU per completed session, µs.
    pub cpu_us_per_conn: f64,
    /// Server CPU per request, µs.
    pub cpu_us_per_req: f64,
}

/// The idle-memory measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    /// Sessions established and held.
    pub established: usize,
    /// Sessions that failed to establish.
    pub failed: usize,
    /// Server RSS before, bytes.
    pub rss_before: u64,
    /// Server RSS with the sessions open, bytes.
    pub rss_after: u64,
    /// (after − before) / established.
    pub bytes_per_conn: f64,
}

/// A server's outcome in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// Which server.
    pub target: Target,
    /// `ok`, or why there is no figure (not installed, failed to start, ...).
    pub status: String,
    /// Every measurement.
    pub runs: Vec<Run>,
    /// The median run by CPU per session.
    pub median: Option<Run>,
    /// For the idle-memory scenario.
    pub idle: Option<Idle>,
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// The scenario.
    pub scenario: Scenario,
    /// The load options used.
    pub load: String,
    /// Per server.
    pub targets: Vec<TargetResult>,
}

/// Everything a compare run found.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When (UTC).
    pub date: String,
    /// The command line.
    pub command: String,
    /// Machine facts.
    pub machine: String,
    /// Server versions.
    pub versions: Vec<(String, String)>,
    /// CPU pinning used.
    pub pinning: String,
    /// Crypto costs on this machine.
    pub capacity: Capacity,
    /// Per scenario.
    pub scenarios: Vec<ScenarioResult>,
}

//! `shuck-bench ramp`: raises the attempted session rate step by step (open loop) and finds
//! the highest rate that keeps average latency under 100 ms and failures under 0.1 %, the
//! seeds' definition of a terminator's capacity.

use clap::Args;
use serde::Serialize;

use crate::load::{self, LoadOpts};
use crate::stats::LoadReport;

/// Options of `ramp`.
#[derive(Debug, Clone, Args)]
pub struct RampOpts {
    /// First attempted rate, sessions per second.
    #[arg(long, default_value_t = 100.0)]
    pub start: f64,
    /// Added at each step.
    #[arg(long, default_value_t = 100.0)]
    pub step: f64,
    /// Highest rate tried.
    #[arg(long, default_value_t = 20_000.0)]
    pub max: f64,
    /// Seconds per step.
    #[arg(long, default_value_t = 3.0)]
    pub step_duration: f64,
    /// Average latency limit, ms.
    #[arg(long, default_value_t = 100.0)]
    pub max_latency_ms: f64,
    /// Failure limit, percent.
    #[arg(long, default_value_t = 0.1)]
    pub max_failures_pct: f64,
    /// The load itself (rate and duration are set per step).
    #[command(flatten)]
    pub load: LoadOpts,
}

/// One step of the ramp.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Attempted sessions per second.
    pub rate: f64,
    /// What happened.
    pub report: LoadReport,
    /// Within both limits.
    pub ok: bool,
}

/// Whether a step is within the limits.
pub fn within(r: &LoadReport, max_latency_ms: f64, max_failures_pct: f64) -> bool {
    r.completed > 0
        && r.session_ms.mean < max_latency_ms
        && r.failure_ratio * 100.0 < max_failures_pct
}

/// Runs the ramp, calling `on_step` after each step; stops after two failing steps in a row.
/// Returns every step and the highest good rate.
pub fn run(
    o: &RampOpts,
    mut on_step: impl FnMut(&Step),
) -> anyhow::Result<(Vec<Step>, Option<f64>)> {
    let mut steps = Vec::new();
    let mut best = None;
    let mut bad_in_a_row = 0;
    let mut rate = o.start;
    while rate <= o.max {
        let mut lo = o.load.clone();
        lo.rate = Some(rate);
        lo.duration = o.step_duration;
        let report = load::run(&lo, None)?.report();
        let ok = within(&report, o.max_latency_ms, o.max_failures_pct);
        let step = Step { rate, report, ok };
        on_step(&step);
        steps.push(step);
        if ok {
            best = Some(rate);
            bad_in_a_row = 0;
        } else {
            bad_in_a_row += 1;
            if bad_in_a_row >= 2 {
                break;
            }
        }
        rate += o.step;
    }
    Ok((steps, best))
}

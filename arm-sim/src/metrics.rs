//! Metrics of a simulation, as the paper's Table II reports them and more.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::SimResult;

/// Summary of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs that ran to the end.
    pub completed: usize,
    /// From the first submission to the last end, minutes.
    pub makespan_min: f64,
    /// Busy unit-time over available unit-time during the makespan, percent.
    pub utilisation_pct: f64,
    /// Completed jobs per minute of makespan.
    pub throughput_per_min: f64,
    /// Mean wait from submission to start, seconds.
    pub mean_wait_s: f64,
    /// Longest wait, seconds.
    pub max_wait_s: u64,
    /// Mean time from submission to end, seconds.
    pub mean_turnaround_s: f64,
    /// Dynamic requests made.
    pub dyn_requests: u64,
    /// Evolving jobs that got units (the paper's "satisfied dyn jobs").
    pub dyn_satisfied: usize,
    /// Evolving jobs that asked.
    pub dyn_jobs: usize,
    /// Jobs started out of priority order.
    pub backfilled: u64,
    /// Delay that dynamic grants were charged for, per user, seconds.
    pub delay_caused_s: BTreeMap<String, f64>,
    /// The most delay charged to one user within one fairness interval, seconds.
    pub worst_interval_delay_s: f64,
}

impl Metrics {
    /// Computes the metrics of a run.
    pub fn of(result: &SimResult) -> Self {
        let jobs = &result.jobs;
        let first = jobs.iter().map(|j| j.submit).min().unwrap_or(0);
        let last = jobs.iter().filter_map(|j| j.end).max().unwrap_or(first);
        let span = (last - first).max(1) as f64;
        let busy_area: f64 = result.busy.windows(2).map(|w| f64::from(w[0].1) * (w[1].0 - w[0].0) as f64).sum();
        let waits: Vec<u64> = jobs.iter().filter_map(|j| j.wait()).collect();
        let turnarounds: Vec<u64> = jobs.iter().filter_map(|j| Some(j.end? - j.submit)).collect();
        let completed = turnarounds.len();
        let mean = |v: &[u64]| if v.is_empty() { 0.0 } else { v.iter().sum::<u64>() as f64 / v.len() as f64 };
        Self {
            jobs: jobs.len(),
            completed,
            makespan_min: span / 60.0,
            utilisation_pct: 100.0 * busy_area / (f64::from(result.units) * span),
            throughput_per_min: completed as f64 / (span / 60.0),
            mean_wait_s: mean(&waits),
            max_wait_s: waits.iter().copied().max().unwrap_or(0),
            mean_turnaround_s: mean(&turnarounds),
            dyn_requests: result.requests,
            dyn_satisfied: jobs.iter().filter(|j| j.granted > 0).count(),
            dyn_jobs: jobs.iter().filter(|j| j.evolving).count(),
            backfilled: result.stats.backfilled,
            delay_caused_s: result.delay_caused.clone(),
            worst_interval_delay_s: result.delay_worst_interval.values().copied().fold(0.0, f64::max),
        }
    }
}

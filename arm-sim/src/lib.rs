//! `arm-sim`: a discrete-event simulator that drives the scheduling core (`arm-sched`) with
//! simulated time, so that policies can be judged on the workloads of the literature.
//!
//! # Layout
//! - [`workload`]: SWF parsing and writing, with the evolving-job extension.
//! - [`esp`]: the Dynamic ESP generator (the fairness paper's Table I) and synthetic workloads.
//! - [`engine`]: the event loop and the applications' behaviour (requests, speed-ups).
//! - [`metrics`]: makespan, utilisation, throughput, waits, dynamic grants, delays.
//! - [`plot`]: SVG charts of two runs side by side.
//! - [`bench`]: the speed measurements behind `arm-sim bench`.
//! - [`experiment`]: the paper's four configurations and ours over several submission orders.
//! - [`compare`]: one configuration against another on the same orders, paired.

pub mod bench;
pub mod compare;
pub mod engine;
pub mod esp;
pub mod experiment;
pub mod metrics;
pub mod plot;
pub mod workload;

/// What can go wrong in a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A workload file is malformed.
    #[error("workload, line {line}: {message}")]
    Workload {
        /// 1-based line (0: the file as a whole).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The scheduler refused a call the engine made.
    #[error(transparent)]
    Scheduler(#[from] arm_sched::Error),
    /// A configuration file is malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// Drawing a plot failed.
    #[error("plot: {0}")]
    Plot(String),
}

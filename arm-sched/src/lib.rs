//! The scheduling core of the accelerator resource manager.
//!
//! It decides who gets accelerator units and when: static requests (jobs waiting to start)
//! in priority order with reservations and EASY or conservative backfilling, a planning view
//! with every queued job's expected start, advance reservations, and dynamic requests from
//! running jobs under the fairness policies of Prabhakaran et al. (`DFS*`), with partial
//! grants, timeouts and CooRMv2-style pre-allocations. `arm-server` and the `arm-sim`
//! simulator run the same code.
//!
//! # Layout
//! - [`profile`]: the availability profile, the step function that planning works on.
//! - [`config`]: the site's settings, read from TOML.
//! - [`fairness`]: the delay ledger and the check a dynamic grant must pass.
//! - [`scheduler`]: the state and every decision.
//! - `model`: what goes in and out: [`JobSpec`], [`DynRequest`], [`Event`], [`Planned`].
//!
//! # Invariants
//! - No I/O, no clock, no randomness: time is an argument, and the same calls give the same
//!   answers (iteration is over ordered maps only).
//! - A unit is held by at most one job; held plus free units never exceed the pool.
//! - A dynamic request is answered in the call (granted or rejected) unless it carries a
//!   timeout, and is never granted beyond what the configured fairness policy allows.
//!
//! # Example
//! ```
//! use arm_sched::{Config, JobSpec, Scheduler, Unit, Event};
//! let mut s = Scheduler::new(Config::default());
//! for _ in 0..4 { s.add_unit(Unit::default()); }
//! let job = |id, size| JobSpec { id, user: "u".into(), size, walltime: Some(60), ..Default::default() };
//! s.submit(job(1, 3), 0).unwrap();
//! s.submit(job(2, 2), 0).unwrap();
//! let started = s.schedule(0);
//! assert!(matches!(&started[..], [Event::Started { job: 1, .. }]));
//! assert_eq!(s.plan(0)[0].start, Some(60), "job 2 starts when job 1's walltime ends");
//! ```

pub mod config;
mod error;
pub mod fairness;
mod model;
pub mod profile;
pub mod scheduler;

pub use config::{Backfill, Config, DelayModel, DynPolicy, ElasticConfig, Limits, Seconds};
pub use error::Error;
pub use fairness::Ledger;
pub use model::{DynOutcome, DynRequest, Event, JobId, JobSpec, Planned, Rejection, Time, Unit, UnitId};
pub use scheduler::{Scheduler, Stats};

//! `arm-server`: the Accelerator Resource Manager. It owns the pool of accelerator hosts, binds
//! jobs' static requests before they start, decides dynamic requests at runtime, issues the
//! capabilities backends check, and keeps all of it durably.
//!
//! # Layout
//! - [`core`]: the decision core, plain functions over the state (no I/O, time is an input);
//!   it asks `arm-sched`'s scheduler (backfilling, fairness, reservations) for each decision.
//! - [`model`]: hosts, accelerators, jobs, sets, sessions as stored.
//! - [`store`]: the redb store; a change is durable before it is acknowledged.
//! - [`server`]: the QUIC API, admin checks (mutual TLS), leases.
//! - [`links`]: registration, heartbeats and revocations with each backend.
//! - [`keys`]: credentials, tokens, the capability signing key.
//! - [`roles`]: who may do what: roles from client certificates, revoked certificates.
//! - [`config`]: configuration (TOML, flags, environment).
//! - [`slurm`]: Slurm's commands and munge, for the ARM as a companion of a Slurm controller.
//!
//! # Invariants
//! - An accelerator has at most one holder; the core never hands out more than exist.
//! - A request is answered only after the store has committed what it changed; a fresh
//!   rejection of an `AC_Get`, which holds and promises nothing, is answered at once.
//! - Secrets (job credentials, session tokens) are stored only as SHA-256 hashes.

pub mod config;
pub mod core;
mod error;
pub mod keys;
pub mod links;
pub mod model;
pub mod roles;
pub mod server;
pub mod slurm;
pub mod store;

pub use config::ArmConfig;
pub use error::ArmServerError;
pub use server::{start, RunningArm};

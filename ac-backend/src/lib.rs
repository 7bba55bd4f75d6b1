//! `ac-backend`: the daemon on each accelerator host. It executes memory, copy and kernel calls
//! for remote clients on a [`device::Device`].
//!
//! # Layout
//! Three layers, each a folder; a module's name says which side of a conversation it is on.
//! - [`network`]: the serving side of the wire. `network/mod.rs` owns the endpoint, checks
//!   preamble and hello and runs one task per connection; [`network::bulk`] serves bulk copies
//!   (one QUIC stream per copy or stripe, or a bulk lane); [`network::trust`] decides whose
//!   capabilities are accepted (the registered resource manager) and keeps revocations.
//! - [`session`]: what one client owns (buffers) and the registry of live sessions;
//!   [`session::serve_control`] serves a session's control stream (requests in order, replies,
//!   deferred errors); [`session::fence`] makes a synchronous copy wait for the work queued
//!   before its position; [`session::resume`] lets a session outlive its connection;
//!   [`session::images`] keeps loaded module images by content.
//! - [`device`]: the `Device` trait, the CPU device, the CUDA device, the `builtin` kernels,
//!   session workers (`device::worker`: a GPU session's context in a process of its own),
//!   [`device::stream_workers`] (one thread per device stream runs its operations in order),
//!   [`device::served`] (which devices the backend serves, each with its watched state),
//!   [`device::health`] (health, identity and admission as plain state: no I/O, no clock),
//!   `device::nvml` (the NVML inventory and health watch feeding it) and [`device::mps`].
//! - [`metrics`]: the Prometheus metrics (`--metrics-listen`); [`config`]: configuration (TOML,
//!   flags, environment).
//!
//! # Invariants
//! - A session sees only its own buffers, modules, kernels and streams: ids are looked up in the
//!   session's own tables.
//! - Everything a session holds is released when its control connection ends, cleanly or not.
//! - A synchronous copy (inline or bulk) starts only after the work of every request before its
//!   position in the control stream has finished, on every stream.
//! - A request that fails answers with an error and changes nothing else; bytes that do not
//!   parse close that connection only.

pub mod config;
pub mod device;
mod error;
pub mod metrics;
pub mod network;
pub mod session;

pub use config::{BackendConfig, CopySettings, DeviceChoice, Isolation};
pub use error::BackendError;
pub use network::{start, RunningBackend};

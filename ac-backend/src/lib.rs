//! `ac-backend`: the daemon on each accelerator host. It executes memory, copy and kernel calls
//! for remote clients on a [`device::Device`].
//!
//! # Layout
//! - [`server`]: endpoint, preamble and hello checks, one task per connection.
//! - [`session`]: what one client owns (buffers), and the registry of live sessions.
//! - [`control`]: a session's control stream: requests in order, replies, deferred errors.
//! - [`fence`]: how a synchronous copy waits for the work queued before its position.
//! - [`stream`]: one worker thread per device stream runs its operations in order.
//! - [`bulk`]: pipelined bulk copies, one QUIC stream per copy or stripe.
//! - [`device`]: the `Device` trait, the CPU device, the CUDA device, the `builtin` kernels, and
//!   session workers (`device::worker`: a GPU session's context in a process of its own).
//! - [`served`]: which devices the backend serves (CPU, GPUs by NVML UUID or CUDA ordinal, MIG
//!   instances), each with its watched state.
//! - [`health`]: each device's health, identity and admission (session limits, compute modes),
//!   as plain state: no I/O, no clock. `nvml`: the NVML inventory and health watch feeding it.
//! - [`metrics`]: the Prometheus metrics (`--metrics-listen`).
//! - [`trust`]: whose capabilities are accepted (the registered resource manager), revocations.
//! - [`config`]: configuration (TOML, flags, environment).
//!
//! # Invariants
//! - A session sees only its own buffers, modules, kernels and streams: ids are looked up in the
//!   session's own tables.
//! - Everything a session holds is released when its control connection ends, cleanly or not.
//! - A synchronous copy (inline or bulk) starts only after the work of every request before its
//!   position in the control stream has finished, on every stream.
//! - A request that fails answers with an error and changes nothing else; bytes that do not
//!   parse close that connection only.

pub mod bulk;
pub mod config;
pub mod control;
pub mod device;
mod error;
pub mod fence;
pub mod health;
pub mod images;
pub mod metrics;
pub mod mps;
#[cfg(feature = "cuda")]
pub mod nvml;
pub mod resume;
pub mod served;
pub mod server;
pub mod session;
pub mod stream;
pub mod trust;

pub use config::{BackendConfig, CopySettings, DeviceChoice, Isolation};
pub use error::BackendError;
pub use server::{start, RunningBackend};

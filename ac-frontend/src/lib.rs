//! `ac-frontend`: the offload SDK. A program on a compute node uses remote accelerators through
//! handles: it allocates device memory, copies data, loads modules and launches kernels.
//!
//! ```no_run
//! use ac_frontend::blocking::Accelerator;
//! use ac_frontend::LaunchDims;
//!
//! let acc = Accelerator::from_env()?;                  // AC_BACKEND_ADDR, AC_CA_CERT
//! let x = acc.alloc_from(&vec![1.0f32; 1 << 20])?;       // acMemAlloc + acMemCpy
//! let y = acc.alloc_from(&vec![2.0f32; 1 << 20])?;
//! let saxpy = acc.builtin()?.function("saxpy")?;        // acKernelCreate
//! saxpy.launch(LaunchDims::linear(1 << 20, 256), &[3.0f32.into(), x.arg(), y.arg(), (1u64 << 20).into()])?;
//! let result = y.to_vec()?;                              // waits for the launch, copies back
//! assert!(result.iter().all(|&v| v == 5.0));
//! # Ok::<(), ac_frontend::Error>(())
//! ```
//!
//! # Layout
//! - `ac_proto::backend::link`: connecting to a backend (TLS, tuning, preamble, hello), shared
//!   with the resource manager's registration links; [`ConnectOptions`] is re-exported here.
//! - [`Accelerator`] (`accelerator.rs`): requests and answers, the bulk copy path; `send_control.rs`
//!   writes the control stream (positions, frees deferred from `Drop`), `replies.rs` reads it;
//!   `lane.rs` carries large copies on bulk lanes (TLS over TCP) when the backend serves them,
//!   `stripes.rs` splits a copy over lanes or connections and runs a copy's lane stripes on
//!   threads of their own;
//!   `task.rs` owns the tasks the SDK starts (aborted when dropped); `printed.rs` writes out
//!   what kernels print ([`set_kernel_output`]).
//! - [`DeviceBuffer`], [`Module`] and [`Function`], [`Stream`]: the compute API.
//! - [`Session`] (`session.rs`): `AC_Init` / `AC_Get` / `AC_Free` / `AC_Finalize` with the
//!   resource manager ([`arm`] is its client).
//! - [`blocking`]: the same API for a plain `main`, sessions included.
//! - `ticket.rs`: ending a session from another process of the job ([`end_session`]), when the
//!   one that opened it died without closing it.
//! - `mpi` (feature `mpi`): collective `AC_Init` / `AC_Get` / `AC_Free` over a communicator.
//!
//! # Semantics (the ordering model; ARCHITECTURE.md, "Order", states it as invariants)
//! - Launches, memsets, device-to-device and `*_async` copies return without a round trip. They
//!   run in order on their stream; their errors surface at the next synchronizing call
//!   ([`Accelerator::synchronize`], [`Stream::synchronize`], or a synchronous copy), as in CUDA.
//! - Synchronous copies (`copy_from_host`, `copy_to_host`, `to_vec`, `alloc_from`), whatever
//!   their size, return when the bytes have arrived and see the results of all work sent before
//!   them, on every stream; the backend orders them, with no extra round trip. A failed one
//!   reports the first error of that earlier work.
//! - Handles are `Send + Sync` and cheap to clone. Threads and tasks may share one: each gets,
//!   for its own calls, the order in which it made them; calls of different threads that overlap
//!   in time run in some interleaving.
//! - Dropping a [`DeviceBuffer`] frees it ahead of every later call, with no round trip: a
//!   program may drop a large buffer and allocate again at once.

mod accelerator;
pub mod arm;
mod arrays;
pub mod blocking;
mod buffer;
mod driver;
mod error;
mod get_request;
mod kernel;
mod lane;
#[cfg(feature = "mpi")]
pub mod mpi;
mod printed;
mod replies;
mod resize;
mod resume;
mod send_control;
mod session;
mod stream;
mod stripes;
mod task;
mod telemetry;
mod ticket;
mod watch;

pub use ac_proto::arm::Preemption;
/// Connecting to a backend lives in `ac-proto`, which the manager shares.
pub(crate) use ac_proto::backend::link;
pub use ac_proto::backend::{
    ArrayCopy, ArrayId, ArraySpec, Clocks, ContextLimit, DeviceInfo, DeviceKind, DevicePtr, ErrorKind, KernelArg,
    KernelAttributes, KernelSetting, LaunchDims, ParamKind, Sampler, Telemetry, TextureResource,
};
pub use accelerator::Accelerator;
pub use arrays::{CudaArray, DeviceObject};
pub use buffer::DeviceBuffer;
pub use driver::{Global, Linked, PhysicalMemory};
pub use error::{Error, Result};
pub use get_request::GetRequest;
pub use kernel::{Function, Module};
pub use link::{default_lanes, ConnectOptions};
pub use printed::{print_through_c_stdout, set_kernel_output};
pub use resize::{Bounds, Pacing, Reconfiguration, Resizer};
pub use session::{munge_credential, DynamicSet, Handle, Session, SessionOptions};
pub use stream::Stream;
pub use stripes::CopyOptions;
pub use ticket::{end_session, Ended, SessionTicket};

//! `ac._ac`: the Python SDK's extension module. The package `ac` (`python/ac/`) wraps it with
//! the array and kernel manners Python programs expect (numpy dtypes and shapes, CuPy's and
//! Numba's launch forms, context managers, exceptions that also derive from the builtins).
//!
//! # Layout
//! - `wait.rs`: every call that waits releases the GIL and wakes every 100 ms for signals
//!   (Ctrl-C drops the SDK call, which is cancel-safe); `Owner`: the process that opened the
//!   session (a forked child is refused).
//! - `error.rs`: SDK errors as `ac.errors` exceptions carrying libac's codes.
//! - `session.rs`: `Session` (`AC_Init`, `AC_Get`, `AC_Free`, `AC_Finalize`, preemption
//!   notices) and `Set`; `comm.rs`: the collective forms' collectives over an mpi4py
//!   communicator (the wheel links no MPI).
//! - `device.rs`: `Accelerator` and `Stream`.
//! - `memory.rs`: `Buffer`: device memory as bytes, copied zero-copy from and to any
//!   buffer-protocol object.
//! - `kernel.rs`: `Module`, `Function` and the kernel argument rules.
//!
//! # Invariants
//! - The GIL is never held while the network is waited on, and never taken back inside a tokio
//!   task (only on the calling thread, between waits, and by `comm.rs`'s collectives, which run
//!   on the calling thread).
//! - A host buffer handed to a call is held (its `PyBuffer`) until the call returns or is
//!   dropped; the SDK reads or writes it only within the call.
//! - Objects dropped in a forked child leak rather than touch the parent's connections.

mod comm;
mod device;
mod error;
mod kernel;
mod memory;
mod session;
mod stream;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _ac(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::Session>()?;
    m.add_class::<session::Set>()?;
    m.add_class::<device::Accelerator>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<memory::Buffer>()?;
    m.add_class::<kernel::Module>()?;
    m.add_class::<kernel::Function>()?;
    m.add_class::<kernel::Launcher>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! The collective session calls' collectives over an mpi4py communicator: the wheel links no
//! MPI, so it works with whichever MPI mpi4py was built for.
//!
//! The SDK calls these from the thread that made the collective call, with the GIL released;
//! each takes the GIL back for the mpi4py call (mpi4py releases it while MPI waits).

use std::sync::Mutex;

use ac_frontend::mpi::Communicator;
use pyo3::exceptions::PyKeyboardInterrupt;

use crate::error;
use ac_frontend::{Error, Result};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// An mpi4py `Comm`, with its rank and size read once.
#[derive(Debug)]
pub(crate) struct PyComm {
    comm: Py<PyAny>,
    rank: i32,
    size: i32,
    /// The first mpi4py call that raised: the collective call raises it (a `KeyboardInterrupt`
    /// as itself, anything else as `ac.MpiError`).
    failed: Mutex<Option<PyErr>>,
}

impl PyComm {
    /// Wraps `comm`, which must be an mpi4py communicator (an intracommunicator).
    pub(crate) fn new(comm: &Bound<'_, PyAny>) -> PyResult<Self> {
        let rank = comm.call_method0("Get_rank")?.extract()?;
        let size = comm.call_method0("Get_size")?.extract()?;
        Ok(Self { comm: comm.clone().unbind(), rank, size, failed: Mutex::new(None) })
    }

    fn call<T>(&self, what: &str, f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>) -> Result<T> {
        Python::attach(|py| f(self.comm.bind(py))).map_err(|e| {
            let message = format!("mpi4py {what} failed: {e}");
            self.failed.lock().expect("failed lock").get_or_insert(e);
            Error::Setup(message)
        })
    }

    /// The Python error of a collective call that failed with `e`: what mpi4py raised, if it
    /// raised (`KeyboardInterrupt` as itself, else `ac.MpiError`), else `sdk(e)`.
    pub(crate) fn error(&self, e: Error, sdk: fn(Error) -> PyErr) -> PyErr {
        let Some(raised) = self.failed.lock().expect("failed lock").take() else { return sdk(e) };
        Python::attach(|py| {
            if raised.is_instance_of::<PyKeyboardInterrupt>(py) {
                raised
            } else {
                error::mpi(format!("{e} ({raised})"))
            }
        })
    }
}

impl Communicator for PyComm {
    fn rank(&self) -> i32 {
        self.rank
    }

    fn size(&self) -> i32 {
        self.size
    }

    fn barrier(&self) -> Result<()> {
        self.call("Barrier", |c| c.call_method0("Barrier").map(drop))
    }

    fn broadcast(&self, root: i32, bytes: &mut [u8]) -> Result<()> {
        let got: Vec<u8> = self.call("bcast", |c| {
            let mine = PyBytes::new(c.py(), bytes);
            c.call_method1("bcast", (mine, root))?.extract()
        })?;
        if got.len() != bytes.len() {
            return Err(Error::Setup(format!(
                "mpi4py bcast: {} bytes from the root, {} expected",
                got.len(),
                bytes.len()
            )));
        }
        bytes.copy_from_slice(&got);
        Ok(())
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        let parts: Vec<Vec<u8>> = self.call("allgather", |c| {
            let parts = c.call_method1("allgather", (PyBytes::new(c.py(), mine),))?;
            parts.cast_into::<PyList>()?.iter().map(|p| p.extract()).collect()
        })?;
        let joined = parts.concat();
        if joined.len() != all.len() {
            return Err(Error::Setup("mpi4py allgather: the ranks sent different lengths".into()));
        }
        all.copy_from_slice(&joined);
        Ok(())
    }

    fn all_reduce_min(&self, value: i32) -> Result<i32> {
        self.call("allreduce", |c| {
            let min = c.py().import("mpi4py.MPI")?.getattr("MIN")?;
            let kwargs = [("op", min)].into_py_dict(c.py())?;
            c.call_method("allreduce", (value,), Some(&kwargs))?.extract()
        })
    }
}

use pyo3::types::IntoPyDict;

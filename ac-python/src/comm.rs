//! The collective session calls' collectives over an mpi4py communicator: the wheel links no
//! MPI, so it works with whichever MPI mpi4py was built for.
//!
//! The SDK calls these from the thread that made the collective call, with the GIL released;
//! each takes the GIL back for the mpi4py call (mpi4py releases it while MPI waits).

use ac_frontend::mpi::Communicator;
use ac_frontend::{Error, Result};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// An mpi4py `Comm`, with its rank and size read once.
#[derive(Debug)]
pub(crate) struct PyComm {
    comm: Py<PyAny>,
    rank: i32,
    size: i32,
}

impl PyComm {
    /// Wraps `comm`, which must be an mpi4py communicator (an intracommunicator).
    pub(crate) fn new(comm: &Bound<'_, PyAny>) -> PyResult<Self> {
        let rank = comm.call_method0("Get_rank")?.extract()?;
        let size = comm.call_method0("Get_size")?.extract()?;
        Ok(Self { comm: comm.clone().unbind(), rank, size })
    }

    fn call<T>(&self, what: &str, f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>) -> Result<T> {
        Python::attach(|py| f(self.comm.bind(py))).map_err(|e| Error::Setup(format!("mpi4py {what} failed: {e}")))
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

//! `Stream`: a stream of an accelerator, which kernels and copies may name.

use pyo3::prelude::*;

use crate::error;
use crate::wait::{Local, Owner};

/// A stream of an accelerator: work on one stream runs in order.
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Stream {
    pub(crate) owner: Owner,
    pub(crate) stream: Local<ac_frontend::Stream>,
}

#[pymethods]
impl Stream {
    /// Waits for the work sent on this stream; its failure is raised here.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.owner.wait(py, self.stream.synchronize())?.map_err(error::sdk)
    }

    /// The stream's number on its accelerator (0: the default stream).
    #[getter]
    fn id(&self) -> u64 {
        self.stream.id().0
    }
}

//! `Accelerator`: one accelerator of the session (its streams are in `stream.rs`).

use ac_frontend::blocking;
use ac_frontend::{ConnectOptions, DeviceKind};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error;
use crate::kernel::Module;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::wait::{Local, Owner};

/// One accelerator of the session: its handle (a connection to its backend).
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Accelerator {
    owner: Owner,
    id: String,
    acc: Local<blocking::Accelerator>,
}

impl Accelerator {
    pub(crate) fn new(owner: Owner, id: String, acc: blocking::Accelerator) -> Self {
        Self { owner, id, acc: Local::new(acc) }
    }

    /// Its id at the manager (`host/index`).
    pub(crate) fn id_str(&self) -> &str {
        &self.id
    }

    fn sdk(&self) -> &ac_frontend::Accelerator {
        self.acc.as_async()
    }

    fn module(&self, py: Python<'_>, loaded: ac_frontend::Result<ac_frontend::Module>) -> PyResult<Module> {
        let _ = py;
        Ok(Module::new(self.owner.clone(), loaded.map_err(error::sdk)?))
    }
}

#[pymethods]
impl Accelerator {
    /// Connects to one backend directly, without the resource manager (a GPU host's check, a
    /// benchmark): `addr` and `ca_cert`, or `AC_BACKEND_ADDR` and `AC_CA_CERT`. The connection
    /// closes when the object is dropped.
    #[staticmethod]
    #[pyo3(signature = (addr=None, ca_cert=None))]
    fn connect(py: Python<'_>, addr: Option<&str>, ca_cert: Option<&str>) -> PyResult<Self> {
        let options = match (addr, ca_cert) {
            (None, None) => ConnectOptions::from_env().map_err(|e| error::sdk(e.into()))?,
            (Some(addr), Some(ca)) => {
                let addr = addr.parse().map_err(|e| error::invalid(format!("address {addr:?}: {e}")))?;
                ConnectOptions::new(addr, ca)
            }
            _ => return Err(error::invalid("give both addr and ca_cert, or neither (the environment's)")),
        };
        let acc = py.detach(|| blocking::Accelerator::connect(&options)).map_err(error::sdk)?;
        let owner = Owner::new(acc.runtime().clone());
        let id = format!("{}/{}", options.addr, acc.info().index);
        Ok(Self::new(owner, id, acc))
    }

    /// Its id at the manager (`host/device`).
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// The device's name (a GPU's model, or the CPU device's).
    #[getter]
    fn name(&self) -> &str {
        &self.acc.info().name
    }

    /// `"cuda"` or `"cpu"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.acc.info().kind {
            DeviceKind::Cuda => "cuda",
            DeviceKind::Cpu => "cpu",
        }
    }

    /// The device's memory, bytes.
    #[getter]
    fn memory_total(&self) -> u64 {
        self.acc.info().memory_total
    }

    /// The GPU's compute capability, `(major, minor)`; `None` for a CPU device.
    #[getter]
    fn compute_capability(&self) -> Option<(u32, u32)> {
        self.acc.info().compute_capability
    }

    /// The device's current state, asked of the backend: name, kind, memory total and free.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = self.owner.wait(py, self.sdk().device_info())?.map_err(error::sdk)?;
        let dict = PyDict::new(py);
        dict.set_item("name", info.name)?;
        dict.set_item("kind", self.kind())?;
        dict.set_item("memory_total", info.memory_total)?;
        dict.set_item("memory_free", info.memory_free)?;
        dict.set_item("compute_capability", info.compute_capability)?;
        Ok(dict)
    }

    /// What the device's sensors read now, and the memory this session holds
    /// ([`ac_frontend::Accelerator::telemetry`]); a reading the device cannot give is `None`.
    fn telemetry<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let readings = self.owner.wait(py, self.sdk().telemetry())?.map_err(error::sdk)?;
        let clocks = |c: ac_frontend::Clocks| -> PyResult<Bound<'py, PyDict>> {
            let dict = PyDict::new(py);
            dict.set_item("graphics", c.graphics)?;
            dict.set_item("sm", c.sm)?;
            dict.set_item("memory", c.memory)?;
            dict.set_item("video", c.video)?;
            Ok(dict)
        };
        let dict = PyDict::new(py);
        dict.set_item("utilization_gpu", readings.utilization_gpu)?;
        dict.set_item("utilization_memory", readings.utilization_memory)?;
        dict.set_item("temperature_c", readings.temperature_c)?;
        dict.set_item("power_mw", readings.power_mw)?;
        dict.set_item("power_limit_mw", readings.power_limit_mw)?;
        dict.set_item("power_management_limit_mw", readings.power_management_limit_mw)?;
        dict.set_item("energy_mj", readings.energy_mj)?;
        dict.set_item("clocks_mhz", clocks(readings.clocks_mhz)?)?;
        dict.set_item("max_clocks_mhz", clocks(readings.max_clocks_mhz)?)?;
        dict.set_item("performance_state", readings.performance_state)?;
        dict.set_item("session_memory", readings.session_memory)?;
        Ok(dict)
    }

    /// Allocates `nbytes` of device memory (`acMemAlloc`).
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<Buffer> {
        let buffer = self.owner.wait(py, self.sdk().alloc::<u8>(nbytes))?.map_err(error::sdk)?;
        Ok(Buffer::new(self.owner.clone(), buffer, Local::new(self.sdk().default_stream())))
    }

    /// A round trip to the backend.
    fn ping(&self, py: Python<'_>) -> PyResult<()> {
        self.owner.wait(py, self.sdk().ping())?.map_err(error::sdk)
    }

    /// Waits for all work sent so far, on every stream; a failure of that work is raised here.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.owner.wait(py, self.sdk().synchronize())?.map_err(error::sdk)
    }

    /// The backend's builtin kernels.
    fn builtin(&self, py: Python<'_>) -> PyResult<Module> {
        let loaded = self.owner.wait(py, self.sdk().builtin())?;
        self.module(py, loaded)
    }

    /// A module from PTX source.
    fn load_ptx(&self, py: Python<'_>, ptx: &str) -> PyResult<Module> {
        let loaded = self.owner.wait(py, self.sdk().load_ptx(ptx))?;
        self.module(py, loaded)
    }

    /// A module from a cubin or fatbin image.
    fn load_cubin(&self, py: Python<'_>, image: &[u8]) -> PyResult<Module> {
        let loaded = self.owner.wait(py, self.sdk().load_cubin(image))?;
        self.module(py, loaded)
    }

    /// A module compiled from CUDA C++ on the backend (NVRTC).
    #[pyo3(signature = (source, options=Vec::new()))]
    fn compile(&self, py: Python<'_>, source: &str, options: Vec<String>) -> PyResult<Module> {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let loaded = self.owner.wait(py, self.sdk().compile_cuda(source, &options))?;
        self.module(py, loaded)
    }

    /// A new stream.
    fn create_stream(&self, py: Python<'_>) -> PyResult<Stream> {
        let stream = self.owner.wait(py, self.sdk().create_stream())?.map_err(error::sdk)?;
        Ok(Stream { owner: self.owner.clone(), stream: Local::new(stream) })
    }

    /// The default stream.
    #[getter]
    fn default_stream(&self) -> Stream {
        Stream { owner: self.owner.clone(), stream: Local::new(self.sdk().default_stream()) }
    }

    fn __repr__(&self) -> String {
        format!("<ac.Accelerator {} ({}, {} MiB)>", self.id, self.acc.info().name, self.acc.info().memory_total >> 20)
    }
}

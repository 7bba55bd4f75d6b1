//! `Module`, `Function`, and how Python values become kernel arguments.
//!
//! The rules: a device array (or a `Buffer`) is a pointer to its first byte; a numpy scalar is
//! passed at its own width (float32, float64, int32, uint32, int64, uint64); a Python `int` or
//! `float` only where the kernel's parameter types are known (PTX, builtin and compiled
//! kernels), converted to that type; otherwise a `TypeError` says which widths to choose from.
//! That is the trap CuPy users know: a Python float given to a `float` parameter as a double.

use ac_frontend::{KernelArg, LaunchDims, ParamKind};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple, PyType};

use crate::error;
use crate::memory::Buffer;
use crate::stream::Stream;
use crate::wait::{Local, Owner};

/// A loaded module.
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Module {
    owner: Owner,
    module: Local<ac_frontend::Module>,
}

/// A kernel of a module.
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Function {
    owner: Owner,
    function: Local<ac_frontend::Function>,
}

impl Module {
    pub(crate) fn new(owner: Owner, module: ac_frontend::Module) -> Self {
        Self { owner, module: Local::new(module) }
    }
}

#[pymethods]
impl Module {
    /// The kernel `name` (`acKernelCreate`).
    fn get_function(&self, py: Python<'_>, name: &str) -> PyResult<Function> {
        let function = self.owner.wait(py, self.module.function(name))?.map_err(error::sdk)?;
        Ok(Function { owner: self.owner.clone(), function: Local::new(function) })
    }
}

/// The numpy name of a parameter kind.
fn kind_name(kind: ParamKind) -> &'static str {
    match kind {
        ParamKind::U32 => "uint32",
        ParamKind::I32 => "int32",
        ParamKind::U64 => "uint64",
        ParamKind::I64 => "int64",
        ParamKind::F32 => "float32",
        ParamKind::F64 => "float64",
        ParamKind::Ptr => "pointer (a device array)",
    }
}

static NUMPY_GENERIC: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DEVICE_ARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
/// numpy's scalar types that are kernel arguments, looked up once (a launch compares types,
/// not dtypes: the launch rate depends on it).
static NUMPY_SCALARS: PyOnceLock<[(Py<PyType>, ParamKind); 6]> = PyOnceLock::new();

fn numpy_scalars(py: Python<'_>) -> PyResult<&[(Py<PyType>, ParamKind); 6]> {
    NUMPY_SCALARS.get_or_try_init(py, || {
        let numpy = py.import("numpy")?;
        let get = |name: &str| -> PyResult<Py<PyType>> { Ok(numpy.getattr(name)?.cast_into::<PyType>()?.unbind()) };
        Ok([
            (get("float32")?, ParamKind::F32),
            (get("float64")?, ParamKind::F64),
            (get("int32")?, ParamKind::I32),
            (get("uint32")?, ParamKind::U32),
            (get("int64")?, ParamKind::I64),
            (get("uint64")?, ParamKind::U64),
        ])
    })
}

/// A numpy scalar of one of the six argument types, at its width.
fn exact_scalar(value: &Bound<'_, PyAny>) -> PyResult<Option<KernelArg>> {
    let kind = value.get_type();
    let Some((_, kind)) = numpy_scalars(value.py())?.iter().find(|(t, _)| kind.is(t)) else { return Ok(None) };
    Ok(Some(match kind {
        ParamKind::F32 => KernelArg::F32(value.extract::<f64>()? as f32),
        ParamKind::F64 => KernelArg::F64(value.extract()?),
        ParamKind::I32 => KernelArg::I32(value.extract()?),
        ParamKind::U32 => KernelArg::U32(value.extract()?),
        ParamKind::I64 => KernelArg::I64(value.extract()?),
        ParamKind::U64 => KernelArg::U64(value.extract()?),
        ParamKind::Ptr => unreachable!("no numpy scalar is a pointer"),
    }))
}

/// A numpy scalar at its own width (the six types, and their aliases such as `longlong`).
fn numpy_scalar(value: &Bound<'_, PyAny>, index: usize) -> PyResult<KernelArg> {
    let dtype = value.getattr(intern!(value.py(), "dtype"))?;
    let kind: char = dtype.getattr(intern!(value.py(), "kind"))?.extract()?;
    let size: usize = dtype.getattr(intern!(value.py(), "itemsize"))?.extract()?;
    Ok(match (kind, size) {
        ('f', 4) => KernelArg::F32(value.extract::<f64>()? as f32),
        ('f', 8) => KernelArg::F64(value.extract()?),
        ('i', 4) => KernelArg::I32(value.extract()?),
        ('u', 4) => KernelArg::U32(value.extract()?),
        ('i', 8) => KernelArg::I64(value.extract()?),
        ('u', 8) => KernelArg::U64(value.extract()?),
        _ => {
            let name: String = dtype.getattr(intern!(value.py(), "name"))?.extract()?;
            return Err(error::type_error(format!(
                "argument {index}: a numpy {name} cannot be a kernel argument: parameters are \
                 float32, float64, int32, uint32, int64 or uint64"
            )));
        }
    })
}

/// A Python `int` or `float` as the parameter type `kind` says.
fn plain_number(value: &Bound<'_, PyAny>, index: usize, kind: Option<ParamKind>) -> PyResult<KernelArg> {
    let is_float = value.is_instance_of::<PyFloat>();
    let what = if is_float { "float" } else { "int" };
    let Some(kind) = kind else {
        let choose = if is_float {
            "numpy.float32(x) or numpy.float64(x)"
        } else {
            "numpy.int32(x), numpy.uint32(x), numpy.int64(x) or numpy.uint64(x)"
        };
        return Err(error::type_error(format!(
            "argument {index}: a Python {what} has no width and this kernel's parameter types are unknown \
             (a cubin's kernel): pass {choose}"
        )));
    };
    let overflow = |_| error::type_error(format!("argument {index}: {value} does not fit in {}", kind_name(kind)));
    Ok(match (kind, is_float) {
        (ParamKind::F32, _) => KernelArg::F32(value.extract::<f64>()? as f32),
        (ParamKind::F64, _) => KernelArg::F64(value.extract()?),
        (ParamKind::I32, false) => KernelArg::I32(value.extract().map_err(overflow)?),
        (ParamKind::U32, false) => KernelArg::U32(value.extract().map_err(overflow)?),
        (ParamKind::I64, false) => KernelArg::I64(value.extract().map_err(overflow)?),
        (ParamKind::U64, false) => KernelArg::U64(value.extract().map_err(overflow)?),
        _ => {
            return Err(error::type_error(format!(
                "argument {index}: a Python {what} given for a {} parameter",
                kind_name(kind)
            )))
        }
    })
}

/// One Python value as the kernel argument at `index` (`kind`: the parameter's type, if known).
fn kernel_arg(value: &Bound<'_, PyAny>, index: usize, kind: Option<ParamKind>) -> PyResult<KernelArg> {
    let py = value.py();
    let arg = if value.is_instance(DEVICE_ARRAY.import(py, "ac.array", "DeviceArray")?)? {
        let buffer = value.getattr(intern!(py, "_ac_buffer"))?;
        let offset: usize = value.getattr(intern!(py, "_ac_offset"))?.extract()?;
        buffer.cast::<Buffer>()?.get().arg_at(offset)?
    } else if let Some(arg) = exact_scalar(value)? {
        arg
    } else if let Ok(buffer) = value.cast::<Buffer>() {
        buffer.get().arg_at(0)?
    } else if value.is_instance(NUMPY_GENERIC.import(py, "numpy", "generic")?)? {
        numpy_scalar(value, index)?
    } else if value.is_instance_of::<PyBool>() {
        return Err(error::type_error(format!("argument {index}: a bool is not a kernel argument (use numpy.int32)")));
    } else if value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>() {
        plain_number(value, index, kind)?
    } else {
        let name = value.get_type().name()?;
        return Err(error::type_error(format!(
            "argument {index}: a {name} is not a kernel argument (device arrays, numpy scalars, and \
             Python numbers where the parameter type is known)"
        )));
    };
    if let Some(kind) = kind.filter(|&k| k != arg.kind()) {
        return Err(error::type_error(format!(
            "argument {index} is a {} parameter; got a {}",
            kind_name(kind),
            kind_name(arg.kind())
        )));
    }
    Ok(arg)
}

/// A grid or block: an int, or a tuple of one to three ints.
fn dims(value: &Bound<'_, PyAny>, what: &str) -> PyResult<[u32; 3]> {
    let parts: Vec<u32> = match value.extract::<u32>() {
        Ok(x) => vec![x],
        Err(_) => value
            .extract()
            .map_err(|_| error::type_error(format!("{what} must be an int or a tuple of 1 to 3 ints >= 1")))?,
    };
    if parts.is_empty() || parts.len() > 3 || parts.contains(&0) {
        return Err(error::invalid(format!("{what} must have 1 to 3 sizes, each >= 1 (got {parts:?})")));
    }
    let mut out = [1u32; 3];
    out[..parts.len()].copy_from_slice(&parts);
    Ok(out)
}

impl Function {
    /// Launches the kernel with `args` (both launch forms come here).
    fn launch(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        shared_mem: u32,
        stream: Option<&Stream>,
    ) -> PyResult<()> {
        let launch = LaunchDims::new(dims(grid, "grid")?, dims(block, "block")?).with_shared_mem(shared_mem);
        let params = self.function.params();
        let given = args.len()?;
        if let Some(params) = params.filter(|p| p.len() != given) {
            return Err(error::type_error(format!(
                "{} takes {} arguments ({given} given)",
                self.function.name(),
                params.len()
            )));
        }
        let mut converted = Vec::with_capacity(given);
        for (index, value) in args.try_iter()?.enumerate() {
            converted.push(kernel_arg(&value?, index, params.map(|p| p[index]))?);
        }
        let sent = match stream {
            None => self.owner.run(py, self.function.launch(launch, &converted))?,
            Some(s) => self.owner.run(py, self.function.launch_on(&s.stream, launch, &converted))?,
        };
        sent.map_err(error::sdk)
    }
}

#[pymethods]
impl Function {
    /// The kernel's name.
    #[getter]
    fn name(&self) -> &str {
        self.function.name()
    }

    /// Its parameter types as numpy names, when known (PTX, builtin and compiled kernels).
    #[getter]
    fn params(&self) -> Option<Vec<&'static str>> {
        self.function.params().map(|p| p.iter().map(|&k| kind_name(k)).collect())
    }

    /// Launches the kernel (`acKernelRun`, CuPy's `RawKernel` form); returns without a round
    /// trip. A failure surfaces at the next synchronizing call.
    #[pyo3(signature = (grid, block, args, shared_mem=0, stream=None))]
    fn __call__(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        shared_mem: u32,
        stream: Option<&Stream>,
    ) -> PyResult<()> {
        self.launch(py, grid, block, args, shared_mem, stream)
    }

    /// Numba's form: `f[grid, block](*args)`, or `f[grid, block, stream, shared_mem]`.
    fn __getitem__(slf: &Bound<'_, Self>, config: &Bound<'_, PyTuple>) -> PyResult<Launcher> {
        let n = config.len();
        if !(2..=4).contains(&n) {
            return Err(error::type_error("kernel[grid, block] or kernel[grid, block, stream, shared_mem]"));
        }
        let stream = match n {
            2 => None,
            _ => Some(config.get_item(2)?)
                .filter(|s| !s.is_none())
                .map(|s| s.cast_into::<Stream>().map(Bound::unbind))
                .transpose()?,
        };
        let shared_mem = if n == 4 { config.get_item(3)?.extract()? } else { 0 };
        Ok(Launcher {
            function: slf.clone().unbind(),
            grid: config.get_item(0)?.unbind(),
            block: config.get_item(1)?.unbind(),
            stream,
            shared_mem,
        })
    }

    fn __repr__(&self) -> String {
        format!("<ac.Function {}>", self.function.name())
    }
}

/// A kernel with its launch configuration (`f[grid, block]`): calling it launches.
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Launcher {
    function: Py<Function>,
    grid: Py<PyAny>,
    block: Py<PyAny>,
    stream: Option<Py<Stream>>,
    shared_mem: u32,
}

#[pymethods]
impl Launcher {
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let stream = self.stream.as_ref().map(|s| s.get());
        self.function.get().launch(py, self.grid.bind(py), self.block.bind(py), args, self.shared_mem, stream)
    }
}

//! Modules and kernels.

use ac_proto::backend::{FunctionId, KernelArg, LaunchDims, ModuleId, ModuleSource, ParamKind, Request, Response};
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, Error, Result, Stream};

/// A module loaded on an accelerator.
#[derive(Debug, Clone)]
pub struct Module {
    acc: Accelerator,
    id: ModuleId,
}

/// A kernel ready to launch (`acKernelCreate`).
#[derive(Debug, Clone)]
pub struct Function {
    acc: Accelerator,
    id: FunctionId,
    name: String,
    params: Option<Vec<ParamKind>>,
}

impl Accelerator {
    /// Loads a module made of `source` (with `image` bytes for PTX and cubin).
    pub async fn load_module(&self, source: ModuleSource, image: &[u8]) -> Result<Module> {
        let request = Request::ModuleLoad { source, len: image.len() as u64 };
        match self.call(request, Bytes::copy_from_slice(image)).await? {
            Answer::Response(Response::Module(id)) => Ok(Module::new(self.clone(), id)),
            other => Err(unexpected(other)),
        }
    }

    /// The `builtin` module every device provides (`fill`, `vector_add`, `saxpy`, `sgemm`,
    /// `reduce_sum`).
    pub async fn builtin(&self) -> Result<Module> {
        self.load_module(ModuleSource::Builtin("builtin".into()), &[]).await
    }

    /// Loads PTX text (needs a CUDA device). A PTX error answers with the driver's JIT log.
    pub async fn load_ptx(&self, ptx: &str) -> Result<Module> {
        self.load_module(ModuleSource::Ptx, ptx.as_bytes()).await
    }

    /// Loads a cubin or fatbin image (needs a CUDA device).
    pub async fn load_cubin(&self, image: &[u8]) -> Result<Module> {
        self.load_module(ModuleSource::Cubin, image).await
    }

    /// Compiles CUDA C on the backend with NVRTC, for the device's architecture, and loads it
    /// (needs a CUDA device). Kernels meant to be looked up by name are `extern "C"`. A failed
    /// compile answers [`ErrorKind::ModuleLoad`](crate::ErrorKind::ModuleLoad) with the log.
    pub async fn compile_cuda(&self, source: &str, options: &[&str]) -> Result<Module> {
        let options = options.iter().map(|o| o.to_string()).collect();
        self.load_module(ModuleSource::CudaC { options }, source.as_bytes()).await
    }
}

impl Module {
    /// Module `id` of `acc`.
    pub(crate) fn new(acc: Accelerator, id: ModuleId) -> Self {
        Module { acc, id }
    }

    /// The accelerator it is loaded on.
    pub(crate) fn accelerator(&self) -> &Accelerator {
        &self.acc
    }

    /// Its id in the session.
    pub(crate) fn id(&self) -> ModuleId {
        self.id
    }

    /// Looks a kernel up by name.
    pub async fn function(&self, name: &str) -> Result<Function> {
        let request = Request::FunctionLookup { module: self.id, name: name.to_string() };
        match self.acc.call(request, Bytes::new()).await? {
            Answer::Response(Response::Function { id, params }) => {
                Ok(Function::new(self.acc.clone(), id, name, params))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Unloads the module after the work using it.
    pub async fn unload(self) -> Result<()> {
        self.acc.call_ok(Request::ModuleUnload { module: self.id }).await
    }
}

impl Function {
    /// Kernel `id` of `acc`, named `name`.
    pub(crate) fn new(acc: Accelerator, id: FunctionId, name: &str, params: Option<Vec<ParamKind>>) -> Self {
        Function { acc, id, name: name.to_string(), params }
    }

    /// The accelerator it was looked up on.
    pub(crate) fn accelerator(&self) -> &Accelerator {
        &self.acc
    }

    /// Its id in the session.
    pub(crate) fn id(&self) -> FunctionId {
        self.id
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its parameter kinds, when the device knows them.
    pub fn params(&self) -> Option<&[ParamKind]> {
        self.params.as_deref()
    }

    /// Checks arguments against the signature before anything is sent.
    pub(crate) fn check(&self, args: &[KernelArg]) -> Result<()> {
        let Some(params) = &self.params else {
            return Ok(());
        };
        let kinds: Vec<ParamKind> = args.iter().map(KernelArg::kind).collect();
        if kinds != *params {
            return Err(Error::InvalidArgument(format!("kernel `{}` takes {params:?}, got {kinds:?}", self.name)));
        }
        Ok(())
    }

    /// Launches on the default stream (`acKernelRun`). Returns without a round trip; errors
    /// of the launch surface at the next synchronizing call.
    pub async fn launch(&self, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.launch_on(&self.acc.default_stream(), dims, args).await
    }

    /// Launches on `stream`.
    pub async fn launch_on(&self, stream: &Stream, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.check(args)?;
        let request = Request::Launch { function: self.id, dims, args: args.to_vec(), stream: stream.id() };
        self.acc.post(request, Bytes::new()).await
    }
}

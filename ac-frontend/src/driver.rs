//! Calls shaped for a driver API, which the CUDA shim (`ac-cuda`) makes on behalf of programs
//! written against `libcuda`: an allocation answers its device address (the program's kernels
//! take it as a raw pointer, and the program does arithmetic on it), and a kernel lookup answers
//! the parameters' sizes (`cuLaunchKernel` is given a pointer per parameter and no sizes).
//! Both need backend protocol 7.

use ac_proto::backend::{image_digest, ModuleSource, Request, Response};
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, DeviceBuffer, Error, Function, Module, Result};

/// The backend protocol that serves these calls.
const DRIVER_CALLS: u16 = 7;

impl Accelerator {
    /// Refuses a driver-shaped call to a backend too old to serve it.
    fn needs_driver_calls(&self, call: &str) -> Result<()> {
        if self.inner.version < DRIVER_CALLS {
            return Err(Error::VersionMismatch(format!(
                "{call} needs backend protocol {DRIVER_CALLS}; this backend speaks {} (upgrade ac-backend)",
                self.inner.version
            )));
        }
        Ok(())
    }

    /// Allocates `bytes` (zeroed) and answers the buffer with its device address: where its
    /// first byte lies in this session's device address space.
    pub async fn alloc_addressed(&self, bytes: u64) -> Result<(DeviceBuffer<u8>, u64)> {
        self.needs_driver_calls("an allocation with its address")?;
        let len = usize::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("{bytes} bytes")))?;
        match self.call(Request::MemAllocAt { bytes }, Bytes::new()).await? {
            Answer::Response(Response::BufferAt { buffer, address }) => {
                Ok((DeviceBuffer::adopt(self.clone(), buffer, len), address))
            }
            other => Err(unexpected(other)),
        }
    }
}

impl Accelerator {
    /// Loads a module image, sending it only if the backend does not hold it for this session's
    /// owner already (by its SHA-256): a framework's images are hundreds of MB, and each of a
    /// job's processes loads the same ones. Answers the module and whether the image was sent.
    pub async fn load_module_cached(&self, source: ModuleSource, image: &[u8]) -> Result<(Module, bool)> {
        self.needs_driver_calls("a module load by digest")?;
        let request = Request::ModuleLoadCached { source: source.clone(), digest: image_digest(image) };
        match self.call(request, Bytes::new()).await? {
            Answer::Response(Response::Module(id)) => Ok((Module::new(self.clone(), id), false)),
            Answer::Response(Response::NotCached) => Ok((self.load_module(source, image).await?, true)),
            other => Err(unexpected(other)),
        }
    }
}

impl Module {
    /// Looks a kernel up by name, with the size in bytes of each of its parameters when the
    /// device knows them.
    pub async fn function_layout(&self, name: &str) -> Result<(Function, Option<Vec<u32>>)> {
        let acc = self.accelerator();
        acc.needs_driver_calls("a kernel lookup with its parameter layout")?;
        let request = Request::FunctionLayout { module: self.id(), name: name.to_string() };
        match acc.call(request, Bytes::new()).await? {
            Answer::Response(Response::FunctionLayout { id, sizes }) => {
                Ok((Function::new(acc.clone(), id, name, None), sizes))
            }
            other => Err(unexpected(other)),
        }
    }
}

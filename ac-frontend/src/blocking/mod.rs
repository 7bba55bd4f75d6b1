//! The blocking facade, for programs with a plain `main`: the same API without `.await`.
//!
//! Each handle carries the runtime that drives its connection; do not use these types from
//! inside an async runtime (use the async types there).

use std::sync::Arc;
use std::time::Duration;

use ac_proto::backend::{DeviceInfo, KernelArg, LaunchDims, ParamKind, Telemetry};
use bytemuck::Pod;
use tokio::runtime::Runtime;

use crate::{ConnectOptions, CopyOptions, Error, Result};

mod session;

pub use session::{DynamicSet, Handle, Preemptions, Session};

/// A remote accelerator, driven by a runtime of its own.
#[derive(Debug)]
pub struct Accelerator {
    rt: Arc<Runtime>,
    inner: Option<crate::Accelerator>,
    /// Whether dropping this handle closes the connection (a session's handles are closed by
    /// the session instead).
    owned: bool,
}

pub(crate) fn runtime() -> Result<Arc<Runtime>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ac-frontend")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| Error::Setup(format!("cannot start the I/O runtime: {e}")))
}

impl Accelerator {
    /// Connects to a backend.
    pub fn connect(options: &ConnectOptions) -> Result<Self> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Accelerator::connect(options))?;
        Ok(Self { rt, inner: Some(inner), owned: true })
    }

    /// Connects to the backend named by the environment (see [`ConnectOptions::from_env`]).
    pub fn from_env() -> Result<Self> {
        Self::connect(&ConnectOptions::from_env()?)
    }

    /// Wraps an async handle, using `rt` to drive it; dropping the wrapper closes the
    /// connection.
    pub fn from_async(rt: Arc<Runtime>, inner: crate::Accelerator) -> Self {
        Self { rt, inner: Some(inner), owned: true }
    }

    /// Wraps a handle that something else (a session) closes.
    pub(crate) fn borrowed(rt: Arc<Runtime>, inner: crate::Accelerator) -> Self {
        Self { rt, inner: Some(inner), owned: false }
    }

    /// The runtime that drives the connection (for a binding that waits on the async calls
    /// itself).
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The async handle underneath.
    pub fn as_async(&self) -> &crate::Accelerator {
        self.inner.as_ref().expect("present until drop")
    }

    /// The device as described when the session opened.
    pub fn info(&self) -> &DeviceInfo {
        self.as_async().info()
    }

    /// Current device description.
    pub fn device_info(&self) -> Result<DeviceInfo> {
        self.rt.block_on(self.as_async().device_info())
    }

    /// What the device's sensors read now ([`crate::Accelerator::telemetry`]).
    pub fn telemetry(&self) -> Result<Telemetry> {
        self.rt.block_on(self.as_async().telemetry())
    }

    /// A round trip with no device work.
    pub fn ping(&self) -> Result<()> {
        self.rt.block_on(self.as_async().ping())
    }

    /// Waits for all work; returns the first asynchronous error since the last synchronize.
    pub fn synchronize(&self) -> Result<()> {
        self.rt.block_on(self.as_async().synchronize())
    }

    /// Changes how copies travel.
    pub fn set_copy_options(&self, options: CopyOptions) {
        self.as_async().set_copy_options(options)
    }

    /// Allocates `len` zeroed elements (`acMemAlloc`).
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let inner = self.rt.block_on(self.as_async().alloc(len))?;
        Ok(DeviceBuffer { rt: self.rt.clone(), inner })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn alloc_from<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let inner = self.rt.block_on(self.as_async().alloc_from(data))?;
        Ok(DeviceBuffer { rt: self.rt.clone(), inner })
    }

    /// The `builtin` module.
    pub fn builtin(&self) -> Result<Module> {
        let inner = self.rt.block_on(self.as_async().builtin())?;
        Ok(Module { rt: self.rt.clone(), inner })
    }

    /// Loads PTX text (needs a CUDA device).
    pub fn load_ptx(&self, ptx: &str) -> Result<Module> {
        let inner = self.rt.block_on(self.as_async().load_ptx(ptx))?;
        Ok(Module { rt: self.rt.clone(), inner })
    }

    /// Loads a cubin or fatbin image (needs a CUDA device).
    pub fn load_cubin(&self, image: &[u8]) -> Result<Module> {
        let inner = self.rt.block_on(self.as_async().load_cubin(image))?;
        Ok(Module { rt: self.rt.clone(), inner })
    }

    /// Compiles CUDA C with NVRTC on the backend and loads it (needs a CUDA device).
    pub fn compile_cuda(&self, source: &str, options: &[&str]) -> Result<Module> {
        let inner = self.rt.block_on(self.as_async().compile_cuda(source, options))?;
        Ok(Module { rt: self.rt.clone(), inner })
    }

    /// Creates a stream.
    pub fn create_stream(&self) -> Result<Stream> {
        let inner = self.rt.block_on(self.as_async().create_stream())?;
        Ok(Stream { rt: self.rt.clone(), inner })
    }

    /// The default stream.
    pub fn default_stream(&self) -> Stream {
        Stream { rt: self.rt.clone(), inner: self.as_async().default_stream() }
    }
}

impl Clone for Accelerator {
    /// Another handle to the same connection; the original's owner closes it.
    fn clone(&self) -> Self {
        Self { rt: self.rt.clone(), inner: self.inner.clone(), owned: false }
    }
}

impl Drop for Accelerator {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take().filter(|_| self.owned) {
            // Let the backend learn at once that the session ended, rather than by time-out.
            self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(1), inner.close()).await }).ok();
        }
    }
}

/// Typed device memory (blocking).
#[derive(Debug)]
pub struct DeviceBuffer<T: Pod> {
    rt: Arc<Runtime>,
    inner: crate::DeviceBuffer<T>,
}

impl<T: Pod> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// A pointer to element `index`, as a kernel argument.
    pub fn at(&self, index: usize) -> KernelArg {
        self.inner.at(index)
    }

    /// A pointer to the start, as a kernel argument.
    pub fn arg(&self) -> KernelArg {
        self.inner.arg()
    }

    /// Copies `src` to the start of the buffer (`acMemCpy` host to device).
    pub fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.rt.block_on(self.inner.copy_from_host(src))
    }

    /// Copies `src` to elements `index..`.
    pub fn copy_from_host_at(&self, index: usize, src: &[T]) -> Result<()> {
        self.rt.block_on(self.inner.copy_from_host_at(index, src))
    }

    /// Copies the start of the buffer into `dst` (`acMemCpy` device to host).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.rt.block_on(self.inner.copy_to_host(dst))
    }

    /// Copies elements `index..` into `dst`.
    pub fn copy_to_host_at(&self, index: usize, dst: &mut [T]) -> Result<()> {
        self.rt.block_on(self.inner.copy_to_host_at(index, dst))
    }

    /// Queues a copy of `count` elements of `src` from `src_index` to `index..` of this
    /// buffer, device to device, on `stream` (`acMemCpy` device to device).
    pub fn copy_from_device_at(
        &self,
        stream: &Stream,
        index: usize,
        src: &DeviceBuffer<T>,
        src_index: usize,
        count: usize,
    ) -> Result<()> {
        self.rt.block_on(self.inner.copy_from_device_at(&stream.inner, index, &src.inner, src_index, count))
    }

    /// The whole buffer as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.rt.block_on(self.inner.to_vec())
    }

    /// Queues a copy of `src` to elements `index..` on `stream`.
    pub fn copy_from_host_async(&self, stream: &Stream, index: usize, src: &[T]) -> Result<()> {
        self.rt.block_on(self.inner.copy_from_host_async(&stream.inner, index, src))
    }

    /// Queues setting every byte to `value` on `stream`.
    pub fn memset(&self, stream: &Stream, value: u8) -> Result<()> {
        self.rt.block_on(self.inner.memset(&stream.inner, value))
    }

    /// Queues setting every byte of elements `index..index + count` to `value` on `stream`.
    pub fn memset_range(&self, stream: &Stream, index: usize, count: usize, value: u8) -> Result<()> {
        self.rt.block_on(self.inner.memset_range(&stream.inner, index, count, value))
    }

    /// Frees the memory now (`acMemFree`).
    pub fn free(self) -> Result<()> {
        self.rt.block_on(self.inner.free())
    }
}

impl<T: Pod> From<&DeviceBuffer<T>> for KernelArg {
    fn from(buffer: &DeviceBuffer<T>) -> Self {
        buffer.arg()
    }
}

/// A loaded module (blocking).
#[derive(Debug)]
pub struct Module {
    rt: Arc<Runtime>,
    inner: crate::Module,
}

impl Module {
    /// Looks a kernel up by name (`acKernelCreate`).
    pub fn function(&self, name: &str) -> Result<Function> {
        let inner = self.rt.block_on(self.inner.function(name))?;
        Ok(Function { rt: self.rt.clone(), inner })
    }
}

/// A kernel (blocking).
#[derive(Debug)]
pub struct Function {
    rt: Arc<Runtime>,
    inner: crate::Function,
}

impl Function {
    /// Its parameter kinds, when known.
    pub fn params(&self) -> Option<&[ParamKind]> {
        self.inner.params()
    }

    /// Launches on the default stream without waiting (`acKernelSetArgs` + `acKernelRun`).
    pub fn launch(&self, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.rt.block_on(self.inner.launch(dims, args))
    }

    /// Launches on `stream` without waiting.
    pub fn launch_on(&self, stream: &Stream, dims: LaunchDims, args: &[KernelArg]) -> Result<()> {
        self.rt.block_on(self.inner.launch_on(&stream.inner, dims, args))
    }
}

/// A device stream (blocking).
#[derive(Debug)]
pub struct Stream {
    rt: Arc<Runtime>,
    inner: crate::Stream,
}

impl Stream {
    /// Waits for the stream's work.
    pub fn synchronize(&self) -> Result<()> {
        self.rt.block_on(self.inner.synchronize())
    }

    /// Waits, then destroys the stream.
    pub fn destroy(self) -> Result<()> {
        self.rt.block_on(self.inner.destroy())
    }
}

//! The device abstraction.
//!
//! A [`Device`] is one accelerator of the host. Each session opens a [`Context`] on it: its own
//! memory, modules and streams. On CUDA a context is a CUDA context of its own, so that a kernel
//! fault, which poisons the context it happens in, ends only the session that caused it; on the
//! CPU device every context is the device itself.
//!
//! Context calls are blocking. They are made from the session's stream worker threads and
//! blocking tasks, and also from async code (the control loop's allocations, device info,
//! kernel lookups and stream creation; `network/bulk/`'s uploads and downloads): a device whose calls
//! wait (CUDA, session workers) waits through [`blocking`], which moves the Tokio worker
//! thread's other tasks away first. Never while holding an async lock. Stream-ordered calls
//! (`launch`, `memset`, `copy`, `write`) may return before the work is done on devices that
//! queue work themselves (CUDA); `synchronize` waits for a stream and returns the first error
//! met. The CPU device does the work inside the call.
//!
//! The session layer checks ownership and bounds before calling a context; contexts check bounds
//! again, so a bug above cannot turn into a stray write.

pub mod abs_reduce;
pub mod builtin;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod described;
pub mod dft;
mod driver_sign;
pub mod epilogue;
pub mod gemm;
pub mod health;
pub mod limits;
pub mod lu;
pub mod mps;
#[cfg(feature = "cuda")]
pub mod nvml;
pub mod packed;
pub mod qr;
pub mod served;
pub mod stream_workers;
pub mod structured;
pub mod transfer;
pub mod trsm;
pub mod vector_copy;
pub mod worker;

use std::sync::Arc;

use ac_proto::backend::{
    ArrayCopy, ArraySpec, ContextLimit, DeviceInfo, ErrorKind, JitOption, KernelArg, KernelAttributes, KernelSetting,
    LaunchDims, LinkInput, ModuleSource, ParamKind, Sampler, Telemetry, TensorMapSpec, TextureResource, WireError,
};
use ac_proto::pieces;
use serde::{Deserialize, Serialize};

pub use cpu::CpuDevice;
pub use driver_sign::{auto_fallback, explain_cuda_failure};
pub use limits::{
    check_carveout, check_cluster, check_shared, validate_dims, LaunchMode, Limited, DEFAULT_DYNAMIC_SHARED,
};
pub use transfer::{check_piece, gather_next, Download, Feed, Upload};
use transfer::{DirectDownload, DirectUpload};

/// Result of a device call: errors travel to the caller as they are.
pub type DeviceResult<T> = Result<T, WireError>;

/// What a link made ([`Context::link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// The linked image (a cubin, from a GPU's driver).
    pub image: Vec<u8>,
    /// What the linker logged.
    pub info_log: String,
}

/// An allocation in a context (opaque to the session layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceMem(pub u64);

/// A loaded module in a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceModule(pub u64);

/// A stream of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceStream(pub u64);

/// A kernel found in a module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    /// Device-specific handle.
    pub handle: u64,
    /// Its name.
    pub name: String,
    /// Its parameter kinds, when the device knows them.
    pub params: Option<Vec<ParamKind>>,
    /// Its parameters' sizes in bytes, when the device knows them (CUDA: the driver's
    /// `cuFuncGetParamInfo` or the image's declarations; builtins: their kinds' widths).
    pub sizes: Option<Vec<usize>>,
}

/// A kernel argument with buffer references resolved to device memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum DeviceArg {
    /// A scalar, passed by value (never [`KernelArg::Ptr`]).
    Scalar(KernelArg),
    /// A pointer `offset` bytes into `mem`, with `len` bytes valid from there.
    Mem {
        /// The allocation.
        mem: DeviceMem,
        /// Offset into it.
        offset: u64,
        /// Bytes valid from the offset to the end of the allocation.
        len: u64,
    },
}

/// The width in bytes of a kernel parameter of this kind.
pub fn param_width(kind: ParamKind) -> usize {
    match kind {
        ParamKind::U32 | ParamKind::I32 | ParamKind::F32 => 4,
        ParamKind::U64 | ParamKind::I64 | ParamKind::F64 | ParamKind::Ptr => 8,
    }
}

/// One accelerator of the host.
pub trait Device: Send + Sync + 'static {
    /// Index, name, kind and memory.
    fn info(&self) -> DeviceInfo;
    /// Opens a context for one session; dropping the last reference to it releases everything
    /// the session left behind.
    fn open_context(&self) -> DeviceResult<Arc<dyn Context>>;
    /// What the device's sensors read now: none but for a GPU whose host has NVML, which the
    /// daemon reads (a session's context, in a worker of its own, does not); an error for a GPU
    /// NVML says is lost.
    fn telemetry(&self) -> DeviceResult<Telemetry> {
        Ok(Telemetry::default())
    }
}

/// Why a context refuses to share memory with another process's: sessions of its device share
/// one process (the CPU device, `isolation = "context"`), and only a session worker's context
/// has a process of its own.
pub const NO_PROCESS_OF_ITS_OWN: &str = "memory shared between sessions in different contexts needs session workers \
(isolation = \"process\", a GPU's default): with isolation = \"context\" sessions share one process";

/// One session's view of a device: its memory, modules and streams.
pub trait Context: Send + Sync + 'static {
    /// The device's description, with current free memory.
    fn info(&self) -> DeviceInfo;
    /// Allocates `bytes` of device memory, or fails with `OutOfMemory`.
    fn alloc(&self, bytes: u64) -> DeviceResult<DeviceMem>;
    /// Frees an allocation; unknown handles are ignored.
    fn free(&self, mem: DeviceMem);
    /// Copies host bytes into device memory, in order on `stream`; `data` may be reused once
    /// the call returns.
    fn write(&self, dst: DeviceMem, offset: u64, data: &[u8], stream: DeviceStream) -> DeviceResult<()>;
    /// Lends `fill` the `len` bytes of device memory at `offset` to write all of them, in order
    /// on `stream`: devices whose memory lies in host memory lend it where it lies (under a
    /// lock: `fill` must not wait), so that a lane opens its records straight into it; the
    /// others lend a recycled buffer and write it after. See [`Context::writes_in_place`].
    fn write_with(
        &self,
        dst: DeviceMem,
        offset: u64,
        len: usize,
        stream: DeviceStream,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> DeviceResult<()> {
        let piece = pieces::filled(len, |buf| {
            fill(buf);
            Ok::<_, WireError>(())
        })?;
        self.write(dst, offset, &piece, stream)
    }
    /// Whether [`Context::write_with`] lends device memory itself (no copy after `fill`).
    fn writes_in_place(&self) -> bool {
        false
    }
    /// Copies device memory into host bytes, in order on `stream`, and waits for them.
    fn read(&self, src: DeviceMem, offset: u64, out: &mut [u8], stream: DeviceStream) -> DeviceResult<()>;
    /// Hands `len` bytes of device memory to `take`, in order on `stream`, in one slice or
    /// several. Devices whose memory lies in host memory hand it where it lies, so that a lane
    /// seals it from there; the others read it into a recycled buffer first.
    fn read_with(
        &self,
        src: DeviceMem,
        offset: u64,
        len: usize,
        stream: DeviceStream,
        take: &mut dyn FnMut(&[u8]),
    ) -> DeviceResult<()> {
        let piece = pieces::filled(len, |buf| self.read(src, offset, buf, stream))?;
        take(&piece);
        Ok(())
    }
    /// Copies between two places in this context's memory (they may be the same allocation).
    fn copy(
        &self,
        dst: DeviceMem,
        dst_offset: u64,
        src: DeviceMem,
        src_offset: u64,
        len: u64,
        stream: DeviceStream,
    ) -> DeviceResult<()>;
    /// Sets `len` bytes to `value`, in order on `stream`.
    fn memset(&self, dst: DeviceMem, offset: u64, len: u64, value: u8, stream: DeviceStream) -> DeviceResult<()>;
    /// Starts a host-to-device copy of `len` bytes at `offset` that arrives in pieces (a bulk
    /// copy). It is ordered after nothing: the client synchronizes before a bulk copy.
    fn upload(&self, dst: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Upload + '_>> {
        Ok(Box::new(DirectUpload { context: self, dst, offset, len }))
    }
    /// Starts a device-to-host copy of `len` bytes at `offset`, read in pieces (a bulk copy).
    fn download(&self, src: DeviceMem, offset: u64, len: u64) -> DeviceResult<Box<dyn Download + '_>> {
        Ok(Box::new(DirectDownload { context: self, src, offset, len }))
    }
    /// Loads a module.
    fn load_module(&self, source: &ModuleSource, image: &[u8]) -> DeviceResult<DeviceModule>;
    /// Unloads a module.
    fn unload_module(&self, module: DeviceModule);
    /// Looks a kernel up by name.
    fn kernel(&self, module: DeviceModule, name: &str) -> DeviceResult<Kernel>;
    /// The names of the kernels `module` holds, in the driver's order.
    fn kernel_names(&self, _module: DeviceModule) -> DeviceResult<Vec<String>> {
        Err(WireError::new(ErrorKind::NeedsCuda, "listing a module's kernels needs a CUDA device"))
    }
    /// Links `inputs` (each with its bytes) with the device's JIT linker, for the device's own
    /// architecture: the linked image and the linker's log.
    fn link(&self, _inputs: &[(LinkInput, &[u8])], _options: &[JitOption]) -> DeviceResult<Linked> {
        Err(WireError::new(ErrorKind::NeedsCuda, "linking device code needs a CUDA device"))
    }
    /// The memory of `module`'s variable `name` (a CUDA `__device__` or `__constant__`
    /// variable) and its size. It is the module's: the context addresses it as an allocation
    /// until the module is unloaded, and never frees it.
    fn global(&self, _module: DeviceModule, name: &str) -> DeviceResult<(DeviceMem, u64)> {
        Err(WireError::new(ErrorKind::UnknownKernel, format!("no variable `{name}`: this device's modules hold none")))
    }
    /// What the device says of `kernel`: its resource use and limits. The default is a device
    /// whose kernels use none of its resources (the CPU device's builtins).
    fn kernel_attributes(&self, _kernel: &Kernel) -> DeviceResult<KernelAttributes> {
        Ok(KernelAttributes {
            max_threads_per_block: 1024,
            static_shared: 0,
            constant: 0,
            local: 0,
            registers: 0,
            ptx_version: 0,
            binary_version: 0,
            max_dynamic_shared: DEFAULT_DYNAMIC_SHARED,
            preferred_carveout: -1,
        })
    }
    /// Sets one of `kernel`'s attributes; later launches of it are checked against it. The
    /// default serves a device that keeps every kernel's dynamic shared memory limit at the
    /// default (a larger or a smaller one is refused, since launches are checked against the
    /// default) and has no shared memory to carve out (a preference in range is accepted).
    fn set_kernel_attribute(&self, _kernel: &Kernel, setting: KernelSetting) -> DeviceResult<()> {
        match setting {
            KernelSetting::MaxDynamicShared(bytes) if bytes < DEFAULT_DYNAMIC_SHARED => Err(WireError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "this device keeps every kernel's dynamic shared memory limit at {DEFAULT_DYNAMIC_SHARED} bytes"
                ),
            )),
            KernelSetting::MaxDynamicShared(bytes) => check_shared(bytes, DEFAULT_DYNAMIC_SHARED),
            KernelSetting::PreferredCarveout(percent) => check_carveout(percent),
            // Its clusters are checked against 16 blocks whatever the kernel allows.
            KernelSetting::NonPortableClusterSizeAllowed(_) => Ok(()),
        }
    }
    /// Launches a kernel on `stream`. Arguments match the kernel's parameters when known.
    fn launch(&self, kernel: &Kernel, dims: &LaunchDims, args: &[DeviceArg], stream: DeviceStream) -> DeviceResult<()>;
    /// Launches a kernel whose blocks run as `mode` says (its cluster shape checked already).
    /// The default serves a device whose kernels neither wait for other blocks nor share memory
    /// across blocks (the CPU device's builtins): a plain launch.
    fn launch_as(
        &self,
        kernel: &Kernel,
        dims: &LaunchDims,
        args: &[DeviceArg],
        stream: DeviceStream,
        _mode: LaunchMode,
    ) -> DeviceResult<()> {
        self.launch(kernel, dims, args, stream)
    }
    /// Clusters of `cluster` blocks of `kernel` (`dims`' block) the device holds at once: a GPU's.
    fn max_active_clusters(&self, _kernel: &Kernel, _dims: &LaunchDims, _cluster: [u32; 3]) -> DeviceResult<u32> {
        Err(WireError::new(ErrorKind::NeedsCuda, "thread block clusters are a CUDA GPU's"))
    }
    /// The driver's encoding of a tensor map (a Hopper GPU's TMA descriptor), the tensor's
    /// address checked against the session's memory already.
    fn encode_tensor_map(&self, _spec: &TensorMapSpec<u64>) -> DeviceResult<Vec<u8>> {
        Err(WireError::new(ErrorKind::NeedsCuda, "tensor maps are a CUDA GPU's"))
    }
    /// Reserves `bytes` of device address space aligned to `alignment` (0: the granularity;
    /// `cuMemAddressReserve`). [`Context::free`] of it frees it, once its mappings are gone.
    fn reserve_range(&self, _bytes: u64, _alignment: u64) -> DeviceResult<DeviceMem> {
        Err(WireError::new(ErrorKind::NeedsCuda, "virtual memory management is a CUDA GPU's"))
    }
    /// Creates `bytes` of physical device memory, zeroed (`cuMemCreate`): its handle.
    fn create_physical(&self, _bytes: u64) -> DeviceResult<u64> {
        Err(WireError::new(ErrorKind::NeedsCuda, "virtual memory management is a CUDA GPU's"))
    }
    /// Releases physical memory: it goes once it is unmapped everywhere (`cuMemRelease`).
    fn release_physical(&self, _handle: u64) {}
    /// Maps the first `bytes` of physical memory `handle` at `offset` into reserved range
    /// `range`, readable and writable by this device (`cuMemMap`, `cuMemSetAccess`).
    fn map(&self, _range: DeviceMem, _offset: u64, _bytes: u64, _handle: u64) -> DeviceResult<()> {
        Err(WireError::new(ErrorKind::NeedsCuda, "virtual memory management is a CUDA GPU's"))
    }
    /// Unmaps the mapping of `bytes` at `offset` of `range` once the work queued on the
    /// context has finished (`cuMemUnmap`), before it returns: the bytes may be mapped again.
    fn unmap(&self, _range: DeviceMem, _offset: u64, _bytes: u64) -> DeviceResult<()> {
        Err(WireError::new(ErrorKind::NeedsCuda, "virtual memory management is a CUDA GPU's"))
    }
    /// As [`Context::unmap`], later, off the caller's thread (a range is being dropped).
    fn unmap_later(&self, _range: DeviceMem, _offset: u64, _bytes: u64) {}
    /// Creates a CUDA array of `spec`'s shape, zeroed (`cuArray3DCreate`): its handle.
    fn create_array(&self, _spec: &ArraySpec) -> DeviceResult<u64> {
        Err(WireError::new(ErrorKind::NeedsCuda, "CUDA arrays are a CUDA GPU's"))
    }
    /// Destroys an array once the work queued on the context has run (`cuArrayDestroy`).
    fn destroy_array(&self, _array: u64) {}
    /// Queues a copy between an array and linear device memory on `stream` (`cuMemcpy3DAsync`),
    /// the region checked against both already.
    fn copy_array(&self, _copy: &ArrayCopy<u64, u64>, _stream: DeviceStream) -> DeviceResult<()> {
        Err(WireError::new(ErrorKind::NeedsCuda, "CUDA arrays are a CUDA GPU's"))
    }
    /// Creates a texture object over `resource` read as `sampler` says, or with no sampler a
    /// surface object over an array (`cuTexObjectCreate`, `cuSurfObjectCreate`): its value.
    fn create_object(&self, _resource: &TextureResource<u64, u64>, _sampler: Option<&Sampler>) -> DeviceResult<u64> {
        Err(WireError::new(ErrorKind::NeedsCuda, "texture and surface objects are a CUDA GPU's"))
    }
    /// Destroys a texture object (`surface`: a surface object) once the work queued on the
    /// context has run.
    fn destroy_object(&self, _object: u64, _surface: bool) {}
    /// The driver's handle that lets another process's context open allocation `mem`
    /// (`cuIpcGetMemHandle`). Contexts that share one process refuse: a session in the same
    /// context opens the allocation itself (`session::ipc`).
    fn export_allocation(&self, _mem: DeviceMem) -> DeviceResult<Vec<u8>> {
        Err(WireError::new(ErrorKind::NeedsCuda, NO_PROCESS_OF_ITS_OWN))
    }
    /// Opens another process's allocation by the handle [`Context::export_allocation`] gave
    /// (`cuIpcOpenMemHandle`): its address in this context, which [`Context::close_opened`]
    /// closes (never [`Context::free`]).
    fn open_allocation(&self, _handle: &[u8], _size: u64) -> DeviceResult<DeviceMem> {
        Err(WireError::new(ErrorKind::NeedsCuda, NO_PROCESS_OF_ITS_OWN))
    }
    /// Closes an allocation [`Context::open_allocation`] opened once the work queued on the
    /// context has run (`cuIpcCloseMemHandle`), before it returns: the exporter may free the
    /// memory right after.
    fn close_opened(&self, _mem: DeviceMem) {}
    /// The driver's shareable handle of physical memory `handle`, a descriptor in this process,
    /// by which another process's context imports it (`cuMemExportToShareableHandle`).
    fn export_physical(&self, _handle: u64) -> DeviceResult<std::os::fd::OwnedFd> {
        Err(WireError::new(ErrorKind::NeedsCuda, NO_PROCESS_OF_ITS_OWN))
    }
    /// Imports `size` bytes of another process's physical memory by the descriptor
    /// [`Context::export_physical`] gave (`cuMemImportFromShareableHandle`): its handle here,
    /// mapped and released as one [`Context::create_physical`] made.
    fn import_physical(&self, _shareable: std::os::fd::BorrowedFd<'_>, _size: u64) -> DeviceResult<u64> {
        Err(WireError::new(ErrorKind::NeedsCuda, NO_PROCESS_OF_ITS_OWN))
    }
    /// Creates a stream.
    fn create_stream(&self) -> DeviceResult<DeviceStream>;
    /// Destroys a stream.
    fn destroy_stream(&self, stream: DeviceStream);
    /// Waits for everything queued on `stream`.
    fn synchronize(&self, stream: DeviceStream) -> DeviceResult<()>;
    /// Whether stream-ordered calls finish their work before they return (the CPU device), so
    /// that a stream whose worker is idle has nothing left in flight.
    fn finishes_in_call(&self) -> bool {
        false
    }
    /// Whether launching `kernel` with `args` takes no more than a few microseconds: a stream
    /// that is idle may then run it on the control loop (see `stream_workers.rs`).
    fn is_quick_launch(&self, _kernel: &Kernel, _args: &[DeviceArg]) -> bool {
        false
    }
    /// Keeps what the session's kernels print for [`Context::take_printed`] from now on (a
    /// client that reads it: protocol 11); until then it is dropped.
    fn forward_printed(&self) {}
    /// What the session's kernels printed (device-side `printf`) since the last call, as the
    /// driver wrote it out: a session worker's (`worker::printed`). Elsewhere it goes to the
    /// daemon's own output, shared by its sessions, and this answers nothing.
    fn take_printed(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Sets one of the context's limits (`cuCtxSetLimit`): the value in effect and the device
    /// memory it reserves. Only a CUDA context has them.
    fn set_limit(&self, limit: ContextLimit, _value: u64) -> DeviceResult<Limited> {
        Err(WireError::new(ErrorKind::NeedsCuda, format!("{limit:?} is a limit of CUDA contexts")))
    }
}

/// Size argument `i` of builtin `name` (a `u64`, or a `u32` widened).
pub fn size_arg(name: &str, args: &[DeviceArg], i: usize) -> DeviceResult<u64> {
    match args.get(i) {
        Some(DeviceArg::Scalar(KernelArg::U64(v))) => Ok(*v),
        Some(DeviceArg::Scalar(KernelArg::U32(v))) => Ok(u64::from(*v)),
        other => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}` argument {i}: got {other:?}"))),
    }
}

/// Whether two pointer arguments' spans (the argument, bytes from its pointer) share a byte:
/// pointers into one allocation whose spans intersect. An empty span meets nothing.
pub fn spans_meet((a, a_bytes): (&DeviceArg, u64), (b, b_bytes): (&DeviceArg, u64)) -> bool {
    let (DeviceArg::Mem { mem: a_mem, offset: a_at, .. }, DeviceArg::Mem { mem: b_mem, offset: b_at, .. }) = (a, b)
    else {
        return false;
    };
    if a_mem != b_mem || a_bytes == 0 || b_bytes == 0 {
        return false;
    }
    *a_at < b_at.saturating_add(b_bytes) && *b_at < a_at.saturating_add(a_bytes)
}

/// Checks arguments against a kernel's parameter kinds.
pub fn check_signature(kernel: &Kernel, args: &[KernelArg]) -> DeviceResult<()> {
    use ac_proto::backend::ErrorKind::InvalidArgument;
    let Some(params) = &kernel.params else {
        return Ok(());
    };
    if params.len() != args.len() {
        return Err(WireError::new(
            InvalidArgument,
            format!("kernel `{}` takes {} arguments, got {}", kernel.name, params.len(), args.len()),
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if *p != a.kind() {
            return Err(WireError::new(
                InvalidArgument,
                format!("kernel `{}` argument {i}: expected {p:?}, got {:?}", kernel.name, a.kind()),
            ));
        }
    }
    Ok(())
}

/// Runs a call that may wait (for the GPU, to pin memory, for a session worker's reply)
/// without holding up the async runtime: on a Tokio worker thread through `block_in_place`,
/// which first hands the thread's other tasks to another worker; elsewhere (stream workers,
/// blocking tasks, a current-thread runtime, where `block_in_place` is not allowed) as it is.
pub fn blocking<T>(call: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(call),
        _ => call(),
    }
}

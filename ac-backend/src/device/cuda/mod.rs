//! The CUDA device: NVIDIA GPUs through the driver API (cudarc, loaded at run time).
//!
//! # Layers
//! As in cudarc itself: [`driver`] wraps the raw calls (errors, handles, queries); [`nvrtc`],
//! [`image`], [`signature`], [`args`], [`gather`], [`janitor`] and [`staging`] each do one job
//! (all but `staging` work without a GPU and are tested everywhere); [`context`] implements the session's
//! [`Context`] on top of them, and this module discovers the GPUs.
//!
//! # Isolation: one CUDA context per session, in a process of its own
//! A kernel fault (illegal address, trap, misaligned access) poisons the CUDA context it happens
//! in, and on the GPUs measured so far the whole process with it: on an H100 (driver
//! 580.159.04) a fault in one context made the other contexts of the process, and new ones,
//! answer `CUDA_ERROR_ILLEGAL_ADDRESS` (`scripts/gpu-check`, 2026-11-26). Sessions therefore
//! never share a context, and by default not a process either: each session's context
//! ([`context::CudaContext`]) lives in a session worker process ([`crate::device::worker`],
//! `isolation = "process"`), so a fault ends only the session that caused it, which gets
//! [`ErrorKind::ContextLost`] from then on. Other sessions on the same GPU go on, and so does
//! the backend. A worker's one session runs in the worker's primary context
//! ([`context::CudaContext::in_primary`]): no second context. With `isolation = "context"` the
//! contexts live in the backend's process: a session opens a little faster and copies move
//! more (twice as much on the H100 while a worker's copies crossed pipes; since they cross
//! shared memory, about as much: a worker moved 0.78-1.21 of a context's on the H100, runs 6
//! and 7), and a fault ends every session of the backend (measured in
//! `docs/benchmarks/gpu.md`).
//!
//! The cost, per session: the context's creation (paid when the session opens, off the async
//! threads) and its device memory (the driver reserves memory for each context's local memory,
//! printf buffer and loaded modules: about 520 MiB on an H100); with process isolation also a
//! process start and the driver's initialization in it, and every copied byte passing between
//! two processes; and the GPU time-slices between contexts instead of running their kernels
//! concurrently. `scripts/gpu-check` measures them on the GPU at hand.
//!
//! # Issue 24: what a line-by-line reading found, and what was done
//! The CUDA path has since run on an H100 (`scripts/gpu-check` runs 1-7, 2026-11-26/27; every
//! check passed in runs 6 and 7: `docs/benchmarks/gpu.md`). The CUDA driver stand-in (`cuda-standin`, a
//! test-only library, not a GPU) runs it in `scripts/test` against the driver API's documented
//! contract (`tests/tests/e2e/device_contract.rs`); `scripts/gpu-check` remains the judge.
//!
//! 1. **Argument lists.** `cuLaunchKernel` reads one `kernelParams` entry per parameter of the
//!    kernel. Parameter sizes come from the driver (`cuFuncGetParamInfo`, CUDA 12.4+), else
//!    from the image ([`signature`]: PTX `.entry` declarations, a cubin's `.nv.info`
//!    `EIATTR_KPARAM_INFO` records), or for `builtin` from its table; a kernel whose sizes are
//!    known from none of them (a fatbin on an older driver) is never launched: the launch
//!    answers `InvalidArgument` saying why ([`args::pack`]).
//! 2. **NVRTC.** The builtin kernels ship prebuilt ([`prebuilt`]: cubins for `sm_70` to
//!    `sm_120`, PTX `compute_70` for newer generations), checked against `kernels.cu` by a
//!    hash test and against the `builtin` table kernel by kernel; NVRTC compiles them only for
//!    a generation without a cubin. NVRTC itself is found by [`nvrtc_loader`] at the path in
//!    `AC_BACKEND_NVRTC`, else as `libnvrtc.so`, `.so.13`, `.so.12` or `.so.11.2` (cudarc's
//!    own loader knew `.so` and `.so.12` only). Start-up logs the driver's version and NVRTC's
//!    version and library. Decided: the prebuilt PTX is NVRTC 12.9's (PTX ISA 8.8), which only
//!    drivers of CUDA 12.9 and later compile; it serves generations newer than `sm_120`, whose
//!    drivers are newer still.
//! 3. **Unloaded modules.** Unloading a module removes its functions from the control loop's
//!    table (a later launch answers `InvalidFunction`, "which was unloaded") and from the
//!    context's ([`context::CudaContext`]); the driver never gets a dead `CUfunction`.
//! 4. **Blocking calls.** Waits for the GPU (`cuEventSynchronize`, `cuStreamSynchronize`) and
//!    pinning (`cuMemHostAlloc`, now outside the pool's lock) go through
//!    [`driver::blocking`], which on a Tokio worker thread moves the thread's other tasks away
//!    first (`block_in_place`). `cuMemFree` and `cuCtxDestroy`, reached from `Drop`s, run on
//!    the GPU's [`janitor`] thread, in order (a context's frees before its destruction); an
//!    allocation that fails for want of memory retries once after the frees in flight.
//!    *Waiting*: contexts are created with `CU_CTX_SCHED_BLOCKING_SYNC`: a thread waiting for
//!    the GPU sleeps on an OS primitive instead of spinning (the default with flags 0 spins
//!    while there are fewer contexts than cores). The backend's waiting threads (a stream
//!    worker per stream, bulk copies) share the host's cores with QUIC's packet processing,
//!    which is what the pipelined copies need; the cost is a wake-up latency of some
//!    microseconds per synchronize, small beside a network round trip.
//! 5. **Pinned memory.** The staging pool frees its buffers (`cuMemFreeHost`) when the GPU
//!    goes, after every context's destruction, and the primary context is released
//!    (`cuDevicePrimaryCtxRelease`).
//! 6. **Pageable copies.** The driver may read a pageable source after an async copy returns:
//!    `write` waits for its copy before returning (the caller reuses the buffer), and a bulk
//!    copy without pinned buffers refills its one pageable buffer only after the stream has
//!    drained. Device-to-host copies into pageable memory were already waited for.
//! 7. **Image alignment.** `cuModuleLoadData` gets an 8-byte-aligned copy of every image (nvcc
//!    itself embeds fatbins as `unsigned long long` arrays); the payload cut out of a frame may
//!    lie at any address.
//! 8. **Faults and the process.** NVIDIA allows a fault to require the whole process to be
//!    restarted, and on an H100 it did (see "Isolation" above): sessions run in worker
//!    processes by default. With `isolation = "context"`, after the first fault on a GPU the
//!    janitor thread opens a fresh context and moves bytes through it; if that fails, the GPU
//!    refuses every new session with the reason (restart the backend). With session workers the
//!    daemon opens no context at all (`crate::device::served`): a device in `EXCLUSIVE_PROCESS` compute
//!    mode serves one session at a time, through its worker (`crate::device::health`); `PROHIBITED`
//!    devices are not offered.
//!
//! [`ErrorKind::ContextLost`]: ac_proto::backend::ErrorKind::ContextLost

#![allow(unsafe_code)] // FFI to the CUDA driver; every unsafe block states why it holds.

pub mod args;
pub mod arrays;
pub mod context;
pub mod driver;
pub mod fill;
pub mod function;
pub mod gather;
pub mod image;
pub mod ipc;
pub mod janitor;
pub mod limit;
pub mod link;
pub mod load;
pub mod nvrtc;
pub mod nvrtc_loader;
pub mod prebuilt;
pub mod signature;
pub mod staging;
pub mod tensor_map;
pub mod vmm;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use ac_proto::backend::{DeviceInfo, DeviceKind, ErrorKind, WireError};
use cudarc::driver::sys;

use self::context::CudaContext;
use self::driver::{bind, ComputeMode, Handle, Properties};
use self::janitor::Janitor;
use self::nvrtc::{Compiler, Cubin};
use self::staging::StagingPool;
use crate::config::CopySettings;
use crate::device::{Context, Device, DeviceResult};

/// The CUDA C source of the `builtin` module.
pub const BUILTIN_SOURCE: &str = include_str!("kernels.cu");

/// Bytes of compiled images the NVRTC cache keeps.
const COMPILE_CACHE_BYTES: usize = 64 << 20;

/// The compiler shared by every GPU of the backend.
pub fn compiler() -> Arc<Compiler> {
    static COMPILER: OnceLock<Arc<Compiler>> = OnceLock::new();
    COMPILER.get_or_init(|| Arc::new(Compiler::new(COMPILE_CACHE_BYTES))).clone()
}

/// What the sessions of one GPU share.
pub struct Gpu {
    /// Index on the backend: the CUDA ordinal.
    pub index: u32,
    device: sys::CUdevice,
    /// Name, compute capability, memory.
    pub properties: Properties,
    /// The device's primary context: staging buffers and memory queries live there, and a
    /// session worker's session.
    primary: Handle<sys::CUcontext>,
    /// Pinned staging buffers for bulk copies.
    pub pool: StagingPool,
    /// Staging buffers one bulk copy may use.
    pub depth: usize,
    /// NVRTC, with its cache.
    pub compiler: Arc<Compiler>,
    /// The `builtin` module compiled for this GPU, or why it could not be.
    pub builtin: DeviceResult<Cubin>,
    /// Runs the releasing driver calls off the async threads.
    pub janitor: Janitor,
    /// Whether the check after the first kernel fault has been started.
    fault_seen: AtomicBool,
    /// Its outcome: `Err` when a fresh context no longer works after a fault.
    fault_check: OnceLock<Result<(), String>>,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Every context is gone (each held an `Arc` to this); their destruction may still be
        // queued, and must happen before the staging memory and the primary context go.
        self.janitor.flush();
        self.pool.release();
        // SAFETY: retained once by `CudaDevice::open`; nothing uses the primary context now.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("index", &self.index).field("name", &self.properties.name).finish()
    }
}

impl Gpu {
    /// Whether sessions may open contexts here: not when a fresh context failed after a fault.
    pub fn usable(&self) -> DeviceResult<()> {
        match self.fault_check.get() {
            Some(Err(reason)) => Err(WireError::new(ErrorKind::Device, reason.clone())),
            _ => Ok(()),
        }
    }

    /// Called when a context of this GPU is lost to a fault: the first time, checks on the
    /// janitor thread that a fresh context still works (finding 8).
    pub fn after_fault(self: &Arc<Self>) {
        if self.fault_seen.swap(true, Ordering::AcqRel) {
            return;
        }
        let gpu: Weak<Gpu> = Arc::downgrade(self);
        self.janitor.defer(move || {
            let Some(gpu) = gpu.upgrade() else { return };
            let outcome = fresh_context_works(&gpu);
            match &outcome {
                Ok(()) => {
                    tracing::info!(gpu = gpu.index, "after a kernel fault, a fresh context works: sessions go on")
                }
                Err(reason) => tracing::error!(gpu = gpu.index, "{reason}"),
            }
            let _ = gpu.fault_check.set(outcome);
        });
    }

    /// Description with the current free memory.
    pub fn info(&self) -> DeviceInfo {
        let free = bind(self.primary).and_then(|()| driver::memory_free()).unwrap_or(0);
        DeviceInfo {
            index: self.index,
            name: self.properties.name.clone(),
            kind: DeviceKind::Cuda,
            compute_capability: Some(self.properties.capability),
            memory_total: self.properties.memory_total,
            memory_free: free,
        }
    }
}

/// One NVIDIA GPU.
#[derive(Debug)]
pub struct CudaDevice {
    gpu: Arc<Gpu>,
    /// A session worker's device: its one session runs in the primary context.
    one_session: bool,
}

impl CudaDevice {
    /// Opens GPU `ordinal`: retains its primary context and compiles the builtin kernels.
    pub fn open(ordinal: u32, staging_bytes: u64, copy: CopySettings) -> DeviceResult<Self> {
        let mut device = 0;
        // SAFETY: valid out-pointer; cuInit has succeeded (see `discover`).
        driver::check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) })?;
        let properties = driver::properties(device)?;
        match properties.compute_mode {
            ComputeMode::Prohibited => {
                return Err(WireError::new(
                    ErrorKind::Device,
                    format!("GPU {ordinal} is in PROHIBITED compute mode: no context can be created (nvidia-smi -c)"),
                ))
            }
            ComputeMode::ExclusiveProcess => tracing::info!(
                gpu = ordinal,
                "EXCLUSIVE_PROCESS compute mode: one process may use the GPU at a time, so session workers \
                 (isolation = process) cannot open it while another process holds it; use --isolation context"
            ),
            ComputeMode::Default => {}
        }
        // Blocking sync for the primary context too, which a session worker's session runs in
        // (see "Waiting"); a driver that refuses it once the context is active only spins.
        let flags = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;
        // SAFETY: a valid device; only scheduling flags.
        let code = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(device, flags) };
        if let Err(e) = driver::check("cuDevicePrimaryCtxSetFlags", code) {
            tracing::debug!(gpu = ordinal, "{}", e.message);
        }
        let mut primary = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; retained for the life of the process.
        driver::check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut primary, device) })?;
        let compiler = compiler();
        let builtin = builtin_image(&compiler, properties.capability);
        let primary = Handle(primary);
        let janitor = Janitor::start(format!("ac-gpu{ordinal}-release"))
            .map_err(|e| WireError::new(ErrorKind::Internal, format!("cannot start a thread: {e}")))?;
        Ok(Self {
            gpu: Arc::new(Gpu {
                index: ordinal,
                device,
                properties,
                primary,
                pool: StagingPool::new(primary, staging_bytes, copy.chunk_bytes),
                depth: copy.depth.max(2),
                compiler,
                builtin,
                janitor,
                fault_seen: AtomicBool::new(false),
                fault_check: OnceLock::new(),
            }),
            one_session: false,
        })
    }

    /// The device's index (its CUDA ordinal).
    pub fn index(&self) -> u32 {
        self.gpu.index
    }

    /// Its memory, bytes.
    pub fn memory_total(&self) -> u64 {
        self.gpu.properties.memory_total
    }

    /// For a session worker, which serves one session: its session runs in the primary
    /// context (no second context), and after a fault there is no other session to keep going,
    /// so no check that a fresh context still works.
    pub fn serve_one_session(&mut self) {
        self.gpu.fault_seen.store(true, Ordering::Release);
        self.one_session = true;
    }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        self.gpu.info()
    }

    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        match self.one_session {
            true => Ok(Arc::new(CudaContext::in_primary(self.gpu.clone()))),
            false => Ok(Arc::new(CudaContext::open(self.gpu.clone())?)),
        }
    }
}

/// The `builtin` module's image for a device: the prebuilt cubin of its generation, else
/// NVRTC's for its exact architecture, else the prebuilt PTX for the driver to compile (a
/// generation newer than the prebuilt cubins).
fn builtin_image(compiler: &Compiler, capability: (u32, u32)) -> DeviceResult<Cubin> {
    if let Some(cubin) = prebuilt::cubin_for(capability) {
        tracing::info!(?capability, "builtin kernels: prebuilt cubin");
        return Ok(Arc::new(cubin.to_vec()));
    }
    match compiler.compile(BUILTIN_SOURCE, &[], capability) {
        Ok(cubin) => {
            tracing::info!(?capability, "builtin kernels: compiled by NVRTC");
            Ok(cubin)
        }
        Err(e) if capability >= prebuilt::PTX_ARCH => {
            tracing::info!(?capability, "builtin kernels: prebuilt PTX, compiled by the driver ({})", e.message);
            Ok(Arc::new(prebuilt::PTX.to_vec()))
        }
        Err(e) => {
            tracing::warn!(?capability, "builtin kernels unavailable: {}", e.message);
            Err(WireError::new(ErrorKind::ModuleLoad, format!("the builtin kernels are not available: {}", e.message)))
        }
    }
}

/// Opens the GPUs listed in `selection` (CUDA ordinals), or all of them. Fails with the reason
/// when there is no driver, no GPU, or a listed GPU does not exist.
pub fn discover(selection: Option<&[u32]>, staging_bytes: u64, copy: CopySettings) -> Result<Vec<CudaDevice>, String> {
    let count = driver::init()?;
    if count == 0 {
        return Err("the NVIDIA driver reports no GPU".into());
    }
    let ordinals: Vec<u32> = match selection {
        Some(list) => list.to_vec(),
        None => (0..count as u32).collect(),
    };
    if let Some(missing) = ordinals.iter().find(|&&o| o >= count as u32) {
        return Err(format!("GPU {missing} was asked for; this host has {count}"));
    }
    tracing::info!(driver = ?driver::version(), gpus = count, "CUDA driver found");
    match nvrtc::version() {
        Some((version, library)) => tracing::info!(?version, %library, "NVRTC found: CUDA C modules available"),
        None => tracing::warn!(
            "NVRTC not found (libnvrtc.so, .so.13, .so.12, or ${}): no CUDA C modules; PTX, cubin and the \
             prebuilt builtin kernels work",
            nvrtc_loader::PATH_VARIABLE
        ),
    }
    ordinals.into_iter().map(|o| CudaDevice::open(o, staging_bytes, copy).map_err(|e| e.message)).collect()
}

/// Opens a fresh context on `gpu` and moves a few bytes through it: after a fault lost one of
/// its contexts, whether the others can go on.
fn fresh_context_works(gpu: &Arc<Gpu>) -> Result<(), String> {
    let probe = || -> DeviceResult<()> {
        let context = CudaContext::open(gpu.clone())?;
        let stream = context.create_stream()?;
        let mem = context.alloc(4096)?;
        context.memset(mem, 0, 4096, 0x5A, stream)?;
        let mut back = vec![0u8; 4096];
        context.read(mem, 0, &mut back, stream)?;
        context.free(mem);
        context.destroy_stream(stream);
        match back.iter().all(|&b| b == 0x5A) {
            true => Ok(()),
            false => Err(WireError::new(ErrorKind::Device, "the bytes read back differ")),
        }
    };
    probe().map_err(|e| {
        format!(
            "GPU {}: after a kernel fault in one session, a fresh context no longer works ({}); \
             no new session opens on it. Restart the backend; to confine faults to their \
             session, run sessions in worker processes (`--isolation process`, the default)",
            gpu.index, e.message
        )
    })
}

//! The CUDA device: NVIDIA GPUs through the driver API (cudarc, loaded at run time).
//!
//! # Layers
//! As in cudarc itself: [`driver`] wraps the raw calls (errors, handles, queries); [`nvrtc`],
//! [`image`], [`args`], [`gather`] and [`staging`] each do one job (all but `staging` work
//! without a GPU and are tested everywhere); [`context`] implements the session's
//! [`Context`] on top of them, and this module discovers the GPUs.
//!
//! # Isolation: one CUDA context per session
//! A kernel fault (illegal address, trap, misaligned access) poisons the CUDA context it happens
//! in: every later call in that context fails. Sessions therefore never share a context: each
//! opens its own with `cuCtxCreate` ([`context::CudaContext`]), and a fault ends only the
//! session that caused it, which gets [`ErrorKind::ContextLost`] from then on. Other sessions
//! on the same GPU go on, and so does the backend.
//!
//! The cost, per session: the context's creation (tens to hundreds of milliseconds, paid when
//! the session opens, off the async threads) and its device memory (the driver reserves memory
//! for each context's local memory, printf buffer and loaded modules: hundreds of MiB on recent
//! GPUs), and the GPU time-slices between contexts instead of running their kernels
//! concurrently. `scripts/gpu-check` measures both on the GPU at hand and `BENCHMARKS.md`
//! records them. A worker process per session would isolate as well (a fault stays in a
//! process) at the price of a process start and an extra copy of every transfer between
//! processes; contexts keep the pipelined copies zero-extra-copy and cost less.
//!
//! [`ErrorKind::ContextLost`]: ac_proto::backend::ErrorKind::ContextLost

#![allow(unsafe_code)] // FFI to the CUDA driver; every unsafe block states why it holds.

pub mod args;
pub mod context;
pub mod driver;
pub mod gather;
pub mod image;
pub mod nvrtc;
pub mod staging;

use std::sync::{Arc, OnceLock};

use ac_proto::backend::{DeviceInfo, DeviceKind, ErrorKind, WireError};
use cudarc::driver::sys;

use self::context::CudaContext;
use self::driver::{bind, Handle, Properties};
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
    /// The device's primary context: staging buffers and memory queries live there.
    primary: Handle<sys::CUcontext>,
    /// Pinned staging buffers for bulk copies.
    pub pool: StagingPool,
    /// Staging buffers one bulk copy may use.
    pub depth: usize,
    /// NVRTC, with its cache.
    pub compiler: Arc<Compiler>,
    /// The `builtin` module compiled for this GPU, or why it could not be.
    pub builtin: DeviceResult<Cubin>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("index", &self.index).field("name", &self.properties.name).finish()
    }
}

impl Gpu {
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
}

impl CudaDevice {
    /// Opens GPU `ordinal`: retains its primary context and compiles the builtin kernels.
    pub fn open(ordinal: u32, staging_bytes: u64, copy: CopySettings) -> DeviceResult<Self> {
        let mut device = 0;
        // SAFETY: valid out-pointer; cuInit has succeeded (see `discover`).
        driver::check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) })?;
        let properties = driver::properties(device)?;
        let mut primary = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; retained for the life of the process.
        driver::check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut primary, device) })?;
        let compiler = compiler();
        let builtin = compiler.compile(BUILTIN_SOURCE, &[], properties.capability).map_err(|e| {
            WireError::new(ErrorKind::ModuleLoad, format!("the builtin kernels are not available: {}", e.message))
        });
        if let Err(e) = &builtin {
            tracing::warn!(gpu = ordinal, "builtin kernels unavailable: {}", e.message);
        }
        let primary = Handle(primary);
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
            }),
        })
    }

    /// The device's index (its CUDA ordinal).
    pub fn index(&self) -> u32 {
        self.gpu.index
    }
}

impl Device for CudaDevice {
    fn info(&self) -> DeviceInfo {
        self.gpu.info()
    }

    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        Ok(Arc::new(CudaContext::open(self.gpu.clone())?))
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
    if nvrtc::nvrtc_present() {
        tracing::info!(version = ?nvrtc::version(), "NVRTC found: CUDA C modules and builtin kernels available");
    } else {
        tracing::warn!("NVRTC (libnvrtc.so) not found: no builtin kernels and no CUDA C modules; PTX and cubin work");
    }
    ordinals.into_iter().map(|o| CudaDevice::open(o, staging_bytes, copy).map_err(|e| e.message)).collect()
}

//! A GPU as the daemon knows it when session workers serve it: a description, and no CUDA
//! context. The daemon opens none (a GPU in `EXCLUSIVE_PROCESS` compute mode admits one
//! process, which must be the session's worker); what it reports comes from NVML, or, where
//! NVML is missing, from the driver's device queries, which need no context.

use std::sync::Arc;

use ac_proto::backend::{DeviceInfo, ErrorKind, WireError};

use crate::device::{Context, Device, DeviceResult};

/// Where a described GPU's free memory comes from.
pub trait FreeMemory: Send + Sync + 'static {
    /// Free bytes now, if known.
    fn free(&self) -> Option<u64>;
}

/// A GPU served by session workers; [`Device::open_context`] is never its job.
pub struct DescribedGpu {
    info: DeviceInfo,
    free: Option<Arc<dyn FreeMemory>>,
}

impl std::fmt::Debug for DescribedGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DescribedGpu").field("info", &self.info).finish()
    }
}

impl DescribedGpu {
    /// `info` as found; its free memory from `free` when there is a source (else the total).
    pub fn new(info: DeviceInfo, free: Option<Arc<dyn FreeMemory>>) -> Self {
        Self { info, free }
    }
}

impl Device for DescribedGpu {
    fn info(&self) -> DeviceInfo {
        let memory_free = self.free.as_ref().and_then(|f| f.free()).unwrap_or(self.info.memory_free);
        DeviceInfo { memory_free, ..self.info.clone() }
    }

    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        Err(WireError::new(ErrorKind::Internal, "a described GPU is served by session workers, not in the daemon"))
    }
}

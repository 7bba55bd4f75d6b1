//! A GPU as the daemon knows it when session workers serve it: a description, and no CUDA
//! context. The daemon opens none (a GPU in `EXCLUSIVE_PROCESS` compute mode admits one
//! process, which must be the session's worker); what it reports comes from NVML, or, where
//! NVML is missing, from the driver's device queries, which need no context.

use std::sync::Arc;

use ac_proto::backend::{DeviceInfo, ErrorKind, Telemetry, WireError};

use crate::device::{Context, Device, DeviceResult};

/// What reads a described GPU's state now: its host's NVML.
pub trait Sensors: Send + Sync + 'static {
    /// Free bytes now, if known.
    fn free(&self) -> Option<u64>;
    /// What the GPU's sensors read now (its session's memory left at 0), or why it cannot be
    /// read at all (the GPU is lost).
    fn telemetry(&self) -> DeviceResult<Telemetry>;
}

/// A GPU served by session workers; [`Device::open_context`] is never its job.
pub struct DescribedGpu {
    info: DeviceInfo,
    sensors: Option<Arc<dyn Sensors>>,
}

impl std::fmt::Debug for DescribedGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DescribedGpu").field("info", &self.info).finish()
    }
}

impl DescribedGpu {
    /// `info` as found; its free memory and telemetry from `sensors` when there are some (else
    /// the total, and no readings).
    pub fn new(info: DeviceInfo, sensors: Option<Arc<dyn Sensors>>) -> Self {
        Self { info, sensors }
    }
}

impl Device for DescribedGpu {
    fn info(&self) -> DeviceInfo {
        let memory_free = self.sensors.as_ref().and_then(|s| s.free()).unwrap_or(self.info.memory_free);
        DeviceInfo { memory_free, ..self.info.clone() }
    }

    fn telemetry(&self) -> DeviceResult<Telemetry> {
        self.sensors.as_ref().map_or(Ok(Telemetry::default()), |s| s.telemetry())
    }

    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        Err(WireError::new(ErrorKind::Internal, "a described GPU is served by session workers, not in the daemon"))
    }
}

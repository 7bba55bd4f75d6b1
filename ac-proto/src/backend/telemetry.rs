//! A device's sensors (protocol 15): what NVIDIA's management library says of a GPU now, as a
//! program on the GPU's own host would read it (`nvidia-smi`, NVML through pynvml). The CUDA
//! shim's NVML answers from it for the remote GPUs; the SDK hands it out as is.

use serde::{Deserialize, Serialize};

/// What a device's sensors read now ([`super::Request::Telemetry`]). Every reading is `None`
/// where the device cannot say: a CPU device, a GPU without NVML on its host, or a reading its
/// NVML does not support (a MIG instance has few of its own). The readings are the whole GPU's,
/// every session's work on it counted, as NVML's are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Telemetry {
    /// Percent of the last sample period in which a kernel ran (`nvmlUtilization_t.gpu`).
    pub utilization_gpu: Option<u32>,
    /// Percent of the last sample period in which device memory was read or written.
    pub utilization_memory: Option<u32>,
    /// The GPU die's temperature, degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Power drawn now, milliwatts.
    pub power_mw: Option<u32>,
    /// The power limit the GPU holds to now (`nvmlDeviceGetEnforcedPowerLimit`), milliwatts.
    pub power_limit_mw: Option<u32>,
    /// The limit its administrator set (`nvmlDeviceGetPowerManagementLimit`), milliwatts.
    pub power_management_limit_mw: Option<u32>,
    /// Energy used since the driver was loaded, millijoules.
    pub energy_mj: Option<u64>,
    /// The clocks now, MHz.
    pub clocks_mhz: Clocks,
    /// The highest each clock runs at, MHz.
    pub max_clocks_mhz: Clocks,
    /// The performance state, 0 (most performance) to 15 (least).
    pub performance_state: Option<u32>,
    /// Device memory the asking session holds, bytes (its allocations not yet freed): its part
    /// of the GPU's, which NVML lists by process.
    pub session_memory: u64,
}

/// One reading for each of NVML's clock domains (`nvmlClockType_t`, in its order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// Graphics.
    pub graphics: Option<u32>,
    /// Streaming multiprocessors.
    pub sm: Option<u32>,
    /// Device memory.
    pub memory: Option<u32>,
    /// The video encoders and decoders.
    pub video: Option<u32>,
}

impl Clocks {
    /// The reading of the domain NVML numbers `domain` (`NVML_CLOCK_GRAPHICS` = 0, `SM`,
    /// `MEM`, `VIDEO`); `None` past them too.
    pub fn of(&self, domain: u32) -> Option<u32> {
        match domain {
            0 => self.graphics,
            1 => self.sm,
            2 => self.memory,
            3 => self.video,
            _ => None,
        }
    }
}

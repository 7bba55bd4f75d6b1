//! `acDeviceGetTelemetry`: what a device's sensors read now (backend protocol 15), for C and
//! Fortran programs that watch the GPUs they were given (a job's own energy meter, a check that
//! its GPU is not throttled), as the SDK's `telemetry()` and Python's do.

use std::ffi::c_int;

use ac_frontend::Telemetry;

use crate::devices::{acDevice, DEVICES};
use crate::error::{acError, ffi, Failure};
use crate::handles::{value, write_out};

/// What `acDeviceGetTelemetry` reads of an accelerator. Each reading is -1 where the device
/// cannot say: a CPU device, a GPU whose host has no NVML, or a reading its NVML does not
/// support. The readings are the whole GPU's, every session's work on it counted, as NVML's
/// are.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct acTelemetry {
    /// Percent of the last sample period in which a kernel ran.
    pub utilization_gpu: i32,
    /// Percent of the last sample period in which device memory was read or written.
    pub utilization_memory: i32,
    /// The GPU die's temperature, degrees Celsius.
    pub temperature_c: i32,
    /// The performance state, 0 (most performance) to 15 (least).
    pub performance_state: i32,
    /// Power drawn now, milliwatts.
    pub power_mw: i64,
    /// The power limit the GPU holds to now, milliwatts.
    pub power_limit_mw: i64,
    /// The power limit its administrator set, milliwatts.
    pub power_management_limit_mw: i64,
    /// Energy used since the driver was loaded, millijoules.
    pub energy_mj: i64,
    /// The clocks now, MHz: graphics, streaming multiprocessors, memory, video (NVML's order).
    pub clocks_mhz: [i32; 4],
    /// The highest each clock runs at, MHz, in the same order.
    pub max_clocks_mhz: [i32; 4],
    /// Device memory this process's session holds on it, bytes (its allocations not yet freed).
    pub session_memory: u64,
}

/// Reads `device`'s sensors now (a round trip to its backend, which reads its host's NVML).
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `telemetry`),
/// `AC_ERROR_VERSION_MISMATCH` (a backend older than protocol 15), and those of any call that
/// reaches the accelerator.
#[no_mangle]
pub extern "C" fn acDeviceGetTelemetry(device: acDevice, telemetry: *mut acTelemetry) -> acError {
    ffi(|| {
        let entry = DEVICES.get(value(device))?;
        if telemetry.is_null() {
            // Refused before the round trip.
            return Err(Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, "NULL pointer for the telemetry"));
        }
        let read = entry.acc.telemetry()?;
        write_out(telemetry, acTelemetry::from(&read), "the telemetry")
    })
}

impl From<&Telemetry> for acTelemetry {
    fn from(t: &Telemetry) -> Self {
        let small = |r: Option<u32>| r.map_or(-1, |v| c_int::try_from(v).unwrap_or(c_int::MAX));
        let large = |r: Option<u64>| r.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        let clocks = |c: &ac_frontend::Clocks| [c.graphics, c.sm, c.memory, c.video].map(small);
        Self {
            utilization_gpu: small(t.utilization_gpu),
            utilization_memory: small(t.utilization_memory),
            temperature_c: small(t.temperature_c),
            performance_state: small(t.performance_state),
            power_mw: large(t.power_mw.map(u64::from)),
            power_limit_mw: large(t.power_limit_mw.map(u64::from)),
            power_management_limit_mw: large(t.power_management_limit_mw.map(u64::from)),
            energy_mj: large(t.energy_mj),
            clocks_mhz: clocks(&t.clocks_mhz),
            max_clocks_mhz: clocks(&t.max_clocks_mhz),
            session_memory: t.session_memory,
        }
    }
}

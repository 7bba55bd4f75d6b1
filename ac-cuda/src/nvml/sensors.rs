//! NVML's sensor queries for the remote GPUs: utilization, temperature, power, energy, clocks
//! and performance state, as the GPU host's NVML reads them now (one round trip to the backend
//! each, backend protocol 15). A reading the backend cannot give (a GPU host without NVML, GPUs
//! served in the daemon's process, a MIG instance) is `NVML_ERROR_NOT_SUPPORTED`, as NVML
//! answers for a GPU without that sensor; nothing is named on stderr, since the function is
//! served. A backend older than protocol 15 reads none: said once on stderr.

use std::ffi::{c_int, c_uint, c_ulonglong};

use ac_frontend::{Clocks, Telemetry};

use super::{device_of, guard, GPU_LOST, VERSION_MISMATCH};
use crate::error::{code, CuResult, Error};
use crate::state::{self, put};

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlTemperature_v1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TemperatureV1 {
    version: c_uint,
    sensor: c_uint,
    temperature: c_int,
}

/// `NVML_STRUCT_VERSION(Temperature, 1)`.
const TEMPERATURE_V1: c_uint = size_of::<TemperatureV1>() as c_uint | 1 << 24;
/// `NVML_TEMPERATURE_GPU`, the die's sensor: the one the GPU host's NVML is read for.
/// `NVML_TEMPERATURE_GPU_MAX` (the hottest part of the die) is not read.
const TEMPERATURE_GPU: c_uint = 0;
const TEMPERATURE_GPU_MAX: c_uint = 1;
/// `NVML_CLOCK_COUNT`: the clock domains are numbered below it.
const CLOCK_DOMAINS: c_uint = 4;

/// What the sensors of a handle's device read now, and the memory its session holds. A backend
/// too old to say is "not supported", its reason said once (a monitor asks every second); a GPU
/// its host's NVML says is lost is `NVML_ERROR_GPU_IS_LOST`, said on stderr once too.
pub(super) fn readings(device: *const u8) -> CuResult<Telemetry> {
    let device = device_of(device)?;
    match state::shim()?.block_on(device.acc.telemetry()) {
        Ok(readings) => Ok(readings),
        Err(too_old @ ac_frontend::Error::VersionMismatch(_)) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("ac-cuda: NVML's sensors and processes: {too_old}"));
            Err(Error::Code(code::NOT_SUPPORTED))
        }
        Err(lost @ ac_frontend::Error::Remote { kind: ac_frontend::ErrorKind::Device, .. }) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("ac-cuda: NVML's sensors: {lost}"));
            Err(Error::Code(GPU_LOST))
        }
        Err(e) => Err(e.into()),
    }
}

/// The reading `pick` takes from a handle's device, or "not supported" where the remote GPU
/// gives none.
fn reading<T>(device: *const u8, pick: impl FnOnce(&Telemetry) -> Option<T>) -> CuResult<T> {
    pick(&readings(device)?).ok_or(Error::Code(code::NOT_SUPPORTED))
}

/// The die's temperature for `sensor` (an `nvmlTemperatureSensors_t`).
fn temperature(device: *const u8, sensor: c_uint) -> CuResult<u32> {
    match sensor {
        TEMPERATURE_GPU => reading(device, |t| t.temperature_c),
        TEMPERATURE_GPU_MAX => {
            device_of(device)?;
            Err(Error::Code(code::NOT_SUPPORTED))
        }
        _ => Err(Error::Code(code::INVALID_VALUE)),
    }
}

/// A clock domain's reading (`nvmlClockType_t`) from the clocks `which` picks.
fn clock(device: *const u8, domain: c_uint, which: impl FnOnce(&Telemetry) -> Clocks) -> CuResult<u32> {
    if domain >= CLOCK_DOMAINS {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    reading(device, |t| which(t).of(domain))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(device: *const u8, rates: *mut Utilization) -> u32 {
    guard("nvmlDeviceGetUtilizationRates", || {
        let both = |t: &Telemetry| Some(Utilization { gpu: t.utilization_gpu?, memory: t.utilization_memory? });
        put(rates, reading(device, both)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(device: *const u8, sensor: c_uint, temp: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetTemperature", || put(temp, temperature(device, sensor)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(device: *const u8, reading: *mut TemperatureV1) -> u32 {
    guard("nvmlDeviceGetTemperatureV", || {
        if reading.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        // The caller fills the version and the sensor; the temperature is ours to write and
        // may be uninitialized, so it is never read.
        if std::ptr::addr_of!((*reading).version).read() != TEMPERATURE_V1 {
            return Err(Error::Code(VERSION_MISMATCH));
        }
        let degrees = temperature(device, std::ptr::addr_of!((*reading).sensor).read())?;
        std::ptr::addr_of_mut!((*reading).temperature).write(degrees as c_int);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: *const u8, milliwatts: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetPowerUsage", || put(milliwatts, reading(device, |t| t.power_mw)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: *const u8, milliwatts: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetEnforcedPowerLimit", || put(milliwatts, reading(device, |t| t.power_limit_mw)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: *const u8, milliwatts: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetPowerManagementLimit", || put(milliwatts, reading(device, |t| t.power_management_limit_mw)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(device: *const u8, millijoules: *mut c_ulonglong) -> u32 {
    guard("nvmlDeviceGetTotalEnergyConsumption", || put(millijoules, reading(device, |t| t.energy_mj)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(device: *const u8, domain: c_uint, mhz: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetClockInfo", || put(mhz, clock(device, domain, |t| t.clocks_mhz)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(device: *const u8, domain: c_uint, mhz: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetMaxClockInfo", || put(mhz, clock(device, domain, |t| t.max_clocks_mhz)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: *const u8, state: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetPerformanceState", || put(state, reading(device, |t| t.performance_state)?))
}

/// NVML 13's deprecated name for [`nvmlDeviceGetPerformanceState`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerState(device: *const u8, state: *mut c_uint) -> u32 {
    nvmlDeviceGetPerformanceState(device, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings as nvml;

    #[test]
    fn the_structs_are_nvml_h_s() {
        assert_eq!(size_of::<Utilization>(), size_of::<nvml::nvmlUtilization_t>());
        assert_eq!(size_of::<TemperatureV1>(), size_of::<nvml::nvmlTemperature_v1_t>());
        assert_eq!(
            std::mem::offset_of!(TemperatureV1, temperature),
            std::mem::offset_of!(nvml::nvmlTemperature_v1_t, temperature)
        );
        assert_eq!(CLOCK_DOMAINS, nvml::nvmlClockType_enum_NVML_CLOCK_COUNT);
    }
}

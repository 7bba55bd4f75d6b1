//! The sensor queries: utilization, temperature, power, energy, clocks and performance state,
//! each read from the state file's `[gpu.sensors]` table (absent: `NVML_ERROR_NOT_SUPPORTED`).

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;

use crate::{enter, handle, put};

/// `NVML_TEMPERATURE_GPU`, the one sensor read; `NVML_TEMPERATURE_GPU_MAX` is not supported.
const TEMPERATURE_GPU: c_uint = 0;
const TEMPERATURE_GPU_MAX: c_uint = 1;
/// `nvmlTemperature_v1`: `NVML_STRUCT_VERSION(Temperature, 1)`.
const TEMPERATURE_V1: c_uint = std::mem::size_of::<nvmlTemperature_v1_t>() as c_uint | 1 << 24;

/// The reading of `sensor` (an `nvmlTemperatureSensors_t`).
fn temperature(dev: nvmlDevice_t, sensor: c_uint) -> Result<u32, nvmlReturn_t> {
    let mut library = enter();
    library.device(handle(dev))?;
    match sensor {
        TEMPERATURE_GPU => library.sensor(handle(dev), |s| s.temperature_c),
        TEMPERATURE_GPU_MAX => Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED),
        _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
    }
}

/// A clock domain's reading from one of the file's arrays.
fn clock(dev: nvmlDevice_t, domain: nvmlClockType_t, max: bool) -> Result<u32, nvmlReturn_t> {
    if domain >= nvmlClockType_enum_NVML_CLOCK_COUNT {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    enter().sensor(handle(dev), |s| if max { s.max_clocks_mhz } else { s.clocks_mhz }.map(|c| c[domain as usize]))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    dev: nvmlDevice_t,
    rates: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    let value = enter().sensor(handle(dev), |s| s.utilization).map(|[gpu, memory]| nvmlUtilization_t { gpu, memory });
    put(rates, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    dev: nvmlDevice_t,
    sensor: c_uint,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    put(temp, temperature(dev, sensor))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    dev: nvmlDevice_t,
    reading: *mut nvmlTemperature_v1_t,
) -> nvmlReturn_t {
    if reading.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    // The temperature is the callee's to write and may be uninitialized: never read.
    if std::ptr::addr_of!((*reading).version).read() != TEMPERATURE_V1 {
        return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    let value = temperature(dev, std::ptr::addr_of!((*reading).sensorType).read());
    put(std::ptr::addr_of_mut!((*reading).temperature), value.map(|t| t as i32))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(dev: nvmlDevice_t, power: *mut c_uint) -> nvmlReturn_t {
    put(power, enter().sensor(handle(dev), |s| s.power_mw))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(dev: nvmlDevice_t, limit: *mut c_uint) -> nvmlReturn_t {
    put(limit, enter().sensor(handle(dev), |s| s.power_limit_mw))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(dev: nvmlDevice_t, limit: *mut c_uint) -> nvmlReturn_t {
    put(limit, enter().sensor(handle(dev), |s| s.power_management_limit_mw))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    dev: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    put(energy, enter().sensor(handle(dev), |s| s.energy_mj))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    dev: nvmlDevice_t,
    domain: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    put(mhz, clock(dev, domain, false))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    dev: nvmlDevice_t,
    domain: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    put(mhz, clock(dev, domain, true))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(dev: nvmlDevice_t, state: *mut nvmlPstates_t) -> nvmlReturn_t {
    put(state, enter().sensor(handle(dev), |s| s.pstate))
}

//! A context's settings that say how the device runs its work, not what the work computes:
//! its flags (how a host thread waits for the device, whether local memory stays at its
//! largest; `cudaSetDeviceFlags`), the shared memory bank size (fixed at four bytes on every
//! device since Volta), and the profiler's start and stop (which, with no profiler attached,
//! CUDA takes and does nothing with). Each is kept and answered back as CUDA answers it, and a
//! value CUDA refuses is refused; none changes the remote device's work, whose host waits are a
//! network's anyway.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::{current_context, handle_of};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put};

/// `CU_CTX_SCHED_MASK`: the host's waits, one of auto (0), spin (1), yield (2) or blocking (4).
const SCHED_MASK: c_uint = 0x07;
/// `CU_CTX_FLAGS_MASK`: every context flag (the schedule, map host, local memory resize,
/// coredumps, synchronous memory operations).
const FLAGS_MASK: c_uint = 0xff;
/// `CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE`, the bank size of every device here.
const FOUR_BYTE_BANKS: c_int = 1;
/// `CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE`, the largest configuration.
const EIGHT_BYTE_BANKS: c_int = 2;

/// Contexts' flags, by context handle (primary and created alike); none set is 0.
fn flags() -> MutexGuard<'static, HashMap<usize, c_uint>> {
    static FLAGS: OnceLock<Mutex<HashMap<usize, c_uint>>> = OnceLock::new();
    FLAGS.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Refuses context flags CUDA refuses: an unknown bit, or more than one schedule.
pub fn check_flags(given: c_uint) -> CuResult<()> {
    if given & !FLAGS_MASK != 0 || ![0, 1, 2, 4].contains(&(given & SCHED_MASK)) {
        let why = format!("context flags {given:#x}: one schedule (0, 1, 2 or 4) and the flags of 0xf8");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    Ok(())
}

/// Context `handle`'s flags are now `given` (checked).
pub fn set_flags(handle: usize, given: c_uint) {
    flags().insert(handle, given);
}

/// Context `handle`'s flags.
fn flags_of(handle: usize) -> c_uint {
    flags().get(&handle).copied().unwrap_or(0)
}

/// The handle of device `device`'s primary context.
fn primary(device: c_int) -> CuResult<usize> {
    Ok(handle_of(&state::shim()?.device(device)?.context))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, given: c_uint) -> u32 {
    guard("cuDevicePrimaryCtxSetFlags", || {
        check_flags(given)?;
        set_flags(primary(device)?, given);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(device: c_int, given: c_uint) -> u32 {
    cuDevicePrimaryCtxSetFlags_v2(device, given)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(device: c_int, out: *mut c_uint, active: *mut c_int) -> u32 {
    guard("cuDevicePrimaryCtxGetState", || {
        put(out, flags_of(primary(device)?))?;
        put(active, 1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(out: *mut c_uint) -> u32 {
    guard("cuCtxGetFlags", || put(out, flags_of(handle_of(current_context()?))))
}

#[no_mangle]
pub extern "C" fn cuCtxSetFlags(given: c_uint) -> u32 {
    guard("cuCtxSetFlags", || {
        check_flags(given)?;
        set_flags(handle_of(current_context()?), given);
        Ok(())
    })
}

/// Refuses a bank size that is none of CUDA's.
pub fn check_bank_size(config: c_int) -> CuResult<()> {
    if !(0..=EIGHT_BYTE_BANKS).contains(&config) {
        return Err(Error::said(code::INVALID_VALUE, format!("shared memory bank size {config} is not 0, 1 or 2")));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetSharedMemConfig(config: *mut c_int) -> u32 {
    guard("cuCtxGetSharedMemConfig", || {
        current_context()?;
        put(config, FOUR_BYTE_BANKS)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetSharedMemConfig(config: c_int) -> u32 {
    guard("cuCtxSetSharedMemConfig", || {
        current_context()?;
        check_bank_size(config)
    })
}

#[no_mangle]
pub extern "C" fn cuProfilerStart() -> u32 {
    guard("cuProfilerStart", || current_context().map(drop))
}

#[no_mangle]
pub extern "C" fn cuProfilerStop() -> u32 {
    guard("cuProfilerStop", || current_context().map(drop))
}

/// No line of a device's L2 cache is ever persisting here: the devices answer a persisting L2
/// size of 0 (`CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`) and access policy windows are
/// hints kept in the shim, so there is none to reset (TensorRT and CUTLASS reset after their
/// windows).
#[no_mangle]
pub extern "C" fn cuCtxResetPersistingL2Cache() -> u32 {
    guard("cuCtxResetPersistingL2Cache", || current_context().map(drop))
}

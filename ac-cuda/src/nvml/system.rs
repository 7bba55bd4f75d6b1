//! NVML's init and shutdown, versions and error strings.

use std::ffi::{c_char, c_int, c_uint};

use super::{copy_string, guard, result, slots, INITS};
use crate::error::code;
use crate::init::DRIVER_VERSION;
use crate::state::{self, put};

/// The driver version NVML reports: the first Linux driver of CUDA 13.0, whose driver API
/// `cuDriverGetVersion` reports; programs compare its major number.
const DRIVER_VERSION_TEXT: &str = "580.65.06";
/// `NVML_API_VERSION` of the `nvml.h` served.
const API_VERSION: u32 = 13;
/// `nvmlInitWithFlags`'s flags: `NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`,
/// `NVML_INIT_FLAG_FORCE_INIT`.
const INIT_FLAGS: c_uint = 0x7;
/// `NVML_ERROR_DRIVER_NOT_LOADED`: what NVML answers where it finds no driver, and this one in
/// a child forked after CUDA started (the session is not its to use).
const DRIVER_NOT_LOADED: u32 = 9;

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    nvmlInitWithFlags(0)
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> u32 {
    nvmlInitWithFlags(0)
}

/// Opens the job's session (the one `cuInit` opens; NVML's opening it starts no CUDA, so a
/// child forked after it opens its own) and counts the init. A job without
/// accelerators on this node, or whose session cannot open (no manager, a refused credential:
/// the shim says why on stderr), has an NVML of no devices, as a node without GPUs has.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> u32 {
    if flags & !INIT_FLAGS != 0 {
        return result::INVALID_ARGUMENT;
    }
    // The session opens (network I/O, perhaps a wait in the manager's queue) before the count
    // is locked: other threads' NVML calls do not wait on it.
    match crate::guard("nvmlInit", || state::init_for_nvml().map(drop)) {
        code::SUCCESS | code::NO_DEVICE => {
            *INITS.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            result::SUCCESS
        }
        _ => DRIVER_NOT_LOADED,
    }
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    let mut inits = INITS.lock().unwrap_or_else(|p| p.into_inner());
    if *inits == 0 {
        return result::UNINITIALIZED;
    }
    // The session stays: the program's CUDA calls share it, and it ends with the process.
    *inits -= 1;
    result::SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    let text: &'static [u8] = match result {
        result::SUCCESS => b"Success\0",
        result::UNINITIALIZED => b"Uninitialized\0",
        result::INVALID_ARGUMENT => b"Invalid Argument\0",
        result::NOT_SUPPORTED => b"Not Supported\0",
        result::NO_PERMISSION => b"Insufficient Permissions\0",
        5 => b"Already Initialized\0",
        result::NOT_FOUND => b"Not Found\0",
        result::INSUFFICIENT_SIZE => b"Insufficient Size\0",
        DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        13 => b"Function Not Found\0",
        result::GPU_IS_LOST => b"GPU is lost\0",
        result::ARGUMENT_VERSION_MISMATCH => b"Argument version mismatch\0",
        _ => b"Unknown Error\0",
    };
    text.as_ptr() as *const c_char
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> u32 {
    guard("nvmlSystemGetDriverVersion", || {
        slots()?;
        copy_string(version, length, DRIVER_VERSION_TEXT)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> u32 {
    guard("nvmlSystemGetNVMLVersion", || {
        slots()?;
        copy_string(version, length, &format!("{API_VERSION}.{DRIVER_VERSION_TEXT}"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> u32 {
    nvmlSystemGetCudaDriverVersion_v2(version)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> u32 {
    guard("nvmlSystemGetCudaDriverVersion", || {
        slots()?;
        put(version, DRIVER_VERSION)
    })
}

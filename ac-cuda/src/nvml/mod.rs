//! NVML (`libnvidia-ml.so.1`, a link to this library as `libcublas` is) for the program's
//! devices: the job's remote accelerators, as the driver API sees them.
//!
//! A compute node has no NVIDIA driver, so no NVML of NVIDIA's; frameworks need one all the
//! same. PyTorch counts devices through NVML first (`torch.cuda.device_count`), applying
//! `CUDA_VISIBLE_DEVICES` to NVML's list itself; its expandable segments
//! (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`) look the device up by its PCI bus id
//! and ask for its fabric before their first `cuMemCreate`, and crash in PyTorch when NVML is
//! missing. So NVML answers
//! what the driver API answers. As NVIDIA's NVML lists every GPU of the node whatever
//! `CUDA_VISIBLE_DEVICES` says, this one lists every CUDA accelerator of the job on the node
//! ([`state::Shim::node`]: `AC_Init`'s in its order, then `AC_GET`'s) so long as the variable
//! names one of them, with UUIDs (`GPU-` and `cuDeviceGetUuid`'s bytes) and PCI locations
//! (`cuDeviceGetPCIBusId`'s); and the names, compute capabilities and memory (the remote GPU's,
//! asked of its backend) of those the process holds a session on. One the variable left out
//! answers those with `NVML_ERROR_NO_PERMISSION`: a difference from NVIDIA's, which answers them
//! for every GPU, since the process holds no session there to ask (tools that query every
//! device's name, such as gpustat, see the error for it). A device's fabric is "not supported"
//! (no NVLink fabric reaches a program over the network), and so is peer access between two
//! devices, as `cuDeviceCanAccessPeer` says.
//!
//! What the remote GPU's sensors read (utilization, temperature, power, energy, clocks,
//! performance state) is asked of its backend at each call, which reads its host's NVML
//! (backend protocol 15): `torch.cuda.utilization()` and monitors built on pynvml read the
//! remote GPU. The processes on a device are this one, with the memory its session holds.
//! What else only the remote GPU's NVML could say (ECC counters, fans, NVLink, events) and what
//! changes a GPU (clocks, modes, resets) answer `NVML_ERROR_NOT_SUPPORTED`, naming themselves
//! once on stderr: every other function of `nvml.h` is exported so (`nvml_generated.rs`, by
//! `scripts/gen-library-exports`), since PyTorch looks each name it knows up and stops at a
//! missing one.
//!
//! `nvmlInit` opens the job's session as `cuInit` does (one session serves both), where
//! NVIDIA's learns of the GPUs without starting CUDA: so a process that forks after asking NVML
//! (PyTorch's `device_count`) has children that cannot use CUDA, as one that forks after
//! `cudaGetDeviceCount` has. A job with no accelerator, or whose session cannot open, has an
//! NVML of no devices (the reason on stderr).
//!
//! # Layout
//! - [`system`]: init and shutdown, versions, error strings.
//! - [`device`]: the device queries, by handle.
//! - [`sensors`]: what the remote GPU's sensors read (utilization, temperature, power, clocks).
//! - [`processes`]: the processes on a device: this one.

use std::ffi::{c_char, c_uint};
use std::sync::Mutex;

use crate::error::{code, CuResult, Error};
use crate::state::{self, Device, Slot};

pub mod device;
pub mod processes;
pub mod sensors;
pub mod system;

/// `nvmlReturn_t` values (nvml.h).
pub mod result {
    pub const SUCCESS: u32 = 0;
    pub const UNINITIALIZED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const NOT_SUPPORTED: u32 = 3;
    pub const NO_PERMISSION: u32 = 4;
    pub const NOT_FOUND: u32 = 6;
    pub const INSUFFICIENT_SIZE: u32 = 7;
    pub const GPU_IS_LOST: u32 = 15;
    pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const UNKNOWN: u32 = 999;
}

/// A `CUresult` no driver call answers, for NVML's `NVML_ERROR_INSUFFICIENT_SIZE` (a buffer
/// too small for the answer), which the driver API has no code for.
const TOO_SMALL: u32 = 0x4e56_0007;
/// The same for `NVML_ERROR_ARGUMENT_VERSION_MISMATCH` (a struct of a version not served).
const VERSION_MISMATCH: u32 = 0x4e56_0019;
/// The same for `NVML_ERROR_GPU_IS_LOST` where the GPU host's NVML says the GPU is lost (fallen
/// off the bus). A session or network failure is answered `NVML_ERROR_GPU_IS_LOST` too (the
/// guard's last arm), as NVML answers for a GPU it cannot reach.
const GPU_LOST: u32 = 0x4e56_000f;

/// The answer of an NVML function the shim does not implement: `NVML_ERROR_NOT_SUPPORTED`, its
/// name on stderr the first time.
pub fn not_supported(name: &'static str) -> u32 {
    crate::say_unsupported_once(name, "NVML_ERROR_NOT_SUPPORTED");
    result::NOT_SUPPORTED
}

/// Runs an NVML function's body as [`crate::guard`] does a driver call's, answering an
/// `nvmlReturn_t`. A failure of the session or the network is the GPU lost, as NVML says of a
/// GPU it can no longer reach.
fn guard(call: &str, body: impl FnOnce() -> CuResult<()>) -> u32 {
    match crate::guard(call, body) {
        code::SUCCESS => result::SUCCESS,
        code::INVALID_VALUE | code::INVALID_DEVICE => result::INVALID_ARGUMENT,
        code::NOT_INITIALIZED | code::DEINITIALIZED => result::UNINITIALIZED,
        code::NOT_SUPPORTED => result::NOT_SUPPORTED,
        code::NOT_PERMITTED => result::NO_PERMISSION,
        code::NOT_FOUND => result::NOT_FOUND,
        TOO_SMALL => result::INSUFFICIENT_SIZE,
        VERSION_MISMATCH => result::ARGUMENT_VERSION_MISMATCH,
        GPU_LOST => result::GPU_IS_LOST,
        code::UNKNOWN => result::UNKNOWN,
        _ => result::GPU_IS_LOST,
    }
}

/// How many `nvmlInit`s are not yet matched by an `nvmlShutdown` (NVML counts them).
static INITS: Mutex<u32> = Mutex::new(0);

/// The devices NVML lists, once it is initialized: the job's accelerators on this node, or none
/// for a job without accelerators (`nvmlInitWithFlags` succeeded with none to serve).
fn slots() -> CuResult<&'static [Slot]> {
    if *INITS.lock().unwrap_or_else(|p| p.into_inner()) == 0 {
        return Err(Error::Code(code::NOT_INITIALIZED));
    }
    match state::shim() {
        Ok(shim) => Ok(&shim.node),
        // Not open: a child forked before CUDA started, whose parent's `nvmlInit` it inherited,
        // opens its own here.
        Err(e) if e.code() == code::NOT_INITIALIZED => match state::init_for_nvml() {
            Ok(shim) => Ok(&shim.node),
            Err(e) if e.code() == code::NO_DEVICE => Ok(&[]),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// One byte per possible device: an `nvmlDevice_t` is the address of its device's byte, so
/// that handles are distinct, stable, and never null.
static HANDLES: [u8; MOST_DEVICES] = [0; MOST_DEVICES];
/// The most devices NVML hands out handles for (NVIDIA's NVML counts a node's GPUs; a job's
/// process has a few).
const MOST_DEVICES: usize = 256;

/// The `nvmlDevice_t` of the device at `index` in NVML's list.
fn handle_of(index: usize) -> CuResult<*const u8> {
    HANDLES.get(index).map(|b| b as *const u8).ok_or(Error::Code(code::INVALID_DEVICE))
}

/// The index and slot of a handle; a forged or foreign one is an invalid argument.
fn slot_of(handle: *const u8) -> CuResult<(usize, &'static Slot)> {
    let index = (handle as usize).wrapping_sub(HANDLES.as_ptr() as usize);
    if index >= MOST_DEVICES {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    slots()?.get(index).map(|slot| (index, slot)).ok_or(Error::Code(code::INVALID_VALUE))
}

/// The device of a handle, if the process holds a session on it: one `CUDA_VISIBLE_DEVICES`
/// left out is the job's but not the process's to ask about (`NVML_ERROR_NO_PERMISSION`).
fn device_of(handle: *const u8) -> CuResult<&'static Device> {
    let ordinal = slot_of(handle)?.1.ordinal.ok_or(Error::Code(code::NOT_PERMITTED))?;
    state::shim()?.devices.get(ordinal).ok_or(Error::Code(code::INVALID_VALUE))
}

/// Copies `text` into a C buffer of `len` bytes with its NUL; a buffer too small for it all is
/// `NVML_ERROR_INSUFFICIENT_SIZE` (NVML cuts nothing).
unsafe fn copy_string(out: *mut c_char, len: c_uint, text: &str) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    if text.len() >= len as usize {
        return Err(Error::Code(TOO_SMALL));
    }
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, text.len());
    *out.add(text.len()) = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_that_does_not_fit_is_not_cut() {
        let mut buf = [0x55 as c_char; 4];
        let err = unsafe { copy_string(buf.as_mut_ptr(), 4, "four") }.unwrap_err();
        assert_eq!(err.code(), TOO_SMALL);
        assert_eq!(buf, [0x55; 4], "nothing written");
        unsafe { copy_string(buf.as_mut_ptr(), 4, "abc") }.unwrap();
        assert_eq!(buf.map(|c| c as u8), *b"abc\0");
    }

    #[test]
    fn a_handle_outside_the_table_is_refused_before_anything_is_asked() {
        // NVML is not initialized here: the handle is refused for what it is, not for that.
        for forged in [std::ptr::null(), 0x1000 as *const u8, HANDLES.as_ptr().wrapping_add(MOST_DEVICES)] {
            assert_eq!(slot_of(forged).unwrap_err().code(), code::INVALID_VALUE);
        }
        assert_eq!(slot_of(HANDLES.as_ptr()).unwrap_err().code(), code::NOT_INITIALIZED);
    }
}

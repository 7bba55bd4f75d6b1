//! NVML's lists of the processes on a device. The shim knows one process on a remote GPU: its
//! own, through its session. So a device the process holds a session on lists it, with the
//! device memory its session holds (its allocations, not the context's own memory, which the
//! remote driver keeps), as a local GPU lists a process with a context on it; other processes,
//! the job's or other jobs', are not the process's to see (another job's would not be under
//! NVIDIA's NVML in a container either). No process draws on a remote GPU's graphics.

use std::ffi::{c_char, c_uint};

use super::{device_of, guard};
use crate::error::{code, CuResult, Error};

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessV1 {
    pid: c_uint,
    used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t`, which is `nvmlProcessInfo_t` (the `_v2` and `_v3` functions').
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessV2 {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// The instance ids of a process on a GPU not in MIG mode.
const NO_INSTANCE: c_uint = u32::MAX;

/// This process and the memory its session holds on a handle's device.
fn this_process(device: *const u8) -> CuResult<(c_uint, u64)> {
    Ok((std::process::id(), super::sensors::readings(device)?.session_memory))
}

/// Writes `listed` into the caller's array of `*count` entries and the number listed into
/// `count`; an array too short (a count of 0 asks how many) gets the number it needs and
/// `NVML_ERROR_INSUFFICIENT_SIZE`.
unsafe fn list<T: Copy>(count: *mut c_uint, infos: *mut T, listed: &[T]) -> CuResult<()> {
    if count.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let room = count.read() as usize;
    // A null array is allowed only for asking how many (a count of 0).
    if infos.is_null() && room > 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    count.write(listed.len() as c_uint);
    if room < listed.len() {
        return Err(Error::Code(super::TOO_SMALL));
    }
    if !listed.is_empty() {
        std::ptr::copy_nonoverlapping(listed.as_ptr(), infos, listed.len());
    }
    Ok(())
}

/// The compute processes of the `_v2` and `_v3` functions.
unsafe fn compute_v2(device: *const u8, count: *mut c_uint, infos: *mut ProcessV2) -> CuResult<()> {
    let (pid, used_gpu_memory) = this_process(device)?;
    let listed = ProcessV2 { pid, used_gpu_memory, gpu_instance_id: NO_INSTANCE, compute_instance_id: NO_INSTANCE };
    list(count, infos, &[listed])
}

/// No processes of a kind the remote GPU runs none of for this process (graphics; MPS clients,
/// whose list NVIDIA's NVML keeps apart): the device is checked, the list is empty.
unsafe fn none_listed<T: Copy>(device: *const u8, count: *mut c_uint, infos: *mut T) -> CuResult<()> {
    device_of(device)?;
    list(count, infos, &[])
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV1,
) -> u32 {
    guard("nvmlDeviceGetComputeRunningProcesses", || {
        let (pid, used_gpu_memory) = this_process(device)?;
        list(count, infos, &[ProcessV1 { pid, used_gpu_memory }])
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetComputeRunningProcesses_v2", || compute_v2(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetComputeRunningProcesses_v3", || compute_v2(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV1,
) -> u32 {
    guard("nvmlDeviceGetGraphicsRunningProcesses", || none_listed(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetGraphicsRunningProcesses_v2", || none_listed(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetGraphicsRunningProcesses_v3", || none_listed(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV1,
) -> u32 {
    guard("nvmlDeviceGetMPSComputeRunningProcesses", || none_listed(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v2(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetMPSComputeRunningProcesses_v2", || none_listed(device, count, infos))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: *const u8,
    count: *mut c_uint,
    infos: *mut ProcessV2,
) -> u32 {
    guard("nvmlDeviceGetMPSComputeRunningProcesses_v3", || none_listed(device, count, infos))
}

/// The name of a process NVML lists: this one's, its program as it was started
/// (`/proc/self/cmdline`'s first word), cut to the buffer as NVML cuts it; any other pid is not
/// found.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(pid: c_uint, name: *mut c_char, length: c_uint) -> u32 {
    guard("nvmlSystemGetProcessName", || {
        super::slots()?;
        if name.is_null() || length == 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        if pid != std::process::id() {
            return Err(Error::Code(code::NOT_FOUND));
        }
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
        copy_cut(name, length, cmdline.split(|&b| b == 0).next().unwrap_or_default())
    })
}

/// Copies as much of `text` as a C buffer of `len` bytes holds with its NUL.
unsafe fn copy_cut(out: *mut c_char, len: c_uint, text: &[u8]) -> CuResult<()> {
    if out.is_null() || len == 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let kept = text.len().min(len as usize - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, kept);
    *out.add(kept) = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings as nvml;

    #[test]
    fn the_structs_are_nvml_h_s() {
        assert_eq!(size_of::<ProcessV1>(), size_of::<nvml::nvmlProcessInfo_v1_t>());
        assert_eq!(size_of::<ProcessV2>(), size_of::<nvml::nvmlProcessInfo_v2_t>());
        assert_eq!(
            std::mem::offset_of!(ProcessV2, compute_instance_id),
            std::mem::offset_of!(nvml::nvmlProcessInfo_v2_t, computeInstanceId)
        );
    }

    #[test]
    fn a_list_that_does_not_fit_says_how_long_it_is_and_writes_nothing() {
        let one = [ProcessV1 { pid: 7, used_gpu_memory: 9 }];
        let mut out = [ProcessV1 { pid: 0, used_gpu_memory: 0 }; 2];
        let mut count: c_uint = 0;
        let err = unsafe { list(&mut count, out.as_mut_ptr(), &one) }.unwrap_err();
        assert_eq!((err.code(), count, out[0].pid), (super::super::TOO_SMALL, 1, 0));
        // A count of 0 asks how many, with no array at all.
        count = 0;
        let err = unsafe { list(&mut count, std::ptr::null_mut(), &one) }.unwrap_err();
        assert_eq!((err.code(), count), (super::super::TOO_SMALL, 1));
        count = 2;
        unsafe { list(&mut count, out.as_mut_ptr(), &one) }.unwrap();
        assert_eq!((count, out[0].pid, out[0].used_gpu_memory, out[1].pid), (1, 7, 9, 0));
        // None to list: success, and a null array is fine.
        count = 0;
        unsafe { list::<ProcessV1>(&mut count, std::ptr::null_mut(), &[]) }.unwrap();
        assert_eq!(count, 0);
        assert_eq!(
            unsafe { list(std::ptr::null_mut(), out.as_mut_ptr(), &one) }.unwrap_err().code(),
            code::INVALID_VALUE
        );
        // Room claimed with no array: refused, the count untouched.
        count = 3;
        let err = unsafe { list(&mut count, std::ptr::null_mut(), &one) }.unwrap_err();
        assert_eq!((err.code(), count), (code::INVALID_VALUE, 3));
    }

    #[test]
    fn a_process_name_is_cut_to_the_buffer() {
        let mut buf = [0x55 as c_char; 4];
        unsafe { copy_cut(buf.as_mut_ptr(), 4, b"python3") }.unwrap();
        assert_eq!(buf.map(|c| c as u8), *b"pyt\0");
        buf = [0x55 as c_char; 4];
        unsafe { copy_cut(buf.as_mut_ptr(), 4, b"ab") }.unwrap();
        assert_eq!(buf.map(|c| c as u8), *b"ab\0\x55", "nothing past the NUL written");
        assert_eq!(unsafe { copy_cut(buf.as_mut_ptr(), 0, b"ab") }.unwrap_err().code(), code::INVALID_VALUE);
    }
}

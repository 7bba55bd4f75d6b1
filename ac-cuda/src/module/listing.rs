//! A module's or library's kernels, listed (`cuModuleGetFunctionCount`,
//! `cuModuleEnumerateFunctions`, `cuLibraryGetKernelCount`, `cuLibraryEnumerateKernels`, CUDA
//! 12.4): the device's driver names them (backend protocol 20), and each is the handle a lookup
//! by its name gives (`cuModuleGetFunction`, `cuLibraryGetKernel`), not yet looked up on the
//! device, as CUDA's lazy loading lists them (`cuFuncIsLoaded` says so).

use std::ffi::c_uint;

use super::listed_kernels;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::put;

/// How many kernels image `handle` holds, written to `count`.
unsafe fn count_out(count: *mut c_uint, handle: usize) -> CuResult<()> {
    let listed = listed_kernels(handle)?.len();
    put(count, c_uint::try_from(listed).map_err(|_| Error::Code(code::INVALID_VALUE))?)
}

/// Up to `room` of image `handle`'s kernels, written to `out`.
unsafe fn kernels_out(out: *mut usize, room: c_uint, handle: usize) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let listed = listed_kernels(handle)?;
    let n = listed.len().min(room as usize);
    std::ptr::copy_nonoverlapping(listed.as_ptr(), out, n);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, module: usize) -> u32 {
    guard("cuModuleGetFunctionCount", || count_out(count, module))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleEnumerateFunctions(out: *mut usize, room: c_uint, module: usize) -> u32 {
    guard("cuModuleEnumerateFunctions", || kernels_out(out, room, module))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernelCount(count: *mut c_uint, library: usize) -> u32 {
    guard("cuLibraryGetKernelCount", || count_out(count, library))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryEnumerateKernels(out: *mut usize, room: c_uint, library: usize) -> u32 {
    guard("cuLibraryEnumerateKernels", || kernels_out(out, room, library))
}

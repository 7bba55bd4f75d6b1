//! Pointer attributes (`cuPointerGetAttribute`, `cuPointerGetAttributes`): what the shim knows
//! of an address, from the allocation holding it.

use std::ffi::{c_int, c_uint, c_void};

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::managed;
use crate::memory::{locate, range_of};
use crate::pool;
use crate::state;

/// `CU_POINTER_ATTRIBUTE_*` values the shim answers.
mod attribute {
    pub const CONTEXT: c_int = 1;
    pub const MEMORY_TYPE: c_int = 2;
    pub const DEVICE_POINTER: c_int = 3;
    pub const HOST_POINTER: c_int = 4;
    pub const IS_MANAGED: c_int = 8;
    pub const DEVICE_ORDINAL: c_int = 9;
    pub const RANGE_START_ADDR: c_int = 11;
    pub const RANGE_SIZE: c_int = 12;
    pub const MAPPED: c_int = 13;
    pub const SYNC_MEMOPS: c_int = 6;
    pub const MEMPOOL_HANDLE: c_int = 17;
    pub const LOCALITY_DOMAIN_ORDINAL: c_int = 22;
    use std::ffi::c_int;
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: c_int, address: u64) -> u32 {
    guard("cuPointerGetAttribute", || pointer_attribute(data, attr, address))
}

unsafe fn pointer_attribute(data: *mut c_void, attr: c_int, address: u64) -> CuResult<()> {
    if data.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let shim = state::shim()?;
    let Ok((alloc, _)) = locate(address, 1) else {
        // Host memory the driver does not know: CUDA answers "invalid value" for most
        // attributes, and a memory type of 0 through cuPointerGetAttributes.
        return Err(Error::Code(code::INVALID_VALUE));
    };
    let managed = managed::range_on(alloc.device, address).is_some();
    let (start, len) = range_of(address)?;
    match attr {
        attribute::CONTEXT => {
            *(data as *mut usize) =
                alloc.context.unwrap_or_else(|| crate::context::handle_of(&shim.devices[alloc.device].context))
        }
        attribute::MEMORY_TYPE => *(data as *mut c_uint) = 2, // CU_MEMORYTYPE_DEVICE (managed too, as CUDA may)
        attribute::DEVICE_POINTER => *(data as *mut u64) = address,
        // Managed memory is mapped at the same address on the host ([`managed`]).
        attribute::HOST_POINTER if managed => *(data as *mut u64) = address,
        attribute::HOST_POINTER => return Err(Error::Code(code::INVALID_VALUE)),
        attribute::IS_MANAGED => *(data as *mut c_uint) = managed.into(),
        attribute::MAPPED => *(data as *mut c_uint) = 0,
        // CUDA 13's runtime asks it of managed memory: in no one locality domain (it moves).
        attribute::LOCALITY_DOMAIN_ORDINAL => *(data as *mut c_int) = -1,
        attribute::DEVICE_ORDINAL => *(data as *mut c_int) = alloc.device as c_int,
        attribute::RANGE_START_ADDR => *(data as *mut u64) = start,
        attribute::RANGE_SIZE => *(data as *mut usize) = len as usize,
        // The pool that handed it out; none for other memory.
        attribute::MEMPOOL_HANDLE => *(data as *mut usize) = pool::of(alloc.device, start).unwrap_or(0),
        _ => return Err(Error::Code(code::NOT_SUPPORTED)),
    }
    Ok(())
}

/// The one attribute a program may set, `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` (CUDA-aware MPI
/// libraries set it on the buffers they register), holds for all device memory here: a
/// synchronous copy or memset returns only once it is done, so setting it changes nothing, and
/// no synchronous operation is ever pending for it to wait for. Only device memory may be set.
#[no_mangle]
pub unsafe extern "C" fn cuPointerSetAttribute(value: *const c_void, attr: c_int, address: u64) -> u32 {
    guard("cuPointerSetAttribute", || {
        state::shim()?;
        if attr != attribute::SYNC_MEMOPS {
            return Err(Error::said(code::INVALID_VALUE, format!("pointer attribute {attr} cannot be set")));
        }
        if value.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        locate(address, 1).map(drop).map_err(|_| Error::said(code::INVALID_VALUE, "not device memory"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attrs: *const c_int,
    data: *mut *mut c_void,
    address: u64,
) -> u32 {
    guard("cuPointerGetAttributes", || {
        if attrs.is_null() || data.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let device = locate(address, 1).is_ok();
        for i in 0..count as usize {
            let (attr, out) = (*attrs.add(i), *data.add(i));
            if out.is_null() {
                continue;
            }
            // Host memory answers zeros here (memory type 0: unregistered), as CUDA does.
            if !device {
                match attr {
                    attribute::DEVICE_ORDINAL => *(out as *mut c_int) = -2,
                    attribute::CONTEXT
                    | attribute::DEVICE_POINTER
                    | attribute::HOST_POINTER
                    | attribute::RANGE_START_ADDR
                    | attribute::RANGE_SIZE
                    | attribute::MEMPOOL_HANDLE => *(out as *mut usize) = 0,
                    _ => *(out as *mut c_uint) = 0,
                }
                continue;
            }
            match pointer_attribute(out, attr, address) {
                Ok(()) => {}
                Err(e) if e.code() == code::NOT_SUPPORTED || attr == attribute::HOST_POINTER => {
                    *(out as *mut usize) = 0
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
}

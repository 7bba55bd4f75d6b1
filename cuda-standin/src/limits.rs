//! Context limits (`cuCtxSetLimit`, `cuCtxGetLimit`): the stack each thread has, the printf
//! buffer and the in-kernel heap, kept per context. A value is refused, and the old one kept,
//! when the memory it reserves is more than the device has (a stack for every thread the device
//! holds at once: `CUDA_ERROR_OUT_OF_MEMORY`), or a stack is past 512 KiB, the most local
//! memory a thread may have (`CUDA_ERROR_INVALID_VALUE`). Other limits answer
//! `CUDA_ERROR_NOT_SUPPORTED`.

use std::ffi::c_int;

use crate::state::{DEVICE_MEMORY, MULTIPROCESSORS, THREADS_PER_MULTIPROCESSOR};
use crate::{code, with_context};

/// The largest stack a thread may have.
const MAX_STACK: usize = 512 << 10;

/// The index of CUDA's limit `limit` in a context's limits.
fn index_of(limit: c_int) -> Result<usize, u32> {
    usize::try_from(limit).ok().filter(|&i| i < 3).ok_or(code::NOT_SUPPORTED)
}

/// The device memory a limit reserves at `value`.
fn reserved(index: usize, value: usize) -> u64 {
    match index {
        0 => (value as u64).saturating_mul(MULTIPROCESSORS * THREADS_PER_MULTIPROCESSOR),
        _ => value as u64,
    }
}

#[no_mangle]
pub extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> u32 {
    with_context("cuCtxSetLimit", |d, context| {
        let index = index_of(limit)?;
        if index == 0 && value > MAX_STACK {
            return Err(code::INVALID_VALUE);
        }
        if reserved(index, value) > DEVICE_MEMORY {
            return Err(code::OUT_OF_MEMORY);
        }
        d.contexts.get_mut(&context).expect("the current context exists").limits[index] = value;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> u32 {
    with_context("cuCtxGetLimit", |d, context| {
        let index = index_of(limit)?;
        // SAFETY: the caller's out-pointer, as the driver API takes it.
        unsafe { *value = d.contexts[&context].limits[index] };
        Ok(())
    })
}

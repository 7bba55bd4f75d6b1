//! Contexts, kept locally: each device has one context, its primary context, and each thread a
//! stack of current contexts. The remote session is the context's state on the GPU.

use std::cell::RefCell;
use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Context};

thread_local! {
    /// This thread's context stack (top last), as context handles.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The handle of device `ordinal`'s primary context.
pub fn handle_of(context: &Arc<Context>) -> usize {
    Arc::as_ptr(context) as usize
}

/// The context a handle names (only primary contexts exist).
pub fn context_of(handle: usize) -> CuResult<&'static Arc<Context>> {
    let shim = state::shim()?;
    shim.devices.iter().map(|d| &d.context).find(|c| handle_of(c) == handle).ok_or(Error::Code(code::INVALID_CONTEXT))
}

/// The ordinal of this thread's current context's device, or `CUDA_ERROR_INVALID_CONTEXT`.
pub fn current_device() -> CuResult<usize> {
    let top = STACK.with(|s| s.borrow().last().copied()).ok_or(Error::Code(code::INVALID_CONTEXT))?;
    Ok(context_of(top)?.device)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(context: *mut usize, device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxRetain", || put(context, handle_of(&state::shim()?.device(device)?.context)))
}

// Primary contexts live as long as the process: releasing, resetting and flags change nothing
// (the remote session ends when the process exits). The names before CUDA 11 are the same calls.

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxRelease", || state::shim()?.device(device).map(drop))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease(device: c_int) -> u32 {
    cuDevicePrimaryCtxRelease_v2(device)
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxReset", || state::shim()?.device(device).map(drop))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset(device: c_int) -> u32 {
    cuDevicePrimaryCtxReset_v2(device)
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, _flags: c_uint) -> u32 {
    guard("cuDevicePrimaryCtxSetFlags", || state::shim()?.device(device).map(drop))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(device: c_int, flags: c_uint) -> u32 {
    cuDevicePrimaryCtxSetFlags_v2(device, flags)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(device: c_int, flags: *mut c_uint, active: *mut c_int) -> u32 {
    guard("cuDevicePrimaryCtxGetState", || {
        state::shim()?.device(device)?;
        put(flags, 0)?;
        put(active, 1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut usize) -> u32 {
    guard("cuCtxGetCurrent", || put(context, STACK.with(|s| s.borrow().last().copied().unwrap_or(0))))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: usize) -> u32 {
    guard("cuCtxSetCurrent", || {
        if context != 0 {
            context_of(context)?;
        }
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if context != 0 {
                s.push(context);
            }
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(context: usize) -> u32 {
    guard("cuCtxPushCurrent", || {
        context_of(context)?;
        STACK.with(|s| s.borrow_mut().push(context));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut usize) -> u32 {
    guard("cuCtxPopCurrent", || {
        let top = STACK.with(|s| s.borrow_mut().pop()).ok_or(Error::Code(code::INVALID_CONTEXT))?;
        if !context.is_null() {
            *context = top;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> u32 {
    guard("cuCtxGetDevice", || put(device, current_device()? as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut c_int, context: usize) -> u32 {
    guard("cuCtxGetDevice", || {
        let ordinal = if context == 0 { current_device()? } else { context_of(context)?.device };
        put(device, ordinal as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> u32 {
    guard("cuCtxGetFlags", || {
        current_device()?;
        put(flags, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(context: usize, version: *mut c_uint) -> u32 {
    guard("cuCtxGetApiVersion", || {
        if context != 0 {
            context_of(context)?;
        }
        put(version, 12010)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(context: usize, id: *mut u64) -> u32 {
    guard("cuCtxGetId", || {
        let ordinal = if context == 0 { current_device()? } else { context_of(context)?.device };
        put(id, ordinal as u64 + 1)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> u32 {
    guard("cuCtxSynchronize", || synchronize(current_device()?))
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize_v2(context: usize) -> u32 {
    guard("cuCtxSynchronize", || {
        synchronize(if context == 0 { current_device()? } else { context_of(context)?.device })
    })
}

/// Waits for everything queued on `device`, and answers the first error of that work; then
/// managed memory is the host's again, and memory freed to its pools may go to any stream.
pub fn synchronize(device: usize) -> CuResult<()> {
    let shim = state::shim()?;
    let before = crate::pool::mark();
    shim.block_on(shim.devices[device].acc.synchronize())?;
    crate::pool::settled(device, None, before);
    crate::managed::settle(device, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> u32 {
    guard("cuCtxGetLimit", || {
        current_device()?;
        // CU_LIMIT_STACK_SIZE, PRINTF_FIFO_SIZE, MALLOC_HEAP_SIZE: the driver's defaults.
        put(
            value,
            match limit {
                0 => 1024,
                1 => 1 << 20,
                2 => 8 << 20,
                _ => return Err(Error::Code(code::NOT_SUPPORTED)),
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetLimit(limit: c_int, _value: usize) -> u32 {
    guard("cuCtxSetLimit", || {
        current_device()?;
        match limit {
            0..=2 => Ok(()),
            _ => Err(Error::Code(code::NOT_SUPPORTED)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> u32 {
    guard("cuCtxGetStreamPriorityRange", || {
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> u32 {
    guard("cuCtxGetCacheConfig", || put(config, 0))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCacheConfig(_config: c_int) -> u32 {
    guard("cuCtxSetCacheConfig", || Ok(()))
}

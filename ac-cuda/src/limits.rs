//! A context's limits (`cuCtxSetLimit`, `cudaDeviceSetLimit`): the stack each GPU thread has,
//! the buffer kernels' `printf` writes into and the heap of in-kernel `malloc`, set on the
//! remote GPU's context (backend protocol 11) and kept here for `cuCtxGetLimit`. Against an
//! older backend the value is kept here alone, as the shim did before: the remote GPU keeps its
//! defaults.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Mutex;

use ac_frontend::ContextLimit;

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put};

/// The values set, by device and limit.
static SET: Mutex<Option<HashMap<(usize, ContextLimit), usize>>> = Mutex::new(None);

/// CUDA's `CUlimit` codes this shim serves.
fn limit_of(code: c_int) -> CuResult<ContextLimit> {
    match code {
        0 => Ok(ContextLimit::StackSize),
        1 => Ok(ContextLimit::PrintfFifoSize),
        2 => Ok(ContextLimit::MallocHeapSize),
        _ => Err(Error::Code(code::NOT_SUPPORTED)),
    }
}

fn set_values() -> std::sync::MutexGuard<'static, Option<HashMap<(usize, ContextLimit), usize>>> {
    SET.lock().unwrap_or_else(|p| p.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> u32 {
    guard("cuCtxGetLimit", || {
        let device = current_device()?;
        let limit = limit_of(limit)?;
        let set = set_values().as_ref().and_then(|set| set.get(&(device, limit)).copied());
        put(value, set.unwrap_or(limit.default_value() as usize))
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> u32 {
    guard("cuCtxSetLimit", || {
        let device = current_device()?;
        let limit = limit_of(limit)?;
        let shim = state::shim()?;
        // Held while sent: threads setting one limit at once agree with the backend.
        let mut set = set_values();
        let now = match shim.block_on(shim.devices[device].acc.set_limit(limit, value as u64)) {
            Ok(now) => usize::try_from(now).unwrap_or(usize::MAX),
            Err(ac_frontend::Error::VersionMismatch(_)) => value,
            Err(e) => return Err(e.into()),
        };
        set.get_or_insert_with(HashMap::new).insert((device, limit), now);
        Ok(())
    })
}

//! A context's limits (`cuCtxSetLimit`): the stack each GPU thread has, the buffer kernels'
//! `printf` writes into, the heap of in-kernel `malloc`, and the device memory each reserves.

use ac_proto::backend::{ContextLimit, ErrorKind, WireError};
use cudarc::driver::sys::{self, CUdevice_attribute as DeviceAttribute, CUlimit};

use super::driver;
use crate::device::{DeviceResult, Limited};

/// Sets `limit` of the current context to `value`: what the driver then says it is, and the
/// memory it reserves on `device` beyond what the limit's default does (a stack for every
/// thread the device holds at once; the buffer and the heap themselves).
pub(super) fn set(device: sys::CUdevice, limit: ContextLimit, value: u64) -> DeviceResult<Limited> {
    let raw = match limit {
        ContextLimit::StackSize => CUlimit::CU_LIMIT_STACK_SIZE,
        ContextLimit::PrintfFifoSize => CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE,
        ContextLimit::MallocHeapSize => CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE,
    };
    let asked = usize::try_from(value)
        .map_err(|_| WireError::new(ErrorKind::InvalidArgument, format!("a limit of {value} bytes")))?;
    // Asked before the limit changes: a failure here leaves the context as it was.
    let per_byte = match limit {
        ContextLimit::StackSize => resident_threads(device)?,
        ContextLimit::PrintfFifoSize | ContextLimit::MallocHeapSize => 1,
    };
    // SAFETY: the session's context is current (the caller entered it); plain values.
    driver::check("cuCtxSetLimit", unsafe { sys::cuCtxSetLimit(raw, asked) })?;
    let mut now = 0usize;
    // SAFETY: the same context; a valid out-pointer.
    driver::check("cuCtxGetLimit", unsafe { sys::cuCtxGetLimit(&mut now, raw) })?;
    let value = now as u64;
    let beyond_default = value.saturating_sub(limit.default_value());
    Ok(Limited { value, reserved: beyond_default.saturating_mul(per_byte) })
}

/// The threads `device` holds at once: a stack each.
fn resident_threads(device: sys::CUdevice) -> DeviceResult<u64> {
    let attribute = |which| driver::attribute(device, which).map(|value| u64::try_from(value).unwrap_or(0));
    let multiprocessors = attribute(DeviceAttribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Ok(multiprocessors * attribute(DeviceAttribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?)
}

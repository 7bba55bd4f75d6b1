//! The memory calls: device allocations, pinned host allocations, copies and memsets.
// As in lib.rs: C functions taking raw pointers from their caller, as the driver does.
#![allow(unsafe_code)]

use std::ffi::{c_uint, c_void};

use crate::code;
use crate::state::{self, Driver, Op};
use crate::{id, owned, run, with_context, Handle};

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    with_context("cuMemGetInfo", |d, context| {
        let used = d.used(d.usable(context)?.device);
        *free = (state::DEVICE_MEMORY - used) as usize;
        *total = state::DEVICE_MEMORY as usize;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(address: *mut u64, len: usize) -> u32 {
    with_context("cuMemAlloc", |d, context| {
        *address = d.alloc(context, len)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(address: *mut u64, len: usize, stream: Handle) -> u32 {
    with_context("cuMemAllocAsync", |d, context| {
        d.stream(context, id(stream))?;
        *address = d.alloc(context, len)?;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(address: u64) -> u32 {
    with_context("cuMemFree", |d, context| {
        let owner = d.memory.get(&address).map(|a| a.context);
        owned(d, "device allocation", owner, context)?;
        match &d.memory[&address].bytes {
            state::Storage::Range(_) => {
                d.violation(format!("cuMemFree of the reserved range at {address:#x} (cuMemAddressFree frees it)"));
                return Err(code::INVALID_VALUE);
            }
            state::Storage::Shared(shared) if shared.opened => {
                d.violation(format!("cuMemFree of memory opened at {address:#x} (cuIpcCloseMemHandle closes it)"));
                return Err(code::INVALID_VALUE);
            }
            _ => {}
        }
        // cuMemFree synchronizes: the context's queued work runs first.
        run::finish_context(d, context);
        let len = d.memory[&address].bytes.len();
        crate::textures::check_unread(d, address, len);
        d.memory.remove(&address);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemFreeAsync(address: u64, stream: Handle) -> u32 {
    with_context("cuMemFreeAsync", |d, context| {
        let stream = d.stream(context, id(stream))?;
        let owner = d.memory.get(&address).map(|a| a.context);
        owned(d, "device allocation", owner, context)?;
        d.queue(stream, Op::Free { address });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(pointer: *mut *mut c_void, len: usize, _flags: c_uint) -> u32 {
    with_context("cuMemHostAlloc", |d, context| {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| code::INVALID_VALUE)?;
        let memory = std::alloc::alloc(layout);
        if memory.is_null() {
            return Err(code::OUT_OF_MEMORY);
        }
        // Pinned memory is not cleared either: a caller that sends bytes it did not write shows.
        std::ptr::write_bytes(memory, state::STALE_BYTE, len.max(1));
        d.pinned.insert(memory as usize, (len.max(1), context));
        *pointer = memory as *mut c_void;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(pointer: *mut c_void) -> u32 {
    with_context("cuMemFreeHost", |d, _| {
        let Some(&(len, _)) = d.pinned.get(&(pointer as usize)) else {
            d.violation("cuMemFreeHost of memory cuMemHostAlloc did not return".into());
            return Err(code::INVALID_VALUE);
        };
        if d.pinned_in_flight(pointer as usize, len) {
            d.violation("pinned memory freed while queued copies still use it".into());
        }
        d.pinned.remove(&(pointer as usize));
        std::alloc::dealloc(pointer as *mut u8, std::alloc::Layout::from_size_align(len, 4096).expect("layout"));
        Ok(())
    })
}

/// Checks a device range of the current context for a copy.
fn device_range(d: &mut Driver, context: u64, address: u64, len: usize) -> Result<(), u32> {
    if d.locate(context, address, len).is_none() {
        d.violation(format!("copy touching {len} bytes at {address:#x}, outside the context's allocations"));
        return Err(code::INVALID_VALUE);
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, len: usize, stream: Handle) -> u32 {
    with_context("cuMemcpyHtoDAsync", |d, context| {
        let stream = d.stream(context, id(stream))?;
        device_range(d, context, dst, len)?;
        // Deferred until waited for, pageable or pinned: see the crate documentation. An
        // injected DMA fault (`host_to_device_budget`) arrives then too, as a real one does.
        d.queue(stream, Op::HtoD { dst, src: src as usize, len });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, len: usize, stream: Handle) -> u32 {
    with_context("cuMemcpyDtoHAsync", |d, context| {
        let stream = d.stream(context, id(stream))?;
        device_range(d, context, src, len)?;
        let pinned = d.pinned.iter().any(|(&at, &(n, _))| (dst as usize) >= at && (dst as usize) + len <= at + n);
        let seq = d.queue(stream, Op::DtoH { dst: dst as usize, src, len });
        if !pinned {
            // Documented: into pageable memory, the call returns once the copy is complete.
            run::run(d, stream, seq);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: Handle) -> u32 {
    with_context("cuMemcpyDtoDAsync", |d, context| {
        let stream = d.stream(context, id(stream))?;
        device_range(d, context, src, len)?;
        device_range(d, context, dst, len)?;
        if src < dst + len as u64 && dst < src + len as u64 {
            d.violation("cuMemcpyDtoDAsync with overlapping ranges (undefined)".into());
            return Err(code::INVALID_VALUE);
        }
        d.queue(stream, Op::DtoD { dst, src, len });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: u64, value: u8, len: usize, stream: Handle) -> u32 {
    with_context("cuMemsetD8Async", |d, context| {
        let stream = d.stream(context, id(stream))?;
        device_range(d, context, dst, len)?;
        d.queue(stream, Op::Memset { dst, value, len });
        Ok(())
    })
}

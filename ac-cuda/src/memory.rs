//! Device memory by address: allocations, frees, copies and memsets.
//!
//! An allocation answers its remote device address, which the program keeps, offsets and
//! passes to kernels as it would a local one. Copies find the allocation holding an address
//! (on the current device first) and go over the SDK's data plane: large ones stripe over the
//! lanes. Page-locked host memory is plain host memory here: every copy is staged anyway.

use std::ffi::{c_uint, c_void};

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::guard;
use crate::managed::{self, Reach};
use crate::pool;
use crate::state::{self, put, Allocation};
use crate::stream::{device_of_stream, free_order, order_key, stream_of};

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(address: *mut u64, bytes: usize) -> u32 {
    guard("cuMemAlloc", || alloc(address, bytes))
}

unsafe fn alloc(address: *mut u64, bytes: usize) -> CuResult<()> {
    if address.is_null() || bytes == 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let shim = state::shim()?;
    let device = current_device()?;
    let (buffer, at) = shim.block_on(shim.devices[device].acc.alloc_addressed(bytes as u64))?;
    let buffer = std::sync::Arc::new(buffer);
    let context = crate::context::created_current();
    let allocation = Allocation { device, size: bytes as u64, buffer, variable_of: None, context };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, at), allocation);
    put(address, at)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(address: *mut u64, bytes: usize, stream: usize) -> u32 {
    guard("cuMemAllocAsync", || {
        let pool = pool::current_pool(device_of_stream(stream)?)?;
        alloc_from_pool(address, bytes, pool, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(address: *mut u64, bytes: usize, pool: usize, stream: usize) -> u32 {
    guard("cuMemAllocFromPoolAsync", || alloc_from_pool(address, bytes, pool, stream))
}

/// Hands out `bytes` of `pool` in `stream`'s order; on a capturing stream, graph memory (an
/// allocation node of the capture's graph).
unsafe fn alloc_from_pool(address: *mut u64, bytes: usize, pool: usize, stream: usize) -> CuResult<()> {
    if address.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let device = device_of_stream(stream)?;
    if graph::is_capturing(stream) {
        pool::check_device(pool, device)?;
        return put(address, graph::memory::alloc_captured(stream, device, bytes)?);
    }
    put(address, pool::alloc(pool, bytes, order_key(stream))?)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    address: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    _element: c_uint,
) -> u32 {
    guard("cuMemAllocPitch", || {
        let row = width.next_multiple_of(512);
        put(pitch, row)?;
        alloc(address, row.checked_mul(height).ok_or(Error::Code(code::INVALID_VALUE))?)
    })
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(address: u64) -> u32 {
    guard("cuMemFree", || free(address))
}

#[no_mangle]
pub extern "C" fn cuMemFreeAsync(address: u64, stream: usize) -> u32 {
    // Pool memory goes back to its pool in the stream's order; other memory is freed by the
    // backend after the work queued before it, on every stream. On a capturing stream, graph
    // memory gets a free node.
    guard("cuMemFreeAsync", || {
        let shim = state::shim()?;
        let device = shim.device_of(address, Some(device_of_stream(stream)?));
        if graph::is_capturing(stream) {
            let device = device.ok_or(Error::Code(code::INVALID_VALUE))?;
            return graph::memory::free_captured(stream, device, address);
        }
        let pooled = device.and_then(|device| pool::give_back(device, address, Some(free_order(stream))));
        pooled.unwrap_or_else(|| free(address))
    })
}

fn free(address: u64) -> CuResult<()> {
    if address == 0 {
        return Ok(());
    }
    let shim = state::shim()?;
    let device = shim.device_of(address, current_device().ok()).ok_or(Error::Code(code::INVALID_VALUE))?;
    if let Some(freed) = graph::memory::free_outside(device, address) {
        return freed;
    }
    crate::ipc::check_not_opened(device, address)?;
    if pool::of(device, address).is_some() {
        // A free waits for the device's work, as CUDA's does: the block goes back settled.
        crate::context::synchronize(device)?;
        return pool::give_back(device, address, None).unwrap_or(Err(Error::Code(code::INVALID_VALUE)));
    }
    if let Some(freed) = managed::free(device, address) {
        freed?;
    } else {
        // Asked before the memory's lock is taken: no call holds the ranges' lock and this one.
        let a_range = crate::vmm::is_range(device, address);
        let mut memory = shim.memory.lock().unwrap_or_else(|p| p.into_inner());
        // Only an allocation's start may be freed (not a module's variable); dropping the buffer
        // frees it remotely.
        if memory.get(&(device, address)).is_none_or(|a| a.variable_of.is_some()) || a_range {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        memory.remove(&(device, address));
    }
    // A free waits for the device's work, as CUDA's does: managed memory is the host's after it.
    managed::settle(device, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    guard("cuMemGetInfo", || {
        let shim = state::shim()?;
        let device = &shim.devices[current_device()?];
        let info = shim.block_on(device.acc.device_info())?;
        put(free, info.memory_free as usize)?;
        put(total, info.memory_total as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, address: u64) -> u32 {
    guard("cuMemGetAddressRange", || {
        let (start, len) = range_of(address)?;
        if !base.is_null() {
            *base = start;
        }
        if !size.is_null() {
            *size = len as usize;
        }
        Ok(())
    })
}

/// The start and size of the allocation holding `address` (the managed one's as the program
/// asked for it).
pub(crate) fn range_of(address: u64) -> CuResult<(u64, u64)> {
    let (alloc, offset) = locate(address, 1)?;
    match managed::range_on(alloc.device, address) {
        Some((start, bytes, _)) => Ok((start, bytes)),
        None => Ok((address - offset, alloc.size)),
    }
}

/// The allocation holding `len` bytes at `address`, and the offset into it.
pub(crate) fn locate(address: u64, len: u64) -> CuResult<(Allocation, u64)> {
    let shim = state::shim()?;
    let device = shim.device_of(address, current_device().ok()).ok_or_else(|| {
        Error::said(code::INVALID_VALUE, format!("{address:#x} is not device memory of this program"))
    })?;
    shim.find(device, address, len)
}

// ---- Page-locked host memory: plain host memory (every copy is staged). ----

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(out: *mut *mut c_void, bytes: usize) -> u32 {
    cuMemHostAlloc(out, bytes, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(out: *mut *mut c_void, bytes: usize, _flags: c_uint) -> u32 {
    guard("cuMemHostAlloc", || {
        let p = libc::malloc(bytes.max(1));
        if p.is_null() {
            return Err(Error::Code(code::OUT_OF_MEMORY));
        }
        put(out, p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> u32 {
    guard("cuMemFreeHost", || {
        libc::free(p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(_p: *mut c_void, _bytes: usize, _flags: c_uint) -> u32 {
    guard("cuMemHostRegister", || Ok(()))
}

#[no_mangle]
pub extern "C" fn cuMemHostUnregister(_p: *mut c_void) -> u32 {
    guard("cuMemHostUnregister", || Ok(()))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, _p: *mut c_void) -> u32 {
    guard("cuMemHostGetFlags", || put(flags, 0))
}

// ---- Copies ----

/// Host to device, synchronous (after the work queued before it).
pub(crate) unsafe fn host_to_device(dst: u64, src: *const c_void, len: usize) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    let (alloc, offset) = locate(dst, len as u64)?;
    let data = std::slice::from_raw_parts(src as *const u8, len);
    let shim = state::shim()?;
    Ok(shim.block_on(alloc.buffer.copy_from_host_at(offset as usize, data))?)
}

/// Device to host, synchronous.
pub(crate) unsafe fn device_to_host(dst: *mut c_void, src: u64, len: usize) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    let (alloc, offset) = locate(src, len as u64)?;
    let out = std::slice::from_raw_parts_mut(dst as *mut u8, len);
    let shim = state::shim()?;
    Ok(shim.block_on(alloc.buffer.copy_to_host_at(offset as usize, out))?)
}

/// Device to device, queued on `stream` (through the host between two devices).
pub(crate) fn device_to_device(dst: u64, src: u64, len: usize, stream: usize) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    copy_between(locate(dst, len as u64)?, locate(src, len as u64)?, len, stream)
}

/// `len` bytes from an allocation and offset to another, queued on `stream` when both are one
/// device's; through the host between two devices.
pub(crate) fn copy_between(
    (to, to_offset): (Allocation, u64),
    (from, from_offset): (Allocation, u64),
    len: usize,
    stream: usize,
) -> CuResult<()> {
    let shim = state::shim()?;
    if to.device == from.device {
        let stream = stream_of(stream, to.device)?;
        let copy = to.buffer.copy_from_device_at(&stream, to_offset as usize, &from.buffer, from_offset as usize, len);
        return Ok(shim.block_on(copy)?);
    }
    let mut staged = vec![0u8; len];
    shim.block_on(from.buffer.copy_to_host_at(from_offset as usize, &mut staged))?;
    Ok(shim.block_on(to.buffer.copy_from_host_at(to_offset as usize, &staged))?)
}

/// Copies at least this large go over the bulk lanes even when asked asynchronously.
const BULK_ASYNC: usize = 1 << 20;

/// Host to device, queued on `stream`: the bytes are sent now. A large one waits for the stream
/// and goes over the lanes, as CUDA's own copy from pageable memory waits for its stream.
pub(crate) unsafe fn host_to_device_async(dst: u64, src: *const c_void, len: usize, stream: usize) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    let (alloc, offset) = locate(dst, len as u64)?;
    let data = std::slice::from_raw_parts(src as *const u8, len);
    let shim = state::shim()?;
    let stream = stream_of(stream, alloc.device)?;
    if len >= BULK_ASYNC {
        shim.block_on(stream.synchronize())?;
        return Ok(shim.block_on(alloc.buffer.copy_from_host_at(offset as usize, data))?);
    }
    Ok(shim.block_on(alloc.buffer.copy_from_host_async(&stream, offset as usize, data))?)
}

/// Device to host on `stream`: the bytes must be in host memory when the stream reaches this
/// point, so the copy waits for the stream's work and then reads (synchronous, as CUDA's own
/// copy to pageable memory is).
unsafe fn device_to_host_async(dst: *mut c_void, src: u64, len: usize, stream: usize) -> CuResult<()> {
    if len == 0 {
        return Ok(());
    }
    let (alloc, _) = locate(src, len as u64)?;
    let shim = state::shim()?;
    shim.block_on(stream_of(stream, alloc.device)?.synchronize())?;
    device_to_host(dst, src, len)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, len: usize) -> u32 {
    guard("cuMemcpyHtoD", || synchronous(Some(src as u64), &[dst], || host_to_device(dst, src, len)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, len: usize) -> u32 {
    guard("cuMemcpyDtoH", || synchronous(Some(dst as u64), &[src], || device_to_host(dst, src, len)))
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, len: usize) -> u32 {
    guard("cuMemcpyDtoD", || {
        synchronous(None, &[dst, src], || {
            device_to_device(dst, src, len, 0)?;
            synchronize_device_of(dst)
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, len: usize, stream: usize) -> u32 {
    let src = src as u64;
    guard("cuMemcpyHtoDAsync", || {
        graph::or_record(stream, NodeKind::Memcpy, move |s| {
            queued(Some(src), &[dst], || unsafe { host_to_device_async(dst, src as *const c_void, len, s) })
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, len: usize, stream: usize) -> u32 {
    let dst = dst as u64;
    guard("cuMemcpyDtoHAsync", || {
        graph::or_record(stream, NodeKind::Memcpy, move |s| {
            queued(Some(dst), &[src], || unsafe { device_to_host_async(dst as *mut c_void, src, len, s) })
        })
    })
}

#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: usize) -> u32 {
    guard("cuMemcpyDtoDAsync", || {
        graph::or_record(stream, NodeKind::Memcpy, move |s| {
            queued(None, &[dst, src], || device_to_device(dst, src, len, s))
        })
    })
}

/// Which side of a unified-addressing copy an address is on.
pub(crate) fn is_device(address: u64) -> bool {
    state::shim().is_ok_and(|shim| shim.device_of(address, current_device().ok()).is_some())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: u64, src: u64, len: usize) -> u32 {
    guard("cuMemcpy", || match (is_device(dst), is_device(src)) {
        (true, true) => synchronous(None, &[dst, src], || {
            device_to_device(dst, src, len, 0)?;
            synchronize_device_of(dst)
        }),
        (true, false) => synchronous(Some(src), &[dst], || host_to_device(dst, src as *const c_void, len)),
        (false, true) => synchronous(Some(dst), &[src], || device_to_host(dst as *mut c_void, src, len)),
        (false, false) => {
            std::ptr::copy(src as *const u8, dst as *mut u8, len);
            Ok(())
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(dst: u64, src: u64, len: usize, stream: usize) -> u32 {
    guard("cuMemcpyAsync", || graph::or_record(stream, NodeKind::Memcpy, move |s| copy_async(dst, src, len, s)))
}

/// A unified-addressing copy on `stream`: each side host or device memory.
pub(crate) fn copy_async(dst: u64, src: u64, len: usize, stream: usize) -> CuResult<()> {
    // SAFETY: the program's addresses, as it gave them for this copy.
    unsafe {
        match (is_device(dst), is_device(src)) {
            (true, true) => queued(None, &[dst, src], || device_to_device(dst, src, len, stream)),
            (true, false) => queued(Some(src), &[dst], || host_to_device_async(dst, src as *const c_void, len, stream)),
            (false, true) => queued(Some(dst), &[src], || device_to_host_async(dst as *mut c_void, src, len, stream)),
            (false, false) => {
                std::ptr::copy(src as *const u8, dst as *mut u8, len);
                Ok(())
            }
        }
    }
}

/// A copy or memset queued on a stream that reaches device memory at `device_side` (and host
/// memory at `host`, if any): the managed memory it reaches goes to the device first, and
/// managed host memory comes back first ([`managed`]).
fn queued(host: Option<u64>, device_side: &[u64], op: impl FnOnce() -> CuResult<()>) -> CuResult<()> {
    queued_on(host, device_side, op).map(drop)
}

/// [`queued`], answering the devices it reached.
fn queued_on(host: Option<u64>, device_side: &[u64], op: impl FnOnce() -> CuResult<()>) -> CuResult<Vec<usize>> {
    if let Some(host) = host {
        managed::settle_host(host)?;
    }
    let shim = state::shim()?;
    let current = current_device().ok();
    let reach: Vec<Reach> = device_side
        .iter()
        .filter_map(|&address| shim.device_of(address, current).map(|device| Reach::Memory(device, address)))
        .collect();
    managed::device_work(&reach, op)?;
    Ok(reach.iter().map(|r| r.device()).collect())
}

/// A synchronous copy or memset: [`queued`], and then its devices are idle, so their managed
/// memory comes back to the host.
fn synchronous(host: Option<u64>, device_side: &[u64], op: impl FnOnce() -> CuResult<()>) -> CuResult<()> {
    queued_on(host, device_side, op)?.into_iter().try_for_each(|device| managed::settle(device, None))
}

fn synchronize_device_of(address: u64) -> CuResult<()> {
    let (alloc, _) = locate(address, 0)?;
    let shim = state::shim()?;
    Ok(shim.block_on(shim.devices[alloc.device].acc.synchronize())?)
}

// ---- Memsets ----

/// Sets `count` elements of `width` bytes at `dst` to `pattern`, on `stream`.
pub(crate) fn memset(dst: u64, pattern: u32, width: usize, count: usize, stream: usize) -> CuResult<()> {
    let len = count.checked_mul(width).ok_or(Error::Code(code::INVALID_VALUE))?;
    if len == 0 {
        return Ok(());
    }
    memset_in(locate(dst, len as u64)?, pattern, width, len, stream)
}

/// Sets `len` bytes from an allocation and offset to `pattern`, an element `width` bytes, on
/// `stream`.
pub(crate) fn memset_in(
    (alloc, offset): (Allocation, u64),
    pattern: u32,
    width: usize,
    len: usize,
    stream: usize,
) -> CuResult<()> {
    let shim = state::shim()?;
    let stream = stream_of(stream, alloc.device)?;
    let bytes = &pattern.to_le_bytes()[..width];
    if bytes.iter().all(|&b| b == bytes[0]) {
        return Ok(shim.block_on(alloc.buffer.memset_range(&stream, offset as usize, len, bytes[0]))?);
    }
    // A pattern of unequal bytes: written as data, in the stream's order.
    let data: Vec<u8> = bytes.iter().copied().cycle().take(len).collect();
    Ok(shim.block_on(alloc.buffer.copy_from_host_async(&stream, offset as usize, &data))?)
}

/// A synchronous memset: queued on the default stream, then waited for.
fn memset_sync(dst: u64, pattern: u32, width: usize, count: usize) -> CuResult<()> {
    synchronous(None, &[dst], || {
        memset(dst, pattern, width, count, 0)?;
        let (alloc, _) = locate(dst, 0)?;
        let shim = state::shim()?;
        Ok(shim.block_on(stream_of(0, alloc.device)?.synchronize())?)
    })
}

/// A memset queued on `stream` ([`queued`]), or recorded if the stream is capturing.
fn memset_queued(dst: u64, pattern: u32, width: usize, count: usize, stream: usize) -> CuResult<()> {
    graph::or_record(stream, NodeKind::Memset, move |s| queued(None, &[dst], || memset(dst, pattern, width, count, s)))
}

#[no_mangle]
pub extern "C" fn cuMemsetD8_v2(dst: u64, value: u8, count: usize) -> u32 {
    guard("cuMemsetD8", || memset_sync(dst, value as u32, 1, count))
}

#[no_mangle]
pub extern "C" fn cuMemsetD16_v2(dst: u64, value: u16, count: usize) -> u32 {
    guard("cuMemsetD16", || memset_sync(dst, value as u32, 2, count))
}

#[no_mangle]
pub extern "C" fn cuMemsetD32_v2(dst: u64, value: u32, count: usize) -> u32 {
    guard("cuMemsetD32", || memset_sync(dst, value, 4, count))
}

#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: u64, value: u8, count: usize, stream: usize) -> u32 {
    guard("cuMemsetD8Async", || memset_queued(dst, value as u32, 1, count, stream))
}

#[no_mangle]
pub extern "C" fn cuMemsetD16Async(dst: u64, value: u16, count: usize, stream: usize) -> u32 {
    guard("cuMemsetD16Async", || memset_queued(dst, value as u32, 2, count, stream))
}

#[no_mangle]
pub extern "C" fn cuMemsetD32Async(dst: u64, value: u32, count: usize, stream: usize) -> u32 {
    guard("cuMemsetD32Async", || memset_queued(dst, value, 4, count, stream))
}

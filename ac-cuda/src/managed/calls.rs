//! The entry points of managed memory: allocation, attachment, prefetches and advice.

use std::ffi::{c_int, c_uint};

use super::{device_work, insert, map_at, page, range, Attached, Placed, Reach};
use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::graph;
use crate::guard;
use crate::state::{self, put};
use crate::stream::{device_of_stream, is_default_stream};

/// `CUmemAttach_flags`.
mod attach {
    pub const GLOBAL: u32 = 1;
    pub const HOST: u32 = 2;
    pub const SINGLE: u32 = 4;
}

/// How many remote addresses an allocation tries before giving up: one whose range the program
/// already uses on its host (a library, another device's managed memory) is kept aside, so the
/// next allocation lands elsewhere.
const ATTEMPTS: usize = 8;

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(address: *mut u64, bytes: usize, flags: c_uint) -> u32 {
    guard("cuMemAllocManaged", || alloc(address, bytes, flags))
}

unsafe fn alloc(address: *mut u64, bytes: usize, flags: c_uint) -> CuResult<()> {
    if address.is_null() || bytes == 0 || !(flags == attach::GLOBAL || flags == attach::HOST) {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let shim = state::shim()?;
    let device = current_device()?;
    let page = page();
    let too_large =
        || Error::said(code::INVALID_VALUE, format!("{bytes} bytes of managed memory: past the address space"));
    let mapped =
        bytes.checked_next_multiple_of(page).filter(|m| m.checked_add(page).is_some()).ok_or_else(too_large)?;
    // Kept until the loop ends, so that each attempt gets an address of its own.
    let mut collided = Vec::new();
    for _ in 0..ATTEMPTS {
        // A page more than asked: the managed address is the remote one rounded up to a page.
        let (buffer, key) = shim.block_on(shim.devices[device].acc.alloc_addressed((mapped + page) as u64))?;
        let Some(start) = key.checked_next_multiple_of(page as u64) else {
            collided.push(buffer);
            continue;
        };
        if !map_at(start, mapped) {
            collided.push(buffer);
            continue;
        }
        let attached = if flags == attach::HOST { Attached::Host } else { Attached::Global };
        let placed = Placed { device, start, key, bytes: bytes as u64, mapped, attached };
        insert(shim, placed, buffer);
        return put(address, start);
    }
    Err(Error::said(
        code::OUT_OF_MEMORY,
        format!("{bytes} bytes of managed memory: the host uses the range at each of the {ATTEMPTS} addresses the device gave"),
    ))
}

/// Runs `work`, which reads or writes device memory at `address` (a library's scalar, result or
/// array of addresses) from the host: [`device_work`] reaching it.
pub fn at_device_memory<T>(address: u64, work: impl FnOnce() -> CuResult<T>) -> CuResult<T> {
    let shim = state::shim()?;
    match shim.device_of(address, current_device().ok()) {
        Some(device) => device_work(&[Reach::Memory(device, address)], work),
        None => work(),
    }
}

/// The managed allocation `len` bytes at `address` lie in (the whole of it for 0), or
/// `CUDA_ERROR_INVALID_VALUE`.
fn managed_range(address: u64, len: usize) -> CuResult<(u64, usize)> {
    let (start, bytes, device) = range(address).ok_or_else(|| {
        Error::said(code::INVALID_VALUE, format!("{address:#x} is not managed memory of this program"))
    })?;
    if len != 0 && (address as u128 + len as u128) > (start + bytes) as u128 {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("{len} bytes at {address:#x} run past its managed allocation"),
        ));
    }
    Ok((start, device))
}

#[no_mangle]
pub extern "C" fn cuStreamAttachMemAsync(stream: usize, address: u64, len: usize, flags: c_uint) -> u32 {
    guard("cuStreamAttachMemAsync", || attach(stream, address, len, flags))
}

fn attach(stream: usize, address: u64, len: usize, flags: c_uint) -> CuResult<()> {
    device_of_stream(stream)?;
    graph::refuse_if_capturing(stream, "an attachment of managed memory")?;
    let (start, device) = managed_range(address, len)?;
    if address != start {
        return Err(Error::said(code::INVALID_VALUE, "attachment is of a whole managed allocation, from its start"));
    }
    let attached = match flags {
        attach::GLOBAL => Attached::Global,
        attach::HOST => Attached::Host,
        // The default streams are one stream here (and CUDA refuses the NULL stream).
        attach::SINGLE if is_default_stream(stream) => {
            return Err(Error::said(
                code::INVALID_VALUE,
                "managed memory attached to one stream: a stream the program created",
            ))
        }
        attach::SINGLE => Attached::Stream(stream),
        _ => return Err(Error::Code(code::INVALID_VALUE)),
    };
    super::attach(device, start, attached)
}

/// `CU_DEVICE_CPU`: the host, as a prefetch's destination.
const DEVICE_CPU: c_int = -1;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    kind: c_int,
    id: c_int,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: c_int = 1;

/// A prefetch: to a device, its managed memory goes there now (as its next work would send it);
/// to the host, it comes back at the next synchronization, as the host may not read it before.
fn prefetch(address: u64, len: usize, to_device: Option<c_int>, stream: usize) -> CuResult<()> {
    let (_, device) = managed_range(address, len)?;
    device_of_stream(stream)?;
    graph::refuse_if_capturing(stream, "a prefetch")?;
    match to_device {
        Some(d) => {
            state::shim()?.device(d)?;
            device_work(&[Reach::Memory(device, address)], || Ok(()))
        }
        None => Ok(()),
    }
}

#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync(address: u64, len: usize, device: c_int, stream: usize) -> u32 {
    guard("cuMemPrefetchAsync", || prefetch(address, len, (device != DEVICE_CPU).then_some(device), stream))
}

#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync_v2(
    address: u64,
    len: usize,
    location: MemLocation,
    _flags: c_uint,
    stream: usize,
) -> u32 {
    guard("cuMemPrefetchAsync", || {
        prefetch(address, len, (location.kind == LOCATION_DEVICE).then_some(location.id), stream)
    })
}

/// Advice about managed memory: checked and taken as the hint it is (where the bytes live is
/// the shim's business, by the rule at the top of this module).
#[no_mangle]
pub extern "C" fn cuMemAdvise(address: u64, len: usize, _advice: c_int, _device: c_int) -> u32 {
    guard("cuMemAdvise", || managed_range(address, len).map(drop))
}

#[no_mangle]
pub extern "C" fn cuMemAdvise_v2(address: u64, len: usize, _advice: c_int, _location: MemLocation) -> u32 {
    guard("cuMemAdvise", || managed_range(address, len).map(drop))
}

//! Virtual memory management (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, ...: backend protocol 14), which PyTorch's expandable segments, vLLM's
//! sleep mode and NCCL allocate with: memory that grows in place, one tensor across several
//! pieces of physical memory.
//!
//! A reserved range is a buffer of the session (the backend reserves it on the GPU), entered in
//! the program's memory table as an allocation of its whole size: copies, memsets and kernels
//! reach it by address as they reach any allocation, across the pieces mapped side by side, and
//! the backend refuses by name what touches bytes that are not mapped. Physical memory lives on
//! the backend; its handle here is a record of the program's (which remote memory, its
//! properties, how many references `cuMemRetainAllocationHandle` added). What is kept here:
//! each range's mappings, for `cuMemUnmap`'s and `cuMemSetAccess`'s checks and `cuMemGetAccess`.
//!
//! Physical memory is shared with the job's other processes by POSIX descriptors
//! ([`shareable`]). Not served: access from another device of the program (a GPU behind another
//! backend cannot reach this one's memory), sparse arrays (`cuMemMapArrayAsync`). The backend
//! maps memory readable and writable at once; `cuMemSetAccess` is checked and recorded here.

pub mod shareable;

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, Mutex};

use ac_frontend::{DeviceBuffer, PhysicalMemory};

use crate::context::current_device;
use crate::error::{code, served, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Allocation, Registry};

/// The granularity of sizes and offsets, as NVIDIA's driver reports it for its GPUs.
pub const GRANULARITY: usize = 2 << 20;
/// The host page, of which a reserved range's size is a multiple.
const HOST_PAGE: usize = 4096;

/// `CUmemAllocationProp`: 32 bytes, kept whole for `cuMemGetAllocationPropertiesFromHandle`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AllocationProp {
    kind: u32,
    handle_types: u32,
    location: Location,
    win32_metadata: *mut c_void,
    flags: [u8; 8],
}

// SAFETY: the Windows metadata pointer is kept as the program gave it, never dereferenced.
unsafe impl Send for AllocationProp {}
unsafe impl Sync for AllocationProp {}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    kind: u32,
    id: i32,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AccessDesc {
    location: Location,
    flags: u32,
}

const PINNED: u32 = 1;
const ON_DEVICE: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_NONE`, `_READ`, `_READWRITE`.
const ACCESS_FLAGS: [u32; 3] = [0, 1, 3];

/// Physical memory the program created: a `CUmemGenericAllocationHandle`.
#[derive(Debug)]
pub struct Physical {
    device: usize,
    prop: AllocationProp,
    memory: PhysicalMemory,
    /// `cuMemCreate`'s reference and `cuMemRetainAllocationHandle`'s: the handle goes at 0.
    /// Held while the handle enters or leaves the registry, so that a release and a retain at
    /// once leave the two in agreement.
    references: Mutex<u32>,
}

/// One mapping of a range.
#[derive(Debug)]
struct Mapping {
    len: u64,
    physical: Arc<Physical>,
    /// `CUmemAccess_flags` as last set (0 until `cuMemSetAccess`).
    access: u32,
}

/// A reserved range.
#[derive(Debug)]
struct Range {
    size: u64,
    buffer: Arc<DeviceBuffer<u8>>,
    mappings: BTreeMap<u64, Mapping>,
}

/// Ranges by (device, start); physical memory by handle.
#[derive(Default)]
struct Vmm {
    ranges: Mutex<BTreeMap<(usize, u64), Range>>,
    physical: Registry<Physical>,
}

static VMM: LazyLock<Vmm> = LazyLock::new(Vmm::default);

fn ranges() -> std::sync::MutexGuard<'static, BTreeMap<(usize, u64), Range>> {
    VMM.ranges.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `device`'s backend serves virtual memory management (`CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`):
/// a CUDA GPU behind protocol 14 whose session has a process of its own. Asked once a device, by
/// reserving a piece of address space (given back at once): NCCL and PyTorch read the attribute
/// to choose their allocator, and must not be told yes by a backend that refuses.
pub fn supported(device: usize) -> bool {
    static KNOWN: Mutex<BTreeMap<usize, bool>> = Mutex::new(BTreeMap::new());
    if let Some(&known) = KNOWN.lock().unwrap_or_else(|p| p.into_inner()).get(&device) {
        return known;
    }
    let probe = || -> Option<bool> {
        let shim = state::shim().ok()?;
        let d = shim.devices.get(device)?;
        if d.info.compute_capability.is_none() || d.acc.protocol() < 14 {
            return Some(false);
        }
        Some(shim.block_on(d.acc.reserve_range(GRANULARITY as u64, 0)).is_ok())
    };
    let answer = probe().unwrap_or(false);
    KNOWN.lock().unwrap_or_else(|p| p.into_inner()).insert(device, answer);
    answer
}

/// Whether `address` is the start of a reserved range of `device` (which `cuMemFree` refuses).
pub fn is_range(device: usize, address: u64) -> bool {
    ranges().contains_key(&(device, address))
}

/// The range of `device` holding `len` bytes at `address`: its start.
fn range_holding(ranges: &BTreeMap<(usize, u64), Range>, device: usize, address: u64, len: u64) -> CuResult<u64> {
    let found = ranges.range((device, 0)..=(device, address)).next_back();
    match found {
        Some((&(_, start), range)) if address.checked_add(len).is_some_and(|end| end <= start + range.size) => {
            Ok(start)
        }
        _ => Err(Error::said(code::INVALID_VALUE, format!("{len} bytes at {address:#x} lie in no reserved range"))),
    }
}

/// The device and start of the range holding `len` bytes at `address` (the current device's
/// ranges first: two remote GPUs may hand out the same addresses).
fn find_range(address: u64, len: u64) -> CuResult<(usize, u64)> {
    let ranges = ranges();
    let current = current_device().ok();
    let devices = current.into_iter().chain((0..state::shim()?.devices.len()).filter(|&d| Some(d) != current));
    let mut last = Error::Code(code::INVALID_VALUE);
    for device in devices {
        match range_holding(&ranges, device, address, len) {
            Ok(start) => return Ok((device, start)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The mapping holding `address`: its physical memory and access, looked up under one lock.
fn mapping_at(address: u64) -> CuResult<MappedAt> {
    let (device, start) = find_range(address, 1)?;
    let ranges = ranges();
    let range = ranges.get(&(device, start)).ok_or_else(|| gone(address))?;
    match range.mappings.range(..=address - start).next_back() {
        Some((&at, m)) if address - start < at + m.len => {
            Ok(MappedAt { device, physical: m.physical.clone(), access: m.access })
        }
        _ => Err(Error::said(code::INVALID_VALUE, format!("nothing is mapped at {address:#x}"))),
    }
}

/// What [`mapping_at`] finds.
struct MappedAt {
    device: usize,
    physical: Arc<Physical>,
    access: u32,
}

/// The buffer of the range of `device` at `start` (freed by another thread meanwhile: an error).
fn buffer_of(device: usize, start: u64) -> CuResult<Arc<DeviceBuffer<u8>>> {
    ranges().get(&(device, start)).map(|r| r.buffer.clone()).ok_or_else(|| gone(start))
}

/// The error for a range freed by another thread between two steps of a call.
fn gone(address: u64) -> Error {
    Error::said(code::INVALID_VALUE, format!("the range holding {address:#x} was freed meanwhile"))
}

/// The device a `CUmemAllocationProp` places memory on, checked as the driver checks it.
unsafe fn device_of_prop(prop: *const AllocationProp) -> CuResult<(usize, AllocationProp)> {
    let prop = prop.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    if prop.kind != PINNED || prop.location.kind != ON_DEVICE {
        let why =
            "only pinned memory on a device (CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE) is served";
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    let device = usize::try_from(prop.location.id).map_err(|_| Error::Code(code::INVALID_DEVICE))?;
    if device >= state::shim()?.devices.len() {
        return Err(Error::Code(code::INVALID_DEVICE));
    }
    Ok((device, *prop))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const AllocationProp,
    _option: u32,
) -> u32 {
    guard("cuMemGetAllocationGranularity", || {
        device_of_prop(prop)?;
        put(granularity, GRANULARITY)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    _hint: u64,
    flags: u64,
) -> u32 {
    guard("cuMemAddressReserve", || {
        // cuda.h asks a multiple of the host page; a mapping's offset and size, of the granularity.
        if ptr.is_null() || flags != 0 || size == 0 || !size.is_multiple_of(HOST_PAGE) {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let shim = state::shim()?;
        let device = current_device()?;
        let reserved = shim.devices[device].acc.reserve_range(size as u64, alignment as u64);
        let (buffer, start) = shim.block_on(reserved).map_err(served)?;
        let buffer = Arc::new(buffer);
        let allocation =
            Allocation { device, size: size as u64, buffer: buffer.clone(), variable_of: None, context: None };
        // The range first: `cuMemFree` asks it, and must never find the allocation alone.
        ranges().insert((device, start), Range { size: size as u64, buffer, mappings: BTreeMap::new() });
        shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, start), allocation);
        put(ptr, start)
    })
}

#[no_mangle]
pub extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    guard("cuMemAddressFree", || {
        let (device, start) = find_range(ptr, 0)?;
        let removed = {
            let mut ranges = ranges();
            match ranges.get(&(device, start)) {
                Some(range) if start == ptr && range.size == size as u64 => ranges.remove(&(device, start)),
                _ => None,
            }
        };
        if removed.is_none() {
            let why = format!("{size} bytes at {ptr:#x} are not a whole reserved range");
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        // Dropping the last reference to its buffer frees it remotely, unmapping what is mapped.
        // (No call holds the ranges' lock and the memory's at once.)
        state::shim()?.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(device, start));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocationProp, flags: u64) -> u32 {
    guard("cuMemCreate", || {
        let (device, prop) = device_of_prop(prop)?;
        if handle.is_null() || flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let shim = state::shim()?;
        let memory = shim.block_on(shim.devices[device].acc.create_physical(size as u64)).map_err(served)?;
        let physical = Physical { device, prop, memory, references: Mutex::new(1) };
        put(handle, VMM.physical.insert(physical) as u64)
    })
}

#[no_mangle]
pub extern "C" fn cuMemRelease(handle: u64) -> u32 {
    guard("cuMemRelease", || {
        let physical = VMM.physical.get(handle as usize)?;
        let mut references = physical.references.lock().unwrap_or_else(|p| p.into_inner());
        if *references == 0 {
            return Err(Error::Code(code::INVALID_HANDLE)); // released by another thread meanwhile
        }
        *references -= 1;
        if *references == 0 {
            // The mappings hold the memory until they go.
            VMM.physical.remove(handle as usize)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(handle: *mut u64, address: *mut c_void) -> u32 {
    guard("cuMemRetainAllocationHandle", || {
        let address = address as u64;
        put(handle, retain(&mapping_at(address)?.physical))
    })
}

/// One more reference to `physical`'s handle (`cuMemRetainAllocationHandle`, an import in the
/// process that exported it): the handle.
fn retain(physical: &Arc<Physical>) -> u64 {
    let mut references = physical.references.lock().unwrap_or_else(|p| p.into_inner());
    // A handle released since lives on in its mappings: retaining it makes it a handle again.
    if *references == 0 {
        VMM.physical.reinsert(physical.clone());
    }
    *references += 1;
    Registry::handle_of(physical) as u64
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(prop: *mut AllocationProp, handle: u64) -> u32 {
    guard("cuMemGetAllocationPropertiesFromHandle", || put(prop, VMM.physical.get(handle as usize)?.prop))
}

#[no_mangle]
pub extern "C" fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) -> u32 {
    guard("cuMemMap", || {
        let physical = VMM.physical.get(handle as usize)?;
        if offset != 0 || flags != 0 || size == 0 || size as u64 > physical.memory.len() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let (device, start) = find_range(ptr, size as u64)?;
        if device != physical.device {
            let why = format!("the range at {ptr:#x} is device {device}'s, the physical memory device {}'s: remote GPUs cannot map each other's memory", physical.device);
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        let buffer = buffer_of(device, start)?;
        let shim = state::shim()?;
        let at = ptr - start;
        shim.block_on(shim.devices[device].acc.map_physical(&buffer, at, size as u64, &physical.memory))
            .map_err(served)?;
        let mapping = Mapping { len: size as u64, physical, access: 0 };
        if let Some(range) = ranges().get_mut(&(device, start)) {
            range.mappings.insert(at, mapping);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    guard("cuMemUnmap", || {
        let (device, start) = find_range(ptr, size as u64)?;
        let buffer = buffer_of(device, start)?;
        let shim = state::shim()?;
        shim.block_on(shim.devices[device].acc.unmap_range(&buffer, ptr - start, size as u64))?;
        // The backend checked that whole mappings lie in the span; they go here too.
        let (from, to) = (ptr - start, ptr - start + size as u64);
        if let Some(range) = ranges().get_mut(&(device, start)) {
            range.mappings.retain(|&at, m| at + m.len <= from || at >= to);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) -> u32 {
    guard("cuMemSetAccess", || {
        if desc.is_null() || count == 0 || size == 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let (device, start) = find_range(ptr, size as u64)?;
        let descs = std::slice::from_raw_parts(desc, count);
        let mut access = None;
        for d in descs {
            if d.location.kind != ON_DEVICE || !ACCESS_FLAGS.contains(&d.flags) {
                return Err(Error::Code(code::INVALID_VALUE));
            }
            if usize::try_from(d.location.id).ok() != Some(device) {
                let why = format!(
                    "device {} cannot reach device {device}'s memory: they are GPUs of different hosts",
                    d.location.id
                );
                return Err(Error::said(code::NOT_SUPPORTED, why));
            }
            access = Some(d.flags);
        }
        let mut ranges = ranges();
        let range = ranges.get_mut(&(device, start)).ok_or(Error::Code(code::INVALID_VALUE))?;
        let (from, to) = (ptr - start, ptr - start + size as u64);
        covered_whole(&range.mappings, from, to)?;
        for (_, m) in range.mappings.range_mut(from..to) {
            m.access = access.unwrap_or(m.access);
        }
        Ok(())
    })
}

/// Refuses a span that whole mappings, side by side, do not cover exactly.
fn covered_whole(mappings: &BTreeMap<u64, Mapping>, from: u64, to: u64) -> CuResult<()> {
    let mut at = from;
    for (&start, m) in mappings.range(from..to) {
        if start != at || start + m.len > to {
            break;
        }
        at = start + m.len;
    }
    if at != to {
        let why = format!("bytes {from}..{to} of the range are not whole mappings side by side (covered to {at})");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAccess(flags: *mut u64, location: *const Location, ptr: u64) -> u32 {
    guard("cuMemGetAccess", || {
        let location = location.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        if location.kind != ON_DEVICE {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let MappedAt { device, access, .. } = mapping_at(ptr)?;
        // Another device of the program reaches nothing here.
        put(flags, if usize::try_from(location.id).ok() == Some(device) { u64::from(access) } else { 0 })
    })
}

//! Virtual memory management: reserved ranges (`cuMemAddressReserve`), physical memory
//! (`cuMemCreate`) and mappings between them (`cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`).
//!
//! Physical memory is a memory file (`memfd`) holding stale bytes, as a GPU's does; a range is
//! host address space of its size, anonymous and lazily backed, into which a mapping places the
//! file's pages (`mmap` at a fixed address), so that mappings side by side are one run of bytes
//! and one piece of physical memory mapped twice shows the same bytes twice. A range is an
//! allocation of its context (device memory by address, as any), whose bytes may be touched
//! only where mapped and made accessible: a copy, memset or fixture kernel that reaches past
//! that faults (a builtin kernel's pointer is checked at its first byte only: it reaches memory
//! through a host pointer, and a range has no guard bytes after it). Freeing a range that still has mappings, or releasing or unmapping what is not
//! there, is refused and recorded as a violation, so that the caller's order is checked.
// As in lib.rs: C functions taking raw pointers from their caller, as the driver does.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};

use crate::space::{Mapped, Physical, Space};
use crate::state::{Allocation, Driver, Result, Storage, DEVICES, DEVICE_MEMORY, STALE_BYTE};
use crate::{code, driver, with_context};

/// The granularity of sizes, offsets and alignments, as NVIDIA's driver reports for its GPUs.
pub const GRANULARITY: usize = 2 << 20;

/// `CUmemAllocationProp`, as far as it is read here.
#[repr(C)]
pub struct AllocationProp {
    kind: u32,
    handle_types: u32,
    location: Location,
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Location {
    kind: u32,
    id: i32,
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    location: Location,
    flags: u32,
}

const PINNED: u32 = 1;
const ON_DEVICE: u32 = 1;
const PROT_NONE: u32 = 0;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, a bit of `CUmemAllocationProp::requestedHandleTypes`
/// (`crate::shareable` exports memory created asking for it).
pub const POSIX_DESCRIPTOR: u32 = 1;

impl Driver {
    /// Physical memory of `device` that is not gone, bytes.
    pub fn physical_used(&self, device: i32) -> u64 {
        // Imported memory is its exporter's, counted there.
        self.physical.values().filter(|p| p.device == device && !p.imported).map(|p| p.len as u64).sum()
    }

    /// The range of `context` holding `[address, address + len)`: its start and the space.
    fn range_of(&mut self, address: u64, len: usize) -> Result<(u64, &mut Space)> {
        let (&base, a) = self.memory.range_mut(..=address).next_back().ok_or(code::INVALID_VALUE)?;
        let Storage::Range(space) = &mut a.bytes else { return Err(code::INVALID_VALUE) };
        let offset = (address - base) as usize;
        match offset.checked_add(len) {
            Some(end) if end <= space.len => Ok((base, space)),
            _ => Err(code::INVALID_VALUE),
        }
    }

    /// One mapping fewer of `physical`; it goes once released and unmapped everywhere.
    fn unmapped(&mut self, physical: u64) {
        if let Some(p) = self.physical.get_mut(&physical) {
            p.mappings -= 1;
            if p.released && p.mappings == 0 {
                self.physical.remove(&physical);
            }
        }
    }

    /// Lets the mappings of `context`'s ranges go (the context is being destroyed).
    pub fn forget_ranges(&mut self, context: u64) {
        let physical: Vec<u64> = self
            .memory
            .values()
            .filter(|a| a.context == context)
            .filter_map(|a| match &a.bytes {
                Storage::Range(space) => Some(space.mappings.values().map(|m| m.physical).collect::<Vec<_>>()),
                Storage::Heap(_) | Storage::Shared(_) => None,
            })
            .flatten()
            .collect();
        for p in physical {
            self.unmapped(p);
        }
    }
}

fn granular(n: usize) -> bool {
    n > 0 && n.is_multiple_of(GRANULARITY)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    _hint: u64,
    flags: u64,
) -> u32 {
    with_context("cuMemAddressReserve", |d, context| {
        // A multiple of the host page, as cuda.h asks; mappings in it, of the granularity.
        let pages = size > 0 && size.is_multiple_of(4096);
        if ptr.is_null() || flags != 0 || !pages || (alignment != 0 && !alignment.is_power_of_two()) {
            return Err(code::INVALID_VALUE);
        }
        let space = Space::new(size).ok_or(code::OUT_OF_MEMORY)?;
        let address = d.place_range(size, alignment.max(GRANULARITY));
        d.memory.insert(address, Allocation { context, bytes: Storage::Range(space), users: 0 });
        *ptr = address;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    let mut d = driver();
    let range = d.memory.get(&ptr).and_then(|a| match &a.bytes {
        Storage::Range(space) => Some((space.len, space.mappings.len(), a.users)),
        Storage::Heap(_) | Storage::Shared(_) => None,
    });
    match range {
        Some((len, 0, 0)) if len == size => {
            d.memory.remove(&ptr);
            code::SUCCESS
        }
        Some((len, mapped, users)) if len == size => {
            d.violation(format!("range {ptr:#x} freed with {mapped} mapping(s) in it, {users} kernel(s) using it"));
            code::INVALID_VALUE
        }
        _ => {
            d.violation(format!("cuMemAddressFree of {size} bytes at {ptr:#x}, which is no reserved range"));
            code::INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocationProp, flags: u64) -> u32 {
    with_context("cuMemCreate", |d, _| {
        if handle.is_null() || prop.is_null() || flags != 0 || !granular(size) {
            return Err(code::INVALID_VALUE);
        }
        let prop = &*prop;
        if prop.kind != PINNED || prop.location.kind != ON_DEVICE {
            return Err(code::INVALID_VALUE);
        }
        let device = prop.location.id;
        if !(0..DEVICES).contains(&device) {
            return Err(code::INVALID_DEVICE);
        }
        if d.used(device) + size as u64 > DEVICE_MEMORY {
            return Err(code::OUT_OF_MEMORY);
        }
        let file = stale_file(size).ok_or(code::OUT_OF_MEMORY)?;
        let id = d.handle();
        let exportable = prop.handle_types & POSIX_DESCRIPTOR != 0;
        let physical = Physical { device, len: size, file, released: false, mappings: 0, exportable, imported: false };
        d.physical.insert(id, physical);
        *handle = id;
        Ok(())
    })
}

/// A memory file of `len` stale bytes.
fn stale_file(len: usize) -> Option<OwnedFd> {
    let file = crate::space::memory_file(c"cuda-standin-physical", len)?;
    let fd = file.as_raw_fd();
    let stale = vec![STALE_BYTE; GRANULARITY];
    for at in (0..len).step_by(GRANULARITY) {
        // SAFETY: `stale` holds GRANULARITY bytes.
        let wrote = unsafe { libc::pwrite(fd, stale.as_ptr().cast(), GRANULARITY, at as libc::off_t) };
        if wrote != GRANULARITY as isize {
            return None;
        }
    }
    Some(file)
}

#[no_mangle]
pub extern "C" fn cuMemRelease(handle: u64) -> u32 {
    let mut d = driver();
    match d.physical.get_mut(&handle) {
        Some(p) if !p.released => {
            p.released = true;
            if p.mappings == 0 {
                d.physical.remove(&handle);
            }
            code::SUCCESS
        }
        _ => {
            d.violation(format!("cuMemRelease of {handle:#x}, which is no live physical memory"));
            code::INVALID_VALUE
        }
    }
}

#[no_mangle]
pub extern "C" fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) -> u32 {
    with_context("cuMemMap", |d, context| {
        if offset != 0 || flags != 0 || !granular(size) {
            return Err(code::INVALID_VALUE);
        }
        let file = match d.physical.get(&handle) {
            Some(p) if !p.released && size <= p.len => p.file.try_clone().map_err(|_| code::OUT_OF_MEMORY)?,
            _ => return Err(code::INVALID_HANDLE),
        };
        let owner = d.memory.range(..=ptr).next_back().map(|(_, a)| a.context);
        if owner != Some(context) {
            d.violation(format!("cuMemMap at {ptr:#x}, outside the current context's ranges"));
            return Err(code::INVALID_VALUE);
        }
        let (base, space) = d.range_of(ptr, size)?;
        let at = (ptr - base) as usize;
        let taken = space.mappings.range(..at + size).next_back().is_some_and(|(&s, m)| s + m.len > at);
        if !at.is_multiple_of(GRANULARITY) || taken {
            return Err(code::INVALID_VALUE);
        }
        space.place(at, size, &file);
        space.mappings.insert(at, Mapped { len: size, physical: handle, accessible: false });
        d.physical.get_mut(&handle).expect("checked above").mappings += 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) -> u32 {
    with_context("cuMemSetAccess", |d, context| {
        if desc.is_null() || count == 0 {
            return Err(code::INVALID_VALUE);
        }
        let device = d.usable(context)?.device;
        let descs = std::slice::from_raw_parts(desc, count);
        let Some(mine) = descs.iter().find(|a| a.location.kind == ON_DEVICE && a.location.id == device) else {
            return Ok(()); // another device's access: not this stand-in's to model
        };
        let accessible = mine.flags != PROT_NONE;
        let (base, space) = d.range_of(ptr, size)?;
        let (at, end) = ((ptr - base) as usize, (ptr - base) as usize + size);
        // The whole span must be mapped, by mappings that lie inside it.
        let inside: Vec<usize> = space.mappings.range(at..end).map(|(&s, _)| s).collect();
        let mut covered = at;
        for s in &inside {
            let m = space.mappings[s];
            if *s != covered || s + m.len > end {
                return Err(code::INVALID_VALUE);
            }
            covered = s + m.len;
        }
        if covered != end {
            return Err(code::INVALID_VALUE);
        }
        for s in inside {
            space.mappings.get_mut(&s).expect("listed above").accessible = accessible;
        }
        Ok(())
    })
}

/// Read when the stand-in is first asked to unmap: milliseconds each unmap takes before it is
/// done (the thread sleeps first, holding nothing), so that a test sees whether the caller waits
/// for its unmap before it maps the same bytes again (a map meanwhile finds them mapped).
const UNMAP_DELAY_MS: &str = "CUDA_STANDIN_UNMAP_DELAY_MS";

static UNMAP_DELAY: std::sync::LazyLock<Option<std::time::Duration>> = std::sync::LazyLock::new(|| {
    let ms = std::env::var(UNMAP_DELAY_MS).ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
});

#[no_mangle]
pub extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    if let Some(delay) = *UNMAP_DELAY {
        std::thread::sleep(delay);
    }
    let mut d = driver();
    let users = d.memory.range(..=ptr).next_back().map_or(0, |(_, a)| a.users);
    match unmap_whole(&mut d, ptr, size) {
        Ok(unmapped) => {
            if users > 0 {
                d.violation(format!("memory at {ptr:#x} unmapped while a kernel still uses it"));
            }
            for m in unmapped {
                d.unmapped(m.physical);
            }
            code::SUCCESS
        }
        Err(why) => {
            d.violation(format!("cuMemUnmap of {size} bytes at {ptr:#x}: {why}"));
            code::INVALID_VALUE
        }
    }
}

/// Unmaps the mappings within `size` bytes at `ptr`, which must be whole ones: what went.
fn unmap_whole(d: &mut Driver, ptr: u64, size: usize) -> std::result::Result<Vec<Mapped>, &'static str> {
    let (base, space) = d.range_of(ptr, size).map_err(|_| "outside every range")?;
    let (at, end) = ((ptr - base) as usize, (ptr - base) as usize + size);
    let inside: Vec<(usize, Mapped)> =
        space.mappings.range(..end).filter(|(&s, m)| s + m.len > at).map(|(&s, m)| (s, *m)).collect();
    if inside.is_empty() || inside.iter().any(|&(s, m)| s < at || s + m.len > end) {
        return Err("not whole mappings");
    }
    for &(s, m) in &inside {
        space.clear(s, m.len);
        space.mappings.remove(&s);
    }
    Ok(inside.into_iter().map(|(_, m)| m).collect())
}

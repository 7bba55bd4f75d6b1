//! Managed memory (`cuMemAllocManaged`, the runtime's `cudaMallocManaged`): one address that the
//! program's host code and its kernels both use.
//!
//! The device's memory is remote, so a managed allocation is two copies of the same bytes: the
//! remote allocation, and host memory mapped at the same address (the remote one's, rounded up
//! to a page), so that a pointer means the same bytes on both sides. The devices answer
//! `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` 0: as on a GPU without concurrent access, the
//! host may touch managed memory only while the device's work that may reach it is done, and
//! that rule is what keeps the two copies one. Each allocation is, at any time, the host's or
//! the device's:
//! - device work that may reach an allocation of the host's sends it first ([`device_work`]): a
//!   kernel on a stream reaches those attached to every stream (the default) and those attached
//!   to that stream (`CU_MEM_ATTACH_SINGLE`), never those attached to the host; a copy or memset
//!   reaches the allocation it names;
//! - a call after which that work is done brings the device's back ([`settle`]): a stream's
//!   synchronization those attached to it, and, after waiting for all of the device's work, the
//!   rest (a device's synchronization, an event's, a synchronous copy or memset; a stream's too
//!   when an allocation attached to every stream is the device's).
//!
//! So a program that writes its data, launches, synchronizes and reads costs one copy each way a
//! synchronization; threads that attach their allocations to their own streams do not wait for
//! each other's; a program without managed memory pays nothing.
//!
//! `__managed__` variables are regions too, over the module's memory ([`variables`]). Not
//! served: range attributes.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ac_frontend::DeviceBuffer;

use crate::error::CuResult;
use crate::state::{self, Allocation, Shim};

pub mod calls;
pub mod variables;

/// What a managed allocation is attached to (`CUmemAttach_flags`), so which kernels reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attached {
    /// Every stream's kernels (`CU_MEM_ATTACH_GLOBAL`).
    Global,
    /// None: the host's alone (`CU_MEM_ATTACH_HOST`).
    Host,
    /// The kernels of this stream (by the program's handle) alone (`CU_MEM_ATTACH_SINGLE`).
    Stream(usize),
}

/// One managed allocation.
#[derive(Debug)]
struct Region {
    /// Bytes the program asked for.
    bytes: u64,
    /// Bytes mapped on the host (whole pages), copied each way; a variable's own bytes alone.
    mapped: usize,
    /// The remote allocation's start (the key of its [`Allocation`]): the managed address is
    /// this rounded up to a page.
    key: u64,
    /// The remote allocation.
    buffer: Arc<DeviceBuffer<u8>>,
    /// Which kernels reach it.
    attached: Attached,
    /// What it was allocated attached to (every stream or the host): its attachment again when
    /// the stream it was attached to is destroyed, as CUDA says.
    allocated: Attached,
    /// The device has the current bytes (work that may reach them was sent since they were last
    /// brought back); otherwise the host has them.
    on_device: bool,
    /// The image (module or library handle) whose `__managed__` variable this is: never freed
    /// by `cuMemFree`, gone with the image. `None`: an allocation.
    variable_of: Option<usize>,
}

impl Region {
    /// Sends the host's bytes at `start` to the device.
    fn send(&mut self, shim: &Shim, start: u64) -> CuResult<()> {
        // SAFETY: the region's host mapping, `mapped` bytes at `start`.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, self.mapped) };
        shim.block_on(self.buffer.copy_from_host_at((start - self.key) as usize, bytes))?;
        self.on_device = true;
        Ok(())
    }

    /// Brings the device's bytes back to the host at `start` (its work on them done).
    fn bring_back(&mut self, shim: &Shim, start: u64) -> CuResult<()> {
        // SAFETY: the region's host mapping, `mapped` bytes at `start`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, self.mapped) };
        shim.block_on(self.buffer.copy_to_host_at((start - self.key) as usize, bytes))?;
        self.on_device = false;
        Ok(())
    }
}

/// Every device's managed allocations, by device and address.
#[derive(Debug, Default)]
struct Table {
    devices: HashMap<usize, BTreeMap<u64, Region>>,
    /// The host pages mapped for `__managed__` variables, and how many variables lie on each.
    variable_pages: HashMap<u64, usize>,
}

/// The process's managed allocations.
fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The host's page size.
pub fn page() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Maps `len` bytes of zeroed host memory at exactly `address`, unless something is there
/// already (or the kernel placed it elsewhere: one without `MAP_FIXED_NOREPLACE` takes it as a
/// hint).
pub fn map_at(address: u64, len: usize) -> bool {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: a new anonymous mapping that replaces nothing.
    let at = unsafe { libc::mmap(address as *mut c_void, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if at == libc::MAP_FAILED {
        return false;
    }
    if at as u64 != address {
        // SAFETY: the mapping just made, elsewhere.
        unsafe { libc::munmap(at, len) };
        return false;
    }
    true
}

/// Where a new managed allocation went: the remote allocation at `key` on `device`, `mapped`
/// bytes of host memory at `start` (its address).
#[derive(Debug, Clone, Copy)]
pub struct Placed {
    /// The device.
    pub device: usize,
    /// The managed address (mapped on the host).
    pub start: u64,
    /// The remote allocation's start.
    pub key: u64,
    /// Bytes the program asked for.
    pub bytes: u64,
    /// Bytes mapped on the host at `start`.
    pub mapped: usize,
    /// What it is attached to.
    pub attached: Attached,
}

/// Enters a placed managed allocation: its remote buffer into the program's memory (so that
/// copies, kernels and frees find it) and its region here, the host's.
pub fn insert(shim: &Shim, placed: Placed, buffer: DeviceBuffer<u8>) {
    let Placed { device, start, key, bytes, mapped, attached } = placed;
    let buffer = Arc::new(buffer);
    let size = start - key + mapped as u64;
    let allocation = Allocation { device, size, buffer: buffer.clone(), variable_of: None, context: None };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, key), allocation);
    let region =
        Region { bytes, mapped, key, buffer, attached, allocated: attached, on_device: false, variable_of: None };
    table().devices.entry(device).or_default().insert(start, region);
}

/// Frees the managed memory at `address` on `device`: `None` if that is not the start of one of
/// its managed allocations.
pub fn free(device: usize, address: u64) -> Option<CuResult<()>> {
    let shim = state::shim().ok()?;
    let mut table = table();
    let regions = table.devices.get_mut(&device)?;
    regions.get(&address).filter(|r| r.variable_of.is_none())?;
    let region = regions.remove(&address).expect("looked up above");
    drop(table);
    // SAFETY: the mapping `alloc` made for this region, which nothing refers to any longer.
    unsafe { libc::munmap(address as *mut c_void, region.mapped) };
    // Dropping the last reference frees the remote allocation.
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(device, region.key));
    Some(Ok(()))
}

/// The managed allocation whose host memory holds `address`: its start, the bytes asked for,
/// and its device (one at most: each is mapped at its own host address).
pub fn range(address: u64) -> Option<(u64, u64, usize)> {
    // A forked child has no session: never wait on a lock its parent's threads may have held.
    state::shim().ok()?;
    let devices: Vec<usize> = table().devices.keys().copied().collect();
    devices.into_iter().find_map(|device| range_on(device, address))
}

/// The managed allocation of `device` holding `address`: its start, the bytes asked for, and
/// the device.
pub fn range_on(device: usize, address: u64) -> Option<(u64, u64, usize)> {
    let table = table();
    let (&start, region) = table.devices.get(&device)?.range(..=address).next_back()?;
    (address < start + region.bytes).then_some((start, region.bytes, device))
}

/// What device work reaches: a kernel (or a library's) on a device's stream, which may follow
/// any pointer to memory attached to every stream or to its own, or the memory at one address.
#[derive(Debug, Clone, Copy)]
pub enum Reach {
    /// A kernel on this device and stream (the program's handle).
    Kernel(usize, usize),
    /// Memory at this address of this device.
    Memory(usize, u64),
}

impl Reach {
    /// The device it reaches.
    pub fn device(self) -> usize {
        match self {
            Reach::Kernel(device, _) | Reach::Memory(device, _) => device,
        }
    }

    /// Whether it reaches the region at `start`.
    fn reaches(self, start: u64, region: &Region) -> bool {
        match self {
            Reach::Kernel(_, stream) => {
                matches!(region.attached, Attached::Global) || region.attached == Attached::Stream(stream)
            }
            Reach::Memory(_, address) => (start..start + region.mapped as u64).contains(&address),
        }
    }
}

/// Runs `work`, device work that reaches `reach`: the host's allocations that it may reach go to
/// the device first. The table stays locked while `work` is sent, so that no [`settle`] brings
/// the bytes back between the two.
pub fn device_work<T>(reach: &[Reach], work: impl FnOnce() -> CuResult<T>) -> CuResult<T> {
    let shim = state::shim()?;
    let mut table = table();
    let mut reached = false;
    for &r in reach {
        let Some(regions) = table.devices.get_mut(&r.device()) else { continue };
        for (&start, region) in regions.iter_mut().filter(|(&start, region)| r.reaches(start, region)) {
            reached = true;
            if !region.on_device {
                region.send(shim, start)?;
            }
        }
    }
    if !reached {
        drop(table);
    }
    work()
}

/// A synchronizing call returned on `device`, of one stream (its handle and its session stream)
/// or of all its work. Brings back the allocations that work reached: with a stream, those
/// attached to it, once the stream's work is done; the others once all of the device's work is
/// done. Both are waited for here, with the table locked, so that no work another thread sends
/// meanwhile is still running on what comes back.
pub fn settle(device: usize, stream: Option<(usize, &ac_frontend::Stream)>) -> CuResult<()> {
    let shim = state::shim()?;
    let mut table = table();
    let Some(regions) = table.devices.get_mut(&device) else { return Ok(()) };
    let own = |region: &Region| stream.is_some_and(|(s, _)| region.attached == Attached::Stream(s));
    let whole_device = regions.values().any(|r| r.on_device && !matches!(r.attached, Attached::Stream(_)))
        || (stream.is_none() && regions.values().any(|r| r.on_device));
    if whole_device {
        shim.block_on(shim.devices[device].acc.synchronize())?;
    } else if let Some((_, stream)) = stream.filter(|_| regions.values().any(|r| r.on_device && own(r))) {
        shim.block_on(stream.synchronize())?;
    }
    for (&start, region) in regions.iter_mut().filter(|(_, r)| r.on_device && (whole_device || own(r))) {
        region.bring_back(shim, start)?;
    }
    Ok(())
}

/// The shim is about to read or write host memory at `address` for the program: if that is
/// managed memory the device has, all of the device's work is waited for and it comes back.
pub fn settle_host(address: u64) -> CuResult<()> {
    match range(address) {
        Some((_, _, device)) => settle(device, None),
        None => Ok(()),
    }
}

/// Stream `handle` of `device` is destroyed: its allocations go back to what they were allocated
/// attached to (a later stream may get the same handle).
pub fn stream_destroyed(device: usize, handle: usize) {
    if let Some(regions) = table().devices.get_mut(&device) {
        for region in regions.values_mut().filter(|r| r.attached == Attached::Stream(handle)) {
            region.attached = region.allocated;
        }
    }
}

/// Attaches the managed allocation at `start` anew: whatever had it, the host has it after this
/// (the device's work waited for), and the kernels that reach it are `attached`'s.
pub fn attach(device: usize, start: u64, attached: Attached) -> CuResult<()> {
    let shim = state::shim()?;
    let mut table = table();
    let Some(region) = table.devices.get_mut(&device).and_then(|d| d.get_mut(&start)) else { return Ok(()) };
    if region.on_device {
        shim.block_on(shim.devices[device].acc.synchronize())?;
        region.bring_back(shim, start)?;
    }
    region.attached = attached;
    Ok(())
}

/// An address where `len` bytes are free, for the mapping tests: asked at a hint far below where
/// the kernel places mappings made without one (top down from below the stack), so that no
/// thread's stack or allocation takes the range before the test maps it; each call its own.
#[cfg(test)]
pub(crate) fn free_range(len: usize) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0x1000_0000_0000);
    let hint = NEXT.fetch_add(1 << 30, Ordering::Relaxed);
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a new mapping, removed at once: its range is free afterwards.
    let probe = unsafe { libc::mmap(hint as *mut c_void, len, libc::PROT_NONE, flags, -1, 0) };
    assert_ne!(probe, libc::MAP_FAILED);
    unsafe { libc::munmap(probe, len) };
    probe as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_the_host_uses_is_not_mapped_over() {
        let page = page();
        let taken = vec![0u8; 4 * page];
        let inside = (taken.as_ptr() as u64).next_multiple_of(page as u64);
        assert!(!map_at(inside, page), "mapped over the host's own memory at {inside:#x}");
        assert_eq!(taken.iter().map(|&b| b as u32).sum::<u32>(), 0);
        // A free range is mapped where asked, zeroed.
        let probe = free_range(page) as *mut c_void;
        assert!(map_at(probe as u64, page));
        assert_eq!(unsafe { *(probe as *const u64) }, 0);
        unsafe { libc::munmap(probe, page) };
    }
}

//! Managed memory (`cuMemAllocManaged`, the runtime's `cudaMallocManaged`): one address that the
//! program's host code and its kernels both use.
//!
//! The device's memory is remote, so a managed allocation is two copies of the same bytes: the
//! remote allocation, and host memory mapped at the same address (the remote one's, rounded up
//! to a page), so that a pointer means the same bytes on both sides. The devices answer
//! `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` 0: as on a GPU without concurrent access, the
//! host may touch managed memory only while the device is idle, and that rule is what keeps the
//! two copies one:
//! - device work that may reach managed memory (a launch, or a copy or memset of managed memory)
//!   first sends the host's copies of the device's managed allocations to it, if the host had
//!   them ([`device_work`]);
//! - a call after which the device is idle (a context, stream or event synchronization, a query
//!   that answers "done", a synchronous copy or memset) brings them back, if the device had them
//!   ([`settle`]), after waiting for all of the device's work.
//!
//! So a program that writes its data, launches, synchronizes and reads costs one copy each way a
//! synchronization; a program without managed memory pays nothing.
//!
//! Not served: `__managed__` variables (their address is the module's, where nothing can be
//! mapped), attachment to one stream (`CU_MEM_ATTACH_SINGLE`: host access while other streams
//! run), and range attributes.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ac_frontend::DeviceBuffer;

use crate::error::CuResult;
use crate::state::{self, Allocation, Shim};

pub mod calls;

/// One managed allocation.
#[derive(Debug)]
struct Region {
    /// Bytes the program asked for.
    bytes: u64,
    /// Bytes mapped on the host (whole pages).
    mapped: usize,
    /// The remote allocation's start (the key of its [`Allocation`]): the managed address is
    /// this rounded up to a page.
    key: u64,
    /// The remote allocation.
    buffer: Arc<DeviceBuffer<u8>>,
    /// Attached to the host (`CU_MEM_ATTACH_HOST`): the device's work does not reach it, so it
    /// is neither sent nor brought back.
    host_only: bool,
}

/// One device's managed allocations, by address.
#[derive(Debug, Default)]
struct OnDevice {
    regions: BTreeMap<u64, Region>,
    /// The device has the current bytes (work that may reach them was sent since the last
    /// [`settle`]); otherwise the host has them.
    device_has_them: bool,
}

/// Every device's managed allocations.
#[derive(Debug, Default)]
struct Table {
    devices: HashMap<usize, OnDevice>,
}

/// The process's managed allocations.
fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

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
    /// Attached to the host.
    pub host_only: bool,
}

/// Enters a placed managed allocation: its remote buffer into the program's memory (so that
/// copies, kernels and frees find it) and its region here.
pub fn insert(shim: &Shim, placed: Placed, buffer: DeviceBuffer<u8>) {
    let Placed { device, start, key, bytes, mapped, host_only } = placed;
    let buffer = Arc::new(buffer);
    let size = start - key + mapped as u64;
    let allocation = Allocation { device, size, buffer: buffer.clone(), variable_of: None };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, key), allocation);
    let region = Region { bytes, mapped, key, buffer, host_only };
    table().devices.entry(device).or_default().regions.insert(start, region);
}

/// Frees managed memory at `address`: `None` if it is not the start of a managed allocation.
pub fn free(address: u64) -> Option<CuResult<()>> {
    let shim = state::shim().ok()?;
    let (device, region) = {
        let mut table = table();
        table.devices.iter_mut().find_map(|(&device, d)| d.regions.remove(&address).map(|r| (device, r)))?
    };
    // SAFETY: the mapping `alloc` made for this region, which nothing refers to any longer.
    unsafe { libc::munmap(address as *mut c_void, region.mapped) };
    // Dropping the last reference frees the remote allocation.
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(device, region.key));
    Some(Ok(()))
}

/// The managed allocation holding `address`: its start, the bytes asked for, and its device.
pub fn range(address: u64) -> Option<(u64, u64, usize)> {
    let table = table();
    table.devices.iter().find_map(|(&device, d)| {
        let (&start, region) = d.regions.range(..=address).next_back()?;
        (address < start + region.bytes).then_some((start, region.bytes, device))
    })
}

/// Where device work reaches: everything on a device (a kernel, which may follow any pointer),
/// or the memory at one address.
#[derive(Debug, Clone, Copy)]
pub enum Reach {
    /// A kernel (or a library's) on this device.
    Kernel(usize),
    /// Memory at this address of this device.
    Memory(usize, u64),
}

impl Reach {
    /// The device it reaches.
    pub fn device(self) -> usize {
        match self {
            Reach::Kernel(device) | Reach::Memory(device, _) => device,
        }
    }

    /// Whether it may reach one of `d`'s managed allocations.
    fn reaches(self, d: &OnDevice) -> bool {
        match self {
            Reach::Kernel(_) => true,
            Reach::Memory(_, address) => {
                d.regions.range(..=address).next_back().is_some_and(|(&s, r)| address < s + r.mapped as u64)
            }
        }
    }
}

/// Runs `work`, device work that reaches `reach`: the host's copies of managed memory that it may
/// reach go to the device first. The table stays locked while `work` is sent, so that no
/// [`settle`] brings the bytes back between the two.
pub fn device_work<T>(reach: &[Reach], work: impl FnOnce() -> CuResult<T>) -> CuResult<T> {
    let shim = state::shim()?;
    let mut table = table();
    let mut reached = false;
    for &r in reach {
        let Some(d) = table.devices.get_mut(&r.device()).filter(|d| !d.regions.is_empty()) else { continue };
        if !r.reaches(d) {
            continue;
        }
        reached = true;
        if !d.device_has_them {
            send(shim, d)?;
            d.device_has_them = true;
        }
    }
    if !reached {
        drop(table);
    }
    work()
}

/// Sends the host's copies of `d`'s managed allocations to the device.
fn send(shim: &Shim, d: &OnDevice) -> CuResult<()> {
    for (&start, region) in d.regions.iter().filter(|(_, r)| !r.host_only) {
        // SAFETY: the region's host mapping, `mapped` bytes at `start`.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, region.mapped) };
        shim.block_on(region.buffer.copy_from_host_at((start - region.key) as usize, bytes))?;
    }
    Ok(())
}

/// The device is idle after a synchronizing call: brings its managed memory back to the host
/// if the device had it, after waiting for all of its work (any stream's may have written it).
pub fn settle(device: usize) -> CuResult<()> {
    let shim = state::shim()?;
    let mut table = table();
    let Some(d) = table.devices.get_mut(&device).filter(|d| d.device_has_them) else { return Ok(()) };
    shim.block_on(shim.devices[device].acc.synchronize())?;
    for (&start, region) in d.regions.iter().filter(|(_, r)| !r.host_only) {
        // SAFETY: the region's host mapping, `mapped` bytes at `start`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, region.mapped) };
        shim.block_on(region.buffer.copy_to_host_at((start - region.key) as usize, bytes))?;
    }
    d.device_has_them = false;
    Ok(())
}

/// The shim is about to read or write host memory at `address` for the program: if that is
/// managed memory, its device settles first, so that the host's copy is the current one.
pub fn settle_host(address: u64) -> CuResult<()> {
    match range(address) {
        Some((_, _, device)) => settle(device),
        None => Ok(()),
    }
}

/// Attaches the managed allocation at `start` to the host (`host_only`) or to every stream:
/// bytes the device has and is about to let go of must have been brought back first
/// ([`settle`]); bytes it will reach again are sent now, if it has the others.
pub fn set_host_only(device: usize, start: u64, host_only: bool) -> CuResult<()> {
    let shim = state::shim()?;
    let mut table = table();
    let Some(d) = table.devices.get_mut(&device) else { return Ok(()) };
    let Some(region) = d.regions.get_mut(&start) else { return Ok(()) };
    let was_host_only = std::mem::replace(&mut region.host_only, host_only);
    if was_host_only && !host_only && d.device_has_them {
        let region = &d.regions[&start];
        // SAFETY: the region's host mapping.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, region.mapped) };
        shim.block_on(region.buffer.copy_from_host_at((start - region.key) as usize, bytes))?;
    }
    Ok(())
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
        let probe = unsafe {
            libc::mmap(std::ptr::null_mut(), page, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(probe, libc::MAP_FAILED);
        unsafe { libc::munmap(probe, page) };
        assert!(map_at(probe as u64, page));
        assert_eq!(unsafe { *(probe as *const u64) }, 0);
        unsafe { libc::munmap(probe, page) };
    }
}

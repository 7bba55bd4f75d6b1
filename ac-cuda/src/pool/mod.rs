//! Memory pools: each device's default pool, the pools a program creates, and the stream-ordered
//! allocations made from them (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`).
//!
//! A pool is kept here, in the program's process: its memory is remote allocations, each one
//! block, and a block freed to the pool stays allocated on the device to be handed out again
//! ([`cache`] decides which, and when). So an allocation after a free costs no round trip,
//! which is what frameworks' stream-ordered allocators count on. At a synchronization a pool
//! frees back to the device what it holds over its release threshold (0 by default, as CUDA's),
//! and `cuMemPoolTrimTo` frees what is asked. Only device pools of pinned memory are served:
//! host and managed pools, and pools shared with other processes (IPC handles), are refused.

pub mod cache;
mod calls;

pub use calls::{check_access, device_of, device_of_props, AccessDesc, PoolProps};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::error::{code, CuResult, Error};
use crate::state::{self, Allocation, Registry};
use cache::Cache;

/// A memory pool of one device.
#[derive(Debug)]
pub struct Pool {
    /// The device's ordinal.
    device: usize,
    /// The device's default pool, which cannot be destroyed.
    default: bool,
    /// The most bytes it may reserve (0: no limit but the device's).
    max_size: u64,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Blocks held for reuse: their device address and allocation.
    cache: Cache<(u64, Allocation)>,
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
    threshold: u64,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (1 to 3), kept as set: the reuse [`cache`] does is allowed
    /// under every setting.
    reuse: [c_int; 3],
    /// Destroyed: what comes back is freed, not held.
    destroyed: bool,
}

impl Pool {
    fn new(device: usize, default: bool, max_size: u64) -> Self {
        let state = PoolState { reuse: [1, 1, 1], ..PoolState::default() };
        Self { device, default, max_size, state: Mutex::new(state) }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn pools() -> &'static Registry<Pool> {
    static POOLS: OnceLock<Registry<Pool>> = OnceLock::new();
    POOLS.get_or_init(Registry::default)
}

/// Each device's default pool and its current one (`cuDeviceSetMemPool`), by ordinal.
#[derive(Debug, Default)]
struct Places {
    default: HashMap<usize, usize>,
    current: HashMap<usize, usize>,
}

fn places() -> MutexGuard<'static, Places> {
    static PLACES: OnceLock<Mutex<Places>> = OnceLock::new();
    PLACES.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// A block handed out: its pool and the block's capacity.
type HandedOut = (Arc<Pool>, u64);

/// Pool memory handed out, by (device, address).
fn handed_out() -> MutexGuard<'static, HashMap<(usize, u64), HandedOut>> {
    static HANDED_OUT: OnceLock<Mutex<HashMap<(usize, u64), HandedOut>>> = OnceLock::new();
    HANDED_OUT.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The order of a free on a legacy default stream (`CU_STREAM_LEGACY`, the NULL stream), which
/// in CUDA waits for every blocking stream's earlier work: the default stream here does not, so
/// only a synchronization of the whole device settles such a free.
pub const LEGACY_ORDER: usize = usize::MAX;

/// Frees made so far: a free's number orders it against synchronizations ([`mark`]).
static FREES: AtomicU64 = AtomicU64::new(0);

/// The number the next free gets: read before a synchronization begins, it says which frees
/// that synchronization settles (those numbered below it).
pub fn mark() -> u64 {
    FREES.load(Ordering::SeqCst)
}

/// Device `device`'s default pool (made at its first use).
pub fn default_pool(device: usize) -> CuResult<usize> {
    state::shim()?.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?;
    let mut places = places();
    Ok(*places.default.entry(device).or_insert_with(|| pools().insert(Pool::new(device, true, 0))))
}

/// The pool `cuMemAllocAsync` takes from on `device`: the default one unless another was set.
pub fn current_pool(device: usize) -> CuResult<usize> {
    let current = places().current.get(&device).copied();
    match current {
        Some(handle) => Ok(handle),
        None => default_pool(device),
    }
}

/// Pool `handle`, if it is one of `device`'s, becomes the one `cuMemAllocAsync` takes from.
fn set_current(device: usize, handle: usize) -> CuResult<()> {
    // Checked and set under one lock, which `destroy` takes too: a pool destroyed meanwhile is
    // never left current.
    let mut places = places();
    check_device(handle, device)?;
    places.current.insert(device, handle);
    Ok(())
}

/// `CUDA_ERROR_INVALID_VALUE` unless pool `handle` is one of `device`'s.
pub fn check_device(handle: usize, device: usize) -> CuResult<()> {
    if pools().get(handle)?.device != device {
        return Err(Error::said(code::INVALID_VALUE, "a memory pool of another device"));
    }
    Ok(())
}

/// Hands out `bytes` from pool `handle` for work on `stream` (its order's key): a held block
/// if one fits, else a new one.
pub fn alloc(handle: usize, bytes: usize, stream: usize) -> CuResult<u64> {
    let shim = state::shim()?;
    let pool = pools().get(handle)?;
    if bytes == 0 {
        return Err(Error::said(code::INVALID_VALUE, "an allocation of 0 bytes"));
    }
    let capacity = cache::capacity_for(bytes as u64).ok_or(Error::Code(code::OUT_OF_MEMORY))?;
    let mut state = pool.lock();
    let ((address, mut allocation), capacity) = match state.cache.take(capacity, stream) {
        Some(held) => held,
        None => (grow(&pool, &mut state, capacity)?, capacity),
    };
    allocation.size = bytes as u64;
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((pool.device, address), allocation);
    handed_out().insert((pool.device, address), (pool.clone(), capacity));
    Ok(address)
}

/// A new block of `capacity` bytes for `pool`, allocated on its device. Past the pool's maximum
/// size it first frees what the pool holds; on a full device, what every pool of the device
/// holds, then tries once more.
fn grow(pool: &Pool, state: &mut PoolState, capacity: u64) -> CuResult<(u64, Allocation)> {
    let shim = state::shim()?;
    if pool.max_size != 0 {
        let room = pool.max_size.checked_sub(capacity).ok_or_else(|| over_maximum(pool, capacity))?;
        drop(state.cache.release_over(room));
        if state.cache.counters().reserved > room {
            return Err(over_maximum(pool, capacity));
        }
    }
    let acc = &shim.devices[pool.device].acc;
    let made = match shim.block_on(acc.alloc_addressed(capacity)) {
        Err(ac_frontend::Error::Remote { kind: ac_frontend::ErrorKind::OutOfMemory, .. }) => {
            drop(state.cache.release_all());
            release_others(pool);
            shim.block_on(acc.alloc_addressed(capacity))
        }
        made => made,
    };
    let (buffer, address) = made?;
    state.cache.grown(capacity);
    let allocation =
        Allocation { device: pool.device, size: capacity, buffer: Arc::new(buffer), variable_of: None, context: None };
    Ok((address, allocation))
}

fn over_maximum(pool: &Pool, capacity: u64) -> Error {
    Error::said(
        code::OUT_OF_MEMORY,
        format!("{capacity} more bytes would take the memory pool past its maximum size of {} bytes", pool.max_size),
    )
}

/// Frees what the other pools of `pool`'s device hold (those another thread is not using: its
/// pool's lock is not waited for, so two threads growing two pools never wait for each other).
fn release_others(pool: &Pool) {
    for (_, other) in pools().all() {
        if other.device == pool.device && !std::ptr::eq(Arc::as_ptr(&other), pool) {
            if let Ok(mut state) = other.state.try_lock() {
                drop(state.cache.release_all());
            }
        }
    }
}

/// The block at `address` comes back to its pool, freed in `freed_on`'s stream order (`None`:
/// its work is done; [`LEGACY_ORDER`]: the legacy default stream's). `None` if the address is
/// not pool memory handed out.
pub fn give_back(device: usize, address: u64, freed_on: Option<usize>) -> Option<CuResult<()>> {
    let (pool, capacity) = handed_out().remove(&(device, address))?;
    let shim = match state::shim() {
        Ok(shim) => shim,
        Err(e) => return Some(Err(e)),
    };
    let allocation = shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(device, address))?;
    let mut state = pool.lock();
    if state.destroyed {
        // Freed back to the device (after the work queued before it, by the backend).
        state.cache.shrunk(capacity);
        drop(allocation);
    } else {
        let freed_at = FREES.fetch_add(1, Ordering::SeqCst);
        state.cache.give_back((address, allocation), capacity, freed_on, freed_at);
    }
    Some(Ok(()))
}

/// The handle of the pool that handed out the allocation starting at `address`, if one did.
pub fn of(device: usize, address: u64) -> Option<usize> {
    handed_out().get(&(device, address)).map(|(pool, _)| Registry::handle_of(pool))
}

/// The work of `stream` on `device` (`None`: all of its work) queued before [`mark`] answered
/// `before` is known done: blocks freed in its order before then may go to any stream, and
/// each of the device's pools frees back to the device what it holds over its release
/// threshold.
pub fn settled(device: usize, stream: Option<usize>, before: u64) {
    for (_, pool) in pools().all() {
        if pool.device == device {
            let mut state = pool.lock();
            state.cache.settle(stream, before);
            let threshold = state.threshold;
            drop(state.cache.release_over(threshold));
        }
    }
}

/// Destroys pool `handle`: what it holds is freed; what it handed out is freed when it comes
/// back. A device's default pool is refused; a destroyed current pool leaves the default one
/// current.
fn destroy(handle: usize) -> CuResult<()> {
    let pool = pools().get(handle)?;
    if pool.default {
        return Err(Error::said(code::INVALID_VALUE, "a device's default memory pool cannot be destroyed"));
    }
    let mut places = places();
    pools().remove(handle)?;
    if places.current.get(&pool.device) == Some(&handle) {
        places.current.remove(&pool.device);
    }
    drop(places);
    let mut state = pool.lock();
    state.destroyed = true;
    drop(state.cache.release_all());
    Ok(())
}

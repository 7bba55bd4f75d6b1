//! Graph memory: what a graph's allocation nodes allocate (`cuGraphAddMemAllocNode`, or
//! `cuMemAllocAsync` on a capturing stream) and its free nodes free (`cuGraphAddMemFreeNode`,
//! or `cuMemFreeAsync` on a capturing stream), with the device's graph memory counters.
//!
//! An allocation node's address is fixed when the node is made and is the same at every launch,
//! as CUDA's; here its memory is allocated on the device then, and kept while the graph or its
//! executable graph holds the node, and also while a launch has allocated it and nothing freed
//! it since: such memory outlives its graph, as in CUDA, until the program frees it
//! (`cuMemFreeAsync`, `cuMemFree`). A launch makes the allocation *live*; a free node's
//! launch, a free outside any graph, or an auto-free launch of its graph ends that. A graph
//! launched again while its allocation is live is refused ([`super::Exec::replay`]).

use std::collections::{HashMap, HashSet};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use super::{add_node_with, graphs, lock, node, record, refuse_if_capturing, NodeKind, Replay, Work};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::pool::{check_access, device_of, device_of_props, AccessDesc, PoolProps};
use crate::state::{self, put, Allocation};

/// Memory an allocation node allocates.
#[derive(Debug)]
pub struct GraphAlloc {
    /// The device's ordinal.
    pub device: usize,
    /// Its remote address.
    pub address: u64,
    /// Bytes.
    pub bytes: u64,
    /// The graph whose allocation node made it.
    graph: usize,
    /// The graphs with a free node for it.
    freed_by: Mutex<FreedBy>,
    /// An executable graph of its graph exists.
    instantiated: AtomicBool,
}

/// Which graphs free an allocation: its own, or others (each once), never both (`cuda.h`).
#[derive(Debug, Default)]
enum FreedBy {
    #[default]
    None,
    /// A free node of the graph that allocates it.
    Owner,
    /// Free nodes of these other graphs.
    Others(HashSet<usize>),
}

/// A graph allocation by address: the allocation while anything holds it, and, while it is
/// live, a hold of its own.
struct Known {
    allocation: Weak<GraphAlloc>,
    live: Option<Arc<GraphAlloc>>,
}

/// Graph memory by (device, address).
fn known() -> MutexGuard<'static, HashMap<(usize, u64), Known>> {
    static KNOWN: OnceLock<Mutex<HashMap<(usize, u64), Known>>> = OnceLock::new();
    lock(KNOWN.get_or_init(Mutex::default))
}

/// A device's `CUgraphMem_attribute` counters: used (live), its high mark, reserved (held), its
/// high mark.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    used: u64,
    used_high: u64,
    reserved: u64,
    reserved_high: u64,
}

fn usage() -> MutexGuard<'static, HashMap<usize, Usage>> {
    static USAGE: OnceLock<Mutex<HashMap<usize, Usage>>> = OnceLock::new();
    lock(USAGE.get_or_init(Mutex::default))
}

/// Changes device `device`'s counters by `used` and `reserved` bytes, raising the high marks.
fn count(device: usize, used: i64, reserved: i64) {
    let mut all = usage();
    let u = all.entry(device).or_default();
    u.used = u.used.saturating_add_signed(used);
    u.reserved = u.reserved.saturating_add_signed(reserved);
    u.used_high = u.used_high.max(u.used);
    u.reserved_high = u.reserved_high.max(u.reserved);
}

/// `bytes` of graph memory on `device` for an allocation node of `graph`, allocated now.
fn allocate(device: usize, bytes: usize, graph: usize) -> CuResult<Arc<GraphAlloc>> {
    if bytes == 0 {
        return Err(Error::said(code::INVALID_VALUE, "an allocation of 0 bytes"));
    }
    let shim = state::shim()?;
    let acc = &shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc;
    let (buffer, address) = shim.block_on(acc.alloc_addressed(bytes as u64))?;
    let allocation =
        Allocation { device, size: bytes as u64, buffer: Arc::new(buffer), variable_of: None, context: None };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, address), allocation);
    let made = Arc::new(GraphAlloc {
        device,
        address,
        bytes: bytes as u64,
        graph,
        freed_by: Mutex::new(FreedBy::None),
        instantiated: AtomicBool::new(false),
    });
    let replaced = known().insert((device, address), Known { allocation: Arc::downgrade(&made), live: None });
    // None in fact (the address was free); anything replaced is dropped with no lock held.
    drop(replaced);
    count(device, 0, bytes as i64);
    Ok(made)
}

impl Drop for GraphAlloc {
    fn drop(&mut self) {
        let key = (self.device, self.address);
        {
            let mut known = known();
            if known.get(&key).is_some_and(|k| std::ptr::eq(k.allocation.as_ptr(), self)) {
                known.remove(&key);
            }
        }
        // Dropping the buffer frees it remotely, after the work queued before.
        if let Ok(shim) = state::shim() {
            let removed = shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            drop(removed);
        }
        count(self.device, 0, -(self.bytes as i64));
    }
}

impl GraphAlloc {
    /// Whether a launch allocated it and nothing freed it since.
    pub fn is_live(&self) -> bool {
        known().get(&(self.device, self.address)).is_some_and(|k| k.live.is_some())
    }

    /// A launch of its allocation node: it is live, and held while it is.
    fn launched(self: &Arc<Self>) {
        let mut known = known();
        let Some(k) = known.get_mut(&(self.device, self.address)) else { return };
        if k.live.is_none() {
            k.live = Some(self.clone());
            // Counted under the table's lock, so a free counts after the launch it follows.
            count(self.device, self.bytes as i64, 0);
        }
    }

    /// Freed (by a free node's launch, an auto-free launch, or a free outside any graph): no
    /// longer live, and freed on the device if nothing else holds it.
    pub fn freed(&self) {
        let hold = {
            let mut known = known();
            let hold = known.get_mut(&(self.device, self.address)).and_then(|k| k.live.take());
            if hold.is_some() {
                count(self.device, -(self.bytes as i64), 0);
            }
            hold
        };
        // Dropped with no lock held: the last hold's drop takes them.
        drop(hold);
    }

    /// Whether a free node of its own graph frees it.
    pub fn freed_in_its_graph(&self) -> bool {
        matches!(*lock(&self.freed_by), FreedBy::Owner)
    }

    /// Claims it for a new executable graph: false if another holds it.
    pub fn instantiated(&self) -> bool {
        self.instantiated.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Its executable graph is destroyed.
    pub fn uninstantiated(&self) {
        self.instantiated.store(false, Ordering::Release);
    }
}

/// The graph allocation starting at `address` on `device`, if that is graph memory.
fn find(device: usize, address: u64) -> Option<Arc<GraphAlloc>> {
    known().get(&(device, address)).and_then(|k| k.allocation.upgrade())
}

/// Adds a free node for `allocation` to `graph` (`add` adds it, given its replay), answering
/// its handle. Refused as CUDA refuses it: a second free node in one graph, a free node in the
/// allocating graph and in another.
fn add_free(
    allocation: &Arc<GraphAlloc>,
    graph: usize,
    add: impl FnOnce(Replay) -> CuResult<usize>,
) -> CuResult<usize> {
    let mut freed_by = lock(&allocation.freed_by);
    let refused = match &*freed_by {
        FreedBy::Owner => Some("its own graph frees it already"),
        FreedBy::Others(_) if graph == allocation.graph => Some("another graph frees it already"),
        FreedBy::Others(graphs) if graphs.contains(&graph) => Some("this graph frees it already"),
        _ => None,
    };
    if let Some(why) = refused {
        return Err(Error::said(code::INVALID_VALUE, format!("a second free of a graph allocation: {why}")));
    }
    let node = add(free_replay(allocation))?;
    match &mut *freed_by {
        FreedBy::Others(graphs) => {
            graphs.insert(graph);
        }
        by if graph == allocation.graph => *by = FreedBy::Owner,
        by => *by = FreedBy::Others(HashSet::from([graph])),
    }
    Ok(node)
}

/// The replays of an allocation node and a free node.
fn allocation_replay(allocation: &Arc<GraphAlloc>) -> Replay {
    let allocation = allocation.clone();
    Arc::new(move |_| {
        allocation.launched();
        Ok(())
    })
}

fn free_replay(allocation: &Arc<GraphAlloc>) -> Replay {
    let allocation = allocation.clone();
    Arc::new(move |_| {
        allocation.freed();
        Ok(())
    })
}

/// `cuMemAllocAsync` on capturing stream `stream` of `device`: an allocation node of the
/// capture's graph, its address answered.
pub fn alloc_captured(stream: usize, device: usize, bytes: usize) -> CuResult<u64> {
    let graph = super::info(stream).graph;
    let allocation = allocate(device, bytes, graph)?;
    let replay = allocation_replay(&allocation);
    let memory = Some(allocation.clone());
    record(stream, |graph, deps| add_node_with(graph, NodeKind::MemAlloc, deps, Work::of(replay), memory))?
        .ok_or_else(not_capturing)?;
    Ok(allocation.address)
}

/// `cuMemFreeAsync` on capturing stream `stream`: a free node of the capture's graph for graph
/// memory; memory allocated outside a graph cannot be freed in a capture (CUDA refuses it, and
/// the capture is invalidated).
pub fn free_captured(stream: usize, device: usize, address: u64) -> CuResult<()> {
    let Some(allocation) = find(device, address) else {
        return refuse_if_capturing(stream, "a free of memory not allocated by a graph");
    };
    let graph = super::info(stream).graph;
    let memory = Some(allocation.clone());
    let add = |replay| {
        record(stream, |graph, deps| add_node_with(graph, NodeKind::MemFree, deps, Work::of(replay), memory))?
            .ok_or_else(not_capturing)
    };
    add_free(&allocation, graph, add).map(drop)
}

/// The stream's capture ended under the call (another thread ended it).
fn not_capturing() -> Error {
    Error::said(super::result::ILLEGAL_STATE, "the stream's capture ended")
}

/// Whether `address` on `device` is graph memory (an allocation node's).
pub fn is_graph_memory(device: usize, address: u64) -> bool {
    find(device, address).is_some()
}

/// A free of `address` on `device` outside any graph (`cuMemFreeAsync`, `cuMemFree`): `None` if
/// it is not graph memory. Memory its own graph frees is refused, as CUDA's, unless a launch
/// that failed before the free node left it allocated.
pub fn free_outside(device: usize, address: u64) -> Option<CuResult<()>> {
    let allocation = find(device, address)?;
    if allocation.freed_in_its_graph() && !allocation.is_live() {
        return Some(Err(Error::said(
            code::INVALID_VALUE,
            "graph memory its own graph frees cannot be freed outside it",
        )));
    }
    allocation.freed();
    Some(Ok(()))
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS`.
#[repr(C)]
#[derive(Debug)]
pub struct AllocNodeParams {
    pool_props: PoolProps,
    access: *const AccessDesc,
    access_count: usize,
    bytes: usize,
    address: u64,
}

/// The `count` access descriptors at `descs` (at most one a device, as `cuda.h` says).
unsafe fn descriptors<'a>(descs: *const AccessDesc, count: usize) -> CuResult<&'a [AccessDesc]> {
    if count > state::shim()?.devices.len() {
        return Err(Error::said(code::INVALID_VALUE, format!("{count} access descriptors, more than the devices")));
    }
    match (descs.is_null(), count) {
        (_, 0) => Ok(&[]),
        (false, n) => Ok(std::slice::from_raw_parts(descs, n)),
        (true, _) => Err(Error::Code(code::INVALID_VALUE)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    params: *mut AllocNodeParams,
) -> u32 {
    guard("cuGraphAddMemAllocNode", || {
        let p = params.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        graphs().get(graph)?;
        let device = device_of_props(&p.pool_props)?;
        check_access(device, descriptors(p.access, p.access_count)?)?;
        let deps = super::handles(deps, count)?;
        let allocation = allocate(device, p.bytes, graph)?;
        let replay = allocation_replay(&allocation);
        let address = allocation.address;
        put(out, add_node_with(graph, NodeKind::MemAlloc, deps, Work::of(replay), Some(allocation))?)?;
        p.address = address;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemFreeNode(
    out: *mut usize,
    graph: usize,
    deps: *const usize,
    count: usize,
    address: u64,
) -> u32 {
    guard("cuGraphAddMemFreeNode", || {
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        graphs().get(graph)?;
        let shim = state::shim()?;
        let device = shim.device_of(address, crate::context::current_device().ok());
        let allocation = device.and_then(|device| find(device, address)).ok_or_else(|| {
            Error::said(code::INVALID_VALUE, "the address was not allocated by a graph's allocation node")
        })?;
        let deps = super::handles(deps, count)?;
        let add = |replay| add_node_with(graph, NodeKind::MemFree, deps, Work::of(replay), Some(allocation.clone()));
        put(out, add_free(&allocation, graph, add)?)
    })
}

/// The graph memory of node `handle`, if it is a node of `kind`.
fn memory_of(handle: usize, kind: NodeKind) -> CuResult<Arc<GraphAlloc>> {
    let n = node(handle)?;
    match (&n.memory, n.kind == kind) {
        (Some(memory), true) => Ok(memory.clone()),
        _ => Err(Error::said(code::INVALID_VALUE, format!("not a {kind:?} node"))),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemAllocNodeGetParams(handle: usize, out: *mut AllocNodeParams) -> u32 {
    guard("cuGraphMemAllocNodeGetParams", || {
        let out = out.as_mut().ok_or(Error::Code(code::INVALID_VALUE))?;
        let memory = memory_of(handle, NodeKind::MemAlloc)?;
        std::ptr::write_bytes(out as *mut AllocNodeParams, 0, 1);
        out.pool_props = PoolProps::device_pinned(memory.device);
        out.bytes = memory.bytes as usize;
        out.address = memory.address;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphMemFreeNodeGetParams(handle: usize, address: *mut u64) -> u32 {
    guard("cuGraphMemFreeNodeGetParams", || put(address, memory_of(handle, NodeKind::MemFree)?.address))
}

#[no_mangle]
pub extern "C" fn cuDeviceGraphMemTrim(device: c_int) -> u32 {
    // Graph memory is held only while a graph or a live allocation holds it: nothing is cached
    // for later graphs to trim.
    guard("cuDeviceGraphMemTrim", || device_of(device).map(drop))
}

/// `CUgraphMem_attribute`.
mod attribute {
    pub const USED_MEM_CURRENT: i32 = 0;
    pub const USED_MEM_HIGH: i32 = 1;
    pub const RESERVED_MEM_CURRENT: i32 = 2;
    pub const RESERVED_MEM_HIGH: i32 = 3;
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetGraphMemAttribute(device: c_int, attr: c_int, value: *mut c_void) -> u32 {
    guard("cuDeviceGetGraphMemAttribute", || {
        let u = usage().get(&device_of(device)?).copied().unwrap_or_default();
        let answer = match attr {
            attribute::USED_MEM_CURRENT => u.used,
            attribute::USED_MEM_HIGH => u.used_high,
            attribute::RESERVED_MEM_CURRENT => u.reserved,
            attribute::RESERVED_MEM_HIGH => u.reserved_high,
            _ => return Err(Error::said(code::INVALID_VALUE, format!("graph memory attribute {attr}"))),
        };
        put(value.cast::<u64>(), answer)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetGraphMemAttribute(device: c_int, attr: c_int, value: *mut c_void) -> u32 {
    guard("cuDeviceSetGraphMemAttribute", || {
        let device = device_of(device)?;
        let zero = value.cast::<u64>().as_ref().ok_or(Error::Code(code::INVALID_VALUE))? == &0;
        let mut all = usage();
        let u = all.entry(device).or_default();
        // As CUDA's: a high mark is only reset, to the current value, by setting it to 0.
        match attr {
            attribute::USED_MEM_HIGH if zero => u.used_high = u.used,
            attribute::RESERVED_MEM_HIGH if zero => u.reserved_high = u.reserved,
            attribute::USED_MEM_HIGH | attribute::RESERVED_MEM_HIGH => {
                return Err(Error::said(code::INVALID_VALUE, "a high mark can only be reset, to 0"))
            }
            _ => return Err(Error::said(code::INVALID_VALUE, format!("graph memory attribute {attr} is read-only"))),
        }
        Ok(())
    })
}

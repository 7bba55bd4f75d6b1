//! Virtual memory management (protocol 14; CUDA's `cuMemAddressReserve`, `cuMemCreate`,
//! `cuMemMap`): a session reserves ranges of device address space and maps physical memory into
//! them, so that memory grows in place (PyTorch's expandable segments, vLLM's sleep mode) and
//! one tensor may span several pieces of physical memory.
//!
//! A range is a buffer of the session's table like any other, so copies, memsets, tensor maps
//! and kernels name it by (buffer, offset) as they name an allocation; what differs is that only
//! its mapped bytes may be touched ([`Mappings::check_mapped`], asked by
//! [`Session::resolve`](super::Session::resolve)). The session checks every map against its own
//! ranges and mappings, so that a program is told by name what it did wrong; the device serves
//! ranges only to a session with a process of its own (a mapping is reachable from every context
//! of its process).
//!
//! Physical memory counts against the session's quota from its creation until it is both
//! released and unmapped (a mapping holds it), as CUDA keeps it, and until every session that
//! imported it (protocol 19, `session::ipc`'s [`Session::import_physical`]) has let it go too:
//! its [`Charge`] is shared by its imports.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{BufferId, ErrorKind, WireError};
use rustc_hash::FxHashMap;

use super::{Allocation, Session};
use crate::device::{Context, DeviceMem};

/// The most device address space one session may hold reserved at once, bytes: ranges cost no
/// memory, but the address space of a process (which sessions without workers share) is finite.
pub const MOST_RESERVED: u64 = 1 << 42;

/// Physical device memory of a session (`cuMemCreate`, or imported from another session's):
/// released when the last of its handle and its mappings goes.
#[derive(Debug)]
pub struct Physical {
    pub(super) handle: u64,
    pub(super) size: u64,
    pub(super) context: Arc<dyn Context>,
    /// The bytes counted against its creator's quota, shared by every import of it.
    pub(super) charge: Arc<Charge>,
    /// Imported from another session's (and so not this one's to share again).
    pub(super) imported: bool,
    /// The driver's shareable descriptor of it, asked for on its first export and kept while it
    /// lives (closed after its release, as its field), so that each import takes the one
    /// descriptor rather than the driver exporting it again.
    descriptor: Mutex<Option<Arc<OwnedFd>>>,
}

impl Physical {
    pub(super) fn new(handle: u64, size: u64, context: Arc<dyn Context>, charge: Arc<Charge>, imported: bool) -> Self {
        Self { handle, size, context, charge, imported, descriptor: Mutex::default() }
    }

    /// The driver's shareable descriptor of this memory: exported on the first call, the same
    /// one after.
    pub(super) fn descriptor(&self) -> Result<Arc<OwnedFd>, WireError> {
        let mut kept = self.descriptor.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(descriptor) = &*kept {
            return Ok(descriptor.clone());
        }
        let descriptor = Arc::new(self.context.export_physical(self.handle)?);
        *kept = Some(descriptor.clone());
        Ok(descriptor)
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        self.context.release_physical(self.handle);
    }
}

/// Physical memory's bytes counted against its creator's quota: they leave it when the last
/// holder goes, the creator's [`Physical`] or an import of it (whose driver keeps the memory
/// on the GPU by itself: an importer does not keep the creator's session or worker alive).
#[derive(Debug)]
pub(super) struct Charge {
    held: Arc<AtomicU64>,
    size: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.held.fetch_sub(self.size, Ordering::AcqRel);
    }
}

/// One mapping of a range: `bytes` of `physical` from the range offset it is keyed by.
#[derive(Debug)]
struct Mapping {
    bytes: u64,
    /// Held, not read: the mapping keeps its physical memory alive.
    _physical: Arc<Physical>,
}

/// The mappings of a reserved range, by their offset in it.
#[derive(Debug, Default)]
pub struct Mappings(Mutex<BTreeMap<u64, Mapping>>);

impl Mappings {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Mapping>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses an access of `len` bytes at `offset` that touches a byte no mapping covers.
    pub fn check_mapped(&self, offset: u64, len: u64) -> Result<(), WireError> {
        let mappings = self.lock();
        let end = offset.saturating_add(len);
        // From the mapping holding `offset` on, each must start where the bytes covered end.
        let first = mappings.range(..=offset).next_back().map_or(offset, |(&start, _)| start);
        let mut at = offset;
        for (&start, mapping) in mappings.range(first..) {
            if at >= end || start > at {
                break;
            }
            at = at.max(start + mapping.bytes);
        }
        if at < end {
            return Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!("byte {at} of a reserved range is not mapped (an access of {len} bytes at offset {offset})"),
            ));
        }
        Ok(())
    }

    /// Unmaps every mapping (the range is going): each goes from the device first, then its
    /// physical memory is let go, in that order on the device's queue.
    pub fn unmap_all(&self, context: &dyn Context, range: DeviceMem) {
        for (offset, mapping) in std::mem::take(&mut *self.lock()) {
            context.unmap_later(range, offset, mapping.bytes);
        }
    }
}

/// A session's physical memory by id.
#[derive(Debug, Default)]
pub struct Table {
    physical: Mutex<FxHashMap<u64, Arc<Physical>>>,
    next: AtomicU64,
    /// Address space reserved by the session's live ranges, bytes.
    reserved: Arc<AtomicU64>,
}

impl Table {
    /// Releases every piece of physical memory (the session ends; its ranges went before).
    pub(super) fn clear(&self) {
        self.physical.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Session {
    /// Reserves `bytes` of device address space (`cuMemAddressReserve`) as a new buffer: its id
    /// and where it starts.
    pub fn reserve_range(&self, bytes: u64, alignment: u64) -> Result<(BufferId, u64), WireError> {
        if bytes == 0 || (alignment != 0 && !alignment.is_power_of_two()) {
            let why = format!("a range of {bytes} bytes aligned to {alignment}: the size must be positive and the alignment a power of two or 0");
            return Err(WireError::new(ErrorKind::InvalidArgument, why));
        }
        let reserved = &self.vmm.reserved;
        let counted = reserved.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
            r.checked_add(bytes).filter(|&total| total <= MOST_RESERVED)
        });
        if let Err(held) = counted {
            let why = format!(
                "{bytes} bytes more of address space would pass a session's {MOST_RESERVED} (it holds {held} reserved)"
            );
            return Err(WireError::new(ErrorKind::OutOfMemory, why));
        }
        let mem = self.context.reserve_range(bytes, alignment).inspect_err(|_| {
            reserved.fetch_sub(bytes, Ordering::AcqRel);
        })?;
        let range = Some(Range { mappings: Mappings::default(), reserved: reserved.clone() });
        let id = self.insert(Allocation {
            mem,
            size: bytes,
            context: self.context.clone(),
            held: None,
            range,
            opened: None,
        });
        Ok((id, mem.0))
    }

    /// Creates `bytes` of zeroed physical memory (`cuMemCreate`), counted against the quota.
    pub fn create_physical(&self, bytes: u64) -> Result<u64, WireError> {
        self.charge(bytes)?;
        let handle = self.context.create_physical(bytes).inspect_err(|_| {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
        })?;
        let charge = Arc::new(Charge { held: self.held.clone(), size: bytes });
        let physical = Physical::new(handle, bytes, self.context.clone(), charge, false);
        Ok(self.enter_physical(Arc::new(physical)))
    }

    /// Enters `physical` into the session's table under a fresh id.
    pub(super) fn enter_physical(&self, physical: Arc<Physical>) -> u64 {
        let id = self.vmm.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.vmm.physical.lock().unwrap_or_else(|p| p.into_inner()).insert(id, physical);
        id
    }

    /// The session's physical memory `id`.
    pub(super) fn physical(&self, id: u64) -> Result<Arc<Physical>, WireError> {
        let found = self.vmm.physical.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned();
        found.ok_or_else(|| unknown_physical(id))
    }

    /// This session's import of `source`, if it has one.
    pub(super) fn imported_from(&self, source: &Physical) -> Option<Arc<Physical>> {
        let physical = self.vmm.physical.lock().unwrap_or_else(|p| p.into_inner());
        physical.values().find(|p| p.imported && Arc::ptr_eq(&p.charge, &source.charge)).cloned()
    }

    /// Lets physical memory go: its memory goes once no mapping holds it (`cuMemRelease`).
    pub fn release_physical(&self, id: u64) -> Result<(), WireError> {
        let released = self.vmm.physical.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        released.map(drop).ok_or_else(|| unknown_physical(id))
    }

    /// Maps `bytes` of physical memory `id` at `offset` into range `range` (`cuMemMap` and
    /// `cuMemSetAccess` for this device).
    pub fn map_physical(&self, range: BufferId, offset: u64, bytes: u64, id: u64) -> Result<(), WireError> {
        let physical = self.physical(id)?;
        let alloc = self.resolve_pointer(ac_proto::backend::DevicePtr { buffer: range, offset: 0 })?;
        let mappings = &alloc.range.as_ref().ok_or_else(|| not_a_range(range))?.mappings;
        let Some(end) = offset.checked_add(bytes).filter(|&end| bytes > 0 && end <= alloc.size) else {
            let why =
                format!("a mapping of {bytes} bytes at offset {offset} lies past the range's {} bytes", alloc.size);
            return Err(WireError::new(ErrorKind::OutOfBounds, why));
        };
        if bytes > physical.size {
            let why = format!("a mapping of {bytes} bytes of physical memory of {} bytes", physical.size);
            return Err(WireError::new(ErrorKind::OutOfBounds, why));
        }
        // Checked, then mapped with the lock let go (a bulk lane resolving the range meanwhile
        // must not wait for the driver), then entered: only the control loop maps and unmaps.
        let overlapping = |mappings: &BTreeMap<u64, Mapping>| {
            let before = mappings.range(..end).next_back().filter(|(&start, m)| start + m.bytes > offset);
            before.map(|(&start, m)| {
                let why = format!("bytes {start}..{} of the range are mapped already", start + m.bytes);
                WireError::new(ErrorKind::InvalidArgument, why)
            })
        };
        if let Some(taken) = overlapping(&mappings.lock()) {
            return Err(taken);
        }
        self.context.map(alloc.mem, offset, bytes, physical.handle)?;
        mappings.lock().insert(offset, Mapping { bytes, _physical: physical });
        Ok(())
    }

    /// Unmaps the mappings of `range` within `[offset, offset + bytes)` (`cuMemUnmap`), on the
    /// device before it returns; the caller has waited for the work queued before.
    pub fn unmap_range(&self, range: BufferId, offset: u64, bytes: u64) -> Result<(), WireError> {
        let alloc = self.resolve_pointer(ac_proto::backend::DevicePtr { buffer: range, offset: 0 })?;
        let mappings = &alloc.range.as_ref().ok_or_else(|| not_a_range(range))?.mappings;
        let end = offset.saturating_add(bytes);
        // Taken out under the lock, unmapped with it let go (a device sync), and put back if
        // the device refused.
        let taken: Vec<(u64, Mapping)> = {
            let mut mappings = mappings.lock();
            let inside: Vec<(u64, u64)> = mappings
                .range(..end)
                .filter(|(&start, m)| start + m.bytes > offset)
                .map(|(&start, m)| (start, m.bytes))
                .collect();
            if let Some(&(start, len)) = inside.iter().find(|&&(start, len)| start < offset || start + len > end) {
                let why = format!("the mapping at bytes {start}..{} lies partly outside {offset}..{end}", start + len);
                return Err(WireError::new(ErrorKind::InvalidArgument, why));
            }
            if inside.is_empty() {
                let why = format!("nothing is mapped at bytes {offset}..{end} of the range");
                return Err(WireError::new(ErrorKind::InvalidArgument, why));
            }
            inside.iter().filter_map(|(start, _)| mappings.remove(start).map(|m| (*start, m))).collect()
        };
        let mut taken = taken.into_iter();
        while let Some((start, mapping)) = taken.next() {
            if let Err(e) = self.context.unmap(alloc.mem, start, mapping.bytes) {
                let mut mappings = mappings.lock();
                mappings.insert(start, mapping);
                mappings.extend(taken);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// What makes an allocation a reserved range: its mappings, and the session's count of
/// reserved address space, which it leaves when it goes.
#[derive(Debug)]
pub struct Range {
    /// Its mappings.
    pub mappings: Mappings,
    reserved: Arc<AtomicU64>,
}

impl Range {
    /// Unmaps what is mapped and frees the range itself (its allocation is being dropped).
    pub(super) fn free(&self, context: &dyn Context, mem: DeviceMem, size: u64) {
        self.mappings.unmap_all(context, mem);
        context.free(mem);
        self.reserved.fetch_sub(size, Ordering::AcqRel);
    }
}

fn unknown_physical(id: u64) -> WireError {
    WireError::new(ErrorKind::InvalidBuffer, format!("physical memory {id} does not exist in this session"))
}

fn not_a_range(id: BufferId) -> WireError {
    WireError::new(ErrorKind::InvalidBuffer, format!("buffer {} is not a reserved range", id.0))
}

//! Memory shared between sessions (protocol 18; CUDA's `cuIpcGetMemHandle` and
//! `cuIpcOpenMemHandle`): the processes of one job on one device (PyTorch's `multiprocessing`,
//! a node's MPI ranks) hand each other device memory by a handle.
//!
//! An export is a secret naming one allocation of one session, kept in the backend's
//! [`Exports`]. Another session opens it only if it was opened with the same capability on the
//! same device (the same job's grant; on an unmanaged backend, any session of the device), so a
//! secret that reaches another job opens nothing.
//! - Where both sessions share one context (the CPU device), the importer's buffer is the
//!   exporter's memory itself.
//! - Where each has a process of its own (session workers), the importer's context opens the
//!   exporter's allocation by the driver's IPC handle.
//!
//! Either way the importer's buffer holds the exporter's allocation: the memory outlives the
//! exporter's free (and its session) until the last importer has closed it (where CUDA leaves a
//! free before the importers' close undefined), and stays counted against the exporter's quota
//! alone. A session that opens the same memory twice gets the same allocation under two ids, as
//! a driver maps a handle once per context.
//!
//! Physical memory (protocol 19; `cuMemExportToShareableHandle`) is shared by the same secrets
//! and checks ([`Session::export_physical`], [`Session::import_physical`]): the importer's
//! context imports the exporter's by the driver's shareable handle, a descriptor passed between
//! the two session workers, and its `Physical` shares the exporter's charge against its quota
//! (`session::vmm`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use ac_proto::backend::{BufferId, ErrorKind, WireError};

use super::vmm::Physical;
use super::{Allocation, Session};
use crate::device::Context;

/// The backend's shared memory, by secret.
#[derive(Debug, Default)]
pub struct Exports(Mutex<HashMap<[u8; 16], Export>>);

/// One shared piece of memory of a session.
#[derive(Debug, Clone)]
struct Export {
    session: Weak<Session>,
    what: Shared,
}

/// What a secret shares. Buffer ids are never reused, so a secret never names memory
/// allocated after its buffer was freed.
#[derive(Debug, Clone)]
enum Shared {
    /// An allocation (protocol 18).
    Buffer(BufferId),
    /// Physical memory (protocol 19), while it lives: after its release, while mapped.
    Physical(Weak<Physical>),
}

impl Shared {
    /// Whether the memory may still be there: physical memory no holder keeps is gone (and its
    /// export with it, so that a session that makes and lets go of memory all day keeps no
    /// table of the dead).
    fn lives(&self) -> bool {
        match self {
            Shared::Buffer(_) => true,
            Shared::Physical(physical) => physical.strong_count() > 0,
        }
    }

    /// Whether the two share the same memory.
    fn same(&self, other: &Shared) -> bool {
        match (self, other) {
            (Shared::Buffer(a), Shared::Buffer(b)) => a == b,
            (Shared::Physical(a), Shared::Physical(b)) => a.ptr_eq(b),
            _ => false,
        }
    }
}

/// Memory a buffer opened from another session's export: the buffer holds it.
#[derive(Debug)]
pub struct Opened {
    /// The exporter's allocation, kept until this buffer goes: the importer's
    /// `Allocation::drop` closes the driver's mapping before its fields, this one among them,
    /// are dropped, so the exporter's memory is freed only once the mapping is closed.
    source: Arc<Allocation>,
    /// Whether the context opened it through the driver ([`Context::open_allocation`]), and so
    /// closes it when the buffer goes; else it is the source's memory in the same context.
    pub by_driver: bool,
}

impl Exports {
    /// The table, without the exports of sessions gone. No other lock is taken under it, and
    /// nothing a session holds is dropped under it (a session worker's calls may block).
    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 16], Export>> {
        let mut exports = self.0.lock().unwrap_or_else(|p| p.into_inner());
        exports.retain(|_, export| export.session.strong_count() > 0 && export.what.lives());
        exports
    }

    /// The secret of what `session` shares: the one it was given before, else a new one.
    fn secret_of(&self, session: &Arc<Session>, what: Shared) -> [u8; 16] {
        let mut exports = self.live();
        let mine = Arc::downgrade(session);
        let known = exports.iter().find(|(_, e)| e.what.same(&what) && e.session.ptr_eq(&mine));
        if let Some((secret, _)) = known {
            return *secret;
        }
        let secret = super::random_token();
        exports.insert(secret, Export { session: mine, what });
        secret
    }

    /// The export `secret` names.
    fn named(&self, secret: &[u8; 16]) -> Option<Export> {
        self.live().get(secret).cloned()
    }
}

/// The refusal of a secret that names no memory shared now.
fn not_shared() -> WireError {
    WireError::new(
        ErrorKind::InvalidBuffer,
        "no memory is shared by that handle on this backend: it was never shared, or it was freed, or the session \
         that shared it ended",
    )
}

/// The refusal of an allocation's secret where physical memory's was asked for.
fn not_physical() -> WireError {
    WireError::new(
        ErrorKind::InvalidArgument,
        "that handle shares an allocation (cuIpcGetMemHandle), which is opened, not imported",
    )
}

/// The refusal of physical memory's secret where an allocation's was asked for.
fn not_an_allocation() -> WireError {
    WireError::new(
        ErrorKind::InvalidArgument,
        "that handle shares physical memory (cuMemExportToShareableHandle), which is imported, not opened",
    )
}

/// Whether two sessions' contexts are one (the CPU device's, shared by its sessions).
fn same_context(a: &Arc<dyn Context>, b: &Arc<dyn Context>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl Session {
    /// Shares `buffer`, an allocation of this session's, with the other sessions of its
    /// capability on its device: the secret that opens it ([`Session::import_memory`]).
    pub fn export_memory(self: &Arc<Self>, buffer: BufferId) -> Result<[u8; 16], WireError> {
        let allocation = self.buffer(buffer)?;
        if allocation.held.is_none() {
            let what = "a module's variable, a reserved range or memory another session shared";
            return Err(WireError::new(
                ErrorKind::InvalidBuffer,
                format!("buffer {} is {what}: only memory this session allocated may be shared", buffer.0),
            ));
        }
        Ok(self.exports.secret_of(self, Shared::Buffer(buffer)))
    }

    /// The session that shared what `secret` names, and what it shared. Refused unless it is
    /// another live session opened with this one's capability on this one's device.
    fn exporter(self: &Arc<Self>, secret: &[u8; 16]) -> Result<(Arc<Session>, Shared), WireError> {
        let export = self.exports.named(secret).ok_or_else(not_shared)?;
        let exporter = export.session.upgrade().filter(|s| !s.has_ended()).ok_or_else(not_shared)?;
        if Arc::ptr_eq(&exporter, self) {
            return Err(WireError::new(
                ErrorKind::InvalidArgument,
                "a session cannot open memory it shared itself (CUDA refuses a handle in the process that made it)",
            ));
        }
        if exporter.capability != self.capability || exporter.device != self.device {
            return Err(WireError::new(
                ErrorKind::Unauthorized,
                "the memory was shared by another job or on another device: only sessions opened with the same \
                 capability on the same device may open it",
            ));
        }
        Ok((exporter, export.what))
    }

    /// Opens the memory `secret` shares as a buffer of this session: its id, device address
    /// and size. Refused unless the exporter is another live session opened with this one's
    /// capability on this one's device, still holding the memory.
    pub fn import_memory(self: &Arc<Self>, secret: &[u8; 16]) -> Result<(BufferId, u64, u64), WireError> {
        let (exporter, what) = self.exporter(secret)?;
        let Shared::Buffer(buffer) = what else { return Err(not_an_allocation()) };
        let source = exporter.buffer(buffer).map_err(|_| not_shared())?;
        // Opened already: the same memory under another id (a driver maps a handle once per
        // context, and the first close would unmap it under the second).
        if let Some(opened) = self.opened_from(&source) {
            let (address, size) = (opened.mem.0, opened.size);
            return Ok((self.enter(opened), address, size));
        }
        let (mem, by_driver) = if same_context(&exporter.context, &self.context) {
            (source.mem, false)
        } else {
            let handle = exporter.context.export_allocation(source.mem)?;
            (self.context.open_allocation(&handle, source.size)?, true)
        };
        let size = source.size;
        let opened = Some(Opened { source, by_driver });
        let id = self.insert(Allocation { mem, size, context: self.context.clone(), held: None, range: None, opened });
        Ok((id, mem.0, size))
    }

    /// Shares physical memory `id` with the other sessions of this one's capability on its
    /// device (`cuMemExportToShareableHandle`): the secret that imports it
    /// ([`Session::import_physical`]) while it lives (a mapping holds it after its release).
    /// The driver is asked to export it now, so that a GPU that cannot refuses here, not in the
    /// importer; its descriptor is kept for the imports. Memory this session imported is not
    /// its to share.
    pub fn export_physical(self: &Arc<Self>, id: u64) -> Result<[u8; 16], WireError> {
        let physical = self.physical(id)?;
        if physical.imported {
            let why = format!("physical memory {id} was imported from another session: only memory this session created may be shared");
            return Err(WireError::new(ErrorKind::InvalidBuffer, why));
        }
        physical.descriptor()?;
        Ok(self.exports.secret_of(self, Shared::Physical(Arc::downgrade(&physical))))
    }

    /// Imports the physical memory `secret` shares as this session's (`cuMemImportFromShareableHandle`):
    /// its id and size. This session's context imports the driver's shareable descriptor the
    /// exporter's context gave; the memory stays counted against the exporter's quota until the
    /// import is released and unmapped. Imported again while the session's import has an id, it is that
    /// import under a second id (one driver handle), as protocol 18 opens memory once a session.
    pub fn import_physical(self: &Arc<Self>, secret: &[u8; 16]) -> Result<(u64, u64), WireError> {
        let (_, what) = self.exporter(secret)?;
        let Shared::Physical(source) = what else { return Err(not_physical()) };
        let source = source.upgrade().ok_or_else(not_shared)?;
        let size = source.size;
        if let Some(imported) = self.imported_from(&source) {
            return Ok((self.enter_physical(imported), size));
        }
        let handle = self.context.import_physical(std::os::fd::AsFd::as_fd(&*source.descriptor()?), size)?;
        let imported = Physical::new(handle, size, self.context.clone(), source.charge.clone(), true);
        Ok((self.enter_physical(Arc::new(imported)), size))
    }

    /// The buffer of this session's that opened `source`, if one did.
    fn opened_from(&self, source: &Arc<Allocation>) -> Option<Arc<Allocation>> {
        let buffers = self.buffers.lock().expect("buffer table poisoned");
        let opened = |a: &&Arc<Allocation>| a.opened.as_ref().is_some_and(|o| Arc::ptr_eq(&o.source, source));
        buffers.values().find(opened).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CopySettings;
    use crate::device::{CpuDevice, Device, DeviceStream};
    use crate::metrics::Metrics;
    use crate::session::fence::Fences;
    use crate::session::{Limits, Registry};

    const STREAM: DeviceStream = DeviceStream(0);

    /// A session of `registry` on `device` (index `index`), opened with `capability`.
    fn session(registry: &Registry, device: &Arc<CpuDevice>, index: u32, capability: Option<u64>) -> Arc<Session> {
        let context = device.open_context().unwrap();
        let limits = Limits { budget: 1 << 20, quota: None };
        let opened = (capability, index, device.clone() as Arc<dyn Device>);
        let metrics = Arc::new(Metrics::default());
        registry.open(context, CopySettings::default(), opened, Fences::channel().0, limits, metrics).0
    }

    fn read(session: &Session, buffer: BufferId, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        let mem = session.buffer(buffer).unwrap().mem;
        session.context.read(mem, 0, &mut out, STREAM).unwrap();
        out
    }

    fn write(session: &Session, buffer: BufferId, bytes: &[u8]) {
        let mem = session.buffer(buffer).unwrap().mem;
        session.context.write(mem, 0, bytes, STREAM).unwrap();
    }

    /// Two sessions of one capability share an allocation: each sees the other's writes, the
    /// memory outlives its owner's free while the other holds it, and goes with the last holder.
    #[test]
    fn memory_one_session_shares_is_the_same_memory_in_another_until_both_let_it_go() {
        let registry = Registry::default();
        let device = Arc::new(CpuDevice::new(0, 1 << 20));
        let (owner, other) = (session(&registry, &device, 0, Some(7)), session(&registry, &device, 0, Some(7)));
        let free_before = device.info().memory_free;
        let (buffer, address) = owner.alloc_at(64).unwrap();
        write(&owner, buffer, &[5; 64]);
        let secret = owner.export_memory(buffer).unwrap();
        assert_eq!(owner.export_memory(buffer).unwrap(), secret, "one secret for one buffer");
        let (opened, at, size) = other.import_memory(&secret).unwrap();
        assert_eq!((at, size), (address, 64), "the same memory, whole");
        let (again, again_at, _) = other.import_memory(&secret).unwrap();
        assert!(again != opened && again_at == at, "another id at the same address");
        let both = (other.buffer(opened).unwrap(), other.buffer(again).unwrap());
        assert!(Arc::ptr_eq(&both.0, &both.1), "opened once: one allocation under both ids");
        drop(both);
        other.free(again).unwrap();
        assert_eq!(read(&other, opened, 64), [5; 64]);
        write(&other, opened, &[9; 64]);
        assert_eq!(read(&owner, buffer, 64), [9; 64], "the owner sees the other's writes");
        owner.free(buffer).unwrap();
        assert_eq!(read(&other, opened, 64), [9; 64], "kept while the other holds it");
        let late = session(&registry, &device, 0, Some(7)).import_memory(&secret).unwrap_err();
        assert_eq!(late.kind, ErrorKind::InvalidBuffer, "{}", late.message);
        assert_eq!(device.info().memory_free, free_before - 64, "held by the other alone");
        other.free(opened).unwrap();
        assert_eq!(device.info().memory_free, free_before, "gone with its last holder");
    }

    /// A secret opens nothing for another capability, another device, the session that shared
    /// it, or whoever guesses; only a session's own allocations may be shared.
    #[test]
    fn shared_memory_opens_only_in_another_session_of_the_same_capability_and_device() {
        let registry = Registry::default();
        let (first, second) = (Arc::new(CpuDevice::new(0, 1 << 20)), Arc::new(CpuDevice::new(1, 1 << 20)));
        let owner = session(&registry, &first, 0, Some(7));
        let (buffer, _) = owner.alloc_at(64).unwrap();
        let secret = owner.export_memory(buffer).unwrap();
        let refusals = [
            (session(&registry, &first, 0, Some(8)).import_memory(&secret), ErrorKind::Unauthorized),
            (session(&registry, &first, 0, None).import_memory(&secret), ErrorKind::Unauthorized),
            (session(&registry, &second, 1, Some(7)).import_memory(&secret), ErrorKind::Unauthorized),
            (owner.import_memory(&secret), ErrorKind::InvalidArgument),
            (session(&registry, &first, 0, Some(7)).import_memory(&[0; 16]), ErrorKind::InvalidBuffer),
        ];
        for (refused, kind) in refusals {
            let e = refused.expect_err("refused");
            assert_eq!(e.kind, kind, "{}", e.message);
        }
        let other = session(&registry, &first, 0, Some(7));
        let (opened, _, _) = other.import_memory(&secret).unwrap();
        let again = other.export_memory(opened).unwrap_err();
        assert!(again.message.contains("only memory this session allocated"), "{}", again.message);
        let variable = owner.adopt_variable(owner.buffer(buffer).unwrap().mem, 8);
        assert_eq!(owner.export_memory(variable).unwrap_err().kind, ErrorKind::InvalidBuffer);
        other.free(opened).expect("opened memory is closed by a free");
    }
}

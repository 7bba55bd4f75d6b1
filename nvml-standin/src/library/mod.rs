//! The library's model in safe Rust: initialisation, device handles, the queries and the event
//! sets. The exported C functions in `lib.rs` only move values across the FFI boundary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nvml_wrapper_sys::bindings::*;

use crate::events::{pending_lines, EventSet, Injected};
use crate::state::{Gpu, Instance, PciAddress, Sensors, State, StateFile, MIB};
use crate::Error;

/// An `nvmlReturn_t` error code.
pub type Code = u32;

/// What the event data says for an event not attributable to a MIG instance.
pub const NO_INSTANCE: u32 = 0xFFFF_FFFF;

/// The event types every device reports as supported.
pub const SUPPORTED_EVENTS: u64 =
    (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError) as u64;

/// Device handles: `(index + 1) << 8 | DEVICE_TAG`, the index into `Library::handles`; event
/// sets the same with `SET_TAG`. Never null, and one kind is never taken for the other.
const DEVICE_TAG: usize = 0xD1;
const SET_TAG: usize = 0xE5;

fn encode(index: usize, tag: usize) -> usize {
    (index + 1) << 8 | tag
}

fn decode(handle: usize, tag: usize) -> Option<usize> {
    (handle & 0xFF == tag && handle >> 8 != 0).then(|| (handle >> 8) - 1)
}

/// A device handle resolved against the current state.
#[derive(Debug, Clone, Copy)]
pub enum Device<'s> {
    Gpu { index: usize, gpu: &'s Gpu },
    Instance { gpu: &'s Gpu, instance: &'s Instance },
}

impl<'s> Device<'s> {
    /// The physical GPU (itself, or the instance's parent).
    fn gpu(self) -> &'s Gpu {
        match self {
            Device::Gpu { gpu, .. } | Device::Instance { gpu, .. } => gpu,
        }
    }

    /// The physical GPU, or `code` for a MIG instance.
    fn whole(self, code: Code) -> Result<(usize, &'s Gpu), Code> {
        match self {
            Device::Gpu { index, gpu } => Ok((index, gpu)),
            Device::Instance { .. } => Err(code),
        }
    }

    /// The MIG instance, or `code` for a physical GPU.
    fn instance(self, code: Code) -> Result<(&'s Gpu, &'s Instance), Code> {
        match self {
            Device::Instance { gpu, instance } => Ok((gpu, instance)),
            Device::Gpu { .. } => Err(code),
        }
    }
}

/// An event delivered by `nvmlEventSetWait_v2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The registered handle the event is reported on.
    pub device: usize,
    pub xid: u64,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// The whole library's state: one per process behind a lock, or one per unit test.
#[derive(Debug, Default)]
pub struct Library {
    /// `nvmlInit` calls not yet matched by `nvmlShutdown`.
    init_count: u32,
    state: Option<StateFile>,
    events: Option<PathBuf>,
    /// The UUID each device handle stands for; handles live as long as the process.
    handles: Vec<String>,
    sets: HashMap<usize, EventSet>,
    next_set: usize,
}

impl Library {
    /// `nvmlInit`: reads the state file on the first call (no file: no driver), counts the
    /// others, as NVML does.
    pub fn init(&mut self, state: Option<&Path>, events: Option<PathBuf>) -> Result<(), Code> {
        if self.init_count == 0 {
            let path = state.ok_or(nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED)?;
            match StateFile::open(path) {
                Ok(file) => self.state = Some(file),
                Err(error @ Error::Read { .. }) => {
                    eprintln!("nvml-standin: no driver: {error}");
                    return Err(nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED);
                }
                Err(error) => {
                    eprintln!("nvml-standin: {error}");
                    return Err(nvmlReturn_enum_NVML_ERROR_UNKNOWN);
                }
            }
            self.events = events;
        }
        self.init_count += 1;
        Ok(())
    }

    /// `nvmlShutdown`: the last one ends every call but `nvmlInit` and the version queries.
    pub fn shutdown(&mut self) -> Result<(), Code> {
        self.init_count = self.init_count.checked_sub(1).ok_or(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED)?;
        if self.init_count == 0 {
            self.state = None;
            self.sets.clear();
        }
        Ok(())
    }

    /// The current state (read again if the file changed) and the handle table.
    fn parts(&mut self) -> Result<(&State, &mut Vec<String>), Code> {
        if self.init_count == 0 {
            return Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        }
        let state = self.state.as_mut().ok_or(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED)?.refresh();
        Ok((state, &mut self.handles))
    }

    /// The current state.
    pub fn state(&mut self) -> Result<&State, Code> {
        self.parts().map(|(state, _)| state)
    }

    /// The handle that stands for `uuid`, made on first use.
    fn intern(handles: &mut Vec<String>, uuid: &str) -> usize {
        let index = handles.iter().position(|known| known == uuid).unwrap_or_else(|| {
            handles.push(uuid.to_owned());
            handles.len() - 1
        });
        encode(index, DEVICE_TAG)
    }

    /// Resolves a handle: unknown is an invalid argument; gone from the state, or on a GPU that
    /// fell off the bus, is lost.
    fn resolve<'s>(state: &'s State, handles: &[String], handle: usize) -> Result<Device<'s>, Code> {
        let uuid = decode(handle, DEVICE_TAG)
            .and_then(|index| handles.get(index))
            .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        let (g, instance) = state.find(uuid).ok_or(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST)?;
        let gpu = &state.gpus[g];
        if gpu.lost {
            return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
        }
        Ok(match instance {
            None => Device::Gpu { index: g, gpu },
            Some(i) => Device::Instance { gpu, instance: &gpu.live_instances()[i] },
        })
    }

    /// The device a handle stands for now.
    pub fn device(&mut self, handle: usize) -> Result<Device<'_>, Code> {
        let (state, handles) = self.parts()?;
        Self::resolve(state, handles, handle)
    }

    pub fn driver_version(&mut self) -> Result<String, Code> {
        Ok(self.state()?.driver_version.clone())
    }

    pub fn count(&mut self) -> Result<u32, Code> {
        Ok(self.state()?.gpus.len() as u32)
    }

    /// `nvmlDeviceGetHandleByIndex_v2`: a lost GPU has no handle to give, as NVML documents.
    pub fn by_index(&mut self, index: u32) -> Result<usize, Code> {
        let (state, handles) = self.parts()?;
        let gpu = state.gpus.get(index as usize).ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
        }
        Ok(Self::intern(handles, &gpu.uuid))
    }

    /// `nvmlDeviceGetHandleByUUID`, for GPUs and MIG instances alike.
    pub fn by_uuid(&mut self, uuid: &str) -> Result<usize, Code> {
        let (state, handles) = self.parts()?;
        let (g, _) = state.find(uuid).ok_or(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)?;
        if state.gpus[g].lost {
            return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
        }
        Ok(Self::intern(handles, uuid))
    }

    pub fn index(&mut self, handle: usize) -> Result<u32, Code> {
        let (index, _) = self.device(handle)?.whole(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        Ok(index as u32)
    }

    pub fn uuid(&mut self, handle: usize) -> Result<String, Code> {
        Ok(match self.device(handle)? {
            Device::Gpu { gpu, .. } => gpu.uuid.clone(),
            Device::Instance { instance, .. } => instance.uuid.clone(),
        })
    }

    pub fn name(&mut self, handle: usize) -> Result<String, Code> {
        Ok(match self.device(handle)? {
            Device::Gpu { gpu, .. } => gpu.name.clone(),
            Device::Instance { instance, .. } => instance.name.clone(),
        })
    }

    /// The parent GPU's PCI address and bus id, for a MIG instance too.
    pub fn pci(&mut self, handle: usize) -> Result<(PciAddress, String), Code> {
        let gpu = self.device(handle)?.gpu();
        let address = gpu.pci_address().ok_or(nvmlReturn_enum_NVML_ERROR_UNKNOWN)?;
        Ok((address, gpu.pci_bus_id.clone()))
    }

    /// Total and used bytes: the instance's own for a MIG instance.
    pub fn memory(&mut self, handle: usize) -> Result<(u64, u64), Code> {
        Ok(match self.device(handle)? {
            Device::Gpu { gpu, .. } => (gpu.memory_mib * MIB, gpu.used_mib * MIB),
            Device::Instance { instance, .. } => (instance.memory_mib * MIB, instance.used_mib * MIB),
        })
    }

    pub fn compute_mode(&mut self, handle: usize) -> Result<u32, Code> {
        let (_, gpu) = self.device(handle)?.whole(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        Ok(gpu.compute_mode.code())
    }

    /// The parent's, for a MIG instance.
    pub fn capability(&mut self, handle: usize) -> Result<[i32; 2], Code> {
        Ok(self.device(handle)?.gpu().capability)
    }

    /// Current MIG mode (pending is the same): not supported on a GPU without MIG or on an
    /// instance.
    pub fn mig_mode(&mut self, handle: usize) -> Result<u32, Code> {
        let (_, gpu) = self.device(handle)?.whole(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        let mig = gpu.mig.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        Ok(if mig { NVML_DEVICE_MIG_ENABLE } else { NVML_DEVICE_MIG_DISABLE })
    }

    pub fn max_mig_devices(&mut self, handle: usize) -> Result<u32, Code> {
        let (_, gpu) = self.device(handle)?.whole(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        Ok(match gpu.mig {
            None => return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED),
            Some(false) => 0,
            Some(true) => gpu.max_mig_devices.unwrap_or(gpu.instances.len() as u32),
        })
    }

    pub fn mig_device_by_index(&mut self, handle: usize, index: u32) -> Result<usize, Code> {
        let (state, handles) = self.parts()?;
        let (_, gpu) = Self::resolve(state, handles, handle)?.whole(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        if gpu.mig.is_none() {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        let instance = gpu.live_instances().get(index as usize).ok_or(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)?;
        Ok(Self::intern(handles, &instance.uuid))
    }

    pub fn is_mig_device(&mut self, handle: usize) -> Result<bool, Code> {
        Ok(matches!(self.device(handle)?, Device::Instance { .. }))
    }

    pub fn mig_parent(&mut self, handle: usize) -> Result<usize, Code> {
        let (state, handles) = self.parts()?;
        let (gpu, _) = Self::resolve(state, handles, handle)?.instance(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        Ok(Self::intern(handles, &gpu.uuid))
    }

    /// (GPU instance id, compute instance id); not supported on a physical GPU.
    pub fn instance_ids(&mut self, handle: usize) -> Result<(u32, u32), Code> {
        let (_, instance) = self.device(handle)?.instance(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        Ok((instance.gpu_instance, instance.compute_instance))
    }

    pub fn supported_events(&mut self, handle: usize) -> Result<u64, Code> {
        self.device(handle)?;
        Ok(SUPPORTED_EVENTS)
    }

    /// The health queries answer for the physical GPU only: a MIG instance's health is its
    /// parent's, so the caller must ask the parent.
    fn health(&mut self, handle: usize) -> Result<&Gpu, Code> {
        self.device(handle)?.whole(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED).map(|(_, gpu)| gpu)
    }

    /// One of a GPU's sensor readings, as `read` takes it from the state file: not supported
    /// where the file gives none, and on a MIG instance, which the stand-in gives none of its own.
    pub fn sensor<T>(&mut self, handle: usize, read: impl FnOnce(&Sensors) -> Option<T>) -> Result<T, Code> {
        let gpu = self.health(handle)?;
        gpu.sensors.as_ref().and_then(read).ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
    }

    pub fn retired_pages_pending(&mut self, handle: usize) -> Result<bool, Code> {
        Ok(self.health(handle)?.retired_pages_pending)
    }

    /// `nvmlDeviceGetTotalEccErrors`: the same count for either counter type.
    #[allow(non_upper_case_globals)] // the C header's names
    pub fn total_ecc_errors(&mut self, handle: usize, error_type: u32, counter: u32) -> Result<u64, Code> {
        let gpu = self.health(handle)?;
        if counter >= nvmlEccCounterType_enum_NVML_ECC_COUNTER_TYPE_COUNT {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        match error_type {
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => Ok(gpu.corrected_ecc),
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => Ok(gpu.uncorrected_ecc),
            _ => Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT),
        }
    }

    pub fn pcie_replays(&mut self, handle: usize) -> Result<u32, Code> {
        Ok(self.health(handle)?.pcie_replays)
    }

    /// `nvmlEventSetCreate`: the set sees lines appended from now on.
    pub fn create_set(&mut self) -> Result<usize, Code> {
        self.state()?;
        let id = self.next_set;
        self.next_set += 1;
        self.sets.insert(id, EventSet::new(self.events.as_deref()));
        Ok(encode(id, SET_TAG))
    }

    fn set_id(&self, set: usize) -> Result<usize, Code> {
        decode(set, SET_TAG).filter(|id| self.sets.contains_key(id)).ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)
    }

    pub fn free_set(&mut self, set: usize) -> Result<(), Code> {
        self.state()?;
        let id = self.set_id(set)?;
        self.sets.remove(&id);
        Ok(())
    }

    /// `nvmlDeviceRegisterEvents`: a type the device does not support is refused, as NVML does.
    pub fn register(&mut self, handle: usize, mask: u64, set: usize) -> Result<(), Code> {
        let uuid = self.uuid(handle)?;
        let id = self.set_id(set)?;
        if mask & !SUPPORTED_EVENTS != 0 {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        self.sets.get_mut(&id).ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?.register(&uuid, mask);
        Ok(())
    }

    /// One look at the events file for `set`: the first new line addressed to a device
    /// registered on it, or none. Lines passed over are consumed.
    pub fn poll(&mut self, set: usize) -> Result<Option<Event>, Code> {
        if self.init_count == 0 {
            return Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        }
        let id = self.set_id(set)?;
        let Library { state, handles, events, sets, .. } = self;
        let state = state.as_mut().ok_or(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED)?.refresh();
        let (Some(path), Some(set)) = (events.as_deref(), sets.get_mut(&id)) else {
            return Ok(None);
        };
        for (line, end) in pending_lines(path, &mut set.offset) {
            set.offset = end;
            let Some(injected) = Injected::parse(&line) else {
                eprintln!("nvml-standin: ignoring the event line {line:?} (not `<uuid> xid <number>`)");
                continue;
            };
            if let Some((uuid, gpu_instance, compute_instance)) = route(state, set, &injected) {
                let device = Self::intern(handles, uuid);
                return Ok(Some(Event { device, xid: injected.xid, gpu_instance, compute_instance }));
            }
        }
        Ok(None)
    }
}

/// To whom an injected Xid is reported on `set`: the device named if registered, else for a
/// MIG instance its parent GPU if registered (with the instance's ids), else nobody.
fn route<'s>(state: &'s State, set: &EventSet, injected: &Injected) -> Option<(&'s str, u32, u32)> {
    let Some((g, instance)) = state.find(&injected.uuid) else {
        eprintln!("nvml-standin: ignoring an event for {}, no such device", injected.uuid);
        return None;
    };
    let gpu = &state.gpus[g];
    match instance.map(|i| &gpu.live_instances()[i]) {
        None => set.wants_xid(&gpu.uuid).then_some((gpu.uuid.as_str(), NO_INSTANCE, NO_INSTANCE)),
        Some(instance) => {
            let ids = (instance.gpu_instance, instance.compute_instance);
            [&instance.uuid, &gpu.uuid]
                .into_iter()
                .find(|uuid| set.wants_xid(uuid))
                .map(|uuid| (uuid.as_str(), ids.0, ids.1))
        }
    }
}

#[cfg(test)]
mod tests;

//! The library's model in safe Rust: initialisation, device handles, the queries and the event
//! sets. The exported C functions in `lib.rs` only move values across the FFI boundary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nvml_wrapper_sys::bindings::*;

use crate::events::{pending_lines, EventSet, Injected};
use crate::state::{Gpu, Instance, PciAddress, State, StateFile, MIB};
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
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;

    const XID: u64 = nvmlEventTypeXidCriticalError as u64;

    const MACHINE: &str = r#"
        driver_version = "570.1.2"
        [[gpu]]
        uuid = "GPU-0"
        name = "NVIDIA H100 80GB HBM3"
        pci_bus_id = "00000000:17:00.0"
        memory_mib = 81559
        used_mib = 559
        compute_mode = "exclusive_process"
        capability = [9, 0]
        uncorrected_ecc = 2
        corrected_ecc = 5
        pcie_replays = 3
        retired_pages_pending = true
        [[gpu]]
        uuid = "GPU-1"
        name = "NVIDIA A100-SXM4-40GB"
        pci_bus_id = "00000001:2A:00.0"
        memory_mib = 40960
        capability = [8, 0]
        mig = true
          [[gpu.instance]]
          uuid = "MIG-a"
          name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
          memory_mib = 4864
          gpu_instance = 7
          compute_instance = 0
          [[gpu.instance]]
          uuid = "MIG-b"
          name = "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
          memory_mib = 19968
          used_mib = 100
          gpu_instance = 2
          compute_instance = 1
    "#;

    /// A library initialised on `text`, with its state and events files.
    fn library(test: &str, text: &str) -> (Library, PathBuf, PathBuf) {
        let state = crate::tests::temp_path(&format!("{test}.toml"));
        let events = crate::tests::temp_path(&format!("{test}.events"));
        fs::write(&state, text).unwrap();
        let mut library = Library::default();
        library.init(Some(&state), Some(events.clone())).unwrap();
        (library, state, events)
    }

    /// Writes a new version of the state file beside it and renames it over, as a test should.
    fn rewrite(path: &Path, text: &str) {
        let next = path.with_extension("next");
        fs::write(&next, text).unwrap();
        fs::rename(&next, path).unwrap();
    }

    fn append(path: &Path, line: &str) {
        let mut file = fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(file, "{line}").unwrap();
    }

    #[test]
    fn without_a_state_file_there_is_no_driver_and_nothing_answers() {
        let mut library = Library::default();
        assert_eq!(library.init(None, None), Err(nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED));
        let missing = crate::tests::temp_path("missing.toml");
        assert_eq!(library.init(Some(&missing), None), Err(nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED));
        assert_eq!(library.count(), Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED));
        assert_eq!(library.shutdown(), Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED));
        let broken = crate::tests::temp_path("broken.toml");
        fs::write(&broken, "[[gpu]]\nuuid = 3").unwrap();
        assert_eq!(library.init(Some(&broken), None), Err(nvmlReturn_enum_NVML_ERROR_UNKNOWN));
    }

    #[test]
    fn init_is_counted_and_the_last_shutdown_ends_the_calls() {
        let (mut library, state, _) = library("counted", MACHINE);
        library.init(None, None).unwrap();
        library.shutdown().unwrap();
        assert_eq!(library.count(), Ok(2));
        library.shutdown().unwrap();
        assert_eq!(library.count(), Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED));
        fs::remove_file(state).unwrap();
    }

    #[test]
    fn the_inventory_reads_back_as_written() {
        let (mut nvml, state, _) = library("inventory", MACHINE);
        assert_eq!(nvml.driver_version().unwrap(), "570.1.2");
        let gpu0 = nvml.by_index(0).unwrap();
        let gpu1 = nvml.by_uuid("GPU-1").unwrap();
        assert_ne!(gpu0, 0);
        assert_eq!(nvml.by_index(1), Ok(gpu1), "one handle per device");
        assert_eq!(nvml.by_index(2), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(nvml.by_uuid("GPU-9"), Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND));
        assert_eq!(nvml.index(gpu1), Ok(1));
        assert_eq!(nvml.uuid(gpu0).unwrap(), "GPU-0");
        assert_eq!(nvml.name(gpu1).unwrap(), "NVIDIA A100-SXM4-40GB");
        assert_eq!(nvml.memory(gpu0), Ok((81559 * MIB, 559 * MIB)));
        assert_eq!(nvml.compute_mode(gpu0), Ok(3));
        assert_eq!(nvml.compute_mode(gpu1), Ok(0));
        assert_eq!(nvml.capability(gpu1), Ok([8, 0]));
        let (address, bus_id) = nvml.pci(gpu1).unwrap();
        assert_eq!((address, bus_id.as_str()), (PciAddress { domain: 1, bus: 0x2a, device: 0 }, "00000001:2A:00.0"));
        assert_eq!(nvml.retired_pages_pending(gpu0), Ok(true));
        assert_eq!(nvml.total_ecc_errors(gpu0, 1, 0), Ok(2));
        assert_eq!(nvml.total_ecc_errors(gpu0, 0, 1), Ok(5));
        assert_eq!(nvml.total_ecc_errors(gpu0, 2, 0), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(nvml.pcie_replays(gpu0), Ok(3));
        assert_eq!(nvml.uuid(0x1234), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT), "not a handle");
        fs::remove_file(state).unwrap();
    }

    #[test]
    fn mig_instances_are_devices_of_their_own_under_their_parent() {
        let (mut nvml, state, _) = library("mig", MACHINE);
        let (gpu0, gpu1) = (nvml.by_index(0).unwrap(), nvml.by_index(1).unwrap());
        assert_eq!(nvml.mig_mode(gpu0), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED), "no MIG on that GPU");
        assert_eq!(nvml.mig_device_by_index(gpu0, 0), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(nvml.mig_mode(gpu1), Ok(NVML_DEVICE_MIG_ENABLE));
        assert_eq!(nvml.max_mig_devices(gpu1), Ok(2));
        let b = nvml.mig_device_by_index(gpu1, 1).unwrap();
        assert_eq!(nvml.mig_device_by_index(gpu1, 2), Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND));
        assert_eq!(nvml.by_uuid("MIG-b"), Ok(b));
        assert_eq!(nvml.is_mig_device(b), Ok(true));
        assert_eq!(nvml.is_mig_device(gpu1), Ok(false));
        assert_eq!(nvml.mig_parent(b), Ok(gpu1));
        assert_eq!(nvml.mig_parent(gpu1), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(nvml.instance_ids(b), Ok((2, 1)));
        assert_eq!(nvml.instance_ids(gpu1), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(nvml.uuid(b).unwrap(), "MIG-b");
        assert_eq!(nvml.name(b).unwrap(), "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
        assert_eq!(nvml.memory(b), Ok((19968 * MIB, 100 * MIB)));
        assert_eq!(nvml.capability(b), Ok([8, 0]), "the parent's");
        assert_eq!(nvml.pci(b).unwrap().1, "00000001:2A:00.0", "the parent's");
        assert_eq!(nvml.mig_mode(b), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(nvml.index(b), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(nvml.compute_mode(b), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED));
        assert_eq!(nvml.total_ecc_errors(b, 1, 0), Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED), "ask the parent");

        rewrite(&state, &MACHINE.replace("mig = true", "mig = true\nmax_mig_devices = 7"));
        assert_eq!(nvml.max_mig_devices(gpu1), Ok(7));
        assert_eq!(nvml.mig_device_by_index(gpu1, 3), Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND));
        rewrite(&state, &MACHINE.replace("mig = true", "mig = false"));
        assert_eq!(nvml.max_mig_devices(gpu1), Ok(0));
        assert_eq!(nvml.mig_mode(gpu1), Ok(NVML_DEVICE_MIG_DISABLE));
        assert_eq!(nvml.uuid(b), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST), "the instance is gone");
        fs::remove_file(state).unwrap();
    }

    #[test]
    fn a_rewrite_changes_the_devices_under_the_same_handles() {
        let (mut nvml, state, _) = library("rewrite", MACHINE);
        let (gpu0, gpu1) = (nvml.by_index(0).unwrap(), nvml.by_index(1).unwrap());
        let a = nvml.mig_device_by_index(gpu1, 0).unwrap();
        rewrite(&state, &MACHINE.replacen("pcie_replays = 3", "pcie_replays = 4\nlost = true", 1));
        assert_eq!(nvml.memory(gpu0), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST));
        assert_eq!(nvml.by_index(0), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST));
        assert_eq!(nvml.count(), Ok(2), "a lost GPU is still counted");
        assert_eq!(nvml.memory(gpu1), Ok((40960 * MIB, 0)), "the other GPU serves on");

        rewrite(&state, &MACHINE.replace("mig = true", "mig = true\nlost = true"));
        assert_eq!(nvml.memory(gpu0), Ok((81559 * MIB, 559 * MIB)), "back after a reset");
        assert_eq!(nvml.name(a), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST), "an instance of a lost GPU");

        // Reordered: handles follow the UUID, not the position.
        let (first, second) = MACHINE.split_at(MACHINE.find("[[gpu]]\n        uuid = \"GPU-1\"").unwrap());
        let (header, first) = first.split_at(first.find("[[gpu]]").unwrap());
        rewrite(&state, &format!("{header}{second}\n{first}"));
        assert_eq!(nvml.index(gpu0), Ok(1));
        assert_eq!(nvml.by_index(0), Ok(gpu1));
        rewrite(&state, "");
        assert_eq!(nvml.uuid(gpu0), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST), "removed");
        fs::remove_file(state).unwrap();
    }

    #[test]
    fn xids_reach_the_sets_that_registered_their_device_in_order() {
        let (mut nvml, state, events) = library("events", MACHINE);
        let (gpu0, gpu1) = (nvml.by_index(0).unwrap(), nvml.by_index(1).unwrap());
        let (a, b) = (nvml.mig_device_by_index(gpu1, 0).unwrap(), nvml.mig_device_by_index(gpu1, 1).unwrap());
        append(&events, "GPU-0 xid 48");
        let first = nvml.create_set().unwrap();
        let second = nvml.create_set().unwrap();
        assert_eq!(nvml.supported_events(b), Ok(SUPPORTED_EVENTS));
        nvml.register(gpu0, XID, first).unwrap();
        nvml.register(gpu1, XID, first).unwrap();
        nvml.register(b, XID, second).unwrap();
        assert_eq!(
            nvml.register(gpu0, u64::from(nvmlEventTypeClock), first),
            Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
        );
        assert_eq!(nvml.register(gpu0, XID, 0xE6), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(nvml.poll(first), Ok(None), "the line before the set was created is not replayed");

        for line in ["GPU-0 xid 79", "MIG-a xid 13", "not an event", "GPU-9 xid 1", "MIG-b xid 43", "GPU-1 xid 48"] {
            append(&events, line);
        }
        let event = |device, xid, gpu_instance, compute_instance| {
            Ok(Some(Event { device, xid, gpu_instance, compute_instance }))
        };
        assert_eq!(nvml.poll(first), event(gpu0, 79, NO_INSTANCE, NO_INSTANCE));
        assert_eq!(nvml.poll(first), event(gpu1, 13, 7, 0), "an instance's Xid on its registered parent");
        assert_eq!(nvml.poll(first), event(gpu1, 43, 2, 1));
        assert_eq!(nvml.poll(first), event(gpu1, 48, NO_INSTANCE, NO_INSTANCE));
        assert_eq!(nvml.poll(first), Ok(None));
        assert_eq!(nvml.poll(second), event(b, 43, 2, 1), "each set reads on its own");
        assert_eq!(nvml.poll(second), Ok(None), "neither MIG-a nor GPU-1 is registered there");
        assert_ne!(a, b);

        rewrite(&state, &MACHINE.replacen("pcie_replays = 3", "lost = true", 1));
        assert_eq!(nvml.register(gpu0, XID, second), Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST));
        nvml.free_set(first).unwrap();
        assert_eq!(nvml.poll(first), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        assert_eq!(nvml.free_set(first), Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT));
        fs::remove_file(state).unwrap();
        fs::remove_file(events).unwrap();
    }
}

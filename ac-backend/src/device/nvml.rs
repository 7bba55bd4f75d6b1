//! What NVML (NVIDIA's management library, `libnvidia-ml.so.1`, loaded at run time as cudarc
//! loads CUDA) tells the backend: the GPUs and MIG instances of the host by UUID, without a
//! CUDA context, and their health ([`crate::device::health`]): critical-Xid events as they happen and a
//! periodic poll for conditions that persist; and what their sensors read, for a session that
//! asks (protocol 15).
//!
//! Queries go through `nvml-wrapper`; the event wait and a MIG instance's GPU-instance id go
//! through its raw bindings (`nvml-wrapper-sys`), because the wrapper drops the instance an
//! event names. Nothing here changes a GPU's settings: no `set_*` call.

#![allow(unsafe_code)] // two raw NVML calls the wrapper does not expose; each block states why it holds.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_proto::backend::{Clocks, ComputeMode, ErrorKind, Telemetry, WireError};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode as NvmlMode, EccCounter, MemoryError, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlEventData_t, NvmlLib};

use crate::device::health::{Board, Poll};

/// Where NVML is looked for when `nvml_library` is unset: the loader's search, as NVIDIA's own
/// tools do.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// `gpuInstanceId` of an event that names no MIG instance.
const NO_INSTANCE: u32 = u32::MAX;

/// One accelerator NVML knows: a whole GPU, or one MIG instance of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accelerator {
    /// `GPU-...`, or `MIG-...` for an instance: what `CUDA_VISIBLE_DEVICES` names.
    pub uuid: String,
    /// The GPU's UUID (its own for a whole GPU).
    pub gpu_uuid: String,
    /// The GPU's index in NVML (PCI order: what `nvidia-smi` shows).
    pub gpu_index: u32,
    /// The GPU's PCI bus id.
    pub pci_bus_id: String,
    /// NVML's name (a MIG instance's names its profile).
    pub name: String,
    /// Memory, bytes (an instance's own).
    pub memory_total: u64,
    /// Compute capability of the GPU.
    pub capability: (u32, u32),
    /// The GPU's compute mode.
    pub compute_mode: ComputeMode,
    /// For an instance: its profile (`1g.10gb`) and GPU-instance id.
    pub mig: Option<(String, u32)>,
    /// Why NVML could not describe this GPU (lost before the backend started): it keeps its
    /// place, so that the indexes after it do not move, and is never served.
    pub unreadable: Option<String>,
}

impl Accelerator {
    /// The place of GPU `index`, which NVML could not describe.
    fn unreadable(index: u32, why: String) -> Self {
        Self {
            uuid: format!("GPU-unreadable-{index}"),
            gpu_uuid: format!("GPU-unreadable-{index}"),
            gpu_index: index,
            pci_bus_id: String::new(),
            name: "unreadable GPU".into(),
            memory_total: 0,
            capability: (0, 0),
            compute_mode: ComputeMode::NotApplicable,
            mig: None,
            unreadable: Some(why),
        }
    }
}

/// NVML, loaded and initialized for the life of the process.
#[derive(Clone, Copy)]
pub struct NvmlHost {
    nvml: &'static Nvml,
    raw: &'static NvmlLib,
}

impl std::fmt::Debug for NvmlHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlHost")
    }
}

impl NvmlHost {
    /// Loads NVML from `library` (a path, or a name for the loader) and initializes it. Kept
    /// for the life of the process, as the CUDA driver is.
    pub fn load(library: &OsStr) -> Result<Self, String> {
        let nvml = Nvml::builder().lib_path(library).init().map_err(|e| format!("NVML ({library:?}): {e}"))?;
        // SAFETY: loading the library runs no code of it but initializers, as above; the
        // handle is only used for two calls whose arguments come from `nvml`'s own objects.
        let raw = unsafe { NvmlLib::new(library) }.map_err(|e| format!("NVML ({library:?}): {e}"))?;
        Ok(Self { nvml: Box::leak(Box::new(nvml)), raw: Box::leak(Box::new(raw)) })
    }

    /// The driver's version, for the log.
    pub fn driver_version(&self) -> String {
        self.nvml.sys_driver_version().unwrap_or_else(|e| format!("unknown ({e})"))
    }

    /// Every accelerator of the host, in NVML's order: each GPU, or each MIG instance of a GPU
    /// in MIG mode (a GPU in MIG mode with no instance serves nothing).
    pub fn inventory(&self) -> Result<Vec<Accelerator>, String> {
        let count = self.nvml.device_count().map_err(|e| format!("NVML device count: {e}"))?;
        let mut found = Vec::new();
        for index in 0..count {
            // One broken GPU must not keep the others from being served.
            match self.nvml.device_by_index(index).and_then(|gpu| self.accelerators_of(index, &gpu)) {
                Ok(accelerators) => found.extend(accelerators),
                Err(e) => {
                    tracing::error!(gpu = index, error = %e, "NVML cannot describe the GPU: not served");
                    found.push(Accelerator::unreadable(index, format!("NVML cannot describe it: {e}")));
                }
            }
        }
        Ok(found)
    }

    fn accelerators_of(&self, index: u32, gpu: &Device) -> Result<Vec<Accelerator>, NvmlError> {
        let capability = gpu.cuda_compute_capability()?;
        let whole = Accelerator {
            uuid: gpu.uuid()?,
            gpu_uuid: gpu.uuid()?,
            gpu_index: index,
            pci_bus_id: gpu.pci_info()?.bus_id,
            name: gpu.name()?,
            memory_total: gpu.memory_info()?.total,
            capability: (capability.major as u32, capability.minor as u32),
            compute_mode: mode_of(gpu.compute_mode()?),
            mig: None,
            unreadable: None,
        };
        if !mig_enabled(gpu) {
            return Ok(vec![whole]);
        }
        let slots = gpu.mig_device_count()?;
        let mut instances = Vec::new();
        for slot in 0..slots {
            let Ok(instance) = gpu.mig_device_by_index(slot) else { continue };
            let name = instance.name()?;
            let profile = name.rsplit_once("MIG ").map(|(_, p)| p.to_string()).unwrap_or_else(|| name.clone());
            instances.push(Accelerator {
                uuid: instance.uuid()?,
                name,
                memory_total: instance.memory_info()?.total,
                mig: Some((profile, self.gpu_instance_id(&instance))),
                ..whole.clone()
            });
        }
        Ok(instances)
    }

    /// A MIG instance's GPU-instance id (which an event names), or [`NO_INSTANCE`].
    fn gpu_instance_id(&self, instance: &Device) -> u32 {
        let Ok(call) = self.raw.nvmlDeviceGetGpuInstanceId.as_ref() else { return NO_INSTANCE };
        let mut id = NO_INSTANCE;
        // SAFETY: a live device handle from this NVML and a valid out-pointer.
        match unsafe { call(instance.handle(), &mut id) } {
            0 => id,
            _ => NO_INSTANCE,
        }
    }

    /// Free memory of an accelerator now.
    pub fn memory_free(&self, accelerator: &Accelerator) -> Option<u64> {
        self.nvml.device_by_uuid(accelerator.uuid.as_str()).and_then(|d| d.memory_info()).ok().map(|m| m.free)
    }

    /// What an accelerator's sensors read now (its own handle's: NVML answers few of them for a
    /// MIG instance); a reading NVML refuses is left out. A GPU that NVML says is lost, at any
    /// reading, is an error, which the shim's NVML answers as `NVML_ERROR_GPU_IS_LOST`, as
    /// NVIDIA's does.
    pub fn telemetry(&self, accelerator: &Accelerator) -> Result<Telemetry, WireError> {
        let device = match self.nvml.device_by_uuid(accelerator.uuid.as_str()) {
            Ok(device) => device,
            Err(NvmlError::GpuLost) => return Err(WireError::new(ErrorKind::Device, lost())),
            Err(_) => return Ok(Telemetry::default()),
        };
        let lost_at_some_reading = std::cell::Cell::new(false);
        let read = |reading: Result<u32, NvmlError>| match reading {
            Err(NvmlError::GpuLost) => {
                lost_at_some_reading.set(true);
                None
            }
            reading => reading.ok(),
        };
        let clocks = |domain: &dyn Fn(Clock) -> Result<u32, NvmlError>| Clocks {
            graphics: read(domain(Clock::Graphics)),
            sm: read(domain(Clock::SM)),
            memory: read(domain(Clock::Memory)),
            video: read(domain(Clock::Video)),
        };
        let utilization = match device.utilization_rates() {
            Err(NvmlError::GpuLost) => return Err(WireError::new(ErrorKind::Device, lost())),
            reading => reading.ok(),
        };
        let telemetry = Telemetry {
            utilization_gpu: utilization.as_ref().map(|u| u.gpu),
            utilization_memory: utilization.as_ref().map(|u| u.memory),
            temperature_c: read(device.temperature(TemperatureSensor::Gpu)),
            power_mw: read(device.power_usage()),
            power_limit_mw: read(device.enforced_power_limit()),
            power_management_limit_mw: read(device.power_management_limit()),
            energy_mj: device.total_energy_consumption().ok(),
            clocks_mhz: clocks(&|c| device.clock_info(c)),
            max_clocks_mhz: clocks(&|c| device.max_clock_info(c)),
            performance_state: device
                .performance_state()
                .ok()
                .filter(|p| *p != PerformanceState::Unknown)
                .map(|p| p.as_c()),
            session_memory: 0,
        };
        if lost_at_some_reading.get() {
            return Err(WireError::new(ErrorKind::Device, lost()));
        }
        Ok(telemetry)
    }

    /// One poll of an accelerator: whether it answers, and conditions of its GPU that persist.
    /// `uncorrected_at_start` is the GPU's uncorrected-ECC count when the backend started.
    pub fn poll(&self, accelerator: &Accelerator, uncorrected_at_start: u64) -> Poll {
        if let Some(why) = &accelerator.unreadable {
            return Poll::Condition(why.clone());
        }
        let device = match self.nvml.device_by_uuid(accelerator.uuid.as_str()) {
            Ok(device) => device,
            Err(NvmlError::GpuLost) => return Poll::Condition(lost()),
            Err(NvmlError::NotFound) => {
                return Poll::Condition(
                    "NVML no longer lists it (the GPU was removed or its MIG instance destroyed)".into(),
                )
            }
            Err(e) => return Poll::Unknown(format!("NVML: {e}")),
        };
        if let Err(NvmlError::GpuLost) = device.memory_info() {
            return Poll::Condition(lost());
        }
        let gpu = match self.nvml.device_by_uuid(accelerator.gpu_uuid.as_str()) {
            Ok(gpu) => gpu,
            Err(NvmlError::GpuLost) => return Poll::Condition(lost()),
            Err(e) => return Poll::Unknown(format!("NVML: {e}")),
        };
        if gpu.are_pages_pending_retired().unwrap_or(false) {
            return Poll::Condition("ECC pages wait for retirement: drain the GPU and reset it".into());
        }
        let uncorrected = uncorrected_ecc(&gpu);
        if uncorrected > uncorrected_at_start {
            return Poll::Condition(format!(
                "{} uncorrectable ECC errors since the backend started",
                uncorrected - uncorrected_at_start
            ));
        }
        if mig_enabled(&gpu) != accelerator.mig.is_some() {
            return Poll::Condition("the GPU's MIG mode changed: restart the backend to serve what it is now".into());
        }
        match gpu.compute_mode() {
            Ok(NvmlMode::Prohibited) => {
                Poll::Condition("PROHIBITED compute mode: it admits no process (nvidia-smi -c)".into())
            }
            Ok(mode) => Poll::Fine(mode_of(mode)),
            Err(NvmlError::GpuLost) => Poll::Condition(lost()),
            Err(e) => Poll::Unknown(format!("NVML: {e}")),
        }
    }

    /// The GPU's uncorrected-ECC count (0 where ECC is off or not counted).
    pub fn uncorrected_ecc_of(&self, accelerator: &Accelerator) -> u64 {
        self.nvml.device_by_uuid(accelerator.gpu_uuid.as_str()).map(|gpu| uncorrected_ecc(&gpu)).unwrap_or(0)
    }

    /// Watches `served` (backend index -> accelerator) on a thread of its own for the life of
    /// the process: critical-Xid events as they come, a poll every `every`. Each change lands
    /// in `board` and wakes `changed`, which pushes it to the manager.
    pub fn watch(
        self,
        served: BTreeMap<u32, Accelerator>,
        board: Arc<Mutex<Board>>,
        changed: Arc<tokio::sync::Notify>,
        every: Duration,
    ) -> std::io::Result<()> {
        let baseline: BTreeMap<u32, u64> = served.iter().map(|(&i, a)| (i, self.uncorrected_ecc_of(a))).collect();
        std::thread::Builder::new().name("ac-gpu-health".into()).spawn(move || {
            let watch = Watch { host: self, served, baseline, board, changed };
            watch.run(every)
        })?;
        Ok(())
    }
}

/// What one wait for an event gave.
enum Waited {
    /// An event: the GPU's UUID, the MIG instance it names, its Xid.
    Event(String, u32, u64),
    /// None before the time-out.
    Nothing,
    /// NVML answered an error at once (a lost GPU, a missing function).
    Failed,
}

/// The watch thread's state.
struct Watch {
    host: NvmlHost,
    served: BTreeMap<u32, Accelerator>,
    baseline: BTreeMap<u32, u64>,
    board: Arc<Mutex<Board>>,
    changed: Arc<tokio::sync::Notify>,
}

impl Watch {
    fn run(self, every: Duration) {
        let events = self.register();
        if events.is_none() {
            tracing::warn!("NVML events unavailable: GPU health comes from polls alone");
        }
        let mut next_poll = Instant::now();
        loop {
            if Instant::now() >= next_poll {
                self.poll_all();
                next_poll = Instant::now() + every;
            }
            let wait = next_poll.saturating_duration_since(Instant::now()).min(Duration::from_millis(500));
            match &events {
                Some(set) => {
                    // SAFETY: the set lives as long as this loop (leaked below, as NVML is).
                    match self.wait_event(unsafe { set.handle() }, wait) {
                        Waited::Event(gpu_uuid, instance, xid) => self.on_xid(&gpu_uuid, instance, xid),
                        Waited::Nothing => {}
                        // A lost GPU answers at once, every time: no spinning on it; the polls
                        // say what is wrong.
                        Waited::Failed => std::thread::sleep(wait),
                    }
                }
                None => std::thread::sleep(wait),
            }
        }
    }

    /// An event set with every served GPU registered for critical Xids.
    fn register(&self) -> Option<&'static nvml_wrapper::EventSet<'static>> {
        let mut set = self.host.nvml.create_event_set().ok()?;
        let gpus: std::collections::BTreeSet<&str> = self.served.values().map(|a| a.gpu_uuid.as_str()).collect();
        for uuid in gpus {
            let gpu = self.host.nvml.device_by_uuid(uuid).ok()?;
            set = match gpu.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(set) => set,
                Err(e) => {
                    tracing::warn!(gpu = uuid, error = %e.error, "cannot watch the GPU's Xid events");
                    return None;
                }
            };
        }
        Some(Box::leak(Box::new(set)))
    }

    /// Waits up to `wait` for an event.
    fn wait_event(&self, set: nvml_wrapper_sys::bindings::nvmlEventSet_t, wait: Duration) -> Waited {
        /// NVML's `NVML_ERROR_TIMEOUT`.
        const TIMEOUT: u32 = 10;
        let Ok(call) = self.host.raw.nvmlEventSetWait_v2.as_ref() else { return Waited::Failed };
        // SAFETY: an all-zero nvmlEventData_t is a valid value (null handle, zero numbers).
        let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
        // SAFETY: a live event set and a valid out-pointer.
        match unsafe { call(set, &mut data, wait.as_millis() as u32) } {
            0 => {}
            TIMEOUT => return Waited::Nothing,
            _ => return Waited::Failed,
        }
        // SAFETY: the device handle NVML put in the event, of this NVML's library.
        let device = unsafe { Device::new(data.device, self.host.nvml) };
        match device.uuid() {
            Ok(uuid) => Waited::Event(uuid, data.gpuInstanceId, data.eventData),
            Err(_) => Waited::Failed,
        }
    }

    fn on_xid(&self, gpu_uuid: &str, instance: u32, xid: u64) {
        let hit: Vec<u32> = self
            .served
            .iter()
            .filter(|(_, a)| a.gpu_uuid == gpu_uuid)
            .filter(|(_, a)| instance == NO_INSTANCE || a.mig.as_ref().is_none_or(|(_, gi)| *gi == instance))
            .map(|(&index, _)| index)
            .collect();
        let what = crate::device::health::describe_xid(xid);
        let application = crate::device::health::is_application_xid(xid);
        match application {
            true => {
                tracing::info!(gpu = gpu_uuid, devices = ?hit, "{what}: the faulting session ends, the GPU serves on")
            }
            false => {
                tracing::error!(gpu = gpu_uuid, devices = ?hit, "{what}: reported to the manager, which stops granting it")
            }
        }
        let mut board = self.board.lock().expect("board");
        let changed = hit.iter().fold(false, |changed, &index| board.xid(index, xid) | changed);
        drop(board);
        if changed {
            self.changed.notify_one();
        }
    }

    fn poll_all(&self) {
        let polls: Vec<(u32, Poll)> = self
            .served
            .iter()
            .map(|(&i, a)| (i, self.host.poll(a, self.baseline.get(&i).copied().unwrap_or(0))))
            .collect();
        let mut board = self.board.lock().expect("board");
        let mut changed = false;
        for (index, poll) in polls {
            if let Poll::Condition(reason) = &poll {
                if board.get(index).is_some_and(|d| d.health != ac_proto::backend::Health::Unhealthy(reason.clone())) {
                    tracing::error!(device = index, "unhealthy: {reason}");
                }
            }
            changed |= board.polled(index, poll);
        }
        drop(board);
        if changed {
            self.changed.notify_one();
        }
    }
}

fn lost() -> String {
    "GPU lost: it fell off the bus or stopped answering (NVML); drain it and reset it".into()
}

fn mig_enabled(gpu: &Device) -> bool {
    gpu.mig_mode().is_ok_and(|m| m.current == 1)
}

fn uncorrected_ecc(gpu: &Device) -> u64 {
    gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).unwrap_or(0)
}

fn mode_of(mode: NvmlMode) -> ComputeMode {
    match mode {
        NvmlMode::Default => ComputeMode::Default,
        NvmlMode::ExclusiveThread | NvmlMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
        NvmlMode::Prohibited => ComputeMode::Prohibited,
    }
}

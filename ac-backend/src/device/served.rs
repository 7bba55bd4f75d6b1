//! What a backend serves: its devices by index, each one's watched state ([`Board`]), and, on a
//! GPU host with NVML, what the health watch follows.
//!
//! With session workers (`isolation = "process"`, the default for GPUs) the daemon opens no
//! CUDA context: it describes each GPU from NVML (by UUID: GPUs, or the MIG instances of a GPU
//! in MIG mode) or, without NVML, from the driver's device queries, and each session's worker
//! is started with `CUDA_VISIBLE_DEVICES` naming its GPU's UUID. With `isolation = "context"`
//! the daemon holds the CUDA devices itself, by CUDA ordinal, and their health is unknown.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{BackendConfig, DeviceChoice, CPU_MAX_SESSIONS};
use crate::device::health::{Board, Watched};
use crate::device::{CpuDevice, Device};
use crate::BackendError;

/// The devices, their board, and the watch to start.
pub struct Served {
    /// By index.
    pub devices: BTreeMap<u32, Arc<dyn Device>>,
    /// Each device's state.
    pub board: Board,
    /// The MPS control daemons of the GPUs served through MPS (asked to quit when dropped).
    pub mps: Vec<crate::device::mps::MpsDaemon>,
    /// What the NVML health watch follows (backend index -> accelerator), when there is NVML.
    #[cfg(feature = "cuda")]
    pub watch: Option<(crate::device::nvml::NvmlHost, BTreeMap<u32, crate::device::nvml::Accelerator>)>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served").field("devices", &self.devices.keys()).field("board", &self.board).finish()
    }
}

/// The devices `config` asks for. `auto` falls back to the CPU device when CUDA is not usable
/// on a host without the NVIDIA driver, and says why; on a host with it, it fails
/// (`device::auto_fallback`).
pub fn serve(config: &BackendConfig) -> Result<Served, BackendError> {
    match config.device {
        DeviceChoice::Cpu => Ok(cpu_devices(config)),
        DeviceChoice::Cuda => {
            cuda_devices(config).map_err(|r| BackendError::NoCuda(crate::device::explain_cuda_failure(r)))
        }
        DeviceChoice::Auto => cuda_devices(config).map_err(crate::device::explain_cuda_failure).or_else(|reason| {
            crate::device::auto_fallback(&reason, config.cuda_driver.is_some()).map_err(BackendError::NoCuda)?;
            Ok(cpu_devices(config))
        }),
    }
}

fn cpu_devices(config: &BackendConfig) -> Served {
    let indexes = config.devices.clone().unwrap_or_else(|| vec![0]);
    let max = config.max_sessions.unwrap_or(CPU_MAX_SESSIONS);
    let board = Board::new(indexes.iter().map(|&i| (i, Watched::unwatched("a CPU device: nothing to watch", max))));
    let devices = indexes
        .into_iter()
        .map(|i| (i, Arc::new(CpuDevice::new(i, config.memory_mib << 20)) as Arc<dyn Device>))
        .collect();
    Served {
        devices,
        board,
        mps: Vec::new(),
        #[cfg(feature = "cuda")]
        watch: None,
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_devices(_config: &BackendConfig) -> Result<Served, String> {
    Err("this ac-backend was built without the `cuda` feature".into())
}

#[cfg(feature = "cuda")]
fn cuda_devices(config: &BackendConfig) -> Result<Served, String> {
    if let Some(path) = &config.cuda_driver {
        crate::device::cuda::driver::load_from(path)?;
    }
    match config.isolation {
        crate::Isolation::Context => gpus_in_daemon(config),
        crate::Isolation::Process => gpus::by_workers(config),
    }
}

/// `isolation = "context"`: the daemon holds each GPU (by CUDA ordinal) and its sessions'
/// contexts.
#[cfg(feature = "cuda")]
fn gpus_in_daemon(config: &BackendConfig) -> Result<Served, String> {
    if config.gpu_uuids.is_some() {
        return Err("gpu_uuids needs isolation = \"process\"".into());
    }
    let gpus = crate::device::cuda::discover(config.devices.as_deref(), config.staging_mib << 20, config.copy)?;
    let why = "isolation = \"context\": the health watch follows GPUs served by session workers";
    let board = Board::new(
        gpus.iter().map(|g| (g.index(), Watched::unwatched(why, config.gpu_max_sessions(g.memory_total())))),
    );
    let devices = gpus.into_iter().map(|g| (g.index(), Arc::new(g) as Arc<dyn Device>)).collect();
    Ok(Served { devices, board, mps: Vec::new(), watch: None })
}

#[cfg(feature = "cuda")]
mod gpus {
    use std::collections::BTreeMap;
    use std::ffi::OsString;
    use std::sync::Arc;

    use ac_proto::backend::{ComputeMode, DeviceInfo, DeviceKind, Health};

    use super::Served;
    use crate::config::BackendConfig;
    use crate::device::cuda::driver;
    use crate::device::described::{DescribedGpu, Sensors};
    use crate::device::health::{Board, Watched};
    use crate::device::nvml::{Accelerator, NvmlHost, DEFAULT_LIBRARY};
    use crate::device::worker::{WorkerCommand, WorkerDevice};
    use crate::device::Device;

    /// An accelerator's free memory and sensors, from NVML.
    struct NvmlSensors(NvmlHost, Accelerator);

    impl Sensors for NvmlSensors {
        /// NVML calls, off the async threads, as every device wait is.
        fn free(&self) -> Option<u64> {
            crate::device::blocking(|| self.0.memory_free(&self.1))
        }

        fn telemetry(&self) -> crate::device::DeviceResult<ac_proto::backend::Telemetry> {
            crate::device::blocking(|| self.0.telemetry(&self.1))
        }
    }

    /// `isolation = "process"`: GPUs described, each session in a worker on its GPU.
    pub fn by_workers(config: &BackendConfig) -> Result<Served, String> {
        let count = driver::init()?;
        let program = config.worker_program().map_err(|e| e.to_string())?;
        let command = WorkerCommand { program, args: worker_args(config), env: Vec::new() };
        let library = config.nvml_library.clone().map(OsString::from).unwrap_or_else(|| DEFAULT_LIBRARY.into());
        match NvmlHost::load(&library) {
            Ok(host) => {
                tracing::info!(driver = host.driver_version(), "NVML found: GPUs by UUID, health watched");
                from_nvml(config, host, &command)
            }
            Err(why) => {
                tracing::warn!("{why}: GPU health unknown, GPUs by CUDA ordinal");
                if config.gpu_uuids.is_some() {
                    return Err(format!("gpu_uuids needs NVML, which is not usable: {why}"));
                }
                from_driver(config, count as u32, &command, &why)
            }
        }
    }

    fn from_nvml(config: &BackendConfig, host: NvmlHost, command: &WorkerCommand) -> Result<Served, String> {
        let inventory = host.inventory()?;
        let chosen = choose(config, &inventory)?;
        let (mut devices, mut watched, mut watch, mut daemons) =
            (BTreeMap::new(), Vec::new(), BTreeMap::new(), Vec::new());
        let mps_devices = config.mps_devices.clone().unwrap_or_default();
        if let Some(stray) = mps_devices.iter().find(|i| !chosen.contains(i)) {
            return Err(format!("mps_devices names device {stray}, which this backend does not serve"));
        }
        for index in chosen {
            let accelerator = inventory[index as usize].clone();
            if accelerator.compute_mode == ComputeMode::Prohibited {
                tracing::warn!(device = index, uuid = accelerator.uuid, "PROHIBITED compute mode: not offered");
            }
            let info = DeviceInfo {
                index,
                name: accelerator.name.clone(),
                kind: DeviceKind::Cuda,
                compute_capability: Some(accelerator.capability),
                memory_total: accelerator.memory_total,
                memory_free: accelerator.memory_total,
            };
            tracing::info!(
                device = index,
                uuid = accelerator.uuid,
                pci = accelerator.pci_bus_id,
                name = info.name,
                "GPU"
            );
            let sensors: Arc<dyn Sensors> = Arc::new(NvmlSensors(host, accelerator.clone()));
            let described = Arc::new(DescribedGpu::new(info, Some(sensors)));
            let mut command = command.clone();
            command.args.extend(["--visible-device".into(), accelerator.uuid.clone().into()]);
            let mut state = watched_of(config, &accelerator);
            if mps_devices.contains(&index) {
                let daemon = start_mps(config, &accelerator)?;
                let pinned = config
                    .mps_pinned_memory_mib
                    .unwrap_or((accelerator.memory_total >> 20) / u64::from(state.max_sessions));
                command.env.extend(daemon.client_env(config.mps_thread_percentage, pinned));
                state.mps = true;
                daemons.push(daemon);
            }
            devices.insert(index, Arc::new(WorkerDevice::new(described, 0, command)) as Arc<dyn Device>);
            watched.push((index, state));
            watch.insert(index, accelerator);
        }
        // The first poll now: the manager's first report says what the GPUs are.
        let mut board = Board::new(watched);
        for (&index, accelerator) in &watch {
            board.polled(index, host.poll(accelerator, host.uncorrected_ecc_of(accelerator)));
        }
        Ok(Served { devices, board, mps: daemons, watch: Some((host, watch)) })
    }

    /// The MPS control daemon of one GPU, its directories under the state directory.
    fn start_mps(config: &BackendConfig, accelerator: &Accelerator) -> Result<crate::device::mps::MpsDaemon, String> {
        let control = config.mps_control.clone().unwrap_or_else(|| crate::device::mps::DEFAULT_CONTROL.into());
        let dir = config.state_dir.join("mps").join(&accelerator.uuid);
        crate::device::mps::MpsDaemon::start(&control, &accelerator.uuid, &dir)
    }

    /// The inventory positions `config` selects (`devices` by index, `gpu_uuids` by UUID), or
    /// every one.
    fn choose(config: &BackendConfig, inventory: &[Accelerator]) -> Result<Vec<u32>, String> {
        let listed =
            || inventory.iter().enumerate().map(|(i, a)| format!("{i}: {}", a.uuid)).collect::<Vec<_>>().join(", ");
        match (&config.devices, &config.gpu_uuids) {
            (Some(indexes), _) => match indexes.iter().find(|&&i| i as usize >= inventory.len()) {
                Some(missing) => Err(format!("device {missing} was asked for; this host has [{}]", listed())),
                None => Ok(indexes.clone()),
            },
            (None, Some(uuids)) => uuids
                .iter()
                .map(|uuid| {
                    inventory
                        .iter()
                        .position(|a| a.uuid.eq_ignore_ascii_case(uuid))
                        .map(|i| i as u32)
                        .ok_or_else(|| format!("no GPU or MIG instance {uuid} here; this host has [{}]", listed()))
                })
                .collect(),
            (None, None) if inventory.is_empty() => Err("NVML lists no GPU and no MIG instance".into()),
            (None, None) => Ok((0..inventory.len() as u32).collect()),
        }
    }

    fn watched_of(config: &BackendConfig, accelerator: &Accelerator) -> Watched {
        Watched {
            uuid: Some(accelerator.uuid.clone()),
            pci_bus_id: Some(accelerator.pci_bus_id.clone()),
            mig_profile: accelerator.mig.as_ref().map(|(profile, _)| profile.clone()),
            health: Health::Unknown("not polled yet".into()),
            compute_mode: accelerator.compute_mode,
            faults: 0,
            last_fault: None,
            max_sessions: config.gpu_max_sessions(accelerator.memory_total),
            sessions: 0,
            mps: false,
        }
    }

    /// Without NVML: the CUDA ordinals, described by the driver's device queries.
    fn from_driver(config: &BackendConfig, count: u32, command: &WorkerCommand, why: &str) -> Result<Served, String> {
        let ordinals: Vec<u32> = config.devices.clone().unwrap_or_else(|| (0..count).collect());
        if count == 0 {
            return Err("the NVIDIA driver reports no GPU".into());
        }
        if let Some(missing) = ordinals.iter().find(|&&o| o >= count) {
            return Err(format!("GPU {missing} was asked for; this host has {count}"));
        }
        let (mut devices, mut watched) = (BTreeMap::new(), Vec::new());
        for ordinal in ordinals {
            let properties = driver::device(ordinal).and_then(driver::properties).map_err(|e| e.message)?;
            let info = DeviceInfo {
                index: ordinal,
                name: properties.name.clone(),
                kind: DeviceKind::Cuda,
                compute_capability: Some(properties.capability),
                memory_total: properties.memory_total,
                memory_free: properties.memory_total,
            };
            let mode = match properties.compute_mode {
                driver::ComputeMode::Default => ComputeMode::Default,
                driver::ComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
                driver::ComputeMode::Prohibited => ComputeMode::Prohibited,
            };
            let described = Arc::new(DescribedGpu::new(info, None));
            devices
                .insert(ordinal, Arc::new(WorkerDevice::new(described, ordinal, command.clone())) as Arc<dyn Device>);
            let max = config.gpu_max_sessions(properties.memory_total);
            let unknown = format!("no NVML ({why})");
            watched.push((ordinal, Watched { compute_mode: mode, ..Watched::unwatched(&unknown, max) }));
        }
        if config.mps_devices.is_some() {
            return Err(format!("mps_devices needs NVML, which is not usable: {why}"));
        }
        Ok(Served { devices, board: Board::new(watched), mps: Vec::new(), watch: None })
    }

    /// The flags that give a session worker this backend's GPU settings.
    fn worker_args(config: &BackendConfig) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--device".into(),
            "cuda".into(),
            "--staging-mib".into(),
            config.staging_mib.to_string().into(),
            "--chunk-kib".into(),
            (config.copy.chunk_bytes / 1024).to_string().into(),
        ];
        if let Some(path) = &config.cuda_driver {
            args.extend(["--cuda-driver".into(), path.into()]);
        }
        args
    }
}

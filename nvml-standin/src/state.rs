//! The scripted GPU state: the TOML file `NVML_STANDIN_STATE` names, read again whenever it
//! changes so that a test can change the GPUs while the backend runs.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use crate::Error;

/// Bytes in a MiB, the unit of the file's memory sizes.
pub const MIB: u64 = 1 << 20;

/// The longest name or UUID the real library returns (its V2 buffer sizes, less the NUL).
const MAX_STRING: usize = nvml_wrapper_sys::bindings::NVML_DEVICE_NAME_V2_BUFFER_SIZE as usize - 1;

/// The whole machine as the test describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// What `nvmlSystemGetDriverVersion` answers.
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// The GPUs in NVML index order.
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<Gpu>,
}

/// One physical GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub uuid: String,
    pub name: String,
    /// `dddddddd:bb:dd.f`, as `nvmlPciInfo_t.busId`.
    pub pci_bus_id: String,
    pub memory_mib: u64,
    #[serde(default)]
    pub used_mib: u64,
    #[serde(default)]
    pub compute_mode: ComputeMode,
    #[serde(default = "default_capability")]
    pub capability: [i32; 2],
    /// Current (and pending) MIG mode; absent: a GPU without MIG (`NVML_ERROR_NOT_SUPPORTED`).
    #[serde(default)]
    pub mig: Option<bool>,
    /// What `nvmlDeviceGetMaxMigDeviceCount` answers when MIG is on (real GPUs: 7 on an A100 or
    /// H100, whatever exists); default: the number of instances listed.
    #[serde(default)]
    pub max_mig_devices: Option<u32>,
    /// Fallen off the bus: every call on it or its instances answers `NVML_ERROR_GPU_IS_LOST`.
    #[serde(default)]
    pub lost: bool,
    #[serde(default)]
    pub retired_pages_pending: bool,
    #[serde(default)]
    pub uncorrected_ecc: u64,
    #[serde(default)]
    pub corrected_ecc: u64,
    #[serde(default)]
    pub pcie_replays: u32,
    /// The MIG instances the admin made; they exist only while `mig = true`.
    #[serde(default, rename = "instance")]
    pub instances: Vec<Instance>,
    /// What its sensors read; absent: a GPU whose NVML reads none (`NVML_ERROR_NOT_SUPPORTED`).
    #[serde(default)]
    pub sensors: Option<Sensors>,
}

/// A GPU's sensors, each absent where its NVML does not read it (`NVML_ERROR_NOT_SUPPORTED`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sensors {
    /// `nvmlUtilization_t`: percent of time a kernel ran, and memory was read or written.
    pub utilization: Option<[u32; 2]>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub power_management_limit_mw: Option<u32>,
    pub energy_mj: Option<u64>,
    /// Graphics, SM, memory and video clocks, MHz (`nvmlClockType_t`'s order).
    pub clocks_mhz: Option<[u32; 4]>,
    pub max_clocks_mhz: Option<[u32; 4]>,
    /// 0 to 15.
    pub pstate: Option<u32>,
}

/// One MIG device (a GPU instance and compute instance pair).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
    #[serde(default)]
    pub used_mib: u64,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// `nvmlComputeMode_t`, by the names `nvidia-smi -c` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    #[default]
    Default,
    ExclusiveProcess,
    Prohibited,
}

impl ComputeMode {
    /// The C enum's value.
    pub fn code(self) -> u32 {
        use nvml_wrapper_sys::bindings::*;
        match self {
            ComputeMode::Default => nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT,
            ComputeMode::ExclusiveProcess => nvmlComputeMode_enum_NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
            ComputeMode::Prohibited => nvmlComputeMode_enum_NVML_COMPUTEMODE_PROHIBITED,
        }
    }
}

/// A PCI address taken apart, for `nvmlPciInfo_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

fn default_driver_version() -> String {
    "580.00.01".to_owned()
}

fn default_capability() -> [i32; 2] {
    [9, 0]
}

impl Gpu {
    /// The instances that exist now: none unless MIG is on.
    pub fn live_instances(&self) -> &[Instance] {
        if self.mig == Some(true) {
            &self.instances
        } else {
            &[]
        }
    }

    /// The bus id's parts; the file was checked when read, so this does not fail then.
    pub fn pci_address(&self) -> Option<PciAddress> {
        parse_bus_id(&self.pci_bus_id)
    }
}

/// Parses `dddddddd:bb:dd.f` (hex), the form NVML writes.
fn parse_bus_id(text: &str) -> Option<PciAddress> {
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    if domain.len() != 8 || bus.len() != 2 || device.len() != 2 || function.len() != 1 {
        return None;
    }
    u8::from_str_radix(function, 16).ok()?;
    Some(PciAddress {
        domain: u32::from_str_radix(domain, 16).ok()?,
        bus: u32::from_str_radix(bus, 16).ok()?,
        device: u32::from_str_radix(device, 16).ok()?,
    })
}

impl State {
    /// Parses and checks a state file's text; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<State, Error> {
        let state: State =
            toml::from_str(text).map_err(|source| Error::Parse { path: path.to_owned(), source: Box::new(source) })?;
        state.check().map_err(|reason| Error::Invalid { path: path.to_owned(), reason })?;
        Ok(state)
    }

    /// Refuses what no real GPU reports, so that a test's typo is an error and not a surprise.
    fn check(&self) -> Result<(), String> {
        let mut uuids = HashSet::new();
        for gpu in &self.gpus {
            let names = std::iter::once((&gpu.uuid, &gpu.name))
                .chain(gpu.instances.iter().map(|instance| (&instance.uuid, &instance.name)));
            for (uuid, name) in names {
                if !uuids.insert(uuid.as_str()) {
                    return Err(format!("UUID {uuid} appears twice"));
                }
                if uuid.is_empty() || uuid.contains(char::is_whitespace) || uuid.len() > MAX_STRING {
                    return Err(format!("UUID {uuid:?} is empty, has a space or is too long"));
                }
                if name.len() > MAX_STRING || name.contains('\0') {
                    return Err(format!("name {name:?} is too long or has a NUL"));
                }
            }
            if parse_bus_id(&gpu.pci_bus_id).is_none() {
                return Err(format!("{}: pci_bus_id {:?} is not dddddddd:bb:dd.f", gpu.uuid, gpu.pci_bus_id));
            }
            if gpu.used_mib > gpu.memory_mib {
                return Err(format!("{}: used_mib exceeds memory_mib", gpu.uuid));
            }
            let listed = gpu.instances.len() as u32;
            if gpu.max_mig_devices.is_some_and(|max| max < listed) {
                return Err(format!("{}: max_mig_devices is less than the instances listed", gpu.uuid));
            }
            if !gpu.instances.is_empty() && gpu.mig.is_none() {
                return Err(format!("{}: instances on a GPU without MIG (set mig = true or false)", gpu.uuid));
            }
            for instance in &gpu.instances {
                if instance.used_mib > instance.memory_mib {
                    return Err(format!("{}: used_mib exceeds memory_mib", instance.uuid));
                }
            }
        }
        if self.driver_version.len() >= nvml_wrapper_sys::bindings::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE as usize {
            return Err("driver_version is too long".to_owned());
        }
        Ok(())
    }

    /// Finds a GPU or MIG instance that exists now by UUID: (GPU index, instance index).
    pub fn find(&self, uuid: &str) -> Option<(usize, Option<usize>)> {
        self.gpus.iter().enumerate().find_map(|(g, gpu)| {
            if gpu.uuid == uuid {
                return Some((g, None));
            }
            gpu.live_instances().iter().position(|instance| instance.uuid == uuid).map(|i| (g, Some(i)))
        })
    }
}

/// What identifies one version of the file without reading it: modification time, length and
/// inode (a file written beside and renamed over is always new, even within the file system's
/// clock tick).
type Stamp = (SystemTime, u64, u64);

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let meta = fs::metadata(path)?;
    Ok((meta.modified()?, meta.len(), meta.ino()))
}

/// The state file and the last good version read from it.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    /// The version `state` was read from, or the last one that failed to parse (reported once).
    seen: Option<Stamp>,
    state: State,
}

impl StateFile {
    /// Reads the file for the first time: a missing or unreadable file is an error.
    pub fn open(path: &Path) -> Result<StateFile, Error> {
        let read_error = |source| Error::Read { path: path.to_owned(), source };
        let seen = stamp(path).map_err(read_error)?;
        let text = fs::read_to_string(path).map_err(read_error)?;
        let state = State::parse(path, &text)?;
        Ok(StateFile { path: path.to_owned(), seen: Some(seen), state })
    }

    /// Reads the file again if its modification time or length changed. A version that does not
    /// parse (a test caught mid-write, or a typo) is reported on stderr once and the last good
    /// state kept; a file gone keeps the last state too.
    pub fn refresh(&mut self) -> &State {
        let Ok(now) = stamp(&self.path) else { return &self.state };
        if self.seen == Some(now) {
            return &self.state;
        }
        self.seen = Some(now);
        match fs::read_to_string(&self.path).map_err(|source| Error::Read { path: self.path.clone(), source }) {
            Ok(text) => match State::parse(&self.path, &text) {
                Ok(state) => self.state = state,
                Err(error) => eprintln!("nvml-standin: keeping the last state: {error}"),
            },
            Err(error) => eprintln!("nvml-standin: keeping the last state: {error}"),
        }
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_GPUS: &str = r#"
        [[gpu]]
        uuid = "GPU-0"
        name = "NVIDIA H100 80GB HBM3"
        pci_bus_id = "00000000:17:00.0"
        memory_mib = 81559
        [[gpu]]
        uuid = "GPU-1"
        name = "NVIDIA H100 80GB HBM3"
        pci_bus_id = "00000000:2A:00.0"
        memory_mib = 81559
        compute_mode = "exclusive_process"
        mig = true
          [[gpu.instance]]
          uuid = "MIG-a"
          name = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
          memory_mib = 9856
          gpu_instance = 7
          compute_instance = 0
    "#;

    fn parse(text: &str) -> Result<State, Error> {
        State::parse(Path::new("state.toml"), text)
    }

    #[test]
    fn a_state_file_reads_with_its_defaults() {
        let state = parse(TWO_GPUS).unwrap();
        assert_eq!(state.driver_version, "580.00.01");
        assert_eq!(state.gpus[0].compute_mode, ComputeMode::Default);
        assert_eq!(state.gpus[0].mig, None);
        assert_eq!(state.gpus[0].capability, [9, 0]);
        assert_eq!(state.gpus[1].compute_mode.code(), 3);
        assert_eq!(state.gpus[1].pci_address(), Some(PciAddress { domain: 0, bus: 0x2a, device: 0 }));
        assert_eq!(state.find("MIG-a"), Some((1, Some(0))));
        assert_eq!(state.find("GPU-0"), Some((0, None)));
        assert_eq!(state.find("GPU-9"), None);
    }

    #[test]
    fn instances_exist_only_while_mig_is_on() {
        let state = parse(&TWO_GPUS.replace("mig = true", "mig = false")).unwrap();
        assert!(state.gpus[1].live_instances().is_empty());
        assert_eq!(state.find("MIG-a"), None);
    }

    #[test]
    fn typos_and_impossible_states_are_refused() {
        let refused = |text: String, what: &str| {
            let error = parse(&text).expect_err(what).to_string();
            assert!(error.contains("state.toml"), "{what}: {error}");
        };
        refused(TWO_GPUS.replace("memory_mib = 9856", "memory_mb = 9856"), "unknown field");
        refused(TWO_GPUS.replace("\"MIG-a\"", "\"GPU-0\""), "duplicate UUID");
        refused(TWO_GPUS.replace("00000000:17:00.0", "17:00.0"), "short bus id");
        refused(TWO_GPUS.replace("\"exclusive_process\"", "\"exclusive\""), "unknown compute mode");
        refused(TWO_GPUS.replace("mig = true", ""), "instances without a MIG mode");
        refused(TWO_GPUS.replacen("memory_mib = 81559", "memory_mib = 1\nused_mib = 2", 1), "used > total");
    }

    #[test]
    fn a_rewrite_is_read_and_a_broken_one_keeps_the_last_state() {
        let path = crate::tests::temp_path("refresh.toml");
        fs::write(&path, TWO_GPUS).unwrap();
        let mut file = StateFile::open(&path).unwrap();
        assert!(!file.refresh().gpus[0].lost);
        fs::write(&path, TWO_GPUS.replacen("memory_mib = 81559", "memory_mib = 81559\nlost = true", 1)).unwrap();
        assert!(file.refresh().gpus[0].lost, "a rewrite (longer) is read on the next call");
        fs::write(&path, "[[gpu]]\nuuid = ").unwrap();
        assert!(file.refresh().gpus[0].lost, "a broken file keeps the last good state");
        fs::remove_file(&path).unwrap();
        assert_eq!(file.refresh().gpus.len(), 2, "a file gone keeps the last state");
    }
}

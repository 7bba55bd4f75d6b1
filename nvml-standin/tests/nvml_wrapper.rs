//! The consumer's view: the built stand-in, loaded through nvml-wrapper exactly as ac-backend
//! loads it (`Nvml::builder().lib_path(..).init()`), answers an inventory with MIG instances,
//! sensor readings, an injected Xid and a GPU lost as NVML would.
//!
//! It loads `target/release/libnvml_standin.so` (of the target directory it was built in): run `cargo build --release -p nvml-standin` first
//! (`scripts/test` builds the whole workspace before it tests). One test only: the library's
//! state and its environment variables are the process's.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, ComputeMode, PerformanceState, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

const MACHINE: &str = r#"
driver_version = "580.00.01"
[[gpu]]
uuid = "GPU-11111111-2222-3333-4444-555555555555"
name = "NVIDIA H100 80GB HBM3"
pci_bus_id = "00000000:17:00.0"
memory_mib = 81559
used_mib = 512
compute_mode = "default"
capability = [9, 0]
mig = false
lost = false
  [gpu.sensors]
  utilization = [71, 23]
  temperature_c = 52
  power_mw = 412345
  power_limit_mw = 700000
  power_management_limit_mw = 690000
  energy_mj = 123456789012
  clocks_mhz = [1755, 1740, 2619, 1620]
  max_clocks_mhz = [1980, 1980, 2619, 1980]
  pstate = 0

[[gpu]]
uuid = "GPU-66666666-7777-8888-9999-000000000000"
name = "NVIDIA H100 80GB HBM3"
pci_bus_id = "00000000:2A:00.0"
memory_mib = 81559
compute_mode = "exclusive_process"
mig = true
  [gpu.sensors]
  temperature_c = 60
  [[gpu.instance]]
  uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-000000000001"
  name = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
  memory_mib = 9856
  gpu_instance = 7
  compute_instance = 0
  [[gpu.instance]]
  uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-000000000002"
  name = "NVIDIA H100 80GB HBM3 MIG 2g.20gb"
  memory_mib = 19968
  gpu_instance = 3
  compute_instance = 0
  [[gpu.instance]]
  uuid = "MIG-aaaaaaaa-bbbb-cccc-dddd-000000000003"
  name = "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
  memory_mib = 40192
  gpu_instance = 2
  compute_instance = 0
"#;

const GPU0: &str = "GPU-11111111-2222-3333-4444-555555555555";
const GPU1: &str = "GPU-66666666-7777-8888-9999-000000000000";

/// The cdylib beside this test's own profile directory (`target/release/deps/..`), so that a
/// build with another `CARGO_TARGET_DIR` tests its own library.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(Path::parent).unwrap().join("libnvml_standin.so");
    assert!(path.exists(), "{} is missing: run `cargo build --release -p nvml-standin` first", path.display());
    path
}

/// Writes a new state beside the file and renames it over, so the library never reads half.
fn rewrite(path: &Path, text: &str) {
    let next = path.with_extension("next");
    fs::write(&next, text).unwrap();
    fs::rename(&next, path).unwrap();
}

#[test]
fn nvml_wrapper_reads_the_scripted_machine_and_its_events() {
    let library = library();
    let dir = std::env::temp_dir().join(format!("nvml-standin-consumer-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let (state, events) = (dir.join("state.toml"), dir.join("events"));

    // No state file named: what NVML says on a host without the driver.
    std::env::remove_var("NVML_STANDIN_STATE");
    let missing = Nvml::builder().lib_path(OsStr::new(&library)).init();
    assert!(matches!(missing, Err(NvmlError::DriverNotLoaded)), "{:?}", missing.err());

    fs::write(&state, MACHINE).unwrap();
    std::env::set_var("NVML_STANDIN_STATE", &state);
    std::env::set_var("NVML_STANDIN_EVENTS", &events);
    let nvml = Nvml::builder().lib_path(OsStr::new(&library)).init().unwrap();
    assert_eq!(nvml.sys_driver_version().unwrap(), "580.00.01");
    assert_eq!(nvml.device_count().unwrap(), 2);

    let gpu0 = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu0.uuid().unwrap(), GPU0);
    assert_eq!(gpu0.name().unwrap(), "NVIDIA H100 80GB HBM3");
    let memory = gpu0.memory_info().unwrap();
    assert_eq!((memory.total, memory.used, memory.free), (81559 << 20, 512 << 20, (81559 - 512) << 20));
    assert_eq!(gpu0.pci_info().unwrap().bus_id, "00000000:17:00.0");
    assert_eq!(gpu0.compute_mode().unwrap(), ComputeMode::Default);
    assert_eq!(gpu0.mig_mode().unwrap().current, 0);
    assert_eq!(gpu0.cuda_compute_capability().unwrap().major, 9);

    // Its sensors, as the backend reads them for a session (protocol 15).
    let utilization = gpu0.utilization_rates().unwrap();
    assert_eq!((utilization.gpu, utilization.memory), (71, 23));
    assert_eq!(gpu0.temperature(TemperatureSensor::Gpu).unwrap(), 52);
    assert_eq!((gpu0.power_usage().unwrap(), gpu0.enforced_power_limit().unwrap()), (412_345, 700_000));
    assert_eq!(gpu0.power_management_limit().unwrap(), 690_000);
    assert_eq!(gpu0.total_energy_consumption().unwrap(), 123_456_789_012);
    let clocks = [Clock::Graphics, Clock::SM, Clock::Memory, Clock::Video].map(|c| gpu0.clock_info(c).unwrap());
    assert_eq!(clocks, [1755, 1740, 2619, 1620]);
    assert_eq!(gpu0.max_clock_info(Clock::Video).unwrap(), 1980);
    assert_eq!(gpu0.performance_state().unwrap(), PerformanceState::Zero);

    let gpu1 = nvml.device_by_uuid(GPU1).unwrap();
    // A reading its table leaves out is not supported; nor is a MIG instance's, its GPU's aside.
    assert_eq!(gpu1.temperature(TemperatureSensor::Gpu).unwrap(), 60);
    assert!(matches!(gpu1.utilization_rates(), Err(NvmlError::NotSupported)));
    let instance = gpu1.mig_device_by_index(0).unwrap();
    assert!(matches!(instance.temperature(TemperatureSensor::Gpu), Err(NvmlError::NotSupported)));
    assert_eq!(gpu1.index().unwrap(), 1);
    assert_eq!(gpu1.pci_info().unwrap().bus_id, "00000000:2A:00.0");
    assert_eq!(gpu1.compute_mode().unwrap(), ComputeMode::ExclusiveProcess);
    assert_eq!((gpu1.mig_mode().unwrap().current, gpu1.mig_mode().unwrap().pending), (1, 1));
    assert_eq!(gpu1.mig_device_count().unwrap(), 3);
    let sizes = [("1g.10gb", 9856u64), ("2g.20gb", 19968), ("3g.40gb", 40192)];
    for (index, (profile, mib)) in sizes.into_iter().enumerate() {
        let mig = gpu1.mig_device_by_index(index as u32).unwrap();
        assert_eq!(mig.uuid().unwrap(), format!("MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000{}", index + 1));
        assert_eq!(mig.name().unwrap(), format!("NVIDIA H100 80GB HBM3 MIG {profile}"));
        assert_eq!(mig.memory_info().unwrap().total, mib << 20);
        assert!(mig.mig_is_mig_device_handle().unwrap());
        assert_eq!(mig.mig_parent_device().unwrap().uuid().unwrap(), GPU1);
        assert_eq!(mig.pci_info().unwrap().bus_id, "00000000:2A:00.0", "the parent's");
    }
    assert!(matches!(gpu1.mig_device_by_index(3), Err(NvmlError::NotFound)));
    assert!(!gpu1.mig_is_mig_device_handle().unwrap());

    // An Xid appended for one GPU reaches the set on which both GPUs are registered.
    let supported = gpu0.supported_event_types().unwrap();
    assert!(supported.contains(EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR));
    let set = nvml.create_event_set().unwrap();
    let set = gpu0.register_events(EventTypes::CRITICAL_XID_ERROR, set).unwrap();
    let set = gpu1.register_events(EventTypes::CRITICAL_XID_ERROR, set).unwrap();
    assert!(matches!(set.wait(0), Err(NvmlError::Timeout)));
    writeln!(fs::OpenOptions::new().create(true).append(true).open(&events).unwrap(), "{GPU0} xid 79").unwrap();
    let event = set.wait(2000).unwrap();
    assert_eq!(event.device.uuid().unwrap(), GPU0);
    assert!(event.event_type.contains(EventTypes::CRITICAL_XID_ERROR));
    assert_eq!(event.event_data, Some(XidError::Value(79)));
    assert!(matches!(set.wait(0), Err(NvmlError::Timeout)), "delivered once");

    // The GPU falls off the bus: its handle answers "GPU lost", the other GPU serves on.
    rewrite(&state, &MACHINE.replacen("lost = false", "lost = true", 1));
    assert!(matches!(gpu0.memory_info(), Err(NvmlError::GpuLost)));
    assert_eq!(gpu1.memory_info().unwrap().total, 81559 << 20);

    drop(set);
    nvml.shutdown().unwrap();
    fs::remove_dir_all(dir).unwrap();
}

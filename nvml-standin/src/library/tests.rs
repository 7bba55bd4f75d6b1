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
    let event =
        |device, xid, gpu_instance, compute_instance| Ok(Some(Event { device, xid, gpu_instance, compute_instance }));
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

#[test]
fn sensors_read_from_the_file_and_none_where_it_gives_none() {
    // The sensors of the second GPU, which is in MIG mode.
    let with_sensors = MACHINE.replacen(
        "mig = true\n",
        "mig = true\n        [gpu.sensors]\n        temperature_c = 44\n        clocks_mhz = [1, 2, 3, 4]\n",
        1,
    );
    let (mut library, state, _events) = library("sensors", &with_sensors);
    let (gpu0, gpu1) = (library.by_index(0).unwrap(), library.by_index(1).unwrap());
    assert_eq!(library.sensor(gpu1, |s| s.temperature_c), Ok(44));
    assert_eq!(library.sensor(gpu1, |s| s.clocks_mhz.map(|c| c[2])), Ok(3));
    let not_supported = Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
    assert_eq!(library.sensor(gpu1, |s| s.power_mw), not_supported, "a reading the table leaves out");
    assert_eq!(library.sensor(gpu0, |s| s.temperature_c), not_supported, "a GPU without a table");
    let instance = library.mig_device_by_index(gpu1, 0).unwrap();
    assert_eq!(library.sensor(instance, |s| s.temperature_c), not_supported, "a MIG instance, its parent's aside");
    // A rewrite is read at the next call.
    rewrite(&state, &with_sensors.replacen("temperature_c = 44", "temperature_c = 71", 1));
    assert_eq!(library.sensor(gpu1, |s| s.temperature_c), Ok(71));
}

//! What a remote GPU's sensors read, through the CUDA shim's NVML and the SDK (backend protocol
//! 15), on a GPU host of the stand-ins (`nvml-standin` for its NVML, `cuda-standin` for its
//! driver; neither is a GPU) with session workers, as GPU hosts run by default.

use ac_frontend::Session;
use ac_proto::backend::{Clocks, Telemetry};
use ac_tests::cuda;

use crate::cuda_shim::{run, said};
use crate::gpu_health::{backend, cluster_with, gpu, nvml_standin, until_device, Machine, GPU_A};
use crate::standin;

/// The stand-in GPU's `[gpu.sensors]` table; `power` absent, its NVML reads no power.
fn sensors(utilization: [u32; 2], temperature: u32, power: Option<u32>, pstate: u32) -> String {
    let power = power.map(|p| format!("power_mw = {p}\n")).unwrap_or_default();
    format!(
        "[gpu.sensors]\nutilization = {utilization:?}\ntemperature_c = {temperature}\n{power}power_limit_mw = 700000\n\
         power_management_limit_mw = 650000\nenergy_mj = 987654321\nclocks_mhz = [1755, 1755, 2619, 1620]\n\
         max_clocks_mhz = [1980, 1980, 2619, 1980]\npstate = {pstate}\n"
    )
}

/// NVML through the shim reads the remote GPU's sensors as its host's NVML reads them, at each
/// call (the machine rewritten while the program runs: the second reading is the new one, a
/// sensor gone is NVML's "not supported"), lists this process on the device with the memory its
/// session holds (3 MiB, then 0 once freed) under its own pid and name, and refuses by NVML's
/// codes a sensor or clock domain past the lists, a struct version not served, a forged handle
/// and another process's name; a name is cut to its buffer, and no MPS clients are listed. The
/// SDK's `telemetry()` reads the same, and so do the backend's metrics.
#[tokio::test(flavor = "multi_thread")]
async fn nvml_reads_the_remote_gpus_sensors_and_lists_this_process() {
    let machine = Machine::new(&gpu(GPU_A, 0x17, "default", &sensors([37, 12], 41, Some(123_456), 0))).await;
    let _turn = standin::exclusive().await;
    let (backend, _record) =
        backend(&nvml_standin(), |c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let c = cluster_with(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let next = dir.path().join("machine.next");
    std::fs::write(&next, gpu(GPU_A, 0x17, "default", &sensors([88, 45], 63, None, 2))).unwrap();
    let lost = dir.path().join("machine.lost");
    std::fs::write(&lost, gpu(GPU_A, 0x17, "default", "lost = true")).unwrap();
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_sensors.py");
    let args = [probe.to_str().unwrap(), next.to_str().unwrap(), lost.to_str().unwrap()];
    let out = run(&c, &shim, std::path::Path::new("python3"), &args, &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("nvml sensors done"), "{text}");
    let fixed = "limit 700000, management limit 650000, energy 987654321, clocks 1755/1755/2619/1620, \
                 max clocks 1980/1980/2619/1980";
    let processes = |bytes: u64| {
        format!(
            "processes 1, this one 1 using {bytes} bytes, instance ids 0xffffffff, v1 1 pid this one using {bytes}, \
             named as started, graphics 0"
        )
    };
    for line in [
        format!("round 1: utilization 37/12, temperature 41, temperature v 41, power 123456, {fixed}, pstate 0"),
        processes(3 << 20),
        "processes asked with room for 0: 7, count 1".into(),
        "the hottest part's sensor: 3".into(),
        "a sensor past the list: 2".into(),
        "a clock domain past the list: 2".into(),
        "temperature of struct version 2: 25".into(),
        "power of a forged handle: 2".into(),
        "another process's name: 6".into(),
        "MPS processes: 0, count 0".into(),
        // Cut to 3 bytes and a NUL, as NVML cuts a name; nothing past the 4 bytes written.
        "this process's name into 4 bytes: 0, its first 3 bytes and a NUL".into(),
        format!(
            "round 2: utilization 88/45, temperature 63, temperature v 63, power error 3 (Not Supported), {fixed}, \
             pstate 2"
        ),
        processes(0),
        // Lost: its sensors are NVML's "GPU is lost" (15); what the shim knows (its name) stays.
        "lost: temperature 15, utilization 15, name 0".into(),
    ] {
        assert!(text.contains(&line), "missing `{line}`:\n{text}");
    }
    let why = "ac-cuda: NVML's sensors: accelerator error (Device): GPU lost: it fell off the bus";
    assert_eq!(text.matches("ac-cuda: NVML's sensors:").count(), 1, "said once:\n{text}");
    assert!(text.contains(why), "missing `{why}`:\n{text}");
    // Back on the bus: the health watch may have seen it lost meanwhile, and the manager then
    // grants it once a poll has seen it healthy again.
    machine.describe(&gpu(GPU_A, 0x17, "default", &sensors([88, 45], 63, None, 2)));
    let healthy = until_device(&c, "h0/0", std::time::Duration::from_secs(10), |d| d.health == "healthy").await;
    assert!(healthy.is_some(), "the GPU did not come back");
    assert!(!text.contains("is not supported on remote accelerators"), "a served call said it is not:\n{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the probe exited:\n{text}");

    // The SDK reads the same, and counts its session's memory.
    let credential = c.submit("j1", &["n1"], 1).await;
    let session = Session::init(c.session_options("j1", &credential, "n1")).await.unwrap();
    let acc = &session.accelerators()[0].acc;
    let _held = acc.alloc::<u8>(5 << 20).await.unwrap();
    let clocks = |graphics, video| Clocks {
        graphics: Some(graphics),
        sm: Some(graphics),
        memory: Some(2619),
        video: Some(video),
    };
    let expected = Telemetry {
        utilization_gpu: Some(88),
        utilization_memory: Some(45),
        temperature_c: Some(63),
        power_mw: None,
        power_limit_mw: Some(700_000),
        power_management_limit_mw: Some(650_000),
        energy_mj: Some(987_654_321),
        clocks_mhz: clocks(1755, 1620),
        max_clocks_mhz: clocks(1980, 1980),
        performance_state: Some(2),
        session_memory: 5 << 20,
    };
    assert_eq!(acc.telemetry().await.unwrap(), expected);

    // The backend's metrics carry the same readings, in Prometheus's base units; a reading no
    // device gives (power, now) has no family.
    let addr = c.backends[0].backend.metrics_addr().expect("metrics address");
    let (status, body) = ac_tests::prometheus::http_get(addr, "/metrics").await.unwrap();
    assert_eq!(status, 200, "{body}");
    for series in [
        "ac_backend_device_utilization_ratio{device=\"0\"} 0.88\n",
        "ac_backend_device_memory_utilization_ratio{device=\"0\"} 0.45\n",
        "ac_backend_device_temperature_celsius{device=\"0\"} 63.0\n",
        "# TYPE ac_backend_device_energy_joules counter\n",
        "ac_backend_device_energy_joules_total{device=\"0\"} 987654.321\n",
    ] {
        assert!(body.contains(series), "no `{series}`:\n{body}");
    }
    assert!(!body.contains("ac_backend_device_power"), "{body}");

    // The GPU lost: the SDK's reading is the device's error, and the metrics have no readings.
    machine.describe(&gpu(GPU_A, 0x17, "default", "lost = true"));
    let e = acc.telemetry().await.unwrap_err();
    assert_eq!(e.kind(), Some(ac_frontend::ErrorKind::Device), "{e}");
    assert!(e.to_string().contains("GPU lost"), "{e}");
    let (_, body) = ac_tests::prometheus::http_get(addr, "/metrics").await.unwrap();
    assert!(!body.contains("ac_backend_device_temperature_celsius"), "{body}");
    drop(machine);
}

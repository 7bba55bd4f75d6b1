//! GPU hosts as sites run them, on the stand-ins (`cuda-standin` for the driver, `nvml-standin`
//! for NVML; neither is a GPU): GPUs by UUID and MIG instances from NVML, health from its events
//! and polls reaching the manager, compute modes and session limits refusing with a reason.
//!
//! The NVML stand-in reads the machine from the file `NVML_STANDIN_STATE` names and events from
//! the one `NVML_STANDIN_EVENTS` names; both are this process's, so each test takes its turn.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ac_backend::{DeviceChoice, Isolation};
use ac_frontend::Session;
use ac_proto::arm::{DeviceView, Request, Response};
use ac_proto::backend::Health;
use ac_tests::{computes, workspace_binary, TestBackend, TestCluster};

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

pub(crate) const GPU_A: &str = "GPU-aaaaaaaa-0000-4000-8000-000000000001";
const GPU_B: &str = "GPU-bbbbbbbb-0000-4000-8000-000000000002";

/// The stand-in machine: files, and this process's turn with them.
pub(crate) struct Machine {
    dir: tempfile::TempDir,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Machine {
    /// Takes the turn and describes the machine with `gpus` (TOML `[[gpu]]` tables).
    pub(crate) async fn new(gpus: &str) -> Self {
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let turn = TURN.lock().await;
        let dir = tempfile::tempdir().unwrap();
        let machine = Self { dir, _turn: turn };
        machine.describe(gpus);
        std::fs::write(machine.events(), "").unwrap();
        std::env::set_var("NVML_STANDIN_STATE", machine.state());
        std::env::set_var("NVML_STANDIN_EVENTS", machine.events());
        machine
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("machine.toml")
    }

    fn events(&self) -> PathBuf {
        self.dir.path().join("events")
    }

    /// Rewrites the machine (a new file renamed over the old: the stand-in never reads half).
    pub(crate) fn describe(&self, gpus: &str) {
        let next = self.dir.path().join("machine.next");
        std::fs::write(&next, gpus).unwrap();
        std::fs::rename(next, self.state()).unwrap();
    }

    /// NVML reports Xid `xid` on the device `uuid`.
    fn xid(&self, uuid: &str, xid: u32) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(self.events()).unwrap();
        writeln!(file, "{uuid} xid {xid}").unwrap();
    }
}

pub(crate) fn gpu(uuid: &str, bus: u32, mode: &str, extra: &str) -> String {
    format!(
        "[[gpu]]\nuuid = \"{uuid}\"\nname = \"NVIDIA H100 80GB HBM3\"\npci_bus_id = \"00000000:{bus:02x}:00.0\"\n\
         memory_mib = 81559\ncompute_mode = \"{mode}\"\ncapability = [9, 0]\nmig = false\n{extra}\n"
    )
}

/// A backend on the stand-ins: session workers, NVML from `nvml` (a path that does not exist:
/// no NVML), health polled every 100 ms.
pub(crate) async fn backend(
    nvml: &Path,
    adjust: impl FnOnce(&mut ac_backend::BackendConfig),
) -> (TestBackend, standin::WorkerRecord) {
    let record = standin::WorkerRecord::new();
    let program = record.program(&[]);
    let backend = TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.isolation = Isolation::Process;
        c.staging_mib = 16;
        c.cuda_driver = Some(workspace_binary("libcuda_standin.so"));
        c.worker_program = Some(program);
        c.nvml_library = Some(nvml.to_path_buf());
        c.health_poll_ms = 100;
        c.heartbeat_ms = 200;
        adjust(c);
    })
    .await;
    (backend, record)
}

pub(crate) fn nvml_standin() -> PathBuf {
    workspace_binary("libnvml_standin.so")
}

async fn devices(c: &TestCluster) -> Vec<DeviceView> {
    match c.admin().await.request(Request::Devices).await.expect("device list") {
        Response::Devices(devices) => devices,
        other => panic!("unexpected {other:?}"),
    }
}

/// Waits up to `limit` for the manager's view of `id` to satisfy `check`; how long it took.
pub(crate) async fn until_device(
    c: &TestCluster,
    id: &str,
    limit: Duration,
    check: impl Fn(&DeviceView) -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if devices(c).await.iter().any(|d| d.id == id && check(d)) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// A manager with one registered stand-in GPU host `h0`.
pub(crate) async fn cluster_with(backend: TestBackend) -> TestCluster {
    let mut c = TestCluster::start(0).await;
    c.backends.push(backend);
    c.add_host(0).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_that_falls_off_the_bus_leaves_the_pool_while_the_other_serves_on_until_an_admin_clears_it() {
    let machine = Machine::new(&(gpu(GPU_A, 0x17, "default", "") + &gpu(GPU_B, 0x65, "default", ""))).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    let c = cluster_with(backend).await;
    // Identity: by UUID and PCI bus id, healthy once polled.
    assert!(until_device(&c, "h0/0", Duration::from_secs(5), |d| d.health == "healthy").await.is_some());
    let listed = devices(&c).await;
    assert_eq!(listed.iter().map(|d| d.uuid.as_deref().unwrap()).collect::<Vec<_>>(), [GPU_A, GPU_B]);
    assert_eq!(listed[1].pci_bus_id.as_deref(), Some("00000000:65:00.0"));
    assert_eq!(listed[0].compute_mode, "default");

    // A job holds one GPU; the other falls off the bus.
    let credential = c.submit("j1", &["n1"], 1).await;
    let session = Session::init(c.session_options("j1", &credential, "n1")).await.unwrap();
    let held = session.accelerators()[0].id.clone();
    computes(&session.accelerators()[0].acc).await.unwrap();
    let (other, other_uuid) = if held == "h0/0" { ("h0/1", GPU_B) } else { ("h0/0", GPU_A) };
    assert_eq!(c.arm.free_accelerators(), 1);
    machine.xid(other_uuid, 79);
    let took = until_device(&c, other, Duration::from_secs(5), |d| d.health == "unhealthy").await;
    let took = took.expect("the manager hears of Xid 79");
    assert!(took <= Duration::from_secs(2), "out of the pool within 2 s, took {took:?}");
    eprintln!("Xid 79 to out of the pool (the manager's view): {took:?}");
    let view = devices(&c).await.into_iter().find(|d| d.id == other).unwrap();
    assert!(view.reason.as_deref().unwrap().contains("Xid 79"), "{view:?}");
    assert_eq!(c.arm.free_accelerators(), 0, "not granted");
    let hosts = c.hosts().await;
    let state = |id: &str| hosts[0].accelerators.iter().find(|a| a.id == id).unwrap().state.clone();
    assert_eq!(state(other), "unhealthy");
    assert_eq!(hosts[0].state, "up", "the host stays up");
    let (code, out, _) = ac_tests::armctl(&c, true, &["health"]);
    assert_eq!(code, 0);
    assert!(out.contains(&format!("accelerator {other} is not granted")) && out.contains("Xid 79"), "{out}");
    // The held GPU serves on; a second job waits rather than get the faulty one.
    computes(&session.accelerators()[0].acc).await.expect("the other GPU serves its session");
    let second = c.submit("j2", &["n2"], 1).await;
    let mut options = c.session_options("j2", &second, "n2");
    options.init_timeout = Some(Duration::from_millis(500));
    // It waits (its AC_Init times out), rather than be granted the faulty GPU and refused by
    // its backend.
    let waited = Session::init(options).await.expect_err("nothing grantable for j2");
    assert!(matches!(waited, ac_frontend::Error::Timeout(_)), "j2 waits: {waited}");

    // An admin clears it (armctl): granted again.
    let (code, out, err) = ac_tests::armctl(&c, true, &["device", "clear", other]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(until_device(&c, other, Duration::from_secs(5), |d| d.health == "healthy").await.is_some());
    let j2 = Session::init(c.session_options("j2", &second, "n2")).await.expect("granted after the clear");
    assert_eq!(j2.accelerators()[0].id, other);
    computes(&j2.accelerators()[0].acc).await.unwrap();
    let (code, out, _) = ac_tests::armctl(&c, true, &["device", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains(GPU_A) && out.contains(GPU_B) && out.contains("healthy"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_xid_ends_only_its_session() {
    let machine = Machine::new(&gpu(GPU_A, 0x17, "default", "")).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    let healthy = backend.connect().await;
    let victim = backend.connect().await;
    let wild = victim.load_ptx(include_str!("../../fixtures/illegal_store.ptx")).await.unwrap();
    let wild = wild.function("illegal_store").await.unwrap();
    wild.launch(ac_proto::backend::LaunchDims::linear(1, 1), &[0x10u64.into()]).await.unwrap();
    // The driver's error ends the faulting session; NVML reports Xid 13 for it meanwhile.
    machine.xid(GPU_A, 13);
    let err = victim.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ac_proto::backend::ErrorKind::ContextLost), "{err}");
    computes(&healthy).await.expect("the other session goes on");
    computes(&backend.connect().await).await.expect("a new session opens");
    // The events are read in order: once a critical Xid after it has counted, the Xid 13 was
    // read too, and counted no fault of its own.
    machine.xid(GPU_A, 48);
    let counted = backend.eventually(Duration::from_secs(5), |b| b.device_states()[0].faults > 0).await;
    let state = &backend.backend.device_states()[0];
    assert!(counted, "the critical Xid 48 counted: {state:?}");
    assert_eq!(state.faults, 1, "only Xid 48 is a fault: {state:?}");
    assert!(state.last_fault.as_deref().is_some_and(|f| f.starts_with("Xid 48")), "{state:?}");
    // An Xid counts; health is what NVML's polls say, and they found nothing wrong.
    assert_eq!(state.health, Health::Healthy, "{state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_process_mode_serves_one_session_and_refuses_the_second_with_the_reason() {
    let _machine = Machine::new(&gpu(GPU_A, 0x17, "exclusive_process", "")).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    let first = backend.connect().await;
    computes(&first).await.unwrap();
    let err = backend.connect_raw().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, ac_frontend::Error::DeviceRefused(_)), "{err:?}");
    assert!(err.to_string().contains("EXCLUSIVE_PROCESS"), "{err}");
    computes(&first).await.expect("the first session is untouched");
    drop(first);
    assert!(backend.eventually(Duration::from_secs(5), |b| b.sessions() == 0).await);
    let mut opened = None;
    for _ in 0..50 {
        match backend.connect_raw().await {
            Ok(acc) => {
                opened = Some(acc);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    computes(&opened.expect("the GPU is free again")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_limit_refuses_with_a_typed_error() {
    let _machine = Machine::new(&gpu(GPU_A, 0x17, "default", "")).await;
    let (backend, _record) = backend(&nvml_standin(), |c| c.max_sessions = Some(2)).await;
    let (a, b) = (backend.connect().await, backend.connect().await);
    let err = backend.connect_raw().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, ac_frontend::Error::DeviceRefused(_)), "{err:?}");
    assert!(err.to_string().contains("limit of 2 sessions"), "{err}");
    let states = backend.backend.device_states();
    assert_eq!((states[0].sessions, states[0].max_sessions), (2, 2));
    computes(&a).await.unwrap();
    computes(&b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_mig_instances_are_three_accelerators() {
    let mig = |n: u32, gi: u32| {
        format!(
            "[[gpu.instance]]\nuuid = \"MIG-0000000{n}-1111-4222-8333-444444444444\"\n\
             name = \"NVIDIA H100 80GB HBM3 MIG 2g.20gb\"\nmemory_mib = 19968\ngpu_instance = {gi}\ncompute_instance = 0\n"
        )
    };
    let split =
        gpu(GPU_B, 0x65, "default", "").replace("mig = false", "mig = true") + &mig(1, 3) + &mig(2, 4) + &mig(3, 5);
    let _machine = Machine::new(&(gpu(GPU_A, 0x17, "default", "") + &split)).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    let served = backend.backend.devices();
    assert_eq!(served.len(), 4, "one whole GPU and three instances: {served:?}");
    assert!(served[1..].iter().all(|d| d.memory_total == 19968 << 20), "{served:?}");
    let states = backend.backend.device_states();
    assert_eq!(states[2].uuid.as_deref(), Some("MIG-00000002-1111-4222-8333-444444444444"));
    assert_eq!(states[2].mig_profile.as_deref(), Some("2g.20gb"));
    assert_eq!(states[2].pci_bus_id.as_deref(), Some("00000000:65:00.0"), "the parent's bus");
    // A session on an instance: its worker is started for that instance's UUID.
    let mut options = backend.options();
    options.device = 3;
    computes(&ac_frontend::Accelerator::connect(&options).await.unwrap()).await.unwrap();
    // The manager registers four accelerators.
    let c = cluster_with(backend).await;
    assert_eq!(c.hosts().await[0].accelerators.len(), 4);
    assert!(until_device(&c, "h0/3", Duration::from_secs(5), |d| d.mig_profile.as_deref() == Some("2g.20gb"))
        .await
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nvml_health_is_unknown_and_said_and_the_gpus_serve() {
    let _machine = Machine::new(&gpu(GPU_A, 0x17, "default", "")).await;
    let (backend, _record) = backend(Path::new("/nonexistent/libnvidia-ml.so.1"), |_| {}).await;
    let states = backend.backend.device_states();
    assert_eq!(states.len(), 2, "the driver's two GPUs, by CUDA ordinal");
    assert!(matches!(&states[0].health, Health::Unknown(why) if why.contains("no NVML")), "{states:?}");
    assert_eq!(states[0].uuid, None);
    computes(&backend.connect().await).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_memory_quota_refuses_past_it_and_freed_memory_counts_again() {
    let backend = TestBackend::start_with(|c| c.session_memory_mib = Some(8)).await;
    let acc = backend.connect().await;
    let first = acc.alloc::<u8>(6 << 20).await.unwrap();
    let err = acc.alloc::<u8>(4 << 20).await.map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), Some(ac_proto::backend::ErrorKind::OutOfMemory), "{err}");
    assert!(err.to_string().contains("quota of 8 MiB"), "{err}");
    // Another session has a quota of its own.
    let other = backend.connect().await;
    other.alloc::<u8>(6 << 20).await.expect("its own 8 MiB");
    drop(first);
    acc.synchronize().await.unwrap();
    let mut again = None;
    for _ in 0..50 {
        match acc.alloc::<u8>(4 << 20).await {
            Ok(buf) => {
                again = Some(buf);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(again.is_some(), "the freed 6 MiB count again");
}

/// Session workers that are this process's children, with their environments.
fn worker_environments() -> Vec<String> {
    let me = std::process::id();
    let tasks = std::fs::read_dir(format!("/proc/{me}/task")).expect("/proc");
    let children: String =
        tasks.flatten().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ").collect();
    let workers = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).filter(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"--session-worker"))
    });
    workers
        .map(|pid| {
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default())
                .replace('\0', "\n")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mps_gpu_runs_its_control_daemon_and_its_sessions_as_clients() {
    use std::os::unix::fs::PermissionsExt;
    let machine = Machine::new(&gpu(GPU_A, 0x17, "exclusive_process", "")).await;
    // A stand-in for NVIDIA's control program: records how it was run.
    let log = machine.dir.path().join("mps.log");
    let control = machine.dir.path().join("nvidia-cuda-mps-control");
    let script = format!(
        "#!/bin/sh\n{{ echo \"args: $*\"; echo \"gpu: $CUDA_VISIBLE_DEVICES\"; echo \"pipes: $CUDA_MPS_PIPE_DIRECTORY\"; \
         [ \"$1\" = -d ] || cat; }} >> '{}'\n",
        log.display()
    );
    std::fs::write(&control, script).unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (backend, _record) = backend(&nvml_standin(), |c| {
        c.mps_devices = Some(vec![0]);
        c.mps_control = Some(control.clone());
        c.max_sessions = Some(4);
    })
    .await;
    let started = std::fs::read_to_string(&log).unwrap();
    assert!(started.contains("args: -d") && started.contains(&format!("gpu: {GPU_A}")), "{started}");
    assert_eq!(started.matches("quit").count(), 1, "one left by an earlier backend is asked to quit first: {started}");
    assert!(started.contains(&format!("mps/{GPU_A}/pipe")), "{started}");
    // EXCLUSIVE_PROCESS admits one process, the MPS server: both sessions are its clients.
    let (a, b) = (backend.connect().await, backend.connect().await);
    computes(&a).await.unwrap();
    computes(&b).await.unwrap();
    let environments = worker_environments();
    assert_eq!(environments.len(), 2);
    for env in &environments {
        let pipes = env.lines().find_map(|l| l.strip_prefix("CUDA_MPS_PIPE_DIRECTORY="));
        assert!(pipes.is_some_and(|p| p.ends_with(&format!("mps/{GPU_A}/pipe"))), "{env}");
        assert!(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"), "{env}");
        assert!(env.contains(&format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={}M", 81559 / 4)), "{env}");
    }
    drop((a, b));
    let TestBackend { backend, .. } = backend;
    backend.shutdown().await;
    let after = std::fs::read_to_string(&log).unwrap();
    assert_eq!(after.matches("quit").count(), 2, "asked to quit at shutdown: {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_that_last_refuse_new_sessions_and_old_ecc_counts_do_not() {
    // ECC errors counted before the backend started are history, not a condition.
    let machine = Machine::new(&gpu(GPU_A, 0x17, "default", "uncorrected_ecc = 5")).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    assert_eq!(backend.backend.device_states()[0].health, Health::Healthy);
    let running = backend.connect().await;
    computes(&running).await.unwrap();
    let health = |b: &ac_backend::RunningBackend| b.device_states()[0].health.clone();
    machine.describe(&gpu(GPU_A, 0x17, "default", "uncorrected_ecc = 6"));
    let unhealthy =
        |b: &ac_backend::RunningBackend| matches!(health(b), Health::Unhealthy(r) if r.contains("1 uncorrectable"));
    assert!(backend.eventually(Duration::from_secs(5), unhealthy).await, "{:?}", health(&backend.backend));
    let err = backend.connect_raw().await.map(|_| ()).unwrap_err();
    assert!(matches!(&err, ac_frontend::Error::DeviceRefused(m) if m.contains("unhealthy")), "{err:?}");
    // A GPU that stops answering.
    machine.describe(&gpu(GPU_A, 0x17, "default", "uncorrected_ecc = 5\nlost = true"));
    let lost = |b: &ac_backend::RunningBackend| matches!(health(b), Health::Unhealthy(r) if r.contains("GPU lost"));
    assert!(backend.eventually(Duration::from_secs(5), lost).await, "{:?}", health(&backend.backend));
    // It comes back (a reset): sessions open again.
    machine.describe(&gpu(GPU_A, 0x17, "default", "uncorrected_ecc = 5"));
    assert!(backend.eventually(Duration::from_secs(5), |b| health(b) == Health::Healthy).await);
    computes(&backend.connect().await).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_lost_before_the_backend_starts_keeps_its_place_and_the_others_serve() {
    let _machine = Machine::new(&(gpu(GPU_A, 0x17, "default", "lost = true") + &gpu(GPU_B, 0x65, "default", ""))).await;
    let (backend, _record) = backend(&nvml_standin(), |_| {}).await;
    let states = backend.backend.device_states();
    assert_eq!(states.len(), 2, "{states:?}");
    assert!(matches!(&states[0].health, Health::Unhealthy(r) if r.contains("NVML cannot describe it")), "{states:?}");
    assert_eq!(states[1].uuid.as_deref(), Some(GPU_B), "GPU B keeps index 1");
    let err = backend.connect_raw().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, ac_frontend::Error::DeviceRefused(_)), "{err:?}");
    let mut options = backend.options();
    options.device = 1;
    computes(&ac_frontend::Accelerator::connect(&options).await.unwrap()).await.unwrap();
}

//! PyTorch and CuPy, unmodified, through the CUDA shim (issue 48), and NVML for the same
//! devices (the shim's `libnvidia-ml.so.1`): the frameworks' library calls run on the
//! backend's builtin kernels, which the driver stand-in runs (`cuda-standin`; not a GPU).

use crate::cuda_libraries::{patient_cuda_cluster, patient_cuda_cluster_with};
use crate::cuda_shim::{cuda_cluster, cuda_cluster_timed, run, said};
use crate::standin;

use ac_tests::cuda;

/// Runs `tests/cuda/<script>` (a framework's operations on the device against its CPU results:
/// `framework_check.py`) with the frameworks' interpreter as a job's process through the shim,
/// `LD_PRELOAD`ing it if `preload`; it must report each of `checks` ok and call nothing the shim
/// does not serve, and Python's exit must give the accelerator back.
async fn run_framework_script(script: &str, preload: bool, checks: &[&str]) -> String {
    run_framework_script_with(script, preload, &[], checks).await
}

/// [`run_framework_script`] with more of the script's environment; answers what it printed.
async fn run_framework_script_with(script: &str, preload: bool, more_env: &[(&str, &str)], checks: &[&str]) -> String {
    run_framework_script_on(Sessions::InTheBackend, script, preload, more_env, checks).await
}

/// Checks that `torch_math.py`'s tensor larger than the session may hold was refused as
/// PyTorch's out-of-memory error, and that its device went on (`mm after running out of memory`
/// is among the script's checks). PyTorch's own allocators' messages list the processes on the
/// device from NVML (this one, with what its session holds); `cudaMallocAsync`'s does not.
fn assert_pytorch_ran_out_of_memory_and_went_on(text: &str, processes_listed: bool) {
    // Printed in the script's `except torch.cuda.OutOfMemoryError` (with PyTorch's message).
    assert!(text.contains("\nout of memory: ") && !text.contains("1 TiB tensor was allocated"), "{text}");
    assert_eq!(text.contains("Including non-PyTorch memory, this process has "), processes_listed, "{text}");
    assert!(text.contains("\nmm after running out of memory ok "), "{text}");
}

/// Where the backend serves the framework's session.
enum Sessions {
    /// In its own process, a context of the stand-in's (the tests' default: fewer processes).
    InTheBackend,
    /// In a session worker of its own, as a GPU host's backend does by default.
    InWorkers,
    /// In workers, for a submitted job whose processes (the ones it spawns too) share its
    /// accelerator, as a batch job's do: CUDA IPC opens memory only within one job.
    WorkersOfOneJob,
}

/// [`run_framework_script_with`] on a backend serving sessions as `sessions` says.
async fn run_framework_script_on(
    sessions: Sessions,
    script: &str,
    preload: bool,
    more_env: &[(&str, &str)],
    checks: &[&str],
) -> String {
    let _turn = standin::exclusive().await;
    let Some(python) = cuda::frameworks_python() else { return String::new() };
    let dir = tempfile::tempdir().unwrap();
    let mut record = standin::WorkerRecord::new();
    let workers_before = standin::session_workers();
    let c = match sessions {
        Sessions::InTheBackend => patient_cuda_cluster().await,
        Sessions::InWorkers | Sessions::WorkersOfOneJob => {
            let program = record.program(&[]);
            patient_cuda_cluster_with(|b| {
                b.isolation = ac_backend::Isolation::Process;
                b.cuda_driver = Some(ac_tests::workspace_binary("libcuda_standin.so"));
                b.worker_program = Some(program.clone());
            })
            .await
        }
    };
    let shim = cuda::shim_dir(dir.path());
    let script = cuda::source(&format!("tests/cuda/{script}"));
    let preloaded = shim.join("libcuda.so.1");
    let credential = match sessions {
        Sessions::WorkersOfOneJob => Some(c.submit("j1", &["n1"], 1).await),
        _ => None,
    };
    let mut env = match &credential {
        Some(credential) => vec![("ARM_JOB_ID", "j1"), ("ARM_JOB_CREDENTIAL", credential.as_str())],
        None => vec![("ARM_ACPN", "1")],
    };
    if preload {
        env.push(("LD_PRELOAD", preloaded.to_str().unwrap()));
    }
    env.extend_from_slice(more_env);
    let out = run(&c, &shim, &python, &[script.to_str().unwrap()], &env).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("devices 1: CUDA driver stand-in"), "{text}");
    for name in checks {
        assert!(text.contains(&format!("\n{name} ok ")), "no `{name} ok`:\n{text}");
    }
    assert!(text.contains("all ok"), "{text}");
    // Everything the framework called is served.
    let unserved = text.lines().filter(|l| l.contains("not supported"));
    assert_eq!(unserved.count(), 0, "{text}");
    if credential.is_some() {
        // A submitted job holds its accelerator until it ends.
        assert_eq!(c.arm.held_accelerators(), 1, "the job's accelerator alone while it runs:\n{text}");
        c.admin().await.request(ac_proto::arm::Request::JobEnd { id: "j1".into() }).await.expect("the job ends");
    }
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after Python exited:\n{text}");
    let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    standin::assert_no_violations();
    if let Sessions::InWorkers | Sessions::WorkersOfOneJob = sessions {
        assert!(standin::worker_gone(&c.backends[0].backend, &workers_before).await, "the session worker did not end");
        record.assert_none();
    }
    text
}

/// PyTorch, unmodified (2.15 with its CUDA 13.2 runtime, pinned), through the shim: its matmuls
/// (cuBLAS, cuBLASLt's bias epilogue; f32, f64, binary16, bfloat16 and complex, conjugate
/// transposes included), its complex and half-precision dot products and complex
/// matrix-vector products, a side stream, a product captured in a CUDA graph and replayed, and its
/// FFTs (cuFFT) run on the backend's
/// builtin kernels and match PyTorch's CPU results (`tests/cuda/torch_math.py`). The shim is
/// `LD_PRELOAD`ed, as README says for a framework whose RPATH names NVIDIA's math libraries:
/// those are loaded too, and would fail here, since the stand-in runs none of their kernels.
/// A tensor larger than the session may hold is PyTorch's `OutOfMemoryError`, and the device
/// goes on (in each PyTorch test).
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_runs_its_matmuls_and_ffts_through_the_shim() {
    let products = [
        "mm",
        "mm transposed",
        "mm both transposed",
        "mm of slices",
        "mm f64",
        "addmm",
        "addmm scaled",
        "addmm relu",
        "addmm gelu",
    ];
    let more = [
        "linear",
        "bmm",
        "bmm broadcast",
        "matmul broadcast",
        "mv",
        "dot",
        "mm on a side stream",
        "mm in a CUDA graph",
        "mm allocating in a CUDA graph",
    ];
    let ffts = [
        "fft",
        "fft f64",
        "rfft",
        "rfft2",
        "ifft2 unscaled",
        "fft2 batched",
        "rfft f16",
        "fft f16",
        "ifft f16 unscaled",
    ];
    let halves = ["mm", "mm transposed", "bmm", "linear", "addmm", "mm {} to f32", "dot"]
        .map(|op| ["f16", "bf16"].map(|t| if op.contains("{}") { op.replace("{}", t) } else { format!("{op} {t}") }));
    let complexes = ["mm", "mm conjugate-transposed", "bmm", "mv", "mv transposed", "dot", "vdot"]
        .map(|op| ["c64", "c128"].map(|t| format!("{op} {t}")));
    let names: Vec<&str> = halves.iter().chain(&complexes).flatten().map(String::as_str).collect();
    let all = [&products[..], &more[..], &ffts[..], &names[..]].concat();
    let text = run_framework_script("torch_math.py", true, &all).await;
    if !text.is_empty() {
        assert_pytorch_ran_out_of_memory_and_went_on(&text, true);
    }
    assert!(text.is_empty() || text.contains("\nallocator native\nsegments "), "{text}");
    assert!(text.is_empty() || text.contains(", expandable 0\n"), "no expandable segment unasked:\n{text}");
}

/// The same PyTorch script with PyTorch's `cudaMallocAsync` allocator
/// (`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`): every tensor is stream-ordered memory of
/// the device's memory pool, and the CUDA graphs' allocations are graph memory nodes (the
/// shim's `graph::memory`), their outputs read after each replay.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_with_its_cuda_malloc_async_allocator_runs_through_the_shim() {
    let checks = [
        "mm",
        "bmm",
        "mm f16",
        "mm c64",
        "mm on a side stream",
        "mm in a CUDA graph",
        "mm allocating in a CUDA graph",
        "fft",
        "rfft2",
    ];
    let env = [("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")];
    let text = run_framework_script_with("torch_math.py", true, &env, &checks).await;
    if !text.is_empty() {
        assert_pytorch_ran_out_of_memory_and_went_on(&text, false);
    }
    assert!(text.is_empty() || text.contains("\nallocator cudaMallocAsync\n"), "{text}");
}

/// The same PyTorch script with PyTorch's expandable segments
/// (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, backend protocol 14): PyTorch finds
/// the device in NVML by its PCI bus id and asks for its fabric (the shim's
/// `libnvidia-ml.so.1`: none, so no fabric handles) before it reserves a range and maps
/// physical memory into it as a segment grows; its tensors live in those segments. With
/// `PYTORCH_NVML_BASED_CUDA_CHECK=1` it counts the devices through NVML, whose UUIDs are the
/// driver API's.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_with_expandable_segments_runs_through_the_shim() {
    let checks =
        ["mm", "mm f64", "bmm", "mm f16", "mm c64", "mm on a side stream", "mm in a CUDA graph", "fft", "rfft2"];
    let env = [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"), ("PYTORCH_NVML_BASED_CUDA_CHECK", "1")];
    // Session workers: a mapping is its process's, so ranges are served only to a session with
    // a process of its own.
    let text = run_framework_script_on(Sessions::InWorkers, "torch_math.py", true, &env, &checks).await;
    if text.is_empty() {
        return; // no frameworks (skipped as the others are)
    }
    assert!(text.contains("\nallocator native\n"), "{text}");
    let segments = text.lines().find(|l| l.starts_with("segments ")).unwrap_or_else(|| panic!("{text}"));
    let (all, expandable) = segments.strip_prefix("segments ").and_then(|s| s.split_once(", expandable ")).unwrap();
    assert!(all != "0" && all == expandable, "every segment expandable: {segments}");
    assert!(text.contains("nvml devices 1, uuids as the driver says"), "{text}");
    assert_pytorch_ran_out_of_memory_and_went_on(&text, true);
}

/// PyTorch's device count asks NVML, which starts no CUDA (`tests/cuda/torch_fork.py`): two
/// workers forked after it each start CUDA in a session of their own, copy a tensor and multiply
/// two matrices on the device; then the parent does, on the session NVML opened. Each child's
/// exit gives its session back.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_workers_forked_after_its_device_count_use_cuda() {
    let checks = ["child 0 copy", "child 0 mm", "child 1 copy", "child 1 mm", "parent copy", "parent mm"];
    let text = run_framework_script("torch_fork.py", true, &checks).await;
    if text.is_empty() {
        return; // no frameworks (skipped as the others are)
    }
    assert!(text.contains("counted 1; CUDA started before the fork: False"), "{text}");
    assert!(text.contains("child 0 exited with 0") && text.contains("child 1 exited with 0"), "{text}");
}

/// PyTorch's `torch.multiprocessing` shares CUDA tensors between a job's processes
/// (`tests/cuda/torch_ipc.py`): a child spawned with the job's environment opens the parent's
/// tensor by its CUDA IPC handles (memory and event), reads it, writes into it and sends back a
/// product of its own, which the parent opens in turn; both read what the other wrote. The
/// backend runs each process's session in a worker of its own, whose stand-ins open each other's
/// memory.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_processes_of_one_job_share_cuda_tensors() {
    let checks = [
        "child reads the parent's tensor",
        "child multiplies it",
        "parent sees the child's writes",
        "parent reads the child's product",
    ];
    let text = run_framework_script_on(Sessions::WorkersOfOneJob, "torch_ipc.py", true, &[], &checks).await;
    if text.is_empty() {
        return; // no frameworks (skipped as the others are)
    }
    assert!(text.contains("child exited with 0"), "{text}");
}

/// The same with PyTorch's expandable segments (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`):
/// the tensors lie in segments of virtual memory management, which `torch.multiprocessing`
/// shares by POSIX descriptors (`cuMemExportToShareableHandle`; the child takes the parent's
/// descriptor with `pidfd_getfd`) and the receiver imports and maps into a range of its own.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_processes_share_tensors_of_expandable_segments() {
    let checks = [
        "tensor lies in an expandable segment",
        "child reads the parent's tensor",
        "child multiplies it",
        "parent sees the child's writes",
        "parent reads the child's product",
    ];
    let env = [("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")];
    let text = run_framework_script_on(Sessions::WorkersOfOneJob, "torch_ipc.py", true, &env, &checks).await;
    if text.is_empty() {
        return; // no frameworks (skipped as the others are)
    }
    assert!(text.contains("child exited with 0"), "{text}");
}

/// CuPy, unmodified (14.2 for CUDA 13, pinned), through the shim found by `LD_LIBRARY_PATH`
/// alone: its products, its cuBLAS level 1 and 2 calls (results in device memory; real and
/// complex), its triangular solves (`cupyx.scipy.linalg.solve_triangular`) and FFTs run
/// on the backend's builtin kernels and match NumPy's (`tests/cuda/cupy_math.py`).
#[tokio::test(flavor = "multi_thread")]
async fn cupy_runs_its_products_and_ffts_through_the_shim() {
    let products =
        ["dot", "dot transposed", "dot f64", "matrix-vector", "matmul batched", "dot f16", "dot c64", "dot c128"];
    let vectors = ["cublas dot", "cublas nrm2", "cublas axpy", "cublas gemv", "cublas ger"];
    let complexes = ["matrix-vector", "cublas dotu", "cublas dotc", "cublas nrm2", "cublas axpy", "cublas scal"]
        .map(|op| ["c64", "c128"].map(|t| format!("{op} {t}")));
    let solves = ["solve_triangular lower", "solve_triangular conjugate-transposed unit"]
        .map(|op| ["f32", "f64", "c64", "c128"].map(|t| format!("{op} {t}")));
    let complexes: Vec<&str> = complexes.iter().flatten().chain(solves.iter().flatten()).map(String::as_str).collect();
    let ffts = ["fft", "fft f64", "rfft", "rfft2", "ifft unscaled"];
    // CuPy's MemoryAsyncPool: stream-ordered allocation from the device's memory pool.
    let pooled = [
        "dot from the async pool, round 0",
        "dot from the async pool, round 1",
        "dot from the async pool, round 2",
        "fft from the async pool",
    ];
    let all = [&products[..], &vectors[..], &complexes[..], &ffts[..], &pooled[..]].concat();
    run_framework_script("cupy_math.py", false, &all).await;
}

/// NVML through the shim's `libnvidia-ml.so.1` (`tests/cuda/nvml_probe.py`, ctypes, as
/// pynvml and PyTorch call it), for a job of two accelerators: the same devices as the driver
/// API, in its order, with its names, UUIDs, PCI bus ids (each finds its device both ways),
/// compute capabilities and memory; no fabric, no peer access; and NVML's own codes for an
/// index past the devices, an unknown UUID or bus id, a buffer too small, a forged handle, a
/// struct version not served, a function not served (named once on stderr), and calls before
/// init and after shutdown. A job without accelerators has an NVML of no devices.
#[tokio::test(flavor = "multi_thread")]
async fn nvml_says_the_devices_the_driver_api_says_and_refuses_by_its_own_codes() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_probe.py");
    let python = std::path::Path::new("python3");
    let out = run(&c, &shim, python, &[probe.to_str().unwrap()], &[("ARM_ACPN", "2")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("nvml probe done"), "{text}");
    let same = "as the driver says";
    for (i, bus) in [(0, "01"), (1, "02")] {
        let line = format!(
            "device {i}: name {same}, uuid {same}, pci 00000000:{bus}:00.0 is driver device {i}, handles by pci True \
             and uuid True, index {i}, capability 9.0 {same}, memory {same}, used and free add up, fabric state 0"
        );
        assert!(text.contains(&line), "missing `{line}`:\n{text}");
    }
    for line in [
        "a count before nvmlInit: 1 (Uninitialized)",
        "devices: nvml 2, driver 2",
        "handles distinct: True",
        "an index past the devices: 2 (Invalid Argument)",
        "an unknown uuid: 6 (Not Found)",
        "a bus id of no device: 6 (Not Found)",
        "a name into 4 bytes: 7 (Insufficient Size)",
        "a forged handle: 2 (Invalid Argument)",
        "memory of struct version 1: 25 (Argument version mismatch)",
        "p2p between devices 0 and 1: 5",
        "utilization: 3 (Not Supported)",
        "fan speed: 3 (Not Supported)",
        "ac-cuda: nvmlDeviceGetFanSpeed is not supported on remote accelerators (NVML_ERROR_NOT_SUPPORTED)",
        "driver 580.65.06, cuda 13000",
        "a count after nvmlShutdown: 1 (Uninitialized)",
        "nvmlShutdown again: 1 (Uninitialized)",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // Served, and this backend's GPU has no NVML to read it from: not supported, and not named.
    assert!(!text.contains("nvmlDeviceGetUtilizationRates is not supported"), "{text}");
    assert!(text.contains("temperature: 3 (Not Supported)") && !text.contains("needs backend protocol"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the probe exited:\n{text}");
    // A job without accelerators: NVML of no devices, while the driver API says why.
    let out = run(&c, &shim, python, &[probe.to_str().unwrap(), "count"], &[("ARM_ACPN", "0")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("devices: nvml 0") && text.contains("cuInit: 100"), "{text}");
    assert!(text.contains("holds no CUDA accelerator"), "{text}");
    standin::assert_no_violations();
}

/// NVML through the shim on a backend older than protocol 15, which reads no sensors: each
/// sensor is "not supported", as where the GPU host has no NVML, and the reason is said once
/// for all of them (a monitor asks every second); the rest of NVML is served.
#[tokio::test(flavor = "multi_thread")]
async fn nvml_on_a_backend_older_than_its_sensors_says_not_supported_once() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let older = 14; // the protocol before the sensors' (15)
    let c = cuda_cluster_timed(1, |_| {}, |b| b.only_protocol = Some(older)).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_probe.py");
    let out = run(&c, &shim, std::path::Path::new("python3"), &[probe.to_str().unwrap()], &[("ARM_ACPN", "2")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("nvml probe done"), "{text}");
    assert!(
        text.contains("utilization: 3 (Not Supported)") && text.contains("temperature: 3 (Not Supported)"),
        "{text}"
    );
    let reason = format!(
        "ac-cuda: NVML's sensors and processes: version mismatch: a device's telemetry needs backend protocol 15; \
         this backend speaks {older}"
    );
    assert_eq!(text.matches("needs backend protocol").count(), 1, "said once:\n{text}");
    assert!(text.contains(&reason), "missing `{reason}`:\n{text}");
    assert!(text.contains("devices: nvml 2, driver 2"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the probe exited:\n{text}");
    standin::assert_no_violations();
}

/// A process that asks NVML, then forks (`tests/cuda/nvml_fork.py`, ctypes): NVML starts no
/// CUDA, so two children forked after it, at once, each open a session of their own in their
/// parent's ad-hoc job and copy to and from each device; the parent then computes on the
/// session NVML opened; a child forked after that is refused CUDA (`CUDA_ERROR_NOT_INITIALIZED`,
/// as NVIDIA's driver refuses one). With `AC_GET=1` the children open the job's static
/// accelerator alone. No session or accelerator is left held once they have all exited.
#[tokio::test(flavor = "multi_thread")]
async fn children_forked_after_nvml_open_sessions_of_their_own() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/nvml_fork.py");
    // (environment, the parent's devices, each child's): `AC_GET`'s extra accelerator is the
    // parent's; its children open the job's static one alone and do not ask again (the pool
    // has no third: asked, they would be refused, and say so on stderr).
    let acpn_2 = vec![("ARM_ACPN", "2")];
    let acpn_1_get_1 = vec![("ARM_ACPN", "1"), ("AC_GET", "1")];
    for (env, parent, child) in [(acpn_2, 2, 2), (acpn_1_get_1, 2, 1)] {
        let out = run(&c, &shim, std::path::Path::new("python3"), &[probe.to_str().unwrap()], &env).await;
        let text = said(&out);
        assert!(out.status.success() && text.contains("nvml fork done"), "{text}");
        let exact = |n| format!("{n} device(s), 65536 bytes there and back exact");
        for line in [
            format!("parent: nvml devices {parent}"),
            format!("child 0: nvml devices {child}"),
            format!("child 1: nvml devices {child}"),
            format!("child 0: {}", exact(child)),
            format!("child 1: {}", exact(child)),
            "child 0 exited with 0".into(),
            "child 1 exited with 0".into(),
            format!("parent: {}", exact(parent)),
            "late child: cuInit 3".into(),
            "late child exited with 0".into(),
        ] {
            assert!(text.contains(&line), "missing `{line}`:\n{text}");
        }
        // The children joined their parent's ad-hoc job (ARM_ACPN): a job of their own would
        // have queued for the accelerators the parent holds.
        assert!(!text.contains("waits for"), "a child queued as a job of its own:\n{text}");
        assert!(!text.contains("AC_GET="), "a child asked for AC_GET's accelerators again:\n{text}");
        assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the processes exited:\n{text}");
        let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
        assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    }
    standin::assert_no_violations();
}

//! Unmodified CUDA programs on remote accelerators (issue 48): programs built by `nvcc` with
//! its default static runtime, run with `ac-cuda`'s `libcuda.so.1` first on
//! `LD_LIBRARY_PATH`, against a manager and backends whose CUDA devices are the driver
//! stand-in's (`cuda-standin`, which runs these programs' kernels on the CPU; not a GPU).
//! The programs and their build: `ac_tests::cuda`.

#[allow(dead_code)] // the stand-in's helpers these tests do not need
use crate::standin;

use std::path::Path;
use std::process::{Command, Output};

use ac_tests::{cuda, TestCluster};

/// A manager and `hosts` backends, each serving the stand-in's two CUDA devices.
async fn cuda_cluster(hosts: usize) -> TestCluster {
    cuda_cluster_timed(hosts, |_| {}, |_| {}).await
}

/// A manager and one backend as [`cuda_cluster`], with the deployment's default lease,
/// backend time-out and connection idle time-out instead of the tests' second or so: for the
/// frameworks and the math programs, whose stand-in kernels (direct transforms and products on
/// the CPU) keep this process's cores busy for seconds on a loaded machine, and which are not
/// about leases (`cuda_shim`'s other tests and `leases.rs` are). (They passed with the tests'
/// time-outs too once the stand-in computed kernels without its lock: see `cuda-shim.md`.)
async fn patient_cuda_cluster() -> TestCluster {
    cuda_cluster_timed(
        1,
        |arm| {
            let defaults = arm_server::ArmConfig::default();
            (arm.lease_ms, arm.backend_timeout_ms) = (defaults.lease_ms, defaults.backend_timeout_ms);
        },
        |backend| backend.transport = ac_proto::transport::Tuning::default(),
    )
    .await
}

/// A manager and `hosts` stand-in backends, their test configurations adjusted.
async fn cuda_cluster_timed(
    hosts: usize,
    adjust_arm: impl FnOnce(&mut arm_server::ArmConfig),
    adjust_backend: impl Fn(&mut ac_backend::BackendConfig),
) -> TestCluster {
    let state = tempfile::tempdir().expect("temp dir");
    let mut config = ac_tests::arm_config(state.path());
    adjust_arm(&mut config);
    let arm = arm_server::start(config).await.expect("arm starts");
    let mut backends = Vec::new();
    for _ in 0..hosts {
        backends.push(cuda::standin_backend_with(&adjust_backend).await);
    }
    let cluster = TestCluster { arm, backends, state };
    for i in 0..hosts {
        cluster.add_host(i).await;
    }
    cluster
}

/// Runs `exe` as a job's process through the shim, with `env` added (off the async threads,
/// which serve the manager and backends meanwhile).
async fn run(c: &TestCluster, shim: &Path, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(exe);
    command
        .args(args)
        .env("LD_LIBRARY_PATH", shim)
        .env("ARM_ADDR", c.arm.addr().to_string())
        .env("ARM_CA_CERT", c.arm.ca_cert())
        .env("ARM_NODE", "n1")
        .env("ARM_INIT_TIMEOUT_S", "20");
    for (k, v) in env {
        command.env(k, v);
    }
    tokio::task::spawn_blocking(move || command.output().expect("the program starts")).await.expect("joined")
}

fn said(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A program that reaches one backend directly (`AC_BACKEND_ADDR`, no manager: a workstation,
/// a GPU host's check) ends its session when it exits: the backend does not hold it for a
/// resumption that never comes (`session_hold_ms`, a minute), so a device at its session limit
/// serves the next run. Python programs (PyTorch's) exit through the same `atexit`.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_reaching_a_backend_directly_ends_its_session_at_exit() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let backend = cuda::standin_backend_with(|c| c.max_sessions = Some(1)).await;
    let shim = cuda::shim_dir(dir.path());
    let ca = backend.backend.ca_cert().to_path_buf();
    for run in ["first", "second"] {
        let mut command = Command::new(&exe);
        command
            .arg("100000")
            .env("LD_LIBRARY_PATH", &shim)
            .env("AC_BACKEND_ADDR", backend.backend.addr().to_string())
            .env("AC_CA_CERT", &ca)
            .env_remove("ARM_ADDR");
        let out = tokio::task::spawn_blocking(move || command.output().expect("starts")).await.unwrap();
        assert!(out.status.success(), "{run} run: {}", said(&out));
        assert!(said(&out).contains("vector_add: 100000 elements on device 0 exact"), "{run} run: {}", said(&out));
        // Held for a resumption, it would end only after the idle timeout and the hold.
        let ended = backend.eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
        assert!(ended, "after the {run} run the backend still holds {} session(s)", backend.backend.sessions());
    }
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unmodified_vector_add_runs_on_a_remote_accelerator_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["100000"], &[("ARM_ACPN", "1")]).await;
    assert!(out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(text.contains("vector_add: 100000 elements on device 0 exact"), "{text}");
    assert!(text.contains("devices: 1; device 0:"), "{text}");
    assert!(text.contains("occupancy: 8 blocks of 256 threads"), "{text}");
    // Everything it called, the runtime's start and exit included, is served.
    assert!(!text.contains("not supported") && !text.contains("unexpectedly"), "{text}");
    standin::assert_no_violations();
}

/// A program that forks once CUDA has started: the child's `exit()` runs the exit handler it
/// inherited without the parent's threads; it must leave the session to the parent (which then
/// computes on), not hang in it or give the parent's accelerator back.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_child_exits_without_touching_its_parents_session() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("fork_exit", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("forked child exited with 0"), "{text}");
    assert!(text.contains("parent computed after the fork exact"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    standin::assert_no_violations();
}

/// Programs built for per-thread default streams (`nvcc --default-stream per-thread`) reach the
/// driver through its per-thread variants (`cuMemcpyHtoD_v2_ptds`, `cuLaunchKernel_ptsz`,
/// `cuEventRecord_ptsz`, ...), which the shim serves as the same entry points under a second
/// name: they run as the legacy-stream builds do.
#[tokio::test(flavor = "multi_thread")]
async fn programs_built_for_per_thread_default_streams_run_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let per_thread = ["--default-stream", "per-thread"];
    let Some(vector_add) = cuda::build_with("vector_add", dir.path(), &per_thread) else { return };
    let Some(streams) = cuda::build_with("streams", dir.path(), &per_thread) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let runs = [
        (vector_add, "100000", "vector_add: 100000 elements on device 0 exact"),
        (streams, "4", "streams: 4 threads exact"),
    ];
    for (exe, arg, line) in runs {
        let out = run(&c, &shim, &exe, &[arg], &[("ARM_ACPN", "1")]).await;
        let text = said(&out);
        assert!(out.status.success(), "{text}");
        assert!(text.contains(line), "{text}");
        // streams.cu's deliberate calls (managed memory, capture) aside, every call is served.
        let refused: Vec<&str> = text.lines().filter(|l| l.contains("not supported")).collect();
        assert!(refused.iter().all(|l| l.contains("cuMemAllocManaged") || l.contains("Capture")), "{text}");
    }
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_events_and_memsets_from_threads_sharing_a_device() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("streams", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["4"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "streams: 4 threads exact",
        "memset and device-to-device copy exact",
        "event time measured",
        "capture status 0 0 id 0 graph none deps none 0",
        "edge data without dependencies: 1 (cudaErrorInvalidValue)",
        "still working after unsupported calls",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // Unserved calls answer "not supported" and name themselves once on stderr.
    assert!(text.contains("cudaMallocManaged: 801 (cudaErrorNotSupported)"), "{text}");
    assert!(text.contains("ac-cuda: cuMemAllocManaged is not supported"), "{text}");
    assert!(text.contains("cudaStreamBeginCapture: 801"), "{text}");
    // It left memory and a stream behind: its exit gave the accelerator back.
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    let backend = &c.backends[0].backend;
    assert!(
        c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await,
        "the backend still holds {} session(s)",
        backend.sessions()
    );
    standin::assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_driver_function_the_runtime_asks_for_resolves() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["1000"], &[("ARM_ACPN", "1"), ("AC_CUDA_TRACE", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    let found = text.lines().filter(|l| l.starts_with("ac-cuda: cuGetProcAddress(") && l.ends_with(": found")).count();
    let unresolved: Vec<&str> = text.lines().filter(|l| l.contains("unresolved")).collect();
    assert!(unresolved.is_empty(), "the runtime asked for what the shim lacks:\n{}", unresolved.join("\n"));
    assert!(found > 300, "the CUDA 13 runtime looks up some 430 functions; traced {found}:\n{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_accelerators_are_two_cuda_devices() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    // Two static accelerators (as `--acpn=2` gives a job), the program on the second.
    let out = run(&c, &shim, &exe, &["5000", "1"], &[("ARM_ACPN", "2")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("devices: 2; device 1:") && text.contains("5000 elements on device 1 exact"), "{text}");
    // One static, one asked for at start (`AC_GET`, decided as AC_Get).
    let out = run(&c, &shim, &exe, &["5000", "1"], &[("ARM_ACPN", "1"), ("AC_GET", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("devices: 2;"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_without_accelerators_is_told_there_is_no_device_and_why() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("vector_add", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    // No static accelerators and a dynamic request the pool cannot grant.
    let out = run(&c, &shim, &exe, &["10"], &[("ARM_ACPN", "0"), ("AC_GET", "5")]).await;
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAILED cudaGetDeviceCount(&count): 100"), "{text}");
    assert!(text.contains("ac-cuda: AC_GET=5: rejected"), "{text}");
    assert!(text.contains("holds no CUDA accelerator"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_program_drives_the_12_9_runtime_through_ctypes() {
    let _turn = standin::exclusive().await;
    let Some(runtime) = cuda::runtime_12() else {
        return ac_tests::skip("AC_CUDA_SHIM_REQUIRED", "no libcudart.so.12 (scripts/test fetches it)");
    };
    let dir = tempfile::tempdir().unwrap();
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let probe = cuda::source("tests/cuda/probe.py");
    let python = Path::new("python3");
    let out = run(&c, &shim, python, &[probe.to_str().unwrap(), runtime.to_str().unwrap()], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("runtime 12090: 1 device(s), compute 9.0, 132 SMs"), "{text}");
    assert!(text.contains("65536-byte round trip exact"), "{text}");
}

/// Module images go to a backend once per owner: the processes of one job's grant send a
/// framework's images once, and another job's processes learn nothing of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_processes_send_a_module_image_once() {
    let _turn = standin::exclusive().await;
    let c = cuda_cluster(1).await;
    let image = std::fs::read(cuda::source("tests/fixtures/shim_kernels.sm_90.fatbin")).unwrap();
    let credential = c.submit("j1", &["n1"], 1).await;
    let open = || ac_frontend::Session::init(c.session_options("j1", &credential, "n1"));
    let (first, second) = (open().await.expect("AC_Init"), open().await.expect("AC_Init"));
    let source = ac_proto::backend::ModuleSource::Cubin;
    let acc = &first.accelerators()[0].acc;
    let (module, sent) = acc.load_module_cached(source.clone(), &image).await.expect("loaded");
    assert!(sent, "the first load sends the image");
    module.function("_Z4iotaPjj").await.expect("the kernel is in it");
    // The job's second process, on the same accelerator: the backend has it already.
    let acc = &second.accelerators()[0].acc;
    let (module, sent) = acc.load_module_cached(source.clone(), &image).await.expect("loaded");
    assert!(!sent, "the job's second process sent the image again");
    module.function("_Z4vaddPKfS0_Pfi").await.expect("the kernel is in it");
    // Another job on the same backend: its own copy.
    let other = c.submit("j2", &["n1"], 1).await;
    let third = ac_frontend::Session::init(c.session_options("j2", &other, "n1")).await.expect("AC_Init");
    let (_, sent) = third.accelerators()[0].acc.load_module_cached(source, &image).await.expect("loaded");
    assert!(sent, "another job's process loaded an image it never sent");
    for session in [first, second, third] {
        session.finalize().await.expect("finalized");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kernel_taking_a_struct_by_value_runs_exactly() {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build("struct_param", dir.path()) else { return };
    let c = cuda_cluster(1).await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &["10000"], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success() && text.contains("struct_param: 10000 elements exact"), "{text}");
    standin::assert_no_violations();
}

/// Builds `tests/cuda/<name>.cu` linked against NVIDIA's math libraries' sonames (their symbols
/// by version: those of `soname` at least), runs it through the shim on one accelerator of the
/// stand-in, and checks that it said each of `lines`, exited 0, and left nothing held.
async fn run_math_program(name: &str, soname: &str, lines: &[&str]) {
    let _turn = standin::exclusive().await;
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = cuda::build_with_math_libraries(name, dir.path()) else { return };
    // Linked as against NVIDIA's: the library needed, its symbols by version.
    let needed = std::process::Command::new("readelf").arg("-dV").arg(&exe).output().expect("readelf runs");
    let needed = String::from_utf8_lossy(&needed.stdout);
    assert!(needed.contains(&format!("[{soname}]")) && needed.contains(&format!("Name: {soname}")), "{needed}");
    let c = patient_cuda_cluster().await;
    let shim = cuda::shim_dir(dir.path());
    let out = run(&c, &shim, &exe, &[], &[("ARM_ACPN", "1")]).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    for line in lines {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // It may exit with work queued and memory held: both go back with the process.
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after the program exited");
    let backend = &c.backends[0];
    let ended = backend.eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", backend.backend.sessions());
    standin::assert_no_violations();
}

/// Runs `tests/cuda/<script>` (a framework's operations on the device against its CPU results:
/// `framework_check.py`) with the frameworks' interpreter as a job's process through the shim,
/// `LD_PRELOAD`ing it if `preload`; it must report each of `checks` ok and call nothing the shim
/// does not serve, and Python's exit must give the accelerator back.
async fn run_framework_script(script: &str, preload: bool, checks: &[&str]) {
    let _turn = standin::exclusive().await;
    let Some(python) = cuda::frameworks_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let c = patient_cuda_cluster().await;
    let shim = cuda::shim_dir(dir.path());
    let script = cuda::source(&format!("tests/cuda/{script}"));
    let preloaded = shim.join("libcuda.so.1");
    let mut env = vec![("ARM_ACPN", "1")];
    if preload {
        env.push(("LD_PRELOAD", preloaded.to_str().unwrap()));
    }
    let out = run(&c, &shim, &python, &[script.to_str().unwrap()], &env).await;
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("devices 1: CUDA driver stand-in"), "{text}");
    for name in checks {
        assert!(text.contains(&format!("\n{name} ok ")), "no `{name} ok`:\n{text}");
    }
    assert!(text.contains("all ok"), "{text}");
    // Everything the framework called at its start and exit is served.
    assert!(!text.contains("not supported"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after Python exited:\n{text}");
    let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    standin::assert_no_violations();
}

/// PyTorch, unmodified (2.15 with its CUDA 13.2 runtime, pinned), through the shim: its matmuls
/// (cuBLAS, cuBLASLt's bias epilogue; f32, f64, binary16, bfloat16 and complex, conjugate
/// transposes included), its complex and half-precision dot products and complex
/// matrix-vector products, a side stream and its
/// FFTs (cuFFT) run on the backend's
/// builtin kernels and match PyTorch's CPU results (`tests/cuda/torch_math.py`). The shim is
/// `LD_PRELOAD`ed, as README says for a framework whose RPATH names NVIDIA's math libraries:
/// those are loaded too, and would fail here, since the stand-in runs none of their kernels.
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_runs_its_matmuls_and_ffts_through_the_shim() {
    let products = ["mm", "mm transposed", "mm both transposed", "mm of slices", "mm f64", "addmm", "addmm scaled"];
    let more = ["linear", "bmm", "bmm broadcast", "matmul broadcast", "mv", "dot", "mm on a side stream"];
    let ffts = ["fft", "fft f64", "rfft", "rfft2", "ifft2 unscaled", "fft2 batched"];
    let halves = ["mm", "mm transposed", "bmm", "linear", "addmm", "mm {} to f32", "dot"]
        .map(|op| ["f16", "bf16"].map(|t| if op.contains("{}") { op.replace("{}", t) } else { format!("{op} {t}") }));
    let complexes = ["mm", "mm conjugate-transposed", "bmm", "mv", "mv transposed", "dot", "vdot"]
        .map(|op| ["c64", "c128"].map(|t| format!("{op} {t}")));
    let names: Vec<&str> = halves.iter().chain(&complexes).flatten().map(String::as_str).collect();
    run_framework_script("torch_math.py", true, &[&products[..], &more[..], &ffts[..], &names[..]].concat()).await;
}

/// CuPy, unmodified (14.2 for CUDA 13, pinned), through the shim found by `LD_LIBRARY_PATH`
/// alone: its products, its cuBLAS level 1 and 2 calls (results in device memory; real and
/// complex) and FFTs run
/// on the backend's builtin kernels and match NumPy's (`tests/cuda/cupy_math.py`).
#[tokio::test(flavor = "multi_thread")]
async fn cupy_runs_its_products_and_ffts_through_the_shim() {
    let products =
        ["dot", "dot transposed", "dot f64", "matrix-vector", "matmul batched", "dot f16", "dot c64", "dot c128"];
    let vectors = ["cublas dot", "cublas nrm2", "cublas axpy", "cublas gemv", "cublas ger"];
    let complexes = ["matrix-vector", "cublas dotu", "cublas dotc", "cublas nrm2", "cublas axpy", "cublas scal"]
        .map(|op| ["c64", "c128"].map(|t| format!("{op} {t}")));
    let complexes: Vec<&str> = complexes.iter().flatten().map(String::as_str).collect();
    let ffts = ["fft", "fft f64", "rfft", "rfft2", "ifft unscaled"];
    run_framework_script("cupy_math.py", false, &[&products[..], &vectors[..], &complexes[..], &ffts[..]].concat())
        .await;
}

/// A program linked against `libcublas.so.13` runs its gemms on the remote accelerator: the
/// shim's `libcublas.so.13` (the same file as its `libcuda.so.1`) launches the backend's
/// builtin gemm kernels, which the stand-in runs as `kernels.cu` says. It exits with a gemm
/// queued and memory held.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_runs_its_gemms_exactly() {
    run_math_program(
        "cublas_gemm",
        "libcublas.so.13",
        &[
            "cublas version 130000",
            "sgemm NN padded exact",
            "sgemm TN beta 0 over NaN exact",
            "sgemm TT exact",
            "dgemm NT exact",
            "sgemm alpha 0 exact",
            "strided batched on a stream exact",
            "gemmex f32 exact",
            "sgemmex exact",
            "gemmex, sgemmex and hgemm on f16 exact",
            "thread 0 exact",
            "thread 1 exact",
            "thread 2 exact",
            "thread 3 exact",
            "sgemm after refusals exact",
            "set and get matrix and vector exact",
            "cublas_gemm: all exact",
            // Not served: said on stderr, answered with its status; the program goes on.
            "strided on the device: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "sasum: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "ac-cuda: cublasSasum_v2 is not supported on remote accelerators (CUBLAS_STATUS_NOT_SUPPORTED)",
            // What cuBLAS refuses, refused with its status and the reason on stderr.
            "gemmex i8: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "lda below m: 7 CUBLAS_STATUS_INVALID_VALUE",
            "host matrix: 7 CUBLAS_STATUS_INVALID_VALUE",
            "past the allocation: 7 CUBLAS_STATUS_INVALID_VALUE",
            "destroyed handle: 1 CUBLAS_STATUS_NOT_INITIALIZED",
            "is not device memory of this program",
            "run past the allocation",
        ],
    )
    .await;
}

/// cuBLASLt's matmul as PyTorch's linear layers call it (a heuristic, then a product with a
/// bias added to every column), batched, in double precision, with scalars in device memory
/// and layouts in the program's own memory; what the shim cannot run gets no algorithm.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublaslt_runs_its_matmuls_exactly() {
    run_math_program(
        "cublaslt_matmul",
        "libcublasLt.so.13",
        &[
            "linear with bias exact",
            "batched NN beta 2 exact",
            "NT bias batched exact",
            "double TT padded with bias exact",
            "device scalars exact",
            "stack layouts and a cuBLAS handle exact",
            "cublaslt_matmul: all exact",
            "relu epilogue: 0 algorithms",
            "no algorithm: epilogue 2 (only DEFAULT and BIAS are served)",
            "relu matmul: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "row-major B: 0 algorithms",
            "shapes that do not match: 7 CUBLAS_STATUS_INVALID_VALUE",
        ],
    )
    .await;
}

/// cuBLAS's level-1 and level-2 functions (dot, nrm2, axpy, copy, scal, gemv, ger), each done
/// by the shim as one gemm: strided vectors, padded matrices, scalars and results in device
/// memory on a stream, four threads taking dot products into host memory through one handle.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_runs_level_1_and_2_exactly() {
    run_math_program(
        "cublas_vectors",
        "libcublas.so.13",
        &[
            "sdot exact",
            "sdot strided exact",
            "ddot exact",
            "ddot strided exact",
            "dot of no elements exact",
            "snrm2 exact",
            "dnrm2 exact",
            "float axpy, copy, scal strided exact",
            "double axpy, copy, scal strided exact",
            "sgemv N exact",
            "sgemv T exact",
            "dgemv N exact",
            "dgemv T exact",
            "sger exact",
            "dger exact",
            "dot into device memory exact",
            "device pointer mode exact",
            "threads' dot products exact",
            "cublas_vectors: all exact",
            "gemv lda below m: 7 CUBLAS_STATUS_INVALID_VALUE",
            "ger incx 0: 7 CUBLAS_STATUS_INVALID_VALUE",
            "dot backwards: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "increment -1: only positive ones are served",
            "dot past the allocation: 7 CUBLAS_STATUS_INVALID_VALUE",
        ],
    )
    .await;
}

/// cuBLAS's complex level-1 and level-2 functions (dotu, dotc, nrm2, axpy, copy, scal by a
/// complex and by a real, gemv with all three operations, geru, gerc) in single and double
/// precision, and `cublasDotEx`/`cublasDotcEx` on binary16, bfloat16 and complex vectors (into
/// host and device memory), each done by the shim as one gemm; and the conjugated vectors it
/// serves only contiguous.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_runs_complex_and_typed_vectors_exactly() {
    run_math_program(
        "cublas_complex",
        "libcublas.so.13",
        &[
            "cdotu exact",
            "cdotu strided exact",
            "cdotc strided exact",
            "znrm2 strided exact",
            "cnrm2 strided exact",
            "caxpy strided exact",
            "zcopy strided exact",
            "cscal strided exact",
            "zscal by a real strided exact",
            "cgemv N exact",
            "zgemv T exact",
            "cgemv C exact",
            "zgemv C exact",
            "cgeru exact",
            "cgerc exact",
            "zgerc exact",
            "dotex f16 rounded to nearest even exact",
            "dotex bf16 into device memory exact",
            "dotex c32 exact",
            "dotcex c32 exact",
            "cublas_complex: all exact",
            "dotex of f16 into f32: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "cgemv C into y with increment 2: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "gemv's y for the conjugate transpose with increment 2: a conjugated vector is served with increment 1 only",
            "cgerc y with increment 2: 15 CUBLAS_STATUS_NOT_SUPPORTED",
        ],
    )
    .await;
}

/// cuFFT's plans and executions as programs and PyTorch make them: batched 1-D complex
/// transforms, 2-D real-to-complex and back, a 3-D double transform, an advanced layout, the
/// `cufftXt` calls, in place; each within single precision's rounding of a direct DFT computed
/// by the program; and what it refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cufft_transforms_within_rounding() {
    run_math_program(
        "cufft_transforms",
        "libcufft.so.12",
        &[
            "c2c 1d batched within",
            "c2c 1d inverse within",
            "r2c 2d within",
            "c2r 2d round trip within",
            "z2z 3d within",
            "many advanced layout within",
            "xt r2c within",
            "c2c in place within",
            "r2c in place within",
            "cufft_transforms: all within",
            "half precision: 16",
            "data types [6, 6, 6] (input, output, execution): only f32 and f64 are served",
            "a destroyed plan: 1",
            "an input past its allocation: 4",
        ],
    )
    .await;
}

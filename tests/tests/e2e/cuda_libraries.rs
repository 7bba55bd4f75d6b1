//! Unmodified programs that call NVIDIA's math libraries (cuBLAS, cuBLASLt, cuFFT), and
//! PyTorch and CuPy, through the CUDA shim (issue 48): the shim's own `libcublas`,
//! `libcublasLt` and `libcufft` launch the backend's builtin kernels, which the driver stand-in
//! runs (`cuda-standin`; not a GPU). The driver-level programs are `cuda_shim`'s.

use crate::cuda_shim::{cuda_cluster_timed, run, said};
use crate::standin;

use ac_tests::{cuda, TestCluster};

/// A manager and one backend as [`cuda_cluster`], with the deployment's default lease,
/// backend time-out and connection idle time-out instead of the tests' second or so: for the
/// frameworks and the math programs, whose stand-in kernels (direct transforms and products on
/// the CPU) keep this process's cores busy for seconds on a loaded machine, and which are not
/// about leases (`cuda_shim`'s other tests and `leases.rs` are). (They passed with the tests'
/// time-outs too once the stand-in computed kernels without its lock: see `cuda-shim.md`.)
async fn patient_cuda_cluster() -> TestCluster {
    patient_cuda_cluster_with(|_| {}).await
}

/// [`patient_cuda_cluster`] whose backend `adjust` configured further.
async fn patient_cuda_cluster_with(adjust: impl Fn(&mut ac_backend::BackendConfig)) -> TestCluster {
    cuda_cluster_timed(
        1,
        |arm| {
            let defaults = arm_server::ArmConfig::default();
            (arm.lease_ms, arm.backend_timeout_ms) = (defaults.lease_ms, defaults.backend_timeout_ms);
        },
        |backend| {
            backend.transport = ac_proto::transport::Tuning::default();
            adjust(backend);
        },
    )
    .await
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
async fn run_framework_script(script: &str, preload: bool, checks: &[&str]) -> String {
    run_framework_script_with(script, preload, &[], checks).await
}

/// [`run_framework_script`] with more of the script's environment; answers what it printed.
async fn run_framework_script_with(script: &str, preload: bool, more_env: &[(&str, &str)], checks: &[&str]) -> String {
    run_framework_script_on(Sessions::InTheBackend, script, preload, more_env, checks).await
}

/// Where the backend serves the framework's session.
enum Sessions {
    /// In its own process, a context of the stand-in's (the tests' default: fewer processes).
    InTheBackend,
    /// In a session worker of its own, as a GPU host's backend does by default.
    InWorkers,
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
        Sessions::InWorkers => {
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
    let mut env = vec![("ARM_ACPN", "1")];
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
    // Everything the framework called at its start and exit is served.
    assert!(!text.contains("not supported"), "{text}");
    assert_eq!(c.arm.held_accelerators(), 0, "nothing held after Python exited:\n{text}");
    let ended = c.backends[0].eventually(std::time::Duration::from_secs(10), |b| b.sessions() == 0).await;
    assert!(ended, "the backend still holds {} session(s)", c.backends[0].backend.sessions());
    standin::assert_no_violations();
    if let Sessions::InWorkers = sessions {
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
#[tokio::test(flavor = "multi_thread")]
async fn pytorch_runs_its_matmuls_and_ffts_through_the_shim() {
    let products = ["mm", "mm transposed", "mm both transposed", "mm of slices", "mm f64", "addmm", "addmm scaled"];
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
    let ffts = ["fft", "fft f64", "rfft", "rfft2", "ifft2 unscaled", "fft2 batched"];
    let halves = ["mm", "mm transposed", "bmm", "linear", "addmm", "mm {} to f32", "dot"]
        .map(|op| ["f16", "bf16"].map(|t| if op.contains("{}") { op.replace("{}", t) } else { format!("{op} {t}") }));
    let complexes = ["mm", "mm conjugate-transposed", "bmm", "mv", "mv transposed", "dot", "vdot"]
        .map(|op| ["c64", "c128"].map(|t| format!("{op} {t}")));
    let names: Vec<&str> = halves.iter().chain(&complexes).flatten().map(String::as_str).collect();
    let all = [&products[..], &more[..], &ffts[..], &names[..]].concat();
    let text = run_framework_script("torch_math.py", true, &all).await;
    assert!(text.is_empty() || text.contains("\nallocator native\n"), "{text}");
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
            "sgemmBatched side by side exact",
            "dgemmBatched apart exact",
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
            "srotg: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "ac-cuda: cublasSrotg_v2 is not supported on remote accelerators (CUBLAS_STATUS_NOT_SUPPORTED)",
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
/// and layouts in the program's own memory; an algorithm picked by hand through the lower-level
/// API (ids, init, capabilities, configuration, check); what the shim cannot run gets no
/// algorithm, and a configuration it cannot run is refused.
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
            "an algorithm picked by hand exact (1 ids)",
            "sm count target 4",
            "split-K 4: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "split-K 4 matmul: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "setting the id: 7 CUBLAS_STATUS_INVALID_VALUE",
            "an f64 algorithm for f32 matrices: 7 CUBLAS_STATUS_INVALID_VALUE",
            "algorithm 99: 7 CUBLAS_STATUS_INVALID_VALUE",
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
            "ssbmv upper exact",
            "ssbmv lower exact",
            "dsbmv upper exact",
            "dsbmv lower exact",
            "sgemv T exact",
            "dgemv N exact",
            "dgemv T exact",
            "sger exact",
            "dger exact",
            "dot into device memory exact",
            "device pointer mode exact",
            "threads' dot products exact",
            "sasum strided exact",
            "dasum strided exact",
            "scasum strided exact",
            "dzasum strided exact",
            "isamax first of equals exact",
            "idamin exact",
            "icamax first of equals exact",
            "izamin exact",
            "isamax of no elements exact",
            "dzasum into device memory exact",
            "izamax into device memory exact",
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

/// cuBLAS's triangular solves through the shim (`tests/cuda/cublas_solve.cu`): every precision,
/// side, triangle and operation tried there solves exactly, alpha 0 clears `B`, the batched form
/// reads its pointer arrays from device memory, and a side cuBLAS does not know is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_solves_triangular_systems_exactly() {
    run_math_program(
        "cublas_solve",
        "libcublas.so.13",
        &[
            "strsm left lower N exact",
            "strsm right upper T unit exact",
            "dtrsm left upper T exact",
            "dtrsm right lower N unit exact",
            "ctrsm left lower C exact",
            "ctrsm right upper C unit exact",
            "ztrsm left upper N exact",
            "ztrsm right lower C exact",
            "dtrsm alpha 0 exact",
            "dtrsmBatched system 0 exact",
            "dtrsmBatched system 2 exact",
            "strsm side 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_solve: all exact",
        ],
    )
    .await;
}

/// cuBLAS's batched LU through the shim (`tests/cuda/cublas_lu.cu`): in every precision,
/// `getrfBatched`'s factors and pivots, `getrsBatched`'s solutions for N, T and C and
/// `getriBatched`'s inverses are exact, for matrices side by side (one strided launch) and apart
/// (a launch each); a singular matrix and a zero pivot without pivoting are reported in `info`;
/// an operation cuBLAS does not know is refused, naming the parameter.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_factors_solves_and_inverts_exactly() {
    let mut lines = Vec::new();
    for t in ["s", "d", "c", "z"] {
        for check in [
            "getrfBatched factors",
            "getrfBatched pivots",
            "getrfBatched info",
            "getrsBatched N",
            "getrsBatched T",
            "getrsBatched C",
            "getriBatched A C = I",
            "getriBatched info",
        ] {
            lines.push(format!("{t}{check} exact"));
        }
    }
    lines.extend(
        [
            "dgetrfBatched apart exact",
            "singular info 3",
            "no pivoting info 1",
            "getrs operation 3: 7 CUBLAS_STATUS_INVALID_VALUE, info -1",
            "cublas_lu: all exact",
        ]
        .map(String::from),
    );
    run_math_program("cublas_lu", "libcublas.so.13", &lines.iter().map(String::as_str).collect::<Vec<_>>()).await;
}

/// cuBLAS's batched QR through the shim (`tests/cuda/cublas_qr.cu`): in every precision,
/// `geqrfBatched`'s reflectors and taus give `Q R = A` with `Q` unitary and `R`'s diagonal real,
/// for tall matrices side by side (one strided launch) and wide ones apart (a launch each);
/// `gelsBatched`'s solutions satisfy the normal equations with the residual's norm left below
/// them, with and without `devInfoArray`; a rank-deficient `A` is reported; what cuBLAS does not
/// support or refuses is said so, naming the parameter.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_factors_by_householder_and_solves_least_squares() {
    let mut lines = Vec::new();
    for t in ["s", "d", "c", "z"] {
        for b in 0..3 {
            lines.push(format!("{t}geqrfBatched tall {b} Q R = A within tolerance"));
            lines.push(format!("{t}geqrfBatched tall {b} Q^H Q = I within tolerance"));
        }
        for b in 0..2 {
            lines.push(format!("{t}geqrfBatched wide {b} Q R = A within tolerance"));
        }
        lines.push(format!("{t}gelsBatched info 0 0"));
        lines.push(format!("{t}gelsBatched normal equations within tolerance"));
        lines.push(format!("{t}gelsBatched residual within tolerance"));
    }
    lines.extend(
        [
            "dgelsBatched no devInfo normal equations within tolerance",
            "dgelsBatched rank-deficient info 2",
            "gels trans T: 15 CUBLAS_STATUS_NOT_SUPPORTED, info -1",
            "gels m < n: 15 CUBLAS_STATUS_NOT_SUPPORTED, info -3",
            "geqrf lda below m: 7 CUBLAS_STATUS_INVALID_VALUE, info -4",
            "cublas_qr: all within tolerance",
        ]
        .map(String::from),
    );
    run_math_program("cublas_qr", "libcublas.so.13", &lines.iter().map(String::as_str).collect::<Vec<_>>()).await;
}

/// cuBLAS's BLAS-like extensions through the shim (`tests/cuda/cublas_extensions.cu`): `geam`
/// (sums and transposes with N, T and C, in place as `C = A` and `C = B`, no `B` when beta is
/// 0, device scalars), `dgmm` (a diagonal on either side, strided, in place) and `trttp`/`tpttr`
/// (a triangle packed and back, the other triangle untouched) exact in every precision, padding
/// kept; what the shim does not serve (x read backwards, `C = A = B`) and
/// what cuBLAS refuses (in place, transposed) are said so.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_adds_transposes_and_scales_matrices_exactly() {
    run_math_program(
        "cublas_extensions",
        "libcublas.so.13",
        &[
            "sgeam NN exact",
            "dgeam TN exact",
            "cgeam CT exact",
            "zgeam NC exact",
            "dgeam device scalars exact",
            "sgeam transpose exact",
            "cgeam in place C = A exact",
            "zgeam in place C = B exact",
            "sdgmm left incx 2 exact",
            "ddgmm right exact",
            "cdgmm left exact",
            "zdgmm right incx 3 exact",
            "sdgmm right in place exact",
            "strttp lower exact",
            "stpttr lower exact",
            "dtrttp upper exact",
            "dtpttr upper exact",
            "ctrttp upper exact",
            "ctpttr upper exact",
            "ztrttp lower exact",
            "ztpttr lower exact",
            "dgmm incx -1: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "geam C = A = B: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "geam in place transposed: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_extensions: all exact",
        ],
    )
    .await;
}

/// cuBLAS's symmetric rank-k updates through the shim (`tests/cuda/cublas_rank_k.cu`): `syrk`,
/// `syrkx` and `syr2k` on either triangle, N and T, every precision, host and device scalars,
/// each exact on its triangle with the other triangle and the padding untouched (the builtin
/// triangle gemm); a complex `syrk` with the conjugate transpose is refused. Their Hermitian
/// forms `herk`, `herkx` and `her2k` (N and C, each complex precision): exact, C's diagonal
/// made real; `herk` with the plain transpose is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_updates_one_triangle_exactly() {
    run_math_program(
        "cublas_rank_k",
        "libcublas.so.13",
        &[
            "ssyrk lower N exact",
            "dsyrk upper T exact",
            "csyrk lower T exact",
            "zsyrk upper N exact",
            "ssyrkx upper N exact",
            "zsyrkx lower T exact",
            "dsyr2k lower N exact",
            "csyr2k upper T exact",
            "dsyrk lower N device scalars exact",
            "cherk lower N exact",
            "zherk upper C exact",
            "cherkx upper N exact",
            "zherkx lower C exact",
            "zher2k lower C exact",
            "cher2k upper N exact",
            "csyrk operation C: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cherk operation T: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_rank_k: all exact",
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

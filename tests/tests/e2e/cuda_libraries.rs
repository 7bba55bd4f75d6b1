//! Unmodified programs that call NVIDIA's math libraries (cuBLAS, cuBLASLt, cuFFT) through the
//! CUDA shim (issue 48): the shim's own `libcublas`, `libcublasLt` and `libcufft` launch the
//! backend's builtin kernels, which the driver stand-in runs (`cuda-standin`; not a GPU). The
//! driver-level programs are `cuda_shim`'s, the frameworks `cuda_frameworks`'s.

use crate::cuda_shim::{cuda_cluster_timed, run, said};
use crate::standin;

use ac_tests::{cuda, TestCluster};

/// A manager and one backend as [`cuda_cluster`], with the deployment's default lease,
/// backend time-out and connection idle time-out instead of the tests' second or so: for the
/// frameworks and the math programs, whose stand-in kernels (direct transforms and products on
/// the CPU) keep this process's cores busy for seconds on a loaded machine, and which are not
/// about leases (`cuda_shim`'s other tests and `leases.rs` are). (They passed with the tests'
/// time-outs too once the stand-in computed kernels without its lock: see `cuda-shim.md`.)
pub(crate) async fn patient_cuda_cluster() -> TestCluster {
    patient_cuda_cluster_with(|_| {}).await
}

/// [`patient_cuda_cluster`] whose backend `adjust` configured further.
pub(crate) async fn patient_cuda_cluster_with(adjust: impl Fn(&mut ac_backend::BackendConfig)) -> TestCluster {
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
pub(crate) async fn run_math_program(name: &str, soname: &str, lines: &[&str]) {
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
            "uint8 gemm with biases: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "ac-cuda: cublasUint8gemmBias is not supported on remote accelerators (CUBLAS_STATUS_NOT_SUPPORTED)",
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
/// algorithm, and a configuration it cannot run is refused; matrix transforms (batched, a
/// transposed term, a term left out, scalars in device memory) and an emulation descriptor.
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
            "relu with bias, batched and padded exact",
            "relu TN beta 1 exact",
            "gelu with bias within",
            "stack layouts and a cuBLAS handle exact",
            "transform 2 A - B^T, two batches exact",
            "transform 3 B, A null and transposed, device scalars exact",
            "emulation descriptor kept",
            "transform of f16 A: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "transform with B of the wrong shape: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublaslt_matmul: all exact",
            "an f16 gelu input: 0 algorithms",
            "no algorithm: an auxiliary matrix of type 2 for D of type 0",
            "an f16 gelu input's matmul: 15 CUBLAS_STATUS_NOT_SUPPORTED",
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

/// cuBLASLt's training epilogues as a fused MLP trains: ReLU keeping its mask and GELU its
/// input, the backward passes reading them back with and without the bias gradient (ReLU's in
/// binary16 too), the bias gradients of an input (each transpose), activations on `f64`
/// matrices; batched, against the host's results. Then what cuBLASLt refuses (an auxiliary matrix missing or laid out as its
/// documentation forbids) and what the shim does not run (an auxiliary matrix of another type).
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublaslt_trains_with_its_epilogues() {
    run_math_program(
        "cublaslt_epilogues",
        "libcublasLt.so.13",
        &[
            "relu aux bias forward exact",
            "drelu bgrad backward and bias gradient exact",
            "drelu alone exact",
            "drelu with batch 0's mask for both exact",
            "relu aux bias f16 exact",
            "drelu bgrad f16 and its bias gradient exact",
            "gelu aux bias forward f32 within",
            "gelu aux bias's input f32 exact",
            "dgelu bgrad f32 within",
            "dgelu bgrad's bias gradient f32 within",
            "dgelu alone f32 within",
            "gelu aux bias forward f64 within",
            "gelu aux bias's input f64 exact",
            "dgelu bgrad f64 within",
            "dgelu bgrad's bias gradient f64 within",
            "dgelu alone f64 within",
            "bgrada f32 NN exact",
            "bgradb f32 NN exact",
            "bgrada f32 TT exact",
            "bgradb f32 TT exact",
            "bgrada f64 TN exact",
            "bgradb f64 TN exact",
            "relu bias f64 exact",
            "gelu f64 within",
            "relu aux without its matrix: 7 CUBLAS_STATUS_INVALID_VALUE",
            "a mask of 64-bit columns: 7 CUBLAS_STATUS_INVALID_VALUE",
            "an input of 8 rows for 20: 7 CUBLAS_STATUS_INVALID_VALUE",
            "an f16 input for f32 D: no algorithm",
            "no algorithm: an auxiliary matrix of type 2 for D of type 0",
            "cublaslt_epilogues: all exact",
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
/// kept; what the shim does not serve (`C = A = B`) and what cuBLAS refuses (in place,
/// transposed) are said so.
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

/// cuBLAS's products with a matrix stored as one triangle through the shim
/// (`tests/cuda/cublas_structured.cu`): `symm` in every precision, `hemm` in both complex ones,
/// `trmm` in every precision with N, T and C, unit diagonals, out of place and in place (B
/// given as C), both sides and triangles, host and device scalars; each exact, though the
/// triangle not stored, a unit diagonal and trmm's C hold NaN (the builtin `blas_<t>gemm_tri`
/// reads only the stored triangle). Wrong codes and a short `lda` are refused as cuBLAS refuses
/// them; `alpha` 0 reads no A.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_multiplies_by_a_triangle_exactly() {
    run_math_program(
        "cublas_structured",
        "libcublas.so.13",
        &[
            "ssymm left lower exact",
            "dsymm right upper exact",
            "csymm left upper exact",
            "zsymm right lower exact",
            "dsymm left upper device scalars exact",
            "chemm left lower exact",
            "zhemm right upper exact",
            "strmm left lower N exact",
            "dtrmm right upper T unit exact",
            "ctrmm left upper C exact",
            "ztrmm right lower C unit exact",
            "strmm left upper T in place exact",
            "ztrmm right lower N in place exact",
            "strmm left lower N in place exact",
            "ssymm side 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "strmm diagonal 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "ssymm lda 1: 7 CUBLAS_STATUS_INVALID_VALUE",
            "ssymm alpha 0 exact",
            "cublas_structured: all exact",
        ],
    )
    .await;
}

/// cuFFT's plans and executions as programs and PyTorch make them: batched 1-D complex
/// transforms, 2-D real-to-complex and back, a 3-D double transform, an advanced layout, the
/// `cufftXt` calls, in place, binary16 and bfloat16 transforms; each within its precision's
/// rounding of a direct DFT computed by the program; work sizes asked before a plan is made (0) and a plan's properties; and
/// what it refuses.
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
            "c2c f16 within",
            "r2c f16 within",
            "c2r f16 round trip within",
            "r2c bf16 2d within",
            "work sizes before a plan: all 0",
            "estimate of a 0-point transform: 4",
            "plan properties set, read and reset; a work area policy taken",
            "cufft_transforms: all within",
            "mixed precisions: 16",
            "work area policy 5: 4",
            "data types [6, 4, 4] (input, output, execution): one precision (f32, f64, f16 or bf16) throughout, \
             executed in its complex type",
            "a destroyed plan: 1",
            "an input past its allocation: 4",
        ],
    )
    .await;
}

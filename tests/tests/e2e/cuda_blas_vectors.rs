//! cuBLAS's level 1 and 2 through the CUDA shim (issue 48): unmodified programs linked against
//! `libcublas.so.13` whose vector routines (dot products, rotations, products and updates with
//! a general, triangular or packed matrix) run as the backend's builtin kernels on the driver
//! stand-in (`cuda-standin`; not a GPU), each checked exactly. The other math programs are
//! `cuda_libraries`'s.

use crate::cuda_libraries::run_math_program;

/// cuBLAS's level-1 and level-2 functions (dot, nrm2, axpy, copy, scal, gemv, ger; swap two
/// gemms through a copy), each done by the shim as one gemm; the `Async` copies on a stream:
/// strided vectors, padded matrices, scalars and results in device memory on a stream, four
/// threads taking dot products into host memory through one handle.
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
            "sswap incx 2 incy 3 exact",
            "dswap exact",
            "async copies on a stream exact",
            "async copy while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "its capture: invalidated",
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
            "dot incx 0: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "increment 0: one element taken n times is not served",
            "dot past the allocation: 7 CUBLAS_STATUS_INVALID_VALUE",
        ],
    )
    .await;
}

/// cuBLAS's complex level-1 and level-2 functions (dotu, dotc, nrm2, axpy, copy, scal by a
/// complex and by a real, gemv with all three operations, geru, gerc) in single and double
/// precision, and `cublasDotEx`/`cublasDotcEx` on binary16, bfloat16 and complex vectors (into
/// host and device memory), each done by the shim as one gemm; a conjugated `y` (gemv C, gerc)
/// strided too, as a strided batch of products.
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
            "cgemv N incy 3 exact",
            "zgemv T incy 1 exact",
            "cgemv C incy 1 exact",
            "cgemv C incy 3 exact",
            "zgemv C incy 3 exact",
            "cgeru incy 2 exact",
            "cgerc incy 1 exact",
            "cgerc incy 2 exact",
            "zgerc incy 2 exact",
            "dotex f16 rounded to nearest even exact",
            "dotex bf16 into device memory exact",
            "dotex c32 exact",
            "dotcex c32 exact",
            "cublas_complex: all exact",
            "dotex of f16 into f32: 15 CUBLAS_STATUS_NOT_SUPPORTED",
        ],
    )
    .await;
}

/// cuBLAS's level-2 routines on a matrix stored as one triangle through the shim
/// (`tests/cuda/cublas_triangle_vectors.cu`): `symv`, `hemv`, `trmv` and `trsv` (N, T, C,
/// unit), `syr`,
/// `her`, `syr2`, `her2`, on either triangle, strided vectors; each exact though the triangle
/// not read holds NaN, and the updates leave the other triangle, the padding and the vectors'
/// gaps as they were; a conjugated strided vector (trmv and trsv C, her, her2) through a
/// contiguous copy, which a capturing stream refuses; wrong arguments refused as cuBLAS refuses
/// them.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_uses_triangles_in_level_2_exactly() {
    run_math_program(
        "cublas_triangle_vectors",
        "libcublas.so.13",
        &[
            "ssymv lower incx 2 incy 3 exact",
            "dsymv upper incx 1 incy 1 exact",
            "zsymv upper incx 1 incy 2 exact",
            "chemv lower incx 1 incy 1 exact",
            "zhemv upper incx 2 incy 1 exact",
            "strmv lower N unit incx 2 exact",
            "dtrmv upper T incx 1 exact",
            "ctrmv lower C incx 1 exact",
            "ztrmv upper N unit incx 3 exact",
            "ctrmv upper T incx 2 exact",
            "ctrmv lower C incx 3 exact",
            "ztrmv upper C unit incx 2 exact",
            "strmv managed x exact",
            "strsv lower N unit incx 2 exact",
            "dtrsv upper T incx 1 exact",
            "ctrsv lower C incx 1 exact",
            "ztrsv upper N incx 3 exact",
            "strsv upper T incx 2 exact",
            "ctrsv upper C incx 2 exact",
            "ztrsv lower C unit incx 3 exact",
            "ssyr lower incx 2 exact",
            "zsyr upper incx 1 exact",
            "cher lower incx 1 exact",
            "zher upper incx 1 exact",
            "dsyr2 upper incx 2 incy 1 exact",
            "csyr2 lower incx 1 incy 2 exact",
            "cher2 upper incx 1 incy 1 exact",
            "zher2 lower incx 1 incy 1 exact",
            "cher upper incx 2 exact",
            "zher2 lower incx 3 incy 2 exact",
            "cher2 upper incx 1 incy 3 exact",
            "ctrsv C incx 2 while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "ctrsv C incx 2's capture: invalidated",
            "ssymv uplo 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "strmv incx 0: 7 CUBLAS_STATUS_INVALID_VALUE",
            "strsv trans 5 incx -1: 7 CUBLAS_STATUS_INVALID_VALUE",
            "ssyr lda 2 for n 3: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_triangle_vectors: all exact",
        ],
    )
    .await;
}

/// cuBLAS's plane rotations through the shim (`tests/cuda/cublas_rotations.cu`): `rot` in its
/// six forms and `rotm` for each flag on strided vectors, exact, the gaps untouched, scalars on
/// the host or in device memory (the elements a flag implies hold NaN); `rotg` and `rotmg`
/// within rounding of values worked out by hand, their edges (a or b 0, y1 0, a negative d1,
/// rescaling) and device pointers among them. Another flag is read by its sign, as reference
/// BLAS reads it; no elements read no scalars; an increment of 0, and `rotg` on device scalars
/// while the stream captures, are refused as not served (`cublas_backwards` takes reversed
/// vectors).
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_rotates_vectors_as_blas_does() {
    run_math_program(
        "cublas_rotations",
        "libcublas.so.13",
        &[
            "srot incx 2 incy 3 exact",
            "drot device scalars exact",
            "crot incy 2 exact",
            "csrot exact",
            "zrot incx 3 device scalars exact",
            "zdrot exact",
            "srotm flag -1 incx 2 exact",
            "drotm flag 0 exact",
            "srotm flag 1 incy 3 exact",
            "drotm flag -2 exact",
            "drotm flag -1 device param exact",
            "srotg 3 4 within rounding",
            "drotg -4 3 device within rounding",
            "srotg 0 -2 within rounding",
            "drotg 5 0 within rounding",
            "crotg 3+4i 5i within rounding",
            "zrotg 3+4i 5i device within rounding",
            "zrotg 0 1-2i within rounding",
            "srotmg flag 0 within rounding",
            "drotmg flag 1 device within rounding",
            "drotmg y1 0 within rounding",
            "drotmg d1 negative within rounding",
            "srotmg rescaled within rounding",
            "srotm flag 2 as 1 exact",
            "srot of no elements: 0 CUBLAS_STATUS_SUCCESS",
            "srot incx 0: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "drotg device while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "its capture: invalidated",
            "cublas_rotations: all within",
        ],
    )
    .await;
}

/// cuBLAS's level-2 routines on a matrix in packed storage through the shim
/// (`tests/cuda/cublas_packed_vectors.cu`): `spmv`, `hpmv`, `tpmv` and `tpsv` (N, T, C, unit),
/// `spr`, `hpr`, `spr2`, `hpr2`, on either triangle, strided vectors; each exact though a unit
/// diagonal holds NaN and a Hermitian one imaginary parts, which the updates leave 0, and the
/// vectors' gaps as they were, a conjugated strided vector too (tpmv and tpsv C, hpr, hpr2).
/// A capturing stream is refused as not served, wrong arguments as cuBLAS refuses them.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_uses_packed_matrices_exactly() {
    run_math_program(
        "cublas_packed_vectors",
        "libcublas.so.13",
        &[
            "sspmv lower incx 2 incy 3 exact",
            "dspmv upper incx 1 incy 1 exact",
            "chpmv lower incx 1 incy 2 exact",
            "zhpmv upper incx 2 incy 1 exact",
            "dspmv lower incx 2 incy 1 device scalars exact",
            "stpmv lower N unit incx 2 exact",
            "dtpmv upper T incx 1 exact",
            "ctpmv lower C incx 1 exact",
            "ztpmv upper N unit incx 3 exact",
            "stpsv lower N unit incx 2 exact",
            "dtpsv upper T incx 1 exact",
            "ctpsv lower C incx 1 exact",
            "ztpsv upper N incx 3 exact",
            "ctpmv upper C unit incx 2 exact",
            "ztpsv lower C incx 3 exact",
            "sspr lower incx 2 exact",
            "dspr upper incx 1 exact",
            "chpr lower incx 1 exact",
            "zhpr upper incx 1 exact",
            "sspr2 upper incx 2 incy 1 exact",
            "dspr2 lower incx 1 incy 2 exact",
            "chpr2 upper incx 1 incy 1 exact",
            "zhpr2 lower incx 1 incy 1 exact",
            "chpr lower incx 3 exact",
            "zhpr2 upper incx 2 incy 3 exact",
            "sspr upper incx 1 alpha 0 exact",
            "chpr upper incx 1 alpha 0 exact",
            "sspmv of no elements: 0 CUBLAS_STATUS_SUCCESS",
            "sspr alpha 0 without AP: 0 CUBLAS_STATUS_SUCCESS",
            "sspmv while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "sspmv's capture: invalidated",
            "stpsv while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "stpsv's capture: invalidated",
            "sspmv uplo 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "stpsv trans 5: 7 CUBLAS_STATUS_INVALID_VALUE",
            "sspr incx 0: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_packed_vectors: all exact",
        ],
    )
    .await;
}

/// cuBLAS's level-2 routines on band matrices through the shim (`tests/cuda/cublas_band.cu`):
/// `gbmv` (N, T, C; more diagonals than rows), `hbmv` (either triangle, `beta` 0 reading no
/// `y`), `tbmv` and `tbsv` (N, T, C, unit; solves of one block and of several, a band wider
/// than the matrix, a diagonal one), strided vectors, scalars in device memory; each exact
/// though a band's spare row, its corners past the matrix and a unit diagonal hold NaN, `y`
/// too where `beta` is 0, and a Hermitian diagonal imaginary parts; a conjugated strided solve
/// through a contiguous copy. A capturing stream is refused as not served, wrong arguments as
/// cuBLAS refuses them (`cublas_backwards` takes negative increments).
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_uses_band_matrices_exactly() {
    run_math_program(
        "cublas_band",
        "libcublas.so.13",
        &[
            "sgbmv N 9x7 kl 2 ku 3 incx 2 incy 3 exact",
            "dgbmv T 6x10 kl 1 ku 4 incx 1 incy 2 exact",
            "cgbmv C 8x5 kl 3 ku 1 incx 2 incy 1 exact",
            "zgbmv N 5x5 kl 0 ku 0 incx 1 incy 1 exact",
            "sgbmv N 3x8 kl 4 ku 2 incx 1 incy 1 exact",
            "zgbmv T 7x4 kl 2 ku 2 incx 3 incy 2 device scalars exact",
            "dgbmv C 6x9 kl 3 ku 2 incx 2 incy 2 exact",
            "chbmv upper n 9 k 2 incx 2 incy 1 exact",
            "zhbmv lower n 7 k 3 incx 1 incy 3 exact",
            "chbmv lower n 4 k 6 incx 1 incy 1 exact",
            "zhbmv upper n 6 k 1 incx 2 incy 2 device scalars exact",
            "stbmv upper N n 9 k 2 incx 2 exact",
            "dtbmv lower T unit n 10 k 3 incx 1 exact",
            "ctbmv upper C n 8 k 1 incx 2 exact",
            "ztbmv lower N n 6 k 4 incx 1 exact",
            "stbsv upper N n 70 k 3 incx 2 exact",
            "dtbsv lower T n 70 k 40 incx 1 exact",
            "ctbsv upper C n 70 k 3 incx 1 exact",
            "ztbsv lower N unit n 40 k 0 incx 3 exact",
            "stbsv lower N n 70 k 100 incx 1 exact",
            "ztbsv upper T n 10 k 12 incx 1 exact",
            "dtbsv upper N n 90 k 40 incx 2 exact",
            "dtbsv upper T unit n 33 k 5 incx 1 exact",
            "ctbsv lower C n 9 k 2 incx 1 exact",
            "ztbsv upper N n 5 k 2 incx 2 exact",
            "ctbsv lower C n 70 k 3 incx 2 exact",
            "ztbsv upper C unit n 9 k 2 incx 3 exact",
            "stbsv while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "stbsv's capture: invalidated",
            "stbmv while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "stbmv's capture: invalidated",
            "sgbmv lda 2 for 3 diagonals: 7 CUBLAS_STATUS_INVALID_VALUE",
            "chbmv uplo 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "stbmv diag 2: 7 CUBLAS_STATUS_INVALID_VALUE",
            "stbsv incx 0: 7 CUBLAS_STATUS_INVALID_VALUE",
            "stbsv of no elements: 0 CUBLAS_STATUS_SUCCESS",
            "cublas_band: all exact",
        ],
    )
    .await;
}

/// cuBLAS's ILP64 API through the shim (`tests/cuda/cublas_ilp64.cu`): `_64` forms of the
/// matrix copies, gemm (plain, strided batched, `Ex`), gemv, gbmv, dotc, axpy, nrm2, trsm, and
/// the index reductions into a whole `int64_t` on the host and in device memory; each exact.
/// A size beyond an `int` is refused as not served, a negative one as cuBLAS refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_uses_its_64_bit_api_exactly() {
    run_math_program(
        "cublas_ilp64",
        "libcublas.so.13",
        &[
            "SetMatrix_64 and GetMatrix_64 exact",
            "Sgemm_v2_64 exact",
            "SgemmStridedBatched_64 exact",
            "GemmEx_64 exact",
            "Dgemv_v2_64 T exact",
            "Dgbmv_v2_64 N exact",
            "Zdotc_v2_64 exact",
            "Saxpy_v2_64 and Snrm2_v2_64 exact",
            "Ctrsm_v2_64 exact",
            "Isamax_v2_64 and Icamin_v2_64: host 2 2, device 2 2 exact",
            "Sgemm_v2_64 of 2^31 rows: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "Dgemv_v2_64 of 2^32 + 2 rows: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "Zdotc_v2_64 of 2^32 + 2 elements: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "Isamax_v2_64 of 2^32 + 2 elements: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "SetMatrix_64 of 2^32 + 2 rows: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "Sgemm_v2_64 m -1: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_ilp64: all exact",
        ],
    )
    .await;
}

/// cuBLAS's batched matrix-vector products and complex level-3 forms through the shim
/// (`tests/cuda/cublas_batched_vectors.cu`): `gemvStridedBatched` (N, T, C, the conjugate
/// transpose into a strided `y` a launch a product) and `gemvBatched` (arrays evenly and
/// unevenly spaced) in four precisions, their binary16 and bfloat16 forms (`HSH`, `HSS`, `TST`,
/// `TSS`), `GemmBatchedEx` on binary16 arrays in order and not, and the complex forms that name an
/// algorithm or take types (`Cgemm3m`, `Zgemm3m`, `CgemmEx`, `Cgemm3mEx`, `Cgemm3m` strided and
/// on arrays, `CsyrkEx`, `CherkEx` and their 3m forms); each exact. A negative count and complex
/// f64 `CgemmEx` are refused as cuBLAS refuses them; complex integer matrices as not served.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_runs_batched_vectors_and_typed_complex_forms_exactly() {
    run_math_program(
        "cublas_batched_vectors",
        "libcublas.so.13",
        &[
            "SgemvStridedBatched N incy 3 exact",
            "DgemvStridedBatched T incy 1 exact",
            "CgemvStridedBatched C incy 1 exact",
            "ZgemvStridedBatched C incy 3 exact",
            "CgemvStridedBatched T incy 2 exact",
            "SgemvBatched T exact",
            "DgemvBatched N uneven exact",
            "CgemvBatched C exact",
            "ZgemvBatched N uneven exact",
            "HSH gemvStridedBatched N exact",
            "HSH gemvBatched N exact",
            "HSS gemvStridedBatched T exact",
            "HSS gemvBatched T exact",
            "TST gemvStridedBatched T exact",
            "TST gemvBatched T exact",
            "TSS gemvStridedBatched N exact",
            "TSS gemvBatched N exact",
            "GemmBatchedEx f16 into f32 exact",
            "GemmBatchedEx f16 into f32 out of order exact",
            "Cgemm3m N exact",
            "Zgemm3m C exact",
            "CgemmEx C exact",
            "Cgemm3mEx N exact",
            "Cgemm3mStridedBatched C exact",
            "Cgemm3mBatched N exact",
            "CsyrkEx exact",
            "Csyrk3mEx exact",
            "CherkEx exact",
            "Cherk3mEx exact",
            "sgemvStridedBatched of -1: 7 CUBLAS_STATUS_INVALID_VALUE",
            "CgemmEx of C_64F: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "CherkEx of C_8I: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "cublas_batched_vectors: all exact",
        ],
    )
    .await;
}

/// cuBLAS's level-1 `Ex` forms, `matinvBatched`, grouped batched gemms, and a handle's settings
/// and loggers through the shim (`tests/cuda/cublas_level1_ex.cu`): `AxpyEx`, `ScalEx`, `CopyEx`
/// and `Nrm2Ex` on f32, f64 and complex vectors and on binary16 and bfloat16 ones (a launch of
/// the builtin mixed-type gemm), the swap, reductions and rotations against their typed forms,
/// `matinvBatched` in three precisions (`A` left as it was; a singular matrix's `info`), grouped
/// gemms of two groups (`int` and `int64_t` arrays; binary16 into f32), the emulation settings
/// kept, and both loggers' callbacks; each exact. Out-of-range values are refused as cuBLAS
/// refuses them; type mixes the shim does not serve, as not served.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_runs_the_level_1_ex_forms_inverses_and_grouped_gemms_exactly() {
    run_math_program(
        "cublas_level1_ex",
        "libcublas.so.13",
        &[
            "f32 AxpyEx strided exact",
            "f64 CopyEx strided exact",
            "c32 ScalEx strided exact",
            "c64 AxpyEx strided exact",
            "c32 ScalEx by a real exact",
            "f16 AxpyEx exact",
            "f16 ScalEx by f32 and by its own type exact",
            "bf16 CopyEx exact",
            "bf16 ScalEx by f32 and by its own type exact",
            "f32 Nrm2Ex exact",
            "c64 Nrm2Ex exact",
            "f16 Nrm2Ex exact",
            "f64 SwapEx y exact",
            "c32 AsumEx exact",
            "c32 IamaxEx first of equals exact",
            "c32 IaminEx exact",
            "c32 IamaxEx_64 exact",
            "c32 RotEx as Crot exact",
            "c32 RotEx as Csrot exact",
            "f64 RotmEx as Drotm exact",
            "f32 RotgEx r exact",
            "f32 RotgEx as Srotg exact",
            "c64 RotgEx as Zrotg exact",
            "f64 RotmgEx as Drotmg exact",
            "SmatinvBatched exact",
            "DmatinvBatched leaves A exact",
            "ZmatinvBatched within 1e-12",
            "ZmatinvBatched info exact",
            "SmatinvBatched of a singular matrix: info exact",
            "SgemmGroupedBatched exact",
            "DgemmGroupedBatched exact",
            "SgemmGroupedBatched_64 exact",
            "GemmGroupedBatchedEx f16 into f32 exact",
            "atomics mode, emulation strategy and fixed-point controls kept exact",
            "cuBLAS logger callback: 3 calls and a failure logged, none once off exact",
            "cuBLASLt logger: API trace at level 5, none after ForceDisable exact",
            "emulation strategy 3: 7 CUBLAS_STATUS_INVALID_VALUE",
            "matinvBatched of n 33: 7 CUBLAS_STATUS_INVALID_VALUE",
            "SgemmGroupedBatched of -1 products: 7 CUBLAS_STATUS_INVALID_VALUE",
            "AxpyEx of f32 with an f64 alpha: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "SwapEx of f16: 15 CUBLAS_STATUS_NOT_SUPPORTED",
            "SgemmGroupedBatched with no alphas: 7 CUBLAS_STATUS_INVALID_VALUE",
            "cublas_level1_ex: all exact",
        ],
    )
    .await;
}

/// Vectors BLAS reads backwards (a negative increment: element `i` of `n` at `(n - 1 - i)
/// |inc|`) in every level-1 and level-2 routine family: each call gives exactly what it gives
/// on the same vectors reversed with positive increments, and not what it gives on them read
/// forwards (but for two vectors both backwards in pairs); nrm2, asum, amax and scal do
/// nothing, as BLAS does; a call cuBLAS refuses, or one with nothing to compute, copies nothing
/// (so leaves a capture alone); batched gemvs take them a product at a time; a call that needs a
/// forward copy is refused while its stream captures, one that needs none is captured.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_linked_against_cublas_reads_vectors_backwards_as_blas_does() {
    run_math_program(
        "cublas_backwards",
        "libcublas.so.13",
        &[
            "sdot incx -2 incy 3 exact",
            "ddot incx -3 incy -1 exact",
            "cdotc incx 2 incy -1 exact",
            "zaxpy incx 1 incy -2 exact",
            "dcopy incx -1 incy 2 exact",
            "sswap incx -2 incy 1 exact",
            "drot incx 3 incy -2 exact",
            "srotm flag -1 incx -1 incy 2 exact",
            "f16 AxpyEx incx -2 incy 1 exact",
            "sgemv N incx -2 incy 3 exact",
            "dgemv T incx 1 incy -3 exact",
            "cgemv C incx -2 incy -3 exact",
            "sger incx -3 incy 2 exact",
            "sgemvStridedBatched N incx -1 incy 2 exact",
            "zgemvBatched T incx 2 incy -2 exact",
            "cgerc incx 1 incy -1 exact",
            "sdgmm left incx -2 exact",
            "zdgmm right incx -3 exact",
            "ssymv lower incx -2 incy 1 exact",
            "zhemv upper incx 1 incy -2 exact",
            "dsyr upper incx -3 exact",
            "cher lower incx -1 exact",
            "ssyr2 lower incx 2 incy -1 exact",
            "zher2 upper incx -2 incy -3 exact",
            "strmv upper N incx -2 exact",
            "ctrmv lower C incx -1 exact",
            "dtrsv lower T unit incx -3 exact",
            "ztrsv upper C unit incx -2 exact",
            "sgbmv N incx -2 incy -1 exact",
            "chbmv upper incx 1 incy -2 exact",
            "stbmv lower T incx -3 exact",
            "dtbsv upper N unit incx -2 exact",
            "sspmv upper incx -1 incy 2 exact",
            "dspr lower incx -2 exact",
            "stpsv lower N unit incx -3 exact",
            "snrm2, sasum, isamax, sscal incx -2: nothing done exact",
            "dtrsv n 0 incx -1: 0 CUBLAS_STATUS_SUCCESS",
            "sgbmv lda 0 incx -1 while capturing: 7 CUBLAS_STATUS_INVALID_VALUE",
            "sgbmv lda 0 incx -1's capture: cudaSuccess",
            "saxpy incx -1 while capturing: 13 CUBLAS_STATUS_EXECUTION_FAILED",
            "saxpy incx -1's capture: invalidated",
            "axpy of a vector read backwards on a capturing stream cannot be captured",
            "captured saxpy incx -1 incy -1 exact",
            "cublas_backwards: all exact",
        ],
    )
    .await;
}

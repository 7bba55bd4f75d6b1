//! `acKernelCreate`, `acKernelSetArgs`, `acKernelRun`, `acKernelDestroy`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use ac_frontend::{blocking, KernelArg, LaunchDims};

use crate::devices::{acDevice, DEVICES};
use crate::error::{acError, ffi, Failure, Outcome};
use crate::handles::{handle, value, write_out, Table};
use crate::memory::{in_range, MEMS};
use crate::stream::{acStream, STREAMS};

/// A kernel on one accelerator, with its arguments.
#[allow(non_camel_case_types)]
pub type acKernel = *mut acKernel_st;

/// Never defined: a handle's value is a tagged number, not an address (opaque to C).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct acKernel_st {
    _never: [u8; 0],
}

/// What `acKernelCreate` loads the kernel from.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum acSourceKind {
    /// The device's builtin module: these kernels exist on every device (the CPU device and
    /// CUDA), with these arguments, in this order (`float *` is an `acArgMem`/`acArgMemAt` of
    /// `float`s; `uint32_t` an `acArgU32`, `uint64_t` an `acArgU64`, `float` an `acArgF32`).
    /// All are grid-stride loops: any launch shape computes the whole result. Matrices are
    /// row-major. No source (NULL, 0).
    ///
    /// - `fill(float *out, float value, uint64_t n)`: `out[i] = value` for i < n.
    /// - `vector_add(const float *a, const float *b, float *c, uint64_t n)`: `c[i] = a[i] + b[i]`.
    /// - `saxpy(float a, const float *x, float *y, uint64_t n)`: `y[i] = a * x[i] + y[i]`.
    /// - `sgemm(uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, const float *B, float beta, float *C)`:
    ///   `C = alpha * A * B + beta * C`, A m x k, B k x n, C m x n (sizes are `uint32_t`).
    /// - `reduce_sum(const float *in, float *out, uint64_t n)`: `out[0] += in[0] + ... + in[n-1]`;
    ///   it adds to `out[0]`, so zero it first (`acMemset`).
    /// - `blas_sgemm(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch)`:
    ///   BLAS's gemm, column-major as cuBLAS: for each b < batch, `C_b = alpha * op(A_b) *
    ///   op(B_b) + beta * C_b`, op(X) = X or its transpose (`trans` non-zero), `X_b` starts
    ///   `b * stride_x` elements after X, element (i, j) of X at `X[i + j * ldx]`; C is not read
    ///   when beta is 0.
    /// - `blas_dgemm(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch)`:
    ///   the same on `double`s (an `acArgF64` each; pointers 8-byte aligned).
    /// - `blas_gemm_ex(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const void *A, uint32_t lda, uint64_t stride_a, const void *B, uint32_t ldb, uint64_t stride_b, float beta, void *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, uint32_t types)`:
    ///   blas_sgemm's product on matrices each of its own type: `types` holds A's in bits 0-3,
    ///   B's in 4-7, C's in 8-11 (0 float, 1 IEEE binary16, 2 bfloat16; pointers aligned to
    ///   their elements), computed in float, each result rounded to C's type (nearest even).
    /// - `blas_cgemm(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, float alpha_im, float beta_im)`:
    ///   blas_sgemm's product on complex matrices (real part first, pointers 8-byte aligned),
    ///   alpha and beta their real parts, alpha_im and beta_im their imaginary parts; `trans` 2
    ///   is a conjugate transpose.
    /// - `blas_zgemm(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, double alpha_im, double beta_im)`:
    ///   the same on double complex matrices (pointers 16-byte aligned).
    /// - `blas_sgemmt(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, uint32_t fill)`:
    ///   blas_sgemm's product on the lower (fill 0) or upper (fill 1) triangle of a square C
    ///   (m = n), the diagonal included; C's other elements are neither read nor written (BLAS's
    ///   gemmt: what the CUDA shim's `syrk`, `syrkx` and `syr2k` launch).
    /// - `blas_dgemmt(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, uint32_t fill)`:
    ///   the same on double.
    /// - `blas_cgemmt(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, float alpha_im, float beta_im, uint32_t fill)`:
    ///   the same on complex matrices, as blas_cgemm.
    /// - `blas_zgemmt(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, double alpha_im, double beta_im, uint32_t fill)`:
    ///   the same on double complex matrices, as blas_zgemm.
    /// - `blas_sgemm_tri(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, uint32_t form)`:
    ///   blas_sgemm's product on all of C, one batch, A (form bit 3 clear, m = k) or B (set,
    ///   k = n) square and read from one triangle only: bit 0 the triangle (0 lower, 1 upper),
    ///   bits 1-2 the matrix (0 symmetric, 1 Hermitian, 2 triangular, 3 unit triangular; BLAS's
    ///   symm, hemm and trmm: what the CUDA shim's `symm`, `hemm` and `trmm` launch).
    /// - `blas_dgemm_tri(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, uint32_t form)`:
    ///   the same on double.
    /// - `blas_cgemm_tri(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, float alpha, const float *A, uint32_t lda, uint64_t stride_a, const float *B, uint32_t ldb, uint64_t stride_b, float beta, float *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, float alpha_im, float beta_im, uint32_t form)`:
    ///   the same on complex matrices, as blas_cgemm.
    /// - `blas_zgemm_tri(uint32_t transa, uint32_t transb, uint32_t m, uint32_t n, uint32_t k, double alpha, const double *A, uint32_t lda, uint64_t stride_a, const double *B, uint32_t ldb, uint64_t stride_b, double beta, double *C, uint32_t ldc, uint64_t stride_c, uint32_t batch, double alpha_im, double beta_im, uint32_t form)`:
    ///   the same on double complex matrices, as blas_zgemm.
    /// - `blas_strsm(uint32_t side, uint32_t uplo, uint32_t trans, uint32_t diag, uint32_t m, uint32_t n, float alpha, const float *A, uint32_t lda, uint64_t stride_a, float *B, uint32_t ldb, uint64_t stride_b, uint32_t batch)`:
    ///   BLAS's triangular solve, column-major as cuBLAS: for each b < batch, `op(A_b) X = alpha *
    ///   B_b` (side 0) or `X op(A_b) = alpha * B_b` (side 1), A_b lower (uplo 0) or upper
    ///   triangular, its diagonal read (diag 0) or taken as ones, X written over B_b; op as
    ///   blas_sgemm's (`trans` 2: conjugate transpose), A m x m on the left, n x n on the right.
    /// - `blas_dtrsm(uint32_t side, uint32_t uplo, uint32_t trans, uint32_t diag, uint32_t m, uint32_t n, double alpha, const double *A, uint32_t lda, uint64_t stride_a, double *B, uint32_t ldb, uint64_t stride_b, uint32_t batch)`:
    ///   the same on `double`s (pointers 8-byte aligned).
    /// - `blas_ctrsm(uint32_t side, uint32_t uplo, uint32_t trans, uint32_t diag, uint32_t m, uint32_t n, float alpha, const float *A, uint32_t lda, uint64_t stride_a, float *B, uint32_t ldb, uint64_t stride_b, uint32_t batch, float alpha_im)`:
    ///   the same on complex matrices (real part first, pointers 8-byte aligned),
    ///   alpha its real part and alpha_im its imaginary part.
    /// - `blas_ztrsm(uint32_t side, uint32_t uplo, uint32_t trans, uint32_t diag, uint32_t m, uint32_t n, double alpha, const double *A, uint32_t lda, uint64_t stride_a, double *B, uint32_t ldb, uint64_t stride_b, uint32_t batch, double alpha_im)`:
    ///   the same on double complex matrices (pointers 16-byte aligned).
    /// - `blas_sgetrf(uint32_t n, float *A, uint32_t lda, uint64_t stride_a, uint32_t pivoting, int32_t *pivots, uint64_t stride_p, int32_t *info, uint32_t batch)`:
    ///   LU factorization with partial pivoting (LAPACK's getf2), column-major: for
    ///   each b < batch, `P A_b = L U` over A_b (n x n), the 1-based interchanges at
    ///   `pivots + b * stride_p` if `pivoting` is 1 (else none, pivots not touched), `info[b]`
    ///   the first zero pivot's column + 1, or 0.
    /// - `blas_dgetrf(uint32_t n, double *A, uint32_t lda, uint64_t stride_a, uint32_t pivoting, int32_t *pivots, uint64_t stride_p, int32_t *info, uint32_t batch)`:
    ///   the same on `double`s (pointers 8-byte aligned).
    /// - `blas_cgetrf(uint32_t n, float *A, uint32_t lda, uint64_t stride_a, uint32_t pivoting, int32_t *pivots, uint64_t stride_p, int32_t *info, uint32_t batch)`:
    ///   the same on complex matrices (real part first; the pivot of largest |re| + |im|).
    /// - `blas_zgetrf(uint32_t n, double *A, uint32_t lda, uint64_t stride_a, uint32_t pivoting, int32_t *pivots, uint64_t stride_p, int32_t *info, uint32_t batch)`:
    ///   the same on double complex matrices (pointers 16-byte aligned).
    /// - `blas_sgetrs(uint32_t trans, uint32_t n, uint32_t nrhs, const float *A, uint32_t lda, uint64_t stride_a, uint32_t flags, const int32_t *pivots, uint64_t stride_p, float *B, uint32_t ldb, uint64_t stride_b, int32_t *info, uint32_t batch)`:
    ///   solves `op(A_b) X = B_b` with blas_sgetrf's factors, X over B_b (n x nrhs);
    ///   `flags` bit 0: apply the pivots (else not read); bit 1: invert (B_b starts as the
    ///   identity, nrhs = n, `info[b]` = U's first zero diagonal index + 1, or 0; else info is
    ///   not touched).
    /// - `blas_dgetrs(uint32_t trans, uint32_t n, uint32_t nrhs, const double *A, uint32_t lda, uint64_t stride_a, uint32_t flags, const int32_t *pivots, uint64_t stride_p, double *B, uint32_t ldb, uint64_t stride_b, int32_t *info, uint32_t batch)`:
    ///   the same on `double`s (pointers 8-byte aligned).
    /// - `blas_cgetrs(uint32_t trans, uint32_t n, uint32_t nrhs, const float *A, uint32_t lda, uint64_t stride_a, uint32_t flags, const int32_t *pivots, uint64_t stride_p, float *B, uint32_t ldb, uint64_t stride_b, int32_t *info, uint32_t batch)`:
    ///   the same on complex matrices (real part first).
    /// - `blas_zgetrs(uint32_t trans, uint32_t n, uint32_t nrhs, const double *A, uint32_t lda, uint64_t stride_a, uint32_t flags, const int32_t *pivots, uint64_t stride_p, double *B, uint32_t ldb, uint64_t stride_b, int32_t *info, uint32_t batch)`:
    ///   the same on double complex matrices (pointers 16-byte aligned).
    /// - `blas_sgeqrf(uint32_t m, uint32_t n, float *A, uint32_t lda, uint64_t stride_a, float *tau, uint64_t stride_t, uint32_t batch)`:
    ///   QR by Householder reflections (LAPACK's geqr2): for each b < batch, A_b = Q R over A_b
    ///   (R on and above the diagonal, the reflectors below), min(m, n) taus at tau + b * stride_t.
    /// - `blas_dgeqrf(uint32_t m, uint32_t n, double *A, uint32_t lda, uint64_t stride_a, double *tau, uint64_t stride_t, uint32_t batch)`:
    ///   the same on doubles.
    /// - `blas_cgeqrf(uint32_t m, uint32_t n, float *A, uint32_t lda, uint64_t stride_a, float *tau, uint64_t stride_t, uint32_t batch)`:
    ///   the same on cuComplex matrices (R's diagonal real).
    /// - `blas_zgeqrf(uint32_t m, uint32_t n, double *A, uint32_t lda, uint64_t stride_a, double *tau, uint64_t stride_t, uint32_t batch)`:
    ///   the same on cuDoubleComplex.
    /// - `blas_sgels(uint32_t m, uint32_t n, uint32_t nrhs, float *A, uint32_t lda, uint64_t stride_a, float *C, uint32_t ldc, uint64_t stride_c, uint32_t flags, int32_t *info, uint32_t batch)`:
    ///   least squares min |A_b X - C_b| for m >= n (LAPACK's gels, op N): A_b factored as
    ///   blas_sgeqrf does, Q^H applied to C_b, R X = C_b's first n rows solved, X there; a zero
    ///   on R's diagonal: not solved, and `info[b]` its index + 1 (else 0) if `flags` bit 0.
    /// - `blas_dgels(uint32_t m, uint32_t n, uint32_t nrhs, double *A, uint32_t lda, uint64_t stride_a, double *C, uint32_t ldc, uint64_t stride_c, uint32_t flags, int32_t *info, uint32_t batch)`:
    ///   the same on doubles.
    /// - `blas_cgels(uint32_t m, uint32_t n, uint32_t nrhs, float *A, uint32_t lda, uint64_t stride_a, float *C, uint32_t ldc, uint64_t stride_c, uint32_t flags, int32_t *info, uint32_t batch)`:
    ///   the same on cuComplex matrices.
    /// - `blas_zgels(uint32_t m, uint32_t n, uint32_t nrhs, double *A, uint32_t lda, uint64_t stride_a, double *C, uint32_t ldc, uint64_t stride_c, uint32_t flags, int32_t *info, uint32_t batch)`:
    ///   the same on cuDoubleComplex.
    /// - `blas_sabs_reduce(uint32_t op, uint32_t n, const float *x, uint64_t incx, void *out)`:
    ///   BLAS's asum (op 0: the sum of |x| into a float), iamax (1) and iamin (2: the 1-based
    ///   index of the first largest or smallest |x| into an int32_t, 0 for n 0) over x[i * incx].
    /// - `blas_dabs_reduce(uint32_t op, uint32_t n, const double *x, uint64_t incx, void *out)`:
    ///   the same on doubles.
    /// - `blas_cabs_reduce(uint32_t op, uint32_t n, const float *x, uint64_t incx, void *out)`:
    ///   the same on cuComplex vectors (real part first; a sum is a float) (|re| + |im| for complex ones).
    /// - `blas_zabs_reduce(uint32_t op, uint32_t n, const double *x, uint64_t incx, void *out)`:
    ///   the same on cuDoubleComplex vectors (a sum is a double) (|re| + |im| for complex ones).
    /// - `blas_stpttr(uint32_t dir, uint32_t uplo, uint32_t n, float *AP, float *A, uint32_t lda)`:
    ///   BLAS's packed storage of the lower (uplo 0) or upper (1) triangle of the n x n
    ///   column-major A, the diagonal included: dir 0 unpacks AP into that triangle of A (the
    ///   other triangle untouched), 1 packs it into AP, column by column (cuBLAS's tpttr, trttp).
    /// - `blas_dtpttr(uint32_t dir, uint32_t uplo, uint32_t n, double *AP, double *A, uint32_t lda)`:
    ///   the same on double.
    /// - `blas_ctpttr(uint32_t dir, uint32_t uplo, uint32_t n, float *AP, float *A, uint32_t lda)`:
    ///   the same on cuComplex.
    /// - `blas_ztpttr(uint32_t dir, uint32_t uplo, uint32_t n, double *AP, double *A, uint32_t lda)`:
    ///   the same on cuDoubleComplex.
    /// - `blas_activation(uint32_t op, uint32_t m, uint32_t n, void *D, uint32_t ld, uint64_t stride, uint32_t batch, uint32_t type)`:
    ///   in place on `batch` column-major `m x n` matrices `stride` elements apart (leading
    ///   dimension `ld`), each element of the type `type` codes (0 `float`, 1 IEEE binary16, 2
    ///   bfloat16) computed in `float`: `op` 0 ReLU, `max(x, 0)`; 1 GELU's tanh approximation (the
    ///   CUDA shim's cuBLASLt epilogues).
    /// - `blas_copy(uint32_t n, uint32_t width, const void *x, int64_t incx, void *y, int64_t incy)`:
    ///   BLAS's copy, `y_i = x_i` for i < n, on elements of `width` bytes (1, 2, 4, 8 or 16), a
    ///   vector with a negative increment read backwards from its last element (the CUDA shim's
    ///   cuBLAS gathers vectors passed backwards with it).
    /// - `dft_f32(uint32_t kind, uint32_t inverse, uint32_t n, uint32_t lines0, uint32_t lines1, uint32_t lines2, const float *in, uint64_t in_step, uint64_t in_line0, uint64_t in_line1, uint64_t in_line2, float *out, uint64_t out_step, uint64_t out_line0, uint64_t out_line1, uint64_t out_line2)`:
    ///   a discrete Fourier transform of length n along `lines0 * lines1 * lines2` lines,
    ///   unnormalized, `exp(-+2 pi i j k / n)` (`inverse` 0 or 1): `kind` 0 complex to complex,
    ///   1 real to complex (n/2 + 1 out), 2 complex to real (n/2 + 1 in), 3 a copy; element j of
    ///   line (l0, l1, l2) at `l0 * line0 + l1 * line1 + l2 * line2 + j * step`, in the buffer's
    ///   elements (complex: two floats); the output must not overlap the input.
    /// - `dft_f64(uint32_t kind, uint32_t inverse, uint32_t n, uint32_t lines0, uint32_t lines1, uint32_t lines2, const double *in, uint64_t in_step, uint64_t in_line0, uint64_t in_line1, uint64_t in_line2, double *out, uint64_t out_step, uint64_t out_line0, uint64_t out_line1, uint64_t out_line2)`:
    ///   the same on `double`s.
    /// - `dft_ex(uint32_t kind, uint32_t inverse, uint32_t n, uint32_t lines0, uint32_t lines1, uint32_t lines2, const void *in, uint64_t in_step, uint64_t in_line0, uint64_t in_line1, uint64_t in_line2, void *out, uint64_t out_step, uint64_t out_line0, uint64_t out_line1, uint64_t out_line2, uint32_t types)`:
    ///   `dft_f32`'s on buffers each of its own type, `types` holding the input's in bits 0-3
    ///   and the output's in 4-7 (0 `float`, 1 IEEE binary16, 2 bfloat16), computed as `dft_f32`
    ///   and each of its `float` results rounded to nearest, ties to even (the CUDA shim's
    ///   half-precision cuFFT).
    /// - `blas_epilogue(uint32_t op, uint32_t m, uint32_t n, void *D, uint32_t ld, uint64_t stride, uint32_t batch, uint32_t type, void *aux, uint64_t aux_ld, uint64_t aux_stride)`:
    ///   `blas_activation`'s, `type` 3 `double` too (computed in `double`), keeping or reading an
    ///   auxiliary matrix of D's shape (`aux_ld`, `aux_stride` its own): `op` 0 ReLU, 1 GELU (`aux`
    ///   not touched); 2 ReLU keeping its mask (a bit an element, set where the result is positive,
    ///   element (i, j) of batch b the bit `b aux_stride + j aux_ld + i` from the low bit of `aux`'s
    ///   first byte; `aux_ld` and `aux_stride` multiples of 8); 3 GELU keeping its input (D's type);
    ///   4 D zeroed where the mask's bit is clear; 5 D times GELU's slope at the input (the CUDA
    ///   shim's cuBLASLt training epilogues).
    ///
    /// A pointer whose `acMem` is too small for what the kernel touches, or that is not 4-byte
    /// aligned, fails the launch with `AC_ERROR_OUT_OF_RANGE` or `AC_ERROR_INVALID_ARGUMENT`.
    AC_SOURCE_BUILTIN = 0,
    /// PTX text (a CUDA device).
    AC_SOURCE_PTX = 1,
    /// A cubin or fatbin image (a CUDA device).
    AC_SOURCE_CUBIN = 2,
    /// CUDA C, compiled on the accelerator's host with NVRTC (a CUDA device); kernels are
    /// `extern "C"`.
    AC_SOURCE_CUDA_C = 3,
}

/// The type of one kernel argument.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum acArgKind {
    /// `int32_t`, in the low 32 bits of `bits`.
    AC_ARG_I32 = 0,
    /// `uint32_t`, in the low 32 bits of `bits`.
    AC_ARG_U32 = 1,
    /// `int64_t`.
    AC_ARG_I64 = 2,
    /// `uint64_t`.
    AC_ARG_U64 = 3,
    /// `float`, its bit pattern in the low 32 bits of `bits`.
    AC_ARG_F32 = 4,
    /// `double`, its bit pattern.
    AC_ARG_F64 = 5,
    /// A pointer into an `acMem` (the handle in `bits`) at byte `offset`.
    AC_ARG_MEM = 6,
}

/// One kernel argument. Build it with `acArgF32(...)`, `acArgMem(...)` and the like.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct acArg {
    /// One of `acArgKind`.
    pub kind: c_int,
    /// The value's bits (see `acArgKind`).
    pub bits: u64,
    /// For `AC_ARG_MEM`: the byte offset into the memory.
    pub offset: u64,
}

/// Three dimensions of a launch, as CUDA's `dim3`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct acDim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

/// A kernel and the arguments set so far.
#[derive(Debug)]
pub(crate) struct KernelEntry {
    device: u64,
    function: blocking::Function,
    args: Mutex<Vec<acArg>>,
    acc: blocking::Accelerator,
}

pub(crate) static KERNELS: Table<KernelEntry> = Table::new(0xac04, "acKernel");

/// Forgets the kernels on `device`.
pub(crate) fn forget_on(device: u64) {
    KERNELS.remove_where(|k| k.device == device);
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(acError::AC_ERROR_INVALID_ARGUMENT, message)
}

fn text(source: &[u8], what: &str) -> Outcome<String> {
    String::from_utf8(source.to_vec()).map_err(|_| invalid(format!("the {what} is not UTF-8")))
}

/// Loads kernel `name` on `device` from `source` (`len` bytes; NULL and 0 for the builtin
/// module) of kind `kind` (one of `acSourceKind`).
///
/// Errors: `AC_ERROR_INVALID_HANDLE`, `AC_ERROR_INVALID_ARGUMENT` (NULL `name` or `kernel`, an
/// unknown `kind`, text that is not UTF-8), `AC_ERROR_KERNEL` (no kernel of that name, a module
/// that does not load or compile: the message has the compiler's log), `AC_ERROR_NEEDS_CUDA`
/// (PTX, cubin or CUDA C on the CPU device), and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acKernelCreate(
    device: acDevice,
    kind: c_int,
    source: *const c_void,
    len: usize,
    name: *const c_char,
    kernel: *mut acKernel,
) -> acError {
    ffi(|| {
        if name.is_null() || kernel.is_null() {
            return Err(invalid("NULL kernel name or acKernel pointer"));
        }
        // SAFETY: C passes a NUL-terminated name, as the header asks.
        let name = unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| invalid("the kernel name is not UTF-8"))?;
        let source: &[u8] = match (source.is_null(), len) {
            (_, 0) => &[],
            (true, _) => return Err(invalid("NULL source with a length")),
            // SAFETY: C passes `len` readable bytes at `source`, as the header asks.
            (false, len) => unsafe { std::slice::from_raw_parts(source.cast(), len) },
        };
        let acc = DEVICES.get(value(device))?.acc.clone();
        let module = match kind {
            k if k == acSourceKind::AC_SOURCE_BUILTIN as c_int => acc.builtin()?,
            k if k == acSourceKind::AC_SOURCE_PTX as c_int => acc.load_ptx(&text(source, "PTX")?)?,
            k if k == acSourceKind::AC_SOURCE_CUBIN as c_int => acc.load_cubin(source)?,
            k if k == acSourceKind::AC_SOURCE_CUDA_C as c_int => acc.compile_cuda(&text(source, "CUDA C")?, &[])?,
            other => return Err(invalid(format!("{other} is not an acSourceKind"))),
        };
        let function = module.function(name)?;
        let entry = KernelEntry { device: value(device), function, args: Mutex::new(Vec::new()), acc };
        write_out(kernel, handle(KERNELS.insert(entry)), "the new acKernel")
    })
}

/// The C arguments at `args`, checked against `device`.
fn c_args<'a>(count: c_int, args: *const acArg) -> Outcome<&'a [acArg]> {
    let count = usize::try_from(count).map_err(|_| invalid(format!("{count} arguments")))?;
    match (args.is_null(), count) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(invalid("NULL arguments with a count")),
        // SAFETY: C passes `count` arguments at `args`, as the header asks.
        (false, count) => Ok(unsafe { std::slice::from_raw_parts(args, count) }),
    }
}

/// The SDK's arguments for C ones, each checked (a bad one is named by its index).
fn kernel_args(device: u64, args: &[acArg]) -> Outcome<Vec<KernelArg>> {
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            kernel_arg(device, arg).map_err(|f| Failure::new(f.code, format!("argument {i}: {}", f.message)))
        })
        .collect()
}

/// Sets the kernel's `count` arguments (replacing any set before) for the next `acKernelRun`.
/// The arguments belong to the kernel handle, shared by every thread that uses it: threads that
/// share a kernel launch with `acKernelLaunch` instead.
///
/// Errors: `AC_ERROR_INVALID_HANDLE` (the kernel, or an `acMem` argument), `AC_ERROR_INVALID_ARGUMENT`
/// (a NULL `args` with a count, an unknown kind, an `acMem` of another accelerator),
/// `AC_ERROR_OUT_OF_RANGE` (an offset past its `acMem`). The message names the argument.
#[no_mangle]
pub extern "C" fn acKernelSetArgs(kernel: acKernel, count: c_int, args: *const acArg) -> acError {
    ffi(|| {
        let entry = KERNELS.get(value(kernel))?;
        let args = c_args(count, args)?;
        // Checked now, so that a bad argument is reported by the call that set it.
        kernel_args(entry.device, args)?;
        *entry.args.lock().expect("arguments poisoned") = args.to_vec();
        Ok(())
    })
}

/// Queues the kernel with the arguments set by `acKernelSetArgs` on `stream` (NULL: the
/// default stream) over a `grid` of blocks of `block` threads with `shared_mem` bytes of dynamic
/// shared memory per block. Returns at once; errors of the run surface at the next
/// synchronizing call, as in CUDA.
///
/// Errors: as `acKernelSetArgs`, and `AC_ERROR_INVALID_ARGUMENT` (arguments that do not match
/// the kernel's parameters, a stream of another accelerator), and those of any call that reaches the accelerator.
#[no_mangle]
pub extern "C" fn acKernelRun(
    kernel: acKernel,
    grid: acDim3,
    block: acDim3,
    shared_mem: u32,
    stream: acStream,
) -> acError {
    ffi(|| {
        let entry = KERNELS.get(value(kernel))?;
        let args = entry.args.lock().expect("arguments poisoned").clone();
        launch(&entry, &kernel_args(entry.device, &args)?, grid, block, shared_mem, stream)
    })
}

/// `acKernelRun` with its own `count` arguments: one call, safe for threads that share the
/// kernel handle.
///
/// Errors: as `acKernelRun`.
#[no_mangle]
pub extern "C" fn acKernelLaunch(
    kernel: acKernel,
    grid: acDim3,
    block: acDim3,
    shared_mem: u32,
    stream: acStream,
    count: c_int,
    args: *const acArg,
) -> acError {
    ffi(|| {
        let entry = KERNELS.get(value(kernel))?;
        let args = kernel_args(entry.device, c_args(count, args)?)?;
        launch(&entry, &args, grid, block, shared_mem, stream)
    })
}

fn launch(
    entry: &KernelEntry,
    args: &[KernelArg],
    grid: acDim3,
    block: acDim3,
    shared_mem: u32,
    stream: acStream,
) -> Outcome {
    let dims = LaunchDims::new([grid.x, grid.y, grid.z], [block.x, block.y, block.z]).with_shared_mem(shared_mem);
    if stream.is_null() {
        return Ok(entry.function.launch_on(&entry.acc.default_stream(), dims, args)?);
    }
    let stream = STREAMS.get(value(stream))?;
    if stream.device != entry.device {
        return Err(invalid("the stream is on another accelerator than the kernel"));
    }
    Ok(entry.function.launch_on(&stream.stream, dims, args)?)
}

/// Releases a kernel handle.
///
/// Errors: `AC_ERROR_INVALID_HANDLE`.
#[no_mangle]
pub extern "C" fn acKernelDestroy(kernel: acKernel) -> acError {
    ffi(|| KERNELS.remove(value(kernel)).map(drop))
}

/// The SDK's argument for a C one.
fn kernel_arg(device: u64, arg: &acArg) -> Outcome<KernelArg> {
    let low = arg.bits as u32;
    Ok(match arg.kind {
        k if k == acArgKind::AC_ARG_I32 as c_int => KernelArg::I32(low as i32),
        k if k == acArgKind::AC_ARG_U32 as c_int => KernelArg::U32(low),
        k if k == acArgKind::AC_ARG_I64 as c_int => KernelArg::I64(arg.bits as i64),
        k if k == acArgKind::AC_ARG_U64 as c_int => KernelArg::U64(arg.bits),
        k if k == acArgKind::AC_ARG_F32 as c_int => KernelArg::F32(f32::from_bits(low)),
        k if k == acArgKind::AC_ARG_F64 as c_int => KernelArg::F64(f64::from_bits(arg.bits)),
        k if k == acArgKind::AC_ARG_MEM as c_int => {
            let mem = MEMS.get(arg.bits)?;
            if mem.device != device {
                return Err(invalid("the acMem is on another accelerator than the kernel"));
            }
            let offset = usize::try_from(arg.offset).map_err(|_| invalid("offset too large"))?;
            in_range(&mem, offset, 0)?;
            mem.buffer.at(offset)
        }
        other => return Err(invalid(format!("{other} is not an acArgKind"))),
    })
}

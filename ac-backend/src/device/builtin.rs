//! The `builtin` module: kernels every device provides under the same names and signatures, so
//! programs run unchanged on the CPU and CUDA devices.
//!
//! All are grid-stride loops: any launch shape computes the whole result; the shape only sets
//! the parallelism. Pointers are to `f32`, little-endian, row-major for matrices.
//!
//! | kernel | parameters | effect |
//! |---|---|---|
//! | `fill` | `(f32* out, f32 value, u64 n)` | `out[i] = value` |
//! | `vector_add` | `(const f32* a, const f32* b, f32* c, u64 n)` | `c[i] = a[i] + b[i]` |
//! | `saxpy` | `(f32 a, const f32* x, f32* y, u64 n)` | `y[i] = a * x[i] + y[i]` |
//! | `sgemm` | `(u32 m, u32 n, u32 k, f32 alpha, const f32* A, const f32* B, f32 beta, f32* C)` | `C = alpha A B + beta C`, `A` m×k, `B` k×n, `C` m×n |
//! | `reduce_sum` | `(const f32* in, f32* out, u64 n)` | `out[0] += sum(in[0..n])` (zero `out` first) |
//! | `blas_sgemm`, `blas_dgemm` | BLAS's column-major gemm, transposes, leading dimensions and strided batches, on `f32` or `f64` ([`super::gemm`]) | `C_b = alpha op(A_b) op(B_b) + beta C_b` |
//! | `blas_cgemm`, `blas_zgemm` | `blas_sgemm`'s and `blas_dgemm`'s on complex matrices (real part first), `alpha` and `beta` their real parts, and their imaginary parts after `batch`; operation 2 is the conjugate transpose ([`super::gemm`]) | the same |
//! | `blas_gemm_ex` | `blas_sgemm`'s, and `u32 types`: each matrix `f32`, `f16` or `bf16`, computed in `f32` ([`super::gemm`]) | the same |
//! | `blas_sgemmt`, `blas_dgemmt`, `blas_cgemmt`, `blas_zgemmt` | `blas_<t>gemm`'s, and `u32 fill` last: the lower (0) or upper (1) triangle of a square `C` ([`super::gemm`]) | the same, on that triangle only |
//! | `blas_sgemm_tri`, `blas_dgemm_tri`, `blas_cgemm_tri`, `blas_zgemm_tri` | `blas_<t>gemmt`'s, the last `u32 form`: `A` or `B`, square, read from its lower or upper triangle as a symmetric, Hermitian, triangular or unit triangular matrix; one batch ([`super::structured`]) | `C = alpha op(A) op(B) + beta C`: symm, hemm, trmm |
//! | `blas_strsm`, `blas_dtrsm`, `blas_ctrsm`, `blas_ztrsm` | BLAS's column-major triangular solve: side, triangle, operation, unit diagonal, leading dimensions and strided batches, on `f32`, `f64` or their complex numbers (alpha's imaginary part last) ([`super::trsm`]) | `op(A_b) X = alpha B_b` or `X op(A_b) = alpha B_b`, `X` over `B_b` |
//! | `blas_sgetrf`, `blas_dgetrf`, `blas_cgetrf`, `blas_zgetrf` | LU factorization with partial pivoting (or none) of strided batches of square column-major matrices, pivots and `info` as LAPACK's ([`super::lu`]) | `P A_b = L U` over `A_b` |
//! | `blas_sgetrs`, `blas_dgetrs`, `blas_cgetrs`, `blas_zgetrs` | solves with those factors, operation N, T or C; or inverts ([`super::lu`]) | `op(A_b) X = B_b`, `X` over `B_b`; or `B_b = A_b^-1` |
//! | `blas_sgeqrf`, `blas_dgeqrf`, `blas_cgeqrf`, `blas_zgeqrf` | QR factorization by Householder reflections of strided batches of column-major `m x n` matrices, one a thread, `tau`s as LAPACK's ([`super::qr`]) | `A_b = Q R` over `A_b` |
//! | `blas_sgels`, `blas_dgels`, `blas_cgels`, `blas_zgels` | least squares for `m >= n`: the factorization, `Q^H` applied to `C_b`, `R X = C_b` solved unless `R` has a zero diagonal (`info`) ([`super::qr`]) | `X` over `C_b`'s first `n` rows |
//! | `blas_sabs_reduce`, `blas_dabs_reduce`, `blas_cabs_reduce`, `blas_zabs_reduce` | `(u32 op, u32 n, const T* x, u64 incx, void* out)`: BLAS's asum (op 0), iamax (1), iamin (2) over a strided vector, one thread ([`super::abs_reduce`]) | `out` = the sum of magnitudes, or the 1-based index of the first extreme one |
//! | `blas_stpttr`, `blas_dtpttr`, `blas_ctpttr`, `blas_ztpttr` | `(u32 dir, u32 uplo, u32 n, T* AP, T* A, u32 lda)`: BLAS's packed storage of a triangle, unpacked into `A` (dir 0) or packed from it (1) ([`super::packed`]) | the triangle moved, the other one untouched |
//! | `dft_f32`, `dft_f64` | a discrete Fourier transform along strided lines: complex to complex, real to complex, complex to real, or a copy ([`super::dft`]) | `X[k] = sum_j x[j] e^(-+2 pi i j k / n)` |
//! | `blas_activation` | `(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type)`: ReLU (op 0) or GELU's tanh approximation (1) in place on column-major matrices of `f32`, `f16` or `bf16` ([`super::epilogue`]) | `D_b = f(D_b)` |
//! | `blas_epilogue` | `blas_activation`'s, then `void* aux, u64 aux_ld, u64 aux_stride`: on `f64` matrices too (type 3), and keeping or reading an auxiliary matrix: ReLU's mask (op 2), GELU's input (3), and their gradients (4, 5) ([`super::epilogue`]) | `D_b = f(D_b)`, aux kept; or `D_b = D_b f'(aux_b)` |
//! | `blas_copy` | `(u32 n, u32 width, const void* x, i64 incx, void* y, i64 incy)`: BLAS's copy of `n` elements of `width` bytes (1, 2, 4, 8 or 16), a negative increment reading its vector backwards ([`super::vector_copy`]) | `y_i = x_i` |
//! | `dft_ex` | `dft_f32`'s, and `u32 types`: the input and the output each `f32`, `f16` or `bf16`, computed as `dft_f32` ([`super::dft`]) | the same |

use ac_proto::backend::ParamKind::{self, Ptr, F32, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

use super::{abs_reduce, dft, epilogue, gemm, lu, packed, qr, structured, trsm, vector_copy};
use super::{size_arg, DeviceArg, DeviceResult};

/// The module's name.
pub const MODULE: &str = "builtin";

/// The builtin kernels and their signatures.
pub const KERNELS: &[(&str, &[ParamKind])] = &[
    ("fill", &[Ptr, F32, U64]),
    ("vector_add", &[Ptr, Ptr, Ptr, U64]),
    ("saxpy", &[F32, Ptr, Ptr, U64]),
    ("sgemm", &[U32, U32, U32, F32, Ptr, Ptr, F32, Ptr]),
    ("reduce_sum", &[Ptr, Ptr, U64]),
    ("blas_sgemm", &gemm::SGEMM),
    ("blas_dgemm", &gemm::DGEMM),
    ("blas_gemm_ex", &gemm::GEMM_EX),
    ("blas_cgemm", &gemm::CGEMM),
    ("blas_zgemm", &gemm::ZGEMM),
    ("blas_sgemmt", &gemm::SGEMMT),
    ("blas_dgemmt", &gemm::DGEMMT),
    ("blas_cgemmt", &gemm::CGEMMT),
    ("blas_zgemmt", &gemm::ZGEMMT),
    ("blas_sgemm_tri", &gemm::SGEMM_TRI),
    ("blas_dgemm_tri", &gemm::DGEMM_TRI),
    ("blas_cgemm_tri", &gemm::CGEMM_TRI),
    ("blas_zgemm_tri", &gemm::ZGEMM_TRI),
    ("blas_strsm", &trsm::STRSM),
    ("blas_dtrsm", &trsm::DTRSM),
    ("blas_ctrsm", &trsm::CTRSM),
    ("blas_ztrsm", &trsm::ZTRSM),
    ("blas_sgetrf", &lu::GETRF),
    ("blas_dgetrf", &lu::GETRF),
    ("blas_cgetrf", &lu::GETRF),
    ("blas_zgetrf", &lu::GETRF),
    ("blas_sgetrs", &lu::GETRS),
    ("blas_dgetrs", &lu::GETRS),
    ("blas_cgetrs", &lu::GETRS),
    ("blas_zgetrs", &lu::GETRS),
    ("blas_sgeqrf", &qr::GEQRF),
    ("blas_dgeqrf", &qr::GEQRF),
    ("blas_cgeqrf", &qr::GEQRF),
    ("blas_zgeqrf", &qr::GEQRF),
    ("blas_sgels", &qr::GELS),
    ("blas_dgels", &qr::GELS),
    ("blas_cgels", &qr::GELS),
    ("blas_zgels", &qr::GELS),
    ("blas_sabs_reduce", &abs_reduce::PARAMS),
    ("blas_dabs_reduce", &abs_reduce::PARAMS),
    ("blas_cabs_reduce", &abs_reduce::PARAMS),
    ("blas_zabs_reduce", &abs_reduce::PARAMS),
    ("blas_stpttr", &packed::PARAMS),
    ("blas_dtpttr", &packed::PARAMS),
    ("blas_ctpttr", &packed::PARAMS),
    ("blas_ztpttr", &packed::PARAMS),
    ("blas_activation", &epilogue::ACTIVATION_PARAMS),
    ("blas_copy", &vector_copy::PARAMS),
    ("dft_f32", &dft::PARAMS),
    ("dft_f64", &dft::PARAMS),
    ("dft_ex", &dft::PARAMS_EX),
    ("blas_epilogue", &epilogue::PARAMS),
];

/// The index and signature of a builtin kernel.
pub fn lookup(name: &str) -> Option<(usize, &'static [ParamKind])> {
    KERNELS.iter().position(|(n, _)| *n == name).map(|i| (i, KERNELS[i].1))
}

/// Checks, before a launch, that every pointer argument of builtin `name` has room for what the
/// kernel touches and is aligned to its elements. Devices that cannot check accesses while a kernel runs
/// (CUDA) call this, so that a builtin never reads or writes outside the session's buffers.
pub fn check_footprint(name: &str, args: &[DeviceArg]) -> DeviceResult<()> {
    let scalar = |i: usize| size_arg(name, args, i);
    // (argument, elements touched from it, bytes of an element)
    let footprint: Vec<(usize, u64, u64)> = match name {
        "fill" => vec![(0, scalar(2)?, 4)],
        "vector_add" => {
            let n = scalar(3)?;
            vec![(0, n, 4), (1, n, 4), (2, n, 4)]
        }
        "saxpy" => {
            let n = scalar(3)?;
            vec![(1, n, 4), (2, n, 4)]
        }
        "sgemm" => {
            let (m, n, k) = (scalar(0)?, scalar(1)?, scalar(2)?);
            vec![(4, m.saturating_mul(k), 4), (5, k.saturating_mul(n), 4), (7, m.saturating_mul(n), 4)]
        }
        "reduce_sum" => vec![(0, scalar(2)?, 4), (1, 1, 4)],
        "blas_sgemm" | "blas_dgemm" | "blas_gemm_ex" | "blas_cgemm" | "blas_zgemm" | "blas_sgemmt" | "blas_dgemmt"
        | "blas_cgemmt" | "blas_zgemmt" | "blas_sgemm_tri" | "blas_dgemm_tri" | "blas_cgemm_tri" | "blas_zgemm_tri" => {
            gemm::fill(name, args)?;
            structured::structure(name, args)?;
            let widths = gemm::widths(name, args)?;
            let touched = gemm::shape(name, args)?.footprints();
            gemm::MATRICES
                .into_iter()
                .zip(touched)
                .zip(widths)
                .map(|((i, elements), width)| (i, elements, width))
                .collect()
        }
        "blas_strsm" | "blas_dtrsm" | "blas_ctrsm" | "blas_ztrsm" => {
            let touched = trsm::shape(name, args)?.footprints();
            trsm::MATRICES.into_iter().zip(touched).map(|(i, elements)| (i, elements, trsm::width(name))).collect()
        }
        "blas_sgetrf" | "blas_dgetrf" | "blas_cgetrf" | "blas_zgetrf" | "blas_sgetrs" | "blas_dgetrs"
        | "blas_cgetrs" | "blas_zgetrs" => lu::footprints(name, args)?,
        "blas_sgeqrf" | "blas_dgeqrf" | "blas_cgeqrf" | "blas_zgeqrf" | "blas_sgels" | "blas_dgels" | "blas_cgels"
        | "blas_zgels" => qr::footprints(name, args)?,
        "blas_sabs_reduce" | "blas_dabs_reduce" | "blas_cabs_reduce" | "blas_zabs_reduce" => {
            abs_reduce::shape(name, args)?.footprints(name)
        }
        "blas_stpttr" | "blas_dtpttr" | "blas_ctpttr" | "blas_ztpttr" => packed::shape(name, args)?.footprints(name),
        "blas_activation" | "blas_epilogue" => epilogue::footprints(&epilogue::shape(name, args)?),
        "blas_copy" => {
            let copy = vector_copy::shape(name, args)?;
            vector_copy::VECTORS.into_iter().zip(copy.spans()).map(|(i, span)| (i, span, copy.width)).collect()
        }
        "dft_f32" | "dft_f64" | "dft_ex" => {
            let widths = dft::widths(name, args)?;
            // In scalars (a complex element two), aligned to a scalar, as the CPU device reads them.
            let d = dft::shape(name, args)?;
            let scalars = |(n, complex): (u64, bool)| if complex { n.saturating_mul(2) } else { n };
            let touched = d.footprints().into_iter().zip(d.complex()).map(scalars);
            dft::BUFFERS.into_iter().zip(touched).zip(widths).map(|((i, n), width)| (i, n, width)).collect()
        }
        other => return Err(WireError::new(ErrorKind::UnknownKernel, format!("no builtin kernel `{other}`"))),
    };
    for (i, elements, width) in footprint {
        let Some(DeviceArg::Mem { offset, len, .. }) = args.get(i) else {
            return Err(WireError::new(
                ErrorKind::InvalidArgument,
                format!("`{name}` argument {i}: expected a pointer"),
            ));
        };
        let need = elements.saturating_mul(width);
        if need > *len {
            return Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!(
                    "`{name}` argument {i}: kernel accesses {need} bytes but only {len} are allocated from the pointer"
                ),
            ));
        }
        if offset % width != 0 {
            return Err(WireError::new(
                ErrorKind::InvalidArgument,
                format!("`{name}` argument {i}: misaligned address (offset {offset})"),
            ));
        }
    }
    Ok(())
}

/// Elements a launch of builtin `name` works on (for `sgemm`, its multiply-adds plus the
/// elements of its three matrices, which it reads even when one dimension is 0): how a device
/// judges whether the launch is quick.
pub fn work(name: &str, args: &[DeviceArg]) -> DeviceResult<u64> {
    let scalar = |i: usize| size_arg(name, args, i);
    Ok(match name {
        "fill" | "reduce_sum" => scalar(2)?,
        "vector_add" | "saxpy" => scalar(3)?,
        "sgemm" => {
            let (m, n, k) = (scalar(0)?, scalar(1)?, scalar(2)?);
            [m.saturating_mul(n).saturating_mul(k), m.saturating_mul(k), k.saturating_mul(n), m.saturating_mul(n)]
                .into_iter()
                .fold(0u64, u64::saturating_add)
        }
        "blas_sgemm" | "blas_dgemm" | "blas_gemm_ex" | "blas_cgemm" | "blas_zgemm" | "blas_sgemmt" | "blas_dgemmt"
        | "blas_cgemmt" | "blas_zgemmt" | "blas_sgemm_tri" | "blas_dgemm_tri" | "blas_cgemm_tri" | "blas_zgemm_tri" => {
            gemm::shape(name, args)?.work()
        }
        "blas_strsm" | "blas_dtrsm" | "blas_ctrsm" | "blas_ztrsm" => trsm::shape(name, args)?.work(),
        "blas_sgetrf" | "blas_dgetrf" | "blas_cgetrf" | "blas_zgetrf" | "blas_sgetrs" | "blas_dgetrs"
        | "blas_cgetrs" | "blas_zgetrs" => lu::work(name, args)?,
        "blas_sgeqrf" | "blas_dgeqrf" | "blas_cgeqrf" | "blas_zgeqrf" | "blas_sgels" | "blas_dgels" | "blas_cgels"
        | "blas_zgels" => qr::work(name, args)?,
        "blas_sabs_reduce" | "blas_dabs_reduce" | "blas_cabs_reduce" | "blas_zabs_reduce" => {
            abs_reduce::shape(name, args)?.span()
        }
        "blas_stpttr" | "blas_dtpttr" | "blas_ctpttr" | "blas_ztpttr" => {
            let p = packed::shape(name, args)?;
            p.n.saturating_mul(p.n)
        }
        "blas_activation" | "blas_epilogue" => {
            let e = epilogue::shape(name, args)?;
            e.m.saturating_mul(e.n).saturating_mul(e.batch)
        }
        "blas_copy" => vector_copy::shape(name, args)?.n,
        "dft_f32" | "dft_f64" | "dft_ex" => dft::shape(name, args)?.work(),
        other => return Err(WireError::new(ErrorKind::UnknownKernel, format!("no builtin kernel `{other}`"))),
    })
}

/// `C = alpha A B + beta C` on row-major slices; `c` holds C on entry.
#[allow(clippy::too_many_arguments)] // the BLAS sgemm signature, kept recognisable
pub fn sgemm(m: usize, n: usize, k: usize, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    for row in 0..m {
        let c_row = &mut c[row * n..(row + 1) * n];
        for v in c_row.iter_mut() {
            *v *= beta;
        }
        for (p, &a_val) in a[row * k..(row + 1) * k].iter().enumerate() {
            let scaled = alpha * a_val;
            for (cv, &bv) in c_row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *cv += scaled * bv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ac_proto::backend::KernelArg;

    #[test]
    fn sgemm_small() {
        // [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]
        let mut c = vec![1.0; 4];
        sgemm(2, 2, 2, 1.0, &[1., 2., 3., 4.], &[5., 6., 7., 8.], 2.0, &mut c);
        assert_eq!(c, vec![21., 24., 45., 52.]);
    }

    #[test]
    fn footprints_are_checked_before_launch() {
        use crate::device::DeviceMem;
        let mem = |len| DeviceArg::Mem { mem: DeviceMem(1), offset: 0, len };
        let n = |v| DeviceArg::Scalar(KernelArg::U64(v));
        let a = DeviceArg::Scalar(KernelArg::F32(1.0));
        assert!(check_footprint("saxpy", &[a, mem(400), mem(400), n(100)]).is_ok());
        let e = check_footprint("saxpy", &[a, mem(400), mem(396), n(100)]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfBounds);
        let misaligned = DeviceArg::Mem { mem: DeviceMem(1), offset: 2, len: 400 };
        assert_eq!(check_footprint("fill", &[misaligned, a, n(1)]).unwrap_err().kind, ErrorKind::InvalidArgument);
        let u = |v| DeviceArg::Scalar(KernelArg::U32(v));
        let ok = [u(2), u(3), u(4), a, mem(32), mem(48), a, mem(24)];
        assert!(check_footprint("sgemm", &ok).is_ok());
        let mut small_c = ok;
        small_c[7] = mem(20);
        assert_eq!(check_footprint("sgemm", &small_c).unwrap_err().kind, ErrorKind::OutOfBounds);
        for (name, _) in KERNELS {
            assert_ne!(check_footprint(name, &[]).unwrap_err().kind, ErrorKind::UnknownKernel, "{name}");
        }
    }

    #[test]
    fn every_kernel_is_found() {
        for (name, params) in KERNELS {
            assert_eq!(lookup(name).unwrap().1, *params);
        }
        assert!(lookup("nope").is_none());
    }
}

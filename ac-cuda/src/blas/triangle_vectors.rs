//! Level-2 BLAS with an `n x n` matrix stored as one triangle (`uplo` 0 lower, 1 upper), each
//! one or two gemms on the builtin kernels, as [`super::vectors`] does the others:
//!
//! | call | as a gemm |
//! |---|---|
//! | `symv`, `hemv`: `y = alpha A x + beta y` | `y^T (1 x n, ld incy) = alpha x^T A^T + beta y^T`, A read from its triangle (`blas_<t>gemm_tri`) |
//! | `trsv`: `op(A) x = b`, `x` over `b` | the builtin trsm (`blas_<t>trsm`): `x` a column with increment 1 (any `op`), else `x^T op(A)^T = b^T` on the right (`op` N or T) |
//! | `trmv`: `x = op(A) x` | `x^T = x^T op(A)^T` (`op` N or T), or with increment 1 `x = op(A) x` as columns (any `op`); B a copy of `x` |
//! | `syr`, `her`: `A = alpha x x^T + A` (`x x^H`, alpha real) | [`super::vectors`]'s ger on A's triangle (`blas_<t>gemmt`) |
//! | `syr2`, `her2`: `A = alpha x y^T + alpha y x^T + A` (`alpha x y^H + conj(alpha) y x^H`) | two of them |
//!
//! `her` and `her2` then make A's diagonal real, as cuBLAS does. A gemm (or a solve) cannot
//! conjugate a row without transposing it, so `her`'s and `her2`'s strided vectors, and `x` of
//! `trmv` and `trsv` with `op` C, go through a contiguous copy ([`super::contiguous`]), as does
//! every vector BLAS reads backwards (a negative increment). `trmv`'s copy of `x`, and those
//! contiguous copies, are work a graph does not record: while its stream captures, such a call
//! is refused.
//! `alpha` 0 leaves A as it is (`syr`, `her`, ...), as reference BLAS returns at once.

use std::ffi::c_int;

use super::contiguous::{forwards, in_place, read_through_copy, Along, Contiguous};
use super::gemm::{self, launch_reading, launch_triangle, product, scalar_parts, Operand, Precision, Reading, Scalar};
use super::rank_k::zero_diagonal_imaginary;
use super::structured::{copy_of, form, Kind};
use super::trsm::{self, TrsmCall};
use super::vectors::ger_call;
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Refuses what cuBLAS refuses of a call on an `n x n` triangle: a `uplo` but 0 or 1, a
/// negative `n`, an `lda` below `n`, an increment of 0.
pub(super) fn check(what: &str, uplo: c_int, n: c_int, lda: c_int, incs: &[c_int]) -> CuResult<()> {
    if !(0..=1).contains(&uplo) || n < 0 || lda < n.max(1) || incs.contains(&0) {
        let why = format!("{what}: uplo {uplo}, n {n}, lda {lda}, increments {incs:?}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    Ok(())
}

/// Checks a trmv or trsv call (`what`) as cuBLAS does, and what the shim serves. Gives A's
/// kind.
pub(super) fn triangular(
    what: &str,
    [uplo, trans, diag]: [c_int; 3],
    n: c_int,
    lda: c_int,
    incx: c_int,
) -> CuResult<Kind> {
    // cuBLAS's refusals (INVALID_VALUE) before what the shim does not serve.
    let kind = match (trans, diag) {
        (0..=2, 0) => Kind::Triangular,
        (0..=2, 1) => Kind::UnitTriangular,
        _ => return Err(Error::said(code::INVALID_VALUE, format!("{what}: trans {trans}, diag {diag}"))),
    };
    check(what, uplo, n, lda, &[incx])?;
    Ok(kind)
}

/// `symv` (`kind` symmetric) or `hemv` (Hermitian) on `target`, `A` program memory or (`spmv`,
/// `hpmv`) a buffer of the shim's.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
pub(super) unsafe fn symv(
    target: Target,
    precision: Precision,
    kind: Kind,
    [uplo, n]: [c_int; 2],
    alpha: Scalar,
    (a, lda): (Operand, c_int),
    (x, incx): (u64, c_int),
    beta: Scalar,
    (y, incy): (u64, c_int),
) -> CuResult<()> {
    check("symv", uplo, n, lda, &[incx, incy])?;
    if n == 0 {
        return Ok(());
    }
    let vectors = [Along::read(precision, n, (x, incx)), Along::written(precision, n, (y, incy))];
    forwards(target, "symv", vectors, |[(x, incx), (y, incy)]| {
        // y^T = x^T A^T: A, the gemm's B, completed from its triangle and then transposed.
        let matrices = [Operand::Memory(x), a, Operand::Memory(y)];
        let call = product(precision, [0, 1], [1, n, n], alpha, matrices, [incx, lda, incy], beta);
        launch_reading(target, call, Reading::Structured(form(1, kind, uplo)))
    })
}

/// `trmv` on `target`: `x = op(A) x`, `A` triangular (`unit`: its diagonal ones), program
/// memory or (`tpmv`) a buffer of the shim's.
pub(super) unsafe fn trmv(
    target: Target,
    precision: Precision,
    [uplo, trans, diag]: [c_int; 3],
    n: c_int,
    (a, lda): (Operand, c_int),
    (x, incx): (u64, c_int),
) -> CuResult<()> {
    let kind = triangular("trmv", [uplo, trans, diag], n, lda, incx)?;
    if n == 0 {
        return Ok(());
    }
    if read_through_copy(precision, trans, incx) {
        let codes = [uplo, trans, diag];
        return in_place(target, precision, "trmv", n, (x, incx), |x| trmv(target, precision, codes, n, (a, lda), x));
    }
    let (one, zero, x_at) = (Scalar::Value(1.0), Scalar::Value(0.0), Operand::Memory(x));
    let (mut call, operand) = if incx == 1 {
        // x (n x 1) = op(A) x: A the gemm's A.
        (product(precision, [trans, 0], [n, 1, n], one, [a, x_at, x_at], [lda, n, n], zero), 0)
    } else {
        // x^T = x^T op(A)^T: op(A)^T is A's transpose for N, A for T; A the gemm's B.
        let trans_b = c_int::from(trans == 0);
        (product(precision, [0, trans_b], [1, n, n], one, [x_at, a, x_at], [incx, lda, incx], zero), 1)
    };
    // The product reads x while it writes it: x's old values (C's span) through a copy.
    let len = gemm::check(&call)?.footprints()[2] * precision.bytes() as u64;
    let copy = copy_of(target, x, len)?;
    call.matrices[1 - operand as usize] = Operand::Slot(copy.at(0));
    launch_reading(target, call, Reading::Structured(form(operand, kind, uplo)))
}

/// `trsv` on `target`: `op(A) x = b` solved over `b` (`x`), `A` triangular (`diag` 1: its
/// diagonal ones), program memory or (`tpsv`) a buffer of the shim's.
pub(super) unsafe fn trsv(
    target: Target,
    precision: Precision,
    [uplo, trans, diag]: [c_int; 3],
    n: c_int,
    (a, lda): (Operand, c_int),
    (x, incx): (u64, c_int),
) -> CuResult<()> {
    triangular("trsv", [uplo, trans, diag], n, lda, incx)?;
    if n == 0 {
        return Ok(());
    }
    if read_through_copy(precision, trans, incx) {
        let codes = [uplo, trans, diag];
        return in_place(target, precision, "trsv", n, (x, incx), |x| trsv(target, precision, codes, n, (a, lda), x));
    }
    let alpha = Scalar::Value(1.0);
    let call = if incx == 1 {
        // x an n x 1 column, solved on the left.
        TrsmCall { precision, codes: [0, uplo, trans, diag], m: n, n: 1, alpha, a, lda, b: x, ldb: n.max(1) }
    } else {
        // x^T op'(A) = b^T on the right, op'(A)^T = op(A): op' is T for N, N for T.
        let trans = c_int::from(trans == 0);
        TrsmCall { precision, codes: [1, uplo, trans, diag], m: 1, n, alpha, a, lda, b: x, ldb: incx }
    };
    trsm::launch(target, call)
}

/// `syr` and `syr2` (`y` given), or with `hermitian` `her` and `her2`, on `target`: A's
/// triangle (program memory or, `spr`, a buffer of the shim's) updated by ger's products.
/// Gives whether the caller must now make A's diagonal real (a Hermitian update was made, as
/// cuBLAS then does).
#[allow(clippy::too_many_arguments)] // BLAS's arguments
pub(super) unsafe fn rank_update(
    target: Target,
    precision: Precision,
    hermitian: bool,
    [uplo, n]: [c_int; 2],
    alpha: Scalar,
    x: (u64, c_int),
    y: Option<(u64, c_int)>,
    (a, lda): (Operand, c_int),
) -> CuResult<bool> {
    let incs: Vec<c_int> = [Some(x), y].into_iter().flatten().map(|(_, inc)| inc).collect();
    check(if y.is_some() { "syr2" } else { "syr" }, uplo, n, lda, &incs)?;
    if n == 0 {
        return Ok(false);
    }
    // her's alpha is real; her2's and the symmetric ones' of the element type.
    let alpha_type = if hermitian && y.is_none() { precision.real() } else { precision };
    let alpha = scalar_parts(target, alpha_type, alpha)?;
    if alpha == [0.0; 2] {
        return Ok(false);
    }
    let (conjugate, second) = (hermitian && precision.is_complex(), [alpha[0], -alpha[1]]);
    // Each vector is conjugated in a product (her2's in one each): a strided one as a copy; and
    // one read backwards as a forward copy.
    let what = match (conjugate, y.is_some()) {
        (true, true) => "her2",
        (true, false) => "her",
        (false, true) => "syr2 of a vector read backwards",
        (false, false) => "syr of a vector read backwards",
    };
    let width = precision.bytes() as u64;
    let gather = |v: (u64, c_int)| Contiguous::gathered_if(v.1 < 0 || conjugate && v.1 != 1, target, width, what, n, v);
    let copies = (gather(x)?, y.map(gather).transpose()?);
    let x = copies.0.vector();
    let y = copies.1.as_ref().map(Contiguous::vector);
    let products: Vec<(_, _, [f64; 2])> = match y {
        None => vec![(x, x, alpha)],
        // her2's second product is by conj(alpha).
        Some(y) => vec![(x, y, alpha), (y, x, if conjugate { second } else { alpha })],
    };
    for (u, v, alpha) in products {
        if let Some(call) = ger_call(precision, [n, n], Scalar::Parts(alpha), u, v, (a, lda), conjugate)? {
            launch_triangle(target, call, uplo)?;
        }
    }
    Ok(conjugate)
}

/// [`rank_update`] of the program's `(a, lda)`, its diagonal then made real if it must be.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn rank_update_in_memory(
    h: usize,
    precision: Precision,
    hermitian: bool,
    [uplo, n]: [c_int; 2],
    alpha: Scalar,
    x: (u64, c_int),
    y: Option<(u64, c_int)>,
    (a, lda): (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    if rank_update(target, precision, hermitian, [uplo, n], alpha, x, y, (Operand::Memory(a), lda))? {
        zero_diagonal_imaginary(target, precision, (a, lda), n)?;
    }
    Ok(())
}

/// Defines `cublas<T>symv` (or `hemv`, `$kind` Hermitian) for element type `$t`.
macro_rules! symv_entry {
    ($name:ident, $t:ty, $precision:expr, $kind:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()));
            guard(stringify!($name), || {
                let (target, a) = (handle(h)?.target(), (Operand::Memory(a), lda));
                symv(target, $precision, $kind, [uplo, n], alpha, a, (x, incx), beta, (y, incy))
            })
        }
    };
}

/// Defines `cublas<T>trmv` (or, `$routine` `trsv`, `cublas<T>trsv`) for element type
/// `$precision`.
macro_rules! trmv_entry {
    ($name:ident, $precision:expr, $routine:ident) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            n: c_int,
            a: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
        ) -> u32 {
            guard(stringify!($name), || {
                let (target, a) = (handle(h)?.target(), (Operand::Memory(a), lda));
                $routine(target, $precision, [uplo, trans, diag], n, a, (x, incx))
            })
        }
    };
}

/// Defines `cublas<T>syr` (or `her`, `$hermitian`), `alpha` of type `$alpha`.
macro_rules! syr_entry {
    ($name:ident, $alpha:ty, $precision:expr, $hermitian:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $alpha,
            x: u64,
            incx: c_int,
            a: u64,
            lda: c_int,
        ) -> u32 {
            let (alpha, x, a) = (Scalar::At(alpha.cast()), (x, incx), (a, lda));
            guard(stringify!($name), || rank_update_in_memory(h, $precision, $hermitian, [uplo, n], alpha, x, None, a))
        }
    };
}

/// Defines `cublas<T>syr2` (or `her2`, `$hermitian`) for element type `$t`.
macro_rules! syr2_entry {
    ($name:ident, $t:ty, $precision:expr, $hermitian:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $t,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            a: u64,
            lda: c_int,
        ) -> u32 {
            let (alpha, x, y, a) = (Scalar::At(alpha.cast()), (x, incx), Some((y, incy)), (a, lda));
            guard(stringify!($name), || rank_update_in_memory(h, $precision, $hermitian, [uplo, n], alpha, x, y, a))
        }
    };
}

symv_entry!(cublasSsymv_v2, f32, Precision::Single, Kind::Symmetric);
symv_entry!(cublasDsymv_v2, f64, Precision::Double, Kind::Symmetric);
symv_entry!(cublasCsymv_v2, [f32; 2], Precision::ComplexSingle, Kind::Symmetric);
symv_entry!(cublasZsymv_v2, [f64; 2], Precision::ComplexDouble, Kind::Symmetric);
symv_entry!(cublasChemv_v2, [f32; 2], Precision::ComplexSingle, Kind::Hermitian);
symv_entry!(cublasZhemv_v2, [f64; 2], Precision::ComplexDouble, Kind::Hermitian);
trmv_entry!(cublasStrmv_v2, Precision::Single, trmv);
trmv_entry!(cublasDtrmv_v2, Precision::Double, trmv);
trmv_entry!(cublasCtrmv_v2, Precision::ComplexSingle, trmv);
trmv_entry!(cublasZtrmv_v2, Precision::ComplexDouble, trmv);
trmv_entry!(cublasStrsv_v2, Precision::Single, trsv);
trmv_entry!(cublasDtrsv_v2, Precision::Double, trsv);
trmv_entry!(cublasCtrsv_v2, Precision::ComplexSingle, trsv);
trmv_entry!(cublasZtrsv_v2, Precision::ComplexDouble, trsv);
syr_entry!(cublasSsyr_v2, f32, Precision::Single, false);
syr_entry!(cublasDsyr_v2, f64, Precision::Double, false);
syr_entry!(cublasCsyr_v2, [f32; 2], Precision::ComplexSingle, false);
syr_entry!(cublasZsyr_v2, [f64; 2], Precision::ComplexDouble, false);
syr_entry!(cublasCher_v2, f32, Precision::ComplexSingle, true);
syr_entry!(cublasZher_v2, f64, Precision::ComplexDouble, true);
syr2_entry!(cublasSsyr2_v2, f32, Precision::Single, false);
syr2_entry!(cublasDsyr2_v2, f64, Precision::Double, false);
syr2_entry!(cublasCsyr2_v2, [f32; 2], Precision::ComplexSingle, false);
syr2_entry!(cublasZsyr2_v2, [f64; 2], Precision::ComplexDouble, false);
syr2_entry!(cublasCher2_v2, [f32; 2], Precision::ComplexSingle, true);
syr2_entry!(cublasZher2_v2, [f64; 2], Precision::ComplexDouble, true);

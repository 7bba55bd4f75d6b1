//! Level-1 and level-2 BLAS on `f32`, `f64` and complex vectors, each done as one gemm (the
//! backend's builtin kernels, [`super::gemm::launch`]), so that they need no kernels of their
//! own:
//!
//! | call | as a gemm (`C = alpha op(A) op(B) + beta C`) |
//! |---|---|
//! | `dot(x, y)` (`dotu`) | `1 x 1 = x (1 x n, ld incx) . y^T (y 1 x n, ld incy)` |
//! | `dotc(x, y)` | `1 x 1 = y (1 x n, ld incy) . x^H (x 1 x n, ld incx)` |
//! | `nrm2(x)` | `sqrt(dotc(x, x))`, the root of its real part taken here |
//! | `axpy(alpha, x, y)` | `y (1 x n, ld incy) = alpha [1] x + y` |
//! | `copy(x, y)` | `y = [1] x` |
//! | `scal(alpha, x)` | `x = alpha x`, a product of no terms (`k = 0`, `beta = alpha`) |
//! | `gemv(op, A, x, y)`, op `N` or `T` | `y^T (1 x rows, ld incy) = alpha x^T op(A)^T + beta y^T` |
//! | `gemv(C, A, x, y)` | `y (n x 1) = alpha A^H x + beta y`, `x` a transposed `1 x m` row |
//! | `ger(A, x, y)` (`geru`) | `A = alpha x y^T + A` (`k = 1`) |
//! | `gerc(A, x, y)` | `A = alpha x y^H + A`, `y` a conjugate-transposed `n x 1` column |
//!
//! A strided vector is a one-row matrix whose leading dimension is its increment, so strided
//! vectors need nothing more; `[1]` is a constant of the device's scratch buffer. A gemm has no
//! operation that conjugates without transposing, so where the table conjugates a column
//! (`gemv`'s `y` for `CUBLAS_OP_C`, `gerc`'s `y`) a strided one is a strided batch of `n`
//! products instead, one an element of it: `y_j = alpha (A's column j)^H x + beta y_j`, and `A`'s
//! column `j` plus `alpha x conj(y_j)`. A vector BLAS reads backwards (a negative increment) is
//! read forwards from a copy ([`super::contiguous`]), but for two read in pairs that are both
//! backwards, which pair as both forwards. A result bound for the host (`dot` in
//! `CUBLAS_POINTER_MODE_HOST`) and every `nrm2` (whose root is taken here) are computed into
//! the scratch buffer and read back, so the call waits, as cuBLAS's does. `swap` and the
//! rotations are two gemms each ([`super::rotations`]).

use std::ffi::{c_int, c_longlong, c_void};

use ac_proto::backend::builtin::GemmElement;

use super::contiguous::{forwards, launch_forwards, pairwise, Along};
use super::gemm::{launch, product, scalar_value, GemmCall, Operand, Precision, Scalar, Types};
use super::{guard, handle, Target};
use crate::builtins::builtins;
use crate::error::{code, CuResult, Error};
use crate::managed::calls::at_device_memory;
use crate::memory::host_to_device;

/// Refuses an increment BLAS's level 1 allows that this shim does not serve: 0 (one element
/// taken `n` times).
pub(super) fn served_increments(incs: &[c_int]) -> CuResult<()> {
    match incs.contains(&0) {
        true => Err(Error::said(code::NOT_SUPPORTED, "increment 0: one element taken n times is not served")),
        false => Ok(()),
    }
}

/// The lengths of `x` and `y` in `y = op(A) x`, `A` being `m x n` (`trans` 0: N).
pub(super) fn gemv_lengths(trans: c_int, [m, n]: [c_int; 2]) -> [c_int; 2] {
    if trans == 0 {
        [n, m]
    } else {
        [m, n]
    }
}

/// Writes `bytes` (one element) to the program's `result`: host or device memory as the
/// pointer mode says.
pub(super) unsafe fn store(target: Target, result: *mut c_void, bytes: &[u8]) -> CuResult<()> {
    if result.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "a result's pointer is null"));
    }
    if target.host_pointers() {
        crate::managed::settle_host(result as u64)?;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), result.cast::<u8>(), bytes.len());
        Ok(())
    } else {
        at_device_memory(result as u64, || host_to_device(result as u64, bytes.as_ptr().cast(), bytes.len()))
    }
}

/// What a one-element gemm leaves in the program's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Finish {
    /// The element as computed (`dot`).
    Element,
    /// The square root of its real part, as a real of its precision (`nrm2`).
    Norm,
    /// The square root, rounded to binary16 or bfloat16 (`cublasNrm2Ex` of such a vector).
    NarrowNorm(GemmElement),
}

/// Runs a gemm whose `C` is one element into the program's `result`, finished as `finish`
/// says: in device memory straight (an element as computed), else through the scratch
/// buffer's slot.
unsafe fn into_result(target: Target, mut call: GemmCall, result: *mut c_void, finish: Finish) -> CuResult<()> {
    if result.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "result is null"));
    }
    if finish == Finish::Element && !target.host_pointers() {
        call.matrices[2] = Operand::Memory(result as u64);
        return launch(target, call);
    }
    let mut bytes = [0u8; 16];
    let width = call.types.result_bytes();
    let into_slot =
        |slot| launch(target, GemmCall { matrices: [call.matrices[0], call.matrices[1], Operand::Slot(slot)], ..call });
    builtins(target.device)?.through_result(into_slot, &mut bytes[..width])?;
    match finish {
        Finish::Element => store(target, result, &bytes[..width]),
        Finish::Norm => {
            let precision = call.types.precision;
            let norm = precision.parts(&bytes)[0].sqrt();
            store(target, result, &precision.real().encode(norm))
        }
        Finish::NarrowNorm(element) => {
            let mut narrow = [0u8; 2];
            element.store(call.types.precision.parts(&bytes)[0].sqrt() as f32, &mut narrow);
            store(target, result, &narrow)
        }
    }
}

/// `result = x . y`, or `conj(x) . y` (`conjugate`, cuBLAS's `dotc`), of `types` (the `Ex`
/// forms' half-precision vectors among them).
#[allow(clippy::too_many_arguments)] // BLAS's arguments
pub(super) unsafe fn dot(
    h: usize,
    types: Types,
    n: c_int,
    (x, incx): (u64, c_int),
    (y, incy): (u64, c_int),
    conjugate: bool,
    result: *mut c_void,
    finish: Finish,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if n <= 0 {
        return if result.is_null() {
            Err(Error::Code(code::INVALID_VALUE))
        } else {
            let zero = [0u8; 16];
            match finish {
                Finish::Element => store(target, result, &zero[..types.result_bytes()]),
                Finish::Norm => store(target, result, &zero[..types.precision.real().bytes()]),
                Finish::NarrowNorm(element) => store(target, result, &zero[..element.bytes() as usize]),
            }
        };
    }
    if result.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "result is null"));
    }
    served_increments(&[incx, incy])?;
    let (x, y) = pairwise((x, incx), (y, incy));
    // dot_call's A and B: x and y, or for dotc y and x.
    let [a, b, _] = types.widths();
    let [x_width, y_width] = if conjugate { [b, a] } else { [a, b] };
    let vectors = [(x, x_width), (y, y_width)].map(|(vector, width)| Along::of_width(width, n, vector, false));
    forwards(target, "dot", vectors, |[x, y]| into_result(target, dot_call(types, n, x, y, conjugate), result, finish))
}

/// The gemm of a dot product of `n` elements (its result, C, left to the caller).
fn dot_call(types: Types, n: c_int, x: (u64, c_int), y: (u64, c_int), conjugate: bool) -> GemmCall {
    // dotc: y times x conjugate-transposed (x stored as a 1 x n row, read as an n x 1 column).
    let ([a, b], trans_b) = if conjugate { ([y, x], 2) } else { ([x, y], 1) };
    let one = Scalar::Value(1.0);
    let matrices = [Operand::Memory(a.0), Operand::Memory(b.0), Operand::One];
    let call = product(types.precision, [0, trans_b], [1, 1, n], one, matrices, [a.1, b.1, 1], Scalar::Value(0.0));
    GemmCall { types, ..call }
}

/// `y = alpha x + beta y` (axpy: `beta` 1; copy: `alpha` 1, `beta` 0) of `types` (an `Ex`
/// form's binary16 or bfloat16 vectors: [`axpby_call`]'s `A` is the constant one, an `f32`).
pub(super) unsafe fn axpby(
    h: usize,
    types: Types,
    n: c_int,
    alpha: Scalar,
    (x, incx): (u64, c_int),
    beta: f64,
    (y, incy): (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    if n <= 0 {
        return Ok(());
    }
    served_increments(&[incx, incy])?;
    let (x, y) = pairwise((x, incx), (y, incy));
    // axpby_call's B and C.
    let [_, x_width, y_width] = types.widths();
    let vectors = [Along::of_width(x_width, n, x, false), Along::of_width(y_width, n, y, true)];
    forwards(target, "axpy", vectors, |[x, y]| {
        let call = axpby_call(types.precision, n, alpha, x, Scalar::Value(beta), y);
        launch(target, GemmCall { types, ..call })
    })
}

/// The gemm of `y = alpha x + beta y` over `n` elements: `y (1 x n, ld incy) = alpha [1] x + beta y`.
pub(super) fn axpby_call(
    precision: Precision,
    n: c_int,
    alpha: Scalar,
    (x, incx): (u64, c_int),
    beta: Scalar,
    (y, incy): (u64, c_int),
) -> GemmCall {
    let matrices = [Operand::One, Operand::Memory(x), Operand::Memory(y)];
    product(precision, [0; 2], [1, n, 1], alpha, matrices, [1, incx, incy], beta)
}

/// `x = alpha x`, `x` of `types` (C's; A and B are not read).
pub(super) unsafe fn scal(h: usize, types: Types, n: c_int, alpha: Scalar, x: u64, incx: c_int) -> CuResult<()> {
    let target = handle(h)?.target();
    // BLAS does nothing for these.
    if n <= 0 || incx <= 0 {
        return Ok(());
    }
    let matrices = [Operand::One, Operand::One, Operand::Memory(x)];
    let call = product(types.precision, [0; 2], [1, n, 0], Scalar::Value(0.0), matrices, [1, 1, incx], alpha);
    launch(target, GemmCall { types, ..call })
}

/// `x = alpha x` for a complex `x` and a real `alpha` (`cublasCsscal`, `cublasZdscal`).
pub(super) unsafe fn scal_by_real(
    h: usize,
    precision: Precision,
    n: c_int,
    alpha: *const c_void,
    x: u64,
    incx: c_int,
) -> CuResult<()> {
    if n <= 0 || incx <= 0 {
        return Ok(());
    }
    let alpha = scalar_value(handle(h)?.target(), precision.real(), Scalar::At(alpha))?;
    scal(h, Types::uniform(precision), n, Scalar::Value(alpha), x, incx)
}

/// `y = alpha op(A) x + beta y` on handle `h`'s target ([`gemv_call`]), its vectors read
/// forwards.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn gemv(
    h: usize,
    precision: Precision,
    trans: c_int,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    a: (Operand, c_int),
    x: (u64, c_int),
    beta: Scalar,
    y: (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    let [x_len, y_len] = gemv_lengths(trans, [m, n]);
    let vectors = [Along::read(precision, x_len, x), Along::written(precision, y_len, y)];
    launch_forwards(target, "gemv", vectors, |[x, y]| gemv_call(precision, trans, [m, n], alpha, a, x, beta, y))
}

/// `A = alpha x y^T + A` (`y^H`: `conjugate`) on handle `h`'s target ([`ger_call`]), its
/// vectors read forwards.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn ger(
    h: usize,
    precision: Precision,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    x: (u64, c_int),
    y: (u64, c_int),
    a: (Operand, c_int),
    conjugate: bool,
) -> CuResult<()> {
    let target = handle(h)?.target();
    let vectors = [Along::read(precision, m, x), Along::read(precision, n, y)];
    launch_forwards(target, "ger", vectors, |[x, y]| ger_call(precision, [m, n], alpha, x, y, a, conjugate))
}

/// The gemm of `y = alpha op(A) x + beta y`, `A` being `m x n` (program memory, or a buffer of
/// the shim's: a band matrix's copy, `tbsv`) (`None`: it computes nothing), checked as cuBLAS
/// checks the call.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
pub(super) fn gemv_call(
    precision: Precision,
    trans: c_int,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    (a, lda): (Operand, c_int),
    (x, incx): (u64, c_int),
    beta: Scalar,
    (y, incy): (u64, c_int),
) -> CuResult<Option<GemmCall>> {
    if !(0..=2).contains(&trans) || m < 0 || n < 0 || lda < m.max(1) || incx == 0 || incy == 0 {
        let why = format!("gemv: trans {trans}, m {m}, n {n}, lda {lda}, incx {incx}, incy {incy}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if m == 0 || n == 0 {
        return Ok(None);
    }
    let call = if trans == 2 && precision.is_complex() && incy == 1 {
        // y (n x 1) = alpha A^H x + beta y: x a 1 x m row read transposed, y a column.
        let matrices = [a, Operand::Memory(x), Operand::Memory(y)];
        product(precision, [2, 1], [n, 1, m], alpha, matrices, [lda, incx, n], beta)
    } else if trans == 2 && precision.is_complex() {
        // A strided y is no column: each y_j (1 x 1, incy apart) = alpha (A's column j)^H x +
        // beta y_j, one strided batch of n products of m terms, x the same row in each.
        let matrices = [a, Operand::Memory(x), Operand::Memory(y)];
        let one_each = product(precision, [2, 1], [1, 1, m], alpha, matrices, [lda, incx, 1], beta);
        GemmCall { stride: [lda, 0, incy].map(c_longlong::from), batch: n, ..one_each }
    } else {
        // y^T = alpha x^T op(A)^T + beta y^T: op(A)^T is A for op = T, A's transpose for op = N.
        let (rows, cols) = if trans == 0 { (m, n) } else { (n, m) };
        let matrices = [Operand::Memory(x), a, Operand::Memory(y)];
        let trans = [0, c_int::from(trans == 0)];
        product(precision, trans, [1, rows, cols], alpha, matrices, [incx, lda, incy], beta)
    };
    Ok(Some(call))
}

/// The gemm of `A = alpha x y^T + A`, or `alpha x y^H + A` (`conjugate`, cuBLAS's `gerc`), `A`
/// being `m x n` (program memory, or a buffer of the shim's: a packed matrix unpacked, `spr`)
/// (`None`: it computes nothing), checked as cuBLAS checks the call.
pub(super) fn ger_call(
    precision: Precision,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    (x, incx): (u64, c_int),
    (y, incy): (u64, c_int),
    (a, lda): (Operand, c_int),
    conjugate: bool,
) -> CuResult<Option<GemmCall>> {
    if m < 0 || n < 0 || incx == 0 || incy == 0 || lda < m.max(1) {
        let why = format!("ger: m {m}, n {n}, incx {incx}, incy {incy}, lda {lda}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if m == 0 || n == 0 {
        return Ok(None);
    }
    let (matrices, one) = ([Operand::Memory(x), Operand::Memory(y), a], Scalar::Value(1.0));
    if conjugate && incy != 1 {
        // A strided y is no column: each column j of A (m x 1, lda apart) += alpha x conj(y_j),
        // one strided batch of n products of one term, x the same row in each.
        let one_each = product(precision, [1, 2], [m, 1, 1], alpha, matrices, [incx, 1, lda], one);
        return Ok(Some(GemmCall { stride: [0, incy, lda].map(c_longlong::from), batch: n, ..one_each }));
    }
    // y^H is y stored as an n x 1 column, conjugate-transposed; y^T is y as a 1 x n row.
    let (trans_b, ldb) = if conjugate { (2, n.max(1)) } else { (0, incy) };
    Ok(Some(product(precision, [1, trans_b], [m, n, 1], alpha, matrices, [incx, ldb, lda], one)))
}

/// Defines `cublas<T>dot` (`dotu` for complex types) or, `$conjugate`, `cublas<T>dotc`.
macro_rules! dot_entry {
    ($name:ident, $t:ty, $precision:expr, $conjugate:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            h: usize,
            n: c_int,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            result: *mut $t,
        ) -> u32 {
            let (types, x, y) = (Types::uniform($precision), (x, incx), (y, incy));
            guard(stringify!($name), || dot(h, types, n, x, y, $conjugate, result.cast(), Finish::Element))
        }
    };
}

/// Defines `cublas<T>ger` (`geru` for complex types) or, `$conjugate`, `cublas<T>gerc`.
macro_rules! ger_entry {
    ($name:ident, $t:ty, $precision:expr, $conjugate:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            a: u64,
            lda: c_int,
        ) -> u32 {
            let (x, y, a) = ((x, incx), (y, incy), (Operand::Memory(a), lda));
            let alpha = Scalar::At(alpha.cast());
            guard(stringify!($name), || ger(h, $precision, [m, n], alpha, x, y, a, $conjugate))
        }
    };
}

/// Defines the entry points of each level-1 and level-2 function of element type `$t` (a
/// complex one as `[f32; 2]` or `[f64; 2]`), `$real` its real type (`nrm2`'s result).
macro_rules! typed {
    ($t:ty, $real:ty, $precision:expr, $dot:ident, $nrm2:ident, $axpy:ident, $copy:ident, $scal:ident, $gemv:ident, $ger:ident) => {
        dot_entry!($dot, $t, $precision, false);

        #[no_mangle]
        pub unsafe extern "C" fn $nrm2(h: usize, n: c_int, x: u64, incx: c_int, result: *mut $real) -> u32 {
            // BLAS answers 0 for an increment below 1.
            let n = if incx <= 0 { 0 } else { n };
            let (types, x) = (Types::uniform($precision), (x, incx));
            guard(stringify!($nrm2), || dot(h, types, n, x, x, true, result.cast(), Finish::Norm))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $axpy(
            h: usize,
            n: c_int,
            alpha: *const $t,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let (alpha, x, y) = (Scalar::At(alpha.cast()), (x, incx), (y, incy));
            guard(stringify!($axpy), || axpby(h, Types::uniform($precision), n, alpha, x, 1.0, y))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $copy(h: usize, n: c_int, x: u64, incx: c_int, y: u64, incy: c_int) -> u32 {
            let (x, y) = ((x, incx), (y, incy));
            guard(stringify!($copy), || axpby(h, Types::uniform($precision), n, Scalar::Value(1.0), x, 0.0, y))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $scal(h: usize, n: c_int, alpha: *const $t, x: u64, incx: c_int) -> u32 {
            guard(stringify!($scal), || scal(h, Types::uniform($precision), n, Scalar::At(alpha.cast()), x, incx))
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $gemv(
            h: usize,
            trans: c_int,
            m: c_int,
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
            let (a, x, y) = ((Operand::Memory(a), lda), (x, incx), (y, incy));
            guard(stringify!($gemv), || gemv(h, $precision, trans, [m, n], alpha, a, x, beta, y))
        }

        ger_entry!($ger, $t, $precision, false);
    };
}

typed!(
    f32,
    f32,
    Precision::Single,
    cublasSdot_v2,
    cublasSnrm2_v2,
    cublasSaxpy_v2,
    cublasScopy_v2,
    cublasSscal_v2,
    cublasSgemv_v2,
    cublasSger_v2
);
typed!(
    f64,
    f64,
    Precision::Double,
    cublasDdot_v2,
    cublasDnrm2_v2,
    cublasDaxpy_v2,
    cublasDcopy_v2,
    cublasDscal_v2,
    cublasDgemv_v2,
    cublasDger_v2
);
typed!(
    [f32; 2],
    f32,
    Precision::ComplexSingle,
    cublasCdotu_v2,
    cublasScnrm2_v2,
    cublasCaxpy_v2,
    cublasCcopy_v2,
    cublasCscal_v2,
    cublasCgemv_v2,
    cublasCgeru_v2
);
typed!(
    [f64; 2],
    f64,
    Precision::ComplexDouble,
    cublasZdotu_v2,
    cublasDznrm2_v2,
    cublasZaxpy_v2,
    cublasZcopy_v2,
    cublasZscal_v2,
    cublasZgemv_v2,
    cublasZgeru_v2
);

/// Defines the complex-only entry points of element type `$t`, `$real` its real type: `dotc`,
/// `gerc`, and `scal` by a real scalar.
macro_rules! complex_only {
    ($t:ty, $real:ty, $precision:expr, $dotc:ident, $scal_by_real:ident, $gerc:ident) => {
        dot_entry!($dotc, $t, $precision, true);

        #[no_mangle]
        pub unsafe extern "C" fn $scal_by_real(h: usize, n: c_int, alpha: *const $real, x: u64, incx: c_int) -> u32 {
            guard(stringify!($scal_by_real), || scal_by_real(h, $precision, n, alpha.cast(), x, incx))
        }

        ger_entry!($gerc, $t, $precision, true);
    };
}

complex_only!([f32; 2], f32, Precision::ComplexSingle, cublasCdotc_v2, cublasCsscal_v2, cublasCgerc_v2);
complex_only!([f64; 2], f64, Precision::ComplexDouble, cublasZdotc_v2, cublasZdscal_v2, cublasZgerc_v2);

#[cfg(test)]
mod tests {
    use super::super::gemm::at;
    use super::super::gemm::check;
    use super::*;

    /// Device addresses of A, x and y (never dereferenced: the calls are only built).
    const A: u64 = 0x10_0000;
    const X: u64 = 0x20_0000;
    const Y: u64 = 0x30_0000;
    const ONE: Scalar = Scalar::Value(1.0);

    /// The elements each matrix of `call` spans (A, B, C), once cuBLAS's checks accept it.
    fn spans(call: &GemmCall) -> [u64; 3] {
        check(call).expect("a call cuBLAS takes").footprints()
    }

    #[test]
    fn dot_products_read_each_vector_over_its_increments_and_conjugate_x() {
        let types = Types::uniform(Precision::ComplexSingle);
        // 5 elements, x 2 apart (9 elements spanned), y 3 apart (13).
        let dotu = dot_call(types, 5, (X, 2), (Y, 3), false);
        assert_eq!((at(dotu.matrices[0]), at(dotu.matrices[1]), dotu.trans), (X, Y, [0, 1]));
        assert_eq!(spans(&dotu), [9, 13, 1]);
        // dotc: y times x conjugate-transposed.
        let dotc = dot_call(types, 5, (X, 2), (Y, 3), true);
        assert_eq!((at(dotc.matrices[0]), at(dotc.matrices[1]), dotc.trans), (Y, X, [0, 2]));
        assert_eq!(spans(&dotc), [13, 9, 1]);
    }

    #[test]
    fn gemv_spans_a_padded_matrix_and_strided_vectors_for_every_operation() {
        // A 13 x 9 in rows of 16: (9 - 1) * 16 + 13 = 141 elements.
        let call = |precision, trans, incy| {
            gemv_call(precision, trans, [13, 9], ONE, (Operand::Memory(A), 16), (X, 2), ONE, (Y, incy))
                .map(|c| c.expect("a product"))
        };
        // N: x has n = 9 elements 2 apart, y m = 13 elements 3 apart (x, A, y).
        assert_eq!(spans(&call(Precision::ComplexSingle, 0, 3).unwrap()), [17, 141, 37]);
        // T: x has m elements, y n.
        assert_eq!(spans(&call(Precision::ComplexDouble, 1, 3).unwrap()), [25, 141, 25]);
        // C: A conjugate-transposed, x m elements 2 apart, y a column of n (A, x, y).
        let conjugate = call(Precision::ComplexSingle, 2, 1).unwrap();
        assert_eq!((at(conjugate.matrices[0]), conjugate.trans), (A, [2, 1]));
        assert_eq!(spans(&conjugate), [141, 25, 9]);
        // ... or, strided, a batch of n products of m terms: A's column j (lda apart) and the
        // same x, into y_j (3 apart). A real type's C is its T, for any y.
        let strided = call(Precision::ComplexSingle, 2, 3).unwrap();
        assert_eq!((strided.trans, strided.batch, strided.stride), ([2, 1], 9, [16, 0, 3]));
        assert_eq!((strided.m, strided.n, strided.k), (1, 1, 13));
        assert_eq!(spans(&strided), [141, 25, 25]);
        assert_eq!(spans(&call(Precision::Single, 2, 3).unwrap()), [25, 141, 25]);
        // Nothing to compute; refusals.
        assert!(gemv_call(Precision::Single, 0, [0, 9], ONE, (Operand::Memory(A), 1), (X, 1), ONE, (Y, 1))
            .unwrap()
            .is_none());
        assert_eq!(call(Precision::Single, 3, 1).unwrap_err().code(), code::INVALID_VALUE);
        // A vector read backwards is the caller's to read forwards ([`launch_forwards`]): the
        // gemm refuses its negative leading dimension.
        let backwards = call(Precision::Single, 0, -1).unwrap();
        assert_eq!(check(&backwards).unwrap_err().code(), code::INVALID_VALUE);
    }

    #[test]
    fn ger_spans_its_vectors_and_gerc_conjugates_y_by_its_elements_when_strided() {
        // A 11 x 7 in rows of 13: 6 * 13 + 11 = 89; x 11 elements 3 apart: 31.
        let call = |conjugate, incy| {
            ger_call(Precision::ComplexDouble, [11, 7], ONE, (X, 3), (Y, incy), (Operand::Memory(A), 13), conjugate)
                .map(|c| c.expect("a product"))
        };
        let geru = call(false, 2).unwrap();
        assert_eq!((geru.trans, spans(&geru)), ([1, 0], [31, 13, 89]));
        let gerc = call(true, 1).unwrap();
        assert_eq!((gerc.trans, spans(&gerc)), ([1, 2], [31, 7, 89]));
        // A strided y: a batch of 7 columns of A (13 apart), each x times one element of y.
        let strided = call(true, 2).unwrap();
        assert_eq!((strided.trans, strided.batch, strided.stride), ([1, 2], 7, [0, 2, 13]));
        assert_eq!((strided.m, strided.n, strided.k), (11, 1, 1));
        assert_eq!(spans(&strided), [31, 13, 89]);
        // An empty matrix is nothing to do, whatever y's increment.
        let empty = ger_call(Precision::ComplexDouble, [0, 7], ONE, (X, 3), (Y, 2), (Operand::Memory(A), 13), true);
        assert!(empty.unwrap().is_none());
    }
}

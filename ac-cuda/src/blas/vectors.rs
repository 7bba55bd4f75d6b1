//! Level-1 and level-2 BLAS on `f32` and `f64` vectors, each done as one gemm (the backend's
//! builtin kernels, [`super::gemm::launch`]), so that they need no kernels of their own:
//!
//! | call | as a gemm (`C = alpha op(A) op(B) + beta C`) |
//! |---|---|
//! | `dot(x, y)` | `1 x 1 = x (1 x n, ld incx) . y^T (y 1 x n, ld incy)` |
//! | `nrm2(x)` | `sqrt(dot(x, x))`, the root taken here |
//! | `axpy(alpha, x, y)` | `y (1 x n, ld incy) = alpha [1] x + y` |
//! | `copy(x, y)` | `y = [1] x` |
//! | `scal(alpha, x)` | `x = alpha x`, a product of no terms (`k = 0`, `beta = alpha`) |
//! | `gemv(op, A, x, y)` | `y^T (1 x rows, ld incy) = alpha x^T op(A)^T + beta y^T` |
//! | `ger(A, x, y)` | `A = alpha x y^T + A` (`k = 1`) |
//!
//! A strided vector is a one-row matrix whose leading dimension is its increment, so strided
//! vectors need nothing more; `[1]` is a constant of the device's scratch buffer. Negative
//! increments (BLAS's reversed vectors) are not served. A result bound for the host (`dot`,
//! `nrm2` in `CUBLAS_POINTER_MODE_HOST`) is computed into the scratch buffer and read back, so
//! the call waits, as cuBLAS's does.

use std::ffi::{c_int, c_void};

use super::gemm::{launch, product, GemmCall, Operand, Precision, Scalar};
use super::{guard, handle, Target};
use crate::builtins::builtins;
use crate::error::{code, CuResult, Error};
use crate::memory::host_to_device;

/// Refuses increments BLAS allows that this shim does not serve: 0 and negative ones.
fn served_increments(incs: &[c_int]) -> CuResult<()> {
    match incs.iter().find(|&&inc| inc <= 0) {
        Some(inc) => Err(Error::said(code::NOT_SUPPORTED, format!("increment {inc}: only positive ones are served"))),
        None => Ok(()),
    }
}

/// Writes `value` to the program's `result`: host or device memory as the pointer mode says.
unsafe fn store(target: Target, precision: Precision, result: *mut c_void, value: f64) -> CuResult<()> {
    let bytes = precision.encode(value);
    if target.host_pointers() {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), result.cast::<u8>(), bytes.len());
        Ok(())
    } else {
        host_to_device(result as u64, bytes.as_ptr().cast(), bytes.len())
    }
}

/// Runs a gemm whose `C` is one element, `then` applied to it, into the program's `result`: in
/// device memory straight (when `then` is nothing), else through the scratch buffer's slot.
unsafe fn into_result(
    target: Target,
    mut call: GemmCall,
    result: *mut c_void,
    then: Option<fn(f64) -> f64>,
) -> CuResult<()> {
    if result.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "result is null"));
    }
    if then.is_none() && !target.host_pointers() {
        call.matrices[2] = Operand::Memory(result as u64);
        return launch(target, call);
    }
    let device = builtins(target.device)?;
    let (slot, held) = device.result();
    call.matrices[2] = Operand::Slot(slot);
    launch(target, call)?;
    let mut bytes = [0u8; 8];
    let precision = call.types.precision;
    device.read_result(&held, &mut bytes[..precision.bytes()])?;
    let value = precision.value(&bytes);
    store(target, precision, result, then.map_or(value, |f| f(value)))
}

/// `result = x . y`.
unsafe fn dot(
    h: usize,
    precision: Precision,
    n: c_int,
    (x, incx): (u64, c_int),
    (y, incy): (u64, c_int),
    result: *mut c_void,
    then: Option<fn(f64) -> f64>,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if n <= 0 {
        return if result.is_null() {
            Err(Error::Code(code::INVALID_VALUE))
        } else {
            store(target, precision, result, 0.0)
        };
    }
    served_increments(&[incx, incy])?;
    let one = Scalar::Value(1.0);
    let matrices = [Operand::Memory(x), Operand::Memory(y), Operand::One];
    let call = product(precision, [0, 1], [1, 1, n], one, matrices, [incx, incy, 1], Scalar::Value(0.0));
    into_result(target, call, result, then)
}

/// `y = alpha x + beta y` (axpy: `beta` 1; copy: `alpha` 1, `beta` 0).
unsafe fn axpby(
    h: usize,
    precision: Precision,
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
    let matrices = [Operand::One, Operand::Memory(x), Operand::Memory(y)];
    launch(target, product(precision, [0; 2], [1, n, 1], alpha, matrices, [1, incx, incy], Scalar::Value(beta)))
}

/// `x = alpha x`.
unsafe fn scal(h: usize, precision: Precision, n: c_int, alpha: Scalar, x: u64, incx: c_int) -> CuResult<()> {
    let target = handle(h)?.target();
    // BLAS does nothing for these.
    if n <= 0 || incx <= 0 {
        return Ok(());
    }
    let matrices = [Operand::One, Operand::One, Operand::Memory(x)];
    launch(target, product(precision, [0; 2], [1, n, 0], Scalar::Value(0.0), matrices, [1, 1, incx], alpha))
}

/// `y = alpha op(A) x + beta y`, `A` being `m x n`.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn gemv(
    h: usize,
    precision: Precision,
    trans: c_int,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    (a, lda): (u64, c_int),
    (x, incx): (u64, c_int),
    beta: Scalar,
    (y, incy): (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    if !(0..=2).contains(&trans) || m < 0 || n < 0 || lda < m.max(1) || incx == 0 || incy == 0 {
        let why = format!("gemv: trans {trans}, m {m}, n {n}, lda {lda}, incx {incx}, incy {incy}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    served_increments(&[incx, incy])?;
    // y^T = alpha x^T op(A)^T + beta y^T: op(A)^T is A for op = T, A's transpose for op = N.
    let (rows, cols) = if trans == 0 { (m, n) } else { (n, m) };
    let matrices = [Operand::Memory(x), Operand::Memory(a), Operand::Memory(y)];
    let call =
        product(precision, [0, c_int::from(trans == 0)], [1, rows, cols], alpha, matrices, [incx, lda, incy], beta);
    launch(target, call)
}

/// `A = alpha x y^T + A`, `A` being `m x n`.
unsafe fn ger(
    h: usize,
    precision: Precision,
    [m, n]: [c_int; 2],
    alpha: Scalar,
    (x, incx): (u64, c_int),
    (y, incy): (u64, c_int),
    (a, lda): (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    if m < 0 || n < 0 || incx == 0 || incy == 0 || lda < m.max(1) {
        let why = format!("ger: m {m}, n {n}, incx {incx}, incy {incy}, lda {lda}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    served_increments(&[incx, incy])?;
    let matrices = [Operand::Memory(x), Operand::Memory(y), Operand::Memory(a)];
    launch(target, product(precision, [1, 0], [m, n, 1], alpha, matrices, [incx, incy, lda], Scalar::Value(1.0)))
}

/// Defines the `f32` and `f64` entry points of each level-1 and level-2 function.
macro_rules! typed {
    ($t:ty, $precision:expr, $dot:ident, $nrm2:ident, $axpy:ident, $copy:ident, $scal:ident, $gemv:ident, $ger:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $dot(
            h: usize,
            n: c_int,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            result: *mut $t,
        ) -> u32 {
            guard(stringify!($dot), || dot(h, $precision, n, (x, incx), (y, incy), result.cast(), None))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $nrm2(h: usize, n: c_int, x: u64, incx: c_int, result: *mut $t) -> u32 {
            // BLAS answers 0 for an increment below 1.
            let n = if incx <= 0 { 0 } else { n };
            let x = (x, incx);
            guard(stringify!($nrm2), || dot(h, $precision, n, x, x, result.cast(), Some(f64::sqrt)))
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
            guard(stringify!($axpy), || axpby(h, $precision, n, alpha, x, 1.0, y))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $copy(h: usize, n: c_int, x: u64, incx: c_int, y: u64, incy: c_int) -> u32 {
            let (x, y) = ((x, incx), (y, incy));
            guard(stringify!($copy), || axpby(h, $precision, n, Scalar::Value(1.0), x, 0.0, y))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $scal(h: usize, n: c_int, alpha: *const $t, x: u64, incx: c_int) -> u32 {
            guard(stringify!($scal), || scal(h, $precision, n, Scalar::At(alpha.cast()), x, incx))
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
            let (a, x, y) = ((a, lda), (x, incx), (y, incy));
            guard(stringify!($gemv), || gemv(h, $precision, trans, [m, n], alpha, a, x, beta, y))
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $ger(
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
            let (x, y, a) = ((x, incx), (y, incy), (a, lda));
            guard(stringify!($ger), || ger(h, $precision, [m, n], Scalar::At(alpha.cast()), x, y, a))
        }
    };
}

typed!(
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
    Precision::Double,
    cublasDdot_v2,
    cublasDnrm2_v2,
    cublasDaxpy_v2,
    cublasDcopy_v2,
    cublasDscal_v2,
    cublasDgemv_v2,
    cublasDger_v2
);

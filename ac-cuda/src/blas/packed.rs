//! cuBLAS's conversions between a triangle and its packed storage: `cublas<S|D|C|Z>trttp`
//! (the lower or upper triangle of `A` into `AP`, column by column) and `cublas<S|D|C|Z>tpttr`
//! (back into the triangle, the other one untouched). Each is one launch of the builtin
//! `blas_<t>tpttr` (`ac-backend/src/device/packed.rs`), sent without waiting; elements are
//! moved, never computed.

use std::ffi::c_int;

use ac_frontend::KernelArg;

use super::gemm::{self, Precision};
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Threads a block.
const BLOCK: u32 = 256;

/// The conversion kernel of `precision`'s elements (`blas_<t>tpttr`).
fn kernel(precision: Precision) -> CuResult<&'static str> {
    match precision {
        Precision::Single => Ok("blas_stpttr"),
        Precision::Double => Ok("blas_dtpttr"),
        Precision::ComplexSingle => Ok("blas_ctpttr"),
        Precision::ComplexDouble => Ok("blas_ztpttr"),
        Precision::Half => Err(Error::said(code::NOT_SUPPORTED, "a packed half-precision matrix")),
    }
}

/// Elements of the packed storage of an `n x n` triangle.
pub(super) fn packed_len(n: c_int) -> u64 {
    let n = n.max(0) as u64;
    n * (n + 1) / 2
}

/// Moves triangle `uplo` of the `n x n` `A` (leading dimension `lda`) into `AP` (`unpack`
/// false, trttp) or back (tpttr), both given as kernel arguments, on the target's stream
/// without waiting.
pub(super) fn launch_conversion(
    target: Target,
    precision: Precision,
    unpack: bool,
    [uplo, n]: [c_int; 2],
    ap: KernelArg,
    (a, lda): (KernelArg, c_int),
) -> CuResult<()> {
    let u = |v: c_int| KernelArg::U32(v as u32);
    let args = [u(c_int::from(!unpack)), u(uplo), u(n), ap, a, u(lda)];
    target.launch(kernel(precision)?, &args, n.max(0) as u64 * n.max(0) as u64, BLOCK)
}

/// Moves triangle `uplo` of the program's `n x n` `A` into its `AP` (`unpack` false, trttp)
/// or back (tpttr), checked as cuBLAS checks the call.
unsafe fn convert(
    h: usize,
    precision: Precision,
    unpack: bool,
    [uplo, n]: [c_int; 2],
    ap: u64,
    (a, lda): (u64, c_int),
) -> CuResult<()> {
    let target = handle(h)?.target();
    if !(0..=1).contains(&uplo) || n < 0 || lda < n.max(1) {
        return Err(Error::said(code::INVALID_VALUE, format!("uplo {uplo}, n {n}, lda {lda}")));
    }
    if n == 0 {
        return Ok(());
    }
    let element = precision.bytes() as u64;
    let ap = gemm::matrix(target, ap, packed_len(n), element)?;
    let a = gemm::matrix(target, a, (n as u64 - 1) * lda as u64 + n as u64, element)?;
    launch_conversion(target, precision, unpack, [uplo, n], ap, (a, lda))
}

/// Defines `cublas<T>tpttr` and `cublas<T>trttp` for `$precision`.
macro_rules! typed {
    ($tpttr:ident, $trttp:ident, $precision:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $tpttr(h: usize, uplo: c_int, n: c_int, ap: u64, a: u64, lda: c_int) -> u32 {
            guard(stringify!($tpttr), || convert(h, $precision, true, [uplo, n], ap, (a, lda)))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $trttp(h: usize, uplo: c_int, n: c_int, a: u64, lda: c_int, ap: u64) -> u32 {
            guard(stringify!($trttp), || convert(h, $precision, false, [uplo, n], ap, (a, lda)))
        }
    };
}

typed!(cublasStpttr, cublasStrttp, Precision::Single);
typed!(cublasDtpttr, cublasDtrttp, Precision::Double);
typed!(cublasCtpttr, cublasCtrttp, Precision::ComplexSingle);
typed!(cublasZtpttr, cublasZtrttp, Precision::ComplexDouble);

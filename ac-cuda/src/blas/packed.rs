//! cuBLAS's conversions between a triangle and its packed storage: `cublas<S|D|C|Z>trttp`
//! (the lower or upper triangle of `A` into `AP`, column by column) and `cublas<S|D|C|Z>tpttr`
//! (back into the triangle, the other one untouched). Each is one launch of the builtin
//! `blas_<t>tpttr` (`ac-backend/src/device/packed.rs`), sent without waiting; elements are
//! moved, never computed.

use std::ffi::c_int;

use ac_frontend::KernelArg;

use super::gemm;
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// Threads a block.
const BLOCK: u32 = 256;

/// A conversion's kernel and its elements' bytes.
#[derive(Debug, Clone, Copy)]
struct Kind {
    /// `blas_<t>tpttr`.
    kernel: &'static str,
    /// Bytes of an element.
    element: u64,
}

/// Moves triangle `uplo` of the `n x n` `A` (leading dimension `lda`) into `AP` (`unpack`
/// false, trttp) or back (tpttr), checked as cuBLAS checks the call.
unsafe fn convert(
    h: usize,
    kind: Kind,
    unpack: bool,
    uplo: c_int,
    n: c_int,
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
    let (n64, lda64) = (n as u64, lda as u64);
    let ap = gemm::matrix(target, ap, n64 * (n64 + 1) / 2, kind.element)?;
    let a = gemm::matrix(target, a, (n64 - 1) * lda64 + n64, kind.element)?;
    let u = |v: c_int| KernelArg::U32(v as u32);
    let args = [u(c_int::from(!unpack)), u(uplo), u(n), ap, a, u(lda)];
    target.launch(kind.kernel, &args, n64 * n64, BLOCK)
}

/// Defines `cublas<T>tpttr` and `cublas<T>trttp` for kernel `$kernel` of `$element`-byte
/// elements.
macro_rules! typed {
    ($tpttr:ident, $trttp:ident, $kernel:literal, $element:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $tpttr(h: usize, uplo: c_int, n: c_int, ap: u64, a: u64, lda: c_int) -> u32 {
            let kind = Kind { kernel: $kernel, element: $element };
            guard(stringify!($tpttr), || convert(h, kind, true, uplo, n, ap, (a, lda)))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $trttp(h: usize, uplo: c_int, n: c_int, a: u64, lda: c_int, ap: u64) -> u32 {
            let kind = Kind { kernel: $kernel, element: $element };
            guard(stringify!($trttp), || convert(h, kind, false, uplo, n, ap, (a, lda)))
        }
    };
}

typed!(cublasStpttr, cublasStrttp, "blas_stpttr", 4);
typed!(cublasDtpttr, cublasDtrttp, "blas_dtpttr", 8);
typed!(cublasCtpttr, cublasCtrttp, "blas_ctpttr", 8);
typed!(cublasZtpttr, cublasZtrttp, "blas_ztpttr", 16);

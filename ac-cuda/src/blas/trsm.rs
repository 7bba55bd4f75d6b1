//! Triangular solves: `cublas<S|D|C|Z>trsm`, a launch of the backend's builtin `blas_<t>trsm`
//! on the handle's stream (its shape and solving order are `ac_proto`'s [`Trsm`]); and their
//! `Batched` forms, whose arrays of matrix pointers live in device memory: read back after the
//! stream's work before them (so such a call waits), then one launch a matrix.
//!
//! `alpha` 0 reads no `A` and sets `B` to zeros, as cuBLAS says; a gemm of no terms does that.

use std::ffi::c_int;

use ac_frontend::KernelArg;
use ac_proto::backend::builtin::Trsm;

use super::gemm::{self, Operand, Precision, Scalar};
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Threads of a solve's block (a thread a system).
const BLOCK: u32 = 64;

/// One trsm call's arguments, as cuBLAS takes them.
#[derive(Debug, Clone, Copy)]
pub(super) struct TrsmCall {
    pub precision: Precision,
    /// `side`, `uplo`, `trans`, `diag`: cuBLAS's codes.
    pub codes: [c_int; 4],
    pub m: c_int,
    pub n: c_int,
    pub alpha: Scalar,
    /// Program memory, or a buffer of the shim's (a packed matrix unpacked: `tpsv`).
    pub a: Operand,
    pub lda: c_int,
    pub b: u64,
    pub ldb: c_int,
}

/// Checks a call as cuBLAS does (sizes not negative, known codes, leading dimensions at least
/// their matrices' rows) and gives its shape.
fn check(call: &TrsmCall) -> CuResult<Trsm> {
    let invalid = |why: String| Err(Error::said(code::INVALID_VALUE, why));
    let [side, uplo, trans, diag] = call.codes;
    if call.m < 0 || call.n < 0 || call.lda < 0 || call.ldb < 0 {
        return invalid(format!("negative sizes (m {}, n {}, lda {}, ldb {})", call.m, call.n, call.lda, call.ldb));
    }
    if ![side, uplo, diag].iter().all(|c| (0..=1).contains(c)) || !(0..=2).contains(&trans) {
        return invalid(format!("unknown side {side}, fill mode {uplo}, operation {trans} or diagonal {diag}"));
    }
    let shape = Trsm {
        left: side == 0,
        lower: uplo == 0,
        trans: trans as u32,
        unit: diag == 1,
        m: call.m as u64,
        n: call.n as u64,
        ld: [call.lda as u64, call.ldb as u64],
        stride: [0, 0],
        batch: 1,
    };
    match shape.refusal() {
        Some(why) => invalid(why),
        None => Ok(shape),
    }
}

/// Launches one solve on the target's stream: checked, alpha read, `A` and `B` found in the
/// program's allocations, sent without waiting.
pub(super) unsafe fn launch(target: Target, call: TrsmCall) -> CuResult<()> {
    let shape = check(&call)?;
    let alpha = gemm::scalar_parts(target, call.precision, call.alpha)?;
    if shape.is_empty() {
        return Ok(());
    }
    if alpha == [0.0; 2] {
        return zero(target, &call);
    }
    let width = call.precision.bytes() as u64;
    let [na, nb] = shape.footprints();
    let (a, b) = (call.a.argument(target, na, width)?, gemm::matrix(target, call.b, nb, width)?);
    let u = |v: c_int| KernelArg::U32(v as u32);
    let [side, uplo, trans, diag] = call.codes;
    let scalar = |v: f64| call.precision.arg(v);
    #[rustfmt::skip] // as the kernel's signature reads
    let mut args = vec![
        u(side), u(uplo), u(trans), u(diag), u(call.m), u(call.n), scalar(alpha[0]),
        a, u(call.lda), KernelArg::U64(0),
        b, u(call.ldb), KernelArg::U64(0), KernelArg::U32(1),
    ];
    let name = match call.precision {
        Precision::Single => "blas_strsm",
        Precision::Double => "blas_dtrsm",
        Precision::ComplexSingle | Precision::ComplexDouble => {
            args.push(scalar(alpha[1]));
            if call.precision == Precision::ComplexSingle {
                "blas_ctrsm"
            } else {
                "blas_ztrsm"
            }
        }
        Precision::Half => return Err(Error::said(code::NOT_SUPPORTED, "a half-precision triangular solve")),
    };
    target.launch(name, &args, shape.systems(), BLOCK)
}

/// `B = 0` (alpha 0): a gemm of no terms and beta 0 writes zeros without reading `B`.
unsafe fn zero(target: Target, call: &TrsmCall) -> CuResult<()> {
    let b = Operand::Memory(call.b);
    let zero = Scalar::Value(0.0);
    // A is m x 0 and B 0 x n: neither is read, but their leading dimensions are checked.
    let ld = [call.m.max(1), 1, call.ldb];
    let product = gemm::product(call.precision, [0, 0], [call.m, call.n, 0], zero, [b; 3], ld, zero);
    gemm::launch(target, product)
}

/// Defines `cublas<S|D|C|Z>trsm` for element type `$t` and `$precision`.
macro_rules! trsm_entry {
    ($name:ident, $t:ty, $precision:expr, $call:literal) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            side: c_int,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            b: u64,
            ldb: c_int,
        ) -> u32 {
            let alpha = Scalar::At(alpha.cast());
            let (codes, a) = ([side, uplo, trans, diag], Operand::Memory(a));
            let call = TrsmCall { precision: $precision, codes, m, n, alpha, a, lda, b, ldb };
            guard($call, || launch(handle(h)?.target(), call))
        }
    };
}

/// Defines `cublas<S|D|C|Z>trsmBatched`: arrays of `count` pointers to `A`s and `B`s.
macro_rules! trsm_batched_entry {
    ($name:ident, $t:ty, $precision:expr, $call:literal) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            side: c_int,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            b: u64,
            ldb: c_int,
            count: c_int,
        ) -> u32 {
            let alpha = Scalar::At(alpha.cast());
            let codes = [side, uplo, trans, diag];
            guard($call, || {
                let target = handle(h)?.target();
                if count < 0 {
                    return Err(Error::said(code::INVALID_VALUE, format!("batch count {count}")));
                }
                let [a, b] = target.device_pointers([a, b], count)?;
                for (a, b) in a.into_iter().zip(b) {
                    let a = Operand::Memory(a);
                    launch(target, TrsmCall { precision: $precision, codes, m, n, alpha, a, lda, b, ldb })?;
                }
                Ok(())
            })
        }
    };
}

trsm_entry!(cublasStrsm_v2, f32, Precision::Single, "cublasStrsm");
trsm_entry!(cublasDtrsm_v2, f64, Precision::Double, "cublasDtrsm");
trsm_entry!(cublasCtrsm_v2, [f32; 2], Precision::ComplexSingle, "cublasCtrsm");
trsm_entry!(cublasZtrsm_v2, [f64; 2], Precision::ComplexDouble, "cublasZtrsm");
trsm_batched_entry!(cublasStrsmBatched, f32, Precision::Single, "cublasStrsmBatched");
trsm_batched_entry!(cublasDtrsmBatched, f64, Precision::Double, "cublasDtrsmBatched");
trsm_batched_entry!(cublasCtrsmBatched, [f32; 2], Precision::ComplexSingle, "cublasCtrsmBatched");
trsm_batched_entry!(cublasZtrsmBatched, [f64; 2], Precision::ComplexDouble, "cublasZtrsmBatched");

#[cfg(test)]
mod tests {
    use super::*;

    fn call(codes: [c_int; 4], m: c_int, n: c_int, lda: c_int, ldb: c_int) -> TrsmCall {
        let alpha = Scalar::Value(1.0);
        TrsmCall { precision: Precision::Single, codes, m, n, alpha, a: Operand::Memory(0), lda, b: 0, ldb }
    }

    #[test]
    fn calls_are_checked_as_cublas_checks_them() {
        let shape = check(&call([1, 0, 2, 1], 4, 3, 3, 4)).unwrap();
        assert!(!shape.left && shape.lower && shape.trans == 2 && shape.unit, "{shape:?}");
        assert_eq!(shape.order(), 3, "on the right A is n x n");
        for bad in [
            call([2, 0, 0, 0], 4, 3, 4, 4),
            call([0, 2, 0, 0], 4, 3, 4, 4),
            call([0, 0, 3, 0], 4, 3, 4, 4),
            call([0, 0, 0, 2], 4, 3, 4, 4),
            call([0, 0, 0, 0], -1, 3, 4, 4),
            call([0, 0, 0, 0], 4, 3, 3, 4),
            call([0, 0, 0, 0], 4, 3, 4, 3),
        ] {
            assert_eq!(check(&bad).unwrap_err().code(), code::INVALID_VALUE, "{bad:?}");
        }
    }
}

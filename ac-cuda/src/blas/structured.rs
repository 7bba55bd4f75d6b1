//! Products with a symmetric, Hermitian or triangular matrix, stored as one triangle (`uplo` 0
//! lower, 1 upper; the other is not read), each a launch of the builtin `blas_<t>gemm_tri`
//! ([`super::gemm::Reading::Structured`]) on the handle's stream:
//!
//! | call | `side` left (A is m x m) | `side` right (A is n x n) |
//! |---|---|---|
//! | `symm` (`f32`, `f64`, complex) | `C = alpha A B + beta C` | `C = alpha B A + beta C` |
//! | `hemm` (complex; A's diagonal taken as real) | the same, A Hermitian | the same |
//! | `trmm` (`diag` unit: A's diagonal taken as ones) | `C = alpha op(A) B` | `C = alpha B op(A)` |
//!
//! B and C are m x n. trmm is cuBLAS's out-of-place form: passing B as C gives BLAS's in-place
//! one, which a kernel that reads B while it writes C cannot compute, so B (when C overlaps it)
//! is first copied to a buffer of the shim's, on the same stream, dropped after the launch (a
//! buffer is freed after the work queued before it). While a stream captures a graph, that
//! copy is refused as other work not recorded is (`cudaErrorStreamCaptureUnsupported`), and so
//! are `trmv`, `swap`, `rot` and `rotm`, which copy too.

use std::ffi::c_int;

use super::gemm::{check, launch_reading, product, GemmCall, Operand, Precision, Reading, Scalar};
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};
use crate::managed::{self, Reach};
use crate::memory::locate;
use crate::state;
use crate::stream::stream_of;

/// What the matrix read from a triangle is: `form`'s bits 1-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Symmetric = 0,
    Hermitian = 1,
    Triangular = 2,
    UnitTriangular = 3,
}

/// A call's arguments, as cuBLAS takes them (`trans` 0 and `beta` given for symm and hemm;
/// `beta` 0 for trmm).
#[derive(Debug, Clone, Copy)]
struct Call {
    precision: Precision,
    kind: Kind,
    /// `side`, `uplo`, `trans`: cuBLAS's codes.
    codes: [c_int; 3],
    m: c_int,
    n: c_int,
    alpha: Scalar,
    /// A, B and C, and their leading dimensions.
    matrices: [u64; 3],
    ld: [c_int; 3],
    beta: Scalar,
}

/// Checks a call as cuBLAS does (known codes, sizes not negative, each leading dimension at
/// least its matrix's rows) and gives the gemm it is, with its `form`.
fn gemm_of(call: &Call) -> CuResult<(GemmCall, u32)> {
    let [side, uplo, trans] = call.codes;
    let order = if side == 0 { call.m } else { call.n };
    let [lda, ldb, ldc] = call.ld;
    let wrong = ![side, uplo].iter().all(|c| (0..=1).contains(c))
        || !(0..=2).contains(&trans)
        || call.m < 0
        || call.n < 0
        || lda < order.max(1)
        || ldb < call.m.max(1)
        || ldc < call.m.max(1);
    if wrong {
        let [m, n] = [call.m, call.n];
        let why = format!("side {side}, uplo {uplo}, trans {trans}, m {m}, n {n}, lda {lda}, ldb {ldb}, ldc {ldc}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    let [a, b, c] = call.matrices.map(Operand::Memory);
    let (trans, matrices, ld, operand) = if side == 0 {
        ([trans, 0], [a, b, c], [lda, ldb, ldc], 0)
    } else {
        ([0, trans], [b, a, c], [ldb, lda, ldc], 1)
    };
    let gemm = product(call.precision, trans, [call.m, call.n, order], call.alpha, matrices, ld, call.beta);
    Ok((gemm, form(operand, call.kind, uplo)))
}

/// `blas_<t>gemm_tri`'s `form`: the gemm's `operand` (0 A, 1 B) is `kind`, stored in triangle
/// `uplo` (0 lower, 1 upper).
pub(super) fn form(operand: u32, kind: Kind, uplo: c_int) -> u32 {
    operand << 3 | (kind as u32) << 1 | uplo as u32
}

/// Launches `call` on handle `h`'s stream; trmm's B through a copy of the shim's where C
/// overlaps it (symm's and hemm's may not overlap, as BLAS says).
unsafe fn structured(h: usize, call: Call) -> CuResult<()> {
    let target = handle(h)?.target();
    let (mut gemm, form) = gemm_of(&call)?;
    // B is the gemm's B on the left, its A on the right.
    let b_at = usize::from(call.codes[0] == 0);
    let spans = check(&gemm)?.footprints().map(|elements| elements * call.precision.bytes() as u64);
    let ([_, b, c], b_len, c_len) = (call.matrices, spans[b_at], spans[2]);
    let overlap = b_len > 0 && c_len > 0 && b < c.saturating_add(c_len) && c < b.saturating_add(b_len);
    let copy = match call.kind {
        Kind::Triangular | Kind::UnitTriangular if overlap => Some(copy_of(target, b, b_len)?),
        _ => None,
    };
    if let Some(copy) = &copy {
        gemm.matrices[b_at] = Operand::Slot(copy.at(0));
    }
    launch_reading(target, gemm, Reading::Structured(form))
}

/// A buffer of the shim's holding `len` bytes of program memory at `address`, copied on the
/// target's stream (managed memory the host wrote last goes to the device first, as for any
/// copy).
pub(super) fn copy_of(target: Target, address: u64, len: u64) -> CuResult<ac_frontend::DeviceBuffer<u8>> {
    let shim = state::shim()?;
    let (from, offset) = locate(address, len)?;
    if from.device != target.device {
        return Err(Error::said(code::INVALID_VALUE, "a matrix of another device's memory"));
    }
    let stream = stream_of(target.stream, target.device)?;
    let copy = scratch(target, len)?;
    managed::device_work(&[Reach::Memory(target.device, address)], || {
        Ok(shim.block_on(copy.copy_from_device_at(&stream, 0, &from.buffer, offset as usize, len as usize))?)
    })?;
    Ok(copy)
}

/// A buffer of the shim's of `len` bytes on the target's device, freed when dropped (after the
/// work queued before).
pub(super) fn scratch(target: Target, len: u64) -> CuResult<ac_frontend::DeviceBuffer<u8>> {
    let shim = state::shim()?;
    Ok(shim.block_on(shim.devices[target.device].acc.alloc::<u8>(len as usize))?)
}

/// Defines `cublas<S|D|C|Z>symm` and `cublas<C|Z>hemm` for element type `$t`, `$precision`,
/// A `$kind`.
macro_rules! symmetric_entry {
    ($name:ident, $t:ty, $precision:expr, $kind:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            side: c_int,
            uplo: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            b: u64,
            ldb: c_int,
            beta: *const $t,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()));
            let (codes, matrices, ld) = ([side, uplo, 0], [a, b, c], [lda, ldb, ldc]);
            let call = Call { precision: $precision, kind: $kind, codes, m, n, alpha, matrices, ld, beta };
            guard(stringify!($name), || structured(h, call))
        }
    };
}

/// Defines `cublas<S|D|C|Z>trmm` for element type `$t` and `$precision`.
macro_rules! trmm_entry {
    ($name:ident, $t:ty, $precision:expr) => {
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
            c: u64,
            ldc: c_int,
        ) -> u32 {
            guard(stringify!($name), || {
                let kind = match diag {
                    0 => Kind::Triangular,
                    1 => Kind::UnitTriangular,
                    _ => return Err(Error::said(code::INVALID_VALUE, format!("diagonal {diag} (0 or 1)"))),
                };
                let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::Value(0.0));
                let (codes, matrices, ld) = ([side, uplo, trans], [a, b, c], [lda, ldb, ldc]);
                structured(h, Call { precision: $precision, kind, codes, m, n, alpha, matrices, ld, beta })
            })
        }
    };
}

symmetric_entry!(cublasSsymm_v2, f32, Precision::Single, Kind::Symmetric);
symmetric_entry!(cublasDsymm_v2, f64, Precision::Double, Kind::Symmetric);
symmetric_entry!(cublasCsymm_v2, [f32; 2], Precision::ComplexSingle, Kind::Symmetric);
symmetric_entry!(cublasZsymm_v2, [f64; 2], Precision::ComplexDouble, Kind::Symmetric);
symmetric_entry!(cublasChemm_v2, [f32; 2], Precision::ComplexSingle, Kind::Hermitian);
symmetric_entry!(cublasZhemm_v2, [f64; 2], Precision::ComplexDouble, Kind::Hermitian);
trmm_entry!(cublasStrmm_v2, f32, Precision::Single);
trmm_entry!(cublasDtrmm_v2, f64, Precision::Double);
trmm_entry!(cublasCtrmm_v2, [f32; 2], Precision::ComplexSingle);
trmm_entry!(cublasZtrmm_v2, [f64; 2], Precision::ComplexDouble);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blas::gemm::at;

    fn call(kind: Kind, codes: [c_int; 3], [m, n]: [c_int; 2], ld: [c_int; 3]) -> Call {
        let (alpha, beta) = (Scalar::Value(1.0), Scalar::Value(0.0));
        Call { precision: Precision::Single, kind, codes, m, n, alpha, matrices: [1, 2, 3], ld, beta }
    }

    #[test]
    fn a_left_product_reads_a_and_a_right_one_reads_b_from_the_triangle() {
        // Left: C (4 x 3) = op(A) B, A 4 x 4; form: A, upper, unit triangular.
        let (gemm, form) = gemm_of(&call(Kind::UnitTriangular, [0, 1, 2], [4, 3], [4, 4, 4])).unwrap();
        assert_eq!((gemm.trans, [gemm.m, gemm.n, gemm.k]), ([2, 0], [4, 3, 4]));
        assert_eq!(gemm.matrices.map(at), [1, 2, 3]);
        assert_eq!(form, 0b0111);
        // Right: C = B A, A 3 x 3 is the gemm's B; form: B, lower, Hermitian.
        let (gemm, form) = gemm_of(&call(Kind::Hermitian, [1, 0, 0], [4, 3], [3, 4, 4])).unwrap();
        assert_eq!((gemm.trans, [gemm.m, gemm.n, gemm.k], gemm.ld), ([0, 0], [4, 3, 3], [4, 3, 4]));
        assert_eq!(gemm.matrices.map(at), [2, 1, 3]);
        assert_eq!(form, 0b1010);
    }

    #[test]
    fn calls_are_checked_as_cublas_checks_them() {
        for bad in [
            call(Kind::Symmetric, [2, 0, 0], [4, 3], [4, 4, 4]),
            call(Kind::Symmetric, [0, 2, 0], [4, 3], [4, 4, 4]),
            call(Kind::Triangular, [0, 0, 3], [4, 3], [4, 4, 4]),
            call(Kind::Symmetric, [0, 0, 0], [-1, 3], [4, 4, 4]),
            call(Kind::Symmetric, [0, 0, 0], [4, 3], [3, 4, 4]),
            call(Kind::Symmetric, [1, 0, 0], [4, 3], [2, 4, 4]),
            call(Kind::Symmetric, [0, 0, 0], [4, 3], [4, 3, 4]),
            call(Kind::Symmetric, [0, 0, 0], [4, 3], [4, 4, 3]),
        ] {
            let e = gemm_of(&bad).unwrap_err();
            assert_eq!(e.code(), code::INVALID_VALUE, "{bad:?}");
        }
    }
}

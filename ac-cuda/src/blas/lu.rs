//! Batched LU: `cublas<S|D|C|Z>getrfBatched` (factor), `getrsBatched` (solve with the factors),
//! `getriBatched` (invert, out of place) and `matinvBatched` (invert, factoring a copy), as launches of the backend's builtin
//! `blas_<t>getrf` and `blas_<t>getrs` (their shapes and order of operations are `ac_proto`'s
//! [`Getrf`] and [`Getrs`]) on the handle's stream.
//!
//! The matrices' addresses are arrays in device memory, read back after the stream's work
//! before the call (so these calls wait for it). Matrices evenly spaced, ascending, in one
//! allocation (as CuPy and PyTorch lay out a stacked array) go as one strided launch; any others
//! (or the same matrix twice: overlapping results are refused) as one launch a matrix. The pivots are `n` per matrix one after another, as cuBLAS has them;
//! null pivots mean no pivoting. `getrsBatched`'s `info` is a host integer that reports only
//! which parameter was wrong, as cuBLAS's.

use std::ffi::c_int;

use ac_frontend::KernelArg;
use ac_proto::backend::builtin::{Getrf, Getrs};

use super::contiguous::Entered;
use super::extensions::term;
use super::gemm::{self, Operand, Precision, Scalar};
use super::{each_batch, guard, handle, Target};
use crate::error::{code, CuResult, Error};
use crate::graph;

/// Threads of a block: a thread a matrix (getrf) or a column of `B` (getrs).
pub(super) const BLOCK: u32 = 64;

/// Bytes of a pivot and of an `info`.
pub(super) const INT: u64 = 4;

/// The builtin kernels of a precision: its getrf and getrs.
fn kernels(precision: Precision) -> CuResult<[&'static str; 2]> {
    Ok(match precision {
        Precision::Single => ["blas_sgetrf", "blas_sgetrs"],
        Precision::Double => ["blas_dgetrf", "blas_dgetrs"],
        Precision::ComplexSingle => ["blas_cgetrf", "blas_cgetrs"],
        Precision::ComplexDouble => ["blas_zgetrf", "blas_zgetrs"],
        Precision::Half => return Err(Error::said(code::NOT_SUPPORTED, "a half-precision LU factorization")),
    })
}

/// A pointer argument to `elements` of `width` bytes at `address`, found in the program's
/// allocations.
pub(super) fn memory(target: Target, address: u64, elements: u64, width: u64) -> CuResult<KernelArg> {
    gemm::matrix(target, address, elements, width)
}

/// `Err(INVALID_VALUE)` saying `why` unless `fine`.
pub(super) fn require(fine: bool, why: impl FnOnce() -> String) -> CuResult<()> {
    if fine {
        Ok(())
    } else {
        Err(Error::said(code::INVALID_VALUE, why()))
    }
}

/// `Err(INVALID_VALUE)` saying why this contract refuses a launch's shape, if it does.
pub(super) fn accepted(refusal: Option<String>) -> CuResult<()> {
    refusal.map_or(Ok(()), |why| Err(Error::said(code::INVALID_VALUE, why)))
}

/// `getrfBatched`: factors `count` matrices `n x n` in place.
/// `matrices`: the `A`s' addresses; `pivots` and `info` the arrays' (`pivots` 0: no pivoting).
unsafe fn getrf(
    target: Target,
    precision: Precision,
    [n, lda]: [c_int; 2],
    matrices: &[Vec<u64>; 1],
    [pivots, info]: [u64; 2],
) -> CuResult<()> {
    let [getrf, _] = kernels(precision)?;
    let width = precision.bytes() as u64;
    let (n, lda) = (n as u64, lda as u64);
    each_batch(matrices, [width], |[(a, stride_a)], first, count| {
        let g = Getrf { n, lda, stride_a, pivoting: pivots != 0, stride_p: n, batch: count };
        accepted(g.refusal())?;
        let [na, np, ni] = g.footprints();
        let a_arg = memory(target, a, na, width)?;
        let pivots = if g.pivoting { memory(target, pivots + first as u64 * n * INT, np, INT)? } else { a_arg };
        let info = memory(target, info + first as u64 * INT, ni, INT)?;
        let u = |v: u64| KernelArg::U32(v as u32);
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [
            u(n), a_arg, u(lda), KernelArg::U64(stride_a),
            u(g.pivoting.into()), pivots, KernelArg::U64(n), info, u(count),
        ];
        target.launch(getrf, &args, count, BLOCK)
    })
}

/// `getrsBatched` (`inverse` false: `op(A) X = B`, `X` over `B`) or `getriBatched` (`C = A^-1`,
/// `info` in device memory): `count` systems with `getrf`'s factors. `matrices`: the `A`s' and
/// `B`s' (`C`s') addresses; `pivots` and `info` the arrays' (`pivots` 0: no pivoting).
unsafe fn getrs(
    target: Target,
    precision: Precision,
    shape: Getrs,
    matrices: &[Vec<u64>; 2],
    [pivots, info]: [u64; 2],
) -> CuResult<()> {
    let [_, getrs] = kernels(precision)?;
    let width = precision.bytes() as u64;
    let n = shape.n;
    each_batch(matrices, [width; 2], |[(a, stride_a), (b, stride_b)], first, count| {
        let s = Getrs { stride: [stride_a, stride_b], stride_p: n, batch: count, ..shape };
        accepted(s.refusal())?;
        let [na, np, nb, ni] = s.footprints();
        let a_arg = memory(target, a, na, width)?;
        let pivots = if s.pivoting { memory(target, pivots + first as u64 * n * INT, np, INT)? } else { a_arg };
        let b_arg = memory(target, b, nb, width)?;
        let info = if s.inverse { memory(target, info + first as u64 * INT, ni, INT)? } else { a_arg };
        let u = |v: u64| KernelArg::U32(v as u32);
        let flags = u64::from(s.pivoting) | u64::from(s.inverse) << 1;
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [
            u(s.trans.into()), u(n), u(s.nrhs), a_arg, u(s.ld[0]), KernelArg::U64(stride_a),
            u(flags), pivots, KernelArg::U64(n), b_arg, u(s.ld[1]), KernelArg::U64(stride_b), info, u(count),
        ];
        target.launch(getrs, &args, s.systems(), BLOCK)
    })
}

/// A shape no launch has yet: strides and batch are each launch's.
fn solve_shape(trans: c_int, [n, nrhs]: [c_int; 2], [lda, ldb]: [c_int; 2], pivots: u64, inverse: bool) -> Getrs {
    Getrs {
        trans: trans as u32,
        n: n as u64,
        nrhs: nrhs as u64,
        ld: [lda as u64, ldb as u64],
        stride: [0, 0],
        pivoting: pivots != 0,
        stride_p: 0,
        inverse,
        batch: 1,
    }
}

/// Checks `getrsBatched`'s parameters as cuBLAS does: the position of the first wrong one
/// (not counting the handle), or 0.
fn getrs_wrong_parameter(trans: c_int, [n, nrhs]: [c_int; 2], [lda, ldb]: [c_int; 2], count: c_int) -> c_int {
    match () {
        _ if !(0..=2).contains(&trans) => 1,
        _ if n < 0 => 2,
        _ if nrhs < 0 => 3,
        _ if lda < n.max(1) => 5,
        _ if ldb < n.max(1) => 8,
        _ if count < 0 => 10,
        _ => 0,
    }
}

/// Defines `cublas<t>getrfBatched`, `cublas<t>getrsBatched` and `cublas<t>getriBatched`.
macro_rules! lu_entries {
    ($getrf:ident, $getrs:ident, $getri:ident, $precision:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $getrf(h: usize, n: c_int, a: u64, lda: c_int, pivots: u64, info: u64, count: c_int) -> u32 {
            guard(stringify!($getrf), || {
                require(n >= 0 && lda >= n.max(1) && count >= 0, || format!("n {n}, lda {lda}, batch count {count}"))?;
                require(info != 0, || "no info array".into())?;
                if n == 0 || count == 0 {
                    return Ok(());
                }
                let target = handle(h)?.target();
                getrf(target, $precision, [n, lda], &target.device_pointers([a], count)?, [pivots, info])
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $getrs(
            h: usize,
            trans: c_int,
            n: c_int,
            nrhs: c_int,
            a: u64,
            lda: c_int,
            pivots: u64,
            b: u64,
            ldb: c_int,
            info: *mut c_int,
            count: c_int,
        ) -> u32 {
            guard(stringify!($getrs), || {
                require(!info.is_null(), || "no info".into())?;
                let wrong = getrs_wrong_parameter(trans, [n, nrhs], [lda, ldb], count);
                *info = -wrong;
                require(wrong == 0, || format!("parameter {wrong} (trans {trans}, n {n}, nrhs {nrhs}, lda {lda}, ldb {ldb}, batch count {count})"))?;
                if n == 0 || nrhs == 0 || count == 0 {
                    return Ok(());
                }
                let target = handle(h)?.target();
                let shape = solve_shape(trans, [n, nrhs], [lda, ldb], pivots, false);
                getrs(target, $precision, shape, &target.device_pointers([a, b], count)?, [pivots, 0])
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $getri(
            h: usize,
            n: c_int,
            a: u64,
            lda: c_int,
            pivots: u64,
            c: u64,
            ldc: c_int,
            info: u64,
            count: c_int,
        ) -> u32 {
            guard(stringify!($getri), || {
                let fine = n >= 0 && lda >= n.max(1) && ldc >= n.max(1) && count >= 0;
                require(fine, || format!("n {n}, lda {lda}, ldc {ldc}, batch count {count}"))?;
                require(info != 0, || "no info array".into())?;
                if n == 0 || count == 0 {
                    return Ok(());
                }
                let target = handle(h)?.target();
                let shape = solve_shape(0, [n, n], [lda, ldc], pivots, true);
                getrs(target, $precision, shape, &target.device_pointers([a, c], count)?, [pivots, info])
            })
        }
    };
}

/// The largest matrices `matinvBatched` inverts, as cuBLAS's.
const MATINV_LARGEST: c_int = 32;

/// `matinvBatched`: `Ainv[i] = A[i]^-1` for `count` matrices `n x n`, `A` left as it is: each
/// copied into a buffer of the shim's (a gemm a matrix), factored there (`getrf`, pivoting),
/// and inverted into `Ainv` (`getri`); `info[i]` is as theirs (`k` if `U`'s `k`th pivot is 0).
/// The buffer lives for the call, so a stream that captures refuses it.
unsafe fn matinv(
    target: Target,
    precision: Precision,
    [n, lda, ldc]: [c_int; 3],
    arrays: [u64; 2],
    info: u64,
    count: c_int,
) -> CuResult<()> {
    graph::refuse_if_capturing(target.stream, "matinvBatched")?;
    let [a, c] = target.device_pointers(arrays, count)?;
    let (width, square) = (precision.bytes() as u64, n as u64 * n as u64);
    let work = Entered::new(target.device, count as u64 * (square * width + n as u64 * INT))?;
    let factors: Vec<u64> = (0..count as u64).map(|i| work.at() + i * square * width).collect();
    let pivots = work.at() + count as u64 * square * width;
    for (&from, &to) in a.iter().zip(&factors) {
        let (from, to) = ((Operand::Memory(from), lda), (Operand::Memory(to), n));
        gemm::launch(target, term(precision, 0, [n, n], Scalar::Value(1.0), from, to, false))?;
    }
    let factors = [factors];
    getrf(target, precision, [n, n], &factors, [pivots, info])?;
    let [factors] = factors;
    let shape = solve_shape(0, [n, n], [n, ldc], pivots, true);
    getrs(target, precision, shape, &[factors, c], [pivots, info])
}

/// Defines `cublas<t>matinvBatched`.
macro_rules! matinv_entry {
    ($name:ident, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            n: c_int,
            a: u64,
            lda: c_int,
            c: u64,
            ldc: c_int,
            info: u64,
            count: c_int,
        ) -> u32 {
            guard(stringify!($name), || {
                let target = handle(h)?.target();
                let fine = (0..=MATINV_LARGEST).contains(&n) && lda >= n.max(1) && ldc >= n.max(1) && count >= 0;
                require(fine, || {
                    format!("n {n} (at most {MATINV_LARGEST}), lda {lda}, lda_inv {ldc}, batch count {count}")
                })?;
                require(info != 0, || "no info array".into())?;
                if n == 0 || count == 0 {
                    return Ok(());
                }
                matinv(target, $precision, [n, lda, ldc], [a, c], info, count)
            })
        }
    };
}

matinv_entry!(cublasSmatinvBatched, Precision::Single);
matinv_entry!(cublasDmatinvBatched, Precision::Double);
matinv_entry!(cublasCmatinvBatched, Precision::ComplexSingle);
matinv_entry!(cublasZmatinvBatched, Precision::ComplexDouble);

lu_entries!(cublasSgetrfBatched, cublasSgetrsBatched, cublasSgetriBatched, Precision::Single);
lu_entries!(cublasDgetrfBatched, cublasDgetrsBatched, cublasDgetriBatched, Precision::Double);
lu_entries!(cublasCgetrfBatched, cublasCgetrsBatched, cublasCgetriBatched, Precision::ComplexSingle);
lu_entries!(cublasZgetrfBatched, cublasZgetrsBatched, cublasZgetriBatched, Precision::ComplexDouble);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrs_names_its_first_wrong_parameter_as_cublas() {
        assert_eq!(getrs_wrong_parameter(0, [3, 2], [3, 3], 1), 0);
        assert_eq!(getrs_wrong_parameter(3, [3, 2], [3, 3], 1), 1);
        assert_eq!(getrs_wrong_parameter(0, [-1, 2], [3, 3], 1), 2);
        assert_eq!(getrs_wrong_parameter(0, [3, -2], [3, 3], 1), 3);
        assert_eq!(getrs_wrong_parameter(0, [3, 2], [2, 3], 1), 5);
        assert_eq!(getrs_wrong_parameter(0, [3, 2], [3, 2], 1), 8);
        assert_eq!(getrs_wrong_parameter(0, [3, 2], [3, 3], -1), 10);
    }
}

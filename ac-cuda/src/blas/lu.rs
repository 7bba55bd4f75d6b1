//! Batched LU: `cublas<S|D|C|Z>getrfBatched` (factor), `getrsBatched` (solve with the factors)
//! and `getriBatched` (invert, out of place), as launches of the backend's builtin
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

use super::gemm::{self, Precision};
use super::{evenly_spaced, guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Threads of a block: a thread a matrix (getrf) or a column of `B` (getrs).
const BLOCK: u32 = 64;

/// Bytes of a pivot and of an `info`.
const INT: u64 = 4;

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
fn memory(target: Target, address: u64, elements: u64, width: u64) -> CuResult<KernelArg> {
    gemm::matrix(target, address, elements, width)
}

/// `Err(INVALID_VALUE)` saying `why` unless `fine`.
fn require(fine: bool, why: impl FnOnce() -> String) -> CuResult<()> {
    if fine {
        Ok(())
    } else {
        Err(Error::said(code::INVALID_VALUE, why()))
    }
}

/// One batched call's matrices: where each `A` (and `B` or `C`) is, and the pivots and `info`
/// arrays (0 where absent).
#[derive(Debug)]
struct Batch {
    a: Vec<u64>,
    b: Vec<u64>,
    pivots: u64,
    info: u64,
}

impl Batch {
    /// Launches `one(first of each, their stride, first matrix index, count)` once if every
    /// matrix array is evenly spaced and the launch is accepted, else once a matrix.
    unsafe fn each(
        &self,
        width: u64,
        mut one: impl FnMut([(u64, u64); 2], usize, u64) -> CuResult<()>,
    ) -> CuResult<()> {
        let b = if self.b.is_empty() { Some((0, 0)) } else { evenly_spaced(&self.b, width) };
        if let (Some(a), Some(b)) = (evenly_spaced(&self.a, width), b) {
            if self.a.len() > 1 && one([a, b], 0, self.a.len() as u64).is_ok() {
                return Ok(());
            }
        }
        for i in 0..self.a.len() {
            let b = self.b.get(i).copied().unwrap_or(0);
            one([(self.a[i], 0), (b, 0)], i, 1)?;
        }
        Ok(())
    }
}

/// `getrfBatched`: factors `count` matrices `n x n` in place.
unsafe fn getrf(target: Target, precision: Precision, [n, lda]: [c_int; 2], batch: Batch) -> CuResult<()> {
    let [getrf, _] = kernels(precision)?;
    let width = precision.bytes() as u64;
    let (n, lda) = (n as u64, lda as u64);
    batch.each(width, |[(a, stride_a), _], first, count| {
        let g = Getrf { n, lda, stride_a, pivoting: batch.pivots != 0, stride_p: n, batch: count };
        require(g.refusal().is_none(), || g.refusal().unwrap_or_default())?;
        let [na, np, ni] = g.footprints();
        let a_arg = memory(target, a, na, width)?;
        let pivots = if g.pivoting { memory(target, batch.pivots + first as u64 * n * INT, np, INT)? } else { a_arg };
        let info = memory(target, batch.info + first as u64 * INT, ni, INT)?;
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
/// `info` in device memory): `count` systems with `getrf`'s factors.
unsafe fn getrs(target: Target, precision: Precision, shape: Getrs, batch: Batch) -> CuResult<()> {
    let [_, getrs] = kernels(precision)?;
    let width = precision.bytes() as u64;
    let n = shape.n;
    batch.each(width, |[(a, stride_a), (b, stride_b)], first, count| {
        let s = Getrs { stride: [stride_a, stride_b], stride_p: n, batch: count, ..shape };
        require(s.refusal().is_none(), || s.refusal().unwrap_or_default())?;
        let [na, np, nb, ni] = s.footprints();
        let a_arg = memory(target, a, na, width)?;
        let pivots = if s.pivoting { memory(target, batch.pivots + first as u64 * n * INT, np, INT)? } else { a_arg };
        let b_arg = memory(target, b, nb, width)?;
        let info = if s.inverse { memory(target, batch.info + first as u64 * INT, ni, INT)? } else { a_arg };
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
                let batch = Batch { a: target.device_pointers(a, count)?, b: Vec::new(), pivots, info };
                getrf(target, $precision, [n, lda], batch)
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
                let (a, b) = (target.device_pointers(a, count)?, target.device_pointers(b, count)?);
                let shape = solve_shape(trans, [n, nrhs], [lda, ldb], pivots, false);
                getrs(target, $precision, shape, Batch { a, b, pivots, info: 0 })
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
                let (a, c) = (target.device_pointers(a, count)?, target.device_pointers(c, count)?);
                let shape = solve_shape(0, [n, n], [lda, ldc], pivots, true);
                getrs(target, $precision, shape, Batch { a, b: c, pivots, info })
            })
        }
    };
}

lu_entries!(cublasSgetrfBatched, cublasSgetrsBatched, cublasSgetriBatched, Precision::Single);
lu_entries!(cublasDgetrfBatched, cublasDgetrsBatched, cublasDgetriBatched, Precision::Double);
lu_entries!(cublasCgetrfBatched, cublasCgetrsBatched, cublasCgetriBatched, Precision::ComplexSingle);
lu_entries!(cublasZgetrfBatched, cublasZgetrsBatched, cublasZgetriBatched, Precision::ComplexDouble);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evenly_spaced_matrices_are_found() {
        assert_eq!(evenly_spaced(&[0x1000, 0x1040, 0x1080], 8), Some((0x1000, 8)));
        assert_eq!(evenly_spaced(&[0x1000], 8), Some((0x1000, 0)));
        assert_eq!(evenly_spaced(&[], 8), None);
        assert_eq!(evenly_spaced(&[0x1000, 0x1040, 0x1088], 8), None, "uneven");
        assert_eq!(evenly_spaced(&[0x1080, 0x1040, 0x1000], 8), None, "descending");
        assert_eq!(evenly_spaced(&[0x1000, 0x1000], 8), Some((0x1000, 0)), "the same matrix twice");
        assert_eq!(evenly_spaced(&[0x1000, 0x1006], 4), None, "not by whole elements");
    }

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

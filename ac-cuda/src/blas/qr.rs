//! Batched QR: `cublas<S|D|C|Z>geqrfBatched` (factor) and `gelsBatched` (least squares), as
//! launches of the backend's builtin `blas_<t>geqrf` and `blas_<t>gels` (their shapes and order
//! of operations are `ac_proto`'s [`Geqrf`] and [`Gels`]) on the handle's stream, a thread a
//! matrix.
//!
//! The matrices' and `tau`s' addresses are arrays in device memory, read back after the
//! stream's work before the call (so these calls wait for it), and batched as
//! [`super::lu`]'s are. `info` is a host integer that reports only which parameter was wrong, as
//! cuBLAS's; `gelsBatched`'s `devInfoArray` (optional) each problem's rank deficiency. As cuBLAS,
//! `gelsBatched` solves only `op(A) = N` with `m >= n`: anything else is
//! `CUBLAS_STATUS_NOT_SUPPORTED`.

use std::ffi::c_int;

use ac_frontend::KernelArg;
use ac_proto::backend::builtin::{Gels, Geqrf};

use super::gemm::Precision;
use super::lu::{accepted, memory, require, BLOCK, INT};
use super::{each_batch, guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// The builtin kernels of a precision: its geqrf and gels.
fn kernels(precision: Precision) -> CuResult<[&'static str; 2]> {
    Ok(match precision {
        Precision::Single => ["blas_sgeqrf", "blas_sgels"],
        Precision::Double => ["blas_dgeqrf", "blas_dgels"],
        Precision::ComplexSingle => ["blas_cgeqrf", "blas_cgels"],
        Precision::ComplexDouble => ["blas_zgeqrf", "blas_zgels"],
        Precision::Half => return Err(Error::said(code::NOT_SUPPORTED, "a half-precision QR factorization")),
    })
}

/// `geqrfBatched`: factors `count` matrices `m x n` in place. `arrays`: the `A`s' and the
/// `tau`s' addresses.
fn geqrf(target: Target, precision: Precision, [m, n, lda]: [u64; 3], arrays: &[Vec<u64>; 2]) -> CuResult<()> {
    let [geqrf, _] = kernels(precision)?;
    let width = precision.bytes() as u64;
    each_batch(arrays, [width; 2], |[(a, stride_a), (tau, stride_t)], _, count| {
        let g = Geqrf { m, n, lda, stride_a, stride_t, batch: count };
        accepted(g.refusal())?;
        let [na, nt] = g.footprints();
        let (a, tau) = (memory(target, a, na, width)?, memory(target, tau, nt, width)?);
        let u = |v: u64| KernelArg::U32(v as u32);
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [u(m), u(n), a, u(lda), KernelArg::U64(stride_a), tau, KernelArg::U64(stride_t), u(count)];
        target.launch(geqrf, &args, count, BLOCK)
    })
}

/// `gelsBatched`: `count` least-squares problems `shape` (its strides and batch each launch's).
/// `arrays`: the `A`s' and `C`s' addresses; `info` the device array's (0: none).
fn gels(target: Target, precision: Precision, shape: Gels, arrays: &[Vec<u64>; 2], info: u64) -> CuResult<()> {
    let [_, gels] = kernels(precision)?;
    let width = precision.bytes() as u64;
    each_batch(arrays, [width; 2], |[(a, stride_a), (c, stride_c)], first, count| {
        let s = Gels { stride: [stride_a, stride_c], info: info != 0, batch: count, ..shape };
        accepted(s.refusal())?;
        let [na, nc, ni] = s.footprints();
        let a_arg = memory(target, a, na, width)?;
        let c_arg = if nc > 0 { memory(target, c, nc, width)? } else { a_arg };
        let info = if s.info { memory(target, info + first as u64 * INT, ni, INT)? } else { a_arg };
        let u = |v: u64| KernelArg::U32(v as u32);
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [
            u(s.m), u(s.n), u(s.nrhs), a_arg, u(s.ld[0]), KernelArg::U64(stride_a),
            c_arg, u(s.ld[1]), KernelArg::U64(stride_c), u(s.info.into()), info, u(count),
        ];
        target.launch(gels, &args, count, BLOCK)
    })
}

/// Checks `geqrfBatched`'s parameters as cuBLAS does: the position of the first wrong one (not
/// counting the handle), or 0.
fn geqrf_wrong_parameter([m, n, lda]: [c_int; 3], count: c_int) -> c_int {
    match () {
        _ if m < 0 => 1,
        _ if n < 0 => 2,
        _ if lda < m.max(1) => 4,
        _ if count < 0 => 7,
        _ => 0,
    }
}

/// Checks `gelsBatched`'s parameters as cuBLAS does: the position of the first wrong one (not
/// counting the handle), or 0, and whether it is one cuBLAS does not support (an operation other
/// than N, fewer rows than columns) rather than an invalid one.
fn gels_wrong_parameter(trans: c_int, [m, n, nrhs]: [c_int; 3], [lda, ldc]: [c_int; 2], count: c_int) -> (c_int, bool) {
    match () {
        _ if !(0..=2).contains(&trans) => (1, false),
        _ if trans != 0 => (1, true),
        _ if m < 0 => (2, false),
        _ if n < 0 => (3, false),
        _ if n > m => (3, true),
        _ if nrhs < 0 => (4, false),
        _ if lda < m.max(1) => (6, false),
        _ if ldc < m.max(1) => (8, false),
        _ if count < 0 => (11, false),
        _ => (0, false),
    }
}

/// Sets the host `info` to `-wrong` and refuses a wrong parameter (`CUBLAS_STATUS_NOT_SUPPORTED`
/// where cuBLAS does not support it, else `INVALID_VALUE`).
unsafe fn report(info: *mut c_int, (wrong, unsupported): (c_int, bool), said: impl FnOnce() -> String) -> CuResult<()> {
    require(!info.is_null(), || "no info".into())?;
    *info = -wrong;
    match wrong {
        0 => Ok(()),
        _ if unsupported => Err(Error::said(code::NOT_SUPPORTED, format!("parameter {wrong}: {}", said()))),
        _ => Err(Error::said(code::INVALID_VALUE, format!("parameter {wrong}: {}", said()))),
    }
}

/// Defines `cublas<t>geqrfBatched` and `cublas<t>gelsBatched`.
macro_rules! qr_entries {
    ($geqrf:ident, $gels:ident, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $geqrf(
            h: usize,
            m: c_int,
            n: c_int,
            a: u64,
            lda: c_int,
            tau: u64,
            info: *mut c_int,
            count: c_int,
        ) -> u32 {
            guard(stringify!($geqrf), || {
                let wrong = (geqrf_wrong_parameter([m, n, lda], count), false);
                report(info, wrong, || format!("m {m}, n {n}, lda {lda}, batch count {count}"))?;
                if m == 0 || n == 0 || count == 0 {
                    return Ok(());
                }
                let target = handle(h)?.target();
                let arrays = target.device_pointers([a, tau], count)?;
                geqrf(target, $precision, [m, n, lda].map(|v| v as u64), &arrays)
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $gels(
            h: usize,
            trans: c_int,
            m: c_int,
            n: c_int,
            nrhs: c_int,
            a: u64,
            lda: c_int,
            c: u64,
            ldc: c_int,
            info: *mut c_int,
            dev_info: u64,
            count: c_int,
        ) -> u32 {
            guard(stringify!($gels), || {
                let wrong = gels_wrong_parameter(trans, [m, n, nrhs], [lda, ldc], count);
                report(info, wrong, || {
                    format!("trans {trans}, m {m}, n {n}, nrhs {nrhs}, lda {lda}, ldc {ldc}, batch count {count}")
                })?;
                if n == 0 || count == 0 {
                    return Ok(());
                }
                let target = handle(h)?.target();
                let [m, n, nrhs] = [m, n, nrhs].map(|v| v as u64);
                let shape = Gels { m, n, nrhs, ld: [lda as u64, ldc as u64], stride: [0, 0], info: false, batch: 1 };
                gels(target, $precision, shape, &target.device_pointers([a, c], count)?, dev_info)
            })
        }
    };
}

qr_entries!(cublasSgeqrfBatched, cublasSgelsBatched, Precision::Single);
qr_entries!(cublasDgeqrfBatched, cublasDgelsBatched, Precision::Double);
qr_entries!(cublasCgeqrfBatched, cublasCgelsBatched, Precision::ComplexSingle);
qr_entries!(cublasZgeqrfBatched, cublasZgelsBatched, Precision::ComplexDouble);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geqrf_names_its_first_wrong_parameter_as_cublas() {
        assert_eq!(geqrf_wrong_parameter([4, 3, 4], 2), 0);
        assert_eq!(geqrf_wrong_parameter([2, 3, 2], 2), 0, "a wide matrix is factored");
        assert_eq!(geqrf_wrong_parameter([-1, 3, 4], 2), 1);
        assert_eq!(geqrf_wrong_parameter([4, -3, 4], 2), 2);
        assert_eq!(geqrf_wrong_parameter([4, 3, 3], 2), 4);
        assert_eq!(geqrf_wrong_parameter([0, 3, 0], 2), 4, "lda is at least 1");
        assert_eq!(geqrf_wrong_parameter([4, 3, 4], -2), 7);
    }

    #[test]
    fn gels_names_its_first_wrong_parameter_and_what_cublas_does_not_support() {
        let ok = |trans| gels_wrong_parameter(trans, [4, 2, 1], [4, 4], 1);
        assert_eq!(ok(0), (0, false));
        assert_eq!(ok(1), (1, true), "T is not supported");
        assert_eq!(ok(3), (1, false), "not an operation");
        assert_eq!(gels_wrong_parameter(0, [-4, 2, 1], [4, 4], 1), (2, false));
        assert_eq!(gels_wrong_parameter(0, [4, -2, 1], [4, 4], 1), (3, false));
        assert_eq!(gels_wrong_parameter(0, [2, 4, 1], [4, 4], 1), (3, true), "underdetermined");
        assert_eq!(gels_wrong_parameter(0, [4, 2, -1], [4, 4], 1), (4, false));
        assert_eq!(gels_wrong_parameter(0, [4, 2, 1], [3, 4], 1), (6, false));
        assert_eq!(gels_wrong_parameter(0, [4, 2, 1], [4, 3], 1), (8, false));
        assert_eq!(gels_wrong_parameter(0, [4, 2, 1], [4, 4], -1), (11, false));
    }
}

//! LU factorization, solves and inverses as the builtin kernels `blas_<s|d|c|z>getrf` and
//! `blas_<s|d|c|z>getrs` compute them, column-major as cuBLAS is: the CUDA shim's
//! `cublas<S|D|C|Z>getrfBatched`, `getrsBatched` and `getriBatched` launch them. Here: a
//! launch's shape read from its arguments (`ac_proto`'s [`Getrf`] and [`Getrs`], shared with the
//! shim, which also say in what order every implementation computes), and the complex pivot's
//! magnitude for the CPU device. The CUDA source is in `cuda/kernels.cu`.
//!
//! Parameters (`T` the element: `f32`, `f64`, or their complex numbers, real part first):
//!
//! - `blas_<t>getrf(u32 n, T* A, u32 lda, u64 stride_a, u32 pivoting, i32* pivots, u64
//!   stride_p, i32* info, u32 batch)`: `P A_b = L U` over `A_b`; `pivots` (1-based, LAPACK's)
//!   written only if `pivoting` is 1, else not touched; `info[b]` the first zero pivot's column
//!   + 1, or 0.
//! - `blas_<t>getrs(u32 trans, u32 n, u32 nrhs, const T* A, u32 lda, u64 stride_a, u32 flags,
//!   const i32* pivots, u64 stride_p, T* B, u32 ldb, u64 stride_b, i32* info, u32 batch)`:
//!   `op(A_b) X = B_b` with `getrf`'s factors, `X` over `B_b`; `flags` bit 0: apply the pivots
//!   (else not read); bit 1: invert (`B_b` starts as the identity, not read; `nrhs` is `n`;
//!   `info[b]` written, else not touched).

use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

pub use ac_proto::backend::builtin::lu::{factor, solve, Getrf, Getrs, Pivot};

use super::gemm::Complex;
use super::{size_arg, DeviceArg, DeviceResult};

/// Every `blas_<t>getrf`'s parameters.
pub const GETRF: [ParamKind; 9] = [U32, Ptr, U32, U64, U32, Ptr, U64, Ptr, U32];
/// Every `blas_<t>getrs`'s parameters.
pub const GETRS: [ParamKind; 14] = [U32, U32, U32, Ptr, U32, U64, U32, Ptr, U64, Ptr, U32, U64, Ptr, U32];

/// `blas_<t>getrf`'s pointers: `A`, the pivots, `info`.
pub const GETRF_POINTERS: [usize; 3] = [1, 5, 7];
/// `blas_<t>getrs`'s pointers: `A`, the pivots, `B`, `info`.
pub const GETRS_POINTERS: [usize; 4] = [3, 7, 9, 12];

/// `blas_<t>getrs`'s `flags`: apply the pivots.
pub const PIVOTING: u64 = 1;
/// `blas_<t>getrs`'s `flags`: invert.
pub const INVERSE: u64 = 2;

/// Bytes of an element of builtin `blas_<t>getrf` or `blas_<t>getrs`.
pub fn width(name: &str) -> u64 {
    match name.as_bytes().get(5) {
        Some(b's') => 4,
        Some(b'd' | b'c') => 8,
        _ => 16,
    }
}

/// A 0-or-1 argument, refused otherwise.
pub(super) fn flag(name: &str, args: &[DeviceArg], i: usize, what: &str) -> DeviceResult<bool> {
    match size_arg(name, args, i)? {
        v @ (0 | 1) => Ok(v == 1),
        v => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {what} {v} (0 or 1)"))),
    }
}

/// Refuses a shape this contract refuses.
pub(super) fn accepted<S>(name: &str, shape: S, refusal: Option<String>) -> DeviceResult<S> {
    match refusal {
        Some(why) => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"))),
        None => Ok(shape),
    }
}

/// The shape of launch `args` of a `blas_<t>getrf`.
pub fn getrf_shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Getrf> {
    let at = |i| size_arg(name, args, i);
    let g = Getrf {
        n: at(0)?,
        lda: at(2)?,
        stride_a: at(3)?,
        pivoting: flag(name, args, 4, "pivoting")?,
        stride_p: at(6)?,
        batch: at(8)?,
    };
    accepted(name, g, g.refusal())
}

/// The shape of launch `args` of a `blas_<t>getrs`.
pub fn getrs_shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Getrs> {
    let at = |i| size_arg(name, args, i);
    let flags = at(6)?;
    if flags > (PIVOTING | INVERSE) {
        return Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: flags {flags} (bits 0 and 1)")));
    }
    let s = Getrs {
        trans: at(0)?.min(u64::from(u32::MAX)) as u32,
        n: at(1)?,
        nrhs: at(2)?,
        ld: [at(4)?, at(10)?],
        stride: [at(5)?, at(11)?],
        pivoting: flags & PIVOTING != 0,
        stride_p: at(8)?,
        inverse: flags & INVERSE != 0,
        batch: at(13)?,
    };
    accepted(name, s, s.refusal())
}

/// Each pointer argument of a `blas_<t>getrf` or `blas_<t>getrs` launch, the elements touched
/// from it and their bytes.
pub fn footprints(name: &str, args: &[DeviceArg]) -> DeviceResult<Vec<(usize, u64, u64)>> {
    let w = width(name);
    Ok(if name.ends_with("getrf") {
        let [a, p, info] = getrf_shape(name, args)?.footprints();
        GETRF_POINTERS.into_iter().zip([(a, w), (p, 4), (info, 4)]).map(|(i, (n, w))| (i, n, w)).collect()
    } else {
        let [a, p, b, info] = getrs_shape(name, args)?.footprints();
        GETRS_POINTERS.into_iter().zip([(a, w), (p, 4), (b, w), (info, 4)]).map(|(i, (n, w))| (i, n, w)).collect()
    })
}

/// The work of a `blas_<t>getrf` or `blas_<t>getrs` launch.
pub fn work(name: &str, args: &[DeviceArg]) -> DeviceResult<u64> {
    Ok(if name.ends_with("getrf") { getrf_shape(name, args)?.work() } else { getrs_shape(name, args)?.work() })
}

macro_rules! complex_pivot {
    ($t:ty) => {
        impl Pivot for Complex<$t> {
            const ZERO: Self = Complex { re: 0.0, im: 0.0 };
            const ONE: Self = Complex { re: 1.0, im: 0.0 };
            fn magnitude(self) -> f64 {
                // |re| + |im| rounded in its own precision, as BLAS's icamax and kernels.cu.
                f64::from(self.re.abs() + self.im.abs())
            }
        }
    };
}

complex_pivot!(f32);
complex_pivot!(f64);

//! QR factorizations and least-squares solves as the builtin kernels `blas_<s|d|c|z>geqrf` and
//! `blas_<s|d|c|z>gels` compute them, column-major as cuBLAS is: the CUDA shim's
//! `cublas<S|D|C|Z>geqrfBatched` and `gelsBatched` launch them. Here: a launch's shape read from
//! its arguments (`ac_proto`'s [`Geqrf`] and [`Gels`], shared with the shim, which also say in
//! what order every implementation computes), and the complex element's parts for the CPU
//! device. The CUDA source is in `cuda/kernels.cu`.
//!
//! Parameters (`T` the element: `f32`, `f64`, or their complex numbers, real part first):
//!
//! - `blas_<t>geqrf(u32 m, u32 n, T* A, u32 lda, u64 stride_a, T* tau, u64 stride_t, u32
//!   batch)`: `A_b = Q R` over `A_b` (`R` on and above the diagonal, the reflectors below),
//!   `min(m, n)` `tau`s from `tau + b stride_t`.
//! - `blas_<t>gels(u32 m, u32 n, u32 nrhs, T* A, u32 lda, u64 stride_a, T* C, u32 ldc, u64
//!   stride_c, u32 flags, i32* info, u32 batch)`: `min |A_b X - C_b|` for `m >= n`, `A_b`
//!   factored as `geqrf` does, `X` over `C_b`'s first `n` rows; `flags` bit 0: `info[b]` written
//!   (`R`'s first zero diagonal + 1, or 0), else not touched.

use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

pub use ac_proto::backend::builtin::qr::{factor, solve, Gels, Geqrf, Reflect};

use super::gemm::Complex;
use super::lu::{accepted, width};
use super::{size_arg, DeviceArg, DeviceResult};

/// Every `blas_<t>geqrf`'s parameters.
pub const GEQRF: [ParamKind; 8] = [U32, U32, Ptr, U32, U64, Ptr, U64, U32];
/// Every `blas_<t>gels`'s parameters.
pub const GELS: [ParamKind; 12] = [U32, U32, U32, Ptr, U32, U64, Ptr, U32, U64, U32, Ptr, U32];

/// `blas_<t>geqrf`'s pointers: `A`, `tau`.
pub const GEQRF_POINTERS: [usize; 2] = [2, 5];
/// `blas_<t>gels`'s pointers: `A`, `C`, `info`.
pub const GELS_POINTERS: [usize; 3] = [3, 6, 10];

/// `blas_<t>gels`'s `flags`: write `info`.
pub const INFO: u64 = 1;

/// The shape of launch `args` of a `blas_<t>geqrf`.
pub fn geqrf_shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Geqrf> {
    let at = |i| size_arg(name, args, i);
    let g = Geqrf { m: at(0)?, n: at(1)?, lda: at(3)?, stride_a: at(4)?, stride_t: at(6)?, batch: at(7)? };
    accepted(name, g, g.refusal())
}

/// The shape of launch `args` of a `blas_<t>gels`.
pub fn gels_shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Gels> {
    let at = |i| size_arg(name, args, i);
    let flags = at(9)?;
    if flags > INFO {
        return Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: flags {flags} (bit 0)")));
    }
    let s = Gels {
        m: at(0)?,
        n: at(1)?,
        nrhs: at(2)?,
        ld: [at(4)?, at(7)?],
        stride: [at(5)?, at(8)?],
        info: flags & INFO != 0,
        batch: at(11)?,
    };
    accepted(name, s, s.refusal())
}

/// Each pointer argument of a `blas_<t>geqrf` or `blas_<t>gels` launch, the elements touched
/// from it and their bytes.
pub fn footprints(name: &str, args: &[DeviceArg]) -> DeviceResult<Vec<(usize, u64, u64)>> {
    let w = width(name);
    Ok(if name.ends_with("geqrf") {
        let [a, tau] = geqrf_shape(name, args)?.footprints();
        GEQRF_POINTERS.into_iter().zip([a, tau]).map(|(i, n)| (i, n, w)).collect()
    } else {
        let [a, c, info] = gels_shape(name, args)?.footprints();
        GELS_POINTERS.into_iter().zip([(a, w), (c, w), (info, 4)]).map(|(i, (n, w))| (i, n, w)).collect()
    })
}

/// The work of a `blas_<t>geqrf` or `blas_<t>gels` launch.
pub fn work(name: &str, args: &[DeviceArg]) -> DeviceResult<u64> {
    Ok(if name.ends_with("geqrf") { geqrf_shape(name, args)?.work() } else { gels_shape(name, args)?.work() })
}

macro_rules! complex_reflect {
    ($t:ty) => {
        impl Reflect for Complex<$t> {
            type Real = $t;
            fn re(self) -> $t {
                self.re
            }
            fn im(self) -> $t {
                self.im
            }
            fn of_parts(re: $t, im: $t) -> Self {
                Complex { re, im }
            }
        }
    };
}

complex_reflect!(f32);
complex_reflect!(f64);

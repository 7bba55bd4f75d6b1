//! BLAS's triangular solve as the builtin kernels `blas_strsm`, `blas_dtrsm`, `blas_ctrsm` and
//! `blas_ztrsm` compute it, column-major as cuBLAS is: the CUDA shim's `cublas<S|D|C|Z>trsm`
//! launch them. Here: a launch's shape read from its arguments (`ac_proto`'s [`Trsm`], shared
//! with the shim, which also says in what order every implementation solves), its alpha, and
//! complex arithmetic for the CPU device. The CUDA source is in `cuda/kernels.cu`.
//!
//! Parameters: `(u32 side, u32 uplo, u32 trans, u32 diag, u32 m, u32 n, T alpha, const T* A,
//! u32 lda, u64 stride_a, T* B, u32 ldb, u64 stride_b, u32 batch)`, cuBLAS's codes: side 0
//! left (`op(A_b) X = alpha B_b`), 1 right (`X op(A_b) = alpha B_b`); uplo 0 lower, 1 upper;
//! trans 0, 1 transpose, 2 conjugate transpose; diag 0 read, 1 unit (not read). `X` is
//! written over `B_b`. `blas_ctrsm` and `blas_ztrsm` take complex matrices, `alpha` its real
//! part, and one more parameter, its imaginary part.

use std::ops::{Add, Mul, Neg, Sub};

pub use ac_proto::backend::builtin::trsm::{solve, Field, Trsm};
use ac_proto::backend::ParamKind::{self, Ptr, F32, F64, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

use super::gemm::{scalar, Complex, Element};
use super::{size_arg, DeviceArg, DeviceResult};

/// The parameters of `blas_<t>trsm` on real matrices, `scalar` being `T`'s kind.
pub const fn params(scalar: ParamKind) -> [ParamKind; 14] {
    [U32, U32, U32, U32, U32, U32, scalar, Ptr, U32, U64, Ptr, U32, U64, U32]
}

/// `blas_strsm`'s parameters.
pub const STRSM: [ParamKind; 14] = params(F32);
/// `blas_dtrsm`'s parameters.
pub const DTRSM: [ParamKind; 14] = params(F64);
/// `blas_ctrsm`'s parameters: `blas_strsm`'s, then alpha's imaginary part.
pub const CTRSM: [ParamKind; 15] = complex_params(F32);
/// `blas_ztrsm`'s parameters.
pub const ZTRSM: [ParamKind; 15] = complex_params(F64);

const fn complex_params(scalar: ParamKind) -> [ParamKind; 15] {
    let s = params(scalar);
    [s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], scalar]
}

/// Argument indices: alpha, its imaginary part (complex kernels), and the two matrices.
pub const ALPHA: usize = 6;
/// Alpha's imaginary part.
pub const ALPHA_IM: usize = 14;
/// The pointers to `A` and `B`.
pub const MATRICES: [usize; 2] = [7, 10];

/// Bytes of an element of builtin trsm `name`.
pub fn width(name: &str) -> u64 {
    match name {
        "blas_strsm" => 4,
        "blas_dtrsm" | "blas_ctrsm" => 8,
        _ => 16,
    }
}

/// The shape of launch `args` of builtin `name`, refused where BLAS refuses it and where
/// batches' solutions would overlap ([`Trsm::refusal`]).
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Trsm> {
    let at = |i| size_arg(name, args, i);
    let code = |i, what: &str| match at(i)? {
        v @ (0 | 1) => Ok(v == 0),
        v => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {what} {v} (0 or 1)"))),
    };
    let t = Trsm {
        left: code(0, "side")?,
        lower: code(1, "uplo")?,
        trans: at(2)?.min(u64::from(u32::MAX)) as u32,
        unit: !code(3, "diag")?,
        m: at(4)?,
        n: at(5)?,
        ld: [at(8)?, at(11)?],
        stride: [at(9)?, at(12)?],
        batch: at(13)?,
    };
    match t.refusal() {
        Some(why) => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"))),
        None => Ok(t),
    }
}

/// Alpha of a `blas_ctrsm` or `blas_ztrsm` launch: its real part where a real trsm's is, its
/// imaginary part last.
pub fn complex_alpha<T: Element>(args: &[DeviceArg]) -> DeviceResult<Complex<T>> {
    Ok(Complex { re: scalar(args, ALPHA)?, im: scalar(args, ALPHA_IM)? })
}

impl<T> Field for Complex<T>
where
    T: Copy + Add<Output = T> + Sub<Output = T> + Mul<Output = T> + Neg<Output = T> + std::ops::Div<Output = T>,
{
    fn times(self, o: Self) -> Self {
        Complex { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
    fn less_product(self, m: Self, x: Self) -> Self {
        let p = m.times(x);
        Complex { re: self.re - p.re, im: self.im - p.im }
    }
    fn over(self, q: Self) -> Self {
        let p = self.times(Field::conj(q));
        let d = q.re * q.re + q.im * q.im;
        Complex { re: p.re / d, im: p.im / d }
    }
    fn conj(self) -> Self {
        Complex { re: self.re, im: -self.im }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceMem;
    use ac_proto::backend::KernelArg;

    fn args(codes: [u32; 4], m: u32, n: u32, ld: [u32; 2]) -> Vec<DeviceArg> {
        let u = |v: u32| DeviceArg::Scalar(KernelArg::U32(v));
        let l = |v: u64| DeviceArg::Scalar(KernelArg::U64(v));
        let p = DeviceArg::Mem { mem: DeviceMem(1), offset: 0, len: 1 << 20 };
        let f = DeviceArg::Scalar(KernelArg::F32(1.0));
        vec![
            u(codes[0]),
            u(codes[1]),
            u(codes[2]),
            u(codes[3]),
            u(m),
            u(n),
            f,
            p,
            u(ld[0]),
            l(0),
            p,
            u(ld[1]),
            l(0),
            u(1),
        ]
    }

    #[test]
    fn codes_read_as_cublas_numbers_them() {
        let t = shape("blas_strsm", &args([1, 0, 2, 1], 3, 2, [2, 3])).unwrap();
        assert!(!t.left && t.lower && t.trans == 2 && t.unit, "{t:?}");
        assert_eq!(t.order(), 2);
        let e = shape("blas_strsm", &args([2, 0, 0, 0], 3, 2, [3, 3])).unwrap_err();
        assert!(e.message.contains("side 2"), "{}", e.message);
        let e = shape("blas_strsm", &args([0, 0, 0, 0], 3, 2, [2, 3])).unwrap_err();
        assert!(e.message.contains("lda = 2 is below A's 3 rows"), "{}", e.message);
    }

    #[test]
    fn a_complex_quotient_is_exact_where_its_parts_are() {
        // (3 + 4i) / (1 + 2i) = (3 + 4i)(1 - 2i) / 5 = (11 - 2i) / 5.
        let q = Complex { re: 3.0f64, im: 4.0 }.over(Complex { re: 1.0, im: 2.0 });
        assert_eq!(q, Complex { re: 11.0 / 5.0, im: -2.0 / 5.0 });
        let r =
            Complex { re: 1.0f64, im: 1.0 }.less_product(Complex { re: 0.0, im: 1.0 }, Complex { re: 2.0, im: 0.0 });
        assert_eq!(r, Complex { re: 1.0, im: -1.0 });
    }
}

//! BLAS's gemm as the builtin kernels `blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`, `blas_cgemm`
//! and `blas_zgemm` compute it (and `blas_<s|d|c|z>gemmt`, one triangle of a square `C`: the
//! shim's `syrk`, `syrkx` and `syr2k`), column-major as cuBLAS is: the CUDA shim's `cublas<S|D|H|C|Z>gemm`,
//! `cublasGemmEx`, their strided-batched forms and cuBLASLt's matmul launch them. Here: a launch's shape read from its arguments (what it touches of each matrix,
//! checked before a launch on a device that cannot check accesses while it runs, is
//! `ac_proto`'s [`Gemm`], shared with the shim), and the CPU device's implementation. The CUDA source is in `cuda/kernels.cu`.
//!
//! Parameters: `(u32 transa, u32 transb, u32 m, u32 n, u32 k, T alpha, const T* A, u32 lda,
//! u64 stride_a, const T* B, u32 ldb, u64 stride_b, T beta, T* C, u32 ldc, u64 stride_c,
//! u32 batch)`: `C_b = alpha op(A_b) op(B_b) + beta C_b` for each `b < batch`, `op(X)` is `X`
//! or its transpose (`trans` 1; 2, a conjugate transpose, is the transpose of a real matrix),
//! `X_b = X + b * stride_x` elements, element `(i, j)` of `X`
//! at `X[i + j * ldx]`; `C` is not read when `beta` is 0. `blas_gemm_ex` takes `f32` scalars
//! and one more parameter, `u32 types`, the three matrices' element types (`f32`, `f16` or
//! `bf16`, [`GemmElement`]), and computes in `f32`. `blas_cgemm` and `blas_zgemm` take
//! [`Complex`] matrices, `alpha` and `beta` their real parts, and two more parameters, their
//! imaginary parts.

use std::ops::{Add, Mul, Neg, Sub};

pub use ac_proto::backend::builtin::{Gemm, GemmElement};
use ac_proto::backend::ParamKind::{self, Ptr, F32, F64, U32, U64};
use ac_proto::backend::{ErrorKind, KernelArg, WireError};

use super::{size_arg, DeviceArg, DeviceResult};

/// The parameters of `blas_<t>gemm`, `scalar` being `T`'s kind.
pub const fn params(scalar: ParamKind) -> [ParamKind; 17] {
    [U32, U32, U32, U32, U32, scalar, Ptr, U32, U64, Ptr, U32, U64, scalar, Ptr, U32, U64, U32]
}

/// `blas_sgemm`'s parameters.
pub const SGEMM: [ParamKind; 17] = params(F32);
/// `blas_dgemm`'s parameters.
pub const DGEMM: [ParamKind; 17] = params(F64);
/// `blas_gemm_ex`'s parameters: `blas_sgemm`'s, the matrices of the types its last codes
/// ([`GemmElement::decode`]).
pub const GEMM_EX: [ParamKind; 18] = {
    let s = SGEMM;
    [s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16], U32]
};
/// `blas_gemm_ex`'s `types` argument.
pub const TYPES: usize = 17;
/// `blas_cgemm`'s and `blas_zgemm`'s parameters: `blas_sgemm`'s or `blas_dgemm`'s (`alpha` and
/// `beta` their real parts, the matrices complex), then `alpha`'s and `beta`'s imaginary parts.
pub const CGEMM: [ParamKind; 19] = complex_params(F32);
/// `blas_zgemm`'s parameters.
pub const ZGEMM: [ParamKind; 19] = complex_params(F64);
/// The imaginary parts of `alpha` and `beta` of `blas_cgemm` and `blas_zgemm`.
pub const ALPHA_IM: usize = 17;
/// `beta`'s imaginary part.
pub const BETA_IM: usize = 18;

/// `blas_<t>gemmt`'s parameters: `blas_<t>gemm`'s, then `u32 fill`, the triangle of `C` it
/// computes ([`Fill`]).
pub const SGEMMT: [ParamKind; 18] = with_fill(SGEMM);
/// `blas_dgemmt`'s parameters.
pub const DGEMMT: [ParamKind; 18] = with_fill(DGEMM);
/// `blas_cgemmt`'s parameters.
pub const CGEMMT: [ParamKind; 20] = with_fill(CGEMM);
/// `blas_zgemmt`'s parameters.
pub const ZGEMMT: [ParamKind; 20] = with_fill(ZGEMM);

/// `blas_<t>gemm_tri`'s parameters: `blas_<t>gemmt`'s, the last `u32 form`, how `A` or `B`
/// is read from a triangle ([`super::structured`]).
pub const SGEMM_TRI: [ParamKind; 18] = SGEMMT;
/// `blas_dgemm_tri`'s parameters.
pub const DGEMM_TRI: [ParamKind; 18] = DGEMMT;
/// `blas_cgemm_tri`'s parameters.
pub const CGEMM_TRI: [ParamKind; 20] = CGEMMT;
/// `blas_zgemm_tri`'s parameters.
pub const ZGEMM_TRI: [ParamKind; 20] = ZGEMMT;

/// `params` and then a `u32`.
const fn with_fill<const N: usize, const M: usize>(params: [ParamKind; N]) -> [ParamKind; M] {
    let mut out = [U32; M];
    let mut i = 0;
    while i < N {
        out[i] = params[i];
        i += 1;
    }
    out
}

/// Which elements of `C` a launch computes; the others are neither read nor written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Every element (`blas_<t>gemm`).
    All,
    /// The lower triangle, the diagonal included (`blas_<t>gemmt`, `fill` 0, as
    /// `CUBLAS_FILL_MODE_LOWER`).
    Lower,
    /// The upper triangle, the diagonal included (`fill` 1).
    Upper,
}

impl Fill {
    /// Whether element `(i, j)` of `C` is computed.
    pub fn holds(self, i: u64, j: u64) -> bool {
        match self {
            Fill::All => true,
            Fill::Lower => i >= j,
            Fill::Upper => i <= j,
        }
    }
}

/// The triangle launch `args` of builtin gemm `name` computes: all of `C` but for
/// `blas_<t>gemmt`, whose `C` must be square.
pub fn fill(name: &str, args: &[DeviceArg]) -> DeviceResult<Fill> {
    if !name.ends_with("gemmt") {
        return Ok(Fill::All);
    }
    let at = if matches!(name, "blas_cgemmt" | "blas_zgemmt") { ZGEMM.len() } else { DGEMM.len() };
    let refused = |why: String| Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}")));
    let (m, n) = (size_arg(name, args, 2)?, size_arg(name, args, 3)?);
    if m != n {
        return refused(format!("a triangle of C {m} x {n}: C must be square"));
    }
    match size_arg(name, args, at)? {
        0 => Ok(Fill::Lower),
        1 => Ok(Fill::Upper),
        other => refused(format!("fill {other} (0 lower, 1 upper)")),
    }
}

const fn complex_params(scalar: ParamKind) -> [ParamKind; 19] {
    let s = params(scalar);
    [
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16],
        scalar, scalar,
    ]
}

/// Argument indices: the scalars, and the three matrices' pointers.
pub const ALPHA: usize = 5;
/// `beta`'s index.
pub const BETA: usize = 12;
/// The pointers to `A`, `B` and `C`.
pub const MATRICES: [usize; 3] = [6, 9, 13];

/// The element types of `blas_gemm_ex` launch `args`, or why they are refused.
pub fn element_types(name: &str, args: &[DeviceArg]) -> DeviceResult<[GemmElement; 3]> {
    let types = size_arg(name, args, TYPES)?;
    GemmElement::decode(types).ok_or_else(|| {
        WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: matrix types {types:#x} (0 f32, 1 f16, 2 bf16)"))
    })
}

/// The element types of the matrices of builtin gemm `name` (`blas_sgemm`, `blas_dgemm`,
/// `blas_gemm_ex`, `blas_cgemm`, `blas_zgemm`) launched with `args`: their widths in bytes.
pub fn widths(name: &str, args: &[DeviceArg]) -> DeviceResult<[u64; 3]> {
    Ok(match name {
        "blas_sgemm" | "blas_sgemmt" | "blas_sgemm_tri" => [4; 3],
        "blas_dgemm" | "blas_cgemm" | "blas_dgemmt" | "blas_cgemmt" | "blas_dgemm_tri" | "blas_cgemm_tri" => [8; 3],
        "blas_zgemm" | "blas_zgemmt" | "blas_zgemm_tri" => [16; 3],
        _ => element_types(name, args)?.map(GemmElement::bytes),
    })
}

/// Whether `op(A)` and `op(B)` of launch `args` read their matrices conjugated (operation 2,
/// `CUBLAS_OP_C`: a conjugate transpose; the plain transpose of a real matrix).
pub fn conjugated(name: &str, args: &[DeviceArg]) -> DeviceResult<[bool; 2]> {
    Ok([size_arg(name, args, 0)? == 2, size_arg(name, args, 1)? == 2])
}

/// The shape of launch `args` of builtin `name`, refused where BLAS refuses it and where
/// batches' results would overlap ([`Gemm::refusal`]).
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Gemm> {
    let at = |i| size_arg(name, args, i);
    let gemm = Gemm {
        trans_a: at(0)? != 0,
        trans_b: at(1)? != 0,
        m: at(2)?,
        n: at(3)?,
        k: at(4)?,
        ld: [at(7)?, at(10)?, at(14)?],
        stride: [at(8)?, at(11)?, at(15)?],
        batch: at(16)?,
    };
    match gemm.refusal() {
        Some(why) => Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"))),
        None => Ok(gemm),
    }
}

/// An element type of the gemm kernels: `f32`, `f64` or their [`Complex`], little-endian in
/// device memory.
pub trait Element: Copy + PartialEq + Default + Add<Output = Self> + Mul<Output = Self> {
    /// Bytes of one.
    const BYTES: usize;
    /// One read from its bytes.
    fn from_le(bytes: &[u8]) -> Self;
    /// Its bytes.
    fn write_le(self, out: &mut [u8]);
    /// The value of a scalar argument of this type.
    fn of(arg: &DeviceArg) -> DeviceResult<Self>;
    /// One.
    fn one() -> Self;
    /// Its complex conjugate: itself, for a real number.
    fn conj(self) -> Self {
        self
    }
    /// Its real part, as an element: itself, for a real number.
    fn real(self) -> Self {
        self
    }
}

/// A complex element (`cuComplex`, `cuDoubleComplex`): real part first in memory.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

impl<T: Add<Output = T> + Sub<Output = T> + Mul<Output = T> + Copy> Mul for Complex<T> {
    type Output = Self;
    fn mul(self, o: Self) -> Self {
        Complex { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
}

impl<T: Add<Output = T>> Add for Complex<T> {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Complex { re: self.re + o.re, im: self.im + o.im }
    }
}

impl<T: Sub<Output = T>> Sub for Complex<T> {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Complex { re: self.re - o.re, im: self.im - o.im }
    }
}

impl<T: Element + Neg<Output = T> + Sub<Output = T>> Element for Complex<T> {
    const BYTES: usize = 2 * T::BYTES;
    fn from_le(bytes: &[u8]) -> Self {
        Complex { re: T::from_le(&bytes[..T::BYTES]), im: T::from_le(&bytes[T::BYTES..]) }
    }
    fn write_le(self, out: &mut [u8]) {
        let (re, im) = out.split_at_mut(T::BYTES);
        self.re.write_le(re);
        self.im.write_le(im);
    }
    fn of(arg: &DeviceArg) -> DeviceResult<Self> {
        // A complex scalar is two arguments: see `complex_scalars`.
        Err(WireError::new(ErrorKind::InvalidArgument, format!("expected one real part, got {arg:?}")))
    }
    fn one() -> Self {
        Complex { re: T::one(), im: T::default() }
    }
    fn conj(self) -> Self {
        Complex { re: self.re, im: -self.im }
    }
    fn real(self) -> Self {
        Complex { re: self.re, im: T::default() }
    }
}

/// `alpha` and `beta` of a `blas_cgemm` or `blas_zgemm` launch: their real parts where a real
/// gemm's are, their imaginary parts after `batch`.
pub fn complex_scalars<T: Element>(args: &[DeviceArg]) -> DeviceResult<[Complex<T>; 2]> {
    let at = |i| scalar::<T>(args, i);
    Ok([Complex { re: at(ALPHA)?, im: at(ALPHA_IM)? }, Complex { re: at(BETA)?, im: at(BETA_IM)? }])
}

/// Scalar argument `i` of a launch, of type `T`.
pub fn scalar<T: Element>(args: &[DeviceArg], i: usize) -> DeviceResult<T> {
    args.get(i).map_or_else(|| Err(WireError::new(ErrorKind::InvalidArgument, "too few arguments")), T::of)
}

macro_rules! element {
    ($t:ty, $kind:ident) => {
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("an element's bytes"))
            }
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn one() -> Self {
                1 as $t
            }
            fn of(arg: &DeviceArg) -> DeviceResult<Self> {
                match arg {
                    DeviceArg::Scalar(KernelArg::$kind(v)) => Ok(*v),
                    other => Err(WireError::new(
                        ErrorKind::InvalidArgument,
                        format!("expected {}, got {other:?}", stringify!($t)),
                    )),
                }
            }
        }
    };
}

element!(f32, F32);
element!(f64, F64);
element!(i32, I32);

/// Computes the gemm on host slices, each from its matrix's pointer and as long as its
/// footprint; `c` is read only where `beta` is not 0.
pub fn run<T: Element>(g: &Gemm, alpha: T, a: &[T], b: &[T], beta: T, c: &mut [T]) {
    run_conjugated(g, [false; 2], Fill::All, alpha, a, b, beta, c)
}

/// [`run`], `op(A)` and `op(B)` conjugated where `conjugate` says (a conjugate transpose), the
/// elements of `C` that `fill` holds.
#[allow(clippy::too_many_arguments)] // a gemm's operands
pub fn run_conjugated<T: Element>(
    g: &Gemm,
    conjugate: [bool; 2],
    fill: Fill,
    alpha: T,
    a: &[T],
    b: &[T],
    beta: T,
    c: &mut [T],
) {
    let [lda, ldb, _] = g.ld.map(|ld| ld as usize);
    for batch in 0..g.batch as usize {
        // Offsets, not slices: a matrix of no elements (k = 0) is an empty slice, and then
        // its stride was never checked against a buffer (wrapping: never used).
        let (a0, b0) = (batch.wrapping_mul(g.stride[0] as usize), batch.wrapping_mul(g.stride[1] as usize));
        for j in 0..g.n as usize {
            for i in (0..g.m as usize).filter(|&i| fill.holds(i as u64, j as u64)) {
                let mut acc = T::default();
                for p in 0..g.k as usize {
                    let x = if g.trans_a { a[a0 + p + i * lda] } else { a[a0 + i + p * lda] };
                    let y = if g.trans_b { b[b0 + j + p * ldb] } else { b[b0 + p + j * ldb] };
                    let (x, y) = (if conjugate[0] { x.conj() } else { x }, if conjugate[1] { y.conj() } else { y });
                    acc = acc + x * y;
                }
                let out = &mut c[g.c_index(batch as u64, i as u64, j as u64)];
                *out = if beta == T::default() { alpha * acc } else { alpha * acc + beta * *out };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceMem;

    fn args(trans: [u32; 2], mnk: [u32; 3], ld: [u32; 3], stride: [u64; 3], batch: u32) -> Vec<DeviceArg> {
        let u = |v: u32| DeviceArg::Scalar(KernelArg::U32(v));
        let l = |v: u64| DeviceArg::Scalar(KernelArg::U64(v));
        let f = DeviceArg::Scalar(KernelArg::F32(1.0));
        let p = DeviceArg::Mem { mem: DeviceMem(1), offset: 0, len: 1 << 20 };
        vec![
            u(trans[0]),
            u(trans[1]),
            u(mnk[0]),
            u(mnk[1]),
            u(mnk[2]),
            f,
            p,
            u(ld[0]),
            l(stride[0]),
            p,
            u(ld[1]),
            l(stride[1]),
            f,
            p,
            u(ld[2]),
            l(stride[2]),
            u(batch),
        ]
    }

    #[test]
    fn a_transposed_product_matches_the_plain_one_of_the_transposes() {
        // A = [1 2 3; 4 5 6] (2x3), B = [7 8; 9 10; 11 12] (3x2), column-major.
        let a = [1., 4., 2., 5., 3., 6.];
        let b = [7., 9., 11., 8., 10., 12.];
        let plain = shape("g", &args([0, 0], [2, 2, 3], [2, 3, 2], [0; 3], 1)).unwrap();
        let mut c = [f32::NAN; 4];
        run(&plain, 1.0f32, &a, &b, 0.0, &mut c);
        assert_eq!(c, [58., 139., 64., 154.], "beta 0 ignores the NaN in C");
        // The same product from A^T (3x2) and B^T (2x3), stored as such.
        let (at, bt) = ([1., 2., 3., 4., 5., 6.], [7., 8., 9., 10., 11., 12.]);
        let trans = shape("g", &args([1, 1], [2, 2, 3], [3, 2, 2], [0; 3], 1)).unwrap();
        let mut c2 = [1.0f32; 4];
        run(&trans, 2.0f32, &at, &bt, 1.0, &mut c2);
        assert_eq!(c2, [117., 279., 129., 309.]);
    }

    #[test]
    fn a_triangle_gemm_computes_only_its_triangle_of_a_square_c() {
        // C = A B with A = B = [1 2; 3 4]: [7 10; 15 22]; C starts as -1 everywhere.
        let g = shape("g", &args([0, 0], [2, 2, 2], [2, 2, 2], [0; 3], 1)).unwrap();
        let ab = [1., 3., 2., 4.];
        for (fill, want) in [(Fill::Lower, [7., 15., -1., 22.]), (Fill::Upper, [7., -1., 10., 22.])] {
            let mut c = [-1.0f64; 4];
            run_conjugated(&g, [false; 2], fill, 1.0, &ab, &ab, 0.0, &mut c);
            assert_eq!(c, want, "{fill:?}");
        }
        // blas_<t>gemmt's fill is its last argument; C must be square.
        let mut square = args([0, 0], [2, 2, 2], [2, 2, 2], [0; 3], 1);
        square.push(DeviceArg::Scalar(KernelArg::U32(1)));
        assert_eq!(fill("blas_sgemmt", &square).unwrap(), Fill::Upper);
        assert_eq!(fill("blas_sgemm", &square).unwrap(), Fill::All);
        square[17] = DeviceArg::Scalar(KernelArg::U32(2));
        assert_eq!(fill("blas_sgemmt", &square).unwrap_err().kind, ErrorKind::InvalidArgument);
        let mut oblong = args([0, 0], [3, 2, 2], [3, 2, 3], [0; 3], 1);
        oblong.push(DeviceArg::Scalar(KernelArg::U32(0)));
        assert_eq!(fill("blas_sgemmt", &oblong).unwrap_err().kind, ErrorKind::InvalidArgument);
    }

    #[test]
    fn a_product_of_no_terms_scales_c() {
        // k = 0: A and B are read nowhere, C is beta C, batches apart.
        let no_k = shape("g", &args([0, 0], [2, 2, 0], [2, 1, 2], [9, 9, 4], 2)).unwrap();
        let mut c = [1.0f32; 8];
        run(&no_k, 1.0, &[], &[], 3.0, &mut c);
        assert_eq!(c, [3.0; 8]);
    }

    #[test]
    fn batches_whose_results_overlap_are_refused() {
        // C is 4x3 with ldc 6: one spans 2 * 6 + 4 = 16 elements (ac-proto's rule, tested there).
        let e = shape("g", &args([0, 0], [4, 3, 2], [4, 2, 6], [8, 6, 15], 2)).unwrap_err();
        assert!(e.message.contains("results overlap"), "{}", e.message);
        assert!(shape("g", &args([0, 0], [4, 3, 2], [4, 2, 6], [8, 6, 16], 2)).is_ok());
        // One batch may have any stride; A and B may be shared by every batch.
        assert!(shape("g", &args([0, 0], [4, 3, 2], [4, 2, 6], [0, 0, 0], 1)).is_ok());
        assert!(shape("g", &args([0, 0], [4, 3, 2], [4, 2, 6], [0, 0, 16], 9)).is_ok());
    }

    #[test]
    fn a_leading_dimension_below_the_rows_is_refused() {
        let e = shape("g", &args([0, 0], [4, 3, 2], [3, 2, 4], [0; 3], 1)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(e.message.contains("lda = 3 is below A's 4 rows"), "{}", e.message);
    }
}

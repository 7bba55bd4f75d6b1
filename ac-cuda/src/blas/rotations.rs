//! Plane rotations and the exchange of two vectors: `cublas<S|D|C|Cs|Z|Zd>rot` (a Givens
//! rotation), `cublas<S|D>rotm` (a modified Givens one), `cublas<S|D|C|Z>swap`; and the
//! functions that construct a rotation from scalars, `cublas<S|D|C|Z>rotg` and
//! `cublas<S|D>rotmg`.
//!
//! Each transform of two vectors is one 2 x 2 matrix `H` (`x' = h11 x + h12 y`,
//! `y' = h21 x + h22 y`), done as two one-term gemms of the builtin kernels
//! ([`super::gemm::launch`]), `x`'s old values through a copy made first on the stream:
//!
//! | call | `H` |
//! |---|---|
//! | `rot(c, s)` | `[c s; -conj(s) c]` (`c` real, `s` real or complex) |
//! | `rotm(param)` | as `param[0]` (the flag) says: `[h11 h12; h21 h22]`, `[1 h12; h21 1]`, `[h11 1; -1 h22]`; flag -2 is the identity, and nothing is launched |
//! | `swap` | `[0 1; 1 0]` |
//!
//! The copy is work that a graph capture does not record, so these calls are refused while
//! their stream captures. A vector BLAS reads backwards (a negative increment) is read
//! forwards from a copy, both written back after ([`super::contiguous`]); two both backwards
//! pair as both forwards and need none. `c`, `s` and `param` are read on the host (from device memory in
//! `CUBLAS_POINTER_MODE_DEVICE`, after the stream's work: the call waits). A coefficient of 0
//! does not read its vector (a gemm's zero alpha or beta reads no operand), so a NaN or an
//! infinity there does not reach the result, as it would in cuBLAS's `c x + s y`.
//!
//! `rotg` and `rotmg` have no vectors: they are computed here, in the call's precision, from
//! scalars read from host or device memory as the pointer mode says, and written back there
//! (in device memory after the work queued before: the call waits, and is refused while the
//! stream captures, since a graph would not redo it), as reference BLAS computes them. A real
//! `rotg` follows LAPACK 3.10's (`r` carries the sign of the larger of `a` and `b`; `b`
//! becomes `z`, from which `c` and `s` can be recovered); a complex one follows cuBLAS's
//! documentation (`r = b` when `a` is 0; `b` left alone; LAPACK 3.10's gives `|b|` there).
//! `rotmg` follows reference BLAS's, rescaling by 4096 until `d1` and `d2` lie within its
//! bounds (`srotmg`'s and `drotmg`'s own, about `2^-24` and `2^24`), and writes only the
//! elements of `param` its flag does not imply.

use std::ffi::{c_int, c_void};

use num_traits::Float;

use super::contiguous::{forwards, pairwise, Along};
use super::gemm::{check, launch, load, product, scalar_parts, scalar_value, Operand, Precision, Scalar};
use super::structured::copy_of;
use super::vectors::{served_increments, store};
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// A 2 x 2 matrix of complex coefficients (real ones: imaginary parts 0), by rows.
type Transform = [[[f64; 2]; 2]; 2];

/// Real coefficients as a [`Transform`].
fn real_transform([[h11, h12], [h21, h22]]: [[f64; 2]; 2]) -> Transform {
    [[[h11, 0.0], [h12, 0.0]], [[h21, 0.0], [h22, 0.0]]]
}

/// `swap`'s transform: `x' = y`, `y' = x`.
const EXCHANGE: [[f64; 2]; 2] = [[0.0, 1.0], [1.0, 0.0]];

/// `n` elements of two vectors, each `(address, increment)`.
#[derive(Debug, Clone, Copy)]
struct Pair {
    n: c_int,
    x: (u64, c_int),
    y: (u64, c_int),
}

/// `[x; y] = h [x; y]` over `pair`: `x = h12 y + h11 x`, then `y = h21 x' + h22 y` from a copy
/// `x'` of `x`'s old values. If the second launch is refused (it is checked as the first was,
/// so only a lost session does), `x` alone has changed.
unsafe fn transform(target: Target, precision: Precision, Pair { n, x, y }: Pair, h: Transform) -> CuResult<()> {
    served_increments(&[x.1, y.1])?;
    let (x, y) = pairwise(x, y);
    let vectors = [x, y].map(|v| Along::written(precision, n, v));
    forwards(target, "rot, rotm or swap", vectors, |[x, y]| transform_forwards(target, precision, Pair { n, x, y }, h))
}

/// [`transform`] of two vectors read forwards.
unsafe fn transform_forwards(
    target: Target,
    precision: Precision,
    Pair { n, x: (x, incx), y: (y, incy) }: Pair,
    h: Transform,
) -> CuResult<()> {
    // to = coefficient * from + keep * to: a gemm of the constant one by the row `from`.
    let term = |coefficient: [f64; 2], from: Operand, inc_from: c_int, keep: [f64; 2], to: u64, inc_to: c_int| {
        let matrices = [Operand::One, from, Operand::Memory(to)];
        let (coefficient, keep) = (Scalar::Parts(coefficient), Scalar::Parts(keep));
        product(precision, [0; 2], [1, n, 1], coefficient, matrices, [1, inc_from, inc_to], keep)
    };
    let into_x = term(h[0][1], Operand::Memory(y), incy, h[0][0], x, incx);
    // x's old values: the span the first product writes.
    let copy = copy_of(target, x, check(&into_x)?.footprints()[2] * precision.bytes() as u64)?;
    launch(target, into_x)?;
    launch(target, term(h[1][0], Operand::Slot(copy.at(0)), incx, h[1][1], y, incy))
}

/// Applies to `pair`, on handle `h`'s target, the transform that `matrix` gives from the call's
/// scalars (`None`: the identity, nothing launched); with no elements nothing is read, as in
/// BLAS.
unsafe fn apply(
    h: usize,
    precision: Precision,
    pair: Pair,
    matrix: impl FnOnce(Target) -> CuResult<Option<Transform>>,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if pair.n <= 0 {
        return Ok(());
    }
    match matrix(target)? {
        Some(matrix) => transform(target, precision, pair, matrix),
        None => Ok(()),
    }
}

/// `rot`'s matrix, `[c s; -conj(s) c]`: `c` a real of `precision`, `s` of `s_precision` (real,
/// or the vectors' complex type).
unsafe fn givens_transform(
    target: Target,
    precision: Precision,
    c: *const c_void,
    (s, s_precision): (*const c_void, Precision),
) -> CuResult<Option<Transform>> {
    let c = [scalar_value(target, precision.real(), Scalar::At(c))?, 0.0];
    let s = scalar_parts(target, s_precision, Scalar::At(s))?;
    Ok(Some([[c, s], [[-s[0], s[1]], c]]))
}

/// `rotm`'s matrix from `param` (`flag, h11, h21, h12, h22`): `None` for the identity (flag
/// -2). Other flags are read as reference BLAS reads them, by sign: below 0 all four elements,
/// 0 the off-diagonal ones, above 0 (or NaN) the diagonal ones.
fn modified_transform([flag, h11, h21, h12, h22]: [f64; 5]) -> Option<[[f64; 2]; 2]> {
    if flag == -2.0 {
        None
    } else if flag < 0.0 {
        Some([[h11, h12], [h21, h22]])
    } else if flag == 0.0 {
        Some([[1.0, h12], [h21, 1.0]])
    } else {
        Some([[h11, 1.0], [-1.0, h22]])
    }
}

/// Writes an element of `precision` to the program's `p`.
unsafe fn write(target: Target, precision: Precision, p: *mut c_void, value: [f64; 2]) -> CuResult<()> {
    store(target, p, &precision.encode_parts(value))
}

/// Refuses `rotg` or `rotmg` on scalars in device memory while the stream captures: they are
/// read and written at once, which a graph would not redo when it runs.
fn refuse_captured_scalars(target: Target, what: &str) -> CuResult<()> {
    if target.host_pointers() {
        return Ok(());
    }
    crate::graph::refuse_if_capturing(target.stream, what)
}

/// `rotm`'s and `rotmg`'s `param`: five reals of `precision`.
unsafe fn read_param(target: Target, precision: Precision, param: *const c_void) -> CuResult<[f64; 5]> {
    let mut bytes = [0u8; 40];
    let width = precision.bytes();
    load(target, param, &mut bytes[..5 * width])?;
    Ok(std::array::from_fn(|i| precision.parts(&bytes[i * width..])[0]))
}

/// `v` in the type `F` computes in (exact: it came from an `F`).
fn narrow<F: Float>(v: f64) -> F {
    F::from(v).unwrap_or_else(F::nan)
}

/// `v` as the `f64` it is exactly.
fn widen<F: Float>(v: F) -> f64 {
    v.to_f64().unwrap_or(f64::NAN)
}

/// A real Givens rotation zeroing `b` in `(a, b)`: `[r, z, c, s]`, as LAPACK 3.10's `rotg`.
fn real_givens<F: Float>(a: F, b: F) -> [F; 4] {
    let (zero, one) = (F::zero(), F::one());
    let (a_norm, b_norm) = (a.abs(), b.abs());
    if b_norm == zero {
        return [a, zero, one, zero];
    }
    if a_norm == zero {
        return [b, one, zero, one];
    }
    // Scaled by the larger, so that the squares neither overflow nor underflow.
    let scale = a_norm.max(b_norm);
    let sign = if a_norm > b_norm { a.signum() } else { b.signum() };
    let r = sign * scale * ((a / scale).powi(2) + (b / scale).powi(2)).sqrt();
    let (c, s) = (a / r, b / r);
    let z = if a_norm > b_norm {
        s
    } else if c != zero {
        one / c
    } else {
        one
    };
    [r, z, c, s]
}

/// A complex Givens rotation zeroing `b` in `(a, b)`: `(r, c, s)`, as cuBLAS documents it
/// (`r = a/|a| ||(a, b)||`, `c = |a| / ||(a, b)||`, `s = a/|a| conj(b) / ||(a, b)||`; `a` 0:
/// `r = b`, `c` 0, `s` 1).
fn complex_givens<F: Float>(a: [F; 2], b: [F; 2]) -> ([F; 2], F, [F; 2]) {
    let (zero, one) = (F::zero(), F::one());
    let a_norm = a[0].hypot(a[1]);
    if a_norm == zero {
        return (b, zero, [one, zero]);
    }
    let norm = a_norm.hypot(b[0].hypot(b[1]));
    let phase = [a[0] / a_norm, a[1] / a_norm];
    // phase * conj(b) / norm
    let s = [(phase[0] * b[0] + phase[1] * b[1]) / norm, (phase[1] * b[0] - phase[0] * b[1]) / norm];
    ([phase[0] * norm, phase[1] * norm], a_norm / norm, s)
}

/// What `rotmg` leaves: the flag, `H`'s four elements as `param` stores them (`h11`, `h21`,
/// `h12`, `h22`; those the flag implies among them), and `d1`, `d2`, `x1`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Modified<F> {
    flag: F,
    h: [F; 4],
    d1: F,
    d2: F,
    x1: F,
}

impl<F: Float> Modified<F> {
    /// The transform that zeroes everything (a negative `d1`, or rounding that makes the
    /// rotation meaningless).
    fn zeroed() -> Self {
        let zero = F::zero();
        Modified { flag: -F::one(), h: [zero; 4], d1: zero, d2: zero, x1: zero }
    }

    /// The elements of `param` reference BLAS writes, by index: the flag, and those of `H`
    /// (`h11`, `h21`, `h12`, `h22` at 1 to 4) that the flag does not imply.
    fn param(&self) -> Vec<(usize, F)> {
        let [h11, h21, h12, h22] = self.h;
        let mut written = vec![(0, self.flag)];
        match self.flag.to_f64() {
            Some(-1.0) => written.extend([(1, h11), (2, h21), (3, h12), (4, h22)]),
            Some(0.0) => written.extend([(2, h21), (3, h12)]),
            Some(1.0) => written.extend([(1, h11), (4, h22)]),
            _ => {}
        }
        written
    }

    /// Scales `d1` (and `x1`, `h11`, `h12`) and `d2` (`h21`, `h22`) by powers of 4096 until
    /// each lies within reference BLAS's bounds (or is 0, or not finite), the flag becoming -1
    /// (its implied elements stored) once it does.
    fn rescale(&mut self) {
        let gamma: F = narrow(4096.0);
        // srotmg's bounds are 1.67772e7 and 5.96046e-8; drotmg's 4096^2 and 5.9604645e-8.
        let single = std::mem::size_of::<F>() == 4;
        let (big, small): (F, F) =
            if single { (narrow(1.67772e7), narrow(5.96046e-8)) } else { (gamma * gamma, narrow(5.960_464_5e-8)) };
        let out_of_range = |d: F| d != F::zero() && d.is_finite() && (d.abs() <= small || d.abs() >= big);
        while out_of_range(self.d1) {
            self.flag = -F::one();
            let by = if self.d1.abs() <= small { gamma.recip() } else { gamma };
            self.d1 = self.d1 / (by * by);
            self.x1 = self.x1 * by;
            self.h[0] = self.h[0] * by;
            self.h[2] = self.h[2] * by;
        }
        while out_of_range(self.d2) {
            self.flag = -F::one();
            let by = if self.d2.abs() <= small { gamma.recip() } else { gamma };
            self.d2 = self.d2 / (by * by);
            self.h[1] = self.h[1] * by;
            self.h[3] = self.h[3] * by;
        }
    }
}

/// The modified Givens transform zeroing the second element of `(sqrt(d1) x1, sqrt(d2) y1)`,
/// as reference BLAS's `rotmg` constructs it.
fn modified_givens<F: Float>(d1: F, d2: F, x1: F, y1: F) -> Modified<F> {
    let (zero, one) = (F::zero(), F::one());
    if d1 < zero {
        return Modified::zeroed();
    }
    let p2 = d2 * y1;
    if p2 == zero {
        return Modified { flag: narrow(-2.0), h: [one, zero, zero, one], d1, d2, x1 };
    }
    let (p1, q2) = (d1 * x1, p2 * y1);
    let q1 = p1 * x1;
    let mut m = if q1.abs() > q2.abs() {
        let (h21, h12) = (-y1 / x1, p2 / p1);
        let u = one - h12 * h21;
        // Not expected but through rounding at the edges (reference BLAS's safety path).
        if u <= zero {
            return Modified::zeroed();
        }
        Modified { flag: zero, h: [one, h21, h12, one], d1: d1 / u, d2: d2 / u, x1: x1 * u }
    } else if q2 < zero {
        return Modified::zeroed();
    } else {
        let (h11, h22) = (p1 / p2, x1 / y1);
        let u = one + h11 * h22;
        Modified { flag: one, h: [h11, -one, one, h22], d1: d2 / u, d2: d1 / u, x1: y1 * u }
    };
    m.rescale();
    m
}

/// `rotg` of precision `precision` computed in `F` (its real type): real `a`, `b` become `r`,
/// `z`; a complex `a` becomes `r`, `b` stays.
unsafe fn rotg<F: Float>(h: usize, precision: Precision, [a, b, c, s]: [*mut c_void; 4]) -> CuResult<()> {
    let target = handle(h)?.target();
    refuse_captured_scalars(target, "rotg")?;
    let parts = |p: *mut c_void| scalar_parts(target, precision, Scalar::At(p)).map(|v| v.map(narrow::<F>));
    let (a_value, b_value) = (parts(a)?, parts(b)?);
    let wide = |v: [F; 2]| v.map(widen);
    if precision.is_complex() {
        let (r, c_value, s_value) = complex_givens(a_value, b_value);
        write(target, precision, a, wide(r))?;
        write(target, precision.real(), c, [widen(c_value), 0.0])?;
        write(target, precision, s, wide(s_value))
    } else {
        let [r, z, c_value, s_value] = real_givens(a_value[0], b_value[0]);
        for (p, v) in [(a, r), (b, z), (c, c_value), (s, s_value)] {
            write(target, precision, p, [widen(v), 0.0])?;
        }
        Ok(())
    }
}

/// `rotmg` of a real `precision` computed in `F`: `d1`, `d2`, `x1` updated, `param` written.
unsafe fn rotmg<F: Float>(h: usize, precision: Precision, [d1, d2, x1, y1, param]: [*mut c_void; 5]) -> CuResult<()> {
    let target = handle(h)?.target();
    refuse_captured_scalars(target, "rotmg")?;
    let value = |p: *mut c_void| scalar_parts(target, precision, Scalar::At(p)).map(|v| narrow::<F>(v[0]));
    let m = modified_givens(value(d1)?, value(d2)?, value(x1)?, value(y1)?);
    if param.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "rotmg's param is null"));
    }
    for (p, v) in [(d1, m.d1), (d2, m.d2), (x1, m.x1)] {
        write(target, precision, p, [widen(v), 0.0])?;
    }
    let param = param.cast::<u8>();
    for (i, v) in m.param() {
        write(target, precision, param.add(i * precision.bytes()).cast(), [widen(v), 0.0])?;
    }
    Ok(())
}

/// Defines `cublas<T>swap` for `$precision`.
macro_rules! swap_entry {
    ($name:ident, $precision:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(h: usize, n: c_int, x: u64, incx: c_int, y: u64, incy: c_int) -> u32 {
            let pair = Pair { n, x: (x, incx), y: (y, incy) };
            guard(stringify!($name), || apply(h, $precision, pair, |_| Ok(Some(real_transform(EXCHANGE)))))
        }
    };
}

swap_entry!(cublasSswap_v2, Precision::Single);
swap_entry!(cublasDswap_v2, Precision::Double);
swap_entry!(cublasCswap_v2, Precision::ComplexSingle);
swap_entry!(cublasZswap_v2, Precision::ComplexDouble);

/// Defines `cublas<T>rot` for vectors of `$precision`, `c` a `$real`, `s` of `$s_precision`.
macro_rules! rot_entry {
    ($name:ident, $precision:expr, $real:ty, $s:ty, $s_precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            n: c_int,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            c: *const $real,
            s: *const $s,
        ) -> u32 {
            let pair = Pair { n, x: (x, incx), y: (y, incy) };
            let matrix = |target| givens_transform(target, $precision, c.cast(), (s.cast(), $s_precision));
            guard(stringify!($name), || apply(h, $precision, pair, matrix))
        }
    };
}

rot_entry!(cublasSrot_v2, Precision::Single, f32, f32, Precision::Single);
rot_entry!(cublasDrot_v2, Precision::Double, f64, f64, Precision::Double);
rot_entry!(cublasCrot_v2, Precision::ComplexSingle, f32, [f32; 2], Precision::ComplexSingle);
rot_entry!(cublasCsrot_v2, Precision::ComplexSingle, f32, f32, Precision::Single);
rot_entry!(cublasZrot_v2, Precision::ComplexDouble, f64, [f64; 2], Precision::ComplexDouble);
rot_entry!(cublasZdrot_v2, Precision::ComplexDouble, f64, f64, Precision::Double);

/// Defines `cublas<T>rotm` and `cublas<T>rotmg` for the real type `$real`.
macro_rules! modified_entries {
    ($rotm:ident, $rotmg:ident, $real:ty, $precision:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $rotm(
            h: usize,
            n: c_int,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            param: *const $real,
        ) -> u32 {
            let pair = Pair { n, x: (x, incx), y: (y, incy) };
            let matrix =
                |target| Ok(modified_transform(read_param(target, $precision, param.cast())?).map(real_transform));
            guard(stringify!($rotm), || apply(h, $precision, pair, matrix))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $rotmg(
            h: usize,
            d1: *mut $real,
            d2: *mut $real,
            x1: *mut $real,
            y1: *const $real,
            param: *mut $real,
        ) -> u32 {
            let pointers = [d1.cast(), d2.cast(), x1.cast(), y1.cast_mut().cast(), param.cast()];
            guard(stringify!($rotmg), || rotmg::<$real>(h, $precision, pointers))
        }
    };
}

modified_entries!(cublasSrotm_v2, cublasSrotmg_v2, f32, Precision::Single);
modified_entries!(cublasDrotm_v2, cublasDrotmg_v2, f64, Precision::Double);

/// Defines `cublas<T>rotg` for elements `$t` of `$precision`, computed in `$real`.
macro_rules! rotg_entry {
    ($name:ident, $t:ty, $real:ty, $precision:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(h: usize, a: *mut $t, b: *mut $t, c: *mut $real, s: *mut $t) -> u32 {
            let pointers = [a.cast(), b.cast(), c.cast(), s.cast()];
            guard(stringify!($name), || rotg::<$real>(h, $precision, pointers))
        }
    };
}

rotg_entry!(cublasSrotg_v2, f32, f32, Precision::Single);
rotg_entry!(cublasDrotg_v2, f64, f64, Precision::Double);
rotg_entry!(cublasCrotg_v2, [f32; 2], f32, Precision::ComplexSingle);
rotg_entry!(cublasZrotg_v2, [f64; 2], f64, Precision::ComplexDouble);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_rotations_zero_b_with_r_signed_as_the_larger() {
        // 3, 4: r 5, and z = 1/c since |b| >= |a|.
        let [r, z, c, s] = real_givens(3.0f64, 4.0);
        assert_eq!([r, c, s], [5.0, 0.6, 0.8]);
        assert!((z - 1.0 / 0.6).abs() < 1e-15);
        // |a| > |b|: r takes a's sign, z is s.
        assert_eq!(real_givens(-4.0f32, 3.0), [-5.0, -0.6, 0.8, -0.6]);
        // The rotation zeroes b: -s a + c b = 0, and c a + s b = r.
        let (a, b) = (1.5e30f32, -2.5e30);
        let [r, _, c, s] = real_givens(a, b);
        assert!((-s * a + c * b).abs() <= 1e-6 * r.abs() && ((c * a + s * b) / r - 1.0).abs() < 1e-6);
        // The edges, as reference BLAS answers them.
        assert_eq!(real_givens(0.0f64, -2.0), [-2.0, 1.0, 0.0, 1.0]);
        assert_eq!(real_givens(5.0f64, 0.0), [5.0, 0.0, 1.0, 0.0]);
        assert_eq!(real_givens(0.0f64, 0.0), [0.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn complex_rotations_keep_a_phase_and_zero_b() {
        let (a, b) = ([3.0f64, 4.0], [0.0, 5.0]);
        let (r, c, s) = complex_givens(a, b);
        let norm = 50f64.sqrt();
        assert!((c - 5.0 / norm).abs() < 1e-15);
        // r = a/|a| norm; s = a/|a| conj(b) / norm = (0.6 + 0.8i)(-5i) / norm.
        for (got, want) in [(r, [0.6 * norm, 0.8 * norm]), (s, [4.0 / norm, -3.0 / norm])] {
            assert!((got[0] - want[0]).abs() < 1e-14 && (got[1] - want[1]).abs() < 1e-14, "{got:?} {want:?}");
        }
        // -conj(s) a + c b = 0.
        let y = [-(s[0] * a[0] + s[1] * a[1]) + c * b[0], -(s[0] * a[1] - s[1] * a[0]) + c * b[1]];
        assert!(y[0].abs() < 1e-14 && y[1].abs() < 1e-14, "{y:?}");
        // a 0: r is b.
        assert_eq!(complex_givens([0.0f32, 0.0], [1.0, -2.0]), ([1.0, -2.0], 0.0, [1.0, 0.0]));
    }

    #[test]
    fn modified_rotations_take_each_form_and_rescale() {
        // |d1 x1^2| > |d2 y1^2|: flag 0, h21 = -y1/x1, h12 = d2 y1 / d1 x1, u = 1 - h12 h21.
        let m = modified_givens(4.0f64, 1.0, 1.0, 1.0);
        assert_eq!((m.flag, m.h[1], m.h[2], m.d1, m.d2, m.x1), (0.0, -1.0, 0.25, 3.2, 0.8, 1.25));
        assert_eq!(m.param(), [(0, 0.0), (2, -1.0), (3, 0.25)], "h11 and h22 are implied");
        // The other way: flag 1, d1 and d2 exchanged.
        let m = modified_givens(1.0f64, 4.0, 1.0, 1.0);
        assert_eq!((m.flag, m.h[0], m.h[3], m.d1, m.d2, m.x1), (1.0, 0.25, 1.0, 3.2, 0.8, 1.25));
        assert_eq!(m.param(), [(0, 1.0), (1, 0.25), (4, 1.0)]);
        // y1 0: the identity, only the flag written; a negative d1 zeroes everything.
        let identity = modified_givens(2.0f64, 3.0, 4.0, 0.0);
        assert_eq!((identity.param(), identity.d1, identity.x1), (vec![(0, -2.0)], 2.0, 4.0));
        assert_eq!(modified_givens(-1.0f64, 3.0, 4.0, 1.0), Modified::zeroed());
        // d2 ends below 2^-24: scaled up by 4096^2 once, H's second row down by 4096, flag -1.
        let m = modified_givens(1e-10f32, 1.0, 1.0, 1.0);
        let want = vec![(0, -1.0), (1, 1e-10), (2, -1.0 / 4096.0), (3, 1.0), (4, 1.0 / 4096.0)];
        assert_eq!((m.param(), m.d1, m.d2, m.x1), (want, 1.0, 1e-10 * 4096.0 * 4096.0, 1.0));
        // A huge d1 is scaled down until below 2^24; an infinite one is left (no endless loop).
        let m = modified_givens(1e20f64, 1.0, 1.0, 1.0);
        assert!(m.d1 < 16777216.0 && m.d1 > 5.9e-8 && m.flag == -1.0, "{m:?}");
        // srotmg's upper bound is 1.67772e7, below 2^24, drotmg's 2^24: 16777210 is rescaled
        // in single precision only.
        assert_eq!(modified_givens(16_777_210f32, 1.0, 1.0, 1.0).flag, -1.0);
        assert_eq!(modified_givens(16_777_210f64, 1.0, 1.0, 1.0).flag, 0.0);
        let m = modified_givens(f64::INFINITY, 1.0, 1.0, 1.0);
        assert_eq!((m.flag, m.d1), (0.0, f64::INFINITY));
    }

    #[test]
    fn rotm_reads_its_matrix_from_the_flag_as_reference_blas_does() {
        let with = |flag: f64| modified_transform([flag, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(with(-1.0), Some([[2.0, 4.0], [3.0, 5.0]]));
        assert_eq!(with(0.0), Some([[1.0, 4.0], [3.0, 1.0]]));
        assert_eq!(with(1.0), Some([[2.0, 1.0], [-1.0, 5.0]]));
        assert_eq!(with(-2.0), None);
        // Other flags by sign: below 0 the whole matrix, above 0 or NaN the diagonal one.
        assert_eq!(with(-0.5), with(-1.0));
        assert_eq!(with(0.5), with(1.0));
        assert_eq!(with(f64::NAN), with(1.0));
    }
}

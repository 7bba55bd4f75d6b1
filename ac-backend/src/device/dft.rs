//! The discrete Fourier transform as the builtin kernels `dft_f32`, `dft_f64` and `dft_ex`
//! compute it (the CUDA shim's cuFFT launches them, one launch per dimension of a transform):
//! a launch's shape read from its arguments (what it touches is `ac_proto`'s [`Dft`]), and the
//! CPU device's implementation. The CUDA source is in `cuda/kernels.cu`.
//!
//! Parameters: `(u32 kind, u32 inverse, u32 n, u32 lines0, u32 lines1, u32 lines2, const T* in,
//! u64 in_step, u64 in_line0, u64 in_line1, u64 in_line2, T* out, u64 out_step, u64 out_line0,
//! u64 out_line1, u64 out_line2)`; strides count the buffer's elements, complex (two `T`s,
//! real first) or real as `kind` says (0 complex to complex, 1 real to complex, 2 complex to
//! real, 3 a copy). Each output element is one sum over its line, accumulated in `f64`, each
//! twiddle's angle reduced to `(j k mod n) / n` first so that long transforms stay accurate.
//! The output must not overlap the input.
//!
//! `dft_ex` takes `dft_f32`'s parameters and `u32 types` last: the input's element type in bits
//! 0-3, the output's in 4-7, each `f32`, binary16 or bfloat16 ([`GemmElement`]'s codes). It reads
//! half-precision elements exactly, computes as `dft_f32` does, and rounds each of that `f32`
//! result to the output's type (to nearest, ties to even): cuFFT's half-precision transforms.

pub use ac_proto::backend::builtin::{Dft, DftKind, DftStrides, GemmElement};
use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

use super::gemm::Element;
use super::{size_arg, DeviceArg, DeviceResult};

/// The parameters of `dft_f32` and `dft_f64`.
pub const PARAMS: [ParamKind; 16] = [U32, U32, U32, U32, U32, U32, Ptr, U64, U64, U64, U64, Ptr, U64, U64, U64, U64];

/// The parameters of `dft_ex`: `dft_f32`'s, then `u32 types`.
pub const PARAMS_EX: [ParamKind; 17] = {
    let p = PARAMS;
    [p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], U32]
};

/// `dft_ex`'s `types` argument.
pub const TYPES: usize = 16;

/// The input's and the output's pointer arguments.
pub const BUFFERS: [usize; 2] = [6, 11];

/// The shape of launch `args` of builtin `name`; an unknown kind is refused.
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Dft> {
    let at = |i| size_arg(name, args, i);
    let strides = |first: usize| -> DeviceResult<DftStrides> {
        Ok(DftStrides { step: at(first)?, line: [at(first + 1)?, at(first + 2)?, at(first + 3)?] })
    };
    let code = at(0)?;
    let kind = DftKind::from_code(code)
        .ok_or_else(|| WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: unknown kind {code} (0 to 3)")))?;
    Ok(Dft {
        kind,
        inverse: at(1)? != 0,
        n: at(2)?,
        lines: [at(3)?, at(4)?, at(5)?],
        input: strides(7)?,
        output: strides(12)?,
    })
}

/// The element types of the input and the output of `dft_ex` launch `args`, or why they are
/// refused.
pub fn element_types(name: &str, args: &[DeviceArg]) -> DeviceResult<[GemmElement; 2]> {
    let types = size_arg(name, args, TYPES)?;
    GemmElement::decode(types).ok_or_else(|| {
        let why = format!("`{name}`: buffer types {types:#x} (input then output: 0 f32, 1 f16, 2 bf16)");
        WireError::new(ErrorKind::InvalidArgument, why)
    })
}

/// Bytes of a scalar of the input and of the output of builtin `name` (`dft_f32`, `dft_f64`,
/// `dft_ex`) launched with `args` (a complex element is two).
pub fn widths(name: &str, args: &[DeviceArg]) -> DeviceResult<[u64; 2]> {
    Ok(match name {
        "dft_f32" => [4; 2],
        "dft_f64" => [8; 2],
        _ => element_types(name, args)?.map(GemmElement::bytes),
    })
}

/// `e^(i angle)` for the twiddle of `j k` in a transform of length `n`, the sign given.
fn twiddle(j: u64, k: u64, n: u64, sign: f64) -> (f64, f64) {
    // The product reduced first: j k / n's fraction is exact, however long the transform.
    let t = ((j as u128 * k as u128) % n as u128) as f64;
    let angle = sign * 2.0 * std::f64::consts::PI * t / n as f64;
    (angle.cos(), angle.sin())
}

/// Computes the launch on host slices, each from its buffer's pointer and as long as its
/// footprint in scalars (a complex element two); `output` is written only where the launch
/// writes.
pub fn run<T: Element + Into<f64> + FromF64>(d: &Dft, input: &[T], output: &mut [T]) {
    if d.is_empty() {
        return;
    }
    let [n_in, n_out] = d.lengths();
    let sign = if d.inverse { 1.0 } else { -1.0 };
    let complex_at = |index: u64| {
        let i = 2 * index as usize;
        (input[i].into(), input[i + 1].into())
    };
    for l0 in 0..d.lines[0] {
        for l1 in 0..d.lines[1] {
            for l2 in 0..d.lines[2] {
                let line = [l0, l1, l2];
                for k in 0..n_out {
                    let (mut re, mut im) = (0.0f64, 0.0f64);
                    match d.kind {
                        DftKind::Copy => (re, im) = complex_at(d.input.at(line, k)),
                        DftKind::ComplexToComplex => {
                            for j in 0..n_in {
                                let (x, y) = complex_at(d.input.at(line, j));
                                let (c, s) = twiddle(j, k, d.n, sign);
                                re += x * c - y * s;
                                im += x * s + y * c;
                            }
                        }
                        DftKind::RealToComplex => {
                            for j in 0..n_in {
                                let x: f64 = input[d.input.at(line, j) as usize].into();
                                let (c, s) = twiddle(j, k, d.n, sign);
                                re += x * c;
                                im += x * s;
                            }
                        }
                        DftKind::ComplexToReal => {
                            // The n terms of the full spectrum: past the half, conjugates.
                            for j in 0..d.n {
                                let (x, y) = if j < n_in {
                                    complex_at(d.input.at(line, j))
                                } else {
                                    let (x, y) = complex_at(d.input.at(line, d.n - j));
                                    (x, -y)
                                };
                                let (c, s) = twiddle(j, k, d.n, sign);
                                re += x * c - y * s;
                            }
                        }
                    }
                    let at = d.output.at(line, k) as usize;
                    if d.complex()[1] {
                        output[2 * at] = T::from_f64(re);
                        output[2 * at + 1] = T::from_f64(im);
                    } else {
                        output[at] = T::from_f64(re);
                    }
                }
            }
        }
    }
}

/// A scalar from an `f64`, rounded to the nearest.
pub trait FromF64 {
    /// `value` in this type.
    fn from_f64(value: f64) -> Self;
}

impl FromF64 for f32 {
    fn from_f64(value: f64) -> Self {
        value as f32
    }
}

impl FromF64 for f64 {
    fn from_f64(value: f64) -> Self {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(n: u64) -> DftStrides {
        DftStrides { step: 1, line: [n, 0, 0] }
    }

    fn dft(kind: DftKind, inverse: bool, n: u64, lines: u64, widths: [u64; 2]) -> Dft {
        Dft { kind, inverse, n, lines: [lines, 1, 1], input: packed(widths[0]), output: packed(widths[1]) }
    }

    #[test]
    fn an_impulse_has_a_flat_spectrum_and_a_tone_two_spikes() {
        let n = 16;
        let mut impulse = vec![0.0f64; 2 * n];
        impulse[2] = 1.0; // x[1] = 1: X[k] = e^(-2 pi i k / n)
        let mut out = vec![0.0f64; 2 * n];
        run(&dft(DftKind::ComplexToComplex, false, n as u64, 1, [16, 16]), &impulse, &mut out);
        for k in 0..n {
            let angle = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
            assert!((out[2 * k] - angle.cos()).abs() < 1e-12 && (out[2 * k + 1] - angle.sin()).abs() < 1e-12);
        }
        // A real cosine of frequency 3: n/2 at k = 3 (and, in the full spectrum, at n - 3).
        let tone: Vec<f32> = (0..n).map(|j| (2.0 * std::f32::consts::PI * 3.0 * j as f32 / n as f32).cos()).collect();
        let mut half = vec![0.0f32; 2 * (n / 2 + 1)];
        run(&dft(DftKind::RealToComplex, false, n as u64, 1, [16, 9]), &tone, &mut half);
        for k in 0..=n / 2 {
            let want = if k == 3 { n as f32 / 2.0 } else { 0.0 };
            assert!((half[2 * k] - want).abs() < 1e-4 && half[2 * k + 1].abs() < 1e-4, "k {k}: {}", half[2 * k]);
        }
    }

    #[test]
    fn complex_to_real_inverts_real_to_complex_times_n() {
        for n in [7u64, 8] {
            let x: Vec<f64> = (0..2 * n).map(|j| (j * j % 11) as f64 - 5.0).collect();
            let half = (n / 2 + 1) as usize;
            let mut spectrum = vec![0.0f64; 2 * 2 * half];
            run(&dft(DftKind::RealToComplex, false, n, 2, [n, half as u64]), &x, &mut spectrum);
            let mut back = vec![0.0f64; 2 * n as usize];
            run(&dft(DftKind::ComplexToReal, true, n, 2, [half as u64, n]), &spectrum, &mut back);
            for (b, x) in back.iter().zip(&x) {
                assert!((b / n as f64 - x).abs() < 1e-9, "n {n}: {b} against {x}");
            }
        }
    }

    #[test]
    fn a_long_transform_keeps_its_twiddles_exact() {
        // j k overflows no u64 and its angle is reduced before it is scaled.
        // 2^40 = 1 (mod 3), so 2^40 2^40 = 1 (mod 3).
        assert_eq!(twiddle(1 << 40, 1 << 40, 3, 1.0), twiddle(1, 1, 3, 1.0));
        let (c, s) = twiddle(5, 4, 20, -1.0);
        assert!((c - 1.0).abs() < 1e-15 && s.abs() < 1e-15);
    }
}

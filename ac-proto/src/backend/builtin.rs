//! Rules of the builtin kernels' contract that a caller (the CUDA shim's cuBLAS) checks before it
//! sends a launch and the backend checks again before it runs one: one definition, so that the
//! two cannot disagree on what a launch touches.

pub mod epilogue;
pub mod lu;
pub mod qr;
pub mod trsm;
pub mod vector_copy;

pub use epilogue::{ActivationOp, Aux, Epilogue, EpilogueElement, EpilogueOp};
pub use lu::{Getrf, Getrs};
pub use qr::{Gels, Geqrf};
pub use trsm::Trsm;
pub use vector_copy::VectorCopy;

/// Whether the `batch` results of a gemm (`m x n` each, leading dimension `ldc`, `stride_c`
/// elements apart) lie apart: one after another (`stride_c` at least one result's span), or
/// interleaved within each column (`stride_c` at least `m`, every batch's rows inside `ldc`,
/// as attention heads side by side). Overlapping results are undefined in cuBLAS and refused
/// here, so that a launch's work stays bounded by its buffers.
pub fn gemm_batches_apart(m: u64, n: u64, ldc: u64, stride_c: u64, batch: u64) -> bool {
    if batch <= 1 || m == 0 || n == 0 {
        return true;
    }
    let one_after_another = stride_c >= (n - 1).saturating_mul(ldc).saturating_add(m);
    let interleaved = stride_c >= m && (batch - 1).saturating_mul(stride_c).saturating_add(m) <= ldc;
    one_after_another || interleaved
}

/// A gemm's shape (`blas_sgemm`, `blas_dgemm`): `C_b = alpha op(A_b) op(B_b) + beta C_b` for each
/// `b < batch`, column-major as BLAS is, element `(i, j)` of `X` at `X[i + j * ldx]`, `X_b` at
/// `X + b * stride_x` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// `op(A)` is `A`'s transpose.
    pub trans_a: bool,
    /// `op(B)` is `B`'s transpose.
    pub trans_b: bool,
    /// Rows of `op(A)` and `C`.
    pub m: u64,
    /// Columns of `op(B)` and `C`.
    pub n: u64,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: u64,
    /// Leading dimensions of `A`, `B`, `C`.
    pub ld: [u64; 3],
    /// Elements from one batch's matrix to the next's, for `A`, `B`, `C`.
    pub stride: [u64; 3],
    /// Products computed.
    pub batch: u64,
}

impl Gemm {
    /// Why BLAS refuses this shape (a leading dimension below its matrix's rows), or this
    /// contract does (batches' results that overlap, [`gemm_batches_apart`]); `None` if neither.
    pub fn refusal(&self) -> Option<String> {
        for (x, ((rows, _), ld)) in ["A", "B", "C"].iter().zip(self.stored().into_iter().zip(self.ld)) {
            if ld < rows.max(1) {
                return Some(format!("ld{} = {ld} is below {x}'s {rows} rows", x.to_lowercase()));
            }
        }
        if !gemm_batches_apart(self.m, self.n, self.ld[2], self.stride[2], self.batch) {
            return Some(format!("stride_c {} makes the batches' results overlap", self.stride[2]));
        }
        None
    }

    /// Rows and columns of `A`, `B` and `C` as they are stored.
    pub fn stored(&self) -> [(u64, u64); 3] {
        let a = if self.trans_a { (self.k, self.m) } else { (self.m, self.k) };
        let b = if self.trans_b { (self.n, self.k) } else { (self.k, self.n) };
        [a, b, (self.m, self.n)]
    }

    /// Elements of `A`, `B` and `C` the launch touches from each pointer: up to the last
    /// batch's last column's last row; none when it computes nothing.
    pub fn footprints(&self) -> [u64; 3] {
        let mut out = [0; 3];
        for (x, (rows, cols)) in self.stored().into_iter().enumerate() {
            if rows == 0 || cols == 0 || self.is_empty() {
                continue;
            }
            out[x] = (self.batch - 1)
                .saturating_mul(self.stride[x])
                .saturating_add((cols - 1).saturating_mul(self.ld[x]))
                .saturating_add(rows);
        }
        out
    }

    /// Multiply-adds, plus the elements it reads or writes: how a device judges whether the
    /// launch is quick.
    pub fn work(&self) -> u64 {
        let products = self.m.saturating_mul(self.n).saturating_mul(self.k).saturating_mul(self.batch);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }

    /// Whether the launch computes nothing (no element of C): then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Where element `(i, j)` of batch `b`'s `C` lies, from `C`'s pointer.
    pub fn c_index(&self, b: u64, i: u64, j: u64) -> usize {
        (b * self.stride[2] + i + j * self.ld[2]) as usize
    }
}

/// The element type of one matrix of a `blas_gemm_ex` launch, or of one buffer of a `dft_ex`
/// launch, as its `types` argument codes it (four bits a buffer: gemm's A in bits 0-3, B in 4-7,
/// C in 8-11; the DFT's input in bits 0-3, its output in 4-7); the product or the transform is
/// computed in `f32` or wider whatever they are, as cuBLAS computes `CUBLAS_COMPUTE_32F` on
/// half-precision matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmElement {
    /// IEEE binary32.
    F32 = 0,
    /// IEEE binary16 (`__half`).
    F16 = 1,
    /// bfloat16 (`__nv_bfloat16`): the upper half of a binary32.
    Bf16 = 2,
}

impl GemmElement {
    /// The type numbered `code`.
    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => GemmElement::F32,
            1 => GemmElement::F16,
            2 => GemmElement::Bf16,
            _ => return None,
        })
    }

    /// The `N` buffers' types of a launch's `types` argument (three for a gemm, two for a DFT);
    /// `None` if a code is unknown or bits past the last buffer's are set.
    pub fn decode<const N: usize>(types: u64) -> Option<[Self; N]> {
        if types.checked_shr(4 * N as u32).unwrap_or(0) != 0 {
            return None;
        }
        let codes = std::array::from_fn(|i| Self::from_code(types >> (4 * i) & 15));
        codes.iter().all(Option::is_some).then(|| codes.map(|code| code.expect("all known")))
    }

    /// The `types` argument for buffers of these types.
    pub fn encode<const N: usize>(types: [Self; N]) -> u32 {
        types.iter().enumerate().fold(0, |all, (i, &t)| all | (t as u32) << (4 * i))
    }

    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            GemmElement::F32 => 4,
            GemmElement::F16 | GemmElement::Bf16 => 2,
        }
    }

    /// One element, from its little-endian bytes, as an `f32` (exact).
    pub fn load(self, bytes: &[u8]) -> f32 {
        match self {
            GemmElement::F32 => f32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")),
            GemmElement::F16 => f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
            GemmElement::Bf16 => f32::from_bits(u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16),
        }
    }

    /// `value` rounded to this type (to nearest, ties to even), as little-endian bytes into
    /// `out`.
    pub fn store(self, value: f32, out: &mut [u8]) {
        match self {
            GemmElement::F32 => out[..4].copy_from_slice(&value.to_le_bytes()),
            GemmElement::F16 => out[..2].copy_from_slice(&f32_to_f16(value).to_le_bytes()),
            GemmElement::Bf16 => out[..2].copy_from_slice(&f32_to_bf16(value).to_le_bytes()),
        }
    }
}

/// A binary16's value (every one is exact in binary32).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exponent = u32::from(h >> 10 & 0x1f);
    let mantissa = u32::from(h & 0x3ff);
    let bits = match (exponent, mantissa) {
        (0, 0) => sign,
        // Subnormal: mantissa * 2^-24, exact in binary32.
        (0, m) => {
            let magnitude = m as f32 * f32::powi(2.0, -24);
            return if sign != 0 { -magnitude } else { magnitude };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        // NaN: the payload kept in the top of the mantissa, quiet.
        (0x1f, m) => sign | 0x7fc0_0000 | m << 13,
        (e, m) => sign | (e + 112) << 23 | m << 13,
    };
    f32::from_bits(bits)
}

/// `value` rounded to the nearest binary16, ties to even (as `cvt.rn.f16.f32`): beyond the
/// largest finite (65504) to infinity, NaN to a quiet NaN.
pub fn f32_to_f16(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = (bits >> 16 & 0x8000) as u16;
    let magnitude = bits & 0x7fff_ffff;
    if magnitude > 0x7f80_0000 {
        return sign | 0x7e00 | (magnitude >> 13 & 0x1ff) as u16;
    }
    if magnitude >= 0x4780_0000 {
        // 65520 and above round to infinity (65504 + half an ulp, ties to even go up).
        return sign | 0x7c00;
    }
    if magnitude < 0x3880_0000 {
        // Below 2^-14: a subnormal (or zero), mantissa = round(|value| * 2^24).
        let scaled = f32::from_bits(magnitude) * f32::powi(2.0, 24);
        return sign | round_half_even(scaled) as u16;
    }
    // Normal: drop 13 mantissa bits, rounding to nearest even; a carry moves into the exponent.
    let rebased = magnitude - (112 << 23);
    let kept = rebased >> 13;
    let dropped = rebased & 0x1fff;
    let up = dropped > 0x1000 || (dropped == 0x1000 && kept & 1 == 1);
    sign | (kept + u32::from(up)) as u16
}

/// `x` (non-negative, below 2^23) rounded to the nearest integer, ties to even.
fn round_half_even(x: f32) -> u32 {
    let floor = x.floor();
    let rest = x - floor;
    let floor = floor as u32;
    if rest > 0.5 || (rest == 0.5 && floor & 1 == 1) {
        floor + 1
    } else {
        floor
    }
}

/// `value` rounded to the nearest bfloat16, ties to even; NaN to a quiet NaN.
pub fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return (bits >> 16) as u16 | 0x40;
    }
    ((bits + 0x7fff + (bits >> 16 & 1)) >> 16) as u16
}

/// What a `dft_f32`/`dft_f64` launch computes along each line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DftKind {
    /// Complex in, complex out, `n` each.
    ComplexToComplex,
    /// Real in (`n`), complex out (`n / 2 + 1`: the rest is their conjugates).
    RealToComplex,
    /// Complex in (`n / 2 + 1`, the rest taken as their conjugates), real out (`n`).
    ComplexToReal,
    /// Complex in, the same out: a pass that moves a transform's result where it belongs.
    Copy,
}

impl DftKind {
    /// The kind numbered `code` in a launch's arguments.
    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => DftKind::ComplexToComplex,
            1 => DftKind::RealToComplex,
            2 => DftKind::ComplexToReal,
            3 => DftKind::Copy,
            _ => return None,
        })
    }

    /// Its number in a launch's arguments.
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// Where a line's elements lie in one buffer, in that buffer's elements (complex or real as
/// the kind says): element `j` of line `(l0, l1, l2)` at `l0 * line[0] + l1 * line[1] + l2 *
/// line[2] + j * step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DftStrides {
    /// From one element of a line to the next.
    pub step: u64,
    /// From one line to the next, along each of the three line dimensions.
    pub line: [u64; 3],
}

impl DftStrides {
    /// Where element `j` of line `l` lies.
    pub fn at(&self, l: [u64; 3], j: u64) -> u64 {
        l[0] * self.line[0] + l[1] * self.line[1] + l[2] * self.line[2] + j * self.step
    }
}

/// A launch of the builtin `dft_f32`, `dft_f64` or `dft_ex`: a discrete Fourier transform of length `n`
/// along each of `lines[0] * lines[1] * lines[2]` lines, unnormalized, `exp(-2 pi i j k / n)`
/// forward and `exp(+2 pi i j k / n)` inverse, computed directly (one sum an output element):
/// a multi-dimensional transform is one launch per dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dft {
    /// What each line computes.
    pub kind: DftKind,
    /// The inverse transform's sign.
    pub inverse: bool,
    /// The transform's length.
    pub n: u64,
    /// Lines along each of three dimensions.
    pub lines: [u64; 3],
    /// The input's layout.
    pub input: DftStrides,
    /// The output's layout.
    pub output: DftStrides,
}

impl Dft {
    /// Elements a line reads and writes.
    pub fn lengths(&self) -> [u64; 2] {
        let half = self.n / 2 + 1;
        match self.kind {
            DftKind::ComplexToComplex | DftKind::Copy => [self.n, self.n],
            DftKind::RealToComplex => [self.n, half],
            DftKind::ComplexToReal => [half, self.n],
        }
    }

    /// Whether the input and the output are complex (each element two scalars).
    pub fn complex(&self) -> [bool; 2] {
        [self.kind != DftKind::RealToComplex, self.kind != DftKind::ComplexToReal]
    }

    /// Whether the launch computes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0 || self.lines.contains(&0)
    }

    /// Elements of the input and the output the launch touches from each pointer (of each
    /// buffer's kind: complex or real); none when it computes nothing.
    pub fn footprints(&self) -> [u64; 2] {
        if self.is_empty() {
            return [0, 0];
        }
        let last = [self.lines[0] - 1, self.lines[1] - 1, self.lines[2] - 1];
        let span = |s: &DftStrides, len: u64| {
            let mut end = (len - 1).saturating_mul(s.step);
            for (l, stride) in last.iter().zip(s.line) {
                end = end.saturating_add(l.saturating_mul(stride));
            }
            end.saturating_add(1)
        };
        let [n_in, n_out] = self.lengths();
        [span(&self.input, n_in), span(&self.output, n_out)]
    }

    /// Output elements times the input elements each sums: how a device judges whether the
    /// launch is quick.
    pub fn work(&self) -> u64 {
        let [n_in, n_out] = self.lengths();
        let lines = self.lines.iter().fold(1u64, |a, &l| a.saturating_mul(l));
        lines.saturating_mul(n_out).saturating_mul(n_in.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_apart_one_after_another_or_side_by_side() {
        // 4x3 results, ldc 6: one spans 2 * 6 + 4 = 16 elements.
        assert!(gemm_batches_apart(4, 3, 6, 16, 2));
        assert!(!gemm_batches_apart(4, 3, 6, 15, 2));
        // Side by side in each column: 3 batches of 2 rows in ldc 6, 2 apart.
        assert!(gemm_batches_apart(2, 3, 6, 2, 3));
        assert!(!gemm_batches_apart(2, 3, 6, 2, 4), "the fourth batch's rows run past ldc");
        assert!(!gemm_batches_apart(2, 3, 6, 1, 3), "rows of two batches overlap");
        // One batch, or nothing computed: any stride.
        assert!(gemm_batches_apart(4, 3, 6, 0, 1) && gemm_batches_apart(0, 3, 6, 0, 9));
    }

    fn gemm(trans: [bool; 2], [m, n, k]: [u64; 3], ld: [u64; 3], stride: [u64; 3], batch: u64) -> Gemm {
        Gemm { trans_a: trans[0], trans_b: trans[1], m, n, k, ld, stride, batch }
    }

    #[test]
    fn leading_dimensions_are_checked_against_the_stored_rows() {
        assert_eq!(gemm([false; 2], [4, 3, 2], [4, 2, 4], [0; 3], 1).refusal(), None);
        // A transposed is stored k x m: lda 2 suffices, 1 does not.
        assert_eq!(gemm([true, false], [4, 3, 2], [2, 2, 4], [0; 3], 1).refusal(), None);
        let lda = gemm([true, false], [4, 3, 2], [1, 2, 4], [0; 3], 1).refusal();
        assert_eq!(lda.as_deref(), Some("lda = 1 is below A's 2 rows"));
        let ldc = gemm([false; 2], [4, 3, 2], [4, 2, 3], [0; 3], 1).refusal();
        assert_eq!(ldc.as_deref(), Some("ldc = 3 is below C's 4 rows"));
        // An empty matrix still needs a leading dimension of 1.
        assert!(gemm([false; 2], [0, 3, 2], [0, 2, 1], [0; 3], 1).refusal().is_some());
    }

    #[test]
    fn overlapping_results_are_refused() {
        let overlap = gemm([false; 2], [4, 3, 2], [4, 2, 6], [8, 6, 15], 2).refusal();
        assert!(overlap.unwrap().contains("results overlap"));
        assert_eq!(gemm([false; 2], [4, 3, 2], [4, 2, 6], [8, 6, 16], 2).refusal(), None);
    }

    #[test]
    fn batches_and_leading_dimensions_set_the_footprint() {
        let g = gemm([false, true], [4, 3, 2], [5, 3, 6], [100, 7, 30], 3);
        // A: 4x2 stored, ld 5: 2*100 + 1*5 + 4; B^T stored 3x2, ld 3: 2*7 + 1*3 + 3; C 4x3, ld 6.
        assert_eq!(g.footprints(), [209, 20, 2 * 30 + 2 * 6 + 4]);
        assert_eq!(g.work(), 4 * 3 * 2 * 3 + 209 + 20 + 76);
        assert_eq!(gemm([false; 2], [0, 3, 2], [1, 2, 1], [0; 3], 1).footprints(), [0; 3]);
        // k = 0: A and B are read nowhere, C is.
        assert_eq!(gemm([false; 2], [2, 2, 0], [2, 1, 2], [9, 9, 4], 2).footprints(), [0, 0, 8]);
        // Saturating, not wrapping: a shape beyond memory spans beyond any buffer.
        assert_eq!(gemm([false; 2], [1, 1, 1], [1; 3], [u64::MAX; 3], 3).footprints(), [u64::MAX; 3]);
    }

    fn dft(kind: DftKind, n: u64, lines: [u64; 3], input: DftStrides, output: DftStrides) -> Dft {
        Dft { kind, inverse: false, n, lines, input, output }
    }

    #[test]
    fn a_dft_touches_its_lines_up_to_the_last_element() {
        let packed = |n| DftStrides { step: 1, line: [n, 0, 0] };
        // 3 lines of 8 complex in and out.
        let c2c = dft(DftKind::ComplexToComplex, 8, [3, 1, 1], packed(8), packed(8));
        assert_eq!(c2c.footprints(), [24, 24]);
        assert_eq!(c2c.complex(), [true, true]);
        // Real to complex: 8 real in, 5 complex out per line.
        let r2c = dft(DftKind::RealToComplex, 8, [3, 1, 1], packed(8), packed(5));
        assert_eq!((r2c.lengths(), r2c.footprints(), r2c.complex()), ([8, 5], [24, 15], [false, true]));
        let c2r = dft(DftKind::ComplexToReal, 7, [2, 1, 1], packed(4), packed(7));
        assert_eq!((c2r.lengths(), c2r.footprints()), ([4, 7], [8, 14]));
        // Strided elements, lines along two dimensions.
        let strided = DftStrides { step: 3, line: [100, 7, 0] };
        let two = dft(DftKind::ComplexToComplex, 4, [2, 5, 1], strided, strided);
        assert_eq!(two.footprints()[0], 100 + 4 * 7 + 3 * 3 + 1);
        assert_eq!(strided.at([1, 2, 0], 3), 100 + 14 + 9);
        assert_eq!(dft(DftKind::Copy, 4, [0, 1, 1], strided, strided).footprints(), [0, 0]);
        assert_eq!(two.work(), 10 * 4 * 4);
        assert_eq!(DftKind::from_code(2), Some(DftKind::ComplexToReal));
        assert_eq!(DftKind::from_code(4), None);
    }

    #[test]
    fn binary16_rounds_to_nearest_even_and_saturates_to_infinity() {
        for (value, bits) in [(1.0f32, 0x3c00u16), (-2.0, 0xc000), (65504.0, 0x7bff), (0.5, 0x3800)] {
            assert_eq!(f32_to_f16(value), bits, "{value}");
            assert_eq!(f16_to_f32(bits), value, "{bits:#x}");
        }
        let p = |e: i32| f32::powi(2.0, e);
        // Ties between two halves go to the even one; past them, to the nearer.
        assert_eq!(f32_to_f16(1.0 + p(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * p(-11)), 0x3c02);
        assert_eq!(f32_to_f16(1.0 + p(-11) + p(-20)), 0x3c01);
        // The largest finite half and what rounds past it.
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(-1e9), 0xfc00);
        // Subnormals: 2^-24 is the least; half of it ties to zero, three halves to two.
        assert_eq!(f32_to_f16(p(-24)), 0x0001);
        assert_eq!(f32_to_f16(p(-25)), 0x0000);
        assert_eq!(f32_to_f16(3.0 * p(-25)), 0x0002);
        assert_eq!(f32_to_f16(-p(-14)), 0x8400);
        assert_eq!(f16_to_f32(0x8001), -p(-24));
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e01).is_nan() && f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
        // Every half, through f32 and back, is itself (NaNs stay NaN).
        for h in 0..=u16::MAX {
            let back = f32_to_f16(f16_to_f32(h));
            if f16_to_f32(h).is_nan() {
                assert!(f16_to_f32(back).is_nan(), "{h:#x}");
            } else {
                assert_eq!(back, h, "{h:#x}");
            }
        }
    }

    #[test]
    fn bfloat16_is_the_rounded_upper_half() {
        let p = |e: i32| f32::powi(2.0, e);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + p(-8)), 0x3f80, "a tie goes to the even one");
        assert_eq!(f32_to_bf16(1.0 + 3.0 * p(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "rounds up to infinity");
        assert!(GemmElement::Bf16.load(&(f32_to_bf16(f32::NAN)).to_le_bytes()).is_nan());
        for h in 0..=u16::MAX {
            let value = GemmElement::Bf16.load(&h.to_le_bytes());
            if !value.is_nan() {
                assert_eq!(f32_to_bf16(value), h, "{h:#x}");
            }
        }
    }

    #[test]
    fn gemm_element_types_are_coded_four_bits_a_matrix() {
        use GemmElement::*;
        let types = GemmElement::encode([F16, Bf16, F32]);
        assert_eq!(types, 0x021);
        assert_eq!(GemmElement::decode(u64::from(types)), Some([F16, Bf16, F32]));
        assert_eq!(GemmElement::decode::<3>(0x300), None, "an unknown code");
        assert_eq!(GemmElement::decode::<3>(0x1000), None, "bits past C's");
        // A DFT's two buffers: input, then output.
        assert_eq!(GemmElement::encode([Bf16, F32]), 0x02);
        assert_eq!(GemmElement::decode(0x21), Some([F16, Bf16]));
        assert_eq!(GemmElement::decode::<2>(0x121), None, "bits past the output's");
        let mut out = [0u8; 4];
        F16.store(-0.25, &mut out);
        assert_eq!(F16.load(&out), -0.25);
        assert_eq!(F32.bytes() + F16.bytes() + Bf16.bytes(), 8);
    }
}

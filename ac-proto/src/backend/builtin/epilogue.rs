//! cuBLASLt's epilogues as the builtin kernels run them in place on a matmul's result `D`
//! (`batch` column-major `m x n` matrices, leading dimension `ld`, `stride` elements apart):
//!
//! - `blas_activation(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type)`:
//!   ReLU or GELU, `D = f(D)` (`RELU`, `GELU` and their `_BIAS` forms, the bias added before);
//! - `blas_epilogue(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type,
//!   void* aux, u64 aux_ld, u64 aux_stride)`: the same on `f64` matrices too, and the forms that
//!   keep an auxiliary matrix for training ([`EpilogueOp`]): ReLU keeping a mask of where its
//!   result is positive (`RELU_AUX`), GELU keeping its input (`GELU_AUX`), and the backward
//!   pass's gradients, `D` times the function's slope at the input the auxiliary matrix
//!   describes (`DRELU`, `DGELU`).
//!
//! The auxiliary matrix has D's shape and batches, its own leading dimension and stride: GELU's
//! input in D's type; ReLU's mask a bit an element, element `(i, j)` of batch `b` the bit
//! `b aux_stride + j aux_ld + i` counted from the least significant bit of `aux`'s first byte
//! (cuBLASLt keeps its mask in a layout of its own: a mask is read back by the epilogue that
//! wrote it, not by the program). Half-precision and `f32` elements are computed in `f32` and
//! rounded back to nearest, ties to even; `f64` ones in `f64`.

use super::{gemm_batches_apart, GemmElement};

/// The arithmetic an epilogue computes in: `f32`, or `f64` for `f64` matrices.
pub trait Real:
    Copy
    + std::fmt::Debug
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
{
    /// 0, 1/2 and 1.
    const ZERO: Self;
    const HALF: Self;
    const ONE: Self;
    /// sqrt(2 / pi) and the cubic term's 0.044715 of GELU's tanh approximation, as the kernels
    /// write them for this type.
    const GELU_SCALE: Self;
    const GELU_CUBIC: Self;
    /// The hyperbolic tangent.
    fn tanh(self) -> Self;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const HALF: f32 = 0.5;
    const ONE: f32 = 1.0;
    const GELU_SCALE: f32 = 0.797_884_6;
    const GELU_CUBIC: f32 = 0.044_715;
    fn tanh(self) -> f32 {
        f32::tanh(self)
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const HALF: f64 = 0.5;
    const ONE: f64 = 1.0;
    const GELU_SCALE: f64 = 0.797_884_560_802_865_4;
    const GELU_CUBIC: f64 = 0.044_715;
    fn tanh(self) -> f64 {
        f64::tanh(self)
    }
}

/// The function of an activation epilogue (cuBLASLt's `RELU` and `GELU`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationOp {
    /// `max(x, 0)`.
    Relu,
    /// GELU's tanh approximation, `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
    Gelu,
}

impl ActivationOp {
    /// The op numbered `code` in a `blas_activation` launch's arguments.
    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => ActivationOp::Relu,
            1 => ActivationOp::Gelu,
            _ => return None,
        })
    }

    /// Its number in a `blas_activation` launch's arguments.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The function at `x`.
    pub fn apply<T: Real>(self, x: T) -> T {
        match self {
            ActivationOp::Relu => {
                if x > T::ZERO {
                    x
                } else {
                    T::ZERO
                }
            }
            ActivationOp::Gelu => T::HALF * x * (T::ONE + gelu_tanh(x)),
        }
    }

    /// The function's slope at `x` (ReLU's: 1 where `x` is positive, else 0): what the backward
    /// pass multiplies the gradient by.
    pub fn slope<T: Real>(self, x: T) -> T {
        match self {
            ActivationOp::Relu => {
                if x > T::ZERO {
                    T::ONE
                } else {
                    T::ZERO
                }
            }
            ActivationOp::Gelu => {
                // d/dx 0.5 x (1 + t), t = tanh(u), u = c (x + a x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
                let t = gelu_tanh(x);
                let sech2 = T::ONE - t * t;
                // Saturated: the second term is 0, not 0 times an x^2 that overflowed.
                if sech2 == T::ZERO {
                    return T::HALF * (T::ONE + t);
                }
                let three_a = T::GELU_CUBIC + T::GELU_CUBIC + T::GELU_CUBIC;
                let du = T::GELU_SCALE * (T::ONE + three_a * x * x);
                T::HALF * (T::ONE + t) + T::HALF * x * sech2 * du
            }
        }
    }
}

/// `tanh(sqrt(2 / pi) (x + 0.044715 x^3))`, GELU's inner term.
fn gelu_tanh<T: Real>(x: T) -> T {
    (T::GELU_SCALE * (x + T::GELU_CUBIC * x * x * x)).tanh()
}

/// What a `blas_epilogue` launch does (its `op` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpilogueOp {
    /// ReLU (`RELU`); the auxiliary matrix is not touched.
    Relu = 0,
    /// GELU (`GELU`); the auxiliary matrix is not touched.
    Gelu = 1,
    /// ReLU, its mask written to the auxiliary matrix: a bit set where the result is positive
    /// (`RELU_AUX`).
    ReluMask = 2,
    /// GELU, its input written to the auxiliary matrix (`GELU_AUX`).
    GeluInput = 3,
    /// `D` zeroed where the auxiliary mask's bit is clear (`DRELU`).
    ReluGradient = 4,
    /// `D` times GELU's slope at the input the auxiliary matrix holds (`DGELU`).
    GeluGradient = 5,
}

/// What a `blas_epilogue` launch's auxiliary matrix holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aux {
    /// Nothing: the launch does not touch it.
    Unused,
    /// ReLU's mask, a bit an element.
    Mask,
    /// GELU's input, an element of D's type an element.
    Input,
}

impl EpilogueOp {
    /// The op numbered `code`.
    pub fn from_code(code: u64) -> Option<Self> {
        use EpilogueOp::*;
        [Relu, Gelu, ReluMask, GeluInput, ReluGradient, GeluGradient].into_iter().find(|op| *op as u64 == code)
    }

    /// Its number in a launch's arguments.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The activation it applies, or whose slope it takes.
    pub fn function(self) -> ActivationOp {
        match self {
            EpilogueOp::Relu | EpilogueOp::ReluMask | EpilogueOp::ReluGradient => ActivationOp::Relu,
            EpilogueOp::Gelu | EpilogueOp::GeluInput | EpilogueOp::GeluGradient => ActivationOp::Gelu,
        }
    }

    /// What its auxiliary matrix holds.
    pub fn aux(self) -> Aux {
        match self {
            EpilogueOp::Relu | EpilogueOp::Gelu => Aux::Unused,
            EpilogueOp::ReluMask | EpilogueOp::ReluGradient => Aux::Mask,
            EpilogueOp::GeluInput | EpilogueOp::GeluGradient => Aux::Input,
        }
    }

    /// Whether it is a backward pass's: it reads the auxiliary matrix rather than writing it.
    pub fn is_gradient(self) -> bool {
        matches!(self, EpilogueOp::ReluGradient | EpilogueOp::GeluGradient)
    }

    /// The element `x` of D becomes, given what the auxiliary matrix holds for it (`kept`: the
    /// mask's bit, or GELU's input), and what the auxiliary matrix is to hold after (`None`: as
    /// it was).
    pub fn element<T: Real>(self, x: T, kept: Kept<T>) -> (T, Option<Kept<T>>) {
        let f = self.function();
        match (self, kept) {
            (EpilogueOp::Relu | EpilogueOp::Gelu, _) => (f.apply(x), None),
            (EpilogueOp::ReluMask, _) => (f.apply(x), Some(Kept::Bit(x > T::ZERO))),
            (EpilogueOp::GeluInput, _) => (f.apply(x), Some(Kept::Value(x))),
            (EpilogueOp::ReluGradient, Kept::Bit(positive)) => (if positive { x } else { T::ZERO }, None),
            (EpilogueOp::GeluGradient, Kept::Value(input)) => (x * f.slope(input), None),
            // A gradient given the other kind of auxiliary element: the caller read the wrong one.
            (_, kept) => unreachable!("{self:?} given {kept:?}"),
        }
    }
}

/// One element of an auxiliary matrix, as [`EpilogueOp::element`] reads and writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kept<T> {
    /// A mask's bit.
    Bit(bool),
    /// GELU's input.
    Value(T),
}

/// The type of D's elements in a `blas_epilogue` launch (its `type` argument): the codes of
/// [`GemmElement`], and `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpilogueElement {
    /// `f32`, binary16 or bfloat16, computed in `f32`.
    Single(GemmElement),
    /// `f64`, computed in `f64` (code 3).
    Double,
}

impl EpilogueElement {
    /// The type numbered `code`.
    pub fn from_code(code: u64) -> Option<Self> {
        match code {
            3 => Some(EpilogueElement::Double),
            other => GemmElement::from_code(other).map(EpilogueElement::Single),
        }
    }

    /// Its number in a launch's arguments.
    pub fn code(self) -> u32 {
        match self {
            EpilogueElement::Single(element) => element as u32,
            EpilogueElement::Double => 3,
        }
    }

    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            EpilogueElement::Single(element) => element.bytes(),
            EpilogueElement::Double => 8,
        }
    }
}

/// A `blas_epilogue` (or `blas_activation`) launch's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epilogue {
    /// What it does.
    pub op: EpilogueOp,
    /// Rows and columns of each matrix.
    pub m: u64,
    pub n: u64,
    /// From one column of D to the next, in elements.
    pub ld: u64,
    /// From one matrix of D to the next, in elements.
    pub stride: u64,
    /// Matrices.
    pub batch: u64,
    /// D's elements' type.
    pub element: EpilogueElement,
    /// From one column of the auxiliary matrix to the next, and from one batch to the next, in
    /// its elements (bits, for a mask).
    pub aux_ld: u64,
    pub aux_stride: u64,
}

impl Epilogue {
    /// A `blas_activation` launch's: `f` on D of `element`, no auxiliary matrix.
    pub fn activation(f: ActivationOp, [m, n, ld, stride, batch]: [u64; 5], element: GemmElement) -> Epilogue {
        let op = match f {
            ActivationOp::Relu => EpilogueOp::Relu,
            ActivationOp::Gelu => EpilogueOp::Gelu,
        };
        Epilogue { op, m, n, ld, stride, batch, element: EpilogueElement::Single(element), aux_ld: 0, aux_stride: 0 }
    }

    /// Whether the launch touches nothing.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Elements of D from its pointer to the last one touched, plus one.
    pub fn span(&self) -> u64 {
        self.span_of(self.ld, self.stride)
    }

    /// Of the auxiliary matrix, in its units ([`Epilogue::aux_width`]): bytes of a mask,
    /// elements of an input; 0 where it is not touched.
    pub fn aux_span(&self) -> u64 {
        match self.op.aux() {
            Aux::Unused => 0,
            Aux::Mask => self.span_of(self.aux_ld, self.aux_stride).div_ceil(8),
            Aux::Input => self.span_of(self.aux_ld, self.aux_stride),
        }
    }

    /// Bytes of one unit of the auxiliary matrix (a byte of a mask).
    pub fn aux_width(&self) -> u64 {
        match self.op.aux() {
            Aux::Input => self.element.bytes(),
            Aux::Unused | Aux::Mask => 1,
        }
    }

    fn span_of(&self, ld: u64, stride: u64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let last_column = (self.batch - 1).saturating_mul(stride).saturating_add((self.n - 1).saturating_mul(ld));
        last_column.saturating_add(self.m)
    }

    /// Why a launch of this shape is refused, if it is: columns or batches of D, or of an
    /// auxiliary matrix the op writes, that overlap (an element would be computed twice), or a
    /// mask whose columns or batches do not start on a byte (each byte is one thread's).
    pub fn refusal(&self) -> Option<String> {
        let overlap = |what: &str, ld: u64, stride: u64| {
            if self.n > 1 && ld < self.m {
                return Some(format!("{what}'s leading dimension {ld} is below m {}", self.m));
            }
            (!gemm_batches_apart(self.m, self.n, ld, stride, self.batch))
                .then(|| format!("{what}'s batches {stride} apart overlap ({} x {}, ld {ld})", self.m, self.n))
        };
        if let Some(why) = overlap("D", self.ld, self.stride) {
            return Some(why);
        }
        // A gradient only reads its auxiliary matrix: batches may share it (stride 0, cuBLASLt's
        // default), and its columns may overlap.
        let written = !self.op.is_gradient();
        match self.op.aux() {
            Aux::Unused => None,
            Aux::Input => overlap("the auxiliary matrix", self.aux_ld, self.aux_stride).filter(|_| written),
            Aux::Mask if !self.aux_ld.is_multiple_of(8) || (self.batch > 1 && !self.aux_stride.is_multiple_of(8)) => {
                Some(format!(
                    "a mask's leading dimension {} and batch stride {} must be multiples of 8 bits",
                    self.aux_ld, self.aux_stride
                ))
            }
            Aux::Mask => overlap("the mask", self.aux_ld, self.aux_stride).filter(|_| written),
        }
    }

    /// Where each column begins, D's in its elements and the auxiliary matrix's in its own
    /// (bits, for a mask); none when the launch touches nothing.
    pub fn columns(&self) -> impl Iterator<Item = [u64; 2]> + '_ {
        let batches = if self.is_empty() { 0 } else { self.batch };
        (0..batches).flat_map(move |b| {
            (0..self.n).map(move |j| [b * self.stride + j * self.ld, b * self.aux_stride + j * self.aux_ld])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_clamps_and_gelu_follows_its_tanh_approximation() {
        assert_eq!([-2.5f32, -0.0, 0.0, 3.25].map(|x| ActivationOp::Relu.apply(x)), [0.0, 0.0, 0.0, 3.25]);
        // GELU(x) ~ x for large x, ~ 0 for very negative x, 0 at 0, and its value at 1.
        let gelu = ActivationOp::Gelu;
        assert_eq!(gelu.apply(0.0f32), 0.0);
        assert!((gelu.apply(1.0f32) - 0.841_192).abs() < 1e-6, "{}", gelu.apply(1.0f32));
        assert!((gelu.apply(1.0f64) - 0.841_191_990_608_276_8).abs() < 1e-15, "{}", gelu.apply(1.0f64));
        assert!((gelu.apply(6.0f32) - 6.0).abs() < 1e-6 && gelu.apply(-6.0f32).abs() < 1e-6);
    }

    #[test]
    fn slopes_are_the_functions_derivatives() {
        assert_eq!([-1.5f64, 0.0, 2.0].map(|x| ActivationOp::Relu.slope(x)), [0.0, 0.0, 1.0]);
        // GELU's slope against a central difference of the function, in f64.
        let gelu = ActivationOp::Gelu;
        for x in [-3.0f64, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5] {
            let h = 1e-6;
            let numeric = (gelu.apply(x + h) - gelu.apply(x - h)) / (2.0 * h);
            assert!((gelu.slope(x) - numeric).abs() < 1e-8, "at {x}: {} against {numeric}", gelu.slope(x));
        }
        assert_eq!(gelu.slope(0.0f32), 0.5);
        // Far out, where x^2 overflows an f32: 1 and 0, not NaN.
        assert_eq!([gelu.slope(1e20f32), gelu.slope(-1e20f32)], [1.0, 0.0]);
    }

    #[test]
    fn each_op_reads_and_keeps_its_auxiliary_element() {
        use EpilogueOp::*;
        assert_eq!(ReluMask.element(-2.0f32, Kept::Bit(true)), (0.0, Some(Kept::Bit(false))));
        assert_eq!(ReluMask.element(3.0f32, Kept::Bit(false)), (3.0, Some(Kept::Bit(true))));
        assert_eq!(GeluInput.element(0.0f64, Kept::Value(9.0)), (0.0, Some(Kept::Value(0.0))));
        assert_eq!(ReluGradient.element(5.0f32, Kept::Bit(false)), (0.0, None));
        assert_eq!(ReluGradient.element(5.0f32, Kept::Bit(true)), (5.0, None));
        assert_eq!(GeluGradient.element(4.0f64, Kept::Value(0.0)), (2.0, None));
        assert_eq!(Relu.element(-1.0f32, Kept::Bit(true)), (0.0, None));
        for code in 0..6 {
            assert_eq!(EpilogueOp::from_code(code).map(|op| op.code() as u64), Some(code));
        }
        assert_eq!(EpilogueOp::from_code(6), None);
        assert_eq!(EpilogueElement::from_code(3), Some(EpilogueElement::Double));
        assert_eq!(EpilogueElement::from_code(1).map(EpilogueElement::bytes), Some(2));
        assert_eq!(EpilogueElement::from_code(4), None);
    }

    fn shape(op: EpilogueOp, aux_ld: u64, aux_stride: u64) -> Epilogue {
        let element = EpilogueElement::Single(GemmElement::F16);
        Epilogue { op, m: 3, n: 2, ld: 5, stride: 12, batch: 2, element, aux_ld, aux_stride }
    }

    #[test]
    fn columns_and_batches_set_the_spans() {
        let a = shape(EpilogueOp::GeluInput, 4, 9);
        assert_eq!(a.columns().collect::<Vec<_>>(), [[0, 0], [5, 4], [12, 9], [17, 13]]);
        assert_eq!((a.span(), a.aux_span(), a.aux_width()), (12 + 5 + 3, 9 + 4 + 3, 2));
        // A mask's span is in bytes: bits 0 to 16 + 8 + 3 - 1.
        let mask = shape(EpilogueOp::ReluMask, 8, 16);
        assert_eq!((mask.aux_span(), mask.aux_width()), (4, 1));
        assert_eq!(shape(EpilogueOp::Relu, 0, 0).aux_span(), 0);
        assert_eq!(Epilogue { batch: 0, ..a }.span(), 0);
        // m 0: nothing touched, no column (though n and the batches are not 0).
        assert_eq!(Epilogue { m: 0, ..a }.span(), 0);
        assert_eq!(Epilogue { m: 0, ..a }.columns().count(), 0);
    }

    #[test]
    fn overlapping_or_unaligned_shapes_are_refused() {
        assert_eq!(shape(EpilogueOp::GeluInput, 3, 6).refusal(), None);
        assert!(shape(EpilogueOp::GeluInput, 2, 6).refusal().unwrap().contains("auxiliary matrix's leading"));
        assert!(shape(EpilogueOp::GeluInput, 3, 5).refusal().unwrap().contains("batches 5 apart"));
        // A gradient reads its auxiliary matrix: every batch may read one (stride 0).
        assert_eq!(shape(EpilogueOp::GeluGradient, 3, 0).refusal(), None);
        assert_eq!(shape(EpilogueOp::ReluGradient, 8, 0).refusal(), None);
        assert!(Epilogue { ld: 2, ..shape(EpilogueOp::Relu, 0, 0) }.refusal().unwrap().contains("D's leading"));
        // A mask starts each column and batch on a byte; the unused auxiliary matrix is not checked.
        assert_eq!(shape(EpilogueOp::ReluGradient, 8, 16).refusal(), None);
        assert!(shape(EpilogueOp::ReluMask, 4, 16).refusal().unwrap().contains("multiples of 8"));
        assert!(shape(EpilogueOp::ReluMask, 8, 12).refusal().unwrap().contains("multiples of 8"));
        assert!(shape(EpilogueOp::ReluMask, 8, 8).refusal().unwrap().contains("mask's batches"));
        assert_eq!(shape(EpilogueOp::Gelu, 0, 0).refusal(), None);
    }
}

//! An activation applied in place to a matrix, as the builtin kernel `blas_activation`
//! computes it (the CUDA shim's cuBLASLt launches it after a matmul for the `RELU` and `GELU`
//! epilogues): `(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type)` over
//! the `batch` column-major `m x n` matrices `D + b stride` of leading dimension `ld`, each
//! element of the type `type` codes ([`GemmElement`]: `f32`, binary16 or bfloat16) read as
//! `f32`, computed in `f32` and rounded back to nearest, ties to even:
//!
//! - op 0, ReLU: `max(x, 0)`;
//! - op 1, GELU as cuBLASLt approximates it: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
//!
//! Elements between the columns (and between the batches) are not touched. The CUDA source is
//! in `cuda/kernels.cu`.

use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

pub use ac_proto::backend::builtin::GemmElement;

use super::{size_arg, DeviceArg, DeviceResult};

/// `blas_activation`'s parameters.
pub const PARAMS: [ParamKind; 8] = [U32, U32, U32, Ptr, U32, U64, U32, U32];
/// The matrix's pointer.
pub const MATRIX: usize = 3;

/// The function applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `max(x, 0)`.
    Relu,
    /// GELU's tanh approximation.
    Gelu,
}

impl Op {
    /// The op numbered `code` in a launch's arguments.
    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => Op::Relu,
            1 => Op::Gelu,
            _ => return None,
        })
    }

    /// Its number in a launch's arguments.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The function at `x`, in `f32` (as every device computes it).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Op::Relu => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            Op::Gelu => 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh()),
        }
    }
}

/// A launch: the function, the matrices and their element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activation {
    /// The function applied.
    pub op: Op,
    /// Rows and columns of each matrix.
    pub m: u64,
    pub n: u64,
    /// From one column to the next, in elements.
    pub ld: u64,
    /// From one matrix to the next, in elements.
    pub stride: u64,
    /// Matrices.
    pub batch: u64,
    /// The elements' type.
    pub element: GemmElement,
}

impl Activation {
    /// Whether the launch touches nothing.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Elements from the pointer to the last one touched, plus one.
    pub fn span(&self) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let last_column =
            (self.batch - 1).saturating_mul(self.stride).saturating_add((self.n - 1).saturating_mul(self.ld));
        last_column.saturating_add(self.m)
    }

    /// Where each column begins, in elements from the pointer.
    pub fn columns(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.batch).flat_map(move |b| (0..self.n).map(move |j| b * self.stride + j * self.ld))
    }
}

/// The shape of launch `args` of `name`, refused where the op or the type is unknown or the
/// columns overlap (`ld < m`).
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Activation> {
    let at = |i| size_arg(name, args, i);
    let invalid = |why: String| WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"));
    let code = at(0)?;
    let op = Op::from_code(code).ok_or_else(|| invalid(format!("unknown op {code} (0 ReLU, 1 GELU)")))?;
    let type_code = at(7)?;
    let element = GemmElement::from_code(type_code)
        .ok_or_else(|| invalid(format!("element type {type_code} (0 f32, 1 f16, 2 bf16)")))?;
    let a = Activation { op, m: at(1)?, n: at(2)?, ld: at(4)?, stride: at(5)?, batch: at(6)?, element };
    if a.n > 1 && a.ld < a.m {
        return Err(invalid(format!("ld {} below m {}", a.ld, a.m)));
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_clamps_and_gelu_follows_its_tanh_approximation() {
        assert_eq!([-2.5f32, -0.0, 0.0, 3.25].map(|x| Op::Relu.apply(x)), [0.0, 0.0, 0.0, 3.25]);
        // GELU(x) ~ x for large x, ~ 0 for very negative x, 0 at 0, and its value at 1.
        assert_eq!(Op::Gelu.apply(0.0), 0.0);
        assert!((Op::Gelu.apply(1.0) - 0.841_192).abs() < 1e-6, "{}", Op::Gelu.apply(1.0));
        assert!((Op::Gelu.apply(6.0) - 6.0).abs() < 1e-6 && Op::Gelu.apply(-6.0).abs() < 1e-6);
    }

    #[test]
    fn columns_and_batches_set_the_span() {
        let a = Activation { op: Op::Relu, m: 3, n: 2, ld: 5, stride: 12, batch: 2, element: GemmElement::F16 };
        assert_eq!(a.columns().collect::<Vec<_>>(), [0, 5, 12, 17]);
        assert_eq!(a.span(), 12 + 5 + 3);
        assert_eq!(Activation { batch: 0, ..a }.span(), 0);
    }
}

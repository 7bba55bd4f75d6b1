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

pub use ac_proto::backend::builtin::{gemm_batches_apart, Activation, ActivationOp, GemmElement};

use super::{size_arg, DeviceArg, DeviceResult};

/// `blas_activation`'s parameters.
pub const PARAMS: [ParamKind; 8] = [U32, U32, U32, Ptr, U32, U64, U32, U32];
/// The matrix's pointer.
pub const MATRIX: usize = 3;

/// The shape of launch `args` of `name`, refused where the op or the type is unknown or the
/// columns or the batches overlap (`ld < m`; an element would take the function twice).
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Activation> {
    let at = |i| size_arg(name, args, i);
    let invalid = |why: String| WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"));
    let code = at(0)?;
    let op = ActivationOp::from_code(code).ok_or_else(|| invalid(format!("unknown op {code} (0 ReLU, 1 GELU)")))?;
    let type_code = at(7)?;
    let element = GemmElement::from_code(type_code)
        .ok_or_else(|| invalid(format!("element type {type_code} (0 f32, 1 f16, 2 bf16)")))?;
    let a = Activation { op, m: at(1)?, n: at(2)?, ld: at(4)?, stride: at(5)?, batch: at(6)?, element };
    if a.n > 1 && a.ld < a.m {
        return Err(invalid(format!("ld {} below m {}", a.ld, a.m)));
    }
    if !gemm_batches_apart(a.m, a.n, a.ld, a.stride, a.batch) {
        return Err(invalid(format!("batches {} apart overlap ({} x {}, ld {})", a.stride, a.m, a.n, a.ld)));
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_clamps_and_gelu_follows_its_tanh_approximation() {
        assert_eq!([-2.5f32, -0.0, 0.0, 3.25].map(|x| ActivationOp::Relu.apply(x)), [0.0, 0.0, 0.0, 3.25]);
        // GELU(x) ~ x for large x, ~ 0 for very negative x, 0 at 0, and its value at 1.
        assert_eq!(ActivationOp::Gelu.apply(0.0), 0.0);
        assert!((ActivationOp::Gelu.apply(1.0) - 0.841_192).abs() < 1e-6, "{}", ActivationOp::Gelu.apply(1.0));
        assert!((ActivationOp::Gelu.apply(6.0) - 6.0).abs() < 1e-6 && ActivationOp::Gelu.apply(-6.0).abs() < 1e-6);
    }

    #[test]
    fn columns_and_batches_set_the_span() {
        let a =
            Activation { op: ActivationOp::Relu, m: 3, n: 2, ld: 5, stride: 12, batch: 2, element: GemmElement::F16 };
        assert_eq!(a.columns().collect::<Vec<_>>(), [0, 5, 12, 17]);
        assert_eq!(a.span(), 12 + 5 + 3);
        assert_eq!(Activation { batch: 0, ..a }.span(), 0);
        // m 0: nothing touched, no column (though n and the batches are not 0).
        assert_eq!(Activation { m: 0, ..a }.span(), 0);
        assert_eq!(Activation { m: 0, ..a }.columns().count(), 0);
    }
}

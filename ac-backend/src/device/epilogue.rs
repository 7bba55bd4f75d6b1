//! cuBLASLt's epilogues in place on a matrix, as the builtin kernels `blas_activation` and
//! `blas_epilogue` compute them (the CUDA shim's cuBLASLt launches them after a matmul):
//!
//! - `blas_activation(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type)`
//!   over the `batch` column-major `m x n` matrices `D + b stride` of leading dimension `ld`,
//!   each element of the type `type` codes ([`GemmElement`]: `f32`, binary16 or bfloat16) read
//!   as `f32`, computed in `f32` and rounded back to nearest, ties to even: op 0, ReLU, `max(x,
//!   0)`; op 1, GELU as cuBLASLt approximates it, `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
//!   x^3)))`.
//! - `blas_epilogue(u32 op, u32 m, u32 n, void* D, u32 ld, u64 stride, u32 batch, u32 type,
//!   void* aux, u64 aux_ld, u64 aux_stride)`: the same, `type` 3 `f64` too (computed in `f64`),
//!   and the ops that keep or read an auxiliary matrix of D's shape ([`EpilogueOp`]: ReLU's mask,
//!   GELU's input, and their gradients), which [`Epilogue`] describes.
//!
//! Elements between the columns (and between the batches) are not touched. The CUDA source is
//! in `cuda/kernels.cu`.

use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

pub use ac_proto::backend::builtin::epilogue::{Kept, Real};
pub use ac_proto::backend::builtin::{ActivationOp, Aux, Epilogue, EpilogueElement, EpilogueOp, GemmElement};

use super::{size_arg, spans_meet, DeviceArg, DeviceResult};

/// `blas_activation`'s parameters.
pub const ACTIVATION_PARAMS: [ParamKind; 8] = [U32, U32, U32, Ptr, U32, U64, U32, U32];
/// `blas_epilogue`'s parameters.
pub const PARAMS: [ParamKind; 11] = [U32, U32, U32, Ptr, U32, U64, U32, U32, Ptr, U64, U64];
/// D's pointer.
pub const MATRIX: usize = 3;
/// The auxiliary matrix's pointer (`blas_epilogue`).
pub const AUX: usize = 8;

/// The shape of launch `args` of `name` (`blas_activation` or `blas_epilogue`), refused where
/// the op or the type is unknown, where [`Epilogue::refusal`] says, or where D and the auxiliary
/// matrix share bytes.
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Epilogue> {
    let at = |i| size_arg(name, args, i);
    let invalid = |why: String| WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"));
    let [code, m, n, ld, stride, batch, type_code] = [0, 1, 2, 4, 5, 6, 7].map(at);
    let (code, type_code, dims) = (code?, type_code?, [m?, n?, ld?, stride?, batch?]);
    let e = if name == "blas_activation" {
        let f = ActivationOp::from_code(code).ok_or_else(|| invalid(format!("unknown op {code} (0 ReLU, 1 GELU)")))?;
        let element = GemmElement::from_code(type_code)
            .ok_or_else(|| invalid(format!("element type {type_code} (0 f32, 1 f16, 2 bf16)")))?;
        Epilogue::activation(f, dims, element)
    } else {
        let op = EpilogueOp::from_code(code).ok_or_else(|| invalid(format!("unknown op {code} (0 to 5)")))?;
        let element = EpilogueElement::from_code(type_code)
            .ok_or_else(|| invalid(format!("element type {type_code} (0 f32, 1 f16, 2 bf16, 3 f64)")))?;
        let [m, n, ld, stride, batch] = dims;
        Epilogue { op, m, n, ld, stride, batch, element, aux_ld: at(9)?, aux_stride: at(10)? }
    };
    if let Some(why) = e.refusal() {
        return Err(invalid(why));
    }
    if e.aux_span() > 0 {
        let [d_bytes, aux_bytes] =
            [e.span().saturating_mul(e.element.bytes()), e.aux_span().saturating_mul(e.aux_width())];
        if spans_meet((&args[MATRIX], d_bytes), (&args[AUX], aux_bytes)) {
            return Err(invalid("D and the auxiliary matrix overlap".into()));
        }
    }
    Ok(e)
}

/// The buffers a launch touches: (argument, units, bytes of a unit).
pub fn footprints(e: &Epilogue) -> Vec<(usize, u64, u64)> {
    let d = (MATRIX, e.span(), e.element.bytes());
    match e.op.aux() {
        Aux::Unused => vec![d],
        Aux::Mask | Aux::Input => vec![d, (AUX, e.aux_span(), e.aux_width())],
    }
}

#[cfg(test)]
mod tests {
    use super::super::DeviceMem;
    use super::*;
    use ac_proto::backend::KernelArg;

    fn args(op: u32, type_code: u32, d: (u64, u64), aux: (u64, u64), aux_ld: u64) -> Vec<DeviceArg> {
        let at = |(mem, offset): (u64, u64)| DeviceArg::Mem { mem: DeviceMem(mem), offset, len: 1 << 20 };
        let (u, w) = (|v: u32| DeviceArg::Scalar(KernelArg::U32(v)), |v: u64| DeviceArg::Scalar(KernelArg::U64(v)));
        // 3 x 2, ld 4, two batches 8 apart; the auxiliary matrix's batches 2 aux_ld apart.
        vec![u(op), u(3), u(2), at(d), u(4), w(8), u(2), u(type_code), at(aux), w(aux_ld), w(2 * aux_ld)]
    }

    #[test]
    fn the_shape_comes_from_the_arguments() {
        let e = shape("blas_epilogue", &args(3, 3, (1, 0), (2, 0), 8)).unwrap();
        assert_eq!((e.op, e.element, e.aux_ld, e.aux_stride), (EpilogueOp::GeluInput, EpilogueElement::Double, 8, 16));
        assert_eq!(footprints(&e), [(MATRIX, 8 + 4 + 3, 8), (AUX, 16 + 8 + 3, 8)]);
        let activation = shape("blas_activation", &args(1, 2, (1, 0), (2, 0), 8)[..8]).unwrap();
        assert_eq!(activation, Epilogue::activation(ActivationOp::Gelu, [3, 2, 4, 8, 2], GemmElement::Bf16));
        assert_eq!(footprints(&activation), [(MATRIX, 15, 2)]);
        // f64 is blas_epilogue's alone; op 6 and type 4 are no one's.
        assert!(shape("blas_activation", &args(1, 3, (1, 0), (2, 0), 8)[..8]).is_err());
        assert!(shape("blas_epilogue", &args(6, 0, (1, 0), (2, 0), 8)).unwrap_err().message.contains("op 6"));
        assert!(shape("blas_epilogue", &args(0, 4, (1, 0), (2, 0), 8)).unwrap_err().message.contains("type 4"));
    }

    #[test]
    fn d_and_the_auxiliary_matrix_may_not_share_bytes() {
        // A mask of 3 x 2 in two batches, ld 8 bits: 4 bytes. D (15 f32) at 0..60 in allocation 1.
        assert!(shape("blas_epilogue", &args(2, 0, (1, 0), (1, 60), 8)).is_ok());
        let err = shape("blas_epilogue", &args(2, 0, (1, 0), (1, 56), 8)).unwrap_err();
        assert!(err.message.contains("overlap"), "{err:?}");
        // ReLU alone does not touch the auxiliary matrix: D itself may be passed.
        assert!(shape("blas_epilogue", &args(0, 0, (1, 0), (1, 0), 0)).is_ok());
        // The shape's own refusals: a mask's columns not on a byte.
        assert!(shape("blas_epilogue", &args(4, 0, (1, 0), (2, 0), 4)).unwrap_err().message.contains("multiples of 8"));
    }
}

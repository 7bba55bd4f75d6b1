//! BLAS's copy on elements of any width, as the builtin kernel `blas_copy` does it: `(u32 n,
//! u32 width, const void* x, i64 incx, void* y, i64 incy)`, `y_i = x_i` for `i < n`, a
//! vector with a negative increment read backwards from its last element
//! ([`VectorCopy::index`]). The CUDA shim's cuBLAS launches it to gather a vector the program
//! passed backwards (or strided where a gemm cannot read it) into a forward copy, and to
//! scatter the copy back. The CUDA source is in `cuda/kernels.cu`.

use ac_proto::backend::ParamKind::{self, Ptr, I64, U32};
use ac_proto::backend::{ErrorKind, KernelArg, WireError};

pub use ac_proto::backend::builtin::VectorCopy;

use super::{size_arg, spans_meet, DeviceArg, DeviceResult};

/// `blas_copy`'s parameters.
pub const PARAMS: [ParamKind; 6] = [U32, U32, Ptr, I64, Ptr, I64];
/// The vectors' pointers: `x`, read, and `y`, written.
pub const VECTORS: [usize; 2] = [2, 4];

/// The shape of launch `args` of `name`, refused where [`VectorCopy::refusal`] says, or where
/// the bytes it reads of `x` and writes of `y` overlap (the order in which the elements are
/// copied is not defined).
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<VectorCopy> {
    let invalid = |why: String| WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}"));
    let signed = |i: usize| match args.get(i) {
        Some(DeviceArg::Scalar(KernelArg::I64(v))) => Ok(*v),
        other => Err(invalid(format!("argument {i}: expected an i64, got {other:?}"))),
    };
    let copy =
        VectorCopy { n: size_arg(name, args, 0)?, width: size_arg(name, args, 1)?, incx: signed(3)?, incy: signed(5)? };
    if let Some(why) = copy.refusal() {
        return Err(invalid(why));
    }
    let [x_bytes, y_bytes] = copy.spans().map(|elements| elements.saturating_mul(copy.width));
    if spans_meet((&args[VECTORS[0]], x_bytes), (&args[VECTORS[1]], y_bytes)) {
        return Err(invalid("x and y overlap".into()));
    }
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::super::DeviceMem;
    use super::*;

    fn args(n: u32, width: u32, (x, incx): (u64, i64), (y, incy): (u64, i64), same: bool) -> Vec<DeviceArg> {
        let at = |mem: u64, offset: u64| DeviceArg::Mem { mem: DeviceMem(mem), offset, len: 1 << 20 };
        vec![
            DeviceArg::Scalar(KernelArg::U32(n)),
            DeviceArg::Scalar(KernelArg::U32(width)),
            at(1, x),
            DeviceArg::Scalar(KernelArg::I64(incx)),
            at(if same { 1 } else { 2 }, y),
            DeviceArg::Scalar(KernelArg::I64(incy)),
        ]
    }

    #[test]
    fn the_shape_comes_from_the_arguments() {
        let copy = shape("blas_copy", &args(5, 8, (0, -2), (0, 1), false)).unwrap();
        assert_eq!(copy, VectorCopy { n: 5, width: 8, incx: -2, incy: 1 });
        // A u64 where the increment's i64 belongs is refused, as is an unknown width.
        let mut wrong = args(5, 8, (0, -2), (0, 1), false);
        wrong[3] = DeviceArg::Scalar(KernelArg::U64(2));
        assert!(shape("blas_copy", &wrong).unwrap_err().message.contains("argument 3"));
        assert!(shape("blas_copy", &args(5, 12, (0, 1), (0, 1), false)).unwrap_err().message.contains("width 12"));
    }

    #[test]
    fn copies_within_one_allocation_must_not_overlap() {
        // 4 elements of 4 bytes, 2 apart: x spans bytes 0..28.
        assert!(shape("blas_copy", &args(4, 4, (0, 2), (28, 1), true)).is_ok(), "y just past x");
        assert!(shape("blas_copy", &args(4, 4, (0, -2), (24, 1), true)).is_err(), "y from x's last element");
        assert!(shape("blas_copy", &args(4, 4, (32, 1), (0, -3), true)).is_err(), "x within y's span");
        assert!(shape("blas_copy", &args(4, 4, (0, 2), (0, 2), false)).is_ok(), "two allocations");
        assert!(shape("blas_copy", &args(0, 4, (0, 2), (0, 2), true)).is_ok(), "nothing copied");
    }
}

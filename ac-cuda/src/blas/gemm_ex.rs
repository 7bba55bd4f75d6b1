//! The `Ex` forms of gemm, whose matrices' types are arguments (`cublasGemmEx`,
//! `cublasSgemmEx`, `cublasGemmStridedBatchedEx`): all-`f32` and all-`f64` calls launch
//! `blas_sgemm` or `blas_dgemm`; half-precision ones (binary16 or bfloat16 `A` and `B`, `C` of
//! the same type or `f32`, as PyTorch's and CuPy's half-precision products ask) launch
//! `blas_gemm_ex`, which computes in `f32` and rounds to `C`'s type. The dot products of
//! any of these types (`cublasDotEx`, `cublasDotcEx`: PyTorch's `torch.dot` in half precision)
//! are gemms of one element ([`super::vectors::dot`]).

use std::ffi::{c_int, c_longlong, c_void};

use ac_proto::backend::builtin::GemmElement;

use super::gemm::{gemm, plain, Precision, Types};
use super::guard;
use super::vectors::{dot, Finish};
use crate::error::{code, CuResult, Error};

/// `cudaDataType` values of the matrices served.
pub(super) const CUDA_R_32F: c_int = 0;
pub(super) const CUDA_R_64F: c_int = 1;
pub(super) const CUDA_R_16F: c_int = 2;
pub(super) const CUDA_R_16BF: c_int = 14;
pub(super) const CUDA_C_32F: c_int = 4;
pub(super) const CUDA_C_64F: c_int = 5;
/// `cublasComputeType_t` values computed in `f32` (`COMPUTE_32F`, `_PEDANTIC`, `_FAST_16F`,
/// `_FAST_16BF`, `_FAST_TF32`, `_EMULATED_16BFX9`: these allow less precision, not more), in
/// `f64` (`COMPUTE_64F`, `_PEDANTIC`) and in binary16 (`COMPUTE_16F`, `_PEDANTIC`); before
/// CUDA 11 the compute type was a `cudaDataType`.
const COMPUTE_32F: [c_int; 7] = [68, 69, 74, 75, 77, 78, CUDA_R_32F];
const COMPUTE_64F: [c_int; 3] = [70, 71, CUDA_R_64F];
const COMPUTE_16F: [c_int; 3] = [64, 65, CUDA_R_16F];
/// The `f32` compute types cuBLAS takes with binary16 or bfloat16 inputs (the `_FAST_` ones
/// are for `f32` inputs only).
const HALF_COMPUTE_32F: [c_int; 3] = [68, 69, CUDA_R_32F];

/// A half-precision type's `GemmElement`, or `f32`'s.
pub(super) fn element(data_type: c_int) -> Option<GemmElement> {
    Some(match data_type {
        CUDA_R_32F => GemmElement::F32,
        CUDA_R_16F => GemmElement::F16,
        CUDA_R_16BF => GemmElement::Bf16,
        _ => return None,
    })
}

/// The types of an `Ex`-family call with matrices of `cudaDataType`s `types` (A, B, C)
/// computed as `compute`: all `f32`, `f64`, complex `f32` or complex `f64`; or `A` and `B`
/// binary16 or bfloat16 and `C` of their type or `f32`, computed in `f32`; or all binary16
/// computed in binary16. Other mixes (integers, complex half precision, FP8) are not served.
pub(super) fn ex_types(types: [c_int; 3], compute: c_int) -> CuResult<Types> {
    let [a, b, c] = types;
    let half_inputs = a == b && (a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F);
    let half_types = || Some(types.map(|t| element(t).expect("a served type")));
    let found = match types {
        [CUDA_R_32F, CUDA_R_32F, CUDA_R_32F] if COMPUTE_32F.contains(&compute) => Types::uniform(Precision::Single),
        [CUDA_R_64F, CUDA_R_64F, CUDA_R_64F] if COMPUTE_64F.contains(&compute) => Types::uniform(Precision::Double),
        [CUDA_C_32F, CUDA_C_32F, CUDA_C_32F] if COMPUTE_32F.contains(&compute) => {
            Types::uniform(Precision::ComplexSingle)
        }
        [CUDA_C_64F, CUDA_C_64F, CUDA_C_64F] if COMPUTE_64F.contains(&compute) => {
            Types::uniform(Precision::ComplexDouble)
        }
        _ if half_inputs && HALF_COMPUTE_32F.contains(&compute) => {
            Types { precision: Precision::Single, elements: half_types() }
        }
        [CUDA_R_16F, CUDA_R_16F, CUDA_R_16F] if COMPUTE_16F.contains(&compute) => {
            Types { precision: Precision::Half, elements: half_types() }
        }
        _ => {
            let why = format!(
                "matrices of cudaDataType {types:?} computed as {compute}: served are f32, f64 and their complex, \
                 and binary16 or bfloat16 A and B with C of their type or f32"
            );
            return Err(Error::said(code::NOT_SUPPORTED, why));
        }
    };
    Ok(found)
}

/// The scale type (`cudaDataType` of alpha and beta) of a gemm computed in `precision`.
pub(super) fn scale_type(precision: Precision) -> c_int {
    match precision {
        Precision::Single => CUDA_R_32F,
        Precision::Double => CUDA_R_64F,
        Precision::Half => CUDA_R_16F,
        Precision::ComplexSingle => CUDA_C_32F,
        Precision::ComplexDouble => CUDA_C_64F,
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasGemmEx(
    h: usize,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: u64,
    a_type: c_int,
    lda: c_int,
    b: u64,
    b_type: c_int,
    ldb: c_int,
    beta: *const c_void,
    c: u64,
    c_type: c_int,
    ldc: c_int,
    compute: c_int,
    _algo: c_int,
) -> u32 {
    guard("cublasGemmEx", || {
        let types = ex_types([a_type, b_type, c_type], compute)?;
        gemm(h, plain(types, [transa, transb], [m, n, k], alpha, [a, b, c], [lda, ldb, ldc], beta))
    })
}

/// Defines `cublasSgemmEx` (scalars `f32`, `$precision` Single) or `cublasCgemmEx` and
/// `cublasCgemm3mEx` (scalars `cuComplex`, ComplexSingle; 3m names an algorithm, not a result):
/// matrices of the types given, computed in `f32`, whose scalars' type must be `$t`: real
/// matrices are the first's, complex ones the others' (a scalar would be read past its floats).
macro_rules! single_gemm_ex {
    ($name:ident, $t:ty, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: u64,
            a_type: c_int,
            lda: c_int,
            b: u64,
            b_type: c_int,
            ldb: c_int,
            beta: *const $t,
            c: u64,
            c_type: c_int,
            ldc: c_int,
        ) -> u32 {
            guard(stringify!($name), || {
                let types = ex_types([a_type, b_type, c_type], COMPUTE_32F[0])?;
                if types.precision != $precision {
                    let why =
                        format!("{} on matrices of cudaDataType {:?}", stringify!($name), [a_type, b_type, c_type]);
                    return Err(Error::said(code::NOT_SUPPORTED, why));
                }
                let matrices = [a, b, c];
                let call =
                    plain(types, [transa, transb], [m, n, k], alpha.cast(), matrices, [lda, ldb, ldc], beta.cast());
                gemm(h, call)
            })
        }
    };
}

single_gemm_ex!(cublasSgemmEx, f32, Precision::Single);
single_gemm_ex!(cublasCgemmEx, [f32; 2], Precision::ComplexSingle);
single_gemm_ex!(cublasCgemm3mEx, [f32; 2], Precision::ComplexSingle);

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasGemmStridedBatchedEx(
    h: usize,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: u64,
    a_type: c_int,
    lda: c_int,
    stride_a: c_longlong,
    b: u64,
    b_type: c_int,
    ldb: c_int,
    stride_b: c_longlong,
    beta: *const c_void,
    c: u64,
    c_type: c_int,
    ldc: c_int,
    stride_c: c_longlong,
    batch: c_int,
    compute: c_int,
    _algo: c_int,
) -> u32 {
    guard("cublasGemmStridedBatchedEx", || {
        let types = ex_types([a_type, b_type, c_type], compute)?;
        let mut call = plain(types, [transa, transb], [m, n, k], alpha, [a, b, c], [lda, ldb, ldc], beta);
        (call.stride, call.batch) = ([stride_a, stride_b, stride_c], batch);
        gemm(h, call)
    })
}

/// The types of a `cublasDotEx` or `cublasDotcEx` of vectors and a result of `cudaDataType`s
/// `types` (x, y, result), executed as `execution`: all three of one type, executed as
/// cuBLAS's table of the call lists: binary16, bfloat16 and `f32` in `CUDA_R_32F`, `f64` in
/// `CUDA_R_64F`, complex `f32` in `CUDA_C_32F`, complex `f64` in `CUDA_C_64F`.
fn dot_types(types: [c_int; 3], execution: c_int) -> CuResult<Types> {
    let executed_as = match types[0] {
        CUDA_R_16F | CUDA_R_16BF | CUDA_R_32F => Some(CUDA_R_32F),
        CUDA_R_64F => Some(CUDA_R_64F),
        CUDA_C_32F => Some(CUDA_C_32F),
        CUDA_C_64F => Some(CUDA_C_64F),
        _ => None,
    };
    if types.iter().any(|&t| t != types[0]) || executed_as != Some(execution) {
        let why = format!("a dot product of cudaDataType {types:?} executed as {execution}");
        return Err(Error::said(code::NOT_SUPPORTED, why));
    }
    // As a gemm's types: the complex ones' compute type is their parts'.
    let compute = match execution {
        CUDA_C_32F => CUDA_R_32F,
        CUDA_C_64F => CUDA_R_64F,
        real => real,
    };
    ex_types(types, compute)
}

/// A `cublasDotEx` or `cublasDotcEx` (`conjugate`).
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
unsafe fn dot_ex(
    h: usize,
    n: c_int,
    (x, x_type, incx): (u64, c_int, c_int),
    (y, y_type, incy): (u64, c_int, c_int),
    (result, result_type): (*mut c_void, c_int),
    execution: c_int,
    conjugate: bool,
) -> CuResult<()> {
    let types = dot_types([x_type, y_type, result_type], execution)?;
    dot(h, types, n, (x, incx), (y, incy), conjugate, result, Finish::Element)
}

/// Defines `cublasDotEx` or, `$conjugate`, `cublasDotcEx`.
macro_rules! dot_ex_entry {
    ($name:ident, $conjugate:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            n: c_int,
            x: u64,
            x_type: c_int,
            incx: c_int,
            y: u64,
            y_type: c_int,
            incy: c_int,
            result: *mut c_void,
            result_type: c_int,
            execution: c_int,
        ) -> u32 {
            let (x, y, result) = ((x, x_type, incx), (y, y_type, incy), (result, result_type));
            guard(stringify!($name), || dot_ex(h, n, x, y, result, execution, $conjugate))
        }
    };
}

dot_ex_entry!(cublasDotEx, false);
dot_ex_entry!(cublasDotcEx, true);

#[cfg(test)]
mod tests {
    use super::super::gemm::HALF;
    use super::*;
    use GemmElement::{Bf16, F16, F32};

    #[test]
    fn uniform_and_half_precision_types_are_served() {
        let single = Types::uniform(Precision::Single);
        assert_eq!(ex_types([0, 0, 0], 68).unwrap(), single);
        assert_eq!(ex_types([0, 0, 0], 77).unwrap(), single);
        assert_eq!(ex_types([1, 1, 1], 70).unwrap(), Types::uniform(Precision::Double));
        // PyTorch's half and bfloat16 products, and f32 results of half inputs.
        assert_eq!(ex_types([2, 2, 2], 68).unwrap().elements, Some([F16; 3]));
        assert_eq!(ex_types([14, 14, 14], 68).unwrap().elements, Some([Bf16; 3]));
        assert_eq!(ex_types([14, 14, 0], 0).unwrap().elements, Some([Bf16, Bf16, F32]));
        assert_eq!(ex_types([2, 2, 2], 64).unwrap(), HALF);
        // Complex f32 and f64 (CuPy's complex dot).
        assert_eq!(ex_types([4, 4, 4], 68).unwrap(), Types::uniform(Precision::ComplexSingle));
        assert_eq!(ex_types([5, 5, 5], 70).unwrap(), Types::uniform(Precision::ComplexDouble));
    }

    #[test]
    fn other_mixes_are_not_supported() {
        // f32 asked to compute in f64; A and B of two types; a half C of f32 inputs; a bfloat16
        // product computed in binary16; complex f32 computed in f64; complex binary16
        // (CUDA_C_16F) and integer (CUDA_R_8I) matrices; binary16 inputs with a compute type
        // cuBLAS keeps for f32 ones (COMPUTE_32F_FAST_16F).
        for (types, compute) in [
            ([0, 0, 0], 70),
            ([2, 14, 0], 68),
            ([0, 0, 2], 68),
            ([14, 14, 14], 64),
            ([4, 4, 4], 70),
            ([6, 6, 6], 68),
            ([3, 3, 0], 72),
            ([2, 2, 2], 74),
        ] {
            assert_eq!(ex_types(types, compute).unwrap_err().code(), code::NOT_SUPPORTED, "{types:?} {compute}");
        }
    }

    #[test]
    fn dot_products_are_served_of_one_type_executed_as_cublas_lists() {
        // PyTorch's torch.dot on binary16 and bfloat16: executed in f32, the result rounded.
        assert_eq!(dot_types([2, 2, 2], 0).unwrap().elements, Some([F16; 3]));
        assert_eq!(dot_types([14, 14, 14], 0).unwrap().elements, Some([Bf16; 3]));
        assert_eq!(dot_types([0, 0, 0], 0).unwrap(), Types::uniform(Precision::Single));
        assert_eq!(dot_types([1, 1, 1], 1).unwrap(), Types::uniform(Precision::Double));
        assert_eq!(dot_types([4, 4, 4], 4).unwrap(), Types::uniform(Precision::ComplexSingle));
        assert_eq!(dot_types([5, 5, 5], 5).unwrap(), Types::uniform(Precision::ComplexDouble));
        // A result of another type than the vectors'; binary16 executed in binary16; complex
        // vectors executed as reals and the other way round; f32 executed in f64.
        // Compute types (CUBLAS_COMPUTE_16F, _32F) are not execution types.
        for (types, execution) in [
            ([2, 2, 0], 0),
            ([2, 2, 2], 2),
            ([4, 4, 4], 0),
            ([0, 0, 0], 4),
            ([0, 0, 0], 1),
            ([3, 3, 3], 0),
            ([2, 2, 2], 64),
            ([0, 0, 0], 68),
            ([1, 1, 1], 70),
        ] {
            assert_eq!(dot_types(types, execution).unwrap_err().code(), code::NOT_SUPPORTED, "{types:?} {execution}");
        }
    }

    #[test]
    fn sgemm_ex_refuses_complex_matrices_before_anything_else() {
        // cuBLAS's cublasSgemmEx takes no complex matrices (their float scalars would be read
        // as complex ones): refused as such, before the handle (here none) is even looked up.
        let null = std::ptr::null();
        let c = CUDA_C_32F;
        let status = unsafe { cublasSgemmEx(0, 0, 0, 1, 1, 1, null, 0, c, 1, 0, c, 1, null, 0, c, 1) };
        assert_eq!(status, super::super::status::NOT_SUPPORTED);
        let real = unsafe { cublasSgemmEx(0, 0, 0, 1, 1, 1, null, 0, 0, 1, 0, 0, 1, null, 0, 0, 1) };
        assert_eq!(real, super::super::status::NOT_INITIALIZED, "f32 matrices get as far as the handle");
    }
}

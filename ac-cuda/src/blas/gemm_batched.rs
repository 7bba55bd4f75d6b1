//! `cublas<S|D|H|C|Z>gemmBatched`: `C[i] = alpha op(A[i]) op(B[i]) + beta C[i]` for each `i`,
//! the three arrays of matrix addresses in device memory, read back after the stream's work
//! before the call (so the call waits for it). When each array's matrices are evenly spaced
//! and ascending (or one matrix repeated, as a shared `B`), the batch is one strided gemm
//! launch, as `gemmStridedBatched` is; otherwise (or if that launch is refused: results that
//! overlap, matrices in several allocations) a launch a product.

use std::ffi::{c_int, c_longlong, c_void};

use super::gemm::{self, plain, GemmCall, Operand, Types};
use super::gemm_ex::ex_types;
use super::{each_batch, guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Runs `call` (its matrices not yet set) over the `count` matrices whose addresses are in the
/// device arrays `arrays` (`A`, `B`, `C`).
unsafe fn gemm_batched(h: usize, call: GemmCall, arrays: [u64; 3], count: c_int) -> CuResult<()> {
    if count < 0 {
        return Err(Error::said(code::INVALID_VALUE, format!("batch count {count}")));
    }
    gemm::check(&call)?;
    let target = handle(h)?.target();
    launch_batches(target, call, &target.device_pointers(arrays, count)?)
}

/// Launches `call` (its matrices not yet set) over the matrices whose addresses `matrices`
/// holds (`A`, `B`, `C`): one strided launch if each array is evenly spaced, else one a product.
pub(super) unsafe fn launch_batches(target: Target, call: GemmCall, matrices: &[Vec<u64>; 3]) -> CuResult<()> {
    each_batch(matrices, call.types.widths(), |spans, _, batch| {
        let matrices = spans.map(|(first, _)| Operand::Memory(first));
        let stride = spans.map(|(_, stride)| stride as c_longlong);
        gemm::launch(target, GemmCall { matrices, stride, batch: batch as c_int, ..call })
    })
}

/// Defines `cublas<S|D|H|C|Z>gemmBatched` for element type `$t` and `$types`.
macro_rules! typed_gemm_batched {
    ($name:ident, $t:ty, $types:expr) => {
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
            lda: c_int,
            b: u64,
            ldb: c_int,
            beta: *const $t,
            c: u64,
            ldc: c_int,
            count: c_int,
        ) -> u32 {
            let call = plain($types, [transa, transb], [m, n, k], alpha.cast(), [0; 3], [lda, ldb, ldc], beta.cast());
            guard(stringify!($name), || gemm_batched(h, call, [a, b, c], count))
        }
    };
}

typed_gemm_batched!(cublasSgemmBatched, f32, Types::uniform(gemm::Precision::Single));
typed_gemm_batched!(cublasDgemmBatched, f64, Types::uniform(gemm::Precision::Double));
typed_gemm_batched!(cublasHgemmBatched, u16, gemm::HALF);
typed_gemm_batched!(cublasCgemmBatched, [f32; 2], Types::uniform(gemm::Precision::ComplexSingle));
typed_gemm_batched!(cublasZgemmBatched, [f64; 2], Types::uniform(gemm::Precision::ComplexDouble));
typed_gemm_batched!(cublasCgemm3mBatched, [f32; 2], Types::uniform(gemm::Precision::ComplexSingle));

/// `cublasGemmBatchedEx`: `gemmBatched` on the types `cublasGemmEx` serves, each array's
/// matrices spaced in elements of their own type.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasGemmBatchedEx(
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
    count: c_int,
    compute: c_int,
    _algo: c_int,
) -> u32 {
    guard("cublasGemmBatchedEx", || {
        let types = ex_types([a_type, b_type, c_type], compute)?;
        let call = plain(types, [transa, transb], [m, n, k], alpha, [0; 3], [lda, ldb, ldc], beta);
        gemm_batched(h, call, [a, b, c], count)
    })
}

//! Reductions of magnitudes: `cublas<S|D|Sc|Dz>asum` (their sum), `cublasI<s|d|c|z>amax` and
//! `amin` (the 1-based index of the first largest or smallest), a complex element's magnitude
//! being `|re| + |im|` as BLAS's. Each is one launch of the builtin `blas_<t>abs_reduce` (one
//! thread, in order: `ac-backend/src/device/abs_reduce.rs`). A result bound for device memory
//! (`CUBLAS_POINTER_MODE_DEVICE`) is written there by the kernel, without waiting; one bound for
//! the host goes through the scratch buffer's slot and is read back, so the call waits, as
//! cuBLAS's does. No elements, or an increment below 1, give 0 without a launch, as BLAS says.
//! The ILP64 index forms (`cublasIsamax_v2_64`, ...) write an `int64_t`: the index as an `int`,
//! then its upper half zeroed (an index is never negative), on the stream for device memory.

use std::ffi::{c_int, c_void};

use ac_frontend::KernelArg;

use super::gemm;
use super::ilp64::narrow;
use super::vectors::store;
use super::{guard, handle};
use crate::builtins::builtins;
use crate::error::{code, CuResult, Error};
use crate::pitched::memset_2d;

/// One reduction's kernel and what it reads and writes.
#[derive(Debug, Clone, Copy)]
struct Reduction {
    /// `blas_<t>abs_reduce`.
    kernel: &'static str,
    /// 0 asum, 1 iamax, 2 iamin.
    op: u32,
    /// Bytes of an element of `x`.
    element: u64,
    /// Bytes of the result: the real part's for a sum, an `int`'s for an index.
    result: usize,
}

/// Runs `r` over `n` elements of `x`, `incx` apart, into the program's `result`.
unsafe fn reduce(h: usize, r: Reduction, n: c_int, x: u64, incx: c_int, result: *mut c_void) -> CuResult<()> {
    if result.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "result is null"));
    }
    let target = handle(h)?.target();
    if n <= 0 || incx <= 0 {
        return store(target, result, &[0u8; 8][..r.result]);
    }
    let span = (n as u64 - 1) * incx as u64 + 1;
    let x = gemm::matrix(target, x, span, r.element)?;
    let u = |v: u32| KernelArg::U32(v);
    let args = |out| [u(r.op), u(n as u32), x, KernelArg::U64(incx as u64), out];
    if !target.host_pointers() {
        let out = gemm::matrix(target, result as u64, 1, r.result as u64)?;
        return target.launch(r.kernel, &args(out), 1, 32);
    }
    let mut bytes = [0u8; 8];
    builtins(target.device)?
        .through_result(|slot| target.launch(r.kernel, &args(slot), 1, 32), &mut bytes[..r.result])?;
    store(target, result, &bytes[..r.result])
}

/// Defines a reduction's entry point: `$result` its result's type.
macro_rules! reduction {
    ($name:ident, $result:ty, $kernel:literal, $op:expr, $element:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(h: usize, n: c_int, x: u64, incx: c_int, result: *mut $result) -> u32 {
            let r = Reduction { kernel: $kernel, op: $op, element: $element, result: std::mem::size_of::<$result>() };
            guard(stringify!($name), || reduce(h, r, n, x, incx, result.cast()))
        }
    };
}

/// An ILP64 index reduction (`base` its 32-bit form given `n` and `incx`, `name` its own): `n`
/// and `incx` as `int`s, the index written as an `int`, then the upper half of the `int64_t`
/// zeroed.
pub(super) unsafe fn index_64(
    base: impl FnOnce(c_int, c_int) -> u32,
    name: &str,
    h: usize,
    [n, incx]: [i64; 2],
    result: *mut i64,
) -> u32 {
    let [n, incx] = match narrow(name, [("n", n), ("incx", incx)]) {
        Ok(sizes) => sizes,
        Err(status) => return status,
    };
    let status = base(n, incx);
    if status != super::status::SUCCESS {
        return status;
    }
    guard(name, || {
        let target = handle(h)?.target();
        let high = result as u64 + 4;
        if target.host_pointers() {
            store(target, high as *mut c_void, &[0; 4])
        } else {
            memset_2d((high, Some(target.device)), 4, 0, 1, [4, 1], target.stream, false)
        }
    })
}

/// Defines the ILP64 form `$name` of the index reduction `$base`.
macro_rules! index_64 {
    ($name:ident, $base:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(h: usize, n: i64, x: u64, incx: i64, result: *mut i64) -> u32 {
            index_64(|n, incx| $base(h, n, x, incx, result.cast()), stringify!($name), h, [n, incx], result)
        }
    };
}

reduction!(cublasSasum_v2, f32, "blas_sabs_reduce", 0, 4);
reduction!(cublasDasum_v2, f64, "blas_dabs_reduce", 0, 8);
reduction!(cublasScasum_v2, f32, "blas_cabs_reduce", 0, 8);
reduction!(cublasDzasum_v2, f64, "blas_zabs_reduce", 0, 16);
reduction!(cublasIsamax_v2, c_int, "blas_sabs_reduce", 1, 4);
reduction!(cublasIdamax_v2, c_int, "blas_dabs_reduce", 1, 8);
reduction!(cublasIcamax_v2, c_int, "blas_cabs_reduce", 1, 8);
reduction!(cublasIzamax_v2, c_int, "blas_zabs_reduce", 1, 16);
reduction!(cublasIsamin_v2, c_int, "blas_sabs_reduce", 2, 4);
reduction!(cublasIdamin_v2, c_int, "blas_dabs_reduce", 2, 8);
reduction!(cublasIcamin_v2, c_int, "blas_cabs_reduce", 2, 8);
reduction!(cublasIzamin_v2, c_int, "blas_zabs_reduce", 2, 16);
index_64!(cublasIsamax_v2_64, cublasIsamax_v2);
index_64!(cublasIdamax_v2_64, cublasIdamax_v2);
index_64!(cublasIcamax_v2_64, cublasIcamax_v2);
index_64!(cublasIzamax_v2_64, cublasIzamax_v2);
index_64!(cublasIsamin_v2_64, cublasIsamin_v2);
index_64!(cublasIdamin_v2_64, cublasIdamin_v2);
index_64!(cublasIcamin_v2_64, cublasIcamin_v2);
index_64!(cublasIzamin_v2_64, cublasIzamin_v2);

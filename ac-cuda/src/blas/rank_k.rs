//! cuBLAS's symmetric rank-k updates, one triangle of a square `C` (`uplo` 0 lower, 1 upper;
//! the other triangle is not touched), each a launch of the builtin triangle gemm
//! (`blas_<s|d|c|z>gemmt`, [`super::gemm::launch_triangle`]):
//!
//! | call | `trans` N | `trans` T |
//! |---|---|---|
//! | `syrk`: `C = alpha op(A) op(A)^T + beta C` | `A A^T`, `A` n x k | `A^T A`, `A` k x n |
//! | `syrkx`: `C = alpha op(A) op(B)^T + beta C` | `A B^T` | `A^T B` |
//! | `syr2k`: `C = alpha (op(A) op(B)^T + op(B) op(A)^T) + beta C` | the two products, the second added | the same |
//!
//! in `f32`, `f64` and both complex types (whose `C` is symmetric, not Hermitian: `trans` C is
//! refused for them, as cuBLAS refuses it; for a real type C is T). syr2k's two products are
//! two launches, each rounded: the sum of two exact products is exact, others may differ from
//! cuBLAS's in the last place.

use std::ffi::c_int;

use super::gemm::{launch_triangle, product, GemmCall, Operand, Precision, Scalar};
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// A matrix of the program's and its leading dimension.
type Matrix = (u64, c_int);

/// The gemms of a rank-k update of `C` (`n x n`) by `op(A) op(B)^T` and, `both`, by
/// `op(B) op(A)^T` added (syr2k), in the order they run (none: it computes nothing), checked as
/// cuBLAS checks the call.
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
fn rank_k_calls(
    precision: Precision,
    [uplo, trans]: [c_int; 2],
    [n, k]: [c_int; 2],
    alpha: Scalar,
    a: Matrix,
    b: Matrix,
    beta: Scalar,
    c: Matrix,
    both: bool,
) -> CuResult<Vec<GemmCall>> {
    let transposes = if precision.is_complex() { 0..=1 } else { 0..=2 };
    let stored_rows = if trans == 0 { n } else { k };
    let wrong = !(0..=1).contains(&uplo)
        || !transposes.contains(&trans)
        || n < 0
        || k < 0
        || a.1 < stored_rows.max(1)
        || b.1 < stored_rows.max(1)
        || c.1 < n.max(1);
    if wrong {
        let why = format!("uplo {uplo}, trans {trans}, n {n}, k {k}, lda {}, ldb {}, ldc {}", a.1, b.1, c.1);
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // op(X) op(Y)^T: X Y^T for N, X^T Y for T.
    let ops = if trans == 0 { [0, 1] } else { [1, 0] };
    let update = |x: Matrix, y: Matrix, beta: Scalar| {
        let matrices = [Operand::Memory(x.0), Operand::Memory(y.0), Operand::Memory(c.0)];
        product(precision, ops, [n, n, k], alpha, matrices, [x.1, y.1, c.1], beta)
    };
    let mut calls = vec![update(a, b, beta)];
    if both {
        calls.push(update(b, a, Scalar::Value(1.0)));
    }
    Ok(calls)
}

/// Launches `calls` on handle `h`'s target, each on triangle `uplo` of C.
unsafe fn launch_all(h: usize, uplo: c_int, calls: impl FnOnce() -> CuResult<Vec<GemmCall>>) -> CuResult<()> {
    let target = handle(h)?.target();
    calls()?.into_iter().try_for_each(|call| launch_triangle(target, call, uplo))
}

/// Defines `cublas<T>syrk`, `cublas<T>syrkx` and `cublas<T>syr2k` for element type `$t` (a
/// complex one as `[f32; 2]` or `[f64; 2]`).
macro_rules! typed {
    ($t:ty, $precision:expr, $syrk:ident, $syrkx:ident, $syr2k:ident) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $syrk(
            h: usize,
            uplo: c_int,
            trans: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            beta: *const $t,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta, a) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()), (a, lda));
            guard(stringify!($syrk), || {
                launch_all(h, uplo, || {
                    rank_k_calls($precision, [uplo, trans], [n, k], alpha, a, a, beta, (c, ldc), false)
                })
            })
        }

        rank_k_entry!($syrkx, $t, $precision, false);
        rank_k_entry!($syr2k, $t, $precision, true);
    };
}

/// Defines `cublas<T>syrkx` or, `$both`, `cublas<T>syr2k`: two operands, A and B.
macro_rules! rank_k_entry {
    ($name:ident, $t:ty, $precision:expr, $both:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
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
        ) -> u32 {
            let (alpha, beta, a, b) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()), (a, lda), (b, ldb));
            guard(stringify!($name), || {
                launch_all(h, uplo, || {
                    rank_k_calls($precision, [uplo, trans], [n, k], alpha, a, b, beta, (c, ldc), $both)
                })
            })
        }
    };
}

typed!(f32, Precision::Single, cublasSsyrk_v2, cublasSsyrkx, cublasSsyr2k_v2);
typed!(f64, Precision::Double, cublasDsyrk_v2, cublasDsyrkx, cublasDsyr2k_v2);
typed!([f32; 2], Precision::ComplexSingle, cublasCsyrk_v2, cublasCsyrkx, cublasCsyr2k_v2);
typed!([f64; 2], Precision::ComplexDouble, cublasZsyrk_v2, cublasZsyrkx, cublasZsyr2k_v2);

#[cfg(test)]
mod tests {
    use super::super::gemm::at;
    use super::super::gemm::check;
    use super::*;

    const A: u64 = 0x10_0000;
    const B: u64 = 0x20_0000;
    const C: u64 = 0x30_0000;
    const ONE: Scalar = Scalar::Value(1.0);

    #[test]
    fn each_operation_multiplies_by_the_transpose_over_the_stored_shape() {
        // n 4, k 3: A stored 4 x 3 (N, lda 5) or 3 x 4 (T, lda 3); C 4 x 4, ldc 6.
        let n = rank_k_calls(Precision::Single, [0, 0], [4, 3], ONE, (A, 5), (A, 5), ONE, (C, 6), false).unwrap();
        assert_eq!((n.len(), n[0].trans, [n[0].m, n[0].n, n[0].k]), (1, [0, 1], [4, 4, 3]));
        assert_eq!(check(&n[0]).unwrap().footprints(), [2 * 5 + 4, 2 * 5 + 4, 3 * 6 + 4]);
        let t = rank_k_calls(Precision::Double, [1, 1], [4, 3], ONE, (A, 3), (B, 3), ONE, (C, 6), false).unwrap();
        assert_eq!((t[0].trans, at(t[0].matrices[0]), at(t[0].matrices[1])), ([1, 0], A, B));
        assert_eq!(check(&t[0]).unwrap().footprints(), [3 * 3 + 3, 3 * 3 + 3, 3 * 6 + 4]);
        // lda below op(A)'s stored rows; a conjugate transpose of a complex matrix (herk's).
        let short = rank_k_calls(Precision::Single, [0, 0], [4, 3], ONE, (A, 3), (A, 3), ONE, (C, 6), false);
        assert_eq!(short.unwrap_err().code(), code::INVALID_VALUE);
        let hermitian = rank_k_calls(Precision::ComplexSingle, [0, 2], [4, 3], ONE, (A, 4), (A, 4), ONE, (C, 4), false);
        assert_eq!(hermitian.unwrap_err().code(), code::INVALID_VALUE);
        let real_c = rank_k_calls(Precision::Single, [0, 2], [4, 3], ONE, (A, 3), (A, 3), ONE, (C, 4), false);
        assert_eq!(real_c.unwrap()[0].trans, [1, 0], "C is T for a real type");
    }

    #[test]
    fn syr2k_adds_the_swapped_product_to_the_first() {
        let beta = Scalar::Value(3.0);
        let calls = rank_k_calls(Precision::Double, [1, 0], [3, 2], ONE, (A, 3), (B, 4), beta, (C, 3), true).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!((at(calls[0].matrices[0]), at(calls[0].matrices[1])), (A, B));
        assert!(matches!(calls[0].beta, Scalar::Value(v) if v == 3.0));
        assert_eq!((at(calls[1].matrices[0]), at(calls[1].matrices[1]), calls[1].ld), (B, A, [4, 3, 3]));
        assert!(matches!(calls[1].beta, Scalar::Value(v) if v == 1.0));
    }
}

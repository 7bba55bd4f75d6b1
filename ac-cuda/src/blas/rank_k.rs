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
//!
//! And their Hermitian forms, for the complex types, with the conjugate transpose (`trans` N or
//! C; T refused) and a real `beta`:
//!
//! | call | `C =` |
//! |---|---|
//! | `herk` (`alpha` real) | `alpha op(A) op(A)^H + beta C` |
//! | `herkx` | `alpha op(A) op(B)^H + beta C` |
//! | `her2k` | `alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C` |
//!
//! after which the imaginary parts of C's diagonal are set to 0 (a memset each, on the same
//! stream), as cuBLAS sets them.

use std::ffi::c_int;

use std::ffi::c_void;

use super::gemm::{launch_triangle, product, scalar_parts, scalar_value, GemmCall, Operand, Precision, Scalar};
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};
use crate::pitched::memset_2d;

/// A matrix of the program's and its leading dimension.
pub(super) type Matrix = (u64, c_int);

/// What an update's C is: symmetric (products with the transpose) or Hermitian (with the
/// conjugate transpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Symmetry {
    Symmetric,
    Hermitian,
}

/// The gemms of a rank-k update of `C` (`n x n`) by `alphas[0] op(A) op(B)^T` (`^H` for a
/// Hermitian C) and, `both`, by `alphas[1] op(B) op(A)^T` added (syr2k, her2k), in the order
/// they run (none: it computes nothing), checked as cuBLAS checks the call.
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
fn rank_k_calls(
    precision: Precision,
    symmetry: Symmetry,
    [uplo, trans]: [c_int; 2],
    [n, k]: [c_int; 2],
    alphas: [Scalar; 2],
    a: Matrix,
    b: Matrix,
    beta: Scalar,
    c: Matrix,
    both: bool,
) -> CuResult<Vec<GemmCall>> {
    let known = match (symmetry, precision.is_complex()) {
        (Symmetry::Hermitian, _) => trans == 0 || trans == 2,
        (Symmetry::Symmetric, true) => (0..=1).contains(&trans),
        (Symmetry::Symmetric, false) => (0..=2).contains(&trans),
    };
    let stored_rows = if trans == 0 { n } else { k };
    let wrong = !(0..=1).contains(&uplo)
        || !known
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
    // op(X) op(Y)^T: X Y^T for N, X^T Y for T (^H and C for a Hermitian C).
    let transposed = if symmetry == Symmetry::Hermitian { 2 } else { 1 };
    let ops = if trans == 0 { [0, transposed] } else { [transposed, 0] };
    let update = |x: Matrix, y: Matrix, alpha: Scalar, beta: Scalar| {
        let matrices = [Operand::Memory(x.0), Operand::Memory(y.0), Operand::Memory(c.0)];
        product(precision, ops, [n, n, k], alpha, matrices, [x.1, y.1, c.1], beta)
    };
    let mut calls = vec![update(a, b, alphas[0], beta)];
    if both {
        calls.push(update(b, a, alphas[1], Scalar::Value(1.0)));
    }
    Ok(calls)
}

/// Which update an entry point makes, and what it needs beyond cuBLAS's arguments.
#[derive(Debug, Clone, Copy)]
enum Update {
    /// syrk, syrkx (`both` false) or syr2k: scalars of the element type.
    Symmetric { both: bool },
    /// herk (a real alpha), herkx or her2k (`both`): `beta` real.
    Hermitian { real_alpha: bool, both: bool },
}

/// `update` on handle `h`'s target; a Hermitian one's C then has its diagonal made real.
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
unsafe fn rank_k_update(
    h: usize,
    precision: Precision,
    update: Update,
    [uplo, trans]: [c_int; 2],
    [n, k]: [c_int; 2],
    alpha: *const c_void,
    [a, b]: [Matrix; 2],
    beta: *const c_void,
    c: Matrix,
) -> CuResult<()> {
    let target = handle(h)?.target();
    let (symmetry, alphas, beta, both) = match update {
        Update::Symmetric { both } => (Symmetry::Symmetric, [Scalar::At(alpha); 2], Scalar::At(beta), both),
        Update::Hermitian { real_alpha, both } => {
            let alpha = scalar_parts(target, if real_alpha { precision.real() } else { precision }, Scalar::At(alpha))?;
            let beta = Scalar::Value(scalar_value(target, precision.real(), Scalar::At(beta))?);
            // her2k's second product is by conj(alpha).
            (Symmetry::Hermitian, [Scalar::Parts(alpha), Scalar::Parts([alpha[0], -alpha[1]])], beta, both)
        }
    };
    let calls = rank_k_calls(precision, symmetry, [uplo, trans], [n, k], alphas, a, b, beta, c, both)?;
    calls.into_iter().try_for_each(|call| launch_triangle(target, call, uplo))?;
    match symmetry {
        Symmetry::Hermitian => zero_diagonal_imaginary(target, precision, c, n),
        Symmetry::Symmetric => Ok(()),
    }
}

/// Sets the imaginary part of each of C's `n` diagonal elements to +0, on the target's stream:
/// one byte-memset row a diagonal element, `ldc + 1` elements apart.
pub(super) fn zero_diagonal_imaginary(
    target: Target,
    precision: Precision,
    (c, ldc): Matrix,
    n: c_int,
) -> CuResult<()> {
    if n <= 0 {
        return Ok(());
    }
    let element = precision.bytes();
    let part = element / 2;
    let at = (c + part as u64, Some(target.device));
    memset_2d(at, (ldc as usize + 1) * element, 0, 1, [part, n as usize], target.stream, false)
}

/// Defines an update of one operand (`syrk`, `herk`: B is A), `alpha` of type `$alpha` and
/// `beta` of `$beta`: [`rank_k_update`] in `$precision` making `$update`.
macro_rules! one_operand {
    ($name:ident, $alpha:ty, $beta:ty, $precision:expr, $update:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $alpha,
            a: u64,
            lda: c_int,
            beta: *const $beta,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta, matrices) = (alpha.cast(), beta.cast(), [(a, lda); 2]);
            guard(stringify!($name), || {
                rank_k_update(h, $precision, $update, [uplo, trans], [n, k], alpha, matrices, beta, (c, ldc))
            })
        }
    };
}

/// Defines an update of two operands (`syrkx`, `syr2k`, `herkx`, `her2k`), as
/// [`one_operand`].
macro_rules! two_operands {
    ($name:ident, $alpha:ty, $beta:ty, $precision:expr, $update:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $alpha,
            a: u64,
            lda: c_int,
            b: u64,
            ldb: c_int,
            beta: *const $beta,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta, matrices) = (alpha.cast(), beta.cast(), [(a, lda), (b, ldb)]);
            guard(stringify!($name), || {
                rank_k_update(h, $precision, $update, [uplo, trans], [n, k], alpha, matrices, beta, (c, ldc))
            })
        }
    };
}

/// Defines `cublas<T>syrk`, `cublas<T>syrkx` and `cublas<T>syr2k` for element type `$t` (a
/// complex one as `[f32; 2]` or `[f64; 2]`).
macro_rules! symmetric {
    ($t:ty, $precision:expr, $syrk:ident, $syrkx:ident, $syr2k:ident) => {
        one_operand!($syrk, $t, $t, $precision, Update::Symmetric { both: false });
        two_operands!($syrkx, $t, $t, $precision, Update::Symmetric { both: false });
        two_operands!($syr2k, $t, $t, $precision, Update::Symmetric { both: true });
    };
}

symmetric!(f32, Precision::Single, cublasSsyrk_v2, cublasSsyrkx, cublasSsyr2k_v2);
symmetric!(f64, Precision::Double, cublasDsyrk_v2, cublasDsyrkx, cublasDsyr2k_v2);
symmetric!([f32; 2], Precision::ComplexSingle, cublasCsyrk_v2, cublasCsyrkx, cublasCsyr2k_v2);
symmetric!([f64; 2], Precision::ComplexDouble, cublasZsyrk_v2, cublasZsyrkx, cublasZsyr2k_v2);

/// Defines `cublas<C|Z>herk` (a real alpha), `herkx` and `her2k` for complex element type `$t`
/// of real type `$real` (beta's).
macro_rules! hermitian {
    ($t:ty, $real:ty, $precision:expr, $herk:ident, $herkx:ident, $her2k:ident) => {
        one_operand!($herk, $real, $real, $precision, Update::Hermitian { real_alpha: true, both: false });
        two_operands!($herkx, $t, $real, $precision, Update::Hermitian { real_alpha: false, both: false });
        two_operands!($her2k, $t, $real, $precision, Update::Hermitian { real_alpha: false, both: true });
    };
}

hermitian!([f32; 2], f32, Precision::ComplexSingle, cublasCherk_v2, cublasCherkx, cublasCher2k_v2);
hermitian!([f64; 2], f64, Precision::ComplexDouble, cublasZherk_v2, cublasZherkx, cublasZher2k_v2);

/// `cudaDataType`'s complex `f32` (`CUDA_C_32F`).
const CUDA_C_32F: c_int = 4;

/// Defines `cublasCsyrkEx`, `cublasCherkEx` or their 3m forms (an algorithm's name, not a
/// result's): [`one_operand`]'s update of complex `f32` matrices, `alpha` of type `$alpha` and
/// `beta` of `$beta`. Their other type, `CUDA_C_8I` A, is not served.
macro_rules! one_operand_ex {
    ($name:ident, $alpha:ty, $beta:ty, $update:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $alpha,
            a: u64,
            a_type: c_int,
            lda: c_int,
            beta: *const $beta,
            c: u64,
            c_type: c_int,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta, matrices) = (alpha.cast(), beta.cast(), [(a, lda); 2]);
            guard(stringify!($name), || {
                if [a_type, c_type] != [CUDA_C_32F; 2] {
                    let why = format!("{} on matrices of cudaDataType {:?}", stringify!($name), [a_type, c_type]);
                    return Err(Error::said(code::NOT_SUPPORTED, why));
                }
                let (precision, shape) = (Precision::ComplexSingle, [uplo, trans]);
                rank_k_update(h, precision, $update, shape, [n, k], alpha, matrices, beta, (c, ldc))
            })
        }
    };
}

one_operand_ex!(cublasCsyrkEx, [f32; 2], [f32; 2], Update::Symmetric { both: false });
one_operand_ex!(cublasCsyrk3mEx, [f32; 2], [f32; 2], Update::Symmetric { both: false });
one_operand_ex!(cublasCherkEx, f32, f32, Update::Hermitian { real_alpha: true, both: false });
one_operand_ex!(cublasCherk3mEx, f32, f32, Update::Hermitian { real_alpha: true, both: false });

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
        let n = rank_k_calls(
            Precision::Single,
            Symmetry::Symmetric,
            [0, 0],
            [4, 3],
            [ONE; 2],
            (A, 5),
            (A, 5),
            ONE,
            (C, 6),
            false,
        )
        .unwrap();
        assert_eq!((n.len(), n[0].trans, [n[0].m, n[0].n, n[0].k]), (1, [0, 1], [4, 4, 3]));
        assert_eq!(check(&n[0]).unwrap().footprints(), [2 * 5 + 4, 2 * 5 + 4, 3 * 6 + 4]);
        let t = rank_k_calls(
            Precision::Double,
            Symmetry::Symmetric,
            [1, 1],
            [4, 3],
            [ONE; 2],
            (A, 3),
            (B, 3),
            ONE,
            (C, 6),
            false,
        )
        .unwrap();
        assert_eq!((t[0].trans, at(t[0].matrices[0]), at(t[0].matrices[1])), ([1, 0], A, B));
        assert_eq!(check(&t[0]).unwrap().footprints(), [3 * 3 + 3, 3 * 3 + 3, 3 * 6 + 4]);
        // lda below op(A)'s stored rows; a conjugate transpose of a complex matrix (herk's).
        let short = rank_k_calls(
            Precision::Single,
            Symmetry::Symmetric,
            [0, 0],
            [4, 3],
            [ONE; 2],
            (A, 3),
            (A, 3),
            ONE,
            (C, 6),
            false,
        );
        assert_eq!(short.unwrap_err().code(), code::INVALID_VALUE);
        let hermitian = rank_k_calls(
            Precision::ComplexSingle,
            Symmetry::Symmetric,
            [0, 2],
            [4, 3],
            [ONE; 2],
            (A, 4),
            (A, 4),
            ONE,
            (C, 4),
            false,
        );
        assert_eq!(hermitian.unwrap_err().code(), code::INVALID_VALUE);
        let real_c = rank_k_calls(
            Precision::Single,
            Symmetry::Symmetric,
            [0, 2],
            [4, 3],
            [ONE; 2],
            (A, 3),
            (A, 3),
            ONE,
            (C, 4),
            false,
        );
        assert_eq!(real_c.unwrap()[0].trans, [1, 0], "C is T for a real type");
    }

    #[test]
    fn hermitian_updates_multiply_by_the_conjugate_transpose_and_her2k_by_the_conjugate_alpha() {
        let alphas = [Scalar::Parts([2.0, 3.0]), Scalar::Parts([2.0, -3.0])];
        let h = Symmetry::Hermitian;
        let n = rank_k_calls(Precision::ComplexSingle, h, [0, 0], [4, 3], alphas, (A, 4), (B, 4), ONE, (C, 4), true);
        let n = n.unwrap();
        assert_eq!((n[0].trans, at(n[0].matrices[0]), at(n[0].matrices[1])), ([0, 2], A, B));
        assert_eq!((n[1].trans, at(n[1].matrices[0]), at(n[1].matrices[1])), ([0, 2], B, A));
        assert!(matches!(n[0].alpha, Scalar::Parts([2.0, 3.0])) && matches!(n[1].alpha, Scalar::Parts([2.0, -3.0])));
        let c = rank_k_calls(Precision::ComplexDouble, h, [1, 2], [4, 3], alphas, (A, 3), (A, 3), ONE, (C, 4), false);
        assert_eq!(c.unwrap()[0].trans, [2, 0], "A^H A, A stored k x n");
        // T is the symmetric update's, refused for a Hermitian one, as cuBLAS refuses it.
        let t = rank_k_calls(Precision::ComplexSingle, h, [0, 1], [4, 3], alphas, (A, 4), (A, 4), ONE, (C, 4), false);
        assert_eq!(t.unwrap_err().code(), code::INVALID_VALUE);
    }

    #[test]
    fn syr2k_adds_the_swapped_product_to_the_first() {
        let beta = Scalar::Value(3.0);
        let calls = rank_k_calls(
            Precision::Double,
            Symmetry::Symmetric,
            [1, 0],
            [3, 2],
            [ONE; 2],
            (A, 3),
            (B, 4),
            beta,
            (C, 3),
            true,
        )
        .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!((at(calls[0].matrices[0]), at(calls[0].matrices[1])), (A, B));
        assert!(matches!(calls[0].beta, Scalar::Value(v) if v == 3.0));
        assert_eq!((at(calls[1].matrices[0]), at(calls[1].matrices[1]), calls[1].ld), (B, A, [4, 3, 3]));
        assert!(matches!(calls[1].beta, Scalar::Value(v) if v == 1.0));
    }
}

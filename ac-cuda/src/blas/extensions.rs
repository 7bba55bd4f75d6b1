//! cuBLAS's BLAS-like extensions on matrices, element by element: `cublas<S|D|C|Z>geam`
//! (`C = alpha op(A) + beta op(B)`: sums, scalings and transposes, CuPy's `cupy.cublas.geam`)
//! and `cublas<S|D|C|Z>dgmm` (`C = A diag(x)` or `diag(x) A`). Each is strided batches of the
//! builtin gemm with one inner term (`k = 1`), so they need no kernels of their own:
//!
//! | part | as a batch of gemms (`C = alpha op(A) op(B) + beta C`), one a column or row |
//! |---|---|
//! | geam's `s op(X)` into `C` | `C_j (m x 1) = s op(X)_j [1] + t C_j`, `j < n`: `op(X)_j` is `X`'s column `j` (`N`: from `X + j ldx`), or its row `j` (`1 x m` from `X + j`, ld `ldx`) read (conjugate) transposed |
//! | dgmm, `x` on the right | `C_j (m x 1) = A_j (m x 1) x_j (1 x 1)`, `j < n`: strides `lda`, `incx`, `ldc` |
//! | dgmm, `x` on the left | `C_i (1 x n) = x_i (1 x 1) A_i (1 x n, ld lda)`, `i < m`: strides `incx`, 1, 1 |
//!
//! geam is two such batches: the term of the operand that `C` is (in place, as cuBLAS allows
//! it: the same matrix, leading dimension and no transpose), else `B`'s, into `C` (`t = 0`,
//! `C` not read), then the other added (`t = 1`). A scalar of 0 leaves its matrix unread (the
//! gemm's `alpha = 0`), as cuBLAS's geam does. A negative `incx` (`x` read backwards) is read
//! forwards from a copy ([`super::contiguous`]). A zero product in dgmm comes out `+0` where cuBLAS's may be `-0` (the gemm's sum
//! starts at `+0`, as reference BLAS's does); every value is otherwise the same.

use std::ffi::{c_int, c_longlong};

use super::contiguous::{launch_forwards, Along};
use super::gemm::{launch, product, GemmCall, Operand, Precision, Scalar};
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// A matrix of the program's and its leading dimension.
type Matrix = (u64, c_int);

/// The batch of gemms that sets `C` (`m x n`, leading dimension `ldc`; program memory, or a
/// buffer of the shim's: `tbsv`'s copy of a band) to `scale op(X)`, or adds that to it
/// (`add`), a column of `C` a gemm.
pub(super) fn term(
    precision: Precision,
    trans: c_int,
    [m, n]: [c_int; 2],
    scale: Scalar,
    (x, ldx): (Operand, c_int),
    (c, ldc): (Operand, c_int),
    add: bool,
) -> GemmCall {
    let matrices = [x, Operand::One, c];
    let keep = Scalar::Value(if add { 1.0 } else { 0.0 });
    let stride_x = if trans == 0 { ldx } else { 1 };
    let stride = [c_longlong::from(stride_x), 0, c_longlong::from(ldc)];
    GemmCall { stride, batch: n, ..product(precision, [trans, 0], [m, 1, 1], scale, matrices, [ldx, 1, ldc], keep) }
}

/// The gemms of `C = alpha op(A) + beta op(B)`, `C` being `m x n`, in the order they run
/// (none: it computes nothing), checked as cuBLAS checks the call.
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
pub(super) fn geam_calls(
    precision: Precision,
    trans: [c_int; 2],
    [m, n]: [c_int; 2],
    alpha: Scalar,
    a: Matrix,
    beta: Scalar,
    b: Matrix,
    c: Matrix,
) -> CuResult<Vec<GemmCall>> {
    let stored_rows = |t: c_int| if t == 0 { m } else { n };
    let wrong = trans.iter().any(|t| !(0..=2).contains(t))
        || m < 0
        || n < 0
        || a.1 < stored_rows(trans[0]).max(1)
        || b.1 < stored_rows(trans[1]).max(1)
        || c.1 < m.max(1);
    if wrong {
        let why = format!("geam: trans {trans:?}, m {m}, n {n}, lda {}, ldb {}, ldc {}", a.1, b.1, c.1);
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    // In place, C is A or B as it is: the same leading dimension, not transposed.
    let is_c = |x: Matrix, t: c_int, what: &str| -> CuResult<bool> {
        if x.0 != c.0 {
            return Ok(false);
        }
        if t != 0 || x.1 != c.1 {
            let why = format!(
                "geam in place: C is {what} but ld{} {} (ldc {}), operation {t}",
                what.to_lowercase(),
                x.1,
                c.1
            );
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        Ok(true)
    };
    let (c_is_a, c_is_b) = (is_c(a, trans[0], "A")?, is_c(b, trans[1], "B")?);
    if c_is_a && c_is_b {
        return Err(Error::said(code::NOT_SUPPORTED, "geam with C, A and B the same matrix"));
    }
    if m == 0 || n == 0 {
        return Ok(Vec::new());
    }
    let memory = |(x, ld): Matrix| (Operand::Memory(x), ld);
    let a_term = |add| term(precision, trans[0], [m, n], alpha, memory(a), memory(c), add);
    let b_term = |add| term(precision, trans[1], [m, n], beta, memory(b), memory(c), add);
    Ok(if c_is_a { vec![a_term(false), b_term(true)] } else { vec![b_term(false), a_term(true)] })
}

/// The gemm batch of `C = A diag(x)` (`side` 1, `CUBLAS_SIDE_RIGHT`) or `diag(x) A` (`side` 0),
/// `A` and `C` being `m x n` (none: it computes nothing), checked as cuBLAS checks the call.
fn dgmm_call(
    precision: Precision,
    side: c_int,
    [m, n]: [c_int; 2],
    a: Matrix,
    (x, incx): (u64, c_int),
    c: Matrix,
) -> CuResult<Option<GemmCall>> {
    if !(0..=1).contains(&side) || m < 0 || n < 0 || a.1 < m.max(1) || c.1 < m.max(1) || (a.0 == c.0 && a.1 != c.1) {
        let why = format!("dgmm: side {side}, m {m}, n {n}, lda {}, ldc {} (in place, lda must be ldc)", a.1, c.1);
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if m == 0 || n == 0 {
        return Ok(None);
    }
    let (one, zero) = (Scalar::Value(1.0), Scalar::Value(0.0));
    let (incx, a_ld, c_ld) = (c_longlong::from(incx), c_longlong::from(a.1), c_longlong::from(c.1));
    let call = if side == 1 {
        let matrices = [Operand::Memory(a.0), Operand::Memory(x), Operand::Memory(c.0)];
        GemmCall {
            stride: [a_ld, incx, c_ld],
            batch: n,
            ..product(precision, [0; 2], [m, 1, 1], one, matrices, [a.1, 1, c.1], zero)
        }
    } else {
        let matrices = [Operand::Memory(x), Operand::Memory(a.0), Operand::Memory(c.0)];
        GemmCall {
            stride: [incx, 1, 1],
            batch: m,
            ..product(precision, [0; 2], [1, n, 1], one, matrices, [1, a.1, c.1], zero)
        }
    };
    Ok(Some(call))
}

/// Defines `cublas<T>geam` and `cublas<T>dgmm` for element type `$t` (a complex one as
/// `[f32; 2]` or `[f64; 2]`).
macro_rules! typed {
    ($t:ty, $precision:expr, $geam:ident, $dgmm:ident) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $geam(
            h: usize,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            beta: *const $t,
            b: u64,
            ldb: c_int,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()));
            guard(stringify!($geam), || {
                let target = handle(h)?.target();
                let calls =
                    geam_calls($precision, [transa, transb], [m, n], alpha, (a, lda), beta, (b, ldb), (c, ldc))?;
                calls.into_iter().try_for_each(|call| launch(target, call))
            })
        }

        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $dgmm(
            h: usize,
            side: c_int,
            m: c_int,
            n: c_int,
            a: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            guard(stringify!($dgmm), || {
                let target = handle(h)?.target();
                let x = Along::read($precision, if side == 1 { n } else { m }, (x, incx));
                launch_forwards(target, "dgmm", [x], |[x]| dgmm_call($precision, side, [m, n], (a, lda), x, (c, ldc)))
            })
        }
    };
}

typed!(f32, Precision::Single, cublasSgeam, cublasSdgmm);
typed!(f64, Precision::Double, cublasDgeam, cublasDdgmm);
typed!([f32; 2], Precision::ComplexSingle, cublasCgeam, cublasCdgmm);
typed!([f64; 2], Precision::ComplexDouble, cublasZgeam, cublasZdgmm);

#[cfg(test)]
mod tests {
    use super::super::gemm::at;
    use super::super::gemm::check;
    use super::*;

    const A: u64 = 0x10_0000;
    const B: u64 = 0x20_0000;
    const C: u64 = 0x30_0000;
    const X: u64 = 0x40_0000;
    const ALPHA: Scalar = Scalar::Value(2.0);
    const BETA: Scalar = Scalar::Value(3.0);

    /// The elements each matrix of `call` spans (A, B, C), and its operands' addresses.
    fn spans(call: &GemmCall) -> [u64; 3] {
        check(call).expect("a call the gemm takes").footprints()
    }

    #[test]
    fn geam_reads_each_operand_over_its_stored_shape_and_writes_c_once_then_adds() {
        // C 3 x 4 (ldc 5); A stored 3 x 4 (lda 3), B stored transposed, 4 x 3 (ldb 6).
        let calls = geam_calls(Precision::Single, [0, 1], [3, 4], ALPHA, (A, 3), BETA, (B, 6), (C, 5)).unwrap();
        let [first, second] = [calls[0], calls[1]];
        // B's term first, into C unread; then A's, added.
        assert_eq!((at(first.matrices[0]), first.trans, first.batch), (B, [1, 0], 4));
        assert!(matches!(first.beta, Scalar::Value(v) if v == 0.0));
        assert_eq!(spans(&first), [(4 - 1) + (3 - 1) * 6 + 1, 1, (4 - 1) * 5 + 3]);
        assert_eq!((at(second.matrices[0]), second.trans), (A, [0, 0]));
        assert!(matches!(second.beta, Scalar::Value(v) if v == 1.0));
        assert_eq!(spans(&second), [(4 - 1) * 3 + 3, 1, (4 - 1) * 5 + 3]);
    }

    #[test]
    fn geam_in_place_runs_cs_own_term_first_and_refuses_what_cublas_refuses() {
        let c_is_a = geam_calls(Precision::Double, [0, 2], [3, 3], ALPHA, (C, 4), BETA, (B, 3), (C, 4)).unwrap();
        assert_eq!(at(c_is_a[0].matrices[0]), C, "C = alpha C first, then beta B^H added");
        assert_eq!(at(c_is_a[1].matrices[0]), B);
        // In place with a transpose, or another leading dimension: cuBLAS's INVALID_VALUE.
        let transposed = geam_calls(Precision::Double, [1, 0], [3, 3], ALPHA, (C, 4), BETA, (B, 3), (C, 4));
        assert_eq!(transposed.unwrap_err().code(), code::INVALID_VALUE);
        let other_ld = geam_calls(Precision::Double, [0, 0], [3, 3], ALPHA, (A, 3), BETA, (C, 5), (C, 4));
        assert_eq!(other_ld.unwrap_err().code(), code::INVALID_VALUE);
        // lda below op(A)'s stored rows (T: n).
        let short = geam_calls(Precision::Double, [1, 0], [2, 5], ALPHA, (A, 4), BETA, (B, 2), (C, 2));
        assert_eq!(short.unwrap_err().code(), code::INVALID_VALUE);
        assert!(geam_calls(Precision::Double, [0, 0], [0, 5], ALPHA, (A, 1), BETA, (B, 1), (C, 1)).unwrap().is_empty());
    }

    #[test]
    fn dgmm_scales_columns_or_rows_one_gemm_each() {
        // x on the right: a column of A per batch, x's element j its one factor.
        let right = dgmm_call(Precision::Single, 1, [3, 4], (A, 5), (X, 2), (C, 3)).unwrap().unwrap();
        assert_eq!((right.batch, right.stride, right.m, right.n), (4, [5, 2, 3], 3, 1));
        assert_eq!(spans(&right), [3 * 5 + 3, 3 * 2 + 1, 3 * 3 + 3]);
        // x on the left: a row of A per batch, interleaved in C.
        let left = dgmm_call(Precision::Single, 0, [3, 4], (A, 5), (X, 2), (C, 3)).unwrap().unwrap();
        assert_eq!((at(left.matrices[0]), left.batch, left.stride, left.m, left.n), (X, 3, [2, 1, 1], 1, 4));
        assert_eq!(spans(&left), [2 * 2 + 1, 2 + 3 * 5 + 1, 2 + 3 * 3 + 1]);
        // In place with another ld is refused.
        let in_place = dgmm_call(Precision::Single, 0, [3, 4], (C, 5), (X, 1), (C, 3));
        assert_eq!(in_place.unwrap_err().code(), code::INVALID_VALUE);
    }
}

//! cuBLAS's symmetric band matrix-vector product, `cublas<S|D>sbmv` (CuPy's
//! `cupy.cublas.sbmv`): `y = alpha A x + beta y`, `A` `n x n` symmetric with `k` diagonals on
//! each side of the main one, one triangle stored in BLAS's band layout (`uplo` 1, upper:
//! `A[i, j]` at `AB[k + i - j + j lda]`; 0, lower: at `AB[i - j + j lda]`).
//!
//! Each stored diagonal is a strided vector, so the product needs no kernel of its own: `y =
//! beta y` (a gemm of no terms), then for each diagonal `d` element-wise products added into `y`,
//! as strided batches of `1 x 1` gemms (`C_b = alpha A_b x_b + C_b`): the diagonal's elements
//! times `x`'s elements of their columns into `y`'s of their rows, and, off the main diagonal,
//! the same elements times `x`'s of their rows into `y`'s of their columns (the mirrored
//! triangle). `2k + 2` launches; each term rounded as it is added (exact on small integers, in
//! the last place otherwise, against cuBLAS's order). Negative increments are not served.

use std::ffi::{c_int, c_longlong};

use super::gemm::{launch, product, GemmCall, Operand, Precision, Scalar};
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// A strided vector of the program's: its address and increment.
type Vector = (u64, c_int);

/// The gemms of `y = alpha A x + beta y`, `A` symmetric band of order `n` with `k` diagonals on
/// each side, stored as triangle `uplo` at `(ab, lda)`, in the order they run (none: it
/// computes nothing), checked as cuBLAS checks the call.
#[allow(clippy::too_many_arguments)] // cuBLAS's arguments
fn sbmv_calls(
    precision: Precision,
    uplo: c_int,
    [n, k]: [c_int; 2],
    alpha: Scalar,
    (ab, lda): (u64, c_int),
    (x, incx): Vector,
    beta: Scalar,
    (y, incy): Vector,
) -> CuResult<Vec<GemmCall>> {
    if !(0..=1).contains(&uplo) || n < 0 || k < 0 || lda < k + 1 || incx == 0 || incy == 0 {
        let why = format!("sbmv: uplo {uplo}, n {n}, k {k}, lda {lda}, incx {incx}, incy {incy}");
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if incx < 0 || incy < 0 {
        return Err(Error::said(code::NOT_SUPPORTED, format!("sbmv: increments {incx}, {incy}: only positive ones")));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let bytes = precision.bytes() as u64;
    let at = |base: u64, elements: c_int| base + elements as u64 * bytes;
    // y = beta y: a product of no terms.
    let scale = [Operand::One, Operand::One, Operand::Memory(y)];
    let mut calls = vec![product(precision, [0; 2], [1, n, 0], Scalar::Value(0.0), scale, [1, 1, incy], beta)];
    // y[rows] += alpha A[row, col] x[cols], over `count` elements from the given offsets.
    let products = |element: u64, x_from: c_int, y_from: c_int, count: c_int| GemmCall {
        stride: [c_longlong::from(lda), c_longlong::from(incx), c_longlong::from(incy)],
        batch: count,
        ..product(
            precision,
            [0; 2],
            [1, 1, 1],
            alpha,
            [Operand::Memory(element), Operand::Memory(at(x, x_from)), Operand::Memory(at(y, y_from))],
            [1; 3],
            Scalar::Value(1.0),
        )
    };
    for d in 0..=k.min(n - 1) {
        let count = n - d;
        // Diagonal d's first stored element: A[0, d] (upper) or A[d, 0] (lower).
        let (element, rows_from, cols_from) =
            if uplo == 1 { (at(ab, k - d + d * lda), 0, d) } else { (at(ab, d), d, 0) };
        calls.push(products(element, cols_from * incx, rows_from * incy, count));
        if d > 0 {
            calls.push(products(element, rows_from * incx, cols_from * incy, count));
        }
    }
    Ok(calls)
}

/// Defines `cublas<T>sbmv` for element type `$t`.
macro_rules! typed {
    ($name:ident, $t:ty, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()));
            guard(stringify!($name), || {
                let target = handle(h)?.target();
                let calls = sbmv_calls($precision, uplo, [n, k], alpha, (a, lda), (x, incx), beta, (y, incy))?;
                calls.into_iter().try_for_each(|call| launch(target, call))
            })
        }
    };
}

typed!(cublasSsbmv_v2, f32, Precision::Single);
typed!(cublasDsbmv_v2, f64, Precision::Double);

#[cfg(test)]
mod tests {
    use super::super::gemm::at;
    use super::super::gemm::check;
    use super::*;

    const AB: u64 = 0x10_0000;
    const X: u64 = 0x20_0000;
    const Y: u64 = 0x30_0000;
    const ONE: Scalar = Scalar::Value(1.0);

    #[test]
    fn each_diagonal_is_added_to_its_rows_and_mirrored_to_its_columns() {
        // n 5, k 2, lda 4 (one spare row), f64 (8 bytes), x every 2nd element, y every 3rd.
        let upper = sbmv_calls(Precision::Double, 1, [5, 2], ONE, (AB, 4), (X, 2), ONE, (Y, 3)).unwrap();
        // beta y, then the main diagonal, then two launches for each of 2 diagonals.
        assert_eq!(upper.len(), 1 + 1 + 2 * 2);
        // Upper diagonal 1: A[j-1, j] at AB[(2 - 1) + j * 4], j = 1..5: from AB[1 + 4].
        let (rows, mirrored) = (upper[2], upper[3]);
        assert_eq!((at(rows.matrices[0]), rows.batch, rows.stride), (AB + 5 * 8, 4, [4, 2, 3]));
        // Its rows 0..4 of y get x's columns 1..5; the mirror the other way round.
        assert_eq!((at(rows.matrices[1]), at(rows.matrices[2])), (X + 2 * 8, Y));
        assert_eq!((at(mirrored.matrices[1]), at(mirrored.matrices[2])), (X, Y + 3 * 8));
        assert_eq!(check(&rows).unwrap().footprints(), [3 * 4 + 1, 3 * 2 + 1, 3 * 3 + 1]);
        // Lower diagonal 2: A[j+2, j] at AB[2 + j * 4]: rows 2..5 of y, columns 0..3 of x.
        let lower = sbmv_calls(Precision::Double, 0, [5, 2], ONE, (AB, 4), (X, 2), ONE, (Y, 3)).unwrap();
        let (rows, mirrored) = (lower[4], lower[5]);
        assert_eq!((at(rows.matrices[0]), at(rows.matrices[1]), at(rows.matrices[2])), (AB + 2 * 8, X, Y + 6 * 8));
        assert_eq!((at(mirrored.matrices[1]), at(mirrored.matrices[2]), mirrored.batch), (X + 4 * 8, Y, 3));
    }

    #[test]
    fn what_cublas_refuses_is_refused_and_more_diagonals_than_rows_are_not_read() {
        let call = |k, lda, incx| sbmv_calls(Precision::Single, 0, [3, k], ONE, (AB, lda), (X, incx), ONE, (Y, 1));
        assert_eq!(call(2, 2, 1).unwrap_err().code(), code::INVALID_VALUE, "lda below k + 1");
        assert_eq!(call(1, 2, 0).unwrap_err().code(), code::INVALID_VALUE, "incx 0");
        assert_eq!(call(1, 2, -1).unwrap_err().code(), code::NOT_SUPPORTED, "x backwards");
        // k 5 on a 3 x 3 matrix: diagonals 0, 1, 2 only.
        assert_eq!(call(5, 6, 1).unwrap().len(), 1 + 1 + 2 * 2);
    }
}

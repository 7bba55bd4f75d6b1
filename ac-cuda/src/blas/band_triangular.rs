//! cuBLAS's triangular band routines' entry points, `cublas<S|D|C|Z>tbmv` (`x = op(A) x`, by
//! diagonals: [`super::band`]) and `cublas<S|D|C|Z>tbsv`, and the solve: `op(A) x = b` solved
//! over `b`, `A` `n x n` triangular with `k` diagonals besides the main one, in BLAS's band
//! layout.
//!
//! Band storage is a dense matrix of leading dimension `lda - 1` wherever it holds the band
//! (`A[i, j]` at `AB[ku + i - j + j lda] = AB[ku + i + j (lda - 1)]`), so blocks of `s`
//! unknowns can be solved with the dense routines: each diagonal block (a triangle inside the
//! band) with trsv, and the products between neighbouring blocks with gemv. Those products read
//! up to `2s - 1` diagonals from the main one, so `A` is first copied, on the handle's stream,
//! into a buffer of the shim's whose storage has room for `2s` diagonals on `A`'s side, those
//! beyond `k` zeros (a new buffer's, `2s n` elements, `s` = [`BLOCK`] or `k` if more). Then, block after block
//! in the order the solve runs (from the last for an upper `A` and `op` N or a lower one
//! transposed, from the first otherwise): `x_p -= op(A_pq) x_q` with the block `q` solved just
//! before (gemv, `alpha` -1), and `op(A_pp) x_p = b_p` (trsv): `2n / s` launches, none of them
//! waiting.
//!
//! The buffer is freed after the queued work, before a captured graph would run, so tbsv is
//! refused while its stream captures. `op` C on a strided `x` (complex), or an `x` read backwards
//! (a negative increment), solves a contiguous copy of it, gathered once and scattered back
//! ([`super::contiguous`]).

use std::ffi::c_int;

use ac_frontend::DeviceBuffer;

use super::band::{tbmv, triangular_codes, Band};
use super::contiguous::{in_place, read_through_copy};
use super::extensions::term;
use super::gemm::{launch, Operand, Precision, Scalar};
use super::structured::scratch;
use super::triangle_vectors::trsv;
use super::vectors::gemv_call;
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};
use crate::graph;

/// Unknowns a block solves at least (fewer launches, for a wider buffer).
const BLOCK: c_int = 32;

/// A triangular band copied into a buffer of the shim's with room for `width` diagonals on its
/// side (zeros beyond the band), read as a dense matrix of leading dimension `width - 1`.
struct Padded {
    buffer: DeviceBuffer<u8>,
    upper: bool,
    width: c_int,
    bytes: u64,
}

impl Padded {
    /// Copies the `n x n` triangle `band` (`upper` or lower; `n > 0`, no diagonal beyond the
    /// matrix's among `band`'s) on the target's stream: the band's rows into the buffer's, the
    /// main diagonal in row `width - 1` (upper) or 0 (lower). The other rows are zeros: the
    /// backend clears new memory before a session sees it, as the SDK promises.
    unsafe fn new(target: Target, precision: Precision, band: &Band, upper: bool, width: c_int) -> CuResult<Padded> {
        let (k, n) = (band.kl.max(band.ku), band.cols);
        let bytes = precision.bytes() as u64;
        let len = (width as u64).checked_mul(n as u64).and_then(|elements| elements.checked_mul(bytes));
        let len =
            len.ok_or_else(|| Error::said(code::OUT_OF_MEMORY, format!("tbsv: a copy of {width} x {n} elements")))?;
        let buffer = scratch(target, len)?;
        let padded = Padded { buffer, upper, width, bytes };
        // The band's diagonals are AB's rows 0..=k: an upper band's main one last, a lower's first.
        let from_row = if upper { width - 1 - k } else { 0 };
        let into = (padded.buffer_at(from_row as u64), width);
        launch(
            target,
            term(precision, 0, [k + 1, n], Scalar::Value(1.0), (Operand::Memory(band.ab), band.lda), into, false),
        )?;
        Ok(padded)
    }

    /// The buffer `elements` elements from its start.
    fn buffer_at(&self, elements: u64) -> Operand {
        Operand::Slot(self.buffer.at((elements * self.bytes) as usize))
    }

    /// `A[i, j]` (within `width` diagonals of the main one, on `A`'s side) as the first element
    /// of a dense matrix of leading dimension [`Padded::ld`].
    fn at(&self, i: c_int, j: c_int) -> Operand {
        self.buffer_at(dense_index(self.upper, self.width, i, j))
    }

    /// The dense view's leading dimension.
    fn ld(&self) -> c_int {
        self.width - 1
    }
}

/// Where `A[i, j]` lies in a padded copy of `width` diagonals: `A[i, j]` at
/// `[width - 1 + i - j + j width]` (upper: the main diagonal last) or `[i - j + j width]`
/// (lower), that is at `(i, j)` of a matrix of leading dimension `width - 1`.
fn dense_index(upper: bool, width: c_int, i: c_int, j: c_int) -> u64 {
    let shift = if upper { width as u64 - 1 } else { 0 };
    shift + i as u64 + j as u64 * (width as u64 - 1)
}

/// One step of a blocked solve: the block of `len` unknowns from `start`, and the block solved
/// before it (`(start, len)`), whose product is taken out first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    start: c_int,
    len: c_int,
    after: Option<(c_int, c_int)>,
}

/// The steps of a solve of `n` unknowns in blocks of `s`, from the last block (`backward`) or
/// the first.
fn steps(n: c_int, s: c_int, backward: bool) -> Vec<Step> {
    let mut blocks: Vec<(c_int, c_int)> = (0..n).step_by(s as usize).map(|start| (start, s.min(n - start))).collect();
    if backward {
        blocks.reverse();
    }
    let mut after = None;
    let mut steps = Vec::with_capacity(blocks.len());
    for (start, len) in blocks {
        steps.push(Step { start, len, after });
        after = Some((start, len));
    }
    steps
}

/// `tbsv` on `target`: `op(A) x = b` over `b` (`x`), `A` the `n x n` triangular band of `k`
/// diagonals besides the main one (`diag` 1: its diagonal ones, not read).
unsafe fn tbsv(
    target: Target,
    precision: Precision,
    codes: [c_int; 3],
    [n, k]: [c_int; 2],
    a: (u64, c_int),
    (x, incx): (u64, c_int),
) -> CuResult<()> {
    triangular_codes("tbsv", codes)?;
    let [uplo, trans, _] = codes;
    // As tbmv's: the band's own checks.
    Band::triangle(uplo, n, k, a).check("tbsv", &[incx])?;
    if n == 0 {
        return Ok(());
    }
    graph::refuse_if_capturing(target.stream, "tbsv")?;
    if read_through_copy(precision, trans, incx) {
        // Each block's solve would conjugate a strided x, or read it backwards: the whole x
        // through one forward copy.
        return in_place(target, precision, "tbsv", n, (x, incx), |x| tbsv(target, precision, codes, [n, k], a, x));
    }
    let (upper, bytes) = (uplo == 1, precision.bytes() as u64);
    // Diagonals beyond the matrix's hold nothing that is read: not copied. An upper band's
    // diagonal d is AB's row k - d: those kept are its last rows.
    let kept = k.min(n - 1);
    let (ab, lda) = a;
    let ab = if upper { ab + (k - kept) as u64 * bytes } else { ab };
    let s = kept.max(BLOCK).min(n);
    let width =
        s.checked_mul(2).ok_or_else(|| Error::said(code::OUT_OF_MEMORY, format!("tbsv: a copy {s} x 2 rows wide")))?;
    let padded = Padded::new(target, precision, &Band::triangle(uplo, n, kept, (ab, lda)), upper, width)?;
    let x_at = |start: c_int| x + start as u64 * incx as u64 * bytes;
    let (minus, one) = (Scalar::Value(-1.0), Scalar::Value(1.0));
    for step in steps(n, s, upper == (trans == 0)) {
        if let Some((q, q_len)) = step.after {
            // x_p -= op(A_pq) x_q: A's rows are p's for N, q's transposed.
            let (i, j, rows, cols) =
                if trans == 0 { (step.start, q, step.len, q_len) } else { (q, step.start, q_len, step.len) };
            let a_pq = (padded.at(i, j), padded.ld());
            if let Some(call) =
                gemv_call(precision, trans, [rows, cols], minus, a_pq, (x_at(q), incx), one, (x_at(step.start), incx))?
            {
                launch(target, call)?;
            }
        }
        let a_pp = (padded.at(step.start, step.start), padded.ld());
        trsv(target, precision, codes, step.len, a_pp, (x_at(step.start), incx))?;
    }
    Ok(())
}

/// Defines `cublas<T>tbmv` or `cublas<T>tbsv` for `$precision`: `$routine` on the handle's
/// target.
macro_rules! triangular_entry {
    ($name:ident, $precision:expr, $routine:ident) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            n: c_int,
            k: c_int,
            ab: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
        ) -> u32 {
            let (codes, a, x) = ([uplo, trans, diag], (ab, lda), (x, incx));
            guard(stringify!($name), || $routine(handle(h)?.target(), $precision, codes, [n, k], a, x))
        }
    };
}

triangular_entry!(cublasStbmv_v2, Precision::Single, tbmv);
triangular_entry!(cublasDtbmv_v2, Precision::Double, tbmv);
triangular_entry!(cublasCtbmv_v2, Precision::ComplexSingle, tbmv);
triangular_entry!(cublasZtbmv_v2, Precision::ComplexDouble, tbmv);
triangular_entry!(cublasStbsv_v2, Precision::Single, tbsv);
triangular_entry!(cublasDtbsv_v2, Precision::Double, tbsv);
triangular_entry!(cublasCtbsv_v2, Precision::ComplexSingle, tbsv);
triangular_entry!(cublasZtbsv_v2, Precision::ComplexDouble, tbsv);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_run_in_the_solves_order_each_after_its_neighbour() {
        // 70 unknowns in blocks of 32: 0..32, 32..64, 64..70.
        let forward = steps(70, 32, false);
        let starts: Vec<_> = forward.iter().map(|s| (s.start, s.len, s.after)).collect();
        assert_eq!(starts, [(0, 32, None), (32, 32, Some((0, 32))), (64, 6, Some((32, 32)))]);
        let backward = steps(70, 32, true);
        let starts: Vec<_> = backward.iter().map(|s| (s.start, s.len, s.after)).collect();
        assert_eq!(starts, [(64, 6, None), (32, 32, Some((64, 6))), (0, 32, Some((32, 32)))]);
        assert_eq!(steps(5, 32, true), [Step { start: 0, len: 5, after: None }], "one block");
    }

    #[test]
    fn a_padded_band_is_a_dense_matrix_of_one_less_leading_dimension() {
        // width 4: upper A[i, j] at [3 + i - j + 4 j], lower at [i - j + 4 j].
        assert_eq!(dense_index(true, 4, 0, 0), 3);
        assert_eq!(dense_index(true, 4, 1, 1), 3 + 4);
        assert_eq!(dense_index(true, 4, 0, 3), 4 * 3, "3 diagonals up: row 0 of column 3");
        assert_eq!(dense_index(false, 4, 2, 2), 2 * 4);
        assert_eq!(dense_index(false, 4, 5, 2), 3 + 2 * 4, "3 diagonals down: the column's last row");
        // Moving down a column is one element; along a row, width - 1.
        assert_eq!(dense_index(true, 4, 2, 5) - dense_index(true, 4, 1, 5), 1);
        assert_eq!(dense_index(false, 4, 6, 5) - dense_index(false, 4, 6, 4), 3);
    }
}

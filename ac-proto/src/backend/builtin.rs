//! Rules of the builtin kernels' contract that a caller (the CUDA shim's cuBLAS) checks before it
//! sends a launch and the backend checks again before it runs one: one definition, so that the
//! two cannot disagree on what a launch touches.

/// Whether the `batch` results of a gemm (`m x n` each, leading dimension `ldc`, `stride_c`
/// elements apart) lie apart: one after another (`stride_c` at least one result's span), or
/// interleaved within each column (`stride_c` at least `m`, every batch's rows inside `ldc`,
/// as attention heads side by side). Overlapping results are undefined in cuBLAS and refused
/// here, so that a launch's work stays bounded by its buffers.
pub fn gemm_batches_apart(m: u64, n: u64, ldc: u64, stride_c: u64, batch: u64) -> bool {
    if batch <= 1 || m == 0 || n == 0 {
        return true;
    }
    let one_after_another = stride_c >= (n - 1).saturating_mul(ldc).saturating_add(m);
    let interleaved = stride_c >= m && (batch - 1).saturating_mul(stride_c).saturating_add(m) <= ldc;
    one_after_another || interleaved
}

/// A gemm's shape (`blas_sgemm`, `blas_dgemm`): `C_b = alpha op(A_b) op(B_b) + beta C_b` for each
/// `b < batch`, column-major as BLAS is, element `(i, j)` of `X` at `X[i + j * ldx]`, `X_b` at
/// `X + b * stride_x` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// `op(A)` is `A`'s transpose.
    pub trans_a: bool,
    /// `op(B)` is `B`'s transpose.
    pub trans_b: bool,
    /// Rows of `op(A)` and `C`.
    pub m: u64,
    /// Columns of `op(B)` and `C`.
    pub n: u64,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: u64,
    /// Leading dimensions of `A`, `B`, `C`.
    pub ld: [u64; 3],
    /// Elements from one batch's matrix to the next's, for `A`, `B`, `C`.
    pub stride: [u64; 3],
    /// Products computed.
    pub batch: u64,
}

impl Gemm {
    /// Why BLAS refuses this shape (a leading dimension below its matrix's rows), or this
    /// contract does (batches' results that overlap, [`gemm_batches_apart`]); `None` if neither.
    pub fn refusal(&self) -> Option<String> {
        for (x, ((rows, _), ld)) in ["A", "B", "C"].iter().zip(self.stored().into_iter().zip(self.ld)) {
            if ld < rows.max(1) {
                return Some(format!("ld{} = {ld} is below {x}'s {rows} rows", x.to_lowercase()));
            }
        }
        if !gemm_batches_apart(self.m, self.n, self.ld[2], self.stride[2], self.batch) {
            return Some(format!("stride_c {} makes the batches' results overlap", self.stride[2]));
        }
        None
    }

    /// Rows and columns of `A`, `B` and `C` as they are stored.
    pub fn stored(&self) -> [(u64, u64); 3] {
        let a = if self.trans_a { (self.k, self.m) } else { (self.m, self.k) };
        let b = if self.trans_b { (self.n, self.k) } else { (self.k, self.n) };
        [a, b, (self.m, self.n)]
    }

    /// Elements of `A`, `B` and `C` the launch touches from each pointer: up to the last
    /// batch's last column's last row; none when it computes nothing.
    pub fn footprints(&self) -> [u64; 3] {
        let mut out = [0; 3];
        for (x, (rows, cols)) in self.stored().into_iter().enumerate() {
            if rows == 0 || cols == 0 || self.is_empty() {
                continue;
            }
            out[x] = (self.batch - 1)
                .saturating_mul(self.stride[x])
                .saturating_add((cols - 1).saturating_mul(self.ld[x]))
                .saturating_add(rows);
        }
        out
    }

    /// Multiply-adds, plus the elements it reads or writes: how a device judges whether the
    /// launch is quick.
    pub fn work(&self) -> u64 {
        let products = self.m.saturating_mul(self.n).saturating_mul(self.k).saturating_mul(self.batch);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }

    /// Whether the launch computes nothing (no element of C): then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Where element `(i, j)` of batch `b`'s `C` lies, from `C`'s pointer.
    pub fn c_index(&self, b: u64, i: u64, j: u64) -> usize {
        (b * self.stride[2] + i + j * self.ld[2]) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_apart_one_after_another_or_side_by_side() {
        // 4x3 results, ldc 6: one spans 2 * 6 + 4 = 16 elements.
        assert!(gemm_batches_apart(4, 3, 6, 16, 2));
        assert!(!gemm_batches_apart(4, 3, 6, 15, 2));
        // Side by side in each column: 3 batches of 2 rows in ldc 6, 2 apart.
        assert!(gemm_batches_apart(2, 3, 6, 2, 3));
        assert!(!gemm_batches_apart(2, 3, 6, 2, 4), "the fourth batch's rows run past ldc");
        assert!(!gemm_batches_apart(2, 3, 6, 1, 3), "rows of two batches overlap");
        // One batch, or nothing computed: any stride.
        assert!(gemm_batches_apart(4, 3, 6, 0, 1) && gemm_batches_apart(0, 3, 6, 0, 9));
    }

    fn gemm(trans: [bool; 2], [m, n, k]: [u64; 3], ld: [u64; 3], stride: [u64; 3], batch: u64) -> Gemm {
        Gemm { trans_a: trans[0], trans_b: trans[1], m, n, k, ld, stride, batch }
    }

    #[test]
    fn leading_dimensions_are_checked_against_the_stored_rows() {
        assert_eq!(gemm([false; 2], [4, 3, 2], [4, 2, 4], [0; 3], 1).refusal(), None);
        // A transposed is stored k x m: lda 2 suffices, 1 does not.
        assert_eq!(gemm([true, false], [4, 3, 2], [2, 2, 4], [0; 3], 1).refusal(), None);
        let lda = gemm([true, false], [4, 3, 2], [1, 2, 4], [0; 3], 1).refusal();
        assert_eq!(lda.as_deref(), Some("lda = 1 is below A's 2 rows"));
        let ldc = gemm([false; 2], [4, 3, 2], [4, 2, 3], [0; 3], 1).refusal();
        assert_eq!(ldc.as_deref(), Some("ldc = 3 is below C's 4 rows"));
        // An empty matrix still needs a leading dimension of 1.
        assert!(gemm([false; 2], [0, 3, 2], [0, 2, 1], [0; 3], 1).refusal().is_some());
    }

    #[test]
    fn overlapping_results_are_refused() {
        let overlap = gemm([false; 2], [4, 3, 2], [4, 2, 6], [8, 6, 15], 2).refusal();
        assert!(overlap.unwrap().contains("results overlap"));
        assert_eq!(gemm([false; 2], [4, 3, 2], [4, 2, 6], [8, 6, 16], 2).refusal(), None);
    }

    #[test]
    fn batches_and_leading_dimensions_set_the_footprint() {
        let g = gemm([false, true], [4, 3, 2], [5, 3, 6], [100, 7, 30], 3);
        // A: 4x2 stored, ld 5: 2*100 + 1*5 + 4; B^T stored 3x2, ld 3: 2*7 + 1*3 + 3; C 4x3, ld 6.
        assert_eq!(g.footprints(), [209, 20, 2 * 30 + 2 * 6 + 4]);
        assert_eq!(g.work(), 4 * 3 * 2 * 3 + 209 + 20 + 76);
        assert_eq!(gemm([false; 2], [0, 3, 2], [1, 2, 1], [0; 3], 1).footprints(), [0; 3]);
        // k = 0: A and B are read nowhere, C is.
        assert_eq!(gemm([false; 2], [2, 2, 0], [2, 1, 2], [9, 9, 4], 2).footprints(), [0, 0, 8]);
        // Saturating, not wrapping: a shape beyond memory spans beyond any buffer.
        assert_eq!(gemm([false; 2], [1, 1, 1], [1; 3], [u64::MAX; 3], 3).footprints(), [u64::MAX; 3]);
    }
}

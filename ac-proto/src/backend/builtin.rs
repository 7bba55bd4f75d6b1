//! Rules of the builtin kernels' contract that a caller (the CUDA shim's cuBLAS) checks before it
//! sends a launch and the backend checks again before it runs one.

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
}

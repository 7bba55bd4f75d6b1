//! LU factorization with partial pivoting and the solves and inverses built on it
//! (`blas_<s|d|c|z>getrf`, `blas_<s|d|c|z>getrs`): cuBLAS's `getrfBatched`, `getrsBatched` and
//! `getriBatched`, column-major, on square matrices.
//!
//! Every implementation (the CPU device, `kernels.cu`) computes them the same way, so that their
//! results agree bit for bit where no multiply-add is fused:
//!
//! - **Factor** ([`factor`], LAPACK's `getf2` order), for each column `j`: the pivot is the first
//!   row `p >= j` of largest magnitude in column `j` (`|re| + |im|` for a complex number, as
//!   BLAS's `icamax`), or `j` without pivoting; `pivots[j] = p + 1`. If `A(p, j)` is not zero,
//!   rows `j` and `p` are swapped (every column) and each `A(i, j)` below it divided by it;
//!   otherwise `info` becomes `j + 1` if it is still 0, and the column is left as it is. Then
//!   `A(i, k) -= A(i, j) A(j, k)` for every `i, k > j`. `A` ends holding `U` on and above its
//!   diagonal and `L`'s multipliers below (its unit diagonal not stored): `P A = L U`.
//! - **Solve** ([`solve`]), each column `x` of `B` on its own: `op(A) = N`: the interchanges
//!   `x[j] <-> x[pivots[j] - 1]` for `j` ascending, then `L y = x` forward (unit diagonal), then
//!   `U x = y` backward; `T` or `C` (`op(A)^T`'s factors `U^T`, `L^T`, conjugated for `C`):
//!   `U^T y = x` forward, `L^T x = y` backward, then the interchanges for `j` descending (a
//!   pivot outside `1..=n` interchanges nothing: the solve stays inside `B`). Each
//!   substitution is [`super::trsm`]'s: row by row in the order solved, `x_r` less `M(r, c) x_c`
//!   for each solved `c` in the order solved, divided by the diagonal unless it is a unit one.
//! - **Invert** (a solve whose `B` starts as the identity, `nrhs = n`, not read): `C = A^-1`,
//!   and `info` the first `j + 1` with `U(j, j)` zero (0 if none), as `getriBatched` reports.

use super::gemm_batches_apart;
use super::trsm::Field;

/// A factorization's shape: `batch` matrices `n x n`, `stride` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Getrf {
    /// Rows and columns of each matrix.
    pub n: u64,
    /// Leading dimension of `A`.
    pub lda: u64,
    /// Elements from one matrix to the next.
    pub stride_a: u64,
    /// Rows are interchanged to take the largest pivot, and recorded; else neither.
    pub pivoting: bool,
    /// Elements (`i32`) from one matrix's pivots to the next's.
    pub stride_p: u64,
    /// Matrices factored.
    pub batch: u64,
}

/// A solve's shape: for each of `batch` factorizations, `op(A) X = B`, `X` over `B` (`n x nrhs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Getrs {
    /// `op`: 0 `A`, 1 its transpose, 2 its conjugate transpose (a real matrix's transpose).
    pub trans: u32,
    /// Rows and columns of each `A`, rows of each `B`.
    pub n: u64,
    /// Columns of each `B`: right-hand sides.
    pub nrhs: u64,
    /// Leading dimensions of `A` and `B`.
    pub ld: [u64; 2],
    /// Elements from one batch's `A` to the next's, and `B`'s.
    pub stride: [u64; 2],
    /// The factorizations' pivots are applied (read, `stride_p` elements apart); else not read.
    pub pivoting: bool,
    /// Elements (`i32`) from one factorization's pivots to the next's.
    pub stride_p: u64,
    /// `B` starts as the identity (not read; `nrhs` is `n`) and `info` records `U`'s first
    /// zero on the diagonal: `getriBatched`.
    pub inverse: bool,
    /// Systems solved.
    pub batch: u64,
}

/// Elements from a pointer up to the last batch's last column's last row.
pub(crate) fn span(rows: u64, cols: u64, ld: u64, stride: u64, batch: u64) -> u64 {
    (batch - 1).saturating_mul(stride).saturating_add((cols - 1).saturating_mul(ld)).saturating_add(rows)
}

/// Pivots touched: `n` for each batch, `stride_p` apart; none without pivoting.
fn pivot_span(pivoting: bool, n: u64, stride_p: u64, batch: u64) -> u64 {
    if pivoting {
        (batch - 1).saturating_mul(stride_p).saturating_add(n)
    } else {
        0
    }
}

/// Why `batch` square `A`s are refused: a leading dimension below their rows, or matrices that
/// overlap (each batch writes its own).
fn square_refusal(n: u64, lda: u64, stride_a: u64, batch: u64) -> Option<String> {
    if lda < n.max(1) {
        return Some(format!("lda = {lda} is below A's {n} rows"));
    }
    if !gemm_batches_apart(n, n, lda, stride_a, batch) {
        return Some(format!("stride_a {stride_a} makes the batches' matrices overlap"));
    }
    None
}

impl Getrf {
    /// Why this contract refuses the shape; `None` if it does not.
    pub fn refusal(&self) -> Option<String> {
        square_refusal(self.n, self.lda, self.stride_a, self.batch).or_else(|| {
            (self.pivoting && self.batch > 1 && self.stride_p < self.n)
                .then(|| format!("stride_p {} makes the batches' pivots overlap", self.stride_p))
        })
    }

    /// Whether the launch factors nothing: then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0 || self.batch == 0
    }

    /// Elements the launch touches from `A`'s, the pivots' and `info`'s pointers.
    pub fn footprints(&self) -> [u64; 3] {
        if self.is_empty() {
            return [0; 3];
        }
        let a = span(self.n, self.n, self.lda, self.stride_a, self.batch);
        [a, pivot_span(self.pivoting, self.n, self.stride_p, self.batch), self.batch]
    }

    /// Multiply-adds (about `2 n^3 / 3` a matrix) plus the elements touched.
    pub fn work(&self) -> u64 {
        let n = self.n;
        let products = self.batch.saturating_mul(n.saturating_mul(n).saturating_mul(n) / 3 * 2 + n);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }
}

impl Getrs {
    /// Why BLAS refuses this shape (an unknown operation, a leading dimension below its rows) or
    /// this contract does (overlapping batches, an inverse that is not square).
    pub fn refusal(&self) -> Option<String> {
        if self.trans > 2 {
            return Some(format!("unknown operation {} (N 0, T 1, C 2)", self.trans));
        }
        if self.inverse && self.nrhs != self.n {
            return Some(format!("an inverse has n = {} columns, not {}", self.n, self.nrhs));
        }
        if self.ld[0] < self.n.max(1) {
            return Some(format!("lda = {} is below A's {} rows", self.ld[0], self.n));
        }
        if self.ld[1] < self.n.max(1) {
            return Some(format!("ldb = {} is below B's {} rows", self.ld[1], self.n));
        }
        if !gemm_batches_apart(self.n, self.nrhs, self.ld[1], self.stride[1], self.batch) {
            return Some(format!("stride_b {} makes the batches' solutions overlap", self.stride[1]));
        }
        None
    }

    /// Whether the launch solves nothing: then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0 || self.nrhs == 0 || self.batch == 0
    }

    /// Elements the launch touches from `A`'s, the pivots', `B`'s and `info`'s pointers.
    pub fn footprints(&self) -> [u64; 4] {
        if self.is_empty() {
            return [0; 4];
        }
        [
            span(self.n, self.n, self.ld[0], self.stride[0], self.batch),
            pivot_span(self.pivoting, self.n, self.stride_p, self.batch),
            span(self.n, self.nrhs, self.ld[1], self.stride[1], self.batch),
            if self.inverse { self.batch } else { 0 },
        ]
    }

    /// Systems solved: a column of `B` each, in every batch.
    pub fn systems(&self) -> u64 {
        self.nrhs.saturating_mul(self.batch)
    }

    /// Multiply-adds (`n^2` a system) plus the elements touched.
    pub fn work(&self) -> u64 {
        let products = self.systems().saturating_mul(self.n.saturating_mul(self.n) + self.n);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }
}

/// What factoring needs beyond a solve's arithmetic.
pub trait Pivot: Field + PartialEq {
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// `|x|`, or `|re| + |im|` for a complex number, in its own precision (widened exactly).
    fn magnitude(self) -> f64;
}

macro_rules! real_pivot {
    ($t:ty) => {
        impl Pivot for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn magnitude(self) -> f64 {
                f64::from(self.abs())
            }
        }
    };
}

real_pivot!(f32);
real_pivot!(f64);

/// Factors `g`'s matrices on host slices (`a`, `pivots`, `info` from their pointers, as long as
/// their footprints), in the order this module's documentation gives.
pub fn factor<T: Pivot>(g: &Getrf, a: &mut [T], pivots: &mut [i32], info: &mut [i32]) {
    if g.is_empty() {
        return;
    }
    let n = g.n as usize;
    for b in 0..g.batch as usize {
        let at = |i: usize, j: usize| b * g.stride_a as usize + i + j * g.lda as usize;
        info[b] = 0;
        for j in 0..n {
            let p = if g.pivoting {
                // The first row of largest magnitude: a later one must be strictly larger.
                let p =
                    (j + 1..n).fold(j, |p, i| if a[at(i, j)].magnitude() > a[at(p, j)].magnitude() { i } else { p });
                pivots[b * g.stride_p as usize + j] = (p + 1) as i32;
                p
            } else {
                j
            };
            let pivot = a[at(p, j)];
            if pivot != T::ZERO {
                if p != j {
                    (0..n).for_each(|k| a.swap(at(p, k), at(j, k)));
                }
                (j + 1..n).for_each(|i| a[at(i, j)] = a[at(i, j)].over(pivot));
            } else if info[b] == 0 {
                info[b] = (j + 1) as i32;
            }
            for k in j + 1..n {
                for i in j + 1..n {
                    a[at(i, k)] = a[at(i, k)].less_product(a[at(i, j)], a[at(j, k)]);
                }
            }
        }
    }
}

/// Solves (or inverts) `s`'s systems on host slices (`a`, `pivots`, `b`, `info` from their
/// pointers, as long as their footprints), in the order this module's documentation gives.
pub fn solve<T: Pivot>(s: &Getrs, a: &[T], pivots: &[i32], b: &mut [T], info: &mut [i32]) {
    if s.is_empty() {
        return;
    }
    let n = s.n as usize;
    for batch in 0..s.batch as usize {
        let a_at = |i: usize, j: usize| {
            let v = a[batch * s.stride[0] as usize + i + j * s.ld[0] as usize];
            if s.trans == 2 {
                v.conj()
            } else {
                v
            }
        };
        let swaps = |x: &mut [T], ascending: bool| {
            if s.pivoting {
                let at = batch * s.stride_p as usize;
                // A pivot outside 1..=n (not one getrf wrote) interchanges nothing.
                let each = |j: usize| match usize::try_from(pivots[at + j] - 1) {
                    Ok(p) if p < n => x.swap(j, p),
                    _ => {}
                };
                if ascending {
                    (0..n).for_each(each)
                } else {
                    (0..n).rev().for_each(each)
                }
            }
        };
        if s.inverse {
            info[batch] = (0..n).position(|j| a_at(j, j) == T::ZERO).map_or(0, |j| j as i32 + 1);
        }
        for v in 0..s.nrhs as usize {
            let first = batch * s.stride[1] as usize + v * s.ld[1] as usize;
            let mut x: Vec<T> = if s.inverse {
                (0..n).map(|i| if i == v { T::ONE } else { T::ZERO }).collect()
            } else {
                b[first..first + n].to_vec()
            };
            if s.trans == 0 {
                swaps(&mut x, true);
                substitute(&mut x, true, true, a_at);
                substitute(&mut x, false, false, a_at);
            } else {
                substitute(&mut x, true, false, |r, c| a_at(c, r));
                substitute(&mut x, false, true, |r, c| a_at(c, r));
                swaps(&mut x, false);
            }
            b[first..first + n].copy_from_slice(&x);
        }
    }
}

/// Solves `M x = x` in place for the triangle `M(r, c)` (lower and solved from the first row if
/// `forward`), as [`super::trsm`] substitutes; `M`'s diagonal is read unless `unit`.
pub(crate) fn substitute<T: Pivot>(x: &mut [T], forward: bool, unit: bool, m: impl Fn(usize, usize) -> T) {
    let n = x.len();
    let row = |t: usize| if forward { t } else { n - 1 - t };
    for t in 0..n {
        let r = row(t);
        let mut acc = x[r];
        for c in (0..t).map(row) {
            acc = acc.less_product(m(r, c), x[c]);
        }
        if !unit {
            acc = acc.over(m(r, r));
        }
        x[r] = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn getrf(n: u64, batch: u64) -> Getrf {
        Getrf { n, lda: n, stride_a: n * n, pivoting: true, stride_p: n, batch }
    }

    fn getrs(trans: u32, n: u64, nrhs: u64) -> Getrs {
        Getrs {
            trans,
            n,
            nrhs,
            ld: [n, n],
            stride: [n * n, n * nrhs],
            pivoting: true,
            stride_p: n,
            inverse: false,
            batch: 1,
        }
    }

    /// A 4x4 matrix `A` with `P A = L U` for dyadic `L` (|l| < 1, so partial pivoting finds
    /// `P` again) and integer `U` (diagonal powers of two): every step below is exact.
    fn problem() -> (Vec<f64>, Vec<f64>, [i32; 4]) {
        let n = 4;
        let l = |i: usize, j: usize| match i.cmp(&j) {
            std::cmp::Ordering::Equal => 1.0,
            std::cmp::Ordering::Greater => [0.5, -0.25, 0.75, -0.5, 0.25, 0.0][(i * 3 + j) % 6],
            std::cmp::Ordering::Less => 0.0,
        };
        let u = |i: usize, j: usize| match i.cmp(&j) {
            std::cmp::Ordering::Equal => [2.0, -4.0, 1.0, 8.0][i],
            std::cmp::Ordering::Less => ((i + 2 * j) % 5) as f64 - 2.0,
            std::cmp::Ordering::Greater => 0.0,
        };
        let mut lu = vec![0.0; n * n];
        let mut packed = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                lu[i + j * n] = (0..n).map(|p| l(i, p) * u(p, j)).sum();
                packed[i + j * n] = if i > j { l(i, j) } else { u(i, j) };
            }
        }
        // A = P_0 P_1 P_2 P_3 (L U): the interchanges undone last to first.
        let pivots = [3, 3, 4, 4];
        for j in (0..n).rev() {
            let p = pivots[j] as usize - 1;
            (0..n).for_each(|k| lu.swap(j + k * n, p + k * n));
        }
        (lu, packed, pivots)
    }

    #[test]
    fn factoring_finds_the_pivots_and_factors_exactly() {
        let (a, packed, want_pivots) = problem();
        let mut got = a.clone();
        let (mut pivots, mut info) = (vec![0; 4], vec![-1]);
        factor(&getrf(4, 1), &mut got, &mut pivots, &mut info);
        assert_eq!(pivots, want_pivots);
        assert_eq!(got, packed);
        assert_eq!(info, [0]);
    }

    #[test]
    fn solving_with_each_operation_gives_back_x() {
        let (a, _, _) = problem();
        let (mut lu, mut pivots, mut info) = (a.clone(), vec![0; 4], vec![0]);
        factor(&getrf(4, 1), &mut lu, &mut pivots, &mut info);
        let x: Vec<f64> = (0..8).map(|v| (v % 5) as f64 - 2.0).collect();
        for trans in [0, 1, 2] {
            // B = op(A) X.
            let mut b = vec![0.0; 8];
            for i in 0..4 {
                for j in 0..2 {
                    let op = |r: usize, c: usize| if trans == 0 { a[r + c * 4] } else { a[c + r * 4] };
                    b[i + j * 4] = (0..4).map(|p| op(i, p) * x[p + j * 4]).sum();
                }
            }
            solve(&getrs(trans, 4, 2), &lu, &pivots, &mut b, &mut []);
            assert_eq!(b, x, "trans {trans}");
        }
    }

    #[test]
    fn inverting_gives_the_inverse_and_reports_a_zero_pivot() {
        let (a, _, _) = problem();
        let (mut lu, mut pivots, mut info) = (a.clone(), vec![0; 4], vec![0]);
        factor(&getrf(4, 1), &mut lu, &mut pivots, &mut info);
        let mut c = vec![f64::NAN; 16];
        let inverse = Getrs { inverse: true, ..getrs(0, 4, 4) };
        solve(&inverse, &lu, &pivots, &mut c, &mut info);
        assert_eq!(info, [0]);
        for i in 0..4 {
            for j in 0..4 {
                let product: f64 = (0..4).map(|p| a[i + p * 4] * c[p + j * 4]).sum();
                assert!((product - f64::from(u8::from(i == j))).abs() < 1e-12, "(A C)({i}, {j}) = {product}");
            }
        }
        // A singular matrix: its second column is twice its first.
        let mut singular: Vec<f64> = vec![1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0];
        let (mut pivots, mut info) = (vec![0; 3], vec![0]);
        factor(&getrf(3, 1), &mut singular, &mut pivots, &mut info);
        assert_eq!(info, [2], "U(1, 1) is the first zero");
        let mut c = vec![0.0; 9];
        solve(&Getrs { inverse: true, ..getrs(0, 3, 3) }, &singular, &pivots, &mut c, &mut info);
        assert_eq!(info, [2]);
    }

    #[test]
    fn without_pivoting_a_zero_diagonal_is_reported_and_skipped() {
        let mut a = vec![0.0, 1.0, 1.0, 1.0];
        let (mut pivots, mut info) = (vec![7; 2], vec![0]);
        factor(&Getrf { pivoting: false, ..getrf(2, 1) }, &mut a, &mut pivots, &mut info);
        assert_eq!(info, [1]);
        assert_eq!(pivots, [7, 7], "pivots untouched");
        // Column 0 unscaled, the trailing update still applied: 1 - 1 * 1.
        assert_eq!(a, [0.0, 1.0, 1.0, 0.0]);
    }

    #[test]
    fn shapes_are_refused_and_footprints_reach_the_last_batch() {
        assert_eq!(getrf(3, 2).refusal(), None);
        assert!(Getrf { lda: 2, ..getrf(3, 1) }.refusal().unwrap().contains("lda = 2 is below A's 3 rows"));
        assert!(Getrf { stride_a: 8, ..getrf(3, 2) }.refusal().unwrap().contains("overlap"));
        assert!(Getrf { stride_p: 2, ..getrf(3, 2) }.refusal().unwrap().contains("pivots overlap"));
        assert_eq!(Getrf { stride_p: 0, pivoting: false, ..getrf(3, 2) }.refusal(), None);
        assert_eq!(getrf(3, 2).footprints(), [9 + 9, 3 + 3, 2]);
        assert_eq!(Getrf { pivoting: false, ..getrf(3, 2) }.footprints(), [18, 0, 2]);
        assert_eq!(getrf(0, 2).footprints(), [0; 3]);

        let s = getrs(1, 3, 2);
        assert_eq!(s.refusal(), None);
        assert!(Getrs { trans: 3, ..s }.refusal().unwrap().contains("unknown operation"));
        assert!(Getrs { ld: [3, 2], ..s }.refusal().unwrap().contains("ldb = 2"));
        assert!(Getrs { inverse: true, ..s }.refusal().unwrap().contains("not 2"));
        assert!(Getrs { stride: [9, 5], batch: 2, ..s }.refusal().unwrap().contains("overlap"));
        assert_eq!(Getrs { batch: 2, ..s }.footprints(), [18, 6, 12, 0]);
        assert_eq!(Getrs { inverse: true, nrhs: 3, stride: [9, 9], batch: 2, ..s }.footprints(), [18, 6, 18, 2]);
    }
}

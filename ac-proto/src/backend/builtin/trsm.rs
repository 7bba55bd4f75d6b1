//! A triangular solve's shape (`blas_strsm`, `blas_dtrsm`, `blas_ctrsm`, `blas_ztrsm`): BLAS's
//! trsm, column-major as cuBLAS is. For each `b < batch`, `op(A_b) X = alpha B_b` (left) or
//! `X op(A_b) = alpha B_b` (right), `A_b` triangular, `X` written over `B_b`.
//!
//! Every implementation (the CPU device, `kernels.cu`, the driver stand-in) solves it the same
//! way, so that their results agree bit for bit where no multiply-add is fused: as independent
//! systems `M x = alpha b`, one for each column of `B` (left) or row (right), `M` lower or upper
//! triangular ([`Trsm::forward`]), by substitution: for each row `r` in order, `alpha b_r`, less
//! `M(r, c) x_c` for each solved `c` in the order solved, divided by `M(r, r)` unless the
//! diagonal is unit. A complex quotient is `p conj(q) / |q|^2`, the real and imaginary parts
//! of `p conj(q)` divided each by `q.re^2 + q.im^2`.

use super::gemm_batches_apart;

/// A triangular solve's shape and options, as cuBLAS's `trsm` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trsm {
    /// `op(A) X = alpha B` (`CUBLAS_SIDE_LEFT`); else `X op(A) = alpha B`.
    pub left: bool,
    /// `A`'s lower triangle holds it (`CUBLAS_FILL_MODE_LOWER`); else its upper one.
    pub lower: bool,
    /// `op`: 0 `A`, 1 its transpose, 2 its conjugate transpose (a real matrix's transpose).
    pub trans: u32,
    /// `A`'s diagonal is taken as ones and not read (`CUBLAS_DIAG_UNIT`).
    pub unit: bool,
    /// Rows of `B`.
    pub m: u64,
    /// Columns of `B`.
    pub n: u64,
    /// Leading dimensions of `A` and `B`.
    pub ld: [u64; 2],
    /// Elements from one batch's matrix to the next's, for `A` and `B`.
    pub stride: [u64; 2],
    /// Systems of equations solved.
    pub batch: u64,
}

impl Trsm {
    /// Rows and columns of the triangular `A`: `m` on the left, `n` on the right.
    pub fn order(&self) -> u64 {
        if self.left {
            self.m
        } else {
            self.n
        }
    }

    /// Why BLAS refuses this shape (an unknown operation, a leading dimension below its
    /// matrix's rows) or this contract does (batches' solutions that overlap); `None` if neither.
    pub fn refusal(&self) -> Option<String> {
        if self.trans > 2 {
            return Some(format!("unknown operation {} (N 0, T 1, C 2)", self.trans));
        }
        if self.ld[0] < self.order().max(1) {
            return Some(format!("lda = {} is below A's {} rows", self.ld[0], self.order()));
        }
        if self.ld[1] < self.m.max(1) {
            return Some(format!("ldb = {} is below B's {} rows", self.ld[1], self.m));
        }
        if !gemm_batches_apart(self.m, self.n, self.ld[1], self.stride[1], self.batch) {
            return Some(format!("stride_b {} makes the batches' solutions overlap", self.stride[1]));
        }
        None
    }

    /// Whether the launch solves nothing: then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Elements of `A` and `B` the launch touches from each pointer: up to the last batch's
    /// last column's last row; none when it solves nothing.
    pub fn footprints(&self) -> [u64; 2] {
        if self.is_empty() {
            return [0, 0];
        }
        let k = self.order();
        let span = |rows: u64, cols: u64, ld: u64, stride: u64| {
            (self.batch - 1).saturating_mul(stride).saturating_add((cols - 1).saturating_mul(ld)).saturating_add(rows)
        };
        [span(k, k, self.ld[0], self.stride[0]), span(self.m, self.n, self.ld[1], self.stride[1])]
    }

    /// Systems solved: a column of `B` each (left) or a row (right), in every batch.
    pub fn systems(&self) -> u64 {
        let per_batch = if self.left { self.n } else { self.m };
        per_batch.saturating_mul(self.batch)
    }

    /// Multiply-adds (about half of `order` squared a system), plus the elements touched: how a
    /// device judges whether the launch is quick.
    pub fn work(&self) -> u64 {
        let k = self.order();
        let products = self.systems().saturating_mul(k.saturating_mul(k) / 2 + k);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }

    /// Whether `M`, the matrix each system solves with, is lower triangular (solved from its
    /// first row) rather than upper. On the left `M` is `op(A)`; on the right `op(A)`'s
    /// transpose (`x^T op(A) = alpha b^T` is `op(A)^T x = alpha b`).
    pub fn forward(&self) -> bool {
        let transposed = if self.left { self.trans != 0 } else { self.trans == 0 };
        self.lower != transposed
    }

    /// Where `M(r, c)` of batch `b` lies, from `A`'s pointer, and whether it is read conjugated.
    pub fn a_index(&self, b: u64, r: u64, c: u64) -> (u64, bool) {
        // M(r, c) is A(r, c) where M is A (left, N) or A's conjugate transpose's transpose
        // (right, C: conjugated); A(c, r) otherwise.
        let same = if self.left { self.trans == 0 } else { self.trans != 0 };
        let (i, j) = if same { (r, c) } else { (c, r) };
        (b * self.stride[0] + i + j * self.ld[0], self.trans == 2)
    }

    /// Where element `r` of system `s`'s right-hand side (and solution) lies, from `B`'s
    /// pointer: systems numbered within each batch first, batches after.
    pub fn b_index(&self, s: u64, r: u64) -> u64 {
        let per_batch = if self.left { self.n } else { self.m };
        let (b, v) = (s / per_batch, s % per_batch);
        let (i, j) = if self.left { (r, v) } else { (v, r) };
        b * self.stride[1] + i + j * self.ld[1]
    }

    /// The rows of a system in the order they are solved.
    pub fn rows(&self) -> impl Iterator<Item = u64> + Clone {
        let (k, forward) = (self.order(), self.forward());
        (0..k).map(move |t| if forward { t } else { k - 1 - t })
    }
}

/// The arithmetic a solve needs, in the order this module's documentation gives.
pub trait Field: Copy {
    /// `self * o`.
    fn times(self, o: Self) -> Self;
    /// `self - m * x`, rounded after the product and after the difference.
    fn less_product(self, m: Self, x: Self) -> Self;
    /// `self / q` (for a complex `q`: `self conj(q) / |q|^2`, as the module says).
    fn over(self, q: Self) -> Self;
    /// Its complex conjugate: itself for a real number.
    fn conj(self) -> Self {
        self
    }
}

macro_rules! real_field {
    ($t:ty) => {
        impl Field for $t {
            fn times(self, o: Self) -> Self {
                self * o
            }
            fn less_product(self, m: Self, x: Self) -> Self {
                self - m * x
            }
            fn over(self, q: Self) -> Self {
                self / q
            }
        }
    };
}

real_field!(f32);
real_field!(f64);

/// Solves `t`'s systems on host slices (`a` and `b` from their pointers, as long as their
/// footprints), in the order this module's documentation gives: the CPU device's trsm and the
/// reference its tests compare with.
pub fn solve<T: Field>(t: &Trsm, alpha: T, a: &[T], b: &mut [T]) {
    if t.is_empty() {
        return;
    }
    let per_batch = t.systems() / t.batch;
    for s in 0..t.systems() {
        let batch = s / per_batch;
        let m_at = |r: u64, c: u64| {
            let (at, conjugate) = t.a_index(batch, r, c);
            let v = a[at as usize];
            if conjugate {
                v.conj()
            } else {
                v
            }
        };
        for (solved, r) in t.rows().enumerate() {
            let mut acc = alpha.times(b[t.b_index(s, r) as usize]);
            for c in t.rows().take(solved) {
                acc = acc.less_product(m_at(r, c), b[t.b_index(s, c) as usize]);
            }
            if !t.unit {
                acc = acc.over(m_at(r, r));
            }
            b[t.b_index(s, r) as usize] = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(left: bool, lower: bool, trans: u32, unit: bool, m: u64, n: u64) -> Trsm {
        let ld = [if left { m } else { n }, m];
        Trsm { left, lower, trans, unit, m, n, ld, stride: [0, 0], batch: 1 }
    }

    /// `op(A) X` (left) or `X op(A)` (right) for a dense column-major `A` whose unused
    /// triangle is zero: what the solution must give back.
    fn product(t: &Trsm, a: &[f64], x: &[f64]) -> Vec<f64> {
        let k = t.order() as usize;
        let op = |i: usize, j: usize| if t.trans == 0 { a[i + j * k] } else { a[j + i * k] };
        let (m, n) = (t.m as usize, t.n as usize);
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i + j * m] = if t.left {
                    (0..k).map(|p| op(i, p) * x[p + j * m]).sum()
                } else {
                    (0..k).map(|p| x[i + p * m] * op(p, j)).sum()
                };
            }
        }
        out
    }

    #[test]
    fn every_side_triangle_and_operation_solves_back_to_the_right_hand_side() {
        // A 3x3 triangle of small integers and a diagonal of powers of two: every solution
        // and product below is exact in f64.
        for left in [true, false] {
            for lower in [true, false] {
                for trans in [0, 1, 2] {
                    for unit in [false, true] {
                        let t = shape(left, lower, trans, unit, 3, 2);
                        let k = t.order() as usize;
                        let mut a = vec![0.0; k * k];
                        for j in 0..k {
                            for i in 0..k {
                                let inside = if lower { i > j } else { i < j };
                                a[i + j * k] = if i == j {
                                    if unit {
                                        1.0
                                    } else {
                                        2.0
                                    }
                                } else if inside {
                                    (i + 2 * j + 1) as f64
                                } else {
                                    0.0
                                };
                            }
                        }
                        let x: Vec<f64> = (0..6).map(|v| v as f64 - 2.0).collect();
                        let rhs = product(&t, &a, &x);
                        // With a unit diagonal, what the stored diagonal holds is not read.
                        let mut stored = a.clone();
                        if unit {
                            (0..k).for_each(|i| stored[i + i * k] = f64::NAN);
                        }
                        let mut b: Vec<f64> = rhs.iter().map(|v| v / 4.0).collect();
                        solve(&t, 4.0, &stored, &mut b);
                        assert_eq!(b, x, "left {left} lower {lower} trans {trans} unit {unit}");
                    }
                }
            }
        }
    }

    #[test]
    fn shapes_blas_refuses_are_refused() {
        let ok = shape(true, true, 0, false, 3, 2);
        assert_eq!(ok.refusal(), None);
        assert!(Trsm { trans: 3, ..ok }.refusal().unwrap().contains("unknown operation"));
        assert!(Trsm { ld: [2, 3], ..ok }.refusal().unwrap().contains("lda = 2 is below A's 3 rows"));
        assert!(Trsm { ld: [3, 2], ..ok }.refusal().unwrap().contains("ldb = 2"));
        // On the right A is n x n: lda 2 is enough for n 2.
        assert_eq!(Trsm { left: false, ld: [2, 3], ..ok }.refusal(), None);
        let batched = Trsm { stride: [0, 5], batch: 2, ..ok };
        assert!(batched.refusal().unwrap().contains("overlap"), "B spans 6 elements");
        assert_eq!(Trsm { stride: [0, 6], ..batched }.refusal(), None);
    }

    #[test]
    fn footprints_reach_the_last_batchs_last_element() {
        let t = Trsm { ld: [5, 4], stride: [30, 12], batch: 3, ..shape(false, true, 1, false, 3, 2) };
        // A is 2x2 (ld 5): 2 batches' strides and one column, then 2 rows; B is 3x2 (ld 4).
        assert_eq!(t.footprints(), [2 * 30 + 5 + 2, 2 * 12 + 4 + 3]);
        assert_eq!(Trsm { m: 0, ..t }.footprints(), [0, 0]);
        assert_eq!(t.systems(), 9, "a row of B each on the right, 3 batches");
    }
}

//! QR factorization by Householder reflections and the least-squares solves built on it
//! (`blas_<s|d|c|z>geqrf`, `blas_<s|d|c|z>gels`): cuBLAS's `geqrfBatched` and `gelsBatched`,
//! column-major, one matrix a thread (small matrices in large batches, as cuBLAS meant them).
//!
//! Every implementation (the CPU device, `kernels.cu`) computes them the same way, so that their
//! results agree bit for bit where no multiply-add is fused:
//!
//! - **Factor** ([`factor`], LAPACK's `geqr2` order), for each column `j < min(m, n)`, with
//!   `alpha = A(j, j)` and `x` the column below it:
//!   - its reflector (LAPACK's `larfg`): if `x` is all zero and `alpha` real, `tau = 0` and the
//!     column stays as it is. Else `norm = s sqrt(sum of (re_i / s)^2 + (im_i / s)^2)` over rows
//!     `i >= j`, summed by ascending `i` (`s` the largest `|re|` or `|im|` among them, so that no
//!     square overflows); `beta = -norm` if `re(alpha) >= 0`, else `norm`; `tau = ((beta -
//!     re(alpha)) / beta, -im(alpha) / beta)`; `x` times `1 / (alpha - beta)`; `A(j, j) = beta`.
//!   - applied (LAPACK's `larf` with `conj(tau)`): unless `tau` is zero, each later column `y`
//!     (of `A`, then of `C` in a solve) becomes `H^H y = y - conj(tau) v (v^H y)` with `v = (1,
//!     x)`: `w = y_j + sum of conj(v_i) y_i` by ascending `i`, `t = conj(tau) w`, `y_j - t`,
//!     `y_i - v_i t`.
//!
//!   `A` ends holding `R` on and above its diagonal and each reflector's `x` below it, `tau`
//!   its factors: `A = Q R` with `Q = H_0 H_1 ... H_(k-1)`, `H_j = I - tau_j v_j v_j^H`.
//! - **Least squares** ([`solve`], LAPACK's `gels` for `op(A) = N` and `m >= n`): `A` factored
//!   as above with each reflector applied to `C`'s columns too (`C = Q^H C`); then `info` is the
//!   first `j + 1` with `R(j, j)` zero (0 if none: `A` has full rank) and, only if it is 0, `R X
//!   = C(0..n, :)` is solved by back substitution (trsm's order, as [`super::lu`]'s), `X` over
//!   `C`'s first `n` rows. `C`'s rows from `n` on keep `Q^H C`'s, whose norm is the residual's.
//!   No `tau` is kept: the reflectors are applied as they are made.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::gemm_batches_apart;
use super::lu::{span, substitute, Pivot};

/// A factorization's shape: `batch` matrices `m x n`, `stride_a` elements apart, and their
/// `tau`s, `stride_t` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geqrf {
    /// Rows of each matrix.
    pub m: u64,
    /// Columns of each matrix.
    pub n: u64,
    /// Leading dimension of `A`.
    pub lda: u64,
    /// Elements from one matrix to the next.
    pub stride_a: u64,
    /// Elements from one matrix's `tau`s (`min(m, n)` of them) to the next's.
    pub stride_t: u64,
    /// Matrices factored.
    pub batch: u64,
}

/// A least-squares solve's shape: for each of `batch` problems, `min |A X - C|` for `A` `m x n`
/// (`m >= n`) and `C` `m x nrhs`, `A` over by its factors and `X` over `C`'s first `n` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gels {
    /// Rows of each `A` and `C`.
    pub m: u64,
    /// Columns of each `A`: unknowns.
    pub n: u64,
    /// Columns of each `C`: right-hand sides.
    pub nrhs: u64,
    /// Leading dimensions of `A` and `C`.
    pub ld: [u64; 2],
    /// Elements from one problem's `A` to the next's, and `C`'s.
    pub stride: [u64; 2],
    /// Each problem's `info` is written (a zero on `R`'s diagonal); else not touched.
    pub info: bool,
    /// Problems solved.
    pub batch: u64,
}

/// Why `batch` `A`s `m x n` are refused: a leading dimension below their rows, or matrices that
/// overlap (each batch writes its own).
fn matrix_refusal(x: &str, [m, n]: [u64; 2], ld: u64, stride: u64, batch: u64) -> Option<String> {
    if ld < m.max(1) {
        return Some(format!("ld{} = {ld} is below {x}'s {m} rows", x.to_lowercase()));
    }
    if !gemm_batches_apart(m, n, ld, stride, batch) {
        return Some(format!("stride_{} {stride} makes the batches' {x}s overlap", x.to_lowercase()));
    }
    None
}

impl Geqrf {
    /// Reflectors (and `tau`s) of each matrix: `min(m, n)`.
    pub fn reflectors(&self) -> u64 {
        self.m.min(self.n)
    }

    /// Why this contract refuses the shape; `None` if it does not.
    pub fn refusal(&self) -> Option<String> {
        matrix_refusal("A", [self.m, self.n], self.lda, self.stride_a, self.batch).or_else(|| {
            (self.batch > 1 && self.stride_t < self.reflectors())
                .then(|| format!("stride_t {} makes the batches' taus overlap", self.stride_t))
        })
    }

    /// Whether the launch factors nothing: then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.reflectors() == 0 || self.batch == 0
    }

    /// Elements the launch touches from `A`'s and `tau`'s pointers.
    pub fn footprints(&self) -> [u64; 2] {
        if self.is_empty() {
            return [0; 2];
        }
        let tau = (self.batch - 1).saturating_mul(self.stride_t).saturating_add(self.reflectors());
        [span(self.m, self.n, self.lda, self.stride_a, self.batch), tau]
    }

    /// Multiply-adds (at most `2 m n k` a matrix) plus the elements touched.
    pub fn work(&self) -> u64 {
        let products = self.batch.saturating_mul(self.m.saturating_mul(self.n).saturating_mul(self.reflectors()) * 2);
        self.footprints().into_iter().fold(products, u64::saturating_add)
    }
}

impl Gels {
    /// Why cuBLAS refuses this shape (fewer rows than unknowns, a leading dimension below its
    /// rows) or this contract does (overlapping batches).
    pub fn refusal(&self) -> Option<String> {
        if self.m < self.n {
            return Some(format!("m = {} is below n = {}: only an overdetermined or square A", self.m, self.n));
        }
        matrix_refusal("A", [self.m, self.n], self.ld[0], self.stride[0], self.batch)
            .or_else(|| matrix_refusal("C", [self.m, self.nrhs], self.ld[1], self.stride[1], self.batch))
    }

    /// Whether the launch solves nothing: then it reads and writes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0 || self.batch == 0
    }

    /// The factorization it makes of each `A`.
    pub fn factoring(&self) -> Geqrf {
        Geqrf { m: self.m, n: self.n, lda: self.ld[0], stride_a: self.stride[0], stride_t: 0, batch: self.batch }
    }

    /// Elements the launch touches from `A`'s, `C`'s and `info`'s pointers.
    pub fn footprints(&self) -> [u64; 3] {
        if self.is_empty() {
            return [0; 3];
        }
        let c = if self.nrhs == 0 { 0 } else { span(self.m, self.nrhs, self.ld[1], self.stride[1], self.batch) };
        [self.factoring().footprints()[0], c, if self.info { self.batch } else { 0 }]
    }

    /// The factorizations' multiply-adds, `2 m n + n^2` more for each right-hand side, plus the
    /// elements touched.
    pub fn work(&self) -> u64 {
        let (m, n) = (self.m, self.n);
        let solves = self.batch.saturating_mul(self.nrhs).saturating_mul(m.saturating_mul(n) * 2 + n * n);
        self.footprints().into_iter().fold(self.factoring().work().saturating_add(solves), u64::saturating_add)
    }
}

/// A real number, as a reflector's norm and `beta` are.
pub trait Real:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// Zero.
    const ZERO: Self;
    /// `|x|`.
    fn abs(self) -> Self;
    /// The square root.
    fn sqrt(self) -> Self;
}

/// What a Householder reflection needs beyond factoring's arithmetic.
pub trait Reflect: Pivot + Add<Output = Self> + Sub<Output = Self> {
    /// The real numbers of its parts.
    type Real: Real;
    /// Its real part.
    fn re(self) -> Self::Real;
    /// Its imaginary part: zero for a real number.
    fn im(self) -> Self::Real;
    /// The number `re + i im` (`im` ignored for a real element).
    fn of_parts(re: Self::Real, im: Self::Real) -> Self;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }

        impl Reflect for $t {
            type Real = $t;
            fn re(self) -> $t {
                self
            }
            fn im(self) -> $t {
                0.0
            }
            fn of_parts(re: $t, _: $t) -> Self {
                re
            }
        }
    };
}

real!(f32);
real!(f64);

/// Makes column `j`'s reflector from rows `j..m` of the column at `col(i)` in `a` (the module's
/// order): `beta` left on the diagonal, the reflector's `x` below it. Returns `tau`.
fn reflector<T: Reflect>(a: &mut [T], col: impl Fn(usize) -> usize, j: usize, m: usize) -> T {
    let zero = <T::Real as Real>::ZERO;
    let alpha = a[col(j)];
    if (j + 1..m).all(|i| a[col(i)] == T::ZERO) && alpha.im() == zero {
        return T::ZERO;
    }
    let larger = |s: T::Real, p: T::Real| if p > s { p } else { s };
    let scale = (j..m).fold(zero, |s, i| larger(larger(s, a[col(i)].re().abs()), a[col(i)].im().abs()));
    let sum = (j..m).fold(zero, |s, i| {
        let (re, im) = (a[col(i)].re() / scale, a[col(i)].im() / scale);
        s + re * re + im * im
    });
    let norm = scale * sum.sqrt();
    let beta = if alpha.re() >= zero { -norm } else { norm };
    let tau = T::of_parts((beta - alpha.re()) / beta, -alpha.im() / beta);
    let scaling = T::ONE.over(alpha - T::of_parts(beta, zero));
    (j + 1..m).for_each(|i| a[col(i)] = a[col(i)].times(scaling));
    a[col(j)] = T::of_parts(beta, zero);
    tau
}

/// Applies `H^H = I - conj(tau) v v^H`, `v = (1, x)`, to rows `j..` of the column at `col(i)`
/// in `y` (the module's order); nothing if `tau` is zero.
fn reflect<T: Reflect>(tau: T, x: &[T], y: &mut [T], col: impl Fn(usize) -> usize, j: usize) {
    if tau == T::ZERO {
        return;
    }
    let w = (j + 1..).zip(x).fold(y[col(j)], |w, (i, &v)| w + v.conj().times(y[col(i)]));
    let t = tau.conj().times(w);
    y[col(j)] = y[col(j)] - t;
    (j + 1..).zip(x).for_each(|(i, &v)| y[col(i)] = y[col(i)].less_product(v, t));
}

/// Factors one `m x n` matrix, element `(i, k)` at `a[a_at(i, k)]`, each reflector applied to
/// the `nrhs` columns of `C` (element `(i, v)` at `c[c_at(i, v)]`) after `A`'s; `tau(j, tau_j)`
/// for each reflector.
#[allow(clippy::too_many_arguments)] // A's and C's slices, addresses and sizes
fn factor_one<T: Reflect>(
    [m, n, nrhs]: [usize; 3],
    a: &mut [T],
    a_at: impl Fn(usize, usize) -> usize,
    c: &mut [T],
    c_at: impl Fn(usize, usize) -> usize,
    mut tau: impl FnMut(usize, T),
) {
    for j in 0..m.min(n) {
        let t = reflector(a, |i| a_at(i, j), j, m);
        let x: Vec<T> = (j + 1..m).map(|i| a[a_at(i, j)]).collect();
        (j + 1..n).for_each(|k| reflect(t, &x, a, |i| a_at(i, k), j));
        (0..nrhs).for_each(|v| reflect(t, &x, c, |i| c_at(i, v), j));
        tau(j, t);
    }
}

/// Factors `g`'s matrices on host slices (`a` and `tau` from their pointers, as long as their
/// footprints), in the order this module's documentation gives.
pub fn factor<T: Reflect>(g: &Geqrf, a: &mut [T], tau: &mut [T]) {
    if g.is_empty() {
        return;
    }
    let (lda, stride_a, stride_t) = (g.lda as usize, g.stride_a as usize, g.stride_t as usize);
    for b in 0..g.batch as usize {
        let a_at = |i: usize, k: usize| b * stride_a + i + k * lda;
        factor_one([g.m as usize, g.n as usize, 0], a, a_at, &mut [], |_, _| 0, |j, t| tau[b * stride_t + j] = t);
    }
}

/// Solves `s`'s least-squares problems on host slices (`a`, `c` and `info` from their pointers,
/// as long as their footprints), in the order this module's documentation gives.
pub fn solve<T: Reflect>(s: &Gels, a: &mut [T], c: &mut [T], info: &mut [i32]) {
    if s.is_empty() {
        return;
    }
    let (n, [lda, ldc], [stride_a, stride_c]) = (s.n as usize, s.ld.map(|v| v as usize), s.stride.map(|v| v as usize));
    for b in 0..s.batch as usize {
        let a_at = |i: usize, k: usize| b * stride_a + i + k * lda;
        let c_at = |i: usize, v: usize| b * stride_c + i + v * ldc;
        factor_one([s.m as usize, n, s.nrhs as usize], a, a_at, c, c_at, |_, _| {});
        let status = (0..n).position(|j| a[a_at(j, j)] == T::ZERO).map_or(0, |j| j as i32 + 1);
        if let Some(slot) = info.get_mut(b).filter(|_| s.info) {
            *slot = status;
        }
        if status != 0 {
            continue;
        }
        for v in 0..s.nrhs as usize {
            let first = c_at(0, v);
            let mut x = c[first..first + n].to_vec();
            substitute(&mut x, false, false, |r, k| a[a_at(r, k)]);
            c[first..first + n].copy_from_slice(&x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geqrf(m: u64, n: u64, batch: u64) -> Geqrf {
        Geqrf { m, n, lda: m, stride_a: m * n, stride_t: m.min(n), batch }
    }

    fn gels(m: u64, n: u64, nrhs: u64) -> Gels {
        Gels { m, n, nrhs, ld: [m, m], stride: [m * n, m * nrhs], info: true, batch: 1 }
    }

    /// `Q` (`m x m`) from a factored `m x n` `a` and its `tau`s: `H_0 H_1 ... H_(k-1)`.
    fn q_of(a: &[f64], tau: &[f64], m: usize) -> Vec<f64> {
        let mut q: Vec<f64> = (0..m * m).map(|e| f64::from(u8::from(e % m == e / m))).collect();
        for (j, &t) in tau.iter().enumerate().rev() {
            let v: Vec<f64> = (0..m)
                .map(|i| {
                    if i < j {
                        0.0
                    } else if i == j {
                        1.0
                    } else {
                        a[i + j * m]
                    }
                })
                .collect();
            for k in 0..m {
                let w: f64 = (0..m).map(|i| v[i] * q[i + k * m]).sum();
                (0..m).for_each(|i| q[i + k * m] -= t * v[i] * w);
            }
        }
        q
    }

    fn assert_near(got: f64, want: f64, what: &str) {
        assert!((got - want).abs() < 1e-12, "{what}: {got}, not {want}");
    }

    #[test]
    fn a_column_of_three_and_four_reflects_onto_minus_five() {
        let mut a = vec![3.0, 4.0];
        let mut tau = vec![0.0];
        factor(&geqrf(2, 1, 1), &mut a, &mut tau);
        // norm 4 sqrt(0.75^2 + 1) = 5 exactly; beta = -5; x = 4 / (3 + 5).
        assert_eq!(a, [-5.0, 0.5]);
        assert_eq!(tau, [(-5.0 - 3.0) / -5.0]);
    }

    #[test]
    fn factoring_gives_q_r_equal_to_a_with_q_orthogonal() {
        let (m, n) = (5, 3);
        let a: Vec<f64> = (0..m * n).map(|e| ((e * 7 + 3) % 11) as f64 - 5.0).collect();
        let mut qr = a.clone();
        let mut tau = vec![0.0; 3];
        factor(&geqrf(m as u64, n as u64, 1), &mut qr, &mut tau);
        let q = q_of(&qr, &tau, m);
        let r = |i: usize, j: usize| if i <= j { qr[i + j * m] } else { 0.0 };
        for i in 0..m {
            for j in 0..n {
                let product: f64 = (0..n).map(|p| q[i + p * m] * r(p, j)).sum();
                assert_near(product, a[i + j * m], &format!("(Q R)({i}, {j})"));
            }
            for j in 0..m {
                let dot: f64 = (0..m).map(|p| q[p + i * m] * q[p + j * m]).sum();
                assert_near(dot, f64::from(u8::from(i == j)), &format!("(Q^T Q)({i}, {j})"));
            }
        }
    }

    #[test]
    fn a_zero_column_has_no_reflector_and_a_wide_matrix_stops_at_m() {
        // Column 0 is zero: tau 0, left as it is; the 2 x 3 matrix has two reflectors.
        let mut a = vec![0.0, 0.0, 1.0, 2.0, 3.0, 4.0];
        let mut tau = vec![7.0; 2];
        factor(&geqrf(2, 3, 1), &mut a, &mut tau);
        assert_eq!(tau[0], 0.0);
        assert_eq!(&a[..2], [0.0, 0.0]);
        // Then the reflector of rows 1.. of column 1 (one row: no x) is the identity too.
        assert_eq!(tau[1], 0.0);
        assert_eq!(&a[2..], [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn least_squares_recovers_x_beside_a_residual_orthogonal_to_a() {
        let (m, n) = (4, 2);
        // Columns (1, 1, 1, 1) and (0, 1, 2, 3); r = (1, -1, -1, 1) is orthogonal to both.
        let a = vec![1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 3.0];
        let x = [2.0, -0.5];
        let r = [1.0, -1.0, -1.0, 1.0];
        let mut c: Vec<f64> = (0..m).map(|i| a[i] * x[0] + a[i + m] * x[1] + r[i]).collect();
        let (mut qr, mut info) = (a.clone(), vec![-1]);
        solve(&gels(m as u64, n as u64, 1), &mut qr, &mut c, &mut info);
        assert_eq!(info, [0]);
        assert_near(c[0], x[0], "x0");
        assert_near(c[1], x[1], "x1");
        // |Q^T C|'s rows from n on: the residual's norm, 2.
        assert_near(c[2].hypot(c[3]), 2.0, "residual");
    }

    #[test]
    fn a_rank_deficient_a_is_reported_and_not_solved() {
        // Column 1 is twice column 0: R(1, 1) comes out zero.
        let mut a = vec![1.0, 0.0, 0.0, 2.0, 0.0, 0.0];
        let mut c = vec![1.0, 2.0, 3.0];
        let mut info = vec![0];
        solve(&gels(3, 2, 1), &mut a, &mut c, &mut info);
        assert_eq!(info, [2]);
        // Both columns' reflectors are the identity (nothing below the diagonal): C is Q^T C,
        // not divided by R(1, 1).
        assert_eq!(c, [1.0, 2.0, 3.0], "Q^T C, not solved");
    }

    #[test]
    fn shapes_are_refused_and_footprints_reach_the_last_batch() {
        assert_eq!(geqrf(4, 3, 2).refusal(), None);
        assert!(Geqrf { lda: 3, ..geqrf(4, 3, 1) }.refusal().unwrap().contains("lda = 3 is below A's 4 rows"));
        assert!(Geqrf { stride_a: 8, ..geqrf(4, 3, 2) }.refusal().unwrap().contains("As overlap"));
        assert!(Geqrf { stride_t: 2, ..geqrf(4, 3, 2) }.refusal().unwrap().contains("taus overlap"));
        assert_eq!(geqrf(4, 3, 2).footprints(), [24, 6]);
        assert_eq!(geqrf(2, 3, 2).footprints(), [12, 4]);
        assert_eq!(geqrf(0, 3, 2).footprints(), [0; 2]);

        let s = gels(4, 2, 3);
        assert_eq!(s.refusal(), None);
        assert!(gels(2, 3, 1).refusal().unwrap().contains("m = 2 is below n = 3"));
        assert!(Gels { ld: [4, 3], ..s }.refusal().unwrap().contains("ldc = 3 is below C's 4 rows"));
        assert!(Gels { stride: [8, 4], batch: 2, ..s }.refusal().unwrap().contains("Cs overlap"));
        assert_eq!(Gels { batch: 2, ..s }.footprints(), [16, 24, 2]);
        assert_eq!(Gels { info: false, nrhs: 0, ..s }.footprints(), [8, 0, 0]);
        assert_eq!(gels(4, 0, 3).footprints(), [0; 3]);
    }
}

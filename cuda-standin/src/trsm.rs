//! The builtin triangular solves (`blas_strsm`, `blas_dtrsm`, `blas_ctrsm`, `blas_ztrsm`) as
//! `kernels.cu` computes them, for the stand-in: one system at a time (a column of `B` on the
//! left, a row on the right), each element through the context's memory, so that an access
//! outside its allocations faults as on a GPU. Written apart from the backend's CPU
//! implementation (`ac-proto`'s `builtin/trsm.rs`), so that a mistake in one shows.

use crate::blas::Real;
use crate::kernels::{u32_arg, u64_arg, Memory, Shape};

/// An element of a solve: a real number, or a complex one as (real, imaginary).
trait Number: Copy {
    /// Bytes of one in memory.
    const WIDTH: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self) -> Vec<u8>;
    fn times(self, o: Self) -> Self;
    /// `self - m x`, the product rounded first.
    fn less(self, m: Self, x: Self) -> Self;
    /// `self / q`; a complex one as `self conj(q) / |q|^2`.
    fn over(self, q: Self) -> Self;
    fn conjugate(self) -> Self;
}

impl<R: Real> Number for R {
    const WIDTH: usize = R::WIDTH;
    fn read(bytes: &[u8]) -> Self {
        R::from_bytes(bytes)
    }
    fn write(self) -> Vec<u8> {
        self.to_bytes()
    }
    fn times(self, o: Self) -> Self {
        self * o
    }
    fn less(self, m: Self, x: Self) -> Self {
        self - m * x
    }
    fn over(self, q: Self) -> Self {
        self / q
    }
    fn conjugate(self) -> Self {
        self
    }
}

/// A complex number: (real part, imaginary part).
#[derive(Clone, Copy)]
struct C<R>(R, R);

impl<R: Real> Number for C<R> {
    const WIDTH: usize = 2 * R::WIDTH;
    fn read(bytes: &[u8]) -> Self {
        C(R::from_bytes(bytes), R::from_bytes(&bytes[R::WIDTH..]))
    }
    fn write(self) -> Vec<u8> {
        let mut bytes = self.0.to_bytes();
        bytes.extend(self.1.to_bytes());
        bytes
    }
    fn times(self, o: Self) -> Self {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
    fn less(self, m: Self, x: Self) -> Self {
        let p = m.times(x);
        C(self.0 - p.0, self.1 - p.1)
    }
    fn over(self, q: Self) -> Self {
        let n = self.times(q.conjugate());
        let d = q.0 * q.0 + q.1 * q.1;
        C(n.0 / d, n.1 / d)
    }
    fn conjugate(self) -> Self {
        C(self.0, -self.1)
    }
}

/// Runs trsm kernel `name` if it is one: `None` outside (not a trsm), `Some(None)` a fault.
pub(crate) fn run(name: &str, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<Option<()>> {
    Some(match name {
        "blas_strsm" => solve::<f32>(args, f32::from_bytes(&args[6]), shape, memory),
        "blas_dtrsm" => solve::<f64>(args, f64::from_bytes(&args[6]), shape, memory),
        "blas_ctrsm" => solve(args, C(f32::from_bytes(&args[6]), f32::from_bytes(&args[14])), shape, memory),
        "blas_ztrsm" => solve(args, C(f64::from_bytes(&args[6]), f64::from_bytes(&args[14])), shape, memory),
        _ => return None,
    })
}

/// `kernels.cu`'s `trsm<T>`: thread `s` solves system `s` by substitution, forward when the
/// matrix it solves with (`op(A)` on the left, its transpose on the right) is lower triangular.
fn solve<T: Number>(args: &[Vec<u8>], alpha: T, shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let [side, uplo, trans, diag] = [0, 1, 2, 3].map(|i| u32_arg(&args[i]));
    let (m, n) = (u32_arg(&args[4]) as u64, u32_arg(&args[5]) as u64);
    let (a, lda, sa) = (u64_arg(&args[7]), u32_arg(&args[8]) as u64, u64_arg(&args[9]));
    let (b, ldb, sb) = (u64_arg(&args[10]), u32_arg(&args[11]) as u64, u64_arg(&args[12]));
    let batch = u32_arg(&args[13]) as u64;
    let left = side == 0;
    let (k, per_batch) = if left { (m, n) } else { (n, m) };
    let lower_m = if left { (uplo == 0) == (trans == 0) } else { (uplo == 0) != (trans == 0) };
    let width = T::WIDTH as u64;
    let load = |memory: &mut dyn Memory, base: u64, index: u64| -> Option<T> {
        Some(T::read(&memory.load_bytes(base.checked_add(index.checked_mul(width)?)?, T::WIDTH)?))
    };
    for s in shape.grid_stride((per_batch * batch) as usize) {
        let s = s as u64;
        let (bi, v) = (s / per_batch, s % per_batch);
        // Element r of this system's vector in B, and M(r, c) in A.
        let at_b = |r: u64| bi * sb + if left { r + v * ldb } else { v + r * ldb };
        let at_a = |r: u64, c: u64| {
            let a_is_m = if left { trans == 0 } else { trans != 0 };
            bi * sa + if a_is_m { r + c * lda } else { c + r * lda }
        };
        let row = |t: u64| if lower_m { t } else { k - 1 - t };
        for t in 0..k {
            let r = row(t);
            let mut acc = alpha.times(load(memory, b, at_b(r))?);
            for u in 0..t {
                let c = row(u);
                let mrc = load(memory, a, at_a(r, c))?;
                let mrc = if trans == 2 { mrc.conjugate() } else { mrc };
                acc = acc.less(mrc, load(memory, b, at_b(c))?);
            }
            if diag == 0 {
                let mrr = load(memory, a, at_a(r, r))?;
                acc = acc.over(if trans == 2 { mrr.conjugate() } else { mrr });
            }
            memory.store_bytes(b.checked_add(at_b(r).checked_mul(width)?)?, &acc.write())?;
        }
    }
    Some(())
}

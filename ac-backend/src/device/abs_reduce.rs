//! BLAS's reductions of magnitudes as the builtin kernels `blas_<s|d|c|z>abs_reduce` compute
//! them (the CUDA shim's `cublas<S|D|Sc|Dz>asum`, `cublasI<s|d|c|z>amax` and `amin` launch
//! them): `(u32 op, u32 n, const T* x, u64 incx, void* out)` over `x[i * incx]`, `i < n`, each
//! element's magnitude `|x|` (`|re| + |im|` for a complex one, as BLAS's) in its own precision:
//!
//! - op 0 (`asum`): their sum, in order from the first, into a real of `T`'s precision;
//! - op 1 (`iamax`), op 2 (`iamin`): the 1-based index of the first element of largest
//!   (smallest) magnitude into an `i32`; 0 when `n` is 0.
//!
//! One thread computes it, in that order, on every device. The CUDA source is in
//! `cuda/kernels.cu`.

use ac_proto::backend::ParamKind::{self, Ptr, U32, U64};
use ac_proto::backend::{ErrorKind, WireError};

use super::lu::Pivot;
use super::{size_arg, DeviceArg, DeviceResult};

/// Every `blas_<t>abs_reduce`'s parameters.
pub const PARAMS: [ParamKind; 5] = [U32, U32, Ptr, U64, Ptr];
/// The pointers: `x` and `out`.
pub const POINTERS: [usize; 2] = [2, 4];

/// What a launch computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    /// The sum of the magnitudes.
    Sum,
    /// The 1-based index of the first largest magnitude.
    Max,
    /// The 1-based index of the first smallest magnitude.
    Min,
}

/// A launch's reduction, length and increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbsReduce {
    /// What it computes.
    pub op: Reduction,
    /// Elements reduced.
    pub n: u64,
    /// Elements from one to the next.
    pub incx: u64,
}

/// Bytes of an element of builtin `name` (`blas_<t>abs_reduce`), and of its real part.
pub fn widths(name: &str) -> [u64; 2] {
    match name.as_bytes().get(5) {
        Some(b's') => [4, 4],
        Some(b'd') => [8, 8],
        Some(b'c') => [8, 4],
        _ => [16, 8],
    }
}

/// The shape of launch `args` of `blas_<t>abs_reduce`.
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<AbsReduce> {
    let op = match size_arg(name, args, 0)? {
        0 => Reduction::Sum,
        1 => Reduction::Max,
        2 => Reduction::Min,
        v => return Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: op {v} (0, 1 or 2)"))),
    };
    Ok(AbsReduce { op, n: size_arg(name, args, 1)?, incx: size_arg(name, args, 3)? })
}

impl AbsReduce {
    /// Elements of `x` touched: up to the last one read.
    pub fn span(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            (self.n - 1).saturating_mul(self.incx).saturating_add(1)
        }
    }

    /// Each pointer argument, the elements touched from it and their bytes.
    pub fn footprints(&self, name: &str) -> Vec<(usize, u64, u64)> {
        let [element, real] = widths(name);
        let out = if self.op == Reduction::Sum { real } else { 4 };
        vec![(POINTERS[0], self.span(), element), (POINTERS[1], 1, out)]
    }
}

/// The result of reducing `x` (the elements from `x`'s pointer, as long as its span): the sum
/// as `f64` (exactly `T`'s precision's value), or the index.
pub fn reduce<T: Pivot>(r: &AbsReduce, x: &[T], sum: impl Fn(f64, f64) -> f64) -> f64 {
    let at = |i: u64| x[(i * r.incx) as usize].magnitude();
    match r.op {
        Reduction::Sum => (0..r.n).fold(0.0, |acc, i| sum(acc, at(i))),
        Reduction::Max | Reduction::Min => {
            let better = |v: f64, best: f64| if r.op == Reduction::Max { v > best } else { v < best };
            let first = (r.n > 0).then(|| (0u64, at(0)));
            let best = (1..r.n).fold(first, |best, i| match best {
                Some((_, m)) if better(at(i), m) => Some((i, at(i))),
                other => other,
            });
            best.map_or(0.0, |(i, _)| (i + 1) as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_first_extremes_of_magnitudes() {
        let x = [1.0f64, -3.0, 2.0, 3.0, -0.5, 9.0];
        let add = |a: f64, b: f64| a + b;
        let r = |op, n, incx| AbsReduce { op, n, incx };
        assert_eq!(reduce(&r(Reduction::Sum, 3, 2), &x, add), 1.0 + 2.0 + 0.5);
        assert_eq!(reduce(&r(Reduction::Max, 4, 1), &x, add), 2.0, "the first of the two 3s");
        assert_eq!(reduce(&r(Reduction::Min, 5, 1), &x, add), 5.0);
        assert_eq!(reduce(&r(Reduction::Max, 0, 1), &x, add), 0.0);
        assert_eq!(r(Reduction::Sum, 3, 2).span(), 5);
    }
}

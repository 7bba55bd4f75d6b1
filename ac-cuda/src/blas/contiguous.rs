//! Vectors a routine cannot read where the program keeps them, handed to it as contiguous
//! copies of the shim's:
//!
//! - strided vectors that a routine must conjugate without transposing, which a gemm cannot:
//!   `her`'s and `her2`'s vectors (and `hpr`'s, `hpr2`'s), and `x` of `trmv`, `trsv`, `tpmv`,
//!   `tpsv` and `tbsv` with `op` C;
//! - vectors BLAS reads backwards: a negative increment puts element `i` of `n` at
//!   `(n - 1 - i) |inc|` from the pointer, which no gemm's leading dimension can say. Every
//!   level-2 routine, `dgmm`, and every level-1 routine of two vectors takes them this way
//!   ([`forwards`], [`in_place`]). A level-1 routine that takes its two vectors' elements in
//!   pairs (dot, axpy, copy, swap, the rotations) pairs the same elements when both are
//!   backwards as when both are read forwards ([`pairwise`]): those need no gathered copy.
//!   (`scal`, `nrm2`, `asum`, `amax` and `amin` do nothing for an increment below 1, as BLAS
//!   does.)
//!
//! Such a vector is gathered into a contiguous copy (one launch of the builtin `blas_copy` on
//! the handle's stream, reading it backwards where its increment is negative), the routine runs
//! on the copy with increment 1, and a copy that the routine wrote is scattered back (one more
//! launch); the gaps between the program's elements are never written.
//!
//! The copy is entered in the program's memory map for the length of the call, so that the
//! routines check and address it as they do the program's own vectors, and leaves it when the
//! call returns (its buffer freed after the work queued before). A graph captured then would
//! hold a copy already gone: a call that gathers is refused while its stream captures. `gemv`'s
//! and `gerc`'s conjugated strided vectors need no copy ([`super::vectors`]).

use std::ffi::c_int;
use std::sync::Arc;

use ac_frontend::KernelArg;
use ac_proto::backend::builtin::VectorCopy;

use super::gemm::{launch, matrix, GemmCall, Precision};
use super::Target;
use crate::error::CuResult;
use crate::graph;
use crate::state::{self, Allocation};

/// A vector of the program's: its address and increment.
type Vector = (u64, c_int);

/// Threads of a `blas_copy` launch's block (a thread an element).
const BLOCK: u32 = 256;

/// Whether a routine with operation `trans` (C is 2) conjugates a vector of increment `inc`
/// that a gemm could not read as a column: one not contiguous, of a complex type.
fn conjugates_strided(precision: Precision, trans: c_int, inc: c_int) -> bool {
    trans == 2 && precision.is_complex() && inc != 1
}

/// Two vectors whose elements a routine takes in pairs (`x_i` with `y_i`: dot, axpy, copy,
/// swap, the rotations): both read backwards pair the same elements as both read forwards, so
/// they are given forwards; otherwise as they are.
pub(super) fn pairwise((x, incx): Vector, (y, incy): Vector) -> (Vector, Vector) {
    match (incx < 0 && incy < 0, incx.checked_neg(), incy.checked_neg()) {
        (true, Some(incx), Some(incy)) => ((x, incx), (y, incy)),
        _ => ((x, incx), (y, incy)),
    }
}

/// Whether a routine with operation `trans` must read its vector of increment `inc` from a
/// contiguous copy: one it conjugates strided ([`conjugates_strided`]), or one read backwards.
pub(super) fn read_through_copy(precision: Precision, trans: c_int, inc: c_int) -> bool {
    conjugates_strided(precision, trans, inc) || inc < 0
}

/// Launches `blas_copy` on the target's stream: `n` elements of `width` bytes from `x` to `y`,
/// each read backwards where its increment is negative.
fn copy(target: Target, n: c_int, width: u64, (x, incx): Vector, (y, incy): Vector) -> CuResult<()> {
    let n = n as u64;
    let at = |(address, inc): Vector| matrix(target, address, VectorCopy::span(n, inc.into()), width);
    let args = [
        KernelArg::U32(n as u32),
        KernelArg::U32(width as u32),
        at((x, incx))?,
        KernelArg::I64(incx.into()),
        at((y, incy))?,
        KernelArg::I64(incy.into()),
    ];
    target.launch("blas_copy", &args, n, BLOCK)
}

/// A buffer of the shim's entered in the program's memory map until dropped.
pub(super) struct Entered {
    device: usize,
    at: u64,
}

impl Entered {
    /// `bytes` on `device`, entered in the map.
    pub(super) fn new(device: usize, bytes: u64) -> CuResult<Self> {
        let shim = state::shim()?;
        let (buffer, at) = shim.block_on(shim.devices[device].acc.alloc_addressed(bytes))?;
        let allocation = Allocation { device, size: bytes, buffer: Arc::new(buffer), variable_of: None, context: None };
        shim.memory.lock().unwrap_or_else(|p| p.into_inner()).insert((device, at), allocation);
        Ok(Entered { device, at })
    }

    /// Its device address.
    pub(super) fn at(&self) -> u64 {
        self.at
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // The buffer goes with its entry: the backend frees it after the work queued before.
        if let Ok(shim) = state::shim() {
            shim.memory.lock().unwrap_or_else(|p| p.into_inner()).remove(&(self.device, self.at));
        }
    }
}

/// A vector of the program's as a routine reads it: itself, or a gathered copy.
pub(super) struct Contiguous {
    n: c_int,
    width: u64,
    vector: Vector,
    copy: Option<Entered>,
}

impl Contiguous {
    /// The program's `n` elements of `width` bytes at `vector` as a contiguous vector on the
    /// target's stream; a strided or backwards one is gathered (refused while the stream
    /// captures: `what` names the call).
    pub(super) unsafe fn gather(target: Target, width: u64, what: &str, n: c_int, vector: Vector) -> CuResult<Self> {
        Self::gathered_if(vector.1 != 1, target, width, what, n, vector)
    }

    /// The program's vector as [`Contiguous::gather`] gives it if `needed`, else as it is.
    pub(super) unsafe fn gathered_if(
        needed: bool,
        target: Target,
        width: u64,
        what: &str,
        n: c_int,
        vector: Vector,
    ) -> CuResult<Self> {
        if !needed || n <= 0 {
            return Ok(Contiguous { n, width, vector, copy: None });
        }
        graph::refuse_if_capturing(target.stream, what)?;
        let entered = Entered::new(target.device, n as u64 * width)?;
        copy(target, n, width, vector, (entered.at, 1))?;
        Ok(Contiguous { n, width, vector, copy: Some(entered) })
    }

    /// The vector a routine reads: the copy, with increment 1, or the program's own.
    pub(super) fn vector(&self) -> Vector {
        self.copy.as_ref().map_or(self.vector, |copy| (copy.at, 1))
    }

    /// Writes the copy back over the program's vector (nothing where it had no copy).
    pub(super) unsafe fn scatter(self, target: Target) -> CuResult<()> {
        match &self.copy {
            Some(entered) => copy(target, self.n, self.width, (entered.at, 1), self.vector),
            None => Ok(()),
        }
    }
}

/// Runs `routine` on the program's `n` elements at `vector`, strided, backwards or contiguous,
/// as a contiguous vector that it may write (gathered and scattered back if not contiguous).
pub(super) unsafe fn in_place(
    target: Target,
    precision: Precision,
    what: &str,
    n: c_int,
    vector: Vector,
    routine: impl FnOnce(Vector) -> CuResult<()>,
) -> CuResult<()> {
    let contiguous = Contiguous::gather(target, precision.bytes() as u64, what, n, vector)?;
    routine(contiguous.vector())?;
    contiguous.scatter(target)
}

/// A vector of a BLAS call: `n` elements of `width` bytes at `vector`, which the routine
/// writes or only reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Along {
    pub n: c_int,
    pub width: u64,
    pub vector: Vector,
    pub written: bool,
}

impl Along {
    /// `n` elements of `precision` that the routine reads.
    pub fn read(precision: Precision, n: c_int, vector: Vector) -> Along {
        Along::of_width(precision.bytes() as u64, n, vector, false)
    }

    /// `n` elements of `precision` that the routine writes (and may read).
    pub fn written(precision: Precision, n: c_int, vector: Vector) -> Along {
        Along::of_width(precision.bytes() as u64, n, vector, true)
    }

    /// `n` elements of `width` bytes (an `Ex` form's binary16 vector, ...).
    pub fn of_width(width: u64, n: c_int, vector: Vector, written: bool) -> Along {
        Along { n, width, vector, written }
    }
}

/// Whether any of a call's vectors is read backwards (a negative increment).
fn any_backwards(vectors: &[Along]) -> bool {
    vectors.iter().any(|v| v.vector.1 < 0)
}

/// Runs `routine` on a call's vectors read forwards: each one BLAS reads backwards gathered
/// into a forward copy (refused while the stream captures: `what` names the call), and the
/// copies of those it writes scattered back once it returns. The others are passed as they are.
pub(super) unsafe fn forwards<const N: usize, R>(
    target: Target,
    what: &str,
    vectors: [Along; N],
    routine: impl FnOnce([Vector; N]) -> CuResult<R>,
) -> CuResult<R> {
    if !any_backwards(&vectors) {
        return routine(vectors.map(|v| v.vector));
    }
    let what = format!("{what} of a vector read backwards");
    let mut copies = Vec::with_capacity(N);
    for v in vectors {
        copies.push(Contiguous::gathered_if(v.vector.1 < 0, target, v.width, &what, v.n, v.vector)?);
    }
    let out = routine(std::array::from_fn(|i| copies[i].vector()))?;
    for (v, copy) in vectors.iter().zip(copies) {
        if v.written {
            copy.scatter(target)?;
        }
    }
    Ok(out)
}

/// Launches, in order, the gemms that `calls` builds from a call's vectors read forwards
/// ([`forwards`]: `what` names the call). With a vector read backwards, the calls are first
/// built from the increments made positive, so that a call cuBLAS refuses, or one that
/// computes nothing, gathers nothing.
pub(super) unsafe fn launch_forwards<const N: usize, C: IntoIterator<Item = GemmCall>>(
    target: Target,
    what: &str,
    vectors: [Along; N],
    calls: impl Fn([(u64, c_int); N]) -> CuResult<C>,
) -> CuResult<()> {
    if any_backwards(&vectors) {
        let forwards_only = vectors.map(|v| (v.vector.0, v.vector.1.saturating_abs()));
        if calls(forwards_only)?.into_iter().next().is_none() {
            return Ok(());
        }
    }
    forwards(target, what, vectors, |vectors| calls(vectors)?.into_iter().try_for_each(|call| launch(target, call)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_complex_strided_vector_under_op_c_needs_a_copy() {
        assert!(conjugates_strided(Precision::ComplexSingle, 2, 3));
        assert!(conjugates_strided(Precision::ComplexDouble, 2, 2));
        // Contiguous, another operation, or a real type (whose C is its T).
        assert!(!conjugates_strided(Precision::ComplexSingle, 2, 1));
        assert!(!conjugates_strided(Precision::ComplexSingle, 1, 3));
        assert!(!conjugates_strided(Precision::Double, 2, 3));
    }

    #[test]
    fn two_vectors_both_backwards_pair_as_both_forwards() {
        assert_eq!(pairwise((0x10, -2), (0x20, -3)), ((0x10, 2), (0x20, 3)));
        // One backwards: no pairing of forward reads gives its pairs.
        assert_eq!(pairwise((0x10, -2), (0x20, 3)), ((0x10, -2), (0x20, 3)));
        assert_eq!(pairwise((0x10, 2), (0x20, -3)), ((0x10, 2), (0x20, -3)));
        assert_eq!(pairwise((0x10, 2), (0x20, 3)), ((0x10, 2), (0x20, 3)));
        // The most negative increment has no positive twin: both stay, and are copied.
        assert_eq!(pairwise((0x10, c_int::MIN), (0x20, -1)), ((0x10, c_int::MIN), (0x20, -1)));
    }

    #[test]
    fn conjugated_strided_or_backwards_vectors_are_read_through_a_copy() {
        assert!(read_through_copy(Precision::ComplexSingle, 2, 3));
        assert!(read_through_copy(Precision::Single, 0, -1));
        assert!(read_through_copy(Precision::ComplexDouble, 2, -1));
        assert!(!read_through_copy(Precision::ComplexSingle, 1, 3));
        assert!(!read_through_copy(Precision::ComplexSingle, 2, 1));
    }

    #[test]
    fn a_call_needs_copies_only_for_vectors_read_backwards() {
        let x = Along::read(Precision::ComplexDouble, 5, (0x10, 3));
        let y = Along::written(Precision::Half, 5, (0x20, 1));
        assert_eq!((x.width, x.written, y.width, y.written), (16, false, 2, true));
        assert!(!any_backwards(&[x, y]));
        assert!(any_backwards(&[x, Along { vector: (0x20, -1), ..y }]));
        // An increment of 0 reads one element n times: not backwards.
        assert!(!any_backwards(&[Along { vector: (0x20, 0), ..y }]));
    }
}

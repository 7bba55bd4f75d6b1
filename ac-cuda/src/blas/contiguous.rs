//! Strided vectors that a routine must conjugate without transposing, which a gemm cannot:
//! `her`'s and `her2`'s vectors (and `hpr`'s, `hpr2`'s), and `x` of `trmv`, `trsv`, `tpmv`,
//! `tpsv` and `tbsv` with `op` C. Such a vector is gathered into a contiguous copy of the shim's
//! (one gemm copying it, on the handle's stream), the routine runs on the copy with increment 1
//! (where a gemm or a solve reads it as a column), and a copy that the routine wrote is scattered
//! back (one more gemm); the gaps between the program's elements are never written.
//!
//! The copy is entered in the program's memory map for the length of the call, so that the
//! routines check and address it as they do the program's own vectors, and leaves it when the
//! call returns (its buffer freed after the work queued before). A graph captured then would
//! hold a copy already gone: a call that gathers is refused while its stream captures. `gemv`'s
//! and `gerc`'s conjugated strided vectors need no copy ([`super::vectors`]).

use std::ffi::c_int;
use std::sync::Arc;

use super::gemm::{launch, GemmCall, Precision, Scalar};
use super::vectors::axpby_call;
use super::Target;
use crate::error::CuResult;
use crate::graph;
use crate::state::{self, Allocation};

/// A vector of the program's: its address and increment.
type Vector = (u64, c_int);

/// Whether a routine with operation `trans` (C is 2) conjugates a vector of increment `inc`
/// that a gemm could not read as a column: one not contiguous, of a complex type.
pub(super) fn conjugates_strided(precision: Precision, trans: c_int, inc: c_int) -> bool {
    trans == 2 && precision.is_complex() && inc != 1
}

/// The gemm copying `n` elements of `x` into `y`, as `copy` does (`y` not read).
pub(super) fn copying(precision: Precision, n: c_int, x: Vector, y: Vector) -> GemmCall {
    axpby_call(precision, n, Scalar::Value(1.0), x, Scalar::Value(0.0), y)
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

/// A vector of the program's as a routine reads it: itself when contiguous, else a gathered
/// copy.
pub(super) struct Contiguous {
    precision: Precision,
    n: c_int,
    vector: Vector,
    copy: Option<Entered>,
}

impl Contiguous {
    /// The program's `n` elements at `vector` as a contiguous vector on the target's stream;
    /// a strided one is gathered (refused while the stream captures: `what` names the call).
    pub(super) unsafe fn gather(
        target: Target,
        precision: Precision,
        what: &str,
        n: c_int,
        vector: Vector,
    ) -> CuResult<Self> {
        if vector.1 == 1 || n <= 0 {
            return Ok(Contiguous { precision, n, vector, copy: None });
        }
        graph::refuse_if_capturing(target.stream, what)?;
        let copy = Entered::new(target.device, n as u64 * precision.bytes() as u64)?;
        launch(target, copying(precision, n, vector, (copy.at, 1)))?;
        Ok(Contiguous { precision, n, vector, copy: Some(copy) })
    }

    /// The vector a routine reads: the copy, with increment 1, or the program's own.
    pub(super) fn vector(&self) -> Vector {
        self.copy.as_ref().map_or(self.vector, |copy| (copy.at, 1))
    }

    /// Writes the copy back over the program's strided vector (nothing for a contiguous one).
    pub(super) unsafe fn scatter(self, target: Target) -> CuResult<()> {
        match &self.copy {
            Some(copy) => launch(target, copying(self.precision, self.n, (copy.at, 1), self.vector)),
            None => Ok(()),
        }
    }
}

/// Runs `routine` on the program's `n` elements at `vector`, strided or not, as a contiguous
/// vector that it may write (gathered and scattered back if strided).
pub(super) unsafe fn in_place(
    target: Target,
    precision: Precision,
    what: &str,
    n: c_int,
    vector: Vector,
    routine: impl FnOnce(Vector) -> CuResult<()>,
) -> CuResult<()> {
    let contiguous = Contiguous::gather(target, precision, what, n, vector)?;
    routine(contiguous.vector())?;
    contiguous.scatter(target)
}

#[cfg(test)]
mod tests {
    use super::super::gemm::Operand;
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
    fn a_copy_reads_one_vector_over_its_increment_into_the_other() {
        let call = copying(Precision::ComplexDouble, 5, (0x1000, 3), (0x2000, 1));
        let shape = super::super::gemm::check(&call).unwrap();
        // A 1 x 5 row of x, 3 apart, times the constant one, into a contiguous row.
        assert_eq!((call.m, call.n, call.k), (1, 5, 1));
        assert_eq!(call.ld, [1, 3, 1]);
        assert_eq!(shape.footprints(), [1, 13, 5]);
        assert!(matches!(call.matrices, [Operand::One, Operand::Memory(0x1000), Operand::Memory(0x2000)]));
    }
}

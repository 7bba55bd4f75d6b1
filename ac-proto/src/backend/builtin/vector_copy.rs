//! BLAS's copy on elements of any type (`blas_copy`): `y_i = x_i` for `i < n`, each vector
//! strided as BLAS strides one. Element `i` of a vector of `n` elements with increment `inc`
//! lies `i inc` elements from its pointer, or, for a negative increment, `(n - 1 - i) |inc|`:
//! BLAS reads such a vector backwards, from its last element, its pointer still its lowest
//! address. The CUDA shim's cuBLAS launches it to give a routine a forward copy of a vector the
//! program passed backwards (or strided where a gemm cannot read it), and to write the copy
//! back.

/// A `blas_copy` launch's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorCopy {
    /// Elements copied.
    pub n: u64,
    /// Bytes of one element: 1, 2, 4, 8 or 16.
    pub width: u64,
    /// From one element of `x` to the next, in elements; negative: `x` read backwards; 0: its
    /// first element read `n` times.
    pub incx: i64,
    /// The same for `y`; never 0 with more than one element (two would be written at once).
    pub incy: i64,
}

/// The element widths a launch may copy.
pub const WIDTHS: [u64; 5] = [1, 2, 4, 8, 16];

impl VectorCopy {
    /// Why a launch of this shape is refused, if it is: an element width not in [`WIDTHS`], or
    /// `incy` 0 over more than one element.
    pub fn refusal(&self) -> Option<String> {
        if !WIDTHS.contains(&self.width) {
            return Some(format!("element width {} (1, 2, 4, 8 or 16 bytes)", self.width));
        }
        if self.incy == 0 && self.n > 1 {
            return Some(format!("incy 0 for {} elements", self.n));
        }
        None
    }

    /// Elements from a vector's pointer to its last one touched, plus one (0 for none).
    pub fn span(n: u64, inc: i64) -> u64 {
        match n {
            0 => 0,
            n => (n - 1).saturating_mul(inc.unsigned_abs()).saturating_add(1),
        }
    }

    /// Where element `i` of a vector of `n` elements lies, in elements from its pointer.
    pub fn index(n: u64, inc: i64, i: u64) -> u64 {
        let step = inc.unsigned_abs();
        if inc < 0 {
            (n - 1 - i) * step
        } else {
            i * step
        }
    }

    /// Elements touched from `x`'s pointer and from `y`'s.
    pub fn spans(&self) -> [u64; 2] {
        [Self::span(self.n, self.incx), Self::span(self.n, self.incy)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_increment_reads_from_the_last_element() {
        // 4 elements 3 apart: forwards at 0, 3, 6, 9; backwards the same places in reverse.
        assert_eq!((0..4).map(|i| VectorCopy::index(4, 3, i)).collect::<Vec<_>>(), [0, 3, 6, 9]);
        assert_eq!((0..4).map(|i| VectorCopy::index(4, -3, i)).collect::<Vec<_>>(), [9, 6, 3, 0]);
        assert_eq!((0..3).map(|i| VectorCopy::index(3, 0, i)).collect::<Vec<_>>(), [0, 0, 0]);
        assert_eq!(VectorCopy::span(4, -3), 10);
        assert_eq!(VectorCopy::span(4, 3), 10);
        assert_eq!(VectorCopy::span(0, -3), 0);
        assert_eq!(VectorCopy::span(5, 0), 1);
        assert_eq!(VectorCopy::span(u64::MAX, i64::MIN), u64::MAX, "saturates");
    }

    #[test]
    fn widths_and_a_repeated_destination_are_refused() {
        let copy = VectorCopy { n: 4, width: 8, incx: -1, incy: 2 };
        assert_eq!(copy.refusal(), None);
        assert_eq!(copy.spans(), [4, 7]);
        assert!(VectorCopy { width: 3, ..copy }.refusal().unwrap().contains("width 3"));
        assert!(VectorCopy { width: 32, ..copy }.refusal().is_some());
        assert!(VectorCopy { incy: 0, ..copy }.refusal().unwrap().contains("incy 0"));
        // One element may be written with any increment; x may repeat its first.
        assert_eq!(VectorCopy { n: 1, incy: 0, ..copy }.refusal(), None);
        assert_eq!(VectorCopy { incx: 0, ..copy }.refusal(), None);
    }
}

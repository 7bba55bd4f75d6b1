//! BLAS's packed triangles as the builtin kernels `blas_<s|d|c|z>tpttr` move them (the CUDA
//! shim's `cublas<S|D|C|Z>tpttr` and `trttp` launch them): `(u32 dir, u32 uplo, u32 n, T* AP,
//! T* A, u32 lda)` over the lower (`uplo` 0) or upper (1) triangle of the `n x n` column-major
//! `A`, the diagonal included. `dir` 0 unpacks `AP` into that triangle of `A` (tpttr; the other
//! triangle is not touched), 1 packs the triangle into `AP` (trttp). `AP` holds the triangle
//! column by column, as BLAS's packed storage: lower `A[i, j]` (`i >= j`) at
//! `AP[i - j + j (2n - j + 1) / 2]`, upper (`i <= j`) at `AP[i + j (j + 1) / 2]`. Elements are
//! moved, never computed. The CUDA source is in `cuda/kernels.cu`.

use ac_proto::backend::ParamKind::{self, Ptr, U32};
use ac_proto::backend::{ErrorKind, WireError};

use super::{size_arg, DeviceArg, DeviceResult};

/// Every `blas_<t>tpttr`'s parameters.
pub const PARAMS: [ParamKind; 6] = [U32, U32, U32, Ptr, Ptr, U32];
/// The pointers: `AP` and `A`.
pub const POINTERS: [usize; 2] = [3, 4];

/// A launch's direction, triangle and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// `AP` into `A` (tpttr), else `A` into `AP` (trttp).
    pub unpack: bool,
    /// The upper triangle, else the lower.
    pub upper: bool,
    /// Order of `A`.
    pub n: u64,
    /// `A`'s leading dimension.
    pub lda: u64,
}

/// Bytes of an element of builtin `name` (`blas_<t>tpttr`).
pub fn width(name: &str) -> u64 {
    match name.as_bytes().get(5) {
        Some(b's') => 4,
        Some(b'd' | b'c') => 8,
        _ => 16,
    }
}

/// The shape of launch `args` of `blas_<t>tpttr`, refused where BLAS refuses it.
pub fn shape(name: &str, args: &[DeviceArg]) -> DeviceResult<Packing> {
    let at = |i| size_arg(name, args, i);
    let (dir, uplo, n, lda) = (at(0)?, at(1)?, at(2)?, at(5)?);
    if dir > 1 || uplo > 1 || lda < n.max(1) {
        let why = format!("`{name}`: dir {dir} (0 or 1), uplo {uplo} (0 or 1), n {n}, lda {lda} (at least n)");
        return Err(WireError::new(ErrorKind::InvalidArgument, why));
    }
    Ok(Packing { unpack: dir == 0, upper: uplo == 1, n, lda })
}

impl Packing {
    /// Elements of `AP`: the triangle's.
    pub fn packed_len(&self) -> u64 {
        self.n.saturating_mul(self.n.saturating_add(1)) / 2
    }

    /// Elements of `A` touched: up to the last column's last row.
    pub fn span(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            (self.n - 1).saturating_mul(self.lda).saturating_add(self.n)
        }
    }

    /// Where column `j`'s part of the triangle starts in `A` and how many rows it has.
    pub fn column(&self, j: u64) -> (u64, u64) {
        if self.upper {
            (j * self.lda, j + 1)
        } else {
            (j * self.lda + j, self.n - j)
        }
    }

    /// Where element `(i, j)` of the triangle lies in `AP`.
    pub fn packed_index(&self, i: u64, j: u64) -> u64 {
        if self.upper {
            i + j * (j + 1) / 2
        } else {
            i - j + j * (2 * self.n - j + 1) / 2
        }
    }

    /// Each pointer argument, the elements touched from it and their bytes.
    pub fn footprints(&self, name: &str) -> Vec<(usize, u64, u64)> {
        vec![(POINTERS[0], self.packed_len(), width(name)), (POINTERS[1], self.span(), width(name))]
    }

    /// Moves the triangle: `ap` into `a` or `a` into `ap` (each from its pointer, as long as
    /// its footprint).
    pub fn run<T: Copy>(&self, ap: &mut [T], a: &mut [T]) {
        for j in 0..self.n {
            let (first, rows) = self.column(j);
            for r in 0..rows {
                let (at, i) = ((first + r) as usize, first + r - j * self.lda);
                let p = self.packed_index(i, j) as usize;
                if self.unpack {
                    a[at] = ap[p];
                } else {
                    ap[p] = a[at];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_triangle_packs_column_by_column_and_unpacks_back() {
        // A 3 x 3, lda 4: element (i, j) holds 10 i + j; the spare row holds -1.
        let a: Vec<i32> = (0..12).map(|e| if e % 4 == 3 { -1 } else { 10 * (e % 4) + e / 4 }).collect();
        let lower = Packing { unpack: false, upper: false, n: 3, lda: 4 };
        let mut ap = vec![0; 6];
        lower.run(&mut ap, &mut a.clone());
        assert_eq!(ap, [0, 10, 20, 11, 21, 22], "lower: columns 0, 1, 2 from the diagonal down");
        let upper = Packing { upper: true, ..lower };
        upper.run(&mut ap, &mut a.clone());
        assert_eq!(ap, [0, 1, 11, 2, 12, 22], "upper: columns 0, 1, 2 down to the diagonal");
        // Unpacking writes the triangle only: the other triangle and the spare row keep 99.
        let mut back = vec![99; 12];
        Packing { unpack: true, ..upper }.run(&mut ap, &mut back);
        assert_eq!(back, [0, 99, 99, 99, 1, 11, 99, 99, 2, 12, 22, 99]);
        assert_eq!((upper.packed_len(), upper.span()), (6, 2 * 4 + 3));
    }
}

//! A gemm with one operand read from a triangle, as the builtin kernels
//! `blas_<s|d|c|z>gemm_tri` compute it: BLAS's symm, hemm and trmm, which the CUDA shim's
//! `cublas<S|D|C|Z>symm`, `cublas<C|Z>hemm` and `cublas<S|D|C|Z>trmm` launch. Parameters:
//! `blas_<t>gemmt`'s ([`super::gemm`]), the last one `u32 form` instead of `fill`: bit 0 the
//! triangle stored (0 lower, 1 upper), bits 1-2 what the matrix is ([`Kind`]), bit 3 the
//! operand (0 `A`, 1 `B`), which must be square. All of `C` is computed, one batch.
//!
//! Only the stored triangle of that operand is read (BLAS: the other may hold anything); its
//! other elements are, as the matrix is: their mirrors (symmetric), their mirrors' conjugates
//! (Hermitian, the diagonal's imaginary parts taken as 0), zeros (triangular; the diagonal ones
//! where unit). `op` applies to the matrix so completed. The CUDA source is `stored` in
//! `cuda/kernels.cu`; here the CPU device completes the operand it read, then multiplies.

use ac_proto::backend::{ErrorKind, WireError};

use super::gemm::{self, Element, Gemm};
use super::{size_arg, DeviceArg, DeviceResult};

/// What the structured operand is, from one triangle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Symmetric (`form` bits 1-2: 0): symm.
    Symmetric,
    /// Hermitian (1): hemm; a real matrix is symmetric.
    Hermitian,
    /// Triangular (2; 3 with a unit diagonal, not read): trmm.
    Triangular {
        /// The diagonal is taken as ones.
        unit: bool,
    },
}

/// The structured operand of a `blas_<t>gemm_tri` launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Structure {
    /// 0 for `A`, 1 for `B`.
    pub operand: usize,
    /// The upper triangle is stored, else the lower.
    pub upper: bool,
    /// What the matrix is.
    pub kind: Kind,
}

/// Whether builtin `name` is a `blas_<t>gemm_tri`.
pub fn is_structured(name: &str) -> bool {
    name.ends_with("gemm_tri")
}

/// The structure of launch `args` of builtin gemm `name` (none but for `blas_<t>gemm_tri`),
/// refused unless its operand is square and the launch is one batch.
pub fn structure(name: &str, args: &[DeviceArg]) -> DeviceResult<Option<Structure>> {
    if !is_structured(name) {
        return Ok(None);
    }
    let at = |i| size_arg(name, args, i);
    let refused = |why: String| Err(WireError::new(ErrorKind::InvalidArgument, format!("`{name}`: {why}")));
    let last = if matches!(name, "blas_cgemm_tri" | "blas_zgemm_tri") { gemm::ZGEMM.len() } else { gemm::DGEMM.len() };
    let form = at(last)?;
    if form > 15 {
        return refused(format!("form {form:#x} (4 bits)"));
    }
    let kind = match (form >> 1) & 3 {
        0 => Kind::Symmetric,
        1 => Kind::Hermitian,
        code => Kind::Triangular { unit: code == 3 },
    };
    let structure = Structure { operand: (form >> 3) as usize, upper: form & 1 == 1, kind };
    let (m, n, k, batch) = (at(2)?, at(3)?, at(4)?, at(16)?);
    let order = if structure.operand == 0 { m } else { n };
    if order != k {
        let which = ["A", "B"][structure.operand];
        return refused(format!("{which} read from a triangle is {order} x {k}: it must be square"));
    }
    if batch > 1 {
        return refused(format!("{batch} batches (one at most)"));
    }
    Ok(Some(structure))
}

impl Structure {
    /// Completes the operand read from the device (`x`, from its pointer), a `k x k` matrix of
    /// leading dimension `ld`, in place: each element outside the stored triangle from the
    /// triangle (or zero), the diagonal as the kind says. Only stored elements are read.
    pub fn complete<T: Element>(&self, x: &mut [T], k: usize, ld: usize) {
        let held = |i: usize, j: usize| if self.upper { i <= j } else { i >= j };
        for j in 0..k {
            for i in 0..k {
                let at = i + j * ld;
                x[at] = match self.kind {
                    Kind::Triangular { unit: true } if i == j => T::one(),
                    Kind::Triangular { .. } if !held(i, j) => T::default(),
                    Kind::Hermitian if i == j => x[at].real(),
                    Kind::Symmetric if !held(i, j) => x[j + i * ld],
                    Kind::Hermitian if !held(i, j) => x[j + i * ld].conj(),
                    _ => x[at],
                };
            }
        }
    }

    /// Completes the structured one of a gemm's operands `a` and `b` (see [`Self::complete`]).
    pub fn complete_operand<T: Element>(&self, g: &Gemm, [a, b]: [&mut [T]; 2]) {
        let x = if self.operand == 0 { a } else { b };
        if g.k > 0 {
            self.complete(x, g.k as usize, g.ld[self.operand] as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::gemm::Complex;
    use crate::device::DeviceMem;
    use ac_proto::backend::KernelArg;

    /// `blas_sgemm_tri` arguments: no transposes, `m x n x k`, leading dimensions as tight.
    fn args(mnk: [u32; 3], batch: u32, form: u32) -> Vec<DeviceArg> {
        let u = |v: u32| DeviceArg::Scalar(KernelArg::U32(v));
        let l = |v: u64| DeviceArg::Scalar(KernelArg::U64(v));
        let f = DeviceArg::Scalar(KernelArg::F32(1.0));
        let p = DeviceArg::Mem { mem: DeviceMem(1), offset: 0, len: 1 << 20 };
        let [m, n, k] = mnk;
        vec![u(0), u(0), u(m), u(n), u(k), f, p, u(m), l(0), p, u(k), l(0), f, p, u(m), l(0), u(batch), u(form)]
    }

    #[test]
    fn forms_are_read_and_refused_where_the_operand_is_not_square() {
        assert_eq!(structure("blas_sgemm", &args([2, 3, 2], 1, 0)).unwrap(), None);
        let upper_unit_b = structure("blas_sgemm_tri", &args([2, 3, 3], 1, 0b1111)).unwrap().unwrap();
        assert_eq!(upper_unit_b, Structure { operand: 1, upper: true, kind: Kind::Triangular { unit: true } });
        let lower_hermitian_a = structure("blas_sgemm_tri", &args([2, 3, 2], 1, 0b0010)).unwrap().unwrap();
        assert_eq!(lower_hermitian_a, Structure { operand: 0, upper: false, kind: Kind::Hermitian });
        for (mnk, batch, form, why) in [
            ([2, 3, 3], 1, 0, "A read from a triangle is 2 x 3"),
            ([2, 3, 2], 1, 8, "B read from a triangle is 3 x 2"),
            ([2, 3, 2], 1, 16, "form 0x10"),
            ([2, 3, 2], 2, 0, "2 batches"),
        ] {
            let e = structure("blas_sgemm_tri", &args(mnk, batch, form)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument);
            assert!(e.message.contains(why), "{}", e.message);
        }
    }

    #[test]
    fn each_kind_completes_its_matrix_from_the_stored_triangle_alone() {
        // A 2 x 2 in a leading dimension of 3; NaN where nothing may be read.
        let nan = f64::NAN;
        let lower = [1.0, 2.0, nan, nan, 4.0, nan];
        let complete = |upper, kind, stored: [f64; 6]| {
            let mut x = stored;
            Structure { operand: 0, upper, kind }.complete(&mut x, 2, 3);
            [x[0], x[1], x[3], x[4]]
        };
        assert_eq!(complete(false, Kind::Symmetric, lower), [1.0, 2.0, 2.0, 4.0]);
        assert_eq!(complete(false, Kind::Triangular { unit: false }, lower), [1.0, 2.0, 0.0, 4.0]);
        let unit_diagonal = [nan, 2.0, nan, nan, nan, nan];
        assert_eq!(complete(false, Kind::Triangular { unit: true }, unit_diagonal), [1.0, 2.0, 0.0, 1.0]);
        let upper = [1.0, nan, nan, 3.0, 4.0, nan];
        assert_eq!(complete(true, Kind::Symmetric, upper), [1.0, 3.0, 3.0, 4.0]);
        assert_eq!(complete(true, Kind::Triangular { unit: false }, upper), [1.0, 0.0, 3.0, 4.0]);
        // Hermitian: the mirror conjugated, the diagonal's imaginary parts dropped.
        let c = |re, im| Complex { re, im };
        let mut h = [c(1.0, 9.0), c(2.0, 5.0), c(nan, nan), c(4.0, -9.0)];
        Structure { operand: 0, upper: false, kind: Kind::Hermitian }.complete(&mut h, 2, 2);
        assert_eq!(h, [c(1.0, 0.0), c(2.0, 5.0), c(2.0, -5.0), c(4.0, 0.0)]);
    }
}

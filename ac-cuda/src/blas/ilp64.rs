//! cuBLAS's ILP64 API (`cublasSgemm_v2_64`, ...: sizes, leading dimensions and increments as
//! `int64_t`), for the functions the shim serves: `ilp64_generated.rs` (by
//! `scripts/gen-library-exports`) has a wrapper for each, which calls the 32-bit form once its
//! sizes fit an `int`. Sizes beyond `INT_MAX` (2^31 - 1) are not served: no launch of the
//! builtin kernels takes more elements than that along a dimension. A negative size is passed
//! on (below `INT_MIN`, as `INT_MIN`), for the 32-bit form to refuse or read as cuBLAS does;
//! a negative increment (a vector read backwards) must fit an `int` as a positive one must.

use std::ffi::c_int;

use super::guard;
use crate::error::{code, Error};

/// `sizes` (each named) as `int`s, or the status of a call (`name`) whose size does not fit
/// one: `CUBLAS_STATUS_NOT_SUPPORTED`, said once on stderr with the size.
pub fn narrow<const N: usize>(name: &str, sizes: [(&str, i64); N]) -> Result<[c_int; N], u32> {
    let mut narrowed = [0; N];
    let mut status = super::status::SUCCESS;
    for (slot, (what, value)) in narrowed.iter_mut().zip(sizes) {
        // An increment's sign says which way its vector is read: not clamped.
        let increment = what.starts_with("inc");
        match c_int::try_from(if increment { value } else { value.max(c_int::MIN.into()) }) {
            Ok(v) => *slot = v,
            Err(_) => {
                let why = format!("{what} = {value}: sizes and increments beyond 2^31 - 1 are not served");
                status = guard(name, || Err(Error::said(code::NOT_SUPPORTED, why)));
                break;
            }
        }
    }
    if status == super::status::SUCCESS {
        Ok(narrowed)
    } else {
        Err(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_fit_an_int_pass_and_others_are_not_served() {
        assert_eq!(narrow("cublasSgemm_v2_64", [("m", 3), ("n", -1)]), Ok([3, -1]), "negatives for cuBLAS to refuse");
        let wide = narrow("cublasSgemm_v2_64", [("m", 3), ("lda", 1 << 31)]);
        assert_eq!(wide, Err(crate::blas::status::NOT_SUPPORTED));
        assert_eq!(narrow("cublasSdot_v2_64", [("n", -(1 << 31))]), Ok([c_int::MIN]));
        assert_eq!(narrow("cublasIsamax_v2_64", [("n", -(1 << 40))]), Ok([c_int::MIN]), "still negative");
        // An increment keeps its magnitude or is not served.
        assert_eq!(narrow("cublasSdot_v2_64", [("n", 2), ("incx", -3)]), Ok([2, -3]));
        let far = narrow("cublasSdot_v2_64", [("n", 2), ("incx", -(1 << 33))]);
        assert_eq!(far, Err(crate::blas::status::NOT_SUPPORTED));
    }
}

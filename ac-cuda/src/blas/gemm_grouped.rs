//! `cublas<S|D>gemmGroupedBatched` and `cublasGemmGroupedBatchedEx` (and their ILP64 forms):
//! groups of `gemmBatched`, group `g`'s `group_size[g]` products sharing its operations, sizes,
//! leading dimensions and scalars (`alpha_array[g]`, `beta_array[g]`, read in the handle's
//! pointer mode); the matrices' addresses are one device array each (`A`, `B`, `C`) over all
//! the groups in order. Every group is checked before anything runs; the arrays are read once,
//! after the stream's work before the call (so the call waits); each group is then a batch as
//! `gemmBatched`'s: one strided launch when its matrices are evenly spaced, else a launch a
//! product.

use std::ffi::{c_int, c_void};

use super::gemm::{self, GemmCall, Operand, Precision, Scalar, Types};
use super::gemm_batched::launch_batches;
use super::gemm_ex::ex_types;
use super::ilp64::narrow;
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// One group's operations, sizes, leading dimensions and count of products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Group {
    trans: [c_int; 2],
    mnk: [c_int; 3],
    ld: [c_int; 3],
    size: c_int,
}

/// The program's host arrays of a grouped call, of `int` (`T` = `c_int`) or `int64_t`.
#[derive(Debug, Clone, Copy)]
struct GroupArrays<T> {
    trans: [*const c_int; 2],
    mnk: [*const T; 3],
    ld: [*const T; 3],
    size: *const T,
}

/// The `count` groups the arrays describe (`name` the call, for a size beyond an `int`: not
/// served), or the call's status.
unsafe fn groups<T: Copy + Into<i64>>(name: &str, count: i64, arrays: GroupArrays<T>) -> Result<Vec<Group>, u32> {
    let [count] = narrow(name, [("group_count", count)])?;
    if count < 0 {
        return Err(guard(name, || Err(Error::said(code::INVALID_VALUE, format!("group count {count}")))));
    }
    let nulls = arrays.trans.iter().any(|p| p.is_null())
        || arrays.mnk.iter().chain(&arrays.ld).chain([&arrays.size]).any(|p| p.is_null());
    if count > 0 && nulls {
        return Err(guard(name, || Err(Error::said(code::INVALID_VALUE, "a null array of a grouped gemm"))));
    }
    (0..count as usize)
        .map(|g| {
            let at = |array: *const T| (*array.add(g)).into();
            let [m, n, k] = arrays.mnk.map(at);
            let [lda, ldb, ldc] = arrays.ld.map(at);
            let sizes = [
                ("m", m),
                ("n", n),
                ("k", k),
                ("lda", lda),
                ("ldb", ldb),
                ("ldc", ldc),
                ("group_size", at(arrays.size)),
            ];
            let [m, n, k, lda, ldb, ldc, size] = narrow(name, sizes)?;
            let trans = arrays.trans.map(|t| *t.add(g));
            Ok(Group { trans, mnk: [m, n, k], ld: [lda, ldb, ldc], size })
        })
        .collect()
}

/// Group `g`'s gemm of `types`, its scalars the `g`th of the arrays `alphas` and `betas` (of
/// the types' scale type), its matrices not yet set.
fn group_call(types: Types, group: Group, g: usize, [alphas, betas]: [*const c_void; 2]) -> GemmCall {
    let scale = types.precision.bytes();
    let scalar = |array: *const c_void| Scalar::At(array.cast::<u8>().wrapping_add(g * scale).cast());
    GemmCall {
        types,
        trans: group.trans,
        m: group.mnk[0],
        n: group.mnk[1],
        k: group.mnk[2],
        alpha: scalar(alphas),
        matrices: [Operand::One; 3],
        ld: group.ld,
        stride: [0; 3],
        beta: scalar(betas),
        batch: 1,
    }
}

/// Runs the groups over the matrices of the device arrays `arrays` (`A`, `B`, `C`).
unsafe fn grouped(
    h: usize,
    types: Types,
    groups: &[Group],
    scalars: [*const c_void; 2],
    arrays: [u64; 3],
) -> CuResult<()> {
    let target = handle(h)?.target();
    let mut total: c_int = 0;
    for (g, &group) in groups.iter().enumerate() {
        if group.size < 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("group {g} of {} products", group.size)));
        }
        gemm::check(&group_call(types, group, g, scalars))?;
        total = total.checked_add(group.size).ok_or_else(|| Error::said(code::NOT_SUPPORTED, "over 2^31 products"))?;
    }
    if total > 0 && scalars.iter().any(|s| s.is_null()) {
        return Err(Error::said(code::INVALID_VALUE, "a null array of alphas or betas"));
    }
    let matrices = target.device_pointers(arrays, total)?;
    let mut first = 0;
    for (g, &group) in groups.iter().enumerate() {
        let end = first + group.size as usize;
        let ours = matrices.each_ref().map(|addresses| addresses[first..end].to_vec());
        launch_batches(target, group_call(types, group, g, scalars), &ours)?;
        first = end;
    }
    Ok(())
}

/// A grouped entry point (`name`): its `count` groups read from `arrays`, then `run` on them
/// under the call's guard; or the status of arrays it cannot read.
unsafe fn entry<T: Copy + Into<i64>>(
    name: &str,
    count: i64,
    arrays: GroupArrays<T>,
    run: impl FnOnce(&[Group]) -> CuResult<()>,
) -> u32 {
    match groups(name, count, arrays) {
        Ok(groups) => guard(name, || run(&groups)),
        Err(status) => status,
    }
}

/// Defines `cublas<S|D>gemmGroupedBatched` (`int` arrays) or its ILP64 form (`int64_t`): `$int`.
macro_rules! typed_grouped {
    ($name:ident, $int:ty, $t:ty, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            transa: *const c_int,
            transb: *const c_int,
            m: *const $int,
            n: *const $int,
            k: *const $int,
            alpha: *const $t,
            a: u64,
            lda: *const $int,
            b: u64,
            ldb: *const $int,
            beta: *const $t,
            c: u64,
            ldc: *const $int,
            group_count: $int,
            group_size: *const $int,
        ) -> u32 {
            let arrays = GroupArrays { trans: [transa, transb], mnk: [m, n, k], ld: [lda, ldb, ldc], size: group_size };
            entry(stringify!($name), group_count.into(), arrays, |groups| {
                grouped(h, Types::uniform($precision), groups, [alpha.cast(), beta.cast()], [a, b, c])
            })
        }
    };
}

typed_grouped!(cublasSgemmGroupedBatched, c_int, f32, Precision::Single);
typed_grouped!(cublasDgemmGroupedBatched, c_int, f64, Precision::Double);
typed_grouped!(cublasSgemmGroupedBatched_64, i64, f32, Precision::Single);
typed_grouped!(cublasDgemmGroupedBatched_64, i64, f64, Precision::Double);

/// Defines `cublasGemmGroupedBatchedEx` (`int` arrays) or its ILP64 form: the types
/// `cublasGemmEx` serves, scalars of their scale type.
macro_rules! grouped_ex {
    ($name:ident, $int:ty) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            transa: *const c_int,
            transb: *const c_int,
            m: *const $int,
            n: *const $int,
            k: *const $int,
            alpha: *const c_void,
            a: u64,
            a_type: c_int,
            lda: *const $int,
            b: u64,
            b_type: c_int,
            ldb: *const $int,
            beta: *const c_void,
            c: u64,
            c_type: c_int,
            ldc: *const $int,
            group_count: $int,
            group_size: *const $int,
            compute: c_int,
        ) -> u32 {
            let arrays = GroupArrays { trans: [transa, transb], mnk: [m, n, k], ld: [lda, ldb, ldc], size: group_size };
            entry(stringify!($name), group_count.into(), arrays, |groups| {
                grouped(h, ex_types([a_type, b_type, c_type], compute)?, groups, [alpha, beta], [a, b, c])
            })
        }
    };
}

grouped_ex!(cublasGemmGroupedBatchedEx, c_int);
grouped_ex!(cublasGemmGroupedBatchedEx_64, i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_read_from_int_and_int64_arrays_alike() {
        let trans = [[0, 1], [2, 0]];
        let (mnk, ld, size) = ([[2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11], [12, 13]], [1, 4]);
        let arrays = GroupArrays {
            trans: trans.each_ref().map(|t| t.as_ptr()),
            mnk: mnk.each_ref().map(|a| a.as_ptr()),
            ld: ld.each_ref().map(|a| a.as_ptr()),
            size: size.as_ptr(),
        };
        let read = unsafe { groups("cublasSgemmGroupedBatched", 2, arrays) }.unwrap();
        assert_eq!(read[1], Group { trans: [1, 0], mnk: [3, 5, 7], ld: [9, 11, 13], size: 4 });
        let wide: [[i64; 2]; 3] = mnk.map(|a| a.map(i64::from));
        let wide_ld: [[i64; 2]; 3] = ld.map(|a| a.map(i64::from));
        let wide_size = [1i64, 4];
        let arrays_64 = GroupArrays {
            trans: arrays.trans,
            mnk: wide.each_ref().map(|a| a.as_ptr()),
            ld: wide_ld.each_ref().map(|a| a.as_ptr()),
            size: wide_size.as_ptr(),
        };
        assert_eq!(unsafe { groups("cublasSgemmGroupedBatched_64", 2, arrays_64) }.unwrap(), read);
        // A size beyond an int is not served; a negative count is wrong.
        let huge = [[1i64 << 31, 1], [1, 1], [1, 1]];
        let beyond = GroupArrays { mnk: huge.each_ref().map(|a| a.as_ptr()), ..arrays_64 };
        assert_eq!(unsafe { groups("x_64", 1, beyond) }.unwrap_err(), super::super::status::NOT_SUPPORTED);
        assert_eq!(unsafe { groups("x", -1, arrays) }.unwrap_err(), super::super::status::INVALID_VALUE);
        // No groups: no arrays read, null or not.
        let null = GroupArrays::<c_int> {
            trans: [std::ptr::null(); 2],
            mnk: [std::ptr::null(); 3],
            ld: [std::ptr::null(); 3],
            size: std::ptr::null(),
        };
        assert_eq!(unsafe { groups("x", 0, null) }.unwrap(), vec![]);
        assert_eq!(unsafe { groups("x", 1, null) }.unwrap_err(), super::super::status::INVALID_VALUE);
    }

    #[test]
    fn each_group_reads_its_own_scalars() {
        let alphas = [1.0f32, 2.0, 3.0];
        let betas = [0.5f64, 0.25];
        let group = Group { trans: [0, 0], mnk: [2, 2, 2], ld: [2, 2, 2], size: 3 };
        let single =
            group_call(Types::uniform(Precision::Single), group, 2, [alphas.as_ptr().cast(), alphas.as_ptr().cast()]);
        assert!(matches!(single.alpha, Scalar::At(p) if p == alphas[2..].as_ptr().cast()));
        let double =
            group_call(Types::uniform(Precision::Double), group, 1, [betas.as_ptr().cast(), betas.as_ptr().cast()]);
        assert!(matches!(double.beta, Scalar::At(p) if p == betas[1..].as_ptr().cast()));
        assert_eq!((double.m, double.n, double.k, double.batch), (2, 2, 2, 1));
    }
}

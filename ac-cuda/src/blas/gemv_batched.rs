//! Batched matrix-vector products, `y_i = alpha op(A_i) x_i + beta y_i` for each `i`:
//! `cublas<S|D|C|Z>gemvStridedBatched` (the operands `stride` elements apart) and
//! `cublas<S|D|C|Z>gemvBatched` (arrays of their addresses in device memory, read back after
//! the stream's work, so the call waits), and their mixed-precision forms, scalars `f32`:
//! `cublasHSHgemv...` (binary16 `A`, `x` and `y`), `HSS` (binary16 `A` and `x`, `f32` `y`),
//! `TST` (bfloat16) and `TSS` (bfloat16 `A` and `x`, `f32` `y`), computed in `f32`.
//!
//! Each is [`super::vectors`]'s gemv as a gemm ([`gemv_call`]), batched: one strided launch
//! (for the pointer arrays, when each array's operands are evenly spaced, else a launch a
//! product). The conjugate transpose into a strided `y` is a batch already (one product an
//! element of `y`), so it is a launch a product. So is a batch whose `x` or `y` is read backwards
//! (a negative increment): each product's vectors are read forwards from copies
//! ([`super::contiguous`]), so such a call is refused while its stream captures a graph.

use std::ffi::{c_int, c_longlong, c_void};

use ac_proto::backend::builtin::GemmElement;

use super::contiguous::{launch_forwards, Along};
use super::gemm::{launch, scalar_parts, GemmCall, Operand, Precision, Scalar, Types};
use super::vectors::{gemv_call, gemv_lengths};
use super::{each_batch, guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// An operand of the batch: its address (or its array's), leading dimension or increment, and
/// stride in elements (0 for an array).
type Operands = [(u64, c_int, c_longlong); 3];

/// The gemm of one product of the batch, its matrices left to set, and which operand (0 `A`,
/// 1 `x`, 2 `y`) each of the gemm's `A`, `B` and `C` is; `None`: nothing to compute.
fn one_product(
    types: Types,
    trans: c_int,
    [m, n]: [c_int; 2],
    [alpha, beta]: [*const c_void; 2],
    [(_, lda, _), (_, incx, _), (_, incy, _)]: Operands,
) -> CuResult<Option<(GemmCall, [usize; 3])>> {
    // Addresses standing for the operands, so that the gemm says where each went.
    let (alpha, beta) = (Scalar::At(alpha), Scalar::At(beta));
    let call = gemv_call(types.precision, trans, [m, n], alpha, (Operand::Memory(1), lda), (2, incx), beta, (3, incy))?;
    let Some(call) = call else { return Ok(None) };
    let roles = call.matrices.map(|operand| match operand {
        Operand::Memory(at) => at as usize - 1,
        _ => unreachable!("gemv_call's operands are the ones given"),
    });
    // Mixed types: A and x of the inputs' type, y of the result's.
    let elements = types.elements.map(|[input, _, output]| roles.map(|r| if r == 2 { output } else { input }));
    Ok(Some((GemmCall { types: Types { elements, ..types }, ..call }, roles)))
}

/// `call` with its scalars read, once: in device memory, a read waits for the stream, which a
/// launch a product would do at each launch.
unsafe fn scalars_read(target: Target, call: GemmCall) -> CuResult<GemmCall> {
    let precision = call.types.precision;
    let alpha = Scalar::Parts(scalar_parts(target, precision, call.alpha)?);
    let beta = Scalar::Parts(scalar_parts(target, precision, call.beta)?);
    Ok(GemmCall { alpha, beta, ..call })
}

/// Launches the product `call` (its operands' roles `roles`) for the batch's product `i` of
/// the operands at `first` (addresses in `roles`' order), each `stride` elements from the
/// last, `count` of them.
unsafe fn launch_products(
    target: Target,
    call: GemmCall,
    first: [u64; 3],
    stride: [c_longlong; 3],
    count: c_int,
) -> CuResult<()> {
    if call.batch == 1 {
        let matrices = first.map(Operand::Memory);
        return launch(target, GemmCall { matrices, stride, batch: count, ..call });
    }
    // Already a batch over y's elements: a launch a product.
    let widths = call.types.widths();
    for i in 0..count as u64 {
        let mut matrices = call.matrices;
        for x in 0..3 {
            let offset = i.wrapping_mul(stride[x] as u64).wrapping_mul(widths[x]);
            matrices[x] = Operand::Memory(first[x].wrapping_add(offset));
        }
        launch(target, GemmCall { matrices, ..call })?;
    }
    Ok(())
}

/// `gemvStridedBatched` of `types`.
unsafe fn strided(
    h: usize,
    types: Types,
    trans: c_int,
    mn: [c_int; 2],
    scalars: [*const c_void; 2],
    operands: Operands,
    count: c_int,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if count < 0 || operands.iter().any(|&(_, _, stride)| stride < 0) {
        return Err(Error::said(code::INVALID_VALUE, format!("batch count {count}, operands {operands:?}")));
    }
    let Some((call, roles)) = one_product(types, trans, mn, scalars, operands)? else { return Ok(()) };
    let call = scalars_read(target, call)?;
    if backwards(operands) {
        let width = by_operand(call.types.widths(), roles);
        // Checked where each product's vectors are found (as launch_products's are).
        let at =
            |i: u64| [0, 1, 2].map(|r| operands[r].0.wrapping_add(i.wrapping_mul(operands[r].2 as u64) * width[r]));
        return products_forwards(target, (call, roles), (types, trans, mn), operands, (0..count as u64).map(at));
    }
    launch_products(target, call, roles.map(|r| operands[r].0), roles.map(|r| operands[r].2), count)
}

/// Whether the batch's `x` or `y` is read backwards (a negative increment).
fn backwards([_, (_, incx, _), (_, incy, _)]: Operands) -> bool {
    incx < 0 || incy < 0
}

/// `values` of the gemm's `A`, `B` and `C` (widths, addresses) put in the order of the batch's
/// operands (`A`, `x`, `y`): the inverse of `roles.map(|r| operands[r])`.
fn by_operand<T: Copy + Default>(values: [T; 3], roles: [usize; 3]) -> [T; 3] {
    let mut out = [T::default(); 3];
    for (gemm_operand, &r) in roles.iter().enumerate() {
        out[r] = values[gemm_operand];
    }
    out
}

/// The batch's products one at a time, each with its vectors read forwards
/// ([`launch_forwards`]), since a vector read backwards has no stride a batched launch takes:
/// `checked` the batch's product (its scalars read, its operands' `roles`), `products` each
/// product's `A`, `x` and `y`.
unsafe fn products_forwards(
    target: Target,
    (checked, roles): (GemmCall, [usize; 3]),
    (types, trans, mn): (Types, c_int, [c_int; 2]),
    [(_, lda, _), (_, incx, _), (_, incy, _)]: Operands,
    products: impl Iterator<Item = [u64; 3]>,
) -> CuResult<()> {
    let width = by_operand(checked.types.widths(), roles);
    let [x_len, y_len] = gemv_lengths(trans, mn);
    for [a, x, y] in products {
        let vectors =
            [Along::of_width(width[1], x_len, (x, incx), false), Along::of_width(width[2], y_len, (y, incy), true)];
        launch_forwards(target, "a batched gemv", vectors, |[x, y]| {
            let operands = [(a, lda, 0), (x.0, x.1, 0), (y.0, y.1, 0)];
            let product = one_product(types, trans, mn, [std::ptr::null(); 2], operands)?;
            Ok(product.map(|(call, roles)| {
                let matrices = roles.map(|r| Operand::Memory(operands[r].0));
                GemmCall { matrices, alpha: checked.alpha, beta: checked.beta, ..call }
            }))
        })?;
    }
    Ok(())
}

/// `gemvBatched` of `types`: the operands are arrays of addresses.
unsafe fn arrays(
    h: usize,
    types: Types,
    trans: c_int,
    mn: [c_int; 2],
    scalars: [*const c_void; 2],
    operands: Operands,
    count: c_int,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if count < 0 {
        return Err(Error::said(code::INVALID_VALUE, format!("batch count {count}")));
    }
    let Some((call, roles)) = one_product(types, trans, mn, scalars, operands)? else { return Ok(()) };
    let call = scalars_read(target, call)?;
    let addresses = target.device_pointers(roles.map(|r| operands[r].0), count)?;
    if backwards(operands) {
        let product = |i: usize| by_operand(addresses.each_ref().map(|a| a[i]), roles);
        return products_forwards(
            target,
            (call, roles),
            (types, trans, mn),
            operands,
            (0..count as usize).map(product),
        );
    }
    if call.batch > 1 {
        for i in 0..addresses[0].len() {
            launch_products(target, call, addresses.each_ref().map(|a| a[i]), [0; 3], 1)?;
        }
        return Ok(());
    }
    each_batch(&addresses, call.types.widths(), |spans, _, batch| {
        let stride = spans.map(|(_, stride)| stride as c_longlong);
        launch_products(target, call, spans.map(|(first, _)| first), stride, batch as c_int)
    })
}

/// The types of a mixed-precision form: A and x `input`, y `output`, scalars `f32`.
const fn mixed(input: GemmElement, output: GemmElement) -> Types {
    Types { precision: Precision::Single, elements: Some([input, input, output]) }
}

/// Defines `cublas<T>gemvStridedBatched` for scalars of type `$t` and `$types`.
macro_rules! strided_entry {
    ($name:ident, $t:ty, $types:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            trans: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            stride_a: c_longlong,
            x: u64,
            incx: c_int,
            stride_x: c_longlong,
            beta: *const $t,
            y: u64,
            incy: c_int,
            stride_y: c_longlong,
            count: c_int,
        ) -> u32 {
            let operands = [(a, lda, stride_a), (x, incx, stride_x), (y, incy, stride_y)];
            let scalars = [alpha.cast(), beta.cast()];
            guard(stringify!($name), || strided(h, $types, trans, [m, n], scalars, operands, count))
        }
    };
}

/// Defines `cublas<T>gemvBatched` for scalars of type `$t` and `$types`.
macro_rules! arrays_entry {
    ($name:ident, $t:ty, $types:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            trans: c_int,
            m: c_int,
            n: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
            count: c_int,
        ) -> u32 {
            let (operands, scalars) = ([(a, lda, 0), (x, incx, 0), (y, incy, 0)], [alpha.cast(), beta.cast()]);
            guard(stringify!($name), || arrays(h, $types, trans, [m, n], scalars, operands, count))
        }
    };
}

strided_entry!(cublasSgemvStridedBatched, f32, Types::uniform(Precision::Single));
strided_entry!(cublasDgemvStridedBatched, f64, Types::uniform(Precision::Double));
strided_entry!(cublasCgemvStridedBatched, [f32; 2], Types::uniform(Precision::ComplexSingle));
strided_entry!(cublasZgemvStridedBatched, [f64; 2], Types::uniform(Precision::ComplexDouble));
strided_entry!(cublasHSHgemvStridedBatched, f32, mixed(GemmElement::F16, GemmElement::F16));
strided_entry!(cublasHSSgemvStridedBatched, f32, mixed(GemmElement::F16, GemmElement::F32));
strided_entry!(cublasTSTgemvStridedBatched, f32, mixed(GemmElement::Bf16, GemmElement::Bf16));
strided_entry!(cublasTSSgemvStridedBatched, f32, mixed(GemmElement::Bf16, GemmElement::F32));
arrays_entry!(cublasSgemvBatched, f32, Types::uniform(Precision::Single));
arrays_entry!(cublasDgemvBatched, f64, Types::uniform(Precision::Double));
arrays_entry!(cublasCgemvBatched, [f32; 2], Types::uniform(Precision::ComplexSingle));
arrays_entry!(cublasZgemvBatched, [f64; 2], Types::uniform(Precision::ComplexDouble));
arrays_entry!(cublasHSHgemvBatched, f32, mixed(GemmElement::F16, GemmElement::F16));
arrays_entry!(cublasHSSgemvBatched, f32, mixed(GemmElement::F16, GemmElement::F32));
arrays_entry!(cublasTSTgemvBatched, f32, mixed(GemmElement::Bf16, GemmElement::Bf16));
arrays_entry!(cublasTSSgemvBatched, f32, mixed(GemmElement::Bf16, GemmElement::F32));

#[cfg(test)]
mod tests {
    use super::super::gemm::check;
    use super::*;

    fn roles_of(types: Types, trans: c_int, incy: c_int) -> (GemmCall, [usize; 3]) {
        let operands = [(0, 16, 0), (0, 2, 0), (0, incy, 0)];
        one_product(types, trans, [13, 9], [std::ptr::null(); 2], operands).unwrap().expect("a product")
    }

    #[test]
    fn each_operand_is_found_where_gemv_put_it() {
        // N and T: y^T = x^T op(A)^T, so x is the gemm's A and A its B.
        assert_eq!(roles_of(Types::uniform(Precision::Double), 0, 3).1, [1, 0, 2]);
        // C into a contiguous y: y = A^H x.
        assert_eq!(roles_of(Types::uniform(Precision::ComplexSingle), 2, 1).1, [0, 1, 2]);
        // C into a strided y: a batch over y's elements already.
        let (call, roles) = roles_of(Types::uniform(Precision::ComplexSingle), 2, 3);
        assert_eq!((roles, call.batch), ([0, 1, 2], 9));
    }

    #[test]
    fn widths_follow_each_operand_through_the_gemms_roles() {
        // N: the gemm's A is x, its B is A, its C is y.
        let (call, roles) = roles_of(mixed(GemmElement::F16, GemmElement::F32), 0, 1);
        assert_eq!(roles, [1, 0, 2]);
        assert_eq!(by_operand(call.types.widths(), roles), [2, 2, 4]);
        assert_eq!(by_operand([8, 16, 4], [1, 0, 2]), [16, 8, 4]);
        // It undoes the gemm's order for any roles (of addresses too), not only for a swap.
        let operands = [0xa0_u64, 0xb0, 0xc0];
        for roles in [[1, 2, 0], [2, 0, 1], [0, 1, 2]] {
            assert_eq!(by_operand(roles.map(|r| operands[r]), roles), operands, "{roles:?}");
        }
        assert!(backwards([(0, 16, 0), (0, -1, 0), (0, 1, 0)]) && !backwards([(0, 16, 0), (0, 2, 0), (0, 1, 0)]));
    }

    #[test]
    fn mixed_types_follow_their_operands() {
        let (call, _) = roles_of(mixed(GemmElement::F16, GemmElement::F32), 1, 1);
        assert_eq!(call.types.elements, Some([GemmElement::F16, GemmElement::F16, GemmElement::F32]));
        assert_eq!(call.types.widths(), [2, 2, 4]);
        // The batch's strides count each operand's own elements.
        let batched = GemmCall { stride: [2, 144, 9], batch: 4, ..call };
        assert_eq!(check(&batched).unwrap().footprints(), [3 * 2 + 25, 3 * 144 + 8 * 16 + 13, 3 * 9 + 9]);
    }
}

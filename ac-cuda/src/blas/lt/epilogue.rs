//! cuBLASLt's epilogues: what each `cublasLtEpilogue_t` asks of a matmul ([`decode`]), checked
//! against the descriptor's bias and auxiliary attributes ([`plan`]), and run after the product
//! ([`run`]), each step a launch:
//!
//! - a bias added to every column (`BIAS` and the forms with `_BIAS`): a gemm of the bias
//!   column by a row of ones, accumulated into D;
//! - an elementwise op on D (the builtin `blas_epilogue`): ReLU or GELU, and for training the
//!   forms that keep an auxiliary matrix, ReLU's mask of where its result is positive
//!   (`RELU_AUX`, `RELU_AUX_BIAS`) or GELU's input (`GELU_AUX`, `GELU_AUX_BIAS`), and the backward
//!   pass's gradients that read it back (`DRELU`, `DGELU`): D times the function's slope there;
//! - a bias gradient written to the bias pointer: the sums of D's rows after the gradient
//!   (`DRELU_BGRAD`, `DGELU_BGRAD`), of `op(A)`'s rows (`BGRADA`, a bias of D's rows) or of
//!   `op(B)`'s columns (`BGRADB`, a bias of D's columns), each a gemm by a column of ones.
//!
//! On `f64` matrices too (computed in `f64`); on half precision, each step rounds D (or the
//! bias gradient) to its type, where NVIDIA's rounds once.

use std::ffi::c_int;

use ac_frontend::KernelArg;
use ac_proto::backend::builtin::{Aux, Epilogue, EpilogueElement, EpilogueOp, GemmElement};

use super::super::gemm::{launch, matrix, GemmCall, Operand, Precision, Scalar, Types};
use super::super::Target;
use super::{not_served, Layout, MatmulDesc};
use crate::builtins::builtins;
use crate::error::{code, CuResult, Error};

/// `cublasLtEpilogue_t`'s bits: the codes are their sums (`RELU_AUX_BIAS` = 2 + 4 + 128, ...).
pub(super) const DEFAULT: u32 = 1;
pub(super) const RELU: u32 = 2;
pub(super) const BIAS: u32 = 4;
const DRELU: u32 = 8;
const BGRAD: u32 = 16;
pub(super) const GELU: u32 = 32;
const DGELU: u32 = 64;
const AUX: u32 = 128;
const BGRADA: u32 = 256;
const BGRADB: u32 = 512;

/// Every epilogue code served, with what it asks.
const SERVED: [(u32, Option<BiasUse>, Option<EpilogueOp>); 16] = [
    (DEFAULT, None, None),
    (BIAS, Some(BiasUse::Add), None),
    (RELU, None, Some(EpilogueOp::Relu)),
    (RELU | BIAS, Some(BiasUse::Add), Some(EpilogueOp::Relu)),
    (RELU | AUX, None, Some(EpilogueOp::ReluMask)),
    (RELU | AUX | BIAS, Some(BiasUse::Add), Some(EpilogueOp::ReluMask)),
    (DRELU | AUX, None, Some(EpilogueOp::ReluGradient)),
    (DRELU | AUX | BGRAD, Some(BiasUse::GradientOfD), Some(EpilogueOp::ReluGradient)),
    (GELU, None, Some(EpilogueOp::Gelu)),
    (GELU | BIAS, Some(BiasUse::Add), Some(EpilogueOp::Gelu)),
    (GELU | AUX, None, Some(EpilogueOp::GeluInput)),
    (GELU | AUX | BIAS, Some(BiasUse::Add), Some(EpilogueOp::GeluInput)),
    (DGELU | AUX, None, Some(EpilogueOp::GeluGradient)),
    (DGELU | AUX | BGRAD, Some(BiasUse::GradientOfD), Some(EpilogueOp::GeluGradient)),
    (BGRADA, Some(BiasUse::GradientOfA), None),
    (BGRADB, Some(BiasUse::GradientOfB), None),
];

/// The epilogues an algorithm's capability names (`CUBLASLT_ALGO_CAP_EPILOGUE_MASK`): every bit
/// of a served code.
pub(super) const CAPABILITY: u32 = DEFAULT | RELU | BIAS | DRELU | BGRAD | GELU | DGELU | AUX | BGRADA | BGRADB;

/// What an epilogue does with the descriptor's bias pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BiasUse {
    /// Adds the vector (D's rows long) to every column of D.
    Add,
    /// Writes the sums of D's rows, after the elementwise op.
    GradientOfD,
    /// Writes the sums of `op(A)`'s rows (D's rows long).
    GradientOfA,
    /// Writes the sums of `op(B)`'s columns (D's columns long).
    GradientOfB,
}

/// What epilogue `code` asks: a use of the bias, and an elementwise op on D; `None`: not served.
pub(super) fn decode(code: u32) -> Option<(Option<BiasUse>, Option<EpilogueOp>)> {
    SERVED.iter().find(|(served, ..)| *served == code).map(|&(_, bias, op)| (bias, op))
}

/// A matmul's product as its epilogue reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Product {
    /// The compute type, and the matrices' types (A, B, D) where they are not all of it.
    pub types: Types,
    pub trans: [c_int; 2],
    pub mnk: [c_int; 3],
    /// Leading dimensions of A, B, D.
    pub ld: [c_int; 3],
    /// Batch offsets of A, B, C, D.
    pub offsets: [i64; 4],
    pub batch: c_int,
}

impl Product {
    /// D's element type, as `blas_epilogue` codes it.
    fn d_element(&self) -> EpilogueElement {
        match self.types.elements {
            Some([.., d]) => EpilogueElement::Single(d),
            None if self.types.precision == Precision::Double => EpilogueElement::Double,
            None => EpilogueElement::Single(GemmElement::F32),
        }
    }
}

/// An auxiliary matrix: its address, leading dimension and batch stride (in its elements: bits
/// for a mask).
pub(super) type AuxMatrix = (u64, u64, u64);

/// A matmul's epilogue, planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Planned {
    /// The bias vector (its address and batch stride) and what is done with it.
    pub bias: Option<(BiasUse, u64, i64)>,
    /// The elementwise op on D, and the auxiliary matrix (address, leading dimension and batch
    /// stride) where it keeps or reads one.
    pub op: Option<(EpilogueOp, Option<AuxMatrix>)>,
}

/// Refused as cuBLASLt refuses it, with why.
fn invalid<T>(why: String) -> CuResult<T> {
    Err(Error::said(code::INVALID_VALUE, why))
}

/// Plans `desc`'s epilogue after `product`, D's layout `d`: refused where cuBLASLt refuses it
/// (`INVALID_VALUE`: a pointer it needs is null, an auxiliary matrix not as its documentation
/// asks) or where the shim cannot run it (`NOT_SUPPORTED`).
pub(super) fn plan(desc: &MatmulDesc, d: &Layout, product: &Product) -> CuResult<Planned> {
    let Some((bias_use, op)) = decode(desc.epilogue) else {
        return not_served(format!("epilogue {} (none of cuBLASLt's 16)", desc.epilogue));
    };
    let bias = match bias_use {
        None => None,
        Some(_) if desc.bias == 0 => {
            return invalid(format!("epilogue {} uses a bias, and there is no bias pointer", desc.epilogue))
        }
        Some(_) if desc.bias_type != -1 && desc.bias_type as u32 != d.data_type => {
            return not_served(format!("a bias of type {} for D of type {}", desc.bias_type, d.data_type))
        }
        Some(bias_use) => Some((bias_use, desc.bias, desc.bias_batch_stride)),
    };
    if let Some((of @ (BiasUse::GradientOfA | BiasUse::GradientOfB | BiasUse::GradientOfD), _, stride)) = bias {
        // Each batch's gradient is written: they may not overlap (checked before the product
        // overwrites D, as the gradient's gemm would refuse them only after).
        let len = i64::from(if of == BiasUse::GradientOfB { product.mnk[1] } else { product.mnk[0] });
        if product.batch > 1 && stride < len {
            let why = format!("epilogue {}: bias gradients {stride} apart overlap ({len} long)", desc.epilogue);
            return invalid(why);
        }
    }
    let Some(op) = op else { return Ok(Planned { bias, op: None }) };
    if d.batch_offset < 0 && product.batch > 1 {
        return not_served(format!("epilogue {} over D's negative batch offset {}", desc.epilogue, d.batch_offset));
    }
    let aux = match op.aux() {
        Aux::Unused => None,
        aux => Some(aux_matrix(desc, d, aux, product)?),
    };
    let shape = elementwise(product, op, aux);
    if let Some(why) = shape.refusal() {
        return invalid(format!("epilogue {}: {why}", desc.epilogue));
    }
    Ok(Planned { bias, op: Some((op, aux)) })
}

/// The auxiliary matrix (address, leading dimension, batch stride) of an epilogue that keeps
/// or reads one as `aux`, checked as cuBLASLt documents it: a mask's leading dimension and
/// batch stride multiples of 128 bits, an input's of 8 elements, each at least D's rows.
fn aux_matrix(desc: &MatmulDesc, d: &Layout, aux: Aux, product: &Product) -> CuResult<AuxMatrix> {
    let epilogue = desc.epilogue;
    if desc.aux == 0 {
        return invalid(format!("epilogue {epilogue} uses an auxiliary matrix, and there is no pointer to it"));
    }
    // (A mask is bits: its type is not read.)
    if aux == Aux::Input && desc.aux_type != -1 && desc.aux_type as u32 != d.data_type {
        return not_served(format!("an auxiliary matrix of type {} for D of type {}", desc.aux_type, d.data_type));
    }
    let multiple = if aux == Aux::Mask { 128 } else { 8 };
    let rows = i64::from(product.mnk[0]);
    let (ld, stride) = (desc.aux_ld, if product.batch > 1 { desc.aux_batch_stride } else { 0 });
    if ld < rows.max(1) || ld % multiple != 0 || stride < 0 || stride % multiple != 0 {
        let why = format!(
            "epilogue {epilogue}: the auxiliary matrix's leading dimension {ld} and batch stride {stride} must be \
             multiples of {multiple}, the first at least D's {rows} rows"
        );
        return invalid(why);
    }
    Ok((desc.aux, ld as u64, stride as u64))
}

/// The `blas_epilogue` launch of `op` on `product`'s D, its auxiliary matrix `aux`.
fn elementwise(product: &Product, op: EpilogueOp, aux: Option<AuxMatrix>) -> Epilogue {
    let [m, n, _] = product.mnk.map(|v| v as u64);
    let (ld, stride, batch) = (product.ld[2] as u64, product.offsets[3] as u64, product.batch as u64);
    let (_, aux_ld, aux_stride) = aux.unwrap_or_default();
    Epilogue { op, m, n, ld, stride, batch, element: product.d_element(), aux_ld, aux_stride }
}

/// Runs the epilogue `planned` after `product` (D already computed): the bias added or the
/// input's bias gradient, the elementwise op, then D's bias gradient.
pub(super) unsafe fn run(target: Target, product: &Product, planned: &Planned, [a, b, d]: [u64; 3]) -> CuResult<()> {
    let [m, n, _] = product.mnk;
    match planned.bias {
        Some((BiasUse::Add, bias, stride)) if m > 0 && n > 0 => add_bias(target, product, bias, stride, d)?,
        Some((of @ (BiasUse::GradientOfA | BiasUse::GradientOfB), bias, stride)) => {
            sums(target, product, of, [a, b, d], (bias, stride))?
        }
        _ => {}
    }
    if let Some((op, aux)) = planned.op {
        apply(target, &elementwise(product, op, aux), d, aux.map(|(address, ..)| address))?;
    }
    match planned.bias {
        Some((BiasUse::GradientOfD, bias, stride)) => {
            sums(target, product, BiasUse::GradientOfD, [a, b, d], (bias, stride))
        }
        _ => Ok(()),
    }
}

/// A row or column of `len` ones, `f64` for `f64` matrices, else `f32`.
fn ones(target: Target, product: &Product, len: c_int) -> CuResult<Operand> {
    let double = by_ones_precision(product) == Precision::Double;
    Ok(Operand::Slot(builtins(target.device)?.ones(double, len.max(0) as usize)?))
}

/// The precision of a gemm by ones: `f64` for `f64` matrices, else `f32` (the ones `f32`).
fn by_ones_precision(product: &Product) -> Precision {
    if product.types.precision == Precision::Double {
        Precision::Double
    } else {
        Precision::Single
    }
}

/// D += the bias column, in every column of every batch: the bias (m x 1, D's type) times a row
/// of ones (1 x n).
unsafe fn add_bias(target: Target, product: &Product, bias: u64, bias_stride: i64, d: u64) -> CuResult<()> {
    let [m, n, _] = product.mnk;
    let call = GemmCall {
        types: Types {
            precision: by_ones_precision(product),
            elements: product.types.elements.map(|[.., d]| [d, GemmElement::F32, d]),
        },
        trans: [0, 0],
        m,
        n,
        k: 1,
        alpha: Scalar::Value(1.0),
        matrices: [Operand::Memory(bias), ones(target, product, n)?, Operand::Memory(d)],
        ld: [m, 1, product.ld[2]],
        stride: [bias_stride, 0, product.offsets[3]],
        beta: Scalar::Value(1.0),
        batch: product.batch,
    };
    launch(target, call)
}

/// What bias gradient `of` sums: which of `product`'s matrices (0 A, 1 B, 2 D), its rows and
/// `k` as read, and how it is read; `None` for a bias added.
fn summed(product: &Product, of: BiasUse) -> Option<(usize, [c_int; 2], c_int)> {
    let [m, n, k] = product.mnk;
    match of {
        BiasUse::Add => None,
        BiasUse::GradientOfA => Some((0, [m, k], product.trans[0])),
        // op(B)'s columns are the rows of its other reading (a real matrix: T and C alike).
        BiasUse::GradientOfB => Some((1, [n, k], c_int::from(product.trans[1] == 0))),
        BiasUse::GradientOfD => Some((2, [m, n], 0)),
    }
}

/// The gemm of a bias gradient: `bias = X ones`, the sums over `k` of the rows of `X` (at `x`,
/// the matrix [`summed`] names, read as it says) times `ones`, into the bias (D's type,
/// `bias_stride` apart), every batch.
fn sums_call(
    product: &Product,
    (which, [rows, k], trans): (usize, [c_int; 2], c_int),
    x: u64,
    ones: Operand,
    (bias, bias_stride): (u64, i64),
) -> GemmCall {
    // D's leading dimension and batch offset are the third and fourth of their lists.
    let (ld, stride) = (product.ld[which], product.offsets[if which == 2 { 3 } else { which }]);
    GemmCall {
        types: Types {
            precision: by_ones_precision(product),
            elements: product.types.elements.map(|types| [types[which], GemmElement::F32, types[2]]),
        },
        trans: [trans, 0],
        m: rows,
        n: 1,
        k,
        alpha: Scalar::Value(1.0),
        matrices: [Operand::Memory(x), ones, Operand::Memory(bias)],
        ld: [ld, k.max(1), rows.max(1)],
        stride: [stride, 0, bias_stride],
        beta: Scalar::Value(0.0),
        batch: product.batch,
    }
}

/// Launches bias gradient `of` of the product of `matrices` (A, B, D).
unsafe fn sums(target: Target, product: &Product, of: BiasUse, matrices: [u64; 3], bias: (u64, i64)) -> CuResult<()> {
    let Some(sum @ (which, [_, k], _)) = summed(product, of) else { return Ok(()) };
    let call = sums_call(product, sum, matrices[which], ones(target, product, k)?, bias);
    launch(target, call)
}

/// Launches the builtin kernel for `e` ([`kernel_of`]) on D at `d`, its auxiliary matrix at
/// `aux`.
fn apply(target: Target, e: &Epilogue, d: u64, aux: Option<u64>) -> CuResult<()> {
    if e.is_empty() {
        return Ok(());
    }
    let d = matrix(target, d, e.span(), e.element.bytes())?;
    let aux = match aux {
        Some(address) => Some(matrix(target, address, e.aux_span(), e.aux_width())?),
        None => None,
    };
    let (name, args) = kernel_of(e, d, aux);
    target.launch(name, &args, e.m.saturating_mul(e.n).saturating_mul(e.batch), 256)
}

/// The builtin kernel that runs `e`, and its arguments (D's pointer `d`, the auxiliary
/// matrix's `aux`): `blas_activation` for ReLU or GELU alone on `f32` or half-precision D,
/// which backends from before `blas_epilogue` serve too (so a shim upgraded before its GPU
/// hosts keeps the activations it ran), else `blas_epilogue`, D standing in for a missing
/// auxiliary matrix (which it does not touch).
fn kernel_of(e: &Epilogue, d: KernelArg, aux: Option<KernelArg>) -> (&'static str, Vec<KernelArg>) {
    let (u, w) = (|v: u64| KernelArg::U32(v as u32), KernelArg::U64);
    let mut args =
        vec![u(e.op.code().into()), u(e.m), u(e.n), d, u(e.ld), w(e.stride), u(e.batch), u(e.element.code().into())];
    if let (EpilogueOp::Relu | EpilogueOp::Gelu, EpilogueElement::Single(_)) = (e.op, e.element) {
        return ("blas_activation", args);
    }
    args.extend([aux.unwrap_or(d), w(e.aux_ld), w(e.aux_stride)]);
    ("blas_epilogue", args)
}

#[cfg(test)]
mod tests {
    use super::super::{layout, matmul_desc};
    use super::*;

    /// f32 D (or `data_type`'s) 20 x 6, ld 24, two batches 200 apart, of a product with k 5.
    fn product(data_type: u32) -> (Layout, Product) {
        let d = Layout { batch_count: 2, batch_offset: 200, ..layout(data_type, 20, 6, 24) };
        let precision = if data_type == 1 { Precision::Double } else { Precision::Single };
        let types = Types { precision, elements: None };
        // C's batch offset is not D's, so that reading C's for D's shows.
        let offsets = [100, 30, 150, 200];
        (d, Product { types, trans: [0, 0], mnk: [20, 6, 5], ld: [20, 5, 24], offsets, batch: 2 })
    }

    fn planned(epilogue: u32, change: impl FnOnce(&mut MatmulDesc)) -> CuResult<Planned> {
        let (d, p) = product(0);
        let mut desc = MatmulDesc {
            epilogue,
            bias: 0x1000,
            bias_batch_stride: 20,
            aux: 0x8000,
            aux_ld: 128,
            aux_batch_stride: 768,
            ..matmul_desc(68, 0)
        };
        change(&mut desc);
        plan(&desc, &d, &p)
    }

    #[test]
    fn each_of_cublaslts_epilogues_is_decoded() {
        use BiasUse::*;
        use EpilogueOp::*;
        let codes: Vec<_> = SERVED.iter().map(|(code, ..)| *code).collect();
        assert_eq!(codes, [1, 4, 2, 6, 130, 134, 136, 152, 32, 36, 160, 164, 192, 208, 256, 512]);
        assert_eq!(decode(134), Some((Some(Add), Some(ReluMask))));
        assert_eq!(decode(152), Some((Some(GradientOfD), Some(ReluGradient))));
        assert_eq!(decode(164), Some((Some(Add), Some(GeluInput))));
        assert_eq!(decode(192), Some((None, Some(GeluGradient))));
        assert_eq!((decode(256), decode(512)), (Some((Some(GradientOfA), None)), Some((Some(GradientOfB), None))));
        // Bits that make no epilogue: DRELU without AUX, BGRAD alone, two activations.
        for code in [8, 16, 34, 3, 1024] {
            assert_eq!(decode(code), None, "{code}");
        }
        assert_eq!(CAPABILITY, SERVED.iter().fold(0, |all, (code, ..)| all | code));
    }

    #[test]
    fn auxiliary_matrices_are_checked_as_cublaslt_documents_them() {
        let mask = planned(134, |_| {}).unwrap();
        assert_eq!(mask.op, Some((EpilogueOp::ReluMask, Some((0x8000, 128, 768)))));
        assert_eq!(mask.bias, Some((BiasUse::Add, 0x1000, 20)));
        let input = planned(160, |d| (d.aux_ld, d.aux_batch_stride) = (24, 160)).unwrap();
        assert_eq!(input.op, Some((EpilogueOp::GeluInput, Some((0x8000, 24, 160)))));
        let refused = |epilogue, change: fn(&mut MatmulDesc)| planned(epilogue, change).unwrap_err().code();
        // No pointer; a mask's leading dimension or stride not a multiple of 128 bits; an input's
        // leading dimension below D's rows or not a multiple of 8; a negative stride.
        assert_eq!(refused(136, |d| d.aux = 0), code::INVALID_VALUE);
        assert_eq!(refused(130, |d| d.aux_ld = 64), code::INVALID_VALUE);
        assert_eq!(refused(130, |d| d.aux_batch_stride = 700), code::INVALID_VALUE);
        assert_eq!(refused(192, |d| d.aux_ld = 16), code::INVALID_VALUE);
        assert_eq!(refused(192, |d| d.aux_ld = 20), code::INVALID_VALUE);
        assert_eq!(refused(208, |d| d.aux_batch_stride = -768), code::INVALID_VALUE);
        // Input batches that overlap: the shape's own refusal.
        assert_eq!(refused(160, |d| (d.aux_ld, d.aux_batch_stride) = (24, 24)), code::INVALID_VALUE);
        // An auxiliary matrix of another type than D's: not served; D's own, named, is; a mask's
        // type is not read.
        assert_eq!(refused(160, |d| d.aux_type = 2), code::NOT_SUPPORTED);
        assert!(planned(130, |d| d.aux_type = 2).is_ok());
        // A gradient reads one auxiliary matrix for every batch (stride 0, cuBLASLt's default).
        assert!(planned(136, |d| d.aux_batch_stride = 0).is_ok());
        assert!(planned(192, |d| (d.aux_ld, d.aux_batch_stride) = (24, 0)).is_ok());
        assert!(planned(160, |d| (d.aux_type, d.aux_ld) = (0, 24)).is_ok());
        // Epilogues without one ignore its attributes.
        assert_eq!(planned(2, |d| d.aux_ld = 3).unwrap().op, Some((EpilogueOp::Relu, None)));
    }

    #[test]
    fn bias_gradients_sum_their_matrix_as_it_is_read() {
        // Binary16 A, bfloat16 B, binary16 D (types A, B, D), A transposed, B not.
        let (_, mut p) = product(0);
        p.types.elements = Some([GemmElement::F16, GemmElement::Bf16, GemmElement::F16]);
        p.trans = [1, 0];
        let call = |p: &Product, of| sums_call(p, summed(p, of).unwrap(), 0xa0, Operand::Memory(0x1), (0xb0, 7));
        // BGRADA: op(A) (20 x 5) as the gemm reads it, A's ld and offset, A's type.
        let a = call(&p, BiasUse::GradientOfA);
        assert_eq!((a.trans, a.m, a.k, a.ld, a.stride), ([1, 0], 20, 5, [20, 5, 20], [100, 0, 7]));
        assert_eq!(a.types.elements, Some([GemmElement::F16, GemmElement::F32, GemmElement::F16]));
        // BGRADB: op(B)'s columns (6 of 5) are the rows of B read transposed, as stored.
        let b = call(&p, BiasUse::GradientOfB);
        assert_eq!((b.trans, b.m, b.k, b.ld, b.stride), ([1, 0], 6, 5, [5, 5, 6], [30, 0, 7]));
        assert_eq!(b.types.elements, Some([GemmElement::Bf16, GemmElement::F32, GemmElement::F16]));
        p.trans = [1, 1];
        assert_eq!(call(&p, BiasUse::GradientOfB).trans, [0, 0]);
        // D's rows, summed over its 6 columns, at D's ld and batch offset (the fourth of four).
        let d = call(&p, BiasUse::GradientOfD);
        assert_eq!((d.trans, d.m, d.k, d.ld, d.stride, d.batch), ([0, 0], 20, 6, [24, 6, 20], [200, 0, 7], 2));
        assert!(matches!(d.matrices, [Operand::Memory(0xa0), Operand::Memory(0x1), Operand::Memory(0xb0)]));
        assert_eq!(summed(&p, BiasUse::Add), None);
    }

    #[test]
    fn plain_activations_go_to_the_kernel_older_backends_serve() {
        let (_, p) = product(0);
        let d = KernelArg::U64(0xd0);
        let (name, args) = kernel_of(&elementwise(&p, EpilogueOp::Gelu, None), d, None);
        assert_eq!((name, args.len()), ("blas_activation", 8));
        assert!(matches!((args[0], args[7]), (KernelArg::U32(1), KernelArg::U32(0))), "GELU on f32");
        // f64 D, or an auxiliary matrix: blas_epilogue, D standing in for a missing one.
        let (_, double) = product(1);
        let (name, args) = kernel_of(&elementwise(&double, EpilogueOp::Relu, None), d, None);
        assert_eq!((name, args.len()), ("blas_epilogue", 11));
        assert!(matches!((args[7], args[8]), (KernelArg::U32(3), KernelArg::U64(0xd0))), "f64, no aux");
        let kept = elementwise(&p, EpilogueOp::ReluMask, Some((0x8000, 128, 768)));
        let (name, args) = kernel_of(&kept, d, Some(KernelArg::U64(0xa0)));
        assert_eq!(name, "blas_epilogue");
        let tail = (args[0], args[8], args[9], args[10]);
        assert!(matches!(tail, (KernelArg::U32(2), KernelArg::U64(0xa0), KernelArg::U64(128), KernelArg::U64(768))));
    }

    #[test]
    fn bias_gradients_need_their_pointer_and_f64_takes_every_epilogue() {
        assert_eq!(planned(256, |d| d.bias = 0).unwrap_err().code(), code::INVALID_VALUE);
        // Two batches' gradients: apart (20 rows of D; 6 columns for BGRADB), not overlapping.
        assert!(planned(256, |d| d.bias_batch_stride = 20).is_ok());
        assert_eq!(planned(256, |d| d.bias_batch_stride = 19).unwrap_err().code(), code::INVALID_VALUE);
        assert!(planned(512, |d| d.bias_batch_stride = 6).is_ok());
        assert_eq!(planned(152, |d| d.bias_batch_stride = 0).unwrap_err().code(), code::INVALID_VALUE);
        // A bias added may be shared by the batches.
        assert!(planned(4, |d| d.bias_batch_stride = 0).is_ok());
        let grad_b = planned(512, |d| d.bias_batch_stride = 6).unwrap();
        assert_eq!(grad_b, Planned { bias: Some((BiasUse::GradientOfB, 0x1000, 6)), op: None });
        let (d, p) = product(1);
        let desc = MatmulDesc {
            epilogue: 208,
            bias: 8,
            bias_batch_stride: 20,
            aux: 16,
            aux_ld: 24,
            aux_batch_stride: 160,
            ..matmul_desc(70, 1)
        };
        let planned = plan(&desc, &d, &p).unwrap();
        assert_eq!(planned.op, Some((EpilogueOp::GeluGradient, Some((16, 24, 160)))));
        assert_eq!(elementwise(&p, EpilogueOp::GeluGradient, Some((16, 24, 160))).element, EpilogueElement::Double);
        // D's negative batch offset: not served under an elementwise op over batches.
        let back = Layout { batch_offset: -200, ..d };
        assert_eq!(plan(&desc, &back, &p).unwrap_err().code(), code::NOT_SUPPORTED);
        assert!(plan(&desc, &back, &Product { batch: 1, ..p }).is_ok(), "one batch: the offset is not read");
    }
}

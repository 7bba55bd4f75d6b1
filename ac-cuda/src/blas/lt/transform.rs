//! cuBLASLt's matrix transform, `C = alpha op(A) + beta op(B)` over matrix layouts
//! (`cublasLtMatrixTransform`: scaling, adding and transposing, batched), and its descriptor
//! (`cublasLtMatrixTransformDesc*`: scale type, pointer mode, operations); and the emulation
//! descriptor (`cublasLtEmulationDesc*`, CUDA 13), kept and answered as a handle's emulation
//! settings are (`super::super::settings`).
//!
//! A transform is `geam`'s batch of gemms ([`super::super::extensions`]) on each batch of the
//! layouts, in place as `geam` allows (`C` being `A` or `B` with its layout). Served: column-major
//! matrices of the scale type (`f32`, `f64` and their complex types); a null `A` or `B` is a term
//! left out, as cuBLASLt's. Other orders and types (integer, half precision: layout changes for
//! tensor-core kernels) answer `CUBLAS_STATUS_NOT_SUPPORTED`.

use std::ffi::{c_int, c_void};

use super::{create, init, read, record_entry_points, unserved, Layout, Record};
use crate::blas::extensions::geam_calls;
use crate::blas::gemm::{self, Precision, Scalar};
use crate::blas::gemm_ex::{CUDA_C_32F, CUDA_C_64F, CUDA_R_32F, CUDA_R_64F};
use crate::blas::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// Bytes NVIDIA's header gives each descriptor.
const TRANSFORM_DESC_BYTES: usize = 8 * 8;
const EMULATION_DESC_BYTES: usize = 8 * 8;

/// `cublasLtMatrixTransformDesc_t`'s record.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TransformDesc {
    mark: u32,
    scale_type: i32,
    pointer_mode: i32,
    trans: [i32; 2],
}

/// `cublasLtEmulationDesc_t`'s record: kept and answered (the builtin kernels never emulate).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EmulationDesc {
    mark: u32,
    strategy: i32,
    special_values: i32,
    mantissa_control: i32,
    max_mantissa_bits: i32,
    mantissa_bit_offset: i32,
    mantissa_bit_count_pointer: u64,
}

const _: () = assert!(size_of::<TransformDesc>() <= TRANSFORM_DESC_BYTES);
const _: () = assert!(size_of::<EmulationDesc>() <= EMULATION_DESC_BYTES);

impl Record for TransformDesc {
    const MARK: u32 = u32::from_le_bytes(*b"acLt");
    const BYTES: usize = TRANSFORM_DESC_BYTES;
    const NAME: &'static str = "cublasLtMatrixTransformDesc";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => super::bytes_of(&mut self.scale_type),
            1 => super::bytes_of(&mut self.pointer_mode),
            2 => super::bytes_of(&mut self.trans[0]),
            3 => super::bytes_of(&mut self.trans[1]),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

impl Record for EmulationDesc {
    const MARK: u32 = u32::from_le_bytes(*b"acLe");
    const BYTES: usize = EMULATION_DESC_BYTES;
    const NAME: &'static str = "cublasLtEmulationDesc";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => super::bytes_of(&mut self.strategy),
            1 => super::bytes_of(&mut self.special_values),
            2 => super::bytes_of(&mut self.mantissa_control),
            3 => super::bytes_of(&mut self.max_mantissa_bits),
            4 => super::bytes_of(&mut self.mantissa_bit_offset),
            5 => super::bytes_of(&mut self.mantissa_bit_count_pointer),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

fn transform_desc(scale_type: c_int) -> TransformDesc {
    TransformDesc { scale_type, ..TransformDesc::default() }
}

fn emulation_desc() -> EmulationDesc {
    EmulationDesc { special_values: 0xFFFF, ..EmulationDesc::default() }
}

/// The precision a transform of scale type `t` computes in.
fn precision_of(t: c_int) -> CuResult<Precision> {
    Ok(match t {
        CUDA_R_32F => Precision::Single,
        CUDA_R_64F => Precision::Double,
        CUDA_C_32F => Precision::ComplexSingle,
        CUDA_C_64F => Precision::ComplexDouble,
        other => return Err(Error::said(code::NOT_SUPPORTED, format!("a matrix transform of scale type {other}"))),
    })
}

/// An input matrix of a transform: its address (0: none) and layout.
struct Input {
    at: u64,
    layout: Option<Layout>,
}

/// Checks a layout against the transform's: of its scale type, column-major, `rows x cols`
/// (as stored), `batches` batches or one shared by all.
fn check_layout(what: &str, layout: &Layout, scale_type: c_int, [rows, cols]: [u64; 2], batches: i32) -> CuResult<()> {
    if layout.data_type as c_int != scale_type || layout.order != 0 {
        let why = format!("{what}: type {} in order {} (scale type {scale_type})", layout.data_type, layout.order);
        return Err(Error::said(code::NOT_SUPPORTED, why));
    }
    let fits = layout.rows == rows && layout.cols == cols && layout.ld >= rows.max(1) as i64;
    if !fits || !(layout.batch_count == batches || layout.batch_count == 1) {
        let why = format!(
            "{what}: {} x {} (ld {}, {} batches) where {rows} x {cols} ({batches} batches) is transformed",
            layout.rows, layout.cols, layout.ld, layout.batch_count
        );
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    Ok(())
}

/// `C = alpha op(A) + beta op(B)` on `target`, batch by batch.
unsafe fn transform(
    target: Target,
    desc: TransformDesc,
    [alpha, beta]: [Scalar; 2],
    [a, b]: [Input; 2],
    (c, c_layout): (u64, Layout),
) -> CuResult<()> {
    let precision = precision_of(desc.scale_type)?;
    let (m, n) = (c_layout.rows, c_layout.cols);
    let batches = c_layout.batch_count.max(1);
    check_layout("C", &c_layout, desc.scale_type, [m, n], batches)?;
    let size =
        |v: u64| c_int::try_from(v).map_err(|_| Error::said(code::NOT_SUPPORTED, format!("{v} rows or columns")));
    let ([mi, ni], ldc) = ([size(m)?, size(n)?], size(c_layout.ld as u64)?);
    // A term left out (a null matrix) is read as a zero scale of C's own rows.
    let mut terms = Vec::new();
    for (what, x, trans, scale) in [("A", &a, desc.trans[0], alpha), ("B", &b, desc.trans[1], beta)] {
        let stored = if trans == 0 { [m, n] } else { [n, m] };
        match (x.at, &x.layout) {
            (0, _) => terms.push((Scalar::Value(0.0), (0, (if trans == 0 { mi } else { ni }).max(1)), 0)),
            (_, None) => return Err(Error::said(code::INVALID_VALUE, format!("{what} without a layout"))),
            (at, Some(layout)) => {
                check_layout(what, layout, desc.scale_type, stored, batches)?;
                let offset = if layout.batch_count == 1 { 0 } else { layout.batch_offset };
                terms.push((scale, (at, size(layout.ld as u64)?), offset));
            }
        }
    }
    let width = precision.bytes() as i64;
    // Batch `batch`'s matrix of one at `address`, `offset` elements apart (none: beyond memory).
    let at = |address: u64, offset: i64, batch: i64| -> CuResult<u64> {
        let bytes = offset.checked_mul(batch).and_then(|e| e.checked_mul(width));
        let address = bytes.and_then(|b| (address as i64).checked_add(b)).filter(|&a| a >= 0);
        address
            .map(|a| a as u64)
            .ok_or_else(|| Error::said(code::INVALID_VALUE, format!("batch {batch} beyond memory")))
    };
    for batch in 0..i64::from(batches) {
        let [(alpha, a, a_offset), (beta, b, b_offset)] = [terms[0], terms[1]];
        let a = (if a.0 == 0 { 0 } else { at(a.0, a_offset, batch)? }, a.1);
        let b = (if b.0 == 0 { 0 } else { at(b.0, b_offset, batch)? }, b.1);
        let c = (at(c, c_layout.batch_offset, batch)?, ldc);
        for call in geam_calls(precision, [desc.trans[0], desc.trans[1]], [mi, ni], alpha, a, beta, b, c)? {
            gemm::launch(target, call)?;
        }
    }
    Ok(())
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatrixTransform(
    h: usize,
    desc: *const c_void,
    alpha: *const c_void,
    a: u64,
    a_layout: *const c_void,
    beta: *const c_void,
    b: u64,
    b_layout: *const c_void,
    c: u64,
    c_layout: *const c_void,
    stream: usize,
) -> u32 {
    guard("cublasLtMatrixTransform", || {
        let desc: TransformDesc = read(desc)?;
        if !(0..=1).contains(&desc.pointer_mode) {
            return Err(Error::said(
                code::NOT_SUPPORTED,
                format!("pointer mode {} (vectors of alpha)", desc.pointer_mode),
            ));
        }
        let target = super::on_stream(handle(h)?.device, stream, desc.pointer_mode)?;
        let layout = |x: u64, l: *const c_void| -> CuResult<Input> {
            Ok(Input { at: x, layout: if l.is_null() { None } else { Some(read(l)?) } })
        };
        let scalars = [alpha, beta].map(|s| if s.is_null() { Scalar::Value(0.0) } else { Scalar::At(s) });
        transform(target, desc, scalars, [layout(a, a_layout)?, layout(b, b_layout)?], (c, read(c_layout)?))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatrixTransformDescCreate(out: *mut *mut c_void, scale_type: c_int) -> u32 {
    guard("cublasLtMatrixTransformDescCreate", || create(out, transform_desc(scale_type)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatrixTransformDescInit_internal(
    at: *mut c_void,
    size: usize,
    scale_type: c_int,
) -> u32 {
    guard("cublasLtMatrixTransformDescInit", || init(at, size, transform_desc(scale_type)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtEmulationDescCreate(out: *mut *mut c_void) -> u32 {
    guard("cublasLtEmulationDescCreate", || create(out, emulation_desc()))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtEmulationDescInit_internal(at: *mut c_void, size: usize) -> u32 {
    guard("cublasLtEmulationDescInit", || init(at, size, emulation_desc()))
}

record_entry_points!(
    TransformDesc,
    cublasLtMatrixTransformDescDestroy,
    cublasLtMatrixTransformDescSetAttribute,
    cublasLtMatrixTransformDescGetAttribute
);
record_entry_points!(
    EmulationDesc,
    cublasLtEmulationDescDestroy,
    cublasLtEmulationDescSetAttribute,
    cublasLtEmulationDescGetAttribute
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_checked_against_the_transform() {
        let layout = Layout { data_type: 0, rows: 3, cols: 4, ld: 5, batch_count: 2, ..Layout::default() };
        assert!(check_layout("A", &layout, CUDA_R_32F, [3, 4], 2).is_ok());
        assert!(check_layout("A", &Layout { batch_count: 1, ..layout }, CUDA_R_32F, [3, 4], 2).is_ok(), "shared");
        // The transposed shape, too few rows in ld, other batches: wrong.
        assert_eq!(check_layout("A", &layout, CUDA_R_32F, [4, 3], 2).unwrap_err().code(), code::INVALID_VALUE);
        assert_eq!(
            check_layout("A", &Layout { ld: 2, ..layout }, CUDA_R_32F, [3, 4], 2).unwrap_err().code(),
            code::INVALID_VALUE
        );
        assert_eq!(check_layout("A", &layout, CUDA_R_32F, [3, 4], 3).unwrap_err().code(), code::INVALID_VALUE);
        // Another type than the scale's, or row-major: not served.
        assert_eq!(check_layout("A", &layout, CUDA_R_64F, [3, 4], 2).unwrap_err().code(), code::NOT_SUPPORTED);
        assert_eq!(
            check_layout("A", &Layout { order: 1, ..layout }, CUDA_R_32F, [3, 4], 2).unwrap_err().code(),
            code::NOT_SUPPORTED
        );
        assert_eq!(precision_of(CUDA_C_64F).unwrap(), Precision::ComplexDouble);
        assert_eq!(precision_of(2).unwrap_err().code(), code::NOT_SUPPORTED);
    }
}

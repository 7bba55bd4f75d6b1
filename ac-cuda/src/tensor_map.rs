//! Tensor maps (`cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`,
//! `cuTensorMapReplaceAddress`): the descriptors a Hopper GPU's tensor memory accelerator (TMA)
//! copies boxes of a tensor by, which CUTLASS 3's kernels, Triton's and FlashAttention 3 take
//! as a `const __grid_constant__ CUtensorMap` parameter. Their 128 bytes are opaque, laid out
//! by the driver, so the remote driver encodes them (backend protocol 13) and the shim copies
//! them into the program's map; a launch then sends them as any parameter's bytes.
//!
//! An encoding depends on its arguments alone, and programs encode the same maps again and
//! again (PyTorch's fp8 GEMMs at every call): each is kept here by its arguments, and by its
//! bytes for `cuTensorMapReplaceAddress`, which encodes the map's tensor again at the new
//! address.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use ac_proto::backend::{DevicePtr, TensorMapLayout, TensorMapSpec, TENSOR_MAP_BYTES};

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::{guard, state};

/// An encoded tensor map (`CUtensorMap`'s bytes).
type Encoded = [u8; TENSOR_MAP_BYTES];

/// The most encodings kept by their arguments; past it they are forgotten (a program that
/// encodes that many different maps encodes each once).
const MOST_KEPT: usize = 16_384;
/// The most maps whose tensor is kept by their bytes, for `cuTensorMapReplaceAddress`: more
/// than [`MOST_KEPT`], so that a map encoded long ago may still have its address replaced
/// (past it, one encoded before the last 65,536 may not).
const MOST_DESCRIBED: usize = 65_536;

/// The maps this process had encoded.
#[derive(Default)]
struct Kept {
    /// Each map by its device and what was sent for it.
    by_spec: HashMap<(usize, TensorMapSpec), Encoded>,
    /// What each map describes, by its bytes (its tensor at the program's address).
    by_map: HashMap<Encoded, TensorMapSpec<u64>>,
}

impl Kept {
    /// Keeps `encoded`, which `sent` asked for and which describes `spec`.
    fn remember(&mut self, sent: (usize, TensorMapSpec), spec: TensorMapSpec<u64>, encoded: Encoded) {
        if self.by_spec.len() >= MOST_KEPT {
            self.by_spec.clear();
        }
        if self.by_map.len() >= MOST_DESCRIBED {
            self.by_map.clear();
        }
        self.by_spec.insert(sent, encoded);
        self.by_map.insert(encoded, spec);
    }
}

fn kept() -> std::sync::MutexGuard<'static, Kept> {
    static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
    KEPT.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn cuTensorMapEncodeTiled(
    map: *mut c_void,
    data_type: c_uint,
    rank: c_uint,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    box_dims: *const u32,
    element_strides: *const u32,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
) -> u32 {
    guard("cuTensorMapEncodeTiled", || {
        checked_map(map)?;
        let rank = checked_rank(rank, 1)?;
        let layout = TensorMapLayout::Tiled { box_dims: array(box_dims, rank)? };
        let modes = [interleave, swizzle, l2_promotion, oob_fill];
        let spec = spec_of(data_type, rank, address, dims, strides, element_strides, modes, layout)?;
        store(map, encode(spec)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuTensorMapEncodeIm2col(
    map: *mut c_void,
    data_type: c_uint,
    rank: c_uint,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower_corner: *const c_int,
    upper_corner: *const c_int,
    channels_per_pixel: c_uint,
    pixels_per_column: c_uint,
    element_strides: *const u32,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
) -> u32 {
    guard("cuTensorMapEncodeIm2col", || {
        checked_map(map)?;
        let rank = checked_rank(rank, 3)?;
        let layout = TensorMapLayout::Im2col {
            lower_corner: array(lower_corner, rank - 2)?,
            upper_corner: array(upper_corner, rank - 2)?,
            channels_per_pixel,
            pixels_per_column,
        };
        let modes = [interleave, swizzle, l2_promotion, oob_fill];
        let spec = spec_of(data_type, rank, address, dims, strides, element_strides, modes, layout)?;
        store(map, encode(spec)?)
    })
}

/// The map's tensor at `address` instead, encoded again: the map must be one this program had
/// encoded (its bytes are the driver's, opaque here).
#[no_mangle]
pub unsafe extern "C" fn cuTensorMapReplaceAddress(map: *mut c_void, address: *mut c_void) -> u32 {
    guard("cuTensorMapReplaceAddress", || {
        let encoded = load(map)?;
        let spec = kept().by_map.get(&encoded).cloned().ok_or_else(|| {
            Error::said(code::INVALID_VALUE, "the tensor map was not encoded by this program (cuTensorMapEncode*)")
        })?;
        store(map, encode(spec.at(address as u64))?)
    })
}

/// The remote driver's encoding of `spec` (kept: asked once).
fn encode(spec: TensorMapSpec<u64>) -> CuResult<Encoded> {
    let sent = sent_for(&spec)?;
    if let Some(encoded) = kept().by_spec.get(&sent) {
        return Ok(*encoded);
    }
    let shim = state::shim()?;
    let encoded = shim.block_on(shim.devices[sent.0].acc.encode_tensor_map(sent.1.clone()))?;
    kept().remember(sent, spec, encoded);
    Ok(encoded)
}

/// The device that encodes `spec` and what it is sent: the allocation of the program's that
/// holds the whole tensor and the offset into it (the backend checks it again), or for a null
/// address none, on the current device. The driver would take any address; a tensor past its
/// allocation or in host memory is refused here, by name, rather than faulting in a kernel.
fn sent_for(spec: &TensorMapSpec<u64>) -> CuResult<(usize, TensorMapSpec)> {
    if let Some(why) = spec.misshapen() {
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    if spec.address == 0 {
        return Ok((current_device()?, spec.clone().at(None)));
    }
    let extent = spec.extent().ok_or_else(|| {
        let why = format!("a tensor of element type {} and dimensions {:?} has no size", spec.data_type, spec.dims);
        Error::said(code::INVALID_VALUE, why)
    })?;
    let shim = state::shim()?;
    let device = shim.device_of(spec.address, current_device().ok()).ok_or_else(|| {
        let why = format!("the tensor at {:#x} is not device memory of this program", spec.address);
        Error::said(code::INVALID_VALUE, why)
    })?;
    let (allocation, offset) = shim.find(device, spec.address, extent)?;
    Ok((device, spec.clone().at(Some(DevicePtr { buffer: allocation.buffer.id(), offset }))))
}

/// A rank the driver takes for the layout: `least` (1 tiled, 3 im2col) to 5.
fn checked_rank(rank: c_uint, least: usize) -> CuResult<usize> {
    match rank as usize {
        rank if (least..=ac_proto::backend::tensor_map::MAX_TENSOR_RANK).contains(&rank) => Ok(rank),
        _ => Err(Error::said(code::INVALID_VALUE, format!("this tensor map has {least} to 5 dimensions, not {rank}"))),
    }
}

/// What an encoding is asked, read from the program's arrays: `rank` dimensions and element
/// strides, `rank - 1` strides.
#[allow(clippy::too_many_arguments)] // cuda.h's
unsafe fn spec_of(
    data_type: c_uint,
    rank: usize,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    element_strides: *const u32,
    [interleave, swizzle, l2_promotion, oob_fill]: [c_uint; 4],
    layout: TensorMapLayout,
) -> CuResult<TensorMapSpec<u64>> {
    Ok(TensorMapSpec {
        data_type,
        address: address as u64,
        dims: array(dims, rank)?,
        strides: array(strides, rank - 1)?,
        element_strides: array(element_strides, rank)?,
        interleave,
        swizzle,
        l2_promotion,
        oob_fill,
        layout,
    })
}

/// The `n` elements at `p` (null only when there are none).
unsafe fn array<T: Copy>(p: *const T, n: usize) -> CuResult<Vec<T>> {
    Ok(crate::graph::handles(p, n)?.to_vec())
}

/// The program's map at `map`, which must be 64-byte aligned as `CUtensorMap` is.
unsafe fn load(map: *const c_void) -> CuResult<Encoded> {
    checked_map(map)?;
    Ok(*map.cast::<Encoded>())
}

/// Writes `encoded` into the program's map at `map`.
unsafe fn store(map: *mut c_void, encoded: Encoded) -> CuResult<()> {
    checked_map(map)?;
    map.cast::<Encoded>().write(encoded);
    Ok(())
}

/// Refuses a map pointer the driver refuses: null, or not 64-byte aligned.
fn checked_map(map: *const c_void) -> CuResult<()> {
    if map.is_null() || !(map as usize).is_multiple_of(64) {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("a tensor map at {map:p}: CUtensorMap is 64-byte aligned"),
        ));
    }
    Ok(())
}

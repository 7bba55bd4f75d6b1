//! Tensor maps on the GPU's driver (`cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`: a
//! Hopper GPU's TMA descriptors, whose layout only the driver knows). The entry points are
//! looked up by name with their enumerations as the C ABI passes them, 32-bit integers, so that
//! a value this build does not know reaches the driver, which refuses it, rather than becoming
//! a Rust enum it is not.

use std::ffi::c_void;
use std::sync::OnceLock;

use ac_proto::backend::{ErrorKind, TensorMapLayout, TensorMapSpec, WireError, TENSOR_MAP_BYTES};
use cudarc::driver::sys::CUresult;

use super::driver;
use crate::device::DeviceResult;

/// `cuTensorMapEncodeTiled`.
type EncodeTiled = unsafe extern "C" fn(
    map: *mut c_void,
    data_type: u32,
    rank: u32,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    box_dims: *const u32,
    element_strides: *const u32,
    interleave: u32,
    swizzle: u32,
    l2_promotion: u32,
    oob_fill: u32,
) -> CUresult;

/// `cuTensorMapEncodeIm2col`.
type EncodeIm2col = unsafe extern "C" fn(
    map: *mut c_void,
    data_type: u32,
    rank: u32,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower_corner: *const i32,
    upper_corner: *const i32,
    channels_per_pixel: u32,
    pixels_per_column: u32,
    element_strides: *const u32,
    interleave: u32,
    swizzle: u32,
    l2_promotion: u32,
    oob_fill: u32,
) -> CUresult;

/// The driver's encoding of `spec`, whose arrays fit its rank (checked by the session layer:
/// the driver reads `rank` elements of each).
pub(super) fn encode(spec: &TensorMapSpec<u64>) -> DeviceResult<Vec<u8>> {
    if let Some(why) = spec.misshapen() {
        return Err(WireError::new(ErrorKind::InvalidArgument, why));
    }
    // 64-byte aligned, as CUtensorMap is.
    #[repr(C, align(64))]
    struct Map([u8; TENSOR_MAP_BYTES]);
    let mut map = Map([0; TENSOR_MAP_BYTES]);
    let out = map.0.as_mut_ptr().cast::<c_void>();
    let s = spec;
    let (rank, address) = (s.dims.len() as u32, s.address as *mut c_void);
    let (dims, strides, element_strides) = (s.dims.as_ptr(), s.strides.as_ptr(), s.element_strides.as_ptr());
    let (call, code) = match &s.layout {
        TensorMapLayout::Tiled { box_dims } => {
            static ENCODE: OnceLock<DeviceResult<EncodeTiled>> = OnceLock::new();
            let encode = ENCODE.get_or_init(|| driver::entry_point(b"cuTensorMapEncodeTiled\0")).clone()?;
            // SAFETY: every array holds as many elements as the driver reads (misshapen above);
            // the map is 128 writable bytes aligned as CUtensorMap.
            let code = unsafe {
                encode(
                    out,
                    s.data_type,
                    rank,
                    address,
                    dims,
                    strides,
                    box_dims.as_ptr(),
                    element_strides,
                    s.interleave,
                    s.swizzle,
                    s.l2_promotion,
                    s.oob_fill,
                )
            };
            ("cuTensorMapEncodeTiled", code)
        }
        TensorMapLayout::Im2col { lower_corner, upper_corner, channels_per_pixel, pixels_per_column } => {
            static ENCODE: OnceLock<DeviceResult<EncodeIm2col>> = OnceLock::new();
            let encode = ENCODE.get_or_init(|| driver::entry_point(b"cuTensorMapEncodeIm2col\0")).clone()?;
            // SAFETY: as above.
            let code = unsafe {
                encode(
                    out,
                    s.data_type,
                    rank,
                    address,
                    dims,
                    strides,
                    lower_corner.as_ptr(),
                    upper_corner.as_ptr(),
                    *channels_per_pixel,
                    *pixels_per_column,
                    element_strides,
                    s.interleave,
                    s.swizzle,
                    s.l2_promotion,
                    s.oob_fill,
                )
            };
            ("cuTensorMapEncodeIm2col", code)
        }
    };
    driver::check(call, code)?;
    Ok(map.0.to_vec())
}

//! CUDA arrays, texture objects and surface objects on the GPU's driver (protocol 16). The
//! session layer has checked every region and resource against the session's own arrays and
//! memory; here the driver is called. The descriptors are laid out as `cuda.h` lays them out,
//! with their enumerations as 32-bit integers (as the C ABI passes them), so that a format this
//! build does not know reaches the driver, which refuses it, rather than becoming a Rust enum
//! it is not. What destroys runs on the janitor thread after the context's queued work, as
//! frees do: a kernel queued before may still read the array.

use std::ffi::c_void;
use std::sync::OnceLock;

use ac_proto::backend::{ArrayCopy, ArraySpec, ErrorKind, Sampler, TextureResource, WireError};
use cudarc::driver::sys::{self, CUresult};

use super::context::CudaContext;
use super::driver::{self, bind};
use crate::device::DeviceResult;

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
struct Array3DDescriptor {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

/// `CUDA_MEMCPY3D`, between device memory and an array.
#[repr(C)]
struct Memcpy3D {
    src_x: usize,
    src_y: usize,
    src_z: usize,
    src_lod: usize,
    src_type: u32,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    reserved0: *mut c_void,
    src_pitch: usize,
    src_height: usize,
    dst_x: usize,
    dst_y: usize,
    dst_z: usize,
    dst_lod: usize,
    dst_type: u32,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    reserved1: *mut c_void,
    dst_pitch: usize,
    dst_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

/// `CUDA_RESOURCE_DESC`: the union as 16 8-byte words.
#[repr(C)]
struct ResourceDesc {
    kind: u32,
    res: [u64; 16],
    flags: u32,
}

/// `CUDA_TEXTURE_DESC`.
#[repr(C)]
struct TextureDesc {
    address_modes: [u32; 3],
    filter_mode: u32,
    flags: u32,
    max_anisotropy: u32,
    mipmap_filter_mode: u32,
    mipmap_level_bias: f32,
    min_mipmap_level_clamp: f32,
    max_mipmap_level_clamp: f32,
    border_color: [f32; 4],
    reserved: [i32; 12],
}

type ArrayCreate = unsafe extern "C" fn(*mut *mut c_void, *const Array3DDescriptor) -> CUresult;
type Copy3D = unsafe extern "C" fn(*const Memcpy3D, sys::CUstream) -> CUresult;
type TexObjectCreate =
    unsafe extern "C" fn(*mut u64, *const ResourceDesc, *const TextureDesc, *const c_void) -> CUresult;
type SurfObjectCreate = unsafe extern "C" fn(*mut u64, *const ResourceDesc) -> CUresult;

/// The most bytes of the zeroed buffer a new array is cleared from.
const ZEROS: u64 = 1 << 20;

/// `CUmemorytype`'s device and array.
const DEVICE: u32 = 2;
const ARRAY: u32 = 3;

impl CudaContext {
    /// `cuArray3DCreate`, then zeroed: a new array holds whatever the GPU's memory held last,
    /// possibly another session's data.
    pub(super) fn create_array_on_gpu(&self, spec: &ArraySpec) -> DeviceResult<u64> {
        static CREATE: OnceLock<DeviceResult<ArrayCreate>> = OnceLock::new();
        let create = CREATE.get_or_init(|| driver::entry_point(b"cuArray3DCreate_v2\0")).clone()?;
        let row = spec.row_bytes().ok_or_else(|| WireError::new(ErrorKind::InvalidArgument, format!("{spec:?}")))?;
        self.enter()?;
        let descriptor = Array3DDescriptor {
            width: spec.width as usize,
            height: spec.height as usize,
            depth: spec.depth as usize,
            format: spec.format,
            channels: spec.channels,
            flags: spec.flags,
        };
        let mut array = std::ptr::null_mut();
        // SAFETY: valid out-pointer and descriptor, laid out as cuda.h's.
        self.check("cuArray3DCreate", unsafe { create(&mut array, &descriptor) })?;
        if let Err(e) = self.zero_array(array as u64, row, spec.rows_and_slices()) {
            // SAFETY: created just above, known to nobody else, nothing queued on it any more.
            unsafe { sys::cuArrayDestroy(array.cast()) };
            return Err(e);
        }
        Ok(array as u64)
    }

    /// Zeroes `array` (rows of `row` bytes; rows and slices) from a zeroed buffer of at most
    /// [`ZEROS`] bytes (one row, if a row is larger), a band of rows at a time.
    fn zero_array(&self, array: u64, row: u64, [rows, slices]: [u64; 2]) -> DeviceResult<()> {
        let band = (ZEROS / row).clamp(1, rows);
        let mut zeros = 0;
        // SAFETY: valid out-pointer; the context is current.
        self.check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut zeros, (row * band) as usize) })?;
        let null = std::ptr::null_mut();
        let copied = self.zero(zeros, row * band).and_then(|()| {
            let bands = (0..slices).flat_map(|z| (0..rows).step_by(band as usize).map(move |y| (y, z)));
            bands.into_iter().try_for_each(|(y, z)| {
                let extent = [row, band.min(rows - y), 1];
                let copy = ArrayCopy {
                    array,
                    origin: [0, y, z],
                    extent,
                    linear: zeros,
                    pitch: row,
                    slice_rows: band,
                    to_array: true,
                };
                self.copy_array_on(&copy, null)
            })
        });
        // Whatever was queued has run before the buffer goes (SAFETY: the null stream of the
        // current context).
        let synchronized =
            self.check("cuStreamSynchronize", driver::blocking(|| unsafe { sys::cuStreamSynchronize(null) }));
        // SAFETY: allocated above, used by nothing queued any more.
        unsafe { sys::cuMemFree_v2(zeros) };
        copied.and(synchronized)
    }

    /// `cuMemcpy3DAsync` of `copy` on `stream`.
    pub(super) fn copy_array_on(&self, copy: &ArrayCopy<u64, u64>, stream: sys::CUstream) -> DeviceResult<()> {
        static COPY: OnceLock<DeviceResult<Copy3D>> = OnceLock::new();
        let copy_3d = COPY.get_or_init(|| driver::entry_point(b"cuMemcpy3DAsync_v2\0")).clone()?;
        let (array, linear) = (copy.array as *mut c_void, copy.linear);
        let [x, y, z] = copy.origin.map(|v| v as usize);
        let [width, height, depth] = copy.extent.map(|v| v as usize);
        let (pitch, rows) = (copy.pitch as usize, copy.slice_rows as usize);
        let null = std::ptr::null_mut();
        let mut params = Memcpy3D {
            src_x: 0,
            src_y: 0,
            src_z: 0,
            src_lod: 0,
            src_type: DEVICE,
            src_host: null,
            src_device: linear,
            src_array: null,
            reserved0: null,
            src_pitch: pitch,
            src_height: rows,
            dst_x: x,
            dst_y: y,
            dst_z: z,
            dst_lod: 0,
            dst_type: ARRAY,
            dst_host: null,
            dst_device: 0,
            dst_array: array,
            reserved1: null,
            dst_pitch: 0,
            dst_height: 0,
            width,
            height,
            depth,
        };
        if !copy.to_array {
            params = Memcpy3D {
                src_x: x,
                src_y: y,
                src_z: z,
                src_type: ARRAY,
                src_device: 0,
                src_array: array,
                src_pitch: 0,
                src_height: 0,
                dst_x: 0,
                dst_y: 0,
                dst_z: 0,
                dst_type: DEVICE,
                dst_device: linear,
                dst_array: null,
                dst_pitch: pitch,
                dst_height: rows,
                ..params
            };
        }
        // SAFETY: the region lies inside the array and the linear memory (checked by the
        // session layer); the descriptor is laid out as cuda.h's.
        self.check("cuMemcpy3DAsync", unsafe { copy_3d(&params, stream) })
    }

    /// `cuTexObjectCreate` over `resource` with `sampler`, or with none `cuSurfObjectCreate`.
    pub(super) fn create_object_on_gpu(
        &self,
        resource: &TextureResource<u64, u64>,
        sampler: Option<&Sampler>,
    ) -> DeviceResult<u64> {
        let desc = resource_desc(resource);
        self.enter()?;
        let mut object = 0;
        let Some(s) = sampler else {
            static CREATE: OnceLock<DeviceResult<SurfObjectCreate>> = OnceLock::new();
            let create = CREATE.get_or_init(|| driver::entry_point(b"cuSurfObjectCreate\0")).clone()?;
            // SAFETY: valid out-pointer and descriptor.
            self.check("cuSurfObjectCreate", unsafe { create(&mut object, &desc) })?;
            return Ok(object);
        };
        static CREATE: OnceLock<DeviceResult<TexObjectCreate>> = OnceLock::new();
        let create = CREATE.get_or_init(|| driver::entry_point(b"cuTexObjectCreate\0")).clone()?;
        let texture = TextureDesc {
            address_modes: s.address_modes,
            filter_mode: s.filter_mode,
            flags: s.flags,
            max_anisotropy: s.max_anisotropy,
            mipmap_filter_mode: s.mipmap_filter_mode,
            mipmap_level_bias: s.mipmap_level_bias,
            min_mipmap_level_clamp: s.min_mipmap_level_clamp,
            max_mipmap_level_clamp: s.max_mipmap_level_clamp,
            border_color: s.border_color,
            reserved: [0; 12],
        };
        // SAFETY: valid out-pointer and descriptors; no resource view.
        self.check("cuTexObjectCreate", unsafe { create(&mut object, &desc, &texture, std::ptr::null()) })?;
        Ok(object)
    }

    /// `cuArrayDestroy`, after the context's queued work.
    pub(super) fn destroy_array_later(&self, array: u64) {
        let raw = self.raw;
        self.gpu.janitor.defer(move || {
            if bind(raw).is_ok() {
                // SAFETY: the session's context, current on this thread.
                unsafe { sys::cuCtxSynchronize() };
                // SAFETY: an array the session layer has forgotten: destroyed once.
                unsafe { sys::cuArrayDestroy(array as sys::CUarray) };
            }
        });
    }

    /// `cuTexObjectDestroy` or `cuSurfObjectDestroy`, after the context's queued work.
    pub(super) fn destroy_object_later(&self, object: u64, surface: bool) {
        let raw = self.raw;
        self.gpu.janitor.defer(move || {
            if bind(raw).is_ok() {
                // SAFETY: the session's context, current on this thread; an object the session
                // layer has forgotten: destroyed once.
                unsafe {
                    sys::cuCtxSynchronize();
                    if surface {
                        sys::cuSurfObjectDestroy(object);
                    } else {
                        sys::cuTexObjectDestroy(object);
                    }
                }
            }
        });
    }
}

/// `resource` as `cuda.h` lays it out: the union's words after the kind.
fn resource_desc(resource: &TextureResource<u64, u64>) -> ResourceDesc {
    let mut res = [0u64; 16];
    let kind = match *resource {
        TextureResource::Array(array) => {
            res[0] = array;
            0
        }
        TextureResource::Linear { address, format, channels, bytes } => {
            res[..3].copy_from_slice(&[address, u64::from(format) | u64::from(channels) << 32, bytes]);
            2
        }
        TextureResource::Pitch2D { address, format, channels, width, height, pitch } => {
            res[..5].copy_from_slice(&[address, u64::from(format) | u64::from(channels) << 32, width, height, pitch]);
            3
        }
    };
    ResourceDesc { kind, res, flags: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_laid_out_as_cuda_h_lays_them_out() {
        assert_eq!(std::mem::size_of::<Array3DDescriptor>(), 40);
        assert_eq!(std::mem::size_of::<Memcpy3D>(), 200);
        assert_eq!(std::mem::size_of::<ResourceDesc>(), 144);
        assert_eq!(std::mem::offset_of!(ResourceDesc, res), 8);
        assert_eq!(std::mem::offset_of!(ResourceDesc, flags), 136);
        assert_eq!(std::mem::size_of::<TextureDesc>(), 104);
        assert_eq!(std::mem::size_of::<Memcpy3D>(), std::mem::size_of::<sys::CUDA_MEMCPY3D>());
        assert_eq!(std::mem::size_of::<ResourceDesc>(), std::mem::size_of::<sys::CUDA_RESOURCE_DESC>());
        assert_eq!(std::mem::size_of::<TextureDesc>(), std::mem::size_of::<sys::CUDA_TEXTURE_DESC>());
    }

    #[test]
    fn a_linear_resource_puts_format_and_channels_in_one_word() {
        let desc = resource_desc(&TextureResource::Linear { address: 0x1000, format: 0x20, channels: 2, bytes: 64 });
        assert_eq!((desc.kind, desc.res[0], desc.res[1], desc.res[2]), (2, 0x1000, 0x20 | 2 << 32, 64));
    }
}
